//! The SQS and EventBridge calls behind the interruption step: reading the queue and the
//! rules as AWS holds them, and making the changes the diff decided on.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use jointer_controller::cloud::aws::call::codes;
use serde_json::Value;

use super::{Action, Queue, Rule, QUEUE_DELETED_RECENTLY_WAIT, TARGET_ID};
use crate::bootstrap::aws::clients::{code, failed, gone_ok};
use crate::bootstrap::Context;

pub(super) async fn get_queue(ctx: &Context, name: &str) -> Result<Option<Queue>> {
    let sqs = &ctx.aws.sqs;
    let url = match sqs.get_queue_url().queue_name(name).send().await {
        Ok(out) => out.queue_url.unwrap_or_default(),
        Err(e) if is_missing_queue(code(&e)) => return Ok(None),
        Err(e) => return Err(failed(&format!("sqs:GetQueueUrl {name}"), e)),
    };
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| failed(&format!("sqs:GetQueueAttributes {name}"), e))?
        .attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.as_str().to_string(), v))
        .collect();
    let tags = sqs
        .list_queue_tags()
        .queue_url(&url)
        .send()
        .await
        .map_err(|e| failed(&format!("sqs:ListQueueTags {name}"), e))?
        .tags
        .unwrap_or_default()
        .into_iter()
        .collect();
    Ok(Some(Queue {
        url,
        attributes,
        tags,
    }))
}

fn is_missing_queue(code: Option<&str>) -> bool {
    code.is_some_and(|c| codes::QUEUE_MISSING.contains(&c))
}

pub(super) async fn get_rule(ctx: &Context, name: &str) -> Result<Option<Rule>> {
    let events = &ctx.aws.events;
    let rule = match events.describe_rule().name(name).send().await {
        Ok(out) => out,
        Err(e) if code(&e) == Some("ResourceNotFoundException") => return Ok(None),
        Err(e) => return Err(failed(&format!("events:DescribeRule {name}"), e)),
    };
    let arn = rule.arn.clone().unwrap_or_default();
    let tags = events
        .list_tags_for_resource()
        .resource_arn(&arn)
        .send()
        .await
        .map_err(|e| failed(&format!("events:ListTagsForResource {name}"), e))?
        .tags
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value))
        .collect();
    let targets = events
        .list_targets_by_rule()
        .rule(name)
        .send()
        .await
        .map_err(|e| failed(&format!("events:ListTargetsByRule {name}"), e))?
        .targets
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.id, t.arn))
        .collect();
    Ok(Some(Rule {
        name: name.to_string(),
        arn,
        pattern: rule
            .event_pattern
            .as_deref()
            .and_then(|p| serde_json::from_str(p).ok())
            .unwrap_or(Value::Null),
        enabled: rule.state.as_ref().is_some_and(|s| s.as_str() == "ENABLED"),
        tags,
        targets,
    }))
}

fn event_tags(tags: &BTreeMap<String, String>) -> Result<Vec<aws_sdk_eventbridge::types::Tag>> {
    tags.iter()
        .map(|(k, v)| {
            aws_sdk_eventbridge::types::Tag::builder()
                .key(k)
                .value(v)
                .build()
                .map_err(anyhow::Error::from)
        })
        .collect()
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    let sqs = &ctx.aws.sqs;
    let events = &ctx.aws.events;
    match action {
        Action::CreateQueue {
            name,
            attributes,
            tags,
        } => create_queue(ctx, name, attributes, tags).await?,
        Action::TagQueue { url, tags } => {
            sqs.tag_queue()
                .queue_url(url)
                .set_tags(Some(tags.clone().into_iter().collect()))
                .send()
                .await
                .map_err(|e| failed(&format!("sqs:TagQueue {url}"), e))?;
        }
        Action::SetQueueAttribute { url, name, value } => {
            sqs.set_queue_attributes()
                .queue_url(url)
                .attributes(name.as_str().into(), value)
                .send()
                .await
                .map_err(|e| failed(&format!("sqs:SetQueueAttributes {name} on {url}"), e))?;
        }
        Action::DeleteQueue { url } => gone_ok(
            sqs.delete_queue().queue_url(url).send().await,
            codes::QUEUE_MISSING,
            &format!("sqs:DeleteQueue {url}"),
        )?,
        Action::PutRule {
            name,
            pattern,
            tags,
        } => {
            events
                .put_rule()
                .name(name)
                .event_pattern(pattern)
                .state(aws_sdk_eventbridge::types::RuleState::Enabled)
                .description(format!(
                    "Node interruption events for EKS cluster {} (jointer)",
                    ctx.cluster.name
                ))
                .set_tags((!tags.is_empty()).then(|| event_tags(tags)).transpose()?)
                .send()
                .await
                .map_err(|e| failed(&format!("events:PutRule {name}"), e))?;
        }
        Action::TagRule { arn, tags } => {
            events
                .tag_resource()
                .resource_arn(arn)
                .set_tags(Some(event_tags(tags)?))
                .send()
                .await
                .map_err(|e| failed(&format!("events:TagResource {arn}"), e))?;
        }
        Action::EnableRule { name } => {
            events
                .enable_rule()
                .name(name)
                .send()
                .await
                .map_err(|e| failed(&format!("events:EnableRule {name}"), e))?;
        }
        Action::PutTarget { rule, queue_arn } => {
            let target = aws_sdk_eventbridge::types::Target::builder()
                .id(TARGET_ID)
                .arn(queue_arn)
                .build()?;
            let out = events
                .put_targets()
                .rule(rule)
                .targets(target)
                .send()
                .await
                .map_err(|e| failed(&format!("events:PutTargets {rule}"), e))?;
            if out.failed_entry_count() > 0 {
                bail!(
                    "events:PutTargets {rule}: {:?}",
                    out.failed_entries().first().and_then(|f| f.error_message())
                );
            }
        }
        Action::RemoveTargets { rule, ids } => {
            events
                .remove_targets()
                .rule(rule)
                .set_ids(Some(ids.clone()))
                .send()
                .await
                .map_err(|e| failed(&format!("events:RemoveTargets {rule}"), e))?;
        }
        Action::DeleteRule { name } => gone_ok(
            events.delete_rule().name(name).send().await,
            &["ResourceNotFoundException"],
            &format!("events:DeleteRule {name}"),
        )?,
    }
    Ok(())
}

/// CreateQueue, waiting out SQS's 60-second ban on a name that was just deleted.
async fn create_queue(
    ctx: &Context,
    name: &str,
    attributes: &BTreeMap<String, String>,
    tags: &BTreeMap<String, String>,
) -> Result<()> {
    let started = Instant::now();
    loop {
        let result = ctx
            .aws
            .sqs
            .create_queue()
            .queue_name(name)
            .set_attributes(Some(
                attributes
                    .iter()
                    .map(|(k, v)| (k.as_str().into(), v.clone()))
                    .collect(),
            ))
            .set_tags(Some(tags.clone().into_iter().collect()))
            .send()
            .await;
        match result {
            Ok(_) => return Ok(()),
            Err(e)
                if code(&e) == Some("AWS.SimpleQueueService.QueueDeletedRecently")
                    && started.elapsed() < QUEUE_DELETED_RECENTLY_WAIT =>
            {
                ctx.progress.note(&format!(
                    "  waiting for SQS to release the name {name} (deleted less than 60 s ago): {} s so far",
                    started.elapsed().as_secs()
                ));
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Err(e) => return Err(failed(&format!("sqs:CreateQueue {name}"), e)),
        }
    }
}
