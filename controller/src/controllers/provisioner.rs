//! The provisioner: batches pods kube-scheduler could not place (a window that closes 1 s
//! after the last new one, at most 10 s), solves where they go with the scheduling core, and
//! creates the NodeClaims the solution needs. Pods it cannot help get an Event saying why.
//! CapacityBuffers' placeholder pods are pending for as long as their buffer exists: the solver
//! fits them on free room first and launches only for the rest, which keeps headroom warm.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::runtime::events::{EventType, Recorder};
use kube::ResourceExt;

use crate::api::nodeclaim::NodeClaim;
use crate::api::pod::Pod;
use crate::api::NodePool;
use crate::core::buffer;
use crate::core::nodeclaim::from_plan;
use crate::core::scheduling::{solve_with, NodeClaimPlan, Plan, PodKey, Rejection};
use crate::core::state::{build, pods_to_place, Built, Snapshot};
use crate::metrics::{Metrics, ReasonLabels};
use crate::runtime::{Context, WRITES_AT_ONCE};

/// How often the pending set is looked at.
const TICK: Duration = Duration::from_millis(200);
/// An unchanged set of pending pods is solved again this often (capacity may have come back,
/// a class may have become Ready).
const RESOLVE_PERIOD: Duration = Duration::from_secs(10);
/// The same why-pending message is not repeated on a pod more often than this.
const EVENT_REPEAT: Duration = Duration::from_secs(300);

/// The metric label of a rejection.
fn reason_label(r: &Rejection) -> &'static str {
    match r {
        Rejection::Taint(_) => "taint",
        Rejection::Requirement { .. } | Rejection::MissingLabel { .. } => "requirements",
        Rejection::NoInstanceTypeFits { .. } | Rejection::NoInstanceTypes => "no_instance_type",
        Rejection::NotProvided(_) | Rejection::UnknownResource(_) => "resource",
        Rejection::MinValues { .. } => "min_values",
        Rejection::Limit { .. } => "limit",
        Rejection::Topology(_) => "topology",
        Rejection::HostPort(_) => "host_port",
    }
}

fn pod_key(p: &Pod) -> PodKey {
    PodKey {
        namespace: p.namespace().unwrap_or_default(),
        name: p.name_any(),
    }
}

/// When kube-scheduler marked the pod unschedulable (else its creation).
fn unschedulable_since(p: &Pod) -> Option<Timestamp> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
        .or_else(|| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Whether `pods` has one that is not a CapacityBuffer's placeholder.
fn holds_real_pods(pods: &[PodKey]) -> bool {
    pods.iter().any(|k| !buffer::is_virtual(k))
}

struct Batch {
    started: Instant,
    changed: Instant,
    pods: BTreeSet<PodKey>,
}

pub async fn run(ctx: Arc<Context>) {
    ctx.stores.ready().await;
    let mut batch: Option<Batch> = None;
    let mut solved: Option<(BTreeSet<PodKey>, Instant)> = None;
    let mut events: HashMap<PodKey, (String, Instant)> = HashMap::new();
    loop {
        tokio::time::sleep(TICK).await;
        // Only what decides "pending" is read on this 200 ms tick.
        let cheap = Snapshot {
            pods: ctx.stores.pods.state(),
            nodes: ctx.stores.nodes.state(),
            nodeclaims: ctx.stores.nodeclaims.state(),
            ..Default::default()
        };
        let mut pending: BTreeSet<PodKey> =
            pods_to_place(&cheap).iter().map(|p| pod_key(p)).collect();
        pending.extend(
            buffer::sched_pods(&ctx.stores.buffers.sources())
                .into_iter()
                .map(|p| p.key),
        );
        if pending.is_empty() {
            batch = None;
            solved = None;
            continue;
        }
        let now = Instant::now();
        let b = batch.get_or_insert_with(|| Batch {
            started: now,
            changed: now,
            pods: pending.clone(),
        });
        if b.pods != pending {
            b.pods = pending.clone();
            b.changed = now;
        }
        let window_open = now.duration_since(b.changed) < ctx.settings.batch_idle
            && now.duration_since(b.started) < ctx.settings.batch_max;
        if window_open {
            continue;
        }
        batch = None;
        if solved
            .as_ref()
            .is_some_and(|(s, at)| *s == pending && at.elapsed() < RESOLVE_PERIOD)
        {
            continue;
        }
        tracing::debug!(pending = pending.len(), "provisioning pass");
        solved = Some((pending, Instant::now()));
        if let Err(e) = provision(&ctx, &mut events).await {
            tracing::error!(error = %e, "provisioning failed; retrying");
        }
    }
}

/// One decision: solve the pending pods and create the NodeClaims.
async fn provision(
    ctx: &Context,
    events: &mut HashMap<PodKey, (String, Instant)>,
) -> anyhow::Result<()> {
    let pass_started = Instant::now();
    let snap = ctx.stores.snapshot();
    let mut cloud_errors = Vec::new();
    let types_of_class = match ctx.cloud.instance_types(&snap.nodeclasses).await {
        Ok(t) => t,
        Err(e) => {
            cloud_errors.push(format!("instance types: {e}"));
            HashMap::new()
        }
    };
    let types_time = pass_started.elapsed();
    let started = Instant::now();
    let built = build(&snap, &types_of_class);
    let build_time = started.elapsed();
    let started = Instant::now();
    let plan = crate::runtime::compute(|| solve_with(&built.problem, ctx.settings.policies()));
    let solve_time = started.elapsed();
    ctx.metrics.solve_duration.observe(solve_time.as_secs_f64());
    // A node that joins for pending pods looks empty until kube-scheduler binds them: the
    // in-flight NodeClaims the plan fills are nominated (a registered node the plan fills is
    // not: were kube-scheduler to keep refusing it, a nomination renewed by every re-plan
    // would hold it from consolidation for good). A buffer's placeholders nominate nothing:
    // its headroom is kept by its own rule.
    let in_flight: BTreeSet<&str> = snap
        .nodeclaims
        .iter()
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none()
        })
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    ctx.nominations.nominate(
        plan.existing
            .iter()
            .filter(|(name, pods)| in_flight.contains(name.as_str()) && holds_real_pods(pods))
            .map(|(name, _)| name.as_str()),
        Instant::now(),
    );

    let pods_by_key: HashMap<PodKey, &Arc<Pod>> =
        snap.pods.iter().map(|p| (pod_key(p), p)).collect();
    let pools: HashMap<String, &Arc<NodePool>> =
        snap.nodepools.iter().map(|p| (p.name_any(), p)).collect();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let (planned_claims, claims): (Vec<&NodeClaimPlan>, Vec<NodeClaim>) = plan
        .nodeclaims
        .iter()
        .filter_map(|planned| {
            let pool = pools.get(&planned.pool)?;
            let class = snap
                .nodeclasses
                .iter()
                .find(|c| c.name_any() == pool.spec.template.spec.node_class_ref.name);
            Some((planned, from_plan(planned, pool, class.map(|c| c.as_ref()))))
        })
        .unzip();
    // Side by side: a thousand NodeClaims one round trip after another would hold the last
    // launch back by seconds.
    let wanted = claims.len();
    let creates_started = Instant::now();
    let creates: Vec<_> = claims
        .into_iter()
        .enumerate()
        .map(|(i, claim)| {
            let api = api.clone();
            async move { (i, api.create(&PostParams::default(), &claim).await) }
        })
        .collect();
    let results: Vec<_> = futures::stream::iter(creates)
        .buffer_unordered(WRITES_AT_ONCE)
        .collect()
        .await;
    let creates_time = creates_started.elapsed();
    let mut created = Vec::new();
    let mut created_for_pods = Vec::new();
    let mut failed = Vec::new();
    for (i, result) in results {
        let planned = planned_claims[i];
        let made = match result {
            Ok(made) => made,
            Err(e) => {
                failed.push(e);
                continue;
            }
        };
        let name = made.name_any();
        created.push(name.clone());
        if holds_real_pods(&planned.pods) {
            created_for_pods.push(name.clone());
        }
        Metrics::count_pool(&ctx.metrics.nodeclaims_created, &planned.pool);
        let now = Timestamp::now();
        for key in &planned.pods {
            if let Some(since) = pods_by_key.get(key).and_then(|p| unschedulable_since(p)) {
                let secs = now.duration_since(since).as_secs_f64();
                ctx.metrics.decision_latency.observe(secs.max(0.0));
            }
        }
        let choice = planned.launch_choice();
        tracing::info!(
            nodeclaim = %name,
            nodepool = %planned.pool,
            pods = planned.pods.len(),
            buffer_pods = planned.pods.iter().filter(|k| buffer::is_virtual(k)).count(),
            requests = %planned.requests,
            instance_types_considered = planned.instance_types.len(),
            cheapest = %choice.as_ref().map(|c| format!("{} {} {}", c.instance_type.name, c.offering.zone, c.offering.capacity_type)).unwrap_or_default(),
            price_per_hour = choice.as_ref().map_or(0.0, |c| c.offering.price),
            "created NodeClaim"
        );
    }
    ctx.nominations
        .nominate(created_for_pods.iter().map(String::as_str), Instant::now());
    let pass_time = pass_started.elapsed();
    ctx.metrics
        .provisioning_pass
        .observe(pass_time.as_secs_f64());
    if !plan.nodeclaims.is_empty() || !plan.unschedulable.is_empty() {
        tracing::info!(
            pending = built.problem.pods.len(),
            on_existing_or_in_flight = plan.existing.values().map(Vec::len).sum::<usize>(),
            new_nodeclaims = plan.nodeclaims.len(),
            unschedulable = plan.unschedulable.len(),
            // Where the pass's time went.
            types_ms = types_time.as_millis() as u64,
            build_ms = build_time.as_millis() as u64,
            solve_ms = solve_time.as_millis() as u64,
            creates_ms = creates_time.as_millis() as u64,
            pass_ms = pass_time.as_millis() as u64,
            "provisioning decision"
        );
    }

    report_unschedulable(ctx, &plan, &built, &cloud_errors, &pods_by_key, events).await;
    ctx.stores
        .await_nodeclaims(&created, Duration::from_secs(5))
        .await;
    if let Some(first) = failed.first() {
        // Their pods are still pending: the next pass plans them again.
        anyhow::bail!(
            "{} of {} NodeClaims could not be created: {first}",
            failed.len(),
            wanted
        );
    }
    Ok(())
}

async fn pod_event(recorder: &Recorder, pod: &Pod, message: &str) {
    crate::runtime::events::publish(
        recorder,
        pod,
        EventType::Warning,
        "FailedProvisioning",
        "Provision",
        message,
    )
    .await;
}

/// Why-pending: each pod the plan leaves out gets an Event with the solver's reasons, plus the
/// pools left out and the cloud's failures (not repeated within 5 minutes), and the
/// `pods_pending` gauge counts them by reason.
async fn report_unschedulable(
    ctx: &Context,
    plan: &Plan,
    built: &Built,
    cloud_errors: &[String],
    pods_by_key: &HashMap<PodKey, &Arc<Pod>>,
    events: &mut HashMap<PodKey, (String, Instant)>,
) {
    let mut counts: HashMap<&'static str, i64> = HashMap::new();
    let mut to_tell: Vec<(&Arc<Pod>, String)> = Vec::new();
    // A buffer's placeholders are no pods to tell or count: its status says it waits.
    for u in plan
        .unschedulable
        .iter()
        .filter(|u| !buffer::is_virtual(&u.pod))
    {
        let mut parts = vec![u.message()];
        for s in &built.skipped {
            parts.push(format!("NodePool {}: {}", s.pool, s.why));
        }
        parts.extend(cloud_errors.iter().cloned());
        let message = if u.reasons.is_empty() && !built.skipped.is_empty() {
            parts[1..].join("; ")
        } else {
            parts.join("; ")
        };
        let reason = u
            .reasons
            .first()
            .map(|(_, r)| reason_label(r))
            .unwrap_or("no_nodepool");
        *counts.entry(reason).or_default() += 1;
        let fresh = events
            .get(&u.pod)
            .is_none_or(|(m, at)| *m != message || at.elapsed() > EVENT_REPEAT);
        if !fresh {
            continue;
        }
        let Some(pod) = pods_by_key.get(&u.pod) else {
            continue;
        };
        tracing::warn!(pod = %format!("{}/{}", u.pod.namespace, u.pod.name), reason = %message, "pod cannot be provisioned for");
        to_tell.push((*pod, message.clone()));
        events.insert(u.pod.clone(), (message, Instant::now()));
    }
    // Thousands of pods held by a limit each get their Event: side by side, or one pass
    // would spend a minute on round trips.
    let publishes: Vec<_> = to_tell
        .into_iter()
        .map(|(pod, message)| {
            let (recorder, pod) = (ctx.recorder.clone(), pod.clone());
            async move { pod_event(&recorder, &pod, &message).await }
        })
        .collect();
    futures::stream::iter(publishes)
        .buffer_unordered(WRITES_AT_ONCE)
        .collect::<Vec<()>>()
        .await;
    ctx.metrics.pods_pending.clear();
    for (reason, n) in counts {
        ctx.metrics
            .pods_pending
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .set(n);
    }
}
