//! `karpenter.sh/v1alpha1` NodeOverlay: changes what the scheduler believes about the instance
//! types it matches — their price (how users account for Savings Plans and reserved instances
//! EC2's list prices know nothing of) and extended resources their nodes will report.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::quantity::Quantity;
use super::requirements::Operator;

/// `ValidationSucceeded`: the overlay is well formed and conflicts with no other.
pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
/// Condition reasons upstream reports a rejected overlay with.
pub const REASON_CONFLICT: &str = "Conflict";
pub const REASON_RUNTIME_VALIDATION: &str = "RuntimeValidation";

#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    status = "NodeOverlayStatus",
    shortname = "overlays",
    category = "karpenter",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight","priority":1}"#,
    cel
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("!has(self.price) || !has(self.priceAdjustment)")
        .message("cannot set both 'price' and 'priceAdjustment': price replaces the price, priceAdjustment changes it"),
)]
pub struct NodeOverlaySpec {
    /// Which instance types (and which of their offerings) the overlay applies to: their
    /// labels, offering zone and capacity type, `karpenter.sh/nodepool`, and the labels of
    /// the NodePool's template.
    #[x_kube(validation = Rule::new("size(self) <= 100").message("at most 100 requirements"))]
    #[schemars(extend("maxItems" = 100))]
    pub requirements: Vec<OverlayRequirement>,
    /// A change to the price: `+N`/`-N` dollars per hour, or `+N%`/`-N%` (at most -100%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^(([+-][0-9]*[.]?[0-9]+)|([+][0-9]*[.]?[0-9]+%)|(-[0-9]{1,2}([.][0-9]+)?%)|(-100%))$')")
        .message("priceAdjustment must be a signed amount of dollars per hour (e.g. '-0.05', '+1.2') or a signed percentage (e.g. '-30%', '+10%'; at most -100%)"))]
    #[schemars(regex(
        pattern = r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
    ))]
    pub price_adjustment: Option<String>,
    /// The price, in dollars per hour, that replaces the matched offerings' own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^[0-9]+([.][0-9]+)?$')")
        .message("price must be a non-negative number of dollars per hour such as '0.0416'"))]
    #[schemars(regex(pattern = r"^\d+(\.\d+)?$"))]
    pub price: Option<String>,
    /// Extended resources the matched instance types' nodes report (e.g. a device plugin's);
    /// never cpu, memory, pods or ephemeral-storage, which come from the instance type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))")
        .message("capacity may only add extended resources: cpu, memory, ephemeral-storage and pods are the instance type's own"))]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// Precedence: of the overlays matching an offering, the highest weight sets its price
    /// (and each extended resource). Unset counts as 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 10000").message("weight must be between 1 and 10000"))]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// One requirement of an overlay: a node selector requirement without `minValues` (an
/// overlay selects types, it launches nothing). Unlike a NodePool's, it may name
/// `karpenter.sh/nodepool`.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)")
        .message("requirements with operator 'In' or 'NotIn' must have a value defined"),
    validation = Rule::new("!(self.operator in ['Gt', 'Lt', 'Gte', 'Lte']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^[0-9]+$'))")
        .message("requirements with operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single non-negative integer value"),
    validation = Rule::new("self.key in ['karpenter.sh/capacity-type', 'karpenter.sh/nodepool'] || !self.key.matches('^([^/]+[.])?karpenter[.]sh/')")
        .message("label domain \"karpenter.sh\" is restricted (of its labels only karpenter.sh/capacity-type and karpenter.sh/nodepool may be used)"),
    validation = Rule::new("self.key != 'kubernetes.io/hostname'")
        .message("label \"kubernetes.io/hostname\" is restricted: no instance type has a hostname"),
    validation = Rule::new("self.key in ['karpenter.k8s.aws/ec2nodeclass', 'karpenter.k8s.aws/instance-encryption-in-transit-supported', 'karpenter.k8s.aws/instance-category', 'karpenter.k8s.aws/instance-hypervisor', 'karpenter.k8s.aws/instance-family', 'karpenter.k8s.aws/instance-generation', 'karpenter.k8s.aws/instance-local-nvme', 'karpenter.k8s.aws/instance-size', 'karpenter.k8s.aws/instance-cpu', 'karpenter.k8s.aws/instance-cpu-manufacturer', 'karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz', 'karpenter.k8s.aws/instance-memory', 'karpenter.k8s.aws/instance-ebs-bandwidth', 'karpenter.k8s.aws/instance-network-bandwidth', 'karpenter.k8s.aws/instance-gpu-name', 'karpenter.k8s.aws/instance-gpu-manufacturer', 'karpenter.k8s.aws/instance-gpu-count', 'karpenter.k8s.aws/instance-gpu-memory', 'karpenter.k8s.aws/instance-accelerator-name', 'karpenter.k8s.aws/instance-accelerator-manufacturer', 'karpenter.k8s.aws/instance-accelerator-count', 'karpenter.k8s.aws/instance-capability-flex'] || !self.key.matches('^([^/]+[.])?karpenter[.]k8s[.]aws/')")
        .message("label domain \"karpenter.k8s.aws\" is restricted to its well-known instance labels (e.g. karpenter.k8s.aws/instance-family)"),
    validation = Rule::new("self.key.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') && size(self.key) <= 316")
        .message("key must be a qualified label name such as 'node.kubernetes.io/instance-type' or 'team'"),
)]
pub struct OverlayRequirement {
    // Bounded sizes keep the CEL rules within the API server's cost budget.
    #[schemars(length(max = 316))]
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // No bound on the count, as upstream: its provisioner writes every instance type a
    // NodeClaim may launch (hundreds) into one requirement.
    #[schemars(inner(length(max = 63)))]
    pub values: Vec<String>,
}

impl OverlayRequirement {
    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Self {
        OverlayRequirement {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }
}

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    /// `ValidationSucceeded` → `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions_strict")]
    pub conditions: Vec<Condition>,
}
