//! Which nodes to disrupt now (pure), one method at a time in upstream's order: expiration,
//! repair (v1.15: before drift and consolidation, fixing a fault outranks a rebalance),
//! emptiness, drift, multi-node then single-node consolidation. Each method is a module of
//! its own over the candidates one pass finds; every node kept gets its reason (`jointer
//! explain node`, the controller's logs).

pub mod balanced;
pub mod budget;
pub mod candidates;
pub mod consolidation;
pub mod drift;
pub mod emptiness;
pub mod expiration;
pub mod price;
pub mod repair;
pub mod simulation;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::nodepool::DisruptionReason;
use crate::api::NodePool;
use crate::core::scheduling::{InstanceType, NodeClaimPlan};
use crate::core::state::Snapshot;
pub use consolidation::SPOT_TO_SPOT_MIN_TYPES;
pub use price::claim_price;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Expired,
    /// Node repair: an unhealthy node replaced (budget reason `Unhealthy`).
    Unhealthy,
    Empty,
    Drifted,
    Underutilized,
}

impl Method {
    pub fn as_str(&self) -> &'static str {
        match self {
            Method::Expired => "Expired",
            Method::Unhealthy => "Unhealthy",
            Method::Empty => "Empty",
            Method::Drifted => "Drifted",
            Method::Underutilized => "Underutilized",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Command {
    pub method: Method,
    /// NodeClaim names.
    pub candidates: Vec<String>,
    /// The nodes to launch first: for a cheaper replacement exactly one, with only instance
    /// types cheaper than the candidate at their worst-case price; for drift, whatever the
    /// candidate's pods need that the rest of the cluster cannot give.
    pub replacements: Vec<NodeClaimPlan>,
    /// USD/hour saved at the cheapest launch.
    pub saving: f64,
    /// The longest the candidates' drain may take (repair: the condition's termination grace
    /// period, pods with do-not-disrupt or blocking PDBs notwithstanding); `None`: the
    /// NodeClaim's own `terminationGracePeriod`.
    pub drain_bound: Option<Duration>,
    /// Why, in words, when the method's name does not say enough (repair: the condition).
    pub why: Option<String>,
}

impl Command {
    /// Same method, candidates and shape of replacement: still the same decision.
    pub fn same_as(&self, other: &Command) -> bool {
        self.method == other.method
            && self.candidates == other.candidates
            && self.replacements.len() == other.replacements.len()
    }
}

#[derive(Debug, Default)]
pub struct Decision {
    pub command: Option<Command>,
    /// (NodeClaim, why it is kept).
    pub kept: Vec<(String, String)>,
    /// The candidate single-node consolidation had not reached when its time ran out: give
    /// it to the next pass as [`Inputs::single_node_from`].
    pub single_node_stopped_at: Option<String>,
    /// How long each consolidation method searched, in the order they ran: what a slow
    /// decision spent its time on.
    pub searched: Vec<(&'static str, Duration)>,
}

/// What the loop knows besides the objects.
pub struct Inputs<'a> {
    pub snapshot: &'a Snapshot,
    pub types_of_class: &'a HashMap<String, Vec<Arc<InstanceType>>>,
    /// The same types per NodePool with the NodeOverlays applied ([`crate::core::state::types_of_pools`]):
    /// what the nodes there cost.
    pub types_of_pool: &'a crate::core::state::TypesOfPool,
    pub now: Timestamp,
    /// The scheduling policies the provisioner solves under, so a simulation agrees with it.
    pub policies: crate::core::scheduling::Policies,
    pub timeouts: ConsolidationTimeouts,
    /// A node initialized more recently than this is not a candidate (its pods are still
    /// arriving: it was launched for them).
    pub settle: Duration,
    /// Nodes and in-flight NodeClaims (by name) the provisioner just planned pending pods
    /// onto: not candidates, for they only look empty until kube-scheduler binds the pods.
    pub nominated: &'a HashSet<String>,
    /// Replace a spot node by a cheaper spot node (off by default, as upstream: a spot price is
    /// low because the pool is deep; moving to the cheapest shallow pool invites interruptions).
    pub spot_to_spot: bool,
    /// Where single-node consolidation ran out of time last pass ([`Decision::single_node_stopped_at`]):
    /// this pass starts there.
    pub single_node_from: Option<&'a str>,
}

/// How long each consolidation method may search in one pass (upstream: 1 and 3 minutes;
/// `MULTI_NODE_CONSOLIDATION_TIMEOUT`, `SINGLE_NODE_CONSOLIDATION_TIMEOUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsolidationTimeouts {
    pub multi_node: Duration,
    pub single_node: Duration,
}

impl Default for ConsolidationTimeouts {
    fn default() -> Self {
        ConsolidationTimeouts {
            multi_node: Duration::from_secs(60),
            single_node: Duration::from_secs(180),
        }
    }
}

/// How many more nodes each pool's budgets let go now, by reason.
pub struct Budgets<'a> {
    pool_nodes: &'a HashMap<String, (usize, usize)>,
    now: Timestamp,
}

impl Budgets<'_> {
    pub fn allowed(&self, pool: &NodePool, reason: DisruptionReason) -> usize {
        let (total, going) = self
            .pool_nodes
            .get(&pool.name_any())
            .copied()
            .unwrap_or_default();
        budget::allowed(pool, reason, total, going, self.now)
    }
}

pub fn decide(inputs: &Inputs) -> Decision {
    let mut found = candidates::find(inputs);
    let totals = pool_totals(inputs, &found);
    let pool_nodes = std::mem::take(&mut found.pool_nodes);
    let budgets = Budgets {
        pool_nodes: &pool_nodes,
        now: inputs.now,
    };
    let mut stopped_at = None;
    let mut searched = Vec::new();
    let command = expiration::command(&found.live, inputs.now)
        .or_else(|| repair::command(inputs, &mut found, &budgets))
        .or_else(|| emptiness::command(inputs, &mut found, &budgets))
        .or_else(|| drift::command(inputs, &mut found, &budgets))
        .or_else(|| {
            let mut kept = Vec::new();
            let allowed = consolidation::allowed(inputs, &mut found, &budgets, &totals);
            let world = simulation::World::default();
            let mut timed = |method: &'static str, search: &mut dyn FnMut() -> Option<Command>| {
                let started = std::time::Instant::now();
                let command = search();
                searched.push((method, started.elapsed()));
                command
            };
            let command = timed("multi-node", &mut || {
                consolidation::multi_node(inputs, &world, &allowed.together, &totals)
            })
            .or_else(|| {
                timed("single-node", &mut || {
                    let single = consolidation::single_node(
                        inputs,
                        &world,
                        &allowed.one_at_a_time,
                        &totals,
                        &mut kept,
                    );
                    stopped_at = single.stopped_at;
                    single.command
                })
            })
            // Only once single-node consolidation has tried every candidate.
            .or_else(|| match stopped_at {
                Some(_) => None,
                None => timed("repack", &mut || {
                    consolidation::repack(inputs, &world, &allowed, &totals, &mut kept)
                }),
            });
            found.kept.extend(kept);
            command
        });
    Decision {
        command,
        kept: found.kept,
        single_node_stopped_at: stopped_at,
        searched,
    }
}

/// `command`, decided a moment ago, on the cluster as it is now: the command to act on, or
/// why it no longer holds. A consolidation is simulated again over its own candidates; any
/// other method is decided again and must come to the same command, except emptiness, which
/// holds for those of its nodes the new decision empties too.
pub fn revalidate(inputs: &Inputs, command: &Command) -> Result<Command, String> {
    if command.method != Method::Underutilized {
        return match decide(inputs).command {
            Some(again) if command.method == Method::Empty && again.method == Method::Empty => {
                still_empty(inputs, command, &again)
            }
            Some(again) if again.same_as(command) => Ok(again),
            Some(other) => Err(format!(
                "the cluster now calls for {} of {}",
                other.method.as_str(),
                other.candidates.join(",")
            )),
            None => Err("no disruption is called for now".into()),
        };
    }
    let found = candidates::find(inputs);
    let totals = pool_totals(inputs, &found);
    let budgets = Budgets {
        pool_nodes: &found.pool_nodes,
        now: inputs.now,
    };
    consolidation::revalidate(inputs, &found, &budgets, &totals, command)
}

/// The nodes of an emptiness `command` that are in the new one (`again`) too: empty both
/// times and within the budgets now. During a scale-down more nodes empty every second, so
/// demanding the same set would put the command off pass after pass.
fn still_empty(inputs: &Inputs, command: &Command, again: &Command) -> Result<Command, String> {
    let candidates: Vec<String> = command
        .candidates
        .iter()
        .filter(|c| again.candidates.contains(c))
        .cloned()
        .collect();
    if candidates.is_empty() {
        return Err(format!(
            "none of its nodes is among those to delete as empty now ({})",
            again.candidates.join(",")
        ));
    }
    let saving = inputs
        .snapshot
        .nodeclaims
        .iter()
        .filter(|c| candidates.contains(&c.name_any()))
        .filter_map(|c| claim_price(c, inputs.types_of_pool))
        .sum();
    Ok(Command {
        candidates,
        saving,
        ..again.clone()
    })
}

/// Balanced pools score moves against their totals, taken once for the pass.
fn pool_totals(
    inputs: &Inputs,
    found: &candidates::Found,
) -> HashMap<String, balanced::PoolTotals> {
    balanced::pool_totals(
        found
            .live
            .iter()
            .map(|c| (c, claim_price(c.claim, inputs.types_of_pool))),
    )
}
