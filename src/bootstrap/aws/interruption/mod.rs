//! The interruption queue and the five EventBridge rules that feed it: spot interruption
//! warnings, rebalance recommendations, instance state changes, scheduled health events and
//! capacity-reservation interruptions reach the controller in time to drain the node.

mod calls;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use serde_json::{json, Value};

use super::iam::{adopt_or_refuse, owned};
use super::ownership::Ownership;
use super::policy::{self, Document, Statement};
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
pub use calls::execute;
use calls::{get_queue, get_rule};

/// The five rules: (name suffix, event source, detail-type).
pub const RULES: [(&str, &str, &str); 5] = [
    ("Health", "aws.health", "AWS Health Event"),
    ("Spot", "aws.ec2", "EC2 Spot Instance Interruption Warning"),
    (
        "Rebalance",
        "aws.ec2",
        "EC2 Instance Rebalance Recommendation",
    ),
    (
        "StateChange",
        "aws.ec2",
        "EC2 Instance State-change Notification",
    ),
    (
        "CapacityReservation",
        "aws.ec2",
        "EC2 Capacity Reservation Instance Interruption Warning",
    ),
];

const TARGET_ID: &str = "InterruptionQueue";
/// Interruption warnings are useless after two minutes; five keeps the queue short.
const RETENTION_SECONDS: &str = "300";
/// SQS refuses to re-create a name for 60 s after deleting it.
const QUEUE_DELETED_RECENTLY_WAIT: Duration = Duration::from_secs(70);

#[derive(Debug, Clone)]
pub enum Action {
    CreateQueue {
        name: String,
        attributes: BTreeMap<String, String>,
        tags: BTreeMap<String, String>,
    },
    TagQueue {
        url: String,
        tags: BTreeMap<String, String>,
    },
    SetQueueAttribute {
        url: String,
        name: String,
        value: String,
    },
    DeleteQueue {
        url: String,
    },
    /// PutRule: creates the rule, or sets its pattern.
    PutRule {
        name: String,
        pattern: String,
        tags: BTreeMap<String, String>,
    },
    TagRule {
        arn: String,
        tags: BTreeMap<String, String>,
    },
    EnableRule {
        name: String,
    },
    PutTarget {
        rule: String,
        queue_arn: String,
    },
    RemoveTargets {
        rule: String,
        ids: Vec<String>,
    },
    DeleteRule {
        name: String,
    },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::Interruption(a)
    }
}

/// The queue as SQS holds it.
#[derive(Debug, Clone)]
pub struct Queue {
    pub url: String,
    pub attributes: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
}

/// A rule as EventBridge holds it.
#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    pub arn: String,
    pub pattern: Value,
    pub enabled: bool,
    pub tags: BTreeMap<String, String>,
    /// target id → ARN
    pub targets: BTreeMap<String, String>,
}

pub fn event_pattern(source: &str, detail_type: &str) -> Value {
    json!({ "source": [source], "detail-type": [detail_type] })
}

/// Allow EventBridge (and SQS itself) to send; refuse anything over plain HTTP.
pub fn queue_policy(queue_arn: &str) -> Document {
    Document::new(vec![
        Statement::allow(
            "AllowEventBridgeToSend",
            &["sqs:SendMessage"],
            vec![queue_arn.to_string()],
        )
        .principal(json!({ "Service": ["events.amazonaws.com", "sqs.amazonaws.com"] })),
        Statement::deny(
            "DenyInsecureTransport",
            &["sqs:*"],
            vec![queue_arn.to_string()],
        )
        .principal(json!("*"))
        .when("Bool", "aws:SecureTransport", &["false"]),
    ])
}

/// The queue attributes jointer sets.
pub fn queue_attributes(kms_key_id: Option<&String>, queue_arn: &str) -> BTreeMap<String, String> {
    let mut attributes = BTreeMap::from([
        (
            "MessageRetentionPeriod".to_string(),
            RETENTION_SECONDS.to_string(),
        ),
        ("Policy".to_string(), queue_policy(queue_arn).to_json()),
    ]);
    match kms_key_id {
        Some(key) => {
            attributes.insert("KmsMasterKeyId".into(), key.clone());
        }
        None => {
            attributes.insert("SqsManagedSseEnabled".into(), "true".into());
        }
    }
    attributes
}

/// What the config wants: the queue with its attributes, and the five rules.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// Interruption handling is on; when off, what jointer made for it goes.
    pub enabled: bool,
    pub queue_name: String,
    pub queue_arn: String,
    pub attributes: BTreeMap<String, String>,
    /// The queue is encrypted with a customer KMS key rather than SQS's own.
    pub customer_key: bool,
    /// Each rule's name and event pattern, in `RULES` order.
    pub rules: Vec<(String, Value)>,
}

fn wanted(ctx: &Context) -> Wanted {
    let queue_arn = ctx.scope().queue_arn(&ctx.names.queue);
    Wanted {
        enabled: ctx.config.interruption.enabled,
        queue_name: ctx.names.queue.clone(),
        attributes: queue_attributes(ctx.config.interruption.kms_key_id.as_ref(), &queue_arn),
        queue_arn,
        customer_key: ctx.config.interruption.kms_key_id.is_some(),
        rules: RULES
            .iter()
            .map(|(kind, source, detail_type)| {
                (ctx.names.rule(kind), event_pattern(source, detail_type))
            })
            .collect(),
    }
}

/// The queue and the rules as AWS holds them (`None`: not there), rules in `RULES` order.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub queue: Option<Queue>,
    pub rules: Vec<Option<Rule>>,
}

async fn observe(ctx: &Context, wanted: &Wanted) -> Result<Observed> {
    let queue = get_queue(ctx, &wanted.queue_name).await?;
    let mut rules = Vec::new();
    for (name, _) in &wanted.rules {
        rules.push(get_rule(ctx, name).await?);
    }
    Ok(Observed { queue, rules })
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let wanted = wanted(ctx);
    let observed = observe(ctx, &wanted).await?;
    diff(&wanted, &observed, &ctx.ownership, goal)
}

/// The pure diff: what to create, correct or remove; an error for a queue or rule with
/// jointer's name that jointer does not own (unless adopting).
pub fn diff(
    wanted: &Wanted,
    observed: &Observed,
    ours: &Ownership,
    goal: Goal,
) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::Interruption);
    let goal = if wanted.enabled { goal } else { Goal::Remove };
    let queue_name = &wanted.queue_name;
    let queue_arn = &wanted.queue_arn;
    let queue = &observed.queue;
    let rules = &observed.rules;
    let queue_resource = format!("sqs queue {queue_name}");
    match goal {
        Goal::Converge => {
            if wanted.customer_key {
                plan.warnings.push(format!(
                    "{queue_resource} is encrypted with a customer KMS key: its key policy must let events.amazonaws.com use kms:GenerateDataKey and kms:Decrypt, or no event arrives"
                ));
            }
            let attributes = &wanted.attributes;
            match queue {
                None => plan.changes.push(
                    Change::new(
                        Op::Create,
                        &queue_resource,
                        Action::CreateQueue {
                            name: queue_name.clone(),
                            attributes: attributes.clone(),
                            tags: ours.tags(),
                        },
                    )
                    .detail("retention 300 s, encrypted, EventBridge may send"),
                ),
                Some(q) => {
                    adopt_or_refuse(
                        ours,
                        &queue_resource,
                        &q.tags,
                        "set interruption.queueName to another name",
                        &mut plan.changes,
                        || {
                            Action::TagQueue {
                                url: q.url.clone(),
                                tags: ours.tags(),
                            }
                            .into()
                        },
                    )?;
                    for (name, want) in attributes {
                        if let Some(detail) =
                            attribute_difference(name, q.attributes.get(name), want)
                        {
                            plan.changes.push(
                                Change::new(
                                    Op::Update,
                                    &queue_resource,
                                    Action::SetQueueAttribute {
                                        url: q.url.clone(),
                                        name: name.clone(),
                                        value: want.clone(),
                                    },
                                )
                                .field(name.clone())
                                .detail(detail),
                            );
                        }
                    }
                }
            }
            for (i, (name, pattern)) in wanted.rules.iter().enumerate() {
                let rule = rules.get(i).and_then(Option::as_ref);
                converge_rule(ours, name, pattern, queue_arn, rule, &mut plan.changes)?;
            }
        }
        Goal::Remove => removal(observed, ours, &queue_resource, &mut plan),
    }
    Ok(plan)
}

/// What goes on teardown (or with interruption handling off): the rules jointer owns,
/// their targets first, then its queue.
fn removal(observed: &Observed, ours: &Ownership, queue_resource: &str, plan: &mut StepPlan) {
    for rule in observed
        .rules
        .iter()
        .flatten()
        .filter(|r| owned(ours, &r.tags))
    {
        let resource = format!("eventbridge rule {}", rule.name);
        if !rule.targets.is_empty() {
            plan.changes.push(
                Change::new(
                    Op::Delete,
                    &resource,
                    Action::RemoveTargets {
                        rule: rule.name.clone(),
                        ids: rule.targets.keys().cloned().collect(),
                    },
                )
                .field("targets"),
            );
        }
        plan.changes.push(Change::new(
            Op::Delete,
            &resource,
            Action::DeleteRule {
                name: rule.name.clone(),
            },
        ));
    }
    if let Some(q) = observed.queue.as_ref().filter(|q| owned(ours, &q.tags)) {
        plan.changes.push(Change::new(
            Op::Delete,
            queue_resource,
            Action::DeleteQueue { url: q.url.clone() },
        ));
    }
}

/// How an attribute differs, if it does; the policy by statement.
fn attribute_difference(name: &str, have: Option<&String>, want: &str) -> Option<String> {
    if name == "Policy" {
        let want: Value = serde_json::from_str(want).ok()?;
        let have = have
            .and_then(|h| serde_json::from_str::<Value>(h).ok())
            .unwrap_or(Value::Null);
        return policy::difference(&have, &want);
    }
    match have {
        Some(h) if h == want => None,
        Some(h) => Some(format!("{h} → {want}")),
        None => Some(format!("unset → {want}")),
    }
}

fn converge_rule(
    ours: &Ownership,
    name: &str,
    pattern: &Value,
    queue_arn: &str,
    observed: Option<&Rule>,
    changes: &mut Vec<Change>,
) -> Result<()> {
    let resource = format!("eventbridge rule {name}");
    let put_target = || Action::PutTarget {
        rule: name.to_string(),
        queue_arn: queue_arn.to_string(),
    };
    let Some(rule) = observed else {
        changes.push(
            Change::new(
                Op::Create,
                &resource,
                Action::PutRule {
                    name: name.to_string(),
                    pattern: pattern.to_string(),
                    tags: ours.tags(),
                },
            )
            .detail(pattern.to_string()),
        );
        changes.push(
            Change::new(Op::Create, &resource, put_target())
                .field("target")
                .detail(queue_arn.to_string()),
        );
        return Ok(());
    };
    adopt_or_refuse(
        ours,
        &resource,
        &rule.tags,
        "delete or rename that rule",
        changes,
        || {
            Action::TagRule {
                arn: rule.arn.clone(),
                tags: ours.tags(),
            }
            .into()
        },
    )?;
    if &rule.pattern != pattern {
        changes.push(
            Change::new(
                Op::Update,
                &resource,
                Action::PutRule {
                    name: name.to_string(),
                    pattern: pattern.to_string(),
                    tags: BTreeMap::new(),
                },
            )
            .field("event pattern")
            .detail(format!("{} → {pattern}", rule.pattern)),
        );
    }
    if !rule.enabled {
        changes.push(
            Change::new(
                Op::Update,
                &resource,
                Action::EnableRule {
                    name: name.to_string(),
                },
            )
            .field("state")
            .detail("DISABLED → ENABLED"),
        );
    }
    match rule.targets.get(TARGET_ID) {
        Some(arn) if arn == queue_arn => {}
        other => changes.push(
            Change::new(Op::Update, &resource, put_target())
                .field("target")
                .detail(format!(
                    "{} → {queue_arn}",
                    other.map_or("none", String::as_str)
                )),
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ours(adopt: bool) -> Ownership {
        Ownership {
            cluster: "demo".into(),
            adopt,
        }
    }

    fn wanted() -> Wanted {
        let queue_arn = "arn:aws:sqs:us-east-1:1:demo".to_string();
        Wanted {
            enabled: true,
            queue_name: "demo".into(),
            attributes: queue_attributes(None, &queue_arn),
            queue_arn,
            customer_key: false,
            rules: RULES
                .iter()
                .map(|(kind, source, detail_type)| {
                    (format!("demo-{kind}"), event_pattern(source, detail_type))
                })
                .collect(),
        }
    }

    /// The world as the last apply left it.
    fn in_sync(w: &Wanted) -> Observed {
        Observed {
            queue: Some(Queue {
                url: "https://sqs/demo".into(),
                attributes: w.attributes.clone(),
                tags: ours(false).tags(),
            }),
            rules: w
                .rules
                .iter()
                .map(|(name, pattern)| {
                    Some(Rule {
                        name: name.clone(),
                        arn: format!("arn:aws:events:us-east-1:1:rule/{name}"),
                        pattern: pattern.clone(),
                        enabled: true,
                        tags: ours(false).tags(),
                        targets: BTreeMap::from([(TARGET_ID.to_string(), w.queue_arn.clone())]),
                    })
                })
                .collect(),
        }
    }

    fn lines(plan: &StepPlan) -> Vec<String> {
        plan.changes.iter().map(Change::to_string).collect()
    }

    #[test]
    fn in_sync_means_no_change() {
        let w = wanted();
        let plan = diff(&w, &in_sync(&w), &ours(false), Goal::Converge).unwrap();
        assert!(plan.changes.is_empty(), "{:?}", lines(&plan));
    }

    #[test]
    fn a_missing_queue_and_rules_are_created() {
        let w = wanted();
        let plan = diff(&w, &Observed::default(), &ours(false), Goal::Converge).unwrap();
        assert!(plan.changes.iter().all(|c| c.op == Op::Create));
        // The queue, then each rule and its target.
        assert_eq!(plan.changes.len(), 1 + 2 * RULES.len());
        assert!(matches!(
            &plan.changes[0].action,
            crate::bootstrap::Action::Interruption(Action::CreateQueue { tags, .. })
                if tags == &ours(false).tags()
        ));
    }

    #[test]
    fn a_changed_attribute_pattern_state_or_target_is_updated_by_name() {
        let w = wanted();
        let mut world = in_sync(&w);
        let queue = world.queue.as_mut().unwrap();
        queue
            .attributes
            .insert("MessageRetentionPeriod".into(), "600".into());
        let spot = world.rules[1].as_mut().unwrap();
        spot.enabled = false;
        spot.pattern = event_pattern("aws.ec2", "something else");
        spot.targets.clear();
        let plan = diff(&w, &world, &ours(false), Goal::Converge).unwrap();
        assert_eq!(
            lines(&plan),
            vec![
                "~ sqs queue demo  MessageRetentionPeriod: 600 → 300".to_string(),
                format!(
                    "~ eventbridge rule demo-Spot  event pattern: {} → {}",
                    event_pattern("aws.ec2", "something else"),
                    w.rules[1].1
                ),
                "~ eventbridge rule demo-Spot  state: DISABLED → ENABLED".to_string(),
                "~ eventbridge rule demo-Spot  target: none → arn:aws:sqs:us-east-1:1:demo"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn a_queue_jointer_does_not_own_is_an_error_unless_adopted() {
        let w = wanted();
        let mut world = in_sync(&w);
        world.queue.as_mut().unwrap().tags.clear();
        let err = diff(&w, &world, &ours(false), Goal::Converge).unwrap_err();
        assert!(
            err.to_string()
                .contains("sqs queue demo already exists and jointer does not own it"),
            "{err}"
        );
        let plan = diff(&w, &world, &ours(true), Goal::Converge).unwrap();
        assert_eq!(
            lines(&plan),
            vec!["~ sqs queue demo  ownership tags: adopted (--adopt)"]
        );
    }

    #[test]
    fn switched_off_or_torn_down_only_what_jointer_owns_goes() {
        let mut w = wanted();
        w.enabled = false;
        let mut world = in_sync(&w);
        world.rules[0].as_mut().unwrap().tags.clear();
        let plan = diff(&w, &world, &ours(false), Goal::Converge).unwrap();
        assert!(plan.changes.iter().all(|c| c.op == Op::Delete));
        // Four owned rules (targets, then the rule) and the queue; the foreign rule stays.
        assert_eq!(plan.changes.len(), 4 * 2 + 1);
        assert!(!lines(&plan).iter().any(|l| l.contains("demo-Health")));
    }

    #[test]
    fn the_five_patterns_are_exact() {
        let patterns: Vec<String> = RULES
            .iter()
            .map(|(_, s, d)| event_pattern(s, d).to_string())
            .collect();
        assert!(patterns.contains(
            &r#"{"detail-type":["EC2 Spot Instance Interruption Warning"],"source":["aws.ec2"]}"#
                .to_string()
        ));
        assert!(patterns.contains(
            &r#"{"detail-type":["AWS Health Event"],"source":["aws.health"]}"#.to_string()
        ));
        assert_eq!(patterns.len(), 5);
    }

    #[test]
    fn the_queue_policy_allows_eventbridge_and_denies_plain_http() {
        let doc = queue_policy("arn:aws:sqs:us-east-1:1:demo").to_value();
        let allow = &doc["Statement"][0];
        assert_eq!(allow["Action"], "sqs:SendMessage");
        assert_eq!(
            allow["Principal"]["Service"],
            json!(["events.amazonaws.com", "sqs.amazonaws.com"])
        );
        let deny = &doc["Statement"][1];
        assert_eq!(deny["Effect"], "Deny");
        assert_eq!(deny["Condition"]["Bool"]["aws:SecureTransport"], "false");
        assert_eq!(
            attribute_difference("MessageRetentionPeriod", Some(&"345600".into()), "300")
                .as_deref(),
            Some("345600 → 300")
        );
    }
}
