//! Node repair (pure), as Karpenter v1.15 does it: a voluntary disruption method with the reason
//! `Unhealthy`. A node whose status condition has been bad for longer than the AWS provider's
//! toleration for it is replaced like a drifted node (what its pods need that the rest of the
//! cluster cannot give launches first), within its pool's `Unhealthy` budgets. Pods with
//! do-not-disrupt or blocking PodDisruptionBudgets do not hold a repair back: the drain is bounded
//! by the condition's termination grace period instead. `karpenter.sh/do-not-repair: "true"` on
//! the Node or NodeClaim opts a node out; `karpenter.sh/do-not-disrupt` does not. A pool where
//! more than 20 % of the nodes (rounded up) report a monitored condition is not repaired at all:
//! the failure is likely correlated (a bad AMI, a zone outage) and new nodes would not fix it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::candidates::{Candidate, Found};
use super::simulation::reschedule;
use super::{Budgets, Command, Inputs, Method};
use crate::api::labels::{DO_NOT_REPAIR, NODEPOOL};
use crate::api::nodepool::DisruptionReason;
use crate::core::pods::since;

/// Which reasons of a condition a policy covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasons {
    Any,
    /// A reason naming one of these NVIDIA XID error codes.
    Xid(&'static [u32]),
    /// Any reason no XID policy of the same condition covers.
    NoListedXid,
}

/// One condition the provider monitors: a node reporting `condition` = `status` for longer than
/// `toleration` is replaced, and its drain takes at most `drain_bound`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition: &'static str,
    pub status: &'static str,
    pub reasons: Reasons,
    pub toleration: Duration,
    pub drain_bound: Duration,
}

/// XIDs the AWS provider answers with a reboot, not a replacement: jointer does not reboot nodes,
/// and upstream's repair (replacement only) leaves these alone too.
pub const REBOOT_XIDS: &[u32] = &[
    46, 48, 54, 62, 63, 95, 109, 110, 136, 140, 143, 155, 156, 158,
];
/// XIDs that mean the GPU is lost until the instance is replaced.
pub const REPLACE_XIDS: &[u32] = &[64, 74, 79, 119, 120];

const fn policy(condition: &'static str, status: &'static str) -> RepairPolicy {
    RepairPolicy {
        condition,
        status,
        reasons: Reasons::Any,
        toleration: Duration::from_secs(30 * 60),
        drain_bound: Duration::from_secs(10 * 60),
    }
}

/// The AWS provider's policies (karpenter-provider-aws v1.15): the kubelet's `Ready`, and the
/// conditions the EKS node monitoring agent reports.
pub const AWS_POLICIES: &[RepairPolicy] = &[
    policy("Ready", "False"),
    policy("Ready", "Unknown"),
    RepairPolicy {
        reasons: Reasons::Xid(REPLACE_XIDS),
        toleration: Duration::from_secs(10 * 60),
        drain_bound: Duration::from_secs(5 * 60),
        ..policy("AcceleratedHardwareReady", "False")
    },
    RepairPolicy {
        reasons: Reasons::NoListedXid,
        ..policy("AcceleratedHardwareReady", "False")
    },
    policy("StorageReady", "False"),
    policy("NetworkingReady", "False"),
    policy("KernelReady", "False"),
    policy("ContainerRuntimeReady", "False"),
];

fn names_xid(reason: &str, codes: &[u32]) -> bool {
    codes.iter().any(|c| reason.contains(&format!("XID{c}")))
}

impl RepairPolicy {
    pub fn covers(&self, c: &NodeCondition) -> bool {
        if c.type_ != self.condition || c.status != self.status {
            return false;
        }
        let reason = c.reason.as_deref().unwrap_or_default();
        match self.reasons {
            Reasons::Any => true,
            Reasons::Xid(codes) => names_xid(reason, codes),
            Reasons::NoListedXid => {
                !names_xid(reason, REPLACE_XIDS) && !names_xid(reason, REBOOT_XIDS)
            }
        }
    }
}

/// A node's monitored condition that has been bad past its toleration.
#[derive(Debug, Clone, PartialEq)]
pub struct Unhealthy {
    pub condition: String,
    pub status: String,
    /// How long the condition has been bad (now − its lastTransitionTime).
    pub bad_for: Duration,
    pub toleration: Duration,
    pub drain_bound: Duration,
}

impl Unhealthy {
    /// How long past its toleration: the longest-waiting node is repaired first.
    pub fn overdue(&self) -> Duration {
        self.bad_for.saturating_sub(self.toleration)
    }

    pub fn describe(&self) -> String {
        format!(
            "its condition {}={} has held for {} s, past its toleration of {} s",
            self.condition,
            self.status,
            self.bad_for.as_secs(),
            self.toleration.as_secs()
        )
    }
}

/// What the policies say of a node now.
#[derive(Debug, Clone, PartialEq)]
pub enum Health {
    Healthy,
    /// A monitored condition is bad, but not yet for its toleration.
    Tolerated {
        condition: String,
        status: String,
        left: Duration,
    },
    Unhealthy(Unhealthy),
}

fn conditions(node: &Node) -> &[NodeCondition] {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// Whether the node reports a monitored condition, however briefly (what the breaker counts).
pub fn reports_bad(node: &Node, policies: &[RepairPolicy]) -> bool {
    conditions(node)
        .iter()
        .any(|c| policies.iter().any(|p| p.covers(c)))
}

/// The node's most overdue bad condition, or the one closest to its toleration.
pub fn assess(node: &Node, policies: &[RepairPolicy], now: Timestamp) -> Health {
    let mut worst: Option<Unhealthy> = None;
    let mut waiting: Option<(String, String, Duration)> = None;
    for c in conditions(node) {
        let Some(p) = policies.iter().find(|p| p.covers(c)) else {
            continue;
        };
        // A condition without a transition time is taken as bad since now: it waits its whole
        // toleration rather than being repaired at once.
        let bad_for = c
            .last_transition_time
            .as_ref()
            .map(|t| since(now, t.0))
            .unwrap_or_default();
        if bad_for >= p.toleration {
            let found = Unhealthy {
                condition: c.type_.clone(),
                status: c.status.clone(),
                bad_for,
                toleration: p.toleration,
                drain_bound: p.drain_bound,
            };
            if worst.as_ref().is_none_or(|w| found.overdue() > w.overdue()) {
                worst = Some(found);
            }
        } else {
            let left = p.toleration - bad_for;
            if waiting.as_ref().is_none_or(|(_, _, l)| left < *l) {
                waiting = Some((c.type_.clone(), c.status.clone(), left));
            }
        }
    }
    match (worst, waiting) {
        (Some(u), _) => Health::Unhealthy(u),
        (None, Some((condition, status, left))) => Health::Tolerated {
            condition,
            status,
            left,
        },
        (None, None) => Health::Healthy,
    }
}

/// The share of a pool's nodes that may report a monitored condition before its repair stops.
pub const BREAKER_PERCENT: usize = 20;

/// Pools whose repair the breaker stops, with (unhealthy, nodes): more than 20 % of the pool's
/// nodes, rounded up (so a lone unhealthy node in a pool of up to five is still repaired),
/// report a monitored condition, counted before their toleration passes.
pub fn tripped_pools(
    nodes: &[Arc<Node>],
    policies: &[RepairPolicy],
) -> HashMap<String, (usize, usize)> {
    let mut counts: HashMap<String, (usize, usize)> = HashMap::new();
    for n in nodes {
        let Some(pool) = n.labels().get(NODEPOOL) else {
            continue;
        };
        let entry = counts.entry(pool.clone()).or_default();
        entry.1 += 1;
        if reports_bad(n, policies) {
            entry.0 += 1;
        }
    }
    counts.retain(|_, (bad, total)| *bad > (BREAKER_PERCENT * *total).div_ceil(100));
    counts
}

fn opted_out(c: &Candidate) -> bool {
    let says = |a: &std::collections::BTreeMap<String, String>| {
        a.get(DO_NOT_REPAIR).is_some_and(|v| v == "true")
    };
    says(c.node.annotations()) || says(c.claim.annotations())
}

/// The repair method over the live nodes: the most overdue unhealthy node its pool lets go, its
/// pods placed on the rest of the cluster, with new nodes launched first for those that need one.
pub fn command(inputs: &Inputs, found: &mut Found, budgets: &Budgets) -> Option<Command> {
    let policies = AWS_POLICIES;
    let tripped = tripped_pools(&inputs.snapshot.nodes, policies);
    let mut due: Vec<(&Candidate, Unhealthy)> = Vec::new();
    for c in &found.live {
        let name = c.claim.name_any();
        match assess(c.node, policies, inputs.now) {
            Health::Healthy => {}
            Health::Tolerated {
                condition,
                status,
                left,
            } => found.kept.push((
                name,
                format!(
                    "its condition {condition}={status} is tolerated for another {} s before repair",
                    left.as_secs()
                ),
            )),
            Health::Unhealthy(u) if opted_out(c) => found.kept.push((
                name,
                format!("unhealthy ({}), but annotated {DO_NOT_REPAIR}", u.describe()),
            )),
            Health::Unhealthy(u) => due.push((c, u)),
        }
    }
    due.sort_by(|(a, ua), (b, ub)| {
        ub.overdue()
            .cmp(&ua.overdue())
            .then_with(|| a.claim.name_any().cmp(&b.claim.name_any()))
    });
    let mut kept = Vec::new();
    let mut chosen = None;
    for (c, u) in due {
        let name = c.claim.name_any();
        let pool = c.pool.name_any();
        let why = u.describe();
        if let Some((bad, total)) = tripped.get(&pool) {
            let most = (BREAKER_PERCENT * total).div_ceil(100);
            kept.push((
                name,
                format!(
                    "unhealthy ({why}), but {bad} of NodePool {pool}'s {total} nodes report an unhealthy condition, more than {BREAKER_PERCENT} % of them ({most}, rounded up): a correlated failure, so the pool is not repaired"
                ),
            ));
            continue;
        }
        if budgets.allowed(c.pool, DisruptionReason::Unhealthy) == 0 {
            kept.push((
                name,
                format!(
                    "unhealthy ({why}), but NodePool {pool}'s disruption budget for Unhealthy allows no disruption now"
                ),
            ));
            continue;
        }
        match reschedule(inputs, &[c]) {
            Ok(plan) => {
                chosen = Some(Command {
                    method: Method::Unhealthy,
                    candidates: vec![name],
                    replacements: plan.nodeclaims,
                    saving: 0.0,
                    drain_bound: Some(u.drain_bound),
                    why: Some(why),
                });
                break;
            }
            Err(why_not) => kept.push((name, format!("unhealthy ({why}), but {why_not}"))),
        }
    }
    found.kept.extend(kept);
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-11-30T12:00:00Z";
    const MINUTE: Duration = Duration::from_secs(60);

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn node(pool: &str, conditions: serde_json::Value) -> Node {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n", "labels": {NODEPOOL: pool}},
            "status": {"conditions": conditions}}))
        .unwrap()
    }

    fn bad_since(kind: &str, status: &str, reason: &str, ago_secs: i64) -> serde_json::Value {
        let at = now() - k8s_openapi::jiff::SignedDuration::from_secs(ago_secs);
        json!({"type": kind, "status": status, "reason": reason, "message": "", "lastTransitionTime": at.to_string()})
    }

    #[test]
    fn ready_false_or_unknown_is_tolerated_for_30_minutes_and_repaired_from_then() {
        for status in ["False", "Unknown"] {
            let just_before = node(
                "p",
                json!([bad_since("Ready", status, "KubeletDown", 30 * 60 - 1)]),
            );
            assert_eq!(
                assess(&just_before, AWS_POLICIES, now()),
                Health::Tolerated {
                    condition: "Ready".into(),
                    status: status.into(),
                    left: Duration::from_secs(1)
                }
            );
            let at = node(
                "p",
                json!([bad_since("Ready", status, "KubeletDown", 30 * 60)]),
            );
            let Health::Unhealthy(u) = assess(&at, AWS_POLICIES, now()) else {
                panic!("unhealthy at the toleration");
            };
            assert_eq!((u.bad_for, u.drain_bound), (30 * MINUTE, 10 * MINUTE));
            assert!(u.describe().contains("Ready=") && u.describe().contains("1800 s"));
        }
        let ready = node(
            "p",
            json!([bad_since("Ready", "True", "KubeletReady", 3600)]),
        );
        assert_eq!(assess(&ready, AWS_POLICIES, now()), Health::Healthy);
    }

    #[test]
    fn agent_conditions_are_repaired_after_30_minutes_when_false_only() {
        for kind in [
            "StorageReady",
            "NetworkingReady",
            "KernelReady",
            "ContainerRuntimeReady",
        ] {
            let n = node("p", json!([bad_since(kind, "False", "Broken", 31 * 60)]));
            assert!(
                matches!(assess(&n, AWS_POLICIES, now()), Health::Unhealthy(_)),
                "{kind}"
            );
            let n = node("p", json!([bad_since(kind, "False", "Broken", 29 * 60)]));
            assert!(
                matches!(assess(&n, AWS_POLICIES, now()), Health::Tolerated { .. }),
                "{kind}"
            );
            let unknown = node("p", json!([bad_since(kind, "Unknown", "Broken", 3600)]));
            assert_eq!(
                assess(&unknown, AWS_POLICIES, now()),
                Health::Healthy,
                "{kind}"
            );
        }
        // A condition no policy names (the kubelet's pressure conditions) never repairs.
        let pressure = node("p", json!([bad_since("DiskPressure", "True", "", 3600)]));
        assert_eq!(assess(&pressure, AWS_POLICIES, now()), Health::Healthy);
    }

    #[test]
    fn accelerated_hardware_waits_10_minutes_for_fatal_xids_30_for_others_and_never_for_reboot_ones(
    ) {
        let fatal = node(
            "p",
            json!([bad_since(
                "AcceleratedHardwareReady",
                "False",
                "NvidiaXID79Error",
                10 * 60
            )]),
        );
        let Health::Unhealthy(u) = assess(&fatal, AWS_POLICIES, now()) else {
            panic!("a fatal XID after 10 minutes is repaired");
        };
        assert_eq!((u.toleration, u.drain_bound), (10 * MINUTE, 5 * MINUTE));
        let other = node(
            "p",
            json!([bad_since(
                "AcceleratedHardwareReady",
                "False",
                "NvidiaDeviceCountMismatch",
                20 * 60
            )]),
        );
        assert!(
            matches!(assess(&other, AWS_POLICIES, now()), Health::Tolerated { left, .. } if left == 10 * MINUTE)
        );
        let reboot = node(
            "p",
            json!([bad_since(
                "AcceleratedHardwareReady",
                "False",
                "NvidiaXID48Error",
                3600
            )]),
        );
        assert_eq!(assess(&reboot, AWS_POLICIES, now()), Health::Healthy);
    }

    #[test]
    fn the_most_overdue_condition_names_the_repair() {
        let n = node(
            "p",
            json!([
                bad_since("KernelReady", "False", "", 40 * 60),
                bad_since("Ready", "False", "", 50 * 60)
            ]),
        );
        let Health::Unhealthy(u) = assess(&n, AWS_POLICIES, now()) else {
            panic!("unhealthy");
        };
        assert_eq!((u.condition.as_str(), u.overdue()), ("Ready", 20 * MINUTE));
    }

    #[test]
    fn the_breaker_trips_above_20_percent_rounded_up_counting_conditions_still_tolerated() {
        let fresh = || {
            Arc::new(node(
                "p",
                json!([bad_since("KernelReady", "False", "", 60)]),
            ))
        };
        let fine = || Arc::new(node("p", json!([bad_since("Ready", "True", "", 60)])));
        // Five nodes: 20 % rounds to one, so one unhealthy node is repaired, two are not.
        let one_of_five: Vec<_> = [fresh()]
            .into_iter()
            .chain((0..4).map(|_| fine()))
            .collect();
        assert!(tripped_pools(&one_of_five, AWS_POLICIES).is_empty());
        let two_of_five: Vec<_> = [fresh(), fresh()]
            .into_iter()
            .chain((0..3).map(|_| fine()))
            .collect();
        assert_eq!(tripped_pools(&two_of_five, AWS_POLICIES)["p"], (2, 5));
        // Rounding up: a lone node, and one of six (1.2 → 2), still repair.
        assert!(tripped_pools(&[fresh()], AWS_POLICIES).is_empty());
        let two_of_six: Vec<_> = [fresh(), fresh()]
            .into_iter()
            .chain((0..4).map(|_| fine()))
            .collect();
        assert!(tripped_pools(&two_of_six, AWS_POLICIES).is_empty());
        let three_of_six: Vec<_> = [fresh(), fresh(), fresh()]
            .into_iter()
            .chain((0..3).map(|_| fine()))
            .collect();
        assert_eq!(tripped_pools(&three_of_six, AWS_POLICIES)["p"], (3, 6));
    }
}
