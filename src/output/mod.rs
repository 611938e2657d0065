//! The only place that prints. Commands return values; this module shows them as text for
//! people or as JSON for CI (`--output`), prints located diagnostics, and implements
//! `Progress` for the terminal. Results go to stdout; diagnostics, warnings, progress and
//! the notes a person reads but a pipeline should not parse go to stderr.

mod bootstrap;
mod commands;
mod terminal;

use std::io::Write;

use clap::ValueEnum;
use serde_json::json;

use crate::failure::Failure;
use crate::input::diagnostics::{Diagnostic, InputErrors};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// How a command's result reads, in either format.
pub trait Print {
    fn print(&self, format: Format) -> anyhow::Result<()>;
}

/// The printer a command line chose.
#[derive(Clone, Copy)]
pub struct Output {
    pub format: Format,
}

impl Output {
    pub fn new(format: Format) -> Output {
        Output { format }
    }

    pub fn print(&self, value: &impl Print) -> anyhow::Result<()> {
        value.print(self.format)
    }

    /// A failed command: its diagnostics (as JSON too, for CI) or its error, on stderr.
    pub fn failure(&self, failure: &Failure) {
        match failure {
            Failure::Input(InputErrors(diagnostics)) => match self.format {
                Format::Json => {
                    let _ = print_json(&json!({ "ok": false, "diagnostics": diagnostics }));
                }
                Format::Text => print_diagnostics(diagnostics),
            },
            Failure::Other(e) => eprintln!("error: {e:#}"),
        }
    }
}

fn print_diagnostics(diagnostics: &[Diagnostic]) {
    let mut err = std::io::stderr().lock();
    for d in diagnostics {
        let _ = writeln!(err, "{d}");
    }
}

fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
