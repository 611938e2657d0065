//! Draining a node before its instance goes: taint it so nothing new lands, then evict its
//! pods through the eviction API, which honours PodDisruptionBudgets (a 429 means a budget
//! says not now: retried on the next pass).

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, EvictParams, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// Pods that block deletion: not DaemonSet-owned (they tolerate the taint and die with the
/// node), not mirror pods, not finished.
pub fn must_evict(pod: &Pod) -> bool {
    let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !daemon && !mirror && !finished
}

/// Adds the `karpenter.sh/disrupted:NoSchedule` taint unless it is there.
pub async fn taint(nodes: &Api<Node>, node: &Node) -> Result<(), kube::Error> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints.iter().any(|t| t.key == DISRUPTED_TAINT) {
        return Ok(());
    }
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: DISRUPTED_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    });
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": taints}})),
        )
        .await?;
    Ok(())
}

/// Evicts what is left on the node; returns how many pods still block its deletion.
pub async fn evict(client: &kube::Client, node: &str) -> Result<usize, kube::Error> {
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    let mut left = 0;
    for pod in on_node.items.iter().filter(|p| must_evict(p)) {
        left += 1;
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        match ns.evict(&pod.name_any(), &EvictParams::default()).await {
            Ok(_) => {
                tracing::info!(node, pod = %format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()), "evicted pod")
            }
            Err(kube::Error::Api(s)) if s.code == 429 => {
                tracing::info!(node, pod = %pod.name_any(), "eviction refused by a PodDisruptionBudget; retrying");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => left -= 1,
            Err(e) => return Err(e),
        }
    }
    Ok(left)
}
