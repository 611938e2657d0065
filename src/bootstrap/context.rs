//! What every step runs with: the config, the names derived from it, the described EKS
//! cluster, the AWS and Kubernetes clients, the options of the run and where progress goes.
//! `open` builds it from the command line's inputs, refusing a kubeconfig that points at
//! another cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use jointer_controller::api::EC2NodeClass;
use jointer_controller::core::ami_family::Family;
use serde_json::Value;

use super::aws::clients::{Clients, Cluster};
use super::aws::names::Names;
use super::aws::ownership::Ownership;
use super::aws::permissions;
use super::cluster::kube_objects;
use crate::failure::Failure;
use crate::image::Image;
use crate::input::config::{Config, Identity, ImageSource, Install};
use crate::progress::Progress;

/// How a run behaves beyond the config.
#[derive(Debug, Clone)]
pub struct Options {
    /// Take over resources with jointer's names that jointer did not create.
    pub adopt: bool,
    /// Teardown also deletes the CRDs (and with them every object of their kinds).
    pub delete_crds: bool,
    /// How long to wait for nodes to drain, instances to terminate, the controller to run.
    pub timeout: Duration,
    /// Teardown without a running controller: release the NodePools' NodeClaims and nodes
    /// and the classes' finalizers itself (the sweep then terminates their instances).
    pub force: bool,
}

/// What the command line adds to the config.
pub struct Inputs {
    pub config: Config,
    /// The config file's directory (a local Helm chart is relative to it).
    pub config_dir: PathBuf,
    /// The rendered, validated node objects; empty for teardown, which needs none.
    pub node_objects: Vec<Value>,
    /// A rendered NodePool allows spot (the account then needs the spot service-linked role).
    pub spot_allowed: bool,
    /// A kubeconfig context other than the current one.
    pub kube_context: Option<String>,
    pub options: Options,
    /// Where waits and progress through a plan are reported.
    pub progress: Box<dyn Progress>,
}

/// Everything a step needs: the config, the cluster, the clients.
pub struct Context {
    pub config: Config,
    pub config_dir: PathBuf,
    pub names: Names,
    pub cluster: Cluster,
    pub aws: Clients,
    pub kube: kube::Client,
    pub kube_context: Option<String>,
    /// Kubernetes kinds discovered so far (see `kube_objects::api_for`).
    pub kinds: std::sync::Mutex<std::collections::HashMap<String, kube::discovery::ApiResource>>,
    pub node_objects: Vec<Value>,
    pub spot_allowed: bool,
    pub options: Options,
    /// Whose resources this run may change (the cluster's; with `--adopt`, also unowned ones).
    pub ownership: Ownership,
    pub progress: Box<dyn Progress>,
    /// The controller image this run built, once a step asked for it.
    built_image: std::sync::OnceLock<Image>,
    /// The chart's CRDs with `controller.install: helm`, read once per run (`helm show crds`
    /// is a subprocess, and the CRD and inventory steps both ask).
    chart_crds: std::sync::OnceLock<Vec<serde_json::Value>>,
}

impl Context {
    pub async fn connect(inputs: Inputs) -> Result<Context> {
        let config = inputs.config;
        let aws = Clients::connect(&config.cluster.region).await;
        let cluster = Cluster::describe(&aws.eks, &config).await?;
        let kube = kube_client(&cluster, inputs.kube_context.as_deref()).await?;
        let labels = kube_objects::ownership_labels(&cluster.name);
        Ok(Context {
            ownership: Ownership {
                cluster: cluster.name.clone(),
                adopt: inputs.options.adopt,
            },
            names: Names::of(&config),
            node_objects: inputs
                .node_objects
                .into_iter()
                .map(|o| kube_objects::with_labels(o, &labels))
                .collect(),
            config,
            config_dir: inputs.config_dir,
            cluster,
            aws,
            kube,
            kube_context: inputs.kube_context,
            kinds: Default::default(),
            spot_allowed: inputs.spot_allowed,
            options: inputs.options,
            progress: inputs.progress,
            built_image: std::sync::OnceLock::new(),
            chart_crds: std::sync::OnceLock::new(),
        })
    }

    pub fn adopt(&self) -> bool {
        self.ownership.adopt
    }

    pub fn controller_role_arn(&self) -> String {
        format!(
            "arn:{}:iam::{}:role/{}",
            self.cluster.partition.name(),
            self.cluster.account,
            self.names.controller_role
        )
    }

    /// The role the controller's service account names in its IRSA annotation; none with Pod
    /// Identity, which associates the role on the EKS side instead.
    pub fn irsa_role_arn(&self) -> Option<String> {
        match self.config.identity {
            Identity::Irsa => Some(self.controller_role_arn()),
            Identity::PodIdentity => None,
        }
    }

    /// The bundled controller runs an image jointer builds (not a published one).
    pub fn builds_controller_image(&self) -> bool {
        let c = &self.config.controller;
        c.install == Install::Bundled && c.image.source() == ImageSource::Built
    }

    /// The ECR repository a built image goes to (or went to, when one is no longer built) and
    /// how many images it keeps.
    pub fn ecr_repository(&self) -> (String, u32) {
        self.config.controller.image.ecr_target(&self.cluster.name)
    }

    /// The controller image this jointer builds from its workspace (built once per run).
    pub fn controller_image(&self) -> Result<&Image> {
        if let Some(image) = self.built_image.get() {
            return Ok(image);
        }
        let image = tokio::task::block_in_place(|| crate::image::build(self.progress.as_ref()))
            .context("building the controller image")?;
        Ok(self.built_image.get_or_init(|| image))
    }

    /// The CRDs the configured chart carries (see `helm::chart_crds`), read once per run.
    pub fn chart_crds(&self) -> Result<&[serde_json::Value]> {
        if let Some(crds) = self.chart_crds.get() {
            return Ok(crds);
        }
        let crds = crate::bootstrap::cluster::controller::helm::chart_crds(self)?;
        Ok(self.chart_crds.get_or_init(|| crds))
    }

    /// What the controller Deployment runs: the published `repository:tag`, or the ECR
    /// repository's URI pinned to the built image's digest.
    pub fn controller_image_reference(&self) -> Result<String> {
        match self.config.controller.image.source() {
            ImageSource::Published(reference) => Ok(reference),
            ImageSource::Built => Ok(format!(
                "{}/{}@{}",
                self.cluster.ecr_registry(),
                self.ecr_repository().0,
                self.controller_image()?.digest()
            )),
        }
    }

    /// The EKS cluster, for the live reads in `cluster`.
    pub fn eks(&self) -> crate::cluster::Eks<'_> {
        crate::cluster::Eks {
            client: &self.aws.eks,
            region: &self.cluster.region,
            name: &self.cluster.name,
        }
    }

    /// The rendered EC2NodeClasses (validated before any call, so they deserialize).
    fn node_classes(&self) -> impl Iterator<Item = EC2NodeClass> + '_ {
        self.node_objects
            .iter()
            .filter(|o| o["kind"] == "EC2NodeClass")
            .filter_map(|o| serde_json::from_value(o.clone()).ok())
    }

    /// A rendered class runs Windows nodes (node access then admits Windows nodes too).
    pub fn windows_nodes(&self) -> bool {
        self.node_classes().any(|c| Family::of(&c).is_windows())
    }

    /// The users' own SSM parameters that rendered classes select AMIs by.
    fn ssm_parameters(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .node_classes()
            .flat_map(|c| c.spec.ami_selector_terms)
            .filter_map(|t| t.ssm_parameter)
            .filter(|n| !n.starts_with("/aws/service/"))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// What the controller policies name.
    pub fn scope(&self) -> permissions::Scope {
        permissions::Scope {
            partition: self.cluster.partition,
            region: self.cluster.region.clone(),
            account: self.cluster.account.clone(),
            cluster: self.cluster.name.clone(),
            node_role_name: self.names.node_role.clone(),
            queue_name: self
                .config
                .interruption
                .enabled
                .then(|| self.names.queue.clone()),
            ssm_parameters: self.ssm_parameters(),
        }
    }
}

/// Which inputs a command renders: teardown, status and explain skip the templates, so a
/// broken template never keeps anyone from removing what was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Templates {
    Render,
    Skip,
}

/// Reads and validates the config (and the templates, when asked) before any AWS call; then
/// describes the cluster once and connects to it, on the runtime the command then runs on.
pub fn open(
    file: &Path,
    kube_context: Option<String>,
    templates: Templates,
    options: Options,
    progress: Box<dyn Progress>,
) -> Result<(tokio::runtime::Runtime, Context), Failure> {
    let loaded = crate::input::config::load(file)?;
    let (node_objects, spot_allowed) = match templates {
        Templates::Render => {
            let nodes = crate::input::render::node_objects(&loaded)?;
            let objects = nodes
                .objects
                .iter()
                .map(|o| serde_json::to_value(&o.object))
                .collect::<Result<Vec<_>, _>>()?;
            (objects, crate::input::lint::spot_allowed(&nodes))
        }
        Templates::Skip => (Vec::new(), false),
    };
    let runtime = tokio::runtime::Runtime::new().map_err(anyhow::Error::from)?;
    let inputs = Inputs {
        config_dir: loaded.base_dir().to_path_buf(),
        config: loaded.config,
        node_objects,
        spot_allowed,
        kube_context,
        options,
        progress,
    };
    let ctx = runtime.block_on(Context::connect(inputs))?;
    Ok((runtime, ctx))
}

/// The Kubernetes client from the kubeconfig, refused when it points at another cluster than
/// the EKS cluster of the config: applying one cluster's setup to another is the mistake a
/// wrong current context makes easy.
async fn kube_client(cluster: &Cluster, context: Option<&str>) -> Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let mut config = match kube::Config::from_kubeconfig(&options).await {
        Ok(config) => config,
        Err(_) if context.is_none() => kube::Config::infer()
            .await
            .context("no Kubernetes access: set KUBECONFIG (e.g. `aws eks update-kubeconfig`)")?,
        Err(e) => return Err(e).context("reading the kubeconfig context given with --context"),
    };
    let server = config.cluster_url.to_string();
    if !same_endpoint(&server, &cluster.endpoint) {
        bail!(
            "the kubeconfig context points at {server}, but EKS cluster {} is served at {}: switch context (or pass --context) before running jointer",
            cluster.name,
            cluster.endpoint
        );
    }
    // Tells jointer's requests apart in the API server's audit log.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("jointer/", env!("CARGO_PKG_VERSION"))),
    ));
    kube::Client::try_from(config).context("building the Kubernetes client")
}

fn same_endpoint(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.trim_end_matches('/').to_ascii_lowercase();
    norm(a) == norm(b)
}
