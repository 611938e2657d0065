//! `jointer lint`: the known mistakes in the rendered NodePools, as diagnostics; `--strict`
//! turns every finding into an error.

use std::path::Path;
use std::process::ExitCode;

use crate::input::diagnostics::{Diagnostic, InputErrors, Severity};
use crate::input::{config, lint, render};

/// `--strict`: warnings fail the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    Warn,
    Strict,
}

pub struct Linted {
    pub findings: Vec<Diagnostic>,
    /// How many rendered objects were checked.
    pub objects: usize,
    /// Strict, and something was found.
    pub failed: bool,
}

impl Linted {
    pub fn exit_code(&self) -> ExitCode {
        if self.failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// `jointer lint --rules`: every rule with why it exists.
pub struct Rules(pub &'static [(&'static str, &'static str)]);

pub fn rules() -> Rules {
    Rules(&lint::RULES)
}

pub fn lint(file: &Path, strictness: Strictness) -> Result<Linted, InputErrors> {
    let loaded = config::load(file)?;
    let nodes = render::node_objects(&loaded)?;
    let strict = strictness == Strictness::Strict;
    let findings: Vec<Diagnostic> = lint::lint(&loaded.config, &nodes)
        .into_iter()
        .map(|mut d| {
            if strict {
                d.severity = Severity::Error;
            }
            d
        })
        .collect();
    Ok(Linted {
        failed: strict && !findings.is_empty(),
        objects: nodes.objects.len(),
        findings,
    })
}
