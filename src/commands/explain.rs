//! `jointer explain pod NAMESPACE/NAME` (why a pod is pending) and `jointer explain node NAME`
//! (why a node is kept rather than consolidated), from the same scheduling and disruption core
//! and the same cluster objects the controller decides with.

use anyhow::{bail, Context as _, Result};
use jointer_controller::api::pod::Pod;
use jointer_controller::core::disruption::{decide, Inputs as DecideInputs};
use jointer_controller::core::pods::is_provisionable;
use jointer_controller::core::scheduling::{solve, PodKey, SchedPod};
use jointer_controller::core::state::{self, Snapshot};
use kube::api::Api;
use kube::ResourceExt;
use serde::Serialize;

use crate::bootstrap::Context;
use crate::cluster::{self, TypesOfClass};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// The pod (`NAMESPACE/NAME`) or node explained.
    #[serde(rename = "object")]
    pub pod: String,
    pub verdict: Verdict,
    pub message: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<PoolReason>,
}

/// The answer in one word; `unschedulable` is the one `explain` exits 3 for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Pod: already on a node.
    #[serde(rename = "bound")]
    Bound,
    /// Pod: fits on a node or a launching NodeClaim as they are.
    #[serde(rename = "existing-capacity")]
    ExistingCapacity,
    /// Pod: a new node from some NodePool would take it.
    #[serde(rename = "new-nodeclaim")]
    NewNodeClaim,
    /// Pod: no NodePool can launch a node for it.
    #[serde(rename = "unschedulable")]
    Unschedulable,
    /// Node: the disruption core would disrupt it now.
    #[serde(rename = "disruptable")]
    Disruptable,
    /// Node: kept, with the reasons.
    #[serde(rename = "kept")]
    Kept,
    /// Node: not the controller's (no NodeClaim).
    #[serde(rename = "unmanaged")]
    Unmanaged,
}

impl Explanation {
    /// 3 when no pool can help the pod, so scripts can tell "wait" from "fix something".
    pub fn exit_code(&self) -> std::process::ExitCode {
        if self.verdict == Verdict::Unschedulable {
            std::process::ExitCode::from(3)
        } else {
            std::process::ExitCode::SUCCESS
        }
    }
}

#[derive(Debug, Serialize)]
pub struct PoolReason {
    pub nodepool: String,
    pub reason: String,
}

/// The live objects and instance types, read the way the controller reads them.
async fn cluster_state(ctx: &Context) -> Result<(Snapshot, TypesOfClass)> {
    cluster::cluster_state(&ctx.kube, ctx.eks()).await
}

/// Why a node is kept (or that it would be disrupted now), from the disruption core.
pub async fn node(ctx: &Context, node: &str) -> Result<Explanation> {
    let (snap, types_of_class) = cluster_state(ctx).await?;
    let Some(claim) = snap.nodeclaims.iter().find(|c| {
        c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) || c.name_any() == node
    }) else {
        if snap.nodes.iter().any(|n| n.name_any() == node) {
            return Ok(Explanation {
                pod: node.to_string(),
                verdict: Verdict::Unmanaged,
                message: format!(
                    "node {node} has no NodeClaim: jointer-controller does not disrupt it"
                ),
                reasons: vec![],
            });
        }
        bail!("no node or NodeClaim named {node}");
    };
    let name = claim.name_any();
    let settings = cluster::controller_settings(&ctx.kube, &ctx.config.controller).await;
    let (types_of_pool, _) = state::types_of_pools(&snap, &types_of_class);
    let decision = decide(&DecideInputs {
        snapshot: &snap,
        types_of_class: &types_of_class,
        types_of_pool: &types_of_pool,
        now: k8s_openapi::jiff::Timestamp::now(),
        settle: settings.settle,
        spot_to_spot: settings.spot_to_spot,
        single_node_from: None,
        // Nominations live in the running controller's memory only: none are seen from here.
        nominated: &Default::default(),
        policies: settings.policies,
        timeouts: settings.timeouts,
    });
    if let Some(c) = decision
        .command
        .as_ref()
        .filter(|c| c.candidates.contains(&name))
    {
        let how = if !c.replacements.is_empty() {
            "replaced (the new node launches first)"
        } else {
            "deleted, its pods fit elsewhere"
        };
        return Ok(Explanation {
            pod: node.to_string(),
            verdict: Verdict::Disruptable,
            message: match &c.why {
                // A repair saves nothing: say which condition it answers.
                Some(why) => format!("{} now (NodeClaim {name}): {why}; {how}", c.method.as_str()),
                None => format!(
                    "{} now (NodeClaim {name}): {how}, saving ${:.4}/h",
                    c.method.as_str(),
                    c.saving
                ),
            },
            reasons: vec![],
        });
    }
    let reasons: Vec<&str> = decision
        .kept
        .iter()
        .filter(|(c, _)| c == &name)
        .map(|(_, why)| why.as_str())
        .collect();
    let message = if !reasons.is_empty() {
        format!("kept: {}", reasons.join("; "))
    } else if decision.command.is_some() {
        "another disruption goes first this round".to_string()
    } else {
        "not a candidate: not initialized yet, being deleted, or its NodePool is gone".to_string()
    };
    Ok(Explanation {
        pod: node.to_string(),
        verdict: Verdict::Kept,
        message,
        reasons: vec![],
    })
}

/// Why a pod is pending: bound, fits existing capacity, a new NodeClaim, or no pool can help.
pub async fn pod(ctx: &Context, target: &str) -> Result<Explanation> {
    let Some((namespace, name)) = target
        .split_once('/')
        .filter(|(n, p)| !n.is_empty() && !p.is_empty())
    else {
        bail!("`{target}` is not NAMESPACE/NAME (e.g. `default/web-5d9c7-abcde`)");
    };
    let pods: Api<Pod> = Api::namespaced(ctx.kube.clone(), namespace);
    let Some(pod) = pods.get_opt(name).await.context("reading the pod")? else {
        bail!("pod {name} not found in namespace {namespace}");
    };
    let key = PodKey {
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    let shown = format!("{namespace}/{name}");
    if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        return Ok(Explanation {
            pod: shown,
            verdict: Verdict::Bound,
            message: format!("bound to node {node}: nothing to provision"),
            reasons: vec![],
        });
    }
    let (snap, types_of_class) = cluster_state(ctx).await?;
    Ok(pending(&pod, key, shown, &snap, &types_of_class))
}

/// Why an unbound pod waits, from a solve over the objects the controller decides with.
fn pending(
    pod: &Pod,
    key: PodKey,
    shown: String,
    snap: &Snapshot,
    types_of_class: &TypesOfClass,
) -> Explanation {
    let mut built = state::build(snap, types_of_class);
    // A pod kube-scheduler has not given up on yet is explained all the same.
    let waiting_on_scheduler = !is_provisionable(pod);
    if waiting_on_scheduler {
        built.problem.pods.push(SchedPod::from_k8s(pod, None));
    }
    let plan = solve(&built.problem);
    let skipped = || {
        built
            .skipped
            .iter()
            .map(|s| PoolReason {
                nodepool: s.pool.clone(),
                reason: s.why.clone(),
            })
            .collect::<Vec<_>>()
    };
    let note = if waiting_on_scheduler {
        " (kube-scheduler has not marked it unschedulable yet, so the controller is not acting on it)"
    } else {
        ""
    };
    if let Some(node) = plan
        .existing
        .iter()
        .find(|(_, pods)| pods.contains(&key))
        .map(|(n, _)| n)
    {
        let in_flight = snap.nodeclaims.iter().any(|c| &c.name_any() == node);
        let message = if in_flight {
            format!("fits on NodeClaim {node}, which is launching: the pod runs once its node is Ready{note}")
        } else {
            format!("fits on node {node} as it is now: kube-scheduler should place it{note}")
        };
        return Explanation {
            pod: shown,
            verdict: Verdict::ExistingCapacity,
            message,
            reasons: vec![],
        };
    }
    if let Some(planned) = plan.nodeclaims.iter().find(|n| n.pods.contains(&key)) {
        let choice = planned
            .launch_choice()
            .map(|c| {
                format!(
                    "{} in {} ({}, ${:.4}/h)",
                    c.instance_type.name,
                    c.offering.zone,
                    c.offering.capacity_type,
                    c.offering.price
                )
            })
            .unwrap_or_default();
        return Explanation {
            pod: shown,
            verdict: Verdict::NewNodeClaim,
            message: format!(
                "a new node from NodePool {} would take it, cheapest {choice}, with {} other pending pod(s); the controller creates it within its batch window{note}",
                planned.pool,
                planned.pods.len().saturating_sub(1)
            ),
            reasons: skipped(),
        };
    }
    let unschedulable = plan.unschedulable.iter().find(|u| u.pod == key);
    let mut reasons: Vec<PoolReason> = unschedulable
        .map(|u| {
            u.reasons
                .iter()
                .map(|(pool, r)| PoolReason {
                    nodepool: pool.clone(),
                    reason: r.to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    reasons.extend(skipped());
    let message = if reasons.is_empty() {
        "no NodePool exists".to_string()
    } else {
        format!("no NodePool can launch a node for it{note}")
    };
    Explanation {
        pod: shown,
        verdict: Verdict::Unschedulable,
        message,
        reasons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_pod_without_any_nodepool_is_unschedulable_and_exits_3() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        }))
        .unwrap();
        let key = PodKey {
            namespace: "default".into(),
            name: "web".into(),
        };
        let e = pending(
            &pod,
            key,
            "default/web".into(),
            &Snapshot::default(),
            &TypesOfClass::new(),
        );
        assert_eq!(e.verdict, Verdict::Unschedulable);
        assert_eq!(e.message, "no NodePool exists");
        assert_eq!(e.exit_code(), std::process::ExitCode::from(3));
    }
}
