//! The teardown sweep: what the controller launched and still owns on AWS after its objects
//! are gone (it crashed, or was removed before its NodePools). CloudFormation and Terraform
//! know nothing of these, which is how existing setups leak paid instances.

use jointer_controller::api::labels;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use aws_sdk_ec2::types::{Filter, InstanceStateName};
use jointer_controller::cloud::aws::tags::{owned_instance_filters, profile_path_prefix};

use super::clients::failed;
use super::iam;
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};

#[derive(Debug, Clone)]
pub enum Action {
    /// Terminate and wait until terminated.
    Terminate {
        ids: Vec<String>,
    },
    DeleteLaunchTemplate {
        id: String,
    },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::Sweep(a)
    }
}

async fn live_instances(ctx: &Context) -> Result<Vec<String>> {
    let reservations = ctx
        .aws
        .ec2
        .describe_instances()
        .set_filters(Some(owned_instance_filters(
            &ctx.cluster.name,
            &["pending", "running", "stopping", "stopped", "shutting-down"],
        )))
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| failed("ec2:DescribeInstances", e))?;
    Ok(reservations
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| {
            i.state()
                .and_then(|s| s.name())
                .is_none_or(|n| *n != InstanceStateName::Terminated)
        })
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect())
}

/// A launch template the controller made.
#[derive(Debug, Clone)]
pub struct Template {
    pub id: String,
    pub name: String,
}

/// An instance profile the controller made, and the roles still in it.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub roles: Vec<String>,
}

/// What the controller left on AWS for this cluster.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub instances: Vec<String>,
    pub templates: Vec<Template>,
    pub profiles: Vec<Profile>,
}

async fn observe(ctx: &Context) -> Result<Observed> {
    let instances = live_instances(ctx).await?;
    let templates = ctx
        .aws
        .ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name(format!("tag:{}", labels::EKS_CLUSTER_TAG))
                .values(&ctx.cluster.name)
                .build(),
        )
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| failed("ec2:DescribeLaunchTemplates", e))?
        .into_iter()
        .map(|t| {
            let id = t.launch_template_id().unwrap_or_default().to_string();
            Template {
                name: t.launch_template_name().unwrap_or(&id).to_string(),
                id,
            }
        })
        .collect();
    let profiles = ctx
        .aws
        .iam
        .list_instance_profiles()
        .path_prefix(profile_path_prefix(&ctx.cluster.region, &ctx.cluster.name))
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| failed("iam:ListInstanceProfiles", e))?
        .into_iter()
        .map(|p| Profile {
            name: p.instance_profile_name().to_string(),
            roles: p
                .roles()
                .iter()
                .map(|r| r.role_name().to_string())
                .collect(),
        })
        .collect();
    Ok(Observed {
        instances,
        templates,
        profiles,
    })
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    if goal == Goal::Converge {
        // Garbage collection is the controller's job while it runs.
        return Ok(StepPlan::new(Step::Sweep));
    }
    Ok(diff(&ctx.cluster.name, &observe(ctx).await?))
}

/// The pure diff of a teardown: everything found goes; instances first (they use the
/// templates and profiles), roles out of the profiles before the profiles.
pub fn diff(cluster: &str, observed: &Observed) -> StepPlan {
    let mut plan = StepPlan::new(Step::Sweep);
    if !observed.instances.is_empty() {
        plan.changes.push(
            Change::new(
                Op::Delete,
                format!("ec2 instances of cluster {cluster}"),
                Action::Terminate {
                    ids: observed.instances.clone(),
                },
            )
            .detail(observed.instances.join(", ")),
        );
    }
    for t in &observed.templates {
        plan.changes.push(Change::new(
            Op::Delete,
            format!("ec2 launch template {}", t.name),
            Action::DeleteLaunchTemplate { id: t.id.clone() },
        ));
    }
    for p in &observed.profiles {
        let resource = format!("iam instance profile {}", p.name);
        for role in &p.roles {
            plan.changes.push(
                Change::new(
                    Op::Delete,
                    &resource,
                    iam::Action::RemoveFromInstanceProfile {
                        role: role.clone(),
                        profile: p.name.clone(),
                    },
                )
                .field("role")
                .detail(role.clone()),
            );
        }
        plan.changes.push(Change::new(
            Op::Delete,
            &resource,
            iam::Action::DeleteInstanceProfile {
                name: p.name.clone(),
            },
        ));
    }
    plan
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    match action {
        Action::Terminate { ids } => {
            ctx.aws
                .ec2
                .terminate_instances()
                .set_instance_ids(Some(ids.clone()))
                .send()
                .await
                .map_err(|e| failed("ec2:TerminateInstances", e))?;
            let started = Instant::now();
            loop {
                let left = live_instances(ctx).await?;
                if left.is_empty() {
                    return Ok(());
                }
                if started.elapsed() > ctx.options.timeout {
                    bail!(
                        "instances still not terminated after {} s: {}",
                        started.elapsed().as_secs(),
                        left.join(", ")
                    );
                }
                ctx.progress.note(&format!(
                    "  waiting for {} instance(s) to terminate ({} s)",
                    left.len(),
                    started.elapsed().as_secs()
                ));
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
        Action::DeleteLaunchTemplate { id } => {
            ctx.aws
                .ec2
                .delete_launch_template()
                .launch_template_id(id)
                .send()
                .await
                .map_err(|e| failed(&format!("ec2:DeleteLaunchTemplate {id}"), e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_left_means_no_change() {
        assert!(diff("demo", &Observed::default()).changes.is_empty());
    }

    #[test]
    fn what_the_controller_left_goes_instances_first_and_roles_out_of_profiles_first() {
        let observed = Observed {
            instances: vec!["i-1".into(), "i-2".into()],
            templates: vec![Template {
                id: "lt-1".into(),
                name: "karpenter.k8s.aws/123".into(),
            }],
            profiles: vec![Profile {
                name: "demo_456".into(),
                roles: vec!["KarpenterNodeRole-demo".into()],
            }],
        };
        let lines: Vec<String> = diff("demo", &observed)
            .changes
            .iter()
            .map(Change::to_string)
            .collect();
        assert_eq!(
            lines,
            vec![
                "- ec2 instances of cluster demo  (i-1, i-2)",
                "- ec2 launch template karpenter.k8s.aws/123",
                "- iam instance profile demo_456  role: KarpenterNodeRole-demo",
                "- iam instance profile demo_456",
            ]
        );
    }
}
