//! Where candidates' pods would go without their nodes (pure): the provisioner's own solver
//! over the rest of the cluster, so a decision never strands a pod.
//!
//! The cluster as the solver sees it is built once per pass ([`World`]) and each simulation
//! only leaves its candidates' nodes out: building it converts every bound pod and resolves
//! every pool's instance types, which at hundreds of nodes is most of a simulation's cost,
//! and consolidation simulates many candidate sets in one pass.

use std::cell::OnceCell;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use kube::ResourceExt;

use super::candidates::Candidate;
use super::Inputs;
use crate::api::conditions::{is_true, INITIALIZED};
use crate::core::buffer::{self, buffer_name};
use crate::core::scheduling::{
    solve_with, ExistingNode, NodeClaimPlan, Plan, PodOrder, Policies, PoolInput, Problem,
    Resources, SchedPod, Unschedulable,
};
use crate::core::state::{build, registered_nodes};

/// The cluster one pass simulates against, built at its first simulation (so every
/// simulation of a World must be given the same inputs).
#[derive(Default)]
pub struct World {
    built: OnceCell<Built>,
}

struct Built {
    /// The pools and the nodes, registered and in flight; no pods to place.
    base: Problem,
    /// The CapacityBuffer placeholders the cluster has room for now. They must find room in
    /// every simulation too (as upstream, buffer pods are pods that need a home), so a node
    /// that holds headroom is not taken away; placeholders the cluster has no room for even
    /// now do not stop consolidation.
    headroom: Vec<SchedPod>,
    /// The nodes and in-flight NodeClaims of NodeClaims not initialized yet.
    uninitialized: HashSet<String>,
    /// The most free room any node has, dimension by dimension.
    largest_room: Resources,
}

impl Built {
    fn new(inputs: &Inputs) -> Built {
        let mut base = build(inputs.snapshot, inputs.types_of_class).problem;
        let buffers = buffer::sched_pods(&inputs.snapshot.buffers);
        let housed: BTreeSet<_> = buffer::housed(registered_nodes(inputs.snapshot), buffers);
        let headroom = std::mem::take(&mut base.pods)
            .into_iter()
            .filter(|p| housed.contains(&p.key))
            .collect();
        let largest_room = base
            .existing
            .iter()
            .map(|n| n.allocatable - n.requested)
            .fold(Resources::ZERO, |a, free| a.max(&free));
        Built {
            base,
            headroom,
            uninitialized: uninitialized(inputs),
            largest_room,
        }
    }
}

/// The names a NodeClaim that is not initialized yet goes by in the problem: its own while
/// in flight, its node's once registered.
fn uninitialized(inputs: &Inputs) -> HashSet<String> {
    inputs
        .snapshot
        .nodeclaims
        .iter()
        .filter(|c| {
            let conditions = c.status.as_ref().map(|s| s.conditions.as_slice());
            !is_true(conditions.unwrap_or_default(), INITIALIZED)
        })
        .flat_map(|c| {
            let node = c.status.as_ref().and_then(|s| s.node_name.clone());
            std::iter::once(c.name_any()).chain(node)
        })
        .collect()
}

impl World {
    /// The pools every simulation of the pass solves over.
    pub fn pools(&self, inputs: &Inputs) -> &[Arc<PoolInput>] {
        &self.built(inputs).base.pools
    }

    /// The most free room any node has, dimension by dimension (each may be another node's):
    /// a pod that does not fit in it fits on no node there is.
    pub fn largest_room(&self, inputs: &Inputs) -> Resources {
        self.built(inputs).largest_room
    }

    fn built(&self, inputs: &Inputs) -> &Built {
        self.built.get_or_init(|| Built::new(inputs))
    }

    /// Where the candidates' pods would go with their nodes gone (seen as going: left out,
    /// their pods placed again), or why some pod could not go anywhere.
    pub fn reschedule(&self, inputs: &Inputs, cands: &[&Candidate]) -> Result<Plan, String> {
        self.reschedule_within(inputs, cands, None)
    }

    /// [`World::reschedule`] with new nodes only of types cheaper than `price` an hour
    /// ([`PoolInput::cheaper_than`]): what consolidation may launch for candidates that cost
    /// that much together.
    pub fn reschedule_cheaper(
        &self,
        inputs: &Inputs,
        cands: &[&Candidate],
        price: f64,
    ) -> Result<Plan, String> {
        self.reschedule_within(inputs, cands, Some(price))
    }

    fn reschedule_within(
        &self,
        inputs: &Inputs,
        cands: &[&Candidate],
        below: Option<f64>,
    ) -> Result<Plan, String> {
        let (built, mut problem) = self.without(inputs, cands);
        if let Some(price) = below {
            problem.pools = (problem.pools.iter())
                .map(|p| Arc::new(p.cheaper_than(price)))
                .collect();
        }
        let policies = Policies {
            keep_node_count: true,
            ..inputs.policies
        };
        let plan = solve_with(&problem, policies);
        if let Some(u) = plan.unschedulable.first() {
            return Err(match below {
                Some(price) => format!(
                    "no replacement is cheaper than ${price:.4}/h: {}",
                    could_not_move(u)
                ),
                None => could_not_move(u),
            });
        }
        // As upstream: a node still initializing may never become ready for pods (or not in
        // time), so no disruption counts on one; it waits until the node is initialized.
        if let Some((node, pods)) = plan
            .existing
            .iter()
            .find(|(node, pods)| !pods.is_empty() && built.uninitialized.contains(*node))
        {
            // `pods` is not empty: the search above asks for that.
            return Err(format!(
                "pod {} would move onto {node}, which is not initialized yet",
                pods[0]
            ));
        }
        Ok(plan)
    }

    /// Whether the candidates' pods still all find room on the remaining nodes (and on the
    /// `replacements`, once launched) when kube-scheduler binds them, not the plan: it sends
    /// each evicted pod to the least allocated node, so a pod can take the room the plan kept
    /// for another, which then waits for a new node — and the next pass finds that node
    /// underused again, a loop that deletes and buys a node a minute
    /// (aws/karpenter-provider-aws#3921). Checked in the order the drain hands them over,
    /// biggest first ([`PodOrder::KubeScheduler`]).
    pub fn binds_all(
        &self,
        inputs: &Inputs,
        cands: &[&Candidate],
        replacements: &[NodeClaimPlan],
    ) -> Result<(), String> {
        let (_, mut problem) = self.without(inputs, cands);
        for r in replacements {
            let launched = as_launched(r, &problem.pools)
                .ok_or_else(|| format!("replacement {} has no offering to launch", r.hostname))?;
            problem.existing.push(Arc::new(launched));
        }
        let problem = Problem {
            pools: Vec::new(),
            ..problem
        };
        let policies = Policies {
            order: PodOrder::KubeScheduler,
            ..inputs.policies
        };
        match solve_with(&problem, policies).unschedulable.first() {
            None => Ok(()),
            Some(u) => Err(format!(
                "its pods fit only as planned: bound by kube-scheduler (biggest first, as the drain evicts them, each on the least allocated node), {} would find no room and wait for a new node",
                whose(u)
            )),
        }
    }

    /// The cluster without the candidates' nodes, their pods (and the headroom) to place.
    fn without(&self, inputs: &Inputs, cands: &[&Candidate]) -> (&Built, Problem) {
        let built = self.built(inputs);
        let going: HashSet<String> = cands.iter().map(|c| c.node.name_any()).collect();
        let problem = Problem {
            pools: built.base.pools.clone(),
            existing: built
                .base
                .existing
                .iter()
                .filter(|n| !going.contains(&n.name))
                .cloned()
                .collect(),
            pods: cands
                .iter()
                .flat_map(|c| &c.pods)
                .map(|p| SchedPod::from_k8s(p, None))
                .chain(built.headroom.iter().cloned())
                .collect(),
        };
        (built, problem)
    }
}

/// A replacement as kube-scheduler will find it once launched: labelled as its cheapest
/// launch ([`crate::core::scheduling::problem::LaunchChoice::node_labels`]) and by its own single-valued requirements, its pool's
/// taints, and nothing on it but its DaemonSet pods.
fn as_launched(plan: &NodeClaimPlan, pools: &[Arc<PoolInput>]) -> Option<ExistingNode> {
    let pool = pools.iter().find(|p| p.name == plan.pool)?;
    let choice = plan.launch_choice()?;
    let mut node_labels = choice.node_labels(&pool.labels, &plan.hostname);
    for (key, r) in plan.requirements.iter() {
        if let Some(value) = r.single_value() {
            node_labels
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
    }
    Some(ExistingNode {
        name: plan.hostname.clone(),
        pool: Some(plan.pool.clone()),
        labels: node_labels,
        taints: pool.taints.clone(),
        allocatable: choice.instance_type.allocatable,
        requested: pool.daemon_overhead,
        pods: Vec::new(),
        label_requirements: Default::default(),
    })
}

fn could_not_move(u: &Unschedulable) -> String {
    let outcome = if buffer::is_virtual(&u.pod) {
        "would be lost"
    } else {
        "could not move"
    };
    format!("{} {outcome}: {}", whose(u), u.message())
}

/// The pod, or the CapacityBuffer whose placeholder it is.
fn whose(u: &Unschedulable) -> String {
    let (ns, name) = (&u.pod.namespace, &u.pod.name);
    if buffer::is_virtual(&u.pod) {
        let buffer = buffer_name(&u.pod);
        format!("the headroom of CapacityBuffer {ns}/{buffer}")
    } else {
        format!("pod {ns}/{name}")
    }
}

/// One simulation on a world of its own (the methods that simulate once or twice a pass).
pub fn reschedule(inputs: &Inputs, cands: &[&Candidate]) -> Result<Plan, String> {
    World::default().reschedule(inputs, cands)
}
