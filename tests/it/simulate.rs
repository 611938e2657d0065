//! `jointer simulate` end to end through the binary: the bundled example, the seed's
//! experiment, user catalogs, and bad input.

use crate::support::Workspace;

fn repo(rel: &str) -> String {
    format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn json(run: &crate::support::Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.stdout))
}

#[test]
fn no_arguments_simulate_the_bundled_example() {
    let ws = Workspace::new();
    let run = ws.jointer(&["simulate"]);
    run.succeeded();
    assert!(
        run.stdout
            .contains("Simulating bundled example in us-east-1 (prices: estimated)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Prices are estimates"));
    let out = json(ws.jointer(&["simulate", "--output", "json"]).succeeded());
    assert_eq!(out["price_source"], "estimated");
    let claims = out["nodeclaims"].as_array().expect("nodeclaims");
    assert!(!claims.is_empty());
    let total: f64 = claims
        .iter()
        .map(|c| c["price_per_hour"].as_f64().unwrap_or(0.0))
        .sum();
    assert!((total - out["total_price_per_hour"].as_f64().unwrap_or(-1.0)).abs() < 1e-9);
    for c in claims {
        for key in ["nodepool", "instance_type", "zone", "capacity_type", "pods"] {
            assert!(!c[key].is_null(), "missing {key} in {c}");
        }
    }
    // 6 web + 4 api + 3 cache + 8 report pods are placed; the GPU pod cannot be.
    assert_eq!(out["pods_scheduled"], 21);
    // The binding order names every placed pod once.
    let mut order: Vec<&str> = out["binding_order"]
        .as_array()
        .expect("binding_order")
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    let mut placed: Vec<&str> = claims
        .iter()
        .flat_map(|c| c["pods"].as_array().into_iter().flatten())
        .filter_map(|p| p.as_str())
        .collect();
    order.sort_unstable();
    placed.sort_unstable();
    assert_eq!(order, placed);
    let unschedulable = out["unschedulable"].as_array().expect("unschedulable");
    assert_eq!(unschedulable.len(), 1);
    assert_eq!(unschedulable[0]["pod"], "ml/model-training");
    assert!(unschedulable[0]["reason"]
        .as_str()
        .unwrap_or_default()
        .contains("nvidia.com/gpu"));
    // The cache's anti-affinity keeps its three replicas on three nodes.
    let cache_nodes = claims
        .iter()
        .filter(|c| {
            c["pods"].as_array().is_some_and(|p| {
                p.iter()
                    .any(|p| p.as_str().unwrap_or_default().starts_with("shop/cache-"))
            })
        })
        .count();
    assert_eq!(cache_nodes, 3);
}

#[test]
fn the_seeds_experiment_shows_what_flexibility_saves() {
    let ws = Workspace::new();
    let run = |pool: &str| {
        let r = ws.jointer(&[
            "simulate",
            "-o",
            "json",
            "--nodepools",
            &repo("manifests/examples/seed/class.yaml"),
            &repo(&format!("manifests/examples/seed/{pool}.yaml")),
            "--workload",
            &repo("manifests/examples/seed/workload.yaml"),
        ]);
        json(r.succeeded())
    };
    let one = run("one-type");
    let eight = run("eight-types");
    let types = |out: &serde_json::Value| {
        out["nodeclaims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["instance_type"].as_str().unwrap_or_default().to_string())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(types(&one).into_iter().collect::<Vec<_>>(), ["m5.xlarge"]);
    assert!(one["nodeclaims"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["capacity_type"] == "on-demand"));
    let (p1, p8) = (
        one["total_price_per_hour"].as_f64().unwrap(),
        eight["total_price_per_hour"].as_f64().unwrap(),
    );
    assert!(
        p8 < p1 / 2.0,
        "eight types ({p8}) should cost well under one type ({p1})"
    );
    assert_eq!(one["pods_scheduled"], eight["pods_scheduled"]);
    assert!(eight["cpu_utilization"].as_f64().unwrap() > one["cpu_utilization"].as_f64().unwrap());
}

/// The Savings Plan example: a NodeOverlay discounting m5 changes what the same pool buys,
/// and the price it is bought at is the discounted one.
#[test]
fn a_savings_plan_overlay_changes_the_chosen_type_and_its_price() {
    let ws = Workspace::new();
    let run = |extra: &[String]| {
        let class = repo("manifests/examples/seed/class.yaml");
        let pool = repo("manifests/examples/savings-plan/pool.yaml");
        let workload = repo("manifests/examples/seed/workload.yaml");
        let mut args = vec!["simulate", "-o", "json", "--nodepools", &class, &pool];
        args.extend(extra.iter().map(String::as_str));
        args.extend(["--workload", &workload]);
        json(ws.jointer(&args).succeeded())
    };
    let families = |out: &serde_json::Value| {
        out["nodeclaims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let t = c["instance_type"].as_str().unwrap_or_default();
                t.split('.').next().unwrap_or_default().to_string()
            })
            .collect::<std::collections::BTreeSet<_>>()
    };
    let list = run(&[]);
    let discounted = run(&[repo("manifests/examples/savings-plan/overlay.yaml")]);
    assert!(
        !families(&list).contains("m5"),
        "at list prices m5 is not chosen: {list}"
    );
    assert_eq!(
        families(&discounted).into_iter().collect::<Vec<_>>(),
        ["m5"]
    );
    assert_eq!(list["pods_scheduled"], discounted["pods_scheduled"]);
    // m5.2xlarge's estimated on-demand price is 0.384 $/h; 45 % off is 0.2112.
    let m5_2xl = discounted["nodeclaims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["instance_type"] == "m5.2xlarge")
        .expect("an m5.2xlarge");
    assert!((m5_2xl["price_per_hour"].as_f64().unwrap() - 0.2112).abs() < 1e-9);
    assert!(
        discounted["total_price_per_hour"].as_f64().unwrap()
            < list["total_price_per_hour"].as_f64().unwrap()
    );
}

/// The AMI-families example: the same m5.large allocates per its class's family — AL2023
/// reserves memory for the 29 pods of its ENI table even with maxPods 110, Bottlerocket for
/// the 110 it runs, Windows is not ENI-limited — and Windows pods land only on the Windows pool.
#[test]
fn each_ami_family_gives_its_own_allocatable() {
    let ws = Workspace::new();
    let dir = "manifests/examples/ami-families";
    let (classes, pools, workload) = (
        repo(&format!("{dir}/classes.yaml")),
        repo(&format!("{dir}/pools.yaml")),
        repo(&format!("{dir}/workload.yaml")),
    );
    let out = json(
        ws.jointer(&[
            "simulate",
            "-o",
            "json",
            "--nodepools",
            &classes,
            &pools,
            "--workload",
            &workload,
        ])
        .succeeded(),
    );
    let claim = |pool: &str| {
        out["nodeclaims"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["nodepool"] == pool)
            .unwrap_or_else(|| panic!("no NodeClaim of pool {pool}: {out}"))
            .clone()
    };
    let (al2023, bottlerocket, windows) =
        (claim("al2023"), claim("bottlerocket"), claim("windows"));
    // m5.large: 8 GiB × 0.925 − (11 × pods + 255) Mi − 100 Mi eviction.
    assert_eq!(al2023["memory_allocatable"], "6.74Gi");
    assert_eq!(bottlerocket["memory_allocatable"], "5.87Gi");
    assert_eq!(windows["memory_allocatable"], "5.87Gi");
    for c in [&al2023, &bottlerocket, &windows] {
        assert_eq!(c["pods_allocatable"], 110, "{c}");
    }
    assert!(windows["pods"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p.as_str().unwrap_or_default().contains("iis")));
    assert_eq!(out["unschedulable"].as_array().map(Vec::len), Some(0));
}

#[test]
fn conflicting_overlays_are_refused_naming_both() {
    let ws = Workspace::new();
    let overlay = |name: &str, price: &str| {
        format!("apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{ name: {name} }}\nspec:\n  requirements: [ {{ key: karpenter.k8s.aws/instance-family, operator: In, values: [m5] }} ]\n  price: '{price}'\n")
    };
    ws.write(
        "overlays.yaml",
        &format!(
            "{}---\n{}",
            overlay("first", "0.01"),
            overlay("second", "0.02")
        ),
    );
    ws.jointer(&[
        "simulate",
        "--nodepools",
        &repo("manifests/examples/seed/class.yaml"),
        &repo("manifests/examples/savings-plan/pool.yaml"),
        "overlays.yaml",
    ])
    .refused(&[
        "NodeOverlay first: conflicts with NodeOverlay second",
        "(Conflict)",
    ]);
    // An invalid one is located like any other object.
    ws.write("bad.yaml", &overlay("bad", "-1"));
    ws.jointer(&[
        "simulate",
        "--nodepools",
        &repo("manifests/examples/seed/class.yaml"),
        "bad.yaml",
    ])
    .refused(&["bad.yaml:6:", "non-negative number of dollars per hour"]);
}

#[test]
fn a_config_renders_the_pools_and_sets_the_region() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster: { name: demo, region: eu-west-1 }\ntemplates: { builtin: split }\n",
    );
    ws.write("work.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: batch }\nspec:\n  replicas: 4\n  selector: { matchLabels: { app: batch } }\n  template:\n    metadata: { labels: { app: batch } }\n    spec:\n      tolerations: [ { key: jointer.dev/interruptible, operator: Exists } ]\n      nodeSelector: { jointer.dev/workload: batch }\n      containers: [ { name: c, image: x, resources: { requests: { cpu: '2', memory: 4Gi } } } ]\n");
    let out = json(
        ws.jointer(&[
            "simulate",
            "-f",
            "jointer.yaml",
            "--workload",
            "work.yaml",
            "-o",
            "json",
        ])
        .succeeded(),
    );
    assert_eq!(out["region"], "eu-west-1");
    let claims = out["nodeclaims"].as_array().unwrap();
    assert!(claims.iter().all(|c| c["nodepool"] == "spot-batch"
        && c["capacity_type"] == "spot"
        && c["zone"]
            .as_str()
            .unwrap_or_default()
            .starts_with("eu-west-1")));
}

#[test]
fn a_user_catalog_is_used_with_its_stated_allocatable() {
    let ws = Workspace::new();
    ws.write(
        "catalog.json",
        r#"[{"name": "m9.tiny", "vcpu": 2, "memory_mib": 4096, "arch": "amd64", "offerings": [{"zone": "z1", "capacity_type": "on-demand", "price": 0.05}], "allocatable": {"cpu": "1900m", "memory": "3Gi", "pods": "10"}},
            {"name": "m9.big", "vcpu": 8, "memory_mib": 32768, "offerings": [{"zone": "z1", "capacity_type": "on-demand", "price": 0.4}]}]"#,
    );
    ws.write("work.yaml", "apiVersion: v1\nkind: Pod\nmetadata: { name: p }\nspec:\n  containers: [ { name: c, image: x, resources: { requests: { cpu: 1900m, memory: 3Gi } } } ]\n");
    let out = json(
        ws.jointer(&[
            "simulate",
            "--catalog",
            "catalog.json",
            "--workload",
            "work.yaml",
            "-o",
            "json",
        ])
        .succeeded(),
    );
    assert_eq!(out["price_source"], "file");
    assert_eq!(out["nodeclaims"][0]["instance_type"], "m9.tiny");
    assert_eq!(out["nodeclaims"][0]["cpu_allocatable"], "1.9");
}

#[test]
fn daemonsets_add_their_requests_to_every_node() {
    let ws = Workspace::new();
    ws.write("work.yaml", "apiVersion: v1\nkind: Pod\nmetadata: { name: p }\nspec:\n  containers: [ { name: c, image: x, resources: { requests: { cpu: '1', memory: 1Gi } } } ]\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: { name: agent }\nspec:\n  selector: { matchLabels: { a: b } }\n  template:\n    metadata: { labels: { a: b } }\n    spec:\n      containers: [ { name: c, image: x, resources: { requests: { cpu: 500m, memory: 256Mi } } } ]\n");
    let out = json(
        ws.jointer(&["simulate", "--workload", "work.yaml", "-o", "json"])
            .succeeded(),
    );
    assert_eq!(out["nodeclaims"][0]["cpu_requested"], "1.5");
}

// Bad input: exit 1, located message, nothing on stdout.

#[test]
fn workload_with_invalid_yaml() {
    let ws = Workspace::new();
    ws.write(
        "work.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: { name: p\n",
    );
    ws.jointer(&["simulate", "--workload", "work.yaml"])
        .refused(&["work.yaml:", "invalid YAML"]);
}

#[test]
fn workload_of_an_unknown_kind() {
    let ws = Workspace::new();
    ws.write(
        "work.yaml",
        "apiVersion: v1\nkind: Service\nmetadata: { name: s }\n",
    );
    ws.jointer(&["simulate", "--workload", "work.yaml"])
        .refused(&[
            "work.yaml:2:1",
            "unsupported workload v1/Service",
            "Deployment",
        ]);
}

#[test]
fn workload_with_an_unparseable_quantity() {
    let ws = Workspace::new();
    ws.write("work.yaml", "apiVersion: v1\nkind: Pod\nmetadata: { name: p }\nspec:\n  containers:\n    - name: c\n      image: x\n      resources: { requests: { cpu: two } }\n");
    ws.jointer(&["simulate", "--workload", "work.yaml"])
        .refused(&[
            "work.yaml:8:",
            "spec.containers[0].resources.requests.cpu",
            "invalid quantity \"two\"",
        ]);
}

#[test]
fn workload_with_a_negative_request() {
    let ws = Workspace::new();
    ws.write("work.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: d }\nspec:\n  selector: {}\n  template:\n    spec:\n      containers:\n        - name: c\n          image: x\n          resources: { requests: { memory: -1Gi } }\n");
    ws.jointer(&["simulate", "--workload", "work.yaml"])
        .refused(&[
            "work.yaml:11:",
            "spec.template.spec.containers[0].resources.requests.memory",
            "negative",
        ]);
}

#[test]
fn a_nodepool_referencing_a_missing_class() {
    let ws = Workspace::new();
    ws.jointer(&["simulate", "--nodepools", &repo("manifests/examples/seed/one-type.yaml")]).refused(&["one-type.yaml", "NodePool one-type references EC2NodeClass \"default\", which is not defined (defined: none)"]);
}

#[test]
fn an_invalid_nodepool_file() {
    let ws = Workspace::new();
    ws.write("pool.yaml", "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: { name: p }\nspec:\n  template:\n    spec:\n      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }\n      requirements: [ { key: a, operator: Gt, values: ['1', '2'] } ]\n");
    ws.jointer(&["simulate", "--nodepools", "pool.yaml"])
        .refused(&["pool.yaml:8:", "single non-negative integer"]);
}

#[test]
fn an_empty_catalog() {
    let ws = Workspace::new();
    ws.write("catalog.json", "[]");
    ws.jointer(&["simulate", "--catalog", "catalog.json"])
        .refused(&["catalog.json", "lists no instance types"]);
}

#[test]
fn a_malformed_catalog() {
    let ws = Workspace::new();
    ws.write("catalog.json", "[{\"name\": \"x\", \"vcpu\": \"two\"}]");
    ws.jointer(&["simulate", "--catalog", "catalog.json"])
        .refused(&["catalog.json:1:", "invalid catalog"]);
}

#[test]
fn a_catalog_entry_without_offerings() {
    let ws = Workspace::new();
    ws.write(
        "catalog.json",
        r#"[{"name": "x", "vcpu": 2, "memory_mib": 1024, "offerings": []}]"#,
    );
    ws.jointer(&["simulate", "--catalog", "catalog.json"])
        .refused(&["instance type \"x\": needs at least one offering"]);
}

#[test]
fn an_unknown_region() {
    let ws = Workspace::new();
    ws.jointer(&["simulate", "--region", "mars-north-1"])
        .refused(&["region \"mars-north-1\" is not in the catalog", "us-east-1"]);
}

#[test]
fn a_missing_workload_file() {
    let ws = Workspace::new();
    ws.jointer(&["simulate", "--workload", "nope.yaml"])
        .refused(&["nope.yaml", "file not found"]);
}

/// The upstream-style examples (every upstream v1.15 spec field) are read by simulate with the
/// bundled workload: the static pool keeps exactly its replicas, the dynamic pool takes the
/// rest, the overlays apply.
#[test]
fn the_upstream_style_examples_simulate() {
    let ws = Workspace::new();
    let dir = repo("manifests/examples/upstream-v1.15");
    let files = ["nodepools.yaml", "ec2nodeclasses.yaml", "nodeoverlays.yaml"];
    let mut args = vec!["simulate".to_string(), "--output".into(), "json".into()];
    for f in files {
        args.push("--nodepools".into());
        args.push(format!("{dir}/{f}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = json(ws.jointer(&args).succeeded());
    let claims = out["nodeclaims"].as_array().expect("nodeclaims");
    let of = |pool: &str| -> Vec<&serde_json::Value> {
        claims.iter().filter(|c| c["nodepool"] == pool).collect()
    };
    // replicas: 2 (limits.nodes 3 is only a cap), the one type its requirements allow.
    let fixed = of("static");
    assert_eq!(fixed.len(), 2, "{out:#}");
    for node in &fixed {
        assert_eq!(node["instance_type"], "m7i.xlarge");
        assert_eq!(node["capacity_type"], "on-demand");
    }
    assert!(!of("general").is_empty(), "{out:#}");
    assert_eq!(out["pods_scheduled"], 21);
    let placed_on_static: usize = fixed
        .iter()
        .map(|n| n["pods"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(
        placed_on_static > 0,
        "pods fill the static nodes first: {out:#}"
    );

    // The CapacityBuffers are for the cluster: simulate says it does not read them.
    let run = ws.jointer(&[
        "simulate",
        "--nodepools",
        &format!("{dir}/capacitybuffers.yaml"),
    ]);
    run.refused(&[
        "capacitybuffers.yaml:6:1:",
        "CapacityBuffer/api-headroom",
        "simulate does not model buffers yet",
    ]);
    // …but their fields are checked like any other object's.
    let bad = std::fs::read_to_string(format!("{dir}/capacitybuffers.yaml"))
        .expect("example")
        .replace("  percentage: 20", "  percent: 20");
    ws.write("buffers.yaml", &bad);
    ws.jointer(&["simulate", "--nodepools", "buffers.yaml"])
        .refused(&[
            "buffers.yaml:30:3:",
            "CapacityBuffer/web-headroom spec.percent:",
            "`percentage`",
        ]);
}

/// Without replicas the same pool would be provisioned for pods; with replicas it keeps
/// exactly that many nodes even when no pod needs them.
#[test]
fn a_static_pool_keeps_its_nodes_without_pods() {
    let ws = Workspace::new();
    ws.write("class.yaml", "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: { name: default }\nspec:\n  role: R\n  amiSelectorTerms: [ { alias: al2023@latest } ]\n  subnetSelectorTerms: [ { tags: { a: b } } ]\n  securityGroupSelectorTerms: [ { tags: { a: b } } ]\n");
    ws.write("pool.yaml", "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: { name: fixed }\nspec:\n  replicas: 3\n  limits: { nodes: \"2\" }\n  template:\n    spec:\n      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }\n      requirements:\n        - { key: node.kubernetes.io/instance-type, operator: In, values: [m7i.large] }\n");
    ws.write("none.yaml", "apiVersion: v1\nkind: Pod\nmetadata: { name: tiny }\nspec:\n  containers: [ { name: c, image: x, resources: { requests: { cpu: 100m } } } ]\n");
    let out = json(
        ws.jointer(&[
            "simulate",
            "--nodepools",
            "class.yaml",
            "--nodepools",
            "pool.yaml",
            "--workload",
            "none.yaml",
            "--output",
            "json",
        ])
        .succeeded(),
    );
    let claims = out["nodeclaims"].as_array().expect("nodeclaims");
    // limits.nodes caps replicas; the one pod goes on one of them, nothing else launches.
    assert_eq!(claims.len(), 2, "{out:#}");
    assert!(claims.iter().all(|c| c["instance_type"] == "m7i.large"));
    assert_eq!(out["pods_scheduled"], 1);
}
