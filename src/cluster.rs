//! Read-only access to the live cluster for `explain`, `status` and teardown's hints: the
//! objects the controller decides from, the settings the installed controller runs with, and
//! what holds a NodePool's nodes. It takes clients, not a bootstrap context, and imports no
//! bootstrap step, so the commands and the steps both use it without depending on each other.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use jointer_controller::api::ec2nodeclass::EC2NodeClass;
use jointer_controller::api::labels::NODEPOOL;
use jointer_controller::api::nodeclaim::NodeClaim;
use jointer_controller::api::pod::Pod;
use jointer_controller::api::{CapacityBuffer, NodeOverlay, NodePool};
use jointer_controller::cloud::aws::{describe_cluster, AwsCloud};
use jointer_controller::core::buffer;
use jointer_controller::core::scheduling::InstanceType;
use jointer_controller::core::state::Snapshot;
use jointer_controller::metrics::Metrics;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, PodTemplate};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::ResourceExt;

use crate::input::config::{Controller, Install};

/// The bundled controller's Deployment (`templates/controller/deployment.yaml.j2`).
pub const BUNDLED_DEPLOYMENT: &str = "jointer-controller";
/// The Helm release of `controller.install: helm`; the chart names its Deployment after it.
pub const HELM_RELEASE: &str = "karpenter";

/// The namespace and name of the Deployment that runs the controller, by install mode (none
/// when it is installed some other way).
pub fn controller_deployment(controller: &Controller) -> Option<(String, String)> {
    let name = match controller.install {
        Install::Bundled => BUNDLED_DEPLOYMENT,
        Install::Helm => HELM_RELEASE,
        Install::None => return None,
    };
    Some((controller.namespace.clone(), name.to_string()))
}

/// Every object of a kind, in all namespaces.
pub async fn list_all<K>(client: &kube::Client) -> Result<Vec<Arc<K>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::all(client.clone());
    Ok(api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {}", K::plural(&())))?
        .items
        .into_iter()
        .map(Arc::new)
        .collect())
}

/// Like [`list_all`], but a kind whose CRD the cluster does not have (NodeOverlay on a
/// cluster installed before jointer knew it) is simply none of them.
async fn list_optional<K>(client: &kube::Client) -> Result<Vec<Arc<K>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::all(client.clone());
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items.into_iter().map(Arc::new).collect()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("listing {}", K::plural(&()))),
    }
}

/// CapacityBuffers and what they name; none when the CapacityBuffer CRD is not installed.
pub async fn buffer_sources(kube: &kube::Client) -> Result<buffer::Sources> {
    let buffers = match list_all::<CapacityBuffer>(kube).await {
        Ok(b) => b,
        Err(e) if is_not_found(&e) => Vec::new(),
        Err(e) => return Err(e),
    };
    if buffers.is_empty() {
        return Ok(buffer::Sources::default());
    }
    Ok(buffer::Sources {
        buffers,
        pod_templates: list_all::<PodTemplate>(kube).await?,
        deployments: list_all::<Deployment>(kube).await?,
        replicasets: list_all::<ReplicaSet>(kube).await?,
        statefulsets: list_all::<StatefulSet>(kube).await?,
    })
}

/// A list that failed because the kind is not served (its CRD is missing).
fn is_not_found(e: &anyhow::Error) -> bool {
    e.chain().any(
        |c| matches!(c.downcast_ref::<kube::Error>(), Some(kube::Error::Api(r)) if r.code == 404),
    )
}

pub type TypesOfClass = HashMap<String, Vec<Arc<InstanceType>>>;

/// The EKS cluster the live reads are about.
pub struct Eks<'a> {
    pub client: &'a aws_sdk_eks::Client,
    pub region: &'a str,
    pub name: &'a str,
}

/// The objects the controller decides from, and the instance types of each Ready class.
pub async fn cluster_state(kube: &kube::Client, eks: Eks<'_>) -> Result<(Snapshot, TypesOfClass)> {
    let snap = Snapshot {
        pods: list_all::<Pod>(kube).await?,
        nodes: list_all::<Node>(kube).await?,
        nodeclaims: list_all::<NodeClaim>(kube).await?,
        nodepools: list_all::<NodePool>(kube).await?,
        nodeclasses: list_all::<EC2NodeClass>(kube).await?,
        daemonsets: list_all::<DaemonSet>(kube).await?,
        pdbs: list_all::<PodDisruptionBudget>(kube).await?,
        nodeoverlays: list_optional::<NodeOverlay>(kube).await?,
        buffers: buffer_sources(kube).await?,
    };
    let config = jointer_controller::clients::aws_config(Some(eks.region)).await;
    let metrics = Arc::new(Metrics::new());
    let cluster = describe_cluster(eks.client, eks.name, None, &metrics).await?;
    let cloud = AwsCloud::new(&config, eks.region, cluster, "", metrics)?;
    let types_of_class =
        jointer_controller::cloud::CloudProvider::instance_types(&cloud, &snap.nodeclasses).await?;
    Ok((snap, types_of_class))
}

/// The disruption settings the controller decides with.
pub struct DisruptionSettings {
    pub settle: Duration,
    pub spot_to_spot: bool,
    pub policies: jointer_controller::core::scheduling::Policies,
    pub timeouts: jointer_controller::core::disruption::ConsolidationTimeouts,
}

/// A Deployment's first container's environment with literal values, as (name, value).
pub fn container_env(d: &Deployment) -> Vec<(String, String)> {
    d.spec
        .template
        .spec
        .as_ref()
        .and_then(|p| p.containers.first())
        .and_then(|c| c.env.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect()
}

/// The settings the installed bundled controller runs with (its Deployment's env), so
/// `explain node` agrees with it; the controller's defaults when it runs some other way.
pub async fn controller_settings(
    kube: &kube::Client,
    controller: &Controller,
) -> DisruptionSettings {
    use jointer_controller::settings::{seconds, DEFAULT_DISRUPTION_SETTLE};
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), &controller.namespace);
    let env = match deployments.get_opt(BUNDLED_DEPLOYMENT).await {
        Ok(Some(d)) => container_env(&d),
        _ => Vec::new(),
    };
    let value = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    let settle = value("DISRUPTION_SETTLE")
        .and_then(|v| seconds(v).ok())
        .or_else(|| seconds(DEFAULT_DISRUPTION_SETTLE).ok())
        .unwrap_or_default();
    fn parsed<T: clap::ValueEnum>(v: Option<&str>) -> Option<T> {
        v.and_then(|v| T::from_str(v, false).ok())
    }
    let timeout = |name: &str, default: std::time::Duration| {
        value(name).and_then(|v| seconds(v).ok()).unwrap_or(default)
    };
    let defaults = jointer_controller::core::disruption::ConsolidationTimeouts::default();
    DisruptionSettings {
        settle,
        spot_to_spot: value("SPOT_TO_SPOT_CONSOLIDATION") == Some("true"),
        policies: jointer_controller::core::scheduling::Policies {
            min_values: parsed(value("MIN_VALUES_POLICY")).unwrap_or_default(),
            preferences: parsed(value("PREFERENCE_POLICY")).unwrap_or_default(),
            ..Default::default()
        },
        timeouts: jointer_controller::core::disruption::ConsolidationTimeouts {
            multi_node: timeout("MULTI_NODE_CONSOLIDATION_TIMEOUT", defaults.multi_node),
            single_node: timeout("SINGLE_NODE_CONSOLIDATION_TIMEOUT", defaults.single_node),
        },
    }
}

/// What holds a NodePool's nodes: pods that will not leave them on their own (do-not-disrupt,
/// or a PodDisruptionBudget that allows no eviction now).
pub async fn holders(kube: &kube::Client, pool: &str) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(kube.clone());
    let nodes: BTreeSet<String> = nodes
        .list(&ListParams::default().labels(&format!("{NODEPOOL}={pool}")))
        .await?
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    let on_nodes: Vec<Pod> = list_all::<Pod>(kube)
        .await?
        .into_iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| nodes.contains(n))
        })
        .map(|p| (*p).clone())
        .collect();
    let pdbs = list_all::<PodDisruptionBudget>(kube).await?;
    Ok(jointer_controller::core::pods::holders(
        &on_nodes,
        &pdbs,
        Timestamp::now(),
    ))
}
