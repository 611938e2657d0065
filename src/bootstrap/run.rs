//! The four commands over the engine: `plan`, `apply`, `drift` and `teardown`. Each returns
//! what it found or did as a value for `output` to print; progress while changes run, and the
//! question before they do, go through the context's `Progress`.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use aws_sdk_ec2::types::Filter;
use serde::Serialize;

use super::{execute, plan_step, Change, Context, Counts, Goal, Step, StepPlan};

/// Observes every step, in `order`, against `goal`. Read-only.
async fn plan(ctx: &Context, goal: Goal, order: &[Step]) -> Result<Vec<StepPlan>> {
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
fn needs_explicit_yes(change: &Change) -> bool {
    matches!(
        change.action,
        super::Action::Nodes(super::nodes::Action::DeletePool { .. })
    )
}

/// Runs every change in order, one line of progress each, except those `held` back. Stops
/// at the first failure: every step re-observes, so running again picks up from there.
async fn execute_plan(
    ctx: &Context,
    steps: &[StepPlan],
    held: &dyn Fn(&Change) -> bool,
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
            ctx.progress
                .change_started(done, total, &change.to_string());
            match execute(ctx, &change.action).await {
                Ok(()) => ctx.progress.change_done(started.elapsed()),
                Err(e) => {
                    ctx.progress.change_failed();
                    return Err(e.context(format!(
                        "{}: {change} (nothing after it was attempted; re-running picks up from here)",
                        step.step.title(),
                    )));
                }
            }
        }
    }
    Ok(done)
}

/// `--yes`: go ahead without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirm {
    Ask,
    Yes,
}

/// Asks only when a person is there: in CI (no TTY) a prompt would hang the pipeline, so not
/// being on a terminal counts as `--yes` (except for deleting NodePools, see
/// `needs_explicit_yes`).
fn confirm(ctx: &Context, question: &str, confirm: Confirm) -> Result<bool> {
    if confirm == Confirm::Yes || !ctx.progress.interactive() {
        return Ok(true);
    }
    ctx.progress.confirm(question)
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
    pub identity: crate::input::config::Identity,
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
        .map_err(|e| super::aws::clients::failed("ec2:DescribeSubnets", e))?;
    let groups = ctx
        .aws
        .ec2
        .describe_security_groups()
        .filters(filter)
        .send()
        .await
        .map_err(|e| super::aws::clients::failed("ec2:DescribeSecurityGroups", e))?;
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

/// What the steps found to do for a goal: `plan`'s answer, and what `apply` and `teardown`
/// show before they ask.
pub struct Planned {
    pub cluster: String,
    pub steps: Vec<StepPlan>,
    /// When the observation began (a run's reported time includes it).
    pub started: Instant,
}

impl Planned {
    pub fn counts(&self) -> Counts {
        Counts::of(&self.steps)
    }
}

/// `jointer drift`: what differs from the config (exit 2 when anything does).
pub struct Drift(pub Planned);

impl Drift {
    pub fn drifted(&self) -> bool {
        self.0.counts().total() > 0
    }

    /// 2 on drift, so CI can tell drift from an error (1).
    pub fn exit_code(&self) -> ExitCode {
        if self.drifted() {
            ExitCode::from(2)
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// `jointer teardown --dry-run`: what would be removed.
pub struct Preview(pub Planned);

/// `--wait`: after applying, wait until the controller runs and every class is Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    No,
    UntilReady,
}

/// How `apply` ended.
pub enum Applied {
    /// The person answered no: nothing was changed.
    Declined,
    Done {
        /// The plan that was carried out.
        steps: Vec<StepPlan>,
        /// How many of its changes ran (none when it was already converged).
        applied: usize,
        outputs: Box<Outputs>,
        seconds: f64,
    },
}

/// How `teardown` ended.
pub enum TornDown {
    /// The person answered no: nothing was removed.
    Declined,
    Done {
        cluster: String,
        /// What each step removed, observed just before it ran.
        removed: Vec<StepPlan>,
        /// What a last look still found: empty when teardown is proven complete.
        left: Vec<StepPlan>,
        seconds: f64,
    },
}

impl Applied {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Applied::Declined => ExitCode::FAILURE,
            Applied::Done { .. } => ExitCode::SUCCESS,
        }
    }
}

impl TornDown {
    /// 1 unless teardown is proven complete.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            TornDown::Declined => ExitCode::FAILURE,
            TornDown::Done { left, .. } if Counts::of(left).total() > 0 => ExitCode::FAILURE,
            TornDown::Done { .. } => ExitCode::SUCCESS,
        }
    }
}

/// Observes every step against `goal`, in the order that goal runs them. Read-only.
pub async fn observe(ctx: &Context, goal: Goal) -> Result<Planned> {
    let started = Instant::now();
    let order: &[Step] = match goal {
        Goal::Converge => &Step::APPLY_ORDER,
        Goal::Remove => &Step::TEARDOWN_ORDER,
    };
    Ok(Planned {
        cluster: ctx.cluster.name.clone(),
        steps: plan(ctx, goal, order).await?,
        started,
    })
}

/// `jointer drift`: the converge plan, read as drift.
pub async fn drift(ctx: &Context) -> Result<Drift> {
    Ok(Drift(observe(ctx, Goal::Converge).await?))
}

/// `jointer apply`, after `planned` was shown: confirm, apply in order, re-observe, verify.
pub async fn apply(ctx: &Context, planned: Planned, yes: Confirm, wait: Wait) -> Result<Applied> {
    let counts = planned.counts();
    if counts.total() > 0 && !confirm(ctx, &format!("apply {} change(s)?", counts.total()), yes)? {
        return Ok(Applied::Declined);
    }
    // Confirmed on a terminal or with --yes: everything; otherwise NodePool deletions wait.
    let confirmed = yes == Confirm::Yes || ctx.progress.interactive();
    let held = |c: &Change| !confirmed && needs_explicit_yes(c);
    let held_back: Vec<String> = planned
        .steps
        .iter()
        .flat_map(|s| &s.changes)
        .filter(|c| held(c))
        .map(Change::to_string)
        .collect();
    let applied = execute_plan(ctx, &planned.steps, &held).await?;
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
            .flat_map(|s| s.changes.iter().map(Change::to_string))
            .collect();
        bail!(
            "applied {applied} change(s) but the world still differs (something else is changing it?):\n  {}",
            lines.join("\n  ")
        );
    }
    if wait == Wait::UntilReady {
        super::cluster::waits::controller_and_classes(ctx).await?;
    }
    Ok(Applied::Done {
        steps: planned.steps,
        applied,
        outputs: Box::new(outputs(ctx).await?),
        seconds: planned.started.elapsed().as_secs_f64(),
    })
}

/// `jointer teardown`, after `planned` was shown: remove what jointer owns, step by step
/// (each observed again just before it runs, so what the controller left behind while
/// NodePools drained is swept too), then prove nothing of it is left.
pub async fn teardown(ctx: &Context, planned: Planned, yes: Confirm) -> Result<TornDown> {
    let counts = planned.counts();
    if counts.total() > 0 && !confirm(ctx, &format!("delete {} item(s)?", counts.total()), yes)? {
        return Ok(TornDown::Declined);
    }
    let mut removed = Vec::new();
    if counts.total() > 0 {
        for step in Step::TEARDOWN_ORDER {
            let fresh = plan(ctx, Goal::Remove, &[step]).await?;
            execute_plan(ctx, &fresh, &|_| false).await?;
            removed.extend(fresh);
        }
    }
    let left = plan(ctx, Goal::Remove, &Step::TEARDOWN_ORDER).await?;
    Ok(TornDown::Done {
        cluster: planned.cluster,
        removed,
        left,
        seconds: planned.started.elapsed().as_secs_f64(),
    })
}
