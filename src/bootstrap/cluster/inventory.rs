//! The inventory: a ConfigMap listing every object jointer applied to the cluster, so an
//! object removed from the templates (or the bundle) is found and deleted on the next apply,
//! even when its labels were edited away.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::{json, Value};

use super::controller;
use super::crds;
use super::kube_objects::{self, ownership_labels, with_labels, ObjectRef};
use super::nodes;
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
use crate::input::config::Install;

pub const NAME: &str = "jointer-inventory";

fn configmap(ctx: &Context, refs: &BTreeSet<ObjectRef>) -> Result<Value> {
    let list: Vec<&ObjectRef> = refs.iter().collect();
    Ok(with_labels(
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": NAME, "namespace": ctx.config.controller.namespace },
            "data": { "objects": serde_json::to_string_pretty(&list)? },
        }),
        &ownership_labels(&ctx.cluster.name),
    ))
}

/// Everything the config wants in the cluster.
fn desired(ctx: &Context) -> Result<BTreeSet<ObjectRef>> {
    let mut refs = BTreeSet::new();
    for crd in crds::desired(ctx)? {
        refs.insert(ObjectRef::of(&crd)?);
    }
    if ctx.config.controller.install == Install::Bundled {
        for object in controller::bundle::refs(ctx)? {
            refs.insert(ObjectRef::of(&object)?);
        }
    }
    refs.extend(nodes::desired_refs(&ctx.node_objects)?);
    Ok(refs)
}

async fn stored(ctx: &Context) -> Result<Option<BTreeSet<ObjectRef>>> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.kube.clone(), &ctx.config.controller.namespace);
    let Some(cm) = api.get_opt(NAME).await.context("reading the inventory")? else {
        return Ok(None);
    };
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("objects"))
        .cloned()
        .unwrap_or_else(|| "[]".into());
    let refs: Vec<ObjectRef> = serde_json::from_str(&text).with_context(|| {
        format!(
            "configmap {}/{NAME}: data.objects is not jointer's inventory",
            ctx.config.controller.namespace
        )
    })?;
    Ok(Some(refs.into_iter().collect()))
}

/// The inventory as stored, and which of the objects that may be stale are still in the
/// cluster and jointer's.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// `None`: there is no inventory ConfigMap.
    pub stored: Option<BTreeSet<ObjectRef>>,
    /// Of the objects applied before (or labelled as jointer's) and wanted no more, those
    /// that are still there and jointer's, NodePools first, then EC2NodeClasses.
    pub stale: Vec<ObjectRef>,
}

async fn observe(ctx: &Context, desired: &BTreeSet<ObjectRef>, goal: Goal) -> Result<Observed> {
    let stored = stored(ctx).await?;
    if goal == Goal::Remove {
        return Ok(Observed {
            stored,
            stale: Vec::new(),
        });
    }
    // Applied before and wanted no more: from the inventory, and any labelled pool or class.
    let mut candidates: BTreeSet<ObjectRef> = stored
        .clone()
        .unwrap_or_default()
        .difference(desired)
        .cloned()
        .collect();
    for r in nodes::labelled(ctx).await? {
        if !desired.contains(&r) {
            candidates.insert(r);
        }
    }
    // Pools first: a class is deleted only after the pools using it.
    let mut candidates: Vec<ObjectRef> = candidates.into_iter().collect();
    candidates.sort_by_key(|r| (r.kind != "NodePool", r.kind != "EC2NodeClass"));
    let mut stale = Vec::new();
    for r in candidates {
        let Some(api) = kube_objects::api_for(ctx, &r).await? else {
            continue;
        };
        let Some(live) = kube_objects::get(&api, &r).await? else {
            continue;
        };
        if kube_objects::is_ours(&live) {
            stale.push(r);
        }
    }
    Ok(Observed { stored, stale })
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    // Teardown needs no desired state (and renders no templates).
    let desired = match goal {
        Goal::Converge => desired(ctx)?,
        Goal::Remove => BTreeSet::new(),
    };
    let observed = observe(ctx, &desired, goal).await?;
    let inventory = configmap(ctx, &desired)?;
    diff(&desired, inventory, &observed, goal)
}

/// The pure diff: stale objects go, and the inventory is written when it differs from what
/// the config wants (`inventory` is that ConfigMap); on teardown only the inventory goes.
pub fn diff(
    desired: &BTreeSet<ObjectRef>,
    inventory: Value,
    observed: &Observed,
    goal: Goal,
) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::Inventory);
    let inventory_ref = ObjectRef::of(&inventory)?;
    let resource = inventory_ref.label();
    if goal == Goal::Remove {
        if observed.stored.is_some() {
            plan.changes.push(Change::new(
                Op::Delete,
                resource,
                kube_objects::Action::Delete {
                    object: inventory_ref,
                },
            ));
        }
        return Ok(plan);
    }
    for r in &observed.stale {
        if r.kind == "NodePool" || r.kind == "EC2NodeClass" {
            plan.changes
                .push(nodes::delete_change(r, "no longer in the templates"));
        } else {
            plan.changes.push(
                Change::new(
                    Op::Delete,
                    r.label(),
                    kube_objects::Action::Delete { object: r.clone() },
                )
                .detail("no longer in the bundle"),
            );
        }
    }
    if observed.stored.as_ref() != Some(desired) {
        let op = if observed.stored.is_some() {
            Op::Update
        } else {
            Op::Create
        };
        plan.changes.push(
            Change::new(
                op,
                resource,
                kube_objects::Action::Apply {
                    object: inventory,
                    reset: Vec::new(),
                },
            )
            .field("data.objects")
            .detail(format!("{} object(s)", desired.len())),
        );
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(kind: &str, name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "karpenter.sh/v1".into(),
            kind: kind.into(),
            namespace: None,
            name: name.into(),
        }
    }

    fn inventory() -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": "kube-system"}})
    }

    fn lines(plan: &StepPlan) -> Vec<String> {
        plan.changes.iter().map(Change::to_string).collect()
    }

    #[test]
    fn an_inventory_that_lists_what_is_wanted_is_in_sync() {
        let desired = BTreeSet::from([r("NodePool", "general")]);
        let observed = Observed {
            stored: Some(desired.clone()),
            stale: vec![],
        };
        let plan = diff(&desired, inventory(), &observed, Goal::Converge).unwrap();
        assert!(plan.changes.is_empty(), "{:?}", lines(&plan));
    }

    #[test]
    fn a_missing_inventory_is_created_and_a_changed_one_updated() {
        let desired = BTreeSet::from([r("NodePool", "general")]);
        let plan = diff(&desired, inventory(), &Observed::default(), Goal::Converge).unwrap();
        assert_eq!(
            lines(&plan),
            vec![format!(
                "+ ConfigMap kube-system/{NAME}  data.objects: 1 object(s)"
            )]
        );
        let observed = Observed {
            stored: Some(BTreeSet::new()),
            stale: vec![],
        };
        let plan = diff(&desired, inventory(), &observed, Goal::Converge).unwrap();
        assert_eq!(plan.changes[0].op, Op::Update);
    }

    #[test]
    fn stale_objects_go_pools_with_their_nodes_and_the_rest_as_no_longer_in_the_bundle() {
        let desired = BTreeSet::new();
        let observed = Observed {
            stored: Some(desired.clone()),
            stale: vec![r("NodePool", "old"), r("ClusterRole", "extra")],
        };
        let plan = diff(&desired, inventory(), &observed, Goal::Converge).unwrap();
        assert_eq!(
            lines(&plan),
            vec![
                "- NodePool old  (no longer in the templates; its nodes are drained and terminated)",
                "- ClusterRole extra  (no longer in the bundle)",
            ]
        );
    }

    #[test]
    fn teardown_removes_only_the_inventory() {
        let observed = Observed {
            stored: Some(BTreeSet::from([r("NodePool", "general")])),
            stale: vec![],
        };
        let plan = diff(&BTreeSet::new(), inventory(), &observed, Goal::Remove).unwrap();
        assert_eq!(
            lines(&plan),
            vec![format!("- ConfigMap kube-system/{NAME}")]
        );
        let plan = diff(
            &BTreeSet::new(),
            inventory(),
            &Observed::default(),
            Goal::Remove,
        )
        .unwrap();
        assert!(plan.changes.is_empty());
    }
}
