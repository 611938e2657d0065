//! Node selector requirements with Karpenter's `minValues` and the two extra numeric operators.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The eight operators Karpenter v1 accepts (Kubernetes' six plus `Gte` and `Lte`).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

/// One requirement on a node label, e.g. `karpenter.sh/capacity-type In [spot, on-demand]`.
///
/// Every rule is CEL in the CRD; [`crate::api::validation`] evaluates the same CEL offline.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(
    validation = Rule::new("self.operator != 'In' || (has(self.values) && size(self.values) > 0)")
        .message("requirements with operator 'In' must have a value defined"),
    validation = Rule::new("!(self.operator in ['Gt', 'Lt', 'Gte', 'Lte']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^[0-9]+$'))")
        .message("requirements with operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single non-negative integer value"),
    validation = Rule::new("!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0")
        .message("requirements with operator 'Exists' or 'DoesNotExist' must not have values"),
    validation = Rule::new("!has(self.minValues) || self.operator != 'In' || (has(self.values) && size(self.values) >= self.minValues)")
        .message("requirements with 'minValues' must have at least that many values specified in the 'values' field"),
    validation = Rule::new("!has(self.minValues) || (self.minValues >= 1 && self.minValues <= 50)")
        .message("minValues must be between 1 and 50"),
    // A NodeClaim names its NodePool among its requirements (upstream's controller writes
    // it there); a NodePool may not, which its own field's rule says.
    validation = Rule::new("self.key in ['karpenter.sh/capacity-type', 'karpenter.sh/nodepool'] || !self.key.matches('^([^/]+[.])?karpenter[.]sh/')")
        .message("label domain \"karpenter.sh\" is restricted (of its labels only karpenter.sh/capacity-type may be used)"),
    validation = Rule::new("self.key != 'kubernetes.io/hostname'")
        .message("label \"kubernetes.io/hostname\" is restricted: Karpenter sets it"),
    validation = Rule::new("self.key.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') && size(self.key) <= 316")
        .message("key must be a qualified label name such as 'example.com/team' or 'tier'"),
)]
pub struct NodeSelectorRequirementWithMinValues {
    // Bounded sizes keep the CEL rules within the API server's cost budget.
    #[schemars(length(max = 316))]
    pub key: String,
    pub operator: Operator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // No bound on the count, as upstream: its provisioner writes every instance type a
    // NodeClaim may launch (hundreds) into one requirement.
    #[schemars(inner(length(max = 63)))]
    pub values: Vec<String>,
    /// The minimum number of distinct values of `key` the launch must be able to choose from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<i64>,
}

impl NodeSelectorRequirementWithMinValues {
    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Self {
        NodeSelectorRequirementWithMinValues {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
            min_values: None,
        }
    }
}
