//! jointer's node objects on upstream Karpenter's own CRDs: with upstream v1.15.2's CRDs
//! installed in the test API server (in place of jointer's, restored afterwards), every
//! NodePool and EC2NodeClass jointer renders from its bundled example and templates, and the
//! seed manifests, is accepted by a server-side dry run — upstream's schema and CEL rules say
//! yes to what jointer writes. Needs tests/env/up.sh (`$JOINTER_UPSTREAM_CRDS`).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::Value;

use crate::support::testenv::{self, wait_for};
use crate::support::Workspace;
use crate::upstream_cel::karpenter_crds;

pub(crate) fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|d| serde::Deserialize::deserialize(d).ok())
        .filter(|v: &Value| v.is_object())
        .collect()
}

/// Replaces Karpenter's CRDs by `crds` and waits until each is served.
pub(crate) async fn install(client: &kube::Client, crds: &[Value]) {
    // The other side's storage versions may differ: replace the CRDs, do not merge them.
    testenv::delete_karpenter_crds(client).await;
    apply_crds(client, crds).await;
}

/// Server-side applies `crds` (forced) and waits until each is Established and served.
pub(crate) async fn apply_crds(client: &kube::Client, crds: &[Value]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd["metadata"]["name"]
            .as_str()
            .expect("CRD name")
            .to_string();
        api.patch(
            &name,
            &PatchParams::apply("jointer-tests").force(),
            &Patch::Apply(crd),
        )
        .await
        .unwrap_or_else(|e| panic!("installing CRD {name}: {e}"));
        wait_for(
            &format!("CRD {name} Established"),
            Duration::from_secs(60),
            || async {
                let crd = api.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await;
        // Established is not yet served: right after a CRD of the same name went away its
        // kind can answer 404 for a moment, and the next test's apply would hit that.
        let kind = served_api(client, crd);
        wait_for(
            &format!("{name} served"),
            Duration::from_secs(60),
            || async {
                kind.list(&kube::api::ListParams::default().limit(1))
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
    }
}

/// The API of the objects a CRD defines, at its first served version.
fn served_api(client: &kube::Client, crd: &Value) -> Api<DynamicObject> {
    let spec = &crd["spec"];
    let version = spec["versions"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["served"] == true))
        .and_then(|v| v["name"].as_str())
        .expect("a served version");
    let text = |v: &Value| v.as_str().expect("CRD name field").to_string();
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(
            &text(&spec["group"]),
            version,
            &text(&spec["names"]["kind"]),
        ),
        &text(&spec["names"]["plural"]),
    );
    Api::all_with(client.clone(), &resource)
}

/// The API of `object`'s kind (in its namespace when it has one).
pub(crate) fn api_for(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let (group, version) = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .expect("group/version");
    let kind = object["kind"].as_str().expect("kind");
    let plural = match kind {
        "EC2NodeClass" => "ec2nodeclasses".to_string(),
        other => format!("{}s", other.to_lowercase()),
    };
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, version, kind),
        &plural,
    );
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

#[tokio::test]
async fn upstream_crds_accept_every_node_object_jointer_renders() {
    let _turn = testenv::TURN.lock().await;
    testenv::require();
    let client = testenv::kube().await;
    let upstream = karpenter_crds(true);
    assert!(
        upstream.len() >= 3,
        "upstream's Karpenter CRDs: {}",
        upstream.len()
    );

    // What jointer writes: the bundled example and the split template rendered, the seed files.
    let ws = Workspace::new();
    let root = testenv::repo_root();
    let mut objects = Vec::new();
    let run = ws.jointer(&[
        "render",
        "-f",
        &root
            .join("manifests/examples/jointer.yaml")
            .display()
            .to_string(),
    ]);
    run.succeeded();
    objects.extend(documents(&run.stdout));
    for seed in ["class.yaml", "eight-types.yaml", "one-type.yaml"] {
        let text = std::fs::read_to_string(root.join("manifests/examples/seed").join(seed))
            .expect("seed manifest");
        objects.extend(documents(&text));
    }
    // The upstream-style examples are upstream's API as much as jointer's.
    for example in ["nodepools.yaml", "ec2nodeclasses.yaml", "nodeoverlays.yaml"] {
        let path = root.join("manifests/examples/upstream-v1.15").join(example);
        objects.extend(documents(
            &std::fs::read_to_string(path).expect("upstream-style example"),
        ));
    }
    let objects: Vec<Value> = objects
        .into_iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("NodePool" | "EC2NodeClass" | "NodeOverlay")
            )
        })
        .collect();
    assert!(
        objects.len() >= 4,
        "node objects to check: {}",
        objects.len()
    );

    install(&client, &upstream).await;
    let mut refused = Vec::new();
    for object in &objects {
        let name = object["metadata"]["name"].as_str().unwrap_or("?");
        let mut params = PatchParams::apply("jointer-tests").force();
        params.dry_run = true;
        let obj: DynamicObject = serde_json::from_value(object.clone()).expect("object");
        if let Err(e) = api_for(&client, object)
            .patch(name, &params, &Patch::Apply(&obj))
            .await
        {
            refused.push(format!(
                "{} {name}: {e}",
                object["kind"].as_str().unwrap_or("?")
            ));
        }
    }
    // Back to jointer's CRDs for every later test, labelled as `jointer apply` labels them.
    install(&client, &karpenter_crds(false)).await;
    assert!(
        refused.is_empty(),
        "upstream's CRDs refuse what jointer renders:\n{}",
        refused.join("\n")
    );
    eprintln!(
        "{} node objects jointer renders accepted by upstream Karpenter's CRDs",
        objects.len()
    );
}
