//! An independent check of a plan, written apart from the solver: it recomputes everything from
//! the problem and the plan's concrete launch choices, so a solver bug cannot hide behind the
//! solver's own bookkeeping. Used by tests (property tests run every random plan through it)
//! and by the benchmark.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::pod::{untolerated, SchedPod, Unsatisfiable};
use super::problem::{Plan, Problem};
use super::requirements::Requirements;
use super::resources::Resources;
use crate::api::labels;

/// A node of the plan with concrete labels: an existing node, or a NodeClaim's launch choice.
struct PlacedNode<'a> {
    name: String,
    labels: BTreeMap<String, String>,
    pods: Vec<&'a SchedPod>,
}

/// Every violation found; empty means the plan is valid.
pub fn check(problem: &Problem, plan: &Plan) -> Vec<String> {
    let mut problems = Vec::new();
    let by_key: HashMap<String, &SchedPod> = problem
        .pods
        .iter()
        .map(|p| (p.key.to_string(), p))
        .collect();

    // Every pending pod is accounted for exactly once.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let all_keys = plan
        .nodeclaims
        .iter()
        .flat_map(|n| n.pods.iter())
        .chain(plan.existing.values().flatten())
        .chain(plan.unschedulable.iter().map(|u| &u.pod));
    for key in all_keys {
        *seen.entry(key.to_string()).or_default() += 1;
    }
    for pod in &problem.pods {
        match seen.get(&pod.key.to_string()) {
            Some(1) => {}
            Some(n) => problems.push(format!("pod {} appears {n} times in the plan", pod.key)),
            None => problems.push(format!("pod {} is missing from the plan", pod.key)),
        }
    }

    let mut nodes: Vec<PlacedNode> = Vec::new();
    for node in &problem.existing {
        let placed: Vec<&SchedPod> = plan
            .existing
            .get(&node.name)
            .into_iter()
            .flatten()
            .filter_map(|k| by_key.get(&k.to_string()).copied())
            .collect();
        let requested = placed
            .iter()
            .fold(node.requested, |acc, p| acc + p.requests);
        if !requested.fits_in(&node.allocatable) {
            problems.push(format!(
                "node {}: requests {} exceed allocatable {}",
                node.name, requested, node.allocatable
            ));
        }
        for pod in &placed {
            if let Some(t) = untolerated(&node.taints, &pod.tolerations) {
                problems.push(format!(
                    "pod {} on node {} does not tolerate taint {}",
                    pod.key, node.name, t.key
                ));
            }
        }
        let mut labels = node.labels.clone();
        labels.insert(labels::HOSTNAME.into(), node.name.clone());
        let mut pods: Vec<&SchedPod> = node.pods.iter().collect();
        pods.extend(placed);
        nodes.push(PlacedNode {
            name: node.name.clone(),
            labels,
            pods,
        });
    }

    let mut pool_usage: HashMap<&str, (Resources, i64)> = HashMap::new();
    for nc in &plan.nodeclaims {
        let Some(pool) = problem.pools.iter().find(|p| p.name == nc.pool) else {
            problems.push(format!(
                "nodeclaim {} names an unknown pool {}",
                nc.hostname, nc.pool
            ));
            continue;
        };
        let pods: Vec<&SchedPod> = nc
            .pods
            .iter()
            .filter_map(|k| by_key.get(&k.to_string()).copied())
            .collect();
        let requests = pods
            .iter()
            .fold(pool.daemon_overhead, |acc, p| acc + p.requests);
        if nc.instance_types.is_empty() {
            problems.push(format!("nodeclaim {} has no instance types", nc.hostname));
            continue;
        }
        for t in &nc.instance_types {
            if !requests.fits_in(&t.allocatable) {
                problems.push(format!(
                    "nodeclaim {}: {} does not fit on {} ({})",
                    nc.hostname, requests, t.name, t.allocatable
                ));
            }
            if let Some((key, ..)) = t.requirements.conflict(&pool.requirements) {
                problems.push(format!(
                    "nodeclaim {}: {} violates pool {} on {key}",
                    nc.hostname, t.name, pool.name
                ));
            }
        }
        let Some(choice) = nc.launch_choice() else {
            problems.push(format!(
                "nodeclaim {} has no available offering",
                nc.hostname
            ));
            continue;
        };
        let usage = pool_usage
            .entry(pool.name.as_str())
            .or_insert((Resources::ZERO, 0));
        usage.0 += choice.instance_type.capacity;
        usage.1 += 1;

        let mut labels = pool.labels.clone();
        for (key, req) in choice.instance_type.requirements.iter() {
            if let Some(v) = req
                .values()
                .filter(|v| v.len() == 1)
                .and_then(|v| v.iter().next())
            {
                labels.insert(key.clone(), v.clone());
            }
        }
        labels.insert(labels::ZONE.into(), choice.offering.zone.clone());
        labels.insert(
            labels::CAPACITY_TYPE.into(),
            choice.offering.capacity_type.as_str().into(),
        );
        labels.insert(labels::HOSTNAME.into(), nc.hostname.clone());
        // Keys no instance type provides are the pool's own labels, which nodes get from it.
        let provided: std::collections::HashSet<&String> = pool
            .instance_types
            .iter()
            .flat_map(|t| t.requirements.iter().map(|(k, _)| k))
            .collect();
        let node = Requirements::from_labels(&labels);
        let violated = pool.requirements.iter().find(|(key, req)| {
            provided.contains(key)
                && node
                    .get(key)
                    .map_or(!req.allows_absence(), |n| !req.intersects(n))
        });
        if let Some((key, _)) = violated {
            problems.push(format!(
                "nodeclaim {}: launch choice violates pool {} on {key}",
                nc.hostname, pool.name
            ));
        }
        for pod in &pods {
            if let Some(t) = untolerated(&pool.taints, &pod.tolerations) {
                problems.push(format!(
                    "pod {} does not tolerate pool {}'s taint {}",
                    pod.key, pool.name, t.key
                ));
            }
        }
        nodes.push(PlacedNode {
            name: nc.hostname.clone(),
            labels,
            pods,
        });
    }

    for pool in &problem.pools {
        let (used, count) = pool_usage
            .get(pool.name.as_str())
            .copied()
            .unwrap_or((Resources::ZERO, 0));
        let total = used + pool.in_use;
        let over = |limit: Option<i64>, value: i64| limit.is_some_and(|l| value > l);
        if over(pool.limits.cpu, total.cpu)
            || over(pool.limits.memory, total.memory)
            || over(pool.limits.nodes, count + pool.nodes_in_use)
        {
            problems.push(format!(
                "pool {} exceeds its limits: {} on {} nodes",
                pool.name,
                total,
                count + pool.nodes_in_use
            ));
        }
    }

    check_node_requirements(&nodes, &mut problems);
    check_host_ports(&nodes, &mut problems);
    check_topology(problem, &nodes, &mut problems);
    problems
}

fn check_node_requirements(nodes: &[PlacedNode], problems: &mut Vec<String>) {
    for node in nodes {
        let labels = Requirements::from_labels(&node.labels);
        for pod in &node.pods {
            let ok = pod.node_terms.is_empty()
                || pod
                    .node_terms
                    .iter()
                    .any(|t| t.unsatisfied_on(&labels).is_none());
            if !ok {
                problems.push(format!(
                    "pod {} on {}: no required node-affinity term holds",
                    pod.key, node.name
                ));
            }
        }
    }
}

fn check_host_ports(nodes: &[PlacedNode], problems: &mut Vec<String>) {
    for node in nodes {
        let mut used = BTreeSet::new();
        for (proto, _, port) in node.pods.iter().flat_map(|p| p.host_ports.iter()) {
            if !used.insert((proto, port)) {
                problems.push(format!(
                    "host port {port}/{proto} used twice on {}",
                    node.name
                ));
            }
        }
    }
}

fn domain_of<'n>(node: &'n PlacedNode, key: &str) -> Option<&'n String> {
    node.labels.get(super::requirements::normalize_key(key))
}

fn check_topology(problem: &Problem, nodes: &[PlacedNode], problems: &mut Vec<String>) {
    let all: Vec<(&SchedPod, &PlacedNode)> = nodes
        .iter()
        .flat_map(|n| n.pods.iter().map(move |p| (*p, n)))
        .collect();
    let selects = |namespaces: &[String], selector: &super::pod::Selector, other: &SchedPod| {
        namespaces.contains(&other.key.namespace) && selector.matches(&other.labels)
    };

    for &(pod, node) in &all {
        for term in &pod.anti_affinity {
            let namespaces = pod.term_namespaces(term);
            let Some(domain) = domain_of(node, &term.topology_key) else {
                continue;
            };
            for &(other, other_node) in &all {
                if other.key != pod.key
                    && selects(namespaces, &term.selector, other)
                    && domain_of(other_node, &term.topology_key) == Some(domain)
                {
                    problems.push(format!(
                        "pod {} has anti-affinity to {} but both are in {}={domain}",
                        pod.key, other.key, term.topology_key
                    ));
                }
            }
        }
        for term in &pod.affinity {
            let namespaces = pod.term_namespaces(term);
            let domain = domain_of(node, &term.topology_key);
            let matching: Vec<&PlacedNode> = all
                .iter()
                .filter(|(o, _)| o.key != pod.key && selects(namespaces, &term.selector, o))
                .map(|(_, n)| *n)
                .collect();
            let together = matching
                .iter()
                .any(|n| domain.is_some() && domain_of(n, &term.topology_key) == domain);
            let first_of_its_set = selects(namespaces, &term.selector, pod)
                && matching
                    .iter()
                    .all(|n| domain_of(n, &term.topology_key) == domain);
            if !together && !first_of_its_set {
                problems.push(format!(
                    "pod {}: required affinity on {} is not met",
                    pod.key, term.topology_key
                ));
            }
        }
    }

    // Spread: the final counts per domain may differ by at most maxSkew (hostname: at most
    // maxSkew per node, since an empty node is always possible).
    for pod in problem.pods.iter() {
        for spread in pod
            .spreads
            .iter()
            .filter(|s| s.when_unsatisfiable == Unsatisfiable::DoNotSchedule)
        {
            let key = super::requirements::normalize_key(&spread.topology_key);
            let ns = std::slice::from_ref(&pod.key.namespace);
            let mut counts: BTreeMap<&String, i64> = BTreeMap::new();
            for &(other, node) in &all {
                if selects(ns, &spread.selector, other) {
                    if let Some(d) = domain_of(node, key) {
                        *counts.entry(d).or_default() += 1;
                    }
                }
            }
            let max = counts.values().copied().max().unwrap_or(0);
            let min = if key == labels::HOSTNAME {
                0
            } else {
                eligible_min(problem, pod, spread, key, &counts)
            };
            if max - min > spread.max_skew {
                problems.push(format!(
                    "spread of {} on {key}: counts {counts:?} exceed maxSkew {}",
                    pod.key, spread.max_skew
                ));
            }
        }
    }
}

/// The lowest count among the domains the pod could have gone to.
fn eligible_min(
    problem: &Problem,
    pod: &SchedPod,
    spread: &super::pod::TopologySpread,
    key: &str,
    counts: &BTreeMap<&String, i64>,
) -> i64 {
    let mut domains: BTreeSet<String> = BTreeSet::new();
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
                    domains.insert(v.clone());
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
            domains.insert(v.clone());
        }
    }
    if spread.honor_node_affinity {
        if let Some(term) = pod.node_terms.first().and_then(|t| t.get(key)) {
            domains.retain(|d| term.has(d));
        }
    }
    if spread
        .min_domains
        .is_some_and(|m| (domains.len() as i64) < m)
    {
        return 0;
    }
    domains
        .iter()
        .map(|d| counts.get(d).copied().unwrap_or(0))
        .min()
        .unwrap_or(0)
}
