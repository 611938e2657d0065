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
        for object in controller::bundle::desired(ctx)? {
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

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::Inventory);
    let stored = stored(ctx).await?;
    let resource = format!("ConfigMap {}/{NAME}", ctx.config.controller.namespace);
    let inventory_ref = ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some(ctx.config.controller.namespace.clone()),
        name: NAME.into(),
    };
    if goal == Goal::Remove {
        if stored.is_some() {
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
    let desired = desired(ctx)?;
    // Applied before and wanted no more: from the inventory, and any labelled pool or class.
    let mut stale: BTreeSet<ObjectRef> = stored
        .clone()
        .unwrap_or_default()
        .difference(&desired)
        .cloned()
        .collect();
    for r in nodes::labelled(ctx).await? {
        if !desired.contains(&r) {
            stale.insert(r);
        }
    }
    // Pools first: a class is deleted only after the pools using it.
    let mut stale: Vec<ObjectRef> = stale.into_iter().collect();
    stale.sort_by_key(|r| (r.kind != "NodePool", r.kind != "EC2NodeClass"));
    for r in stale {
        let Some(api) = kube_objects::api_for(ctx, &r).await? else {
            continue;
        };
        let Some(live) = kube_objects::get(&api, &r).await? else {
            continue;
        };
        if !kube_objects::is_ours(&live) {
            continue;
        }
        if r.kind == "NodePool" || r.kind == "EC2NodeClass" {
            plan.changes
                .push(nodes::delete_change(&r, "no longer in the templates"));
        } else {
            plan.changes.push(
                Change::new(
                    Op::Delete,
                    r.label(),
                    kube_objects::Action::Delete { object: r },
                )
                .detail("no longer in the bundle"),
            );
        }
    }
    if stored.as_ref() != Some(&desired) {
        let op = if stored.is_some() {
            Op::Update
        } else {
            Op::Create
        };
        plan.changes.push(
            Change::new(
                op,
                resource,
                kube_objects::Action::Apply {
                    object: configmap(ctx, &desired)?,
                },
            )
            .field("data.objects")
            .detail(format!("{} object(s)", desired.len())),
        );
    }
    Ok(plan)
}
