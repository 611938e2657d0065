//! Where nodes come from. Controllers see a cloud only through [`CloudProvider`]; `aws`
//! launches real EC2 instances, `sim` is the in-process cloud behind `jointer simulate` and the
//! controllers' tests (it records launches and terminations and fails on request).

#[cfg(feature = "aws")]
pub mod aws;
pub mod class_types;
pub mod revalidated;
pub mod sim;
pub mod unavailable;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use crate::api::ec2nodeclass::{
    EC2NodeClass, ResolvedAmi, ResolvedCapacityReservation, ResolvedSecurityGroup, ResolvedSubnet,
};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::core::nodeclass::Found;
use crate::core::overlay::PoolOverlays;
use crate::core::scheduling::{CapacityType, InstanceType};

/// An instance launched (or found) for a NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    /// The Node's `spec.providerID` once it registers (`aws:///<zone>/<instance id>`).
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub image_id: Option<String>,
    pub subnet_id: Option<String>,
    /// Sorted.
    pub security_groups: Vec<String>,
    /// The capacity reservation it was launched into (capacity type `reserved`).
    pub capacity_reservation_id: Option<String>,
    /// That reservation's type (`default`, `capacity-block`) and whether its owner may
    /// reclaim it, where known.
    pub capacity_reservation_type: Option<String>,
    pub capacity_reservation_interruptible: Option<bool>,
}

impl Launched {
    /// The well-known labels of a node of `t` bought this way (for the NodeClaim and, at
    /// registration, the Node): `t`'s single-valued requirements, then where and how it runs.
    pub fn node_labels(&self, t: &InstanceType) -> BTreeMap<String, String> {
        let mut out: BTreeMap<String, String> = t
            .requirements
            .iter()
            .filter_map(|(k, r)| Some((k.clone(), r.single_value()?.clone())))
            .collect();
        out.insert(labels::ZONE.into(), self.zone.clone());
        out.insert(labels::CAPACITY_TYPE.into(), self.capacity_type.to_string());
        out.insert(labels::INSTANCE_TYPE.into(), self.instance_type.clone());
        if let Some(id) = &self.capacity_reservation_id {
            out.insert(labels::CAPACITY_RESERVATION_ID.into(), id.clone());
        }
        if let Some(kind) = &self.capacity_reservation_type {
            out.insert(labels::CAPACITY_RESERVATION_TYPE.into(), kind.clone());
        }
        if let Some(interruptible) = self.capacity_reservation_interruptible {
            out.insert(
                labels::CAPACITY_RESERVATION_INTERRUPTIBLE.into(),
                interruptible.to_string(),
            );
        }
        out
    }
}

/// An instance the cloud holds for the cluster's NodePools (what garbage collection audits).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedInstance {
    pub provider_id: String,
    pub launched_at: Timestamp,
    /// The NodeClaim its `karpenter.sh/nodeclaim` tag names.
    pub nodeclaim: Option<String>,
}

/// Whether an instance still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    /// Pending, running, stopping or stopped: it exists and is paid for.
    Live,
    /// Shutting down or terminated, or unknown to the cloud: nothing left to wait for.
    Gone,
}

/// What an EC2NodeClass's selectors and role resolve to now, each part found or why not.
#[derive(Debug, Clone)]
pub struct Resolution {
    pub subnets: Found<Vec<ResolvedSubnet>>,
    pub security_groups: Found<Vec<ResolvedSecurityGroup>>,
    pub amis: Found<Vec<ResolvedAmi>>,
    pub instance_profile: Found<String>,
    pub capacity_reservations: Found<Vec<ResolvedCapacityReservation>>,
}

/// Why a cloud call did not do what was asked. Controllers branch on the kind (an Event
/// reason, a retry, a skipped offering); the message is for people.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CloudError {
    #[error("EC2NodeClass {class} is not ready: {why}")]
    ClassNotReady { class: String, why: String },
    #[error("{0}")]
    NoOffering(String),
    #[error("EC2 had no capacity for any of the {offered} offerings ({errors}); they are skipped for 3 minutes")]
    InsufficientCapacity { offered: usize, errors: String },
    #[error("{what} was not found")]
    NotFound { what: String },
    #[error("{service}:{operation} failed ({code}): {message}")]
    Api {
        service: &'static str,
        operation: &'static str,
        /// The service's error code (`UnauthorizedOperation`, `Throttling`, …), or what kind
        /// of failure it was when there is none (`timeout`, `dispatch`, `response`).
        code: String,
        message: String,
    },
}

impl CloudError {
    /// The NodeClaim condition and Event reason a failed launch is reported with (upstream's).
    pub fn reason(&self) -> &'static str {
        match self {
            CloudError::ClassNotReady { .. } => "NodeClassNotReady",
            CloudError::InsufficientCapacity { .. } => "InsufficientCapacity",
            CloudError::NoOffering(_) => "NoCompatibleOffering",
            CloudError::NotFound { .. } | CloudError::Api { .. } => "LaunchFailed",
        }
    }
}

/// An AMI's architecture as the node selector requirement a class's status lists it with.
pub(crate) fn arch_requirement(arch: &str) -> k8s_openapi::api::core::v1::NodeSelectorRequirement {
    k8s_openapi::api::core::v1::NodeSelectorRequirement {
        key: labels::ARCH.into(),
        operator: "In".into(),
        values: Some(vec![arch.into()]),
    }
}

/// The instance types of every Ready class, by class name.
pub type TypesOfClass = HashMap<String, Vec<Arc<InstanceType>>>;

/// A cloud the controllers launch nodes from.
///
/// Contracts every implementation keeps:
/// - `launch` starts at most one instance per call and tags it with the NodeClaim's name, so
///   `find_launched` finds it (live or ended) after a crash or a stale read lost the answer:
///   a NodeClaim never gets two.
/// - An offering that failed for lack of capacity (in `launch`, or marked by
///   `offering_unavailable`) is left out of `instance_types` for a while.
/// - `terminate` and `instance_state` treat an instance the cloud no longer knows as gone;
///   both are idempotent.
/// - Nothing here touches Kubernetes: the controllers own every write to the API server.
#[async_trait::async_trait]
pub trait CloudProvider: Send + Sync {
    /// The instance types (with offerings and prices) of each class that is Ready.
    async fn instance_types(
        &self,
        classes: &[Arc<EC2NodeClass>],
    ) -> Result<TypesOfClass, CloudError>;

    /// Launches one instance for `claim`, the cheapest its requirements and `class` allow once
    /// `overlays` (the NodeOverlays of the claim's NodePool) have priced the class's types,
    /// and says which of those types it became.
    async fn launch(
        &self,
        claim: &NodeClaim,
        class: &EC2NodeClass,
        overlays: &PoolOverlays,
    ) -> Result<(Launched, Arc<InstanceType>), CloudError>;

    /// The instance launched for the NodeClaim named `claim` and whether it still runs: the
    /// live one if there is one, else one that already ended (so a NodeClaim whose instance
    /// was terminated before its status recorded the launch is not launched again).
    async fn find_launched(
        &self,
        claim: &str,
    ) -> Result<Option<(Launched, InstanceState)>, CloudError>;

    async fn instance_state(&self, provider_id: &str) -> Result<InstanceState, CloudError>;

    async fn terminate(&self, provider_ids: &[String]) -> Result<(), CloudError>;

    /// Every live instance launched for the cluster's NodePools.
    async fn owned_instances(&self) -> Result<Vec<OwnedInstance>, CloudError>;

    /// The cloud took this capacity back (a spot interruption): do not buy it again soon.
    fn offering_unavailable(&self, instance_type: &str, zone: &str, capacity: CapacityType);

    /// Resolves the class's subnets, security groups, AMIs, instance profile and
    /// capacity reservations.
    async fn resolve(&self, class: &EC2NodeClass) -> Resolution;

    /// Removes what the cloud made for the class (instance profile, launch templates) once
    /// nothing uses it.
    async fn release(&self, class: &EC2NodeClass) -> Result<(), CloudError>;
}

/// A message from the interruption queue.
#[derive(Debug, Clone)]
pub struct QueueMessage {
    pub body: String,
    /// What acknowledges (deletes) it.
    pub receipt: String,
}

/// The queue EventBridge delivers spot interruptions, rebalance recommendations, scheduled
/// changes and state changes to (SQS on AWS).
#[async_trait::async_trait]
pub trait InterruptionQueue: Send + Sync {
    /// The next messages, waiting up to a long-poll period for some.
    async fn receive(&self) -> Result<Vec<QueueMessage>, CloudError>;
    /// Deletes handled messages (a batch of up to ten, as received).
    async fn acknowledge(&self, receipts: &[String]) -> Result<(), CloudError>;
}
