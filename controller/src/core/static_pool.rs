//! Static NodePools (`spec.replicas`, Karpenter v1.6+), pure: a static pool has exactly
//! `replicas` nodes whatever the pods. Too few: NodeClaims are planned from the pool's template
//! alone (within `limits.nodes`, the only limit a static pool takes). Too many: the nodes that
//! disrupt least go — not yet registered first, then the fewest pods. Scaling does not spend
//! disruption budgets (it is the user's explicit ask, as upstream); the pods of a node that
//! goes are still evicted through the eviction API, so PodDisruptionBudgets hold.

use std::collections::HashMap;

use kube::ResourceExt;

use crate::api::nodeclaim::NodeClaim;
use crate::core::scheduling::{NodeClaimPlan, PoolInput};

/// What a static pool needs now.
#[derive(Debug, Default)]
pub struct StaticPlan {
    /// New NodeClaims to create.
    pub launch: Vec<NodeClaimPlan>,
    /// NodeClaims to delete (names).
    pub remove: Vec<String>,
    /// Why fewer than asked are launched, if so.
    pub held: Option<String>,
}

/// The plan for `pool` (its `replicas` set), given its NodeClaims that are not being deleted
/// and the number of pods on each NodeClaim's node.
pub fn plan(
    pool: &PoolInput,
    claims: &[&NodeClaim],
    pods_on: &HashMap<String, usize>,
) -> StaticPlan {
    let Some(replicas) = pool.replicas else {
        return StaticPlan::default();
    };
    let live = claims.len() as i64;
    let mut out = StaticPlan::default();
    if live < replicas {
        let mut wanted = replicas - live;
        if let Some(limit) = pool.limits.nodes {
            let room = (limit - live).max(0);
            if room < wanted {
                out.held = Some(format!(
                    "limits.nodes {limit} allows {room} more of the {wanted} nodes replicas {replicas} asks for"
                ));
                wanted = room;
            }
        }
        match template_claim(pool) {
            Some(claim) => out.launch = vec![claim; wanted as usize],
            None if wanted > 0 => {
                out.held = Some(
                    "no instance type of its EC2NodeClass satisfies the pool's requirements and fits its DaemonSets".into(),
                )
            }
            None => {}
        }
    } else if live > replicas {
        let mut order: Vec<&&NodeClaim> = claims.iter().collect();
        order.sort_by_key(|c| {
            let registered = c.status.as_ref().is_some_and(|s| s.node_name.is_some());
            let pods = pods_on.get(&c.name_any()).copied().unwrap_or(0);
            (registered, pods, std::cmp::Reverse(c.name_any()))
        });
        out.remove = order
            .into_iter()
            .take((live - replicas) as usize)
            .map(|c| c.name_any())
            .collect();
    }
    out
}

/// A NodeClaim from the pool's template alone: every instance type the pool permits that has
/// an offering and room for the pool's DaemonSets, cheapest first.
fn template_claim(pool: &PoolInput) -> Option<NodeClaimPlan> {
    let mut types: Vec<_> = pool
        .instance_types
        .iter()
        .filter(|t| t.requirements.conflict(&pool.requirements).is_none())
        .filter(|t| t.cheapest(&pool.requirements).is_some())
        .filter(|t| pool.daemon_overhead.fits_in(&t.allocatable))
        .cloned()
        .collect();
    if types.is_empty() {
        return None;
    }
    types.sort_by(|a, b| {
        let price = |t: &crate::core::scheduling::InstanceType| {
            t.cheapest(&pool.requirements).map_or(f64::MAX, |o| o.price)
        };
        price(a).total_cmp(&price(b))
    });
    Some(NodeClaimPlan {
        pool: pool.name.clone(),
        hostname: String::new(),
        requirements: pool.requirements.clone(),
        instance_types: types,
        pods: Vec::new(),
        requests: pool.daemon_overhead,
        min_values_relaxed: false,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::api::labels;
    use crate::core::scheduling::{
        CapacityType, InstanceType, Limits, Offering, Requirement, Requirements, Resources,
    };
    use serde_json::json;

    fn itype(name: &str, cpu: i64, price: f64) -> Arc<InstanceType> {
        let mut req = Requirements::new();
        req.add(labels::ARCH, Requirement::any_of(["amd64"]));
        Arc::new(InstanceType::new(
            name,
            req,
            Resources::cpu_memory(cpu * 1000, (cpu * 4) << 30),
            Resources::ZERO,
            vec![Offering {
                zone: "z1".into(),
                capacity_type: CapacityType::OnDemand,
                price,
                available: true,
            }],
        ))
    }

    fn pool(replicas: i64, nodes_limit: Option<i64>) -> PoolInput {
        let mut requirements = Requirements::new();
        requirements.add(labels::NODEPOOL, Requirement::any_of(["fixed"]));
        requirements.add(labels::ARCH, Requirement::any_of(["amd64"]));
        PoolInput {
            name: "fixed".into(),
            weight: 0,
            requirements,
            labels: Default::default(),
            taints: vec![],
            instance_types: vec![itype("big", 8, 0.4), itype("small", 2, 0.1)],
            daemon_overhead: Resources::cpu_memory(500, 1 << 30),
            limits: Limits {
                nodes: nodes_limit,
                ..Default::default()
            },
            in_use: Resources::ZERO,
            nodes_in_use: 0,
            replicas: Some(replicas),
            admitted: Default::default(),
        }
    }

    fn claim(name: &str, node: Option<&str>) -> NodeClaim {
        serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}},
            "status": {"nodeName": node}}))
        .expect("claim")
    }

    #[test]
    fn too_few_nodes_are_planned_from_the_template_cheapest_type_first() {
        let existing = claim("fixed-a", Some("n-a"));
        let p = plan(&pool(3, None), &[&existing], &HashMap::new());
        assert_eq!(p.launch.len(), 2);
        assert!(p.remove.is_empty() && p.held.is_none());
        let names: Vec<&str> = p.launch[0]
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["small", "big"]);
        assert!(p.launch[0].pods.is_empty());
        assert_eq!(p.launch[0].requests, Resources::cpu_memory(500, 1 << 30));
    }

    #[test]
    fn limits_nodes_caps_the_count_and_says_so() {
        let p = plan(&pool(5, Some(2)), &[], &HashMap::new());
        assert_eq!(p.launch.len(), 2);
        assert!(
            p.held
                .as_deref()
                .is_some_and(|h| h.contains("limits.nodes 2")),
            "{:?}",
            p.held
        );
    }

    #[test]
    fn too_many_nodes_lose_the_unregistered_then_the_emptiest() {
        let (a, b, c) = (
            claim("a", Some("n-a")),
            claim("b", Some("n-b")),
            claim("c", None),
        );
        let pods = HashMap::from([("a".to_string(), 3), ("b".to_string(), 1)]);
        let p = plan(&pool(1, None), &[&a, &b, &c], &pods);
        assert!(p.launch.is_empty());
        assert_eq!(p.remove, ["c", "b"]);
        // At the count: nothing to do.
        let p = plan(&pool(3, None), &[&a, &b, &c], &pods);
        assert!(p.launch.is_empty() && p.remove.is_empty());
    }

    #[test]
    fn daemonsets_no_type_can_hold_leave_the_pool_short_with_a_reason() {
        let mut heavy = pool(1, None);
        heavy.daemon_overhead = Resources::cpu_memory(64_000, 1 << 30);
        let p = plan(&heavy, &[], &HashMap::new());
        assert!(p.launch.is_empty());
        assert!(p.held.is_some());
    }
}
