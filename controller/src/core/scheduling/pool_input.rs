//! A NodePool and its instance types as solver input.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;

use super::instance_type::InstanceType;
use super::pod::SchedPod;
use super::problem::{Limits, PoolInput};
use super::requirements::{Requirement, Requirements};
use super::resources::Resources;
use crate::api::{labels, NodePool};

/// Builds the solver's view of a NodePool. Like Karpenter, a pool that does not constrain
/// `karpenter.sh/capacity-type` launches on-demand only. `daemonsets` are the pod templates of
/// the cluster's DaemonSets; those that would run on this pool's nodes add their requests to
/// every new node.
pub fn pool_input(
    pool: &NodePool,
    instance_types: Vec<Arc<InstanceType>>,
    daemonsets: &[SchedPod],
) -> PoolInput {
    let name = pool.name_any();
    let template = &pool.spec.template;
    let mut requirements = Requirements::from_api(&template.spec.requirements);
    if requirements.get(labels::CAPACITY_TYPE).is_none() {
        requirements.add(
            labels::CAPACITY_TYPE,
            Requirement::any_of([labels::CAPACITY_ON_DEMAND]),
        );
    }
    let mut node_labels: BTreeMap<String, String> = template.metadata.labels.clone();
    node_labels.insert(labels::NODEPOOL.to_string(), name.clone());
    for (k, v) in &node_labels {
        requirements.add(k, Requirement::any_of([v.clone()]));
    }
    let limit = |key: &str| {
        pool.spec.limits.get(key).map(|q| if key == "cpu" { q.millis() } else { q.units_ceil() } as i64)
    };
    let mut input = PoolInput {
        name,
        weight: pool.spec.weight.unwrap_or(0),
        requirements,
        labels: node_labels,
        taints: template.spec.taints.clone(),
        instance_types,
        daemon_overhead: Resources::ZERO,
        limits: Limits {
            cpu: limit("cpu"),
            memory: limit("memory"),
            nodes: limit("nodes"),
        },
        in_use: Resources::ZERO,
        nodes_in_use: 0,
        replicas: pool.spec.replicas,
        admitted: Default::default(),
    };
    input.daemon_overhead = daemonsets
        .iter()
        .filter(|d| input.may_take(d))
        .fold(Resources::ZERO, |acc, d| acc + d.requests);
    input
}
