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
use super::{Attempt, Solver};
use crate::scheduling::topology::ActiveTerms;

/// Beyond this many distinct pod shapes the dot-product choice is skipped (it is linear in
/// the number of shapes per placement).
const MAX_SHAPES: usize = 256;

fn plain_attempt() -> Attempt {
    Attempt {
        requirements: None,
        active: ActiveTerms {
            preferred_affinity: false,
            schedule_anyway_spreads: false,
        },
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

    /// Places the pod where it costs nothing more: an existing node, or a planned NodeClaim
    /// whose cheapest instance type has room for it.
    pub(super) fn place_on_slack(&mut self, p: usize) -> bool {
        let attempt = plain_attempt();
        let pod = &self.problem.pods[p];
        for e in 0..self.existing.len() {
            if self.try_existing(e, p, &attempt).is_ok() {
                let existing = &mut self.existing[e];
                existing.free = existing.free - pod.requests;
                existing.pods.push(p);
                return true;
            }
        }
        for c in 0..self.candidates.len() {
            let candidate = &self.candidates[c];
            let Some(&cheapest) = candidate.types.first() else {
                continue;
            };
            let room = self.pools[candidate.pool].types[cheapest as usize].allocatable;
            if !(candidate.requests + pod.requests).fits_in(&room) {
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
        let mut shapes: BTreeMap<(i64, i64, i64), Vec<usize>> = BTreeMap::new();
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
            let demand = remaining.iter().fold(Resources::ZERO, |acc, &p| {
                acc + self.problem.pods[p].requests
            });
            let mix = self.fluid_mix(pool, demand);
            let placed_before = remaining.len();
            if mix.is_empty() {
                break;
            }
            for t in interleave(&mix) {
                if !self.fill_node(pool, t, &mut shapes) {
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
        shapes: &mut BTreeMap<(i64, i64, i64), Vec<usize>>,
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
                norm(r.cpu, allocatable.cpu) * norm(room.cpu, allocatable.cpu)
                    + norm(r.memory, allocatable.memory) * norm(room.memory, allocatable.memory)
                    + norm(r.pods, allocatable.pods) * norm(room.pods, allocatable.pods)
            };
            let best = shapes
                .iter()
                .filter(|(_, list)| !list.is_empty())
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
            if let Some(list) = shapes.get_mut(&(r.cpu, r.memory, r.pods)) {
                list.pop();
            }
        }
        node.is_some()
    }

    /// The whole nodes of each type in the fluid lower bound's optimal mix for `demand`,
    /// most-used type first.
    fn fluid_mix(&self, pool: usize, demand: Resources) -> Vec<(u32, u64)> {
        use minilp::{ComparisonOp, OptimizationDirection, Problem as Lp};
        const GIB: f64 = (1u64 << 30) as f64;
        let state = &self.pools[pool];
        let daemon = state.input.daemon_overhead;
        let mut lp = Lp::new(OptimizationDirection::Minimize);
        let (mut cpu, mut memory, mut pods, mut vars) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, t) in state.types.iter().enumerate() {
            let Some(offering) = t.cheapest(&state.input.requirements) else {
                continue;
            };
            let a = t.allocatable - daemon;
            let x = lp.add_var(offering.price, (0.0, f64::INFINITY));
            cpu.push((x, a.cpu as f64));
            memory.push((x, a.memory as f64 / GIB));
            pods.push((x, a.pods as f64));
            vars.push((i as u32, x));
        }
        lp.add_constraint(&cpu, ComparisonOp::Ge, demand.cpu as f64);
        lp.add_constraint(&memory, ComparisonOp::Ge, demand.memory as f64 / GIB);
        lp.add_constraint(&pods, ComparisonOp::Ge, demand.pods as f64);
        let Ok(solution) = lp.solve() else {
            return Vec::new();
        };
        let mut mix: Vec<(u32, u64)> = vars
            .into_iter()
            .map(|(t, x)| (t, solution[x].floor() as u64))
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
