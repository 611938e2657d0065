//! The controller role's policies, checked for real: the controllers in the suite run with the
//! role's own credentials (through EKS Pod Identity, which the gap layer plays) and every AWS
//! call they make is evaluated against the policies `jointer apply` attached, conditions and
//! all (tests/env/gap/roles.py and iam.py). `Scene::end` asserts that nothing was refused;
//! here a call the policies must refuse is made to happen.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use super::provisioning::{
    all_running, class_ready, deployment, instance_id, nodeclaims, world_claims, write_templates,
    Scene,
};
use crate::support::testenv::{self, wait_for};
use crate::support::world::Setup;

/// Karpenter's policy lets the controller terminate only instances tagged as this cluster's
/// (`kubernetes.io/cluster/<name>: owned`). With that tag removed from a node's instance, the
/// NodeClaim's termination is refused by IAM, the controller says so and keeps the NodeClaim
/// (and its finalizer) rather than forgetting an instance it could not stop; once the tag is
/// back, termination goes through.
#[tokio::test]
async fn terminating_an_instance_without_the_cluster_tag_is_refused_and_reported() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("iam-refuse", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let mut scene = Scene::start(&s, &admin, 28400).await;
    scene.expect_refusals_of("ec2:TerminateInstances");
    class_ready(&admin, &s.cluster).await;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &scene.ns);
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, 1, "1", json!({})),
        )
        .await
        .expect("web");
    all_running(
        &Api::<Pod>::namespaced(admin.clone(), &scene.ns),
        "app=web",
        1,
    )
    .await;
    assert!(
        testenv::iam_refusals(&s.cluster).is_empty(),
        "launching needed nothing the policies refuse: {:#?}",
        testenv::iam_refusals(&s.cluster)
    );

    let claim = world_claims(&admin, &s.cluster).await.remove(0);
    let id = instance_id(&claim);
    let cluster_tag = jointer_controller::api::labels::cluster_tag(&s.cluster);
    s.ec2
        .delete_tags()
        .resources(&id)
        .tags(aws_sdk_ec2::types::Tag::builder().key(&cluster_tag).build())
        .send()
        .await
        .expect("untag");
    nodeclaims(&admin)
        .delete(&claim.name_any(), &DeleteParams::default())
        .await
        .expect("delete the NodeClaim");

    let refusal = wait_for(
        "IAM refusing the termination",
        Duration::from_secs(120),
        || {
            let cluster = s.cluster.clone();
            async move { testenv::iam_refusals(&cluster).into_iter().next() }
        },
    )
    .await;
    assert_eq!(refusal["action"], "ec2:TerminateInstances", "{refusal:#}");
    assert_eq!(
        refusal["resource"],
        format!("arn:aws:ec2:us-east-1:123456789012:instance/{id}"),
        "{refusal:#}"
    );
    assert!(
        refusal["principal"]
            .as_str()
            .is_some_and(|p| p.contains(&format!("assumed-role/{}/", s.controller_role()))),
        "the call was made as the controller role: {refusal:#}"
    );
    // Reported where an operator looks, naming the refusal, and nothing is let go.
    wait_for(
        "the controller reporting the refusal",
        Duration::from_secs(30),
        || async {
            scene
                .controller
                .logs()
                .lines()
                .any(|l| l.contains("UnauthorizedOperation") && l.contains(&claim.name_any()))
                .then_some(())
        },
    )
    .await;
    assert!(
        nodeclaims(&admin)
            .get_opt(&claim.name_any())
            .await
            .expect("get")
            .is_some(),
        "a NodeClaim whose instance could not be terminated is kept"
    );
    assert_eq!(
        live_instance(&s, &id).await,
        Some(true),
        "the instance still runs"
    );

    s.ec2
        .create_tags()
        .resources(&id)
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key(&cluster_tag)
                .value("owned")
                .build(),
        )
        .send()
        .await
        .expect("tag again");
    wait_for(
        "the NodeClaim gone once the tag is back",
        Duration::from_secs(120),
        || async {
            let gone = nodeclaims(&admin)
                .get_opt(&claim.name_any())
                .await
                .ok()?
                .is_none();
            gone.then_some(())
        },
    )
    .await;
    assert_eq!(live_instance(&s, &id).await, Some(false));
    let refused: Vec<_> = testenv::iam_refusals(&s.cluster)
        .into_iter()
        .filter(|d| d["action"] != "ec2:TerminateInstances")
        .collect();
    assert!(refused.is_empty(), "nothing else was refused: {refused:#?}");
    scene.end().await;
}

/// Whether EC2 still runs `id` (None when it does not know it).
async fn live_instance(s: &Setup, id: &str) -> Option<bool> {
    let out = s
        .ec2
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .ok()?;
    let instance = out.reservations().first()?.instances().first()?;
    let state = instance.state()?.name()?.as_str().to_string();
    Some(!matches!(state.as_str(), "shutting-down" | "terminated"))
}
