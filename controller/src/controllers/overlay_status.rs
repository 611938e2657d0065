//! NodeOverlay status: whether each overlay applies (`ValidationSucceeded`, and `Ready` with
//! it), or why not — its spec cannot be applied (`RuntimeValidation`) or it conflicts with
//! another of the same weight (`Conflict`) — so `kubectl get nodeoverlays` says which prices
//! the scheduler is using. The verdicts are the ones every decision applies
//! ([`types_of_pools`]); this only reports them, every 5 s.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::api::conditions::{set_one, READY};
use crate::api::nodeoverlay::{NodeOverlay, VALIDATION_SUCCEEDED};
use crate::core::state::types_of_pools;
use crate::runtime::Context;

pub async fn run(ctx: Arc<Context>) {
    ctx.stores.ready().await;
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let snapshot = ctx.stores.snapshot();
        if snapshot.nodeoverlays.is_empty() {
            continue;
        }
        let types_of_class = match ctx.cloud.instance_types(&snapshot.nodeclasses).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "no instance types: NodeOverlay status not updated this round");
                continue;
            }
        };
        let (_, overlays) = types_of_pools(&snapshot, &types_of_class);
        for overlay in &snapshot.nodeoverlays {
            let name = overlay.name_any();
            let rejection = overlays.rejection(&name);
            let (ok, reason, message) = match rejection {
                None => (true, VALIDATION_SUCCEEDED.to_string(), String::new()),
                Some(r) => (false, r.reason().to_string(), r.to_string()),
            };
            let before = overlay
                .status
                .as_ref()
                .map(|s| s.conditions.clone())
                .unwrap_or_default();
            let mut conditions = before.clone();
            set_one(&mut conditions, VALIDATION_SUCCEEDED, ok, &reason, &message);
            let ready_reason = if ok { READY } else { reason.as_str() };
            set_one(&mut conditions, READY, ok, ready_reason, &message);
            for c in &mut conditions {
                c.observed_generation = overlay.metadata.generation;
            }
            if conditions == before {
                continue;
            }
            if let Some(r) = rejection {
                tracing::warn!(nodeoverlay = %name, reason = r.reason(), message = %r, "NodeOverlay not applied");
            }
            let patch = json!({"status": {"conditions": conditions}});
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(nodeoverlay = %name, error = %e, "updating NodeOverlay status failed");
            }
        }
    }
}
