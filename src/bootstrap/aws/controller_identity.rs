//! The controller's identity: its IAM role with the scoped permission set (one managed
//! policy per group), trusted either through EKS Pod Identity (an association for the
//! controller's service account; needs the eks-pod-identity-agent add-on) or through IRSA
//! (the cluster's IAM OIDC provider, created when missing).

use std::collections::BTreeMap;

use anyhow::{bail, Result};

use super::clients::{code, failed, gone_ok, tag_eks_resource};
use super::iam::{self, owned, DesiredRole};
use super::ownership::Ownership;
use super::permissions::{controller_policies, irsa_trust, pod_identity_trust};
use super::policy::Document;
use super::propagation::retry_until_visible;
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
use crate::input::config::Identity;

/// Every policy group there may be, so one no longer wanted (interruption switched off) is
/// found and removed.
const ALL_GROUPS: [&str; 5] = [
    "NodeLifecycle",
    "IAMIntegration",
    "EKSIntegration",
    "ResourceDiscovery",
    "Interruption",
];
const POD_IDENTITY_AGENT: &str = "eks-pod-identity-agent";
/// The root CA thumbprint AWS documents for EKS OIDC endpoints (IAM no longer checks it for
/// them, but the API still wants one).
const OIDC_THUMBPRINT: &str = "9e99a48a9960b14926bb7f3b02e22da2b0ab7280";

#[derive(Debug, Clone)]
pub enum Action {
    CreateAssociation {
        role_arn: String,
        tags: BTreeMap<String, String>,
    },
    UpdateAssociation {
        id: String,
        role_arn: String,
    },
    TagAssociation {
        arn: String,
        tags: BTreeMap<String, String>,
    },
    DeleteAssociation {
        id: String,
    },
    CreateOidcProvider {
        url: String,
        tags: BTreeMap<String, String>,
    },
    DeleteOidcProvider {
        arn: String,
    },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::ControllerIdentity(a)
    }
}

/// A pod identity association as EKS holds it.
#[derive(Debug, Clone)]
pub struct Association {
    pub id: String,
    pub arn: String,
    pub role_arn: String,
    pub tags: BTreeMap<String, String>,
}

fn policy_arn(ctx: &Context, group: &str) -> String {
    let c = &ctx.cluster;
    format!(
        "arn:{}:iam::{}:policy/{}",
        c.partition.name(),
        c.account,
        ctx.names.controller_policy(group)
    )
}

fn oidc_provider_arn(ctx: &Context, host: &str) -> String {
    let c = &ctx.cluster;
    format!(
        "arn:{}:iam::{}:oidc-provider/{host}",
        c.partition.name(),
        c.account
    )
}

/// One policy group: its name and ARN, and the document it should hold (`None`: the group
/// is not wanted, e.g. `Interruption` with interruption handling off).
#[derive(Debug, Clone)]
pub struct WantedPolicy {
    pub group: &'static str,
    pub name: String,
    pub arn: String,
    pub document: Option<Document>,
}

/// What the config wants of the controller's identity.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub identity: Identity,
    pub cluster: String,
    /// Every group of `ALL_GROUPS`, in that order.
    pub policies: Vec<WantedPolicy>,
    pub role_name: String,
    pub role_arn: String,
    /// The wanted policies' ARNs, in the order they are attached.
    pub attached: Vec<String>,
    /// The cluster's OIDC issuer host and its IAM provider's ARN (IRSA trusts it).
    pub oidc_host: String,
    pub oidc_provider_arn: String,
    pub namespace: String,
    pub service_account: String,
}

fn wanted(ctx: &Context) -> Wanted {
    let documents = controller_policies(&ctx.scope());
    let oidc_host = ctx.cluster.oidc_host().unwrap_or_default();
    Wanted {
        identity: ctx.config.identity,
        cluster: ctx.cluster.name.clone(),
        policies: ALL_GROUPS
            .iter()
            .map(|group| WantedPolicy {
                group,
                name: ctx.names.controller_policy(group),
                arn: policy_arn(ctx, group),
                document: documents
                    .iter()
                    .find(|p| p.group == *group)
                    .map(|p| p.document.clone()),
            })
            .collect(),
        role_name: ctx.names.controller_role.clone(),
        role_arn: ctx.controller_role_arn(),
        attached: documents.iter().map(|p| policy_arn(ctx, p.group)).collect(),
        oidc_provider_arn: oidc_provider_arn(ctx, &oidc_host),
        oidc_host,
        namespace: ctx.config.controller.namespace.clone(),
        service_account: ctx.config.controller.service_account_name(),
    }
}

/// The policies (in `ALL_GROUPS` order), role, association and OIDC provider as AWS holds
/// them.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub policies: Vec<Option<iam::Policy>>,
    pub role: Option<iam::Role>,
    pub association: Option<Association>,
    /// The OIDC provider's ARN and tags.
    pub oidc: Option<(String, BTreeMap<String, String>)>,
}

async fn observe(ctx: &Context, wanted: &Wanted) -> Result<Observed> {
    let mut policies = Vec::new();
    for p in &wanted.policies {
        policies.push(iam::get_policy(ctx, &p.arn).await?);
    }
    let role = iam::get_role(ctx, &wanted.role_name).await?;
    let association = get_association(ctx).await?;
    let oidc = match ctx.cluster.oidc_host() {
        Some(host) => get_oidc_provider(ctx, &host).await?,
        None => None,
    };
    Ok(Observed {
        policies,
        role,
        association,
        oidc,
    })
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    if goal == Goal::Converge {
        check_prerequisites(ctx, ctx.config.identity).await?;
    }
    let wanted = wanted(ctx);
    let observed = observe(ctx, &wanted).await?;
    diff(&wanted, &observed, &ctx.ownership, goal)
}

/// The pure diff: policies first (creating the role attaches them), then the role and its
/// trust, then the association; on removal the reverse. A role, policy or association with
/// jointer's name that jointer does not own is an error unless adopting.
pub fn diff(
    wanted: &Wanted,
    observed: &Observed,
    ours: &Ownership,
    goal: Goal,
) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::ControllerIdentity);
    let role = observed.role.as_ref();
    // A policy observation missing from the list counts as "not there".
    let policies = wanted
        .policies
        .iter()
        .enumerate()
        .map(|(i, p)| (p, observed.policies.get(i).and_then(Option::as_ref)));
    match goal {
        Goal::Converge => {
            for (p, observed) in policies {
                match &p.document {
                    Some(document) => iam::converge_policy(
                        ours,
                        &p.name,
                        &p.arn,
                        &format!(
                            "jointer controller permissions for EKS cluster {}: {}",
                            wanted.cluster, p.group
                        ),
                        document,
                        observed,
                        &mut plan.changes,
                    )?,
                    None => {
                        // Off the role first, then gone: a policy deleted while attached
                        // leaves the role undeletable in some IAM implementations.
                        if let Some(role) = role.filter(|r| r.attached.contains(&p.arn)) {
                            plan.changes.push(iam::detach_change(&role.name, &p.arn));
                        }
                        if let Some(observed) = observed {
                            iam::remove_policy(ours, &p.name, observed, &mut plan.changes);
                        }
                    }
                }
            }
            let trust = match wanted.identity {
                Identity::PodIdentity => pod_identity_trust(),
                Identity::Irsa => {
                    let host = &wanted.oidc_host;
                    if observed.oidc.is_none() {
                        plan.changes.push(
                            Change::new(
                                Op::Create,
                                format!("iam oidc provider {host}"),
                                Action::CreateOidcProvider {
                                    url: format!("https://{host}"),
                                    tags: ours.tags(),
                                },
                            )
                            .detail("audience sts.amazonaws.com"),
                        );
                    }
                    irsa_trust(
                        &wanted.oidc_provider_arn,
                        host,
                        &wanted.namespace,
                        &wanted.service_account,
                    )
                }
            };
            let desired_role = DesiredRole {
                name: wanted.role_name.clone(),
                description: format!("jointer controller for EKS cluster {}", wanted.cluster),
                trust,
                managed_policies: wanted.attached.clone(),
            };
            iam::converge_role(
                ours,
                &desired_role,
                role,
                "remove or rename that role",
                &mut plan.changes,
            )?;
            converge_association(wanted, ours, observed.association.as_ref(), &mut plan)?;
        }
        Goal::Remove => removal(wanted, observed, ours, &mut plan),
    }
    Ok(plan)
}

/// What goes on teardown, of what jointer owns: the association, the role (with its
/// attachments), the policies, and the OIDC provider it created.
fn removal(wanted: &Wanted, observed: &Observed, ours: &Ownership, plan: &mut StepPlan) {
    if let Some(a) = observed
        .association
        .as_ref()
        .filter(|a| owned(ours, &a.tags))
    {
        plan.changes.push(association_delete(wanted, a));
    }
    if let Some(role) = &observed.role {
        iam::remove_role(ours, role, &mut plan.changes);
    }
    for (p, policy) in wanted.policies.iter().zip(&observed.policies) {
        if let Some(policy) = policy {
            iam::remove_policy(ours, &p.name, policy, &mut plan.changes);
        }
    }
    if let Some((arn, _)) = observed.oidc.as_ref().filter(|(_, tags)| owned(ours, tags)) {
        plan.changes.push(
            Change::new(
                Op::Delete,
                format!(
                    "iam oidc provider {}",
                    arn.rsplit_once("oidc-provider/")
                        .map_or(arn.as_str(), |(_, h)| h)
                ),
                Action::DeleteOidcProvider { arn: arn.clone() },
            )
            .detail("created by jointer; IRSA roles of this cluster stop working"),
        );
    }
}

fn association_resource(wanted: &Wanted) -> String {
    format!(
        "eks pod identity association {}/{}",
        wanted.namespace, wanted.service_account
    )
}

fn association_delete(wanted: &Wanted, a: &Association) -> Change {
    Change::new(
        Op::Delete,
        association_resource(wanted),
        Action::DeleteAssociation { id: a.id.clone() },
    )
}

fn converge_association(
    wanted: &Wanted,
    ours: &Ownership,
    association: Option<&Association>,
    plan: &mut StepPlan,
) -> Result<()> {
    let resource = association_resource(wanted);
    let want = &wanted.role_arn;
    match (wanted.identity, association) {
        (Identity::PodIdentity, None) => plan.changes.push(
            Change::new(
                Op::Create,
                &resource,
                Action::CreateAssociation {
                    role_arn: want.clone(),
                    tags: ours.tags(),
                },
            )
            .detail(want),
        ),
        (Identity::PodIdentity, Some(a)) => {
            iam::adopt_or_refuse(
                ours,
                &resource,
                &a.tags,
                "delete that association or set controller.serviceAccount",
                &mut plan.changes,
                || {
                    Action::TagAssociation {
                        arn: a.arn.clone(),
                        tags: ours.tags(),
                    }
                    .into()
                },
            )?;
            if &a.role_arn != want {
                plan.changes.push(
                    Change::new(
                        Op::Update,
                        &resource,
                        Action::UpdateAssociation {
                            id: a.id.clone(),
                            role_arn: want.clone(),
                        },
                    )
                    .field("roleArn")
                    .detail(format!("{} → {want}", a.role_arn)),
                );
            }
        }
        // Switched to IRSA: the association jointer made would shadow the web identity.
        (Identity::Irsa, Some(a)) if owned(ours, &a.tags) => {
            plan.changes.push(association_delete(wanted, a));
        }
        (Identity::Irsa, _) => {}
    }
    Ok(())
}

/// Checked before any write: what the chosen identity needs from the cluster.
async fn check_prerequisites(ctx: &Context, identity: Identity) -> Result<()> {
    let cluster = &ctx.cluster.name;
    match identity {
        Identity::PodIdentity => {
            match ctx
                .aws
                .eks
                .describe_addon()
                .cluster_name(cluster)
                .addon_name(POD_IDENTITY_AGENT)
                .send()
                .await
            {
                Ok(_) => Ok(()),
                Err(e) if code(&e) == Some("ResourceNotFoundException") => bail!(
                    "identity: pod-identity needs the {POD_IDENTITY_AGENT} add-on, which cluster {cluster} does not have: install it (aws eks create-addon --cluster-name {cluster} --addon-name {POD_IDENTITY_AGENT}) or set identity: irsa"
                ),
                Err(e) => Err(failed(
                    &format!("eks:DescribeAddon {POD_IDENTITY_AGENT} on {cluster}"),
                    e,
                )),
            }
        }
        Identity::Irsa if ctx.cluster.oidc_issuer.is_none() => bail!(
            "identity: irsa needs the cluster's OIDC issuer, and cluster {cluster} has none: set identity: pod-identity"
        ),
        Identity::Irsa => Ok(()),
    }
}

async fn get_association(ctx: &Context) -> Result<Option<Association>> {
    let eks = &ctx.aws.eks;
    let cluster = &ctx.cluster.name;
    let sa = ctx.config.controller.service_account_name();
    let listed = eks
        .list_pod_identity_associations()
        .cluster_name(cluster)
        .namespace(&ctx.config.controller.namespace)
        .service_account(&sa)
        .send()
        .await
        .map_err(|e| failed("eks:ListPodIdentityAssociations", e))?;
    let Some(id) = listed
        .associations()
        .first()
        .and_then(|a| a.association_id.clone())
    else {
        return Ok(None);
    };
    let a = eks
        .describe_pod_identity_association()
        .cluster_name(cluster)
        .association_id(&id)
        .send()
        .await
        .map_err(|e| failed(&format!("eks:DescribePodIdentityAssociation {id}"), e))?
        .association;
    Ok(a.map(|a| Association {
        id,
        arn: a.association_arn.clone().unwrap_or_default(),
        role_arn: a.role_arn.clone().unwrap_or_default(),
        tags: a.tags.clone().unwrap_or_default().into_iter().collect(),
    }))
}

async fn get_oidc_provider(
    ctx: &Context,
    host: &str,
) -> Result<Option<(String, BTreeMap<String, String>)>> {
    let arn = oidc_provider_arn(ctx, host);
    match ctx
        .aws
        .iam
        .get_open_id_connect_provider()
        .open_id_connect_provider_arn(&arn)
        .send()
        .await
    {
        Ok(out) => Ok(Some((
            arn,
            out.tags()
                .iter()
                .map(|t| (t.key().to_string(), t.value().to_string()))
                .collect(),
        ))),
        Err(e) if code(&e) == Some("NoSuchEntity") => Ok(None),
        Err(e) => Err(failed(&format!("iam:GetOpenIDConnectProvider {arn}"), e)),
    }
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    let eks = &ctx.aws.eks;
    let cluster = &ctx.cluster.name;
    match action {
        Action::CreateAssociation { role_arn, tags } => {
            // The controller role was most likely created a moment ago.
            retry_until_visible(&*ctx.progress, role_arn, || {
                eks.create_pod_identity_association()
                    .cluster_name(cluster)
                    .namespace(&ctx.config.controller.namespace)
                    .service_account(ctx.config.controller.service_account_name())
                    .role_arn(role_arn)
                    .set_tags(Some(tags.clone().into_iter().collect()))
                    .send()
            })
            .await
            .map_err(|e| failed("eks:CreatePodIdentityAssociation", e))?;
        }
        Action::UpdateAssociation { id, role_arn } => {
            retry_until_visible(&*ctx.progress, role_arn, || {
                eks.update_pod_identity_association()
                    .cluster_name(cluster)
                    .association_id(id)
                    .role_arn(role_arn)
                    .send()
            })
            .await
            .map_err(|e| failed(&format!("eks:UpdatePodIdentityAssociation {id}"), e))?;
        }
        Action::TagAssociation { arn, tags } => tag_eks_resource(eks, arn, tags).await?,
        Action::DeleteAssociation { id } => gone_ok(
            eks.delete_pod_identity_association()
                .cluster_name(cluster)
                .association_id(id)
                .send()
                .await,
            &["ResourceNotFoundException"],
            &format!("eks:DeletePodIdentityAssociation {id}"),
        )?,
        Action::CreateOidcProvider { url, tags } => {
            ctx.aws
                .iam
                .create_open_id_connect_provider()
                .url(url)
                .client_id_list("sts.amazonaws.com")
                .thumbprint_list(OIDC_THUMBPRINT)
                .set_tags(Some(iam::iam_tags(tags)))
                .send()
                .await
                .map_err(|e| failed(&format!("iam:CreateOpenIDConnectProvider {url}"), e))?;
        }
        Action::DeleteOidcProvider { arn } => gone_ok(
            ctx.aws
                .iam
                .delete_open_id_connect_provider()
                .open_id_connect_provider_arn(arn)
                .send()
                .await,
            &["NoSuchEntity"],
            &format!("iam:DeleteOpenIDConnectProvider {arn}"),
        )?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::aws::policy::Statement;

    const ROLE_ARN: &str = "arn:aws:iam::1:role/KarpenterController-demo";

    fn ours(adopt: bool) -> Ownership {
        Ownership {
            cluster: "demo".into(),
            adopt,
        }
    }

    fn document(action: &str) -> Document {
        Document::new(vec![Statement::allow("Sid", &[action], vec!["*".into()])])
    }

    fn wanted(identity: Identity) -> Wanted {
        let policies: Vec<WantedPolicy> = ALL_GROUPS
            .iter()
            .map(|group| WantedPolicy {
                group,
                name: format!("Karpenter-demo-{group}"),
                arn: format!("arn:aws:iam::1:policy/Karpenter-demo-{group}"),
                // Interruption handling off: that group is not wanted.
                document: (*group != "Interruption").then(|| document(&format!("ec2:{group}"))),
            })
            .collect();
        Wanted {
            identity,
            cluster: "demo".into(),
            attached: policies
                .iter()
                .filter(|p| p.document.is_some())
                .map(|p| p.arn.clone())
                .collect(),
            policies,
            role_name: "KarpenterController-demo".into(),
            role_arn: ROLE_ARN.into(),
            oidc_host: "oidc.eks.us-east-1.amazonaws.com/id/ABC".into(),
            oidc_provider_arn:
                "arn:aws:iam::1:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC".into(),
            namespace: "kube-system".into(),
            service_account: "karpenter".into(),
        }
    }

    /// The world as the last pod-identity apply left it.
    fn in_sync(w: &Wanted) -> Observed {
        Observed {
            policies: w
                .policies
                .iter()
                .map(|p| {
                    p.document.as_ref().map(|d| iam::Policy {
                        arn: p.arn.clone(),
                        tags: ours(false).tags(),
                        document: d.to_value(),
                    })
                })
                .collect(),
            role: Some(iam::Role {
                name: w.role_name.clone(),
                tags: ours(false).tags(),
                trust: pod_identity_trust().to_value(),
                attached: w.attached.clone(),
                inline: vec![],
                instance_profiles: vec![],
            }),
            association: Some(Association {
                id: "a-1".into(),
                arn: "arn:aws:eks:us-east-1:1:podidentityassociation/demo/a-1".into(),
                role_arn: ROLE_ARN.into(),
                tags: ours(false).tags(),
            }),
            oidc: None,
        }
    }

    fn lines(plan: &StepPlan) -> Vec<String> {
        plan.changes.iter().map(Change::to_string).collect()
    }

    #[test]
    fn in_sync_means_no_change() {
        let w = wanted(Identity::PodIdentity);
        let plan = diff(&w, &in_sync(&w), &ours(false), Goal::Converge).unwrap();
        assert!(plan.changes.is_empty(), "{:?}", lines(&plan));
    }

    #[test]
    fn missing_policies_role_and_association_are_created_policies_first() {
        let w = wanted(Identity::PodIdentity);
        let plan = diff(&w, &Observed::default(), &ours(false), Goal::Converge).unwrap();
        let lines = lines(&plan);
        assert!(plan.changes.iter().all(|c| c.op == Op::Create), "{lines:?}");
        assert!(lines[0].starts_with("+ iam policy Karpenter-demo-NodeLifecycle"));
        assert!(lines.contains(&"+ iam role KarpenterController-demo".to_string()));
        assert_eq!(
            lines.last().unwrap(),
            &format!("+ eks pod identity association kube-system/karpenter  ({ROLE_ARN})")
        );
    }

    #[test]
    fn a_changed_document_or_association_role_is_updated_by_field() {
        let w = wanted(Identity::PodIdentity);
        let mut world = in_sync(&w);
        world.policies[0].as_mut().unwrap().document = document("ec2:Other").to_value();
        world.association.as_mut().unwrap().role_arn = "arn:aws:iam::1:role/old".into();
        let plan = diff(&w, &world, &ours(false), Goal::Converge).unwrap();
        let fields: Vec<(Op, &str, Option<&str>)> = plan
            .changes
            .iter()
            .map(|c| (c.op, c.resource.as_str(), c.field.as_deref()))
            .collect();
        assert_eq!(
            fields,
            vec![
                (
                    Op::Update,
                    "iam policy Karpenter-demo-NodeLifecycle",
                    Some("document")
                ),
                (
                    Op::Update,
                    "eks pod identity association kube-system/karpenter",
                    Some("roleArn")
                ),
            ]
        );
        assert_eq!(
            plan.changes[1].detail.as_deref(),
            Some(format!("arn:aws:iam::1:role/old → {ROLE_ARN}").as_str())
        );
    }

    #[test]
    fn a_policy_no_longer_wanted_is_detached_then_deleted() {
        let w = wanted(Identity::PodIdentity);
        let mut world = in_sync(&w);
        let interruption = &w.policies[4];
        world.policies[4] = Some(iam::Policy {
            arn: interruption.arn.clone(),
            tags: ours(false).tags(),
            document: document("sqs:ReceiveMessage").to_value(),
        });
        world
            .role
            .as_mut()
            .unwrap()
            .attached
            .push(interruption.arn.clone());
        let plan = diff(&w, &world, &ours(false), Goal::Converge).unwrap();
        assert_eq!(
            lines(&plan),
            vec![
                "- iam role KarpenterController-demo  attached policy: Karpenter-demo-Interruption",
                "- iam policy Karpenter-demo-Interruption",
            ]
        );
    }

    #[test]
    fn a_role_jointer_does_not_own_is_an_error_unless_adopted() {
        let w = wanted(Identity::PodIdentity);
        let mut world = in_sync(&w);
        world.role.as_mut().unwrap().tags.clear();
        let err = diff(&w, &world, &ours(false), Goal::Converge).unwrap_err();
        assert!(
            err.to_string().contains(
                "iam role KarpenterController-demo already exists and jointer does not own it"
            ),
            "{err}"
        );
        let plan = diff(&w, &world, &ours(true), Goal::Converge).unwrap();
        assert_eq!(
            lines(&plan),
            vec!["~ iam role KarpenterController-demo  ownership tags: adopted (--adopt)"]
        );
    }

    #[test]
    fn switching_to_irsa_creates_the_provider_retrusts_the_role_and_drops_the_association() {
        let w = wanted(Identity::Irsa);
        let plan = diff(&w, &in_sync(&w), &ours(false), Goal::Converge).unwrap();
        let fields: Vec<(Op, &str, Option<&str>)> = plan
            .changes
            .iter()
            .map(|c| (c.op, c.resource.as_str(), c.field.as_deref()))
            .collect();
        assert_eq!(
            fields,
            vec![
                (
                    Op::Create,
                    "iam oidc provider oidc.eks.us-east-1.amazonaws.com/id/ABC",
                    None
                ),
                (
                    Op::Update,
                    "iam role KarpenterController-demo",
                    Some("trust policy")
                ),
                (
                    Op::Delete,
                    "eks pod identity association kube-system/karpenter",
                    None
                ),
            ]
        );
    }

    #[test]
    fn teardown_removes_only_what_jointer_owns() {
        let w = wanted(Identity::PodIdentity);
        let mut world = in_sync(&w);
        world.association.as_mut().unwrap().tags.clear();
        let plan = diff(&w, &world, &ours(false), Goal::Remove).unwrap();
        let lines = lines(&plan);
        assert!(plan.changes.iter().all(|c| c.op == Op::Delete));
        assert!(
            !lines.iter().any(|l| l.contains("association")),
            "{lines:?}"
        );
        assert!(lines.contains(&"- iam role KarpenterController-demo".to_string()));
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.starts_with("- iam policy"))
                .count(),
            4
        );
    }
}
