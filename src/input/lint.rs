//! `jointer lint`: the known ways a valid Karpenter setup still goes wrong.

use jointer_controller::api::labels::{CAPACITY_SPOT, CAPACITY_TYPE, INSTANCE_TYPE};
use jointer_controller::api::nodepool::Budget;
use jointer_controller::api::{NodePool, Operator};
use kube::ResourceExt;

use super::config::Config;
use super::diagnostics::Diagnostic;
use super::manifest::Object;
use super::render::NodeObjects;

/// Annotation on a NodePool listing lint rules deliberately waived for it (comma-separated).
pub const IGNORE_ANNOTATION: &str = "jointer.dev/lint-ignore";

/// Every rule, with what it protects against (shown by `jointer lint --rules`).
pub const RULES: [(&str, &str); 6] = [
    ("no-limits", "a NodePool without spec.limits can scale without bound (runaway cost)"),
    ("single-instance-type", "a NodePool allowing one instance type leaves nothing to optimise and fails when that type is short"),
    ("single-capacity-type", "a NodePool allowing only spot or only on-demand (no capacity-type requirement means on-demand only) cannot trade price against interruption"),
    ("spot-without-interruption", "spot is allowed while the interruption queue is disabled: nodes vanish with no 2-minute drain"),
    ("budget-blocks-all", "a budget of 0 nodes without a schedule blocks those disruptions forever"),
    ("unknown-node-class", "a NodePool references an EC2NodeClass that is not rendered"),
];

/// Values a requirement on `key` allows, if it restricts the key with `In`.
fn allowed_values<'a>(pool: &'a NodePool, key: &str) -> Option<Vec<&'a str>> {
    let mut allowed: Option<Vec<&str>> = None;
    for r in pool
        .spec
        .template
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == key)
    {
        match r.operator {
            Operator::In => {
                let values: Vec<&str> = r.values.iter().map(String::as_str).collect();
                allowed = Some(match allowed {
                    None => values,
                    Some(prev) => prev.into_iter().filter(|v| values.contains(v)).collect(),
                });
            }
            Operator::NotIn => {
                if let Some(prev) = allowed.as_mut() {
                    prev.retain(|v| !r.values.iter().any(|n| n == v));
                }
            }
            _ => {}
        }
    }
    allowed
}

/// Field path of the first requirement on `key` (for locating a finding), else the list.
fn requirement_path(pool: &NodePool, key: &str) -> String {
    match pool
        .spec
        .template
        .spec
        .requirements
        .iter()
        .position(|r| r.key == key)
    {
        Some(i) => format!("spec.template.spec.requirements[{i}]"),
        None => "spec.template.spec.requirements".to_string(),
    }
}

fn blocks_forever(budget: &Budget) -> bool {
    budget.schedule.is_none() && matches!(budget.nodes.as_str(), "0" | "0%")
}

/// Whether any rendered NodePool may launch spot capacity (the account then needs the spot
/// service-linked role).
pub fn spot_allowed(nodes: &NodeObjects) -> bool {
    nodes.objects.iter().any(|o| match &o.object {
        Object::NodePool(pool) => {
            allowed_values(pool, CAPACITY_TYPE).is_some_and(|v| v.contains(&CAPACITY_SPOT))
        }
        _ => false,
    })
}

/// Lint findings for rendered objects, located in their rendered source.
pub fn lint(config: &Config, nodes: &NodeObjects) -> Vec<Diagnostic> {
    let objects = &nodes.objects;
    let classes: Vec<String> = objects
        .iter()
        .filter(|o| matches!(o.object, Object::EC2NodeClass(_)))
        .map(|o| o.object.name())
        .collect();
    let mut findings = Vec::new();
    for located in objects {
        let Object::NodePool(pool) = &located.object else {
            continue;
        };
        let ignored: Vec<&str> = pool
            .annotations()
            .get(IGNORE_ANNOTATION)
            .map(|v| v.split(',').map(str::trim).collect())
            .unwrap_or_default();
        let mut warn = |rule: &'static str, field: &str, message: String| {
            if ignored.contains(&rule) {
                return;
            }
            let mut d =
                Diagnostic::warning(&located.file, rule, message).object(located.object.id());
            if let Some(map) = nodes.maps.get(&located.file) {
                d = d.field(map, located.doc, field);
            }
            findings.push(d);
        };

        if pool.spec.limits.is_empty() {
            warn("no-limits", "spec", "no spec.limits: nothing caps how many nodes this pool launches; set at least cpu and memory".into());
        }
        if let Some(types) = allowed_values(pool, INSTANCE_TYPE) {
            if types.len() == 1 {
                warn("single-instance-type", &requirement_path(pool, INSTANCE_TYPE), format!("only instance type {} is allowed; allow several sizes or families (e.g. by karpenter.k8s.aws/instance-category) so the cheapest available can be chosen", types[0]));
            }
        }
        let capacity = allowed_values(pool, CAPACITY_TYPE);
        let capacity_types = capacity.clone().unwrap_or_else(|| vec!["on-demand"]);
        if capacity_types.len() == 1 {
            warn("single-capacity-type", &requirement_path(pool, CAPACITY_TYPE), format!(
                "only {} capacity is allowed{}; allow spot and on-demand, or waive with the annotation {IGNORE_ANNOTATION}: single-capacity-type if the split is deliberate",
                capacity_types[0],
                if capacity.is_none() { " (no karpenter.sh/capacity-type requirement defaults to on-demand)" } else { "" }
            ));
        }
        if capacity_types.contains(&CAPACITY_SPOT) && !config.interruption.enabled {
            warn("spot-without-interruption", &requirement_path(pool, CAPACITY_TYPE), "spot is allowed but interruption handling is off (interruption: false): spot nodes will be reclaimed without draining".into());
        }
        for (i, budget) in pool.spec.disruption.budgets.iter().enumerate() {
            if blocks_forever(budget) {
                let reasons = budget
                    .reasons
                    .as_ref()
                    .map_or("all reasons".to_string(), |r| format!("{r:?}"));
                warn("budget-blocks-all", &format!("spec.disruption.budgets[{i}]"), format!("budget allows 0 disruptions at all times for {reasons}: nodes are never consolidated, replaced when drifted or expired; add a schedule and duration to open a window"));
            }
        }
        let class = &pool.spec.template.spec.node_class_ref;
        if class.kind == "EC2NodeClass" && !classes.contains(&class.name) {
            warn(
                "unknown-node-class",
                "spec.template.spec.nodeClassRef.name",
                format!(
                    "EC2NodeClass {:?} is not among the rendered objects (rendered: {}); a pool whose class is missing never launches nodes",
                    class.name,
                    if classes.is_empty() { "none".to_string() } else { classes.join(", ") }
                ),
            );
        }
    }
    findings
}
