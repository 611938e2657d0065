//! The EventBridge events the interruption queue receives (pure): which instances they are
//! about, what they mean for their nodes, and which messages are refused — too big to be an
//! event, malformed, redelivered, stale or about instances that are not this cluster's.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// EventBridge caps an event at 256 KB (PutEvents' entry limit): a bigger body is not one of
/// its events, and is refused before it is parsed.
pub const MAX_EVENT_BYTES: usize = 256 * 1024;

/// How much earlier than its instance's NodeClaim an event may be stamped: EventBridge stamps
/// with AWS's clock, the API server its own; the two agree to well within this.
pub const CLOCK_SKEW: Duration = Duration::from_secs(60);
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Two minutes' notice before EC2 reclaims a spot instance.
    SpotInterruption,
    /// A capacity reservation is taking its capacity back.
    CapacityReservationInterruption,
    /// An AWS Health scheduled change (maintenance, retirement) for EC2.
    ScheduledChange,
    /// EC2 suggests moving off a spot instance at elevated risk.
    Rebalance,
    /// The instance is stopping, stopped, shutting down or terminated.
    StateChange(String),
}

impl Kind {
    pub fn label(&self) -> &'static str {
        match self {
            Kind::SpotInterruption => "spot_interruption",
            Kind::CapacityReservationInterruption => "capacity_reservation_interruption",
            Kind::ScheduledChange => "scheduled_change",
            Kind::Rebalance => "rebalance",
            Kind::StateChange(_) => "state_change",
        }
    }

    /// Whether the node must go: replaced before EC2 takes it, or already gone. A rebalance
    /// recommendation only when the controller is set to act on it.
    pub fn node_goes(&self, act_on_rebalance: bool) -> bool {
        act_on_rebalance || !matches!(self, Kind::Rebalance)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interruption {
    pub kind: Kind,
    pub instance_ids: Vec<String>,
}

/// One event off the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// EventBridge's event id: SQS delivers at least once, and a redelivery carries the same id.
    pub id: Option<String>,
    /// When AWS says it happened.
    pub time: Option<Timestamp>,
    pub interruption: Interruption,
}

/// Why a message is dropped without looking at any node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Oversized(usize),
    Malformed(String),
}

impl Refusal {
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Oversized(_) => "oversized",
            Refusal::Malformed(_) => "malformed",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Oversized(bytes) => write!(
                f,
                "{bytes} bytes, more than an EventBridge event can be ({MAX_EVENT_BYTES})"
            ),
            Refusal::Malformed(why) => f.write_str(why),
        }
    }
}

/// The source EventBridge gives each detail-type jointer's rules forward (a message that says
/// otherwise was not put there by those rules).
fn expected_source(detail_type: &str) -> Option<&'static str> {
    match detail_type {
        "AWS Health Event" => Some("aws.health"),
        "EC2 Spot Instance Interruption Warning"
        | "EC2 Capacity Reservation Instance Interruption Warning"
        | "EC2 Instance Rebalance Recommendation"
        | "EC2 Instance State-change Notification" => Some("aws.ec2"),
        _ => None,
    }
}

/// An EC2 instance id: `i-` and 8 or 17 hexadecimal digits.
fn is_instance_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|hex| {
        matches!(hex.len(), 8 | 17) && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// The event a message body carries; `Ok(None)` for events that need nothing (other services'
/// health events, a `running` state change, unknown types).
pub fn parse(body: &str) -> Result<Option<Event>, Refusal> {
    if body.len() > MAX_EVENT_BYTES {
        return Err(Refusal::Oversized(body.len()));
    }
    let malformed = |why: String| Refusal::Malformed(why);
    let event: Value =
        serde_json::from_str(body).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let detail_type = event["detail-type"]
        .as_str()
        .ok_or_else(|| malformed("no detail-type: not an EventBridge event".into()))?;
    let Some(source) = expected_source(detail_type) else {
        return Ok(None);
    };
    if event["source"] != source {
        return Err(malformed(format!(
            "{detail_type} from source {}, not {source}",
            event["source"]
        )));
    }
    let time = match &event["time"] {
        Value::Null => None,
        Value::String(t) => Some(t.parse::<Timestamp>().map_err(|e| {
            malformed(format!(
                "{detail_type} with time {t:?}, not an RFC 3339 time: {e}"
            ))
        })?),
        other => return Err(malformed(format!("{detail_type} with time {other}"))),
    };
    let detail = &event["detail"];
    let instance = |kind: Kind| -> Result<Option<Interruption>, Refusal> {
        let id = detail["instance-id"]
            .as_str()
            .ok_or_else(|| malformed(format!("{detail_type} without detail.instance-id")))?;
        if !is_instance_id(id) {
            return Err(malformed(format!(
                "{detail_type} for {id:?}, not an EC2 instance id (i- and 8 or 17 hex digits)"
            )));
        }
        Ok(Some(Interruption {
            kind,
            instance_ids: vec![id.to_string()],
        }))
    };
    let interruption = match detail_type {
        "EC2 Spot Instance Interruption Warning" => instance(Kind::SpotInterruption)?,
        "EC2 Capacity Reservation Instance Interruption Warning" => {
            instance(Kind::CapacityReservationInterruption)?
        }
        "EC2 Instance Rebalance Recommendation" => instance(Kind::Rebalance)?,
        "EC2 Instance State-change Notification" => {
            let state = detail["state"].as_str().unwrap_or_default();
            if matches!(
                state,
                "stopping" | "stopped" | "shutting-down" | "terminated"
            ) {
                instance(Kind::StateChange(state.to_string()))?
            } else {
                None
            }
        }
        _ => {
            // AWS Health: only EC2's scheduled changes concern nodes.
            if detail["service"] != "EC2" || detail["eventTypeCategory"] != "scheduledChange" {
                return Ok(None);
            }
            let ids: Vec<String> = detail["affectedEntities"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["entityValue"].as_str())
                .filter(|v| is_instance_id(v))
                .map(str::to_string)
                .collect();
            (!ids.is_empty()).then_some(Interruption {
                kind: Kind::ScheduledChange,
                instance_ids: ids,
            })
        }
    };
    Ok(interruption.map(|interruption| Event {
        id: event["id"].as_str().map(str::to_string),
        time,
        interruption,
    }))
}

/// The ids of the events handled last, so a redelivered or duplicated event is handled once.
/// Bounded: past `capacity` the oldest id is forgotten (a duplicate that late still finds its
/// NodeClaim already going).
pub struct Seen {
    order: VecDeque<String>,
    ids: HashSet<String>,
    capacity: usize,
}

impl Seen {
    pub fn new(capacity: usize) -> Seen {
        Seen {
            order: VecDeque::new(),
            ids: HashSet::new(),
            capacity,
        }
    }

    /// Whether `id` is new; remembers it.
    pub fn first_time(&mut self, id: &str) -> bool {
        if !self.ids.insert(id.to_string()) {
            return false;
        }
        self.order.push_back(id.to_string());
        if self.order.len() > self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.ids.remove(&oldest);
            }
        }
        true
    }
}

/// What the controller knows of the NodeClaim whose instance an event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimView {
    pub created: Option<Timestamp>,
    /// Deleted already (by an earlier message, disruption or a person).
    pub going: bool,
}

/// What an event means for one instance, least to most consequential.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// No NodeClaim of this cluster has that instance (another cluster's, or long gone).
    NotOurs,
    /// Stamped before the NodeClaim existed, so it cannot be about its instance.
    Stale,
    /// The NodeClaim is being deleted already: handled once, not twice.
    AlreadyGoing,
    Act,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::NotOurs => "not_ours",
            Verdict::Stale => "stale",
            Verdict::AlreadyGoing => "already_going",
            Verdict::Act => "acted",
        }
    }
}

/// Whether to act on an event stamped `time` for the instance of `claim`.
pub fn judge(time: Option<Timestamp>, claim: Option<ClaimView>) -> Verdict {
    let Some(claim) = claim else {
        return Verdict::NotOurs;
    };
    let before_the_claim = match (time, claim.created) {
        (Some(t), Some(created)) => created
            .checked_sub(CLOCK_SKEW)
            .is_ok_and(|earliest| t < earliest),
        _ => false,
    };
    if before_the_claim {
        Verdict::Stale
    } else if claim.going {
        Verdict::AlreadyGoing
    } else {
        Verdict::Act
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interruption(body: &str) -> Interruption {
        parse(body)
            .expect("parses")
            .expect("an interruption")
            .interruption
    }

    #[test]
    fn spot_warnings_and_terminal_state_changes_name_their_instance() {
        let spot = r#"{"id":"e1","time":"2026-12-03T10:00:00Z","source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-0123456789abcdef0","instance-action":"terminate"}}"#;
        let event = parse(spot).unwrap().unwrap();
        assert_eq!(event.id.as_deref(), Some("e1"));
        assert_eq!(event.time, Some("2026-12-03T10:00:00Z".parse().unwrap()));
        assert_eq!(
            event.interruption,
            Interruption {
                kind: Kind::SpotInterruption,
                instance_ids: vec!["i-0123456789abcdef0".into()]
            }
        );
        let stopped = r#"{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0abc1234","state":"terminated"}}"#;
        assert_eq!(
            interruption(stopped).kind,
            Kind::StateChange("terminated".into())
        );
        let running = stopped.replace("terminated", "running");
        assert_eq!(parse(&running), Ok(None));
    }

    #[test]
    fn only_ec2_scheduled_changes_count_and_rebalance_keeps_the_node() {
        let health = r#"{"source":"aws.health","detail-type":"AWS Health Event","detail":{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"i-0000000000000000a"},{"entityValue":"vol-1"},{"entityValue":"i-0000000b"}]}}"#;
        let i = interruption(health);
        assert_eq!(i.instance_ids, ["i-0000000000000000a", "i-0000000b"]);
        assert!(i.kind.node_goes(false));
        let rds = health.replace("\"EC2\"", "\"RDS\"");
        assert_eq!(parse(&rds), Ok(None));
        let rebalance = r#"{"source":"aws.ec2","detail-type":"EC2 Instance Rebalance Recommendation","detail":{"instance-id":"i-0000000c"}}"#;
        let kind = interruption(rebalance).kind;
        assert!(!kind.node_goes(false));
        assert!(
            kind.node_goes(true),
            "INTERRUPTION_ACT_ON_REBALANCE replaces the node"
        );
    }

    #[test]
    fn malformed_messages_are_refused_with_the_reason() {
        let refused = |body: &str| match parse(body) {
            Err(Refusal::Malformed(why)) => why,
            other => panic!("{body}: {other:?}"),
        };
        assert!(refused("not json").starts_with("not JSON"));
        assert!(refused("{}").contains("no detail-type"));
        assert!(
            refused(&"[".repeat(1000)).starts_with("not JSON"),
            "nesting is bounded"
        );
        let spot = r#"{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}"#;
        assert!(refused(spot).contains("without detail.instance-id"));
        for id in [
            "",
            "i-",
            "i-xyz12345",
            "i-0123456",
            "../../i-01234567",
            "i-0123456789abcdef0/x",
        ] {
            let body = spot.replace("{}", &format!(r#"{{"instance-id":{id:?}}}"#));
            assert!(refused(&body).contains("not an EC2 instance id"), "{id}");
        }
        let forged = spot.replace("aws.ec2", "my.app");
        assert!(refused(&forged).contains("from source \"my.app\", not aws.ec2"));
        let bad_time = spot.replace(
            "\"detail\":{}",
            r#""time":"yesterday","detail":{"instance-id":"i-01234567"}"#,
        );
        assert!(refused(&bad_time).contains("not an RFC 3339 time"));
        assert_eq!(
            parse(r#"{"detail-type":"Something Else","detail":{}}"#),
            Ok(None)
        );
    }

    #[test]
    fn a_body_bigger_than_any_event_is_refused_unparsed() {
        let huge = format!(
            r#"{{"detail-type":"AWS Health Event","pad":"{}"}}"#,
            "x".repeat(MAX_EVENT_BYTES)
        );
        assert_eq!(parse(&huge), Err(Refusal::Oversized(huge.len())));
        assert_eq!(Refusal::Oversized(huge.len()).label(), "oversized");
    }

    #[test]
    fn an_event_id_is_handled_once_and_the_memory_is_bounded() {
        let mut seen = Seen::new(2);
        assert!(seen.first_time("a"));
        assert!(!seen.first_time("a"));
        assert!(seen.first_time("b"));
        assert!(seen.first_time("c"), "a is forgotten now");
        assert!(seen.first_time("a"));
        assert!(!seen.first_time("c"));
        assert_eq!(seen.ids.len(), 2);
    }

    #[test]
    fn an_event_acts_once_on_a_live_claim_it_does_not_predate() {
        let at = |t: &str| Some(t.parse::<Timestamp>().unwrap());
        let claim = |created: &str, going| {
            Some(ClaimView {
                created: at(created),
                going,
            })
        };
        let created = "2026-12-03T10:00:00Z";
        assert_eq!(judge(at("2026-12-03T10:05:00Z"), None), Verdict::NotOurs);
        assert_eq!(
            judge(at("2026-12-03T10:05:00Z"), claim(created, false)),
            Verdict::Act
        );
        assert_eq!(judge(None, claim(created, false)), Verdict::Act);
        assert_eq!(
            judge(at("2026-12-03T09:59:30Z"), claim(created, false)),
            Verdict::Act,
            "within the clock skew"
        );
        assert_eq!(
            judge(at("2026-12-03T09:58:59Z"), claim(created, false)),
            Verdict::Stale
        );
        assert_eq!(
            judge(at("2020-01-01T00:00:00Z"), claim(created, true)),
            Verdict::Stale
        );
        assert_eq!(
            judge(at("2026-12-03T10:05:00Z"), claim(created, true)),
            Verdict::AlreadyGoing
        );
        assert!(Verdict::Act > Verdict::AlreadyGoing && Verdict::Stale > Verdict::NotOurs);
    }
}
