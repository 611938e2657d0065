//! Garbage collection between the cloud and the cluster: an instance launched for the cluster
//! that no NodeClaim accounts for (the controller crashed after the launch returned, or a
//! NodeClaim was force-deleted) is terminated after a grace period; a NodeClaim whose instance
//! is gone is deleted. Both are how a crash never leaves paid capacity or phantom nodes behind.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams};
use kube::ResourceExt;

use crate::api::nodeclaim::{instance_key, NodeClaim};
use crate::runtime::Context;

/// How often the collector looks.
pub const PERIOD: Duration = Duration::from_secs(30);

/// Instances (id → launch time) that no NodeClaim claims and that are older than
/// `grace`: younger ones may belong to a launch whose NodeClaim status is still being written.
pub fn orphans(
    instances: &BTreeMap<String, Timestamp>,
    claimed: &BTreeSet<String>,
    now: Timestamp,
    grace: Duration,
) -> Vec<String> {
    instances
        .iter()
        .filter(|(id, _)| !claimed.contains(*id))
        .filter(|(_, launched)| now.duration_since(**launched).as_secs() >= grace.as_secs() as i64)
        .map(|(id, _)| id.clone())
        .collect()
}

/// How many NodeClaims one list request returns: every page is kept only as names and
/// instance ids, so the collector holds a page, not a thousand NodeClaims with their
/// managedFields (at 500 nodes the whole list was a tenth of the controller's heap).
const LIST_PAGE: u32 = 100;

/// Every NodeClaim's name and recorded provider ID, from the API server (not the cache: the
/// list must be newer than the collector's clock), read a page at a time. The pages are one
/// consistent list: the API server serves them all at the first page's resourceVersion.
async fn claims_and_instances(
    api: &Api<NodeClaim>,
) -> Result<Vec<(String, Option<String>)>, kube::Error> {
    let mut params = ListParams::default().limit(LIST_PAGE);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items.iter().map(|c| {
            let provider_id = c.status.as_ref().and_then(|s| s.provider_id.clone());
            (c.name_any(), provider_id)
        }));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(out),
        }
    }
}

/// One pass: terminate orphans, delete NodeClaims whose instance is gone.
pub async fn collect(ctx: &Context) -> anyhow::Result<()> {
    // Before the NodeClaims are listed: an instance launched since then may be for a
    // NodeClaim the list missed, and must not be judged an orphan against a later clock.
    let listed_at = Timestamp::now();
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let listed = claims_and_instances(&claims).await?;
    let claimed: BTreeMap<String, String> = listed
        .iter()
        .filter_map(|(name, provider_id)| {
            Some((
                instance_key(provider_id.as_deref()?).to_string(),
                name.clone(),
            ))
        })
        .collect();
    let found = ctx.cloud.owned_instances().await?;
    let names: BTreeSet<String> = listed.into_iter().map(|(name, _)| name).collect();
    // Recorded in a NodeClaim's status, or tagged for a NodeClaim that exists (a launch
    // whose result a crash lost: the NodeClaim controller adopts it).
    let mut ids: BTreeSet<String> = claimed.keys().cloned().collect();
    ids.extend(
        found
            .iter()
            .filter(|i| i.nodeclaim.as_ref().is_some_and(|c| names.contains(c)))
            .map(|i| instance_key(&i.provider_id).to_string()),
    );
    let instances: BTreeMap<String, Timestamp> = found
        .iter()
        .map(|i| (instance_key(&i.provider_id).to_string(), i.launched_at))
        .collect();
    let provider_id: BTreeMap<&str, &str> = found
        .iter()
        .map(|i| (instance_key(&i.provider_id), i.provider_id.as_str()))
        .collect();
    let grace = ctx.settings.gc_grace;
    let orphans = orphans(&instances, &ids, listed_at, grace);
    if !orphans.is_empty() {
        let provider_ids: Vec<String> = orphans
            .iter()
            .filter_map(|o| provider_id.get(o.as_str()).map(|p| p.to_string()))
            .collect();
        ctx.cloud.terminate(&provider_ids).await?;
        ctx.metrics
            .garbage_collected_instances
            .inc_by(orphans.len() as u64);
        tracing::warn!(instances = %orphans.join(","), "terminated instances no NodeClaim accounts for");
    }
    for (id, claim) in &claimed {
        if !instances.contains_key(id) {
            // Launched and since gone (terminated outside the controller, or reclaimed).
            match claims.delete(claim, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::warn!(nodeclaim = %claim, instance = %id, "deleted NodeClaim whose instance is gone")
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

pub async fn run(ctx: Arc<Context>) {
    loop {
        if let Err(e) = collect(&ctx).await {
            tracing::error!(error = %e, "garbage collection failed");
        }
        tokio::time::sleep(PERIOD.min(ctx.settings.gc_grace)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unclaimed_instances_past_the_grace_period_are_orphans() {
        let now = Timestamp::from_second(10_000).unwrap();
        let instances = BTreeMap::from([
            ("i-old".to_string(), Timestamp::from_second(9_000).unwrap()),
            (
                "i-young".to_string(),
                Timestamp::from_second(9_990).unwrap(),
            ),
            (
                "i-claimed".to_string(),
                Timestamp::from_second(1_000).unwrap(),
            ),
        ]);
        let claimed = BTreeSet::from(["i-claimed".to_string()]);
        assert_eq!(
            orphans(&instances, &claimed, now, Duration::from_secs(60)),
            vec!["i-old".to_string()]
        );
    }
}
