//! The controller install. `bundled`: jointer-controller's manifests, rendered from
//! `templates/controller/` and server-side applied; `helm`: the upstream chart through the
//! `helm` CLI with values derived from the AWS side; `none`: nothing (and a bundle jointer
//! installed before is removed).

pub mod bundle;
pub mod helm;

use anyhow::Result;
use serde_json::Value;

use crate::bootstrap::cluster::kube_objects::{self, ObjectRef};
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
use crate::input::config::Install;

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::ControllerInstall);
    let install = ctx.config.controller.install;
    if install == Install::Helm {
        helm::plan(ctx, goal, &mut plan).await?;
    }
    if goal == Goal::Converge && install == Install::Bundled {
        let image = ctx.controller_image_reference()?;
        for object in bundle::desired(ctx, &image)? {
            kube_objects::converge(ctx, object, &mut plan.changes).await?;
        }
    } else {
        // Removing, or installed another way now: the bundle jointer applied before goes,
        // the Deployment first so nothing runs without its permissions.
        for object in bundle::refs(ctx)?.iter().rev() {
            remove_if_ours(ctx, object, &mut plan.changes).await?;
        }
    }
    Ok(plan)
}

/// A delete change for `object` when it exists and jointer made it.
pub async fn remove_if_ours(
    ctx: &Context,
    object: &Value,
    changes: &mut Vec<Change>,
) -> Result<()> {
    let r = ObjectRef::of(object)?;
    let Some(api) = kube_objects::api_for(ctx, &r).await? else {
        return Ok(());
    };
    if let Some(live) = kube_objects::get(&api, &r).await? {
        if kube_objects::is_ours(&live) {
            changes.push(Change::new(
                Op::Delete,
                r.label(),
                kube_objects::Action::Delete { object: r },
            ));
        }
    }
    Ok(())
}
