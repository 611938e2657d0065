//! `karpenter.sh/v1` NodePool: a template for NodeClaims plus limits and disruption policy.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::duration::{KubeDuration, NillableDuration};
use super::nodeclaim::{default_expire_after, NodeClassReference};
use super::quantity::Quantity;
use super::requirements::NodeSelectorRequirementWithMinValues;
use super::schema;
use super::taint::Taint;

#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    status = "NodePoolStatus",
    shortname = "np",
    category = "karpenter",
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name":"Nodes","type":"string","jsonPath":".status.resources.nodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    ),
    cel
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("has(self.replicas) == has(oldSelf.replicas)")
        .message("a NodePool cannot switch between static (replicas set) and dynamic (replicas unset) provisioning: create a new NodePool instead"),
    validation = Rule::new("!has(self.replicas) || !has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits)")
        .message("a static NodePool (replicas set) supports only limits.nodes"),
    validation = Rule::new("!has(self.replicas) || !has(self.weight)")
        .message("weight is not supported on a static NodePool (replicas set)"),
)]
pub struct NodePoolSpec {
    pub template: NodeClaimTemplate,
    // Upstream's schema defaults only consolidateAfter at this level; the fields default
    // themselves.
    #[serde(default)]
    #[schemars(extend("default" = {"consolidateAfter": "0s"}))]
    pub disruption: Disruption,
    /// Upper bounds on the total resources of this pool's nodes (cpu, memory, nodes, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
    /// Higher weights are tried first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100").message("weight must be between 1 and 100"))]
    pub weight: Option<i32>,
    /// A static pool: exactly this many nodes, whatever the pods (Karpenter v1.6+).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("replicas may not be negative"))]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(
        validation = Rule::new("size(self) <= 100").message("at most 100 labels"),
        validation = Rule::new("self.all(k, k == 'karpenter.sh/capacity-type' || !k.matches('^([^/]+[.])?karpenter[.]sh/'))")
            .message("label domain \"karpenter.sh\" is restricted (of its labels only karpenter.sh/capacity-type may be set)"),
        validation = Rule::new("self.all(k, k != 'kubernetes.io/hostname')")
            .message("label \"kubernetes.io/hostname\" is restricted: the kubelet sets it"),
    )]
    #[schemars(extend("maxProperties" = 100))]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl NodeClaimTemplateMetadata {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "NodeClaimTemplateMetadata::is_empty")]
    pub metadata: NodeClaimTemplateMetadata,
    pub spec: NodeClaimTemplateSpec,
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    #[x_kube(
        validation = Rule::new("size(self) <= 100").message("at most 100 requirements"),
        validation = Rule::new("self.all(r, r.key != 'karpenter.sh/nodepool')")
            .message("label \"karpenter.sh/nodepool\" is restricted: Karpenter sets it"),
    )]
    #[schemars(extend("maxItems" = 100))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    #[x_kube(
        validation = Rule::new("self.group == oldSelf.group").message("nodeClassRef.group is immutable"),
        validation = Rule::new("self.kind == oldSelf.kind").message("nodeClassRef.kind is immutable"),
    )]
    pub node_class_ref: NodeClassReference,
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<KubeDuration>,
}

#[derive(
    Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    /// Consolidate only moves whose savings are worth their disruption (Karpenter v1.15).
    Balanced,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
    /// Node repair: a node whose conditions stayed bad too long.
    Unhealthy,
}

fn default_consolidate_after() -> NillableDuration {
    NillableDuration::After(std::time::Duration::ZERO)
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget {
        nodes: default_budget_nodes(),
        reasons: None,
        schedule: None,
        duration: None,
    }]
}

fn default_budget_nodes() -> String {
    "10%".to_string()
}

#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disruption {
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    #[serde(default = "default_consolidate_after")]
    pub consolidate_after: NillableDuration,
    #[serde(default = "default_budgets")]
    #[x_kube(validation = Rule::new("size(self) <= 50").message("at most 50 budgets"))]
    #[schemars(extend("maxItems" = 50))]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidation_policy: ConsolidationPolicy::default(),
            consolidate_after: default_consolidate_after(),
            budgets: default_budgets(),
        }
    }
}

/// How many of a pool's nodes may be disrupted at once, optionally only for some reasons and
/// only inside a recurring window (`schedule` in cron syntax, UTC, lasting `duration`).
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["nodes"]))]
#[x_kube(
    validation = Rule::new("has(self.schedule) == has(self.duration)")
        .message("'schedule' must be set with 'duration' (and 'duration' only with 'schedule')"),
)]
pub struct Budget {
    #[serde(default = "default_budget_nodes")]
    #[x_kube(validation = Rule::new("self.matches('^((100|[0-9]{1,2})%|[0-9]+)$')")
        .message("nodes must be a whole number (e.g. 5) or a percentage from 0% to 100% (e.g. 10%)"))]
    #[schemars(length(max = 10))]
    pub nodes: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<DisruptionReason>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|[^ ]+ [^ ]+ [^ ]+ [^ ]+ [^ ]+)$')")
        .message("schedule must be a cron expression of five fields (e.g. '0 9 * * mon-fri') or a macro such as @daily"))]
    #[schemars(length(max = 100))]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<KubeDuration>,
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// The EC2NodeClass generation the pool's readiness was judged on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// `ValidationSucceeded`, `NodeClassReady` → `Ready`; `NodeRegistrationHealthy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,
}
