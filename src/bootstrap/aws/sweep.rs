//! The teardown sweep: what the controller launched and still owns on AWS after its objects
//! are gone (it crashed, or was removed before its NodePools). CloudFormation and Terraform
//! know nothing of these, which is how existing setups leak paid instances.

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

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::Sweep);
    if goal == Goal::Converge {
        return Ok(plan); // garbage collection is the controller's job while it runs
    }
    let instances = live_instances(ctx).await?;
    if !instances.is_empty() {
        plan.changes.push(
            Change::new(
                Op::Delete,
                format!("ec2 instances of cluster {}", ctx.cluster.name),
                Action::Terminate {
                    ids: instances.clone(),
                },
            )
            .detail(instances.join(", ")),
        );
    }
    let templates = ctx
        .aws
        .ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:eks:eks-cluster-name")
                .values(&ctx.cluster.name)
                .build(),
        )
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| failed("ec2:DescribeLaunchTemplates", e))?;
    for t in templates {
        let id = t.launch_template_id().unwrap_or_default().to_string();
        plan.changes.push(Change::new(
            Op::Delete,
            format!(
                "ec2 launch template {}",
                t.launch_template_name().unwrap_or(&id)
            ),
            Action::DeleteLaunchTemplate { id },
        ));
    }
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
        .map_err(|e| failed("iam:ListInstanceProfiles", e))?;
    for p in profiles {
        let name = p.instance_profile_name().to_string();
        let resource = format!("iam instance profile {name}");
        for role in p.roles() {
            plan.changes.push(
                Change::new(
                    Op::Delete,
                    &resource,
                    iam::Action::RemoveFromInstanceProfile {
                        role: role.role_name().to_string(),
                        profile: name.clone(),
                    },
                )
                .field("role")
                .detail(role.role_name().to_string()),
            );
        }
        plan.changes.push(Change::new(
            Op::Delete,
            &resource,
            iam::Action::DeleteInstanceProfile { name },
        ));
    }
    Ok(plan)
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
