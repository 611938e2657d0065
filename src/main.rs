//! `jointer`: Karpenter-style node autoscaling on EKS as reproducible, drift-checked
//! infrastructure. This file only wires the commands; each lives in its own module.

// A `Diagnostic` (file, location, field, message) travels only on the input-error path, once
// per command; boxing it everywhere would cost clarity for no measurable gain.
#![allow(clippy::result_large_err)]

mod bench;
mod bootstrap;
mod config;
mod convert;
mod diagnostics;
mod documents;
mod explain;
mod init;
mod lint;
mod manifest;
mod node_templates;
mod prices;
mod render;
mod simulate;
mod source_map;
mod status;
mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;

use diagnostics::{Diagnostic, InputErrors, Severity};

#[derive(Parser)]
#[command(
    name = "jointer",
    version,
    about = "Karpenter-style node autoscaling on EKS as reproducible, drift-checked infrastructure"
)]
struct Cli {
    /// Output format: text for people, json for CI.
    #[arg(long, short, global = true, value_enum, default_value_t = Output::Text)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

/// `-f FILE`: the jointer config a command reads.
#[derive(clap::Args)]
struct ConfigFile {
    /// The jointer config.
    #[arg(
        short = 'f',
        long = "file",
        env = "JOINTER_CONFIG",
        default_value = "jointer.yaml"
    )]
    file: PathBuf,
}

/// The config and the cluster a bootstrap command works on.
#[derive(clap::Args)]
struct Target {
    #[command(flatten)]
    config: ConfigFile,
    /// The kubeconfig context to use (default: the current one). It must point at the
    /// config's EKS cluster.
    #[arg(long)]
    context: Option<String>,
}

fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    s.trim_end_matches('s')
        .parse::<u64>()
        .map(std::time::Duration::from_secs)
        .map_err(|_| format!("{s:?} is not a number of seconds"))
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum What {
    /// The EC2NodeClass and NodePool objects rendered from the templates.
    Nodes,
    /// The CustomResourceDefinitions for NodePool, NodeClaim and EC2NodeClass.
    Crds,
    /// Both.
    All,
}

#[derive(Subcommand)]
enum Command {
    /// Write a commented starter jointer.yaml (never overwrites).
    Init {
        /// The existing EKS cluster's name.
        #[arg(long)]
        cluster: String,
        /// Its AWS region (default: $AWS_REGION, else us-east-1).
        #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
        region: String,
        #[arg(short = 'f', long = "file", default_value = "jointer.yaml")]
        file: PathBuf,
    },
    /// Render the node templates, validate them as Karpenter v1 objects and print them.
    Render {
        #[command(flatten)]
        config: ConfigFile,
        #[arg(long, value_enum, default_value_t = What::Nodes)]
        what: What,
    },
    /// Warn about known mistakes in the rendered NodePools (exit 0 with warnings, 1 on errors).
    Lint {
        #[command(flatten)]
        config: ConfigFile,
        /// Treat warnings as errors.
        #[arg(long)]
        strict: bool,
        /// List the rules and exit.
        #[arg(long)]
        rules: bool,
    },
    /// Show what would be launched for a workload and what it would cost (no AWS needed).
    /// With no arguments: the bundled example.
    Simulate {
        /// A jointer config whose templates give the NodePools (default: the bundled example).
        #[arg(short = 'f', long = "file", conflicts_with = "nodepools")]
        file: Option<PathBuf>,
        /// NodePool and EC2NodeClass YAML files to use instead of a config.
        #[arg(long, num_args = 1..)]
        nodepools: Vec<PathBuf>,
        /// Workload YAML (Deployments, StatefulSets, ReplicaSets, Jobs, Pods, DaemonSets);
        /// default: the bundled example workload.
        #[arg(long, num_args = 1..)]
        workload: Vec<PathBuf>,
        /// A JSON instance type catalog to use instead of the embedded one.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// Region of the embedded catalog (default: the config's, else us-east-1).
        #[arg(long)]
        region: Option<String>,
        /// Use the estimated prices even when `catalog refresh` cached real ones.
        #[arg(long)]
        estimated_prices: bool,
    },
    /// The instance catalog behind `simulate`.
    Catalog {
        #[command(subcommand)]
        what: CatalogWhat,
    },
    /// Benchmark the scheduler: one solve on a profile, with figures (pods/s, price, gap).
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// Show what `apply` would change, on AWS and in the cluster, step by step (no writes).
    Plan {
        #[command(flatten)]
        target: Target,
        /// Plan to take over resources with jointer's names that jointer did not create.
        #[arg(long)]
        adopt: bool,
    },
    /// Create or repair everything: IAM, interruption queue and rules, discovery tags, node
    /// access, CRDs, the controller, node classes and pools; then verify it converged. Safe to
    /// re-run.
    Apply {
        #[command(flatten)]
        target: Target,
        /// Do not ask for confirmation (never asked when not on a terminal; deleting a
        /// NodePool removed from the templates needs this or a confirmation).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Take over resources with jointer's names that jointer did not create.
        #[arg(long)]
        adopt: bool,
        /// Wait until the controller is Available and every EC2NodeClass is Ready.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits.
        #[arg(long, value_parser = parse_seconds, default_value = "600")]
        timeout: std::time::Duration,
    },
    /// Compare AWS and the cluster with the config: exit 0 in sync, 2 on drift, 1 on error.
    Drift {
        #[command(flatten)]
        target: Target,
    },
    /// Remove everything jointer created or tagged for the cluster (NodePools and their nodes
    /// first), then prove nothing is left (exit 1 listing what is).
    Teardown {
        #[command(flatten)]
        target: Target,
        /// Do not ask for confirmation (never asked when not on a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// Print what would be removed and stop.
        #[arg(long)]
        dry_run: bool,
        /// Also delete the CRDs, and with them every NodePool, NodeClaim and EC2NodeClass.
        #[arg(long)]
        delete_crds: bool,
        /// How long to wait for nodes to drain and instances to terminate.
        #[arg(long, value_parser = parse_seconds, default_value = "900")]
        timeout: std::time::Duration,
    },
    /// Each NodePool's nodes, capacity and $/hour now, what its disruption budgets allow right
    /// now, and whether each EC2NodeClass is Ready.
    Status {
        #[command(flatten)]
        target: Target,
    },
    /// Explain from the cluster's objects and the scheduling core why a pod is pending: which
    /// NodePool would take it, or each pool's reason not to.
    Explain {
        #[command(subcommand)]
        what: ExplainWhat,
    },
    /// Convert Karpenter v1beta1 NodePool/EC2NodeClass YAML to v1 (v1 on stdout, changes on stderr).
    Convert {
        /// Input files; pass a NodePool's EC2NodeClass too so its kubelet settings can move.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ExplainWhat {
    /// Why NAMESPACE/NAME is pending (exit 0 when it will get capacity, 3 when no pool can help).
    Pod {
        /// NAMESPACE/NAME
        pod: String,
        #[command(flatten)]
        target: Target,
    },
    /// Why a node is kept rather than consolidated (or that it would be disrupted now).
    Node {
        /// The node's (or its NodeClaim's) name.
        node: String,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Subcommand)]
enum CatalogWhat {
    /// Fetch real on-demand (Pricing API) and spot (EC2) prices for a region into the local
    /// cache (~/.cache/jointer/prices), which `simulate` then uses instead of estimates.
    Refresh {
        #[arg(long, env = "AWS_REGION")]
        region: String,
    },
}

#[derive(Subcommand)]
enum BenchWhat {
    /// One solve of the provisioning scheduler.
    Scheduling {
        #[arg(long, value_enum, default_value_t = bench::Profile::Upstream)]
        profile: bench::Profile,
        #[arg(long, default_value_t = 5000)]
        pods: usize,
        /// Synthetic instance types (upstream profile only).
        #[arg(long, default_value_t = 400)]
        instance_types: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
}

/// How a command ended: printed output, diagnostics, exit code.
enum Failure {
    Input(InputErrors),
    Other(anyhow::Error),
}

impl From<InputErrors> for Failure {
    fn from(e: InputErrors) -> Self {
        Failure::Input(e)
    }
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Other(e)
    }
}

impl From<serde_yaml::Error> for Failure {
    fn from(e: serde_yaml::Error) -> Self {
        Failure::Other(e.into())
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Other(e.into())
    }
}

fn print_diagnostics(diagnostics: &[Diagnostic]) {
    let mut err = std::io::stderr().lock();
    for d in diagnostics {
        let _ = writeln!(err, "{d}");
    }
}

fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<(), Failure> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn crds_yaml() -> Result<String, Failure> {
    let mut out = String::new();
    for (_, crd) in jointer_controller::crds::all() {
        out.push_str("---\n");
        out.push_str(&jointer_controller::crds::to_yaml(&crd)?);
    }
    Ok(out)
}

/// Config and templates are read and validated before any AWS call; then the cluster is
/// described once. Teardown skips the templates: a broken template must not keep anyone from
/// removing what was applied.
fn bootstrap_context(
    target: &Target,
    with_templates: bool,
    options: bootstrap::Options,
) -> Result<(tokio::runtime::Runtime, bootstrap::Context), Failure> {
    let loaded = config::load(&target.config.file)?;
    let (node_objects, spot_allowed) = if with_templates {
        let nodes = render::node_objects(&loaded)?;
        let objects = nodes
            .objects
            .iter()
            .map(|o| serde_json::to_value(&o.object))
            .collect::<Result<Vec<_>, _>>()?;
        (objects, lint::spot_allowed(&nodes))
    } else {
        (Vec::new(), false)
    };
    let runtime = tokio::runtime::Runtime::new().map_err(anyhow::Error::from)?;
    let inputs = bootstrap::Inputs {
        config_dir: loaded.base_dir().to_path_buf(),
        config: loaded.config,
        node_objects,
        spot_allowed,
        kube_context: target.context.clone(),
        options,
    };
    let ctx = runtime.block_on(bootstrap::Context::connect(inputs))?;
    Ok((runtime, ctx))
}

fn options(adopt: bool, delete_crds: bool, timeout: std::time::Duration) -> bootstrap::Options {
    bootstrap::Options {
        adopt,
        delete_crds,
        timeout,
    }
}

const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

fn run(cli: &Cli) -> Result<ExitCode, Failure> {
    let json = cli.output == Output::Json;
    match &cli.command {
        Command::Plan { target, adopt } => {
            let (rt, ctx) =
                bootstrap_context(target, true, options(*adopt, false, DEFAULT_TIMEOUT))?;
            rt.block_on(bootstrap::run::cmd_plan(&ctx, json))?;
        }
        Command::Apply {
            target,
            yes,
            adopt,
            wait,
            timeout,
        } => {
            let (rt, ctx) = bootstrap_context(target, true, options(*adopt, false, *timeout))?;
            if !rt.block_on(bootstrap::run::cmd_apply(&ctx, *yes, *wait, json))? {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Explain { what } => {
            let target = match what {
                ExplainWhat::Pod { target, .. } | ExplainWhat::Node { target, .. } => target,
            };
            let (rt, ctx) =
                bootstrap_context(target, false, options(false, false, DEFAULT_TIMEOUT))?;
            let explained = match what {
                ExplainWhat::Pod { pod, .. } => rt.block_on(explain::explain_pod(&ctx, pod))?,
                ExplainWhat::Node { node, .. } => rt.block_on(explain::explain_node(&ctx, node))?,
            };
            if json {
                print_json(&explained)?;
            } else {
                explain::print(&explained);
            }
            if explained.verdict == "unschedulable" {
                return Ok(ExitCode::from(3));
            }
        }
        Command::Status { target } => {
            let (rt, ctx) =
                bootstrap_context(target, false, options(false, false, DEFAULT_TIMEOUT))?;
            let summary = rt.block_on(status::status(&ctx))?;
            if json {
                print_json(&summary)?;
            } else {
                status::print(&summary);
            }
        }
        Command::Drift { target } => {
            let (rt, ctx) =
                bootstrap_context(target, true, options(false, false, DEFAULT_TIMEOUT))?;
            if rt.block_on(bootstrap::run::cmd_drift(&ctx, json))? {
                return Ok(ExitCode::from(2));
            }
        }
        Command::Teardown {
            target,
            yes,
            dry_run,
            delete_crds,
            timeout,
        } => {
            let (rt, ctx) =
                bootstrap_context(target, false, options(false, *delete_crds, *timeout))?;
            if !rt.block_on(bootstrap::run::cmd_teardown(&ctx, *yes, *dry_run, json))? {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Init {
            cluster,
            region,
            file,
        } => {
            init::init(file, cluster, region)?;
            match cli.output {
                Output::Json => print_json(&json!({ "written": file }))?,
                Output::Text => eprintln!(
                    "wrote {}: review it, then run `jointer render -f {}`",
                    file.display(),
                    file.display()
                ),
            }
        }
        Command::Render {
            config: ConfigFile { file },
            what,
        } => {
            let nodes = if *what == What::Crds {
                None
            } else {
                let loaded = config::load(file)?;
                Some(render::node_objects(&loaded)?)
            };
            let objects: Vec<&manifest::Object> = nodes
                .iter()
                .flat_map(|n| n.objects.iter().map(|o| &o.object))
                .collect();
            match cli.output {
                Output::Json => {
                    let crds: Vec<_> = if *what == What::Nodes {
                        vec![]
                    } else {
                        jointer_controller::crds::all()
                            .into_iter()
                            .map(|(_, c)| c)
                            .collect()
                    };
                    print_json(&json!({ "objects": objects, "crds": crds }))?;
                }
                Output::Text => {
                    if *what != What::Nodes {
                        print!("{}", crds_yaml()?);
                    }
                    print!("{}", manifest::to_yaml_stream(objects)?);
                }
            }
        }
        Command::Lint {
            config: ConfigFile { file },
            strict,
            rules,
        } => {
            if *rules {
                for (rule, why) in lint::RULES {
                    println!("{rule:<28} {why}");
                }
                return Ok(ExitCode::SUCCESS);
            }
            let loaded = config::load(file)?;
            let nodes = render::node_objects(&loaded)?;
            let findings = lint::lint(&loaded.config, &nodes);
            let failed = *strict && !findings.is_empty();
            let findings: Vec<Diagnostic> = findings
                .into_iter()
                .map(|mut d| {
                    if *strict {
                        d.severity = Severity::Error;
                    }
                    d
                })
                .collect();
            match cli.output {
                Output::Json => print_json(&json!({ "ok": !failed, "diagnostics": findings }))?,
                Output::Text => {
                    print_diagnostics(&findings);
                    eprintln!(
                        "{} object(s) checked, {} finding(s)",
                        nodes.objects.len(),
                        findings.len()
                    );
                }
            }
            if failed {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Simulate {
            file,
            nodepools,
            workload,
            catalog,
            region,
            estimated_prices,
        } => {
            let args = simulate::Args {
                config: file.clone(),
                nodepools: nodepools.clone(),
                workload: workload.clone(),
                catalog: catalog.clone(),
                region: region.clone(),
                use_cached_prices: !estimated_prices,
            };
            let report = simulate::simulate(&args)?;
            match cli.output {
                Output::Json => print_json(&serde_json::to_value(&report)?)?,
                Output::Text => simulate::print_table(&report),
            }
        }
        Command::Catalog {
            what: CatalogWhat::Refresh { region },
        } => {
            let runtime = tokio::runtime::Runtime::new().map_err(anyhow::Error::from)?;
            let (cached, path) = runtime.block_on(prices::refresh(region))?;
            let spot: usize = cached.prices.spot.values().map(|z| z.len()).sum();
            match cli.output {
                Output::Json => print_json(
                    &json!({ "region": region, "cache": path, "on_demand_prices": cached.prices.on_demand.len(), "spot_prices": spot }),
                )?,
                Output::Text => eprintln!(
                    "cached {} on-demand and {spot} spot prices for {region} in {}",
                    cached.prices.on_demand.len(),
                    path.display()
                ),
            }
        }
        Command::Bench {
            what:
                BenchWhat::Scheduling {
                    profile,
                    pods,
                    instance_types,
                    seed,
                },
        } => {
            let figures = bench::run(*profile, *pods, *instance_types, *seed)?;
            match cli.output {
                Output::Json => print_json(&serde_json::to_value(&figures)?)?,
                Output::Text => bench::print_table(&figures),
            }
            if !figures.plan_verified {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Convert { files } => {
            let conversion = convert::convert(files)?;
            match cli.output {
                Output::Json => print_json(&serde_json::to_value(&conversion)?)?,
                Output::Text => {
                    let mut out = String::new();
                    for doc in &conversion.documents {
                        out.push_str("---\n");
                        out.push_str(&serde_yaml::to_string(doc)?);
                    }
                    print!("{out}");
                    for c in &conversion.changes {
                        eprintln!("{}: {}: {}", c.file, c.object, c.change);
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(Failure::Input(InputErrors(diagnostics))) => {
            match cli.output {
                Output::Json => {
                    let _ = print_json(&json!({ "ok": false, "diagnostics": diagnostics }));
                }
                Output::Text => print_diagnostics(&diagnostics),
            }
            ExitCode::FAILURE
        }
        Err(Failure::Other(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
