//! Interruption handling: long-polls the queue `jointer apply` made (20 s, up to 10 messages),
//! and for a spot interruption warning, capacity-reservation interruption or EC2 scheduled
//! change deletes the node's NodeClaim at once — the lifecycle taints and drains it, and the
//! provisioner places its pods (pods on a node being deleted count as pending) on a
//! replacement while the two minutes run. A stopped or terminated instance's NodeClaim goes
//! too; a rebalance recommendation is logged and put on the NodeClaim as an Event. Every
//! message is deleted after handling, ours or not; a malformed one is logged and deleted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::InterruptionQueue;
use crate::core::interruption::{parse, Interruption, Kind};
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

pub async fn run(ctx: Arc<Context>) {
    let Some(queue) = ctx.queue.clone() else {
        tracing::info!("INTERRUPTION_QUEUE unset: interruption handling is off");
        return std::future::pending().await;
    };
    ctx.stores.ready().await;
    loop {
        let messages = match queue.receive().await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "receiving interruption messages failed; retrying");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
        };
        for m in messages {
            let started = Instant::now();
            match parse(&m.body) {
                Ok(Some(i)) => handle(&ctx, &i).await,
                Ok(None) => count(&ctx, "ignored"),
                Err(why) => {
                    count(&ctx, "malformed");
                    tracing::warn!(reason = %why, "deleting a malformed interruption message");
                }
            }
            acknowledge(queue.as_ref(), &m.receipt).await;
            tracing::debug!(
                ms = started.elapsed().as_millis() as u64,
                "interruption message handled"
            );
        }
    }
}

async fn acknowledge(queue: &dyn InterruptionQueue, receipt: &str) {
    if let Err(e) = queue.acknowledge(receipt).await {
        tracing::warn!(error = %e, "deleting an interruption message failed; it will come back");
    }
}

async fn handle(ctx: &Context, i: &Interruption) {
    count(ctx, i.kind.label());
    let claims = ctx.stores.nodeclaims.state();
    for id in &i.instance_ids {
        let suffix = format!("/{id}");
        let Some(claim) = claims.iter().find(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| p.ends_with(&suffix))
        }) else {
            tracing::info!(instance = %id, kind = i.kind.label(), "interruption message for an instance that is not ours");
            continue;
        };
        let name = claim.name_any();
        let note = match &i.kind {
            Kind::StateChange(state) => format!("instance {id} is {state}"),
            other => format!("instance {id}: {}", other.label().replace('_', " ")),
        };
        tracing::warn!(nodeclaim = %name, instance = %id, kind = i.kind.label(), "interruption");
        event(ctx, claim, &i.kind, &note).await;
        if !i.kind.node_goes(ctx.settings.interruption_act_on_rebalance) {
            continue;
        }
        if i.kind == Kind::SpotInterruption {
            // EC2 is short of this spot capacity: do not buy it again right away.
            let l = claim.labels();
            if let (Some(t), Some(z)) = (l.get(labels::INSTANCE_TYPE), l.get(labels::ZONE)) {
                ctx.cloud.offering_unavailable(t, z, CapacityType::Spot);
            }
        }
        let api: Api<NodeClaim> = Api::all(ctx.client.clone());
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::error!(nodeclaim = %name, error = %e, "deleting an interrupted NodeClaim failed")
            }
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
