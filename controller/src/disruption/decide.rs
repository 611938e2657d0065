//! Which nodes to disrupt now (pure): expired nodes, then empty ones, then one underutilized
//! node whose pods fit elsewhere (delete) or on one strictly cheaper node (replace). The
//! simulation is the provisioner's own solver over the cluster without the candidate, so a
//! decision never strands a pod. Every node kept gets its reason (`jointer explain node`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::budget;
use super::drift::drifted;
use crate::api::duration::NillableDuration;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::{ConsolidationPolicy, DisruptionReason};
use crate::api::NodePool;
use crate::cloud::aws::instance_types::RESERVED_PRICE_FACTOR;
use crate::lifecycle::conditions::{is_true, INITIALIZED};
use crate::lifecycle::drain::{must_evict, DISRUPTED_TAINT};
use crate::provisioning::snapshot::{build, node_is_going, Snapshot};
use crate::scheduling::pod::Selector;
use crate::scheduling::{
    solve, CapacityType, InstanceType, NodeClaimPlan, PodKey, Requirement, Requirements,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Expired,
    Empty,
    Drifted,
    Underutilized,
}

impl Method {
    pub fn as_str(&self) -> &'static str {
        match self {
            Method::Expired => "Expired",
            Method::Empty => "Empty",
            Method::Drifted => "Drifted",
            Method::Underutilized => "Underutilized",
        }
    }
}

/// Multi-node consolidation looks at no more candidates than this, for no longer than that.
const MULTI_NODE_MAX: usize = 100;
const MULTI_NODE_TIME: Duration = Duration::from_secs(60);

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
}

/// What the loop knows besides the objects.
pub struct Inputs<'a> {
    pub snapshot: &'a Snapshot,
    pub types_of_class: &'a HashMap<String, Vec<Arc<InstanceType>>>,
    pub now: Timestamp,
    /// A node initialized more recently than this is not a candidate (its pods are still
    /// arriving: it was launched for them).
    pub settle: Duration,
    /// Replace a spot node by a cheaper spot node (off by default, as upstream: a spot price is
    /// low because the pool is deep; moving to the cheapest shallow pool invites interruptions).
    pub spot_to_spot: bool,
}

/// A spot node is replaced by spot only when at least this many cheaper types remain, so the
/// replacement does not chase the single cheapest (and most interrupted) pool.
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

fn since(now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(t)).unwrap_or_default()
}

fn do_not_disrupt(value: Option<&String>, started: Option<Timestamp>, now: Timestamp) -> bool {
    match value.map(String::as_str) {
        Some("true") => true,
        Some(d) => d
            .parse::<crate::api::duration::KubeDuration>()
            .ok()
            .zip(started)
            .is_some_and(|(d, s)| since(now, s) < d.0),
        None => false,
    }
}

/// A pod annotated `karpenter.sh/do-not-disrupt: "true"`, or with a duration it has not yet
/// run for.
pub fn pod_do_not_disrupt(pod: &Pod, now: Timestamp) -> bool {
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0);
    do_not_disrupt(pod.annotations().get(labels::DO_NOT_DISRUPT), started, now)
}

/// The price of the instance a NodeClaim launched (its labels name type, zone, capacity type).
pub fn claim_price(
    claim: &NodeClaim,
    types: &HashMap<String, Vec<Arc<InstanceType>>>,
) -> Option<f64> {
    let l = claim.labels();
    let (t, zone, ct) = (
        l.get(labels::INSTANCE_TYPE)?,
        l.get(labels::ZONE)?,
        CapacityType::parse(l.get(labels::CAPACITY_TYPE)?)?,
    );
    let offerings = &types
        .get(&claim.spec.node_class_ref.name)?
        .iter()
        .find(|it| &it.name == t)?
        .offerings;
    let price = |ct: CapacityType| {
        offerings
            .iter()
            .find(|o| &o.zone == zone && o.capacity_type == ct)
            .map(|o| o.price)
    };
    // A full reservation is no longer offered, yet its nodes cost what reserved ones do.
    price(ct).or_else(|| {
        (ct == CapacityType::Reserved)
            .then(|| price(CapacityType::OnDemand))
            .flatten()
            .map(|od| od * RESERVED_PRICE_FACTOR)
    })
}

fn worst_price(t: &InstanceType, req: &Requirements) -> Option<f64> {
    t.offerings
        .iter()
        .filter(|o| o.available && o.matches(req))
        .map(|o| o.price)
        .max_by(f64::total_cmp)
}

/// A PodDisruptionBudget that allows no eviction of one of the pods now (decided before any
/// taint, so a blocked node is never left half-disrupted).
/// The first PodDisruptionBudget that allows no eviction of one of `pods` now, as a reason.
pub fn blocked_by_pdb(pods: &[&Pod], pdbs: &[Arc<PodDisruptionBudget>]) -> Option<String> {
    for pdb in pdbs {
        let allowed = pdb
            .status
            .as_ref()
            .and_then(|s| s.disruptions_allowed)
            .unwrap_or(0);
        if allowed > 0 {
            continue;
        }
        let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        let selector = Selector::from_k8s(selector);
        if let Some(p) = pods
            .iter()
            .find(|p| p.namespace() == pdb.namespace() && selector.matches(&p.labels().clone()))
        {
            return Some(format!(
                "PodDisruptionBudget {}/{} allows no eviction of pod {} now",
                pdb.namespace().unwrap_or_default(),
                pdb.name_any(),
                p.name_any()
            ));
        }
    }
    None
}

struct Candidate<'a> {
    claim: &'a NodeClaim,
    node: &'a Node,
    pool: &'a NodePool,
    pods: Vec<&'a Pod>,
}

pub fn decide(inputs: &Inputs) -> Decision {
    let snap = inputs.snapshot;
    let now = inputs.now;
    let mut decision = Decision::default();
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
            if must_evict(p) && p.metadata.deletion_timestamp.is_none() {
                pods_on.entry(n).or_default().push(p);
            }
        }
    }
    // Per pool: nodes, and nodes already on their way out (they use up the budget).
    let mut pool_nodes: HashMap<String, (usize, usize)> = HashMap::new();
    let mut candidates = Vec::new();
    let mut drift: Vec<(Candidate, String)> = Vec::new();
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
        let entry = pool_nodes.entry(pool_name.clone()).or_default();
        entry.0 += 1;
        if going {
            entry.1 += 1;
            continue;
        }
        let name = claim.name_any();
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
        // Expiration comes first and is not held back by consolidation settings or budgets.
        if let (NillableDuration::After(d), Some(created)) = (
            claim.spec.expire_after,
            claim.metadata.creation_timestamp.as_ref(),
        ) {
            if since(now, created.0) >= d && decision.command.is_none() {
                decision.command = Some(Command {
                    method: Method::Expired,
                    candidates: vec![name.clone()],
                    replacements: Vec::new(),
                    saving: 0.0,
                });
            }
        }
        if do_not_disrupt(node.annotations().get(labels::DO_NOT_DISRUPT), None, now) {
            decision.kept.push((
                name,
                "the node is annotated karpenter.sh/do-not-disrupt".into(),
            ));
            continue;
        }
        if let Some(p) = pods.iter().find(|p| pod_do_not_disrupt(p, now)) {
            decision.kept.push((
                name,
                format!(
                    "pod {}/{} is annotated karpenter.sh/do-not-disrupt",
                    p.namespace().unwrap_or_default(),
                    p.name_any()
                ),
            ));
            continue;
        }
        if let Some(why) = blocked_by_pdb(&pods, &snap.pdbs) {
            decision.kept.push((name, why));
            continue;
        }
        let initialized_at = conditions
            .iter()
            .find(|c| c.type_ == INITIALIZED)
            .map(|c| c.last_transition_time.0)
            .unwrap_or(now);
        if since(now, initialized_at) < inputs.settle {
            decision.kept.push((
                name,
                "initialized moments ago: its pods are still arriving".into(),
            ));
            continue;
        }
        // Drift does not wait for consolidateAfter.
        let class = snap
            .nodeclasses
            .iter()
            .find(|k| k.name_any() == claim.spec.node_class_ref.name)
            .map(|k| k.as_ref());
        if let Some(why) = drifted(claim, pool, class) {
            drift.push((
                Candidate {
                    claim,
                    node,
                    pool,
                    pods: pods.clone(),
                },
                why,
            ));
        }
        let NillableDuration::After(after) = pool.spec.disruption.consolidate_after else {
            decision
                .kept
                .push((name, "its NodePool's consolidateAfter is Never".into()));
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
            decision.kept.push((name, format!("not consolidatable for another {} s (consolidateAfter {} s since the last pod event)", (after - quiet).as_secs(), after.as_secs())));
            continue;
        }
        candidates.push(Candidate {
            claim,
            node,
            pool,
            pods,
        });
    }
    if decision.command.is_some() {
        return decision;
    }
    let allowance = |pool: &NodePool, method: DisruptionReason| {
        let (total, going) = pool_nodes
            .get(&pool.name_any())
            .copied()
            .unwrap_or_default();
        budget::allowed(pool, method, total, going, now)
    };

    // Empty nodes: every one the Empty budgets allow, pool by pool.
    let mut empty = Vec::new();
    let mut used: HashMap<String, usize> = HashMap::new();
    for c in candidates.iter().filter(|c| c.pods.is_empty()) {
        let pool = c.pool.name_any();
        let n = used.entry(pool.clone()).or_default();
        if *n < allowance(c.pool, DisruptionReason::Empty) {
            *n += 1;
            empty.push(c.claim.name_any());
        } else {
            decision.kept.push((
                c.claim.name_any(),
                format!(
                    "empty, but NodePool {pool}'s disruption budget for Empty allows no more now"
                ),
            ));
        }
    }
    if !empty.is_empty() {
        let saving = empty
            .iter()
            .filter_map(|n| snap.nodeclaims.iter().find(|c| &c.name_any() == n))
            .filter_map(|c| claim_price(c, inputs.types_of_class))
            .sum();
        decision.command = Some(Command {
            method: Method::Empty,
            candidates: empty,
            replacements: Vec::new(),
            saving,
        });
        return decision;
    }

    // One drifted node: its pods go where the rest of the cluster has room, and new nodes
    // are launched first for those that need one.
    for (c, why) in &drift {
        let name = c.claim.name_any();
        if allowance(c.pool, DisruptionReason::Drifted) == 0 {
            decision.kept.push((
                name,
                format!(
                    "drifted ({why}), but NodePool {}'s disruption budget for Drifted allows no disruption now",
                    c.pool.name_any()
                ),
            ));
            continue;
        }
        match reschedule(inputs, &[c]) {
            Ok(plan) => {
                decision.command = Some(Command {
                    method: Method::Drifted,
                    candidates: vec![name],
                    replacements: plan.nodeclaims,
                    saving: 0.0,
                });
                return decision;
            }
            Err(why_not) => decision
                .kept
                .push((name, format!("drifted ({why}), but {why_not}"))),
        }
    }

    // One underutilized node: fewest pods first, then the dearest.
    let mut under: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| {
            c.pool.spec.disruption.consolidation_policy
                == ConsolidationPolicy::WhenEmptyOrUnderutilized
        })
        .collect();
    under.sort_by(|a, b| {
        a.pods.len().cmp(&b.pods.len()).then_with(|| {
            let pa = claim_price(a.claim, inputs.types_of_class).unwrap_or(0.0);
            let pb = claim_price(b.claim, inputs.types_of_class).unwrap_or(0.0);
            pb.total_cmp(&pa)
        })
    });
    // Within each pool's Underutilized budget, in order.
    let mut used: HashMap<String, usize> = HashMap::new();
    let mut allowed: Vec<&Candidate> = Vec::new();
    for c in under {
        let pool = c.pool.name_any();
        let n = used.entry(pool.clone()).or_default();
        if *n < allowance(c.pool, DisruptionReason::Underutilized) {
            *n += 1;
            allowed.push(c);
        } else {
            decision.kept.push((
                c.claim.name_any(),
                format!("NodePool {pool}'s disruption budget for Underutilized allows no (more) disruption now"),
            ));
        }
    }
    // Several nodes at once: the longest prefix (at most 100, binary search) whose pods fit
    // the rest of the cluster plus at most one cheaper node.
    let started = std::time::Instant::now();
    let (mut lo, mut hi) = (2, allowed.len().min(MULTI_NODE_MAX));
    // Savings need not grow with the prefix (two nodes may gain nothing where three do): the
    // whole prefix is tried first, then the search runs below it.
    let mut best: Option<Command> = None;
    if hi >= lo {
        match simulate(inputs, &allowed[..hi]) {
            Ok(command) => {
                decision.command = Some(command);
                return decision;
            }
            Err(_) => hi -= 1,
        }
    }
    while lo <= hi && started.elapsed() < MULTI_NODE_TIME {
        let mid = (lo + hi) / 2;
        match simulate(inputs, &allowed[..mid]) {
            Ok(command) => {
                best = Some(command);
                lo = mid + 1;
            }
            Err(_) => hi = mid - 1,
        }
    }
    if let Some(command) = best {
        decision.command = Some(command);
        return decision;
    }
    // One node: the first that can go.
    for c in allowed {
        match simulate(inputs, &[c]) {
            Ok(command) => {
                decision.command = Some(command);
                return decision;
            }
            Err(why) => decision.kept.push((c.claim.name_any(), why)),
        }
    }
    decision
}

/// Where the candidates' pods would go without them: the solver over the rest of the cluster.
fn reschedule(inputs: &Inputs, cands: &[&Candidate]) -> Result<crate::scheduling::Plan, String> {
    let mut snap = inputs.snapshot.clone();
    // Seen as going, the candidates' nodes are left out and their pods are placed again.
    let going: Vec<String> = cands.iter().map(|c| c.node.name_any()).collect();
    snap.nodes = snap
        .nodes
        .iter()
        .map(|n| {
            if !going.contains(&n.name_any()) {
                return n.clone();
            }
            let mut node = n.as_ref().clone();
            node.spec
                .get_or_insert_with(Default::default)
                .taints
                .get_or_insert_with(Vec::new)
                .push(k8s_openapi::api::core::v1::Taint {
                    key: DISRUPTED_TAINT.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                });
            Arc::new(node)
        })
        .collect();
    let mut built = build(&snap, inputs.types_of_class);
    let theirs: Vec<PodKey> = cands
        .iter()
        .flat_map(|c| &c.pods)
        .map(|p| PodKey {
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
        })
        .collect();
    built.problem.pods.retain(|p| theirs.contains(&p.key));
    let plan = solve(&built.problem);
    if let Some(u) = plan.unschedulable.first() {
        return Err(format!(
            "pod {}/{} could not move: {}",
            u.pod.namespace,
            u.pod.name,
            u.message()
        ));
    }
    Ok(plan)
}

/// Delete the candidates, or replace them with one node strictly cheaper than their sum.
fn simulate(inputs: &Inputs, cands: &[&Candidate]) -> Result<Command, String> {
    let price: f64 = cands
        .iter()
        .map(|c| claim_price(c.claim, inputs.types_of_class).ok_or("its price is unknown"))
        .sum::<Result<f64, _>>()?;
    let plan = reschedule(inputs, cands)?;
    let names: Vec<String> = cands.iter().map(|c| c.claim.name_any()).collect();
    match plan.nodeclaims.as_slice() {
        [] => Ok(Command {
            method: Method::Underutilized,
            candidates: names,
            replacements: Vec::new(),
            saving: price,
        }),
        [one] => {
            let spot = cands.iter().any(|c| {
                c.claim
                    .labels()
                    .get(labels::CAPACITY_TYPE)
                    .map(String::as_str)
                    == Some(labels::CAPACITY_SPOT)
            });
            if spot && !inputs.spot_to_spot {
                return Err("its pods need a new node, and a spot node is not replaced by another spot node (SPOT_TO_SPOT_CONSOLIDATION is off)".into());
            }
            let mut requirements = one.requirements.clone();
            // On-demand replaced by a mixed choice: pinned to spot, the only way it is cheaper.
            let allows_spot = requirements
                .get(labels::CAPACITY_TYPE)
                .is_none_or(|r| r.has(labels::CAPACITY_SPOT));
            let spot_offered = one.instance_types.iter().any(|t| {
                t.offerings
                    .iter()
                    .any(|o| o.capacity_type == CapacityType::Spot && o.available)
            });
            if allows_spot && spot_offered {
                requirements.add(
                    labels::CAPACITY_TYPE,
                    Requirement::any_of([labels::CAPACITY_SPOT]),
                );
            }
            let cheaper: Vec<Arc<InstanceType>> = one
                .instance_types
                .iter()
                .filter(|t| worst_price(t, &requirements).is_some_and(|w| w < price))
                .cloned()
                .collect();
            let Some(best) = cheaper
                .iter()
                .filter_map(|t| t.cheapest(&requirements).map(|o| o.price))
                .min_by(f64::total_cmp)
            else {
                return Err(format!("no replacement is cheaper than ${price:.4}/h"));
            };
            if spot && cheaper.len() < SPOT_TO_SPOT_MIN_TYPES {
                return Err(format!(
                    "only {} spot types are cheaper (spot-to-spot needs {SPOT_TO_SPOT_MIN_TYPES})",
                    cheaper.len()
                ));
            }
            let mut replacement = one.clone();
            replacement.requirements = requirements;
            replacement.instance_types = cheaper;
            Ok(Command {
                method: Method::Underutilized,
                candidates: names,
                replacements: vec![replacement],
                saving: price - best,
            })
        }
        more => Err(format!("its pods would need {} new nodes", more.len())),
    }
}
