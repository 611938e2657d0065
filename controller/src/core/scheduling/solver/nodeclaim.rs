//! Placing a pod on a NodeClaim planned in this pass, or opening a new one from a pool: the
//! NodeClaim keeps every instance type that still fits all its pods (within the efficiency
//! tolerance of the cheapest), its requirements narrowed by each pod, within the pool's limits.

use std::collections::HashSet;
use std::sync::Arc;

use super::existing::ports_conflict;
use super::{Attempt, Candidate, Solver, Update};
use crate::api::labels;
use crate::core::scheduling::instance_type::InstanceType;
use crate::core::scheduling::pod::{untolerated, SchedPod};
use crate::core::scheduling::problem::{Limits, MinValuesPolicy, Rejection};
use crate::core::scheduling::requirements::{Requirement, Requirements};
use crate::core::scheduling::resources::{Resources, CPU, MEMORY};
use crate::core::scheduling::topology::Placement;

/// Share above the best single-type cost at which a type still counts as efficient.
const EFFICIENCY_TOLERANCE: f64 = 0.10;

/// The types that could host the whole workload alone (as a fluid mix of identical nodes)
/// within [`EFFICIENCY_TOLERANCE`] of the cheapest such type.
pub(super) fn efficient_types(
    types: &[Arc<InstanceType>],
    requirements: &Requirements,
    pods: &[SchedPod],
    daemon: Resources,
) -> Vec<u32> {
    let demand = pods.iter().fold(Resources::ZERO, |acc, p| acc + p.requests);
    let cover_cost = |t: &InstanceType| -> Option<f64> {
        let price = t.cheapest(requirements)?.price;
        let a = t.allocatable - daemon;
        let ratio = |need: i64, have: i64| {
            if need == 0 {
                0.0
            } else if have <= 0 {
                f64::INFINITY
            } else {
                need as f64 / have as f64
            }
        };
        let copies = [
            ratio(demand.cpu, a.cpu),
            ratio(demand.memory, a.memory),
            ratio(demand.pods, a.pods),
        ]
        .into_iter()
        .fold(0.0, f64::max);
        copies.is_finite().then_some(price * copies)
    };
    let costs: Vec<Option<f64>> = types.iter().map(|t| cover_cost(t)).collect();
    let best = costs
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    (0..types.len() as u32)
        .filter(|&i| costs[i as usize].is_some_and(|c| c <= best * (1.0 + EFFICIENCY_TOLERANCE)))
        .collect()
}

pub(super) fn max_allocatable<'t>(types: impl Iterator<Item = &'t InstanceType>) -> Resources {
    types.fold(Resources::ZERO, |a, t| a.max(&t.allocatable))
}

impl Solver<'_> {
    pub(super) fn try_candidate(
        &self,
        c: &Candidate,
        p: usize,
        attempt: &Attempt,
    ) -> Result<Update, Rejection> {
        let pod = &self.problem.pods[p];
        let pool = &self.pools[c.pool];
        let requests = c.requests + pod.requests;
        if !requests.fits_in(&c.max_allocatable) {
            return Err(Rejection::NoInstanceTypeFits {
                closest: None,
                shortfalls: Vec::new(),
            });
        }
        if let Some(t) = untolerated(&pool.input.taints, &pod.tolerations) {
            return Err(Rejection::Taint(format!(
                "{}={}:{:?}",
                t.key,
                t.value.as_deref().unwrap_or(""),
                t.effect
            )));
        }
        if let Some(port) = ports_conflict(&c.ports, &pod.host_ports) {
            return Err(Rejection::HostPort(port));
        }
        let mut merged: Option<Requirements> = None;
        if let Some(req) = &attempt.requirements {
            if let Some((key, pod_req, pool_req)) = req.conflict(&c.requirements) {
                return Err(Rejection::Requirement {
                    key: key.to_string(),
                    pool: pool_req.to_string(),
                    pod: pod_req.to_string(),
                });
            }
            for (key, r) in req.iter() {
                if c.requirements.get(key).is_none()
                    && !pool.type_keys.contains(key)
                    && !r.allows_absence()
                {
                    return Err(Rejection::MissingLabel {
                        key: key.clone(),
                        pod: r.to_string(),
                    });
                }
            }
            let mut m = c.requirements.clone();
            m.add_all(req);
            merged = Some(m);
        }
        let placement = if self.topology.is_free(p) {
            Vec::new()
        } else {
            let reqs = merged.as_ref().unwrap_or(&c.requirements);
            let domains = |key: &str| -> Option<Vec<String>> {
                if key == labels::HOSTNAME {
                    return Some(vec![c.hostname.clone()]);
                }
                let allowed = reqs.get(key);
                if let Some(values) = allowed.and_then(|r| r.values()) {
                    return Some(values.iter().cloned().collect());
                }
                if !pool.type_keys.contains(key) {
                    return None;
                }
                let from_types = || {
                    let mut values = std::collections::BTreeSet::new();
                    for &t in &c.types {
                        if let Some(v) = pool.types[t as usize]
                            .requirements
                            .get(key)
                            .and_then(|r| r.values())
                        {
                            values.extend(
                                v.iter()
                                    .filter(|v| allowed.is_none_or(|a| a.has(v)))
                                    .cloned(),
                            );
                        }
                    }
                    values.into_iter().collect::<Vec<String>>()
                };
                // Only the NodeClaim's own requirements are cached; a pod's may narrow them.
                if merged.is_some() {
                    return Some(from_types());
                }
                let mut cache = c.domain_cache.borrow_mut();
                Some(
                    cache
                        .entry(key.to_string())
                        .or_insert_with(from_types)
                        .clone(),
                )
            };
            self.place(p, attempt, &domains)?
        };
        for (key, domain) in &placement {
            if key != labels::HOSTNAME {
                let current = merged
                    .as_ref()
                    .unwrap_or(&c.requirements)
                    .get(key)
                    .and_then(|r| r.values())
                    .map(|v| v.len());
                if current != Some(1) {
                    merged
                        .get_or_insert_with(|| c.requirements.clone())
                        .add(key, Requirement::any_of([domain.clone()]));
                }
            }
        }
        // With limits, the NodeClaim may only grow into types the pool has room for: what it
        // holds already plus what the limits leave.
        let limits = &pool.input.limits;
        let own = if c.pods.is_empty() {
            Resources::ZERO
        } else {
            pool.types[c.types[0] as usize].capacity
        };
        let used = pool.input.in_use + pool.reserved;
        let room =
            |limit: Option<i64>, used: i64, own: i64| limit.map_or(i64::MAX, |l| l - used + own);
        let (cpu_room, memory_room) = (
            room(limits.cpu, used.cpu, own.cpu),
            room(limits.memory, used.memory, own.memory),
        );
        let within_limits =
            |it: &InstanceType| it.capacity.cpu <= cpu_room && it.capacity.memory <= memory_room;
        let types: Vec<u32> = c
            .types
            .iter()
            .copied()
            .filter(|&t| {
                let it = &pool.types[t as usize];
                requests.fits_in(&it.allocatable)
                    && within_limits(it)
                    && merged.as_ref().is_none_or(|reqs| {
                        it.requirements.conflict(reqs).is_none() && it.cheapest(reqs).is_some()
                    })
            })
            .collect();
        if types.is_empty() {
            let blocked_by_limits = c.types.iter().any(|&t| {
                requests.fits_in(&pool.types[t as usize].allocatable)
                    && !within_limits(&pool.types[t as usize])
            });
            return Err(match (blocked_by_limits, limits.cpu) {
                (true, Some(limit)) if cpu_room < i64::MAX => Rejection::Limit {
                    resource: CPU,
                    limit,
                    in_use: used.cpu,
                },
                (true, _) => Rejection::Limit {
                    resource: MEMORY,
                    limit: limits.memory.unwrap_or(0),
                    in_use: used.memory,
                },
                _ => Rejection::NoInstanceTypeFits {
                    closest: None,
                    shortfalls: Vec::new(),
                },
            });
        }
        let mut min_values_relaxed = false;
        let reqs = merged.as_ref().unwrap_or(&c.requirements).clone();
        for (key, r) in reqs.iter() {
            if let Some(needed) = r.min_values {
                let distinct: HashSet<&String> = types
                    .iter()
                    .filter_map(|&t| {
                        pool.types[t as usize]
                            .requirements
                            .get(key)
                            .and_then(|v| v.values())
                    })
                    .flatten()
                    .filter(|v| r.has(v))
                    .collect();
                if distinct.len() < needed {
                    if self.policies.min_values == MinValuesPolicy::Strict || distinct.is_empty() {
                        return Err(Rejection::MinValues {
                            key: key.clone(),
                            needed,
                            available: distinct.len(),
                        });
                    }
                    // BestEffort: as many distinct values as the types can offer.
                    let relaxed = merged.get_or_insert_with(|| c.requirements.clone());
                    relaxed.relax_min_values(key, distinct.len());
                    min_values_relaxed = true;
                }
            }
        }
        Ok(Update {
            requirements: merged,
            min_values_relaxed,
            types,
            placement,
        })
    }

    /// A new NodeClaim for the pod from this pool: from the efficient types when the pod fits
    /// one of them, else from all.
    pub(super) fn new_candidate(
        &self,
        pool_index: usize,
        p: usize,
        attempt: &Attempt,
    ) -> Result<(Candidate, Update), Rejection> {
        let pool = &self.pools[pool_index];
        if pool.efficient.len() < pool.types.len() {
            if let Ok(found) = self.new_candidate_from(pool_index, p, attempt, &pool.efficient) {
                return Ok(found);
            }
        }
        let all: Vec<u32> = (0..pool.types.len() as u32).collect();
        self.new_candidate_from(pool_index, p, attempt, &all)
    }

    pub(super) fn new_candidate_from(
        &self,
        pool_index: usize,
        p: usize,
        attempt: &Attempt,
        from: &[u32],
    ) -> Result<(Candidate, Update), Rejection> {
        let pool = &self.pools[pool_index];
        let limits: &Limits = &pool.input.limits;
        let used = pool.input.in_use + pool.reserved;
        if let Some(max) = limits.nodes {
            if pool.input.nodes_in_use + pool.planned >= max {
                return Err(Rejection::Limit {
                    resource: "nodes",
                    limit: max,
                    in_use: pool.input.nodes_in_use + pool.planned,
                });
            }
        }
        let room = Resources {
            cpu: limits.cpu.map_or(i64::MAX, |l| l - used.cpu),
            memory: limits.memory.map_or(i64::MAX, |l| l - used.memory),
            ..Resources::ZERO
        };
        let types: Vec<u32> = from
            .iter()
            .copied()
            .filter(|&t| {
                let cap = &pool.types[t as usize].capacity;
                cap.cpu <= room.cpu && cap.memory <= room.memory
            })
            .collect();
        if types.is_empty() {
            let (resource, limit, in_use) = if limits.cpu.is_some_and(|l| {
                room.cpu < l
                    && room.cpu < pool.types.iter().map(|t| t.capacity.cpu).min().unwrap_or(0)
            }) {
                (CPU, limits.cpu.unwrap_or(0), used.cpu)
            } else if let Some(l) = limits.memory {
                (MEMORY, l, used.memory)
            } else {
                return Err(Rejection::NoInstanceTypes);
            };
            return Err(Rejection::Limit {
                resource,
                limit,
                in_use,
            });
        }
        let max_allocatable =
            max_allocatable(types.iter().map(|&t| pool.types[t as usize].as_ref()));
        let candidate = Candidate {
            pool: pool_index,
            hostname: format!("{}-{}", pool.input.name, self.candidates.len() + 1),
            requirements: pool.input.requirements.clone(),
            types,
            max_allocatable,
            requests: pool.input.daemon_overhead,
            min_values_relaxed: false,
            pods: Vec::new(),
            ports: Vec::new(),
            domain_cache: Default::default(),
        };
        let update = self.try_candidate(&candidate, p, attempt)?;
        Ok((candidate, update))
    }

    pub(super) fn commit(&mut self, c: usize, p: usize, update: Update) {
        let placement = self.add_to(c, p, update);
        self.placed.push(p);
        self.topology.record(p, &placement);
    }

    /// Puts the pod on the NodeClaim (requirements, types, the pool's reservation); returns
    /// its domains there, the NodeClaim's hostname included.
    pub(super) fn add_to(&mut self, c: usize, p: usize, update: Update) -> Placement {
        let pod = &self.problem.pods[p];
        let candidate = &mut self.candidates[c];
        let pool = &mut self.pools[candidate.pool];
        if candidate.pods.is_empty() {
            pool.planned += 1;
        } else {
            pool.reserved = pool.reserved - pool.types[candidate.types[0] as usize].capacity;
        }
        if let Some(r) = update.requirements {
            candidate.requirements = r;
        }
        candidate.min_values_relaxed |= update.min_values_relaxed;
        candidate.types = update.types;
        candidate.domain_cache.get_mut().clear();
        candidate.max_allocatable = max_allocatable(
            candidate
                .types
                .iter()
                .map(|&t| pool.types[t as usize].as_ref()),
        );
        pool.reserved += pool.types[candidate.types[0] as usize].capacity;
        candidate.requests += pod.requests;
        candidate.pods.push(p);
        candidate.ports.extend(pod.host_ports.iter().cloned());
        let mut placement = update.placement;
        if !placement.iter().any(|(k, _)| k == labels::HOSTNAME) {
            placement.push((labels::HOSTNAME.to_string(), candidate.hostname.clone()));
        }
        placement
    }
}
