//! `karpenter.k8s.aws/v1` EC2NodeClass: how nodes are launched on EC2 (AMIs, subnets, security
//! groups, IAM, kubelet settings, disks, IMDS).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::quantity::Quantity;
use super::schema;

/// Alias families, lower-case, as they appear before the `@` in `alias`.
pub const ALIAS_FAMILIES: [&str; 6] = [
    "al2",
    "al2023",
    "bottlerocket",
    "windows2019",
    "windows2022",
    "windows2025",
];

#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    status = "EC2NodeClassStatus",
    shortname = "ec2nc",
    category = "karpenter",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Role","type":"string","jsonPath":".spec.role","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    cel
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.role) != has(self.instanceProfile)")
        .message("must specify exactly one of ['role', 'instanceProfile']"),
    validation = Rule::new("self.amiSelectorTerms.exists(t, has(t.alias)) || has(self.amiFamily)")
        .message("amiFamily is required when amiSelectorTerms has no alias"),
    validation = Rule::new("!has(self.amiFamily) || self.amiFamily == 'Custom' || !self.amiSelectorTerms.exists(t, has(t.alias) && t.alias.contains('@')) || self.amiSelectorTerms.exists(t, has(t.alias) && t.alias.split('@')[0].lowerAscii() == self.amiFamily.lowerAscii())")
        .message("amiFamily must match the family of the alias (e.g. AL2023 with al2023@latest)"),
)]
pub struct EC2NodeClassSpec {
    #[x_kube(
        validation = Rule::new("size(self) >= 1 && size(self) <= 30").message("between 1 and 30 subnetSelectorTerms are required"),
    )]
    #[schemars(extend("maxItems" = 30))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    #[x_kube(
        validation = Rule::new("size(self) >= 1 && size(self) <= 30").message("between 1 and 30 securityGroupSelectorTerms are required"),
    )]
    #[schemars(extend("maxItems" = 30))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    #[x_kube(
        validation = Rule::new("size(self) >= 1 && size(self) <= 30").message("between 1 and 30 amiSelectorTerms are required"),
        validation = Rule::new("!self.exists(t, has(t.alias)) || size(self) == 1")
            .message("'alias' is mutually exclusive: a term with an alias must be the only amiSelectorTerm"),
    )]
    #[schemars(extend("maxItems" = 30))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::unset_or::<AmiFamily>")]
    pub ami_family: Option<AmiFamily>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 30))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// IAM role for the nodes; Karpenter creates and manages an instance profile for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("role cannot be empty"))]
    pub role: Option<String>,
    /// An existing instance profile to use instead of `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self != ''").message("instanceProfile cannot be empty"))]
    pub instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(
        validation = Rule::new("self.all(k, k != '')").message("empty tag keys are not supported"),
        validation = Rule::new("self.all(k, k != 'eks:eks-cluster-name')").message("tag key 'eks:eks-cluster-name' is reserved"),
        validation = Rule::new("self.all(k, !k.startsWith('kubernetes.io/cluster/'))").message("tag keys starting with 'kubernetes.io/cluster/' are reserved"),
        validation = Rule::new("self.all(k, !(k in ['karpenter.sh/nodepool', 'karpenter.sh/nodeclaim', 'karpenter.sh/managed-by', 'karpenter.k8s.aws/ec2nodeclass']))")
            .message("tag keys karpenter.sh/nodepool, karpenter.sh/nodeclaim, karpenter.sh/managed-by and karpenter.k8s.aws/ec2nodeclass are reserved: Karpenter sets them"),
    )]
    #[schemars(extend("maxProperties" = 50))]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(
        validation = Rule::new("size(self) <= 50").message("at most 50 blockDeviceMappings"),
        validation = Rule::new("self.filter(m, has(m.rootVolume) && m.rootVolume).size() <= 1").message("at most one blockDeviceMapping may be the rootVolume"),
    )]
    #[schemars(extend("maxItems" = 50))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    #[serde(
        default,
        rename = "associatePublicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub associate_public_ip_address: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::unset_or::<InstanceStorePolicy>")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Launches into this placement group (cluster, partition or spread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// The launch's network interfaces, e.g. EFA-only interfaces on extra network cards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(
        validation = Rule::new("self.size() == 0 || self.exists(x, x.deviceIndex == 0 && x.networkCardIndex == 0 && x.interfaceType == 'interface')")
            .message("networkInterfaces must include the primary interface: deviceIndex 0, networkCardIndex 0, interfaceType 'interface'"),
        validation = Rule::new("self.all(x, self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex).size() == 1 && (x.interfaceType != 'efa-only' || self.filter(y, x.networkCardIndex == y.networkCardIndex && y.interfaceType == 'efa-only').size() == 1))")
            .message("networkInterfaces may not repeat a (networkCardIndex, deviceIndex) pair and may have at most one efa-only interface per network card"),
    )]
    #[schemars(extend("maxItems" = 150))]
    pub network_interfaces: Vec<NetworkInterface>,
    /// IPv4 prefixes (/28) to assign to the primary interface; 0 turns prefix delegation off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclave_options: Option<EnclaveOptions>,
    /// An EC2 Fleet context (reserved capacity pools shared through AWS RAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// A placement group, by name or by id.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.name) || has(self.id)").message("placementGroupSelector needs 'name' or 'id'"),
    validation = Rule::new("!(has(self.name) && has(self.id))").message("placementGroupSelector takes 'name' or 'id', not both"),
)]
pub struct PlacementGroupSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterfaceType {
    #[serde(rename = "interface")]
    Interface,
    /// EFA traffic only, no IP address (saves addresses on multi-card instances).
    #[serde(rename = "efa-only")]
    EfaOnly,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkInterface {
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    #[schemars(range(min = 0))]
    pub device_index: i32,
    pub interface_type: InterfaceType,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Toggle {
    Enabled,
    Disabled,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CpuOptions {
    /// Nested virtualization on the instance (supported types only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::unset_or::<Toggle>")]
    pub nested_virtualization: Option<Toggle>,
}

/// Connection-tracking idle timeouts of the primary interface, in seconds.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)")
    .message("connectionTracking needs at least one of tcpEstablishedTimeout, udpStreamTimeout or udpTimeout"))]
pub struct ConnectionTracking {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// AWS Nitro Enclaves on the instance.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnclaveOptions {
    pub enabled: bool,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmiFamily {
    AL2,
    AL2023,
    Bottlerocket,
    Custom,
    Windows2019,
    Windows2022,
    Windows2025,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceStorePolicy {
    RAID0,
}

const TAG_VALUES_RULE: &str = "self.all(k, k != '' && self[k] != '')";
const TAG_VALUES_MESSAGE: &str = "empty tag keys or values aren't supported";

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.tags) || has(self.id)").message("a subnet selector term needs 'tags' or 'id'"),
    validation = Rule::new("!(has(self.id) && has(self.tags))").message("'id' is mutually exclusive with 'tags' in a subnet selector term"),
)]
pub struct SubnetSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(TAG_VALUES_RULE).message(TAG_VALUES_MESSAGE))]
    #[schemars(extend("maxProperties" = 20))]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^subnet-[0-9a-z]+$')").message("id must look like subnet-0123456789abcdef0"))]
    #[schemars(length(max = 64))]
    pub id: Option<String>,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.tags) || has(self.id) || has(self.name)").message("a security group selector term needs 'tags', 'id' or 'name'"),
    validation = Rule::new("!has(self.id) || !(has(self.tags) || has(self.name))").message("'id' is mutually exclusive with 'tags' and 'name' in a security group selector term"),
)]
pub struct SecurityGroupSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(TAG_VALUES_RULE).message(TAG_VALUES_MESSAGE))]
    #[schemars(extend("maxProperties" = 20))]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^sg-[0-9a-z]+$')").message("id must look like sg-0123456789abcdef0"))]
    #[schemars(length(max = 64))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.alias) || has(self.tags) || has(self.id) || has(self.name) || has(self.owner) || has(self.ssmParameter)")
        .message("an amiSelectorTerm needs one of 'alias', 'tags', 'id', 'name', 'owner' or 'ssmParameter'"),
    validation = Rule::new("!has(self.alias) || !(has(self.tags) || has(self.id) || has(self.name) || has(self.owner) || has(self.ssmParameter))")
        .message("'alias' is mutually exclusive with the other fields of an amiSelectorTerm"),
    validation = Rule::new("!has(self.id) || !(has(self.tags) || has(self.name) || has(self.owner))")
        .message("'id' is mutually exclusive with 'tags', 'name' and 'owner' in an amiSelectorTerm"),
)]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest` or `al2023@v20240807`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("self.matches('^[a-zA-Z0-9]+@[a-zA-Z0-9.-]+$')")
            .message("'alias' is improperly formatted, must match the format 'family@version' (e.g. al2023@latest)"),
        validation = Rule::new("!self.contains('@') || self.split('@')[0].lowerAscii() in ['al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025']")
            .message("family is not supported, must be one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025"),
        // Windows AMIs are published only as the newest per Kubernetes version (EKS's SSM
        // parameters have no per-release path for them), so there is no version to pin.
        validation = Rule::new("!self.contains('@') || !(self.split('@')[0].lowerAscii() in ['windows2019', 'windows2022', 'windows2025']) || self.split('@')[1] == 'latest'")
            .message("windows families may only specify version 'latest' (e.g. windows2022@latest)"),
    )]
    #[schemars(length(max = 64))]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(TAG_VALUES_RULE).message(TAG_VALUES_MESSAGE))]
    #[schemars(extend("maxProperties" = 20))]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^ami-[0-9a-z]+$')").message("id must look like ami-0123456789abcdef0"))]
    #[schemars(length(max = 64))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.tags) || has(self.id) || has(self.instanceMatchCriteria)")
        .message("a capacity reservation selector term needs 'tags', 'id' or 'instanceMatchCriteria'"),
    validation = Rule::new("!has(self.id) || !(has(self.tags) || has(self.ownerID) || has(self.instanceMatchCriteria))")
        .message("'id' is mutually exclusive with 'tags', 'ownerID' and 'instanceMatchCriteria' in a capacity reservation selector term"),
)]
pub struct CapacityReservationSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub id: Option<String>,
    #[serde(default, rename = "ownerID", skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// Select only `open` or only `targeted` reservations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::unset_or::<InstanceMatchCriteria>")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// Which launches may use a capacity reservation: any matching one, or only those naming it.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    Open,
    Targeted,
}

impl InstanceMatchCriteria {
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceMatchCriteria::Open => "open",
            InstanceMatchCriteria::Targeted => "targeted",
        }
    }
}

/// The kubelet settings Karpenter passes to nodes (and accounts for when computing allocatable).
///
/// Fields jointer does not type are kept (`x-kubernetes-preserve-unknown-fields`, as upstream's
/// schema) and passed to the kubelet's configuration as written.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
#[x_kube(
    validation = Rule::new("!has(self.imageGCHighThresholdPercent) || !has(self.imageGCLowThresholdPercent) || self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent")
        .message("imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"),
    validation = Rule::new("!has(self.evictionSoft) || (has(self.evictionSoftGracePeriod) && self.evictionSoft.all(k, k in self.evictionSoftGracePeriod))")
        .message("every evictionSoft signal needs a matching evictionSoftGracePeriod"),
)]
pub struct KubeletConfiguration {
    #[serde(default, rename = "clusterDNS", skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("maxPods may not be negative"))]
    pub max_pods: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("podsPerCore may not be negative"))]
    pub pods_per_core: Option<i32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pid'])").message("systemReserved keys must be cpu, memory, ephemeral-storage or pid"))]
    #[schemars(extend("maxProperties" = 4))]
    pub system_reserved: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pid'])").message("kubeReserved keys must be cpu, memory, ephemeral-storage or pid"))]
    #[schemars(extend("maxProperties" = 4))]
    pub kube_reserved: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 10))]
    pub eviction_soft: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 10))]
    pub eviction_soft_grace_period: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    #[serde(
        default,
        rename = "imageGCHighThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message("must be between 0 and 100"))]
    pub image_gc_high_threshold_percent: Option<i32>,
    #[serde(
        default,
        rename = "imageGCLowThresholdPercent",
        skip_serializing_if = "Option::is_none"
    )]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 100").message("must be between 0 and 100"))]
    pub image_gc_low_threshold_percent: Option<i32>,
    #[serde(
        default,
        rename = "cpuCFSQuota",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
    /// Every other KubeletConfiguration field, as written.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockDeviceMapping {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.snapshotID) || has(self.volumeSize)").message("an ebs block device needs snapshotID or volumeSize"),
    validation = Rule::new("!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')")
        .message("volumeInitializationRate needs snapshotID: only volumes restored from a snapshot are initialised"),
)]
pub struct BlockDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Up to 64 TiB, written with a binary or decimal suffix (`100Gi`, `1T`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::volume_size")]
    pub volume_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::unset_or::<VolumeType>")]
    pub volume_type: Option<VolumeType>,
    /// MiB/s at which a volume restored from a snapshot is initialised (EBS provisioned rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    Standard,
    Io1,
    Io2,
    Gp2,
    Sc1,
    St1,
    Gp3,
}

impl VolumeType {
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeType::Standard => "standard",
            VolumeType::Io1 => "io1",
            VolumeType::Io2 => "io2",
            VolumeType::Gp2 => "gp2",
            VolumeType::Sc1 => "sc1",
            VolumeType::St1 => "st1",
            VolumeType::Gp3 => "gp3",
        }
    }
}

fn enabled() -> String {
    "enabled".into()
}
fn disabled() -> String {
    "disabled".into()
}
fn required() -> String {
    "required".into()
}
fn hop_limit() -> i64 {
    1
}

/// Instance metadata service settings; the defaults (IMDSv2 required, hop limit 1) keep pods
/// from reaching the node's credentials.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetadataOptions {
    #[serde(default = "enabled")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub http_endpoint: String,
    #[serde(default = "disabled", rename = "httpProtocolIPv6")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub http_protocol_ipv6: String,
    #[serde(default = "hop_limit")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 64").message("httpPutResponseHopLimit must be between 1 and 64"))]
    pub http_put_response_hop_limit: i64,
    #[serde(default = "required")]
    #[schemars(extend("enum" = ["required", "optional"]))]
    pub http_tokens: String,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            http_endpoint: enabled(),
            http_protocol_ipv6: disabled(),
            http_put_response_hop_limit: hop_limit(),
            http_tokens: required(),
        }
    }
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResolvedSubnet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<ResolvedSecurityGroup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<ResolvedAmi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// The active capacity reservations `capacityReservationSelectorTerms` select.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<ResolvedCapacityReservation>,
    /// `SubnetsReady`, `SecurityGroupsReady`, `AMIsReady`, `InstanceProfileReady`,
    /// `CapacityReservationsReady` → `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    pub id: String,
    pub zone: String,
    #[serde(default, rename = "zoneID", skip_serializing_if = "Option::is_none")]
    pub zone_id: Option<String>,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedCapacityReservation {
    pub id: String,
    pub availability_zone: String,
    pub instance_type: String,
    #[serde(rename = "ownerID")]
    pub owner_id: String,
    /// `open` (any matching launch may use it) or `targeted` (only launches naming it).
    #[schemars(extend("enum" = ["open", "targeted"]))]
    pub instance_match_criteria: String,
    /// `default` or `capacity-block`.
    #[serde(default = "default_reservation_type")]
    #[schemars(extend("enum" = ["default", "capacity-block"]))]
    pub reservation_type: String,
    /// `active` or `expiring`.
    #[serde(default = "active")]
    #[schemars(extend("enum" = ["active", "expiring"]))]
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<String>,
    /// An interruptible reservation: its owner can reclaim it (the node is then interrupted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
}

fn default_reservation_type() -> String {
    "default".into()
}
fn active() -> String {
    "active".into()
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["id", "requirements"]))]
pub struct ResolvedAmi {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Status is written by the controller, so it carries no validation rules (and no CEL
    /// cost): plain node selector requirements. Always written (the architecture at least);
    /// read leniently.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>,
    /// The image is deprecated: still used when selected, but no longer the newest choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
}
