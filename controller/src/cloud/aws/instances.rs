//! The instance calls the lifecycle and garbage collection need: find the instance a launch
//! made (by its NodeClaim tag), its state, termination, and every instance the cluster's
//! NodePools own. An instance EC2 no longer knows counts as gone.

use aws_sdk_ec2::types::{Filter, Instance};
use k8s_openapi::jiff::Timestamp;

use super::call::{codes, metered};
use super::tags::owned_instance_filters;
use super::AwsCloud;
use crate::api::labels;
use crate::cloud::{CloudError, InstanceState, Launched, OwnedInstance};
use crate::core::scheduling::CapacityType;

/// `aws:///<zone>/<instance id>`, the provider ID the kubelet gives an EC2 node.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The instance ID of an `aws:///<zone>/<instance id>` provider ID.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    provider_id
        .strip_prefix("aws:///")
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|id| id.starts_with("i-"))
}

fn not_ours(provider_id: &str) -> CloudError {
    CloudError::NotFound {
        what: format!("an EC2 instance for provider ID {provider_id}"),
    }
}

/// Every EC2 instance state, for a lookup that must see ended instances too.
const ALL_STATES: [&str; 6] = [
    "pending",
    "running",
    "stopping",
    "stopped",
    "shutting-down",
    "terminated",
];

fn state_name(i: &Instance) -> Option<String> {
    i.state()
        .and_then(|s| s.name())
        .map(|n| n.as_str().to_string())
}

/// An instance shutting down, terminated or unknown is gone; any other state is paid for.
fn state_named(name: Option<&str>) -> InstanceState {
    match name {
        None | Some("terminated" | "shutting-down") => InstanceState::Gone,
        Some(_) => InstanceState::Live,
    }
}

/// What the controller records of an instance it finds rather than launches.
fn launched(i: &Instance) -> Launched {
    let spot = i.instance_lifecycle().is_some_and(|l| l.as_str() == "spot");
    let zone = i
        .placement()
        .and_then(|p| p.availability_zone())
        .unwrap_or_default()
        .to_string();
    let mut security_groups: Vec<String> = i
        .security_groups()
        .iter()
        .filter_map(|g| g.group_id().map(str::to_string))
        .collect();
    security_groups.sort();
    Launched {
        provider_id: provider_id(&zone, i.instance_id().unwrap_or_default()),
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        zone,
        capacity_type: if spot {
            CapacityType::Spot
        } else if i.capacity_reservation_id().is_some() {
            CapacityType::Reserved
        } else {
            CapacityType::OnDemand
        },
        capacity_reservation_id: i.capacity_reservation_id().map(str::to_string),
        // DescribeInstances does not say; the NodeClaim kept the labels from its launch.
        capacity_reservation_type: None,
        capacity_reservation_interruptible: None,
        image_id: i.image_id().map(str::to_string),
        subnet_id: i.subnet_id().map(str::to_string),
        security_groups,
    }
}

impl AwsCloud {
    /// Every page: EC2 pages DescribeInstances (moto after 100 results), and an instance
    /// missed here reads as "gone" to the garbage collector, which would delete its NodeClaim.
    async fn describe(&self, filters: Vec<Filter>) -> Result<Vec<Instance>, CloudError> {
        let mut pages = self
            .ec2
            .describe_instances()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        let mut instances = Vec::new();
        while let Some(page) = pages.next().await {
            // Metered per page: each is one call against EC2's rate limit.
            let page = metered(
                &self.metrics,
                "ec2",
                "DescribeInstances",
                std::future::ready(page),
            )
            .await?;
            instances.extend(
                page.reservations()
                    .iter()
                    .flat_map(|r| r.instances())
                    .cloned(),
            );
        }
        Ok(instances)
    }

    pub(super) async fn find_launched_for(
        &self,
        claim: &str,
    ) -> Result<Option<(Launched, InstanceState)>, CloudError> {
        // Every state: EC2 lists an ended instance for about an hour, and a NodeClaim whose
        // instance ended must not get a second one.
        let mut filters = owned_instance_filters(&self.cluster.name, &ALL_STATES);
        filters.push(
            Filter::builder()
                .name(format!("tag:{}", labels::NODECLAIM_TAG))
                .values(claim)
                .build(),
        );
        let found = self.describe(filters).await?;
        let with_state = |i: &Instance| (launched(i), state_named(state_name(i).as_deref()));
        Ok(found
            .iter()
            .map(with_state)
            .min_by_key(|(_, state)| *state != InstanceState::Live))
    }

    pub(super) async fn state_of(&self, provider_id: &str) -> Result<InstanceState, CloudError> {
        let id = instance_id(provider_id).ok_or_else(|| not_ours(provider_id))?;
        let out = metered(
            &self.metrics,
            "ec2",
            "DescribeInstances",
            self.ec2.describe_instances().instance_ids(id).send(),
        )
        .await;
        let state = match out {
            Ok(out) => out
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .find_map(state_name),
            Err(e) if e.is(codes::INSTANCE_UNKNOWN) => None,
            Err(e) => return Err(e),
        };
        Ok(state_named(state.as_deref()))
    }

    pub(super) async fn terminate_all(&self, provider_ids: &[String]) -> Result<(), CloudError> {
        let ids = provider_ids
            .iter()
            .map(|p| {
                instance_id(p)
                    .map(str::to_string)
                    .ok_or_else(|| not_ours(p))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ids.is_empty() {
            return Ok(());
        }
        let out = metered(
            &self.metrics,
            "ec2",
            "TerminateInstances",
            self.ec2
                .terminate_instances()
                .set_instance_ids(Some(ids))
                .send(),
        )
        .await;
        match out {
            Ok(_) => Ok(()),
            Err(e) if e.is(codes::INSTANCE_UNKNOWN) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn owned(&self) -> Result<Vec<OwnedInstance>, CloudError> {
        let filters = owned_instance_filters(
            &self.cluster.name,
            &["pending", "running", "stopping", "stopped"],
        );
        Ok(self
            .describe(filters)
            .await?
            .iter()
            .filter_map(|i| {
                let zone = i
                    .placement()
                    .and_then(|p| p.availability_zone())
                    .unwrap_or_default();
                Some(OwnedInstance {
                    provider_id: provider_id(zone, i.instance_id()?),
                    launched_at: i
                        .launch_time()
                        .and_then(|t| Timestamp::from_second(t.secs()).ok())
                        .unwrap_or_else(Timestamp::now),
                    nodeclaim: i
                        .tags()
                        .iter()
                        .find(|t| t.key() == Some(labels::NODECLAIM_TAG))
                        .and_then(|t| t.value())
                        .map(str::to_string),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_name_the_instance() {
        let id = provider_id("us-east-1a", "i-0123456789abcdef0");
        assert_eq!(id, "aws:///us-east-1a/i-0123456789abcdef0");
        assert_eq!(instance_id(&id), Some("i-0123456789abcdef0"));
        assert_eq!(instance_id("kwok://node-1"), None);
    }
}
