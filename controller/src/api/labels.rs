//! Well-known label, annotation, taint, finalizer and AWS tag names of the Karpenter v1 API:
//! the one home of every such name in the workspace (the CLI uses these too).

pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
/// The capacity reservation a `reserved` node was launched into.
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// On a NodeClaim made with fewer distinct values than a `minValues` asked
/// (`MIN_VALUES_POLICY=BestEffort`).
pub const MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
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
/// Annotation (Node or NodeClaim) `"true"`: node repair leaves the node alone, even unhealthy
/// (do-not-disrupt does not stop a repair).
pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
/// v1beta1-era annotations that `do-not-disrupt` replaced.
pub const LEGACY_DO_NOT_EVICT: &str = "karpenter.sh/do-not-evict";
pub const LEGACY_DO_NOT_CONSOLIDATE: &str = "karpenter.sh/do-not-consolidate";

pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// Finalizer on EC2NodeClasses: the instance profiles and launch templates made for a class
/// go before the class does.
pub const NODECLASS_FINALIZER: &str = "karpenter.k8s.aws/termination";

/// Taint on a node being disrupted, so nothing new lands on it while it drains.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// Taint a node boots with (from its user data) until the controller has registered it.
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
/// Put on every new Node by the API server's admission and kept by the node lifecycle
/// controller while the node is not Ready (`NoSchedule`), or unreachable.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// NodeClaim annotations upstream records the rendered template hashes in (drift).
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
pub const NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
/// NodeClaim annotations with where it was launched, to tell whether its class still selects it.
pub const LAUNCHED_SUBNET: &str = "jointer.dev/subnet";
pub const LAUNCHED_SECURITY_GROUPS: &str = "jointer.dev/security-groups";
/// The annotation upstream records a deleting NodeClaim's drain deadline in (RFC 3339).
pub const TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";

/// Static pod annotation: a mirror pod cannot be evicted.
pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";

// --- AWS tags ------------------------------------------------------------------------------
// What the controller writes on everything it launches, what its IAM policy is scoped by
// (the CLI's `permissions`) and what garbage collection and the CLI's teardown sweep look
// for. Written once here so the three can never disagree.

/// Tag naming the NodeClaim an instance was launched for: how a restarted controller finds
/// the instance of a launch whose result it never recorded.
pub const NODECLAIM_TAG: &str = "karpenter.sh/nodeclaim";
/// EKS's own cluster tag.
pub const EKS_CLUSTER_TAG: &str = "eks:eks-cluster-name";

/// `kubernetes.io/cluster/<cluster>`, valued `owned` on what the cluster owns.
pub fn cluster_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

/// The tags that mark an AWS resource as made by the controller for `cluster` (before the
/// class's own and per-resource tags are added).
pub fn owned_tags(cluster: &str) -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([
        (cluster_tag(cluster), "owned".to_string()),
        (EKS_CLUSTER_TAG.to_string(), cluster.to_string()),
    ])
}
