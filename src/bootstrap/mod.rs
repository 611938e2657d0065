//! The bootstrap engine. Every step, on the AWS side (`aws/`) and in the cluster
//! (`cluster/`), observes the world, computes what the config wants, and diffs the two into
//! typed changes that `plan` prints, `apply` executes and `drift` counts. There is no state
//! file: the world, with jointer's ownership tags, is the state. This module holds the types
//! every step shares and the dispatch over the steps; `context` what they run with, `run`
//! the four commands.

pub mod aws;
pub mod cluster;
pub mod context;
pub mod run;

use anyhow::Result;
use serde::Serialize;

use aws::{
    controller_identity, controller_image, discovery, iam, interruption, node_access, node_role,
    sweep,
};
use cluster::controller::{self as controller_install, helm};
use cluster::{crds, inventory, kube_objects, nodes};
pub use context::{open, Context, Options, Templates};

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
    ControllerImage,
    Crds,
    ControllerInstall,
    NodeObjects,
    Inventory,
    Sweep,
}

impl Step {
    pub const APPLY_ORDER: [Step; 10] = [
        Step::DiscoveryTags,
        Step::NodeRole,
        Step::NodeAccess,
        Step::Interruption,
        Step::ControllerIdentity,
        Step::ControllerImage,
        Step::Crds,
        Step::ControllerInstall,
        Step::NodeObjects,
        Step::Inventory,
    ];

    /// Teardown: NodePools and their nodes first, while the controller still runs to drain and
    /// terminate them; then the node classes (whose finalizer removes the instance profiles
    /// and launch templates), the controller, the CRDs (when asked) and the sweep of what the
    /// controller still left on AWS. Only then the controller's identity and the nodes'
    /// access, the rules and queue, the roles, and the discovery tags last, so nothing that
    /// is still running loses what it needs.
    pub const TEARDOWN_ORDER: [Step; 11] = [
        Step::NodeObjects,
        Step::ControllerInstall,
        Step::Crds,
        Step::Inventory,
        Step::Sweep,
        Step::ControllerImage,
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
            Step::ControllerImage => "controller image",
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
    ControllerImage(controller_image::Action),
    Kube(kube_objects::Action),
    Helm(helm::Action),
    Nodes(nodes::Action),
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

/// Observes one step and diffs it against the goal.
pub async fn plan_step(ctx: &Context, step: Step, goal: Goal) -> Result<StepPlan> {
    match step {
        Step::DiscoveryTags => discovery::plan(ctx, goal).await,
        Step::NodeRole => node_role::plan(ctx, goal).await,
        Step::NodeAccess => node_access::plan(ctx, goal).await,
        Step::Interruption => interruption::plan(ctx, goal).await,
        Step::ControllerIdentity => controller_identity::plan(ctx, goal).await,
        Step::ControllerImage => controller_image::plan(ctx, goal).await,
        Step::Crds => crds::plan(ctx, goal).await,
        Step::ControllerInstall => controller_install::plan(ctx, goal).await,
        Step::NodeObjects => nodes::plan(ctx, goal).await,
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
        Action::ControllerImage(a) => controller_image::execute(ctx, a).await,
        Action::Kube(a) => kube_objects::execute(ctx, a).await,
        Action::Helm(a) => helm::execute(ctx, a).await,
        Action::Nodes(a) => nodes::execute(ctx, a).await,
        Action::Sweep(a) => sweep::execute(ctx, a).await,
    }
}
