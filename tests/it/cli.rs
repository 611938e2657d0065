//! The commands doing their job: render, lint, convert, init, end to end through the binary.

use crate::support::Workspace;
use jointer_controller::api::{EC2NodeClass, NodePool, Validate};

fn example() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/examples/jointer.yaml"
    )
    .to_string()
}

/// Splits a YAML stream into typed, validated v1 objects (fails the test on anything else).
fn v1_objects(yaml: &str) -> (Vec<NodePool>, Vec<EC2NodeClass>) {
    let (mut pools, mut classes) = (Vec::new(), Vec::new());
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_yaml::Value::deserialize(doc).expect("YAML");
        match value["kind"].as_str() {
            Some("NodePool") => {
                let pool: NodePool = serde_yaml::from_value(value).expect("NodePool");
                assert_eq!(pool.validate(), vec![]);
                pools.push(pool);
            }
            Some("EC2NodeClass") => {
                let class: EC2NodeClass = serde_yaml::from_value(value).expect("EC2NodeClass");
                assert_eq!(class.validate(), vec![]);
                classes.push(class);
            }
            other => panic!("unexpected kind {other:?}"),
        }
    }
    (pools, classes)
}

use serde::Deserialize;

#[test]
fn the_bundled_example_renders_the_seed_setup_in_v1_form() {
    let ws = Workspace::new();
    let run = ws.jointer(&["render", "-f", &example()]);
    run.succeeded();
    let (pools, classes) = v1_objects(&run.stdout);
    assert_eq!((pools.len(), classes.len()), (1, 1));
    let class = &classes[0].spec;
    assert_eq!(class.role.as_deref(), Some("KarpenterNodeRole-demo"));
    assert_eq!(
        class.ami_selector_terms[0].alias.as_deref(),
        Some("al2023@latest")
    );
    let discovery = class.subnet_selector_terms[0].tags.as_ref().expect("tags");
    assert_eq!(
        discovery.get("karpenter.sh/discovery").map(String::as_str),
        Some("demo")
    );
    let pool = &pools[0].spec;
    let values = |key: &str| {
        pool.template
            .spec
            .requirements
            .iter()
            .find(|r| r.key == key)
            .map(|r| r.values.clone())
            .unwrap_or_default()
    };
    assert_eq!(values("karpenter.sh/capacity-type"), ["spot", "on-demand"]);
    assert_eq!(values("kubernetes.io/arch"), ["amd64", "arm64"]);
    assert_eq!(
        values("karpenter.k8s.aws/instance-category"),
        ["c", "m", "r"]
    );
    assert_eq!(pool.limits["cpu"].millis(), 1_000_000);
    assert_eq!(pool.limits["memory"].as_str(), "1000Gi");
    assert_eq!(pool.disruption.consolidate_after.to_string(), "30s");
    assert_eq!(pool.template.spec.expire_after.to_string(), "720h");
}

#[test]
fn render_crds_prints_the_committed_crds() {
    let ws = Workspace::new();
    let run = ws.jointer(&["render", "--what", "crds"]);
    run.succeeded();
    for file in [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
        "autoscaling.x-k8s.io_capacitybuffers.yaml",
    ] {
        let committed = std::fs::read_to_string(format!(
            "{}/manifests/crds/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("committed CRD");
        assert!(
            run.stdout.contains(&committed),
            "{file} differs from render --what crds"
        );
    }
}

#[test]
fn render_json_lists_the_objects() {
    let ws = Workspace::new();
    let run = ws.jointer(&["render", "-f", &example(), "--output", "json"]);
    run.succeeded();
    let out: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON");
    let kinds: Vec<&str> = out["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["EC2NodeClass", "NodePool"]);
}

#[test]
fn the_split_set_renders_a_tainted_spot_pool_and_an_on_demand_pool() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster: { name: prod, region: eu-west-1 }\ntemplates: { builtin: split }\n",
    );
    let run = ws.jointer(&["render"]);
    run.succeeded();
    let (pools, classes) = v1_objects(&run.stdout);
    assert_eq!(classes.len(), 1);
    let names: Vec<String> = pools
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["spot-batch", "on-demand"]);
    assert_eq!(
        pools[0].spec.template.spec.taints[0].key,
        "jointer.dev/interruptible"
    );
    assert!(pools[1].spec.template.spec.taints.is_empty());
    // Both single-capacity-type pools are deliberate and waived: lint is clean.
    let lint = ws.jointer(&["lint", "--strict"]);
    lint.succeeded();
    assert!(
        lint.stderr.contains("3 object(s) checked, 0 finding(s)"),
        "{}",
        lint.stderr
    );
}

#[test]
fn template_values_reach_the_templates() {
    let ws = Workspace::new();
    ws.write("jointer.yaml", "cluster: { name: demo, region: us-east-1 }\ntemplates:\n  values: { cpu_limit: 64, ami_alias: al2023@v20240807 }\nnodeRole: { name: custom-node-role }\n");
    let run = ws.jointer(&["render"]);
    run.succeeded();
    let (pools, classes) = v1_objects(&run.stdout);
    assert_eq!(pools[0].spec.limits["cpu"].millis(), 64_000);
    assert_eq!(
        classes[0].spec.ami_selector_terms[0].alias.as_deref(),
        Some("al2023@v20240807")
    );
    assert_eq!(classes[0].spec.role.as_deref(), Some("custom-node-role"));
}

#[test]
fn lint_warns_about_each_known_mistake_and_strict_fails() {
    let ws = Workspace::new();
    ws.write("jointer.yaml", "cluster: { name: demo, region: us-east-1 }\ninterruption: false\ntemplates: { dir: nodes }\n");
    ws.write(
        "nodes/pool.yaml",
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: { name: risky }
spec:
  template:
    spec:
      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: missing }
      requirements:
        - { key: node.kubernetes.io/instance-type, operator: In, values: [m5.large] }
        - { key: karpenter.sh/capacity-type, operator: In, values: [spot] }
  disruption:
    budgets: [ { nodes: '0' } ]
",
    );
    let run = ws.jointer(&["lint"]);
    run.succeeded();
    for rule in [
        "no-limits",
        "single-instance-type",
        "single-capacity-type",
        "spot-without-interruption",
        "budget-blocks-all",
        "unknown-node-class",
    ] {
        assert!(
            run.stderr.contains(&format!("warning[{rule}]")),
            "missing {rule}:\n{}",
            run.stderr
        );
    }
    assert!(
        run.stderr
            .contains("pool.yaml (rendered):12:18: warning[budget-blocks-all]"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("pool.yaml (rendered):10:13: warning[single-capacity-type]"),
        "{}",
        run.stderr
    );
    let strict = ws.jointer(&["lint", "--strict", "--output", "json"]);
    assert_eq!(strict.code, 1);
    let out: serde_json::Value = serde_json::from_str(&strict.stdout).expect("JSON");
    assert_eq!(out["ok"], false);
    assert_eq!(out["diagnostics"].as_array().map(Vec::len), Some(6));
}

#[test]
fn lint_treats_a_pool_without_capacity_type_as_on_demand_only() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster: { name: demo, region: us-east-1 }\ntemplates: { dir: nodes }\n",
    );
    ws.write("nodes/pool.yaml", "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: { name: p }\nspec:\n  limits: { cpu: 10 }\n  template:\n    spec:\n      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: c }\n      requirements: []\n");
    let run = ws.jointer(&["lint"]);
    run.succeeded();
    assert!(
        run.stderr.contains("warning[single-capacity-type]")
            && run.stderr.contains("defaults to on-demand"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_seed_v1beta1_setup_converts_to_valid_v1() {
    let ws = Workspace::new();
    ws.write("seed.yaml", &ws.fixture("convert/seed-v1beta1.yaml"));
    let run = ws.jointer(&["convert", "seed.yaml"]);
    run.succeeded();
    let (pools, classes) = v1_objects(&run.stdout);
    let pool = &pools[0].spec;
    assert_eq!(
        format!("{:?}", pool.disruption.consolidation_policy),
        "WhenEmptyOrUnderutilized"
    );
    assert_eq!(pool.disruption.consolidate_after.to_string(), "30s");
    assert_eq!(pool.template.spec.expire_after.to_string(), "720h");
    assert_eq!(pool.template.spec.node_class_ref.group, "karpenter.k8s.aws");
    assert_eq!(pool.template.spec.node_class_ref.kind, "EC2NodeClass");
    let class = &classes[0].spec;
    assert_eq!(
        class.ami_selector_terms[0].alias.as_deref(),
        Some("al2023@latest")
    );
    assert_eq!(class.metadata_options.http_put_response_hop_limit, 2);
    for change in [
        "WhenUnderutilized → WhenEmptyOrUnderutilized",
        "consolidateAfter 30s kept",
        "spec.disruption.expireAfter → spec.template.spec.expireAfter",
        "alias: al2023@latest",
        "httpPutResponseHopLimit set to 2",
    ] {
        assert!(
            run.stderr.contains(change),
            "missing change {change:?}:\n{}",
            run.stderr
        );
    }
    // The converted output is itself valid input: converting again changes nothing.
    ws.write("v1.yaml", &run.stdout);
    let again = ws.jointer(&["convert", "v1.yaml"]);
    again.succeeded();
    assert_eq!(again.stdout, run.stdout);
    assert!(
        again
            .stderr
            .lines()
            .all(|l| l.ends_with("already v1, unchanged")),
        "{}",
        again.stderr
    );
}

#[test]
fn convert_moves_kubelet_to_the_class_and_renames_annotations() {
    let ws = Workspace::new();
    ws.write("class.yaml", "apiVersion: karpenter.k8s.aws/v1beta1\nkind: EC2NodeClass\nmetadata: { name: big }\nspec:\n  amiFamily: Bottlerocket\n  role: r\n  subnetSelectorTerms: [ { id: subnet-0abc } ]\n  securityGroupSelectorTerms: [ { id: sg-0abc } ]\n  metadataOptions: { httpPutResponseHopLimit: 1 }\n");
    ws.write("pool.yaml", "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: { name: p }\nspec:\n  template:\n    metadata:\n      annotations: { karpenter.sh/do-not-consolidate: 'true' }\n    spec:\n      nodeClassRef: { apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: big }\n      requirements: []\n      kubelet: { maxPods: 50 }\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: { name: app, annotations: { karpenter.sh/do-not-evict: 'true' } }\nspec: {}\n");
    let run = ws.jointer(&["convert", "class.yaml", "pool.yaml"]);
    run.succeeded();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&run.stdout)
        .map(|d| serde_yaml::Value::deserialize(d).expect("yaml"))
        .collect();
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[0]["spec"]["kubelet"]["maxPods"], 50);
    assert_eq!(
        docs[0]["spec"]["amiSelectorTerms"][0]["alias"],
        "bottlerocket@latest"
    );
    assert_eq!(
        docs[0]["spec"]["metadataOptions"]["httpPutResponseHopLimit"],
        1
    );
    assert!(docs[1]["spec"]["template"]["spec"].get("kubelet").is_none());
    assert_eq!(
        docs[1]["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"],
        "true"
    );
    assert_eq!(
        docs[1]["spec"]["template"]["spec"]["nodeClassRef"]["group"],
        "karpenter.k8s.aws"
    );
    assert_eq!(
        docs[2]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"],
        "true"
    );
    assert!(docs[2]["metadata"]["annotations"]
        .get("karpenter.sh/do-not-evict")
        .is_none());
}

#[test]
fn init_writes_a_starter_that_renders() {
    let ws = Workspace::new();
    ws.jointer(&["init", "--cluster", "shop-prod", "--region", "eu-central-1"])
        .succeeded();
    let text = ws.read("jointer.yaml");
    assert!(text.contains("name: shop-prod") && text.contains("region: eu-central-1"));
    let run = ws.jointer(&["render"]);
    run.succeeded();
    assert!(run.stdout.contains("role: KarpenterNodeRole-shop-prod"));
    ws.jointer(&["lint", "--strict"]).succeeded();
}

#[test]
fn the_bundled_example_is_what_init_writes() {
    let ws = Workspace::new();
    ws.jointer(&["init", "--cluster", "demo", "--region", "us-east-1"])
        .succeeded();
    let committed = std::fs::read_to_string(example()).expect("example");
    assert_eq!(
        ws.read("jointer.yaml"),
        committed,
        "regenerate manifests/examples/jointer.yaml with `jointer init`"
    );
}

#[test]
fn bench_reports_every_figure_for_both_profiles() {
    let ws = Workspace::new();
    for (profile, pods) in [("upstream", "500"), ("aws", "300")] {
        let run = ws.jointer(&[
            "bench",
            "scheduling",
            "--profile",
            profile,
            "--pods",
            pods,
            "-o",
            "json",
        ]);
        let out: serde_json::Value = serde_json::from_str(&run.succeeded().stdout).expect("JSON");
        assert_eq!(out["profile"], profile);
        assert_eq!(out["plan_verified"], true);
        assert_eq!(out["unschedulable"], 0);
        for key in [
            "pods",
            "instance_types",
            "nodes",
            "solve_seconds",
            "pods_per_second",
            "price_per_hour",
            "lower_bound_per_hour",
            "gap_percent",
            "peak_rss_bytes",
        ] {
            assert!(!out[key].is_null(), "{profile}: missing {key}");
        }
        let (price, bound) = (
            out["price_per_hour"].as_f64().unwrap_or(0.0),
            out["lower_bound_per_hour"].as_f64().unwrap_or(f64::MAX),
        );
        assert!(
            bound > 0.0 && price >= bound,
            "{profile}: the plan ({price}) cannot beat the lower bound ({bound})"
        );
    }
    // Upstream's profile: hostname anti-affinity puts one of every five pods on its own node.
    let run = ws.jointer(&["bench", "scheduling", "--pods", "500", "-o", "json"]);
    let out: serde_json::Value = serde_json::from_str(&run.succeeded().stdout).expect("JSON");
    assert_eq!(out["nodes"], 100);
}

/// The upstream-style NodePools and EC2NodeClasses as node templates: render keeps every
/// field (the static pool's replicas, taints' timeAdded, the untyped kubelet field, the EBS
/// initialisation rate, …) and lint reads them.
#[test]
fn the_upstream_style_examples_render_and_lint() {
    let ws = Workspace::new();
    let dir = format!(
        "{}/manifests/examples/upstream-v1.15",
        env!("CARGO_MANIFEST_DIR")
    );
    for f in ["nodepools.yaml", "ec2nodeclasses.yaml"] {
        let text = std::fs::read_to_string(format!("{dir}/{f}")).expect("example");
        ws.write(&format!("nodes/{f}"), &text);
    }
    ws.write(
        "jointer.yaml",
        "cluster: { name: demo, region: us-east-1 }\ntemplates: { dir: nodes }\n",
    );
    let run = ws.jointer(&["render"]);
    run.succeeded();
    let (pools, classes) = v1_objects(&run.stdout);
    assert_eq!((pools.len(), classes.len()), (2, 2), "{}", run.stdout);
    for kept in [
        "replicas: 2",
        "consolidationPolicy: Balanced",
        "- Unhealthy",
        "timeAdded:",
        "containerLogMaxSize: 50Mi",
        "volumeInitializationRate: 200",
        "instanceMatchCriteria: targeted",
        "interfaceType: efa-only",
        "context: cc-0123456789abcdef0",
    ] {
        assert!(
            run.stdout.contains(kept),
            "render lost {kept:?}:\n{}",
            run.stdout
        );
    }
    let lint = ws.jointer(&["lint"]);
    assert_eq!(lint.code, 0, "{lint:#?}");
}
