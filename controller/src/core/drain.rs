//! How a node is drained before its instance goes (pure; the I/O is the NodeClaim
//! controller's): it is tainted so nothing new lands, its pods are evicted through the
//! eviction API, which honours PodDisruptionBudgets. Pods annotated `karpenter.sh/do-not-disrupt` are
//! not evicted; they block the drain until they finish. A NodeClaim's
//! `terminationGracePeriod` bounds all of it: pods whose own grace period would outlast the
//! deadline are deleted early with what is left of it, so they end by then, and at the deadline
//! whatever remains is deleted regardless of budgets and annotations and the instance goes.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::jiff::Timestamp;

use crate::api::labels::{DISRUPTED_TAINT, TERMINATION_TIMESTAMP};
use crate::api::nodeclaim::NodeClaim;
use crate::api::pod::Pod;
use crate::core::pods::{must_evict, pod_do_not_disrupt};
use crate::core::scheduling::pod::pod_requests;

/// The node's taints with `karpenter.sh/disrupted:NoSchedule` added, or None when it has it.
pub fn with_disrupted_taint(node: &Node) -> Option<Vec<Taint>> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints.iter().any(|t| t.key == DISRUPTED_TAINT) {
        return None;
    }
    taints.push(Taint {
        key: DISRUPTED_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
    Some(taints)
}

/// Nodes that carry `karpenter.sh/disrupted` although their NodeClaim is not being deleted.
/// Only a command under way or a drain holds that taint; a crash between a command's taint and
/// its deletion leaves it behind, and the node would take no new pods for good. Called when no
/// command is in flight, so every one found is stale (upstream untaints the same way before
/// each disruption pass).
pub fn stale_disrupted<'a>(
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    nodes: impl IntoIterator<Item = &'a Node>,
) -> Vec<&'a Node> {
    let serving: std::collections::HashSet<&str> = claims
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.status.as_ref()?.node_name.as_deref())
        .collect();
    nodes
        .into_iter()
        .filter(|n| {
            n.metadata
                .name
                .as_deref()
                .is_some_and(|n| serving.contains(n))
        })
        .filter(|n| without_disrupted_taint(n).is_some())
        .collect()
}

/// Kubernetes' default when a pod does not set `terminationGracePeriodSeconds`.
const DEFAULT_POD_GRACE: i64 = 30;

/// The node's taints without `karpenter.sh/disrupted`, or None when it has none.
pub fn without_disrupted_taint(node: &Node) -> Option<Vec<Taint>> {
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone())?;
    if !taints.iter().any(|t| t.key == DISRUPTED_TAINT) {
        return None;
    }
    Some(
        taints
            .into_iter()
            .filter(|t| t.key != DISRUPTED_TAINT)
            .collect(),
    )
}

/// When a deleting NodeClaim's node must be gone: its deletion time plus the
/// `terminationGracePeriod` it was created with, or the `karpenter.sh/nodeclaim-termination-timestamp`
/// already on it (a repair bounds its drain by one), whichever comes first; `None` drains for
/// as long as it takes.
pub fn deadline(claim: &NodeClaim) -> Option<Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let by_grace = claim
        .spec
        .termination_grace_period
        .and_then(|g| k8s_openapi::jiff::SignedDuration::try_from(g.0).ok())
        .and_then(|g| deleted.checked_add(g).ok());
    let stamped = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TERMINATION_TIMESTAMP))
        .and_then(|t| t.parse::<Timestamp>().ok());
    match (by_grace, stamped) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What the drain does with one pod on this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodStep {
    /// Does not hold the node (DaemonSet, mirror or finished pod).
    Ignore,
    /// Holds the node, and nothing is to be done now (terminating, or do-not-disrupt).
    Wait,
    Evict,
    /// Delete with this grace period, bypassing budgets: the deadline is near or past.
    Delete {
        grace_seconds: i64,
    },
}

pub fn pod_step(pod: &Pod, now: Timestamp, deadline: Option<Timestamp>) -> PodStep {
    if !must_evict(pod) {
        return PodStep::Ignore;
    }
    if let Some(deadline) = deadline {
        let left = (deadline.as_second() - now.as_second()).max(0);
        let delete = PodStep::Delete {
            grace_seconds: left,
        };
        match &pod.metadata.deletion_timestamp {
            // Terminating: its deletionTimestamp is when its grace period ends. Shorten it when
            // it ends after the deadline (a grace period can only shrink); at the deadline,
            // whatever is still there goes at once.
            Some(ends) if ends.0 > deadline || left == 0 => return delete,
            Some(_) => {}
            None => {
                let grace = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(DEFAULT_POD_GRACE);
                if grace >= left {
                    return delete;
                }
            }
        }
    }
    if pod.metadata.deletion_timestamp.is_some() || pod_do_not_disrupt(pod, now) {
        PodStep::Wait
    } else {
        PodStep::Evict
    }
}

/// What the drain does with each of a node's pods this pass: [`pod_step`], with evictions held
/// to the largest pods left (by CPU, then memory). kube-scheduler takes pods first come, first
/// served, each to the least allocated node that fits: evicted all at once, the small pods'
/// replacements can take the room elsewhere that a big one needs, and it waits for a new node.
/// Evicted biggest first, a size a pass, they arrive in that order, the order consolidation
/// checks a deletion against ([`crate::core::scheduling::PodOrder::KubeScheduler`]). A big pod
/// a PodDisruptionBudget holds back holds the smaller ones too: the node waits for it anyway.
pub fn pass_steps(pods: &[Pod], now: Timestamp, deadline: Option<Timestamp>) -> Vec<PodStep> {
    let steps = pods.iter().map(|p| {
        let requests = p.spec.as_ref().map(|s| pod_requests(s).0);
        let requests = requests.unwrap_or_default();
        (pod_step(p, now, deadline), (requests.cpu, requests.memory))
    });
    let steps: Vec<_> = steps.collect();
    let largest = steps
        .iter()
        .filter(|(step, _)| *step == PodStep::Evict)
        .map(|(_, size)| *size)
        .max();
    steps
        .into_iter()
        .map(|(step, size)| match step {
            PodStep::Evict if Some(size) < largest => PodStep::Wait,
            step => step,
        })
        .collect()
}

/// How long until the next drain pass: the usual 2 s, or sooner when the deadline is nearer.
pub fn next_pass(now: Timestamp, deadline: Option<Timestamp>) -> Duration {
    let usual = Duration::from_secs(2);
    match deadline {
        Some(d) => {
            let left = Duration::try_from(d.duration_since(now)).unwrap_or_default();
            usual.min(left.max(Duration::from_millis(200)))
        }
        None => usual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::pods::holders;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn pod(grace: Option<i64>, annotations: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p.spec = Some(crate::api::pod::PodSpec {
            termination_grace_period_seconds: grace,
            ..Default::default()
        });
        p
    }

    #[test]
    fn the_deadline_is_the_earlier_of_the_grace_period_and_a_termination_timestamp_set_before() {
        let claim = |grace: Option<&str>, stamp: Option<&str>| -> NodeClaim {
            let mut c = serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "c", "deletionTimestamp": "2026-11-30T12:00:00Z"},
                "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "k"}}});
            if let Some(g) = grace {
                c["spec"]["terminationGracePeriod"] = serde_json::json!(g);
            }
            if let Some(s) = stamp {
                c["metadata"]["annotations"] = serde_json::json!({TERMINATION_TIMESTAMP: s});
            }
            serde_json::from_value(c).expect("claim")
        };
        let t = |s: &str| s.parse::<Timestamp>().ok();
        assert_eq!(deadline(&claim(None, None)), None);
        assert_eq!(
            deadline(&claim(Some("1h"), None)),
            t("2026-11-30T13:00:00Z")
        );
        let repair = Some("2026-11-30T12:10:00Z");
        assert_eq!(deadline(&claim(None, repair)), t("2026-11-30T12:10:00Z"));
        assert_eq!(
            deadline(&claim(Some("1h"), repair)),
            t("2026-11-30T12:10:00Z")
        );
        assert_eq!(
            deadline(&claim(Some("5m"), repair)),
            t("2026-11-30T12:05:00Z")
        );
    }

    #[test]
    fn a_disrupted_taint_is_stale_only_on_the_node_of_a_nodeclaim_not_being_deleted() {
        let claim = |name: &str, node: &str, deleting: bool| -> NodeClaim {
            let mut c = serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name},
                "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "k"}},
                "status": {"nodeName": node}});
            if deleting {
                c["metadata"]["deletionTimestamp"] = serde_json::json!("2026-11-30T12:00:00Z");
            }
            serde_json::from_value(c).expect("claim")
        };
        let node = |name: &str, tainted: bool| -> Node {
            let mut n = Node::default();
            n.metadata.name = Some(name.into());
            if tainted {
                n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
                    taints: with_disrupted_taint(&n),
                    ..Default::default()
                });
            }
            n
        };
        let claims = [
            claim("serving", "n1", false),
            claim("going", "n2", true),
            claim("clean", "n3", false),
        ];
        // n4 is no NodeClaim's: not ours to untaint.
        let nodes = [
            node("n1", true),
            node("n2", true),
            node("n3", false),
            node("n4", true),
        ];
        let stale: Vec<_> = stale_disrupted(&claims, &nodes)
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        assert_eq!(stale, ["n1"]);
    }

    #[test]
    fn without_a_deadline_pods_are_evicted_and_do_not_disrupt_ones_wait() {
        assert_eq!(pod_step(&pod(None, &[]), at(0), None), PodStep::Evict);
        let protected = pod(None, &[("karpenter.sh/do-not-disrupt", "true")]);
        assert_eq!(pod_step(&protected, at(0), None), PodStep::Wait);
        let mut terminating = pod(None, &[]);
        terminating.metadata.deletion_timestamp = Some(Time(at(30)));
        assert_eq!(pod_step(&terminating, at(0), None), PodStep::Wait);
    }

    #[test]
    fn a_pod_whose_grace_period_outlasts_the_deadline_is_deleted_early_with_what_is_left() {
        let deadline = Some(at(100));
        // 30 s default grace, 100 s left: evicted as usual.
        assert_eq!(pod_step(&pod(None, &[]), at(0), deadline), PodStep::Evict);
        // 120 s grace would end after the deadline: deleted now with the 100 s left.
        assert_eq!(
            pod_step(&pod(Some(120), &[]), at(0), deadline),
            PodStep::Delete { grace_seconds: 100 }
        );
        // do-not-disrupt waits until its grace period would no longer fit.
        let protected = pod(Some(30), &[("karpenter.sh/do-not-disrupt", "true")]);
        assert_eq!(pod_step(&protected, at(50), deadline), PodStep::Wait);
        assert_eq!(
            pod_step(&protected, at(75), deadline),
            PodStep::Delete { grace_seconds: 25 }
        );
    }

    #[test]
    fn terminating_pods_end_by_the_deadline_and_at_it_everything_left_goes_at_once() {
        let deadline = Some(at(100));
        let mut terminating = pod(Some(600), &[]);
        terminating.metadata.deletion_timestamp = Some(Time(at(500)));
        assert_eq!(
            pod_step(&terminating, at(50), deadline),
            PodStep::Delete { grace_seconds: 50 },
            "shortened to end by the deadline"
        );
        terminating.metadata.deletion_timestamp = Some(Time(at(100)));
        assert_eq!(pod_step(&terminating, at(60), deadline), PodStep::Wait);
        assert_eq!(
            pod_step(&terminating, at(100), deadline),
            PodStep::Delete { grace_seconds: 0 }
        );
        let protected = pod(Some(0), &[("karpenter.sh/do-not-disrupt", "true")]);
        assert_eq!(
            pod_step(&protected, at(130), deadline),
            PodStep::Delete { grace_seconds: 0 }
        );
    }

    #[test]
    fn holders_name_do_not_disrupt_pods_and_blocking_budgets() {
        use k8s_openapi::api::policy::v1::{
            PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
        };
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
        let mut guarded = pod(None, &[("karpenter.sh/do-not-disrupt", "true")]);
        guarded.metadata.namespace = Some("shop".into());
        guarded.metadata.name = Some("batch-0".into());
        let mut budgeted = pod(None, &[]);
        budgeted.metadata.namespace = Some("shop".into());
        budgeted.metadata.name = Some("db-0".into());
        budgeted.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
        let free = pod(None, &[]);
        let pdb = PodDisruptionBudget {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("db".into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_string(), "db".to_string())].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: Some(0),
                ..Default::default()
            }),
        };
        let held = holders(
            &[guarded, budgeted, free],
            &[std::sync::Arc::new(pdb)],
            at(0),
        );
        assert_eq!(
            held,
            [
                "pod shop/batch-0 is annotated karpenter.sh/do-not-disrupt",
                "PodDisruptionBudget shop/db allows no eviction of pod db-0 now"
            ]
        );
    }

    #[test]
    fn daemonset_and_finished_pods_never_hold_the_node() {
        let mut daemon = pod(None, &[]);
        daemon.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                kind: "DaemonSet".into(),
                name: "d".into(),
                api_version: "apps/v1".into(),
                uid: "u".into(),
                ..Default::default()
            },
        ]);
        assert_eq!(pod_step(&daemon, at(0), Some(at(0))), PodStep::Ignore);
    }

    #[test]
    fn pods_are_evicted_biggest_first_a_size_a_pass() {
        let sized = |name: &str, cpu: &str, memory: &str, annotations: &[(&str, &str)]| {
            let mut p = pod(None, annotations);
            p.metadata.name = Some(name.into());
            let requests = [("cpu", cpu), ("memory", memory)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect();
            if let Some(spec) = p.spec.as_mut() {
                spec.containers = vec![crate::api::pod::Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(requests),
                        ..Default::default()
                    }),
                    ..Default::default()
                }];
            }
            p
        };
        let stay = [("karpenter.sh/do-not-disrupt", "true")];
        let pods = [
            sized("web", "250m", "256Mi", &[]),
            sized("worker-1", "1500m", "1Gi", &[]),
            sized("worker-2", "1500m", "1Gi", &[]),
            sized("worker-big", "1500m", "2Gi", &[]),
            // A pod that is not to be evicted does not hold the others back.
            sized("pinned", "4", "8Gi", &stay),
        ];
        let steps = |pods: &[Pod]| pass_steps(pods, at(0), None);
        use PodStep::{Evict, Wait};
        assert_eq!(steps(&pods), [Wait, Wait, Wait, Evict, Wait]);
        assert_eq!(steps(&pods[..3]), [Wait, Evict, Evict]);
        assert_eq!(steps(&pods[..1]), [Evict]);
        // At the deadline everything goes at once, whatever its size.
        let deadline = Some(at(0));
        assert!(pass_steps(&pods[..3], at(0), deadline)
            .iter()
            .all(|s| matches!(s, PodStep::Delete { .. })));
    }

    #[test]
    fn the_next_pass_comes_no_later_than_the_deadline() {
        assert_eq!(next_pass(at(0), None), Duration::from_secs(2));
        assert_eq!(next_pass(at(0), Some(at(1))), Duration::from_secs(1));
        assert_eq!(next_pass(at(5), Some(at(1))), Duration::from_millis(200));
    }
}
