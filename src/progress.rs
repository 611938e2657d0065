//! What long-running work tells the person while it runs: progress through a plan, waits,
//! retries, running counts, and the question before a destructive run. Commands and bootstrap
//! steps call this interface and never print; `output` implements it for the terminal, so the
//! wording of a wait stays with the code that waits and the stream it goes to stays in one place.

use std::time::Duration;

pub trait Progress: Send + Sync {
    /// A warning that does not stop the command.
    fn warn(&self, message: &str);
    /// One line about work in progress (a wait, a poll).
    fn note(&self, line: &str);
    /// The same, left open: what follows continues the line (an IAM retry within a change).
    fn note_inline(&self, text: &str);
    /// A running count that replaces itself until `count_done`.
    fn count(&self, line: &str);
    fn count_done(&self);
    /// Change `n` of `total` starts; `change_done` or `change_failed` ends its line.
    fn change_started(&self, n: usize, total: usize, change: &str);
    fn change_done(&self, took: Duration);
    fn change_failed(&self);
    /// Whether a person is there to answer a question.
    fn interactive(&self) -> bool;
    /// Asks a yes/no question; only called when `interactive`.
    fn confirm(&self, question: &str) -> anyhow::Result<bool>;
}
