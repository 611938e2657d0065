//! The interruption queue on SQS: found by name (what `jointer apply` made and the
//! Deployment's `INTERRUPTION_QUEUE` says), long-polled 20 s for up to 10 messages. A queue
//! deleted under the running controller is looked up again until it is back.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use tokio::sync::Mutex;

use super::call::{codes, metered};
use crate::cloud::{CloudError, InterruptionQueue, QueueMessage};
use crate::metrics::Metrics;

pub struct Sqs {
    client: aws_sdk_sqs::Client,
    name: String,
    /// Looked up once, and again after SQS says the queue is gone.
    url: Mutex<Option<String>>,
    metrics: Arc<Metrics>,
}

impl Sqs {
    pub fn new(config: &aws_config::SdkConfig, name: String, metrics: Arc<Metrics>) -> Sqs {
        Sqs {
            client: aws_sdk_sqs::Client::new(config),
            name,
            url: Mutex::new(None),
            metrics,
        }
    }

    /// The queue's URL, asked for until SQS answers, every 2 s backing off to 30 s (the queue
    /// may be made after the controller starts, or again after it was deleted).
    async fn url(&self) -> String {
        let mut url = self.url.lock().await;
        if let Some(known) = url.as_ref() {
            return known.clone();
        }
        let mut pause = Duration::from_secs(2);
        loop {
            let out = metered(
                &self.metrics,
                "sqs",
                "GetQueueUrl",
                self.client.get_queue_url().queue_name(&self.name).send(),
            )
            .await;
            match out {
                Ok(o) => {
                    if let Some(found) = o.queue_url() {
                        tracing::info!(queue = %self.name, "watching the interruption queue");
                        *url = Some(found.to_string());
                        return found.to_string();
                    }
                }
                Err(e) => tracing::error!(
                    queue = %self.name,
                    error = %e,
                    retry_in_s = pause.as_secs(),
                    "cannot find the interruption queue (INTERRUPTION_QUEUE is its name, not its URL or ARN; `jointer apply` makes it)"
                ),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(30));
        }
    }

    /// Forgets the URL when SQS says its queue is gone, so the next call looks it up again.
    async fn forget_if_gone(&self, error: &CloudError) {
        if error.is(codes::QUEUE_MISSING) {
            tracing::error!(queue = %self.name, error = %error, "the interruption queue is gone; looking it up again");
            *self.url.lock().await = None;
        }
    }
}

#[async_trait::async_trait]
impl InterruptionQueue for Sqs {
    async fn receive(&self) -> Result<Vec<QueueMessage>, CloudError> {
        let url = self.url().await;
        let out = metered(
            &self.metrics,
            "sqs",
            "ReceiveMessage",
            self.client
                .receive_message()
                .queue_url(&url)
                .wait_time_seconds(20)
                .max_number_of_messages(10)
                .send(),
        )
        .await;
        if let Err(e) = &out {
            self.forget_if_gone(e).await;
        }
        let out = out?;
        Ok(out
            .messages()
            .iter()
            .map(|m| QueueMessage {
                body: m.body().unwrap_or_default().to_string(),
                receipt: m.receipt_handle().unwrap_or_default().to_string(),
            })
            .collect())
    }

    /// One DeleteMessageBatch per ten messages (authorised by `sqs:DeleteMessage`).
    async fn acknowledge(&self, receipts: &[String]) -> Result<(), CloudError> {
        let url = self.url().await;
        let receipts: Vec<&String> = receipts.iter().filter(|r| !r.is_empty()).collect();
        for batch in receipts.chunks(10) {
            let entries = batch
                .iter()
                .enumerate()
                .map(|(i, receipt)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(receipt.as_str())
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| CloudError::Api {
                    service: "sqs",
                    operation: "DeleteMessageBatch",
                    code: "request".into(),
                    message: e.to_string(),
                })?;
            let out = metered(
                &self.metrics,
                "sqs",
                "DeleteMessageBatch",
                self.client
                    .delete_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send(),
            )
            .await;
            if let Err(e) = &out {
                self.forget_if_gone(e).await;
            }
            for failed in out?.failed() {
                tracing::warn!(
                    code = failed.code(),
                    message = failed.message().unwrap_or_default(),
                    "an interruption message was not deleted; it will come back"
                );
            }
        }
        Ok(())
    }
}
