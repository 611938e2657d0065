//! Every AMI family end to end on moto: one EC2NodeClass per family (AL2023 and Bottlerocket by
//! alias, AL2 by the user's own SSM parameter, Windows 2022 by alias, Custom by image id with
//! the user's own bootstrap), a tainted pool per class, one pod per pool. The controller
//! process writes each family's user data; the node-join simulator boots each the way that
//! family's AMI would, and each node joins with its pool's labels and taints. Then the
//! Bottlerocket alias's SSM parameter moves to a new image: only the Bottlerocket node drifts.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use super::provisioning::{
    all_running, condition, deployment, dynamic, world_claims, Scene, WORLD_LABEL,
};
use crate::support::testenv::{self, gap, wait_for};
use crate::support::world::{Setup, KEY};

const FAMILIES: [&str; 5] = ["al2023", "bottlerocket", "al2", "windows", "custom"];

/// `spec` lines of each family's class beyond the selectors every class shares.
fn class_specs(s: &Setup, al2_parameter: &str, custom_image: &str, node_config: &str) -> String {
    let c = &s.cluster;
    let mut out = String::new();
    let indented = |text: &str| {
        text.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    for family in FAMILIES {
        let specific = match family {
            "al2023" => "  amiSelectorTerms: [ { alias: al2023@latest } ]\n".to_string(),
            "bottlerocket" => format!(
                "  amiSelectorTerms: [ {{ alias: bottlerocket@latest }} ]\n  userData: |\n{}",
                indented("[settings.host-containers.admin]\nenabled = true")
            ),
            "al2" => format!(
                "  amiFamily: AL2\n  amiSelectorTerms: [ {{ ssmParameter: {al2_parameter} }} ]\n  userData: |\n{}",
                indented("#!/bin/bash\necho before-bootstrap")
            ),
            "windows" => "  amiSelectorTerms: [ { alias: windows2022@latest } ]\n".to_string(),
            _ => format!(
                "  amiFamily: Custom\n  amiSelectorTerms: [ {{ id: {custom_image} }} ]\n  userData: |\n{}",
                indented(node_config)
            ),
        };
        out.push_str(&format!(
            "---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{ name: {c}-{family} }}
spec:
  role: {role}
  subnetSelectorTerms: [ {{ tags: {{ {KEY}: {c} }} }} ]
  securityGroupSelectorTerms: [ {{ tags: {{ {KEY}: {c} }} }} ]
{specific}",
            role = s.node_role(),
        ));
    }
    out
}

fn pools(c: &str) -> String {
    FAMILIES
        .iter()
        .map(|family| {
            format!(
                "---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{ name: {c}-{family} }}
spec:
  template:
    metadata:
      labels: {{ {WORLD_LABEL}: {c}, family: {family} }}
    spec:
      nodeClassRef: {{ group: karpenter.k8s.aws, kind: EC2NodeClass, name: {c}-{family} }}
      taints: [ {{ key: family, value: {family}, effect: NoSchedule }} ]
      requirements:
        - {{ key: karpenter.sh/capacity-type, operator: In, values: [on-demand] }}
        - {{ key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge] }}
"
            )
        })
        .collect()
}

/// The NodeConfig a Custom-AMI user writes themselves: the same cluster facts nodeadm needs.
async fn users_node_config(s: &Setup) -> String {
    let cluster = s
        .eks
        .describe_cluster()
        .name(&s.cluster)
        .send()
        .await
        .expect("DescribeCluster")
        .cluster
        .expect("cluster");
    let cidr = cluster
        .kubernetes_network_config()
        .and_then(|n| n.service_ipv4_cidr())
        .unwrap_or("10.100.0.0/16")
        .to_string();
    format!(
        "apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: {}
    apiServerEndpoint: {}
    certificateAuthority: {}
    cidr: {cidr}",
        s.cluster,
        cluster.endpoint().expect("endpoint"),
        cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .expect("CA"),
    )
}

async fn parameter(ssm: &aws_sdk_ssm::Client, name: &str) -> String {
    ssm.get_parameter()
        .name(name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetParameter {name}: {e:?}"))
        .parameter()
        .and_then(|p| p.value())
        .expect("a value")
        .to_string()
}

/// The world's nodes, by their `family` label.
async fn nodes_by_family(admin: &kube::Client, c: &str) -> BTreeMap<String, Node> {
    Api::<Node>::all(admin.clone())
        .list(&ListParams::default().labels(&format!("{WORLD_LABEL}={c}")))
        .await
        .expect("nodes")
        .items
        .into_iter()
        .filter_map(|n| Some((n.labels().get("family")?.clone(), n)))
        .collect()
}

/// The world's NodeClaim names, by pool.
async fn claims_by_pool(admin: &kube::Client, c: &str) -> BTreeMap<String, String> {
    world_claims(admin, c)
        .await
        .into_iter()
        .filter_map(|claim| {
            let pool = claim.labels().get("karpenter.sh/nodepool")?.clone();
            Some((pool, claim.name_any()))
        })
        .collect()
}

fn instance_id(node: &Node) -> String {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|p| p.rsplit('/').next())
        .expect("providerID")
        .to_string()
}

async fn user_data(s: &Setup, instance: &str) -> String {
    let out = s
        .ec2
        .describe_instance_attribute()
        .instance_id(instance)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .expect("DescribeInstanceAttribute");
    let raw = out.user_data().and_then(|u| u.value()).expect("user data");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .expect("base64");
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn image_of(s: &Setup, instance: &str) -> (String, String) {
    let out = s
        .ec2
        .describe_instances()
        .instance_ids(instance)
        .send()
        .await
        .expect("DescribeInstances");
    let image = out.reservations()[0].instances()[0]
        .image_id()
        .expect("image")
        .to_string();
    let images = s
        .ec2
        .describe_images()
        .image_ids(&image)
        .send()
        .await
        .expect("DescribeImages");
    let name = images
        .images()
        .first()
        .and_then(|i| i.name())
        .unwrap_or_default()
        .to_string();
    (image, name)
}

/// The node role's access admits Windows nodes: an `EC2_WINDOWS` entry, or the
/// `eks:kube-proxy-windows` group in aws-auth, whichever the cluster uses.
async fn windows_nodes_may_join(s: &Setup, admin: &kube::Client) {
    let entry = s
        .eks
        .describe_access_entry()
        .cluster_name(&s.cluster)
        .principal_arn(s.account_arn(&format!("role/{}", s.node_role())))
        .send()
        .await;
    match entry {
        Ok(out) => assert_eq!(
            out.access_entry().and_then(|e| e.r#type()),
            Some("EC2_WINDOWS")
        ),
        Err(_) => {
            let cm: Api<k8s_openapi::api::core::v1::ConfigMap> =
                Api::namespaced(admin.clone(), "kube-system");
            let map = cm.get("aws-auth").await.expect("aws-auth");
            let roles = map
                .data
                .and_then(|d| d.get("mapRoles").cloned())
                .unwrap_or_default();
            assert!(roles.contains("eks:kube-proxy-windows"), "{roles}");
        }
    }
}

/// Every policy document attached to the controller role, concatenated.
async fn controller_policies(s: &Setup) -> String {
    let attached = s
        .iam
        .list_attached_role_policies()
        .role_name(s.controller_role())
        .send()
        .await
        .expect("attached policies");
    let mut out = String::new();
    for p in attached.attached_policies() {
        let arn = p.policy_arn().expect("arn");
        let policy = s
            .iam
            .get_policy()
            .policy_arn(arn)
            .send()
            .await
            .expect("policy");
        let version = policy
            .policy()
            .and_then(|p| p.default_version_id())
            .expect("default version");
        let doc = s
            .iam
            .get_policy_version()
            .policy_arn(arn)
            .version_id(version)
            .send()
            .await
            .expect("policy version");
        let text = doc
            .policy_version()
            .and_then(|v| v.document())
            .unwrap_or_default();
        out.push_str(&percent_encoding::percent_decode_str(text).decode_utf8_lossy());
    }
    out
}

#[tokio::test]
async fn every_ami_family_joins_with_its_pools_labels_and_taints_and_only_its_own_alias_drifts() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-families", "templates: { dir: nodes }").await;
    let c = s.cluster.clone();
    let ssm = aws_sdk_ssm::Client::new(&testenv::aws().await);
    let kubernetes = s
        .eks
        .describe_cluster()
        .name(&c)
        .send()
        .await
        .expect("DescribeCluster")
        .cluster
        .and_then(|c| c.version)
        .expect("version");

    // AL2 by the user's own parameter (EKS publishes no AL2 images for this version), naming
    // an x86 image; Custom by the id of the AL2023 image, booted by the user's own NodeConfig.
    let al2023_image = parameter(
        &ssm,
        &format!("/aws/service/eks/optimized-ami/{kubernetes}/amazon-linux-2023/x86_64/standard/recommended/image_id"),
    )
    .await;
    let al2_parameter = format!("/jointer-test/{c}/al2-image");
    ssm.put_parameter()
        .name(&al2_parameter)
        .value(&al2023_image)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .overwrite(true)
        .send()
        .await
        .expect("PutParameter");
    let node_config = users_node_config(&s).await;
    s.ws.write(
        "nodes/classes.yaml",
        &class_specs(&s, &al2_parameter, &al2023_image, &node_config),
    );
    s.ws.write("nodes/pools.yaml", &pools(&c));
    s.apply();
    let admin = testenv::kube().await;
    windows_nodes_may_join(&s, &admin).await;
    assert!(
        controller_policies(&s).await.contains(&al2_parameter),
        "the controller may read the class's own SSM parameter"
    );
    let scene = Scene::start(&s, &admin, 28330).await;
    // A class whose user data Bottlerocket cannot read (jointer's own templates refuse it, so
    // it comes as kubectl would bring it): refused on the class, never launched from.
    let classes = dynamic(
        &admin,
        "karpenter.k8s.aws",
        "EC2NodeClass",
        "ec2nodeclasses",
    );
    let broken: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": format!("{c}-broken")},
        "spec": {"role": s.node_role(), "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
                 "subnetSelectorTerms": [{"tags": {KEY: c}}],
                 "securityGroupSelectorTerms": [{"tags": {KEY: c}}],
                 "userData": "[settings.kubernetes"}
    }))
    .expect("class");
    classes
        .create(&PostParams::default(), &broken)
        .await
        .expect("the broken class");
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &scene.ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &scene.ns);
    for family in FAMILIES {
        let mut selector = json!({WORLD_LABEL: c, "family": family});
        if family == "windows" {
            selector["kubernetes.io/os"] = json!("windows");
        }
        let spec = json!({
            "nodeSelector": selector,
            "tolerations": [{"key": "family", "operator": "Equal", "value": family, "effect": "NoSchedule"}],
        });
        deployments
            .create(
                &PostParams::default(),
                &deployment(family, &c, 1, "500m", spec),
            )
            .await
            .expect("deployment");
    }
    for family in FAMILIES {
        all_running(&pods, &format!("app={family}"), 1).await;
    }

    let nodes = nodes_by_family(&admin, &c).await;
    assert_eq!(
        nodes.keys().map(String::as_str).collect::<Vec<_>>(),
        ["al2", "al2023", "bottlerocket", "custom", "windows"]
    );
    for (family, node) in &nodes {
        let labels = node.labels();
        assert_eq!(
            labels.get("karpenter.sh/nodepool"),
            Some(&format!("{c}-{family}"))
        );
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .any(|t| t.key == "family" && t.value.as_deref() == Some(family.as_str())),
            "{family}: {taints:?}"
        );
        assert!(
            !taints.iter().any(|t| t.key == "karpenter.sh/unregistered"),
            "{family}: registered"
        );
        let os = if family == "windows" {
            "windows"
        } else {
            "linux"
        };
        assert_eq!(
            labels.get("kubernetes.io/os").map(String::as_str),
            Some(os),
            "{family}"
        );
        let pods = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get("pods"))
            .map(|q| q.0.clone());
        if family == "windows" {
            assert_eq!(pods.as_deref(), Some("110"), "Windows is not ENI-limited");
            assert_eq!(
                labels
                    .get("node.kubernetes.io/windows-build")
                    .map(String::as_str),
                Some("10.0.20348")
            );
        } else {
            assert_ne!(pods.as_deref(), Some("110"), "{family} is ENI-limited");
        }
    }

    // What each instance booted: its family's image and its family's user data.
    let mut booted = BTreeMap::new();
    for (family, node) in &nodes {
        let id = instance_id(node);
        let (image, name) = image_of(&s, &id).await;
        booted.insert(family.clone(), (image, name, user_data(&s, &id).await));
    }
    let (br_image, br_name, br_data) = &booted["bottlerocket"];
    assert!(br_name.contains("bottlerocket"), "{br_name}");
    assert!(
        br_data.contains("[settings.host-containers.admin]"),
        "{br_data}"
    );
    assert!(
        br_data.contains(&format!("cluster-name = \"{c}\"")),
        "{br_data}"
    );
    let (_, win_name, win_data) = &booted["windows"];
    assert!(win_name.contains("Windows_Server-2022"), "{win_name}");
    assert!(win_data.starts_with("<powershell>"), "{win_data}");
    let (al2_image, _, al2_data) = &booted["al2"];
    assert_eq!(
        al2_image, &al2023_image,
        "the user's SSM parameter chose it"
    );
    let before = al2_data
        .find("echo before-bootstrap")
        .expect("the user's part");
    let bootstrap = al2_data
        .find("/etc/eks/bootstrap.sh")
        .expect("bootstrap.sh");
    assert!(before < bootstrap, "{al2_data}");
    let (custom_image, _, custom_data) = &booted["custom"];
    assert_eq!(custom_image, &al2023_image);
    assert_eq!(custom_data.trim_end(), node_config.trim_end(), "untouched");

    // The broken class says why, on the class and in an Event.
    let broken = wait_for(
        "the broken class's ValidationSucceeded condition",
        Duration::from_secs(30),
        || async {
            let class = classes.get(&format!("{c}-broken")).await.ok()?;
            let has = class.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "ValidationSucceeded");
            has.then_some(class)
        },
    )
    .await;
    let validation = broken.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "ValidationSucceeded")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(validation["status"], "False", "{broken:?}");
    assert!(
        validation["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("spec.userData: not valid TOML")),
        "{validation}"
    );
    wait_for(
        "a ValidationFailed Event on the broken class",
        Duration::from_secs(30),
        || async {
            let events: Api<Event> = Api::all(admin.clone());
            let list = events.list(&ListParams::default()).await.ok()?.items;
            list.iter()
                .any(|e| {
                    e.reason.as_deref() == Some("ValidationFailed")
                        && e.involved_object.name.as_deref() == Some(&format!("{c}-broken"))
                })
                .then_some(())
        },
    )
    .await;

    // A new Bottlerocket release: the alias's parameter moves. Only that family's node drifts.
    let claims_before = claims_by_pool(&admin, &c).await;
    let moved = format!("/aws/service/bottlerocket/aws-k8s-{kubernetes}/x86_64/latest/image_id");
    let release = parameter(
        &ssm,
        &format!("/aws/service/bottlerocket/aws-k8s-{kubernetes}-nvidia/x86_64/latest/image_id"),
    )
    .await;
    assert_ne!(&release, br_image);
    gap(
        "PUT",
        "/_gap/parameters",
        Some(json!({"name": moved, "value": release})),
    );
    let replaced = wait_for(
        "the Bottlerocket node replaced by one of the new release",
        Duration::from_secs(180),
        || async {
            let claims = world_claims(&admin, &c).await;
            let pool = format!("{c}-bottlerocket");
            let fresh = claims.iter().find(|claim| {
                claim.labels().get("karpenter.sh/nodepool") == Some(&pool)
                    && Some(&claim.name_any()) != claims_before.get(&pool)
                    && condition(claim, "Initialized")
            })?;
            let list = pods
                .list(&ListParams::default().labels("app=bottlerocket"))
                .await
                .ok()?
                .items;
            (claims.len() == FAMILIES.len() && super::provisioning::running(&list) == 1)
                .then(|| fresh.clone())
        },
    )
    .await;
    let id = replaced.data["status"]["providerID"]
        .as_str()
        .and_then(|p| p.rsplit('/').next())
        .expect("providerID")
        .to_string();
    assert_eq!(image_of(&s, &id).await.0, release);
    let claims_after = claims_by_pool(&admin, &c).await;
    for family in FAMILIES.iter().filter(|f| **f != "bottlerocket") {
        let pool = format!("{c}-{family}");
        assert_eq!(
            claims_after.get(&pool),
            claims_before.get(&pool),
            "{family} did not drift"
        );
    }
    gap(
        "PUT",
        "/_gap/parameters",
        Some(json!({"name": moved, "value": null})),
    );
    // The broken class is the test's own, not the templates': teardown leaves it, and the
    // controller would go on keeping an instance profile for it that teardown then finds
    // left over. Deleted first, its finalizer removes that profile.
    let broken = format!("{c}-broken");
    classes
        .delete(&broken, &DeleteParams::default())
        .await
        .expect("delete the broken class");
    wait_for("the broken class gone", Duration::from_secs(60), || async {
        classes.get_opt(&broken).await.ok()?.is_none().then_some(())
    })
    .await;
    scene.end().await;
}
