//! Schema shapes the derive cannot infer, written so the generated CRDs say what upstream
//! Karpenter's say (`controller/tests/it/upstream_api.rs` compares them path by path).

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde_json::json;

/// `T`'s own schema for an optional field: an absent field is how "unset" is spelt, so the
/// schema carries no `null` (schemars would add it to an enum's values).
pub fn unset_or<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

const EVERY_CONDITION_FIELD: [&str; 5] =
    ["lastTransitionTime", "message", "reason", "status", "type"];

/// Status conditions as upstream's NodePool and EC2NodeClass declare them: a list keyed by
/// `type`, the status one of three values, every field but `observedGeneration` required
/// (jointer's reasons are never empty, but the pattern still admits an empty one, as
/// `metav1.Condition`'s does, so a status write can never be refused over it).
pub fn conditions(_: &mut SchemaGenerator) -> Schema {
    condition_list(&EVERY_CONDITION_FIELD, false)
}

/// The same as upstream's NodeOverlay and CapacityBuffer declare them: a reason is a
/// non-empty CamelCase word.
pub fn conditions_strict(_: &mut SchemaGenerator) -> Schema {
    condition_list(&EVERY_CONDITION_FIELD, true)
}

/// Status conditions as `metav1.Condition` (NodeClaim's): reason and message optional.
pub fn conditions_reason_optional(_: &mut SchemaGenerator) -> Schema {
    condition_list(&["lastTransitionTime", "status", "type"], false)
}

fn condition_list(required: &[&str], strict_reason: bool) -> Schema {
    let reason = if strict_reason {
        json!({"type": "string", "minLength": 1, "maxLength": 1024,
               "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"})
    } else {
        json!({"type": "string", "maxLength": 1024,
               "pattern": "^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$"})
    };
    json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": required,
            "properties": {
                "lastTransitionTime": { "type": "string", "format": "date-time" },
                "message": { "type": "string", "maxLength": 32768 },
                "observedGeneration": { "type": "integer", "format": "int64", "minimum": 0 },
                "reason": reason,
                "status": { "type": "string", "enum": ["True", "False", "Unknown"] },
                "type": {
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
                }
            }
        }
    })
}

/// An RFC 3339 time kept as text (taints' `timeAdded`).
pub fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "format": "date-time" })
}

/// An EBS volume size as upstream bounds it: 1–59000 Gi (or 64000 G, 58 Ti, 64 T).
pub fn volume_size(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": "^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
    })
}
