//! `consolidationPolicy: Balanced` (Karpenter v1.15): a consolidation move must be worth its
//! disruption. A move's savings and its disruption are both taken as fractions of its
//! NodePool's totals; the move goes ahead when savings fraction ÷ disruption fraction is at
//! least 1/k, k = 2 (so a move may disrupt at most twice the share of the pool it saves).

use std::collections::HashMap;

use kube::ResourceExt;

use super::candidates::Candidate;
use crate::api::pod::Pod;

/// Upstream's default `consolidationThreshold`: approve at score ≥ 1/k.
pub const THRESHOLD_K: f64 = 2.0;

/// The annotation the ReplicaSet controller orders scale-down by; Karpenter reads it as how
/// costly a pod is to disrupt.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// How costly evicting `pod` is, as upstream weighs it: 1, plus its deletion cost ÷ 2²⁷, plus
/// its priority ÷ 2²⁵, within [-10, 10]; scoring counts a negative cost as 0.
pub fn pod_cost(pod: &Pod) -> f64 {
    let deletion_cost = pod
        .annotations()
        .get(POD_DELETION_COST)
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or(0);
    let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
    let cost = 1.0 + f64::from(deletion_cost) / 2f64.powi(27) + f64::from(priority) / 2f64.powi(25);
    cost.clamp(-10.0, 10.0).max(0.0)
}

/// A node's disruption: 1 for the node itself (so an empty node still counts) plus its pods'.
pub fn node_cost(pods: &[&Pod]) -> f64 {
    1.0 + pods.iter().map(|p| pod_cost(p)).sum::<f64>()
}

/// A NodePool's price (USD/hour) and disruption over all its nodes, taken once per pass.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolTotals {
    pub price: f64,
    pub disruption: f64,
}

/// Totals per NodePool over `nodes` (each with its price, when known).
pub fn pool_totals<'a>(
    nodes: impl IntoIterator<Item = (&'a Candidate<'a>, Option<f64>)>,
) -> HashMap<String, PoolTotals> {
    let mut out: HashMap<String, PoolTotals> = HashMap::new();
    for (c, price) in nodes {
        let t = out.entry(c.pool.name_any()).or_default();
        t.price += price.unwrap_or(0.0);
        t.disruption += node_cost(&c.pods);
    }
    out
}

/// A move's standing against its pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub savings_fraction: f64,
    pub disruption_fraction: f64,
}

impl Score {
    pub fn new(saving: f64, disruption: f64, totals: PoolTotals) -> Score {
        let fraction = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { 0.0 };
        Score {
            savings_fraction: fraction(saving, totals.price),
            disruption_fraction: fraction(disruption, totals.disruption),
        }
    }

    pub fn value(&self) -> f64 {
        if self.disruption_fraction > 0.0 {
            self.savings_fraction / self.disruption_fraction
        } else {
            0.0
        }
    }

    /// Saves something, and enough for what it disrupts.
    pub fn approves(&self) -> bool {
        self.savings_fraction > 0.0 && self.value() >= 1.0 / THRESHOLD_K
    }

    /// Why a move falls short, in the terms `jointer explain node` shows.
    pub fn shortfall(&self, pool: &str) -> String {
        format!(
            "NodePool {pool} is Balanced: the move saves {:.1}% of the pool's cost for {:.1}% of its disruption (score {:.2}, needs at least {:.2})",
            self.savings_fraction * 100.0,
            self.disruption_fraction * 100.0,
            self.value(),
            1.0 / THRESHOLD_K
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value, priority: Option<i32>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "annotations": annotations},
            "spec": {"containers": [], "priority": priority}
        }))
        .expect("pod")
    }

    #[test]
    fn a_default_pod_costs_one_and_priority_and_deletion_cost_weigh_in_clamped() {
        assert_eq!(pod_cost(&pod(json!({}), None)), 1.0);
        // 2²⁵ of priority adds one; the system-critical class (2 000 000 000) hits the cap.
        assert_eq!(pod_cost(&pod(json!({}), Some(1 << 25))), 2.0);
        assert_eq!(pod_cost(&pod(json!({}), Some(2_000_000_000))), 10.0);
        // 2²⁷ of deletion cost adds one; a very negative one counts as nothing, not less.
        assert_eq!(
            pod_cost(&pod(json!({POD_DELETION_COST: "134217728"}), None)),
            2.0
        );
        assert_eq!(
            pod_cost(&pod(json!({POD_DELETION_COST: "-2147483648"}), None)),
            0.0
        );
        // Unreadable annotations are ignored, as the ReplicaSet controller does.
        assert_eq!(
            pod_cost(&pod(json!({POD_DELETION_COST: "lots"}), None)),
            1.0
        );
    }

    #[test]
    fn an_empty_node_still_counts_once() {
        assert_eq!(node_cost(&[]), 1.0);
        let p = pod(json!({}), None);
        assert_eq!(node_cost(&[&p, &p, &p]), 4.0);
    }

    #[test]
    fn a_move_is_approved_when_savings_are_at_least_half_its_share_of_disruption() {
        // Ten nodes at $1/h with 10 pods each: 10 $/h and 110 disruption in all.
        let totals = PoolTotals {
            price: 10.0,
            disruption: 110.0,
        };
        // Deleting one full node: 10 % of the cost for 10 % of the disruption, score 1.
        let delete = Score::new(1.0, 11.0, totals);
        assert!((delete.value() - 1.0).abs() < 1e-9);
        assert!(delete.approves());
        // Replacing it by one at $0.97/h saves 0.3 % for 10 %: score 0.03, refused.
        let marginal = Score::new(0.03, 11.0, totals);
        assert!(!marginal.approves());
        assert!(marginal
            .shortfall("general")
            .contains("score 0.03, needs at least 0.50"));
        // Replacing it by one at $0.45/h saves 5.5 % for 10 %: score 0.55, approved.
        assert!(Score::new(0.55, 11.0, totals).approves());
        // Exactly at the threshold passes; nothing saved never does.
        assert!(Score::new(0.5, 11.0, totals).approves());
        assert!(!Score::new(0.0, 1.0, totals).approves());
        assert!(!Score::new(-0.2, 1.0, totals).approves());
    }

    #[test]
    fn the_score_does_not_depend_on_the_pools_size() {
        let small = Score::new(
            0.5,
            5.0,
            PoolTotals {
                price: 5.0,
                disruption: 50.0,
            },
        );
        let large = Score::new(
            50.0,
            500.0,
            PoolTotals {
                price: 500.0,
                disruption: 5000.0,
            },
        );
        assert!((small.value() - large.value()).abs() < 1e-9);
    }
}
