//! What each CapacityBuffer's status should say (pure): whether it resolved
//! (`ReadyForProvisioning`, with the chunks counted) and whether its headroom exists now
//! (`Provisioning`: every chunk fits on a registered node beside the pods already there).
//! The status reconciler writes it and `jointer status` prints it.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;

use super::buffer::{housed, resolve_all, BufferError, Resolved, Sources};
use crate::api::capacitybuffer::{
    CapacityBuffer, CapacityBufferStatus, LocalObjectRef, PROVISIONING, READY_FOR_PROVISIONING,
};
use crate::api::conditions::{FALSE, TRUE};
use crate::core::scheduling::ExistingNode;

/// One buffer now.
#[derive(Debug, Clone)]
pub struct BufferState {
    pub buffer: Arc<CapacityBuffer>,
    pub resolved: Result<Resolved, BufferError>,
    /// Chunks that fit on registered nodes now.
    pub housed: i32,
}

impl BufferState {
    /// Chunks resolved (0 when the buffer does not resolve).
    pub fn replicas(&self) -> i32 {
        self.resolved.as_ref().map_or(0, |r| r.replicas)
    }

    /// The headroom exists: the buffer resolved and every chunk has room.
    pub fn satisfied(&self) -> bool {
        self.resolved.is_ok() && self.housed >= self.replicas()
    }
}

/// The summary `jointer status --output json` prints per buffer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BufferSummary {
    pub namespace: String,
    pub name: String,
    pub replicas: i32,
    pub ready: i32,
    pub satisfied: bool,
    /// Why the buffer does not resolve, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<&BufferState> for BufferSummary {
    fn from(s: &BufferState) -> Self {
        BufferSummary {
            namespace: s.buffer.namespace().unwrap_or_default(),
            name: s.buffer.name_any(),
            replicas: s.replicas(),
            ready: s.housed.min(s.replicas()),
            satisfied: s.satisfied(),
            error: s.resolved.as_ref().err().map(ToString::to_string),
        }
    }
}

/// Every buffer's state over the registered nodes `existing` (in-flight NodeClaims are not
/// headroom yet: a pod arriving now could not run there).
pub fn states(sources: &Sources, existing: Vec<ExistingNode>) -> Vec<BufferState> {
    let (resolved, failed) = resolve_all(sources);
    let pods = resolved
        .iter()
        .flat_map(|(_, p)| p.iter().cloned())
        .collect();
    let room = housed(existing, pods);
    let mut out: Vec<BufferState> = Vec::new();
    for (r, pods) in resolved {
        let Some(buffer) = sources.buffers.iter().find(|b| {
            b.namespace().as_deref() == Some(r.namespace.as_str()) && b.name_any() == r.name
        }) else {
            continue;
        };
        let fitting = pods.iter().filter(|p| room.contains(&p.key)).count();
        out.push(BufferState {
            buffer: buffer.clone(),
            housed: i32::try_from(fitting).unwrap_or(i32::MAX),
            resolved: Ok(r),
        });
    }
    out.extend(failed.into_iter().map(|(buffer, e)| BufferState {
        buffer,
        resolved: Err(e),
        housed: 0,
    }));
    out.sort_by_key(|s| (s.buffer.namespace(), s.buffer.name_any()));
    out
}

/// Sets a condition; its transition time moves only when its status does.
fn set(conditions: &mut Vec<Condition>, kind: &str, ok: bool, reason: &str, message: String) {
    let status = if ok { TRUE } else { FALSE };
    match conditions.iter_mut().find(|c| c.type_ == kind) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Time(Timestamp::now());
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message;
        }
        None => conditions.push(Condition {
            type_: kind.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            last_transition_time: Time(Timestamp::now()),
            observed_generation: None,
        }),
    }
}

/// The status the buffer should have, keeping transition times of unchanged conditions.
pub fn desired_status(state: &BufferState) -> CapacityBufferStatus {
    let old = state.buffer.status.clone().unwrap_or_default();
    let generation = state.buffer.metadata.generation;
    let mut conditions = old.conditions.clone();
    let mut status = CapacityBufferStatus {
        provisioning_strategy: Some(state.buffer.spec.provisioning_strategy.clone()),
        ..Default::default()
    };
    match &state.resolved {
        Ok(r) => {
            status.pod_template_ref = r.pod_template.clone().map(|name| LocalObjectRef { name });
            status.replicas = Some(r.replicas);
            status.pod_template_generation = r.generation;
            set(
                &mut conditions,
                READY_FOR_PROVISIONING,
                true,
                "Resolved",
                format!("{} chunk(s) to keep room for", r.replicas),
            );
            let (reason, message) = if state.satisfied() {
                (
                    "HeadroomAvailable",
                    format!("all {} chunk(s) fit on registered nodes", r.replicas),
                )
            } else {
                (
                    "WaitingForCapacity",
                    format!(
                        "{} of {} chunk(s) fit on registered nodes; the provisioner keeps room for the rest",
                        state.housed.min(r.replicas),
                        r.replicas
                    ),
                )
            };
            set(
                &mut conditions,
                PROVISIONING,
                state.satisfied(),
                reason,
                message,
            );
        }
        Err(e) => {
            set(
                &mut conditions,
                READY_FOR_PROVISIONING,
                false,
                e.reason(),
                e.to_string(),
            );
            set(
                &mut conditions,
                PROVISIONING,
                false,
                "NotReadyForProvisioning",
                "the buffer does not resolve; see ReadyForProvisioning".into(),
            );
        }
    }
    for c in &mut conditions {
        c.observed_generation = generation;
    }
    status.conditions = conditions;
    status
}

/// Two statuses say the same (ignoring transition times, which only a change moves).
pub fn same_status(a: &CapacityBufferStatus, b: &CapacityBufferStatus) -> bool {
    let strip = |s: &CapacityBufferStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        s
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::scheduling::Resources;
    use k8s_openapi::api::core::v1::PodTemplate;
    use serde_json::json;

    fn sources(replicas: i32, template: bool) -> Sources {
        let buffer: CapacityBuffer = serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "warm", "namespace": "team", "generation": 2},
            "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": replicas}}))
        .expect("buffer");
        let chunk: PodTemplate = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "chunk", "namespace": "team", "generation": 1},
            "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}))
        .expect("template");
        Sources {
            buffers: vec![Arc::new(buffer)],
            pod_templates: if template {
                vec![Arc::new(chunk)]
            } else {
                vec![]
            },
            ..Default::default()
        }
    }

    fn node(cpu_millis: i64) -> ExistingNode {
        ExistingNode {
            name: "n1".into(),
            pool: None,
            labels: Default::default(),
            taints: Vec::new(),
            allocatable: Resources {
                pods: 110,
                ..Resources::cpu_memory(cpu_millis, 8 << 30)
            },
            requested: Resources::ZERO,
            pods: Vec::new(),
            label_requirements: Default::default(),
        }
    }

    fn condition<'a>(s: &'a CapacityBufferStatus, kind: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == kind).expect(kind)
    }

    #[test]
    fn a_buffer_is_satisfied_once_every_chunk_has_room() {
        let waiting = &states(&sources(2, true), vec![node(1500)])[0];
        assert_eq!(
            (waiting.replicas(), waiting.housed, waiting.satisfied()),
            (2, 1, false)
        );
        let s = desired_status(waiting);
        assert_eq!(s.replicas, Some(2));
        assert_eq!(
            s.pod_template_ref.as_ref().map(|r| r.name.as_str()),
            Some("chunk")
        );
        assert_eq!(s.pod_template_generation, Some(1));
        assert_eq!(condition(&s, READY_FOR_PROVISIONING).status, TRUE);
        let provisioning = condition(&s, PROVISIONING);
        assert_eq!(
            (provisioning.status.as_str(), provisioning.reason.as_str()),
            (FALSE, "WaitingForCapacity")
        );
        assert_eq!(provisioning.observed_generation, Some(2));

        let warm = &states(&sources(2, true), vec![node(2000)])[0];
        assert!(warm.satisfied());
        let summary = BufferSummary::from(warm);
        assert_eq!(
            (summary.replicas, summary.ready, summary.satisfied),
            (2, 2, true)
        );
        assert_eq!(condition(&desired_status(warm), PROVISIONING).status, TRUE);
    }

    #[test]
    fn a_buffer_that_does_not_resolve_says_why_and_is_not_satisfied() {
        let broken = &states(&sources(1, false), vec![node(4000)])[0];
        assert!(!broken.satisfied());
        let s = desired_status(broken);
        let ready = condition(&s, READY_FOR_PROVISIONING);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            (FALSE, "PodTemplateNotFound")
        );
        assert!(
            ready.message.contains("spec.podTemplateRef.name"),
            "{}",
            ready.message
        );
        assert_eq!(s.replicas, None);
        let summary = BufferSummary::from(broken);
        assert!(summary.error.is_some_and(|e| e.contains("does not exist")));
    }

    #[test]
    fn an_unchanged_status_is_the_same_even_with_new_transition_times() {
        let state = &states(&sources(1, true), vec![node(4000)])[0];
        let first = desired_status(state);
        let mut written = state.buffer.as_ref().clone();
        written.status = Some(first.clone());
        let again = BufferState {
            buffer: Arc::new(written),
            ..state.clone()
        };
        let second = desired_status(&again);
        assert!(same_status(&first, &second));
        let other = &states(&sources(1, true), vec![node(500)])[0];
        assert!(!same_status(&first, &desired_status(other)));
    }
}
