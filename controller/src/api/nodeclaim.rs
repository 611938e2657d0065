//! `karpenter.sh/v1` NodeClaim: one requested node, its launch constraints and its lifecycle.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::duration::{KubeDuration, NillableDuration};
use super::quantity::Quantity;
use super::requirements::NodeSelectorRequirementWithMinValues;
use super::schema;
use super::taint::Taint;

/// Points a NodePool or NodeClaim at its cloud-specific node class (here an EC2NodeClass).
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClassReference {
    #[x_kube(validation = Rule::new("self != ''").message("nodeClassRef.group may not be empty"))]
    #[schemars(length(max = 253))]
    pub group: String,
    #[x_kube(validation = Rule::new("self != ''").message("nodeClassRef.kind may not be empty"))]
    #[schemars(length(max = 253))]
    pub kind: String,
    #[x_kube(validation = Rule::new("self != ''").message("nodeClassRef.name may not be empty"))]
    #[schemars(length(max = 253))]
    pub name: String,
}

impl NodeClassReference {
    /// A reference to the EC2NodeClass `name`.
    pub fn ec2(name: &str) -> Self {
        NodeClassReference {
            group: super::AWS_GROUP.to_string(),
            kind: "EC2NodeClass".to_string(),
            name: name.to_string(),
        }
    }
}

/// Resources a NodeClaim asks for (the sum of its pods' requests plus DaemonSet overhead).
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

impl ResourceRequirements {
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

pub fn default_expire_after() -> NillableDuration {
    NillableDuration::After(std::time::Duration::from_secs(720 * 3600))
}

#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    status = "NodeClaimStatus",
    shortname = "nc",
    category = "karpenter",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    cel
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self == oldSelf").message("spec is immutable"))]
pub struct NodeClaimSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints the node starts with and that something else removes; not counted against pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    #[x_kube(validation = Rule::new("size(self) <= 100").message("at most 100 requirements"))]
    #[schemars(extend("maxItems" = 100))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    pub node_class_ref: NodeClassReference,
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<KubeDuration>,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// The last time a pod was bound to, or left, this node; drives `consolidateAfter`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
    /// `Launched`, `Registered`, `Initialized` → `Ready`; also `Consolidatable`, `Drifted`,
    /// `Drained`, `VolumesDetached`, `InstanceTerminating`, `DisruptionReason`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions_reason_optional")]
    pub conditions: Vec<Condition>,
}

/// The instance a provider ID names: its last path segment (`aws:///<zone>/<instance id>`),
/// which stays the same however the zone part was written.
pub fn instance_key(provider_id: &str) -> &str {
    provider_id.rsplit('/').next().unwrap_or(provider_id)
}
