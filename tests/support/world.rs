//! A world of its own per test (VPC, subnets, security groups, EKS cluster in moto, all
//! pointing at the one local API server), a jointer config for it, and the SDK clients tests
//! use to look at what jointer did.

use serde_json::Value;

use super::testenv::{self, new_world};
use super::{Run, Workspace};

pub const KEY: &str = "karpenter.sh/discovery";

/// One cluster's world, a config for it, and clients to look at what jointer did.
pub struct Setup {
    pub world: Value,
    pub cluster: String,
    pub ws: Workspace,
    pub iam: aws_sdk_iam::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub events: aws_sdk_eventbridge::Client,
    pub eks: aws_sdk_eks::Client,
    pub ec2: aws_sdk_ec2::Client,
}

impl Setup {
    pub async fn new(prefix: &str, extra_config: &str) -> Setup {
        // A test that failed while it injected faults left them behind.
        testenv::gap("DELETE", "/_gap/faults", None);
        let world = new_world(prefix);
        let cluster = world["cluster"]["name"].as_str().expect("name").to_string();
        let ws = Workspace::new();
        ws.write(
            "jointer.yaml",
            &format!("cluster: {{ name: {cluster}, region: us-east-1 }}\n{extra_config}\n"),
        );
        let config = testenv::aws().await;
        // The spot service-linked role is per account: make sure it exists, so every apply
        // makes the same calls whichever test ran first.
        let iam = aws_sdk_iam::Client::new(&config);
        let _ = iam
            .create_service_linked_role()
            .aws_service_name("spot.amazonaws.com")
            .send()
            .await;
        Setup {
            cluster,
            ws,
            iam,
            sqs: aws_sdk_sqs::Client::new(&config),
            events: aws_sdk_eventbridge::Client::new(&config),
            eks: aws_sdk_eks::Client::new(&config),
            ec2: aws_sdk_ec2::Client::new(&config),
            world,
        }
    }

    pub fn jointer(&self, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend(["-f", "jointer.yaml"]);
        self.ws.jointer(&all)
    }

    pub fn apply(&self) -> Run {
        let run = self.jointer(&["apply", "--yes"]);
        assert_eq!(run.code, 0, "apply failed: {run:#?}");
        run
    }

    pub fn in_sync(&self) {
        let run = self.jointer(&["drift"]);
        assert_eq!(run.code, 0, "expected no drift: {run:#?}");
    }

    pub fn private_subnets(&self) -> Vec<String> {
        ids(&self.world["subnets"]["private"])
    }

    pub fn public_subnets(&self) -> Vec<String> {
        ids(&self.world["subnets"]["public"])
    }

    pub fn sg(&self, which: &str) -> String {
        self.world["securityGroups"][which]
            .as_str()
            .expect("sg")
            .to_string()
    }

    pub fn node_role(&self) -> String {
        format!("KarpenterNodeRole-{}", self.cluster)
    }

    pub fn controller_role(&self) -> String {
        format!("KarpenterControllerRole-{}", self.cluster)
    }

    pub fn rule(&self, kind: &str) -> String {
        format!("jointer-{}-{kind}", self.cluster)
    }

    pub fn account_arn(&self, what: &str) -> String {
        format!("arn:aws:iam::123456789012:{what}")
    }

    pub async fn queue_url(&self) -> Option<String> {
        self.sqs
            .get_queue_url()
            .queue_name(&self.cluster)
            .send()
            .await
            .ok()
            .and_then(|o| o.queue_url)
    }

    pub async fn tags_of(&self, id: &str) -> std::collections::BTreeMap<String, String> {
        let out = self
            .ec2
            .describe_tags()
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("resource-id")
                    .values(id)
                    .build(),
            )
            .send()
            .await
            .expect("tags");
        out.tags()
            .iter()
            .map(|t| {
                (
                    t.key().unwrap_or("").to_string(),
                    t.value().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    pub async fn tag(&self, id: &str, key: &str, value: &str) {
        self.ec2
            .create_tags()
            .resources(id)
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key(key)
                    .value(value)
                    .build(),
            )
            .send()
            .await
            .expect("tag");
    }

    /// `drift` exits 2 and names every needle on one line; `apply` repairs it; in sync again.
    pub fn drift_detected_and_repaired(&self, case: &str, needles: &[&str]) {
        let run = self.jointer(&["drift"]);
        assert_eq!(run.code, 2, "{case}: expected drift: {run:#?}");
        assert!(
            run.stdout
                .lines()
                .any(|l| needles.iter().all(|n| l.contains(n))),
            "{case}: no drift line names {needles:?}:\n{}",
            run.stdout
        );
        let json = self.jointer(&["drift", "-o", "json"]);
        assert_eq!(json.code, 2, "{case}: {json:#?}");
        let report: Value = serde_json::from_str(&json.stdout).expect("drift JSON");
        assert_eq!(report["inSync"], false);
        self.apply();
        self.in_sync();
    }
}

pub fn ids(by_zone: &Value) -> Vec<String> {
    by_zone
        .as_object()
        .expect("zones")
        .values()
        .map(|v| v.as_str().expect("id").to_string())
        .collect()
}

pub fn ownership_tags_present(tags: &[(String, String)], cluster: &str) {
    assert!(
        tags.iter()
            .any(|(k, v)| k == "jointer.dev/managed-by" && v == "jointer"),
        "{tags:?}"
    );
    assert!(
        tags.iter()
            .any(|(k, v)| k == "jointer.dev/cluster" && v == cluster),
        "{tags:?}"
    );
}
