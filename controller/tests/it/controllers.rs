//! The controllers in-process, against the real test API server and the simulated cloud
//! (`cloud::sim`): provisioning, the NodeClaim lifecycle (launch failure, insufficient
//! capacity, registration timeout), the drain with a PodDisruptionBudget, consolidation,
//! interruption and node repair (a node condition set through the status subresource), each in
//! seconds. A joiner task plays the booting kubelet: for every instance
//! the simulated cloud runs it creates the Node (kwok then makes it Ready and runs its pods),
//! so kube-scheduler really binds the pods. The end-to-end suite (`tests/it/provisioning.rs` at
//! the root) keeps what needs AWS emulation and the node-join path.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use jointer_controller::api::labels;
use jointer_controller::cloud::sim::{SimCloud, SimQueue, Source};
use jointer_controller::cloud::{CloudError, InstanceState};
use jointer_controller::core::catalog::Catalog;
use jointer_controller::core::scheduling::CapacityType;
use jointer_controller::metrics::Metrics;
use jointer_controller::runtime::leader::{lead, Elector};
use jointer_controller::runtime::{run_controllers, Context};
use jointer_controller::settings::Settings;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::nodeclass::install_crds;
use crate::testenv::{self, wait_for};

/// Every object a scene makes carries it, so the next scene can remove what a failed one left.
const SCENE_LABEL: &str = "jointer.dev/in-process-scene";
pub(crate) const WAIT: Duration = Duration::from_secs(60);

fn dynamic(client: &kube::Client, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, "v1", kind),
        plural,
    );
    Api::all_with(client.clone(), &resource)
}

pub(crate) fn nodeclaims(c: &kube::Client) -> Api<DynamicObject> {
    dynamic(c, "karpenter.sh", "NodeClaim", "nodeclaims")
}
fn nodepools(c: &kube::Client) -> Api<DynamicObject> {
    dynamic(c, "karpenter.sh", "NodePool", "nodepools")
}
fn nodeclasses(c: &kube::Client) -> Api<DynamicObject> {
    dynamic(c, "karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclasses")
}
fn nodeoverlays(c: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("karpenter.sh", "v1alpha1", "NodeOverlay"),
        "nodeoverlays",
    );
    Api::all_with(c.clone(), &resource)
}

/// Fast timings: batches close in a fraction of a second, disruption decides every second.
fn settings(name: &str) -> Settings {
    Settings {
        cluster_name: name.into(),
        cluster_endpoint: None,
        interruption_queue: Some("sim".into()),
        region: "us-east-1".into(),
        batch_idle: Duration::from_millis(300),
        batch_max: Duration::from_secs(2),
        nodeclass_resync: Duration::from_secs(60),
        gc_grace: Duration::from_secs(30),
        disruption_poll: Duration::from_secs(1),
        disruption_validation: Duration::from_secs(1),
        disruption_settle: Duration::ZERO,
        interruption_act_on_rebalance: false,
        spot_to_spot_consolidation: false,
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(900),
        min_values_policy: Default::default(),
        preference_policy: Default::default(),
        multi_node_consolidation_timeout: Duration::from_secs(60),
        single_node_consolidation_timeout: Duration::from_secs(180),
        log_level: "info".into(),
        metrics_port: 0,
        health_port: 0,
        leader_election_namespace: None,
        identity: Some(format!("{name}-test")),
    }
}

/// One test's world: a namespace, an EC2NodeClass, a NodePool whose nodes carry the scene's
/// label (its pods select it, so nothing else lands there), the controllers running over the
/// simulated cloud, and the joiner.
pub(crate) struct Scene {
    pub(crate) name: String,
    pub(crate) client: kube::Client,
    pub(crate) sim: Arc<SimCloud>,
    pub(crate) queue: Arc<SimQueue>,
    metrics: Arc<Metrics>,
    settings: Settings,
    /// What the controllers reach the API server through, when not `client` (a test's proxy).
    pub(crate) controller_client: Option<kube::Client>,
    /// The controllers first, then the joiner.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Scene {
    pub(crate) async fn start(
        prefix: &str,
        pool_spec: Value,
        tune: impl FnOnce(&mut Settings),
    ) -> Scene {
        testenv::require();
        crate::scene_log::start();
        let client = testenv::kube().await;
        install_crds(&client).await;
        remove_leftovers(&client).await;
        let name = testenv::unique(prefix);
        let ns: Api<Namespace> = Api::all(client.clone());
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {SCENE_LABEL: name}}}),
            )
            .expect("namespace"),
        )
        .await
        .expect("create namespace");
        let class = json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": name, "labels": {SCENE_LABEL: name}},
            "spec": {
                "role": "sim-node-role",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": name}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": name}}],
            }
        });
        create(&nodeclasses(&client), class).await;
        let mut pool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name, "labels": {SCENE_LABEL: name}},
            "spec": {"template": {
                "metadata": {"labels": {SCENE_LABEL: name}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": name},
                    "requirements": [
                        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5", "r5"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                },
            }},
        });
        merge(&mut pool["spec"], &pool_spec);
        create(&nodepools(&client), pool).await;

        let source = Source::Embedded {
            catalog: Catalog::embedded().expect("embedded catalog"),
            region: "us-east-1".into(),
            prices: None,
        };
        let sim = Arc::new(SimCloud::new(source));
        // Shorter than SQS's default 30 s, so a crash's unacknowledged messages come back soon.
        let queue = Arc::new(SimQueue::with_visibility_timeout(Duration::from_secs(10)));
        let metrics = Arc::new(Metrics::new());
        let mut settings = settings(&name);
        tune(&mut settings);
        let joiner = tokio::spawn(join_nodes(client.clone(), sim.clone(), name.clone()));
        let mut scene = Scene {
            name,
            client,
            sim,
            queue,
            metrics,
            settings,
            controller_client: None,
            tasks: vec![joiner],
        };
        scene.tasks.insert(0, scene.spawn_controllers());
        wait_for("the EC2NodeClass to be Ready", WAIT, || async {
            let class = nodeclasses(&scene.client).get(&scene.name).await.ok()?;
            (condition(&class, "Ready").as_deref() == Some("True")).then_some(())
        })
        .await;
        scene
    }

    /// The controllers over the scene's cloud and queue, with nothing in memory; with
    /// `LEADER_ELECTION_NAMESPACE` set, a replica that acts only while it holds the Lease.
    fn spawn_controllers(&self) -> tokio::task::JoinHandle<()> {
        self.spawn_replica(&self.settings.identity(), self.metrics.clone())
    }

    pub(crate) fn spawn_replica(
        &self,
        identity: &str,
        metrics: Arc<Metrics>,
    ) -> tokio::task::JoinHandle<()> {
        let client = self
            .controller_client
            .clone()
            .unwrap_or_else(|| self.client.clone());
        let (ctx, feeds) = Context::new(
            client.clone(),
            self.sim.clone(),
            Some(self.queue.clone()),
            self.settings.clone(),
            metrics.clone(),
            identity,
        );
        let controllers = run_controllers(Arc::new(ctx), feeds);
        let Some(namespace) = self.settings.leader_election_namespace.clone() else {
            return tokio::spawn(controllers);
        };
        let elector = Elector::new(client, &namespace, identity.to_string());
        tokio::spawn(async move {
            lead(&elector, &metrics.leader, || controllers).await;
        })
    }

    /// Kills the controllers wherever they are (at an await point: whatever they had not sent
    /// yet is lost, whatever they had sent stays), as SIGKILL would.
    pub(crate) async fn crash(&mut self) {
        self.tasks[0].abort();
        let _ = (&mut self.tasks[0]).await;
    }

    /// Starts the controllers again after a crash.
    pub(crate) fn restart(&mut self) {
        self.tasks[0] = self.spawn_controllers();
    }

    /// A pod of `cpu` that only this scene's nodes can take.
    async fn pod(&self, name: &str, cpu: &str, labels: Value) -> Pod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.name, "labels": labels},
            "spec": {
                "nodeSelector": {SCENE_LABEL: self.name},
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
            }
        }))
        .expect("pod");
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect("create pod")
    }

    pub(crate) fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Waits until the NodeClaim `name` no longer exists.
    async fn claim_deleted(&self, what: &str, name: &str) {
        wait_for(what, WAIT, || async {
            nodeclaims(&self.client)
                .get_opt(name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    }

    pub(crate) async fn claims(&self) -> Vec<DynamicObject> {
        let selector = format!("{}={}", labels::NODEPOOL, self.name);
        nodeclaims(&self.client)
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("list NodeClaims")
            .items
    }

    /// Waits until `pod` runs on a node, and returns the node's name. A timeout says where the
    /// pod got stuck: its conditions, the scene's NodeClaims and Nodes, the launches.
    async fn running(&self, pod: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(p) = self.pods().get(pod).await {
                let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                if phase.as_deref() == Some("Running") {
                    if let Some(node) = p.spec.and_then(|s| s.node_name) {
                        return node;
                    }
                }
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out after {WAIT:?} waiting for pod {pod} Running\n{}",
                    self.state(pod).await
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The pod's conditions, the scene's NodeClaims (conditions) and Nodes (taints, Ready), and
    /// what the simulated cloud launched: for a test that timed out.
    async fn state(&self, pod: &str) -> String {
        let mut out = Vec::new();
        if let Ok(p) = self.pods().get(pod).await {
            let conditions = p
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .map(|c| {
                    format!(
                        "{}={} {}",
                        c.type_,
                        c.status,
                        c.message.clone().unwrap_or_default()
                    )
                })
                .collect::<Vec<_>>();
            out.push(format!(
                "pod {pod}: node {:?}, {conditions:?}",
                p.spec.and_then(|s| s.node_name)
            ));
        }
        for c in self.claims().await {
            out.push(format!(
                "NodeClaim {}: {}",
                c.name_any(),
                c.data["status"]["conditions"]
            ));
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let params = ListParams::default().labels(&format!("{SCENE_LABEL}={}", self.name));
        for n in nodes
            .list(&params)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let taints: Vec<String> = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status.clone());
            out.push(format!(
                "Node {}: taints {taints:?}, Ready {ready:?}",
                n.name_any()
            ));
        }
        out.push(format!(
            "launched: {:?}",
            self.sim
                .instances()
                .iter()
                .map(|i| (&i.launched.instance_type, i.state))
                .collect::<Vec<_>>()
        ));
        out.join("\n")
    }

    /// The Events whose reason is `reason` on objects named `name`.
    async fn events(&self, name: &str, reason: &str) -> Vec<String> {
        let events: Api<Event> = Api::all(self.client.clone());
        events
            .list(&ListParams::default())
            .await
            .expect("events")
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.message)
            .collect()
    }

    /// Deletes the scene's objects with the controllers still running (they drain and
    /// terminate the nodes and release the finalizers), then stops them.
    pub(crate) async fn finish(self) {
        let _ = nodepools(&self.client)
            .delete(&self.name, &DeleteParams::default())
            .await;
        for c in self.claims().await {
            let _ = nodeclaims(&self.client)
                .delete(&c.name_any(), &DeleteParams::background())
                .await;
        }
        let ns: Api<Namespace> = Api::all(self.client.clone());
        let _ = ns.delete(&self.name, &DeleteParams::background()).await;
        wait_for("the scene's NodeClaims to go", WAIT, || async {
            self.claims().await.is_empty().then_some(())
        })
        .await;
        let _ = nodeclasses(&self.client)
            .delete(&self.name, &DeleteParams::default())
            .await;
        wait_for("the scene's EC2NodeClass to go", WAIT, || async {
            nodeclasses(&self.client)
                .get_opt(&self.name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
        let live = self
            .sim
            .instances()
            .into_iter()
            .filter(|i| i.state == InstanceState::Live)
            .count();
        assert_eq!(
            live, 0,
            "every instance is terminated once the scene is gone"
        );
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        crate::scene_log::print_on_failure();
    }
}

async fn create(api: &Api<DynamicObject>, value: Value) {
    let obj: DynamicObject = serde_json::from_value(value).expect("object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create");
}

/// Deep-merges `extra` into `base`.
fn merge(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e.clone(),
    }
}

fn condition(obj: &DynamicObject, kind: &str) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

/// What a failed scene left: its NodeClaims, NodePools and classes, finalizers removed (no
/// controller runs now to release them), its Nodes and namespaces.
async fn remove_leftovers(client: &kube::Client) {
    let params = ListParams::default().labels(SCENE_LABEL);
    let unblock = json!({"metadata": {"finalizers": null}});
    for api in [
        nodeclaims(client),
        nodepools(client),
        nodeclasses(client),
        nodeoverlays(client),
    ] {
        for o in api.list(&params).await.map(|l| l.items).unwrap_or_default() {
            let _ = api
                .patch(
                    &o.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&unblock),
                )
                .await;
            let _ = api.delete(&o.name_any(), &DeleteParams::default()).await;
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    for n in nodes
        .list(&params)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let _ = nodes.delete(&n.name_any(), &DeleteParams::default()).await;
    }
    let ns: Api<Namespace> = Api::all(client.clone());
    for n in ns.list(&params).await.map(|l| l.items).unwrap_or_default() {
        let _ = ns.delete(&n.name_any(), &DeleteParams::background()).await;
    }
}

/// The booting kubelet: a Node for each live instance of the scene's NodeClaims (the
/// NodeClaim's capacity and labels, the unregistered taint, kwok's annotation), as the
/// node-join simulator does for EC2 instances. Nodes are never removed here: the NodeClaim
/// controller deletes them.
async fn join_nodes(client: kube::Client, sim: Arc<SimCloud>, scene: String) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut joined: BTreeSet<String> = BTreeSet::new();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for i in sim.instances() {
            if i.state != InstanceState::Live || joined.contains(&i.launched.provider_id) {
                continue;
            }
            let Ok(claim) = nodeclaims(&client).get(&i.nodeclaim).await else {
                continue;
            };
            if claim.labels().get(labels::NODEPOOL) != Some(&scene) {
                continue;
            }
            let status = &claim.data["status"];
            if status["providerID"].as_str() != Some(i.launched.provider_id.as_str()) {
                continue; // not recorded yet: the kubelet would need its labels
            }
            let name = format!(
                "sim-{}",
                i.launched.provider_id.rsplit('/').next().unwrap_or("x")
            );
            let mut node_labels = claim.labels().clone();
            node_labels.insert(labels::HOSTNAME.into(), name.clone());
            node_labels.insert(SCENE_LABEL.into(), scene.clone());
            let node = json!({
                "metadata": {
                    "name": name,
                    "labels": node_labels,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                },
                "spec": {
                    "providerID": i.launched.provider_id,
                    "taints": [{"key": labels::UNREGISTERED_TAINT, "effect": "NoExecute"}],
                },
                "status": {
                    "capacity": status["capacity"],
                    "allocatable": status["allocatable"],
                },
            });
            let node: Node = serde_json::from_value(node).expect("node");
            if nodes.create(&PostParams::default(), &node).await.is_ok() {
                joined.insert(i.launched.provider_id.clone());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pending_pods_get_the_cheapest_instance_a_registered_node_and_run() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start("ip-provision", json!({}), |_| {}).await;
    s.pod("web-0", "1500m", json!({})).await;
    let node = s.running("web-0").await;

    let claims = s.claims().await;
    assert_eq!(claims.len(), 1, "one pod, one NodeClaim");
    let launched = s.sim.instances();
    assert_eq!(launched.len(), 1, "one launch");
    let instance = &launched[0].launched;
    // The cheapest on-demand m5/c5/r5 offering with room for 1.5 CPU, as the catalog says.
    let class: jointer_controller::api::EC2NodeClass = serde_json::from_value(
        serde_json::to_value(nodeclasses(&s.client).get(&s.name).await.expect("class"))
            .expect("json"),
    )
    .expect("class");
    let cheapest = s
        .sim
        .class_types(&class)
        .expect("types")
        .into_iter()
        .filter(|t| {
            ["m5", "c5", "r5"]
                .iter()
                .any(|f| t.name.starts_with(&format!("{f}.")))
        })
        .filter(|t| t.allocatable.cpu >= 1500)
        .flat_map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::OnDemand)
                .map(|o| (o.price, t.name.clone()))
                .collect::<Vec<_>>()
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("an offering");
    assert_eq!(instance.instance_type, cheapest.1);
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);

    let nodes: Api<Node> = Api::all(s.client.clone());
    let n = nodes.get(&node).await.expect("node");
    assert_eq!(
        n.labels().get(labels::INSTANCE_TYPE),
        Some(&instance.instance_type)
    );
    let taints: Vec<String> = n
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert!(
        !taints.iter().any(|t| t == labels::UNREGISTERED_TAINT),
        "registration removes the unregistered taint: {taints:?}"
    );
    // Initialized (so Ready) follows registration on the claim's next pass, which may come
    // just after kube-scheduler bound the pod to the untainted node.
    let name = claims[0].name_any();
    let claim = wait_for("the NodeClaim Ready", WAIT, || async {
        let c = nodeclaims(&s.client).get(&name).await.ok()?;
        (condition(&c, "Ready").as_deref() == Some("True")).then_some(c)
    })
    .await;
    assert!(
        claim
            .owner_references()
            .iter()
            .any(|o| o.kind == "NodePool"),
        "the NodeClaim is owned by its pool"
    );
    s.finish().await;
}

/// The Savings Plan case end to end: a NodeOverlay pricing one type far below its list price
/// makes the provisioner plan it and the launch buy it; of two overlays of the same weight
/// pricing it, one is reported as conflicting and only the other applies.
#[tokio::test(flavor = "multi_thread")]
async fn an_overlay_making_a_type_cheaper_changes_what_launches() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start("ip-overlay", json!({}), |_| {}).await;
    const DISCOUNTED: &str = "m5.2xlarge";
    let overlay = |name: String, price: &str| {
        json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": name, "labels": {SCENE_LABEL: s.name}},
            "spec": {
                "weight": 5,
                "price": price,
                "requirements": [
                    // Only this scene's pool: overlays are cluster-wide.
                    {"key": labels::NODEPOOL, "operator": "In", "values": [s.name]},
                    {"key": labels::INSTANCE_TYPE, "operator": "In", "values": [DISCOUNTED]},
                ],
            },
        })
    };
    let (winner, loser) = (format!("{}-b", s.name), format!("{}-a", s.name));
    create(&nodeoverlays(&s.client), overlay(winner.clone(), "0.001")).await;
    create(&nodeoverlays(&s.client), overlay(loser.clone(), "0.002")).await;
    let status = |name: String| {
        let api = nodeoverlays(&s.client);
        async move {
            let o = api.get(&name).await.ok()?;
            let c = o.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "ValidationSucceeded")?
                .clone();
            Some((
                c["status"].as_str()?.to_string(),
                c["reason"].as_str()?.to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            ))
        }
    };
    let (ok, reason, _) = wait_for("the winning overlay's status", WAIT, || {
        status(winner.clone())
    })
    .await;
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("True", "ValidationSucceeded")
    );
    let (ok, reason, message) = wait_for("the conflicting overlay's status", WAIT, || {
        status(loser.clone())
    })
    .await;
    assert_eq!((ok.as_str(), reason.as_str()), ("False", "Conflict"));
    assert!(message.contains(&winner), "{message}");

    // At list prices a pod of 1.5 CPU gets a far smaller type; the overlay makes this one cheapest.
    s.pod("web-0", "1500m", json!({})).await;
    s.running("web-0").await;
    let launched = s.sim.instances();
    assert_eq!(launched.len(), 1, "one launch");
    assert_eq!(launched[0].launched.instance_type, DISCOUNTED);
    for name in [winner, loser] {
        let _ = nodeoverlays(&s.client)
            .delete(&name, &DeleteParams::default())
            .await;
    }
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_launch_is_reported_on_the_nodeclaim_and_retried() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start("ip-launchfail", json!({}), |_| {}).await;
    s.sim.fail_next_launches([CloudError::Api {
        service: "ec2",
        operation: "CreateFleet",
        code: "UnauthorizedOperation".into(),
        message: "not allowed to launch".into(),
    }]);
    s.pod("job-0", "500m", json!({})).await;
    s.running("job-0").await;
    assert_eq!(s.sim.launch_calls(), 2, "the failed launch, then the retry");
    assert_eq!(s.sim.instances().len(), 1);
    let claim = s.claims().await.remove(0).name_any();
    let failed = s.events(&claim, "LaunchFailed").await;
    assert!(
        failed.iter().any(|m| m.contains("UnauthorizedOperation")),
        "the failure is an Event on the NodeClaim naming AWS's code: {failed:?}"
    );
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn insufficient_capacity_falls_back_to_the_next_cheapest_offering() {
    let _turn = crate::testenv::TURN.lock().await;
    // Every zone of the cheapest type is short: the launch must move to another type.
    let s = Scene::start(
        "ip-ice",
        json!({"template": {"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "c5.large"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]}}}),
        |_| {},
    )
    .await;
    for zone in [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1e",
        "us-east-1f",
    ] {
        s.sim.no_capacity("c5.large", zone, CapacityType::OnDemand);
    }
    s.pod("api-0", "1", json!({})).await;
    s.running("api-0").await;
    let live: Vec<String> = s
        .sim
        .instances()
        .into_iter()
        .filter(|i| i.state == InstanceState::Live)
        .map(|i| i.launched.instance_type)
        .collect();
    assert_eq!(live, ["m5.large"], "c5.large had no capacity anywhere");
    assert!(
        s.sim.launch_calls() >= 2,
        "at least one launch hit the shortage"
    );
    let claim = s.claims().await.remove(0).name_any();
    let short = s.events(&claim, "InsufficientCapacity").await;
    assert!(
        !short.is_empty(),
        "the shortage is an Event on the NodeClaim"
    );
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_never_registers_is_given_up_and_its_instance_terminated() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start("ip-noreg", json!({}), |s| {
        s.registration_timeout = Duration::from_secs(3)
    })
    .await;
    // No joiner: the instance never becomes a Node.
    s.tasks[1].abort();
    s.pod("lonely-0", "500m", json!({})).await;
    let first = wait_for("a launch", WAIT, || async {
        s.sim
            .instances()
            .first()
            .map(|i| i.launched.provider_id.clone())
    })
    .await;
    let claim = wait_for("the NodeClaim", WAIT, || async {
        s.claims().await.first().map(|c| c.name_any())
    })
    .await;
    wait_for(
        "the unregistered instance to be terminated",
        WAIT,
        || async { s.sim.terminated().contains(&first).then_some(()) },
    )
    .await;
    let why = s.events(&claim, "RegistrationTimeout").await;
    assert!(
        why.iter().any(|m| m.contains("no Node registered")),
        "{why:?}"
    );
    s.claim_deleted("the NodeClaim to be deleted", &claim).await;
    s.finish().await;
}

/// The controllers were killed after a launch returned and before its NodeClaim recorded it,
/// and the instance ended while they were down (a spot reclaim): the restarted controllers
/// find the ended instance by its tag and delete the NodeClaim instead of launching again.
#[tokio::test(flavor = "multi_thread")]
async fn a_nodeclaim_whose_unrecorded_instance_ended_is_deleted_not_launched_again() {
    use jointer_controller::api::nodeclaim::NodeClaim;
    use jointer_controller::api::EC2NodeClass;
    use jointer_controller::cloud::CloudProvider;
    use jointer_controller::core::overlay::PoolOverlays;

    let _turn = crate::testenv::TURN.lock().await;
    let mut s = Scene::start("ip-ended", json!({}), |_| {}).await;
    s.crash().await;
    let name = format!("{}-lost", s.name);
    let claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {labels::NODEPOOL: s.name, SCENE_LABEL: s.name}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": s.name},
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
        },
    });
    create(&nodeclaims(&s.client), claim).await;
    let claim = Api::<NodeClaim>::all(s.client.clone())
        .get(&name)
        .await
        .expect("the NodeClaim");
    let class = Api::<EC2NodeClass>::all(s.client.clone())
        .get(&s.name)
        .await
        .expect("the EC2NodeClass");
    let (launched, _) = s
        .sim
        .launch(&claim, &class, &PoolOverlays::default())
        .await
        .expect("the launch whose answer the crash lost");
    s.sim
        .terminate(std::slice::from_ref(&launched.provider_id))
        .await
        .expect("terminate");
    s.restart();
    s.claim_deleted("the NodeClaim to be deleted", &name).await;
    let why = s.events(&name, "InstanceTerminated").await;
    assert!(
        why.iter().any(|m| m.contains(&launched.provider_id)),
        "{why:?}"
    );
    assert_eq!(
        s.sim.launch_calls(),
        1,
        "no second launch for the NodeClaim"
    );
    s.finish().await;
}

/// An instance launched while the garbage collector lists a slow cloud belongs to a NodeClaim
/// the collector's NodeClaim list predates: it is not an orphan, however long the listing
/// took. (At 200 nodes a listing slower than the grace period terminated live instances.)
#[tokio::test(flavor = "multi_thread")]
async fn instances_launched_during_a_slow_listing_are_not_collected() {
    let _turn = crate::testenv::TURN.lock().await;
    // No consolidation: every instance that ends here ends by garbage collection.
    let never = json!({"disruption": {"consolidateAfter": "Never"}});
    let s = Scene::start("ip-gcrace", never, |s| s.gc_grace = Duration::from_secs(1)).await;
    // Three times the grace period: most launches land inside a listing.
    s.sim.slow_listing(Duration::from_secs(3));
    for i in 0..6 {
        s.pod(&format!("steady-{i}"), "3", json!({"app": "steady"}))
            .await;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    // One by one: a timeout then says where the pod got stuck.
    let mut nodes = BTreeSet::new();
    for i in 0..6 {
        nodes.insert(s.running(&format!("steady-{i}")).await);
    }
    // Two more listings, each of which sees every launch.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let launched = s.sim.instances();
    assert_eq!(
        s.sim.terminated(),
        Vec::<String>::new(),
        "no live instance collected"
    );
    assert_eq!(
        launched.len(),
        nodes.len(),
        "one instance per node, none relaunched: {launched:?}"
    );
    s.sim.slow_listing(Duration::ZERO);
    s.finish().await;
}

/// The Node (by provider ID) of the scene, if one joined.
async fn node_of(s: &Scene, provider_id: &str) -> Option<Node> {
    let nodes: Api<Node> = Api::all(s.client.clone());
    let selector = format!("{}={}", labels::NODEPOOL, s.name);
    nodes
        .list(&ListParams::default().labels(&selector))
        .await
        .ok()?
        .items
        .into_iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
}

/// A NodeClaim deleted after its instance's Node joined but before it was registered (the
/// status names no node): the Node goes with it, found by provider ID, rather than staying
/// behind as a node that carries the unregistered taint for good; and the pod still gets a
/// node, instead of being planned forever onto that one, which it can never use.
#[tokio::test(flavor = "multi_thread")]
async fn a_nodeclaim_deleted_while_its_node_joins_takes_the_node_along() {
    let _turn = crate::testenv::TURN.lock().await;
    let mut s = Scene::start("ip-joining", json!({}), |_| {}).await;
    // Nodes join only once the controllers are down, so none is registered.
    s.tasks[1].abort();
    s.pod("late-0", "500m", json!({})).await;
    let (claim, provider_id) = wait_for("a launch recorded", WAIT, || async {
        let claims = s.claims().await;
        let c = claims.first()?;
        let id = c.data["status"]["providerID"].as_str()?.to_string();
        Some((c.name_any(), id))
    })
    .await;
    s.crash().await;
    s.tasks[1] = tokio::spawn(join_nodes(s.client.clone(), s.sim.clone(), s.name.clone()));
    let joined = wait_for("the Node to join", WAIT, || node_of(&s, &provider_id)).await;
    let unregistered = joined
        .spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .any(|t| t.key == labels::UNREGISTERED_TAINT);
    assert!(unregistered, "the Node joined unregistered");
    nodeclaims(&s.client)
        .delete(&claim, &DeleteParams::background())
        .await
        .expect("delete the NodeClaim");
    s.restart();
    wait_for("the NodeClaim and its Node to go", WAIT, || async {
        let claim_gone = nodeclaims(&s.client).get_opt(&claim).await.ok()?.is_none();
        (claim_gone && node_of(&s, &provider_id).await.is_none()).then_some(())
    })
    .await;
    let node = s.running("late-0").await;
    assert_ne!(node, joined.name_any(), "the pod runs on a new node");
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_waits_for_a_pod_disruption_budget_and_then_terminates() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start("ip-drain", json!({}), |_| {}).await;
    s.pod("db-0", "500m", json!({"app": "db"})).await;
    let node = s.running("db-0").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.name);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}},
    }))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("pdb");
    let claim = s.claims().await.remove(0).name_any();
    nodeclaims(&s.client)
        .delete(&claim, &DeleteParams::background())
        .await
        .expect("delete NodeClaim");

    let nodes: Api<Node> = Api::all(s.client.clone());
    wait_for("the node to be tainted for disruption", WAIT, || async {
        let n = nodes.get(&node).await.ok()?;
        n.spec?
            .taints?
            .iter()
            .any(|t| t.key == labels::DISRUPTED_TAINT)
            .then_some(())
    })
    .await;
    // The budget allows no eviction: the pod stays, the instance runs, for several passes.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(s.pods().get_opt("db-0").await.expect("get").is_some());
    assert!(
        s.sim.terminated().is_empty(),
        "nothing terminated while the budget holds"
    );

    pdbs.delete("db", &DeleteParams::default())
        .await
        .expect("delete pdb");
    s.claim_deleted("the NodeClaim to go once the pod is evicted", &claim)
        .await;
    assert_eq!(s.sim.terminated().len(), 1, "the instance is terminated");
    assert!(
        nodes.get_opt(&node).await.expect("get").is_none(),
        "the Node is deleted"
    );
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_empty_node_is_consolidated_away() {
    let _turn = crate::testenv::TURN.lock().await;
    // A 5 s settle, as in the interruption test: with the suite's zero settle the fresh node
    // went as empty before kube-scheduler bound batch-0 on a loaded machine (CI, 2026-12-07).
    let s = Scene::start(
        "ip-empty",
        json!({"disruption": {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized"}}),
        |settings| settings.disruption_settle = Duration::from_secs(5),
    )
    .await;
    s.pod("batch-0", "500m", json!({})).await;
    s.running("batch-0").await;
    let claim = s.claims().await.remove(0).name_any();
    s.pods()
        .delete("batch-0", &DeleteParams::default())
        .await
        .expect("delete pod");
    wait_for("the empty node's NodeClaim to go", WAIT, || async {
        s.claims().await.is_empty().then_some(())
    })
    .await;
    assert_eq!(s.sim.terminated().len(), 1);
    let why = s.events(&claim, "Disrupting").await;
    assert!(why.iter().any(|m| m.starts_with("Empty")), "{why:?}");
    let counted = s.metrics.encode().lines().any(|l| {
        l.contains("disruption_commands") && l.contains("reason=\"Empty\"") && !l.ends_with(" 0")
    });
    assert!(counted, "the command is counted in disruption_commands");
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spot_interruption_replaces_the_node_and_avoids_that_capacity() {
    let _turn = crate::testenv::TURN.lock().await;
    // The suite's zero settle lets an empty node go the moment its nomination lapses; on a
    // loaded machine kube-scheduler bound worker-0 later than that and its fresh node was
    // consolidated first (CI, twice). Production's settle is 30 s; this test is about
    // interruption, so it takes 5 s, as the CLI suite's controller does.
    let s = Scene::start("ip-spot", spot_only(), |settings| {
        settings.disruption_settle = Duration::from_secs(5)
    })
    .await;
    s.pod("worker-0", "1", json!({})).await;
    let first_node = s.running("worker-0").await;
    let first = s.sim.instances().remove(0).launched;
    assert_eq!(first.capacity_type, CapacityType::Spot);
    let id = instance_id(&first.provider_id);
    s.queue.send(
        &json!({
            "source": "aws.ec2",
            "detail-type": "EC2 Spot Instance Interruption Warning",
            "detail": {"instance-id": id, "instance-action": "terminate"},
        })
        .to_string(),
    );
    // The pod moves to a replacement of another offering; the interrupted one goes.
    wait_for("the pod on a replacement node", WAIT, || async {
        let p = s.pods().get("worker-0").await.ok();
        let on = p.as_ref().and_then(|p| p.spec.as_ref()?.node_name.clone());
        let running = p
            .as_ref()
            .and_then(|p| p.status.as_ref()?.phase.clone())
            .as_deref()
            == Some("Running");
        if on.as_deref().is_some_and(|n| n != first_node) && running {
            return Some(());
        }
        // A deleted pod is not recreated without a controller of its own: make it again.
        if p.is_none() {
            s.pod("worker-0", "1", json!({})).await;
        }
        None
    })
    .await;
    wait_for(
        "the interrupted instance to be terminated",
        WAIT,
        || async {
            s.sim
                .terminated()
                .contains(&first.provider_id)
                .then_some(())
        },
    )
    .await;
    let replacement = s
        .sim
        .instances()
        .into_iter()
        .find(|i| i.state == InstanceState::Live)
        .expect("a replacement")
        .launched;
    assert_ne!(
        (replacement.instance_type.clone(), replacement.zone.clone()),
        (first.instance_type.clone(), first.zone.clone()),
        "the interrupted spot offering is not bought again right away"
    );
    assert_eq!(s.queue.pending(), 0, "the message is acknowledged");
    s.finish().await;
}

/// The instance id at the end of a provider ID (`sim:///zone/i-…`).
pub(crate) fn instance_id(provider_id: &str) -> String {
    provider_id
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A pool of m5/c5/r5 spot instances.
fn spot_only() -> Value {
    json!({"template": {"spec": {"requirements": [
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5", "r5"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
    ]}}})
}

/// How many interruption messages the controller counted under `reason`.
fn interruption_messages(s: &Scene, reason: &str) -> u64 {
    let prefix = format!("jointer_controller_interruption_messages_total{{reason=\"{reason}\"}} ");
    s.metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0)
}

pub(crate) fn spot_warning(event_id: &str, time: &str, instance: &str) -> String {
    json!({
        "id": event_id, "time": time, "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": instance, "instance-action": "terminate"},
    })
    .to_string()
}

/// Hostile input on the queue: nothing it says about another cluster's instances, nothing
/// stale, malformed or oversized touches a node; a flood of 10,000 messages with the one real
/// warning in it (delivered twice, and once more under another event id) is drained, the
/// real warning acted on once, and the loop keeps going.
#[tokio::test]
async fn hostile_interruption_messages_are_dropped_and_a_flood_is_drained_acting_once() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start("ip-hostile", spot_only(), |_| {}).await;
    s.pod("worker-0", "1", json!({})).await;
    let first_node = s.running("worker-0").await;
    let first = s.sim.instances().remove(0).launched;
    let id = instance_id(&first.provider_id);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();

    // Nothing here may touch the node.
    let hostile = [
        ("stale", spot_warning("stale", "2020-01-01T00:00:00Z", &id)),
        (
            "oversized",
            format!("{{\"pad\":\"{}\"}}", "x".repeat(300 * 1024)),
        ),
        ("malformed", "not an event".to_string()),
        (
            "malformed",
            spot_warning("forged", &now, &id).replace("aws.ec2", "my.app"),
        ),
        (
            "malformed",
            spot_warning("bad-id", &now, "../i-0123456789abcdef0"),
        ),
        (
            "not_ours",
            spot_warning("other", &now, "i-0fffffffffffffff0"),
        ),
        (
            "ignored",
            json!({"id": "running", "time": now, "source": "aws.ec2",
                   "detail-type": "EC2 Instance State-change Notification",
                   "detail": {"instance-id": id, "state": "running"}})
            .to_string(),
        ),
    ];
    for (_, body) in &hostile {
        s.queue.send(body);
    }
    wait_for("the hostile messages acknowledged", WAIT, || async {
        (s.queue.pending() == 0).then_some(())
    })
    .await;
    for reason in ["stale", "oversized", "malformed", "not_ours", "ignored"] {
        let sent = hostile.iter().filter(|(r, _)| *r == reason).count() as u64;
        assert_eq!(interruption_messages(&s, reason), sent, "{reason}");
    }
    assert_eq!(interruption_messages(&s, "spot_interruption"), 0);
    let claims = s.claims().await;
    assert_eq!(claims.len(), 1);
    assert!(
        claims[0].metadata.deletion_timestamp.is_none(),
        "the node stays"
    );

    // The flood: 10,000 warnings for other clusters' instances; the real one sits inside,
    // twice under its event id and once under another, in one receive batch of ten.
    let flood = 10_000;
    let started = std::time::Instant::now();
    for n in 0..flood {
        if n == flood / 2 {
            s.queue.send(&spot_warning("real", &now, &id));
            s.queue.send(&spot_warning("real", &now, &id));
            s.queue.send(&spot_warning("real-again", &now, &id));
        }
        s.queue.send(&spot_warning(
            &format!("flood-{n}"),
            &now,
            &format!("i-1{n:016x}"),
        ));
    }
    wait_for("the flood drained", Duration::from_secs(300), || async {
        (s.queue.pending() == 0).then_some(())
    })
    .await;
    let drained = started.elapsed().as_secs_f64();
    eprintln!(
        "interruption flood: {} messages drained in {drained:.1} s ({:.0} messages/s)",
        flood + 3,
        (flood + 3) as f64 / drained
    );
    assert_eq!(
        interruption_messages(&s, "spot_interruption"),
        1,
        "acted on once"
    );
    assert_eq!(interruption_messages(&s, "duplicate"), 1);
    assert_eq!(interruption_messages(&s, "already_going"), 1);
    assert_eq!(interruption_messages(&s, "not_ours"), flood as u64 + 1);
    assert!(
        !s.events(&claims[0].name_any(), "SpotInterrupted")
            .await
            .is_empty(),
        "the interruption is recorded on the NodeClaim"
    );

    // The pod moves to a replacement; only the interrupted instance is terminated.
    wait_for("the pod on a replacement node", WAIT, || async {
        let p = s.pods().get("worker-0").await.ok();
        if p.is_none() {
            s.pod("worker-0", "1", json!({})).await;
        }
        let on = p.as_ref().and_then(|p| p.spec.as_ref()?.node_name.clone());
        on.is_some_and(|n| n != first_node).then_some(())
    })
    .await;
    wait_for("the interrupted instance terminated", WAIT, || async {
        (!s.sim.terminated().is_empty()).then_some(())
    })
    .await;
    assert_eq!(s.sim.terminated(), std::slice::from_ref(&first.provider_id));
    assert!(!s.tasks[0].is_finished(), "the controllers keep running");
    s.finish().await;
}

fn capacitybuffers(c: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer"),
        "capacitybuffers",
    );
    Api::namespaced_with(c.clone(), namespace, &resource)
}

/// The buffer's `Provisioning` condition status once its status says `replicas` chunks.
async fn buffer_provisioning(s: &Scene, replicas: i64) -> Option<String> {
    let b = capacitybuffers(&s.client, &s.name).get("warm").await.ok()?;
    (b.data["status"]["replicas"].as_i64() == Some(replicas))
        .then(|| condition(&b, "Provisioning"))
        .flatten()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buffer_keeps_a_warm_node() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start(
        "ip-buffer",
        json!({"disruption": {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized"}}),
        |_| {},
    )
    .await;
    // One chunk of 1 CPU, shaped like the pods this scene's nodes take.
    let templates: Api<k8s_openapi::api::core::v1::PodTemplate> =
        Api::namespaced(s.client.clone(), &s.name);
    templates
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "chunk"},
                "template": {"spec": {
                    "nodeSelector": {SCENE_LABEL: s.name},
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}],
                }},
            }))
            .expect("template"),
        )
        .await
        .expect("create PodTemplate");
    let buffer: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "warm", "namespace": s.name},
        "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 1},
    }))
    .expect("buffer");
    capacitybuffers(&s.client, &s.name)
        .create(&PostParams::default(), &buffer)
        .await
        .expect("create CapacityBuffer");

    // With no pod pending, the buffer alone launches a node, and its status says the
    // headroom exists once the node is there.
    wait_for("the buffer's headroom to exist", WAIT, || async {
        (buffer_provisioning(&s, 1).await.as_deref() == Some("True")).then_some(())
    })
    .await;
    let claims = s.claims().await;
    assert_eq!(claims.len(), 1, "one chunk, one node");
    let warm = claims[0].name_any();
    let pods = s.pods().list(&ListParams::default()).await.expect("pods");
    assert!(
        pods.items.is_empty(),
        "placeholders are never created as pods: {:?}",
        pods.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    // Empty, with consolidateAfter 0s and a disruption pass every second: kept all the same.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let names: Vec<String> = s.claims().await.iter().map(|c| c.name_any()).collect();
    assert_eq!(names, std::slice::from_ref(&warm), "the warm node stays");
    assert_eq!(s.sim.instances().len(), 1, "and nothing else was launched");

    // A real pod lands on the warm node at once; the buffer then keeps room on a new one.
    s.pod("web-0", "1", json!({})).await;
    let node = s.running("web-0").await;
    let warm_node = nodeclaims(&s.client).get(&warm).await.expect("claim").data["status"]
        ["nodeName"]
        .as_str()
        .map(str::to_string);
    assert_eq!(Some(node), warm_node, "the pod ran on the buffer's node");
    wait_for(
        "the buffer's headroom to be launched again",
        WAIT,
        || async {
            (s.claims().await.len() == 2
                && buffer_provisioning(&s, 1).await.as_deref() == Some("True"))
            .then_some(())
        },
    )
    .await;

    // Without the buffer, its empty node is waste again and goes; the pod's node stays.
    capacitybuffers(&s.client, &s.name)
        .delete("warm", &DeleteParams::default())
        .await
        .expect("delete buffer");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let names: Vec<String> = s.claims().await.iter().map(|c| c.name_any()).collect();
        if names == [warm.clone()] {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "timed out after {WAIT:?} waiting for the buffer's node to be consolidated away: {names:?}\n{}",
                s.state("web-0").await
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    s.finish().await;
}

/// A Deployment of `replicas` pods of `cpu` that only this scene's nodes can take (evicted
/// pods come back, as node repair expects of its workloads).
pub(crate) async fn deployment(s: &Scene, name: &str, replicas: i32, cpu: &str) {
    deployment_with(s, name, replicas, cpu, json!({}), json!({})).await;
}

/// A Deployment of `app: name` pods that only this scene's nodes take, with `node_selector`
/// added to the scene's and `affinity` as the pods' affinity.
pub(crate) async fn deployment_with(
    s: &Scene,
    name: &str,
    replicas: i32,
    cpu: &str,
    node_selector: Value,
    affinity: Value,
) {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(s.client.clone(), &s.name);
    let mut selector = json!({SCENE_LABEL: s.name});
    if let (Some(all), Some(extra)) = (selector.as_object_mut(), node_selector.as_object()) {
        all.extend(extra.clone());
    }
    let d = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": selector,
                    "affinity": affinity,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
                },
            },
        }
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create deployment");
}

/// The nodes the Deployment's pods run on, once `count` of them run.
async fn running_on(s: &Scene, app: &str, count: usize) -> BTreeSet<String> {
    wait_for(
        &format!("{count} pod(s) of {app} Running"),
        WAIT,
        || async {
            let pods = s
                .pods()
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .ok()?
                .items;
            let running: Vec<String> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                .collect();
            (running.len() == count).then(|| running.into_iter().collect())
        },
    )
    .await
}

/// Sets the node's `KernelReady` condition (the EKS node monitoring agent's) through the
/// status subresource, as having changed to `status` an hour ago. kwok keeps the conditions it
/// does not manage; it would put `Ready` back to True.
async fn report_kernel(s: &Scene, node: &str, status: &str) {
    let nodes: Api<Node> = Api::all(s.client.clone());
    let an_hour_ago =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
    let patch = json!({"status": {"conditions": [{"type": "KernelReady", "status": status,
        "reason": "KernelBug", "message": "injected by the test", "lastHeartbeatTime": an_hour_ago.to_string(),
        "lastTransitionTime": an_hour_ago.to_string()}]}});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .expect("patch node status");
}

fn claim_of(claims: &[DynamicObject], node: &str) -> Option<String> {
    claims
        .iter()
        .find(|c| c.data["status"]["nodeName"] == node)
        .map(|c| c.name_any())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unhealthy_node_is_repaired_a_replacement_first_its_drain_bounded_despite_a_pdb() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start(
        "ip-repair",
        json!({"disruption": {"consolidateAfter": "Never"}}),
        |_| {},
    )
    .await;
    deployment(&s, "web", 1, "1").await;
    let sick = running_on(&s, "web", 1).await.pop_first().expect("a node");
    let old = claim_of(&s.claims().await, &sick).expect("the node's NodeClaim");
    // A PDB that allows no eviction: it does not stop a repair, only the drain, for at most the
    // condition's termination grace period (10 minutes).
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.name);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}},
    }))
    .expect("pdb");
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("pdb");
    let before = k8s_openapi::jiff::Timestamp::now();
    report_kernel(&s, &sick, "False").await;

    // The old NodeClaim is deleted only once its replacement is initialized, and its drain
    // deadline is stamped.
    let stamp = wait_for(
        "the unhealthy node's NodeClaim to be deleting",
        WAIT,
        || async {
            let claims = s.claims().await;
            let going = claims
                .iter()
                .find(|c| c.name_any() == old && c.metadata.deletion_timestamp.is_some())?;
            let replacement = claims.iter().find(|c| c.name_any() != old);
            assert!(
                replacement.is_some_and(|r| condition(r, "Initialized").as_deref() == Some("True")),
                "the replacement is initialized before the unhealthy node goes"
            );
            going
                .annotations()
                .get(labels::TERMINATION_TIMESTAMP)
                .cloned()
        },
    )
    .await;
    let stamp: k8s_openapi::jiff::Timestamp = stamp.parse().expect("a timestamp");
    let bound = stamp.duration_since(before).as_secs();
    assert!(
        (540..=660).contains(&bound),
        "the drain is bounded by 10 minutes, not {bound} s"
    );
    let why = s.events(&old, "Disrupting").await;
    assert!(
        why.iter()
            .any(|m| m.starts_with("Unhealthy: its condition KernelReady=False has held for")),
        "{why:?}"
    );

    // The budget released, the pod moves to the replacement and the old node goes.
    pdbs.delete("web", &DeleteParams::default())
        .await
        .expect("delete pdb");
    wait_for("the unhealthy node's NodeClaim to go", WAIT, || async {
        claim_of(&s.claims().await, &sick).is_none().then_some(())
    })
    .await;
    let now_on = running_on(&s, "web", 1).await;
    assert!(
        !now_on.contains(&sick),
        "the pod moved off the unhealthy node"
    );
    assert_eq!(
        s.sim.terminated().len(),
        1,
        "the unhealthy instance is terminated"
    );
    assert_eq!(s.claims().await.len(), 1, "one replacement, no more");
    let counted = s.metrics.encode().lines().any(|l| {
        l.contains("disruption_commands")
            && l.contains("reason=\"Unhealthy\"")
            && !l.ends_with(" 0")
    });
    assert!(counted, "the repair is counted in disruption_commands");
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_with_too_many_unhealthy_nodes_is_not_repaired_until_some_recover() {
    let _turn = crate::testenv::TURN.lock().await;
    // m5.large only (2 vCPU): two pods of 1200m need two nodes.
    let s = Scene::start(
        "ip-breaker",
        json!({"disruption": {"consolidateAfter": "Never"}, "template": {"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]}}}),
        |_| {},
    )
    .await;
    deployment(&s, "batch", 2, "1200m").await;
    let nodes = running_on(&s, "batch", 2).await;
    assert_eq!(nodes.len(), 2, "one pod per node");
    for n in &nodes {
        report_kernel(&s, n, "False").await;
    }
    // Two of two unhealthy, more than 20 % (rounded up, one node): nothing is repaired over
    // several decision rounds (1 s poll + 1 s validation).
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(s.claims().await.len(), 2, "no replacement launched");
    assert!(s.sim.terminated().is_empty(), "no node repaired");
    assert!(
        s.claims()
            .await
            .iter()
            .all(|c| c.metadata.deletion_timestamp.is_none()),
        "no NodeClaim deleted"
    );

    // One recovers: one of two is within the breaker, and the other is repaired.
    let mut nodes = nodes.into_iter();
    let healed = nodes.next().expect("a node");
    let sick = nodes.next().expect("another node");
    report_kernel(&s, &healed, "True").await;
    wait_for("the still unhealthy node to be repaired", WAIT, || async {
        claim_of(&s.claims().await, &sick).is_none().then_some(())
    })
    .await;
    let now_on = running_on(&s, "batch", 2).await;
    assert!(
        now_on.contains(&healed) && !now_on.contains(&sick),
        "{now_on:?}"
    );
    assert_eq!(s.sim.terminated().len(), 1);
    s.finish().await;
}

/// `kubectl scale nodepool <name> --replicas=<n>`: through the scale subresource.
fn kubectl_scale(pool: &str, replicas: i64) {
    let out = std::process::Command::new("kubectl")
        .args(["scale", "nodepool", pool, &format!("--replicas={replicas}")])
        .output()
        .expect("run kubectl (tests/env puts it on PATH)");
    assert!(
        out.status.success(),
        "kubectl scale: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_static_pool_keeps_its_replicas_and_follows_kubectl_scale() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start(
        "ip-static",
        json!({"replicas": 2, "disruption": {"consolidateAfter": "0s"}}),
        |_| {},
    )
    .await;
    let registered = || async {
        s.claims()
            .await
            .iter()
            .filter(|c| c.data["status"]["nodeName"].is_string())
            .count()
    };
    wait_for("two static nodes, with no pod asking", WAIT, || async {
        (registered().await == 2).then_some(())
    })
    .await;
    kubectl_scale(&s.name, 3);
    wait_for(
        "a third node after kubectl scale --replicas=3",
        WAIT,
        || async { (registered().await == 3).then_some(()) },
    )
    .await;
    // A pod too big for the static nodes stays pending: a static pool never grows for pods,
    // and its empty nodes are not consolidated either.
    s.pod("too-big", "3", json!({})).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(s.claims().await.len(), 3);
    let pod = s.pods().get("too-big").await.expect("pod");
    assert_eq!(
        pod.status.and_then(|st| st.phase).as_deref(),
        Some("Pending")
    );
    s.pods()
        .delete("too-big", &DeleteParams::default())
        .await
        .expect("delete pod");
    kubectl_scale(&s.name, 1);
    wait_for(
        "one node after kubectl scale --replicas=1",
        WAIT,
        || async { (s.claims().await.len() == 1).then_some(()) },
    )
    .await;
    assert_eq!(
        s.sim.terminated().len(),
        2,
        "the two extra instances are terminated"
    );
    // The scale subresource reads the count back from status.nodes.
    wait_for("status.nodes to say 1", WAIT, || async {
        let pool = nodepools(&s.client).get(&s.name).await.ok()?;
        (pool.data["status"]["nodes"] == 1).then_some(())
    })
    .await;
    s.finish().await;
}

/// `consolidationPolicy: Balanced` end to end: a replacement that saves a tenth of the pool's
/// cost for all of its disruption is refused; once an overlay makes it save most of the cost,
/// the same move is taken.
#[tokio::test(flavor = "multi_thread")]
async fn balanced_refuses_a_low_value_move_and_takes_a_high_value_one() {
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start(
        "ip-balanced",
        json!({"disruption": {"consolidateAfter": "0s", "consolidationPolicy": "Balanced"}}),
        |_| {},
    )
    .await;
    s.pod("work", "3", json!({})).await;
    s.running("work").await;
    let first = s.sim.instances()[0].launched.instance_type.clone();
    let other = if first == "m5.xlarge" {
        "c5.xlarge"
    } else {
        "m5.xlarge"
    };
    let list = Catalog::embedded()
        .expect("catalog")
        .instance_types("us-east-1", &Default::default(), None)
        .expect("types");
    let price_of = |name: &str| {
        list.iter()
            .find(|t| t.name == name)
            .and_then(|t| {
                t.offerings
                    .iter()
                    .filter(|o| o.capacity_type == CapacityType::OnDemand)
                    .map(|o| o.price)
                    .reduce(f64::min)
            })
            .expect("an on-demand price")
    };
    let node_price = price_of(&first);
    let overlay_name = format!("{}-cheaper", s.name);
    let overlay = |price: f64| {
        json!({
            "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": overlay_name, "labels": {SCENE_LABEL: s.name}},
            "spec": {"price": format!("{price:.5}"), "requirements": [
                {"key": labels::NODEPOOL, "operator": "In", "values": [s.name]},
                {"key": labels::INSTANCE_TYPE, "operator": "In", "values": [other]},
            ]},
        })
    };
    // 10 % cheaper: the only node of the pool, so 100 % of its disruption for 10 % of its cost.
    create(&nodeoverlays(&s.client), overlay(node_price * 0.9)).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(s.sim.instances().len(), 1, "the low-value move is refused");
    assert_eq!(s.claims().await.len(), 1);
    // 70 % cheaper: worth it.
    let mut cheaper = nodeoverlays(&s.client)
        .get(&overlay_name)
        .await
        .expect("overlay");
    cheaper.data["spec"]["price"] = json!(format!("{:.5}", node_price * 0.3));
    nodeoverlays(&s.client)
        .replace(&overlay_name, &PostParams::default(), &cheaper)
        .await
        .expect("update the overlay");
    wait_for("the high-value replacement to launch", WAIT, || async {
        s.sim
            .instances()
            .iter()
            .any(|i| i.launched.instance_type == other)
            .then_some(())
    })
    .await;
    // The replaced node goes (its bare pod is evicted with it, so nothing is left to run).
    wait_for("the replaced node to go", WAIT, || async {
        s.sim
            .instances()
            .iter()
            .any(|i| i.launched.instance_type == first && i.state == InstanceState::Gone)
            .then_some(())
    })
    .await;
    let _ = nodeoverlays(&s.client)
        .delete(&overlay_name, &DeleteParams::default())
        .await;
    s.finish().await;
}

/// `MIN_VALUES_POLICY=BestEffort` end to end: a requirement asking more distinct instance
/// types than the pool's families have still gets a node, with fewer types, and the NodeClaim
/// says so (`karpenter.sh/nodeclaim-min-values-relaxed`).
#[tokio::test(flavor = "multi_thread")]
async fn min_values_best_effort_launches_with_what_there_is_and_says_so() {
    use jointer_controller::core::scheduling::MinValuesPolicy;
    let _turn = crate::testenv::TURN.lock().await;
    let s = Scene::start(
        "ip-minvalues",
        json!({"template": {"spec": {"requirements": [
            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5", "c5", "r5"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            // More distinct types than the three families offer.
            {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": 50},
        ]}}}),
        |settings| settings.min_values_policy = MinValuesPolicy::BestEffort,
    )
    .await;
    s.pod("web", "500m", json!({})).await;
    s.running("web").await;
    let claim = s.claims().await.remove(0);
    assert_eq!(
        claim
            .annotations()
            .get("karpenter.sh/nodeclaim-min-values-relaxed")
            .map(String::as_str),
        Some("true")
    );
    s.finish().await;
}
