//! Interruption handling: long-polls the queue `jointer apply` made (20 s, up to 10 messages),
//! and for a spot interruption warning, capacity-reservation interruption or EC2 scheduled
//! change deletes the node's NodeClaim at once — the lifecycle taints and drains it, and the
//! provisioner places its pods (pods on a node being deleted count as pending) on a
//! replacement while the two minutes run. A stopped or terminated instance's NodeClaim goes
//! too; a rebalance recommendation is logged and put on the NodeClaim as an Event. Every
//! message is deleted after handling, ours or not. A message is acted on at most once: one too
//! big or malformed, a redelivery (same event id), one for another cluster's instance, one
//! stamped before its NodeClaim existed, or one whose NodeClaim is going already is dropped
//! with a log line and counted by reason.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::core::interruption::{judge, parse, ClaimView, Kind, Seen, Verdict};
use crate::core::scheduling::CapacityType;
use crate::metrics::ReasonLabels;
use crate::runtime::Context;

fn count(ctx: &Context, kind: &str) {
    ctx.metrics
        .interruption_messages
        .get_or_create(&ReasonLabels {
            reason: kind.to_string(),
        })
        .inc();
}

/// How many event ids are remembered to drop redeliveries: a flood's worth.
const SEEN_EVENTS: usize = 20_000;

pub async fn run(ctx: Arc<Context>) {
    let Some(queue) = ctx.queue.clone() else {
        tracing::info!("INTERRUPTION_QUEUE unset: interruption handling is off");
        return std::future::pending().await;
    };
    ctx.stores.ready().await;
    let mut seen = Seen::new(SEEN_EVENTS);
    loop {
        let messages = match queue.receive().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "receiving interruption messages failed; retrying");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        if messages.is_empty() {
            continue;
        }
        let started = Instant::now();
        let mut claims = claims_by_instance(&ctx);
        for m in &messages {
            let outcome = consider(&ctx, &mut seen, &mut claims, &m.body).await;
            count(&ctx, outcome);
        }
        // Deleted only once handled: a crash before this point gets them again.
        let receipts: Vec<String> = messages.into_iter().map(|m| m.receipt).collect();
        if let Err(e) = queue.acknowledge(&receipts).await {
            tracing::warn!(error = %e, "deleting interruption messages failed; they will come back");
        }
        tracing::debug!(
            messages = receipts.len(),
            ms = started.elapsed().as_millis() as u64,
            "interruption messages handled"
        );
    }
}

/// Each NodeClaim by the instance id its providerID ends in, and whether it is going already.
fn claims_by_instance(ctx: &Context) -> HashMap<String, (Arc<NodeClaim>, bool)> {
    ctx.stores
        .nodeclaims
        .state()
        .into_iter()
        .filter_map(|c| {
            let id = c
                .status
                .as_ref()?
                .provider_id
                .as_deref()?
                .rsplit('/')
                .next()?;
            let going = c.metadata.deletion_timestamp.is_some();
            Some((id.to_string(), (c.clone(), going)))
        })
        .collect()
}

/// Handles one message at most once; returns what became of it (the metric's reason).
async fn consider(
    ctx: &Context,
    seen: &mut Seen,
    claims: &mut HashMap<String, (Arc<NodeClaim>, bool)>,
    body: &str,
) -> &'static str {
    let event = match parse(body) {
        Ok(Some(event)) => event,
        Ok(None) => return "ignored",
        Err(refusal) => {
            tracing::warn!(reason = %refusal, "dropping an interruption message");
            return refusal.label();
        }
    };
    if let Some(id) = &event.id {
        if !seen.first_time(id) {
            tracing::info!(event = %id, "dropping an interruption message handled already (a redelivery)");
            return "duplicate";
        }
    }
    let kind = &event.interruption.kind;
    let mut outcome = Verdict::NotOurs;
    for id in &event.interruption.instance_ids {
        let entry = claims.get_mut(id);
        let view = entry.as_ref().map(|(claim, going)| ClaimView {
            created: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
            going: *going,
        });
        let verdict = judge(event.time, view);
        outcome = outcome.max(verdict);
        match (verdict, entry) {
            (Verdict::Act, Some((claim, going))) => {
                *going = act(ctx, claim, kind, id).await;
            }
            (Verdict::NotOurs, _) => {
                tracing::info!(instance = %id, kind = kind.label(), "interruption message for an instance that is not this cluster's")
            }
            (verdict, _) => tracing::info!(
                instance = %id,
                kind = kind.label(),
                verdict = verdict.label(),
                "dropping an interruption message: its NodeClaim is going already, or it predates the NodeClaim"
            ),
        }
    }
    if outcome == Verdict::Act {
        kind.label()
    } else {
        outcome.label()
    }
}

/// Records the interruption on the NodeClaim and, when the node must go, deletes it; returns
/// whether it is going now.
async fn act(ctx: &Context, claim: &NodeClaim, kind: &Kind, id: &str) -> bool {
    let name = claim.name_any();
    let note = match kind {
        Kind::StateChange(state) => format!("instance {id} is {state}"),
        other => format!("instance {id}: {}", other.label().replace('_', " ")),
    };
    tracing::warn!(nodeclaim = %name, instance = %id, kind = kind.label(), "interruption");
    event(ctx, claim, kind, &note).await;
    if !kind.node_goes(ctx.settings.interruption_act_on_rebalance) {
        return false;
    }
    if *kind == Kind::SpotInterruption {
        // EC2 is short of this spot capacity: do not buy it again right away.
        let l = claim.labels();
        if let (Some(t), Some(z)) = (l.get(labels::INSTANCE_TYPE), l.get(labels::ZONE)) {
            ctx.cloud.offering_unavailable(t, z, CapacityType::Spot);
        }
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => {
            tracing::error!(nodeclaim = %name, error = %e, "deleting an interrupted NodeClaim failed");
            false
        }
    }
}

async fn event(ctx: &Context, claim: &NodeClaim, kind: &Kind, note: &str) {
    let reason = match kind {
        Kind::SpotInterruption => "SpotInterrupted",
        Kind::CapacityReservationInterruption => "CapacityReservationInterrupted",
        Kind::ScheduledChange => "InstanceScheduledChange",
        Kind::Rebalance => "RebalanceRecommendation",
        Kind::StateChange(_) => "InstanceStopping",
    };
    crate::runtime::events::publish(
        &ctx.recorder,
        claim,
        EventType::Warning,
        reason,
        "Interrupt",
        note,
    )
    .await;
}
