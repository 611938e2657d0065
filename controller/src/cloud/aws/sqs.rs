//! The interruption queue on SQS: found by name (what `jointer apply` made and the
//! Deployment's `INTERRUPTION_QUEUE` says), long-polled 20 s for up to 10 messages.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;

use super::call::metered;
use crate::cloud::{CloudError, InterruptionQueue, QueueMessage};
use crate::metrics::Metrics;

pub struct Sqs {
    client: aws_sdk_sqs::Client,
    name: String,
    url: OnceCell<String>,
    metrics: Arc<Metrics>,
}

impl Sqs {
    pub fn new(config: &aws_config::SdkConfig, name: String, metrics: Arc<Metrics>) -> Sqs {
        Sqs {
            client: aws_sdk_sqs::Client::new(config),
            name,
            url: OnceCell::new(),
            metrics,
        }
    }

    /// The queue's URL, asked for until SQS answers (the queue may be made after the
    /// controller starts).
    async fn url(&self) -> &str {
        self.url
            .get_or_init(|| async {
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
                            if let Some(url) = o.queue_url() {
                                tracing::info!(queue = %self.name, "watching the interruption queue");
                                return url.to_string();
                            }
                        }
                        Err(e) => tracing::error!(
                            queue = %self.name,
                            error = %e,
                            "cannot find the interruption queue (INTERRUPTION_QUEUE is its name, not its URL or ARN); retrying"
                        ),
                    }
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            })
            .await
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
                .queue_url(url)
                .wait_time_seconds(20)
                .max_number_of_messages(10)
                .send(),
        )
        .await?;
        Ok(out
            .messages()
            .iter()
            .map(|m| QueueMessage {
                body: m.body().unwrap_or_default().to_string(),
                receipt: m.receipt_handle().unwrap_or_default().to_string(),
            })
            .collect())
    }

    async fn acknowledge(&self, receipt: &str) -> Result<(), CloudError> {
        if receipt.is_empty() {
            return Ok(());
        }
        let url = self.url().await;
        metered(
            &self.metrics,
            "sqs",
            "DeleteMessage",
            self.client
                .delete_message()
                .queue_url(url)
                .receipt_handle(receipt)
                .send(),
        )
        .await?;
        Ok(())
    }
}
