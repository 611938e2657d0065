//! Fields of a document that jointer's CRD schema does not have, found before typed reading so
//! every one is reported (serde stops at the first) and none is dropped: the API server would
//! prune or refuse such a field, so silently accepting it here would make `render`, `simulate`
//! and `convert` disagree with what the cluster keeps.
//!
//! The schemas are the CRDs jointer installs (`jointer_controller::crds::all()`), walked as the
//! API server prunes: `properties` name the fields of an object, `additionalProperties` types a
//! map's values, `x-kubernetes-preserve-unknown-fields` keeps what is not named (EC2NodeClass
//! `kubelet`, as upstream). `metadata` is the API server's ObjectMeta; `status` is not checked
//! (the status subresource makes the API server ignore it on writes).

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

use super::field_history::history;

/// ObjectMeta's fields (k8s.io/apimachinery meta/v1), the ones a manifest may carry.
const OBJECT_META: &[&str] = &[
    "annotations",
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "finalizers",
    "generateName",
    "generation",
    "labels",
    "managedFields",
    "name",
    "namespace",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// One field the schema does not know.
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownField {
    /// `spec.disruption.consolidationThreshold`
    pub path: String,
    pub message: String,
}

/// `(apiVersion, kind)` → `openAPIV3Schema` of every CRD jointer serves.
fn schemas() -> &'static HashMap<(String, String), Json> {
    static SCHEMAS: OnceLock<HashMap<(String, String), Json>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut out = HashMap::new();
        for (_, crd) in jointer_controller::crds::all() {
            let kind = crd.spec.names.kind.clone();
            for version in &crd.spec.versions {
                let schema = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| serde_json::to_value(s).ok());
                if let Some(schema) = schema {
                    let api = format!("{}/{}", crd.spec.group, version.name);
                    out.insert((api, kind.clone()), schema);
                }
            }
        }
        out
    })
}

#[cfg(test)]
fn schema_of(kind: &str) -> Option<&'static Json> {
    schemas()
        .iter()
        .find_map(|((_, k), schema)| (k == kind).then_some(schema))
}

/// True when `path` (array items as `[]`) is a field of `kind`'s schema.
#[cfg(test)]
pub fn schema_has(kind: &str, path: &str) -> bool {
    let Some(mut node) = schema_of(kind) else {
        return false;
    };
    for part in path.split('.') {
        let (name, items) = match part.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (part, false),
        };
        match node["properties"].get(name) {
            Some(child) => node = child,
            None => return false,
        }
        if items {
            node = &node["items"];
        }
    }
    true
}

/// Every field of `document` (an `apiVersion`/`kind` jointer serves) its schema does not know.
pub fn unknown_fields(api_version: &str, kind: &str, document: &Yaml) -> Vec<UnknownField> {
    let Some(schema) = schemas().get(&(api_version.to_string(), kind.to_string())) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let Some(root) = document.as_mapping() else {
        return out;
    };
    let valid = ["apiVersion", "kind", "metadata", "spec", "status"];
    for (key, value) in root {
        let name = key_name(key);
        match name.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => check_metadata(kind, value, &mut out),
            "spec" => walk(kind, "spec", value, &schema["properties"]["spec"], &mut out),
            _ => out.push(unknown(kind, "", &name, &valid)),
        }
    }
    out
}

fn check_metadata(kind: &str, value: &Yaml, out: &mut Vec<UnknownField>) {
    for (key, _) in value.as_mapping().into_iter().flatten() {
        let name = key_name(key);
        if !OBJECT_META.contains(&name.as_str()) {
            out.push(unknown(kind, "metadata", &name, OBJECT_META));
        }
    }
}

fn walk(kind: &str, path: &str, value: &Yaml, schema: &Json, out: &mut Vec<UnknownField>) {
    match value {
        Yaml::Mapping(fields) => {
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == true;
            if let Some(properties) = schema["properties"].as_object() {
                let mut valid: Vec<&str> = properties.keys().map(String::as_str).collect();
                valid.sort_unstable();
                for (key, child) in fields {
                    let name = key_name(key);
                    match properties.get(&name) {
                        Some(child_schema) => {
                            walk(kind, &join(path, &name), child, child_schema, out)
                        }
                        None if preserve => {}
                        None => out.push(unknown(kind, path, &name, &valid)),
                    }
                }
            } else if schema["additionalProperties"].is_object() {
                for (key, child) in fields {
                    let child_path = join(path, &key_name(key));
                    walk(
                        kind,
                        &child_path,
                        child,
                        &schema["additionalProperties"],
                        out,
                    );
                }
            }
        }
        Yaml::Sequence(items) if schema["items"].is_object() => {
            for (i, item) in items.iter().enumerate() {
                walk(kind, &format!("{path}[{i}]"), item, &schema["items"], out);
            }
        }
        Yaml::Tagged(tagged) => walk(kind, path, &tagged.value, schema, out),
        _ => {}
    }
}

fn unknown(kind: &str, parent: &str, name: &str, valid: &[&str]) -> UnknownField {
    let path = join(parent, name);
    let known = history(kind, &path).unwrap_or_else(|| {
        format!("not a field of Karpenter v1.15's {kind} (jointer carries all of them) nor of an earlier release jointer knows")
    });
    let valid: Vec<String> = valid.iter().map(|v| format!("`{v}`")).collect();
    UnknownField {
        message: format!(
            "unknown field `{name}`: {known}; valid fields {}: {}",
            if parent.is_empty() {
                "at the top level".to_string()
            } else {
                format!("in {parent}")
            },
            valid.join(", ")
        ),
        path,
    }
}

fn key_name(key: &Yaml) -> String {
    match key {
        Yaml::String(s) => s.clone(),
        other => serde_yaml::to_string(other)
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(kind: &str, api: &str, text: &str) -> Vec<UnknownField> {
        let doc: Yaml = serde_yaml::from_str(text).expect("yaml");
        unknown_fields(api, kind, &doc)
    }

    #[test]
    fn every_unknown_field_at_every_level_is_found() {
        let found = found(
            "NodePool",
            "karpenter.sh/v1",
            "metadata: { name: a, lables: {} }\nspecs: 1\nspec:\n  disruption: { consolidationThreshold: 0.5, expireAfter: 1h }\n  template:\n    spec:\n      requirements: [ { key: a, operator: In, values: [b], minValue: 2 } ]\n",
        );
        let paths: Vec<&str> = found.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "metadata.lables",
                "specs",
                "spec.disruption.consolidationThreshold",
                "spec.disruption.expireAfter",
                "spec.template.spec.requirements[0].minValue",
            ]
        );
        assert!(found[3].message.contains("v1.0") && found[3].message.contains("convert"));
        assert!(
            found[4].message.contains("`minValues`"),
            "{}",
            found[4].message
        );
    }

    #[test]
    fn maps_and_preserved_fields_are_not_unknown() {
        let found = found(
            "EC2NodeClass",
            "karpenter.k8s.aws/v1",
            "spec:\n  tags: { anything: x }\n  kubelet: { maxPods: 10, shutdownGracePeriod: 30s }\n  subnetSelectorTerms: [ { tags: { a: b } } ]\nstatus: { whatever: 1 }\n",
        );
        assert_eq!(found, []);
    }

    #[test]
    fn schema_paths_resolve_through_arrays() {
        assert!(schema_has(
            "NodePool",
            "spec.template.spec.requirements[].minValues"
        ));
        assert!(!schema_has("NodePool", "spec.template.spec.kubelet"));
    }
}
