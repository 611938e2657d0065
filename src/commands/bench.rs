//! `jointer bench scheduling`: one solve on a benchmark profile, with figures (not a test).

use std::time::Instant;

use jointer_controller::core::benchmark;
use jointer_controller::core::scheduling::{checker, solve};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Karpenter's own benchmark input (synthetic instance types, five pod groups).
    Upstream,
    /// The embedded AWS catalog and a mixed workload without spread or affinity.
    Aws,
}

#[derive(Debug, Serialize)]
pub struct Figures {
    pub profile: &'static str,
    pub pods: usize,
    pub instance_types: usize,
    pub nodes: usize,
    pub unschedulable: usize,
    pub solve_seconds: f64,
    pub pods_per_second: f64,
    pub price_per_hour: f64,
    pub lower_bound_per_hour: Option<f64>,
    pub gap_percent: Option<f64>,
    pub peak_rss_bytes: Option<u64>,
    pub plan_verified: bool,
    /// Spread-constrained pods kube-scheduler would refuse if each bound after every other
    /// pod: 0 means the plan holds in any binding order.
    pub refused_if_bound_last: usize,
    /// The first few problems the checker found in the plan, when it is not verified.
    #[serde(skip)]
    pub problems: Vec<String>,
}

impl Figures {
    /// A plan the checker rejects fails the run: the figures of a wrong plan mean nothing.
    pub fn exit_code(&self) -> std::process::ExitCode {
        if self.plan_verified {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        }
    }
}

/// Peak resident memory of this process (Linux `VmHWM`).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

pub fn run(
    profile: Profile,
    pods: usize,
    instance_types: usize,
    seed: u64,
) -> anyhow::Result<Figures> {
    let problem = match profile {
        Profile::Upstream => benchmark::upstream(pods, instance_types, seed),
        Profile::Aws => benchmark::aws(pods, seed)?,
    };
    let types = problem.pools.iter().map(|p| p.instance_types.len()).sum();
    let started = Instant::now();
    let plan = solve(&problem);
    let solve_seconds = started.elapsed().as_secs_f64();
    let price = plan.price_per_hour();
    let lower = benchmark::lower_bound_per_hour(&problem);
    let problems = checker::check(&problem, &plan);
    let refused_if_bound_last = checker::refused_if_bound_last(&problem, &plan);
    Ok(Figures {
        profile: match profile {
            Profile::Upstream => "upstream",
            Profile::Aws => "aws",
        },
        pods,
        instance_types: types,
        nodes: plan.nodeclaims.len(),
        unschedulable: plan.unschedulable.len(),
        solve_seconds,
        pods_per_second: pods as f64 / solve_seconds.max(1e-9),
        price_per_hour: price,
        lower_bound_per_hour: lower,
        gap_percent: lower.filter(|l| *l > 0.0).map(|l| (price - l) / l * 100.0),
        peak_rss_bytes: peak_rss_bytes(),
        plan_verified: problems.is_empty(),
        refused_if_bound_last,
        problems: problems.into_iter().take(5).collect(),
    })
}

/// Figures of one disruption decision over a cluster after a scale-down.
#[derive(Debug, Serialize)]
pub struct ConsolidationFigures {
    pub pods: usize,
    pub pods_left: usize,
    pub nodes: usize,
    /// Making the cluster (solving the workload onto nodes): not part of the decision.
    pub build_seconds: f64,
    pub decision_seconds: f64,
    /// Each consolidation method's search, in the order they ran.
    pub searched: Vec<MethodSearch>,
    /// The decision's method (`Underutilized`, `Empty`, ...), or none when every node stays.
    pub method: Option<&'static str>,
    pub candidates: usize,
    pub replacements: usize,
    pub saving_per_hour: f64,
    /// Nodes kept, each with a reason.
    pub kept: usize,
    pub price_per_hour: f64,
    /// A fresh solve of the pods left onto new nodes: what a settled cluster could cost.
    pub fresh_solve_per_hour: f64,
    pub peak_rss_bytes: Option<u64>,
}

/// How long one consolidation method searched.
#[derive(Debug, Serialize)]
pub struct MethodSearch {
    pub method: &'static str,
    pub seconds: f64,
}

/// `jointer bench consolidation`: `pods` pods of the `aws` profile solved onto nodes, then
/// `removed_percent` of them gone, and one disruption decision over all the nodes, timed.
pub fn consolidation(
    pods: usize,
    removed_percent: usize,
    seed: u64,
) -> anyhow::Result<ConsolidationFigures> {
    use jointer_controller::core::benchmark::cluster;
    use jointer_controller::core::disruption::{decide, Inputs};
    use jointer_controller::core::scheduling::Problem;
    use jointer_controller::core::state::types_of_pools;

    let started = Instant::now();
    let c = cluster::after_scale_down(pods, removed_percent, seed)?;
    let build_seconds = started.elapsed().as_secs_f64();
    let (types_of_pool, _) = types_of_pools(&c.snapshot, &c.types_of_class);
    let now = cluster::NOW.parse()?;
    let started = Instant::now();
    let decision = decide(&Inputs {
        snapshot: &c.snapshot,
        types_of_class: &c.types_of_class,
        types_of_pool: &types_of_pool,
        now,
        settle: std::time::Duration::from_secs(30),
        spot_to_spot: false,
        single_node_from: None,
        nominated: &Default::default(),
        policies: Default::default(),
        timeouts: Default::default(),
    });
    let decision_seconds = started.elapsed().as_secs_f64();
    let mut fresh = benchmark::aws(0, seed)?;
    fresh.pods = c.pods_left.clone();
    let fresh: &Problem = &fresh;
    let command = decision.command.as_ref();
    Ok(ConsolidationFigures {
        pods,
        pods_left: c.pods_left.len(),
        nodes: c.snapshot.nodes.len(),
        build_seconds,
        decision_seconds,
        searched: decision
            .searched
            .iter()
            .map(|&(method, spent)| MethodSearch {
                method,
                seconds: spent.as_secs_f64(),
            })
            .collect(),
        method: command.map(|c| c.method.as_str()),
        candidates: command.map_or(0, |c| c.candidates.len()),
        replacements: command.map_or(0, |c| c.replacements.len()),
        saving_per_hour: command.map_or(0.0, |c| c.saving),
        kept: decision.kept.len(),
        price_per_hour: c.price_per_hour,
        fresh_solve_per_hour: solve(fresh).price_per_hour(),
        peak_rss_bytes: peak_rss_bytes(),
    })
}
