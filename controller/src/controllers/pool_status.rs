//! NodePool status: each pool's `status.resources` (the capacity of its NodeClaims, and
//! `nodes`), kept current every 5 s for `kubectl get nodepools`, limits and `jointer status`.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::api::labels;
use crate::api::NodePool;
use crate::core::nodeclaim::{launched_capacity, quantities};
use crate::runtime::Context;

/// Keeps each NodePool's `status.resources` (capacity of its NodeClaims, and `nodes`) current.
pub async fn run(ctx: Arc<Context>) {
    let stores = &ctx.stores;
    stores.ready().await;
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let claims = stores.nodeclaims.state();
        for pool in stores.nodepools.state() {
            let name = pool.name_any();
            let mine: Vec<_> = claims
                .iter()
                .filter(|c| c.labels().get(labels::NODEPOOL) == Some(&name))
                .collect();
            let total = launched_capacity(mine.iter().map(|c| c.as_ref()));
            let mut resources = quantities(&total);
            resources.insert(
                "nodes".into(),
                crate::api::Quantity::from_units(mine.len() as i128),
            );
            let nodes = mine.len() as i64;
            let unchanged = pool
                .status
                .as_ref()
                .is_some_and(|s| s.resources == resources && s.nodes == Some(nodes));
            if unchanged {
                continue;
            }
            let patch = json!({"status": {"resources": resources, "nodes": nodes}});
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(nodepool = %name, error = %e, "updating NodePool status.resources failed");
            }
        }
    }
}
