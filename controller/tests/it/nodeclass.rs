//! The controller process against the test environment: its EC2NodeClass controller resolves
//! a class to Ready, makes a missing discovery tag loud, cleans up on delete; two replicas
//! elect one leader, and the standby takes over when the leader goes. Needs tests/env/up.sh.

use std::process::{Child, Command, Stdio};

use crate::testenv;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{json, Value};

const KEY: &str = "karpenter.sh/discovery";

/// A controller process for `cluster`, electing its leader in `namespace`.
struct Controller {
    child: Child,
    metrics_port: u16,
}

impl Controller {
    fn start(cluster: &str, namespace: &str, identity: &str, port_base: u16) -> Controller {
        testenv::require();
        let log = std::fs::File::create(std::env::temp_dir().join(format!("{identity}.log")))
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_jointer-controller"))
            .arg("run")
            .env("CLUSTER_NAME", cluster)
            .env("AWS_REGION", "us-east-1")
            .env("LEADER_ELECTION_NAMESPACE", namespace)
            .env("POD_NAME", identity)
            .env("METRICS_PORT", port_base.to_string())
            .env("HEALTH_PORT", (port_base + 1).to_string())
            .env("NODECLASS_RESYNC", "2s")
            .env("GC_GRACE", "3s")
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start jointer-controller");
        Controller {
            child,
            metrics_port: port_base,
        }
    }

    /// The value of the `jointer_controller_leader` gauge (None while not serving).
    fn leader_gauge(&self) -> Option<i64> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).ok()?;
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut body = String::new();
        stream.read_to_string(&mut body).ok()?;
        body.lines()
            .find(|l| l.starts_with("jointer_controller_leader "))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nodeclasses(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("karpenter.k8s.aws", "v1", "EC2NodeClass"),
        "ec2nodeclasses",
    );
    Api::all_with(client.clone(), &resource)
}

pub async fn install_crds(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, mut crd) in jointer_controller::crds::all() {
        crd.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("app.kubernetes.io/managed-by".into(), "jointer".into());
        let name = crd.metadata.name.clone().expect("name");
        crds.patch(
            &name,
            &PatchParams::apply("jointer-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("CRD");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Tags the world's private subnets and cluster security group for discovery, and makes the
/// node role, as `jointer apply` would.
async fn prepare_aws(world: &Value) -> (aws_sdk_ec2::Client, aws_sdk_iam::Client, Vec<String>) {
    let config = testenv::aws().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let iam = aws_sdk_iam::Client::new(&config);
    let cluster = world["cluster"]["name"].as_str().expect("cluster");
    let subnets: Vec<String> = world["subnets"]["private"]
        .as_object()
        .expect("subnets")
        .values()
        .map(|v| v.as_str().expect("id").to_string())
        .collect();
    let mut resources = subnets.clone();
    resources.push(
        world["securityGroups"]["cluster"]
            .as_str()
            .expect("sg")
            .to_string(),
    );
    ec2.create_tags()
        .set_resources(Some(resources))
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key(KEY)
                .value(cluster)
                .build(),
        )
        .send()
        .await
        .expect("tags");
    iam.create_role()
        .role_name(format!("KarpenterNodeRole-{cluster}"))
        .assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#)
        .send()
        .await
        .expect("node role");
    (ec2, iam, subnets)
}

fn class(name: &str, cluster: &str) -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": format!("KarpenterNodeRole-{cluster}"),
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {KEY: cluster}}],
            "securityGroupSelectorTerms": [{"tags": {KEY: cluster}}],
        }
    })
}

fn condition(class: &DynamicObject, kind: &str) -> Option<(String, String)> {
    class.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
}

async fn wait_condition(
    api: &Api<DynamicObject>,
    name: &str,
    kind: &str,
    status: &str,
) -> DynamicObject {
    testenv::wait_for(
        &format!("EC2NodeClass {name} {kind}={status}"),
        Duration::from_secs(60),
        || async {
            let c = api.get(name).await.ok()?;
            (condition(&c, kind)?.0 == status).then_some(c)
        },
    )
    .await
}

async fn namespace(client: &kube::Client, name: &str) {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    api.create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

/// A world of its own, the CRDs, and a namespace for this test's leader Lease.
async fn setup(prefix: &str) -> (Value, String, kube::Client, String) {
    let world = testenv::new_world(prefix);
    let cluster = world["cluster"]["name"]
        .as_str()
        .expect("cluster")
        .to_string();
    let client = testenv::kube().await;
    install_crds(&client).await;
    let lease_ns = testenv::unique("lease");
    namespace(&client, &lease_ns).await;
    (world, cluster, client, lease_ns)
}

#[tokio::test]
async fn a_node_class_resolves_to_ready_a_missing_tag_is_loud_and_delete_cleans_up() {
    let _turn = crate::testenv::TURN.lock().await;
    let (world, cluster, client, lease_ns) = setup("ctl-class").await;
    let (ec2, iam, subnets) = prepare_aws(&world).await;
    let _controller = Controller::start(&cluster, &lease_ns, &testenv::unique("ctl"), 28180);

    let api = nodeclasses(&client);
    let name = testenv::unique("class");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(class(&name, &cluster)).expect("class"),
    )
    .await
    .expect("class created");
    let ready = wait_condition(&api, &name, "Ready", "True").await;
    let status = &ready.data["status"];
    let mut resolved: Vec<String> = status["subnets"]
        .as_array()
        .expect("subnets")
        .iter()
        .map(|s| s["id"].as_str().unwrap_or("").to_string())
        .collect();
    resolved.sort();
    let mut expected = subnets.clone();
    expected.sort();
    assert_eq!(resolved, expected, "exactly the tagged subnets");
    assert_eq!(
        status["securityGroups"][0]["id"],
        world["securityGroups"]["cluster"]
    );
    // One image per architecture and accelerator variant EKS publishes (no arm64 Neuron).
    let images: Vec<(&str, &str, &str)> = status["amis"]
        .as_array()
        .expect("amis")
        .iter()
        .filter_map(|a| {
            let r = &a["requirements"];
            Some((
                r[0]["values"][0].as_str()?,
                r[1]["key"].as_str()?,
                r[1]["operator"].as_str()?,
            ))
        })
        .collect();
    let accelerators = "karpenter.k8s.aws/instance-accelerator-count";
    let gpus = "karpenter.k8s.aws/instance-gpu-count";
    assert_eq!(
        images,
        [
            ("amd64", accelerators, "DoesNotExist"),
            ("amd64", gpus, "Exists"),
            ("amd64", accelerators, "Exists"),
            ("arm64", accelerators, "DoesNotExist"),
            ("arm64", gpus, "Exists"),
        ]
    );
    let profile = status["instanceProfile"]
        .as_str()
        .expect("profile")
        .to_string();
    let got = iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .expect("profile exists");
    let p = got.instance_profile().expect("profile");
    assert_eq!(
        p.path(),
        format!(
            "/karpenter/us-east-1/{cluster}/{}/",
            ready.metadata.uid.clone().unwrap_or_default()
        )
    );
    assert_eq!(
        p.roles()[0].role_name(),
        format!("KarpenterNodeRole-{cluster}")
    );
    assert!(ready
        .metadata
        .finalizers
        .clone()
        .unwrap_or_default()
        .contains(&"karpenter.k8s.aws/termination".to_string()));

    // The seed's silent Pending: the discovery tag goes, and the class says which selector.
    ec2.delete_tags()
        .set_resources(Some(subnets.clone()))
        .tags(aws_sdk_ec2::types::Tag::builder().key(KEY).build())
        .send()
        .await
        .expect("untag");
    let broken = wait_condition(&api, &name, "SubnetsReady", "False").await;
    assert_eq!(
        condition(&broken, "SubnetsReady").map(|c| c.1),
        Some(format!("no subnet matches tag {KEY}={cluster}"))
    );
    assert_eq!(
        condition(&broken, "Ready").map(|c| c.0).as_deref(),
        Some("False")
    );
    ec2.create_tags()
        .set_resources(Some(subnets))
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key(KEY)
                .value(&cluster)
                .build(),
        )
        .send()
        .await
        .expect("tag again");
    wait_condition(&api, &name, "Ready", "True").await;

    // Delete: the finalizer removes the profile the controller made, then lets the class go.
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    testenv::wait_for("the class to be gone", Duration::from_secs(30), || async {
        api.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(iam
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await
        .is_err());
}

#[tokio::test]
async fn two_replicas_elect_one_leader_and_the_standby_takes_over() {
    let _turn = crate::testenv::TURN.lock().await;
    let (_, cluster, client, lease_ns) = setup("ctl-leader").await;
    let first = Controller::start(&cluster, &lease_ns, "replica-a", 28190);
    testenv::wait_for("replica-a to lead", Duration::from_secs(30), || async {
        (first.leader_gauge() == Some(1)).then_some(())
    })
    .await;
    let second = Controller::start(&cluster, &lease_ns, "replica-b", 28192);
    testenv::wait_for(
        "replica-b to serve metrics",
        Duration::from_secs(30),
        || async { second.leader_gauge().map(|_| ()) },
    )
    .await;
    // While the first holds the Lease the second waits.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(second.leader_gauge(), Some(0));
    assert_eq!(first.leader_gauge(), Some(1));
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &lease_ns);
    let holder =
        |l: k8s_openapi::api::coordination::v1::Lease| l.spec.and_then(|s| s.holder_identity);
    assert_eq!(
        holder(
            leases
                .get("jointer-controller-leader")
                .await
                .expect("lease")
        )
        .as_deref(),
        Some("replica-a")
    );

    // The leader dies without releasing: the standby takes over once the Lease expires.
    drop(first);
    testenv::wait_for(
        "replica-b to take over",
        Duration::from_secs(40),
        || async { (second.leader_gauge() == Some(1)).then_some(()) },
    )
    .await;
    assert_eq!(
        holder(
            leases
                .get("jointer-controller-leader")
                .await
                .expect("lease")
        )
        .as_deref(),
        Some("replica-b")
    );
}

#[tokio::test]
async fn orphan_instances_are_terminated_and_nodeclaims_without_instances_deleted() {
    let _turn = crate::testenv::TURN.lock().await;
    let (world, cluster, client, lease_ns) = setup("ctl-gc").await;
    let config = testenv::aws().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let subnet = world["subnets"]["private"]["a"]
        .as_str()
        .or_else(|| {
            world["subnets"]["private"]
                .as_object()?
                .values()
                .next()?
                .as_str()
        })
        .expect("subnet")
        .to_string();
    let launch = |tags: Vec<(String, String)>| {
        let ec2 = ec2.clone();
        let subnet = subnet.clone();
        async move {
            let mut spec = aws_sdk_ec2::types::TagSpecification::builder()
                .resource_type(aws_sdk_ec2::types::ResourceType::Instance);
            for (k, v) in tags {
                spec = spec.tags(aws_sdk_ec2::types::Tag::builder().key(k).value(v).build());
            }
            ec2.run_instances()
                .image_id("ami-12c6146b")
                .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
                .min_count(1)
                .max_count(1)
                .subnet_id(subnet)
                .tag_specifications(spec.build())
                .send()
                .await
                .expect("instance")
                .instances()[0]
                .instance_id()
                .expect("id")
                .to_string()
        }
    };
    let owned = format!("kubernetes.io/cluster/{cluster}");
    // What a controller that crashed right after CreateFleet leaves: an instance for a pool
    // that no NodeClaim records.
    let orphan = launch(vec![
        (owned.clone(), "owned".into()),
        ("karpenter.sh/nodepool".into(), "default".into()),
    ])
    .await;
    // The cluster's own, not launched for a NodePool: never the collector's.
    let other = launch(vec![(owned.clone(), "owned".into())]).await;

    // A NodeClaim whose instance no longer exists.
    let claims: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim"),
            "nodeclaims",
        ),
    );
    let claim = testenv::unique("claim");
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": claim},
                "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
            }))
            .expect("claim"),
        )
        .await
        .expect("NodeClaim created");
    claims
        .patch_status(
            &claim,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"providerID": "aws:///us-east-1a/i-0000000000000dead"}}),
            ),
        )
        .await
        .expect("status");

    let _controller = Controller::start(&cluster, &lease_ns, &testenv::unique("ctl"), 28194);
    let state = |id: String| {
        let ec2 = ec2.clone();
        async move {
            ec2.describe_instances()
                .instance_ids(id)
                .send()
                .await
                .ok()?
                .reservations()
                .first()?
                .instances()
                .first()?
                .state()?
                .name()
                .map(|n| n.as_str().to_string())
        }
    };
    testenv::wait_for(
        "the orphan to be terminated",
        Duration::from_secs(60),
        || {
            let state = state(orphan.clone());
            async move { (state.await.as_deref() == Some("terminated")).then_some(()) }
        },
    )
    .await;
    testenv::wait_for(
        "the NodeClaim without instance to go",
        Duration::from_secs(60),
        || async { claims.get_opt(&claim).await.ok()?.is_none().then_some(()) },
    )
    .await;
    assert_eq!(state(other).await.as_deref(), Some("running"));
}
