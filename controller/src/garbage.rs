//! Garbage collection between AWS and the cluster: an instance launched for the cluster that no
//! NodeClaim accounts for (the controller crashed after CreateFleet returned, or a NodeClaim was
//! force-deleted) is terminated after a grace period; a NodeClaim whose instance is gone is
//! deleted. Both are how a crash never leaves paid capacity or phantom nodes behind.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams};
use kube::ResourceExt;

use crate::api::nodeclaim::NodeClaim;
use crate::cloud::aws::tags::owned_instance_filters;
use crate::cloud::aws::NODECLAIM_TAG;
use crate::runtime::metrics::Metrics;

/// How often the collector looks.
pub const PERIOD: Duration = Duration::from_secs(30);

/// The instance ID of a `aws:///<zone>/<instance id>` provider ID.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix("aws:///")
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|id| id.starts_with("i-"))
}

/// Instances (id → launch time) that no NodeClaim claims and that are older than `grace`:
/// younger ones may belong to a launch whose NodeClaim status is still being written.
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

pub struct Collector {
    pub client: kube::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub cluster: String,
    pub grace: Duration,
    pub metrics: Arc<Metrics>,
}

impl Collector {
    /// The cluster's live instances launched for a NodePool: id → (launch time, the NodeClaim
    /// its `karpenter.sh/nodeclaim` tag names).
    async fn instances(&self) -> anyhow::Result<BTreeMap<String, (Timestamp, Option<String>)>> {
        let filters = owned_instance_filters(
            &self.cluster,
            &["pending", "running", "stopping", "stopped"],
        );
        let out = self
            .ec2
            .describe_instances()
            .set_filters(Some(filters))
            .send()
            .await;
        self.metrics.call("ec2", "DescribeInstances", &out);
        let out = out.map_err(|e| {
            anyhow::anyhow!(
                "ec2:DescribeInstances: {}",
                aws_sdk_ec2::error::DisplayErrorContext(e)
            )
        })?;
        Ok(out
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .filter_map(|i| {
                let launched = i
                    .launch_time()
                    .and_then(|t| Timestamp::from_second(t.secs()).ok())
                    .unwrap_or_else(Timestamp::now);
                let claim = i
                    .tags()
                    .iter()
                    .find(|t| t.key() == Some(NODECLAIM_TAG))
                    .and_then(|t| t.value())
                    .map(str::to_string);
                Some((i.instance_id()?.to_string(), (launched, claim)))
            })
            .collect())
    }

    /// One pass: terminate orphans, delete NodeClaims whose instance is gone.
    pub async fn collect(&self) -> anyhow::Result<()> {
        let claims: Api<NodeClaim> = Api::all(self.client.clone());
        let listed = claims.list(&ListParams::default()).await?.items;
        let claimed: BTreeMap<String, String> = listed
            .iter()
            .filter_map(|c| {
                let id = instance_id(c.status.as_ref()?.provider_id.as_deref()?)?;
                Some((id.to_string(), c.name_any()))
            })
            .collect();
        let found = self.instances().await?;
        let names: BTreeSet<String> = listed.iter().map(|c| c.name_any()).collect();
        // Recorded in a NodeClaim's status, or tagged for a NodeClaim that exists (a launch
        // whose result a crash lost: the lifecycle adopts it).
        let mut ids: BTreeSet<String> = claimed.keys().cloned().collect();
        ids.extend(
            found
                .iter()
                .filter(|(_, (_, claim))| claim.as_ref().is_some_and(|c| names.contains(c)))
                .map(|(id, _)| id.clone()),
        );
        let instances: BTreeMap<String, Timestamp> =
            found.iter().map(|(id, (t, _))| (id.clone(), *t)).collect();
        let orphans = orphans(&instances, &ids, Timestamp::now(), self.grace);
        if !orphans.is_empty() {
            let out = self
                .ec2
                .terminate_instances()
                .set_instance_ids(Some(orphans.clone()))
                .send()
                .await;
            self.metrics.call("ec2", "TerminateInstances", &out);
            out.map_err(|e| {
                anyhow::anyhow!(
                    "ec2:TerminateInstances: {}",
                    aws_sdk_ec2::error::DisplayErrorContext(e)
                )
            })?;
            self.metrics
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

    pub async fn run(self) {
        loop {
            if let Err(e) = self.collect().await {
                tracing::error!(error = %e, "garbage collection failed");
            }
            tokio::time::sleep(PERIOD.min(self.grace)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_name_the_instance() {
        assert_eq!(
            instance_id("aws:///us-east-1a/i-0123456789abcdef0"),
            Some("i-0123456789abcdef0")
        );
        assert_eq!(instance_id("kwok://node-1"), None);
    }

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
