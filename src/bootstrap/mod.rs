//! The bootstrap engine: every AWS-side step observes the world, computes what the config
//! wants, and diffs the two into typed changes that `plan` prints, `apply` executes and `drift`
//! counts. There is no state file: the world, with jointer's ownership tags, is the state.

pub mod aws;
pub mod cluster_controller;
pub mod cluster_crds;
pub mod cluster_nodes;
pub mod controller_identity;
pub mod discovery;
pub mod helm;
pub mod iam;
pub mod interruption;
pub mod inventory;
pub mod kube_objects;
pub mod names;
pub mod node_access;
pub mod node_role;
pub mod ownership;
pub mod permissions;
pub mod policy;
pub mod propagation;
pub mod run;
pub mod sweep;
pub mod waits;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use serde::Serialize;
use serde_json::Value;

use crate::failure::Failure;
use crate::input::config::{Config, Identity};
use crate::progress::Progress;
use aws::{Clients, Cluster};
use names::Names;

/// What a run wants of the world: converge on the config, or remove everything jointer owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    Converge,
    Remove,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Create,
    Update,
    Delete,
}

impl Op {
    pub fn symbol(self) -> char {
        match self {
            Op::Create => '+',
            Op::Update => '~',
            Op::Delete => '-',
        }
    }
}

/// The bootstrap steps, in the order `apply` runs them: discovery tags first (cheap, and what
/// `drift` reports first), the node role before the controller policy that names it, the queue
/// before the rules that target it and the policy that grants it; then the cluster side, CRDs
/// before the objects of their kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    DiscoveryTags,
    NodeRole,
    NodeAccess,
    Interruption,
    ControllerIdentity,
    Crds,
    ControllerInstall,
    NodeObjects,
    Inventory,
    Sweep,
}

impl Step {
    pub const APPLY_ORDER: [Step; 9] = [
        Step::DiscoveryTags,
        Step::NodeRole,
        Step::NodeAccess,
        Step::Interruption,
        Step::ControllerIdentity,
        Step::Crds,
        Step::ControllerInstall,
        Step::NodeObjects,
        Step::Inventory,
    ];

    /// Teardown (reference §6): NodePools and their nodes, node classes, the controller, CRDs
    /// (when asked), the sweep of what the controller left on AWS; then identity and access,
    /// the rules and queue, the roles, and the discovery tags last.
    pub const TEARDOWN_ORDER: [Step; 10] = [
        Step::NodeObjects,
        Step::ControllerInstall,
        Step::Crds,
        Step::Inventory,
        Step::Sweep,
        Step::ControllerIdentity,
        Step::NodeAccess,
        Step::Interruption,
        Step::NodeRole,
        Step::DiscoveryTags,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Step::DiscoveryTags => "discovery tags",
            Step::NodeRole => "node role",
            Step::NodeAccess => "node access",
            Step::Interruption => "interruption queue and rules",
            Step::ControllerIdentity => "controller identity",
            Step::Crds => "CRDs",
            Step::ControllerInstall => "controller install",
            Step::NodeObjects => "node classes and pools",
            Step::Inventory => "inventory",
            Step::Sweep => "sweep of controller-made AWS resources",
        }
    }
}

/// One difference between the world and the config, and the call(s) that remove it.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub op: Op,
    /// The resource, as a person finds it in the console: `iam role KarpenterNodeRole-demo`.
    pub resource: String,
    /// The field that differs, when the resource exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What it is and what it should be.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip)]
    pub action: Action,
}

impl Change {
    pub fn new(op: Op, resource: impl Into<String>, action: impl Into<Action>) -> Change {
        Change {
            op,
            resource: resource.into(),
            field: None,
            detail: None,
            action: action.into(),
        }
    }

    pub fn field(mut self, field: impl Into<String>) -> Change {
        self.field = Some(field.into());
        self
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Change {
        self.detail = Some(detail.into());
        self
    }
}

/// One line of a change, the same in the plan, the progress and errors:
/// `+ iam role X  attached policy: AmazonEKSWorkerNodePolicy`.
impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.op.symbol(), self.resource)?;
        match (&self.field, &self.detail) {
            (Some(field), Some(d)) => write!(f, "  {field}: {d}"),
            (Some(field), None) => write!(f, "  {field}"),
            (None, Some(d)) => write!(f, "  ({d})"),
            (None, None) => Ok(()),
        }
    }
}

/// Counts of changes by kind.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Counts {
    pub create: usize,
    pub update: usize,
    pub delete: usize,
}

impl Counts {
    pub fn of(steps: &[StepPlan]) -> Counts {
        let mut c = Counts::default();
        for change in steps.iter().flat_map(|s| &s.changes) {
            match change.op {
                Op::Create => c.create += 1,
                Op::Update => c.update += 1,
                Op::Delete => c.delete += 1,
            }
        }
        c
    }

    pub fn total(&self) -> usize {
        self.create + self.update + self.delete
    }
}

/// The calls behind a change, per step.
#[derive(Debug, Clone)]
pub enum Action {
    Discovery(discovery::Action),
    Iam(iam::Action),
    NodeAccess(node_access::Action),
    Interruption(interruption::Action),
    ControllerIdentity(controller_identity::Action),
    Kube(kube_objects::Action),
    Helm(helm::Action),
    Nodes(cluster_nodes::Action),
    Sweep(sweep::Action),
}

/// One step's changes and the warnings its observation raised.
#[derive(Debug, Clone, Serialize)]
pub struct StepPlan {
    pub step: Step,
    pub changes: Vec<Change>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl StepPlan {
    pub fn new(step: Step) -> StepPlan {
        StepPlan {
            step,
            changes: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// How a run behaves beyond the config.
#[derive(Debug, Clone)]
pub struct Options {
    /// Take over resources with jointer's names that jointer did not create.
    pub adopt: bool,
    /// Teardown also deletes the CRDs (and with them every object of their kinds).
    pub delete_crds: bool,
    /// How long to wait for nodes to drain, instances to terminate, the controller to run.
    pub timeout: Duration,
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
    pub progress: Box<dyn Progress>,
}

impl Context {
    pub async fn connect(inputs: Inputs) -> Result<Context> {
        let config = inputs.config;
        let aws = Clients::connect(&config.cluster.region).await;
        let cluster = Cluster::describe(&aws.eks, &config).await?;
        let kube = kube_client(&cluster, inputs.kube_context.as_deref()).await?;
        let labels = kube_objects::ownership_labels(&cluster.name);
        Ok(Context {
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
        })
    }

    pub fn adopt(&self) -> bool {
        self.options.adopt
    }

    pub fn tags(&self) -> std::collections::BTreeMap<String, String> {
        ownership::tags(&self.cluster.name)
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

    /// The EKS cluster, for the live reads in `cluster`.
    pub fn eks(&self) -> crate::cluster::Eks<'_> {
        crate::cluster::Eks {
            client: &self.aws.eks,
            region: &self.cluster.region,
            name: &self.cluster.name,
        }
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

/// Observes one step and diffs it against the goal.
pub async fn plan_step(ctx: &Context, step: Step, goal: Goal) -> Result<StepPlan> {
    match step {
        Step::DiscoveryTags => discovery::plan(ctx, goal).await,
        Step::NodeRole => node_role::plan(ctx, goal).await,
        Step::NodeAccess => node_access::plan(ctx, goal).await,
        Step::Interruption => interruption::plan(ctx, goal).await,
        Step::ControllerIdentity => controller_identity::plan(ctx, goal).await,
        Step::Crds => cluster_crds::plan(ctx, goal).await,
        Step::ControllerInstall => cluster_controller::plan(ctx, goal).await,
        Step::NodeObjects => cluster_nodes::plan(ctx, goal).await,
        Step::Inventory => inventory::plan(ctx, goal).await,
        Step::Sweep => sweep::plan(ctx, goal).await,
    }
}

/// Makes the calls behind one change.
pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    match action {
        Action::Discovery(a) => discovery::execute(ctx, a).await,
        Action::Iam(a) => iam::execute(ctx, a).await,
        Action::NodeAccess(a) => node_access::execute(ctx, a).await,
        Action::Interruption(a) => interruption::execute(ctx, a).await,
        Action::ControllerIdentity(a) => controller_identity::execute(ctx, a).await,
        Action::Kube(a) => kube_objects::execute(ctx, a).await,
        Action::Helm(a) => helm::execute(ctx, a).await,
        Action::Nodes(a) => cluster_nodes::execute(ctx, a).await,
        Action::Sweep(a) => sweep::execute(ctx, a).await,
    }
}
