//! Static NodePools (`replicas`, Karpenter v1.6+) in `simulate`. Upstream keeps exactly
//! `replicas` nodes of such a pool whatever the pods (capped by `limits.nodes`) and never
//! provisions it for pending pods; pods still schedule onto its nodes. So the simulation
//! launches those nodes first — the cheapest offering the pool allows, as a launch would pick —
//! and the solver places pods on them as on existing nodes, launching dynamic pools' nodes only
//! for the rest. Without this a static pool would be solved as a dynamic one: its `replicas`
//! silently ignored.

use std::collections::{BTreeMap, HashMap};

use jointer_controller::api::labels;
use jointer_controller::core::scheduling::{
    ExistingNode, NodeClaimPlan, Plan, PoolInput, Requirements, SchedPod,
};
use jointer_controller::core::static_pool;

/// A static pool's nodes: as plans (for the report) and as existing nodes (for the solver).
#[derive(Default)]
pub struct StaticNodes {
    pub plans: Vec<NodeClaimPlan>,
    pub existing: Vec<std::sync::Arc<ExistingNode>>,
}

/// The nodes a static pool keeps, or why it cannot have them: what the controller would
/// create for it from nothing ([`static_pool::plan`]), each on the offering a launch would pick.
pub fn launch(pool: &PoolInput, replicas: i64, out: &mut StaticNodes) -> Result<(), String> {
    let decided = static_pool::plan(pool, &[], &HashMap::new());
    let count = decided.launch.len();
    let Some(mut plan) = decided.launch.into_iter().next() else {
        return match decided.held {
            Some(why) if replicas > 0 => Err(format!(
                "static NodePool {} (replicas: {replicas}): {why}",
                pool.name
            )),
            _ => Ok(()),
        };
    };
    let Some(choice) = plan.launch_choice() else {
        return Err(format!(
            "static NodePool {} (replicas: {replicas}): none of the instance types its requirements allow has an available offering",
            pool.name
        ));
    };
    let (name, zone, capacity) = (
        choice.instance_type.name.clone(),
        choice.offering.zone.clone(),
        choice.offering.capacity_type.as_str(),
    );
    let chosen = plan
        .instance_types
        .iter()
        .find(|t| t.name == name)
        .cloned()
        .into_iter()
        .collect();
    plan.instance_types = chosen;
    let instance_type = &plan.instance_types[0];
    // The node's labels: the pool's, the type's single-valued ones, the offering's zone and
    // capacity type — what pods' selectors and affinities are matched against.
    let mut node_labels: BTreeMap<String, String> = pool.labels.clone();
    for (key, requirement) in instance_type.requirements.iter() {
        if let Some(value) = requirement.single_value() {
            node_labels.insert(key.clone(), value.clone());
        }
    }
    node_labels.insert(labels::ZONE.to_string(), zone);
    node_labels.insert(labels::CAPACITY_TYPE.to_string(), capacity.to_string());
    plan.requirements = Requirements::from_labels(&node_labels);
    for i in 0..count {
        let hostname = format!("{}-static-{i}", pool.name);
        out.existing.push(std::sync::Arc::new(ExistingNode {
            name: hostname.clone(),
            pool: Some(pool.name.clone()),
            labels: node_labels.clone(),
            taints: pool.taints.clone(),
            allocatable: instance_type.allocatable,
            requested: pool.daemon_overhead,
            pods: Vec::new(),
            label_requirements: Default::default(),
        }));
        out.plans.push(NodeClaimPlan {
            hostname,
            ..plan.clone()
        });
    }
    Ok(())
}

/// The plan as launched: the static pools' nodes first, with the pods the solver put on them.
pub fn with_static_nodes(plan: &Plan, nodes: &StaticNodes, pods: &[SchedPod]) -> Plan {
    let mut shown = plan.clone();
    let mut launched: Vec<NodeClaimPlan> = nodes.plans.clone();
    for node in &mut launched {
        node.pods = shown.existing.remove(&node.hostname).unwrap_or_default();
        for key in &node.pods {
            if let Some(pod) = pods.iter().find(|p| &p.key == key) {
                node.requests += pod.requests;
            }
        }
    }
    launched.append(&mut shown.nodeclaims);
    shown.nodeclaims = launched;
    shown
}
