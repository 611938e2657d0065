//! The AWS side of the bootstrap (`plan`, `apply`, `drift`, `teardown`) against the test
//! environment, through the real `jointer` binary. Each test builds its own world (VPC,
//! subnets, security groups, EKS cluster) so they never see each other's resources; they take
//! turns because the gap layer's call log and faults are global.

use std::time::Instant;

use crate::support::testenv::{self, clear_calls, gap, mutating_calls};
use crate::support::world::{ownership_tags_present, Setup, KEY};
use crate::support::Run;
use serde_json::{json, Value};

#[tokio::test]
async fn apply_creates_every_resource_and_a_second_apply_makes_no_mutating_call() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-apply", "identity: pod-identity").await;

    clear_calls();
    let started = Instant::now();
    let cold = s.jointer(&["apply", "--yes", "-o", "json"]);
    let cold_time = started.elapsed();
    assert_eq!(cold.code, 0, "{cold:#?}");
    let cold_calls = testenv::calls().len();
    let cold_mutating = mutating_calls().len();
    let report: Value = serde_json::from_str(&cold.stdout).expect("apply JSON");
    let outputs = &report["outputs"];
    assert_eq!(
        outputs["nodeRoleArn"],
        s.account_arn(&format!("role/{}", s.node_role()))
    );
    assert_eq!(
        outputs["controllerRoleArn"],
        s.account_arn(&format!("role/{}", s.controller_role()))
    );
    assert_eq!(outputs["interruptionQueue"], s.cluster.as_str());
    let mut tagged: Vec<String> = serde_json::from_value(outputs["taggedSubnets"].clone()).unwrap();
    tagged.sort();
    let mut private = s.private_subnets();
    private.sort();
    assert_eq!(tagged, private, "exactly the private subnets are tagged");
    assert_eq!(outputs["taggedSecurityGroups"], json!([s.sg("cluster")]));

    // Discovery tags: private subnets and the cluster security group, nothing else.
    for subnet in s.private_subnets() {
        assert_eq!(s.tags_of(&subnet).await[KEY], s.cluster);
    }
    for subnet in s.public_subnets() {
        assert!(!s.tags_of(&subnet).await.contains_key(KEY));
    }
    assert_eq!(s.tags_of(&s.sg("cluster")).await[KEY], s.cluster);
    assert!(!s.tags_of(&s.sg("node")).await.contains_key(KEY));

    // Node role: EC2 trust, the four managed policies, owned.
    let role = s
        .iam
        .get_role()
        .role_name(s.node_role())
        .send()
        .await
        .expect("node role");
    let trust = percent_encoding::percent_decode_str(
        role.role()
            .and_then(|r| r.assume_role_policy_document())
            .unwrap_or(""),
    )
    .decode_utf8_lossy()
    .to_string();
    assert!(trust.contains("ec2.amazonaws.com"), "{trust}");
    let attached = s
        .iam
        .list_attached_role_policies()
        .role_name(s.node_role())
        .send()
        .await
        .expect("attached");
    let mut names: Vec<&str> = attached
        .attached_policies()
        .iter()
        .filter_map(|p| p.policy_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "AmazonEC2ContainerRegistryPullOnly",
            "AmazonEKSWorkerNodePolicy",
            "AmazonEKS_CNI_Policy",
            "AmazonSSMManagedInstanceCore"
        ]
    );
    let role_tags: Vec<(String, String)> = s
        .iam
        .list_role_tags()
        .role_name(s.node_role())
        .send()
        .await
        .expect("tags")
        .tags()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect();
    ownership_tags_present(&role_tags, &s.cluster);

    // Controller role: pod identity trust and five scoped policies.
    let controller = s
        .iam
        .list_attached_role_policies()
        .role_name(s.controller_role())
        .send()
        .await
        .expect("controller policies");
    assert_eq!(controller.attached_policies().len(), 5);
    let association = s
        .eks
        .list_pod_identity_associations()
        .cluster_name(&s.cluster)
        .namespace("kube-system")
        .service_account("jointer-controller")
        .send()
        .await
        .expect("associations");
    assert_eq!(association.associations().len(), 1);

    // Node access: an EC2_LINUX access entry.
    let entry = s
        .eks
        .describe_access_entry()
        .cluster_name(&s.cluster)
        .principal_arn(s.account_arn(&format!("role/{}", s.node_role())))
        .send()
        .await
        .expect("access entry");
    assert_eq!(
        entry.access_entry().and_then(|e| e.r#type()),
        Some("EC2_LINUX")
    );

    // Queue: retention, encryption, policy; five rules targeting it.
    let url = s.queue_url().await.expect("queue");
    let attrs = s
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .expect("attributes");
    let attrs = attrs.attributes().expect("attributes");
    assert_eq!(
        attrs[&aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod],
        "300"
    );
    assert_eq!(
        attrs[&aws_sdk_sqs::types::QueueAttributeName::SqsManagedSseEnabled],
        "true"
    );
    assert!(attrs[&aws_sdk_sqs::types::QueueAttributeName::Policy].contains("events.amazonaws.com"));
    let queue_arn = format!("arn:aws:sqs:us-east-1:123456789012:{}", s.cluster);
    for (kind, detail_type) in [
        ("Health", "AWS Health Event"),
        ("Spot", "EC2 Spot Instance Interruption Warning"),
        ("Rebalance", "EC2 Instance Rebalance Recommendation"),
        ("StateChange", "EC2 Instance State-change Notification"),
        (
            "CapacityReservation",
            "EC2 Capacity Reservation Instance Interruption Warning",
        ),
    ] {
        let rule = s
            .events
            .describe_rule()
            .name(s.rule(kind))
            .send()
            .await
            .expect("rule");
        let pattern: Value = serde_json::from_str(rule.event_pattern().unwrap_or("")).unwrap();
        assert_eq!(pattern["detail-type"], json!([detail_type]));
        let targets = s
            .events
            .list_targets_by_rule()
            .rule(s.rule(kind))
            .send()
            .await
            .expect("targets");
        assert_eq!(targets.targets().len(), 1);
        assert_eq!(targets.targets()[0].arn(), queue_arn);
    }

    // Converged: the second apply changes nothing and makes no mutating call.
    clear_calls();
    let started = Instant::now();
    let again = s.apply();
    let warm_time = started.elapsed();
    assert!(again.stdout.contains("already converged"), "{again:#?}");
    assert_eq!(mutating_calls(), Vec::<String>::new());
    let warm_calls = testenv::calls().len();

    clear_calls();
    let started = Instant::now();
    s.in_sync();
    let drift_time = started.elapsed();
    let drift_calls = testenv::calls().len();

    clear_calls();
    let started = Instant::now();
    let teardown = s.jointer(&["teardown", "--yes"]);
    let teardown_time = started.elapsed();
    assert_eq!(teardown.code, 0, "{teardown:#?}");
    let teardown_calls = testenv::calls().len();
    eprintln!(
        "figures: cold apply {:.2} s / {cold_calls} calls ({cold_mutating} mutating); converged apply {:.2} s / {warm_calls} calls; drift {:.2} s / {drift_calls} calls; teardown {:.2} s / {teardown_calls} calls",
        cold_time.as_secs_f64(),
        warm_time.as_secs_f64(),
        drift_time.as_secs_f64(),
        teardown_time.as_secs_f64()
    );
}

#[tokio::test]
async fn every_drift_case_is_detected_by_name_and_repaired_by_apply() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-drift", "").await;
    s.apply();
    s.in_sync();
    let subnet = &s.private_subnets()[0];

    s.ec2
        .delete_tags()
        .resources(subnet)
        .tags(aws_sdk_ec2::types::Tag::builder().key(KEY).build())
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired("tag removed", &[subnet, KEY, "missing"]);

    s.tag(subnet, KEY, "someone-else").await;
    s.drift_detected_and_repaired("tag changed", &[subnet, KEY, "someone-else"]);

    s.tag(&s.sg("node"), KEY, &s.cluster).await;
    s.drift_detected_and_repaired("second security group", &[&s.sg("node"), KEY, "unexpected"]);
    assert!(!s.tags_of(&s.sg("node")).await.contains_key(KEY));

    let url = s.queue_url().await.unwrap();
    s.sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod,
            "86400",
        )
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired(
        "queue retention",
        &["sqs queue", "MessageRetentionPeriod", "86400"],
    );

    s.sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::Policy,
            json!({"Version": "2012-10-17", "Statement": [{"Sid": "AllowEventBridgeToSend", "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage", "Resource": "*"}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired(
        "queue policy",
        &["sqs queue", "Policy", "AllowEventBridgeToSend changed"],
    );

    let spot = s.rule("Spot");
    s.events
        .remove_targets()
        .rule(&spot)
        .ids("InterruptionQueue")
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired("target removed", &[&spot, "target", "none"]);

    s.events.disable_rule().name(&spot).send().await.unwrap();
    s.drift_detected_and_repaired("rule disabled", &[&spot, "state", "DISABLED"]);

    s.events
        .put_rule()
        .name(&spot)
        .event_pattern(r#"{"source":["aws.ec2"]}"#)
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired("pattern changed", &[&spot, "event pattern"]);

    let health = s.rule("Health");
    s.events
        .remove_targets()
        .rule(&health)
        .ids("InterruptionQueue")
        .send()
        .await
        .unwrap();
    s.events.delete_rule().name(&health).send().await.unwrap();
    s.drift_detected_and_repaired("rule deleted", &[&health, "missing"]);

    s.iam
        .update_assume_role_policy()
        .role_name(s.controller_role())
        .policy_document(
            json!({"Version": "2012-10-17", "Statement": [{"Sid": "AllowEksPodIdentity", "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": ["sts:AssumeRole", "sts:TagSession"]}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired(
        "trust changed",
        &[
            &s.controller_role(),
            "trust policy",
            "AllowEksPodIdentity changed",
        ],
    );

    let lifecycle = format!(
        "arn:aws:iam::123456789012:policy/{}-NodeLifecycle",
        s.controller_role()
    );
    s.iam
        .create_policy_version()
        .policy_arn(&lifecycle)
        .policy_document(
            json!({"Version": "2012-10-17", "Statement": [{"Sid": "AllowScopedDeletion", "Effect": "Allow",
                "Action": ["ec2:TerminateInstances"], "Resource": "*"}]})
            .to_string(),
        )
        .set_as_default(true)
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired(
        "policy statement changed",
        &["NodeLifecycle", "document", "AllowScopedDeletion changed"],
    );

    s.iam
        .detach_role_policy()
        .role_name(s.node_role())
        .policy_arn("arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy")
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired(
        "managed policy detached",
        &[
            &s.node_role(),
            "attached policy",
            "AmazonEKSWorkerNodePolicy",
        ],
    );

    let node_role_arn = s.account_arn(&format!("role/{}", s.node_role()));
    s.eks
        .delete_access_entry()
        .cluster_name(&s.cluster)
        .principal_arn(&node_role_arn)
        .send()
        .await
        .unwrap();
    s.drift_detected_and_repaired(
        "access entry deleted",
        &["eks access entry", &node_role_arn, "missing"],
    );
}

/// Fails the n-th mutating call of a full apply for every n (a crash at that point: calls
/// before it happened, none after), then re-runs: the re-run converges, with no duplicates.
#[tokio::test]
async fn an_apply_interrupted_at_any_mutating_call_converges_on_the_next_run() {
    let _turn = testenv::TURN.lock().await;
    let reference = Setup::new("bs-crash", "").await;
    clear_calls();
    reference.apply();
    let total = mutating_calls().len();
    assert!(total >= 30, "a full apply makes {total} mutating calls");

    for n in 1..=total {
        let s = Setup::new("bs-crash", "").await;
        gap(
            "POST",
            "/_gap/faults",
            Some(
                json!({"fail_nth_mutating": {"n": n, "status": 403, "code": "AccessDenied", "message": "injected failure"}}),
            ),
        );
        let failed = s.jointer(&["apply", "--yes"]);
        gap("DELETE", "/_gap/faults", None);
        assert_eq!(
            failed.code, 1,
            "call {n}/{total} failing must fail the run: {failed:#?}"
        );
        assert!(
            failed.stderr.contains("injected failure")
                && failed.stderr.contains("re-running picks up"),
            "call {n}: {}",
            failed.stderr
        );
        // apply verifies by observing again: it exits 0 only when nothing is left to do.
        s.apply();
        // No duplicates: one association, one target per rule, five controller policies.
        let associations = s
            .eks
            .list_pod_identity_associations()
            .cluster_name(&s.cluster)
            .send()
            .await
            .unwrap();
        assert_eq!(associations.associations().len(), 1, "call {n}");
        let targets = s
            .events
            .list_targets_by_rule()
            .rule(s.rule("Spot"))
            .send()
            .await
            .unwrap();
        assert_eq!(targets.targets().len(), 1, "call {n}");
        let policies: Vec<_> = s
            .iam
            .list_policies()
            .scope(aws_sdk_iam::types::PolicyScopeType::Local)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .unwrap();
        let ours = policies
            .iter()
            .filter(|p| {
                p.policy_name()
                    .is_some_and(|name| name.starts_with(&s.controller_role()))
            })
            .count();
        assert_eq!(ours, 5, "call {n}");
    }
}

#[tokio::test]
async fn apply_converges_while_every_service_throttles() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-throttle", "").await;
    clear_calls();
    gap(
        "POST",
        "/_gap/faults",
        Some(json!({"throttle": [
            {"service": "iam", "count": 4}, {"service": "ec2", "count": 4},
            {"service": "sqs", "count": 4}, {"service": "events", "count": 4},
            {"service": "eks", "count": 4}
        ]})),
    );
    let run = s.jointer(&["apply", "--yes"]);
    gap("DELETE", "/_gap/faults", None);
    assert_eq!(run.code, 0, "{run:#?}");
    let throttled = testenv::calls()
        .iter()
        .filter(|c| c["fault"] == "throttle")
        .count();
    assert_eq!(throttled, 20, "every injected throttle was met and retried");
    s.in_sync();
}

/// An EKS answer injected for the next `count` calls of `operation`.
fn eks_refuses(operation: &str, count: u32, message: &str) -> serde_json::Value {
    json!({"service": "eks", "operation": operation, "count": count, "status": 400,
           "code": "InvalidParameterException", "message": message})
}

fn calls_of(operation: &str) -> usize {
    testenv::calls()
        .iter()
        .filter(|c| c["operation"] == operation)
        .count()
}

#[tokio::test]
async fn apply_waits_for_iam_to_propagate_new_roles_and_fails_at_once_on_a_real_refusal() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-propagation", "").await;

    // A refusal that waiting cannot cure is reported at once, after a single attempt.
    clear_calls();
    gap(
        "POST",
        "/_gap/faults",
        Some(json!({"server_error": [eks_refuses(
            "CreateAccessEntry", 1, "The principalArn parameter format is not valid")]})),
    );
    let run = s.jointer(&["apply", "--yes"]);
    gap("DELETE", "/_gap/faults", None);
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(
        run.stderr.contains("eks:CreateAccessEntry")
            && run
                .stderr
                .contains("The principalArn parameter format is not valid"),
        "{}",
        run.stderr
    );
    assert_eq!(calls_of("CreateAccessEntry"), 1);

    // Roles EKS cannot see yet: the access entry and the pod identity association are retried
    // until IAM has propagated them.
    clear_calls();
    gap(
        "POST",
        "/_gap/faults",
        Some(json!({"server_error": [
            eks_refuses("CreateAccessEntry", 2,
                "The specified principalArn is invalid: invalid principal."),
            eks_refuses("CreatePodIdentityAssociation", 2,
                "Role provided in the request does not exist"),
        ]})),
    );
    let run = s.jointer(&["apply", "--yes"]);
    gap("DELETE", "/_gap/faults", None);
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(
        run.stderr.matches("IAM has not propagated").count(),
        4,
        "{}",
        run.stderr
    );
    assert_eq!(calls_of("CreateAccessEntry"), 3);
    assert_eq!(calls_of("CreatePodIdentityAssociation"), 3);
    s.in_sync();
}

#[tokio::test]
async fn teardown_removes_what_jointer_made_and_keeps_tags_that_were_there() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-teardown", "").await;
    // Before jointer: one private subnet already carries the discovery tag.
    let pre_tagged = s.private_subnets()[0].clone();
    s.tag(&pre_tagged, KEY, &s.cluster).await;
    s.apply();
    let run = s.jointer(&["teardown", "--yes"]);
    assert_eq!(run.code, 0, "{run:#?}");
    assert!(
        run.stdout.contains("nothing jointer owns"),
        "{}",
        run.stdout
    );

    assert_eq!(s.tags_of(&pre_tagged).await.get(KEY), Some(&s.cluster));
    for subnet in &s.private_subnets()[1..] {
        let tags = s.tags_of(subnet).await;
        assert!(!tags.contains_key(KEY), "{subnet}: {tags:?}");
        assert!(!tags.contains_key("jointer.dev/added-tags"), "{subnet}");
    }
    assert!(!s.tags_of(&s.sg("cluster")).await.contains_key(KEY));
    assert!(s
        .tags_of(&s.sg("cluster"))
        .await
        .contains_key(&format!("kubernetes.io/cluster/{}", s.cluster)));

    // Nothing of this cluster's bootstrap is left in AWS. (moto's /moto-api/data.json cannot
    // prove it: it lists every object ever created, deleted ones included.)
    let roles: Vec<_> = s
        .iam
        .list_roles()
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap();
    let leaked: Vec<&str> = roles
        .iter()
        .map(|r| r.role_name())
        .filter(|n| n.contains(&s.cluster) && !n.ends_with("-cluster"))
        .collect();
    assert!(leaked.is_empty(), "roles left: {leaked:?}");
    let policies: Vec<_> = s
        .iam
        .list_policies()
        .scope(aws_sdk_iam::types::PolicyScopeType::Local)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap();
    assert!(policies
        .iter()
        .all(|p| !p.policy_name().unwrap_or("").contains(&s.cluster)));
    let rules = s
        .events
        .list_rules()
        .name_prefix(format!("jointer-{}", s.cluster))
        .send()
        .await
        .unwrap();
    assert!(rules.rules().is_empty(), "rules left: {:?}", rules.rules());
    let marked = s
        .ec2
        .describe_tags()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("key")
                .values("jointer.dev/added-tags")
                .build(),
        )
        .send()
        .await
        .unwrap();
    let ours: Vec<String> = s
        .private_subnets()
        .into_iter()
        .chain([s.sg("cluster")])
        .collect();
    assert!(marked
        .tags()
        .iter()
        .all(|t| !ours.contains(&t.resource_id().unwrap_or("").to_string())));
    assert!(s.queue_url().await.is_none());
    let entries = s
        .eks
        .list_access_entries()
        .cluster_name(&s.cluster)
        .send()
        .await
        .unwrap();
    assert!(entries.access_entries().is_empty());
    let associations = s
        .eks
        .list_pod_identity_associations()
        .cluster_name(&s.cluster)
        .send()
        .await
        .unwrap();
    assert!(associations.associations().is_empty());

    // A second teardown has nothing to do.
    let again = s.jointer(&["teardown", "--yes", "-o", "json"]);
    assert_eq!(again.code, 0, "{again:#?}");
    let report: Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(report["removed"], json!([]));
    assert_eq!(report["leftovers"], json!([]));
}

#[tokio::test]
async fn a_name_taken_by_something_jointer_does_not_own_stops_the_run_unless_adopted() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-adopt", "").await;
    s.iam
        .create_role()
        .role_name(s.node_role())
        .assume_role_policy_document(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#,
        )
        .send()
        .await
        .unwrap();
    clear_calls();
    let refused = s.jointer(&["apply", "--yes"]);
    refused_before_any_write(
        &refused,
        &[&format!("iam role {}", s.node_role()), "--adopt"],
    );

    let adopted = s.jointer(&["apply", "--yes", "--adopt"]);
    assert_eq!(adopted.code, 0, "{adopted:#?}");
    assert!(
        adopted.stdout.contains("ownership tags"),
        "{}",
        adopted.stdout
    );
    s.in_sync();
}

/// Exit 1, a message naming everything in `needles`, and not one mutating call.
fn refused_before_any_write(run: &Run, needles: &[&str]) {
    assert_eq!(run.code, 1, "{run:#?}");
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(
        needles.iter().all(|n| run.stderr.contains(n)),
        "expected {needles:?} in:\n{}",
        run.stderr
    );
    assert_eq!(mutating_calls(), Vec::<String>::new(), "{}", run.stderr);
}

#[tokio::test]
async fn bad_input_is_refused_before_any_write() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-bad", "").await;
    let write = |config: &str| s.ws.write("jointer.yaml", config);
    let cluster = s.cluster.clone();
    clear_calls();

    write("cluster: { name: no-such-cluster, region: us-east-1 }");
    refused_before_any_write(
        &s.jointer(&["apply", "--yes"]),
        &["no EKS cluster named \"no-such-cluster\" in us-east-1"],
    );

    write(&format!(
        "cluster: {{ name: {cluster}, region: us-west-2 }}"
    ));
    refused_before_any_write(
        &s.jointer(&["plan"]),
        &[&cluster, "us-west-2", "cluster.region"],
    );

    write(&format!(
        "cluster: {{ name: {cluster}, region: us-east-1 }}\ndiscovery: {{ subnets: [subnet-0123456789abcdef0] }}"
    ));
    refused_before_any_write(
        &s.jointer(&["apply", "--yes"]),
        &["discovery.subnets", "subnet-0123456789abcdef0"],
    );

    // A subnet and a security group in another VPC.
    let vpc = s
        .ec2
        .create_vpc()
        .cidr_block("10.9.0.0/16")
        .send()
        .await
        .unwrap()
        .vpc
        .and_then(|v| v.vpc_id)
        .unwrap();
    let subnet = s
        .ec2
        .create_subnet()
        .vpc_id(&vpc)
        .cidr_block("10.9.0.0/24")
        .send()
        .await
        .unwrap()
        .subnet
        .and_then(|s| s.subnet_id)
        .unwrap();
    let sg = s
        .ec2
        .create_security_group()
        .vpc_id(&vpc)
        .group_name(testenv::unique("elsewhere"))
        .description("another VPC")
        .send()
        .await
        .unwrap()
        .group_id
        .unwrap();
    clear_calls();
    write(&format!(
        "cluster: {{ name: {cluster}, region: us-east-1 }}\ndiscovery: {{ subnets: [{subnet}] }}"
    ));
    refused_before_any_write(
        &s.jointer(&["apply", "--yes"]),
        &[
            "discovery.subnets",
            &subnet,
            &vpc,
            "not in the cluster's VPC",
        ],
    );
    write(&format!(
        "cluster: {{ name: {cluster}, region: us-east-1 }}\ndiscovery: {{ securityGroups: [{sg}] }}"
    ));
    refused_before_any_write(
        &s.jointer(&["apply", "--yes"]),
        &["discovery.securityGroups", &sg, "not in the cluster's VPC"],
    );

    // IRSA on a cluster without an OIDC issuer.
    gap(
        "POST",
        "/_gap/clusters",
        Some(json!({"cluster": cluster, "oidc": false})),
    );
    write(&format!(
        "cluster: {{ name: {cluster}, region: us-east-1 }}\nidentity: irsa"
    ));
    refused_before_any_write(
        &s.jointer(&["apply", "--yes"]),
        &["identity: irsa", "OIDC issuer", &cluster],
    );

    // Pod identity without its agent add-on.
    s.eks
        .delete_addon()
        .cluster_name(&cluster)
        .addon_name("eks-pod-identity-agent")
        .send()
        .await
        .unwrap();
    clear_calls();
    write(&format!(
        "cluster: {{ name: {cluster}, region: us-east-1 }}\nidentity: pod-identity"
    ));
    refused_before_any_write(
        &s.jointer(&["apply", "--yes"]),
        &["eks-pod-identity-agent", "identity: irsa"],
    );
}

#[tokio::test]
async fn irsa_trusts_the_clusters_oidc_provider_and_creates_it_when_missing() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-irsa", "identity: irsa").await;
    let provider = s.world["cluster"]["oidcProviderArn"]
        .as_str()
        .unwrap()
        .to_string();
    s.iam
        .delete_open_id_connect_provider()
        .open_id_connect_provider_arn(&provider)
        .send()
        .await
        .unwrap();
    let run = s.apply();
    assert!(run.stdout.contains("iam oidc provider"), "{}", run.stdout);
    let created = s
        .iam
        .get_open_id_connect_provider()
        .open_id_connect_provider_arn(&provider)
        .send()
        .await
        .expect("provider created");
    assert_eq!(created.client_id_list(), ["sts.amazonaws.com"]);
    let role = s
        .iam
        .get_role()
        .role_name(s.controller_role())
        .send()
        .await
        .unwrap();
    let trust = percent_encoding::percent_decode_str(
        role.role()
            .and_then(|r| r.assume_role_policy_document())
            .unwrap_or(""),
    )
    .decode_utf8_lossy()
    .to_string();
    assert!(trust.contains(&provider), "{trust}");
    assert!(
        trust.contains("system:serviceaccount:kube-system:jointer-controller"),
        "{trust}"
    );
    assert!(trust.contains("sts:AssumeRoleWithWebIdentity"), "{trust}");
    let associations = s
        .eks
        .list_pod_identity_associations()
        .cluster_name(&s.cluster)
        .send()
        .await
        .unwrap();
    assert!(associations.associations().is_empty());
    s.in_sync();

    let down = s.jointer(&["teardown", "--yes"]);
    assert_eq!(down.code, 0, "{down:#?}");
    assert!(s
        .iam
        .get_open_id_connect_provider()
        .open_id_connect_provider_arn(&provider)
        .send()
        .await
        .is_err());
}

#[tokio::test]
async fn config_map_clusters_get_a_merged_aws_auth_mapping() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("bs-awsauth", "").await;
    gap(
        "POST",
        "/_gap/clusters",
        Some(json!({"cluster": s.cluster, "authenticationMode": "CONFIG_MAP"})),
    );
    let api: Api<ConfigMap> = Api::namespaced(testenv::kube().await, "kube-system");
    let other = format!(
        "arn:aws:iam::123456789012:role/{}",
        testenv::unique("someone-else")
    );
    let existing = api.get_opt("aws-auth").await.unwrap();
    let mut cm = existing.unwrap_or_else(|| ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("aws-auth".into()),
            ..Default::default()
        },
        ..Default::default()
    });
    let mut roles: Vec<Value> = cm
        .data
        .as_ref()
        .and_then(|d| d.get("mapRoles"))
        .and_then(|t| serde_yaml::from_str(t).ok())
        .unwrap_or_default();
    roles.push(json!({"rolearn": other, "username": "admin", "groups": ["system:masters"]}));
    cm.data
        .get_or_insert_with(Default::default)
        .insert("mapRoles".into(), serde_yaml::to_string(&roles).unwrap());
    if cm.metadata.resource_version.is_some() {
        api.replace("aws-auth", &PostParams::default(), &cm)
            .await
            .unwrap();
    } else {
        api.create(&PostParams::default(), &cm).await.unwrap();
    }

    s.apply();
    let node_role_arn = s.account_arn(&format!("role/{}", s.node_role()));
    let map_roles = |cm: ConfigMap| -> Vec<Value> {
        serde_yaml::from_str(&cm.data.unwrap()["mapRoles"]).unwrap()
    };
    let roles = map_roles(api.get("aws-auth").await.unwrap());
    let ours = roles
        .iter()
        .find(|r| r["rolearn"] == node_role_arn.as_str())
        .expect("mapped");
    assert_eq!(ours["username"], "system:node:{{EC2PrivateDNSName}}");
    assert_eq!(
        ours["groups"],
        json!(["system:bootstrappers", "system:nodes"])
    );
    assert!(
        roles.iter().any(|r| r["rolearn"] == other.as_str()),
        "other mappings kept"
    );
    let entries = s
        .eks
        .list_access_entries()
        .cluster_name(&s.cluster)
        .send()
        .await
        .unwrap();
    assert!(
        entries.access_entries().is_empty(),
        "no access entry in CONFIG_MAP mode"
    );
    s.in_sync();

    let down = s.jointer(&["teardown", "--yes"]);
    assert_eq!(down.code, 0, "{down:#?}");
    let roles = map_roles(api.get("aws-auth").await.unwrap());
    assert!(roles.iter().all(|r| r["rolearn"] != node_role_arn.as_str()));
    assert!(
        roles.iter().any(|r| r["rolearn"] == other.as_str()),
        "other mappings kept"
    );
}
