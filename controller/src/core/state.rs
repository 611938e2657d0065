//! The cluster as the solver sees it (pure): a snapshot of the watched objects, turned into
//! the scheduling problem — pending pods, NodePools with the instance types their EC2NodeClass
//! can launch, existing nodes and NodeClaims still in flight. The provisioner, disruption and
//! `jointer explain` build the same problem from the same objects.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;

use crate::api::conditions::{class_not_ready, is_true, INITIALIZED};
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::labels;
use crate::api::labels::{DISRUPTED_TAINT, NOT_READY_TAINT, UNREACHABLE_TAINT, UNREGISTERED_TAINT};
use crate::api::nodeclaim::NodeClaim;
use crate::api::pod::{Pod, PodSpec};
use crate::api::taint::{Taint, TaintEffect};
use crate::api::{NodeOverlay, NodePool, Quantity};
use crate::core::overlay::{Overlays, PoolTypes};
use crate::core::pods::{is_provisionable, is_terminal, must_evict};
use crate::core::scheduling::pool_input::pool_input;
use crate::core::scheduling::{
    ExistingNode, InstanceType, PoolInput, Problem, Requirements, Resources, SchedPod,
};

/// The objects a provisioning decision reads.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub pods: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<Node>>,
    pub nodeclaims: Vec<Arc<NodeClaim>>,
    pub nodepools: Vec<Arc<NodePool>>,
    pub nodeclasses: Vec<Arc<EC2NodeClass>>,
    pub daemonsets: Vec<Arc<DaemonSet>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    pub nodeoverlays: Vec<Arc<NodeOverlay>>,
    /// CapacityBuffers and what they name: their chunks are placed as pending pods.
    pub buffers: crate::core::buffer::Sources,
}

/// Each NodePool's instance types by pool name, as every decision sees them.
pub type TypesOfPool = HashMap<String, Vec<Arc<InstanceType>>>;

/// Each NodePool's instance types as the provisioner, disruption, `explain` and `status` see
/// them: its EC2NodeClass's (`types_of_class` holds each Ready class's), with the cluster's
/// NodeOverlays applied; and what became of each overlay. The one place overlays reach
/// instance types, so a discount is priced the same way by every decision.
pub fn types_of_pools(
    snapshot: &Snapshot,
    types_of_class: &HashMap<String, Vec<Arc<InstanceType>>>,
) -> (TypesOfPool, Overlays) {
    let live: Vec<(&NodePool, &[Arc<InstanceType>])> = snapshot
        .nodepools
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let types = types_of_class.get(&p.spec.template.spec.node_class_ref.name)?;
            Some((p.as_ref(), types.as_slice()))
        })
        .collect();
    let pools: Vec<PoolTypes> = live
        .iter()
        .map(|(pool, types)| PoolTypes { pool, types })
        .collect();
    let overlays = Overlays::resolve(&snapshot.nodeoverlays, &pools);
    let by_pool = live
        .iter()
        .map(|(pool, types)| (pool.name_any(), overlays.apply(pool, types)))
        .collect();
    (by_pool, overlays)
}

/// A NodePool left out of this decision, and why (so pending pods can be told).
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedPool {
    pub pool: String,
    pub why: String,
}

pub struct Built {
    pub problem: Problem,
    pub skipped: Vec<SkippedPool>,
}

/// Whether a node is on its way out: being deleted, its NodeClaim being deleted, or tainted
/// for disruption. Its pods are placed again (on a replacement launched while it drains).
pub fn node_is_going(node: &Node, claims: &[Arc<NodeClaim>]) -> bool {
    let name = node.name_any();
    node.metadata.deletion_timestamp.is_some()
        || node
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .any(|t| t.key == DISRUPTED_TAINT)
        || claims.iter().any(|c| {
            c.metadata.deletion_timestamp.is_some()
                && c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str())
        })
}

/// The pods the provisioner must find room for: those kube-scheduler could not place, and
/// those on nodes that are going.
pub fn pods_to_place(snapshot: &Snapshot) -> Vec<Arc<Pod>> {
    let going: std::collections::HashSet<String> = snapshot
        .nodes
        .iter()
        .filter(|n| node_is_going(n, &snapshot.nodeclaims))
        .map(|n| n.name_any())
        .collect();
    snapshot
        .pods
        .iter()
        .filter(|p| {
            is_provisionable(p)
                || (p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| going.contains(n))
                    && p.metadata.deletion_timestamp.is_none()
                    && must_evict(p))
        })
        .cloned()
        .collect()
}

fn daemon_pod(ds: &DaemonSet) -> Option<SchedPod> {
    let spec = &ds.spec;
    let mut metadata = spec.template.metadata.clone().unwrap_or_default();
    metadata.namespace = ds.namespace();
    metadata.name = Some(format!("{}-daemon", ds.name_any()));
    let pod = Pod {
        metadata,
        spec: spec.template.spec.as_ref().map(PodSpec::from),
        status: None,
    };
    Some(SchedPod::from_k8s(&pod, None))
}

/// A Kubernetes resource list (a node's allocatable) as the scheduling model's vector.
pub fn resources(
    list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Resources {
    let parsed: BTreeMap<String, Quantity> = list
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.0.parse::<Quantity>().ok()?)))
        .collect();
    Resources::from_quantities(&parsed).0
}

/// The instance types a NodeClaim may still launch as, among `types`.
fn claim_types<'a>(
    claim: &NodeClaim,
    types: &'a [Arc<InstanceType>],
) -> Vec<&'a Arc<InstanceType>> {
    let req = Requirements::from_api(&claim.spec.requirements);
    types
        .iter()
        .filter(|t| t.requirements.conflict(&req).is_none())
        .collect()
}

/// Capacity counted against the pool's limits: what the instance has, or while it is not
/// launched yet the largest type it might become (pessimistic, so limits are never passed).
fn claim_capacity(claim: &NodeClaim, types: &[Arc<InstanceType>]) -> Resources {
    let status = claim.status.clone().unwrap_or_default();
    if !status.capacity.is_empty() {
        return Resources::from_quantities(&status.capacity).0;
    }
    claim_types(claim, types)
        .iter()
        .fold(Resources::ZERO, |acc, t| acc.max(&t.capacity))
}

/// What pods can use on a NodeClaim not yet a Node: its allocatable when launched, else the
/// smallest type it might become.
fn claim_allocatable(claim: &NodeClaim, types: &[Arc<InstanceType>]) -> Resources {
    let status = claim.status.clone().unwrap_or_default();
    if !status.allocatable.is_empty() {
        return Resources::from_quantities(&status.allocatable).0;
    }
    let candidates = claim_types(claim, types);
    let mut smallest: Option<Resources> = None;
    for t in candidates {
        smallest = Some(match smallest {
            None => t.allocatable,
            Some(s) => Resources {
                cpu: s.cpu.min(t.allocatable.cpu),
                memory: s.memory.min(t.allocatable.memory),
                pods: s.pods.min(t.allocatable.pods),
                ephemeral_storage: s.ephemeral_storage.min(t.allocatable.ephemeral_storage),
                nvidia_gpu: s.nvidia_gpu.min(t.allocatable.nvidia_gpu),
                amd_gpu: s.amd_gpu.min(t.allocatable.amd_gpu),
                neuron: s.neuron.min(t.allocatable.neuron),
            },
        });
    }
    smallest.unwrap_or(Resources::ZERO)
}

fn node_reports_ready(node: &Node) -> bool {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn node_taints(node: &Node, claim: Option<&NodeClaim>) -> Vec<Taint> {
    let startup: Vec<&str> = claim
        .map(|c| {
            c.spec
                .startup_taints
                .iter()
                .map(|t| t.key.as_str())
                .collect()
        })
        .unwrap_or_default();
    // The node lifecycle controller's NoSchedule taints come off once the node reports Ready,
    // some moments after it does; a NodeClaim not initialized yet is expected to get there (as
    // upstream's ephemeral taints). Counting them would plan a second node for pods that are
    // about to be bound to this one.
    let initialized = claim.is_some_and(|c| {
        let conditions = c.status.as_ref().map(|s| s.conditions.as_slice());
        is_true(conditions.unwrap_or_default(), INITIALIZED)
    });
    let passing = node_reports_ready(node) || (claim.is_some() && !initialized);
    let ephemeral = |t: &&k8s_openapi::api::core::v1::Taint| {
        passing
            && t.effect == "NoSchedule"
            && (t.key == NOT_READY_TAINT || t.key == UNREACHABLE_TAINT)
    };
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        // Taints that go away once the node is up do not keep pods off it for good.
        .filter(|t| !startup.contains(&t.key.as_str()) && !ephemeral(t))
        .filter_map(|t| {
            let effect = match t.effect.as_str() {
                "NoSchedule" => TaintEffect::NoSchedule,
                "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
                "NoExecute" => TaintEffect::NoExecute,
                _ => return None,
            };
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect,
                time_added: None,
            })
        })
        .collect()
}

/// Builds the solver's problem. `types_of_class` holds each Ready class's instance types.
pub fn build(
    snapshot: &Snapshot,
    types_of_class: &HashMap<String, Vec<Arc<InstanceType>>>,
) -> Built {
    let (pools, skipped) = pool_inputs(snapshot, types_of_class);
    let existing: Vec<Arc<ExistingNode>> = registered_nodes(snapshot)
        .into_iter()
        .chain(in_flight(snapshot, &pools))
        .map(Arc::new)
        .collect();
    // Pods may land on a static pool's nodes, but never make it grow.
    let pools = pools
        .into_iter()
        .filter(|p| p.replicas.is_none())
        .map(Arc::new)
        .collect();
    let mut pods: Vec<SchedPod> = pods_to_place(snapshot)
        .iter()
        .map(|p| SchedPod::from_k8s(p, None))
        .collect();
    // Buffers' placeholders: room is kept for them as for pending pods.
    pods.extend(crate::core::buffer::sched_pods(&snapshot.buffers));
    Built {
        problem: Problem {
            pools,
            existing,
            pods,
        },
        skipped,
    }
}

/// The static NodePools (`spec.replicas`) whose class is Ready, resolved like the others.
pub fn static_pools(
    snapshot: &Snapshot,
    types_of_class: &HashMap<String, Vec<Arc<InstanceType>>>,
) -> Vec<PoolInput> {
    let (pools, _) = pool_inputs(snapshot, types_of_class);
    pools.into_iter().filter(|p| p.replicas.is_some()).collect()
}

/// Each NodePool whose class is Ready, with what its NodeClaims already use (against its
/// limits); the others with why they are left out.
fn pool_inputs(
    snapshot: &Snapshot,
    types_of_class: &HashMap<String, Vec<Arc<InstanceType>>>,
) -> (Vec<PoolInput>, Vec<SkippedPool>) {
    let daemons: Vec<SchedPod> = snapshot
        .daemonsets
        .iter()
        .filter_map(|d| daemon_pod(d))
        .collect();
    let (types_of_pool, _) = types_of_pools(snapshot, types_of_class);
    let mut skipped = Vec::new();
    let mut pools: Vec<PoolInput> = Vec::new();
    for pool in &snapshot.nodepools {
        if pool.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pool.name_any();
        let class_name = &pool.spec.template.spec.node_class_ref.name;
        let Some(class) = snapshot
            .nodeclasses
            .iter()
            .find(|c| &c.name_any() == class_name)
        else {
            skipped.push(SkippedPool {
                pool: name,
                why: format!("its EC2NodeClass {class_name} does not exist"),
            });
            continue;
        };
        if let Some(why) = class_not_ready(class) {
            skipped.push(SkippedPool {
                pool: name,
                why: format!("its EC2NodeClass {class_name} is not Ready: {why}"),
            });
            continue;
        }
        let types = types_of_pool.get(&name).cloned().unwrap_or_default();
        let mut input = pool_input(pool, types, &daemons);
        for claim in snapshot.nodeclaims.iter().filter(|c| {
            c.labels().get(labels::NODEPOOL) == Some(&name)
                && c.metadata.deletion_timestamp.is_none()
        }) {
            input.in_use += claim_capacity(claim, &input.instance_types);
            input.nodes_in_use += 1;
        }
        pools.push(input);
    }
    (pools, skipped)
}

/// Whether a NodeClaim has registered the Node: until then it carries the unregistered taint
/// the node's user data gave it, and kube-scheduler keeps pods off it.
fn is_registered(node: &Node) -> bool {
    !node
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .any(|t| t.key == UNREGISTERED_TAINT)
}

/// The Nodes pods can still land on (registered, not cordoned, not going), with the pods
/// bound to them. A Node that joined but is not registered yet is room its NodeClaim stands
/// for (in flight); one that no NodeClaim will register (its NodeClaim went while it joined)
/// never takes a pod, so counting it as room would leave pods pending for good.
pub fn registered_nodes(snapshot: &Snapshot) -> Vec<ExistingNode> {
    let claim_of_node: HashMap<&str, &NodeClaim> = snapshot
        .nodeclaims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c.as_ref())))
        .collect();
    let mut bound: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for pod in &snapshot.pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            if !is_terminal(pod) {
                bound.entry(node).or_default().push(pod);
            }
        }
    }
    let mut existing = Vec::new();
    for node in &snapshot.nodes {
        let name = node.name_any();
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        if cordoned || !is_registered(node) || node_is_going(node, &snapshot.nodeclaims) {
            continue;
        }
        let pods: Vec<SchedPod> = bound
            .get(name.as_str())
            .into_iter()
            .flatten()
            .map(|p| SchedPod::bound(p))
            .collect();
        let requested = pods.iter().fold(Resources::ZERO, |acc, p| acc + p.requests);
        let labels = node.labels().clone();
        existing.push(ExistingNode {
            pool: labels.get(labels::NODEPOOL).cloned(),
            taints: node_taints(node, claim_of_node.get(name.as_str()).copied()),
            allocatable: node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .map(resources)
                .unwrap_or(Resources::ZERO),
            requested,
            pods,
            labels,
            name,
            label_requirements: Default::default(),
        });
    }
    existing
}

/// NodeClaims not yet a Node: room the provisioner has already bought, so pods are not
/// planned twice (labelled by their single-valued requirements, as the Node will be).
fn in_flight(snapshot: &Snapshot, pools: &[PoolInput]) -> Vec<ExistingNode> {
    let registered_nodes: Vec<&Node> = snapshot
        .nodes
        .iter()
        .map(Arc::as_ref)
        .filter(|n| is_registered(n))
        .collect();
    let node_names: std::collections::HashSet<String> =
        registered_nodes.iter().map(|n| n.name_any()).collect();
    // A Node registration has untainted but whose NodeClaim status does not name yet.
    let provider_ids: std::collections::HashSet<&str> = registered_nodes
        .iter()
        .filter_map(|n| n.spec.as_ref()?.provider_id.as_deref())
        .collect();
    let mut existing = Vec::new();
    for claim in &snapshot.nodeclaims {
        let status = claim.status.as_ref();
        let registered = status
            .and_then(|s| s.node_name.as_ref())
            .is_some_and(|n| node_names.contains(n))
            || status
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|id| provider_ids.contains(id));
        if registered || claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let pool = claim.labels().get(labels::NODEPOOL).cloned();
        let types = pools
            .iter()
            .find(|p| Some(&p.name) == pool.as_ref())
            .map(|p| p.instance_types.clone())
            .unwrap_or_default();
        let mut node_labels = claim.labels().clone();
        for (k, r) in Requirements::from_api(&claim.spec.requirements).iter() {
            if let Some(v) = r.single_value() {
                node_labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        existing.push(ExistingNode {
            name: claim.name_any(),
            pool,
            labels: node_labels,
            taints: claim.spec.taints.clone(),
            allocatable: claim_allocatable(claim, &types),
            requested: Resources::ZERO,
            pods: Vec::new(),
            label_requirements: Default::default(),
        });
    }
    existing
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, provider_id: &str, unregistered: bool) -> Arc<Node> {
        let taints = if unregistered {
            json!([{"key": UNREGISTERED_TAINT, "effect": "NoExecute"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {labels::NODEPOOL: "default"}},
                "spec": {"providerID": provider_id, "taints": taints},
                "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
            }))
            .expect("node"),
        )
    }

    fn claim(name: &str, provider_id: &str, node_name: Option<&str>) -> Arc<NodeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "labels": {labels::NODEPOOL: "default"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [],
                },
                "status": {"providerID": provider_id, "nodeName": node_name},
            }))
            .expect("nodeclaim"),
        )
    }

    fn room(snapshot: &Snapshot) -> Vec<String> {
        build(snapshot, &HashMap::new())
            .problem
            .existing
            .iter()
            .map(|e| e.name.clone())
            .collect()
    }

    fn taints_of(ready: bool, initialized: bool) -> Vec<String> {
        let mut n = (*node("n1", "aws:///us-east-1a/i-1", false)).clone();
        n.spec.as_mut().expect("spec").taints = Some(vec![k8s_openapi::api::core::v1::Taint {
            key: NOT_READY_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        let status = if ready { "True" } else { "False" };
        n.status.as_mut().expect("status").conditions =
            Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: status.into(),
                ..Default::default()
            }]);
        let mut c = (*claim("c1", "aws:///us-east-1a/i-1", Some("n1"))).clone();
        if initialized {
            let when = "2026-12-06T00:00:00Z";
            c.status.as_mut().expect("status").conditions = serde_json::from_value(json!([
                {"type": INITIALIZED, "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": when}
            ]))
            .expect("conditions");
        }
        let snap = Snapshot {
            nodes: vec![Arc::new(n)],
            nodeclaims: vec![Arc::new(c)],
            ..Snapshot::default()
        };
        let problem = build(&snap, &HashMap::new()).problem;
        problem.existing[0]
            .taints
            .iter()
            .map(|t| t.key.clone())
            .collect()
    }

    #[test]
    fn the_not_ready_taint_keeps_pods_off_only_a_node_that_is_not_coming_up() {
        // Ready, the taint not yet removed by the node lifecycle controller: room.
        assert!(taints_of(true, true).is_empty());
        // Registered, not initialized yet: expected to come up, room (as upstream).
        assert!(taints_of(false, false).is_empty());
        // Initialized once and now not Ready: the taint stands.
        assert_eq!(taints_of(false, true), [NOT_READY_TAINT]);
    }

    #[test]
    fn a_node_no_nodeclaim_will_register_is_no_room() {
        let snap = Snapshot {
            nodes: vec![node("orphan", "aws:///us-east-1a/i-1", true)],
            ..Snapshot::default()
        };
        assert!(room(&snap).is_empty(), "{:?}", room(&snap));
    }

    #[test]
    fn a_joined_node_not_yet_registered_is_its_nodeclaims_room_once() {
        let snap = Snapshot {
            nodes: vec![node("n1", "aws:///us-east-1a/i-1", true)],
            nodeclaims: vec![claim("c1", "aws:///us-east-1a/i-1", None)],
            ..Snapshot::default()
        };
        assert_eq!(room(&snap), ["c1"]);
    }

    #[test]
    fn a_registered_node_its_nodeclaim_does_not_name_yet_is_counted_once() {
        let snap = Snapshot {
            nodes: vec![node("n1", "aws:///us-east-1a/i-1", false)],
            nodeclaims: vec![claim("c1", "aws:///us-east-1a/i-1", None)],
            ..Snapshot::default()
        };
        assert_eq!(room(&snap), ["n1"]);
    }
}
