//! Where candidates' pods would go without their nodes (pure): the provisioner's own solver
//! over the rest of the cluster, so a decision never strands a pod.
//!
//! The cluster as the solver sees it is built once per pass ([`World`]) and each simulation
//! only leaves its candidates' nodes out: building it converts every bound pod and resolves
//! every pool's instance types, which at hundreds of nodes is most of a simulation's cost,
//! and consolidation simulates many candidate sets in one pass.

use std::cell::OnceCell;
use std::collections::{BTreeSet, HashSet};

use kube::ResourceExt;

use super::candidates::Candidate;
use super::Inputs;
use crate::api::conditions::{is_true, INITIALIZED};
use crate::core::buffer::{self, buffer_name};
use crate::core::scheduling::{solve_with, Plan, Policies, Problem, SchedPod};
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
}

impl Built {
    fn new(inputs: &Inputs) -> Built {
        let mut base = build(inputs.snapshot, inputs.types_of_class).problem;
        // Made once here, so each simulation's copy of the pools carries them.
        for pool in &base.pools {
            pool.admitted();
        }
        let buffers = buffer::sched_pods(&inputs.snapshot.buffers);
        let housed: BTreeSet<_> = buffer::housed(registered_nodes(inputs.snapshot), buffers);
        let headroom = std::mem::take(&mut base.pods)
            .into_iter()
            .filter(|p| housed.contains(&p.key))
            .collect();
        Built {
            base,
            headroom,
            uninitialized: uninitialized(inputs),
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
    /// Where the candidates' pods would go with their nodes gone (seen as going: left out,
    /// their pods placed again), or why some pod could not go anywhere.
    pub fn reschedule(&self, inputs: &Inputs, cands: &[&Candidate]) -> Result<Plan, String> {
        let Built {
            base,
            headroom,
            uninitialized,
        } = self.built.get_or_init(|| Built::new(inputs));
        let going: HashSet<String> = cands.iter().map(|c| c.node.name_any()).collect();
        let problem = Problem {
            pools: base.pools.clone(),
            existing: base
                .existing
                .iter()
                .filter(|n| !going.contains(&n.name))
                .cloned()
                .collect(),
            pods: cands
                .iter()
                .flat_map(|c| &c.pods)
                .map(|p| SchedPod::from_k8s(p, None))
                .chain(headroom.iter().cloned())
                .collect(),
        };
        let policies = Policies {
            keep_node_count: true,
            ..inputs.policies
        };
        let plan = solve_with(&problem, policies);
        if let Some(u) = plan.unschedulable.first() {
            if buffer::is_virtual(&u.pod) {
                return Err(format!(
                    "the headroom of CapacityBuffer {}/{} would be lost: {}",
                    u.pod.namespace,
                    buffer_name(&u.pod),
                    u.message()
                ));
            }
            return Err(format!(
                "pod {}/{} could not move: {}",
                u.pod.namespace,
                u.pod.name,
                u.message()
            ));
        }
        // As upstream: a node still initializing may never become ready for pods (or not in
        // time), so no disruption counts on one; it waits until the node is initialized.
        if let Some((node, pods)) = plan
            .existing
            .iter()
            .find(|(node, pods)| !pods.is_empty() && uninitialized.contains(*node))
        {
            // `pods` is not empty: the search above asks for that.
            return Err(format!(
                "pod {} would move onto {node}, which is not initialized yet",
                pods[0]
            ));
        }
        Ok(plan)
    }
}

/// One simulation on a world of its own (the methods that simulate once or twice a pass).
pub fn reschedule(inputs: &Inputs, cands: &[&Candidate]) -> Result<Plan, String> {
    World::default().reschedule(inputs, cands)
}
