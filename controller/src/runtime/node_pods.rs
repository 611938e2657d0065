//! The pods bound to a node as the API server has them now, not a cache, which may not have
//! seen a pod bound a moment ago: what the drain evicts, and what an emptiness command looks
//! at once more after its taint.

use kube::api::{Api, ListParams, ObjectList};

use crate::api::pod::Pod;
use crate::core::pods::to_be_moved;

pub async fn list(client: &kube::Client, node: &str) -> Result<ObjectList<Pod>, kube::Error> {
    let pods: Api<Pod> = Api::all(client.clone());
    pods.list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
}

/// How many of them a drain would have to move.
pub async fn to_move(client: &kube::Client, node: &str) -> Result<usize, kube::Error> {
    let on_node = list(client, node).await?;
    Ok(on_node.items.iter().filter(|p| to_be_moved(p)).count())
}
