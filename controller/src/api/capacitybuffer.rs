//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer: spare capacity kept warm. A buffer names the
//! shape of one chunk (a PodTemplate, or the pod template of a scalable workload) and how many
//! chunks to keep room for; the provisioner treats the chunks as pending pods that are never
//! created, so nodes exist before the real pods arrive. The API is shared with Cluster
//! Autoscaler, which is why it lives outside Karpenter's groups and is namespaced.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::quantity::Quantity;

/// The only strategy there is: placeholder pods actively scale the cluster up.
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

/// The buffer resolved to a chunk shape and a number of chunks.
pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// The headroom exists: every chunk fits on capacity the cluster already has.
pub const PROVISIONING: &str = "Provisioning";

fn default_provisioning_strategy() -> String {
    ACTIVE_CAPACITY.to_string()
}

#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    namespaced,
    status = "CapacityBufferStatus",
    shortname = "cb",
    category = "autoscaling",
    printcolumn = r#"{"name":"Strategy","type":"string","jsonPath":".spec.provisioningStrategy"}"#,
    printcolumn = r#"{"name":"PodTemplate","type":"string","jsonPath":".status.podTemplateRef.name"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Provisioning","type":"string","jsonPath":".status.conditions[?(@.type==\"Provisioning\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    cel
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)")
        .message("a buffer with podTemplateRef needs replicas or limits to say how many chunks to keep"),
    validation = Rule::new("!(has(self.podTemplateRef) && has(self.scalableRef))")
        .message("set exactly one of podTemplateRef and scalableRef, not both"),
)]
pub struct CapacityBufferSpec {
    /// A PodTemplate in the buffer's namespace: the shape of one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A workload with a pod template (Deployment, ReplicaSet, StatefulSet): chunks are shaped
    /// like its pods, and `percentage` is of its replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// How many chunks; with `percentage` as well, the smaller of the two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("replicas must be 0 or more"))]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Chunks as a percentage of the scalableRef's replicas, rounded up to at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("percentage must be 0 or more"))]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// Caps the chunks' total requests (cpu, memory, …); alone, as many chunks as fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
    #[serde(default = "default_provisioning_strategy")]
    pub provisioning_strategy: String,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectRef {
    #[x_kube(validation = Rule::new("size(self) >= 1").message("name must not be empty"))]
    #[schemars(length(min = 1))]
    pub name: String,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// Empty for the core group; `apps` for Deployments, ReplicaSets and StatefulSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[x_kube(validation = Rule::new("size(self) >= 1").message("kind must not be empty"))]
    #[schemars(length(min = 1))]
    pub kind: String,
    #[x_kube(validation = Rule::new("size(self) >= 1").message("name must not be empty"))]
    #[schemars(length(min = 1))]
    pub name: String,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the chunks were resolved from (for a scalableRef, the workload's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// Chunks resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The generation of the PodTemplate (or workload) the chunks were shaped from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// `ReadyForProvisioning` (resolved) and `Provisioning` (the headroom exists now).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions_strict")]
    pub conditions: Vec<Condition>,
}
