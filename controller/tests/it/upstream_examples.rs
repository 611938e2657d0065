//! The upstream-style examples (`manifests/examples/upstream-v1.15/`) against upstream
//! Karpenter v1.15.2's own CRDs (`$JOINTER_UPSTREAM_CRDS`): together they write every spec
//! path of upstream's schemas (so "jointer reads upstream's manifests" is tested on all of
//! upstream's API, not a sample), and each passes jointer's offline validation, the CEL rules
//! its CRDs carry. The server-side dry runs and the CLI reading them are root tests
//! (tests/it/upstream_examples.rs, tests/it/simulate.rs).

use std::collections::BTreeSet;
use std::path::PathBuf;

use jointer_controller::api::{CapacityBuffer, EC2NodeClass, NodeOverlay, NodePool, Validate};
use serde_json::Value;

/// Upstream kinds the examples do not write, and why.
const NOT_WRITTEN: &[(&str, &str)] = &[(
    "nodeclaims",
    "NodeClaims are created by Karpenter from a NodePool's template, not written by users; their spec fields are the template's (covered through nodepools)",
)];

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples/upstream-v1.15")
}

/// Every document of every example file, with the file it came from.
fn examples() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("manifests/examples/upstream-v1.15")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("example");
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc).expect("example YAML");
            if value.is_object() {
                out.push((name.clone(), value));
            }
        }
    }
    out
}

fn upstream_crds() -> Vec<Value> {
    let file = std::env::var("JOINTER_UPSTREAM_CRDS").unwrap_or_else(|_| {
        panic!("JOINTER_UPSTREAM_CRDS is unset: run tests/env/up.sh and source tests/env/.run/env (tests/run.sh does both)")
    });
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("upstream CRD YAML"))
        .filter(|v: &Value| v.is_object())
        .collect()
}

/// Every path below `spec` of a schema (arrays as `[]`, map values as `{}`).
fn schema_paths(path: &str, node: &Value, out: &mut BTreeSet<String>) {
    out.insert(path.to_string());
    for (key, child) in node["properties"].as_object().into_iter().flatten() {
        schema_paths(&format!("{path}.{key}"), child, out);
    }
    if node["items"].is_object() {
        schema_paths(&format!("{path}[]"), &node["items"], out);
    }
    if node["additionalProperties"].is_object() {
        schema_paths(&format!("{path}{{}}"), &node["additionalProperties"], out);
    }
}

/// The schema paths a document writes, walking the document along the schema.
fn written_paths(path: &str, value: &Value, node: &Value, out: &mut BTreeSet<String>) {
    out.insert(path.to_string());
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                if let Some(schema) = node["properties"].get(key) {
                    written_paths(&format!("{path}.{key}"), child, schema, out);
                } else if node["additionalProperties"].is_object() {
                    written_paths(
                        &format!("{path}{{}}"),
                        child,
                        &node["additionalProperties"],
                        out,
                    );
                }
            }
        }
        Value::Array(items) if node["items"].is_object() => {
            for item in items {
                written_paths(&format!("{path}[]"), item, &node["items"], out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_examples_write_every_upstream_spec_path() {
    let examples = examples();
    let mut missing = Vec::new();
    let mut checked = 0;
    for crd in upstream_crds() {
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or("?");
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or("?");
        let group = crd["spec"]["group"].as_str().unwrap_or("?");
        if NOT_WRITTEN.iter().any(|(p, _)| *p == plural) {
            continue;
        }
        for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
            let api = format!("{group}/{}", version["name"].as_str().unwrap_or("?"));
            let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
            let mut upstream = BTreeSet::new();
            schema_paths("spec", spec, &mut upstream);
            let mut written = BTreeSet::new();
            let mut documents = 0;
            for (_, doc) in &examples {
                if doc["apiVersion"] == api.as_str() && doc["kind"] == kind {
                    documents += 1;
                    written_paths("spec", &doc["spec"], spec, &mut written);
                }
            }
            assert!(documents > 0, "no example of {api} {kind}");
            checked += upstream.len();
            missing.extend(
                upstream
                    .difference(&written)
                    .map(|p| format!("{plural}/{} {p}", version["name"].as_str().unwrap_or("?"))),
            );
        }
    }
    assert!(checked > 140, "only {checked} upstream spec paths read");
    assert!(
        missing.is_empty(),
        "upstream spec paths no example in manifests/examples/upstream-v1.15 writes (add them, or list the kind in NOT_WRITTEN with why):\n{}",
        missing.join("\n")
    );
    println!("{checked} upstream spec paths written by the upstream-style examples");
}

fn problems<T: Validate + serde::de::DeserializeOwned>(doc: &Value) -> Vec<String> {
    match serde_json::from_value::<T>(doc.clone()) {
        Ok(object) => object
            .validate()
            .into_iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect(),
        Err(e) => vec![format!("not read: {e}")],
    }
}

#[test]
fn every_example_passes_jointers_validation() {
    let examples = examples();
    let mut refused = Vec::new();
    for (file, doc) in &examples {
        let found = match doc["kind"].as_str() {
            Some("NodePool") => problems::<NodePool>(doc),
            Some("EC2NodeClass") => problems::<EC2NodeClass>(doc),
            Some("NodeOverlay") => problems::<NodeOverlay>(doc),
            Some("CapacityBuffer") => problems::<CapacityBuffer>(doc),
            other => vec![format!("unexpected kind {other:?}")],
        };
        let name = doc["metadata"]["name"].as_str().unwrap_or("?");
        refused.extend(found.into_iter().map(|p| format!("{file} {name}: {p}")));
    }
    assert!(examples.len() >= 8, "examples read: {}", examples.len());
    assert!(
        refused.is_empty(),
        "jointer refuses its own upstream-style examples:\n{}",
        refused.join("\n")
    );
}

/// Every leaf path of a document (`spec.budgets[1].reasons[0]`).
fn leaves(path: &str, value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            for (key, child) in fields {
                leaves(&format!("{path}.{key}"), child, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                leaves(&format!("{path}[{i}]"), item, out);
            }
        }
        _ => {
            out.insert(path.to_string());
        }
    }
}

fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(doc: &Value) -> Value {
    let typed: T = serde_json::from_value(doc.clone()).expect("example reads");
    serde_json::to_value(typed).expect("serializes")
}

/// Reading must keep everything an example says (the untyped kubelet field, the static
/// pool's replicas, …): every field written is still there after jointer's types.
#[test]
fn reading_the_examples_drops_nothing() {
    let mut dropped = Vec::new();
    for (file, doc) in examples() {
        let back = match doc["kind"].as_str() {
            Some("NodePool") => round_trip::<NodePool>(&doc),
            Some("EC2NodeClass") => round_trip::<EC2NodeClass>(&doc),
            Some("NodeOverlay") => round_trip::<NodeOverlay>(&doc),
            _ => round_trip::<CapacityBuffer>(&doc),
        };
        let (mut written, mut kept) = (BTreeSet::new(), BTreeSet::new());
        leaves("", &doc, &mut written);
        leaves("", &back, &mut kept);
        let name = doc["metadata"]["name"].as_str().unwrap_or("?");
        dropped.extend(
            written
                .difference(&kept)
                .map(|p| format!("{file} {name}: {p}")),
        );
    }
    assert!(
        dropped.is_empty(),
        "fields of the examples lost by jointer's types:\n{}",
        dropped.join("\n")
    );
}
