//! Well-known label, annotation, taint and finalizer names of the Karpenter v1 API.

pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// The capacity reservation a `reserved` node was launched into.
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";

pub const CAPACITY_SPOT: &str = "spot";
pub const CAPACITY_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_RESERVED: &str = "reserved";

/// Annotation (node or pod) that blocks voluntary disruption: `"true"` or a duration.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// v1beta1-era annotations that `do-not-disrupt` replaced.
pub const LEGACY_DO_NOT_EVICT: &str = "karpenter.sh/do-not-evict";
pub const LEGACY_DO_NOT_CONSOLIDATE: &str = "karpenter.sh/do-not-consolidate";

pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
