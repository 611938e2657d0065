//! The cluster side of the bootstrap against the real API server (and moto): CRDs upgraded in
//! place, the controller bundle or Helm release, node classes and pools, prune, drift, RBAC,
//! `apply --wait` and the complete teardown with its sweep. The local API server stands in for
//! every test world's EKS cluster, so these tests take turns and each leaves it as it found it.

use std::time::Instant;

use crate::support::testenv::{
    self, audit_offset, clear_calls, jointer_kube_writes_since, kube_requests_since, mutating_calls,
};
use crate::support::upstream::UpstreamController;
use crate::support::world::Setup;
use jointer::cluster::container_env;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::ResourceExt;
use serde_json::{json, Value};

fn nodepools(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
        "nodepools",
    );
    Api::all_with(client.clone(), &resource)
}

fn nodeclasses(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("karpenter.k8s.aws", "v1", "EC2NodeClass"),
        "ec2nodeclasses",
    );
    Api::all_with(client.clone(), &resource)
}

/// What one jointer run cost: wall time, AWS calls (gap-layer log) and API server requests
/// (audit log).
struct Cost {
    seconds: f64,
    aws_calls: usize,
    aws_mutating: usize,
    kube_requests: usize,
    kube_writes: usize,
}

impl std::fmt::Display for Cost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2} s, {} AWS calls ({} mutating), {} API server requests ({} writes)",
            self.seconds, self.aws_calls, self.aws_mutating, self.kube_requests, self.kube_writes
        )
    }
}

fn measured<T>(run: impl FnOnce() -> T) -> (T, Cost) {
    let offset = audit_offset();
    clear_calls();
    let started = Instant::now();
    let out = run();
    let seconds = started.elapsed().as_secs_f64();
    let cost = Cost {
        seconds,
        aws_calls: testenv::calls().len(),
        aws_mutating: mutating_calls().len(),
        kube_requests: kube_requests_since("jointer/", offset),
        kube_writes: jointer_kube_writes_since(offset).len(),
    };
    (out, cost)
}

/// Every test ends with this: nothing of jointer's left in the cluster or on AWS.
fn torn_down(s: &Setup) {
    let run = s.jointer(&["teardown", "--yes"]);
    assert_eq!(run.code, 0, "teardown: {run:#?}");
}

#[tokio::test]
async fn apply_installs_controller_and_node_objects_and_a_second_apply_writes_nothing() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-apply", "").await;
    let client = testenv::kube().await;

    let (_, cold) = measured(|| s.apply());
    assert!(cold.kube_writes > 0 && cold.aws_mutating > 0, "{cold}");

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    let d = deployments
        .get("jointer-controller")
        .await
        .expect("deployment");
    assert_eq!(d.spec.replicas, Some(2));
    let pod = d.spec.template.spec.clone().expect("pod spec");
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    let env = container_env(&d);
    assert!(
        env.contains(&("CLUSTER_NAME".into(), s.cluster.clone())),
        "{env:?}"
    );
    assert!(
        env.contains(&("INTERRUPTION_QUEUE".into(), s.cluster.clone())),
        "{env:?}"
    );
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    let sa = sa.get("jointer-controller").await.expect("service account");
    assert!(
        !sa.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("eks.amazonaws.com/role-arn"),
        "no IRSA annotation with Pod Identity"
    );
    let pool = nodepools(&client)
        .get("default")
        .await
        .expect("NodePool default");
    assert_eq!(
        pool.metadata.labels.unwrap_or_default()["app.kubernetes.io/managed-by"],
        "jointer"
    );
    let class = nodeclasses(&client)
        .get("default")
        .await
        .expect("EC2NodeClass default");
    assert_eq!(class.data["spec"]["role"], s.node_role());
    let inventory: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let listed = inventory.get("jointer-inventory").await.expect("inventory");
    assert!(listed.data.unwrap_or_default()["objects"].contains("\"NodePool\""));

    // Converged: nothing written anywhere.
    let (again, warm) = measured(|| s.apply());
    assert!(again.stdout.contains("already converged"), "{again:#?}");
    assert_eq!(warm.kube_writes, 0, "{warm}");
    assert_eq!(warm.aws_mutating, 0, "{warm}");

    let (_, drift) = measured(|| s.in_sync());
    let (_, teardown) = measured(|| torn_down(&s));
    eprintln!(
        "figures (whole setup):\n  cold apply      {cold}\n  converged apply {warm}\n  drift           {drift}\n  teardown        {teardown}"
    );
    assert!(nodepools(&client)
        .get_opt("default")
        .await
        .unwrap()
        .is_none());
    assert!(deployments
        .get_opt("jointer-controller")
        .await
        .unwrap()
        .is_none());
    assert!(inventory
        .get_opt("jointer-inventory")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn an_older_crd_is_drift_and_apply_upgrades_it_in_place_keeping_the_objects() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-crd", "").await;
    let client = testenv::kube().await;
    s.apply();

    // What an older release left: the NodePool schema without the template's
    // `terminationGracePeriod` (a field the rendered pools leave out and no CEL rule names, so
    // the API server takes the older schema), an older version label.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut old = crds.get("nodepools.karpenter.sh").await.unwrap();
    old.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("jointer.dev/version".into(), "0.0.1".into());
    for version in &mut old.spec.versions {
        let spec = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("template"))
            .and_then(|t| t.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|s| s.properties.as_mut())
            .expect("template spec properties");
        assert!(spec.remove("terminationGracePeriod").is_some());
    }
    crds.replace("nodepools.karpenter.sh", &PostParams::default(), &old)
        .await
        .expect("downgrade the CRD");

    let run = s.jointer(&["drift"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(
        run.stdout.lines().any(
            |l| l.contains("CustomResourceDefinition nodepools.karpenter.sh")
                && l.contains("jointer.dev/version")
                && l.contains("0.0.1")
        ),
        "{}",
        run.stdout
    );
    s.apply();
    s.in_sync();
    let upgraded = crds.get("nodepools.karpenter.sh").await.unwrap();
    let served = serde_json::to_value(&upgraded.spec.versions[0]).unwrap();
    assert!(
        served
            .pointer("/schema/openAPIV3Schema/properties/spec/properties/template/properties/spec/properties/terminationGracePeriod")
            .is_some(),
        "the new schema is served"
    );
    assert!(
        nodepools(&client)
            .get_opt("default")
            .await
            .unwrap()
            .is_some(),
        "objects survive the upgrade"
    );
    torn_down(&s);
}

#[tokio::test]
async fn a_pool_dropped_from_the_templates_is_pruned_only_with_yes() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-prune", "templates: { dir: nodes }").await;
    let client = testenv::kube().await;
    let class = format!(
        "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{ name: default }}
spec:
  role: {}
  amiSelectorTerms: [ {{ alias: al2023@latest }} ]
  subnetSelectorTerms: [ {{ tags: {{ karpenter.sh/discovery: {} }} }} ]
  securityGroupSelectorTerms: [ {{ tags: {{ karpenter.sh/discovery: {} }} }} ]
",
        s.node_role(),
        s.cluster,
        s.cluster
    );
    let pool = |name: &str| {
        format!(
            "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{ name: {name} }}
spec:
  template:
    spec:
      nodeClassRef: {{ group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }}
      requirements:
        - {{ key: karpenter.sh/capacity-type, operator: In, values: [on-demand, spot] }}
  limits: {{ cpu: 100 }}
"
        )
    };
    s.ws.write("nodes/class.yaml", &class);
    s.ws.write("nodes/general.yaml", &pool("general"));
    s.ws.write("nodes/batch.yaml", &pool("batch"));
    s.apply();
    assert!(nodepools(&client).get_opt("batch").await.unwrap().is_some());

    std::fs::remove_file(s.ws.path("nodes/batch.yaml")).unwrap();
    let plan = s.jointer(&["plan"]);
    assert_eq!(plan.code, 0, "{plan:#?}");
    assert!(
        plan.stdout.lines().any(|l| l.contains("- NodePool batch")
            && l.contains("no longer in the templates")
            && l.contains("drained and terminated")),
        "{}",
        plan.stdout
    );
    // Not on a terminal and no --yes: everything else, but not the pool.
    let held = s.jointer(&["apply"]);
    assert_eq!(held.code, 1, "{held:#?}");
    assert!(
        held.stderr.contains("held back") && held.stderr.contains("NodePool batch"),
        "{}",
        held.stderr
    );
    assert!(nodepools(&client).get_opt("batch").await.unwrap().is_some());
    s.apply();
    assert!(nodepools(&client).get_opt("batch").await.unwrap().is_none());
    assert!(nodepools(&client)
        .get_opt("general")
        .await
        .unwrap()
        .is_some());
    s.in_sync();
    torn_down(&s);
}

#[tokio::test]
async fn a_pool_edited_by_another_field_manager_is_drift_and_apply_takes_it_back() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-drift", "").await;
    let client = testenv::kube().await;
    s.apply();
    nodepools(&client)
        .patch(
            "default",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "default"}, "spec": {"limits": {"cpu": "5"}}})),
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    deployments
        .patch(
            "jointer-controller",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    let run = s.jointer(&["drift"]);
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(
        run.stdout.lines().any(|l| l.contains("NodePool default")
            && l.contains("spec.limits.cpu")
            && l.contains("5 → ")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("Deployment kube-system/jointer-controller")
                && l.contains("spec.replicas")
                && l.contains("4 → 2")),
        "{}",
        run.stdout
    );
    let json = s.jointer(&["drift", "-o", "json"]);
    let report: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(report["inSync"], false);
    s.apply();
    s.in_sync();
    let pool = nodepools(&client).get("default").await.unwrap();
    assert_ne!(pool.data["spec"]["limits"]["cpu"], "5");
    torn_down(&s);
}

#[tokio::test]
async fn the_controller_service_account_can_do_its_job_and_nothing_more() {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };

    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-rbac", "").await;
    s.apply();
    let admin = testenv::kube().await;
    let token = testenv::controller_token(&admin, 600).await;
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let controller = kube::Client::try_from(config).unwrap();
    let reviews: Api<SelfSubjectAccessReview> = Api::all(controller);
    let can = |verb: &str, group: &str, resource: &str, sub: &str, ns: &str| {
        let reviews = reviews.clone();
        let attrs = ResourceAttributes {
            verb: Some(verb.into()),
            group: Some(group.into()),
            resource: Some(resource.into()),
            subresource: (!sub.is_empty()).then(|| sub.into()),
            namespace: (!ns.is_empty()).then(|| ns.into()),
            ..Default::default()
        };
        async move {
            reviews
                .create(
                    &PostParams::default(),
                    &SelfSubjectAccessReview {
                        spec: SelfSubjectAccessReviewSpec {
                            resource_attributes: Some(attrs),
                            ..Default::default()
                        },
                        ..Default::default()
                    },
                )
                .await
                .expect("review")
                .status
                .expect("status")
                .allowed
        }
    };
    for (verb, group, resource, sub, ns) in [
        ("watch", "karpenter.sh", "nodepools", "", ""),
        ("create", "karpenter.sh", "nodeclaims", "", ""),
        ("patch", "karpenter.sh", "nodeclaims", "status", ""),
        ("patch", "karpenter.sh", "nodepools", "status", ""),
        ("update", "karpenter.k8s.aws", "ec2nodeclasses", "", ""),
        ("patch", "karpenter.k8s.aws", "ec2nodeclasses", "status", ""),
        ("list", "", "pods", "", ""),
        ("delete", "", "nodes", "", ""),
        ("create", "", "pods", "eviction", "default"),
        ("list", "policy", "poddisruptionbudgets", "", ""),
        ("list", "apps", "daemonsets", "", ""),
        ("watch", "autoscaling.x-k8s.io", "capacitybuffers", "", ""),
        (
            "patch",
            "autoscaling.x-k8s.io",
            "capacitybuffers",
            "status",
            "",
        ),
        ("watch", "", "podtemplates", "", ""),
        ("list", "storage.k8s.io", "csinodes", "", ""),
        ("create", "", "events", "", "default"),
        ("update", "coordination.k8s.io", "leases", "", "kube-system"),
    ] {
        assert!(
            can(verb, group, resource, sub, ns).await,
            "{verb} {group}/{resource}/{sub} must be allowed"
        );
    }
    for (verb, group, resource, sub, ns) in [
        ("get", "", "secrets", "", "kube-system"),
        ("delete", "apps", "deployments", "", "kube-system"),
        ("create", "", "pods", "", "default"),
        ("patch", "karpenter.sh", "nodepools", "", ""),
        ("patch", "autoscaling.x-k8s.io", "capacitybuffers", "", ""),
        ("update", "coordination.k8s.io", "leases", "", "default"),
        (
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "",
            "",
        ),
    ] {
        assert!(
            !can(verb, group, resource, sub, ns).await,
            "{verb} {group}/{resource} must be forbidden"
        );
    }
    torn_down(&s);
}

/// `controller.install: helm` with upstream's real chart (v1.15.0, packaged as upstream's
/// release packages it): the chart's own CRDs, the release with values from the AWS side, and
/// upstream's controller — run with the settings the chart gave its Deployment — provisioning
/// pods on what jointer set up; then an upgrade, and a teardown that leaves nothing.
#[tokio::test]
async fn the_helm_path_installs_upstream_karpenter_which_provisions_on_the_setup() {
    let _turn = testenv::TURN.lock().await;
    testenv::require();
    let chart = std::env::var("JOINTER_UPSTREAM_CHART")
        .expect("JOINTER_UPSTREAM_CHART (source tests/env/.run/env)");
    let s = Setup::new(
        "bc-helm",
        &format!("controller: {{ install: helm, helm: {{ chart: {chart} }} }}\nidentity: irsa"),
    )
    .await;
    let client = testenv::kube().await;
    // Without the helm CLI: a clear error, before any write.
    clear_calls();
    let no_helm = s.ws.jointer_with_env(
        &["apply", "--yes", "-f", "jointer.yaml"],
        &[("PATH", "/usr/bin:/bin")],
    );
    assert_eq!(no_helm.code, 1, "{no_helm:#?}");
    assert!(
        no_helm.stderr.contains("the helm CLI is not on PATH"),
        "{}",
        no_helm.stderr
    );
    assert_eq!(mutating_calls(), Vec::<String>::new());

    let run = s.apply();
    assert!(
        run.stdout.contains("+ helm release kube-system/karpenter"),
        "{}",
        run.stdout
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    let d = deployments
        .get("karpenter")
        .await
        .expect("chart's deployment");
    let env = container_env(&d);
    assert!(
        env.contains(&("CLUSTER_NAME".into(), s.cluster.clone())),
        "{env:?}"
    );
    assert!(
        env.contains(&("INTERRUPTION_QUEUE".into(), s.cluster.clone())),
        "{env:?}"
    );
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    let sa = sa.get("karpenter").await.expect("chart's service account");
    assert_eq!(
        sa.metadata.annotations.unwrap_or_default()["eks.amazonaws.com/role-arn"],
        s.account_arn(&format!("role/{}", s.controller_role()))
    );
    assert!(deployments
        .get_opt("jointer-controller")
        .await
        .unwrap()
        .is_none());
    // The chart's CRDs, not jointer's: upstream's are generated by controller-gen.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let nodeclaims = crds.get("nodeclaims.karpenter.sh").await.expect("CRD");
    assert!(
        nodeclaims
            .annotations()
            .contains_key("controller-gen.kubebuilder.io/version"),
        "{:?}",
        nodeclaims.annotations()
    );
    s.in_sync();

    // Kept running until after teardown, which it takes part in (NodePool deleted → its
    // NodeClaims terminated), as in a cluster.
    let upstream = upstream_provisions(&client, &s).await;

    // A value derived from the AWS side changes: the release is upgraded.
    s.ws.write(
        "jointer.yaml",
        &format!(
            "cluster: {{ name: {}, region: us-east-1 }}\ncontroller: {{ install: helm, helm: {{ chart: {chart} }} }}\nidentity: irsa\ninterruption: false\n",
            s.cluster
        ),
    );
    let plan = s.jointer(&["plan"]);
    assert!(
        plan.stdout
            .lines()
            .any(|l| l.contains("~ helm release kube-system/karpenter")
                && l.contains("settings.interruptionQueue")),
        "{}",
        plan.stdout
    );
    s.apply();
    let env = container_env(&deployments.get("karpenter").await.unwrap());
    // The chart leaves the variable out when the queue is empty.
    assert!(
        !env.iter()
            .any(|(name, value)| name == "INTERRUPTION_QUEUE" && !value.is_empty()),
        "{env:?}"
    );
    s.in_sync();
    torn_down(&s);
    assert!(
        deployments.get_opt("karpenter").await.unwrap().is_none(),
        "helm uninstall"
    );
    let left = crate::provisioning::cluster_instances(&s, &["pending", "running"]).await;
    assert!(left.is_empty(), "instances left after teardown: {left:?}");
    // Upstream ran as the controller role (IRSA, through STS) from install to teardown.
    let refused = testenv::iam_refusals(&s.cluster);
    assert!(
        refused.is_empty(),
        "IAM refused upstream Karpenter these calls: {refused:#?}"
    );
    drop(upstream);
    // jointer's own CRDs back for the tests after this one.
    crate::upstream_crds::install(&client, &crate::upstream_cel::karpenter_crds(false)).await;
}

/// Upstream Karpenter, started with its Deployment's settings, launches for two pods that fit
/// nowhere and they run on its nodes, with no error from it about the world jointer set up.
async fn upstream_provisions(client: &kube::Client, s: &Setup) -> UpstreamController {
    use k8s_openapi::api::core::v1::Pod;
    let upstream =
        UpstreamController::start(client, &s.cluster, "kube-system", "karpenter", 28380).await;
    let ns = testenv::unique("upstream");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let created = json!({"metadata": {"name": ns}});
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(created).unwrap(),
        )
        .await
        .expect("namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..2 {
        // Five CPUs each: more than the system node (4) has.
        let pod = json!({"metadata": {"name": format!("big-{i}")}, "spec": {"containers": [{
            "name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "5", "memory": "1Gi"}}}]}});
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .expect("pod");
    }
    let running = || async {
        let list = pods.list(&Default::default()).await.ok()?;
        let running: Vec<String> = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        (running.len() == 2).then_some(running)
    };
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    let nodes = loop {
        if let Some(nodes) = running().await {
            break nodes;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after 120 s waiting for upstream Karpenter's nodes to run both pods\n{}\nupstream's last lines:\n{}",
            scheduling_state(client, &pods).await,
            last_lines(&upstream.logs(), 10)
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    let claims = crate::provisioning::nodeclaims(client)
        .list(&Default::default())
        .await
        .unwrap();
    let claimed: Vec<String> = claims
        .items
        .iter()
        .filter_map(|c| c.data["status"]["nodeName"].as_str().map(str::to_string))
        .collect();
    assert!(
        nodes.iter().all(|n| claimed.contains(n)),
        "pods on {nodes:?}, NodeClaims' nodes {claimed:?}"
    );
    let launched = crate::provisioning::cluster_instances(s, &["running"]).await;
    assert!(!launched.is_empty(), "no instance of {}", s.cluster);
    // Until it first resolves the EC2NodeClass it reports no subnets and a NodePool not ready;
    // nothing else may fail.
    let errors: Vec<String> = upstream
        .errors()
        .into_iter()
        .filter(|e| !e.contains("no subnets found") && !e.contains("ignoring nodepool, not ready"))
        .collect();
    assert!(
        errors.is_empty(),
        "upstream Karpenter's errors: {errors:#?}"
    );
    namespaces
        .delete(&ns, &Default::default())
        .await
        .expect("delete namespace");
    upstream
}

#[tokio::test]
async fn teardown_sweeps_what_the_controller_left_on_aws() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-sweep", "").await;
    s.apply();
    let tags = |pairs: &[(&str, &str)], kind: aws_sdk_ec2::types::ResourceType| {
        let mut spec = aws_sdk_ec2::types::TagSpecification::builder().resource_type(kind);
        for (k, v) in pairs {
            spec = spec.tags(aws_sdk_ec2::types::Tag::builder().key(*k).value(*v).build());
        }
        spec.build()
    };
    let cluster_tag = format!("kubernetes.io/cluster/{}", s.cluster);
    let owned = [
        (cluster_tag.as_str(), "owned"),
        ("karpenter.sh/nodepool", "default"),
        ("eks:eks-cluster-name", s.cluster.as_str()),
        ("team", "payments"),
    ];
    // What a controller that died mid-way leaves: an instance, its launch template and profile.
    let subnet = s.private_subnets()[0].clone();
    let launched = s
        .ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .subnet_id(&subnet)
        .tag_specifications(tags(&owned, aws_sdk_ec2::types::ResourceType::Instance))
        .send()
        .await
        .expect("instance");
    let instance = launched.instances()[0].instance_id().unwrap().to_string();
    s.ec2
        .create_launch_template()
        .launch_template_name(format!("karpenter.k8s.aws/{}", testenv::unique("lt")))
        .launch_template_data(aws_sdk_ec2::types::RequestLaunchTemplateData::builder().build())
        .tag_specifications(tags(
            &owned,
            aws_sdk_ec2::types::ResourceType::LaunchTemplate,
        ))
        .send()
        .await
        .expect("launch template");
    let profile = format!("{}_{}", s.cluster, 12345);
    s.iam
        .create_instance_profile()
        .instance_profile_name(&profile)
        .path(format!("/karpenter/us-east-1/{}/some-uid/", s.cluster))
        .send()
        .await
        .unwrap();
    s.iam
        .add_role_to_instance_profile()
        .instance_profile_name(&profile)
        .role_name(s.node_role())
        .send()
        .await
        .unwrap();
    // Something of the user's in the same account that must stay.
    let keep = s
        .ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .subnet_id(&subnet)
        .tag_specifications(tags(
            &[(cluster_tag.as_str(), "owned"), ("team", "payments")],
            aws_sdk_ec2::types::ResourceType::Instance,
        ))
        .send()
        .await
        .unwrap()
        .instances()[0]
        .instance_id()
        .unwrap()
        .to_string();

    let dry = s.jointer(&["teardown", "--dry-run"]);
    assert_eq!(dry.code, 0, "{dry:#?}");
    assert!(dry.stdout.contains(&instance), "{}", dry.stdout);
    assert!(
        dry.stdout
            .contains(&format!("iam instance profile {profile}")),
        "{}",
        dry.stdout
    );

    torn_down(&s);
    let state = |id: String| {
        let ec2 = s.ec2.clone();
        async move {
            ec2.describe_instances()
                .instance_ids(id)
                .send()
                .await
                .unwrap()
                .reservations()[0]
                .instances()[0]
                .state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap()
        }
    };
    assert_eq!(state(instance).await, "terminated");
    assert_eq!(
        state(keep).await,
        "running",
        "instances without a NodePool tag are not the controller's"
    );
    let templates = s
        .ec2
        .describe_launch_templates()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:eks:eks-cluster-name")
                .values(&s.cluster)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert!(templates.launch_templates().is_empty());
    assert!(s
        .iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .is_err());
    assert!(
        s.iam
            .get_role()
            .role_name(s.node_role())
            .send()
            .await
            .is_err(),
        "the node role went after its profile"
    );
}

/// CapacityBuffer's API group is shared with Cluster Autoscaler: its CRD installed by another
/// tool serves the same API, so apply and drift leave it as it is instead of refusing to run.
#[tokio::test]
async fn a_capacitybuffer_crd_another_tool_installed_is_used_as_it_is() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-buffercrd", "").await;
    let client = testenv::kube().await;
    s.apply();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "capacitybuffers.autoscaling.x-k8s.io";
    let manager = |value: &'static str| {
        let crds = crds.clone();
        async move {
            crds.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": value}}}),
                ),
            )
            .await
            .unwrap();
        }
    };
    manager("cluster-autoscaler").await;
    let drift = s.jointer(&["drift"]);
    assert_eq!(drift.code, 0, "{drift:#?}");
    let run = s.jointer(&["apply", "--yes"]);
    assert_eq!(run.code, 0, "{run:#?}");
    let live = crds.get(name).await.unwrap();
    assert_eq!(
        live.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("cluster-autoscaler"),
        "not taken over"
    );
    torn_down(&s);
    assert!(
        crds.get_opt(name).await.unwrap().is_some(),
        "teardown leaves it"
    );
    // Jointer's again for the tests after this one.
    manager("jointer").await;
}

#[tokio::test]
async fn crds_another_installation_owns_stop_the_run_unless_adopted_and_wait_reports_conditions() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-owner", "").await;
    let client = testenv::kube().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let relabel = |value: &'static str| {
        let crds = crds.clone();
        async move {
            crds.patch(
                "nodepools.karpenter.sh",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": value}}}),
                ),
            )
            .await
            .unwrap();
        }
    };
    relabel("Helm").await;
    clear_calls();
    let offset = audit_offset();
    let refused = s.jointer(&["apply", "--yes"]);
    assert_eq!(refused.code, 1, "{refused:#?}");
    assert!(
        refused
            .stderr
            .contains("CustomResourceDefinition nodepools.karpenter.sh")
            && refused.stderr.contains("app.kubernetes.io/managed-by=Helm")
            && refused.stderr.contains("--adopt"),
        "{}",
        refused.stderr
    );
    assert_eq!(mutating_calls(), Vec::<String>::new());
    assert_eq!(jointer_kube_writes_since(offset), Vec::<String>::new());
    let adopted = s.jointer(&["apply", "--yes", "--adopt"]);
    assert_eq!(adopted.code, 0, "{adopted:#?}");

    // --wait: the controller's Deployment becomes Available (kwok runs its pods); the node
    // class reports what the controller found.
    let classes = nodeclasses(&client);
    let status = |ready: &str, extra: Value| {
        let classes = classes.clone();
        let ready = ready.to_string();
        async move {
            let mut conditions = vec![
                json!({"type": "Ready", "status": ready, "reason": "Reconciled",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}),
            ];
            if !extra.is_null() {
                conditions.push(extra);
            }
            classes
                .patch_status(
                    "default",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"conditions": conditions}})),
                )
                .await
                .unwrap();
        }
    };
    status(
        "False",
        json!({"type": "SubnetsReady", "status": "False", "reason": "SubnetsNotFound",
            "message": format!("no subnet matches tag karpenter.sh/discovery={}", s.cluster),
            "lastTransitionTime": "2026-01-01T00:00:00Z"}),
    )
    .await;
    let waited = s.jointer(&["apply", "--yes", "--wait", "--timeout", "60"]);
    assert_eq!(waited.code, 1, "{waited:#?}");
    assert!(
        waited.stderr.contains("EC2NodeClass default is not Ready")
            && waited
                .stderr
                .contains("SubnetsReady=False: no subnet matches tag karpenter.sh/discovery="),
        "{}",
        waited.stderr
    );
    status("True", Value::Null).await;
    let ready = s.jointer(&["apply", "--yes", "--wait", "--timeout", "120"]);
    assert_eq!(ready.code, 0, "{ready:#?}");
    assert!(
        ready
            .stderr
            .contains("to be rolled out and Available: done"),
        "{}",
        ready.stderr
    );

    // A class whose nodes run as a role jointer does not manage gets a warning.
    s.ws.write(
        "nodes/class.yaml",
        &format!(
            "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{ name: default }}
spec:
  role: SomeoneElsesRole
  amiSelectorTerms: [ {{ alias: al2023@latest }} ]
  subnetSelectorTerms: [ {{ tags: {{ karpenter.sh/discovery: {} }} }} ]
  securityGroupSelectorTerms: [ {{ tags: {{ karpenter.sh/discovery: {} }} }} ]
",
            s.cluster, s.cluster
        ),
    );
    s.ws.write(
        "jointer.yaml",
        &format!(
            "cluster: {{ name: {}, region: us-east-1 }}\ntemplates: {{ dir: nodes }}\n",
            s.cluster
        ),
    );
    let plan = s.jointer(&["plan"]);
    assert!(plan.stderr.contains("warning: EC2NodeClass default uses role SomeoneElsesRole, which jointer does not manage"), "{}", plan.stderr);
    torn_down(&s);
}

/// Found on the test world: a first apply on a cluster without the CRDs raced their
/// establishment. Each round deletes the CRDs (and with them the node objects), and the next
/// apply must install them, wait for them to be Established and served, and converge.
#[tokio::test]
async fn twenty_first_applies_on_a_cluster_without_the_crds_all_succeed() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-crds20", "").await;
    let client = testenv::kube().await;
    s.apply();
    let mut succeeded = 0;
    for round in 1..=20 {
        let started = std::time::Instant::now();
        testenv::delete_karpenter_crds(&client).await;
        let deleted = started.elapsed();
        let run = s.jointer(&["apply", "--yes"]);
        eprintln!(
            "round {round}: CRDs deleted in {deleted:.1?}, apply took {:.1?}",
            started.elapsed() - deleted
        );
        assert_eq!(run.code, 0, "first apply of round {round} failed: {run:#?}");
        succeeded += 1;
    }
    assert_eq!(succeeded, 20);
    s.in_sync();
    eprintln!("first applies on a cluster without the CRDs: {succeeded} of 20 succeeded");
    torn_down(&s);
}

/// Fields another manager adds to objects jointer wholly owns are drift (an added weight or
/// taint changes what the cluster launches), and apply takes the objects back to the
/// rendered state; the API server's defaults and status are not drift.
#[tokio::test]
async fn fields_another_manager_adds_to_owned_objects_are_drift_and_apply_removes_them() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bc-oob", "").await;
    let client = testenv::kube().await;
    s.apply();
    s.in_sync();
    let other = PatchParams {
        field_manager: Some("someone-else".into()),
        ..PatchParams::default()
    };
    nodepools(&client)
        .patch(
            "default",
            &other,
            &Patch::Merge(json!({"spec": {"weight": 42, "template": {"spec": {
                "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}}})),
        )
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    deployments
        .patch(
            "jointer-controller",
            &other,
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z"}}}}})),
        )
        .await
        .unwrap();
    let run = s.jointer(&["drift"]);
    assert_eq!(run.code, 2, "{run:#?}");
    let pool_line = run
        .stdout
        .lines()
        .find(|l| l.contains("NodePool default"))
        .unwrap_or_else(|| panic!("no NodePool line: {}", run.stdout));
    assert!(
        pool_line.contains("spec.weight") && pool_line.contains("42 (set by someone-else) → unset"),
        "{pool_line}"
    );
    assert!(
        pool_line.contains("spec.template.spec.taints"),
        "{pool_line}"
    );
    assert!(
        run.stdout
            .lines()
            .any(|l| l.contains("Deployment kube-system/jointer-controller")
                && l.contains("spec.template.metadata.annotations")),
        "{}",
        run.stdout
    );
    s.apply();
    s.in_sync();
    let pool = nodepools(&client).get("default").await.unwrap();
    assert!(
        pool.data["spec"].get("weight").is_none(),
        "{:?}",
        pool.data["spec"]
    );
    assert!(
        pool.data["spec"]["template"]["spec"]
            .get("taints")
            .is_none(),
        "{:?}",
        pool.data["spec"]["template"]
    );
    let d = deployments.get("jointer-controller").await.unwrap();
    let annotations = d
        .spec
        .template
        .metadata
        .and_then(|m| m.annotations)
        .unwrap_or_default();
    assert!(
        !annotations.contains_key("kubectl.kubernetes.io/restartedAt"),
        "{annotations:?}"
    );
    torn_down(&s);
}

/// The pods' node and PodScheduled condition, and every Node's taints, readiness and
/// allocatable CPU: what a test waiting on kube-scheduler prints when it times out.
async fn scheduling_state(
    client: &kube::Client,
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
) -> String {
    use k8s_openapi::api::core::v1::Node;
    let mut out = Vec::new();
    for p in pods
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let scheduled = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
            .map(|c| format!("{} {}", c.status, c.message.clone().unwrap_or_default()));
        out.push(format!(
            "pod {}: node {:?}, phase {:?}, PodScheduled {scheduled:?}",
            p.name_any(),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            p.status.as_ref().and_then(|s| s.phase.clone())
        ));
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for n in nodes
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let taints: Vec<String> = (n.spec.as_ref().and_then(|s| s.taints.clone()))
            .unwrap_or_default()
            .into_iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        let status = n.status.as_ref();
        let ready = (status.and_then(|s| s.conditions.as_ref()))
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        let cpu = (status.and_then(|s| s.allocatable.as_ref()))
            .and_then(|a| a.get("cpu"))
            .map(|q| q.0.clone());
        out.push(format!(
            "node {}: taints {taints:?}, Ready {ready:?}, allocatable cpu {cpu:?}",
            n.name_any()
        ));
    }
    out.join("\n")
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
