//! How plans, drift and outcomes read: a diff per step for people, JSON for CI.

use std::io::Write;

use serde::Serialize;
use serde_json::{json, Value};

use super::{Change, Op, StepPlan};

/// Counts of changes by kind.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Counts {
    pub create: usize,
    pub update: usize,
    pub delete: usize,
}

impl Counts {
    pub fn of(steps: &[StepPlan]) -> Counts {
        let mut c = Counts::default();
        for change in steps.iter().flat_map(|s| &s.changes) {
            match change.op {
                Op::Create => c.create += 1,
                Op::Update => c.update += 1,
                Op::Delete => c.delete += 1,
            }
        }
        c
    }

    pub fn total(&self) -> usize {
        self.create + self.update + self.delete
    }
}

/// One line of a change: `+ iam role X  attached policy: AmazonEKSWorkerNodePolicy`.
pub fn line(change: &Change) -> String {
    let mut s = format!("{} {}", change.op.symbol(), change.resource);
    match (&change.field, &change.detail) {
        (Some(f), Some(d)) => s.push_str(&format!("  {f}: {d}")),
        (Some(f), None) => s.push_str(&format!("  {f}")),
        (None, Some(d)) => s.push_str(&format!("  ({d})")),
        (None, None) => {}
    }
    s
}

/// The plan, step by step, on stdout; warnings on stderr.
pub fn print_plan(steps: &[StepPlan]) {
    let mut out = std::io::stdout().lock();
    for step in steps {
        if step.changes.is_empty() {
            let _ = writeln!(out, "{}: no changes", step.step.title());
            continue;
        }
        let _ = writeln!(out, "{}:", step.step.title());
        for change in &step.changes {
            let _ = writeln!(out, "  {}", line(change));
        }
    }
    let c = Counts::of(steps);
    let _ = writeln!(
        out,
        "\n{} to create, {} to update, {} to delete",
        c.create, c.update, c.delete
    );
    print_warnings(steps);
}

pub fn print_warnings(steps: &[StepPlan]) {
    for w in steps.iter().flat_map(|s| &s.warnings) {
        eprintln!("warning: {w}");
    }
}

/// Drift as a table: what differs, resource by resource, tags first.
pub fn print_drift(steps: &[StepPlan]) {
    let rows: Vec<[String; 4]> = steps
        .iter()
        .flat_map(|s| {
            s.changes.iter().map(|c| {
                [
                    s.step.title().to_string(),
                    c.resource.clone(),
                    c.field.clone().unwrap_or_else(|| "-".into()),
                    drift_words(c),
                ]
            })
        })
        .collect();
    print_warnings(steps);
    if rows.is_empty() {
        println!("in sync: the AWS side matches the config");
        return;
    }
    let header = [
        "STEP".to_string(),
        "RESOURCE".to_string(),
        "FIELD".to_string(),
        "DRIFT".to_string(),
    ];
    let widths: Vec<usize> = (0..3)
        .map(|i| {
            rows.iter()
                .chain(std::iter::once(&header))
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = std::io::stdout().lock();
    for row in std::iter::once(&header).chain(&rows) {
        let _ = writeln!(
            out,
            "{:w0$}  {:w1$}  {:w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
    let _ = writeln!(
        out,
        "\n{} difference(s): `jointer apply` repairs them",
        rows.len()
    );
}

/// A change read as drift: what is wrong with the world.
fn drift_words(c: &Change) -> String {
    let what = match (c.op, &c.field) {
        (Op::Create, None) => "missing".to_string(),
        (Op::Create, Some(_)) => "missing".to_string(),
        (Op::Update, _) => "changed".to_string(),
        (Op::Delete, _) => "unexpected".to_string(),
    };
    match &c.detail {
        Some(d) => format!("{what}: {d}"),
        None => what,
    }
}

/// A change as JSON.
pub fn change_json(step: &StepPlan, c: &Change) -> Value {
    json!({
        "step": step.step,
        "op": c.op,
        "resource": c.resource,
        "field": c.field,
        "detail": c.detail,
    })
}

pub fn changes_json(steps: &[StepPlan]) -> Vec<Value> {
    steps
        .iter()
        .flat_map(|s| s.changes.iter().map(move |c| change_json(s, c)))
        .collect()
}

pub fn warnings(steps: &[StepPlan]) -> Vec<String> {
    steps.iter().flat_map(|s| s.warnings.clone()).collect()
}
