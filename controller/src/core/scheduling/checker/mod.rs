//! An independent check of a plan, written apart from the solver: it recomputes everything from
//! the problem and the plan's concrete launch choices, so a solver bug cannot hide behind the
//! solver's own bookkeeping. Used by tests (property tests run every random plan through it)
//! and by the benchmark.

mod spread;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::pod::{untolerated, AffinityTerm, SchedPod, Selector};
use super::problem::{Plan, Problem};
use super::requirements::Requirements;
use super::resources::Resources;
use crate::api::labels;

/// A node of the plan with concrete labels: an existing node, or a NodeClaim's launch choice.
struct PlacedNode<'a> {
    name: String,
    labels: BTreeMap<String, String>,
    /// The pods already running on it first (`running` of them), then those the plan adds.
    pods: Vec<&'a SchedPod>,
    running: usize,
}

/// Every violation found; empty means the plan is valid.
pub fn check(problem: &Problem, plan: &Plan) -> Vec<String> {
    let mut problems = Vec::new();
    let nodes = placed_nodes(problem, plan, &mut problems);
    check_node_requirements(&nodes, &mut problems);
    check_host_ports(&nodes, &mut problems);
    check_affinity(&nodes, &mut problems);
    spread::check(problem, &nodes, &plan.binding_order, &mut problems);
    problems
}

/// How many of the plan's spread-constrained pods kube-scheduler would refuse if each bound
/// after every other pod (see [`spread`]): 0 means the plan holds in any binding order.
pub fn refused_if_bound_last(problem: &Problem, plan: &Plan) -> usize {
    let nodes = placed_nodes(problem, plan, &mut Vec::new());
    spread::refused_if_bound_last(problem, &nodes)
}

/// The plan's nodes with their concrete labels and pods, checking on the way that every pod is
/// placed once, fits, tolerates its node and keeps its pool's requirements and limits.
fn placed_nodes<'a>(
    problem: &'a Problem,
    plan: &Plan,
    problems: &mut Vec<String>,
) -> Vec<PlacedNode<'a>> {
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
            running: node.pods.len(),
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

        let labels = choice.node_labels(&pool.labels, &nc.hostname);
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
        // A pod whose rules depend on the zone it lands in must pin its NodeClaim there: left
        // open, the launch may pick another zone than the one the plan counted it in.
        let zones = nc
            .requirements
            .get(labels::ZONE)
            .and_then(|r| r.values())
            .map_or(0, |v| v.len());
        if let Some(pod) = pods.iter().find(|p| depends_on_zone(p)) {
            if zones != 1 {
                problems.push(format!(
                    "nodeclaim {} leaves its zone open although pod {} has zone rules",
                    nc.hostname, pod.key
                ));
            }
        }
        nodes.push(PlacedNode {
            name: nc.hostname.clone(),
            labels,
            pods,
            running: 0,
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

    nodes
}

/// A `DoNotSchedule` zone spread, or required pod affinity or anti-affinity by zone.
fn depends_on_zone(pod: &SchedPod) -> bool {
    let zone = |key: &str| super::requirements::normalize_key(key) == labels::ZONE;
    pod.spreads.iter().any(|s| {
        s.when_unsatisfiable == super::pod::Unsatisfiable::DoNotSchedule && zone(&s.topology_key)
    }) || pod
        .affinity
        .iter()
        .chain(&pod.anti_affinity)
        .any(|t| zone(&t.topology_key))
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

/// An affinity term as the pods it selects: (namespaces, selector, topology key).
type TermKey<'a> = (&'a [String], &'a Selector, &'a str);

fn term_key<'a>(pod: &'a SchedPod, term: &'a AffinityTerm) -> TermKey<'a> {
    (
        pod.term_namespaces(term),
        &term.selector,
        term.topology_key.as_str(),
    )
}

/// The placed pods a term selects, per domain of its key (`None`: nodes without the key), and
/// how many there are in all.
#[derive(Default)]
struct Members<'a> {
    by_domain: HashMap<Option<&'a String>, Vec<&'a SchedPod>>,
    total: usize,
}

/// Required pod (anti-)affinity on the final placement: anti-affinity is symmetric, so it holds
/// in every binding order when it holds at the end. Terms repeat across replicas, so each
/// distinct term's members are gathered once.
fn check_affinity(nodes: &[PlacedNode], problems: &mut Vec<String>) {
    let all: Vec<(&SchedPod, &PlacedNode)> = nodes
        .iter()
        .flat_map(|n| n.pods.iter().map(move |p| (*p, n)))
        .collect();
    let selects = |(namespaces, selector, _): TermKey, other: &SchedPod| {
        namespaces.contains(&other.key.namespace) && selector.matches(&other.labels)
    };
    let mut index: HashMap<TermKey, Members> = HashMap::new();
    for &(pod, _) in &all {
        for term in pod.anti_affinity.iter().chain(&pod.affinity) {
            let key = term_key(pod, term);
            index.entry(key).or_insert_with(|| {
                let mut members = Members::default();
                for &(other, node) in all.iter().filter(|(o, _)| selects(key, o)) {
                    let list = members.by_domain.entry(domain_of(node, key.2)).or_default();
                    list.push(other);
                    members.total += 1;
                }
                members
            });
        }
    }

    for &(pod, node) in &all {
        for term in &pod.anti_affinity {
            let Some(domain) = domain_of(node, &term.topology_key) else {
                continue;
            };
            let members = &index[&term_key(pod, term)];
            let together = members.by_domain.get(&Some(domain)).into_iter().flatten();
            for other in together.filter(|o| o.key != pod.key) {
                problems.push(format!(
                    "pod {} has anti-affinity to {} but both are in {}={domain}",
                    pod.key, other.key, term.topology_key
                ));
            }
        }
        for term in &pod.affinity {
            let key = term_key(pod, term);
            let members = &index[&key];
            let domain = domain_of(node, &term.topology_key);
            // The pod is among the members (in its own domain) when the term selects it.
            let itself = usize::from(selects(key, pod));
            let others_here = members.by_domain.get(&domain).map_or(0, Vec::len) - itself;
            let together = domain.is_some() && others_here > 0;
            let first_of_its_set = itself == 1 && others_here == members.total - itself;
            if !together && !first_of_its_set {
                problems.push(format!(
                    "pod {}: required affinity on {} is not met",
                    pod.key, term.topology_key
                ));
            }
        }
    }
}
