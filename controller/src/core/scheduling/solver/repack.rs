//! Exact repacking of small rounds. Most provisioning rounds in a steady cluster hold a handful
//! of pending pods, where a heuristic's one wrong grouping costs a whole node. When a pool's
//! new NodeClaims hold only pods without constraints, the cheapest grouping of those pods is
//! found by exhaustive search (the cheapest type for every subset, then the best partition into
//! subsets: 3^n steps per NodeClaim allowed), and replaces the heuristic's NodeClaims when it
//! is cheaper. Under `Policies::keep_node_count` (consolidation) into no more NodeClaims than
//! the heuristic made.

use std::collections::HashSet;

use super::max_allocatable;
use super::{Candidate, Solver};
use crate::core::scheduling::resources::Resources;

/// Pods per pool up to which the exact search runs (3^10 = 59,049 steps).
const MAX_EXACT_PODS: usize = 10;

impl Solver<'_> {
    /// Regroups each eligible pool's plain NodeClaims optimally (see the module comment).
    pub(super) fn repack_small_rounds(&mut self) {
        for pool in 0..self.pools.len() {
            let input = self.pools[pool].input;
            // Limits are booked NodeClaim by NodeClaim and minValues constrain each one's
            // type set: those pools keep the heuristic's plan.
            let limited = input.limits.cpu.is_some()
                || input.limits.memory.is_some()
                || input.limits.nodes.is_some();
            let min_values = input
                .requirements
                .iter()
                .any(|(_, r)| r.min_values.is_some());
            if limited || min_values {
                continue;
            }
            let group: Vec<usize> = (0..self.candidates.len())
                .filter(|&c| {
                    let candidate = &self.candidates[c];
                    candidate.pool == pool
                        && candidate.requirements == input.requirements
                        && candidate.pods.iter().all(|&p| self.is_plain(p))
                })
                .collect();
            let pods: Vec<usize> = group
                .iter()
                .flat_map(|&c| self.candidates[c].pods.iter().copied())
                .collect();
            if pods.is_empty() || pods.len() > MAX_EXACT_PODS {
                continue;
            }
            let current: Option<f64> = group
                .iter()
                .map(|&c| self.cheapest_fit(pool, self.candidates[c].requests))
                .map(|t| t.map(|(_, price)| price))
                .sum();
            let most = if self.policies.keep_node_count {
                group.len()
            } else {
                pods.len()
            };
            let Some((best, parts)) = self.best_grouping(pool, &pods, most) else {
                continue;
            };
            if current.is_some_and(|now| best < now - 1e-9) {
                self.replace_group(pool, &group, parts);
            }
        }
    }

    /// The cheapest type of the pool that holds `requests` (with the daemons), and its price.
    fn cheapest_fit(&self, pool: usize, requests: Resources) -> Option<(u32, f64)> {
        let state = &self.pools[pool];
        state
            .types
            .iter()
            .enumerate()
            .find(|(_, t)| requests.fits_in(&t.allocatable))
            .and_then(|(i, t)| {
                t.cheapest(&state.input.requirements)
                    .map(|o| (i as u32, o.price))
            })
    }

    /// The cheapest partition of `pods` into at most `most` nodes: its price and its parts.
    fn best_grouping(
        &self,
        pool: usize,
        pods: &[usize],
        most: usize,
    ) -> Option<(f64, Vec<Vec<usize>>)> {
        let n = pods.len();
        let daemon = self.pools[pool].input.daemon_overhead;
        let node_price: Vec<f64> = (0..1usize << n)
            .map(|set| {
                let requests = members(set, n)
                    .fold(daemon, |acc, i| acc + self.problem.pods[pods[i]].requests);
                self.cheapest_fit(pool, requests)
                    .map_or(f64::INFINITY, |(_, price)| price)
            })
            .collect();
        // best[k][set]: the cheapest partition of `set` into at most k + 1 parts;
        // first[k][set]: the part holding its lowest member there (0: k parts do as well).
        let mut best = vec![node_price.clone()];
        let mut first: Vec<Vec<usize>> = vec![(0..1usize << n).collect()];
        for k in 1..most.min(n) {
            let fewer = &best[k - 1];
            let mut here = fewer.clone();
            let mut parts = vec![0; 1 << n];
            for set in 1..1usize << n {
                let low = set & set.wrapping_neg();
                let rest = set ^ low;
                let mut sub = rest;
                loop {
                    let part = sub | low;
                    if part != set {
                        let price = node_price[part] + fewer[set ^ part];
                        if price < here[set] {
                            here[set] = price;
                            parts[set] = part;
                        }
                    }
                    if sub == 0 {
                        break;
                    }
                    sub = (sub - 1) & rest;
                }
            }
            best.push(here);
            first.push(parts);
        }
        let all = (1usize << n) - 1;
        let mut k = best.len() - 1;
        if !best[k][all].is_finite() {
            return None;
        }
        let price = best[k][all];
        let mut parts = Vec::new();
        let mut left = all;
        while left != 0 {
            // Step down to the fewest parts that still give this price for what is left.
            while k > 0 && first[k][left] == 0 {
                k -= 1;
            }
            let part = if k == 0 { left } else { first[k][left] };
            parts.push(members(part, n).map(|i| pods[i]).collect());
            left ^= part;
            k = k.saturating_sub(1);
        }
        Some((price, parts))
    }

    /// Replaces the NodeClaims `group` of `pool` by one per part, reusing their hostnames.
    fn replace_group(&mut self, pool: usize, group: &[usize], parts: Vec<Vec<usize>>) {
        let in_group: HashSet<usize> = group.iter().copied().collect();
        let mut hostnames: Vec<String> = group
            .iter()
            .map(|&c| self.candidates[c].hostname.clone())
            .collect();
        hostnames.reverse();
        let mut kept = Vec::with_capacity(self.candidates.len());
        let state = &mut self.pools[pool];
        for (c, candidate) in std::mem::take(&mut self.candidates).into_iter().enumerate() {
            if in_group.contains(&c) {
                state.reserved = state.reserved - state.types[candidate.types[0] as usize].capacity;
                state.planned -= 1;
            } else {
                kept.push(candidate);
            }
        }
        self.candidates = kept;
        let fresh = self.candidates.len() + group.len();
        for (i, pods) in parts.into_iter().enumerate() {
            let requests = pods
                .iter()
                .fold(self.pools[pool].input.daemon_overhead, |acc, &p| {
                    acc + self.problem.pods[p].requests
                });
            let state = &self.pools[pool];
            let types: Vec<u32> = (0..state.types.len() as u32)
                .filter(|&t| requests.fits_in(&state.types[t as usize].allocatable))
                .collect();
            let Some(&cheapest) = types.first() else {
                continue;
            };
            let hostname = hostnames
                .pop()
                .unwrap_or_else(|| format!("{}-{}", state.input.name, fresh + i + 1));
            let candidate = Candidate {
                pool,
                hostname,
                requirements: state.input.requirements.clone(),
                max_allocatable: max_allocatable(
                    types.iter().map(|&t| state.types[t as usize].as_ref()),
                ),
                types,
                requests,
                pods,
                ports: Vec::new(),
                min_values_relaxed: false,
                domain_cache: Default::default(),
            };
            let state = &mut self.pools[pool];
            state.reserved += state.types[cheapest as usize].capacity;
            state.planned += 1;
            self.candidates.push(candidate);
        }
    }
}

/// The indexes of the members of `set` among `n`.
fn members(set: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).filter(move |i| set & (1 << i) != 0)
}
