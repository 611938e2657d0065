//! Kubernetes Events: how the controller tells people about a pod or NodeClaim where they look
//! (`kubectl describe`), next to its log lines.

use kube::runtime::events::{Event, EventType, Recorder};
use kube::Resource;

/// Publishes an Event on `object`; a failure is logged, never fatal (Events are best effort).
pub async fn publish<K>(
    recorder: &Recorder,
    object: &K,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) where
    K: Resource<DynamicType = ()>,
{
    let event = Event {
        type_,
        reason: reason.into(),
        // The API refuses notes over 1 kB.
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &object.object_ref(&())).await {
        tracing::warn!(reason, error = %e, "publishing an Event failed");
    }
}
