//! Status conditions, typed: NodeClaim's `Launched`, `Registered`, `Initialized` → `Ready`,
//! and what an EC2NodeClass's conditions say about whether it can launch.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::EC2NodeClass;

pub const LAUNCHED: &str = "Launched";
pub const REGISTERED: &str = "Registered";
pub const INITIALIZED: &str = "Initialized";
pub const READY: &str = "Ready";
/// Disruption's NodeClaim conditions.
pub const CONSOLIDATABLE: &str = "Consolidatable";
pub const DRIFTED: &str = "Drifted";

/// Condition status values.
pub const TRUE: &str = "True";
pub const FALSE: &str = "False";

pub fn is_true(conditions: &[Condition], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == kind && c.status == TRUE)
}

/// Sets a NodeClaim condition (its transition time moves only when its status does) and
/// `Ready` from the three lifecycle stages.
pub fn set(conditions: &mut Vec<Condition>, kind: &str, ok: bool, reason: &str, message: &str) {
    set_one(conditions, kind, ok, reason, message);
    let ready = [LAUNCHED, REGISTERED, INITIALIZED]
        .iter()
        .all(|k| is_true(conditions, k));
    if kind != READY {
        let (reason, message) = if ready {
            ("Ready", "")
        } else {
            (
                "NotReady",
                "the node is not launched, registered and initialized yet",
            )
        };
        let before = conditions
            .iter()
            .find(|c| c.type_ == READY)
            .map(|c| c.status == TRUE);
        if before != Some(ready) {
            set(conditions, READY, ready, reason, message);
        }
    }
}

/// Sets one condition, nothing else; its transition time moves only when its status does.
pub fn set_one(conditions: &mut Vec<Condition>, kind: &str, ok: bool, reason: &str, message: &str) {
    let status = if ok { TRUE } else { FALSE };
    let now = Time(Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == kind) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message.into();
        }
        None => conditions.push(Condition {
            type_: kind.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: now,
            observed_generation: None,
        }),
    }
}

/// Why a class cannot launch now, or None when it is Ready.
pub fn class_not_ready(class: &EC2NodeClass) -> Option<String> {
    let conditions = class
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if is_true(conditions, READY) {
        return None;
    }
    let why: Vec<String> = conditions
        .iter()
        .filter(|c| c.status == FALSE && c.type_ != READY)
        .map(|c| format!("{}: {}", c.type_, c.message))
        .collect();
    Some(if why.is_empty() {
        "not resolved yet".to_string()
    } else {
        why.join("; ")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_follows_the_three_stages() {
        let mut c = Vec::new();
        set(&mut c, LAUNCHED, true, "Launched", "");
        assert!(!is_true(&c, READY));
        set(&mut c, REGISTERED, true, "Registered", "");
        set(&mut c, INITIALIZED, true, "Initialized", "");
        assert!(is_true(&c, READY));
        let t = c
            .iter()
            .find(|x| x.type_ == LAUNCHED)
            .unwrap()
            .last_transition_time
            .clone();
        set(&mut c, LAUNCHED, true, "Launched", "again");
        assert_eq!(
            c.iter()
                .find(|x| x.type_ == LAUNCHED)
                .unwrap()
                .last_transition_time,
            t
        );
    }
}
