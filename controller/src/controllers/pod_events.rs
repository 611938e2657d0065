//! Pod events on nodes (leader only): each NodeClaim's `lastPodEventTime` moves when the set
//! of pods on its node changes, its `Consolidatable` condition follows the pool's
//! `consolidateAfter`, and its `Drifted` condition says whether (and why) it drifted — what
//! disruption and `kubectl get nodeclaims` read.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;

use crate::api::conditions::{is_true, set, CONSOLIDATABLE, DRIFTED, INITIALIZED};
use crate::api::duration::NillableDuration;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::core::disruption::drift::drifted;
use crate::core::pods::{must_evict, since};
use crate::runtime::Context;

pub async fn run(ctx: Arc<Context>) {
    ctx.stores.ready().await;
    // NodeClaim → hash of the pods on its node at the last pass.
    let mut pod_sets: HashMap<String, u64> = HashMap::new();
    loop {
        tokio::time::sleep(ctx.settings.disruption_poll).await;
        if let Err(e) = track(&ctx, &mut pod_sets).await {
            tracing::warn!(error = %e, "updating lastPodEventTime failed");
        }
    }
}

/// `lastPodEventTime` moves when the set of pods on a node changes; `Consolidatable`
/// follows `consolidateAfter`.
async fn track(ctx: &Context, pod_sets: &mut HashMap<String, u64>) -> Result<(), kube::Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let pods = ctx.stores.pods.state();
    let pools = ctx.stores.nodepools.state();
    let classes = ctx.stores.nodeclasses.state();
    let now = Timestamp::now();
    // Each node's evictable pods, once: "name/deleting" in a stable order.
    let mut on_node: HashMap<&str, Vec<String>> = HashMap::new();
    for p in pods.iter().filter(|p| must_evict(p)) {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            on_node.entry(node).or_default().push(format!(
                "{}/{}/{}",
                p.namespace().unwrap_or_default(),
                p.name_any(),
                p.metadata.deletion_timestamp.is_some()
            ));
        }
    }
    let claims = ctx.stores.nodeclaims.state();
    for claim in &claims {
        let Some(mut status) = claim.status.clone() else {
            continue;
        };
        let Some(node) = status.node_name.clone() else {
            continue;
        };
        let mut names = on_node.get(node.as_str()).cloned().unwrap_or_default();
        names.sort();
        let mut h = DefaultHasher::new();
        names.hash(&mut h);
        let hash = h.finish();
        let name = claim.name_any();
        let changed = pod_sets
            .insert(name.clone(), hash)
            .is_some_and(|old| old != hash);
        let mut dirty = false;
        if changed || status.last_pod_event_time.is_none() {
            status.last_pod_event_time = Some(Time(now));
            dirty = true;
        }
        let after = pools
            .iter()
            .find(|p| Some(&p.name_any()) == claim.labels().get(labels::NODEPOOL))
            .map(|p| p.spec.disruption.consolidate_after);
        let consolidatable = match (after, &status.last_pod_event_time) {
            (Some(NillableDuration::After(d)), Some(t)) => {
                is_true(&status.conditions, INITIALIZED) && since(now, t.0) >= d
            }
            _ => false,
        };
        let pool = pools
            .iter()
            .find(|p| Some(&p.name_any()) == claim.labels().get(labels::NODEPOOL));
        let class = classes
            .iter()
            .find(|c| c.name_any() == claim.spec.node_class_ref.name);
        let drift = pool.and_then(|p| drifted(claim, p, class.map(|c| c.as_ref())));
        let was_drifted = is_true(&status.conditions, DRIFTED);
        if drift.is_some() != was_drifted
            || drift.as_deref().is_some_and(|why| {
                !status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == DRIFTED && c.message == why)
            })
        {
            match &drift {
                Some(why) => {
                    tracing::info!(nodeclaim = %name, reason = %why, "drifted");
                    set(&mut status.conditions, DRIFTED, true, "Drifted", why)
                }
                None => status.conditions.retain(|c| c.type_ != DRIFTED),
            }
            dirty = true;
        }
        if is_true(&status.conditions, CONSOLIDATABLE) != consolidatable {
            let reason = if consolidatable {
                "Consolidatable"
            } else {
                "NotConsolidatable"
            };
            set(
                &mut status.conditions,
                CONSOLIDATABLE,
                consolidatable,
                reason,
                "",
            );
            dirty = true;
        }
        if dirty {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
        }
    }
    let live: std::collections::HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
    pod_sets.retain(|k, _| live.contains(k));
    Ok(())
}
