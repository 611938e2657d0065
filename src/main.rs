//! `jointer`: Karpenter-style node autoscaling on EKS as reproducible, drift-checked
//! infrastructure. This file holds the command line and its dispatch: each command returns a
//! value (`commands`, `bootstrap::run`) that `output` prints.

// A `Diagnostic` (file, location, field, message) travels only on the input-error path, once
// per command; boxing it everywhere would cost clarity for no measurable gain.
#![allow(clippy::result_large_err)]

use jointer::{bootstrap, commands, failure, output};

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
// `--timeout 600`, `600s` or `10m`: read as the controller reads its duration settings.
use jointer_controller::settings::seconds;

use bootstrap::run::{self, Confirm, Wait};
use bootstrap::{Goal, Options, Templates};
use commands::bench::Profile;
use commands::lint::Strictness;
use commands::render::What;
use failure::Failure;
use output::{Format, Output};

#[derive(Parser)]
#[command(
    name = "jointer",
    version,
    about = "Karpenter-style node autoscaling on EKS as reproducible, drift-checked infrastructure"
)]
struct Cli {
    /// Output format: text for people, json for CI.
    #[arg(long, short, global = true, value_enum, default_value_t = Format::Text)]
    output: Format,
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
    /// Benchmarks with figures: one scheduler solve on a profile (pods/s, price, gap), or one
    /// disruption decision over a cluster after a scale-down.
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
        #[arg(long, value_parser = seconds, default_value = "600")]
        timeout: Duration,
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
        #[arg(long, value_parser = seconds, default_value = "900")]
        timeout: Duration,
        /// When no controller runs to drain the NodePools' nodes: release their NodeClaims,
        /// nodes and finalizers here instead, and let the sweep terminate their instances
        /// (pods on them are not drained). Without it, teardown stops at once saying so.
        #[arg(long)]
        force: bool,
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
        #[arg(long, value_enum, default_value_t = Profile::Upstream)]
        profile: Profile,
        #[arg(long, default_value_t = 5000)]
        pods: usize,
        /// Synthetic instance types (upstream profile only).
        #[arg(long, default_value_t = 400)]
        instance_types: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// One disruption decision over a cluster after a scale-down: the `aws` profile's pods
    /// solved onto nodes, then a share of them gone.
    Consolidation {
        #[arg(long, default_value_t = 10000)]
        pods: usize,
        /// Percent of the pods gone before the decision.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
        removed: u8,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
}

impl Target {
    /// Reads the inputs and connects to the cluster (see `bootstrap::open`).
    fn open(
        &self,
        templates: Templates,
        options: Options,
        output: Output,
    ) -> Result<(tokio::runtime::Runtime, bootstrap::Context), Failure> {
        bootstrap::open(
            &self.config.file,
            self.context.clone(),
            templates,
            options,
            Box::new(output),
        )
    }
}

fn options(adopt: bool, delete_crds: bool, timeout: Duration) -> Options {
    Options {
        adopt,
        delete_crds,
        timeout,
        force: false,
    }
}

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// What reading commands (status, explain, drift) run with.
fn read_only() -> Options {
    options(false, false, DEFAULT_TIMEOUT)
}

fn confirm(yes: bool) -> Confirm {
    if yes {
        Confirm::Yes
    } else {
        Confirm::Ask
    }
}

/// Prints a command's result; the exit code is the command's to say.
fn shown(output: Output, out: &impl output::Print, code: ExitCode) -> Result<ExitCode, Failure> {
    output.print(out)?;
    Ok(code)
}

fn run(cli: &Cli, output: Output) -> Result<ExitCode, Failure> {
    match &cli.command {
        Command::Plan { target, adopt } => {
            let options = options(*adopt, false, DEFAULT_TIMEOUT);
            let (rt, ctx) = target.open(Templates::Render, options, output)?;
            let out = rt.block_on(run::observe(&ctx, Goal::Converge))?;
            shown(output, &out, ExitCode::SUCCESS)
        }
        Command::Apply {
            target,
            yes,
            adopt,
            wait,
            timeout,
        } => {
            let wait = if *wait { Wait::UntilReady } else { Wait::No };
            let options = options(*adopt, false, *timeout);
            apply(target, options, confirm(*yes), wait, output)
        }
        Command::Drift { target } => {
            let (rt, ctx) = target.open(Templates::Render, read_only(), output)?;
            let out = rt.block_on(run::drift(&ctx))?;
            shown(output, &out, out.exit_code())
        }
        Command::Teardown {
            target,
            yes,
            dry_run,
            delete_crds,
            timeout,
            force,
        } => {
            let options = Options {
                force: *force,
                ..options(false, *delete_crds, *timeout)
            };
            let asked = if *dry_run { None } else { Some(confirm(*yes)) };
            teardown(target, options, asked, output)
        }
        Command::Status { target } => {
            let (rt, ctx) = target.open(Templates::Skip, read_only(), output)?;
            let out = rt.block_on(commands::status::status(&ctx))?;
            shown(output, &out, ExitCode::SUCCESS)
        }
        Command::Explain { what } => explain(what, output),
        Command::Init {
            cluster,
            region,
            file,
        } => {
            let out = commands::init::init(file, cluster, region)?;
            shown(output, &out, ExitCode::SUCCESS)
        }
        Command::Render {
            config: ConfigFile { file },
            what,
        } => {
            let out = commands::render::render(file, *what)?;
            shown(output, &out, ExitCode::SUCCESS)
        }
        Command::Lint {
            config: ConfigFile { file },
            strict,
            rules,
        } => {
            if *rules {
                return shown(output, &commands::lint::rules(), ExitCode::SUCCESS);
            }
            let strictness = if *strict {
                Strictness::Strict
            } else {
                Strictness::Warn
            };
            let out = commands::lint::lint(file, strictness)?;
            shown(output, &out, out.exit_code())
        }
        Command::Simulate {
            file,
            nodepools,
            workload,
            catalog,
            region,
            estimated_prices,
        } => {
            let args = commands::simulate::Args {
                config: file.clone(),
                nodepools: nodepools.clone(),
                workload: workload.clone(),
                catalog: catalog.clone(),
                region: region.clone(),
                use_cached_prices: !estimated_prices,
            };
            let out = commands::simulate::simulate(&args, &output)?;
            shown(output, &out, ExitCode::SUCCESS)
        }
        Command::Catalog {
            what: CatalogWhat::Refresh { region },
        } => {
            let runtime = tokio::runtime::Runtime::new().map_err(anyhow::Error::from)?;
            let out = runtime.block_on(commands::catalog::refresh(region, &output))?;
            shown(output, &out, ExitCode::SUCCESS)
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
            let out = commands::bench::run(*profile, *pods, *instance_types, *seed)?;
            shown(output, &out, out.exit_code())
        }
        Command::Bench {
            what:
                BenchWhat::Consolidation {
                    pods,
                    removed,
                    seed,
                },
        } => {
            let out = commands::bench::consolidation(*pods, usize::from(*removed), *seed)?;
            shown(output, &out, ExitCode::SUCCESS)
        }
        Command::Convert { files } => {
            let out = commands::convert::convert(files)?;
            shown(output, &out, ExitCode::SUCCESS)
        }
    }
}

/// `apply`: the plan is shown before the question, the outcome after the changes.
fn apply(
    target: &Target,
    options: Options,
    confirm: Confirm,
    wait: Wait,
    output: Output,
) -> Result<ExitCode, Failure> {
    let (rt, ctx) = target.open(Templates::Render, options, output)?;
    let planned = rt.block_on(run::observe(&ctx, Goal::Converge))?;
    output.before_apply(&planned);
    let out = rt.block_on(run::apply(&ctx, planned, confirm, wait))?;
    shown(output, &out, out.exit_code())
}

/// `teardown`; without a `confirm` (`--dry-run`) only what would be removed.
fn teardown(
    target: &Target,
    options: Options,
    confirm: Option<Confirm>,
    output: Output,
) -> Result<ExitCode, Failure> {
    let (rt, ctx) = target.open(Templates::Skip, options, output)?;
    let planned = rt.block_on(run::observe(&ctx, Goal::Remove))?;
    let Some(confirm) = confirm else {
        return shown(output, &run::Preview(planned), ExitCode::SUCCESS);
    };
    output.before_teardown(&planned);
    let out = rt.block_on(run::teardown(&ctx, planned, confirm))?;
    shown(output, &out, out.exit_code())
}

fn explain(what: &ExplainWhat, output: Output) -> Result<ExitCode, Failure> {
    let (ExplainWhat::Pod { target, .. } | ExplainWhat::Node { target, .. }) = what;
    let (rt, ctx) = target.open(Templates::Skip, read_only(), output)?;
    let out = match what {
        ExplainWhat::Pod { pod, .. } => rt.block_on(commands::explain::pod(&ctx, pod))?,
        ExplainWhat::Node { node, .. } => rt.block_on(commands::explain::node(&ctx, node))?,
    };
    shown(output, &out, out.exit_code())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let output = Output::new(cli.output);
    match run(&cli, output) {
        Ok(code) => code,
        Err(failure) => {
            output.failure(&failure);
            ExitCode::FAILURE
        }
    }
}
