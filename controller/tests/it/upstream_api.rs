//! How far jointer's API is from upstream Karpenter's, measured on upstream's own CRDs (the
//! ones its Go module embeds; `tests/env/build.sh` prints them from the pinned module into
//! `$JOINTER_UPSTREAM_CRDS`). Every property path of upstream's schemas is compared with
//! jointer's generated CRDs: present, same type, same enum values, same required fields, same
//! default. The test prints "N of M upstream fields supported" and fails on any gap that is not
//! in `upstream_api_gaps.txt` with its reason — and on an entry there that is no longer a gap,
//! so the list only ever shrinks. CEL rules are not compared here yet.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// What one schema node says about its field.
#[derive(Debug, Clone, PartialEq)]
struct Field {
    kind: Option<String>,
    enumeration: Option<BTreeSet<String>>,
    required: BTreeSet<String>,
    default: Option<Value>,
}

/// `plural/version path` → field, for every property below `openAPIV3Schema` (arrays as `[]`,
/// maps of values as `{}`) of `spec` and `status`; `metadata` is the API server's.
fn fields(crd: &Value) -> BTreeMap<String, Field> {
    let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or("?");
    let mut out = BTreeMap::new();
    for version in crd["spec"]["versions"].as_array().into_iter().flatten() {
        if version["served"] != true {
            continue;
        }
        let name = version["name"].as_str().unwrap_or("?");
        let schema = &version["schema"]["openAPIV3Schema"];
        for (key, child) in schema["properties"].as_object().into_iter().flatten() {
            if key == "spec" || key == "status" {
                walk(&format!("{plural}/{name} {key}"), child, &mut out);
            }
        }
    }
    out
}

fn walk(path: &str, node: &Value, out: &mut BTreeMap<String, Field>) {
    let strings = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
            .collect()
    };
    out.insert(
        path.to_string(),
        Field {
            kind: node["type"].as_str().map(str::to_string),
            enumeration: node.get("enum").map(strings),
            required: strings(&node["required"]),
            default: node.get("default").cloned(),
        },
    );
    for (key, child) in node["properties"].as_object().into_iter().flatten() {
        walk(&format!("{path}.{key}"), child, out);
    }
    if node["items"].is_object() {
        walk(&format!("{path}[]"), &node["items"], out);
    }
    if node["additionalProperties"].is_object() {
        walk(&format!("{path}{{}}"), &node["additionalProperties"], out);
    }
}

/// Why a path falls short, or None when jointer carries it as upstream does.
fn gap(upstream: &Field, ours: Option<&Field>) -> Option<String> {
    let Some(ours) = ours else {
        return Some("missing".into());
    };
    let mut why = Vec::new();
    if upstream.kind != ours.kind {
        why.push(format!(
            "type {:?}, upstream {:?}",
            ours.kind, upstream.kind
        ));
    }
    if upstream.enumeration != ours.enumeration {
        why.push(format!(
            "enum {:?}, upstream {:?}",
            ours.enumeration, upstream.enumeration
        ));
    }
    if upstream.required != ours.required {
        why.push(format!(
            "required {:?}, upstream {:?}",
            ours.required, upstream.required
        ));
    }
    if upstream.default != ours.default {
        why.push(format!(
            "default {:?}, upstream {:?}",
            ours.default, upstream.default
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// `path  # reason` lines: the gaps known and why they are still open.
fn allowed() -> BTreeMap<String, String> {
    include_str!("upstream_api_gaps.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .filter_map(|l| {
            let (path, why) = l.split_once('#')?;
            Some((path.trim().to_string(), why.trim().to_string()))
        })
        .collect()
}

#[test]
fn jointers_crds_carry_upstreams_fields_except_the_listed_gaps() {
    let file = std::env::var("JOINTER_UPSTREAM_CRDS").unwrap_or_else(|_| {
        panic!("JOINTER_UPSTREAM_CRDS is unset: run tests/env/up.sh and source tests/env/.run/env (tests/run.sh does both)")
    });
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut upstream = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let crd: Value = serde::Deserialize::deserialize(doc).expect("upstream CRD YAML");
        if crd.is_object() {
            upstream.extend(fields(&crd));
        }
    }
    assert!(
        upstream.len() > 150,
        "only {} upstream paths read",
        upstream.len()
    );
    let mut ours = BTreeMap::new();
    for (_, crd) in jointer_controller::crds::all() {
        ours.extend(fields(&serde_json::to_value(crd).expect("CRD JSON")));
    }

    let gaps: BTreeMap<&String, String> = upstream
        .iter()
        .filter_map(|(path, field)| Some((path, gap(field, ours.get(path))?)))
        .collect();
    let supported = upstream.len() - gaps.len();
    println!(
        "{supported} of {} upstream fields supported (Karpenter's own CRDs, {file})",
        upstream.len()
    );
    for (path, why) in &gaps {
        println!("  {path}: {why}");
    }
    let allowed = allowed();
    let unlisted: Vec<String> = gaps
        .iter()
        .filter(|(path, _)| !allowed.contains_key(path.as_str()))
        .map(|(path, why)| format!("{path}: {why}"))
        .collect();
    let closed: Vec<&String> = allowed
        .keys()
        .filter(|path| !gaps.contains_key(path))
        .collect();
    assert!(
        unlisted.is_empty(),
        "gaps from upstream's API that upstream_api_gaps.txt does not list (support the field, or list it with why it is not yet):\n{}",
        unlisted.join("\n")
    );
    assert!(
        closed.is_empty(),
        "no longer gaps: remove them from upstream_api_gaps.txt: {closed:?}"
    );
}
