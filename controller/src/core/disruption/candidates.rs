//! Which NodeClaims disruption may consider now, and why each other one is kept (pure).
//! A candidate is launched, registered and initialized, not already going, not protected by
//! do-not-disrupt or a PodDisruptionBudget, settled, and past its pool's `consolidateAfter`;
//! drift and expiration look at wider sets, found in the same pass.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::drift::drifted;
use super::Inputs;
use crate::api::conditions::{is_true, INITIALIZED};
use crate::api::duration::NillableDuration;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::pod::Pod;
use crate::api::NodePool;
use crate::core::pods::{blocked_by_pdb, do_not_disrupt, pod_do_not_disrupt, since, to_be_moved};
use crate::core::state::node_is_going;

/// A NodeClaim with its Node, NodePool and the pods that would have to move.
pub struct Candidate<'a> {
    pub claim: &'a NodeClaim,
    pub node: &'a Node,
    pub pool: &'a NodePool,
    pub pods: Vec<&'a Pod>,
}

/// What one pass over the NodeClaims found.
#[derive(Default)]
pub struct Found<'a> {
    /// Initialized NodeClaims with a node and a pool, not going: what expiration looks at.
    pub live: Vec<Candidate<'a>>,
    /// Drifted, with why (they do not wait for consolidateAfter).
    pub drifted: Vec<(Candidate<'a>, String)>,
    /// Consolidatable now.
    pub consolidatable: Vec<Candidate<'a>>,
    /// Per pool: (nodes, nodes already on their way out) — the latter use up budgets.
    pub pool_nodes: HashMap<String, (usize, usize)>,
    /// (NodeClaim, why it is kept).
    pub kept: Vec<(String, String)>,
}

impl Found<'_> {
    pub fn keep(&mut self, claim: &NodeClaim, why: impl Into<String>) {
        self.kept.push((claim.name_any(), why.into()));
    }
}

pub fn find<'a>(inputs: &Inputs<'a>) -> Found<'a> {
    let snap = inputs.snapshot;
    let now = inputs.now;
    let mut found = Found::default();
    let nodes: HashMap<String, &Node> = snap
        .nodes
        .iter()
        .map(|n| (n.name_any(), n.as_ref()))
        .collect();
    let pools: HashMap<String, &NodePool> = snap
        .nodepools
        .iter()
        .map(|p| (p.name_any(), p.as_ref()))
        .collect();
    let mut pods_on: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for p in &snap.pods {
        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            if to_be_moved(p) {
                pods_on.entry(n).or_default().push(p);
            }
        }
    }
    for claim in &snap.nodeclaims {
        let Some(pool_name) = claim.labels().get(labels::NODEPOOL).cloned() else {
            continue;
        };
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| nodes.get(n).copied());
        let going = claim.metadata.deletion_timestamp.is_some()
            || node.is_some_and(|n| node_is_going(n, &snap.nodeclaims));
        let entry = found.pool_nodes.entry(pool_name.clone()).or_default();
        entry.0 += 1;
        if going {
            entry.1 += 1;
            continue;
        }
        let conditions = claim
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let (Some(node), true) = (node, is_true(conditions, INITIALIZED)) else {
            continue;
        };
        let Some(pool) = pools.get(&pool_name).copied() else {
            continue;
        };
        let pods = pods_on
            .get(node.name_any().as_str())
            .cloned()
            .unwrap_or_default();
        let candidate = || Candidate {
            claim,
            node,
            pool,
            pods: pods.clone(),
        };
        found.live.push(candidate());
        if do_not_disrupt(node.annotations().get(labels::DO_NOT_DISRUPT), None, now) {
            found.keep(claim, "the node is annotated karpenter.sh/do-not-disrupt");
            continue;
        }
        if let Some(p) = pods.iter().find(|p| pod_do_not_disrupt(p, now)) {
            let why = format!(
                "pod {}/{} is annotated karpenter.sh/do-not-disrupt",
                p.namespace().unwrap_or_default(),
                p.name_any()
            );
            found.keep(claim, why);
            continue;
        }
        if let Some(why) = blocked_by_pdb(&pods, &snap.pdbs) {
            found.keep(claim, why);
            continue;
        }
        let initialized_at = conditions
            .iter()
            .find(|c| c.type_ == INITIALIZED)
            .map(|c| c.last_transition_time.0)
            .unwrap_or(now);
        let nominated = [claim.name_any(), node.name_any()]
            .iter()
            .any(|n| inputs.nominated.contains(n));
        if nominated {
            found.keep(
                claim,
                "pending pods are planned onto it (nominated): they are not bound yet",
            );
            continue;
        }
        if since(now, initialized_at) < inputs.settle {
            found.keep(
                claim,
                "initialized moments ago: its pods are still arriving",
            );
            continue;
        }
        let class = snap
            .nodeclasses
            .iter()
            .find(|k| k.name_any() == claim.spec.node_class_ref.name)
            .map(|k| k.as_ref());
        if let Some(why) = drifted(claim, pool, class) {
            found.drifted.push((candidate(), why));
        }
        // A static pool keeps exactly `replicas` nodes: emptiness and consolidation do not
        // apply to it (drift and expiration still replace its nodes one for one).
        if let Some(replicas) = pool.spec.replicas {
            found.keep(
                claim,
                format!("its NodePool is static (replicas: {replicas}): it is not consolidated"),
            );
            continue;
        }
        let NillableDuration::After(after) = pool.spec.disruption.consolidate_after else {
            found.keep(claim, "its NodePool's consolidateAfter is Never");
            continue;
        };
        let last_event = claim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.as_ref())
            .map(|t| t.0)
            .unwrap_or(initialized_at);
        let quiet = since(now, last_event);
        if quiet < after {
            let why = format!(
                "not consolidatable for another {} s (consolidateAfter {} s since the last pod event)",
                (after - quiet).as_secs(),
                after.as_secs()
            );
            found.keep(claim, why);
            continue;
        }
        found.consolidatable.push(candidate());
    }
    found
}
