//! The OpenAPI constraints of a CRD's schema — `enum`, `pattern`, string lengths, numeric
//! bounds and item counts — checked against an object offline, as the API server does before
//! its CEL rules, so `render` refuses what `apply` would have been refused.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde_json::Value;

use super::validation::FieldError;

/// Every violation of `schema`'s constraints in `value`, located by field path.
pub fn errors(schema: &JSONSchemaProps, value: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    check(schema, value, "", &mut out);
    out
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn check(schema: &JSONSchemaProps, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    let mut fail = |message: String| {
        out.push(FieldError {
            path: path.to_string(),
            message,
        })
    };
    if value.is_null() {
        return;
    }
    if let Some(allowed) = &schema.enum_ {
        if !allowed.iter().any(|a| &a.0 == value) {
            let listed: Vec<String> = allowed.iter().map(|a| a.0.to_string()).collect();
            fail(format!(
                "unsupported value {value}: supported values: {}",
                listed.join(", ")
            ));
        }
    }
    match value {
        Value::String(s) => {
            let length = s.chars().count() as i64;
            if let Some(min) = schema.min_length.filter(|min| length < *min) {
                fail(format!("{value} should be at least {min} characters long"));
            }
            if let Some(max) = schema.max_length.filter(|max| length > *max) {
                fail(format!(
                    "{value} may not be more than {max} characters long"
                ));
            }
            if let Some(pattern) = &schema.pattern {
                if matches(pattern, s) == Some(false) {
                    fail(format!("{value} should match '{pattern}'"));
                }
            }
        }
        Value::Number(n) => {
            if let Some(n) = n.as_f64() {
                if let Some(min) = schema.minimum {
                    let exclusive = schema.exclusive_minimum == Some(true);
                    if n < min || (exclusive && n == min) {
                        fail(format!(
                            "{n} should be greater than {}{min}",
                            if exclusive { "" } else { "or equal to " }
                        ));
                    }
                }
                if let Some(max) = schema.maximum {
                    let exclusive = schema.exclusive_maximum == Some(true);
                    if n > max || (exclusive && n == max) {
                        fail(format!(
                            "{n} should be less than {}{max}",
                            if exclusive { "" } else { "or equal to " }
                        ));
                    }
                }
            }
        }
        Value::Array(items) => {
            let count = items.len() as i64;
            if let Some(min) = schema.min_items.filter(|min| count < *min) {
                fail(format!("should have at least {min} items"));
            }
            if let Some(max) = schema.max_items.filter(|max| count > *max) {
                fail(format!("{count} items: must have at most {max}"));
            }
            if let Some(JSONSchemaPropsOrArray::Schema(item)) = &schema.items {
                for (i, v) in items.iter().enumerate() {
                    check(item, v, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(fields) => {
            for (key, v) in fields {
                if let Some(property) = schema.properties.as_ref().and_then(|p| p.get(key)) {
                    check(property, v, &join(path, key), out);
                } else if let Some(JSONSchemaPropsOrBool::Schema(each)) =
                    &schema.additional_properties
                {
                    check(each, v, &join(path, key), out);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// Whether `text` matches `pattern`; `None` when the pattern is not one Rust's regex engine
/// takes (the API server's Go engine then has the last word).
fn matches(pattern: &str, text: &str) -> Option<bool> {
    static COMPILED: OnceLock<Mutex<HashMap<String, Option<regex::Regex>>>> = OnceLock::new();
    let mut cache = COMPILED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    cache
        .entry(pattern.to_string())
        .or_insert_with(|| regex::Regex::new(pattern).ok())
        .as_ref()
        .map(|re| re.is_match(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> JSONSchemaProps {
        serde_json::from_value(value).expect("schema")
    }

    #[test]
    fn each_constraint_is_checked_where_it_applies() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "tokens": {"type": "string", "enum": ["required", "optional"]},
                "size": {"type": "string", "pattern": "^[1-9][0-9]*Gi$"},
                "name": {"type": "string", "minLength": 1, "maxLength": 3},
                "hops": {"type": "integer", "minimum": 1, "maximum": 64},
                "terms": {"type": "array", "maxItems": 1, "items": {"type": "object",
                    "properties": {"id": {"type": "string", "pattern": "^sg-"}}}},
                "tags": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 2}},
            }
        }));
        let good = json!({"tokens": "required", "size": "20Gi", "name": "abc", "hops": 2,
            "terms": [{"id": "sg-1"}], "tags": {"a": "bb"}, "unknown": 1});
        assert_eq!(errors(&s, &good), []);
        let bad = json!({"tokens": "maybe", "size": "0Gi", "name": "", "hops": 65,
            "terms": [{"id": "subnet-1"}, {"id": "sg-2"}], "tags": {"a": "long"}});
        let found: Vec<String> = errors(&s, &bad).iter().map(|e| e.to_string()).collect();
        assert_eq!(
            found,
            [
                "hops: 65 should be less than or equal to 64",
                "name: \"\" should be at least 1 characters long",
                "size: \"0Gi\" should match '^[1-9][0-9]*Gi$'",
                "tags.a: \"long\" may not be more than 2 characters long",
                "terms: 2 items: must have at most 1",
                "terms[0].id: \"subnet-1\" should match '^sg-'",
                "tokens: unsupported value \"maybe\": supported values: \"required\", \"optional\"",
            ]
        );
    }
}
