//! Progress on the terminal: every line on stderr, so stdout stays the command's result.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use super::Output;
use crate::progress::Progress;

fn flush() {
    let _ = std::io::stderr().flush();
}

impl Progress for Output {
    fn warn(&self, message: &str) {
        eprintln!("warning: {message}");
    }

    fn note(&self, line: &str) {
        eprintln!("{line}");
    }

    fn note_inline(&self, text: &str) {
        eprint!("{text}");
    }

    fn count(&self, line: &str) {
        eprint!("\r{line}");
    }

    fn count_done(&self) {
        eprintln!();
    }

    fn change_started(&self, n: usize, total: usize, change: &str) {
        eprint!("[{n}/{total}] {change} ... ");
        flush();
    }

    fn change_done(&self, took: Duration) {
        eprintln!("done ({} ms)", took.as_millis());
    }

    fn change_failed(&self) {
        eprintln!("failed");
    }

    fn interactive(&self) -> bool {
        std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
    }

    fn confirm(&self, question: &str) -> anyhow::Result<bool> {
        eprint!("{question} [y/N] ");
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
    }
}
