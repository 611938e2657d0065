//! The `jointer-controller` binary. For now it prints or writes the generated CRDs; the
//! controller loops arrive with the provisioning issue.

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
    /// Print the CRDs generated from the API types (or write one file per CRD into --out).
    Crds {
        /// Directory to write `<group>_<plural>.yaml` files into, instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
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
