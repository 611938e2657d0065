//! `jointer status`: what each NodePool runs now and costs per hour, how many of its nodes the
//! disruption budgets let go right now, and whether each EC2NodeClass is Ready — from the
//! cluster's objects and the region's prices, the same ones the controller decides with; and
//! each CapacityBuffer with its chunks and whether its headroom exists now.

use std::collections::BTreeMap;

use anyhow::Result;
use jointer_controller::api::conditions::class_not_ready;
use jointer_controller::api::labels::NODEPOOL;
use jointer_controller::api::nodepool::DisruptionReason;
use jointer_controller::core::buffer_status::{states, BufferSummary};
use jointer_controller::core::disruption::budget;
use jointer_controller::core::disruption::claim_price;
use jointer_controller::core::nodeclaim::launched_capacity;
use jointer_controller::core::state::{registered_nodes, types_of_pools, Snapshot};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use crate::bootstrap::Context;
use crate::cluster::{cluster_state, TypesOfClass};

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    pub name: String,
    pub node_class: String,
    /// NodeClaims, launching ones included.
    pub nodes: usize,
    /// Of those, on their way out (deleting).
    pub disrupting: usize,
    /// Capacity of the launched nodes: `cpu` (cores), `memory` (bytes).
    pub cpu: f64,
    pub memory: i64,
    /// USD per hour of the nodes whose price is known.
    pub cost_per_hour: f64,
    /// Nodes without a price yet (not launched, or their class is not Ready).
    pub unpriced: usize,
    /// How many more nodes the budgets let be disrupted now, per reason.
    pub disruptable_now: BTreeMap<String, usize>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClassStatus {
    pub name: String,
    pub ready: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub nodepools: Vec<PoolStatus>,
    pub node_classes: Vec<ClassStatus>,
    /// CapacityBuffers: chunks, how many have room now, satisfied.
    pub capacity_buffers: Vec<BufferSummary>,
    pub cost_per_hour: f64,
}

const REASONS: [(DisruptionReason, &str); 4] = [
    (DisruptionReason::Underutilized, "underutilized"),
    (DisruptionReason::Empty, "empty"),
    (DisruptionReason::Drifted, "drifted"),
    (DisruptionReason::Unhealthy, "unhealthy"),
];

/// The summary of `snap` at `now` (pure).
pub fn summarize(snap: &Snapshot, types: &TypesOfClass, now: Timestamp) -> Status {
    // What each node costs as the controller prices it: NodeOverlays applied.
    let (types_of_pool, _) = types_of_pools(snap, types);
    let mut nodepools = Vec::new();
    for pool in &snap.nodepools {
        let name = pool.name_any();
        let claims: Vec<_> = snap
            .nodeclaims
            .iter()
            .filter(|c| c.labels().get(NODEPOOL) == Some(&name))
            .collect();
        let disrupting = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
            .count();
        let capacity = launched_capacity(claims.iter().map(|c| c.as_ref()));
        let prices: Vec<Option<f64>> = claims
            .iter()
            .map(|c| claim_price(c, &types_of_pool))
            .collect();
        nodepools.push(PoolStatus {
            node_class: pool.spec.template.spec.node_class_ref.name.clone(),
            nodes: claims.len(),
            disrupting,
            cpu: capacity.cpu as f64 / 1000.0,
            memory: capacity.memory,
            cost_per_hour: prices.iter().flatten().sum(),
            unpriced: prices.iter().filter(|p| p.is_none()).count(),
            disruptable_now: REASONS
                .iter()
                .map(|(reason, key)| {
                    let n = budget::allowed(pool, *reason, claims.len(), disrupting, now);
                    (key.to_string(), n)
                })
                .collect(),
            name,
        });
    }
    let node_classes = snap
        .nodeclasses
        .iter()
        .map(|c| {
            let why = class_not_ready(c);
            ClassStatus {
                name: c.name_any(),
                ready: why.is_none(),
                message: why,
            }
        })
        .collect();
    let cost_per_hour = nodepools.iter().map(|p| p.cost_per_hour).sum();
    let capacity_buffers = states(&snap.buffers, registered_nodes(snap))
        .iter()
        .map(BufferSummary::from)
        .collect();
    Status {
        nodepools,
        node_classes,
        capacity_buffers,
        cost_per_hour,
    }
}

pub async fn status(ctx: &Context) -> Result<Status> {
    let (snap, types) = cluster_state(&ctx.kube, ctx.eks()).await?;
    Ok(summarize(&snap, &types, Timestamp::now()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::api_versions::NODEPOOL_V1;

    use jointer_controller::api::nodeclaim::NodeClaim;
    use jointer_controller::api::NodePool;
    use jointer_controller::core::scheduling::{
        CapacityType, InstanceType, Offering, Requirements, Resources,
    };

    fn pool(name: &str, budgets: serde_json::Value) -> Arc<NodePool> {
        serde_json::from_value::<NodePool>(serde_json::json!({
            "apiVersion": NODEPOOL_V1, "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
                     "disruption": {"budgets": budgets}}
        }))
        .unwrap()
        .into()
    }

    fn claim(
        name: &str,
        pool: &str,
        instance_type: Option<&str>,
        deleting: bool,
    ) -> Arc<NodeClaim> {
        let mut labels = serde_json::json!({NODEPOOL: pool});
        let mut status = serde_json::json!({});
        if let Some(t) = instance_type {
            labels["node.kubernetes.io/instance-type"] = t.into();
            labels["topology.kubernetes.io/zone"] = "us-east-1a".into();
            labels["karpenter.sh/capacity-type"] = "on-demand".into();
            status = serde_json::json!({"capacity": {"cpu": "2", "memory": "8Gi"}});
        }
        let mut c: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": NODEPOOL_V1, "kind": "NodeClaim",
            "metadata": {"name": name, "labels": labels},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": status,
        }))
        .unwrap();
        if deleting {
            c.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
            );
        }
        c.into()
    }

    #[test]
    fn cost_capacity_and_what_the_budgets_allow_now_per_pool() {
        let snap = Snapshot {
            nodepools: vec![
                pool("general", serde_json::json!([{"nodes": "50%"}])),
                pool("frozen", serde_json::json!([{"nodes": "0"}])),
            ],
            nodeclaims: vec![
                claim("a", "general", Some("m5.large"), false),
                claim("b", "general", Some("m5.large"), true),
                claim("c", "general", None, false),
                claim("d", "frozen", Some("m5.large"), false),
            ],
            ..Default::default()
        };
        let m5 = Arc::new(InstanceType::new(
            "m5.large",
            Requirements::new(),
            Resources::cpu_memory(2000, 8 << 30),
            Resources::ZERO,
            vec![Offering {
                zone: "us-east-1a".into(),
                capacity_type: CapacityType::OnDemand,
                price: 0.096,
                available: true,
            }],
        ));
        let types: TypesOfClass = [("default".to_string(), vec![m5])].into();
        let s = summarize(&snap, &types, Timestamp::now());
        let general = &s.nodepools[0];
        assert_eq!(
            (general.nodes, general.disrupting, general.unpriced),
            (3, 1, 1)
        );
        assert!((general.cost_per_hour - 0.192).abs() < 1e-9);
        assert_eq!(general.cpu, 4.0);
        assert_eq!(general.memory, 16 << 30);
        // 50 % of 3 rounds up to 2; one is already going.
        assert_eq!(general.disruptable_now["underutilized"], 1);
        assert_eq!(general.disruptable_now["unhealthy"], 1);
        assert!(s.capacity_buffers.is_empty());
        let frozen = &s.nodepools[1];
        assert_eq!(frozen.disruptable_now["empty"], 0);
        assert!((s.cost_per_hour - 0.288).abs() < 1e-9);
    }

    #[test]
    fn each_buffer_with_its_chunks_and_whether_the_headroom_exists() {
        let node = |cpu: &str| -> Arc<k8s_openapi::api::core::v1::Node> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1"},
                "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}))
                .unwrap(),
            )
        };
        let mut snap = Snapshot::default();
        snap.buffers.buffers = vec![Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
                "metadata": {"name": "warm", "namespace": "team"},
                "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 2}}))
            .unwrap(),
        )];
        snap.buffers.pod_templates = vec![Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "chunk", "namespace": "team"},
                "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}))
            .unwrap(),
        )];
        snap.nodes = vec![node("1500m")];
        let s = summarize(&snap, &TypesOfClass::new(), Timestamp::now());
        let json = serde_json::to_value(&s.capacity_buffers).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"namespace": "team", "name": "warm", "replicas": 2, "ready": 1, "satisfied": false}])
        );
        snap.nodes = vec![node("2")];
        let s = summarize(&snap, &TypesOfClass::new(), Timestamp::now());
        assert!(s.capacity_buffers[0].satisfied);
    }
}
