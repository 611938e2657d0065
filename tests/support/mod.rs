//! Test support: the real `jointer` binary in a throwaway directory, and the test environment.
#![allow(dead_code)]

pub mod controller;
pub mod harness;
pub mod testenv;
pub mod upstream;
pub mod world;

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Workspace {
    dir: tempfile::TempDir,
}

#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Exit 1, no panic, nothing on stdout, and every `needle` in one diagnostic line.
    pub fn refused(&self, needles: &[&str]) {
        assert_eq!(self.code, 1, "expected exit 1: {self:#?}");
        assert!(!self.stderr.contains("panicked"), "panic: {}", self.stderr);
        assert_eq!(
            self.stdout, "",
            "a refused command must print nothing on stdout"
        );
        assert!(
            self.stderr
                .lines()
                .any(|l| needles.iter().all(|n| l.contains(n))),
            "no diagnostic line contains all of {needles:?}:\n{}",
            self.stderr
        );
    }

    pub fn succeeded(&self) -> &Self {
        assert_eq!(self.code, 0, "expected exit 0: {self:#?}");
        self
    }
}

impl Workspace {
    pub fn new() -> Self {
        Workspace {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).expect("read")
    }

    /// A file under `tests/fixtures/`.
    pub fn fixture(&self, rel: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel);
        std::fs::read_to_string(path).expect("fixture")
    }

    pub fn jointer(&self, args: &[&str]) -> Run {
        self.jointer_with_env(args, &[])
    }

    /// `jointer` with extra environment variables (e.g. a PATH without a tool).
    pub fn jointer_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let jointer = Path::new(env!("CARGO_BIN_EXE_jointer"));
        let out = Command::new(jointer)
            .args(args)
            // The controller image is built from the debug controller binary cargo built
            // beside this jointer (`cargo build --workspace`; a release build per test would
            // take minutes), its packed layer cached across tests.
            .env(
                "JOINTER_CONTROLLER_BINARY",
                jointer.with_file_name("jointer-controller"),
            )
            .env(
                "JOINTER_IMAGE_CACHE_DIR",
                jointer.with_file_name("jointer-image-cache"),
            )
            .envs(env.iter().copied())
            .current_dir(self.dir.path())
            .env_remove("JOINTER_CONFIG")
            // Hermetic: no price cache from the developer's machine.
            .env("JOINTER_CACHE_DIR", self.dir.path().join(".cache"))
            .env_remove("AWS_REGION")
            .output()
            .expect("run jointer");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}
