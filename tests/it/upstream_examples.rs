//! The upstream-style examples (`manifests/examples/upstream-v1.15/`, every spec field of
//! upstream Karpenter v1.15) on the real API server with jointer's CRDs: a server-side dry run
//! of each is accepted — jointer's schemas and CEL rules take what upstream's users write.
//! (Upstream's own CRDs take them too: tests/it/upstream_crds.rs.) Needs tests/env/up.sh.

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::Value;

use crate::support::testenv;
use crate::upstream_cel::karpenter_crds;
use crate::upstream_crds::{api_for, apply_crds, documents};

#[tokio::test]
async fn jointers_crds_accept_every_upstream_style_example() {
    let _turn = testenv::TURN.lock().await;
    testenv::require();
    let client = testenv::kube().await;
    let dir = testenv::repo_root().join("manifests/examples/upstream-v1.15");
    let mut objects: Vec<(String, Value)> = Vec::new();
    for file in [
        "nodepools.yaml",
        "ec2nodeclasses.yaml",
        "nodeoverlays.yaml",
        "capacitybuffers.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("example");
        objects.extend(documents(&text).into_iter().map(|o| (file.to_string(), o)));
    }
    let kinds: std::collections::BTreeSet<&str> = objects
        .iter()
        .filter_map(|(_, o)| o["kind"].as_str())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["CapacityBuffer", "EC2NodeClass", "NodeOverlay", "NodePool"]
    );

    apply_crds(&client, &karpenter_crds(false)).await;
    let mut refused = Vec::new();
    for (file, object) in &objects {
        let name = object["metadata"]["name"].as_str().unwrap_or("?");
        let mut params = PatchParams::apply("jointer-tests").force();
        params.dry_run = true;
        let obj: DynamicObject = serde_json::from_value(object.clone()).expect("object");
        match api_for(&client, object)
            .patch(name, &params, &Patch::Apply(&obj))
            .await
        {
            // The dry run's answer is what would be stored: nothing the example says pruned.
            Ok(stored) => {
                let stored = serde_json::to_value(stored).expect("stored");
                if stored["spec"] != object["spec"] && !spec_kept(&object["spec"], &stored["spec"])
                {
                    refused.push(format!(
                        "{file} {name}: the API server pruned or changed its spec: {:#}",
                        stored["spec"]
                    ));
                }
            }
            Err(e) => refused.push(format!("{file} {name}: {e}")),
        }
    }
    assert!(
        refused.is_empty(),
        "jointer's CRDs refuse upstream-style examples:\n{}",
        refused.join("\n")
    );
    eprintln!(
        "{} upstream-style examples accepted by jointer's CRDs",
        objects.len()
    );
}

/// Whether everything `written` says is in `stored` (which may add defaults).
fn spec_kept(written: &Value, stored: &Value) -> bool {
    match (written, stored) {
        (Value::Object(w), Value::Object(s)) => w
            .iter()
            .all(|(k, v)| s.get(k).is_some_and(|sv| spec_kept(v, sv))),
        (Value::Array(w), Value::Array(s)) => {
            w.len() == s.len() && w.iter().zip(s).all(|(a, b)| spec_kept(a, b))
        }
        (w, s) => w == s,
    }
}
