//! The controller's identity: its IAM role with the scoped permission set (one managed
//! policy per group), trusted either through EKS Pod Identity (an association for the
//! controller's service account; needs the eks-pod-identity-agent add-on) or through IRSA
//! (the cluster's IAM OIDC provider, created when missing).

use std::collections::BTreeMap;

use anyhow::{bail, Result};

use super::clients::{code, failed, gone_ok, tag_eks_resource};
use super::iam::{self, owned, DesiredRole};
use super::permissions::{controller_policies, irsa_trust, pod_identity_trust};
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

struct Association {
    id: String,
    arn: String,
    role_arn: String,
    tags: BTreeMap<String, String>,
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

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::ControllerIdentity);
    let identity = ctx.config.identity;
    if goal == Goal::Converge {
        check_prerequisites(ctx, identity).await?;
    }
    let desired = controller_policies(&ctx.scope());
    let mut policies = Vec::new();
    for group in ALL_GROUPS {
        let name = ctx.names.controller_policy(group);
        let arn = policy_arn(ctx, group);
        let observed = iam::get_policy(ctx, &arn).await?;
        policies.push((group, name, arn, observed));
    }
    let role = iam::get_role(ctx, &ctx.names.controller_role).await?;
    let association = get_association(ctx).await?;
    let oidc = match ctx.cluster.oidc_host() {
        Some(host) => get_oidc_provider(ctx, &host).await?,
        None => None,
    };

    match goal {
        Goal::Converge => {
            // Policies first: creating the role attaches them.
            for (group, name, arn, observed) in &policies {
                match desired.iter().find(|p| p.group == *group) {
                    Some(wanted) => iam::converge_policy(
                        &ctx.ownership,
                        name,
                        arn,
                        &format!(
                            "jointer controller permissions for EKS cluster {}: {group}",
                            ctx.cluster.name
                        ),
                        &wanted.document,
                        observed.as_ref(),
                        &mut plan.changes,
                    )?,
                    None => {
                        // Off the role first, then gone: a policy deleted while attached
                        // leaves the role undeletable in some IAM implementations.
                        if let Some(role) = role.as_ref().filter(|r| r.attached.contains(arn)) {
                            plan.changes.push(iam::detach_change(&role.name, arn));
                        }
                        if let Some(p) = observed {
                            iam::remove_policy(&ctx.ownership, name, p, &mut plan.changes);
                        }
                    }
                }
            }
            let trust = match identity {
                Identity::PodIdentity => pod_identity_trust(),
                Identity::Irsa => {
                    let host = ctx.cluster.oidc_host().unwrap_or_default();
                    let provider = oidc_provider_arn(ctx, &host);
                    if oidc.is_none() {
                        plan.changes.push(
                            Change::new(
                                Op::Create,
                                format!("iam oidc provider {host}"),
                                Action::CreateOidcProvider {
                                    url: format!("https://{host}"),
                                    tags: ctx.tags(),
                                },
                            )
                            .detail("audience sts.amazonaws.com"),
                        );
                    }
                    irsa_trust(
                        &provider,
                        &host,
                        &ctx.config.controller.namespace,
                        &ctx.config.controller.service_account_name(),
                    )
                }
            };
            let desired_role = DesiredRole {
                name: ctx.names.controller_role.clone(),
                description: format!("jointer controller for EKS cluster {}", ctx.cluster.name),
                trust,
                managed_policies: desired.iter().map(|p| policy_arn(ctx, p.group)).collect(),
            };
            iam::converge_role(
                &ctx.ownership,
                &desired_role,
                role.as_ref(),
                "remove or rename that role",
                &mut plan.changes,
            )?;
            converge_association(ctx, identity, association, &mut plan)?;
        }
        Goal::Remove => {
            if let Some(a) = association.filter(|a| owned(&ctx.ownership, &a.tags)) {
                plan.changes.push(association_delete(ctx, a));
            }
            if let Some(role) = &role {
                iam::remove_role(&ctx.ownership, role, &mut plan.changes);
            }
            for (_, name, _, observed) in &policies {
                if let Some(p) = observed {
                    iam::remove_policy(&ctx.ownership, name, p, &mut plan.changes);
                }
            }
            if let Some((arn, _)) = oidc.filter(|(_, tags)| owned(&ctx.ownership, tags)) {
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
    }
    Ok(plan)
}

fn association_resource(ctx: &Context) -> String {
    format!(
        "eks pod identity association {}/{}",
        ctx.config.controller.namespace,
        ctx.config.controller.service_account_name()
    )
}

fn association_delete(ctx: &Context, a: Association) -> Change {
    Change::new(
        Op::Delete,
        association_resource(ctx),
        Action::DeleteAssociation { id: a.id },
    )
}

fn converge_association(
    ctx: &Context,
    identity: Identity,
    association: Option<Association>,
    plan: &mut StepPlan,
) -> Result<()> {
    let resource = association_resource(ctx);
    let want = ctx.controller_role_arn();
    match (identity, association) {
        (Identity::PodIdentity, None) => plan.changes.push(
            Change::new(
                Op::Create,
                &resource,
                Action::CreateAssociation {
                    role_arn: want.clone(),
                    tags: ctx.tags(),
                },
            )
            .detail(want),
        ),
        (Identity::PodIdentity, Some(a)) => {
            iam::adopt_or_refuse(
                &ctx.ownership,
                &resource,
                &a.tags,
                "delete that association or set controller.serviceAccount",
                &mut plan.changes,
                || {
                    Action::TagAssociation {
                        arn: a.arn.clone(),
                        tags: ctx.tags(),
                    }
                    .into()
                },
            )?;
            if a.role_arn != want {
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
        (Identity::Irsa, Some(a)) if owned(&ctx.ownership, &a.tags) => {
            plan.changes.push(association_delete(ctx, a));
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
