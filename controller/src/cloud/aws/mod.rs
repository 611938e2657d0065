//! The AWS cloud provider: instance types and prices of the region (`offerings`), launch
//! templates (`templates`), one CreateFleet per NodeClaim (`launch`), the instance calls the
//! lifecycle and garbage collection need (`instances`), EC2NodeClass resolution (`resolve`)
//! and the SQS interruption queue (`sqs`). Every SDK call goes through `call::metered`.

pub mod call;
pub mod fleet;
pub mod instance_types;
pub mod instances;
pub mod launch;
pub mod launch_template;
pub mod offerings;
pub mod pricing;
pub mod reservations;
pub mod resolve;
pub mod sqs;
pub mod tags;
pub mod templates;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kube::ResourceExt;

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::class_types::ClassTypes;
use crate::cloud::revalidated::Revalidated;
use crate::cloud::unavailable::Unavailable;
use crate::cloud::{
    CloudError, CloudProvider, InstanceState, Launched, OwnedInstance, Resolution, TypesOfClass,
};
pub use crate::core::ami_family::user_data::ClusterInfo;
use crate::core::catalog::Catalog;
use crate::core::overlay::PoolOverlays;
use crate::core::scheduling::{CapacityType, InstanceType};
use crate::metrics::Metrics;
use instance_types::RegionOfferings;
use reservations::Reservations;
pub use sqs::Sqs;

pub struct AwsCloud {
    ec2: aws_sdk_ec2::Client,
    iam: aws_sdk_iam::Client,
    ssm: aws_sdk_ssm::Client,
    pricing: aws_sdk_pricing::Client,
    region: String,
    cluster: ClusterInfo,
    /// `1.34`: which EKS optimized AMIs an alias resolves to.
    kubernetes_version: String,
    estimates: Catalog,
    unavailable: Unavailable,
    reservations: Reservations,
    /// The region's instance types, zones and prices, refreshed in the background.
    offerings: Revalidated<RegionOfferings>,
    /// Each class's instance types as last built from `offerings`.
    class_types: ClassTypes<offerings::TypesInputs>,
    /// Launch templates known to exist: name → id.
    templates: Mutex<BTreeMap<String, String>>,
    metrics: Arc<Metrics>,
}

/// The cluster's name, endpoint, CA and service CIDR (from eks:DescribeCluster; the endpoint
/// setting, when given, wins).
pub async fn describe_cluster(
    eks: &aws_sdk_eks::Client,
    name: &str,
    endpoint: Option<&str>,
    metrics: &Metrics,
) -> anyhow::Result<ClusterInfo> {
    let out = call::metered(
        metrics,
        "eks",
        "DescribeCluster",
        eks.describe_cluster().name(name).send(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("cluster {name}: {e}"))?;
    let cluster = out
        .cluster()
        .ok_or_else(|| anyhow::anyhow!("eks:DescribeCluster {name} returned no cluster"))?;
    let network = cluster.kubernetes_network_config();
    Ok(ClusterInfo {
        name: name.to_string(),
        endpoint: endpoint
            .map(str::to_string)
            .or_else(|| cluster.endpoint().map(str::to_string))
            .ok_or_else(|| anyhow::anyhow!("cluster {name} has no endpoint yet"))?,
        certificate_authority: cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .unwrap_or_default()
            .to_string(),
        service_cidr: network
            .and_then(|n| n.service_ipv4_cidr().or(n.service_ipv6_cidr()))
            .unwrap_or("10.100.0.0/16")
            .to_string(),
    })
}

impl AwsCloud {
    /// The cloud of `cluster` in `region`. `kubernetes_version` (`1.34`) picks the EKS
    /// optimized AMIs an alias resolves to; only EC2NodeClass resolution reads it.
    pub fn new(
        config: &aws_config::SdkConfig,
        region: &str,
        cluster: ClusterInfo,
        kubernetes_version: &str,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<AwsCloud> {
        Ok(AwsCloud {
            ec2: aws_sdk_ec2::Client::new(config),
            iam: aws_sdk_iam::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
            pricing: pricing::pricing_client(config),
            region: region.to_string(),
            cluster,
            kubernetes_version: kubernetes_version.to_string(),
            estimates: Catalog::embedded()?,
            unavailable: Unavailable::default(),
            reservations: Reservations::default(),
            offerings: Revalidated::new(offerings::OFFERINGS_TTL, offerings::OFFERINGS_RETRY),
            class_types: ClassTypes::default(),
            templates: Mutex::new(BTreeMap::new()),
            metrics,
        })
    }
}

#[async_trait::async_trait]
impl CloudProvider for AwsCloud {
    async fn instance_types(
        &self,
        classes: &[Arc<EC2NodeClass>],
    ) -> Result<TypesOfClass, CloudError> {
        self.types_of_ready_classes(classes).await
    }

    async fn launch(
        &self,
        claim: &NodeClaim,
        class: &EC2NodeClass,
        overlays: &PoolOverlays,
    ) -> Result<(Launched, Arc<InstanceType>), CloudError> {
        let offerings = self.offerings().await?;
        self.refresh_reservations([class]).await;
        let types = overlays.apply(&self.types_for(&offerings, class, Instant::now()));
        self.launch_one(claim, class, &types).await
    }

    async fn find_launched(
        &self,
        claim: &str,
    ) -> Result<Option<(Launched, InstanceState)>, CloudError> {
        self.find_launched_for(claim).await
    }

    async fn instance_state(&self, provider_id: &str) -> Result<InstanceState, CloudError> {
        self.state_of(provider_id).await
    }

    async fn terminate(&self, provider_ids: &[String]) -> Result<(), CloudError> {
        self.terminate_all(provider_ids).await
    }

    async fn owned_instances(&self) -> Result<Vec<OwnedInstance>, CloudError> {
        self.owned().await
    }

    fn offering_unavailable(&self, instance_type: &str, zone: &str, capacity: CapacityType) {
        self.unavailable
            .mark(instance_type, zone, capacity, Instant::now());
    }

    async fn resolve(&self, class: &EC2NodeClass) -> Resolution {
        Resolution {
            subnets: resolve::subnets(self, class).await,
            security_groups: resolve::security_groups(self, class).await,
            amis: resolve::amis(self, class).await,
            instance_profile: resolve::instance_profile(self, class).await,
            capacity_reservations: resolve::capacity_reservations(self, class).await,
        }
    }

    async fn release(&self, class: &EC2NodeClass) -> Result<(), CloudError> {
        tracing::debug!(ec2nodeclass = %class.name_any(), "releasing what was made for the class");
        resolve::release(self, class).await
    }
}
