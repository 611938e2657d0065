//! Node taints as they appear in NodePool and NodeClaim specs.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

/// What a taint's key and value may be (upstream's CRD pattern: an optional DNS-prefix and a
/// name of letters, digits, `-`, `_` and `.`).
const TAINT_PART: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";

#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    #[schemars(extend("minLength" = 1, "pattern" = TAINT_PART))]
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = TAINT_PART))]
    pub value: Option<String>,
    pub effect: TaintEffect,
    /// When a NoExecute taint was added (RFC 3339); Karpenter's API carries it through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::date_time")]
    pub time_added: Option<String>,
}
