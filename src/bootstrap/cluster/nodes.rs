//! The EC2NodeClasses and NodePools rendered from the templates, server-side applied. On
//! teardown NodePools go first and jointer waits until their NodeClaims and nodes are gone
//! (the controller drains and terminates them), then the EC2NodeClasses, whose finalizer
//! removes the instance profiles and launch templates the controller made.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use jointer_controller::api::labels::NODEPOOL;
use jointer_controller::core::pods::since;
use jointer_controller::runtime::leader::{LEASE_DURATION, LEASE_NAME};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::Value;

use super::kube_objects::{self, ObjectRef, MANAGED_BY, MANAGED_BY_LABEL};
use crate::api_versions::{NODECLASS_V1, NODEPOOL_V1};
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
use crate::cluster as live;

#[derive(Debug, Clone)]
pub enum Action {
    /// Delete a NodePool and wait until its NodeClaims and nodes are gone.
    DeletePool { name: String },
    /// Delete an EC2NodeClass and wait until its finalizer lets it go.
    DeleteClass { name: String },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::Nodes(a)
    }
}

pub fn pool_ref(name: &str) -> ObjectRef {
    ObjectRef {
        api_version: NODEPOOL_V1.into(),
        kind: "NodePool".into(),
        namespace: None,
        name: name.into(),
    }
}

pub fn class_ref(name: &str) -> ObjectRef {
    ObjectRef {
        api_version: NODECLASS_V1.into(),
        kind: "EC2NodeClass".into(),
        namespace: None,
        name: name.into(),
    }
}

/// The delete change for a NodePool or EC2NodeClass, saying what it costs.
pub fn delete_change(r: &ObjectRef, why: &str) -> Change {
    if r.kind == "NodePool" {
        Change::new(
            Op::Delete,
            r.label(),
            Action::DeletePool {
                name: r.name.clone(),
            },
        )
        .detail(format!("{why}; its nodes are drained and terminated"))
    } else {
        Change::new(
            Op::Delete,
            r.label(),
            Action::DeleteClass {
                name: r.name.clone(),
            },
        )
        .detail(why.to_string())
    }
}

/// The NodePools and EC2NodeClasses labelled as jointer's.
pub async fn labelled(ctx: &Context) -> Result<Vec<ObjectRef>> {
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY}");
    let mut out = Vec::new();
    for r in [pool_ref("_"), class_ref("_")] {
        let Some(api) = kube_objects::api_for(ctx, &r).await? else {
            continue;
        };
        let listed = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| anyhow::anyhow!("listing {}s: {e}", r.kind))?;
        for o in listed {
            if let Some(name) = o.metadata.name {
                out.push(ObjectRef { name, ..r.clone() });
            }
        }
    }
    Ok(out)
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::NodeObjects);
    match goal {
        Goal::Converge => {
            for object in &ctx.node_objects {
                if let Some(warning) = foreign_role(ctx, object) {
                    plan.warnings.push(warning);
                }
                kube_objects::converge(ctx, object.clone(), &mut plan.changes).await?;
            }
        }
        Goal::Remove => {
            let mut found = labelled(ctx).await?;
            // NodePools before the classes they use.
            found.sort_by_key(|r| r.kind != "NodePool");
            for r in found {
                plan.changes.push(delete_change(&r, "teardown"));
            }
        }
    }
    Ok(plan)
}

/// An EC2NodeClass whose nodes run as a role jointer does not manage: its access entry,
/// policies and instance-profile permission (`iam:PassRole`) are then someone else's to get
/// right.
fn foreign_role(ctx: &Context, object: &Value) -> Option<String> {
    if object["kind"] != "EC2NodeClass" {
        return None;
    }
    let role = object.pointer("/spec/role").and_then(Value::as_str)?;
    (role != ctx.names.node_role).then(|| {
        format!(
            "EC2NodeClass {} uses role {role}, which jointer does not manage (its node role is {}): the controller may not pass it (iam:PassRole) and nodes may not be allowed to join",
            object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?"),
            ctx.names.node_role
        )
    })
}

/// Whether a controller runs to drain and terminate nodes: its Deployment has an available
/// replica and, for the bundled controller, its leader Lease was renewed lately (a Deployment
/// can look available while no replica leads, and a controller run elsewhere has no
/// Deployment replica at all). `Err` says what is missing.
pub async fn controller_running(ctx: &Context) -> Result<std::result::Result<(), String>> {
    let Some((ns, name)) = live::controller_deployment(&ctx.config.controller) else {
        return Ok(Ok(())); // installed by someone else: assume it runs
    };
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(ctx.kube.clone(), &ns);
    let available = api
        .get_opt(&name)
        .await?
        .and_then(|d| d.status)
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    if available == 0 {
        return Ok(Err(format!(
            "its Deployment {ns}/{name} has no available replica"
        )));
    }
    if ctx.config.controller.install != crate::input::config::Install::Bundled {
        return Ok(Ok(()));
    }
    let leases: Api<Lease> = Api::namespaced(ctx.kube.clone(), &ns);
    let renewed = leases
        .get_opt(LEASE_NAME)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.renew_time)
        .map(|t| t.0);
    let stale_after = LEASE_DURATION * 2;
    match renewed {
        Some(at) if since(Timestamp::now(), at) <= stale_after => Ok(Ok(())),
        Some(at) => Ok(Err(format!(
            "its leader Lease {ns}/{LEASE_NAME} was last renewed {} s ago",
            since(Timestamp::now(), at).as_secs()
        ))),
        None => Ok(Err(format!(
            "no replica holds its leader Lease {ns}/{LEASE_NAME}"
        ))),
    }
}

/// Without a controller, `--force` lets go what only the controller would: the NodeClaims of
/// the pool (or of the class) lose their finalizer and their Nodes are deleted, then the
/// object's own finalizer goes; their instances are left to the sweep, which terminates every
/// instance the controller launched for the cluster.
async fn release_without_controller(
    ctx: &Context,
    r: &ObjectRef,
    pool: Option<&str>,
) -> Result<()> {
    let unblock = serde_json::json!({"metadata": {"finalizers": null}});
    let nodes: Api<Node> = Api::all(ctx.kube.clone());
    if let Some(claims) = kube_objects::api_for(ctx, &claim_ref()).await? {
        let params = pool.map(in_pool).unwrap_or_default();
        for c in claims.list(&params).await?.items {
            let class = c.data["spec"]["nodeClassRef"]["name"].as_str();
            if pool.is_none() && class != Some(r.name.as_str()) {
                continue;
            }
            if let Some(node) = c.data["status"]["nodeName"].as_str() {
                nodes.delete(node, &DeleteParams::default()).await.ok();
            }
            let name = c.metadata.name.clone().unwrap_or_default();
            claims
                .patch(&name, &PatchParams::default(), &Patch::Merge(&unblock))
                .await?;
            claims.delete(&name, &DeleteParams::background()).await.ok();
        }
    }
    if let Some(pool) = pool {
        for n in nodes.list(&in_pool(pool)).await?.items {
            let name = n.metadata.name.clone().unwrap_or_default();
            nodes.delete(&name, &DeleteParams::default()).await.ok();
        }
    }
    if let Some(api) = kube_objects::api_for(ctx, r).await? {
        if kube_objects::get(&api, r).await?.is_some() {
            api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&unblock))
                .await?;
        }
    }
    Ok(())
}

fn claim_ref() -> ObjectRef {
    ObjectRef {
        api_version: NODEPOOL_V1.into(),
        kind: "NodeClaim".into(),
        namespace: None,
        name: String::new(),
    }
}

/// How long "no controller" must hold before teardown stops (or, with `--force`, acts) on it.
const NO_CONTROLLER_GRACE: Duration = Duration::from_secs(5);

/// Lists only what belongs to `pool`: the controller labels its NodeClaims and nodes with it.
fn in_pool(pool: &str) -> ListParams {
    ListParams::default().labels(&format!("{NODEPOOL}={pool}"))
}

async fn count_claims(ctx: &Context, pool: &str) -> Result<usize> {
    let Some(api) = kube_objects::api_for(ctx, &claim_ref()).await? else {
        return Ok(0);
    };
    Ok(api.list(&in_pool(pool)).await?.items.len())
}

async fn count_nodes(ctx: &Context, pool: &str) -> Result<usize> {
    let api: Api<Node> = Api::all(ctx.kube.clone());
    Ok(api.list(&in_pool(pool)).await?.items.len())
}

async fn exists(ctx: &Context, r: &ObjectRef) -> Result<bool> {
    match kube_objects::api_for(ctx, r).await? {
        Some(api) => Ok(kube_objects::get(&api, r).await?.is_some()),
        None => Ok(false),
    }
}

/// Polls until `left` reports nothing left, printing progress every 10 s; fails at the
/// timeout, or at once when something is left and no controller runs to remove it (unless
/// `--force`, which releases it instead).
async fn wait_until_gone(
    ctx: &Context,
    what: &str,
    r: &ObjectRef,
    pool: Option<&str>,
) -> Result<()> {
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut released = false;
    let mut no_controller_since: Option<Instant> = None;
    loop {
        let (claims, nodes) = match pool {
            Some(p) => (count_claims(ctx, p).await?, count_nodes(ctx, p).await?),
            None => (0, 0),
        };
        let object_left = exists(ctx, r).await?;
        if claims == 0 && nodes == 0 && !object_left {
            return Ok(());
        }
        let mut left = match pool {
            Some(_) => format!("{claims} NodeClaim(s), {nodes} node(s) left"),
            None => "finalizer pending".to_string(),
        };
        let report_due = last_report.elapsed() >= Duration::from_secs(10);
        let timed_out = started.elapsed() > ctx.options.timeout;
        if let Some(pool) = pool.filter(|_| report_due || timed_out) {
            // Only a hint: a user who may not list pods still gets the teardown.
            let held = live::holders(&ctx.kube, pool).await.unwrap_or_default();
            if !held.is_empty() {
                left = format!(
                    "{left}, held by: {} (a terminationGracePeriod on the NodePool bounds the wait)",
                    held.join("; ")
                );
            }
        }
        // A verdict that holds for a few seconds, not one read taken mid-rollout.
        let missing = match controller_running(ctx).await? {
            Ok(()) => {
                no_controller_since = None;
                None
            }
            Err(why) => {
                let since = *no_controller_since.get_or_insert_with(Instant::now);
                (since.elapsed() >= NO_CONTROLLER_GRACE).then_some(why)
            }
        };
        if let Some(why) = missing {
            if !ctx.options.force {
                bail!(
                    "{what}: {left}, and no controller is running to drain and terminate them ({why}): start the controller and re-run teardown, or re-run with --force to release them without it (the sweep then terminates their instances)"
                );
            }
            if !released {
                ctx.progress.note(&format!(
                    "  {what}: {left}, and no controller is running ({why}): --force releases them; the sweep terminates their instances"
                ));
                release_without_controller(ctx, r, pool).await?;
                released = true;
            }
        }
        if timed_out {
            bail!(
                "{what}: {left} after {} s (--timeout): see `kubectl get nodeclaims` and the controller's logs",
                started.elapsed().as_secs()
            );
        }
        if report_due {
            ctx.progress.note(&format!(
                "  waiting for {what}: {left} ({} s)",
                started.elapsed().as_secs()
            ));
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    let (r, pool) = match action {
        Action::DeletePool { name } => (pool_ref(name), Some(name.as_str())),
        Action::DeleteClass { name } => (class_ref(name), None),
    };
    if let Some(api) = kube_objects::api_for(ctx, &r).await? {
        kube_objects::delete(&api, &r).await?;
    }
    wait_until_gone(ctx, &r.label(), &r, pool).await
}

/// The rendered objects' refs.
pub fn desired_refs(objects: &[Value]) -> Result<Vec<ObjectRef>> {
    objects.iter().map(ObjectRef::of).collect()
}
