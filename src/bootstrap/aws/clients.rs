//! The AWS side's clients and the cluster facts every step builds on, read once per run.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use aws_sdk_eks::error::ProvideErrorMetadata;
use aws_sdk_eks::error::SdkError;

use super::policy::Partition;
use crate::input::config::Config;

/// One client per service, all from the standard credential chain with retries set on purpose:
/// IAM and EventBridge throttle hard during a burst of writes, so a run retries throttled and
/// failed calls up to 8 times with exponential backoff instead of failing half-way.
pub struct Clients {
    pub iam: aws_sdk_iam::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub events: aws_sdk_eventbridge::Client,
    pub eks: aws_sdk_eks::Client,
    pub ec2: aws_sdk_ec2::Client,
    pub ecr: aws_sdk_ecr::Client,
}

pub const MAX_ATTEMPTS: u32 = 8;

impl Clients {
    pub async fn connect(region: &str) -> Clients {
        let base = jointer_controller::clients::aws_config(Some(region)).await;
        let retry = aws_config::retry::RetryConfig::standard()
            .with_max_attempts(MAX_ATTEMPTS)
            .with_initial_backoff(Duration::from_millis(200))
            .with_max_backoff(Duration::from_secs(10));
        let config = base.into_builder().retry_config(retry).build();
        Clients {
            iam: aws_sdk_iam::Client::new(&config),
            sqs: aws_sdk_sqs::Client::new(&config),
            events: aws_sdk_eventbridge::Client::new(&config),
            eks: aws_sdk_eks::Client::new(&config),
            ec2: aws_sdk_ec2::Client::new(&config),
            ecr: aws_sdk_ecr::Client::new(&config),
        }
    }
}

/// The error code of a failed call (`NoSuchEntity`, `ResourceNotFoundException`, ...).
pub fn code<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Option<&str> {
    e.as_service_error().and_then(|s| s.code())
}

/// A failed call as one line: what was being done, the code and AWS's message.
pub fn failed<E, R>(what: &str, e: SdkError<E, R>) -> anyhow::Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let detail = match e.as_service_error() {
        Some(s) => format!(
            "{}: {}",
            s.code().unwrap_or("error"),
            s.message().unwrap_or("no message")
        ),
        None => aws_sdk_eks::error::DisplayErrorContext(&e).to_string(),
    };
    anyhow::anyhow!("{what}: {detail}")
}

/// Tags an EKS resource (access entry, pod identity association) by ARN.
pub async fn tag_eks_resource(
    eks: &aws_sdk_eks::Client,
    arn: &str,
    tags: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<()> {
    eks.tag_resource()
        .resource_arn(arn)
        .set_tags(Some(tags.clone().into_iter().collect()))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| failed(&format!("eks:TagResource {arn}"), e))
}

/// A delete whose target is already gone has done its job: the `missing` codes are success.
pub fn gone_ok<T, E, R>(
    result: Result<T, SdkError<E, R>>,
    missing: &[&str],
    what: &str,
) -> anyhow::Result<()>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(()),
        Err(e) if code(&e).is_some_and(|c| missing.contains(&c)) => Ok(()),
        Err(e) => Err(failed(what, e)),
    }
}

/// What jointer needs to know about the existing cluster (from `eks:DescribeCluster`).
#[derive(Debug, Clone)]
pub struct Cluster {
    pub name: String,
    pub region: String,
    pub arn: String,
    pub account: String,
    pub partition: Partition,
    /// The API server's URL.
    pub endpoint: String,
    pub vpc_id: String,
    pub subnet_ids: Vec<String>,
    pub security_group_id: Option<String>,
    pub oidc_issuer: Option<String>,
    pub authentication_mode: String,
    pub ipv6: bool,
}

impl Cluster {
    pub async fn describe(eks: &aws_sdk_eks::Client, config: &Config) -> Result<Cluster> {
        let name = &config.cluster.name;
        let region = &config.cluster.region;
        let described = match eks.describe_cluster().name(name).send().await {
            Ok(out) => out,
            Err(e) if code(&e) == Some("ResourceNotFoundException") => bail!(
                "no EKS cluster named {name:?} in {region} (cluster.name / cluster.region in the config): check both; `aws eks list-clusters --region {region}` lists the clusters there"
            ),
            Err(e) => {
                return Err(failed(
                    &format!("eks:DescribeCluster {name} in {region}"),
                    e,
                ))
            }
        };
        let c = described
            .cluster
            .with_context(|| format!("eks:DescribeCluster {name} returned no cluster"))?;
        let arn = c.arn.clone().unwrap_or_default();
        let account = arn.split(':').nth(4).unwrap_or_default().to_string();
        if account.is_empty() {
            bail!("eks:DescribeCluster {name}: no account in the cluster ARN {arn:?}");
        }
        let vpc = c
            .resources_vpc_config
            .clone()
            .unwrap_or_else(|| aws_sdk_eks::types::VpcConfigResponse::builder().build());
        Ok(Cluster {
            name: name.clone(),
            region: region.clone(),
            partition: Partition::of_region(region),
            endpoint: c.endpoint.clone().unwrap_or_default(),
            account,
            arn,
            vpc_id: vpc
                .vpc_id
                .clone()
                .with_context(|| format!("eks:DescribeCluster {name}: no VPC"))?,
            subnet_ids: vpc.subnet_ids.clone().unwrap_or_default(),
            security_group_id: vpc.cluster_security_group_id.clone(),
            oidc_issuer: c
                .identity
                .as_ref()
                .and_then(|i| i.oidc.as_ref())
                .and_then(|o| o.issuer.clone())
                .filter(|i| !i.is_empty()),
            authentication_mode: c
                .access_config
                .as_ref()
                .and_then(|a| a.authentication_mode.as_ref())
                .map(|m| m.as_str().to_string())
                .unwrap_or_else(|| "CONFIG_MAP".into()),
            ipv6: c
                .kubernetes_network_config
                .as_ref()
                .and_then(|n| n.ip_family.as_ref())
                .is_some_and(|f| f.as_str() == "ipv6"),
        })
    }

    /// The issuer without its scheme: the OIDC provider's name and condition-key prefix.
    pub fn oidc_host(&self) -> Option<String> {
        self.oidc_issuer
            .as_ref()
            .map(|i| i.trim_start_matches("https://").to_string())
    }

    /// Whether EKS access entries can grant node access (else only aws-auth can).
    /// The host of the account's private ECR registry in this region.
    pub fn ecr_registry(&self) -> String {
        let suffix = match self.partition {
            Partition::AwsCn => "amazonaws.com.cn",
            _ => "amazonaws.com",
        };
        format!("{}.dkr.ecr.{}.{suffix}", self.account, self.region)
    }

    pub fn access_entries_enabled(&self) -> bool {
        self.authentication_mode != "CONFIG_MAP"
    }
}
