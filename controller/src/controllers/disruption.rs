//! The disruption loop (leader only): decides with the pure core every `DISRUPTION_POLL`,
//! re-validates a decision after `DISRUPTION_VALIDATION`, then acts: taint the candidates
//! `karpenter.sh/disrupted:NoSchedule`; for a replacement, launch it and wait until it is
//! initialized (untaint and back off if it fails); then delete the candidates' NodeClaims,
//! which the NodeClaim controller drains through the eviction API and terminates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

use crate::api::conditions::{is_true, INITIALIZED};
use crate::api::labels::TERMINATION_TIMESTAMP;
use crate::api::nodeclaim::NodeClaim;
use crate::core::disruption::{decide, revalidate, Command, Decision, Inputs, Method};
use crate::core::drain::stale_disrupted;
use crate::core::nodeclaim::from_plan;
use crate::core::state::types_of_pools;
use crate::metrics::ReasonLabels;
use crate::runtime::{node_pods, taints, Context, WRITES_AT_ONCE};

/// A decision that takes this long is logged even when it finds nothing to do.
const SLOW_DECISION: Duration = Duration::from_secs(1);
/// How long a replacement may take to become initialized before the command is abandoned.
const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(600);

pub async fn run(ctx: Arc<Context>) {
    ctx.stores.ready().await;
    // Where single-node consolidation ran out of time: the next pass goes on from there.
    let mut resume: Option<String> = None;
    loop {
        tokio::time::sleep(ctx.settings.disruption_poll).await;
        release_stale_taints(&ctx).await;
        let (first, stopped_at) = decide_now(&ctx, resume.as_deref()).await;
        if let Some(at) = &stopped_at {
            tracing::info!(next_pass_starts_at = %at, timeout = ?ctx.settings.consolidation_timeouts().single_node, "single-node consolidation ran out of time");
        }
        resume = stopped_at;
        let Some(command) = first else {
            continue;
        };
        // The cluster moves on: act only if the same decision still holds a little later.
        tokio::time::sleep(ctx.settings.disruption_validation).await;
        match revalidate_now(&ctx, &command).await {
            Ok(again) => {
                if let Err(e) = execute(&ctx, &again).await {
                    tracing::error!(error = %e, method = again.method.as_str(), "disruption failed");
                }
            }
            Err(why) => {
                tracing::info!(method = command.method.as_str(), nodeclaims = %command.candidates.join(","), why = %why, "disruption no longer valid after the validation delay")
            }
        }
    }
}

/// Untaints nodes a command tainted before the controller crashed (no command is in flight
/// here, and a leader that just took over inherits its predecessor's taints).
async fn release_stale_taints(ctx: &Context) {
    let claims = ctx.stores.nodeclaims.state();
    let nodes = ctx.stores.nodes.state();
    let api: Api<Node> = Api::all(ctx.client.clone());
    for node in stale_disrupted(
        claims.iter().map(|c| c.as_ref()),
        nodes.iter().map(|n| n.as_ref()),
    ) {
        match taints::remove_disrupted(&api, node).await {
            Ok(()) => {
                tracing::info!(node = %node.name_any(), "untainted a node left disrupted by an unfinished command")
            }
            Err(e) => {
                tracing::warn!(node = %node.name_any(), error = %e, "could not untaint a node left disrupted")
            }
        }
    }
}

/// One decision, single-node consolidation starting at `single_node_from`; and where it ran
/// out of time, if it did.
async fn decide_now(
    ctx: &Context,
    single_node_from: Option<&str>,
) -> (Option<Command>, Option<String>) {
    let decision = with_inputs(ctx, single_node_from, |inputs| {
        let started = Instant::now();
        let decision = decide(inputs);
        (decision, started.elapsed())
    })
    .await;
    let Some((decision, took)) = decision else {
        return (None, None);
    };
    ctx.metrics.disruption_decision.observe(took.as_secs_f64());
    log_decision(&decision, took);
    for (claim, why) in &decision.kept {
        tracing::debug!(nodeclaim = %claim, reason = %why, "kept");
    }
    (decision.command, decision.single_node_stopped_at)
}

/// One line per decision that acts or takes a while, with what each consolidation method
/// spent (the decision histogram alone cannot say which one was slow).
fn log_decision(decision: &Decision, took: Duration) {
    let searched = decision
        .searched
        .iter()
        .map(|(method, spent)| format!("{method} {} ms", spent.as_millis()))
        .collect::<Vec<_>>()
        .join(", ");
    let method = decision
        .command
        .as_ref()
        .map_or("none", |c| c.method.as_str());
    let nodeclaims = decision.command.as_ref().map_or(0, |c| c.candidates.len());
    let took_ms = took.as_millis();
    if decision.command.is_some() || took >= SLOW_DECISION {
        tracing::info!(method, nodeclaims, took_ms, %searched, "disruption decided");
    } else {
        tracing::debug!(method, nodeclaims, took_ms, %searched, "disruption decided");
    }
}

/// `command` checked again on the cluster as it is now.
async fn revalidate_now(ctx: &Context, command: &Command) -> Result<Command, String> {
    with_inputs(ctx, None, |inputs| revalidate(inputs, command))
        .await
        .unwrap_or_else(|| Err("no instance types to simulate with".into()))
}

/// Runs `f` over the disruption core's inputs as the stores and the cloud hold them now;
/// `None` when the instance types cannot be had.
async fn with_inputs<T>(
    ctx: &Context,
    single_node_from: Option<&str>,
    f: impl FnOnce(&Inputs) -> T,
) -> Option<T> {
    let snapshot = ctx.stores.snapshot();
    let types_of_class = match ctx.cloud.instance_types(&snapshot.nodeclasses).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "no instance types: no disruption decision this round");
            return None;
        }
    };
    let (types_of_pool, _) = types_of_pools(&snapshot, &types_of_class);
    let inputs = Inputs {
        snapshot: &snapshot,
        types_of_class: &types_of_class,
        types_of_pool: &types_of_pool,
        now: Timestamp::now(),
        settle: ctx.settings.disruption_settle,
        spot_to_spot: ctx.settings.spot_to_spot_consolidation,
        single_node_from,
        nominated: &ctx.nominations.active(Instant::now()),
        policies: ctx.settings.policies(),
        timeouts: ctx.settings.consolidation_timeouts(),
    };
    // Up to the consolidation timeouts (minutes) of simulations: off the async workers' turn.
    Some(crate::runtime::compute(|| f(&inputs)))
}

async fn event(ctx: &Context, claim: &NodeClaim, type_: EventType, reason: &str, note: String) {
    crate::runtime::events::publish(&ctx.recorder, claim, type_, reason, "Disrupt", &note).await;
}

async fn set_taint(ctx: &Context, claim: &NodeClaim, on: bool) -> Result<(), kube::Error> {
    let Some(node_name) = claim.status.as_ref().and_then(|s| s.node_name.clone()) else {
        return Ok(());
    };
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let Some(node) = nodes.get_opt(&node_name).await? else {
        return Ok(());
    };
    if on {
        taints::add_disrupted(&nodes, &node).await
    } else {
        // Back in service: the decision was abandoned.
        taints::remove_disrupted(&nodes, &node).await
    }
}

/// Stamps `karpenter.sh/nodeclaim-termination-timestamp` = now + `bound` just before the
/// deletion (as upstream's repair does), so the drain ends by then even when pods are protected
/// by do-not-disrupt or PodDisruptionBudgets; the NodeClaim controller takes the earlier of it
/// and the NodeClaim's own `terminationGracePeriod`.
async fn bound_drain(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    bound: Duration,
) -> anyhow::Result<()> {
    let at = Timestamp::now().checked_add(k8s_openapi::jiff::SignedDuration::try_from(bound)?)?;
    let patch =
        serde_json::json!({"metadata": {"annotations": {TERMINATION_TIMESTAMP: at.to_string()}}});
    match api
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `write` for every one of `claims`, [`WRITES_AT_ONCE`] at a time: the first error ends it.
/// The writes are made before the first is awaited (a stream mapping them lazily does not
/// prove `Send` for the spawned loop).
async fn each_claim<'c, Fut>(
    claims: &'c [NodeClaim],
    write: impl FnMut(&'c NodeClaim) -> Fut,
) -> anyhow::Result<()>
where
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let writes: Vec<Fut> = claims.iter().map(write).collect();
    futures::stream::iter(writes)
        .buffer_unordered(WRITES_AT_ONCE)
        .try_collect()
        .await
}

/// The claims whose nodes hold no pod to move now that they are tainted; the others are
/// untainted and stay. kube-scheduler may bind a pod to an empty node after the validation,
/// until the taint reaches it: deleting the node then would evict that pod (a bare pod for
/// good).
async fn empty_after_taint(
    ctx: &Context,
    claims: Vec<NodeClaim>,
) -> anyhow::Result<Vec<NodeClaim>> {
    let looks: Vec<_> = claims
        .into_iter()
        .map(|claim| async move {
            let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
            let pods = match &node {
                Some(node) => node_pods::to_move(&ctx.client, node).await?,
                None => 0,
            };
            if pods == 0 {
                return Ok(Some(claim));
            }
            set_taint(ctx, &claim, false).await?;
            tracing::info!(nodeclaim = %claim.name_any(), node = node.unwrap_or_default(), pods, "no longer empty: a pod was bound before the taint; the node stays");
            Ok::<_, anyhow::Error>(None)
        })
        .collect();
    let looked: Vec<Option<NodeClaim>> = futures::stream::iter(looks)
        .buffer_unordered(WRITES_AT_ONCE)
        .try_collect()
        .await?;
    Ok(looked.into_iter().flatten().collect())
}

async fn execute(ctx: &Context, command: &Command) -> anyhow::Result<()> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let claims: Vec<NodeClaim> = ctx
        .stores
        .nodeclaims
        .state()
        .iter()
        .filter(|c| command.candidates.contains(&c.name_any()))
        .map(|c| c.as_ref().clone())
        .collect();
    let method = command.method.as_str();
    each_claim(
        &claims,
        |c| async move { Ok(set_taint(ctx, c, true).await?) },
    )
    .await?;
    let claims = match command.method {
        Method::Empty => empty_after_taint(ctx, claims).await?,
        _ => claims,
    };
    if claims.is_empty() {
        return Ok(());
    }
    let mut replacements = Vec::new();
    for plan in &command.replacements {
        let pool = ctx
            .stores
            .nodepools
            .state()
            .into_iter()
            .find(|p| p.name_any() == plan.pool)
            .ok_or_else(|| anyhow::anyhow!("NodePool {} is gone", plan.pool))?;
        let class = ctx
            .stores
            .nodeclasses
            .state()
            .into_iter()
            .find(|c| c.name_any() == pool.spec.template.spec.node_class_ref.name);
        let made = api
            .create(
                &PostParams::default(),
                &from_plan(plan, &pool, class.as_deref()),
            )
            .await?;
        tracing::info!(method, nodeclaims = %command.candidates.join(","), replacement = %made.name_any(), saving_per_hour = command.saving, "launching a replacement");
        replacements.push(made.name_any());
    }
    let started = Instant::now();
    while !replacements.is_empty() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let current = ctx.stores.nodeclaims.state();
        let find = |name: &String| current.iter().find(|c| &c.name_any() == name);
        let gone = replacements.iter().any(|r| find(r).is_none());
        let ready = replacements.iter().all(|r| {
            find(r)
                .and_then(|c| c.status.as_ref())
                .is_some_and(|s| is_true(&s.conditions, INITIALIZED))
        });
        if ready {
            tracing::info!(replacements = %replacements.join(","), "replacement initialized");
            break;
        }
        if gone || started.elapsed() > REPLACEMENT_TIMEOUT {
            // Give the candidates back and try again later.
            let names = replacements.join(",");
            let note = format!("the replacement {names} did not become ready; the node stays");
            each_claim(&claims, |c| {
                let note = note.clone();
                async move {
                    set_taint(ctx, c, false).await?;
                    event(ctx, c, EventType::Warning, "DisruptionFailed", note).await;
                    Ok(())
                }
            })
            .await?;
            for r in &replacements {
                let _ = api.delete(r, &DeleteParams::background()).await;
            }
            anyhow::bail!("replacement {names} did not become ready");
        }
    }
    // Named in the Event, so whoever reads it (and the crash test) can tell the replacement
    // was up before the node went.
    let replaced = if replacements.is_empty() {
        String::new()
    } else {
        format!("; replaced by {}", replacements.join(", "))
    };
    let note = match &command.why {
        Some(why) => format!("{method}: {why}{replaced}"),
        None => format!("{method}: saves ${:.4}/h{replaced}", command.saving),
    };
    each_claim(&claims, |c| {
        let (api, note) = (&api, note.clone());
        async move {
            event(ctx, c, EventType::Normal, "Disrupting", note).await;
            if let Some(bound) = command.drain_bound {
                bound_drain(api, c, bound).await?;
            }
            match api.delete(&c.name_any(), &DeleteParams::background()).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(e.into()),
            }
        }
    })
    .await?;
    ctx.metrics
        .disruption_commands
        .get_or_create(&ReasonLabels {
            reason: method.to_string(),
        })
        .inc();
    tracing::info!(method, nodeclaims = %command.candidates.join(","), replacements = command.replacements.len(), saving_per_hour = command.saving, "disrupting");
    Ok(())
}
