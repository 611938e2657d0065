//! CapacityBuffer status: every 5 s, each buffer's resolved chunks and whether its headroom
//! exists now (`ReadyForProvisioning`, `Provisioning`), for `kubectl get capacitybuffers` and
//! `jointer status`. Written only when it changes.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::api::CapacityBuffer;
use crate::core::buffer_status::{desired_status, same_status, states};
use crate::core::state::registered_nodes;
use crate::runtime::Context;

const PERIOD: Duration = Duration::from_secs(5);
const STATUS_FIELDS: [&str; 5] = [
    "podTemplateRef",
    "replicas",
    "podTemplateGeneration",
    "provisioningStrategy",
    "conditions",
];

pub async fn run(ctx: Arc<Context>) {
    ctx.stores.ready().await;
    loop {
        tokio::time::sleep(PERIOD).await;
        let snap = ctx.stores.snapshot();
        if snap.buffers.buffers.is_empty() {
            continue;
        }
        for state in states(&snap.buffers, registered_nodes(&snap)) {
            let desired = desired_status(&state);
            let current = state.buffer.status.clone().unwrap_or_default();
            if same_status(&current, &desired) {
                continue;
            }
            let namespace = state.buffer.namespace().unwrap_or_default();
            let name = state.buffer.name_any();
            let api: Api<CapacityBuffer> = Api::namespaced(ctx.client.clone(), &namespace);
            // A merge patch leaves keys it does not name: fields the buffer no longer has
            // (replicas of a buffer that stopped resolving) are cleared explicitly.
            let mut status = serde_json::to_value(&desired).unwrap_or_default();
            if let Some(fields) = status.as_object_mut() {
                for key in STATUS_FIELDS {
                    fields.entry(key).or_insert(serde_json::Value::Null);
                }
            }
            let patch = json!({ "status": status });
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => tracing::info!(
                    capacitybuffer = %format!("{namespace}/{name}"),
                    replicas = state.replicas(),
                    satisfied = state.satisfied(),
                    "CapacityBuffer status updated"
                ),
                Err(e) => tracing::warn!(
                    capacitybuffer = %format!("{namespace}/{name}"),
                    error = %e,
                    "updating CapacityBuffer status failed"
                ),
            }
        }
    }
}
