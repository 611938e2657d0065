//! The node role: what instances launched by the controller run as. EC2 trust, the four
//! managed policies nodes need (the IPv6 CNI policy on IPv6 clusters), and the account's spot
//! service-linked role when a NodePool allows spot.

use anyhow::Result;

use super::iam::{self, DesiredRole};
use super::permissions::{cni_ipv6_policy, node_managed_policies, node_trust};
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};

const SPOT_SERVICE: &str = "spot.amazonaws.com";
const CNI_IPV6_POLICY: &str = "AmazonEKS_CNI_IPv6_Policy";

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::NodeRole);
    let c = &ctx.cluster;
    let role = iam::get_role(ctx, &ctx.names.node_role).await?;
    let cni_arn = format!(
        "arn:{}:iam::{}:policy/{CNI_IPV6_POLICY}",
        c.partition.name(),
        c.account
    );
    let cni = if c.ipv6 || goal == Goal::Remove {
        iam::get_policy(ctx, &cni_arn).await?
    } else {
        None
    };
    match goal {
        Goal::Converge => {
            if c.ipv6 {
                // An IPv6 CNI policy someone else made is used as it is.
                if cni
                    .as_ref()
                    .is_none_or(|p| iam::owned(&ctx.ownership, &p.tags))
                {
                    iam::converge_policy(
                        &ctx.ownership,
                        CNI_IPV6_POLICY,
                        &cni_arn,
                        "VPC CNI permissions for IPv6 EKS nodes (jointer)",
                        &cni_ipv6_policy(c.partition),
                        cni.as_ref(),
                        &mut plan.changes,
                    )?;
                }
            }
            let desired = DesiredRole {
                name: ctx.names.node_role.clone(),
                description: format!("Nodes launched for EKS cluster {} (jointer)", c.name),
                trust: node_trust(c.partition),
                managed_policies: node_managed_policies(c.partition, &c.account, c.ipv6),
            };
            iam::converge_role(
                &ctx.ownership,
                &desired,
                role.as_ref(),
                "set nodeRole.name to another name",
                &mut plan.changes,
            )?;
            if ctx.spot_allowed && !spot_role_exists(ctx).await? {
                plan.changes.push(
                    Change::new(
                        Op::Create,
                        "iam service-linked role for spot.amazonaws.com",
                        iam::Action::CreateServiceLinkedRole {
                            service: SPOT_SERVICE.into(),
                        },
                    )
                    .detail("a NodePool allows spot"),
                );
            }
        }
        Goal::Remove => {
            // The spot service-linked role belongs to the account and stays.
            if let Some(role) = &role {
                iam::remove_role(&ctx.ownership, role, &mut plan.changes);
            }
            if let Some(policy) = &cni {
                iam::remove_policy(&ctx.ownership, CNI_IPV6_POLICY, policy, &mut plan.changes);
            }
        }
    }
    Ok(plan)
}

async fn spot_role_exists(ctx: &Context) -> Result<bool> {
    let roles = ctx
        .aws
        .iam
        .list_roles()
        .path_prefix(format!("/aws-service-role/{SPOT_SERVICE}/"))
        .send()
        .await
        .map_err(|e| super::clients::failed("iam:ListRoles (spot service-linked role)", e))?;
    Ok(!roles.roles().is_empty())
}
