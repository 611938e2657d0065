//! The EC2NodeClass controller: resolves each class's subnets, security groups, AMIs and
//! instance profile, publishes them in `status` with conditions that name the selector that
//! matched nothing, re-resolves every few minutes (AMI releases, subnet changes), and on delete
//! removes the instance profiles and launch templates it made once the class's NodeClaims are
//! gone.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::ResourceExt;
use serde_json::json;

use crate::api::conditions::{is_true, FALSE, READY};
use crate::api::ec2nodeclass::{EC2NodeClass, EC2NodeClassStatus};
use crate::api::labels::NODECLASS_FINALIZER as FINALIZER;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::CloudError;
use crate::core::ami_family::user_data;
use crate::core::nodeclass::{conditions, Verdicts};
use crate::metrics::OutcomeLabels;
use crate::runtime::events::publish;
use crate::runtime::stores::Changes;
use crate::runtime::{finalizers, Context};
use kube::runtime::events::EventType;
/// Retry period while something is missing (a tag being added, a role being created).
const RETRY_NOT_READY: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("cleaning up after the class: {0}")]
    Cleanup(#[from] CloudError),
}

fn count(ctx: &Context, outcome: &str) {
    ctx.metrics
        .nodeclass_reconciles
        .get_or_create(&OutcomeLabels {
            outcome: outcome.into(),
        })
        .inc();
}

async fn reconcile(class: Arc<EC2NodeClass>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<EC2NodeClass> = Api::all(ctx.client.clone());
    let name = class.name_any();
    if class.metadata.deletion_timestamp.is_some() {
        return finalize(&api, &class, &ctx).await;
    }
    finalizers::ensure(&api, class.as_ref(), FINALIZER).await?;
    let resolved = ctx.cloud.resolve(&class).await;
    let (subnets, security_groups, amis, profile, reservations) = (
        &resolved.subnets,
        &resolved.security_groups,
        &resolved.amis,
        &resolved.instance_profile,
        &resolved.capacity_reservations,
    );
    let verdicts = Verdicts {
        subnets: subnets.as_ref().map(|_| ()).map_err(Clone::clone),
        security_groups: security_groups.as_ref().map(|_| ()).map_err(Clone::clone),
        amis: amis.as_ref().map(|_| ()).map_err(Clone::clone),
        instance_profile: profile.as_ref().map(|_| ()).map_err(Clone::clone),
        capacity_reservations: reservations.as_ref().map(|_| ()).map_err(Clone::clone),
        validation: user_data::validate(&class).map_err(|e| e.to_string()),
    };
    let previous = class
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let was_invalid = previous
        .iter()
        .any(|c| c.type_ == "ValidationSucceeded" && c.status == FALSE);
    let status = EC2NodeClassStatus {
        subnets: subnets.clone().unwrap_or_default(),
        security_groups: security_groups.clone().unwrap_or_default(),
        amis: amis.clone().unwrap_or_default(),
        instance_profile: profile.clone().ok(),
        capacity_reservations: reservations.clone().unwrap_or_default(),
        conditions: conditions(&verdicts, &previous, class.metadata.generation),
    };
    let ready = is_true(&status.conditions, READY);
    if class.status.as_ref() != Some(&status) {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
        if ready {
            tracing::info!(ec2nodeclass = %name, subnets = status.subnets.len(), security_groups = status.security_groups.len(), amis = status.amis.len(), instance_profile = %status.instance_profile.clone().unwrap_or_default(), "EC2NodeClass ready");
        } else {
            let why: Vec<String> = status
                .conditions
                .iter()
                .filter(|c| c.status == FALSE && c.type_ != READY)
                .map(|c| format!("{}=False: {}", c.type_, c.message))
                .collect();
            tracing::warn!(ec2nodeclass = %name, reasons = %why.join("; "), "EC2NodeClass not ready");
        }
        if let (Err(why), false) = (&verdicts.validation, was_invalid) {
            // Where `kubectl describe` shows it: a launch would fail on every NodeClaim.
            publish(
                &ctx.recorder,
                class.as_ref(),
                EventType::Warning,
                "ValidationFailed",
                "Validate",
                why,
            )
            .await;
        }
    }
    if ready {
        warm_instance_types(&ctx, &class, status).await;
    }
    count(&ctx, if ready { "ready" } else { "not_ready" });
    // Tags on subnets and new AMI releases raise no Kubernetes event: resolve again on a timer.
    Ok(Action::requeue(if ready {
        ctx.settings.nodeclass_resync
    } else {
        RETRY_NOT_READY.min(ctx.settings.nodeclass_resync)
    }))
}

/// Fetches the region's instance types and prices for a Ready class here, off the provisioning
/// path: the first pending pod would otherwise wait for every DescribeInstanceTypes page and
/// price list (3.4 s of a 7.8 s scale-up in the side-by-side), and each resync fetches them
/// again once they expire, so a provisioning pass rarely does (upstream refreshes them in
/// controllers of their own for the same reason).
async fn warm_instance_types(ctx: &Context, class: &EC2NodeClass, status: EC2NodeClassStatus) {
    let mut current = class.clone();
    current.status = Some(status);
    if let Err(e) = ctx.cloud.instance_types(&[Arc::new(current)]).await {
        tracing::warn!(ec2nodeclass = %class.name_any(), error = %e, "instance types could not be fetched ahead of provisioning");
    }
}

/// After its NodeClaims are gone: the instance profiles and launch templates made for the
/// class go, then the finalizer.
async fn finalize(
    api: &Api<EC2NodeClass>,
    class: &EC2NodeClass,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = class.name_any();
    if !class.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let using = claims
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|c| c.spec.node_class_ref.name == name)
        .count();
    if using > 0 {
        tracing::info!(ec2nodeclass = %name, nodeclaims = using, "waiting for NodeClaims before removing the class");
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    ctx.cloud.release(class).await?;
    finalizers::release(api, class, FINALIZER).await?;
    tracing::info!(ec2nodeclass = %name, "EC2NodeClass finalized");
    Ok(Action::await_change())
}

fn error_policy(class: Arc<EC2NodeClass>, error: &Error, ctx: Arc<Context>) -> Action {
    count(&ctx, "error");
    tracing::error!(ec2nodeclass = %class.name_any(), error = %error, "reconciling EC2NodeClass failed");
    Action::requeue(Duration::from_secs(10))
}

/// Runs until the stream ends (the process stops).
pub async fn run(ctx: Arc<Context>, changes: Changes<EC2NodeClass>) {
    ctx.stores.ready().await;
    Controller::for_shared_stream(changes, ctx.stores.nodeclasses.clone())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}
