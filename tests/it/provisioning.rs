//! The controller end to end on the real environment (provisioning, then disruption and
//! interruption further down): `jointer apply` on a test
//! world, the controller as a local process (with its ServiceAccount's token), workloads
//! created with the API → NodeClaims → CreateFleet in moto → Nodes registered by the node-join
//! simulator → pods Running, placed by kube-scheduler. The API server is shared by every
//! world, so these tests take turns and tear their world down (with the controller running,
//! which is how teardown drains real NodeClaims).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::controller::{Controller, Options};
use crate::support::testenv::{self, gap, wait_for};
use crate::support::world::{Setup, KEY};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::ApiResource;
use kube::ResourceExt;
use serde_json::{json, Value};

pub(crate) const WORLD_LABEL: &str = "jointer.dev/world";

pub(crate) fn dynamic(
    client: &kube::Client,
    group: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, "v1", kind),
        plural,
    );
    Api::all_with(client.clone(), &resource)
}

pub(crate) fn nodeclaims(client: &kube::Client) -> Api<DynamicObject> {
    dynamic(client, "karpenter.sh", "NodeClaim", "nodeclaims")
}

/// The world's EC2NodeClass and NodePools: `general` (on-demand, m5/c5/r5, a label only this
/// world's nodes carry) and `spot` (spot or on-demand, tainted, preferred by weight).
pub(crate) fn write_templates(s: &Setup, general_extra: &str) {
    write_class(s);
    write_pool(
        s,
        "general",
        "on-demand",
        "key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5, r5]",
        general_extra,
    );
    write_pool(
        s,
        "spot",
        "spot, on-demand",
        "key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5, r5]",
        "      taints: [ { key: dedicated, value: spot, effect: NoSchedule } ]\n  weight: 50\n",
    );
}

/// The world's EC2NodeClass (`nodes/class.yaml`): AL2023, its subnets and security group.
pub(crate) fn write_class(s: &Setup) {
    let class = format!(
        "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{ name: {c} }}
spec:
  role: {role}
  amiSelectorTerms: [ {{ alias: al2023@latest }} ]
  subnetSelectorTerms: [ {{ tags: {{ {KEY}: {c} }} }} ]
  securityGroupSelectorTerms: [ {{ tags: {{ {KEY}: {c} }} }} ]
",
        c = s.cluster,
        role = s.node_role(),
    );
    s.ws.write("nodes/class.yaml", &class);
}

/// `nodes/<name>.yaml`: a NodePool `<name>-<cluster>` of the world's class whose nodes carry the
/// world's label, for `capacity` types and one more `requirement` (`key: .., operator: ..,
/// values: [..]`); `extra` is appended (template lines at 6 spaces, spec lines at 2).
pub(crate) fn write_pool(s: &Setup, name: &str, capacity: &str, requirement: &str, extra: &str) {
    let pool = format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{ name: {name}-{c} }}
spec:
  template:
    metadata:
      labels: {{ {WORLD_LABEL}: {c} }}
    spec:
      nodeClassRef: {{ group: karpenter.k8s.aws, kind: EC2NodeClass, name: {c} }}
      requirements:
        - {{ key: karpenter.sh/capacity-type, operator: In, values: [{capacity}] }}
        - {{ {requirement} }}
{extra}",
        c = s.cluster
    );
    s.ws.write(&format!("nodes/{name}.yaml"), &pool);
}

/// A kubeconfig for the controller ServiceAccount `jointer apply` installed: the controller
/// then runs with exactly the RBAC the bundle grants.
async fn service_account_kubeconfig(admin: &kube::Client, cluster: &str) -> PathBuf {
    let token = testenv::controller_token(admin, 3600).await;
    let path = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let mut config = kube::config::Kubeconfig::read_from(&path).expect("kubeconfig");
    for user in &mut config.auth_infos {
        user.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        });
    }
    let out = std::env::temp_dir().join(format!("{cluster}-sa.kubeconfig"));
    std::fs::write(&out, serde_yaml::to_string(&config).expect("yaml")).expect("write kubeconfig");
    out
}

/// The controller role's AWS credentials as EKS gives them to the pods of the ServiceAccount
/// `jointer apply` installed: every AWS call is then evaluated against the policies apply
/// attached.
pub(crate) async fn controller_role(admin: &kube::Client, s: &Setup) -> testenv::RoleCredentials {
    testenv::RoleCredentials::for_service_account(
        admin,
        &s.cluster,
        "kube-system",
        "jointer-controller",
    )
    .await
}

/// A replica's options with the controller role's credentials, the suite's timings.
pub(crate) async fn as_controller_role(admin: &kube::Client, s: &Setup) -> Options {
    Options {
        aws: Some(controller_role(admin, s).await),
        ..Options::default()
    }
}

pub(crate) async fn namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).expect("ns"),
    )
    .await
    .expect("namespace");
}

/// A Deployment of `replicas` pods of `cpu` each, that only this world's nodes can take.
pub(crate) fn deployment(
    name: &str,
    cluster: &str,
    replicas: i32,
    cpu: &str,
    extra_spec: Value,
) -> Deployment {
    let mut spec = json!({
        "nodeSelector": {WORLD_LABEL: cluster},
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}],
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        }
    }))
    .expect("deployment")
}

/// The Deployment with its pods annotated `karpenter.sh/do-not-disrupt: "true"`.
fn do_not_disrupt(mut d: Deployment) -> Deployment {
    d.spec
        .template
        .metadata
        .get_or_insert_with(Default::default)
        .annotations = Some([("karpenter.sh/do-not-disrupt".into(), "true".into())].into());
    d
}

pub(crate) fn running(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count()
}

/// The cluster's instances (by its ownership tag) in any of `states` (every state if none).
pub(crate) async fn cluster_instances(
    s: &Setup,
    states: &[&str],
) -> Vec<aws_sdk_ec2::types::Instance> {
    let mut call = s.ec2.describe_instances().filters(
        aws_sdk_ec2::types::Filter::builder()
            .name(format!("tag:kubernetes.io/cluster/{}", s.cluster))
            .values("owned")
            .build(),
    );
    if !states.is_empty() {
        let mut filter = aws_sdk_ec2::types::Filter::builder().name("instance-state-name");
        for state in states {
            filter = filter.values(*state);
        }
        call = call.filters(filter.build());
    }
    // Every page: moto pages after 100 results.
    let pages: Vec<_> = call
        .into_paginator()
        .send()
        .collect::<Result<_, _>>()
        .await
        .expect("DescribeInstances");
    pages
        .iter()
        .flat_map(|p| p.reservations())
        .flat_map(|r| r.instances())
        .cloned()
        .collect()
}

/// (type, zone, lifecycle) of each of the cluster's live instances in moto.
pub(crate) async fn instances(s: &Setup) -> BTreeMap<String, (String, String, String)> {
    cluster_instances(s, &["pending", "running"])
        .await
        .iter()
        .map(|i| {
            (
                i.instance_id().unwrap_or_default().to_string(),
                (
                    i.instance_type()
                        .map(|t| t.as_str().to_string())
                        .unwrap_or_default(),
                    i.placement()
                        .and_then(|p| p.availability_zone())
                        .unwrap_or_default()
                        .to_string(),
                    i.instance_lifecycle()
                        .map(|l| l.as_str().to_string())
                        .unwrap_or_else(|| "on-demand".into()),
                ),
            )
        })
        .collect()
}

/// The fixture's prices: type → (on-demand, zone → spot).
pub(crate) fn fixture_prices() -> BTreeMap<String, (f64, BTreeMap<String, f64>)> {
    let text = std::fs::read_to_string(testenv::repo_root().join("tests/env/gap/prices.json"))
        .expect("prices.json");
    let all: Value = serde_json::from_str(&text).expect("json");
    all["us-east-1"]
        .as_object()
        .expect("region")
        .iter()
        .map(|(t, v)| {
            let spot = v["spot"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(z, p)| (z.clone(), p.as_f64().unwrap_or(f64::MAX)))
                        .collect()
                })
                .unwrap_or_default();
            (
                t.clone(),
                (v["on_demand"].as_f64().unwrap_or(f64::MAX), spot),
            )
        })
        .collect()
}

fn requirement_values(claim: &DynamicObject, key: &str) -> Vec<String> {
    claim.data["spec"]["requirements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["key"] == key && r["operator"] == "In")
        .flat_map(|r| r["values"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Waits up to a minute for the world's EC2NodeClass to be Ready.
pub(crate) async fn class_ready(admin: &kube::Client, cluster: &str) {
    let classes = dynamic(admin, "karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclasses");
    wait_for(
        "the EC2NodeClass to be Ready",
        Duration::from_secs(60),
        || async {
            condition(&classes.get_opt(cluster).await.ok().flatten()?, "Ready").then_some(())
        },
    )
    .await;
}

pub(crate) fn condition(obj: &DynamicObject, kind: &str) -> bool {
    obj.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// Tears the world down if the test fails, while its controller still runs (declare it after
/// the controller): the API server is shared, and a world left behind would be pruned by the
/// next test's apply, which then waits for NodeClaims no controller drains.
struct TeardownOnPanic<'a>(&'a Setup, PathBuf);

impl Drop for TeardownOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", stuck_report(self.0, &self.1));
            let mut run = self.0.jointer(&["teardown", "--yes", "--timeout", "120"]);
            if run.code != 0 {
                // No controller left to drain (a test that crashed it): release what is left,
                // or the next test's apply waits on this world's NodeClaims.
                run = self
                    .0
                    .jointer(&["teardown", "--yes", "--timeout", "120", "--force"]);
            }
            eprintln!(
                "teardown after the failure: exit {}\n{}",
                run.code, run.stderr
            );
            // Its pending pods would otherwise keep every later test's provisioner busy.
            let _ = std::process::Command::new("kubectl")
                .args(["delete", "namespace", &self.0.cluster, "--wait=false"])
                .status();
        }
    }
}

/// What a failed test's world showed, for the CI log to name the step that stuck: the
/// controller's warnings and errors, every NodeClaim condition of the world that is not True,
/// the gap layer's failed AWS calls and the calls IAM refused the controller's role.
fn stuck_report(s: &Setup, controller_log: &std::path::Path) -> String {
    const LAST: usize = 20;
    let log = std::fs::read_to_string(controller_log).unwrap_or_default();
    let troubles: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"WARN\"") || l.contains("\"ERROR\""))
        .collect();
    let mut report = format!(
        "== what the world showed ({} controller warnings and errors, the last {LAST}):\n",
        troubles.len()
    );
    for line in troubles.iter().skip(troubles.len().saturating_sub(LAST)) {
        report.push_str(&format!("  {line}\n"));
    }
    let claims = std::process::Command::new("kubectl")
        .args(["get", "nodeclaims", "-o", "json", "-l"])
        .arg(format!("{WORLD_LABEL}={}", s.cluster))
        .output()
        .ok()
        .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok());
    let claims = claims.as_ref().and_then(|c| c["items"].as_array());
    report.push_str(&format!(
        "== NodeClaims: {}\n",
        claims.map_or(0, |c| c.len())
    ));
    for claim in claims.into_iter().flatten() {
        let not_true: Vec<String> = claim["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["status"] != "True")
            .map(|c| {
                format!(
                    "{}={} {}: {}",
                    c["type"], c["status"], c["reason"], c["message"]
                )
            })
            .collect();
        report.push_str(&format!(
            "  {} {}\n",
            claim["metadata"]["name"],
            not_true.join("; ")
        ));
    }
    let calls = gap_quietly("/_gap/calls");
    let failed: Vec<String> = calls
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["status"].as_i64().is_some_and(|s| s >= 400))
        .map(|c| {
            format!(
                "{} {} {} {}",
                c["service"], c["operation"], c["status"], c["fault"]
            )
        })
        .collect();
    report.push_str(&format!(
        "== failed AWS calls since the log was last cleared: {} (the last {LAST}): {:?}\n",
        failed.len(),
        &failed[failed.len().saturating_sub(LAST)..]
    ));
    let iam = gap_quietly(&format!("/_gap/iam?cluster={}", s.cluster));
    let refused = iam.as_ref().map(testenv::refusals_in).unwrap_or_default();
    report.push_str(&format!(
        "== calls IAM refused the controller's role: {refused:?}"
    ));
    report
}

/// The gap layer's answer to a control-API GET, or None when it gives none: the report runs
/// while a failed test unwinds, where a second panic would abort every test of the run.
fn gap_quietly(path: &str) -> Option<Value> {
    let url = std::env::var("JOINTER_GAP_URL").ok()?;
    let out = std::process::Command::new("curl")
        .args(["-sf", "--max-time", "5"])
        .arg(format!("{}{path}", url.trim_end_matches('/')))
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// A test's world after `jointer apply`: the controller running against it and the world's
/// namespace for workloads. A failing test tears the world down while the controller still
/// runs (so its NodeClaims drain); a passing one calls [`Scene::end`].
pub(crate) struct Scene<'a> {
    // Dropped first: the teardown on failure needs the controller.
    _cleanup: TeardownOnPanic<'a>,
    pub(crate) controller: Controller,
    admin: kube::Client,
    pub(crate) ns: String,
    /// Actions a test makes the controller's role be refused on purpose.
    refusals_expected: Vec<&'static str>,
}

impl<'a> Scene<'a> {
    pub(crate) async fn start(s: &'a Setup, admin: &kube::Client, port: u16) -> Scene<'a> {
        Scene::start_as(s, admin, port, None).await
    }

    /// With `kubeconfig`, the controller runs with those credentials instead of the admin's.
    async fn start_as(
        s: &'a Setup,
        admin: &kube::Client,
        port: u16,
        kubeconfig: Option<&std::path::Path>,
    ) -> Scene<'a> {
        let options = Options {
            kubeconfig: kubeconfig.map(std::path::Path::to_path_buf),
            aws: Some(controller_role(admin, s).await),
            ..Options::default()
        };
        let controller = Controller::start_with(&s.cluster, "replica-a", port, options);
        let ns = s.cluster.clone();
        namespace(admin, &ns).await;
        Scene {
            _cleanup: TeardownOnPanic(s, controller.log.clone()),
            controller,
            admin: admin.clone(),
            ns,
            refusals_expected: Vec::new(),
        }
    }

    /// The test makes IAM refuse `action` to the controller on purpose: [`Scene::end`] does
    /// not count it.
    pub(crate) fn expect_refusals_of(&mut self, action: &'static str) {
        self.refusals_expected.push(action);
    }

    /// Tears the world down with the controller running, then removes the namespace.
    pub(crate) async fn end(self) {
        self.end_within(180).await;
    }

    /// [`Scene::end`] with teardown's `--timeout`. Every AWS call the controller made as its
    /// role, from start to teardown, was allowed by the policies apply attached.
    pub(crate) async fn end_within(self, seconds: u64) {
        let s = self._cleanup.0;
        teardown(s, seconds);
        let refused: Vec<_> = testenv::iam_refusals(&s.cluster)
            .into_iter()
            .filter(|d| {
                !self
                    .refusals_expected
                    .iter()
                    .any(|a| d["action"].as_str() == Some(a))
            })
            .collect();
        assert!(
            refused.is_empty(),
            "IAM refused the controller role these calls: {refused:#?}"
        );
        let _ = Api::<Namespace>::all(self.admin.clone())
            .delete(&self.ns, &DeleteParams::default())
            .await;
    }
}

fn teardown(s: &Setup, seconds: u64) {
    let run = s.jointer(&["teardown", "--yes", "--timeout", &seconds.to_string()]);
    assert_eq!(run.code, 0, "teardown: {run:#?}");
}

#[tokio::test]
async fn the_seed_scale_up_launches_the_cheapest_nodes_and_kube_scheduler_places_the_pods() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-up", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let kubeconfig = service_account_kubeconfig(&admin, &s.cluster).await;
    let scene = Scene::start_as(&s, &admin, 28180, Some(&kubeconfig)).await;
    let (controller, ns) = (&scene.controller, &scene.ns);
    class_ready(&admin, &s.cluster).await;

    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let started = Instant::now();
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, 5, "1", json!({})),
        )
        .await
        .expect("web");
    // The seed's split: batch tolerates the spot pool's taint and asks for spot capacity.
    let tolerate = json!({
        "tolerations": [{"key": "dedicated", "value": "spot", "effect": "NoSchedule"}],
        "nodeSelector": {WORLD_LABEL: s.cluster, "karpenter.sh/capacity-type": "spot"},
    });
    deployments
        .create(
            &PostParams::default(),
            &deployment("batch", &s.cluster, 2, "1500m", tolerate),
        )
        .await
        .expect("batch");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let all = wait_for("all 7 pods Running", Duration::from_secs(180), || async {
        let list = pods.list(&ListParams::default()).await.ok()?.items;
        (list.len() == 7 && running(&list) == 7).then_some(list)
    })
    .await;
    let to_running = started.elapsed();
    eprintln!(
        "pending → all 7 pods Running: {:.1} s",
        to_running.as_secs_f64()
    );

    // Every NodeClaim went Launched → Registered → Initialized, and its Node carries its
    // labels and taints, without the registration taint, owned by the NodeClaim. (A pod may
    // run on a registered node a moment before the controller's next pass initializes it.)
    let claims = wait_for("every NodeClaim Ready", Duration::from_secs(15), || async {
        let claims = world_claims(&admin, &s.cluster).await;
        (!claims.is_empty() && claims.iter().all(|c| condition(c, "Ready"))).then_some(claims)
    })
    .await;
    let nodes: Api<Node> = Api::all(admin.clone());
    let mut pool_of_node = BTreeMap::new();
    for claim in &claims {
        for c in ["Launched", "Registered", "Initialized", "Ready"] {
            assert!(condition(claim, c), "{c} on {:#?}", claim.data["status"]);
        }
        let node_name = claim.data["status"]["nodeName"].as_str().expect("nodeName");
        let node = nodes.get(node_name).await.expect("node");
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        for (k, v) in claim.metadata.labels.clone().unwrap_or_default() {
            assert_eq!(
                node_labels.get(&k),
                Some(&v),
                "label {k} on node {node_name}"
            );
        }
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            !taints.iter().any(|t| t.key == "karpenter.sh/unregistered"),
            "{taints:?}"
        );
        for t in claim.data["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                taints
                    .iter()
                    .any(|n| n.key == t["key"] && n.effect == t["effect"]),
                "{taints:?} lacks {t}"
            );
        }
        let owners = node.metadata.owner_references.clone().unwrap_or_default();
        assert!(owners
            .iter()
            .any(|o| o.kind == "NodeClaim" && Some(&o.name) == claim.metadata.name.as_ref()));
        assert_eq!(
            claim.data["status"]["providerID"].as_str(),
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref())
        );
        pool_of_node.insert(
            node_name.to_string(),
            node_labels["karpenter.sh/nodepool"].clone(),
        );
    }
    // The web pods landed on the general pool, the tolerating batch pods on the spot pool.
    for pod in &all {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("bound");
        let app = &pod.metadata.labels.as_ref().expect("labels")["app"];
        let want = if app == "web" { "general" } else { "spot" };
        assert_eq!(
            pool_of_node[&node],
            format!("{want}-{}", s.cluster),
            "{app} pod on {node}"
        );
    }
    // kube-scheduler bound them: the controller only makes room.
    let events: Api<Event> = Api::namespaced(admin.clone(), ns);
    let scheduled: BTreeSet<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("Scheduled"))
        .filter(|e| {
            e.reporting_component.as_deref() == Some("default-scheduler")
                || e.source.as_ref().and_then(|s| s.component.as_deref())
                    == Some("default-scheduler")
        })
        .filter_map(|e| e.involved_object.name)
        .collect();
    for pod in &all {
        assert!(
            scheduled.contains(pod.metadata.name.as_ref().expect("name")),
            "no Scheduled event from kube-scheduler for {:?}",
            pod.metadata.name
        );
    }

    // Each launch took the cheapest offering its NodeClaim allowed under the fixture prices
    // (in the class's zones), and the spot pool bought spot, which is cheaper there.
    let prices = fixture_prices();
    let zones: BTreeSet<String> = s.world["subnets"]["private"]
        .as_object()
        .expect("subnets")
        .keys()
        .cloned()
        .collect();
    let live = instances(&s).await;
    assert_eq!(
        live.len(),
        claims.len(),
        "one instance per NodeClaim: {live:?}"
    );
    for claim in &claims {
        let provider = claim.data["status"]["providerID"]
            .as_str()
            .expect("providerID");
        let id = provider.rsplit('/').next().expect("id");
        let (itype, zone, lifecycle) = &live[id];
        let allowed = requirement_values(claim, "node.kubernetes.io/instance-type");
        let capacity =
            claim.metadata.labels.as_ref().expect("labels")["karpenter.sh/capacity-type"].clone();
        assert_eq!(&capacity, lifecycle);
        let want_spot = capacity == "spot";
        let cheapest = allowed
            .iter()
            .filter_map(|t| prices.get(t))
            .flat_map(|(od, spot)| {
                zones.iter().filter_map(move |z| {
                    if want_spot {
                        spot.get(z).copied()
                    } else {
                        Some(*od)
                    }
                })
            })
            .fold(f64::MAX, f64::min);
        let (od, spot) = &prices[itype];
        let paid = if lifecycle == "spot" { spot[zone] } else { *od };
        assert!(
            (paid - cheapest).abs() < 1e-9,
            "{itype}/{zone}/{lifecycle} at {paid} but {cheapest} was allowed: {allowed:?}"
        );
        let pool = &claim.metadata.labels.as_ref().expect("labels")["karpenter.sh/nodepool"];
        if pool.starts_with("spot-") {
            assert_eq!(
                lifecycle, "spot",
                "the spot pool allows spot and it is cheaper"
            );
        }
    }
    assert!(
        controller.metric("jointer_controller_nodeclaims_created_total") >= claims.len() as f64
    );
    assert!(controller.metric("jointer_controller_provisioning_decision_seconds_count") >= 7.0);
    let decisions = controller.log_events("created NodeClaim");
    assert!(decisions.iter().all(|d| d["fields"]["price_per_hour"]
        .as_f64()
        .is_some_and(|p| p > 0.0)));
    let pools = dynamic(&admin, "karpenter.sh", "NodePool", "nodepools");
    wait_for(
        "NodePool status.resources",
        Duration::from_secs(20),
        || async {
            let p = pools.get(&format!("general-{}", s.cluster)).await.ok()?;
            (p.data["status"]["nodes"].as_i64()? >= 1
                && p.data["status"]["resources"]["cpu"].is_string())
            .then_some(())
        },
    )
    .await;

    // No thrashing: several disruption loop periods (2 s) over the steady workload, with
    // consolidateAfter 0 s, and the nodes the provisioner chose stay.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        controller.metric("jointer_controller_disruption_commands_total"),
        0.0,
        "{}",
        controller.logs()
    );
    assert_eq!(world_claims(&admin, &s.cluster).await.len(), claims.len());

    // `jointer status`: each pool's nodes and $/hour at the prices the instances run at, and
    // what the default budget (10 %) lets go now.
    let run = s.jointer(&["status", "-o", "json"]);
    assert_eq!(run.code, 0, "{run:#?}");
    let status: Value = serde_json::from_str(&run.stdout).expect("status JSON");
    let ours: Vec<&Value> = status["nodepools"]
        .as_array()
        .expect("nodepools")
        .iter()
        .filter(|p| {
            p["name"]
                .as_str()
                .is_some_and(|n| n.ends_with(s.cluster.as_str()))
        })
        .collect();
    assert_eq!(ours.len(), 2, "{}", run.stdout);
    let nodes: u64 = ours.iter().map(|p| p["nodes"].as_u64().unwrap()).sum();
    assert_eq!(nodes as usize, claims.len(), "{}", run.stdout);
    let cost: f64 = ours
        .iter()
        .map(|p| p["costPerHour"].as_f64().unwrap())
        .sum();
    let expected = hourly(&s).await;
    assert!(
        (cost - expected).abs() < 1e-6,
        "status ${cost}/h, instances ${expected}/h"
    );
    for p in &ours {
        assert_eq!(p["unpriced"], 0, "{p}");
        let n = p["nodes"].as_u64().unwrap();
        assert_eq!(
            p["disruptableNow"]["empty"].as_u64(),
            Some(n.div_ceil(10)),
            "{p}"
        );
    }
    assert!(status["nodeClasses"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == s.cluster.as_str() && c["ready"] == true));
    let table = s.jointer(&["status"]);
    assert!(
        table.stdout.contains("$/HOUR") && table.stdout.contains("Total:"),
        "{}",
        table.stdout
    );

    // Teardown with the controller running: NodePools go, NodeClaims drain, instances end.
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    deployments
        .delete("batch", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
    assert!(
        instances(&s).await.is_empty(),
        "instances left after teardown"
    );
}

#[tokio::test]
async fn limits_hold_and_a_missing_discovery_tag_is_loud_until_apply_restores_it() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-lim", "templates: { dir: nodes }").await;
    write_templates(&s, "  limits: { cpu: 4 }\n");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28190).await;
    let ns = &scene.ns;
    let classes = dynamic(
        &admin,
        "karpenter.k8s.aws",
        "EC2NodeClass",
        "ec2nodeclasses",
    );
    class_ready(&admin, &s.cluster).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, 6, "1", json!({})),
        )
        .await
        .expect("web");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let events: Api<Event> = Api::namespaced(admin.clone(), ns);
    let event_with = |needle: &'static str| {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("FailedProvisioning")
                        && e.message.as_deref().is_some_and(|m| m.contains(needle))
                })
        }
    };
    let limited = wait_for(
        "an Event naming the cpu limit",
        Duration::from_secs(90),
        || event_with("limit cpu 4"),
    )
    .await;
    assert!(limited
        .message
        .unwrap_or_default()
        .contains(&format!("NodePool general-{}", s.cluster)));
    let list = wait_for(
        "the pods within the limit Running",
        Duration::from_secs(120),
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?.items;
            (running(&list) >= 1).then_some(list)
        },
    )
    .await;
    assert!(running(&list) < 6, "the limit left some pods Pending");
    // `jointer explain pod` says the same from the CLI.
    let pending = list
        .iter()
        .find(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_none()))
        .and_then(|p| p.metadata.name.clone())
        .expect("a pending pod");
    let target = format!("{ns}/{pending}");
    let explained = s.jointer(&["explain", "pod", &target]);
    assert_eq!(explained.code, 3, "{explained:#?}");
    assert!(
        explained
            .stdout
            .contains(&format!("NodePool general-{}", s.cluster))
            && explained.stdout.contains("limit cpu 4"),
        "{}",
        explained.stdout
    );
    let as_json = s.jointer(&["--output", "json", "explain", "pod", &target]);
    let report: Value = serde_json::from_str(&as_json.stdout).expect("json");
    assert_eq!(report["verdict"], "unschedulable");
    let bad = s.jointer(&["explain", "pod", "no-slash"]);
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("NAMESPACE/NAME"), "{}", bad.stderr);
    let claims = nodeclaims(&admin)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    let cpu: f64 = claims
        .iter()
        .filter(|c| c.metadata.labels.as_ref().and_then(|l| l.get(WORLD_LABEL)) == Some(&s.cluster))
        .filter_map(|c| {
            c.data["status"]["capacity"]["cpu"]
                .as_str()?
                .parse::<f64>()
                .ok()
        })
        .sum();
    assert!(
        cpu > 0.0 && cpu <= 4.0,
        "NodePool limit cpu 4 exceeded: {cpu}"
    );

    // Discovery tags removed from every subnet: the class says which selector matched
    // nothing, pending pods are told, drift reports it, apply restores it.
    for subnet in s.private_subnets() {
        s.ec2
            .delete_tags()
            .resources(&subnet)
            .tags(aws_sdk_ec2::types::Tag::builder().key(KEY).build())
            .send()
            .await
            .expect("untag");
    }
    wait_for(
        "SubnetsReady=False naming the selector",
        Duration::from_secs(30),
        || async {
            let c = classes.get_opt(&s.cluster).await.ok().flatten()?;
            c.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| {
                    c["type"] == "SubnetsReady"
                        && c["status"] == "False"
                        && c["message"].as_str().is_some_and(|m| m.contains(KEY))
                })
                .map(|_| ())
        },
    )
    .await;
    // Larger than what is left on the capped pool's nodes: only a new spot node can take it.
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "late",
                &s.cluster,
                1,
                "1500m",
                json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
            ),
        )
        .await
        .expect("late");
    let told = wait_for(
        "an Event saying the class is not Ready",
        Duration::from_secs(60),
        || event_with("SubnetsReady"),
    )
    .await;
    assert!(told.message.unwrap_or_default().contains(KEY));
    let drift = s.jointer(&["drift"]);
    assert_eq!(drift.code, 2, "{drift:#?}");
    assert!(drift.stdout.contains(KEY), "{}", drift.stdout);
    s.apply();
    wait_for(
        "the late pod Running once the tag is back",
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=late"))
                .await
                .ok()?
                .items;
            (running(&list) == 1).then_some(())
        },
    )
    .await;

    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    deployments
        .delete("late", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
    assert!(
        instances(&s).await.is_empty(),
        "instances left after teardown"
    );
}

#[tokio::test]
async fn insufficient_capacity_moves_the_launch_to_the_next_cheapest_offering() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-ice", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    // The cheapest on-demand type that fits a 1-CPU pod, in every zone, has no capacity.
    gap(
        "POST",
        "/_gap/faults",
        Some(json!({"ice": [{"instance_type": "c5.large", "capacity_type": "on-demand"}]})),
    );
    let scene = Scene::start(&s, &admin, 28200).await;
    let (controller, ns) = (&scene.controller, &scene.ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, 1, "1", json!({})),
        )
        .await
        .expect("web");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    wait_for("the pod Running", Duration::from_secs(120), || async {
        (running(&pods.list(&ListParams::default()).await.ok()?.items) == 1).then_some(())
    })
    .await;
    gap("DELETE", "/_gap/faults", None);
    let live = instances(&s).await;
    assert_eq!(live.len(), 1, "{live:?}");
    let (itype, _, lifecycle) = live.values().next().expect("instance");
    assert_eq!(lifecycle, "on-demand");
    assert_eq!(
        itype, "m5.large",
        "c5.large had no capacity; m5.large is the next cheapest under the fixture prices"
    );
    assert!(
        controller.logs().contains("InsufficientInstanceCapacity")
            || controller
                .log_events("launched instance")
                .iter()
                .any(|l| l["fields"]["skipped_no_capacity"].as_u64() > Some(0))
    );

    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
}

/// The EC2 instance id of a launched NodeClaim (the last part of its providerID).
pub(crate) fn instance_id(claim: &DynamicObject) -> String {
    claim.data["status"]["providerID"]
        .as_str()
        .and_then(|p| p.rsplit('/').next())
        .expect("a launched NodeClaim's providerID")
        .to_string()
}

/// The NodeClaim an instance was launched for (its `karpenter.sh/nodeclaim` tag).
pub(crate) fn claim_of(i: &aws_sdk_ec2::types::Instance) -> &str {
    i.tags()
        .iter()
        .find(|t| t.key() == Some("karpenter.sh/nodeclaim"))
        .and_then(|t| t.value())
        .unwrap_or("(none)")
}

/// Every instance of the cluster ever launched (terminated too), by the NodeClaim it is
/// tagged for.
pub(crate) async fn instances_by_claim(s: &Setup) -> BTreeMap<String, Vec<String>> {
    let mut by_claim: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in cluster_instances(s, &[]).await {
        by_claim
            .entry(claim_of(&i).to_string())
            .or_default()
            .push(i.instance_id().unwrap_or_default().to_string());
    }
    by_claim
}

/// AWS failing under the running controller: a burst of 5xx answers, a throttling storm and
/// slow CreateFleet calls while it provisions, then no capacity for any offering. It works
/// through the first three (retrying, never launching a NodeClaim twice) and reports the last
/// precisely, on the NodeClaim, without launching anything.
#[tokio::test]
async fn aws_failing_under_the_controller_is_worked_through_or_reported_and_nothing_launches_twice()
{
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-awsfail", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28296).await;
    let (controller, ns) = (&scene.controller, &scene.ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    testenv::clear_calls();
    gap(
        "POST",
        "/_gap/faults",
        Some(json!({
            "server_error": [{"service": "ec2", "count": 12}],
            "throttle": [{"service": "ec2", "count": 25}],
            "latency": [{"ms": 1500, "service": "ec2", "operation": "CreateFleet"}],
        })),
    );
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, 4, "3", json!({})),
        )
        .await
        .expect("web");
    wait_for(
        "4 pods Running through the failures",
        Duration::from_secs(240),
        || async {
            (running(&pods.list(&ListParams::default()).await.ok()?.items) == 4).then_some(())
        },
    )
    .await;
    gap("DELETE", "/_gap/faults", None);
    let faults = |kind: &str| {
        testenv::calls()
            .iter()
            .filter(|c| c["service"] == "ec2" && c["fault"] == kind)
            .count()
    };
    let (errors, throttled) = (faults("server_error"), faults("throttle"));
    eprintln!(
        "AWS failing under the controller: 4 pods Running through {errors} 5xx answers and {throttled} throttled EC2 calls"
    );
    assert!(
        errors > 0 && throttled > 0,
        "the faults reached the controller"
    );
    let duplicates: Vec<_> = instances_by_claim(&s)
        .await
        .into_iter()
        .filter(|(_, ids)| ids.len() > 1)
        .collect();
    assert!(
        duplicates.is_empty(),
        "NodeClaims launched twice: {duplicates:?}"
    );
    assert!(
        controller
            .metrics()
            .contains("jointer_controller_cloudprovider_errors_total"),
        "the failed calls are counted"
    );

    // No capacity anywhere: the NodeClaim says so and nothing launches.
    let before = instances(&s).await.len();
    gap("POST", "/_gap/faults", Some(json!({"ice": [{}]})));
    // More than the node(s) launched have room for.
    scale(&deployments, "web", 12).await;
    let message = wait_for(
        "the NodeClaim to report no capacity",
        Duration::from_secs(120),
        || async {
            let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(admin.clone());
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| e.involved_object.kind.as_deref() == Some("NodeClaim"))
                .find(|e| e.reason.as_deref() == Some("InsufficientCapacity"))?
                .message
        },
    )
    .await;
    assert!(message.contains("no capacity"), "{message}");
    assert_eq!(
        instances(&s).await.len(),
        before,
        "nothing launched without capacity"
    );
    gap("DELETE", "/_gap/faults", None);
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
}

#[tokio::test]
async fn after_a_crash_the_launched_instance_is_adopted_and_an_orphan_is_collected() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-crash", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let first = Controller::start_with(
        &s.cluster,
        "replica-a",
        28210,
        as_controller_role(&admin, &s).await,
    );
    let _cleanup = TeardownOnPanic(&s, first.log.clone());
    let ns = s.cluster.clone();
    namespace(&admin, &ns).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let classes = dynamic(
        &admin,
        "karpenter.k8s.aws",
        "EC2NodeClass",
        "ec2nodeclasses",
    );
    let ami = wait_for(
        "the EC2NodeClass to be Ready",
        Duration::from_secs(60),
        || async {
            let c = classes.get_opt(&s.cluster).await.ok().flatten()?;
            condition(&c, "Ready").then(|| {
                c.data["status"]["amis"][0]["id"]
                    .as_str()
                    .map(str::to_string)
            })?
        },
    )
    .await;
    // CreateFleet held for 3 s: the controller is killed while EC2 launches, so the
    // instance exists and the controller never recorded it (what a crash right after
    // CreateFleet leaves behind). A launch may first create several templates (one per image
    // and max pods), so the kill waits for the CreateFleet itself to reach the gap layer.
    gap(
        "POST",
        "/_gap/faults",
        Some(json!({"latency": [{"ms": 3000, "service": "ec2", "operation": "CreateFleet"}]})),
    );
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, 1, "1", json!({})),
        )
        .await
        .expect("web");
    wait_for("CreateFleet in flight", Duration::from_secs(60), || async {
        testenv::gap("GET", "/_gap/calls/in-flight", None)
            .as_array()?
            .iter()
            .any(|c| c["operation"] == "CreateFleet")
            .then_some(())
    })
    .await;
    first.crash();
    let launched = wait_for(
        "the instance of the interrupted launch",
        Duration::from_secs(30),
        || async {
            let live = instances(&s).await;
            (live.len() == 1).then_some(live)
        },
    )
    .await;
    gap("DELETE", "/_gap/faults", None);
    let claims = nodeclaims(&admin)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    assert!(
        claims
            .iter()
            .all(|c| c.data["status"]["providerID"].is_null()),
        "the crashed controller recorded no launch"
    );
    // An instance tagged for the cluster's NodePool that no NodeClaim will ever claim.
    let orphan = s
        .ec2
        .run_instances()
        .image_id(&ami)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .tag_specifications(
            aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::Instance)
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key(format!("kubernetes.io/cluster/{}", s.cluster))
                        .value("owned")
                        .build(),
                )
                .tags(
                    aws_sdk_ec2::types::Tag::builder()
                        .key("karpenter.sh/nodepool")
                        .value(format!("general-{}", s.cluster))
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("orphan")
        .instances()[0]
        .instance_id()
        .expect("id")
        .to_string();

    // A failure from here on tears down while this replica still drains (dropped before it).
    let second = Controller::start_with(
        &s.cluster,
        "replica-b",
        28220,
        as_controller_role(&admin, &s).await,
    );
    let _cleanup_with_replica = TeardownOnPanic(&s, second.log.clone());
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    wait_for(
        "the pod Running on the adopted instance",
        Duration::from_secs(120),
        || async {
            (running(&pods.list(&ListParams::default()).await.ok()?.items) == 1).then_some(())
        },
    )
    .await;
    wait_for("the orphan terminated", Duration::from_secs(90), || async {
        (!instances(&s).await.contains_key(&orphan)).then_some(())
    })
    .await;
    let live = instances(&s).await;
    assert_eq!(
        live.keys().collect::<Vec<_>>(),
        launched.keys().collect::<Vec<_>>(),
        "no second instance for the same NodeClaim"
    );
    assert!(second.logs().contains("adopting"), "{}", second.logs());

    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    teardown(&s, 180);
    drop(second);
    let _ = Api::<Namespace>::all(admin)
        .delete(&ns, &DeleteParams::default())
        .await;
}

/// This world's NodeClaims.
pub(crate) async fn world_claims(client: &kube::Client, cluster: &str) -> Vec<DynamicObject> {
    nodeclaims(client)
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items
        .into_iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(WORLD_LABEL))
                .map(String::as_str)
                == Some(cluster)
        })
        .collect()
}

/// USD/hour of the world's live instances under the fixture prices.
async fn hourly(s: &Setup) -> f64 {
    let prices = fixture_prices();
    instances(s)
        .await
        .values()
        .map(|(t, z, l)| {
            if l == "spot" {
                prices[t].1[z]
            } else {
                prices[t].0
            }
        })
        .sum()
}

pub(crate) async fn scale(deployments: &Api<Deployment>, name: &str, replicas: i32) {
    deployments
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("scale");
}

pub(crate) async fn all_running(pods: &Api<Pod>, selector: &str, n: usize) {
    wait_for(
        &format!("{n} pods {selector} Running"),
        Duration::from_secs(180),
        || async {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .ok()?
                .items;
            (list.len() == n && running(&list) == n).then_some(())
        },
    )
    .await;
}

fn apart(app: &str) -> Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}}})
}

#[tokio::test]
async fn the_seed_scale_down_deletes_empty_nodes_and_replaces_an_underutilized_one_with_a_cheaper_one(
) {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("dis-down", "templates: { dir: nodes }").await;
    write_templates(&s, "  disruption: { consolidateAfter: 5s }\n");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28240).await;
    let (controller, ns) = (&scene.controller, &scene.ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);

    // Three pods that may not share a node → three nodes; down to one → two empty nodes go.
    deployments
        .create(
            &PostParams::default(),
            &deployment("apart", &s.cluster, 3, "1", apart("apart")),
        )
        .await
        .expect("apart");
    all_running(&pods, "app=apart", 3).await;
    assert_eq!(world_claims(&admin, &s.cluster).await.len(), 3);
    let before = hourly(&s).await;
    let settle = Instant::now();
    scale(&deployments, "apart", 1).await;
    wait_for(
        "the two empty nodes drained and terminated",
        Duration::from_secs(120),
        || async {
            (world_claims(&admin, &s.cluster).await.len() == 1 && instances(&s).await.len() == 1)
                .then_some(())
        },
    )
    .await;
    eprintln!(
        "scale-down settled in {:.1} s (consolidateAfter 5 s)",
        settle.elapsed().as_secs_f64()
    );
    all_running(&pods, "app=apart", 1).await;
    let after = hourly(&s).await;
    eprintln!("$/hour {before:.4} → {after:.4}");
    assert!(after < before, "{before} → {after}");
    scale(&deployments, "apart", 0).await;
    wait_for(
        "the last, now empty, node gone",
        Duration::from_secs(120),
        || async {
            (world_claims(&admin, &s.cluster).await.is_empty() && instances(&s).await.is_empty())
                .then_some(())
        },
    )
    .await;

    // A 3-CPU and a half-CPU pod share a 4-CPU node; without the big one, the small one moves
    // to a cheaper node, launched and Ready before anything is drained.
    deployments
        .create(
            &PostParams::default(),
            &deployment("big", &s.cluster, 1, "3", json!({})),
        )
        .await
        .expect("big");
    deployments
        .create(
            &PostParams::default(),
            &deployment("small", &s.cluster, 1, "500m", json!({})),
        )
        .await
        .expect("small");
    all_running(&pods, "app=small", 1).await;
    all_running(&pods, "app=big", 1).await;
    let shared = world_claims(&admin, &s.cluster).await;
    let old = shared[0].metadata.name.clone().expect("name");
    let old_type = shared[0].metadata.labels.as_ref().expect("labels")
        ["node.kubernetes.io/instance-type"]
        .clone();
    let before = hourly(&s).await;
    deployments
        .delete("big", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(
        "the underutilized node replaced",
        Duration::from_secs(180),
        || async {
            let claims = world_claims(&admin, &s.cluster).await;
            (claims.len() == 1
                && claims[0].metadata.name.as_ref() != Some(&old)
                && condition(&claims[0], "Initialized")
                && instances(&s).await.len() == 1)
                .then_some(())
        },
    )
    .await;
    all_running(&pods, "app=small", 1).await;
    let after = hourly(&s).await;
    let new_type = world_claims(&admin, &s.cluster).await[0]
        .metadata
        .labels
        .as_ref()
        .expect("labels")["node.kubernetes.io/instance-type"]
        .clone();
    eprintln!("replaced {old_type} by {new_type}: $/hour {before:.4} → {after:.4}");
    assert!(after < before, "{before} → {after}");
    // The replacement was Ready before the old node was disrupted.
    let logs = controller.logs();
    let initialized = logs
        .find("\"replacement initialized\"")
        .expect("a replacement was launched");
    let disrupted = logs[initialized..]
        .find("\"disrupting\"")
        .expect("then the old node was disrupted");
    assert!(disrupted > 0);
    assert!(controller.metric("jointer_controller_disruption_commands_total") >= 2.0);

    deployments
        .delete("small", &DeleteParams::default())
        .await
        .expect("delete");
    deployments
        .delete("apart", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
}

#[tokio::test]
async fn a_zero_budget_blocks_consolidation_and_a_short_expire_after_replaces_the_node() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("dis-budget", "templates: { dir: nodes }").await;
    // General: nothing may be disrupted. Spot: nodes expire after 40 s.
    write_templates(
        &s,
        "  disruption: { consolidateAfter: 2s, budgets: [ { nodes: \"0\" } ] }\n",
    );
    let spot =
        s.ws.read("nodes/spot.yaml")
            .replace("      taints:", "      expireAfter: 40s\n      taints:");
    s.ws.write("nodes/spot.yaml", &spot);
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28250).await;
    let (controller, ns) = (&scene.controller, &scene.ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("apart", &s.cluster, 2, "1", apart("apart")),
        )
        .await
        .expect("apart");
    all_running(&pods, "app=apart", 2).await;
    scale(&deployments, "apart", 1).await;
    // Many loop periods (2 s) past consolidateAfter, and past the 30 s `explain node` lets a
    // new node settle: the empty node stays.
    tokio::time::sleep(Duration::from_secs(32)).await;
    let general: Vec<_> = world_claims(&admin, &s.cluster)
        .await
        .into_iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l["karpenter.sh/nodepool"].starts_with("general-"))
        })
        .collect();
    assert_eq!(general.len(), 2, "budget nodes: 0 blocks consolidation");
    // `jointer explain node` says why, from the same core.
    let node = general[0].data["status"]["nodeName"]
        .as_str()
        .expect("nodeName")
        .to_string();
    let explained = s.jointer(&["explain", "node", &node]);
    assert_eq!(explained.code, 0, "{explained:#?}");
    assert!(
        explained.stdout.contains("kept") && explained.stdout.contains("budget"),
        "{}",
        explained.stdout
    );
    // It judges with the settings the installed controller runs with: a longer settle time in
    // the Deployment's env keeps the node as too new.
    let controller_deployment: Api<Deployment> = Api::namespaced(admin.clone(), "kube-system");
    controller_deployment
        .patch(
            "jointer-controller",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "controller", "env": [{"name": "DISRUPTION_SETTLE", "value": "120m"}]}
            ]}}}})),
        )
        .await
        .expect("set DISRUPTION_SETTLE");
    let explained = s.jointer(&["explain", "node", &node]);
    assert!(
        explained.stdout.contains("initialized moments ago"),
        "{}",
        explained.stdout
    );
    assert_eq!(
        controller.metric("jointer_controller_disruption_commands_total{reason=\"Empty\"}"),
        0.0
    );

    let tolerate = json!({
        "tolerations": [{"key": "dedicated", "value": "spot", "effect": "NoSchedule"}],
        "nodeSelector": {WORLD_LABEL: s.cluster, "karpenter.sh/capacity-type": "spot"},
    });
    deployments
        .create(
            &PostParams::default(),
            &deployment("batch", &s.cluster, 1, "1", tolerate),
        )
        .await
        .expect("batch");
    all_running(&pods, "app=batch", 1).await;
    let first: BTreeSet<String> = world_claims(&admin, &s.cluster)
        .await
        .into_iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l["karpenter.sh/nodepool"].starts_with("spot-"))
        })
        .filter_map(|c| c.metadata.name)
        .collect();
    wait_for(
        "the expired spot node replaced",
        Duration::from_secs(150),
        || async {
            let now: BTreeSet<String> = world_claims(&admin, &s.cluster)
                .await
                .into_iter()
                .filter(|c| {
                    c.metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l["karpenter.sh/nodepool"].starts_with("spot-"))
                        && condition(c, "Initialized")
                })
                .filter_map(|c| c.metadata.name)
                .collect();
            (!now.is_empty() && now.is_disjoint(&first)).then_some(())
        },
    )
    .await;
    all_running(&pods, "app=batch", 1).await;
    assert!(
        controller.metric("jointer_controller_disruption_commands_total{reason=\"Expired\"}")
            >= 1.0
    );

    for d in ["apart", "batch"] {
        deployments
            .delete(d, &DeleteParams::default())
            .await
            .expect("delete");
    }
    scene.end().await;
}

/// An EC2 event on the default bus, as AWS puts it there: the interruption rules `jointer
/// apply` made deliver it to the queue.
pub(crate) async fn put_ec2_event(s: &Setup, detail_type: &str, detail: String) {
    s.events
        .put_events()
        .entries(
            aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .source("aws.ec2")
                .detail_type(detail_type)
                .detail(detail)
                .build(),
        )
        .send()
        .await
        .expect("PutEvents");
}

#[tokio::test]
async fn a_spot_interruption_warning_replaces_the_node_and_every_message_is_deleted() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("dis-int", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28260).await;
    let (controller, ns) = (&scene.controller, &scene.ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let tolerate = json!({
        "tolerations": [{"key": "dedicated", "value": "spot", "effect": "NoSchedule"}],
        "nodeSelector": {WORLD_LABEL: s.cluster, "karpenter.sh/capacity-type": "spot"},
    });
    deployments
        .create(
            &PostParams::default(),
            &deployment("batch", &s.cluster, 1, "1", tolerate),
        )
        .await
        .expect("batch");
    all_running(&pods, "app=batch", 1).await;
    let claim = world_claims(&admin, &s.cluster).await.remove(0);
    let old_instance = instance_id(&claim);

    let send = |detail_type: &'static str, detail: String| put_ec2_event(&s, detail_type, detail);
    let warned = Instant::now();
    send(
        "EC2 Spot Instance Interruption Warning",
        json!({"instance-id": old_instance, "instance-action": "terminate"}).to_string(),
    )
    .await;
    send(
        "EC2 Spot Instance Interruption Warning",
        json!({"instance-id": "i-0000000000000dead", "instance-action": "terminate"}).to_string(),
    )
    .await;
    let queue_url = s.queue_url().await.expect("queue");
    s.sqs
        .send_message()
        .queue_url(&queue_url)
        .message_body("this is not an event")
        .send()
        .await
        .expect("send");

    wait_for(
        "the interrupted node replaced and the pod Running again",
        Duration::from_secs(120),
        || async {
            let claims = world_claims(&admin, &s.cluster).await;
            let list = pods
                .list(&ListParams::default().labels("app=batch"))
                .await
                .ok()?
                .items;
            let replaced = claims.len() == 1
                && claims[0].metadata.name != claim.metadata.name
                && condition(&claims[0], "Initialized");
            (replaced && running(&list) == 1).then_some(())
        },
    )
    .await;
    eprintln!(
        "interruption warning → replacement Ready, pod Running: {:.1} s",
        warned.elapsed().as_secs_f64()
    );
    wait_for(
        "the interrupted instance terminated",
        Duration::from_secs(60),
        || async { (!instances(&s).await.contains_key(&old_instance)).then_some(()) },
    )
    .await;
    wait_for("every message deleted", Duration::from_secs(60), || async {
        let m = controller.metrics();
        let handled = m
            .contains("jointer_controller_interruption_messages_total{reason=\"malformed\"}")
            && m.contains(
                "jointer_controller_interruption_messages_total{reason=\"spot_interruption\"} 1",
            )
            && m.contains("jointer_controller_interruption_messages_total{reason=\"not_ours\"} 1");
        let attrs = s
            .sqs
            .get_queue_attributes()
            .queue_url(&queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(
                aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            )
            .send()
            .await
            .ok()?;
        let left: i64 = attrs
            .attributes()
            .map(|a| a.values().filter_map(|v| v.parse::<i64>().ok()).sum())
            .unwrap_or(1);
        (handled && left == 0).then_some(())
    })
    .await;
    assert!(
        controller.logs().contains("not this cluster's"),
        "the unknown instance was logged"
    );

    // A state change to terminated for the new node's instance: its NodeClaim goes.
    let current = world_claims(&admin, &s.cluster).await.remove(0);
    let id = instance_id(&current);
    send(
        "EC2 Instance State-change Notification",
        json!({"instance-id": id, "state": "terminated"}).to_string(),
    )
    .await;
    wait_for(
        "the NodeClaim of the terminated instance deleted",
        Duration::from_secs(60),
        || async {
            (!world_claims(&admin, &s.cluster)
                .await
                .iter()
                .any(|c| c.metadata.name == current.metadata.name))
            .then_some(())
        },
    )
    .await;

    // The queue deleted under the running controller: it says so, looks the queue up again
    // until `jointer apply` makes it anew, and handles the next warning through it.
    s.sqs
        .delete_queue()
        .queue_url(&queue_url)
        .send()
        .await
        .expect("delete the queue");
    wait_for(
        "the controller to say the queue is gone",
        Duration::from_secs(60),
        || async {
            let logs = controller.logs();
            (logs.contains("the interruption queue is gone")
                && logs.contains("cannot find the interruption queue"))
            .then_some(())
        },
    )
    .await;
    s.apply();
    let launched = wait_for(
        "the batch pod's new node launched",
        Duration::from_secs(120),
        || async {
            let claims = world_claims(&admin, &s.cluster).await;
            let claim = claims.into_iter().find(|c| {
                c.metadata.deletion_timestamp.is_none()
                    && c.data["status"]["providerID"].is_string()
            })?;
            Some(claim)
        },
    )
    .await;
    let id = instance_id(&launched);
    send(
        "EC2 Spot Instance Interruption Warning",
        json!({"instance-id": id, "instance-action": "terminate"}).to_string(),
    )
    .await;
    wait_for(
        "the warning handled through the new queue",
        Duration::from_secs(90),
        || async {
            (!world_claims(&admin, &s.cluster).await.iter().any(|c| {
                c.metadata.name == launched.metadata.name && c.metadata.deletion_timestamp.is_none()
            }))
            .then_some(())
        },
    )
    .await;

    deployments
        .delete("batch", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
}

#[tokio::test]
async fn a_changed_ec2nodeclass_drifts_its_nodes_and_they_are_replaced() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("dis-drift", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28270).await;
    let (controller, ns) = (&scene.controller, &scene.ns);
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, 1, "1", json!({})),
        )
        .await
        .expect("web");
    all_running(&pods, "app=web", 1).await;
    let old = world_claims(&admin, &s.cluster)
        .await
        .remove(0)
        .metadata
        .name
        .expect("name");

    // A tag added to the class through jointer's templates: every node made before is drifted.
    let class = s.ws.read("nodes/class.yaml") + "  tags: { cost-center: blue }\n";
    s.ws.write("nodes/class.yaml", &class);
    s.apply();
    let replaced = wait_for(
        "the drifted node replaced",
        Duration::from_secs(150),
        || async {
            let claims = world_claims(&admin, &s.cluster).await;
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?
                .items;
            let fresh = claims.len() == 1
                && claims[0].metadata.name.as_ref() != Some(&old)
                && condition(&claims[0], "Initialized");
            (fresh && running(&list) == 1).then(|| claims[0].clone())
        },
    )
    .await;
    let id = instance_id(&replaced);
    assert_eq!(
        s.tags_of(&id).await.get("cost-center").map(String::as_str),
        Some("blue")
    );
    assert!(
        controller.metric("jointer_controller_disruption_commands_total{reason=\"Drifted\"}")
            >= 1.0
    );
    assert!(
        controller
            .log_events("drifted")
            .iter()
            .any(|l| l["fields"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("changed"))),
        "the drift reason is logged"
    );

    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
}

#[tokio::test]
async fn do_not_disrupt_and_a_blocking_pdb_keep_an_underutilized_node_until_lifted() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("dis-keep", "templates: { dir: nodes }").await;
    write_templates(&s, "  disruption: { consolidateAfter: 2s }\n");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28280).await;
    let ns = &scene.ns;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), ns);
    // A 3-CPU and a half-CPU pod share a node; the small one says do-not-disrupt.
    deployments
        .create(
            &PostParams::default(),
            &deployment("big", &s.cluster, 1, "3", json!({})),
        )
        .await
        .expect("big");
    let small = do_not_disrupt(deployment("small", &s.cluster, 1, "500m", json!({})));
    deployments
        .create(&PostParams::default(), &small)
        .await
        .expect("small");
    all_running(&pods, "app=small", 1).await;
    all_running(&pods, "app=big", 1).await;
    let node_of_small = || async {
        pods.list(&ListParams::default().labels("app=small"))
            .await
            .expect("pods")
            .items[0]
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("bound")
    };
    let node = node_of_small().await;
    deployments
        .delete("big", &DeleteParams::default())
        .await
        .expect("delete");
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert_eq!(node_of_small().await, node, "do-not-disrupt keeps the node");
    let explained = s.jointer(&["explain", "node", &node]);
    assert!(
        explained.stdout.contains("do-not-disrupt"),
        "{}",
        explained.stdout
    );

    // Without the annotation but with a PodDisruptionBudget that allows no eviction: kept.
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "small"}, "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "small"}}}})).expect("pdb"),
    )
    .await
    .expect("pdb");
    let pod_name = pods
        .list(&ListParams::default().labels("app=small"))
        .await
        .expect("pods")
        .items[0]
        .metadata
        .name
        .clone()
        .expect("name");
    pods.patch(
        &pod_name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": null}}}),
        ),
    )
    .await
    .expect("unannotate");
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(
        node_of_small().await,
        node,
        "the PodDisruptionBudget keeps the node"
    );
    let explained = s.jointer(&["explain", "node", &node]);
    assert!(
        explained.stdout.contains("PodDisruptionBudget"),
        "{}",
        explained.stdout
    );
    let nodes: Api<Node> = Api::all(admin.clone());
    let taints = nodes
        .get(&node)
        .await
        .expect("node")
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default();
    assert!(
        !taints.iter().any(|t| t.key == "karpenter.sh/disrupted"),
        "a blocked node is never tainted: {taints:?}"
    );

    // Lifted: the node is replaced by a cheaper one.
    pdbs.delete("small", &DeleteParams::default())
        .await
        .expect("delete pdb");
    wait_for(
        "the node replaced once nothing protects it",
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=small"))
                .await
                .ok()?
                .items;
            let moved = list.iter().any(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| *n != node)
            });
            (moved && running(&list) == 1).then_some(())
        },
    )
    .await;

    deployments
        .delete("small", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
}

#[tokio::test]
async fn a_deleted_node_waits_for_a_do_not_disrupt_pod_until_its_termination_grace_period_ends() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("dis-tgp", "templates: { dir: nodes }").await;
    write_templates(&s, "      terminationGracePeriod: 20s\n");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28290).await;
    let ns = &scene.ns;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    // Its own grace period (0 s) fits in any deadline, so only the deadline can move it.
    let guarded = do_not_disrupt(deployment(
        "guarded",
        &s.cluster,
        1,
        "1",
        json!({"terminationGracePeriodSeconds": 0}),
    ));
    deployments
        .create(&PostParams::default(), &guarded)
        .await
        .expect("guarded");
    all_running(&pods, "app=guarded", 1).await;
    let pod = pods
        .list(&ListParams::default().labels("app=guarded"))
        .await
        .unwrap()
        .items
        .remove(0);
    let node = pod.spec.as_ref().and_then(|p| p.node_name.clone()).unwrap();
    let claims = world_claims(&admin, &s.cluster).await;
    let claim = claims
        .iter()
        .find(|c| c.data["status"]["nodeName"] == node.as_str())
        .and_then(|c| c.metadata.name.clone())
        .expect("the pod's NodeClaim");

    let api = nodeclaims(&admin);
    api.delete(&claim, &DeleteParams::default())
        .await
        .expect("delete the NodeClaim");
    let deleted = Instant::now();
    // The deadline is recorded where upstream records it: deletion time + 20 s.
    let recorded = wait_for(
        "the termination timestamp",
        Duration::from_secs(15),
        || async {
            let c = api.get(&claim).await.ok()?;
            let at = c
                .annotations()
                .get("karpenter.sh/nodeclaim-termination-timestamp")?;
            Some((at.clone(), c.metadata.deletion_timestamp.clone()?))
        },
    )
    .await;
    let at: k8s_openapi::jiff::Timestamp = recorded.0.parse().expect("RFC 3339");
    assert_eq!(
        at.as_second() - recorded.1 .0.as_second(),
        20,
        "{recorded:?}"
    );

    // Well before the deadline the node is tainted and draining, but the pod stays put.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        api.get_opt(&claim).await.unwrap().is_some(),
        "still draining"
    );
    let still = pods
        .get(&pod.name_any())
        .await
        .expect("the guarded pod stays");
    assert!(still.metadata.deletion_timestamp.is_none());
    let tainted = Api::<Node>::all(admin.clone()).get(&node).await.unwrap();
    assert!(tainted
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == "karpenter.sh/disrupted"));

    // At the deadline the pod is deleted regardless and the node goes.
    wait_for("the NodeClaim gone", Duration::from_secs(60), || async {
        api.get_opt(&claim).await.unwrap().is_none().then_some(())
    })
    .await;
    let gone = deleted.elapsed();
    assert!(
        gone >= Duration::from_secs(19),
        "not before the deadline: {gone:?}"
    );
    eprintln!(
        "figures: NodeClaim with a 20 s terminationGracePeriod gone {:.1} s after its deletion",
        gone.as_secs_f64()
    );
    assert!(pods.get_opt(&pod.name_any()).await.unwrap().is_none());
    assert!(Api::<Node>::all(admin.clone())
        .get_opt(&node)
        .await
        .unwrap()
        .is_none());
    // The Deployment's new pod runs on a new node.
    all_running(&pods, "app=guarded", 1).await;

    // A teardown waits for it too, and says what holds the node.
    let held = s.jointer(&["teardown", "--yes", "--timeout", "5"]);
    assert_eq!(held.code, 1, "{held:#?}");
    assert!(
        held.stderr.contains("held by: pod")
            && held
                .stderr
                .contains("is annotated karpenter.sh/do-not-disrupt"),
        "{}",
        held.stderr
    );
    deployments
        .delete("guarded", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
}

#[tokio::test]
async fn a_capacity_reservation_is_filled_first_and_then_on_demand_takes_over() {
    use aws_sdk_ec2::types::{CapacityReservationInstancePlatform, InstanceMatchCriteria};
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-reserved", "templates: { dir: nodes }").await;
    let ec2 = aws_sdk_ec2::Client::new(&testenv::aws().await);
    let reservation = ec2
        .create_capacity_reservation()
        .instance_type("m5.large")
        .instance_platform(CapacityReservationInstancePlatform::LinuxUnix)
        .availability_zone("us-east-1a")
        .instance_count(1)
        .instance_match_criteria(InstanceMatchCriteria::Targeted)
        .send()
        .await
        .expect("create a capacity reservation")
        .capacity_reservation
        .and_then(|r| r.capacity_reservation_id)
        .expect("its id");
    write_templates(&s, "");
    let class = s.ws.read("nodes/class.yaml")
        + &format!("  capacityReservationSelectorTerms: [ {{ id: {reservation} }} ]\n");
    s.ws.write("nodes/class.yaml", &class);
    let general =
        s.ws.read("nodes/general.yaml")
            .replace("values: [on-demand] }", "values: [reserved, on-demand] }");
    s.ws.write("nodes/general.yaml", &general);
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28300).await;
    let ns = &scene.ns;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);

    // The class lists the reservation it selects.
    let classes = dynamic(
        &admin,
        "karpenter.k8s.aws",
        "EC2NodeClass",
        "ec2nodeclasses",
    );
    wait_for(
        "the class resolves its reservation",
        Duration::from_secs(30),
        || async {
            let c = classes.get(&s.cluster).await.ok()?;
            (c.data["status"]["capacityReservations"][0]["id"] == reservation.as_str()
                && condition(&c, "CapacityReservationsReady"))
            .then_some(())
        },
    )
    .await;

    // Two pods that may not share a node: one node fills the reservation (room for one),
    // the other is on-demand.
    deployments
        .create(
            &PostParams::default(),
            &deployment("pair", &s.cluster, 2, "1", apart("pair")),
        )
        .await
        .expect("pair");
    all_running(&pods, "app=pair", 2).await;
    let claims = world_claims(&admin, &s.cluster).await;
    assert_eq!(claims.len(), 2, "{claims:#?}");
    let label = |c: &DynamicObject, key: &str| {
        c.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key).cloned())
            .unwrap_or_default()
    };
    let (reserved, other): (Vec<&DynamicObject>, Vec<&DynamicObject>) = claims
        .iter()
        .partition(|c| label(c, "karpenter.sh/capacity-type") == "reserved");
    assert_eq!(reserved.len(), 1, "{claims:#?}");
    let reserved = reserved[0];
    assert_eq!(
        label(reserved, "karpenter.k8s.aws/capacity-reservation-id"),
        reservation
    );
    assert_eq!(
        label(reserved, "node.kubernetes.io/instance-type"),
        "m5.large"
    );
    // What kind of reservation it is, as upstream labels it (moto's reservations are
    // `default`, not interruptible).
    assert_eq!(
        label(reserved, "karpenter.k8s.aws/capacity-reservation-type"),
        "default"
    );
    assert_eq!(
        label(
            reserved,
            "karpenter.k8s.aws/capacity-reservation-interruptible"
        ),
        "false"
    );
    assert_eq!(label(reserved, "topology.kubernetes.io/zone"), "us-east-1a");
    assert_eq!(label(other[0], "karpenter.sh/capacity-type"), "on-demand");
    let node = reserved.data["status"]["nodeName"]
        .as_str()
        .expect("nodeName");
    let node = Api::<Node>::all(admin.clone()).get(node).await.unwrap();
    assert_eq!(
        node.labels()
            .get("karpenter.k8s.aws/capacity-reservation-id"),
        Some(&reservation)
    );
    let room = |ec2: aws_sdk_ec2::Client, id: String| async move {
        ec2.describe_capacity_reservations()
            .capacity_reservation_ids(id)
            .send()
            .await
            .expect("describe the reservation")
            .capacity_reservations()[0]
            .available_instance_count()
    };
    assert_eq!(room(ec2.clone(), reservation.clone()).await, Some(0));

    deployments
        .delete("pair", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
    // Its instance terminated, the reservation has room again.
    assert_eq!(room(ec2.clone(), reservation.clone()).await, Some(1));
}

/// Found on the test world: with the controller stopped, teardown waited out its timeout
/// although nothing could drain the nodes. Now it says no controller runs and stops at once
/// (exit 1, naming what is left); with `--force` it releases the NodeClaims and nodes itself,
/// the sweep terminates their instances, and nothing is leaked.
#[tokio::test]
async fn teardown_without_a_controller_stops_at_once_or_with_force_leaks_nothing() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-noctl", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let controller = Controller::start_with(
        &s.cluster,
        "replica-a",
        28250,
        as_controller_role(&admin, &s).await,
    );
    namespace(&admin, &s.cluster).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &s.cluster);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, 1, "1", json!({})),
        )
        .await
        .expect("web");
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &s.cluster);
    wait_for("the pod Running", Duration::from_secs(120), || async {
        (running(&pods.list(&ListParams::default()).await.ok()?.items) == 1).then_some(())
    })
    .await;
    assert_eq!(instances(&s).await.len(), 1);
    // SIGKILL: the replica neither drains nor releases its Lease, as after a crash.
    controller.crash();

    let started = Instant::now();
    let run = s.jointer(&["teardown", "--yes"]);
    let took = started.elapsed();
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stderr.contains("no controller is running") && run.stderr.contains("--force"),
        "says why and what to do: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("1 NodeClaim(s)"),
        "names what is left: {}",
        run.stderr
    );
    // The Lease looks held for up to 30 s after the crash; then 5 s of no controller.
    assert!(took < Duration::from_secs(90), "stopped after {took:?}");
    assert_eq!(
        instances(&s).await.len(),
        1,
        "nothing terminated without --force"
    );

    let run = s.jointer(&["teardown", "--yes", "--force", "--timeout", "180"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        instances(&s).await.is_empty(),
        "the sweep terminated the instance"
    );
    assert!(
        world_claims(&admin, &s.cluster).await.is_empty(),
        "no NodeClaim is left"
    );
    let nodes: Api<Node> = Api::all(admin.clone());
    let left: Vec<String> = nodes
        .list(&ListParams::default().labels(&format!("{WORLD_LABEL}={}", s.cluster)))
        .await
        .expect("nodes")
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    assert!(left.is_empty(), "no Node is left: {left:?}");
    eprintln!("teardown without a controller stopped after {took:?}");
    let _ = Api::<Namespace>::all(admin)
        .delete(&s.cluster, &DeleteParams::default())
        .await;
}

/// The v1.15 EC2NodeClass settings end to end: what the class says reaches the launch template
/// jointer creates in (moto's) EC2 and the instance launched from it.
#[tokio::test]
async fn a_classs_newer_launch_settings_reach_the_launch_template_and_the_instance() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-settings", "templates: { dir: nodes }").await;
    // By name, as the class gives it (moto's CreatePlacementGroup fails, and EC2 resolves the
    // name only at launch).
    let group = format!("{}-pg", s.cluster);
    write_templates(&s, "");
    let class = s.ws.read("nodes/class.yaml")
        + &format!(
            "  placementGroupSelector: {{ name: {group} }}
  ipPrefixCount: 1
  connectionTracking: {{ tcpEstablishedTimeout: 600 }}
  enclaveOptions: {{ enabled: false }}
  instanceStorePolicy: RAID0
  kubelet: {{ maxPods: 58, shutdownGracePeriod: 45s }}
"
        );
    s.ws.write("nodes/class.yaml", &class);
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28310).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &scene.ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &scene.ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("one", &s.cluster, 1, "500m", json!({})),
        )
        .await
        .expect("deployment");
    all_running(&pods, "app=one", 1).await;

    let out = s
        .ec2
        .describe_launch_templates()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{}", s.cluster))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("DescribeLaunchTemplates");
    let template = out
        .launch_templates()
        .first()
        .and_then(|t| t.launch_template_id())
        .expect("the class's launch template")
        .to_string();
    let versions = s
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(&template)
        .send()
        .await
        .expect("DescribeLaunchTemplateVersions");
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .expect("template data");
    assert_eq!(
        data.placement().and_then(|p| p.group_name()),
        Some(group.as_str())
    );
    let primary = &data.network_interfaces()[0];
    assert_eq!(primary.device_index(), Some(0));
    assert_eq!(primary.ipv4_prefix_count(), Some(1));
    assert!(
        !primary.groups().is_empty(),
        "the interface carries the security groups"
    );
    assert_eq!(
        primary
            .connection_tracking_specification()
            .and_then(|t| t.tcp_established_timeout()),
        Some(600)
    );
    assert_eq!(
        data.enclave_options().and_then(|e| e.enabled()),
        Some(false)
    );
    use base64::Engine;
    let user_data = base64::engine::general_purpose::STANDARD
        .decode(data.user_data().expect("user data"))
        .expect("base64");
    let user_data = String::from_utf8_lossy(&user_data);
    assert!(
        user_data.contains("shutdownGracePeriod: 45s"),
        "{user_data}"
    );
    assert!(user_data.contains("strategy: RAID0"), "{user_data}");
    scene.end().await;
}

/// Node repair end to end on moto: the node-join simulator makes an instance's node report
/// `KernelReady=False` (as the EKS node monitoring agent would, for an hour already); the
/// controller process launches a replacement, moves the pod and terminates the instance.
#[tokio::test]
async fn a_node_that_reports_a_bad_condition_is_repaired() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-repair", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28320).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &scene.ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &scene.ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("app", &s.cluster, 1, "500m", json!({})),
        )
        .await
        .expect("deployment");
    all_running(&pods, "app=app", 1).await;
    let before = instances(&s).await;
    assert_eq!(before.len(), 1, "{before:?}");
    let sick = before.keys().next().cloned().unwrap_or_default();
    s.ec2
        .create_tags()
        .resources(&sick)
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("jointer.dev/unhealthy")
                .value("KernelReady=False")
                .build(),
        )
        .send()
        .await
        .expect("tag the instance");
    wait_for(
        "the unhealthy node's instance to be replaced and terminated",
        Duration::from_secs(180),
        || async {
            let now = instances(&s).await;
            (!now.contains_key(&sick) && now.len() == 1).then_some(())
        },
    )
    .await;
    all_running(&pods, "app=app", 1).await;
    scene.end().await;
}
