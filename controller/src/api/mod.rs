//! The Karpenter v1 API: `karpenter.sh/v1` NodePool and NodeClaim, `karpenter.k8s.aws/v1`
//! EC2NodeClass, `karpenter.sh/v1alpha1` NodeOverlay, spec and status, with upstream defaults;
//! and `autoscaling.x-k8s.io/v1beta1` CapacityBuffer, which Karpenter v1.15 honours.
//!
//! Validation rules are written once, as CEL on the types (`#[x_kube(validation = ...)]`). They
//! land in the generated CRDs, where the API server enforces them, and [`validation`] evaluates
//! the very same rules offline, so `jointer render` and the cluster always agree.

pub mod capacitybuffer;
pub mod conditions;
pub mod duration;
pub mod ec2nodeclass;
pub mod labels;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod pod;
pub mod quantity;
pub mod requirements;
pub mod schema;
pub mod structural;
pub mod taint;
pub mod validation;

pub use capacitybuffer::{CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus};
pub use duration::{KubeDuration, NillableDuration};
pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus, OverlayRequirement};
pub use nodepool::{NodePool, NodePoolSpec, NodePoolStatus};
pub use quantity::Quantity;
pub use requirements::{NodeSelectorRequirementWithMinValues, Operator};
pub use taint::{Taint, TaintEffect};
pub use validation::{FieldError, Validate};

/// API group of NodePool, NodeClaim and NodeOverlay.
pub const CORE_GROUP: &str = "karpenter.sh";
/// API group of EC2NodeClass.
pub const AWS_GROUP: &str = "karpenter.k8s.aws";
/// API group of CapacityBuffer (shared with Cluster Autoscaler).
pub const AUTOSCALING_GROUP: &str = "autoscaling.x-k8s.io";
