//! Proof that the test environment is real: the generated CRDs install on a real API server
//! that enforces their CEL rules, kube-scheduler and kwok schedule and run pods, and moto
//! answers the product's AWS clients. Needs `tests/env/up.sh` (tests/run.sh runs it).

use std::time::Duration;

use crate::support::testenv::{self, unique, wait_for};
use jointer_controller::api::{EC2NodeClass, NodePool, Validate};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

async fn install_crds(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, mut crd) in jointer_controller::crds::all() {
        let name = crd.metadata.name.clone().expect("CRD name");
        // Labelled as `jointer apply` labels them: the CRDs on this API server are jointer's,
        // whichever test put them there.
        crd.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("app.kubernetes.io/managed-by".into(), "jointer".into());
        crds.patch(
            &name,
            &PatchParams::apply("jointer-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("the API server refused CRD {name}: {e}"));
        wait_for(
            &format!("CRD {name} to be established"),
            Duration::from_secs(30),
            || {
                let crds = crds.clone();
                let name = name.clone();
                async move {
                    let crd = crds.get(&name).await.ok()?;
                    let established = crd
                        .status?
                        .conditions?
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True");
                    established.then_some(())
                }
            },
        )
        .await;
    }
}

const CLASS: &str = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: { name: NAME }\nspec:\n  role: KarpenterNodeRole-demo\n  amiSelectorTerms: [ { alias: al2023@latest } ]\n  subnetSelectorTerms: [ { tags: { karpenter.sh/discovery: demo } } ]\n  securityGroupSelectorTerms: [ { tags: { karpenter.sh/discovery: demo } } ]\n";
const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: { name: NAME }\nspec:\n  template:\n    spec:\n      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }\n      requirements:\n        - { key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand] }\n  limits: { cpu: 1000 }\n";

fn message_of(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message,
        other => other.to_string(),
    }
}

#[tokio::test]
async fn crds_install_and_the_api_server_enforces_the_same_rules_as_offline_validation() {
    let _turn = testenv::TURN.lock().await;
    let client = testenv::kube().await;
    install_crds(&client).await;
    let pools: Api<NodePool> = Api::all(client.clone());
    let classes: Api<EC2NodeClass> = Api::all(client.clone());

    // Valid objects are accepted, with upstream defaults filled in by the schema.
    let name = unique("valid");
    let class: EC2NodeClass = serde_yaml::from_str(&CLASS.replace("NAME", &name)).expect("class");
    let created = classes
        .create(&PostParams::default(), &class)
        .await
        .expect("valid EC2NodeClass accepted");
    assert_eq!(created.spec.metadata_options.http_put_response_hop_limit, 1);
    let pool: NodePool = serde_yaml::from_str(&POOL.replace("NAME", &name)).expect("pool");
    let created = pools
        .create(&PostParams::default(), &pool)
        .await
        .expect("valid NodePool accepted");
    assert_eq!(created.spec.template.spec.expire_after.to_string(), "720h");
    assert_eq!(created.spec.disruption.budgets[0].nodes, "10%");

    let pool_cases = [
        ("- { key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand] }", "- { key: a, operator: In }", "must have a value defined"),
        ("- { key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand] }", "- { key: a, operator: Gt, values: ['1', '2'] }", "single non-negative integer"),
        ("- { key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand] }", "- { key: a, operator: In, values: [x], minValues: 2 }", "minValues"),
        ("- { key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand] }", "- { key: karpenter.sh/nodepool, operator: Exists }", "restricted"),
        ("  limits: { cpu: 1000 }\n", "  limits: { cpu: 1000 }\n  disruption: { budgets: [ { nodes: '1', schedule: '@daily' } ] }\n", "'schedule' must be set with 'duration'"),
    ];
    for (from, to, expected) in pool_cases {
        let yaml = POOL.replace("NAME", &unique("bad")).replace(from, to);
        let pool: NodePool = serde_yaml::from_str(&yaml).expect("fixture parses");
        let offline = pool.validate();
        assert!(
            offline.iter().any(|e| e.message.contains(expected)),
            "offline validation missed {expected:?}: {offline:?}"
        );
        let err = pools
            .create(&PostParams::default(), &pool)
            .await
            .expect_err("the API server must refuse it");
        let message = message_of(err);
        assert!(
            message.contains(expected),
            "API server said {message:?}, expected {expected:?}"
        );
    }

    let class_cases = [
        (
            "  role: KarpenterNodeRole-demo\n",
            "  role: KarpenterNodeRole-demo\n  instanceProfile: p\n",
            "exactly one of ['role', 'instanceProfile']",
        ),
        ("al2023@latest", "al2023", "family@version"),
        (
            "  role: KarpenterNodeRole-demo\n",
            "  role: KarpenterNodeRole-demo\n  tags: { kubernetes.io/cluster/demo: owned }\n",
            "reserved",
        ),
    ];
    for (from, to, expected) in class_cases {
        let yaml = CLASS.replace("NAME", &unique("bad")).replace(from, to);
        let class: EC2NodeClass = serde_yaml::from_str(&yaml).expect("fixture parses");
        assert!(
            class
                .validate()
                .iter()
                .any(|e| e.message.contains(expected)),
            "offline validation missed {expected:?}"
        );
        let err = classes
            .create(&PostParams::default(), &class)
            .await
            .expect_err("the API server must refuse it");
        let message = message_of(err);
        assert!(
            message.contains(expected),
            "API server said {message:?}, expected {expected:?}"
        );
    }

    pools
        .delete(&name, &DeleteParams::default())
        .await
        .expect("cleanup");
    classes
        .delete(&name, &DeleteParams::default())
        .await
        .expect("cleanup");
}

#[tokio::test]
async fn a_pending_deployment_runs_once_a_fitting_node_joins() {
    let _turn = testenv::TURN.lock().await;
    let client = testenv::kube().await;
    let ns = unique("sched");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": ns } }))
            .expect("namespace");
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace created");

    // Two pods of 6 CPU cannot fit the 4-CPU system node.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "big" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "big" } },
            "template": {
                "metadata": { "labels": { "app": "big" } },
                "spec": {
                    "tolerations": [{ "key": "kwok.x-k8s.io/node", "operator": "Exists" }],
                    "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "6", "memory": "1Gi" } } }]
                }
            }
        }
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("deployment created");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "both pods to be marked Unschedulable",
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default()).await.ok()?;
                let unschedulable = list.items.iter().filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| {
                                c.type_ == "PodScheduled"
                                    && c.reason.as_deref() == Some("Unschedulable")
                            })
                        })
                });
                (unschedulable.count() == 2).then_some(())
            }
        },
    )
    .await;

    // A kwok-managed node of the right size joins, becomes Ready, and the pods run on it.
    let node_name = unique("big-node");
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": { "name": node_name, "annotations": { "kwok.x-k8s.io/node": "fake" }, "labels": { "kubernetes.io/hostname": node_name, "type": "kwok" } },
        "spec": { "taints": [] },
        "status": { "allocatable": { "cpu": "16", "memory": "64Gi", "pods": "110" }, "capacity": { "cpu": "16", "memory": "64Gi", "pods": "110" } }
    }))
    .expect("node");
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("node created");
    wait_for(
        "both pods Running on the new node",
        Duration::from_secs(90),
        || {
            let pods = pods.clone();
            let node_name = node_name.clone();
            async move {
                let list = pods.list(&ListParams::default()).await.ok()?;
                let running = list.items.iter().filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str())
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                });
                (running.count() == 2).then_some(())
            }
        },
    )
    .await;

    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("cleanup namespace");
    nodes
        .delete(&node_name, &DeleteParams::default())
        .await
        .expect("cleanup node");
}

#[tokio::test]
async fn an_iam_role_and_instance_profile_round_trip() {
    let _turn = testenv::TURN.lock().await;
    let config = testenv::aws().await;
    let iam = aws_sdk_iam::Client::new(&config);
    let role = unique("KarpenterNodeRole");
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    let tag = aws_sdk_iam::types::Tag::builder()
        .key("jointer.dev/managed-by")
        .value("jointer")
        .build()
        .expect("tag");
    iam.create_role()
        .role_name(&role)
        .assume_role_policy_document(trust)
        .tags(tag)
        .send()
        .await
        .expect("role created");
    iam.create_instance_profile()
        .instance_profile_name(&role)
        .send()
        .await
        .expect("profile created");
    iam.add_role_to_instance_profile()
        .instance_profile_name(&role)
        .role_name(&role)
        .send()
        .await
        .expect("role added");
    let profile = iam
        .get_instance_profile()
        .instance_profile_name(&role)
        .send()
        .await
        .expect("profile read");
    let roles: Vec<String> = profile
        .instance_profile()
        .map(|p| {
            p.roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(roles, std::slice::from_ref(&role));
    let tags = iam
        .list_role_tags()
        .role_name(&role)
        .send()
        .await
        .expect("tags read");
    assert!(tags
        .tags()
        .iter()
        .any(|t| t.key() == "jointer.dev/managed-by" && t.value() == "jointer"));
    iam.remove_role_from_instance_profile()
        .instance_profile_name(&role)
        .role_name(&role)
        .send()
        .await
        .expect("cleanup");
    iam.delete_instance_profile()
        .instance_profile_name(&role)
        .send()
        .await
        .expect("cleanup");
    iam.delete_role()
        .role_name(&role)
        .send()
        .await
        .expect("cleanup");
}

#[tokio::test]
async fn a_spot_interruption_warning_reaches_the_queue_through_its_rule() {
    let _turn = testenv::TURN.lock().await;
    let config = testenv::aws().await;
    let sqs = aws_sdk_sqs::Client::new(&config);
    let events = aws_sdk_eventbridge::Client::new(&config);
    let name = unique("interruption");
    let queue_url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .expect("queue")
        .queue_url()
        .map(str::to_string)
        .expect("queue url");
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("attributes");
    let queue_arn = attributes
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .cloned()
        .expect("queue arn");
    let pattern =
        r#"{"source":["aws.ec2"],"detail-type":["EC2 Spot Instance Interruption Warning"]}"#;
    events
        .put_rule()
        .name(&name)
        .event_pattern(pattern)
        .send()
        .await
        .expect("rule");
    let target = aws_sdk_eventbridge::types::Target::builder()
        .id("queue")
        .arn(&queue_arn)
        .build()
        .expect("target");
    events
        .put_targets()
        .rule(&name)
        .targets(target)
        .send()
        .await
        .expect("target added");
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .source("aws.ec2")
        .detail_type("EC2 Spot Instance Interruption Warning")
        .detail(r#"{"instance-id":"i-0123456789abcdef0","instance-action":"terminate"}"#)
        .build();
    events
        .put_events()
        .entries(entry)
        .send()
        .await
        .expect("event put");
    let received = sqs
        .receive_message()
        .queue_url(&queue_url)
        .wait_time_seconds(5)
        .send()
        .await
        .expect("receive");
    let body = received
        .messages()
        .first()
        .and_then(|m| m.body())
        .unwrap_or_default()
        .to_string();
    assert!(
        body.contains("i-0123456789abcdef0") && body.contains("Spot Instance Interruption Warning"),
        "{body}"
    );
    events
        .remove_targets()
        .rule(&name)
        .ids("queue")
        .send()
        .await
        .expect("cleanup");
    events
        .delete_rule()
        .name(&name)
        .send()
        .await
        .expect("cleanup");
    sqs.delete_queue()
        .queue_url(&queue_url)
        .send()
        .await
        .expect("cleanup");
}
