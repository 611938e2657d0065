//! The four commands over the engine: `plan`, `apply`, `drift` and `teardown`.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use aws_sdk_ec2::types::Filter;
use serde::Serialize;
use serde_json::json;

use super::report::{self, Counts};
use super::{execute, plan_step, Context, Goal, Step, StepPlan};

/// Observes every step, in `order`, against `goal`. Read-only.
pub async fn plan(ctx: &Context, goal: Goal, order: &[Step]) -> Result<Vec<StepPlan>> {
    let mut steps = Vec::new();
    for step in order {
        steps.push(
            plan_step(ctx, *step, goal)
                .await
                .with_context(|| format!("observing {}", step.title()))?,
        );
    }
    Ok(steps)
}

/// Deleting a NodePool terminates its nodes: never done without a confirmation or `--yes`.
fn needs_explicit_yes(change: &super::Change) -> bool {
    matches!(
        change.action,
        super::Action::Nodes(super::cluster_nodes::Action::DeletePool { .. })
    )
}

/// Runs every change in order, one line of progress each on stderr, except those `held`
/// back. Stops at the first failure: every step re-observes, so running again picks up from
/// there.
pub async fn execute_plan(
    ctx: &Context,
    steps: &[StepPlan],
    held: &dyn Fn(&super::Change) -> bool,
) -> Result<usize> {
    let total: usize = steps
        .iter()
        .flat_map(|s| &s.changes)
        .filter(|c| !held(c))
        .count();
    let mut done = 0;
    for step in steps {
        for change in step.changes.iter().filter(|c| !held(c)) {
            done += 1;
            let started = Instant::now();
            eprint!("[{done}/{total}] {} ... ", report::line(change));
            let _ = std::io::stderr().flush();
            match execute(ctx, &change.action).await {
                Ok(()) => eprintln!("done ({} ms)", started.elapsed().as_millis()),
                Err(e) => {
                    eprintln!("failed");
                    return Err(e.context(format!(
                        "{}: {} (nothing after it was attempted; re-running picks up from here)",
                        step.step.title(),
                        report::line(change)
                    )));
                }
            }
        }
    }
    Ok(done)
}

fn on_terminal() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Asks on a terminal only: in CI (no TTY) a prompt would hang the pipeline, so not being on
/// a terminal counts as `--yes` (except for deleting NodePools, see `needs_explicit_yes`).
fn confirm(question: &str, yes: bool) -> Result<bool> {
    if yes || !on_terminal() {
        return Ok(true);
    }
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// What `apply` leaves behind that the next steps (controller install, CI) need.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outputs {
    pub cluster: String,
    pub cluster_arn: String,
    pub region: String,
    pub node_role_arn: String,
    pub controller_role_arn: String,
    pub identity: crate::config::Identity,
    pub service_account: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interruption_queue: Option<String>,
    pub discovery_tag: String,
    pub tagged_subnets: Vec<String>,
    pub tagged_security_groups: Vec<String>,
}

async fn outputs(ctx: &Context) -> Result<Outputs> {
    let key = &ctx.config.discovery.tag_key;
    let filter = Filter::builder()
        .name(format!("tag:{key}"))
        .values(&ctx.cluster.name)
        .build();
    let subnets = ctx
        .aws
        .ec2
        .describe_subnets()
        .filters(filter.clone())
        .send()
        .await
        .map_err(|e| super::aws::failed("ec2:DescribeSubnets", e))?;
    let groups = ctx
        .aws
        .ec2
        .describe_security_groups()
        .filters(filter)
        .send()
        .await
        .map_err(|e| super::aws::failed("ec2:DescribeSecurityGroups", e))?;
    let scope = ctx.scope();
    Ok(Outputs {
        cluster: ctx.cluster.name.clone(),
        cluster_arn: ctx.cluster.arn.clone(),
        region: ctx.cluster.region.clone(),
        node_role_arn: scope.node_role_arn(),
        controller_role_arn: ctx.controller_role_arn(),
        identity: ctx.config.identity,
        service_account: format!(
            "{}/{}",
            ctx.config.controller.namespace,
            ctx.config.controller.service_account_name()
        ),
        interruption_queue: scope.queue_name.clone(),
        discovery_tag: format!("{key}={}", ctx.cluster.name),
        tagged_subnets: subnets
            .subnets()
            .iter()
            .filter_map(|s| s.subnet_id.clone())
            .collect(),
        tagged_security_groups: groups
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id.clone())
            .collect(),
    })
}

fn print_outputs(o: &Outputs) {
    println!("node role:           {}", o.node_role_arn);
    println!(
        "controller role:     {} ({} for {})",
        o.controller_role_arn,
        match o.identity {
            crate::config::Identity::PodIdentity => "pod identity",
            crate::config::Identity::Irsa => "IRSA",
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

/// `jointer plan`: the changes `apply` would make. No writes.
pub async fn cmd_plan(ctx: &Context, json: bool) -> Result<()> {
    let steps = plan(ctx, Goal::Converge, &Step::APPLY_ORDER).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "cluster": ctx.cluster.name,
                "changes": report::changes_json(&steps),
                "summary": Counts::of(&steps),
                "warnings": report::warnings(&steps),
            }))?
        );
    } else {
        report::print_plan(&steps);
    }
    Ok(())
}

/// `jointer apply`: observe, diff, show, apply in order, re-observe, verify.
pub async fn cmd_apply(ctx: &Context, yes: bool, wait: bool, json: bool) -> Result<bool> {
    let started = Instant::now();
    let steps = plan(ctx, Goal::Converge, &Step::APPLY_ORDER).await?;
    let counts = Counts::of(&steps);
    if !json {
        report::print_plan(&steps);
    } else {
        report::print_warnings(&steps);
    }
    if counts.total() > 0 && !confirm(&format!("apply {} change(s)?", counts.total()), yes)? {
        eprintln!("nothing applied");
        return Ok(false);
    }
    // Confirmed on a terminal or with --yes: everything; otherwise NodePool deletions wait.
    let confirmed = yes || on_terminal();
    let held = |c: &super::Change| !confirmed && needs_explicit_yes(c);
    let held_back: Vec<String> = steps
        .iter()
        .flat_map(|s| &s.changes)
        .filter(|c| held(c))
        .map(report::line)
        .collect();
    let applied = execute_plan(ctx, &steps, &held).await?;
    if !held_back.is_empty() {
        bail!(
            "applied {applied} change(s); held back, because deleting a NodePool terminates its nodes (re-run with --yes to delete):\n  {}",
            held_back.join("\n  ")
        );
    }
    // Verify: a second look must find nothing left to do (nothing to verify when nothing
    // was done: the first look just found that).
    let remaining = if applied > 0 {
        plan(ctx, Goal::Converge, &Step::APPLY_ORDER).await?
    } else {
        Vec::new()
    };
    if Counts::of(&remaining).total() > 0 {
        let lines: Vec<String> = remaining
            .iter()
            .flat_map(|s| s.changes.iter().map(report::line))
            .collect();
        bail!(
            "applied {applied} change(s) but the world still differs (something else is changing it?):\n  {}",
            lines.join("\n  ")
        );
    }
    if wait {
        super::waits::controller_and_classes(ctx).await?;
    }
    let outputs = outputs(ctx).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "applied": report::changes_json(&steps),
                "summary": counts,
                "warnings": report::warnings(&steps),
                "outputs": outputs,
                "seconds": started.elapsed().as_secs_f64(),
            }))?
        );
    } else {
        if applied == 0 {
            println!("already converged: no changes made");
        } else {
            println!(
                "applied {applied} change(s) in {:.1} s; verified",
                started.elapsed().as_secs_f64()
            );
        }
        print_outputs(&outputs);
    }
    Ok(true)
}

/// `jointer drift`: in sync (`Ok(false)`) or drifted (`Ok(true)`).
pub async fn cmd_drift(ctx: &Context, json: bool) -> Result<bool> {
    let steps = plan(ctx, Goal::Converge, &Step::APPLY_ORDER).await?;
    let drifted = Counts::of(&steps).total() > 0;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "cluster": ctx.cluster.name,
                "inSync": !drifted,
                "drift": report::changes_json(&steps),
                "warnings": report::warnings(&steps),
            }))?
        );
    } else {
        report::print_drift(&steps);
    }
    Ok(drifted)
}

/// `jointer teardown`: remove what jointer owns, step by step (each observed again just
/// before it runs, so what the controller left behind while NodePools drained is swept too),
/// then prove nothing of it is left (`Ok(false)` lists what is).
pub async fn cmd_teardown(ctx: &Context, yes: bool, dry_run: bool, json: bool) -> Result<bool> {
    let started = Instant::now();
    let steps = plan(ctx, Goal::Remove, &Step::TEARDOWN_ORDER).await?;
    let counts = Counts::of(&steps);
    if dry_run {
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({
                    "changes": report::changes_json(&steps),
                    "summary": counts,
                }))?
            );
        } else {
            report::print_plan(&steps);
        }
        return Ok(true);
    }
    if !json {
        report::print_plan(&steps);
    }
    if counts.total() > 0 && !confirm(&format!("delete {} item(s)?", counts.total()), yes)? {
        eprintln!("nothing deleted");
        return Ok(false);
    }
    let mut removed = Vec::new();
    if counts.total() > 0 {
        for step in Step::TEARDOWN_ORDER {
            let fresh = plan(ctx, Goal::Remove, &[step]).await?;
            execute_plan(ctx, &fresh, &|_| false).await?;
            removed.extend(report::changes_json(&fresh));
        }
    }
    let left = plan(ctx, Goal::Remove, &Step::TEARDOWN_ORDER).await?;
    let leftovers: Vec<String> = left
        .iter()
        .flat_map(|s| s.changes.iter().map(report::line))
        .collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "removed": removed,
                "leftovers": leftovers,
                "seconds": started.elapsed().as_secs_f64(),
            }))?
        );
    } else if leftovers.is_empty() {
        println!(
            "removed {} item(s) in {:.1} s; nothing jointer owns for cluster {} is left",
            removed.len(),
            started.elapsed().as_secs_f64(),
            ctx.cluster.name
        );
    } else {
        println!("still there after teardown:");
        for l in &leftovers {
            println!("  {l}");
        }
    }
    Ok(leftovers.is_empty())
}
