//! The AWS gap layer through the product's real SDK clients: EKS access entries, pod identity
//! associations, add-ons and DescribeCluster; EKS AMI parameters; CreateFleet by price with
//! insufficient-capacity errors; fault injection and the call log. Needs tests/env/up.sh.
//! Its own test binary: it resets the shared AWS world (test binaries run one at a time), and
//! its tests take turns because faults and the call log are global.

use crate::support::testenv::{self, gap};
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest, FleetType,
    InstanceType, RequestLaunchTemplateData, TargetCapacitySpecificationRequest,
};

fn world() -> serde_json::Value {
    static RESET: std::sync::Once = std::sync::Once::new();
    testenv::require();
    RESET.call_once(|| {
        let status =
            std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/world.sh"))
                .status()
                .expect("world.sh");
        assert!(status.success());
    });
    let dir = std::env::var("JOINTER_TESTENV_RUN_DIR").expect("run dir");
    serde_json::from_str(&std::fs::read_to_string(format!("{dir}/world.json")).expect("world.json"))
        .expect("JSON")
}

#[tokio::test]
async fn eks_access_entries_pod_identity_addons_and_the_cluster_endpoint() {
    let _turn = testenv::TURN.lock().await;
    let cluster = world()["cluster"]["name"]
        .as_str()
        .expect("cluster")
        .to_string();
    let config = testenv::aws().await;
    let eks = aws_sdk_eks::Client::new(&config);
    // Like EKS, the gap layer only accepts principals that exist.
    let role_name = testenv::unique("KarpenterNodeRole");
    let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    let created = aws_sdk_iam::Client::new(&config)
        .create_role()
        .role_name(&role_name)
        .assume_role_policy_document(trust)
        .send()
        .await
        .expect("role");
    let role = created
        .role()
        .map(|r| r.arn().to_string())
        .expect("role arn");
    let role = role.as_str();
    eks.create_access_entry()
        .cluster_name(&cluster)
        .principal_arn(role)
        .r#type("EC2_LINUX")
        .send()
        .await
        .expect("access entry created");
    let entry = eks
        .describe_access_entry()
        .cluster_name(&cluster)
        .principal_arn(role)
        .send()
        .await
        .expect("described");
    assert_eq!(
        entry.access_entry().and_then(|e| e.r#type()),
        Some("EC2_LINUX")
    );
    let duplicate = eks
        .create_access_entry()
        .cluster_name(&cluster)
        .principal_arn(role)
        .r#type("EC2_LINUX")
        .send()
        .await
        .expect_err("duplicate refused");
    assert!(duplicate
        .into_service_error()
        .is_resource_in_use_exception());
    let listed = eks
        .list_access_entries()
        .cluster_name(&cluster)
        .send()
        .await
        .expect("listed");
    assert!(listed.access_entries().iter().any(|a| a == role));
    eks.delete_access_entry()
        .cluster_name(&cluster)
        .principal_arn(role)
        .send()
        .await
        .expect("deleted");
    let gone = eks
        .describe_access_entry()
        .cluster_name(&cluster)
        .principal_arn(role)
        .send()
        .await
        .expect_err("gone");
    assert!(gone.into_service_error().is_resource_not_found_exception());

    let association = eks
        .create_pod_identity_association()
        .cluster_name(&cluster)
        .namespace("kube-system")
        .service_account("karpenter")
        .role_arn("arn:aws:iam::123456789012:role/KarpenterControllerRole-jointer-test")
        .send()
        .await
        .expect("association created");
    let id = association
        .association()
        .and_then(|a| a.association_id())
        .expect("association id")
        .to_string();
    let listed = eks
        .list_pod_identity_associations()
        .cluster_name(&cluster)
        .namespace("kube-system")
        .send()
        .await
        .expect("listed");
    assert!(listed
        .associations()
        .iter()
        .any(|a| a.association_id() == Some(id.as_str())));
    eks.delete_pod_identity_association()
        .cluster_name(&cluster)
        .association_id(&id)
        .send()
        .await
        .expect("deleted");

    let addons = eks
        .list_addons()
        .cluster_name(&cluster)
        .send()
        .await
        .expect("add-ons");
    assert!(addons
        .addons()
        .iter()
        .any(|a| a == "eks-pod-identity-agent"));

    let described = eks
        .describe_cluster()
        .name(&cluster)
        .send()
        .await
        .expect("cluster");
    let c = described.cluster().expect("cluster");
    let kubeconfig = std::fs::read_to_string(std::env::var("KUBECONFIG").expect("KUBECONFIG"))
        .expect("kubeconfig");
    let endpoint = c.endpoint().expect("endpoint");
    assert!(
        kubeconfig.contains(endpoint),
        "DescribeCluster's endpoint {endpoint} is the local API server"
    );
    assert_eq!(
        c.access_config()
            .and_then(|a| a.authentication_mode())
            .map(|m| m.as_str()),
        Some("API_AND_CONFIG_MAP")
    );
    assert!(c
        .resources_vpc_config()
        .and_then(|v| v.cluster_security_group_id())
        .is_some_and(|s| s.starts_with("sg-")));
    let missing = eks
        .describe_cluster()
        .name("no-such-cluster")
        .send()
        .await
        .expect_err("unknown cluster");
    assert!(missing
        .into_service_error()
        .is_resource_not_found_exception());
}

#[tokio::test]
async fn eks_ami_parameters_resolve_to_images_of_their_architecture() {
    let _turn = testenv::TURN.lock().await;
    world();
    let config = testenv::aws().await;
    let ssm = aws_sdk_ssm::Client::new(&config);
    let ec2 = aws_sdk_ec2::Client::new(&config);
    for (arch, expected) in [("x86_64", "x86_64"), ("arm64", "arm64")] {
        let name = format!("/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/{arch}/standard/recommended/image_id");
        let parameter = ssm
            .get_parameter()
            .name(&name)
            .send()
            .await
            .expect("parameter");
        let image = parameter
            .parameter()
            .and_then(|p| p.value())
            .expect("image id")
            .to_string();
        let images = ec2
            .describe_images()
            .image_ids(&image)
            .send()
            .await
            .expect("image");
        assert_eq!(
            images
                .images()
                .first()
                .and_then(|i| i.architecture())
                .map(|a| a.as_str()),
            Some(expected),
            "{name}"
        );
    }
}

async fn fleet_of_three(
    ec2: &aws_sdk_ec2::Client,
    w: &serde_json::Value,
    image: &str,
) -> aws_sdk_ec2::operation::create_fleet::CreateFleetOutput {
    let template = ec2
        .create_launch_template()
        .launch_template_name(testenv::unique("fleet"))
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id(image)
                .security_group_ids(w["securityGroups"]["node"].as_str().unwrap_or_default())
                .build(),
        )
        .send()
        .await
        .expect("launch template");
    let id = template
        .launch_template()
        .and_then(|t| t.launch_template_id())
        .expect("template id")
        .to_string();
    let subnet = w["subnets"]["private"]["us-east-1a"]
        .as_str()
        .expect("subnet")
        .to_string();
    let overrides = ["m5.xlarge", "m5.large", "c5.xlarge"].map(|t| {
        FleetLaunchTemplateOverridesRequest::builder()
            .instance_type(InstanceType::from(t))
            .subnet_id(&subnet)
            .build()
    });
    ec2.create_fleet()
        .r#type(FleetType::Instant)
        .launch_template_configs(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_id(id)
                        .version("$Latest")
                        .build(),
                )
                .set_overrides(Some(overrides.to_vec()))
                .build(),
        )
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(DefaultTargetCapacityType::OnDemand)
                .build(),
        )
        .send()
        .await
        .expect("fleet")
}

#[tokio::test]
async fn create_fleet_launches_the_cheapest_override_and_reports_insufficient_capacity() {
    let _turn = testenv::TURN.lock().await;
    let w = world();
    let config = testenv::aws().await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let ssm = aws_sdk_ssm::Client::new(&config);
    let image = ssm
        .get_parameter()
        .name("/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/recommended/image_id")
        .send()
        .await
        .expect("ami")
        .parameter()
        .and_then(|p| p.value())
        .expect("image")
        .to_string();
    let launched = |out: &aws_sdk_ec2::operation::create_fleet::CreateFleetOutput| {
        out.instances()
            .iter()
            .filter_map(|i| i.instance_type().map(|t| t.as_str().to_string()))
            .collect::<Vec<_>>()
    };

    // m5.large is the cheapest of the three on demand.
    let fleet = fleet_of_three(&ec2, &w, &image).await;
    assert_eq!(launched(&fleet), ["m5.large"]);
    assert!(fleet.errors().is_empty());

    gap(
        "POST",
        "/_gap/faults",
        Some(
            serde_json::json!({ "ice": [{ "instance_type": "m5.large", "zone": "us-east-1a", "capacity_type": "on-demand" }] }),
        ),
    );
    let fleet = fleet_of_three(&ec2, &w, &image).await;
    gap("DELETE", "/_gap/faults", None);
    assert_eq!(
        launched(&fleet),
        ["c5.xlarge"],
        "the next cheapest launches"
    );
    let error = fleet
        .errors()
        .first()
        .expect("an error for the ICE override");
    assert_eq!(error.error_code(), Some("InsufficientInstanceCapacity"));
    let failed_type = error
        .launch_template_and_overrides()
        .and_then(|l| l.overrides())
        .and_then(|o| o.instance_type())
        .map(|t| t.as_str());
    assert_eq!(failed_type, Some("m5.large"));
}

#[tokio::test]
async fn faults_are_injected_and_every_call_is_logged() {
    let _turn = testenv::TURN.lock().await;
    world();
    let config = testenv::aws().await;
    let iam = aws_sdk_iam::Client::new(&config);
    // Without retries, so an injected failure surfaces instead of being retried away.
    let no_retry = aws_sdk_iam::Client::from_conf(
        aws_sdk_iam::config::Builder::from(&config)
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .build(),
    );
    gap("DELETE", "/_gap/calls", None);

    // The 2nd mutating call from now fails; reads do not count.
    gap(
        "POST",
        "/_gap/faults",
        Some(serde_json::json!({ "fail_nth_mutating": 2 })),
    );
    let a = testenv::unique("fault-a");
    let b = testenv::unique("fault-b");
    let trust = r#"{"Version":"2012-10-17","Statement":[]}"#;
    no_retry
        .create_role()
        .role_name(&a)
        .assume_role_policy_document(trust)
        .send()
        .await
        .expect("1st mutating call succeeds");
    no_retry
        .get_role()
        .role_name(&a)
        .send()
        .await
        .expect("reads are not counted");
    let refused = no_retry
        .create_role()
        .role_name(&b)
        .assume_role_policy_document(trust)
        .send()
        .await;
    gap("DELETE", "/_gap/faults", None);
    assert!(refused.is_err(), "the 2nd mutating call fails");

    // Throttling once: the SDK's standard retry absorbs it, and the log shows both attempts.
    gap(
        "POST",
        "/_gap/faults",
        Some(serde_json::json!({ "throttle": { "count": 1, "operation": "GetRole" } })),
    );
    iam.get_role()
        .role_name(&a)
        .send()
        .await
        .expect("retried after throttling");
    gap("DELETE", "/_gap/faults", None);

    let calls = gap("GET", "/_gap/calls", None);
    let calls = calls.as_array().expect("call log");
    let ops: Vec<(&str, bool)> = calls
        .iter()
        .map(|c| {
            (
                c["operation"].as_str().unwrap_or_default(),
                c["mutating"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        ops.contains(&("CreateRole", true)) && ops.contains(&("GetRole", false)),
        "{ops:?}"
    );
    assert_eq!(calls.iter().filter(|c| c["fault"] == "throttle").count(), 1);
    assert_eq!(
        calls
            .iter()
            .filter(|c| c["fault"] == "fail_nth_mutating")
            .count(),
        1
    );
    gap("DELETE", "/_gap/calls", None);
    assert_eq!(
        gap("GET", "/_gap/calls", None).as_array().map(Vec::len),
        Some(0),
        "the log resets"
    );
    iam.delete_role()
        .role_name(&a)
        .send()
        .await
        .expect("cleanup");
}
