//! The controller binary the image carries: the file `JOINTER_CONTROLLER_BINARY` names (a CI
//! build, a test), or a static build of the workspace this jointer was built from — the
//! controller the CLI was released with, never a separately published one.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};

use crate::progress::Progress;

pub const BINARY_ENV: &str = "JOINTER_CONTROLLER_BINARY";

/// A controller binary and the source it came from.
#[derive(Debug, Clone)]
pub struct Binary {
    pub path: PathBuf,
    /// `git rev-parse HEAD` of the workspace (with `-dirty` for uncommitted changes).
    pub revision: Option<String>,
}

/// The platform the image is for: this machine's, which is what a local build produces.
pub fn architecture() -> Result<&'static str> {
    match std::env::consts::ARCH {
        "x86_64" => Ok("amd64"),
        "aarch64" => Ok("arm64"),
        other => bail!("cannot build the controller image on {other}: only x86_64 and aarch64 machines build it (or set controller.image.repository to a published image)"),
    }
}

fn target_triple() -> Result<String> {
    architecture()?;
    Ok(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
}

/// The workspace this jointer was compiled from, when it is still there.
fn workspace() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    dir.join("controller/Cargo.toml").is_file().then_some(dir)
}

/// The binary to put in the image: the one the environment names, else built from the
/// workspace (static, so the image needs no base: glibc ≥ 2.34 resolves DNS without NSS
/// modules).
pub fn locate(progress: &dyn Progress) -> Result<Binary> {
    let workspace = workspace();
    let revision = workspace.as_deref().and_then(revision);
    if let Some(path) = std::env::var_os(BINARY_ENV) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "{BINARY_ENV}={} is not a file: point it at a jointer-controller binary, or unset it to build one from the workspace",
                path.display()
            );
        }
        return Ok(Binary { path, revision });
    }
    let Some(workspace) = workspace else {
        bail!(
            "this jointer cannot find the workspace it was built from ({}) to build the controller image: set {BINARY_ENV} to a jointer-controller binary, or controller.image.repository (and tag) to an image you publish",
            env!("CARGO_MANIFEST_DIR")
        );
    };
    let path = build(&workspace, progress)?;
    Ok(Binary { path, revision })
}

/// `cargo build --release` of the controller for this machine, statically linked, in a
/// target directory of its own (the static flags would otherwise rebuild the dev tree).
fn build(workspace: &Path, progress: &dyn Progress) -> Result<PathBuf> {
    let triple = target_triple()?;
    let target_dir = workspace.join("target/image");
    progress.note(&format!(
        "building jointer-controller (release, static, {triple}) in {}",
        workspace.display()
    ));
    let mut child = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(workspace)
        .args(["build", "--release", "--locked", "-p", "jointer-controller"])
        .args(["--target", &triple])
        .env("CARGO_TARGET_DIR", &target_dir)
        // With --target, these flags reach only the target's crates, not build scripts.
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running cargo to build the controller (is cargo on PATH?)")?;
    let mut tail = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let line = line.trim().to_string();
            if line.starts_with("Compiling jointer") || line.starts_with("Finished") {
                progress.note(&format!("  {line}"));
            }
            tail.push(line);
            if tail.len() > 20 {
                tail.remove(0);
            }
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    if !status.success() {
        bail!(
            "building the controller failed ({status}):\n{}",
            tail.join("\n")
        );
    }
    Ok(target_dir.join(triple).join("release/jointer-controller"))
}

fn revision(workspace: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"]).filter(|h| !h.is_empty())?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}
