//! The drain's I/O (the node is tainted first, `runtime::taints`): evict its pods through the
//! eviction API, which honours PodDisruptionBudgets (a 429 means a budget says not now:
//! retried on the next pass), or delete them when the NodeClaim's terminationGracePeriod ends.
//! What happens to each pod is decided by [`crate::core::drain::pass_steps`] (the biggest pods
//! first, a size a pass).

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, EvictParams};
use kube::ResourceExt;

use crate::core::drain::{pass_steps, PodStep};
use crate::runtime::node_pods;

/// Evicts (or, near the deadline, deletes) what is left on the node; returns how many pods
/// still hold it.
pub async fn drain(
    client: &kube::Client,
    node: &str,
    deadline: Option<Timestamp>,
) -> Result<usize, kube::Error> {
    let on_node = node_pods::list(client, node).await?;
    let steps = pass_steps(&on_node.items, Timestamp::now(), deadline);
    let mut left = 0;
    for (pod, step) in on_node.items.iter().zip(steps) {
        if step == PodStep::Ignore {
            continue;
        }
        left += 1;
        // The eviction subresource is typed for k8s-openapi's pod.
        let ns: Api<k8s::Pod> =
            Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let id = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
        let result = match step {
            PodStep::Ignore | PodStep::Wait => continue,
            PodStep::Evict => ns
                .evict(&pod.name_any(), &EvictParams::default())
                .await
                .map(|_| tracing::info!(node, pod = %id, "evicted pod")),
            PodStep::Delete { grace_seconds } => {
                let params = DeleteParams {
                    grace_period_seconds: Some(u32::try_from(grace_seconds).unwrap_or(0)),
                    ..DeleteParams::default()
                };
                ns.delete(&pod.name_any(), &params).await.map(|_| {
                    tracing::info!(node, pod = %id, grace_seconds, "deleted pod: the NodeClaim's terminationGracePeriod ends")
                })
            }
        };
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 429 => {
                tracing::info!(node, pod = %id, "eviction refused by a PodDisruptionBudget; retrying");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => left -= 1,
            Err(e) => return Err(e),
        }
    }
    Ok(left)
}
