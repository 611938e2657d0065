//! How bootstrap runs read: a diff per step for people, JSON for CI, drift as a table, and
//! what `apply` leaves behind.

use std::io::Write;

use serde_json::{json, Value};

use super::{print_json, Format, Output, Print};
use crate::bootstrap::run::{Applied, Drift, Outputs, Planned, Preview, TornDown};
use crate::bootstrap::{Change, Counts, Op, StepPlan};
use crate::input::config::Identity;

impl Output {
    /// What `apply` is about to do, before it asks: the plan for people; in JSON only its
    /// warnings (the JSON result comes at the end).
    pub fn before_apply(&self, planned: &Planned) {
        match self.format {
            Format::Text => print_plan(&planned.steps),
            Format::Json => print_warnings(&planned.steps),
        }
    }

    /// What `teardown` is about to remove, before it asks (nothing in JSON).
    pub fn before_teardown(&self, planned: &Planned) {
        if self.format == Format::Text {
            print_plan(&planned.steps);
        }
    }
}

/// `jointer plan`.
impl Print for Planned {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(&json!({
                "cluster": self.cluster,
                "changes": changes_json(&self.steps),
                "summary": self.counts(),
                "warnings": warnings(&self.steps),
            })),
            Format::Text => {
                print_plan(&self.steps);
                Ok(())
            }
        }
    }
}

impl Print for Drift {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        let steps = &self.0.steps;
        match format {
            Format::Json => print_json(&json!({
                "cluster": self.0.cluster,
                "inSync": !self.drifted(),
                "drift": changes_json(steps),
                "warnings": warnings(steps),
            })),
            Format::Text => {
                print_drift(steps);
                Ok(())
            }
        }
    }
}

/// `jointer teardown --dry-run`.
impl Print for Preview {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        match format {
            Format::Json => print_json(&json!({
                "changes": changes_json(&self.0.steps),
                "summary": self.0.counts(),
            })),
            Format::Text => {
                print_plan(&self.0.steps);
                Ok(())
            }
        }
    }
}

impl Print for Applied {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        let Applied::Done {
            steps,
            applied,
            outputs,
            seconds,
        } = self
        else {
            eprintln!("nothing applied");
            return Ok(());
        };
        match format {
            Format::Json => print_json(&json!({
                "applied": changes_json(steps),
                "summary": Counts::of(steps),
                "warnings": warnings(steps),
                "outputs": outputs,
                "seconds": seconds,
            })),
            Format::Text => {
                if *applied == 0 {
                    println!("already converged: no changes made");
                } else {
                    println!("applied {applied} change(s) in {seconds:.1} s; verified");
                }
                print_outputs(outputs);
                Ok(())
            }
        }
    }
}

impl Print for TornDown {
    fn print(&self, format: Format) -> anyhow::Result<()> {
        let TornDown::Done {
            cluster,
            removed,
            left,
            seconds,
        } = self
        else {
            eprintln!("nothing deleted");
            return Ok(());
        };
        let leftovers: Vec<String> = left
            .iter()
            .flat_map(|s| s.changes.iter().map(Change::to_string))
            .collect();
        match format {
            Format::Json => print_json(&json!({
                "removed": changes_json(removed),
                "leftovers": leftovers,
                "seconds": seconds,
            })),
            Format::Text => {
                if leftovers.is_empty() {
                    println!(
                        "removed {} item(s) in {seconds:.1} s; nothing jointer owns for cluster {cluster} is left",
                        Counts::of(removed).total(),
                    );
                } else {
                    println!("still there after teardown:");
                    for l in &leftovers {
                        println!("  {l}");
                    }
                }
                Ok(())
            }
        }
    }
}

fn print_outputs(o: &Outputs) {
    println!("node role:           {}", o.node_role_arn);
    println!(
        "controller role:     {} ({} for {})",
        o.controller_role_arn,
        match o.identity {
            Identity::PodIdentity => "pod identity",
            Identity::Irsa => "IRSA",
        },
        o.service_account
    );
    if let Some(q) = &o.interruption_queue {
        println!("interruption queue:  {q}");
    }
    println!(
        "discovery tag:       {} on {} and {}",
        o.discovery_tag,
        o.tagged_subnets.join(", "),
        o.tagged_security_groups.join(", ")
    );
}

/// The plan, step by step, on stdout; warnings on stderr.
fn print_plan(steps: &[StepPlan]) {
    let mut out = std::io::stdout().lock();
    for step in steps {
        if step.changes.is_empty() {
            let _ = writeln!(out, "{}: no changes", step.step.title());
            continue;
        }
        let _ = writeln!(out, "{}:", step.step.title());
        for change in &step.changes {
            let _ = writeln!(out, "  {change}");
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

fn print_warnings(steps: &[StepPlan]) {
    for w in steps.iter().flat_map(|s| &s.warnings) {
        eprintln!("warning: {w}");
    }
}

/// Drift as a table: what differs, resource by resource, tags first.
fn print_drift(steps: &[StepPlan]) {
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
fn change_json(step: &StepPlan, c: &Change) -> Value {
    json!({
        "step": step.step,
        "op": c.op,
        "resource": c.resource,
        "field": c.field,
        "detail": c.detail,
    })
}

fn changes_json(steps: &[StepPlan]) -> Vec<Value> {
    steps
        .iter()
        .flat_map(|s| s.changes.iter().map(move |c| change_json(s, c)))
        .collect()
}

fn warnings(steps: &[StepPlan]) -> Vec<String> {
    steps.iter().flat_map(|s| s.warnings.clone()).collect()
}
