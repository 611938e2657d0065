//! The bootstrap engine: every AWS-side step observes the world, computes what the config
//! wants, and diffs the two into typed changes that `plan` prints, `apply` executes and `drift`
//! counts. There is no state file: the world, with jointer's ownership tags, is the state.

pub mod aws;
pub mod controller_identity;
pub mod discovery;
pub mod iam;
pub mod interruption;
pub mod names;
pub mod node_access;
pub mod node_role;
pub mod ownership;
pub mod permissions;
pub mod policy;
pub mod report;
pub mod run;

use anyhow::Result;
use serde::Serialize;

use crate::config::Config;
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
/// before the rules that target it and the policy that grants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    DiscoveryTags,
    NodeRole,
    NodeAccess,
    Interruption,
    ControllerIdentity,
}

impl Step {
    pub const APPLY_ORDER: [Step; 5] = [
        Step::DiscoveryTags,
        Step::NodeRole,
        Step::NodeAccess,
        Step::Interruption,
        Step::ControllerIdentity,
    ];

    /// Teardown: who uses a resource goes before it (reference §6: identity and access, then
    /// the rules and queue, then the roles, and the discovery tags last).
    pub const TEARDOWN_ORDER: [Step; 5] = [
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

/// The calls behind a change, per step.
#[derive(Debug, Clone)]
pub enum Action {
    Discovery(discovery::Action),
    Iam(iam::Action),
    NodeAccess(node_access::Action),
    Interruption(interruption::Action),
    ControllerIdentity(controller_identity::Action),
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

/// Everything a step needs: the config, the cluster, the clients.
pub struct Context {
    pub config: Config,
    pub names: Names,
    pub cluster: Cluster,
    pub aws: Clients,
    /// Take over resources with jointer's names that jointer did not create.
    pub adopt: bool,
    /// A rendered NodePool allows spot (the account then needs the spot service-linked role).
    pub spot_allowed: bool,
}

impl Context {
    pub async fn connect(config: Config, adopt: bool, spot_allowed: bool) -> Result<Context> {
        let aws = Clients::connect(&config.cluster.region).await;
        let cluster = Cluster::describe(&aws.eks, &config).await?;
        Ok(Context {
            names: Names::of(&config),
            config,
            cluster,
            aws,
            adopt,
            spot_allowed,
        })
    }

    pub fn tags(&self) -> std::collections::BTreeMap<String, String> {
        ownership::tags(&self.cluster.name)
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

/// Observes one step and diffs it against the goal.
pub async fn plan_step(ctx: &Context, step: Step, goal: Goal) -> Result<StepPlan> {
    match step {
        Step::DiscoveryTags => discovery::plan(ctx, goal).await,
        Step::NodeRole => node_role::plan(ctx, goal).await,
        Step::NodeAccess => node_access::plan(ctx, goal).await,
        Step::Interruption => interruption::plan(ctx, goal).await,
        Step::ControllerIdentity => controller_identity::plan(ctx, goal).await,
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
    }
}
