//! The provisioning solver: places pending pods on existing nodes, on NodeClaims planned in
//! this pass, or on new NodeClaims from the NodePools by weight, keeping for each NodeClaim the
//! whole set of instance types that still fit all its pods.
//!
//! Pods go in upstream's order (CPU, then memory, descending). Each pod first tries with all its
//! preferences as if required; only if that fails are they relaxed one by one. A NodeClaim is
//! first-fit: the earliest one that can take the pod does, which packs nodes densely.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

mod existing;
mod fold;
mod nodeclaim;
mod packing;
use nodeclaim::{efficient_types, max_allocatable};
mod preferences;
mod repack;

use super::instance_type::{Buyable, InstanceType};
use super::pod::SchedPod;
use super::problem::{
    ExistingNode, NodeClaimPlan, Plan, PodOrder, Policies, PoolInput, Problem, Rejection,
    Unschedulable,
};
use super::requirements::Requirements;
use super::resources::Resources;
use super::topology::{ActiveTerms, DomainSource, Placement, PodRules, Topology};

/// Plans NodeClaims for `problem`'s pending pods.
/// Solves under the default policies (`Strict` minValues, preferences respected).
pub fn solve(problem: &Problem) -> Plan {
    solve_with(problem, Policies::default())
}

pub fn solve_with(problem: &Problem, policies: Policies) -> Plan {
    Solver::new(problem, policies).run()
}

/// Smaller first: by CPU requested, then memory.
fn by_size(a: &SchedPod, b: &SchedPod) -> std::cmp::Ordering {
    let (a, b) = (&a.requests, &b.requests);
    a.cpu.cmp(&b.cpu).then(a.memory.cmp(&b.memory))
}

/// One scheduling attempt's view of a pod: its node requirements and active preferences.
#[derive(Debug, Clone)]
struct Attempt {
    requirements: Option<Requirements>,
    active: ActiveTerms,
    /// The pod's topology rules for this attempt, taken once per scan of the nodes (counts
    /// do not change until the pod is placed); computed on each call when absent.
    rules: Option<Rc<PodRules>>,
}

struct PoolState<'a> {
    input: &'a PoolInput,
    /// Instance types, cheapest first.
    types: &'a [Arc<InstanceType>],
    /// Label keys the instance types define (so a pod may require them).
    type_keys: &'a HashSet<String>,
    /// Types whose price per unit of this workload's resource mix is near the best: new
    /// NodeClaims start from these, so big nodes are not built on poor-value types.
    efficient: Vec<u32>,
    /// Sum of the capacity of each planned NodeClaim's cheapest instance type. Limits are
    /// checked against it while solving; at the end each NodeClaim's launch options are cut
    /// to an equal share of the remaining room, so whichever options the launches pick, the
    /// pool stays within its limits.
    reserved: Resources,
    planned: i64,
}

#[derive(Clone)]
struct Candidate {
    pool: usize,
    hostname: String,
    requirements: Requirements,
    types: Vec<u32>,
    max_allocatable: Resources,
    requests: Resources,
    pods: Vec<usize>,
    ports: Vec<(String, String, i32)>,
    min_values_relaxed: bool,
    /// Per topology key, the values its types allow under its own requirements: asked for on
    /// every placement try, changed only by a commit (which clears it).
    domain_cache: RefCell<HashMap<String, Vec<String>>>,
}

struct Existing<'a> {
    node: &'a ExistingNode,
    requirements: &'a Requirements,
    free: Resources,
    pods: Vec<usize>,
    ports: Vec<(String, String, i32)>,
}

/// What adding a pod changes on a NodeClaim.
struct Update {
    requirements: Option<Requirements>,
    min_values_relaxed: bool,
    types: Vec<u32>,
    placement: Placement,
}

struct Solver<'a> {
    problem: &'a Problem,
    policies: Policies,
    /// Per (constraint signature, attempt): how many leading existing nodes and candidates
    /// are known to refuse it permanently (see [`Rejection::is_permanent`]).
    skip: HashMap<(u64, usize), (usize, usize)>,
    pools: Vec<PoolState<'a>>,
    existing: Vec<Existing<'a>>,
    candidates: Vec<Candidate>,
    topology: Topology,
    /// Pods in the order they were placed (the plan's binding order).
    placed: Vec<usize>,
}

impl<'a> Solver<'a> {
    fn new(problem: &'a Problem, policies: Policies) -> Self {
        let mut pools: Vec<PoolState> = problem
            .pools
            .iter()
            .map(|input| {
                let admitted = input.admitted();
                let types = &admitted.types;
                let efficient = efficient_types(
                    types,
                    &input.requirements,
                    &problem.pods,
                    input.daemon_overhead,
                );
                PoolState {
                    input,
                    types,
                    type_keys: &admitted.keys,
                    efficient,
                    reserved: Resources::ZERO,
                    planned: 0,
                }
            })
            .collect();
        // Higher weight first; ties by name for determinism.
        pools.sort_by(|a, b| {
            b.input
                .weight
                .cmp(&a.input.weight)
                .then_with(|| a.input.name.cmp(&b.input.name))
        });

        let existing: Vec<Existing> = problem
            .existing
            .iter()
            .map(|node| Existing {
                node,
                requirements: node.requirements(),
                free: node.allocatable - node.requested,
                pods: Vec::new(),
                ports: node
                    .pods
                    .iter()
                    .flat_map(|p| p.host_ports.iter().cloned())
                    .collect(),
            })
            .collect();

        // Spread domains: every value a pool's instance types or an existing node can have,
        // with the taints of where they come from (for `nodeTaintsPolicy: Honor`).
        let mut universe: HashMap<String, Vec<DomainSource>> = HashMap::new();
        let keys: HashSet<&str> = problem
            .pods
            .iter()
            .flat_map(|p| p.spreads.iter().map(|s| s.topology_key.as_str()))
            .collect();
        for key in keys {
            let key = super::requirements::normalize_key(key);
            let sources = universe.entry(key.to_string()).or_default();
            for pool in &pools {
                let allowed = pool.input.requirements.get(key);
                let values = pool
                    .types
                    .iter()
                    .filter_map(|t| t.requirements.get(key).and_then(|r| r.values()))
                    .flatten()
                    .filter(|v| allowed.is_none_or(|a| a.has(v)))
                    .cloned()
                    .collect();
                sources.push(DomainSource {
                    values,
                    taints: pool.input.taints.clone(),
                });
            }
            for node in &problem.existing {
                if let Some(v) = node.labels.get(key) {
                    sources.push(DomainSource {
                        values: [v.clone()].into(),
                        taints: node.taints.clone(),
                    });
                }
            }
        }
        let running: Vec<(&SchedPod, &Requirements, &str)> = existing
            .iter()
            .flat_map(|e| {
                e.node
                    .pods
                    .iter()
                    .map(move |p| (p, e.requirements, e.node.name.as_str()))
            })
            .collect();
        let topology = Topology::new(&problem.pods, &running, universe);
        Solver {
            problem,
            policies,
            skip: HashMap::new(),
            pools,
            existing,
            candidates: Vec::new(),
            topology,
            placed: Vec::new(),
        }
    }

    fn run(mut self) -> Plan {
        let pods = &self.problem.pods;
        let mut order: Vec<usize> = (0..pods.len()).collect();
        if self.policies.order == PodOrder::KubeScheduler {
            return self.run_as_kube_scheduler(order);
        }
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&pods[a], &pods[b]);
            by_size(pb, pa)
                .then(pa.created.cmp(&pb.created))
                .then_with(|| pa.key.cmp(&pb.key))
        });
        // Pods with constraints go first, one by one; unconstrained pods then fill what is
        // already paid for, and the rest are packed into nodes of the most cost-efficient types.
        let (plain, constrained): (Vec<usize>, Vec<usize>) =
            order.into_iter().partition(|&p| self.is_plain(p));
        // Pods that repel each other per node set the least number of nodes: they open them
        // first, so the others fill those nodes instead of a node of their own that no such
        // pod may join later (the order stays upstream's within each part).
        let (one_per_node, constrained): (Vec<usize>, Vec<usize>) = constrained
            .into_iter()
            .partition(|&p| pods[p].repels_itself_per_node());
        let constrained = one_per_node.into_iter().chain(constrained);
        let mut unschedulable = Vec::new();
        let mut place = |solver: &mut Self, p: usize| {
            if let Err(reasons) = solver.schedule(p) {
                unschedulable.push(Unschedulable {
                    pod: pods[p].key.clone(),
                    reasons,
                });
            }
        };
        for p in constrained {
            place(&mut self, p);
        }
        let leftover: Vec<usize> = plain
            .into_iter()
            .filter(|&p| !self.place_on_slack(p))
            .collect();
        let leftover = self.pack(leftover);
        for p in leftover {
            place(&mut self, p);
        }
        self.fold_underfilled();
        self.repack_small_rounds();
        self.into_plan(unschedulable)
    }

    /// The pods one by one, biggest first ([`PodOrder::KubeScheduler`]).
    fn run_as_kube_scheduler(mut self, mut order: Vec<usize>) -> Plan {
        let pods = &self.problem.pods;
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&pods[a], &pods[b]);
            by_size(pb, pa).then_with(|| pa.key.cmp(&pb.key))
        });
        let mut unschedulable = Vec::new();
        for p in order {
            if let Err(reasons) = self.schedule(p) {
                unschedulable.push(Unschedulable {
                    pod: pods[p].key.clone(),
                    reasons,
                });
            }
        }
        self.into_plan(unschedulable)
    }

    fn schedule(&mut self, p: usize) -> Result<(), Vec<(String, Rejection)>> {
        let pod = &self.problem.pods[p];
        if let Some(r) = pod.unknown_resources.first() {
            let reasons = self
                .pools
                .iter()
                .map(|pool| {
                    (
                        pool.input.name.clone(),
                        Rejection::UnknownResource(r.clone()),
                    )
                })
                .collect();
            return Err(reasons);
        }
        let attempts = Self::attempts(
            pod,
            self.policies.preferences,
            self.topology.counted_by_spread(p),
        );
        let signature = pod.constraint_signature();
        for (a, attempt) in attempts.iter().enumerate() {
            let attempt = &self.with_rules(p, attempt);
            if attempt
                .rules
                .as_ref()
                .is_some_and(|r| self.topology.refuses_everywhere(r))
            {
                continue;
            }
            let (start_existing, start_candidates) =
                self.skip.get(&(signature, a)).copied().unwrap_or((0, 0));
            let (found, refusing) = self.find_existing(p, attempt, start_existing);
            if let Some((e, placement)) = found {
                self.bind_existing(e, p, &placement);
                return Ok(());
            }
            let skip_existing = start_existing + refusing;
            let mut skip_candidates = start_candidates;
            for c in start_candidates..self.candidates.len() {
                match self.try_candidate(&self.candidates[c], p, attempt) {
                    Ok(update) => {
                        self.skip
                            .insert((signature, a), (skip_existing, skip_candidates));
                        self.commit(c, p, update);
                        return Ok(());
                    }
                    Err(r) if r.is_permanent() && c == skip_candidates => skip_candidates += 1,
                    Err(_) => {}
                }
            }
            self.skip
                .insert((signature, a), (skip_existing, skip_candidates));
            for pool in 0..self.pools.len() {
                if let Ok((candidate, update)) = self.new_candidate(pool, p, attempt) {
                    self.candidates.push(candidate);
                    self.commit(self.candidates.len() - 1, p, update);
                    return Ok(());
                }
            }
        }
        // Explain with the most relaxed attempt: why each pool cannot take the pod.
        let last = attempts.last().cloned().unwrap_or(Attempt {
            requirements: None,
            active: ActiveTerms {
                preferred_affinity: false,
                schedule_anyway_spreads: false,
                order_safe: false,
            },
            rules: None,
        });
        Err((0..self.pools.len())
            .map(|pool| {
                let reason = match self.new_candidate(pool, p, &last) {
                    Err(Rejection::NoInstanceTypeFits { .. }) => self.closest_fit(pool, p, &last),
                    Err(r) => r,
                    Ok(_) => Rejection::NoInstanceTypes,
                };
                (self.pools[pool].input.name.clone(), reason)
            })
            .collect())
    }

    /// The attempt with the pod's topology rules taken now, for a scan of the nodes.
    fn with_rules(&self, p: usize, attempt: &Attempt) -> Attempt {
        let mut prepared = attempt.clone();
        if !self.topology.is_free(p) {
            prepared.rules = Some(Rc::new(self.rules(p, attempt)));
        }
        prepared
    }

    fn rules(&self, p: usize, attempt: &Attempt) -> PodRules {
        self.topology.rules(
            p,
            &self.problem.pods[p],
            attempt.active,
            attempt.requirements.as_ref(),
        )
    }

    /// The topology domains the pod would take on a node whose possible values per key are
    /// `domains(key)`.
    fn place(
        &self,
        p: usize,
        attempt: &Attempt,
        domains: &dyn Fn(&str) -> Option<Vec<String>>,
    ) -> Result<Placement, Rejection> {
        let placed = match &attempt.rules {
            Some(rules) => self.topology.place(rules, domains),
            None => self.topology.place(&self.rules(p, attempt), domains),
        };
        placed.map_err(Rejection::Topology)
    }

    /// For an explanation: the instance type closest to fitting the pod on a new node.
    fn closest_fit(&self, pool_index: usize, p: usize, attempt: &Attempt) -> Rejection {
        let pool = &self.pools[pool_index];
        let pod = &self.problem.pods[p];
        let needed = pool.input.daemon_overhead + pod.requests;
        let mut reqs = pool.input.requirements.clone();
        if let Some(r) = &attempt.requirements {
            reqs.add_all(r);
        }
        let worst_ratio = |t: &InstanceType| {
            needed
                .shortfalls(&t.allocatable)
                .iter()
                .map(|(_, need, have)| *need as f64 / (*have).max(1) as f64)
                .fold(0.0, f64::max)
        };
        let compatible: Vec<&Arc<InstanceType>> = pool
            .types
            .iter()
            .filter(|t| t.requirements.conflict(&reqs).is_none())
            .collect();
        let most = max_allocatable(compatible.iter().map(|t| t.as_ref()));
        if let Some((resource, _, _)) = needed
            .shortfalls(&most)
            .into_iter()
            .find(|(_, _, have)| *have == 0)
        {
            return Rejection::NotProvided(resource);
        }
        let closest = compatible
            .into_iter()
            .min_by(|a, b| worst_ratio(a).total_cmp(&worst_ratio(b)));
        match closest {
            Some(t) => Rejection::NoInstanceTypeFits {
                closest: Some(t.name.clone()),
                shortfalls: needed.shortfalls(&t.allocatable),
            },
            None => Rejection::NoInstanceTypes,
        }
    }

    fn into_plan(self, unschedulable: Vec<Unschedulable>) -> Plan {
        let pods = &self.problem.pods;
        let mut existing = BTreeMap::new();
        for e in &self.existing {
            if !e.pods.is_empty() {
                existing.insert(
                    e.node.name.clone(),
                    e.pods.iter().map(|&p| pods[p].key.clone()).collect(),
                );
            }
        }
        // Room each pool's limits leave beyond what was reserved, shared equally among its
        // NodeClaims: any combination of launch choices then stays within the limits.
        let mut share: Vec<Resources> = vec![Resources::ZERO; self.pools.len()];
        for (i, pool) in self.pools.iter().enumerate() {
            if pool.planned > 0 {
                let l = &pool.input.limits;
                let room = |limit: Option<i64>, used: i64| {
                    limit.map_or(i64::MAX / 2, |l| ((l - used) / pool.planned).max(0))
                };
                let used = pool.input.in_use + pool.reserved;
                share[i] = Resources {
                    cpu: room(l.cpu, used.cpu),
                    memory: room(l.memory, used.memory),
                    ..Resources::ZERO
                };
            }
        }
        let nodeclaims = self
            .candidates
            .into_iter()
            .map(|c| {
                let pool = &self.pools[c.pool];
                // Offer the launch every type that fits the final pods and requirements, not
                // only the ones the packing considered: more choice for spot and capacity
                // shortages.
                let reserved = pool.types[c.types[0] as usize].capacity;
                let cap = Resources {
                    cpu: reserved.cpu.saturating_add(share[c.pool].cpu),
                    memory: reserved.memory.saturating_add(share[c.pool].memory),
                    ..Resources::ZERO
                };
                let buyable = Buyable::of(&c.requirements);
                let mut types: Vec<(f64, Arc<InstanceType>)> = pool
                    .types
                    .iter()
                    .filter(|it| {
                        c.requests.fits_in(&it.allocatable)
                            && it.capacity.cpu <= cap.cpu
                            && it.capacity.memory <= cap.memory
                    })
                    .filter(|it| it.requirements.conflict(&c.requirements).is_none())
                    .filter_map(|it| it.cheapest_of(buyable).map(|o| (o.price, it.clone())))
                    .collect();
                types.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
                NodeClaimPlan {
                    pool: pool.input.name.clone(),
                    hostname: c.hostname,
                    requirements: c.requirements,
                    instance_types: types.into_iter().map(|(_, t)| t).collect(),
                    pods: c.pods.iter().map(|&p| pods[p].key.clone()).collect(),
                    requests: c.requests,
                    min_values_relaxed: c.min_values_relaxed,
                }
            })
            .collect();
        Plan {
            nodeclaims,
            existing,
            unschedulable,
            binding_order: self.placed.iter().map(|&p| pods[p].key.clone()).collect(),
        }
    }
}
