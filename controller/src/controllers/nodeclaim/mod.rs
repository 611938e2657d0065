//! The NodeClaim lifecycle: launch an instance (or find the one a crashed run launched),
//! register the Node that joins with the same provider ID (sync labels and taints, drop the
//! unregistered taint, own it), mark it initialized once Ready without startup taints, give up
//! on launches and registrations that take too long, and on deletion drain the node through
//! the eviction API, terminate the instance and only then let the NodeClaim go.

pub mod drain;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::api::conditions::{is_true, set, INITIALIZED, LAUNCHED, READY, REGISTERED, TRUE};
use crate::api::labels::{self, UNREGISTERED_TAINT};
use crate::api::nodeclaim::{NodeClaim, NodeClaimStatus};
use crate::cloud::{CloudError, InstanceState};
use crate::core::drain as drain_policy;
use crate::core::nodeclaim::quantities;
use crate::core::overlay::PoolOverlays;
use crate::core::pods::since;
use crate::core::state::types_of_pools;
use crate::metrics::Metrics;
use crate::runtime::stores::Changes;
use crate::runtime::{finalizers, taints, Context};

/// How often a claim on its way to Ready is looked at again.
const PROGRESS: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Cloud(#[from] CloudError),
}

fn age(claim: &NodeClaim) -> Duration {
    claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(Duration::ZERO, |t| since(Timestamp::now(), t.0))
}

/// `15 minutes`, or `20 s` for a timeout shorter than a minute.
fn minutes(d: Duration) -> String {
    match d.as_secs() {
        s if s >= 60 => format!("{} minutes", s / 60),
        s => format!("{s} s"),
    }
}

fn pool_of(claim: &NodeClaim) -> String {
    claim
        .labels()
        .get(labels::NODEPOOL)
        .cloned()
        .unwrap_or_default()
}

async fn event(ctx: &Context, claim: &NodeClaim, type_: EventType, reason: &str, note: String) {
    crate::runtime::events::publish(&ctx.recorder, claim, type_, reason, reason, &note).await;
}

/// Deletes a NodeClaim the lifecycle cannot carry on with, saying why in a Warning event.
async fn give_up(
    api: &Api<NodeClaim>,
    ctx: &Context,
    claim: &NodeClaim,
    reason: &str,
    why: String,
) -> Result<Action, Error> {
    let name = claim.name_any();
    tracing::warn!(nodeclaim = %name, reason, why = %why, "deleting NodeClaim");
    event(ctx, claim, EventType::Warning, reason, why).await;
    api.delete(&name, &DeleteParams::background()).await?;
    Ok(Action::await_change())
}

async fn patch_status(
    api: &Api<NodeClaim>,
    name: &str,
    status: &NodeClaimStatus,
) -> Result<(), kube::Error> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == READY && c.status == TRUE))
}

fn find_node(ctx: &Context, provider_id: &str) -> Option<Arc<Node>> {
    ctx.stores
        .nodes
        .state()
        .into_iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
}

async fn reconcile(claim: Arc<NodeClaim>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let name = claim.name_any();
    if claim.metadata.deletion_timestamp.is_some() {
        return terminate(&api, &claim, &ctx).await;
    }
    finalizers::ensure(&api, claim.as_ref(), labels::TERMINATION_FINALIZER).await?;
    let mut status = claim.status.clone().unwrap_or_default();
    if status.provider_id.is_none() {
        // The store can lag behind this controller's own status write under load: read the
        // NodeClaim itself before launching, so a recorded launch is never redone.
        let Some(fresh) = api.get_opt(&name).await? else {
            return Ok(Action::await_change());
        };
        let fresh_status = fresh.status.clone().unwrap_or_default();
        if fresh.metadata.deletion_timestamp.is_some() || fresh_status.provider_id.is_some() {
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        return launch(&api, &fresh, fresh_status, &ctx).await;
    }
    let provider_id = status.provider_id.clone().unwrap_or_default();
    if !is_true(&status.conditions, REGISTERED) {
        let Some(node) = find_node(&ctx, &provider_id) else {
            let timeout = ctx.settings.registration_timeout;
            if age(&claim) > timeout {
                let why = format!(
                    "no Node registered for {provider_id} within {}",
                    minutes(timeout)
                );
                return give_up(&api, &ctx, &claim, "RegistrationTimeout", why).await;
            }
            return Ok(Action::requeue(PROGRESS));
        };
        register(&claim, &node, &ctx).await?;
        status.node_name = Some(node.name_any());
        set(&mut status.conditions, REGISTERED, true, "Registered", "");
        patch_status(&api, &name, &status).await?;
        Metrics::count_pool(&ctx.metrics.nodeclaims_registered, &pool_of(&claim));
        tracing::info!(nodeclaim = %name, node = %node.name_any(), "registered");
        return Ok(Action::requeue(PROGRESS));
    }
    if !is_true(&status.conditions, INITIALIZED) {
        let node_name = status.node_name.clone().unwrap_or_default();
        let Some(node) = ctx
            .stores
            .nodes
            .state()
            .into_iter()
            .find(|n| n.name_any() == node_name)
        else {
            return Ok(Action::requeue(PROGRESS));
        };
        let ready = node_ready(&node);
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let starting = taints.iter().any(|t| {
            t.key == UNREGISTERED_TAINT || claim.spec.startup_taints.iter().any(|s| s.key == t.key)
        });
        if ready && !starting {
            set(&mut status.conditions, INITIALIZED, true, "Initialized", "");
            patch_status(&api, &name, &status).await?;
            Metrics::count_pool(&ctx.metrics.nodeclaims_initialized, &pool_of(&claim));
            tracing::info!(nodeclaim = %name, node = %node_name, "initialized");
            return Ok(Action::requeue(Duration::from_secs(60)));
        }
        return Ok(Action::requeue(PROGRESS));
    }
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// Launches (or adopts the instance of a launch whose result a crash lost).
async fn launch(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    mut status: NodeClaimStatus,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = claim.name_any();
    let class_name = &claim.spec.node_class_ref.name;
    let class = ctx
        .stores
        .nodeclasses
        .state()
        .into_iter()
        .find(|c| &c.name_any() == class_name);
    let overlays = pool_overlays(ctx, claim).await?;
    let result = match (ctx.cloud.find_launched(&name).await?, class) {
        (Some((launched, InstanceState::Gone)), _) => {
            // Its instance ended before the launch was recorded: launching again would give
            // the NodeClaim a second instance. Pending pods get a new NodeClaim instead.
            let why = format!(
                "its instance {} ended before the launch was recorded",
                launched.provider_id
            );
            return give_up(api, ctx, claim, "InstanceTerminated", why).await;
        }
        (Some((launched, InstanceState::Live)), Some(class)) => {
            tracing::info!(nodeclaim = %name, instance = %launched.provider_id, "found the instance of an earlier launch; adopting it");
            adopt(ctx, launched, class, &overlays).await
        }
        (_, None) => Err(CloudError::ClassNotReady {
            class: class_name.clone(),
            why: "it does not exist".into(),
        }),
        (None, Some(class)) => ctx.cloud.launch(claim, &class, &overlays).await,
    };
    match result {
        Ok((launched, itype)) => {
            let mut node_labels = launched.node_labels(&itype);
            node_labels.extend(claim.labels().clone());
            // Where it was launched, to tell later whether the class still selects it.
            let mut annotations = serde_json::Map::new();
            if let Some(subnet) = &launched.subnet_id {
                annotations.insert(labels::LAUNCHED_SUBNET.into(), json!(subnet));
            }
            annotations.insert(
                labels::LAUNCHED_SECURITY_GROUPS.into(),
                json!(launched.security_groups.join(",")),
            );
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": node_labels, "annotations": annotations}}),
                ),
            )
            .await?;
            status.provider_id = Some(launched.provider_id.clone());
            status.image_id = launched.image_id.clone();
            status.capacity = quantities(&itype.capacity);
            status.allocatable = quantities(&itype.allocatable);
            set(&mut status.conditions, LAUNCHED, true, "Launched", "");
            patch_status(api, &name, &status).await?;
            Metrics::count_pool(&ctx.metrics.nodeclaims_launched, &pool_of(claim));
            Ok(Action::requeue(PROGRESS))
        }
        Err(e) => {
            let reason = e.reason();
            let message = e.to_string();
            tracing::warn!(nodeclaim = %name, reason, error = %message, "launch failed");
            let timeout = ctx.settings.launch_timeout;
            if age(claim) > timeout {
                let why = format!("not launched within {}: {message}", minutes(timeout));
                return give_up(api, ctx, claim, "LaunchTimeout", why).await;
            }
            let changed = !status
                .conditions
                .iter()
                .any(|c| c.type_ == LAUNCHED && c.message == message);
            if changed {
                set(&mut status.conditions, LAUNCHED, false, reason, &message);
                patch_status(api, &name, &status).await?;
                event(ctx, claim, EventType::Warning, reason, message).await;
            }
            // Offerings that had no capacity are now skipped: try the rest soon.
            Ok(Action::requeue(Duration::from_secs(5)))
        }
    }
}

/// The Node joined: give it the NodeClaim's labels and taints, drop the unregistered taint,
/// and make the NodeClaim its owner.
async fn register(claim: &NodeClaim, node: &Node, ctx: &Context) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let mut taints: Vec<k8s_openapi::api::core::v1::Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != UNREGISTERED_TAINT)
        .collect();
    for t in &claim.spec.taints {
        if !taints
            .iter()
            .any(|x| x.key == t.key && x.effect == format!("{:?}", t.effect))
        {
            taints.push(k8s_openapi::api::core::v1::Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: format!("{:?}", t.effect),
                time_added: None,
            });
        }
    }
    let owner = json!({
        "apiVersion": NodeClaim::api_version(&()),
        "kind": NodeClaim::kind(&()),
        "name": claim.name_any(),
        "uid": claim.uid().unwrap_or_default(),
        "blockOwnerDeletion": true,
    });
    let patch = json!({
        "metadata": {"labels": claim.labels(), "ownerReferences": [owner]},
        "spec": {"taints": taints},
    });
    nodes
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

async fn instance_gone(ctx: &Context, instance: Option<&str>) -> Result<bool, CloudError> {
    Ok(match instance {
        None => true,
        Some(id) => ctx.cloud.instance_state(id).await? == InstanceState::Gone,
    })
}

/// The NodeOverlays of the claim's NodePool, resolved as the provisioner resolved them, so
/// the launch buys what the plan priced. A NodeClaim of no NodePool gets none (as upstream).
async fn pool_overlays(ctx: &Context, claim: &NodeClaim) -> Result<PoolOverlays, CloudError> {
    let snapshot = ctx.stores.snapshot();
    let pool = claim
        .labels()
        .get(labels::NODEPOOL)
        .and_then(|name| snapshot.nodepools.iter().find(|p| &p.name_any() == name));
    let Some(pool) = pool.filter(|_| !snapshot.nodeoverlays.is_empty()) else {
        return Ok(PoolOverlays::default());
    };
    let types_of_class = ctx.cloud.instance_types(&snapshot.nodeclasses).await?;
    let (_, overlays) = types_of_pools(&snapshot, &types_of_class);
    Ok(overlays.for_pool(pool))
}

/// The instance type of an instance an earlier launch made (to fill in the NodeClaim).
async fn adopt(
    ctx: &Context,
    launched: crate::cloud::Launched,
    class: Arc<crate::api::EC2NodeClass>,
    overlays: &PoolOverlays,
) -> Result<
    (
        crate::cloud::Launched,
        Arc<crate::core::scheduling::InstanceType>,
    ),
    CloudError,
> {
    let itype = launched.instance_type.clone();
    let class_name = class.name_any();
    let mut types = ctx.cloud.instance_types(&[class]).await?;
    overlays
        .apply(&types.remove(&class_name).unwrap_or_default())
        .into_iter()
        .find(|t| t.name == itype)
        .map(|t| (launched, t))
        .ok_or_else(|| CloudError::NotFound {
            what: format!("instance type {itype} among the class's offerings"),
        })
}

/// Drain, terminate, wait for the instance to go, delete the Node, release the finalizer.
async fn terminate(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    ctx: &Context,
) -> Result<Action, Error> {
    let name = claim.name_any();
    if !claim
        .finalizers()
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let status = claim.status.clone().unwrap_or_default();
    let node = match &status.node_name {
        Some(n) => nodes.get_opt(n).await?,
        None => None,
    };
    // A Node that joined before this NodeClaim registered it is not named in the status: found
    // by its provider ID, so it does not outlive the NodeClaim as a phantom node.
    let node = match (node, status.provider_id.as_deref()) {
        (None, Some(id)) => find_node(ctx, id).map(Arc::unwrap_or_clone),
        (node, _) => node,
    };
    // The instance: the recorded one, or one a crashed launch made but never recorded.
    let instance = match status.provider_id.clone() {
        Some(id) => Some(id),
        None => ctx
            .cloud
            .find_launched(&name)
            .await?
            .map(|(l, _)| l.provider_id),
    };
    let deadline = drain_policy::deadline(claim);
    if let Some(at) = deadline {
        if !claim
            .annotations()
            .contains_key(labels::TERMINATION_TIMESTAMP)
        {
            let patch = json!({"metadata": {"annotations": {labels::TERMINATION_TIMESTAMP: at.to_string()}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
    }
    if let Some(node) = &node {
        taints::add_disrupted(&nodes, node).await?;
        let left = drain::drain(&ctx.client, &node.name_any(), deadline).await?;
        if left > 0 {
            let now = Timestamp::now();
            let expired = deadline.is_some_and(|d| now >= d);
            // A node whose instance AWS already took (a spot reclaim) has nothing left to
            // drain to: its pods are gone with it.
            let lost =
                !expired && !node_ready(node) && instance_gone(ctx, instance.as_deref()).await?;
            if !expired && !lost {
                tracing::info!(nodeclaim = %name, node = %node.name_any(), pods = left, "draining");
                return Ok(Action::requeue(drain_policy::next_pass(now, deadline)));
            }
            let note = if expired {
                format!("{left} pod(s) still on the node were deleted at the end of the terminationGracePeriod; terminating the instance")
            } else {
                format!("the instance is gone; {left} pod(s) on the node could not be drained")
            };
            event(ctx, claim, EventType::Warning, "DrainIncomplete", note).await;
        }
    }
    if let Some(id) = instance {
        match ctx.cloud.instance_state(&id).await? {
            InstanceState::Gone => {}
            InstanceState::Live => {
                ctx.cloud.terminate(std::slice::from_ref(&id)).await?;
                tracing::info!(nodeclaim = %name, instance = %id, "terminating instance");
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
        }
    }
    if let Some(node) = node {
        match nodes
            .delete(&node.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    finalizers::release(api, claim, labels::TERMINATION_FINALIZER).await?;
    Metrics::count_pool(&ctx.metrics.nodeclaims_terminated, &pool_of(claim));
    tracing::info!(nodeclaim = %name, "terminated");
    Ok(Action::await_change())
}

fn error_policy(claim: Arc<NodeClaim>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::error!(nodeclaim = %claim.name_any(), error = %error, "reconciling NodeClaim failed");
    Action::requeue(Duration::from_secs(5))
}

/// Runs until the stream ends (the process stops), following `changes` of the NodeClaim cache.
pub async fn run(ctx: Arc<Context>, changes: Changes<NodeClaim>) {
    // Launches read classes and nodes from the caches: wait for their first list.
    ctx.stores.ready().await;
    Controller::for_shared_stream(changes, ctx.stores.nodeclaims.clone())
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}
