//! Folding the plan's least-filled NodeClaims into the others. Pods are placed one at a time
//! and no placement looks ahead, so a plan often ends with a few nearly empty NodeClaims — the
//! zone-pinned ones a spread opened last, the remainder of packing — while others still have
//! room in their cheapest type, or could grow into a bigger type for less than the two nodes
//! cost. Least filled first, a NodeClaim's pods all move to the others when they fit there and
//! the plan gets cheaper; otherwise nothing changes.
//!
//! A pod moves only when no topology count changes: it keeps every domain its terms (or the
//! terms counting it) name, and none of those counts per node. Its binding-order position
//! stays valid for the same reason.

use std::rc::Rc;

use super::packing::plain_attempt;
use super::{Attempt, Candidate, Solver};
use crate::api::labels;
use crate::core::scheduling::requirements::{Requirement, Requirements};
use crate::core::scheduling::resources::Resources;
use crate::core::scheduling::topology::PodRules;

/// Folds tried in vain before the pass stops: each try scans every NodeClaim per pod, and the
/// least-filled ones are the likeliest to fold.
const MAX_FAILED_FOLDS: usize = 8;

impl Solver<'_> {
    /// Folds the least-filled NodeClaims into the others while that makes the plan cheaper.
    pub(super) fn fold_underfilled(&mut self) {
        let mut order: Vec<(Resources, String)> = self
            .candidates
            .iter()
            .map(|c| (c.requests, c.hostname.clone()))
            .collect();
        order.sort_by(|a, b| {
            (a.0.cpu, a.0.memory)
                .cmp(&(b.0.cpu, b.0.memory))
                .then_with(|| a.1.cmp(&b.1))
        });
        let mut failed = 0;
        for (_, hostname) in order {
            if failed == MAX_FAILED_FOLDS || self.candidates.len() < 2 {
                break;
            }
            let Some(a) = self.candidates.iter().position(|c| c.hostname == hostname) else {
                continue;
            };
            if !self.fold(a) {
                failed += 1;
            }
        }
    }

    /// Moves every pod of NodeClaim `a` to the others and drops it, if all can move and the
    /// plan costs less after; else leaves the plan as it was.
    fn fold(&mut self, a: usize) -> bool {
        let pods = self.candidates[a].pods.clone();
        let Some(pins) = pods
            .iter()
            .map(|&p| self.pins(a, p))
            .collect::<Option<Vec<Option<Requirements>>>>()
        else {
            return false;
        };
        let Some(mut price_before) = self.price(&self.candidates[a]) else {
            return false;
        };
        let saved_pools: Vec<(Resources, i64)> =
            self.pools.iter().map(|s| (s.reserved, s.planned)).collect();
        // The receivers as they were, to put back if the fold does not pay.
        let mut saved: Vec<(usize, Candidate)> = Vec::new();
        // Its reservation is released first, so limits see the room it leaves.
        {
            let c = &self.candidates[a];
            let pool = &mut self.pools[c.pool];
            pool.reserved = pool.reserved - pool.types[c.types[0] as usize].capacity;
            pool.planned -= 1;
        }
        let mut order: Vec<usize> = (0..pods.len()).collect();
        order.sort_by_key(|&i| {
            let r = self.problem.pods[pods[i]].requests;
            std::cmp::Reverse((r.cpu, r.memory))
        });
        let mut moved = true;
        for i in order {
            let p = pods[i];
            let Some((b, update)) = self.receiver(a, p, pins[i].clone()) else {
                moved = false;
                break;
            };
            if !saved.iter().any(|(s, _)| *s == b) {
                match self.price(&self.candidates[b]) {
                    Some(price) => price_before += price,
                    None => {
                        moved = false;
                        break;
                    }
                }
                saved.push((b, self.candidates[b].clone()));
            }
            self.add_to(b, p, update);
        }
        let price_after: Option<f64> = saved
            .iter()
            .map(|(b, _)| self.price(&self.candidates[*b]))
            .sum();
        if moved && price_after.is_some_and(|after| after < price_before - 1e-9) {
            self.candidates.remove(a);
            return true;
        }
        for (b, original) in saved {
            self.candidates[b] = original;
        }
        for (state, (reserved, planned)) in self.pools.iter_mut().zip(saved_pools) {
            state.reserved = reserved;
            state.planned = planned;
        }
        false
    }

    /// The NodeClaim (not `a`) that takes pod `p` pinned to `pins`, and what it changes there:
    /// one whose cheapest type has room first, so the plan does not get dearer; then any.
    /// Only pools weighted as high as `a`'s: weight is the user's preference.
    fn receiver(
        &self,
        a: usize,
        p: usize,
        pins: Option<Requirements>,
    ) -> Option<(usize, super::Update)> {
        let attempt = Attempt {
            requirements: pins,
            rules: Some(Rc::new(PodRules::unchanged())),
            ..plain_attempt()
        };
        let weight = self.pools[self.candidates[a].pool].input.weight;
        let requests = self.problem.pods[p].requests;
        let eligible = |b: usize| {
            let c = &self.candidates[b];
            b != a && self.pools[c.pool].input.weight >= weight
        };
        for roomy_only in [true, false] {
            for b in (0..self.candidates.len()).filter(|&b| eligible(b)) {
                let c = &self.candidates[b];
                if roomy_only && !self.cheapest_type_holds(c, requests) {
                    continue;
                }
                if let Ok(update) = self.try_candidate(c, p, &attempt) {
                    return Some((b, update));
                }
            }
        }
        None
    }

    /// The requirements that keep pod `p` in the domains it has on NodeClaim `a` (None: it
    /// has no topology terms), or None when it cannot move without changing a count.
    fn pins(&self, a: usize, p: usize) -> Option<Option<Requirements>> {
        let pod = &self.problem.pods[p];
        let simple = pod.node_terms.is_empty()
            && pod.preferred_node.is_empty()
            && pod.host_ports.is_empty()
            && pod.unknown_resources.is_empty();
        if !simple {
            return None;
        }
        if self.topology.is_free(p) {
            return Some(None);
        }
        let mut pins = Requirements::new();
        for key in self.topology.keys_of(p) {
            if key == labels::HOSTNAME {
                return None;
            }
            let value = self.candidates[a]
                .requirements
                .get(key)
                .and_then(|r| r.single_value())?
                .clone();
            pins.add(key, Requirement::any_of([value]));
        }
        Some(Some(pins))
    }

    /// What the NodeClaim costs at its cheapest type and offering.
    fn price(&self, c: &Candidate) -> Option<f64> {
        let pool = &self.pools[c.pool];
        c.types
            .iter()
            .filter_map(|&t| pool.types[t as usize].cheapest(&c.requirements))
            .map(|o| o.price)
            .min_by(f64::total_cmp)
    }
}
