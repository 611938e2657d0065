//! The pod policy (pure): which pods the provisioner places, which hold a node that is
//! going, which block voluntary disruption (do-not-disrupt, PodDisruptionBudgets) — the rules
//! the provisioner, the drain, disruption and `jointer explain` share.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::labels;
use crate::api::pod::Pod;
use crate::core::scheduling::pod::Selector;

/// Succeeded or Failed: it holds no resources and will not run again.
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// DaemonSet pods follow nodes: they are neither provisioned for nor drained.
pub fn owned_by_daemonset(pod: &Pod) -> bool {
    pod.owner_references().iter().any(|o| o.kind == "DaemonSet")
}

/// A pod kube-scheduler could not place and the provisioner should: unbound, marked
/// `PodScheduled=False/Unschedulable`, not being deleted, not a DaemonSet pod (those follow nodes).
pub fn is_provisionable(pod: &Pod) -> bool {
    let unbound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_none());
    let unschedulable = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        });
    unbound
        && unschedulable
        && pod.metadata.deletion_timestamp.is_none()
        && !is_terminal(pod)
        && !owned_by_daemonset(pod)
}

/// Pods that block deletion: not DaemonSet-owned (they tolerate the taint and die with the
/// node), not mirror pods, not finished.
pub fn must_evict(pod: &Pod) -> bool {
    let mirror = pod.annotations().contains_key(labels::MIRROR_POD);
    !owned_by_daemonset(pod) && !mirror && !is_terminal(pod)
}

/// A pod a drain still has to move: one that blocks deletion and is not already going.
pub fn to_be_moved(pod: &Pod) -> bool {
    must_evict(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// What holds a draining node, one reason per pod that will not leave on its own: annotated
/// do-not-disrupt, or protected by a PodDisruptionBudget that allows no eviction now.
pub fn holders(pods: &[Pod], pdbs: &[Arc<PodDisruptionBudget>], now: Timestamp) -> Vec<String> {
    pods.iter()
        .filter(|p| to_be_moved(p))
        .filter_map(|p| {
            if pod_do_not_disrupt(p, now) {
                Some(format!(
                    "pod {}/{} is annotated karpenter.sh/do-not-disrupt",
                    p.namespace().unwrap_or_default(),
                    p.name_any()
                ))
            } else {
                blocked_by_pdb(&[p], pdbs)
            }
        })
        .collect()
}

/// How long ago `t` was (zero for a time in the future).
pub fn since(now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(t)).unwrap_or_default()
}

/// A `karpenter.sh/do-not-disrupt` value in force: `"true"`, or a duration not yet passed
/// since `started`.
pub fn do_not_disrupt(value: Option<&String>, started: Option<Timestamp>, now: Timestamp) -> bool {
    match value.map(String::as_str) {
        Some("true") => true,
        Some(d) => d
            .parse::<crate::api::duration::KubeDuration>()
            .ok()
            .zip(started)
            .is_some_and(|(d, s)| since(now, s) < d.0),
        None => false,
    }
}

/// A pod annotated `karpenter.sh/do-not-disrupt: "true"`, or with a duration it has not yet
/// run for.
pub fn pod_do_not_disrupt(pod: &Pod, now: Timestamp) -> bool {
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0);
    do_not_disrupt(pod.annotations().get(labels::DO_NOT_DISRUPT), started, now)
}

/// The first PodDisruptionBudget that allows no eviction of one of `pods` now, as a reason
/// (disruption decides this before any taint, so a blocked node is never left half-disrupted).
pub fn blocked_by_pdb(pods: &[&Pod], pdbs: &[Arc<PodDisruptionBudget>]) -> Option<String> {
    for pdb in pdbs {
        let allowed = pdb
            .status
            .as_ref()
            .and_then(|s| s.disruptions_allowed)
            .unwrap_or(0);
        if allowed > 0 {
            continue;
        }
        let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        let selector = Selector::from_k8s(selector);
        if let Some(p) = pods
            .iter()
            .find(|p| p.namespace() == pdb.namespace() && selector.matches(&p.labels().clone()))
        {
            return Some(format!(
                "PodDisruptionBudget {}/{} allows no eviction of pod {} now",
                pdb.namespace().unwrap_or_default(),
                pdb.name_any(),
                p.name_any()
            ));
        }
    }
    None
}
