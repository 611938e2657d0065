//! Fields a typed read would lose: for types that accept unknown fields and ignore them
//! (k8s-openapi's Kubernetes types do, as client-go does), every field path of the input is
//! looked for in what the typed value writes back. A missing one was dropped — a typo such as
//! `nodeSelektor` that would silently change what `simulate` computes.

use std::collections::BTreeSet;

use serde_json::Value as Json;

/// The field paths of `value` that hold something (empty maps, lists and nulls say nothing a
/// type could lose), e.g. `spec.template.spec.containers[0].resources.requests.cpu`.
fn paths(prefix: &str, value: &Json, out: &mut BTreeSet<String>) {
    match value {
        Json::Null => {}
        Json::Object(fields) => {
            for (key, child) in fields {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                if !matches!(child, Json::Null) && !is_empty(child) {
                    out.insert(path.clone());
                }
                paths(&path, child, out);
            }
        }
        Json::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                paths(&format!("{prefix}[{i}]"), item, out);
            }
        }
        _ => {}
    }
}

fn is_empty(value: &Json) -> bool {
    match value {
        Json::Object(m) => m.is_empty(),
        Json::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The outermost paths of `input` that `typed` (its value read and written back) lacks.
pub fn dropped(input: &Json, typed: &Json) -> Vec<String> {
    let (mut written, mut kept) = (BTreeSet::new(), BTreeSet::new());
    paths("", input, &mut written);
    paths("", typed, &mut kept);
    let lost: Vec<&String> = written.difference(&kept).collect();
    // Report `a.b`, not also `a.b.c` below it.
    lost.iter()
        .filter(|p| {
            !lost.iter().any(|q| {
                q.len() < p.len()
                    && p.starts_with(q.as_str())
                    && p[q.len()..].starts_with(['.', '['])
            })
        })
        .map(|p| p.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn a_misspelt_pod_field_is_dropped_and_found() {
        let input = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {}},
            "spec": {"nodeSelektor": {"a": "b"}, "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": 1}}, "imagePullPolice": "Always"}]}
        });
        let pod: Pod = serde_json::from_value(input.clone()).expect("pod");
        let back = serde_json::to_value(pod).expect("json");
        assert_eq!(
            dropped(&input, &back),
            ["spec.containers[0].imagePullPolice", "spec.nodeSelektor"]
        );
    }
}
