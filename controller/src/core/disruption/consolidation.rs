//! Consolidation (pure): underutilized nodes whose pods fit elsewhere are deleted, or replaced
//! by one strictly cheaper node. Several at once first (the longest prefix of candidates, at
//! most 100, time-bounded), then one at a time. The simulation is the provisioner's own solver
//! over the cluster without the candidates, so a decision never strands a pod.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kube::ResourceExt;

use super::balanced::{self, PoolTotals, Score};
use super::candidates::{Candidate, Found};
use super::price::{claim_price, worst_price};
use super::simulation::World;
use super::{Budgets, Command, Inputs, Method};
use crate::api::labels;
use crate::api::nodepool::{ConsolidationPolicy, DisruptionReason};
use crate::core::scheduling::pod::pod_requests;
use crate::core::scheduling::{
    CapacityType, NodeClaimPlan, PoolInput, Requirement, Resources, SchedPod,
};
use crate::core::state::resources;

/// Multi-node consolidation looks at no more candidates than this.
const MULTI_NODE_MAX: usize = 100;

/// A repack takes at most this many nodes: it disrupts every one of them, so it is kept to
/// steps of a few nodes.
pub const REPACK_MAX: usize = 10;

/// A repack saves at least this share of what its nodes cost: it disrupts up to
/// [`REPACK_MAX`] nodes, which a few cents an hour (types priced alike) do not justify.
pub const REPACK_MIN_SAVING: f64 = 0.05;

/// A spot node is replaced by spot only when at least this many cheaper types remain, so the
/// replacement does not chase the single cheapest (and most interrupted) pool.
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

/// The underutilized candidates in the order they are tried, as each method may take them
/// under the pools' `Underutilized` budgets.
pub struct Allowed<'f, 'a> {
    /// Together: as many per pool as its budget lets go now, in order.
    pub together: Vec<&'f Candidate<'a>>,
    /// One at a time: every candidate of a pool whose budget lets at least one go (as
    /// upstream: a budget of two must not hide the third candidate from single-node).
    pub one_at_a_time: Vec<&'f Candidate<'a>>,
}

pub fn allowed<'f, 'a>(
    inputs: &Inputs,
    found: &'f mut Found<'a>,
    budgets: &Budgets,
    totals: &HashMap<String, PoolTotals>,
) -> Allowed<'f, 'a> {
    let (under, kept) = underutilized(inputs, &found.consolidatable, totals);
    found.kept.extend(kept);
    let mut together = Vec::new();
    let mut one_at_a_time = Vec::new();
    let mut used: HashMap<String, usize> = HashMap::new();
    for c in under {
        let pool = c.pool.name_any();
        let budget = budgets.allowed(c.pool, DisruptionReason::Underutilized);
        if budget == 0 {
            found.kept.push((c.claim.name_any(), no_budget(&pool)));
            continue;
        }
        one_at_a_time.push(c);
        let n = used.entry(pool).or_default();
        if *n < budget {
            *n += 1;
            together.push(c);
        }
    }
    Allowed {
        together,
        one_at_a_time,
    }
}

fn no_budget(pool: &str) -> String {
    format!("NodePool {pool}'s disruption budget for Underutilized allows no (more) disruption now")
}

/// The candidates whose policy lets them be consolidated, in the order they are tried: the
/// emptiest first (the pods of the least used nodes are the likeliest to fit elsewhere
/// together, which is what multi-node's prefixes need), then the fewest pods, the dearest,
/// and by name, so every pass — and the validation of its decision — sees the same order.
fn underutilized<'f, 'a>(
    inputs: &Inputs,
    consolidatable: impl IntoIterator<Item = &'f Candidate<'a>>,
    totals: &HashMap<String, PoolTotals>,
) -> (Vec<&'f Candidate<'a>>, Vec<(String, String)>) {
    let mut kept = Vec::new();
    let mut under: Vec<(f64, f64, &Candidate)> = Vec::new();
    for c in consolidatable {
        let price = claim_price(c.claim, inputs.types_of_pool).unwrap_or(0.0);
        match c.pool.spec.disruption.consolidation_policy {
            ConsolidationPolicy::WhenEmpty => {}
            ConsolidationPolicy::WhenEmptyOrUnderutilized => under.push((utilization(c), price, c)),
            // Deleting a node outright is the best any move on it can do: when even that
            // falls short, no move is tried.
            ConsolidationPolicy::Balanced => match balanced_shortfall(&[c], price, totals) {
                None => under.push((utilization(c), price, c)),
                Some(why) => kept.push((c.claim.name_any(), format!("even deleting it: {why}"))),
            },
        }
    }
    under.sort_by(|(ua, pa, a), (ub, pb, b)| {
        ua.total_cmp(ub)
            .then_with(|| a.pods.len().cmp(&b.pods.len()))
            .then_with(|| pb.total_cmp(pa))
            .then_with(|| a.claim.name_any().cmp(&b.claim.name_any()))
    });
    (under.into_iter().map(|(_, _, c)| c).collect(), kept)
}

/// How much of its node a candidate's pods use: the larger of their CPU and memory requests'
/// share of the node's allocatable.
fn utilization(c: &Candidate) -> f64 {
    let allocatable = c
        .node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(resources)
        .unwrap_or_default();
    let used = c
        .pods
        .iter()
        .filter_map(|p| p.spec.as_ref())
        .fold(Resources::ZERO, |sum, spec| sum + pod_requests(spec).0);
    let share = |used: i64, of: i64| if of > 0 { used as f64 / of as f64 } else { 0.0 };
    share(used.cpu, allocatable.cpu).max(share(used.memory, allocatable.memory))
}

/// Whether `cands` may go together under their pools' `Underutilized` budgets; if not, the
/// first that may not, with why.
fn within_budgets(cands: &[&Candidate], budgets: &Budgets) -> Result<(), (String, String)> {
    let mut used: HashMap<String, usize> = HashMap::new();
    for c in cands {
        let pool = c.pool.name_any();
        let n = used.entry(pool.clone()).or_default();
        *n += 1;
        if *n > budgets.allowed(c.pool, DisruptionReason::Underutilized) {
            return Err((c.claim.name_any(), no_budget(&pool)));
        }
    }
    Ok(())
}

/// A consolidation decided a moment ago, simulated again over its own candidates on the
/// cluster as it is now: the command if every candidate is still consolidatable within its
/// budget and the move is still the same, else why not. Deciding again from the start would
/// judge a different question (another candidate order may find another move first).
pub fn revalidate(
    inputs: &Inputs,
    found: &Found,
    budgets: &Budgets,
    totals: &HashMap<String, PoolTotals>,
    command: &Command,
) -> Result<Command, String> {
    let theirs: Vec<&Candidate> = command
        .candidates
        .iter()
        .map(|name| {
            found
                .consolidatable
                .iter()
                .find(|c| &c.claim.name_any() == name)
                .ok_or_else(|| format!("NodeClaim {name} is no longer a consolidation candidate"))
        })
        .collect::<Result<_, _>>()?;
    let (under, kept) = underutilized(inputs, theirs.iter().copied(), totals);
    if let Some((name, why)) = kept.first() {
        return Err(format!("NodeClaim {name}: {why}"));
    }
    if under.len() < theirs.len() {
        return Err("its NodePool no longer consolidates underutilized nodes".into());
    }
    within_budgets(&theirs, budgets).map_err(|(name, why)| format!("NodeClaim {name}: {why}"))?;
    let moves = if command.replacements.len() > 1 {
        Moves::Repack
    } else {
        Moves::DeleteOrReplace
    };
    let again = simulate(inputs, &World::default(), &theirs, totals, moves)?;
    if again.same_as(command) {
        Ok(again)
    } else {
        Err("the move it simulates to is no longer the same".into())
    }
}

/// Several nodes at once: a prefix of the candidates (at most 100, binary search for the
/// longest) whose pods fit the rest of the cluster plus at most one cheaper node; of the
/// prefixes that can go, the one that saves most.
pub fn multi_node(
    inputs: &Inputs,
    world: &World,
    allowed: &[&Candidate],
    totals: &HashMap<String, PoolTotals>,
) -> Option<Command> {
    let started = std::time::Instant::now();
    let (mut lo, mut hi) = (2, allowed.len().min(MULTI_NODE_MAX));
    if hi < lo {
        return None;
    }
    // Savings need not grow with the prefix (two nodes may gain nothing where three do): the
    // whole prefix is tried first, then the search runs below it.
    match simulate(
        inputs,
        world,
        &allowed[..hi],
        totals,
        Moves::DeleteOrReplace,
    ) {
        Ok(command) => return Some(command),
        Err(_) => hi -= 1,
    }
    let mut best = None;
    while lo <= hi && started.elapsed() < inputs.timeouts.multi_node {
        let mid = (lo + hi) / 2;
        match simulate(
            inputs,
            world,
            &allowed[..mid],
            totals,
            Moves::DeleteOrReplace,
        ) {
            Ok(command) => {
                if best.as_ref().is_none_or(|b| better(&command, b)) {
                    best = Some(command);
                }
                lo = mid + 1;
            }
            Err(_) => hi = mid - 1,
        }
    }
    best
}

/// A longer prefix may save no more than a shorter one (its replacement costing what the
/// shorter one's deletions save): the move that saves most is better, and of two that save
/// the same, the one that disrupts fewer nodes.
fn better(a: &Command, b: &Command) -> bool {
    const SAME: f64 = 1e-6;
    let churn = |c: &Command| c.candidates.len() + c.replacements.len();
    a.saving > b.saving + SAME || (a.saving > b.saving - SAME && churn(a) < churn(b))
}

/// What single-node consolidation did in one pass.
#[derive(Debug, Default)]
pub struct SingleNode {
    pub command: Option<Command>,
    /// The first candidate left untried when the pass ran out of time: the next pass starts
    /// there ([`Inputs::single_node_from`]).
    pub stopped_at: Option<String>,
}

/// One node: the first that can go; each other one is kept with why not. The search starts
/// at `inputs.single_node_from` when it is still a candidate and wraps around, so a pass that
/// runs out of time is continued, not started over: with hundreds of candidates, starting
/// from the top each time would never reach the last ones (upstream sigs#3305). Every pass
/// tries at least one candidate, however short its time.
pub fn single_node(
    inputs: &Inputs,
    world: &World,
    allowed: &[&Candidate],
    totals: &HashMap<String, PoolTotals>,
    kept: &mut Vec<(String, String)>,
) -> SingleNode {
    let started = std::time::Instant::now();
    let start = inputs
        .single_node_from
        .and_then(|from| allowed.iter().position(|c| c.claim.name_any() == from))
        .unwrap_or(0);
    let (before, after) = allowed.split_at(start);
    let mut stopped_at = None;
    for (tried, c) in after.iter().chain(before).enumerate() {
        if tried > 0 && started.elapsed() >= inputs.timeouts.single_node {
            stopped_at.get_or_insert_with(|| c.claim.name_any());
            kept.push((
                c.claim.name_any(),
                format!(
                    "single-node consolidation ran out of time this pass (SINGLE_NODE_CONSOLIDATION_TIMEOUT {:?}); the next pass starts at {}",
                    inputs.timeouts.single_node,
                    stopped_at.as_deref().unwrap_or_default()
                ),
            ));
            continue;
        }
        if let Some(why) = stuck(inputs, world, c) {
            kept.push((c.claim.name_any(), why));
            continue;
        }
        match simulate(inputs, world, &[c], totals, Moves::DeleteOrReplace) {
            Ok(command) => {
                return SingleNode {
                    command: Some(command),
                    stopped_at: None,
                }
            }
            Err(why) => kept.push((c.claim.name_any(), why)),
        }
    }
    SingleNode {
        command: None,
        stopped_at,
    }
}

/// Why a candidate can neither go nor be replaced, when that shows without a simulation (a
/// full node's, at a thousand nodes, takes milliseconds each and single-node consolidation
/// tries them all): some of its pods fit on no node there is (not even in the largest room
/// any node has, each dimension taken from whichever node has most), and no instance type
/// that holds those pods together, with its pool's DaemonSets, costs less than the candidate
/// at its cheapest offering. Both bounds err on the side of simulating: a candidate it lets
/// through may still fail, one it stops could not have succeeded.
fn stuck(inputs: &Inputs, world: &World, c: &Candidate) -> Option<String> {
    let price = claim_price(c.claim, inputs.types_of_pool)?;
    let room = world.largest_room(inputs);
    let stuck: Vec<SchedPod> = c
        .pods
        .iter()
        .map(|p| SchedPod::from_k8s(p, None))
        .filter(|p| !p.requests.fits_in(&room))
        .collect();
    let first = stuck.first()?;
    let need = stuck
        .iter()
        .fold(Resources::ZERO, |sum, p| sum + p.requests);
    let cheaper_holds = world
        .pools(inputs)
        .iter()
        .filter(|pool| stuck.iter().all(|p| pool.may_take(p)))
        .any(|pool| {
            let with_daemons = need + pool.daemon_overhead;
            pool.types_cheaper_than(price)
                .iter()
                .any(|t| with_daemons.fits_in(&t.allocatable))
        });
    if cheaper_holds {
        return None;
    }
    let more = match stuck.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    Some(format!(
        "no replacement is cheaper than ${price:.4}/h: pod {}{more} fits in no other node's free room, and no type that holds it costs less",
        first.key
    ))
}

/// When neither several nodes at once nor one at a time can go: 3 to [`REPACK_MAX`]
/// candidates of a pool (no more than its budget lets go at once), replaced by no more new
/// nodes than they are and for less ([`cheaper_repack`]), their small pods taking the room
/// left elsewhere (ours; upstream replaces several nodes by one at most, so a cluster whose
/// every node has less room than its biggest pods stays as fragmented as it is). Each pool's
/// candidates are taken in the orders of [`repack_orders`]. Spot nodes take part only with
/// spot-to-spot consolidation on (else none would be replaced). Of the moves that can be made,
/// the one that saves most, within the multi-node time bound; with none, each order's largest
/// try says why on its candidates (`kept`).
pub fn repack(
    inputs: &Inputs,
    world: &World,
    allowed: &Allowed,
    totals: &HashMap<String, PoolTotals>,
    kept: &mut Vec<(String, String)>,
) -> Option<Command> {
    let started = std::time::Instant::now();
    // Per pool, every candidate, emptiest first: the budget bounds how many a repack takes,
    // not which.
    let mut pools: Vec<(String, Vec<&Candidate>)> = Vec::new();
    for c in &allowed.one_at_a_time {
        if is_spot(c) && !inputs.spot_to_spot {
            continue;
        }
        let pool = c.pool.name_any();
        match pools.iter_mut().find(|(name, _)| *name == pool) {
            Some((_, cands)) => cands.push(c),
            None => pools.push((pool, vec![c])),
        }
    }
    let mut best: Option<Command> = None;
    // Per pool and order, its largest try refused, which nodes those are, and why.
    let mut refused: Vec<(Vec<&Candidate>, &str, String)> = Vec::new();
    let mut tried = 0;
    'pools: for (pool, cands) in &pools {
        // How many the pool's budget lets go at once: its share of `together`.
        let budget = allowed
            .together
            .iter()
            .filter(|t| t.pool.name_any() == *pool);
        let budget = budget.count();
        for (which, order) in repack_orders(pool, cands, world.pools(inputs)) {
            let mut largest_refused = None;
            for n in 3..=order.len().min(REPACK_MAX).min(budget) {
                if tried > 0 && started.elapsed() >= inputs.timeouts.multi_node {
                    refused.extend(largest_refused);
                    break 'pools;
                }
                tried += 1;
                match simulate(inputs, world, &order[..n], totals, Moves::Repack) {
                    Ok(command) => {
                        if best.as_ref().is_none_or(|b| better(&command, b)) {
                            best = Some(command);
                        }
                    }
                    Err(why) => largest_refused = Some((order[..n].to_vec(), which, why)),
                }
            }
            refused.extend(largest_refused);
        }
    }
    if best.is_none() {
        for (cands, which, why) in refused {
            let n = cands.len();
            let why = format!("repacking its pool's {n} {which}: {why}");
            kept.extend(cands.iter().map(|c| (c.claim.name_any(), why.clone())));
        }
    }
    best
}

/// The orders a repack takes a pool's candidates in, each named: the emptiest first (their
/// pods likeliest fit elsewhere), then the nodes holding the most CPU of pods a pool weighted
/// above theirs may take, when those are at least three and not the same nodes. A fresh
/// solve would put those pods on that pool; kube-scheduler bound them wherever they fitted,
/// so after a scale-down they sit a few to a node on the dearer pool's fullest nodes, which
/// the emptiest-first order never reaches.
fn repack_orders<'c, 'a>(
    pool: &str,
    cands: &[&'c Candidate<'a>],
    pools: &[Arc<PoolInput>],
) -> Vec<(&'static str, Vec<&'c Candidate<'a>>)> {
    let mut orders = vec![("emptiest nodes", cands.to_vec())];
    let own = pools
        .iter()
        .find(|p| p.name == pool)
        .map_or(0, |p| p.weight);
    let above: Vec<&PoolInput> = pools
        .iter()
        .filter(|p| p.weight > own && p.replicas.is_none())
        .map(|p| &**p)
        .collect();
    if above.is_empty() {
        return orders;
    }
    let mut wanted: Vec<(i64, &Candidate)> = cands
        .iter()
        .map(|c| {
            let cpu = c
                .pods
                .iter()
                .map(|p| SchedPod::from_k8s(p, None))
                .filter(|p| above.iter().any(|pool| pool.may_take(p)))
                .map(|p| p.requests.cpu)
                .sum();
            (cpu, *c)
        })
        .filter(|(cpu, _)| *cpu > 0)
        .collect();
    // Stable: of two holding as much, the emptier first.
    wanted.sort_by(|(a, _), (b, _)| b.cmp(a));
    let wanted: Vec<&Candidate> = wanted.into_iter().map(|(_, c)| c).collect();
    let first = |order: &[&Candidate]| -> Vec<String> {
        order
            .iter()
            .take(REPACK_MAX)
            .map(|c| c.claim.name_any())
            .collect()
    };
    if wanted.len() >= 3 && first(&wanted) != first(cands) {
        orders.push((
            "nodes with most pods a higher-weighted pool may take",
            wanted,
        ));
    }
    orders
}

fn is_spot(c: &Candidate) -> bool {
    c.claim
        .labels()
        .get(labels::CAPACITY_TYPE)
        .map(String::as_str)
        == Some(labels::CAPACITY_SPOT)
}

/// Why a move saving `saving` USD/hour by disrupting `cands` is not worth it under
/// `Balanced`, or None when it is (or no candidate's pool is Balanced). The candidates'
/// pools' totals are the whole the move is measured against.
fn balanced_shortfall(
    cands: &[&Candidate],
    saving: f64,
    totals: &HashMap<String, PoolTotals>,
) -> Option<String> {
    let balanced: BTreeSet<String> = cands
        .iter()
        .filter(|c| c.pool.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced)
        .map(|c| c.pool.name_any())
        .collect();
    if balanced.is_empty() {
        return None;
    }
    let pools: BTreeSet<String> = cands.iter().map(|c| c.pool.name_any()).collect();
    let whole = pools
        .iter()
        .filter_map(|p| totals.get(p))
        .fold(PoolTotals::default(), |a, t| PoolTotals {
            price: a.price + t.price,
            disruption: a.disruption + t.disruption,
        });
    let disruption: f64 = cands.iter().map(|c| balanced::node_cost(&c.pods)).sum();
    let score = Score::new(saving, disruption, whole);
    let names: Vec<&str> = balanced.iter().map(String::as_str).collect();
    (!score.approves()).then(|| score.shortfall(&names.join(", ")))
}

/// Which moves a simulation may come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Moves {
    /// Delete the candidates, or replace them with one node strictly cheaper (upstream's).
    DeleteOrReplace,
    /// Also replace them with several new nodes, no more than they are ([`repack`]).
    Repack,
}

/// Delete the candidates, or replace them as `moves` allows, strictly cheaper than their sum;
/// under `Balanced`, only when the savings are worth the disruption.
fn simulate(
    inputs: &Inputs,
    world: &World,
    cands: &[&Candidate],
    totals: &HashMap<String, PoolTotals>,
    moves: Moves,
) -> Result<Command, String> {
    let command = move_for(inputs, world, cands, moves)?;
    match balanced_shortfall(cands, command.saving, totals) {
        Some(why) => Err(why),
        None => Ok(command),
    }
}

fn move_for(
    inputs: &Inputs,
    world: &World,
    cands: &[&Candidate],
    moves: Moves,
) -> Result<Command, String> {
    let price: f64 = cands
        .iter()
        .map(|c| claim_price(c.claim, inputs.types_of_pool).ok_or("its price is unknown"))
        .sum::<Result<f64, _>>()?;
    let plan = world.reschedule_cheaper(inputs, cands, price)?;
    let spot = cands.iter().any(|c| is_spot(c));
    if spot && !inputs.spot_to_spot && !plan.nodeclaims.is_empty() {
        return Err("its pods need a new node, and a spot node is not replaced by another spot node (SPOT_TO_SPOT_CONSOLIDATION is off)".into());
    }
    let replacements = match plan.nodeclaims.len() {
        0 => {
            world.binds_all(inputs, cands, &[])?;
            Vec::new()
        }
        1 => vec![cheaper_one(&plan.nodeclaims[0], price, spot)?],
        n if n <= cands.len() && moves == Moves::Repack => {
            let repacked = cheaper_repack(&plan.nodeclaims, price, spot)?;
            world.binds_all(inputs, cands, &repacked)?;
            repacked
        }
        // The simulation offered only types cheaper than the candidates
        // ([`World::reschedule_cheaper`]): n of those where one dearer node might do.
        n => {
            return Err(format!(
                "no replacement is cheaper than ${price:.4}/h: of the types that are, its pods would need {n} new nodes"
            ))
        }
    };
    let launched: f64 = replacements.iter().map(cheapest_launch).sum();
    Ok(Command {
        method: Method::Underutilized,
        candidates: cands.iter().map(|c| c.claim.name_any()).collect(),
        replacements,
        saving: price - launched,
        drain_bound: None,
        why: None,
    })
}

/// One node for the candidates' pods, with only the types whose worst-case price is below
/// what the candidates cost. An on-demand node whose replacement may be spot is replaced by
/// spot, the only way the same pods get cheaper on one node.
fn cheaper_one(one: &NodeClaimPlan, price: f64, spot: bool) -> Result<NodeClaimPlan, String> {
    below(as_spot_if_allowed(one), price, spot)
}

/// `one` narrowed to spot when its requirements allow spot and a type offers it: the launch
/// would pick spot anyway (the cheapest offering wins), and the move is priced at worst.
fn as_spot_if_allowed(one: &NodeClaimPlan) -> NodeClaimPlan {
    let mut requirements = one.requirements.clone();
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
    NodeClaimPlan {
        requirements,
        ..one.clone()
    }
}

/// Several nodes, no more than the candidates, for their pods: a repack (ours; upstream
/// replaces several nodes by one at most). When every node's free room is smaller than its
/// biggest pods, no node can go and no two fit one node, yet the cluster is far from its
/// cheapest: the candidates' small pods take the room left elsewhere and the big ones are
/// packed anew, and pods that may run on a cheaper pool (a spot pool's tolerations) but were
/// bound to dearer nodes go there. Priced at worst (each new node at its type whose dearest
/// allowed offering is cheapest, as a spot node may launch in its dearest zone), the new nodes
/// must cost at least [`REPACK_MIN_SAVING`] less than the candidates; each keeps the types
/// whose worst-case price stays within that plus an equal share of the saving, so the move
/// saves whichever of them the launches get.
fn cheaper_repack(
    new: &[NodeClaimPlan],
    price: f64,
    spot: bool,
) -> Result<Vec<NodeClaimPlan>, String> {
    let new: Vec<NodeClaimPlan> = new.iter().map(as_spot_if_allowed).collect();
    let at_worst: Vec<f64> = new
        .iter()
        .map(|n| {
            n.instance_types
                .iter()
                .filter_map(|t| worst_price(t, &n.requirements))
                .min_by(f64::total_cmp)
                .unwrap_or(f64::INFINITY)
        })
        .collect();
    let total: f64 = at_worst.iter().sum();
    if total > price * (1.0 - REPACK_MIN_SAVING) {
        return Err(format!(
            "its pods would need {} new nodes at up to ${total:.4}/h, less than {:.0} % below their ${price:.4}/h",
            new.len(),
            REPACK_MIN_SAVING * 100.0
        ));
    }
    let slack = (price - total) / new.len() as f64;
    new.into_iter()
        .zip(at_worst)
        .map(|(n, worst)| below(n, worst + slack, spot))
        .collect()
}

/// `replacement` with only the types whose worst-case price is below `price`; for spot
/// candidates, only when enough of them remain.
fn below(mut replacement: NodeClaimPlan, price: f64, spot: bool) -> Result<NodeClaimPlan, String> {
    let requirements = &replacement.requirements;
    replacement
        .instance_types
        .retain(|t| worst_price(t, requirements).is_some_and(|w| w < price));
    if replacement.instance_types.is_empty() {
        return Err(format!("no replacement is cheaper than ${price:.4}/h"));
    }
    if spot && replacement.instance_types.len() < SPOT_TO_SPOT_MIN_TYPES {
        return Err(format!(
            "only {} spot types are cheaper (spot-to-spot needs {SPOT_TO_SPOT_MIN_TYPES})",
            replacement.instance_types.len()
        ));
    }
    Ok(replacement)
}

/// What `replacement` costs at the cheapest offering it allows (`below` kept at least one).
fn cheapest_launch(replacement: &NodeClaimPlan) -> f64 {
    replacement
        .instance_types
        .iter()
        .filter_map(|t| t.cheapest(&replacement.requirements).map(|o| o.price))
        .min_by(f64::total_cmp)
        .unwrap_or(0.0)
}
