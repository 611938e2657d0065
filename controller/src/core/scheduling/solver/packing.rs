//! Packing unconstrained pods cheaply.
//!
//! Pods without any placement constraint can go anywhere their pool allows, so they are placed
//! last: first into room already paid for (existing nodes, and planned NodeClaims whose
//! cheapest instance type still has space), then into new nodes of the instance types the
//! fluid lower bound itself would buy, each filled by the dot-product heuristic of vector bin
//! packing (the next pod is the one whose shape best matches the room left), so nodes end up
//! full in CPU *and* memory. Whatever is left goes through the ordinary path.

use std::collections::BTreeMap;

use super::super::pod::untolerated;
use super::super::resources::Resources;
use super::{Attempt, Candidate, Solver};
use crate::core::scheduling::topology::ActiveTerms;

/// Beyond this many distinct pod shapes the dot-product choice is skipped (it is linear in
/// the number of shapes per placement).
const MAX_SHAPES: usize = 256;

/// A pod shape: (cpu, memory, pods) requested.
type Shape = (i64, i64, i64);
/// Pending pods by shape.
type Shapes = BTreeMap<Shape, Vec<usize>>;
/// How many pods of each shape a type's nodes take.
type Quota = BTreeMap<Shape, u64>;
/// A type to buy: (type, whole nodes, shapes they take).
type TypePlan = (u32, u64, Quota);

/// An attempt with no preference in force (no node requirements, no topology rules taken).
pub(super) fn plain_attempt() -> Attempt {
    Attempt {
        requirements: None,
        active: ActiveTerms {
            preferred_affinity: false,
            schedule_anyway_spreads: false,
            order_safe: false,
        },
        rules: None,
    }
}

impl Solver<'_> {
    /// No constraint of any kind: only resources and taints decide where it goes.
    pub(super) fn is_plain(&self, p: usize) -> bool {
        let pod = &self.problem.pods[p];
        pod.node_terms.is_empty()
            && pod.preferred_node.is_empty()
            && pod.host_ports.is_empty()
            && pod.unknown_resources.is_empty()
            && self.topology.is_free(p)
    }

    /// Whether the NodeClaim's cheapest type still has room for `requests` more: taking them
    /// costs nothing.
    pub(super) fn cheapest_type_holds(&self, c: &Candidate, requests: Resources) -> bool {
        c.types.first().is_some_and(|&cheapest| {
            let room = self.pools[c.pool].types[cheapest as usize].allocatable;
            (c.requests + requests).fits_in(&room)
        })
    }

    /// Places the pod where it costs nothing more: an existing node, or a planned NodeClaim
    /// whose cheapest instance type has room for it.
    pub(super) fn place_on_slack(&mut self, p: usize) -> bool {
        let attempt = plain_attempt();
        let pod = &self.problem.pods[p];
        if let (Some((e, placement)), _) = self.find_existing(p, &attempt, 0) {
            self.bind_existing(e, p, &placement);
            return true;
        }
        for c in 0..self.candidates.len() {
            let candidate = &self.candidates[c];
            if !self.cheapest_type_holds(candidate, pod.requests) {
                continue;
            }
            if let Ok(update) = self.try_candidate(candidate, p, &attempt) {
                self.commit(c, p, update);
                return true;
            }
        }
        false
    }

    /// Packs `pods` into new nodes of the lower bound's instance types, pool by pool in weight
    /// order; returns the pods it did not place.
    pub(super) fn pack(&mut self, mut pods: Vec<usize>) -> Vec<usize> {
        for pool in 0..self.pools.len() {
            if pods.is_empty() {
                break;
            }
            let taints = &self.pools[pool].input.taints;
            let (eligible, rest): (Vec<usize>, Vec<usize>) = pods
                .into_iter()
                .partition(|&p| untolerated(taints, &self.problem.pods[p].tolerations).is_none());
            pods = rest;
            pods.extend(self.pack_into_pool(pool, eligible));
        }
        pods
    }

    fn pack_into_pool(&mut self, pool: usize, pods: Vec<usize>) -> Vec<usize> {
        let mut shapes: Shapes = BTreeMap::new();
        for &p in &pods {
            let r = self.problem.pods[p].requests;
            shapes.entry((r.cpu, r.memory, r.pods)).or_default().push(p);
        }
        if shapes.len() > MAX_SHAPES || pods.is_empty() {
            return pods;
        }
        // Each round buys the whole nodes of the lower bound's mix for what is left; the
        // remainder (less than one node of any type in the mix) is left to the ordinary path,
        // which grows planned nodes before it opens another.
        loop {
            let remaining: Vec<usize> = shapes.values().flatten().copied().collect();
            if remaining.is_empty() {
                break;
            }
            let placed_before = remaining.len();
            let mut plan = self.shape_mix(pool, &shapes);
            if plan.is_empty() {
                break;
            }
            let counts: Vec<(u32, u64)> = plan.iter().map(|(t, n, _)| (*t, *n)).collect();
            for t in interleave(&counts) {
                let Some((_, copies_left, quota)) = plan.iter_mut().find(|(u, _, _)| *u == t)
                else {
                    continue;
                };
                // This node's share of the type's shapes, so its nodes all get the same mix.
                let mut share: Quota = quota
                    .iter()
                    .map(|(s, n)| (*s, n.div_ceil((*copies_left).max(1))))
                    .collect();
                let before = share.clone();
                let filled = self.fill_node(pool, t, &mut shapes, Some(&mut share));
                for (s, n) in quota.iter_mut() {
                    *n -= before[s] - share[s];
                }
                *copies_left = copies_left.saturating_sub(1);
                if !filled {
                    break;
                }
            }
            if shapes.values().map(Vec::len).sum::<usize>() == placed_before {
                break;
            }
        }
        shapes.into_values().flatten().collect()
    }

    /// Opens a node of type `t` and fills it; false when not even one pod could be placed.
    fn fill_node(
        &mut self,
        pool: usize,
        t: u32,
        shapes: &mut Shapes,
        mut quota: Option<&mut Quota>,
    ) -> bool {
        let attempt = plain_attempt();
        let allocatable = self.pools[pool].types[t as usize].allocatable;
        let mut node: Option<usize> = None;
        loop {
            let requests = node.map_or(self.pools[pool].input.daemon_overhead, |c| {
                self.candidates[c].requests
            });
            let room = allocatable - requests;
            // Dot product of the pod's shape with the room left, both relative to the type.
            let norm = |v: i64, of: i64| if of > 0 { v as f64 / of as f64 } else { 0.0 };
            let score = |r: &Resources| {
                let v = [
                    norm(r.cpu, allocatable.cpu),
                    norm(r.memory, allocatable.memory),
                    norm(r.pods, allocatable.pods),
                ];
                let w = [
                    norm(room.cpu, allocatable.cpu),
                    norm(room.memory, allocatable.memory),
                    norm(room.pods, allocatable.pods),
                ];
                let dot: f64 = v.iter().zip(&w).map(|(a, b)| a * b).sum();
                let len = v.iter().map(|a| a * a).sum::<f64>().sqrt();
                if len > 0.0 {
                    dot / len
                } else {
                    0.0
                }
            };
            let best = shapes
                .iter()
                .filter(|(shape, list)| {
                    !list.is_empty()
                        && quota
                            .as_ref()
                            .is_none_or(|q| q.get(*shape).is_some_and(|n| *n > 0))
                })
                .map(|(_, list)| {
                    (
                        list[list.len() - 1],
                        self.problem.pods[list[list.len() - 1]].requests,
                    )
                })
                .filter(|(_, r)| r.fits_in(&room))
                .max_by(|a, b| score(&a.1).total_cmp(&score(&b.1)));
            let Some((p, r)) = best else { break };
            let placed = match node {
                Some(c) => match self.try_candidate(&self.candidates[c], p, &attempt) {
                    Ok(update) => {
                        self.commit(c, p, update);
                        true
                    }
                    Err(_) => false,
                },
                None => match self.new_candidate_from(pool, p, &attempt, &[t]) {
                    Ok((candidate, update)) => {
                        self.candidates.push(candidate);
                        let c = self.candidates.len() - 1;
                        self.commit(c, p, update);
                        node = Some(c);
                        true
                    }
                    Err(_) => return false,
                },
            };
            if !placed {
                break;
            }
            let shape = (r.cpu, r.memory, r.pods);
            if let Some(list) = shapes.get_mut(&shape) {
                list.pop();
            }
            if let Some(n) = quota.as_mut().and_then(|q| q.get_mut(&shape)) {
                *n = n.saturating_sub(1);
            }
        }
        node.is_some()
    }

    /// Which types to buy and which pod shapes to put on them: the fluid relaxation per shape
    /// (each type's nodes must hold the shapes assigned to them in every dimension, so a
    /// CPU-heavy shape is not counted against a memory-optimised type's spare CPU). Returns,
    /// per type in the optimum, the whole nodes to open and how many pods of each shape they
    /// take. Only the most promising types are offered to the LP, to keep it small.
    fn shape_mix(&self, pool: usize, shapes: &Shapes) -> Vec<TypePlan> {
        use minilp::{ComparisonOp, OptimizationDirection, Problem as Lp};
        const TYPES_PER_SHAPE: usize = 4;
        let state = &self.pools[pool];
        let daemon = state.input.daemon_overhead;
        let live: Vec<(Shape, u64)> = shapes
            .iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(k, l)| (*k, l.len() as u64))
            .collect();
        let price = |t: usize| {
            state.types[t]
                .cheapest(&state.input.requirements)
                .map(|o| o.price)
        };
        // Candidate types: for each shape, the cheapest per pod of that shape; plus the whole
        // workload's fluid mix.
        let mut chosen: std::collections::BTreeSet<usize> = std::collections::BTreeSet::new();
        for (shape, _) in &live {
            let mut per_pod: Vec<(f64, usize)> = (0..state.types.len())
                .filter_map(|t| {
                    let a = state.types[t].allocatable - daemon;
                    let fit = [(shape.0, a.cpu), (shape.1, a.memory), (shape.2, a.pods)]
                        .iter()
                        .map(|(need, have)| {
                            if *need == 0 {
                                f64::INFINITY
                            } else {
                                *have as f64 / *need as f64
                            }
                        })
                        .fold(f64::INFINITY, f64::min)
                        .floor();
                    (fit >= 1.0)
                        .then(|| price(t).map(|p| (p / fit, t)))
                        .flatten()
                })
                .collect();
            per_pod.sort_by(|a, b| a.0.total_cmp(&b.0));
            chosen.extend(per_pod.iter().take(TYPES_PER_SHAPE).map(|(_, t)| *t));
        }
        let demand = live.iter().fold(Resources::ZERO, |acc, (s, n)| {
            acc + Resources {
                cpu: s.0 * *n as i64,
                memory: s.1 * *n as i64,
                pods: s.2 * *n as i64,
                ..Resources::ZERO
            }
        });
        chosen.extend(
            self.fluid_mix(pool, demand)
                .into_iter()
                .map(|(t, _)| t as usize),
        );

        const GIB: f64 = (1u64 << 30) as f64;
        let mut lp = Lp::new(OptimizationDirection::Minimize);
        let mut x = Vec::new();
        let mut y: Vec<Vec<minilp::Variable>> = vec![Vec::new(); live.len()];
        for &t in &chosen {
            let Some(p) = price(t) else { continue };
            let xt = lp.add_var(p, (0.0, f64::INFINITY));
            let a = state.types[t].allocatable - daemon;
            let ys: Vec<minilp::Variable> = live
                .iter()
                .map(|_| lp.add_var(0.0, (0.0, f64::INFINITY)))
                .collect();
            for (dim, have) in [
                (0usize, a.cpu as f64),
                (1, a.memory as f64 / GIB),
                (2, a.pods as f64),
            ] {
                let mut row: Vec<(minilp::Variable, f64)> = live
                    .iter()
                    .zip(&ys)
                    .map(|((s, _), v)| (*v, [s.0 as f64, s.1 as f64 / GIB, s.2 as f64][dim]))
                    .collect();
                row.push((xt, -have));
                lp.add_constraint(&row, ComparisonOp::Le, 0.0);
            }
            for (i, v) in ys.into_iter().enumerate() {
                y[i].push(v);
            }
            x.push((t as u32, xt));
        }
        for (i, (_, n)) in live.iter().enumerate() {
            let row: Vec<(minilp::Variable, f64)> = y[i].iter().map(|v| (*v, 1.0)).collect();
            lp.add_constraint(&row, ComparisonOp::Eq, *n as f64);
        }
        let Ok(solution) = lp.solve() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (j, (t, xt)) in x.iter().enumerate() {
            let nodes = solution[*xt];
            let whole = nodes.floor();
            if whole < 1.0 {
                continue;
            }
            let quota = live
                .iter()
                .enumerate()
                .map(|(i, (shape, _))| (*shape, (solution[y[i][j]] * whole / nodes).round() as u64))
                .collect();
            out.push((*t, whole as u64, quota));
        }
        out.sort_by_key(|(_, n, _)| std::cmp::Reverse(*n));
        out
    }

    /// The whole nodes of each type in the fluid lower bound's optimal mix for `demand`,
    /// most-used type first.
    fn fluid_mix(&self, pool: usize, demand: Resources) -> Vec<(u32, u64)> {
        let state = &self.pools[pool];
        let (indexes, offered): (Vec<u32>, Vec<(f64, Resources)>) = state
            .types
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                t.cheapest(&state.input.requirements).map(|o| {
                    (
                        i as u32,
                        (o.price, t.allocatable - state.input.daemon_overhead),
                    )
                })
            })
            .unzip();
        let Some((_, copies)) = crate::core::scheduling::fluid::fluid_mix(&offered, demand) else {
            return Vec::new();
        };
        let mut mix: Vec<(u32, u64)> = indexes
            .into_iter()
            .zip(copies)
            .map(|(t, x)| (t, x.floor() as u64))
            .filter(|(_, n)| *n > 0)
            .collect();
        mix.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        mix
    }
}

/// The node types of a mix in an order that alternates types in proportion to their counts,
/// so no type takes all of the pod shapes that suit it and leaves the others ill-fitting ones.
fn interleave(mix: &[(u32, u64)]) -> Vec<u32> {
    let total: u64 = mix.iter().map(|(_, n)| n).sum();
    let mut used = vec![0u64; mix.len()];
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        // The type furthest behind its share so far.
        let next = (0..mix.len())
            .filter(|&i| used[i] < mix[i].1)
            .min_by(|&a, &b| {
                (used[a] as f64 / mix[a].1 as f64).total_cmp(&(used[b] as f64 / mix[b].1 as f64))
            });
        let Some(i) = next else { break };
        used[i] += 1;
        out.push(mix[i].0);
    }
    out
}
