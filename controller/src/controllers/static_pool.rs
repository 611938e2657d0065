//! Static NodePools (`spec.replicas`): keeps each at exactly its count, whatever the pods —
//! NodeClaims created from the pool's template when it has too few, the least disruptive
//! ones deleted when it has too many (their termination drains through the eviction API, so
//! PodDisruptionBudgets hold). `kubectl scale nodepool` changes the count through the scale
//! subresource.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::core::nodeclaim::from_plan;
use crate::core::pods::is_terminal;
use crate::core::state::{static_pools, Snapshot};
use crate::core::static_pool::{plan, StaticPlan};
use crate::metrics::Metrics;
use crate::runtime::Context;

const PERIOD: Duration = Duration::from_secs(2);

pub async fn run(ctx: Arc<Context>) {
    ctx.stores.ready().await;
    let mut held: HashMap<String, String> = HashMap::new();
    loop {
        tokio::time::sleep(PERIOD).await;
        let snap = ctx.stores.snapshot();
        if !snap.nodepools.iter().any(|p| p.spec.replicas.is_some()) {
            continue;
        }
        if let Err(e) = reconcile(&ctx, &snap, &mut held).await {
            tracing::warn!(error = %e, "keeping static NodePools at their replicas failed; retrying");
        }
    }
}

async fn reconcile(
    ctx: &Context,
    snap: &Snapshot,
    held: &mut HashMap<String, String>,
) -> anyhow::Result<()> {
    let types_of_class = ctx.cloud.instance_types(&snap.nodeclasses).await?;
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut created = Vec::new();
    for pool in static_pools(snap, &types_of_class) {
        let claims: Vec<&NodeClaim> = snap
            .nodeclaims
            .iter()
            .filter(|c| c.labels().get(labels::NODEPOOL) == Some(&pool.name))
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(|c| c.as_ref())
            .collect();
        let decided = plan(&pool, &claims, &pods_on(snap, &claims));
        report_held(&pool.name, &decided, held);
        let Some(nodepool) = snap.nodepools.iter().find(|p| p.name_any() == pool.name) else {
            continue;
        };
        let class = snap
            .nodeclasses
            .iter()
            .find(|c| c.name_any() == nodepool.spec.template.spec.node_class_ref.name);
        for planned in &decided.launch {
            let claim = from_plan(planned, nodepool, class.map(|c| c.as_ref()));
            let made = api.create(&PostParams::default(), &claim).await?;
            Metrics::count_pool(&ctx.metrics.nodeclaims_created, &pool.name);
            tracing::info!(nodepool = %pool.name, nodeclaim = %made.name_any(), "static NodePool below its replicas: created NodeClaim");
            created.push(made.name_any());
        }
        for name in &decided.remove {
            api.delete(name, &DeleteParams::default()).await?;
            tracing::info!(nodepool = %pool.name, nodeclaim = %name, "static NodePool above its replicas: deleting NodeClaim");
        }
    }
    ctx.stores
        .await_nodeclaims(&created, Duration::from_secs(5))
        .await;
    Ok(())
}

/// Pods (not finished) on each NodeClaim's node, by NodeClaim name.
fn pods_on(snap: &Snapshot, claims: &[&NodeClaim]) -> HashMap<String, usize> {
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for pod in &snap.pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            if !is_terminal(pod) {
                *per_node.entry(node).or_default() += 1;
            }
        }
    }
    claims
        .iter()
        .filter_map(|c| {
            let node = c.status.as_ref()?.node_name.as_deref()?;
            Some((c.name_any(), per_node.get(node).copied().unwrap_or(0)))
        })
        .collect()
}

/// Logs why a pool is short once, not on every pass.
fn report_held(pool: &str, decided: &StaticPlan, held: &mut HashMap<String, String>) {
    match &decided.held {
        Some(why) if held.get(pool) != Some(why) => {
            tracing::warn!(nodepool = %pool, reason = %why, "static NodePool held below its replicas");
            held.insert(pool.to_string(), why.clone());
        }
        Some(_) => {}
        None => {
            held.remove(pool);
        }
    }
}
