//! Topology spread judged the way kube-scheduler applies it: a pod's `DoNotSchedule` spread is
//! checked when the pod binds, against the pods bound before it — `count(its domain) + (1 if
//! it matches its own selector) - min(count over the eligible domains) <= maxSkew`. A selector
//! counts every pod it matches in the namespace, constrained or not, and a pod need not match
//! its own selector; pods that are merely counted bind anywhere. So final counts alone say
//! little: a plan is valid when *some* binding order passes every constrained pod.
//!
//! The plan's own binding order (the solver's placement order) is replayed first: if every
//! spread pod passes in it, that order is the witness. Otherwise an order is searched that
//! fills domains evenly: at each step the pod whose domains hold the fewest matching pods
//! binds, constrained pods before merely-counted ones, and a pod that cannot bind yet waits
//! until a minimum it depends on rises. A pod left waiting is reported.
//!
//! [`refused_if_bound_last`] measures how order-dependent a valid plan is: the constrained pods
//! that kube-scheduler would refuse if every other pod bound first.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use super::super::pod::{untolerated, PodKey, SchedPod, Selector, TopologySpread, Unsatisfiable};
use super::super::problem::Problem;
use super::super::requirements::normalize_key;
use super::PlacedNode;
use crate::api::labels;

/// Pods counted per domain by one (key, selector, namespace) of some pending pod's spread.
#[derive(Clone)]
struct Group<'a> {
    key: &'a str,
    selector: &'a Selector,
    namespace: &'a str,
    counts: HashMap<&'a str, i64>,
    /// Every domain some constraint on this group balances over (for noticing a rising
    /// minimum); empty for hostname, whose minimum is always an empty node's 0.
    domains: BTreeSet<&'a str>,
}

impl<'a> Group<'a> {
    fn selects(&self, pod: &SchedPod) -> bool {
        pod.key.namespace == self.namespace && self.selector.matches(&pod.labels)
    }
    fn count(&self, domain: &str) -> i64 {
        self.counts.get(domain).copied().unwrap_or(0)
    }
    fn lowest(&self) -> i64 {
        self.domains
            .iter()
            .map(|d| self.count(d))
            .min()
            .unwrap_or(0)
    }
}

/// One `DoNotSchedule` spread of a placed pod.
#[derive(Clone)]
struct Constraint<'a> {
    group: usize,
    max_skew: i64,
    /// 1 when the pod matches its own selector.
    own: i64,
    domain: &'a str,
    /// The domains the minimum is taken over; `None`: the minimum is 0 (hostname, or fewer
    /// eligible domains than `minDomains`).
    eligible: Option<Vec<&'a str>>,
}

impl Constraint<'_> {
    fn min(&self, groups: &[Group]) -> i64 {
        let group = &groups[self.group];
        self.eligible
            .as_ref()
            .and_then(|e| e.iter().map(|d| group.count(d)).min())
            .unwrap_or(0)
    }
    fn holds(&self, groups: &[Group]) -> bool {
        groups[self.group].count(self.domain) + self.own - self.min(groups) <= self.max_skew
    }
}

/// A pending pod the plan placed, with what it counts in and what constrains it.
#[derive(Clone)]
struct Binding<'a> {
    pod: &'a SchedPod,
    node: &'a str,
    counted_in: Vec<(usize, &'a str)>,
    constraints: Vec<Constraint<'a>>,
}

impl Binding<'_> {
    fn holds(&self, groups: &[Group]) -> bool {
        self.constraints.iter().all(|k| k.holds(groups))
    }

    /// How full the domains that decide this pod's turn already are — a spread pod's own
    /// constraints', a merely counted pod's groups' —: it binds when they are among the
    /// emptiest. (A spread pod's turn must not wait on groups it is only counted in: a zone
    /// count would hold a hostname spread pod back until its node had filled.)
    fn level(&self, groups: &[Group]) -> i64 {
        let count = |(g, d): (usize, &str)| groups[g].count(d);
        let highest = if self.constraints.is_empty() {
            self.counted_in.iter().copied().map(count).max()
        } else {
            self.constraints
                .iter()
                .map(|c| count((c.group, c.domain)))
                .max()
        };
        highest.unwrap_or(0)
    }
}

#[derive(Clone)]
struct Model<'a> {
    groups: Vec<Group<'a>>,
    bindings: Vec<Binding<'a>>,
    problems: Vec<String>,
}

fn domain_of<'n>(node: &'n PlacedNode, key: &str) -> Option<&'n str> {
    node.labels.get(key).map(String::as_str)
}

impl<'a> Model<'a> {
    fn new(problem: &'a Problem, nodes: &'a [PlacedNode<'a>]) -> Model<'a> {
        let mut model = Model {
            groups: Vec::new(),
            bindings: Vec::new(),
            problems: Vec::new(),
        };
        let mut index: HashMap<(&str, &Selector, &str), usize> = HashMap::new();
        for node in nodes {
            for pod in &node.pods[node.running..] {
                let mut constraints = Vec::new();
                for spread in pod
                    .spreads
                    .iter()
                    .filter(|s| s.when_unsatisfiable == Unsatisfiable::DoNotSchedule)
                {
                    let key = normalize_key(&spread.topology_key);
                    let Some(domain) = domain_of(node, key) else {
                        model.problems.push(format!(
                            "spread of {} on {key}: its node {} has no {key} label",
                            pod.key, node.name
                        ));
                        continue;
                    };
                    let namespace = pod.key.namespace.as_str();
                    let g = *index
                        .entry((key, &spread.selector, namespace))
                        .or_insert_with(|| {
                            model.groups.push(Group {
                                key,
                                selector: &spread.selector,
                                namespace,
                                counts: HashMap::new(),
                                domains: BTreeSet::new(),
                            });
                            model.groups.len() - 1
                        });
                    let eligible = (key != labels::HOSTNAME)
                        .then(|| eligible_domains(problem, pod, spread, key))
                        .flatten();
                    if let Some(set) = &eligible {
                        model.groups[g].domains.extend(set.iter().copied());
                    }
                    constraints.push(Constraint {
                        group: g,
                        max_skew: spread.max_skew,
                        own: i64::from(model.groups[g].selects(pod)),
                        domain,
                        eligible: eligible.map(|set| set.into_iter().collect()),
                    });
                }
                model.bindings.push(Binding {
                    pod,
                    node: &node.name,
                    counted_in: Vec::new(),
                    constraints,
                });
            }
        }
        // What every pod counts in: running pods from the start, placed pods once bound.
        let mut i = 0;
        for node in nodes {
            for (n, pod) in node.pods.iter().enumerate() {
                for (g, group) in model.groups.iter_mut().enumerate() {
                    let Some(domain) = domain_of(node, group.key) else {
                        continue;
                    };
                    if !group.selects(pod) {
                        continue;
                    }
                    if n < node.running {
                        *group.counts.entry(domain).or_default() += 1;
                    } else {
                        model.bindings[i].counted_in.push((g, domain));
                    }
                }
                if n >= node.running {
                    i += 1;
                }
            }
        }
        model
            .bindings
            .retain(|b| !b.constraints.is_empty() || !b.counted_in.is_empty());
        model
    }

    /// Binds in `order` (pods it leaves out last); true when every spread pod passes.
    fn replay(mut self, order: &[PodKey]) -> bool {
        let position: HashMap<&PodKey, usize> =
            order.iter().enumerate().map(|(i, k)| (k, i)).collect();
        let mut turns: Vec<usize> = (0..self.bindings.len()).collect();
        turns.sort_by_key(|&i| {
            position
                .get(&self.bindings[i].pod.key)
                .copied()
                .unwrap_or(usize::MAX)
        });
        for i in turns {
            let b = &self.bindings[i];
            if !b.holds(&self.groups) {
                return false;
            }
            for &(g, domain) in &b.counted_in {
                *self.groups[g].counts.entry(domain).or_default() += 1;
            }
        }
        true
    }

    /// Binds in the order described in the module comment; reports every constrained pod no
    /// order found here can bind (the nodes without a spread's key are in `problems`).
    fn bind_all(mut self) -> Vec<String> {
        let mut bound = vec![false; self.bindings.len()];
        let mut next: Vec<usize> = (0..self.bindings.len()).collect();
        // A waiting pod is woken when the lowest count of its blocking group rises; one whose
        // own eligible minimum rose without that is caught by the next round.
        while !next.is_empty() {
            self.bind_round(next, &mut bound);
            next = (0..self.bindings.len())
                .filter(|&i| !bound[i] && self.bindings[i].holds(&self.groups))
                .collect();
        }
        let mut found = Vec::new();
        for b in self
            .bindings
            .iter()
            .zip(&bound)
            .filter(|(_, &b)| !b)
            .map(|(b, _)| b)
        {
            let Some(k) = b.constraints.iter().find(|k| !k.holds(&self.groups)) else {
                continue;
            };
            let group = &self.groups[k.group];
            found.push(format!(
                "spread of {} on {}: no binding order places it on {} ({}={} would hold {} matching pods against a minimum of {}, maxSkew {})",
                b.pod.key,
                group.key,
                b.node,
                group.key,
                k.domain,
                group.count(k.domain) + k.own,
                k.min(&self.groups),
                k.max_skew
            ));
        }
        found
    }

    fn bind_round(&mut self, pods: Vec<usize>, bound: &mut [bool]) {
        let class = |b: &Binding| u8::from(b.constraints.is_empty());
        let mut heap: BinaryHeap<Reverse<(i64, u8, usize)>> = pods
            .into_iter()
            .map(|i| {
                let b = &self.bindings[i];
                Reverse((b.level(&self.groups), class(b), i))
            })
            .collect();
        let mut waiting: Vec<Vec<usize>> = vec![Vec::new(); self.groups.len()];
        while let Some(Reverse((level, c, i))) = heap.pop() {
            let b = &self.bindings[i];
            if bound[i] {
                continue;
            }
            let now = b.level(&self.groups);
            if now != level {
                heap.push(Reverse((now, c, i)));
                continue;
            }
            if let Some(blocking) = b.constraints.iter().find(|k| !k.holds(&self.groups)) {
                waiting[blocking.group].push(i);
                continue;
            }
            bound[i] = true;
            for &(g, domain) in &b.counted_in {
                let group = &mut self.groups[g];
                let before = group.lowest();
                *group.counts.entry(domain).or_default() += 1;
                if group.lowest() > before {
                    for w in waiting[g].drain(..) {
                        let wb = &self.bindings[w];
                        heap.push(Reverse((wb.level(&self.groups), class(wb), w)));
                    }
                }
            }
        }
    }
}

/// Every `DoNotSchedule` spread of the plan's pods, checked per binding (module comment).
pub(super) fn check(
    problem: &Problem,
    nodes: &[PlacedNode],
    order: &[PodKey],
    problems: &mut Vec<String>,
) {
    let model = Model::new(problem, nodes);
    problems.extend(model.problems.iter().cloned());
    let witnessed = !order.is_empty() && model.clone().replay(order);
    if !witnessed {
        problems.extend(model.bind_all());
    }
}

/// The constrained pods kube-scheduler would refuse if every other pod bound before them: a
/// plan with none binds in any order; each one may cost another provisioning round.
pub(super) fn refused_if_bound_last(problem: &Problem, nodes: &[PlacedNode]) -> usize {
    let mut model = Model::new(problem, nodes);
    for b in &model.bindings {
        for &(g, domain) in &b.counted_in {
            *model.groups[g].counts.entry(domain).or_default() += 1;
        }
    }
    model
        .bindings
        .iter()
        .filter(|b| {
            b.constraints.iter().any(|k| {
                // Everything else bound: its own count comes off its domain first.
                let group = &model.groups[k.group];
                let others = |d: &str| group.count(d) - if d == k.domain { k.own } else { 0 };
                let min = k
                    .eligible
                    .as_ref()
                    .and_then(|e| e.iter().map(|d| others(d)).min())
                    .unwrap_or(0);
                others(k.domain) + k.own - min > k.max_skew
            })
        })
        .count()
}

/// The domains a spread balances over for `pod`: every value the pools' instance types and
/// the existing nodes offer for `key`, narrowed by the pod's node affinity and tolerations as
/// its policies say; `None` when fewer than `minDomains` remain (the minimum is then 0).
fn eligible_domains<'p>(
    problem: &'p Problem,
    pod: &SchedPod,
    spread: &TopologySpread,
    key: &str,
) -> Option<BTreeSet<&'p str>> {
    let mut domains: BTreeSet<&str> = BTreeSet::new();
    for pool in &problem.pools {
        if spread.honor_taints && untolerated(&pool.taints, &pod.tolerations).is_some() {
            continue;
        }
        let pool_allows = pool.requirements.get(key);
        for t in &pool.instance_types {
            if t.requirements.conflict(&pool.requirements).is_some() {
                continue;
            }
            for v in t
                .requirements
                .get(key)
                .and_then(|r| r.values())
                .into_iter()
                .flatten()
            {
                if pool_allows.is_none_or(|r| r.has(v)) {
                    domains.insert(v.as_str());
                }
            }
        }
    }
    for node in problem
        .existing
        .iter()
        .filter(|n| !spread.honor_taints || untolerated(&n.taints, &pod.tolerations).is_none())
    {
        if let Some(v) = node.labels.get(key) {
            domains.insert(v.as_str());
        }
    }
    if spread.honor_node_affinity {
        if let Some(term) = pod.node_terms.first().and_then(|t| t.get(key)) {
            domains.retain(|d| term.has(d));
        }
    }
    let enough = spread.min_domains.is_none_or(|m| domains.len() as i64 >= m);
    enough.then_some(domains)
}
