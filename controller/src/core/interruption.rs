//! The EventBridge events the interruption queue receives (pure): which instances they are
//! about and what they mean for their nodes.

use serde_json::Value;

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

/// The interruption a message body describes; `Ok(None)` for events that need nothing (other
/// services' health events, a `running` state change, unknown types).
pub fn parse(body: &str) -> Result<Option<Interruption>, String> {
    let event: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let detail_type = event["detail-type"]
        .as_str()
        .ok_or("no detail-type: not an EventBridge event")?;
    let detail = &event["detail"];
    let one = |kind: Kind| -> Result<Option<Interruption>, String> {
        let id = detail["instance-id"]
            .as_str()
            .ok_or_else(|| format!("{detail_type} without detail.instance-id"))?;
        Ok(Some(Interruption {
            kind,
            instance_ids: vec![id.to_string()],
        }))
    };
    match detail_type {
        "EC2 Spot Instance Interruption Warning" => one(Kind::SpotInterruption),
        "EC2 Capacity Reservation Instance Interruption Warning" => {
            one(Kind::CapacityReservationInterruption)
        }
        "EC2 Instance Rebalance Recommendation" => one(Kind::Rebalance),
        "EC2 Instance State-change Notification" => {
            let state = detail["state"].as_str().unwrap_or_default();
            if matches!(
                state,
                "stopping" | "stopped" | "shutting-down" | "terminated"
            ) {
                one(Kind::StateChange(state.to_string()))
            } else {
                Ok(None)
            }
        }
        "AWS Health Event" => {
            // Only EC2's scheduled changes concern nodes.
            if detail["service"] != "EC2" || detail["eventTypeCategory"] != "scheduledChange" {
                return Ok(None);
            }
            let ids: Vec<String> = detail["affectedEntities"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["entityValue"].as_str())
                .filter(|v| v.starts_with("i-"))
                .map(str::to_string)
                .collect();
            Ok((!ids.is_empty()).then_some(Interruption {
                kind: Kind::ScheduledChange,
                instance_ids: ids,
            }))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spot_warnings_and_terminal_state_changes_name_their_instance() {
        let spot = r#"{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-1","instance-action":"terminate"}}"#;
        assert_eq!(
            parse(spot),
            Ok(Some(Interruption {
                kind: Kind::SpotInterruption,
                instance_ids: vec!["i-1".into()]
            }))
        );
        let stopped = r#"{"detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-2","state":"terminated"}}"#;
        assert_eq!(
            parse(stopped).unwrap().unwrap().kind,
            Kind::StateChange("terminated".into())
        );
        let running = r#"{"detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-2","state":"running"}}"#;
        assert_eq!(parse(running), Ok(None));
    }

    #[test]
    fn only_ec2_scheduled_changes_count_and_rebalance_keeps_the_node() {
        let health = r#"{"detail-type":"AWS Health Event","detail":{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"i-3"},{"entityValue":"i-4"}]}}"#;
        let i = parse(health).unwrap().unwrap();
        assert_eq!(i.instance_ids, ["i-3", "i-4"]);
        assert!(i.kind.node_goes(false));
        let rds = health.replace("\"EC2\"", "\"RDS\"");
        assert_eq!(parse(&rds), Ok(None));
        let rebalance = r#"{"detail-type":"EC2 Instance Rebalance Recommendation","detail":{"instance-id":"i-5"}}"#;
        let kind = parse(rebalance).unwrap().unwrap().kind;
        assert!(!kind.node_goes(false));
        assert!(
            kind.node_goes(true),
            "INTERRUPTION_ACT_ON_REBALANCE replaces the node"
        );
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        assert!(parse("not json").is_err());
        assert!(parse("{}").is_err());
        assert!(
            parse(r#"{"detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}"#)
                .is_err()
        );
        assert_eq!(
            parse(r#"{"detail-type":"Something Else","detail":{}}"#),
            Ok(None)
        );
    }
}
