//! A cluster after a scale-down, for disruption benchmarks (pure): the `aws` profile's
//! workload solved onto nodes — each a Node with an Initialized NodeClaim of one NodePool that
//! consolidates when underutilized, every pod bound and Running — and then a share of the pods
//! gone, which leaves the nodes underutilized as a scale-down does.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::Rng;
use crate::api::labels;
use crate::core::catalog::CatalogError;
use crate::core::nodeclaim::quantities;
use crate::core::scheduling::{solve, InstanceType, NodeClaimPlan, SchedPod};
use crate::core::state::Snapshot;

/// The NodePool's and EC2NodeClass's name.
pub const POOL: &str = "bench";
/// When the nodes were launched and last saw a pod event: long before [`NOW`].
const LONG_AGO: &str = "2026-01-01T00:00:00Z";
/// The moment the decision is taken.
pub const NOW: &str = "2026-01-01T06:00:00Z";

pub struct Cluster {
    pub snapshot: Snapshot,
    pub types_of_class: HashMap<String, Vec<Arc<InstanceType>>>,
    /// The pods still there, as the solver sees them (for a fresh solve to compare with).
    pub pods_left: Vec<SchedPod>,
    /// What the nodes cost, at each one's launch offering.
    pub price_per_hour: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("a benchmark object does not parse as its kind: {0}")]
    Object(#[from] serde_json::Error),
}

fn object<T: serde::de::DeserializeOwned>(value: Value) -> Result<Arc<T>, ClusterError> {
    Ok(Arc::new(serde_json::from_value(value)?))
}

fn pool() -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
    "metadata": {"name": POOL, "uid": "bench-uid"},
    "spec": {
        "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": POOL},
            "requirements": [
                {"key": labels::INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m", "r"]},
                {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]},
                {"key": labels::ARCH, "operator": "In", "values": ["amd64", "arm64"]},
            ],
        }},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
    }})
}

fn class() -> Value {
    json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": POOL},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "bench",
            "subnetSelectorTerms": [{"id": "subnet-bench"}], "securityGroupSelectorTerms": [{"id": "sg-bench"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": LONG_AGO}]}})
}

/// The Node and NodeClaim a planned NodeClaim became, launched as its cheapest offering.
fn node_of(index: usize, planned: &NodeClaimPlan) -> Option<(Value, Value, f64)> {
    let choice = planned.launch_choice()?;
    let (itype, offering) = (choice.instance_type, choice.offering);
    let name = format!("bench-{index:05}");
    let mut node_labels = serde_json::Map::new();
    for (key, r) in itype.requirements.iter() {
        if let Some(v) = r.single_value() {
            node_labels.insert(key.clone(), json!(v));
        }
    }
    for (key, value) in [
        (labels::NODEPOOL, POOL),
        (labels::INSTANCE_TYPE, itype.name.as_str()),
        (labels::ZONE, offering.zone.as_str()),
        (labels::CAPACITY_TYPE, offering.capacity_type.as_str()),
        (labels::HOSTNAME, name.as_str()),
    ] {
        node_labels.insert(key.into(), json!(value));
    }
    let provider_id = format!("aws:///{}/i-{index:017x}", offering.zone);
    let node = json!({"apiVersion": "v1", "kind": "Node",
    "metadata": {"name": name, "labels": node_labels},
    "spec": {"providerID": provider_id},
    "status": {
        "capacity": quantities(&itype.capacity),
        "allocatable": quantities(&itype.allocatable),
        "conditions": [{"type": "Ready", "status": "True"}],
    }});
    let claim = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": format!("claim-{index:05}"), "labels": node_labels, "creationTimestamp": LONG_AGO},
        "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": POOL}},
        "status": {"nodeName": name, "providerID": provider_id, "lastPodEventTime": LONG_AGO,
            "capacity": quantities(&itype.capacity), "allocatable": quantities(&itype.allocatable),
            "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": LONG_AGO}]}});
    Some((node, claim, offering.price))
}

fn pod_on(pod: &SchedPod, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.key.name, "namespace": pod.key.namespace,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "bench", "uid": "bench-rs", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "bench",
            "resources": {"requests": quantities(&pod.requests)}}]},
        "status": {"phase": "Running", "startTime": LONG_AGO}})
}

/// `pods` pods of the `aws` profile on the nodes the solver chose for them, then
/// `removed_percent` of them (picked by `seed`) gone.
pub fn after_scale_down(
    pods: usize,
    removed_percent: usize,
    seed: u64,
) -> Result<Cluster, ClusterError> {
    let problem = super::aws(pods, seed)?;
    let plan = solve(&problem);
    let by_key: HashMap<_, _> = problem.pods.iter().map(|p| (&p.key, p)).collect();
    let mut rng = Rng::new(seed ^ 0x5ca1e);
    let mut snapshot = Snapshot {
        nodepools: vec![object(pool())?],
        nodeclasses: vec![object(class())?],
        ..Snapshot::default()
    };
    let mut pods_left = Vec::new();
    let mut price_per_hour = 0.0;
    for (index, planned) in plan.nodeclaims.iter().enumerate() {
        let Some((node, claim, price)) = node_of(index, planned) else {
            continue;
        };
        let node_name = node["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        snapshot.nodes.push(object(node)?);
        snapshot.nodeclaims.push(object(claim)?);
        price_per_hour += price;
        for key in &planned.pods {
            let Some(pod) = by_key.get(key) else { continue };
            if rng.below(100) < removed_percent {
                continue;
            }
            snapshot.pods.push(object(pod_on(pod, &node_name))?);
            pods_left.push((*pod).clone());
        }
    }
    let types = problem
        .pools
        .first()
        .map(|p| p.instance_types.clone())
        .unwrap_or_default();
    Ok(Cluster {
        snapshot,
        types_of_class: HashMap::from([(POOL.to_string(), types)]),
        pods_left,
        price_per_hour,
    })
}
