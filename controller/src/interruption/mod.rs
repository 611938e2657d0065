//! Interruption handling: long-polls the queue `jointer apply` made (20 s, up to 10 messages),
//! and for a spot interruption warning, capacity-reservation interruption or EC2 scheduled
//! change deletes the node's NodeClaim at once — the lifecycle taints and drains it, and the
//! provisioner places its pods (pods on a node being deleted count as pending) on a
//! replacement while the two minutes run. A stopped or terminated instance's NodeClaim goes
//! too; a rebalance recommendation is logged and put on the NodeClaim as an Event. Every
//! message is deleted after handling, ours or not; a malformed one is logged and deleted.

pub mod message;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DeleteParams};
use kube::runtime::events::Recorder;
use kube::ResourceExt;

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::aws::AwsCloud;
use crate::runtime::metrics::{Metrics, ReasonLabels};
use crate::runtime::stores::Stores;
use crate::scheduling::CapacityType;
use message::{parse, Interruption, Kind};

pub struct Handler {
    pub sqs: aws_sdk_sqs::Client,
    pub queue: String,
    pub client: kube::Client,
    pub stores: Stores,
    pub cloud: Arc<AwsCloud>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    pub act_on_rebalance: bool,
}

impl Handler {
    fn count(&self, kind: &str) {
        self.metrics
            .interruption_messages
            .get_or_create(&ReasonLabels {
                reason: kind.to_string(),
            })
            .inc();
    }

    async fn queue_url(&self) -> String {
        loop {
            let out = self
                .sqs
                .get_queue_url()
                .queue_name(&self.queue)
                .send()
                .await;
            self.metrics.call("sqs", "GetQueueUrl", &out);
            match out {
                Ok(o) => {
                    if let Some(url) = o.queue_url() {
                        return url.to_string();
                    }
                }
                Err(e) => tracing::error!(
                    queue = %self.queue,
                    error = %aws_sdk_sqs::error::DisplayErrorContext(e),
                    "cannot find the interruption queue (INTERRUPTION_QUEUE is its name, not its URL or ARN); retrying"
                ),
            }
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
    }

    pub async fn run(self) {
        self.stores.ready().await;
        let url = self.queue_url().await;
        tracing::info!(queue = %self.queue, "watching the interruption queue");
        loop {
            let out = self
                .sqs
                .receive_message()
                .queue_url(&url)
                .wait_time_seconds(20)
                .max_number_of_messages(10)
                .send()
                .await;
            self.metrics.call("sqs", "ReceiveMessage", &out);
            let out = match out {
                Ok(o) => o,
                Err(e) => {
                    tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "receiving interruption messages failed; retrying");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    continue;
                }
            };
            for m in out.messages() {
                let started = Instant::now();
                match parse(m.body().unwrap_or_default()) {
                    Ok(Some(i)) => self.handle(&i).await,
                    Ok(None) => self.count("ignored"),
                    Err(why) => {
                        self.count("malformed");
                        tracing::warn!(reason = %why, "deleting a malformed interruption message");
                    }
                }
                if let Some(receipt) = m.receipt_handle() {
                    let deleted = self
                        .sqs
                        .delete_message()
                        .queue_url(&url)
                        .receipt_handle(receipt)
                        .send()
                        .await;
                    self.metrics.call("sqs", "DeleteMessage", &deleted);
                    if let Err(e) = deleted {
                        tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(e), "deleting an interruption message failed; it will come back");
                    }
                }
                tracing::debug!(
                    ms = started.elapsed().as_millis() as u64,
                    "interruption message handled"
                );
            }
        }
    }

    async fn handle(&self, i: &Interruption) {
        self.count(i.kind.label());
        let claims = self.stores.nodeclaims.state();
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
            self.event(claim, &i.kind, &note).await;
            if !i.kind.node_goes(self.act_on_rebalance) {
                continue;
            }
            if i.kind == Kind::SpotInterruption {
                // EC2 is short of this spot capacity: do not buy it again right away.
                let l = claim.labels();
                if let (Some(t), Some(z)) = (l.get(labels::INSTANCE_TYPE), l.get(labels::ZONE)) {
                    self.cloud
                        .unavailable
                        .mark(t, z, CapacityType::Spot, Instant::now());
                }
            }
            let api: Api<NodeClaim> = Api::all(self.client.clone());
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    tracing::error!(nodeclaim = %name, error = %e, "deleting an interrupted NodeClaim failed")
                }
            }
        }
    }

    async fn event(&self, claim: &NodeClaim, kind: &Kind, note: &str) {
        let reason = match kind {
            Kind::SpotInterruption => "SpotInterrupted",
            Kind::CapacityReservationInterruption => "CapacityReservationInterrupted",
            Kind::ScheduledChange => "InstanceScheduledChange",
            Kind::Rebalance => "RebalanceRecommendation",
            Kind::StateChange(_) => "InstanceStopping",
        };
        crate::runtime::events::publish(&self.recorder, claim, true, reason, "Interrupt", note)
            .await;
    }
}
