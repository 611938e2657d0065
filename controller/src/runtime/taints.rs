//! The `karpenter.sh/disrupted:NoSchedule` taint on a Node, put on by disruption and by the
//! drain (so nothing new lands on a node that is going) and taken off when a disruption is
//! abandoned. What the taint list becomes is decided in `core::drain`.

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::core::drain::{with_disrupted_taint, without_disrupted_taint};

/// Adds the taint unless it is there.
pub async fn add_disrupted(nodes: &Api<Node>, node: &Node) -> Result<(), kube::Error> {
    match with_disrupted_taint(node) {
        Some(taints) => write(nodes, node, &taints).await,
        None => Ok(()),
    }
}

/// Removes the taint if it is there.
pub async fn remove_disrupted(nodes: &Api<Node>, node: &Node) -> Result<(), kube::Error> {
    match without_disrupted_taint(node) {
        Some(taints) => write(nodes, node, &taints).await,
        None => Ok(()),
    }
}

async fn write(nodes: &Api<Node>, node: &Node, taints: &[Taint]) -> Result<(), kube::Error> {
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await?;
    Ok(())
}
