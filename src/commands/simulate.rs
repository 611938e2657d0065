//! `jointer simulate`: what would be launched for a workload, and what it would cost.
//!
//! Runs the controller's real solver against the simulated cloud: NodePools and EC2NodeClasses
//! (rendered from a config, or given as files), instance types from the embedded catalog (or a
//! user catalog), and pods from workload files. With no arguments it runs the bundled example.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jointer_controller::api::{EC2NodeClass, NodeOverlay};
use jointer_controller::cloud::sim::{SimCloud, Source};
use jointer_controller::core::catalog::{Catalog, UserInstanceType};
use jointer_controller::core::overlay::{Overlays, PoolTypes};
use jointer_controller::core::scheduling::pool_input::pool_input;
use jointer_controller::core::scheduling::{checker, solve, Plan, Problem};
use kube::ResourceExt;
use serde::Serialize;

use super::static_pools::{self, StaticNodes};
use crate::input::diagnostics::{Diagnostic, InputErrors};
use crate::input::documents::{read_stream, read_text, YamlStream};
use crate::input::manifest::{check_unique, read_objects, Located, Object};
use crate::input::workload::{self, Workload};
use crate::input::{config, render};
use crate::progress::Progress;

const EXAMPLE_CONFIG: &str = include_str!("../../manifests/examples/jointer.yaml");
const EXAMPLE_WORKLOAD: &str = include_str!("../../manifests/examples/workload.yaml");
const HOURS_PER_MONTH: f64 = 730.0;

pub struct Args {
    pub config: Option<PathBuf>,
    pub nodepools: Vec<PathBuf>,
    pub workload: Vec<PathBuf>,
    pub catalog: Option<PathBuf>,
    pub region: Option<String>,
    /// Prefer prices cached by `jointer catalog refresh` over the estimate.
    pub use_cached_prices: bool,
}

#[derive(Debug, Serialize)]
pub struct NodeClaimReport {
    pub nodepool: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    pub price_per_hour: f64,
    /// How many instance types the launch could fall back to.
    pub instance_type_options: usize,
    pub cpu_requested: String,
    pub cpu_allocatable: String,
    pub memory_requested: String,
    pub memory_allocatable: String,
    /// The node's max pods (its AMI family's pod density, or the class's `kubelet.maxPods`).
    pub pods_allocatable: i64,
    pub pods: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct UnschedulableReport {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub input: String,
    pub region: String,
    pub price_source: &'static str,
    pub nodeclaims: Vec<NodeClaimReport>,
    pub unschedulable: Vec<UnschedulableReport>,
    pub nodes: usize,
    pub pods_scheduled: usize,
    pub total_price_per_hour: f64,
    pub total_price_per_month: f64,
    /// Requested / allocatable over the launched nodes.
    pub cpu_utilization: f64,
    pub memory_utilization: f64,
    /// The solver's time alone (no parsing, no catalog), for benchmarks on the same input.
    pub solve_seconds: f64,
    /// Spread pods kube-scheduler would refuse if each bound after every other pod: each may
    /// wait for another provisioning round; 0 means the plan holds in any binding order.
    pub refused_if_bound_last: usize,
    /// The order the solver placed the pods in: one order kube-scheduler can bind them in
    /// (the plan's witness), for re-checking the plan elsewhere (`bench/upstream`).
    pub binding_order: Vec<String>,
}

fn parse_files(files: &[PathBuf]) -> Result<Vec<YamlStream>, InputErrors> {
    let mut streams = Vec::new();
    let mut problems = Vec::new();
    for f in files {
        let parsed = read_stream(f, "Kubernetes YAML");
        match parsed {
            Ok(s) => streams.push(s),
            Err(d) => problems.push(d),
        }
    }
    if problems.is_empty() {
        Ok(streams)
    } else {
        Err(InputErrors(problems))
    }
}

/// The node objects and region to simulate with, and a name for where they came from.
fn node_objects(args: &Args) -> Result<(Vec<Located>, Option<String>, String), InputErrors> {
    if !args.nodepools.is_empty() {
        let mut objects = Vec::new();
        let mut problems = Vec::new();
        for stream in parse_files(&args.nodepools)? {
            match read_objects(&stream) {
                Ok(mut o) => objects.append(&mut o),
                Err(InputErrors(mut p)) => problems.append(&mut p),
            }
        }
        if !problems.is_empty() {
            return Err(InputErrors(problems));
        }
        check_unique(&objects)?;
        let names: Vec<String> = args
            .nodepools
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        return Ok((objects, None, names.join(", ")));
    }
    let (loaded, input) = match &args.config {
        Some(path) => (config::load(path)?, path.display().to_string()),
        None => (
            config::load_text(Path::new("manifests/examples/jointer.yaml"), EXAMPLE_CONFIG)?,
            "bundled example".to_string(),
        ),
    };
    let region = loaded.config.cluster.region.clone();
    Ok((render::node_objects(&loaded)?.objects, Some(region), input))
}

fn read_workload(args: &Args) -> Result<Workload, InputErrors> {
    if args.workload.is_empty() {
        let stream = YamlStream::parse(
            "manifests/examples/workload.yaml (bundled)",
            EXAMPLE_WORKLOAD,
        )?;
        return workload::read(&[stream]);
    }
    workload::read(&parse_files(&args.workload)?)
}

fn read_catalog(path: &Path) -> Result<Vec<UserInstanceType>, InputErrors> {
    let text = read_text(path)?;
    let entries: Vec<UserInstanceType> = serde_json::from_str(&text).map_err(|e| {
        Diagnostic::error(path, format!("invalid catalog: {e}; expected a JSON list of {{name, vcpu, memory_mib, arch, offerings: [{{zone, capacity_type, price}}]}}"))
            .at(Some(crate::input::source_map::Location { line: e.line(), column: e.column() }))
    })?;
    if entries.is_empty() {
        return Err(Diagnostic::error(path, "the catalog lists no instance types").into());
    }
    Ok(entries)
}

/// Builds and solves the simulation problem.
pub fn simulate(args: &Args, progress: &dyn Progress) -> Result<Report, InputErrors> {
    let (objects, config_region, input) = node_objects(args)?;
    let workload = read_workload(args)?;
    let region = args
        .region
        .clone()
        .or(config_region)
        .unwrap_or_else(|| "us-east-1".to_string());
    let (source, price_source) = match &args.catalog {
        Some(path) => (Source::User(read_catalog(path)?), "file"),
        None => {
            let catalog = Catalog::embedded()
                .map_err(|e| Diagnostic::error("embedded catalog", e.to_string()))?;
            let cached = if args.use_cached_prices {
                super::catalog::load(&region, progress)
            } else {
                None
            };
            let source = if cached.is_some() {
                "cached"
            } else {
                "estimated"
            };
            (
                Source::Embedded {
                    catalog,
                    region: region.clone(),
                    prices: cached.map(|c| c.prices),
                },
                source,
            )
        }
    };
    let cloud = SimCloud::new(source);

    let classes: Vec<&EC2NodeClass> = objects
        .iter()
        .filter_map(|o| match &o.object {
            Object::EC2NodeClass(c) => Some(c.as_ref()),
            _ => None,
        })
        .collect();
    let overlays: Vec<Arc<NodeOverlay>> = objects
        .iter()
        .filter_map(|o| match &o.object {
            Object::NodeOverlay(n) => Some(Arc::new(n.as_ref().clone())),
            _ => None,
        })
        .collect();
    let mut pool_types = Vec::new();
    let mut problems = Vec::new();
    for located in &objects {
        let Object::NodePool(pool) = &located.object else {
            continue;
        };
        let reference = &pool.spec.template.spec.node_class_ref;
        let Some(class) = classes.iter().find(|c| c.name_any() == reference.name) else {
            let known: Vec<String> = classes.iter().map(|c| c.name_any()).collect();
            problems.push(Diagnostic::error(&located.file, format!(
                "NodePool {} references EC2NodeClass {:?}, which is not defined (defined: {})",
                pool.name_any(), reference.name, if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )).object(located.object.id()));
            continue;
        };
        match cloud.class_types(class) {
            Ok(types) => pool_types.push((pool.as_ref(), types)),
            Err(e) => problems
                .push(Diagnostic::error(&located.file, e.to_string()).object(located.object.id())),
        }
    }
    // The controller's rules: overlays ordered by weight, the conflicting ones rejected whole.
    let resolved = Overlays::resolve(
        &overlays,
        &pool_types
            .iter()
            .map(|(pool, types)| PoolTypes { pool, types })
            .collect::<Vec<_>>(),
    );
    for o in &overlays {
        if let Some(why) = resolved.rejection(&o.name_any()) {
            problems.push(Diagnostic::error(
                &input,
                format!("NodeOverlay {}: {} ({})", o.name_any(), why, why.reason()),
            ));
        }
    }
    let mut pools = Vec::new();
    let mut static_nodes = StaticNodes::default();
    for (pool, types) in &pool_types {
        let one = pool_input(pool, resolved.apply(pool, types), &workload.daemonsets);
        // A static pool is not provisioned for pods: its nodes exist whatever the pods.
        match pool.spec.replicas {
            Some(replicas) => {
                if let Err(why) = static_pools::launch(&one, replicas, &mut static_nodes) {
                    problems.push(Diagnostic::error(&input, why));
                }
            }
            None => pools.push(Arc::new(one)),
        }
    }
    if pools.is_empty() && static_nodes.plans.is_empty() && problems.is_empty() {
        problems.push(Diagnostic::error(&input, "no NodePool to simulate with"));
    }
    if !problems.is_empty() {
        return Err(InputErrors(problems));
    }
    let problem = Problem {
        pools,
        existing: static_nodes.existing.clone(),
        pods: workload.pods,
    };
    let started = std::time::Instant::now();
    let plan = solve(&problem);
    let solve_seconds = started.elapsed().as_secs_f64();
    let violations = checker::check(&problem, &plan);
    if !violations.is_empty() {
        // A solver bug, never the user's fault: refuse to present a plan that is wrong.
        return Err(Diagnostic::error(
            "internal",
            format!("the plan failed verification: {}", violations.join("; ")),
        )
        .into());
    }
    let refused_if_bound_last = checker::refused_if_bound_last(&problem, &plan);
    let plan = static_pools::with_static_nodes(&plan, &static_nodes, &problem.pods);
    let mut report = report(&plan, input, region, price_source);
    report.solve_seconds = solve_seconds;
    report.refused_if_bound_last = refused_if_bound_last;
    Ok(report)
}

fn report(plan: &Plan, input: String, region: String, price_source: &'static str) -> Report {
    use jointer_controller::core::scheduling::resources::{format_amount, CPU, MEMORY};
    let mut nodeclaims = Vec::new();
    let (mut cpu_req, mut cpu_alloc, mut mem_req, mut mem_alloc) = (0i64, 0i64, 0i64, 0i64);
    for nc in &plan.nodeclaims {
        let Some(choice) = nc.launch_choice() else {
            continue;
        };
        let a = choice.instance_type.allocatable;
        cpu_req += nc.requests.cpu;
        cpu_alloc += a.cpu;
        mem_req += nc.requests.memory;
        mem_alloc += a.memory;
        nodeclaims.push(NodeClaimReport {
            nodepool: nc.pool.clone(),
            instance_type: choice.instance_type.name.clone(),
            zone: choice.offering.zone.clone(),
            capacity_type: choice.offering.capacity_type.to_string(),
            price_per_hour: choice.offering.price,
            instance_type_options: nc.instance_types.len(),
            cpu_requested: format_amount(CPU, nc.requests.cpu),
            cpu_allocatable: format_amount(CPU, a.cpu),
            memory_requested: format_amount(MEMORY, nc.requests.memory),
            memory_allocatable: format_amount(MEMORY, a.memory),
            pods_allocatable: a.pods,
            pods: nc.pods.iter().map(|p| p.to_string()).collect(),
        });
    }
    let total: f64 = nodeclaims.iter().map(|n| n.price_per_hour).sum();
    let ratio = |a: i64, b: i64| if b > 0 { a as f64 / b as f64 } else { 0.0 };
    Report {
        input,
        region,
        price_source,
        nodes: nodeclaims.len(),
        pods_scheduled: nodeclaims.iter().map(|n| n.pods.len()).sum(),
        nodeclaims,
        unschedulable: plan
            .unschedulable
            .iter()
            .map(|u| UnschedulableReport {
                pod: u.pod.to_string(),
                reason: u.message(),
            })
            .collect(),
        total_price_per_hour: total,
        total_price_per_month: total * HOURS_PER_MONTH,
        cpu_utilization: ratio(cpu_req, cpu_alloc),
        memory_utilization: ratio(mem_req, mem_alloc),
        solve_seconds: 0.0,
        refused_if_bound_last: 0,
        binding_order: plan.binding_order.iter().map(|p| p.to_string()).collect(),
    }
}
