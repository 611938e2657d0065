//! The `jointer-controller` binary: `run` is the controller process; `crds` prints or writes
//! the generated CRDs.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "jointer-controller",
    version,
    about = "Karpenter-v1-compatible provisioning controller"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller (settings from the environment, as the Deployment sets them).
    Run {
        #[command(flatten)]
        settings: Box<jointer_controller::settings::Settings>,
    },
    /// Print the CRDs generated from the API types (or write one file per CRD into --out).
    Crds {
        /// Directory to write `<group>_<plural>.yaml` files into, instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Run { settings } => {
            jointer_controller::runtime::allocator::limit_arenas();
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(jointer_controller::runtime::run(*settings))?;
        }
        Command::Crds { out } => {
            for (file, crd) in jointer_controller::crds::all() {
                let yaml = jointer_controller::crds::to_yaml(&crd)?;
                match &out {
                    Some(dir) => {
                        let path = dir.join(&file);
                        std::fs::write(&path, yaml)
                            .with_context(|| format!("writing {}", path.display()))?;
                    }
                    None => print!("---\n{yaml}"),
                }
            }
        }
    }
    Ok(())
}
