//! The Karpenter v1 API versions jointer reads, writes and converts to, named once. The
//! controller crate exports the API groups but not these versioned strings.

/// NodePool and NodeClaim.
pub const NODEPOOL_V1: &str = "karpenter.sh/v1";
/// EC2NodeClass.
pub const NODECLASS_V1: &str = "karpenter.k8s.aws/v1";
/// NodeOverlay (upstream serves it only as v1alpha1).
pub const NODEOVERLAY_V1ALPHA1: &str = "karpenter.sh/v1alpha1";
