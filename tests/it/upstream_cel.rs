//! jointer's validation rules against upstream Karpenter's, measured on the real API server:
//! a corpus of objects — each valid base, and each base with one field made wrong the way a
//! user gets it wrong — is dry-run against jointer's CRDs and then against upstream v1.15.2's
//! own, and both must accept and refuse the same ones. Where jointer deliberately differs the
//! case is listed in `DIFFERENCES` with why; the test fails on an unlisted disagreement and on
//! a listed one that has gone.

use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};

use crate::support::testenv;
use crate::upstream_crds::{api_for, documents, install};

/// Cases where jointer knowingly refuses what upstream accepts, or the reverse: (case, why).
const DIFFERENCES: &[(&str, &str)] = &[(
    "class: negative maxPods",
    "upstream leaves kubelet untyped in its schema (its controller checks the fields later); \
     jointer types the fields it accounts for in allocatable, so the API server refuses a \
     negative maxPods at once",
)];

fn pool() -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "spec": {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"},
        "requirements": []}}}})
}

fn class() -> Value {
    json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "spec": {
        "role": "KarpenterNodeRole-demo", "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}]}})
}

fn claim() -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"},
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}})
}

fn overlay() -> Value {
    json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "spec": {
        "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
        "price": "0.1"}})
}

/// Merges `patch` into `base` (objects key by key; anything else replaced).
fn merged(mut base: Value, patch: &Value) -> Value {
    fn merge(base: &mut Value, patch: &Value) {
        match (base.as_object_mut(), patch.as_object()) {
            (Some(b), Some(p)) => {
                for (k, v) in p {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
            _ => *base = patch.clone(),
        }
    }
    merge(&mut base, patch);
    base
}

/// (case, object): the valid bases, then each with one thing wrong (or newly right).
fn corpus() -> Vec<(&'static str, Value)> {
    let template = |spec: Value| json!({"spec": {"template": {"spec": spec}}});
    let req = |r: Value| template(json!({"requirements": [r]}));
    let cases: Vec<(&str, Value, Value)> = vec![
        ("pool: valid", pool(), json!({})),
        (
            "pool: In without values",
            pool(),
            req(json!({"key": "team", "operator": "In", "values": []})),
        ),
        (
            "pool: Gt with two values",
            pool(),
            req(
                json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["1", "2"]}),
            ),
        ),
        (
            "pool: Gt not a number",
            pool(),
            req(
                json!({"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["four"]}),
            ),
        ),
        (
            "pool: minValues above the values",
            pool(),
            req(json!({"key": "team", "operator": "In", "values": ["a"], "minValues": 2})),
        ),
        (
            // Upstream's provisioner writes every type a NodeClaim may launch into one
            // requirement: hundreds of values, which the CRDs take without a count bound.
            "pool: 600 instance types in one requirement",
            pool(),
            req(
                json!({"key": "node.kubernetes.io/instance-type", "operator": "In",
                "values": (0..600).map(|i| format!("x{i}.large")).collect::<Vec<_>>()}),
            ),
        ),
        (
            "pool: restricted karpenter.sh label",
            pool(),
            json!({"spec": {"template": {"metadata": {"labels": {"karpenter.sh/team": "a"}}}}}),
        ),
        (
            "pool: hostname requirement",
            pool(),
            req(json!({"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]})),
        ),
        (
            "pool: nodepool requirement",
            pool(),
            req(json!({"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]})),
        ),
        (
            "pool: capacity-type requirement",
            pool(),
            req(json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]})),
        ),
        (
            "pool: schedule without duration",
            pool(),
            json!({"spec": {"disruption": {"budgets": [{"nodes": "1", "schedule": "@daily"}]}}}),
        ),
        (
            "pool: budget of 150%",
            pool(),
            json!({"spec": {"disruption": {"budgets": [{"nodes": "150%"}]}}}),
        ),
        (
            "pool: budget reason Unhealthy",
            pool(),
            json!({"spec": {"disruption": {"budgets": [{"nodes": "1", "reasons": ["Unhealthy"]}]}}}),
        ),
        (
            "pool: Balanced",
            pool(),
            json!({"spec": {"disruption": {"consolidationPolicy": "Balanced"}}}),
        ),
        (
            "pool: consolidateAfter garbage",
            pool(),
            json!({"spec": {"disruption": {"consolidateAfter": "soon"}}}),
        ),
        ("pool: weight 0", pool(), json!({"spec": {"weight": 0}})),
        ("pool: weight 101", pool(), json!({"spec": {"weight": 101}})),
        (
            "pool: static",
            pool(),
            json!({"spec": {"replicas": 3, "limits": {"nodes": 5}}}),
        ),
        (
            "pool: static with weight",
            pool(),
            json!({"spec": {"replicas": 3, "weight": 10}}),
        ),
        (
            "pool: static with a cpu limit",
            pool(),
            json!({"spec": {"replicas": 3, "limits": {"cpu": "100"}}}),
        ),
        (
            "pool: negative replicas",
            pool(),
            json!({"spec": {"replicas": -1}}),
        ),
        (
            "pool: expireAfter garbage",
            pool(),
            template(json!({"expireAfter": "10x"})),
        ),
        (
            "pool: empty nodeClassRef name",
            pool(),
            template(
                json!({"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": ""}}),
            ),
        ),
        (
            "pool: taint with a bad effect",
            pool(),
            template(json!({"taints": [{"key": "a", "effect": "Sometimes"}]})),
        ),
        ("class: valid", class(), json!({})),
        (
            "class: role and instanceProfile",
            class(),
            json!({"spec": {"instanceProfile": "p"}}),
        ),
        (
            "class: alias with another term",
            class(),
            json!({"spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]}}),
        ),
        (
            "class: alias without version",
            class(),
            json!({"spec": {"amiSelectorTerms": [{"alias": "al2023"}]}}),
        ),
        (
            "class: unknown alias family",
            class(),
            json!({"spec": {"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}}),
        ),
        (
            "class: windows alias pinned",
            class(),
            json!({"spec": {"amiSelectorTerms": [{"alias": "windows2022@v1"}]}}),
        ),
        (
            "class: id term without amiFamily",
            class(),
            json!({"spec": {"amiSelectorTerms": [{"id": "ami-0123"}]}}),
        ),
        (
            "class: reserved tag",
            class(),
            json!({"spec": {"tags": {"kubernetes.io/cluster/demo": "owned"}}}),
        ),
        (
            "class: no subnet terms",
            class(),
            json!({"spec": {"subnetSelectorTerms": []}}),
        ),
        (
            "class: subnet id and tags",
            class(),
            json!({"spec": {"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}}),
        ),
        (
            "class: EFA without the primary",
            class(),
            json!({"spec": {"networkInterfaces": [{"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}]}}),
        ),
        (
            "class: EFA with the primary",
            class(),
            json!({"spec": {"networkInterfaces": [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}, {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}]}}),
        ),
        (
            "class: placement group name and id",
            class(),
            json!({"spec": {"placementGroupSelector": {"name": "a", "id": "pg-1"}}}),
        ),
        (
            "class: empty connectionTracking",
            class(),
            json!({"spec": {"connectionTracking": {}}}),
        ),
        (
            "class: udpTimeout out of range",
            class(),
            json!({"spec": {"connectionTracking": {"udpTimeout": 5}}}),
        ),
        (
            "class: ebs without size or snapshot",
            class(),
            json!({"spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp3"}}]}}),
        ),
        (
            "class: initialization rate without snapshot",
            class(),
            json!({"spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeInitializationRate": 200}}]}}),
        ),
        (
            "class: volume of 100Ti",
            class(),
            json!({"spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Ti"}}]}}),
        ),
        (
            "class: two root volumes",
            class(),
            json!({"spec": {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}, {"deviceName": "/dev/xvdb", "rootVolume": true, "ebs": {"volumeSize": "20Gi"}}]}}),
        ),
        (
            "class: httpTokens sometimes",
            class(),
            json!({"spec": {"metadataOptions": {"httpTokens": "sometimes"}}}),
        ),
        (
            "class: hop limit 65",
            class(),
            json!({"spec": {"metadataOptions": {"httpPutResponseHopLimit": 65}}}),
        ),
        (
            "class: reservation id with owner",
            class(),
            json!({"spec": {"capacityReservationSelectorTerms": [{"id": "cr-1", "ownerID": "123456789012"}]}}),
        ),
        (
            "class: reservations by match criteria",
            class(),
            json!({"spec": {"capacityReservationSelectorTerms": [{"instanceMatchCriteria": "open"}]}}),
        ),
        (
            "class: kubelet field jointer does not type",
            class(),
            json!({"spec": {"kubelet": {"shutdownGracePeriod": "45s"}}}),
        ),
        (
            "class: negative maxPods",
            class(),
            json!({"spec": {"kubelet": {"maxPods": -1}}}),
        ),
        ("claim: valid", claim(), json!({})),
        (
            // Upstream's controller names the NodePool among a NodeClaim's requirements.
            "claim: nodepool requirement",
            claim(),
            json!({"spec": {"requirements": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]}]}}),
        ),
        (
            "claim: hostname requirement",
            claim(),
            json!({"spec": {"requirements": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}]}}),
        ),
        (
            "claim: restricted karpenter.sh label",
            claim(),
            json!({"spec": {"requirements": [{"key": "karpenter.sh/team", "operator": "In", "values": ["a"]}]}}),
        ),
        ("overlay: valid", overlay(), json!({})),
        (
            "overlay: 600 instance types in one requirement",
            overlay(),
            json!({"spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                "values": (0..600).map(|i| format!("x{i}.large")).collect::<Vec<_>>()}]}}),
        ),
        (
            "overlay: price and adjustment",
            overlay(),
            json!({"spec": {"priceAdjustment": "-10%"}}),
        ),
        (
            "overlay: adjustment below -100%",
            overlay(),
            json!({"spec": {"price": null, "priceAdjustment": "-150%"}}),
        ),
        (
            "overlay: cpu capacity",
            overlay(),
            json!({"spec": {"capacity": {"cpu": "4"}}}),
        ),
    ];
    cases
        .into_iter()
        .map(|(case, base, patch)| (case, merged(base, &patch)))
        .collect()
}

/// Whether the API server (with the CRDs installed now) accepts each object.
async fn verdicts(client: &kube::Client, corpus: &[(&str, Value)]) -> Vec<Result<(), String>> {
    let mut out = Vec::new();
    for (i, (_, object)) in corpus.iter().enumerate() {
        let name = format!("cel-case-{i}");
        let mut object = object.clone();
        object["metadata"] = json!({"name": name});
        let mut params = PatchParams::apply("jointer-tests").force();
        params.dry_run = true;
        let obj: DynamicObject = serde_json::from_value(object.clone()).expect("object");
        out.push(
            api_for(client, &object)
                .patch(&name, &params, &Patch::Apply(&obj))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
        );
    }
    out
}

/// Karpenter's CRDs: upstream's (from `$JOINTER_UPSTREAM_CRDS`) or jointer's, labelled as
/// `jointer apply` labels them.
pub(crate) fn karpenter_crds(upstream: bool) -> Vec<Value> {
    if !upstream {
        return jointer_controller::crds::all()
            .into_iter()
            .map(|(_, crd)| {
                let mut crd = serde_json::to_value(crd).expect("CRD");
                crd["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "jointer"});
                crd
            })
            .collect();
    }
    let file = std::env::var("JOINTER_UPSTREAM_CRDS")
        .expect("JOINTER_UPSTREAM_CRDS (source tests/env/.run/env)");
    let text = std::fs::read_to_string(&file).expect("upstream CRDs");
    documents(&text)
        .into_iter()
        .filter(|c| {
            matches!(
                c["spec"]["group"].as_str(),
                Some("karpenter.sh" | "karpenter.k8s.aws")
            )
        })
        .collect()
}

#[tokio::test]
async fn jointers_rules_accept_and_refuse_what_upstreams_do() {
    let _turn = testenv::TURN.lock().await;
    testenv::require();
    let client = testenv::kube().await;
    let corpus = corpus();
    install(&client, &karpenter_crds(false)).await;
    let ours = verdicts(&client, &corpus).await;
    install(&client, &karpenter_crds(true)).await;
    let theirs = verdicts(&client, &corpus).await;
    install(&client, &karpenter_crds(false)).await;

    let mut unlisted = Vec::new();
    let mut agree = 0;
    for (((case, _), ours), theirs) in corpus.iter().zip(&ours).zip(&theirs) {
        let listed = DIFFERENCES.iter().any(|(c, _)| c == case);
        if ours.is_ok() == theirs.is_ok() {
            agree += 1;
            assert!(
                !listed,
                "{case}: listed in DIFFERENCES but both now agree: remove it"
            );
            continue;
        }
        if !listed {
            unlisted.push(format!("{case}: jointer {ours:?}, upstream {theirs:?}"));
        }
    }
    println!(
        "{agree} of {} cases accepted or refused alike by jointer's and upstream Karpenter v1.15.2's CRDs",
        corpus.len()
    );
    assert!(
        unlisted.is_empty(),
        "jointer's and upstream's CRDs disagree:\n{}",
        unlisted.join("\n")
    );
    // The corpus must exercise refusals too, on both sides.
    assert!(ours.iter().filter(|v| v.is_err()).count() > 20);
}
