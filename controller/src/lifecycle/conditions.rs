//! NodeClaim status conditions: `Launched`, `Registered`, `Initialized` → `Ready`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub const LAUNCHED: &str = "Launched";
pub const REGISTERED: &str = "Registered";
pub const INITIALIZED: &str = "Initialized";
pub const READY: &str = "Ready";

pub fn is_true(conditions: &[Condition], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == kind && c.status == "True")
}

/// Sets a condition; its transition time moves only when its status does.
pub fn set(conditions: &mut Vec<Condition>, kind: &str, ok: bool, reason: &str, message: &str) {
    let status = if ok { "True" } else { "False" };
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
            .map(|c| c.status == "True");
        if before != Some(ready) {
            set(conditions, READY, ready, reason, message);
        }
    }
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
