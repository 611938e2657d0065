//! The node role: what instances launched by the controller run as. EC2 trust, the four
//! managed policies nodes need (the IPv6 CNI policy on IPv6 clusters), and the account's spot
//! service-linked role when a NodePool allows spot.

use anyhow::Result;

use super::iam::{self, DesiredRole};
use super::ownership::Ownership;
use super::permissions::{cni_ipv6_policy, node_managed_policies, node_trust};
use super::policy::Document;
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};

const SPOT_SERVICE: &str = "spot.amazonaws.com";
const CNI_IPV6_POLICY: &str = "AmazonEKS_CNI_IPv6_Policy";

/// What the config and the cluster want of the node role.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub role: DesiredRole,
    /// The IPv6 CNI policy's ARN, and its document on an IPv6 cluster (`None`: not wanted).
    pub cni_arn: String,
    pub cni_document: Option<Document>,
    /// A rendered NodePool allows spot: the account needs the spot service-linked role.
    pub spot: bool,
}

fn wanted(ctx: &Context) -> Wanted {
    let c = &ctx.cluster;
    Wanted {
        role: DesiredRole {
            name: ctx.names.node_role.clone(),
            description: format!("Nodes launched for EKS cluster {} (jointer)", c.name),
            trust: node_trust(c.partition),
            managed_policies: node_managed_policies(c.partition, &c.account, c.ipv6),
        },
        cni_arn: format!(
            "arn:{}:iam::{}:policy/{CNI_IPV6_POLICY}",
            c.partition.name(),
            c.account
        ),
        cni_document: c.ipv6.then(|| cni_ipv6_policy(c.partition)),
        spot: ctx.spot_allowed,
    }
}

/// The role, the IPv6 CNI policy and whether the spot service-linked role exists, each
/// looked up only when the goal needs it.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub role: Option<iam::Role>,
    pub cni: Option<iam::Policy>,
    pub spot_role: bool,
}

async fn observe(ctx: &Context, wanted: &Wanted, goal: Goal) -> Result<Observed> {
    let role = iam::get_role(ctx, &wanted.role.name).await?;
    let cni = if wanted.cni_document.is_some() || goal == Goal::Remove {
        iam::get_policy(ctx, &wanted.cni_arn).await?
    } else {
        None
    };
    let spot_role = goal == Goal::Converge && wanted.spot && spot_role_exists(ctx).await?;
    Ok(Observed {
        role,
        cni,
        spot_role,
    })
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let wanted = wanted(ctx);
    let observed = observe(ctx, &wanted, goal).await?;
    diff(&wanted, &observed, &ctx.ownership, goal)
}

/// The pure diff; a role with the node role's name that jointer does not own is an error
/// unless adopting.
pub fn diff(
    wanted: &Wanted,
    observed: &Observed,
    ours: &Ownership,
    goal: Goal,
) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::NodeRole);
    let cni = observed.cni.as_ref();
    match goal {
        Goal::Converge => {
            // An IPv6 CNI policy someone else made is used as it is.
            if let Some(document) = &wanted.cni_document {
                if cni.is_none_or(|p| iam::owned(ours, &p.tags)) {
                    iam::converge_policy(
                        ours,
                        CNI_IPV6_POLICY,
                        &wanted.cni_arn,
                        "VPC CNI permissions for IPv6 EKS nodes (jointer)",
                        document,
                        cni,
                        &mut plan.changes,
                    )?;
                }
            }
            iam::converge_role(
                ours,
                &wanted.role,
                observed.role.as_ref(),
                "set nodeRole.name to another name",
                &mut plan.changes,
            )?;
            if wanted.spot && !observed.spot_role {
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
            if let Some(role) = &observed.role {
                iam::remove_role(ours, role, &mut plan.changes);
            }
            if let Some(policy) = cni {
                iam::remove_policy(ours, CNI_IPV6_POLICY, policy, &mut plan.changes);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::aws::policy::Partition;

    fn ours(adopt: bool) -> Ownership {
        Ownership {
            cluster: "demo".into(),
            adopt,
        }
    }

    fn wanted(ipv6: bool, spot: bool) -> Wanted {
        Wanted {
            role: DesiredRole {
                name: "KarpenterNodeRole-demo".into(),
                description: "Nodes launched for EKS cluster demo (jointer)".into(),
                trust: node_trust(Partition::Aws),
                managed_policies: node_managed_policies(Partition::Aws, "1", ipv6),
            },
            cni_arn: format!("arn:aws:iam::1:policy/{CNI_IPV6_POLICY}"),
            cni_document: ipv6.then(|| cni_ipv6_policy(Partition::Aws)),
            spot,
        }
    }

    fn in_sync(w: &Wanted) -> Observed {
        Observed {
            role: Some(iam::Role {
                name: w.role.name.clone(),
                tags: ours(false).tags(),
                trust: w.role.trust.to_value(),
                attached: w.role.managed_policies.clone(),
                inline: vec![],
                instance_profiles: vec![],
            }),
            cni: w.cni_document.as_ref().map(|d| iam::Policy {
                arn: w.cni_arn.clone(),
                tags: ours(false).tags(),
                document: d.to_value(),
            }),
            spot_role: w.spot,
        }
    }

    fn lines(plan: &StepPlan) -> Vec<String> {
        plan.changes.iter().map(Change::to_string).collect()
    }

    #[test]
    fn in_sync_means_no_change() {
        for (ipv6, spot) in [(false, false), (true, true)] {
            let w = wanted(ipv6, spot);
            let plan = diff(&w, &in_sync(&w), &ours(false), Goal::Converge).unwrap();
            assert!(plan.changes.is_empty(), "{:?}", lines(&plan));
        }
    }

    #[test]
    fn a_missing_role_policy_and_spot_role_are_created() {
        let w = wanted(true, true);
        let plan = diff(&w, &Observed::default(), &ours(false), Goal::Converge).unwrap();
        let lines = lines(&plan);
        assert!(plan.changes.iter().all(|c| c.op == Op::Create), "{lines:?}");
        assert_eq!(lines[0], format!("+ iam policy {CNI_IPV6_POLICY}"));
        assert_eq!(lines[1], "+ iam role KarpenterNodeRole-demo");
        assert_eq!(
            lines.last().unwrap(),
            "+ iam service-linked role for spot.amazonaws.com  (a NodePool allows spot)"
        );
    }

    #[test]
    fn a_changed_trust_or_a_detached_policy_is_updated_by_field() {
        let w = wanted(false, false);
        let mut world = in_sync(&w);
        let role = world.role.as_mut().unwrap();
        role.trust = serde_json::json!({"Version": "2012-10-17", "Statement": []});
        let detached = role.attached.remove(0);
        let plan = diff(&w, &world, &ours(false), Goal::Converge).unwrap();
        let fields: Vec<(Op, Option<&str>)> = plan
            .changes
            .iter()
            .map(|c| (c.op, c.field.as_deref()))
            .collect();
        assert_eq!(
            fields,
            vec![
                (Op::Update, Some("trust policy")),
                (Op::Create, Some("attached policy"))
            ]
        );
        assert_eq!(
            plan.changes[1].detail.as_deref(),
            Some(iam::short_policy_name(&detached).as_str())
        );
    }

    #[test]
    fn a_role_jointer_does_not_own_is_an_error_unless_adopted_and_a_foreign_cni_policy_is_used() {
        let w = wanted(true, false);
        let mut world = in_sync(&w);
        world.role.as_mut().unwrap().tags.clear();
        world.cni.as_mut().unwrap().tags.clear();
        let err = diff(&w, &world, &ours(false), Goal::Converge).unwrap_err();
        assert!(
            err.to_string().contains(
                "iam role KarpenterNodeRole-demo already exists and jointer does not own it"
            ),
            "{err}"
        );
        let plan = diff(&w, &world, &ours(true), Goal::Converge).unwrap();
        assert_eq!(
            lines(&plan),
            vec!["~ iam role KarpenterNodeRole-demo  ownership tags: adopted (--adopt)"]
        );
    }

    #[test]
    fn teardown_removes_the_owned_role_and_policy_but_never_the_spot_role() {
        let w = wanted(true, true);
        let plan = diff(&w, &in_sync(&w), &ours(false), Goal::Remove).unwrap();
        let lines = lines(&plan);
        assert!(plan.changes.iter().all(|c| c.op == Op::Delete), "{lines:?}");
        assert_eq!(
            lines.last().unwrap(),
            &format!("- iam policy {CNI_IPV6_POLICY}")
        );
        assert!(lines.contains(&"- iam role KarpenterNodeRole-demo".to_string()));
        assert!(!lines.iter().any(|l| l.contains("service-linked")));
    }
}
