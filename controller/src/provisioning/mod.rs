//! The provisioner: batches pods kube-scheduler could not place (a window that closes 1 s
//! after the last new one, at most 10 s), solves where they go with the scheduling core, and
//! creates the NodeClaims the solution needs. Pods it cannot help get an Event saying why.

pub mod nodeclaim;
pub mod snapshot;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::Recorder;
use kube::ResourceExt;
use serde_json::json;

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::NodePool;
use crate::cloud::aws::AwsCloud;
use crate::runtime::metrics::{Metrics, ReasonLabels};
use crate::runtime::settings::Settings;
use crate::runtime::stores::Stores;
use crate::scheduling::{solve, PodKey, Rejection};

/// How often the pending set is looked at.
const TICK: Duration = Duration::from_millis(200);
/// An unchanged set of pending pods is solved again this often (capacity may have come back,
/// a class may have become Ready).
const RESOLVE_PERIOD: Duration = Duration::from_secs(10);
/// The same why-pending message is not repeated on a pod more often than this.
const EVENT_REPEAT: Duration = Duration::from_secs(300);

pub struct Provisioner {
    pub client: kube::Client,
    pub cloud: Arc<AwsCloud>,
    pub stores: Stores,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
}

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

struct Batch {
    started: Instant,
    changed: Instant,
    pods: BTreeSet<PodKey>,
}

impl Provisioner {
    pub async fn run(self) {
        self.stores.ready().await;
        let mut batch: Option<Batch> = None;
        let mut solved: Option<(BTreeSet<PodKey>, Instant)> = None;
        let mut events: HashMap<PodKey, (String, Instant)> = HashMap::new();
        loop {
            tokio::time::sleep(TICK).await;
            // Only what decides "pending" is read on this 200 ms tick.
            let cheap = snapshot::Snapshot {
                pods: self.stores.pods.state(),
                nodes: self.stores.nodes.state(),
                nodeclaims: self.stores.nodeclaims.state(),
                ..Default::default()
            };
            let pending: BTreeSet<PodKey> = snapshot::pods_to_place(&cheap)
                .iter()
                .map(|p| pod_key(p))
                .collect();
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
            let window_open = now.duration_since(b.changed) < self.settings.batch_idle
                && now.duration_since(b.started) < self.settings.batch_max;
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
            solved = Some((pending, Instant::now()));
            if let Err(e) = self.provision(&mut events).await {
                tracing::error!(error = %e, "provisioning failed; retrying");
            }
        }
    }

    /// One decision: solve the pending pods and create the NodeClaims.
    async fn provision(
        &self,
        events: &mut HashMap<PodKey, (String, Instant)>,
    ) -> anyhow::Result<()> {
        let snap = self.stores.snapshot();
        let mut cloud_errors = Vec::new();
        let types_of_class = match self.cloud.types_of_ready_classes(&snap.nodeclasses).await {
            Ok(t) => t,
            Err(e) => {
                cloud_errors.push(format!("instance types: {e}"));
                HashMap::new()
            }
        };
        let built = snapshot::build(&snap, &types_of_class);
        let started = Instant::now();
        let plan = solve(&built.problem);
        let solve_time = started.elapsed();
        self.metrics
            .solve_duration
            .observe(solve_time.as_secs_f64());

        let pods_by_key: HashMap<PodKey, &Arc<Pod>> =
            snap.pods.iter().map(|p| (pod_key(p), p)).collect();
        let pools: HashMap<String, &Arc<NodePool>> =
            snap.nodepools.iter().map(|p| (p.name_any(), p)).collect();
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let mut created = Vec::new();
        for planned in &plan.nodeclaims {
            let Some(pool) = pools.get(&planned.pool) else {
                continue;
            };
            let class = snap
                .nodeclasses
                .iter()
                .find(|c| c.name_any() == pool.spec.template.spec.node_class_ref.name);
            let claim = nodeclaim::from_plan(planned, pool, class.map(|c| c.as_ref()));
            let made = api.create(&PostParams::default(), &claim).await?;
            let name = made.name_any();
            created.push(name.clone());
            Metrics::count_pool(&self.metrics.nodeclaims_created, &planned.pool);
            let now = Timestamp::now();
            for key in &planned.pods {
                if let Some(since) = pods_by_key.get(key).and_then(|p| unschedulable_since(p)) {
                    let secs = now.duration_since(since).as_secs_f64();
                    self.metrics.decision_latency.observe(secs.max(0.0));
                }
            }
            let choice = planned.launch_choice();
            tracing::info!(
                nodeclaim = %name,
                nodepool = %planned.pool,
                pods = planned.pods.len(),
                requests = %planned.requests,
                instance_types_considered = planned.instance_types.len(),
                cheapest = %choice.as_ref().map(|c| format!("{} {} {}", c.instance_type.name, c.offering.zone, c.offering.capacity_type)).unwrap_or_default(),
                price_per_hour = choice.as_ref().map_or(0.0, |c| c.offering.price),
                "created NodeClaim"
            );
        }
        if !plan.nodeclaims.is_empty() || !plan.unschedulable.is_empty() {
            tracing::info!(
                pending = built.problem.pods.len(),
                on_existing_or_in_flight = plan.existing.values().map(Vec::len).sum::<usize>(),
                new_nodeclaims = plan.nodeclaims.len(),
                unschedulable = plan.unschedulable.len(),
                solve_ms = solve_time.as_millis() as u64,
                "provisioning decision"
            );
        }

        // Why-pending: the solver's reasons, plus pools left out and cloud failures.
        let mut counts: HashMap<&'static str, i64> = HashMap::new();
        for u in &plan.unschedulable {
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
            self.pod_event(pod, &message).await;
            events.insert(u.pod.clone(), (message, Instant::now()));
        }
        self.metrics.pods_pending.clear();
        for (reason, n) in counts {
            self.metrics
                .pods_pending
                .get_or_create(&ReasonLabels {
                    reason: reason.to_string(),
                })
                .set(n);
        }
        // The next decision must see what this one created, or it would plan them again.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let known: BTreeSet<String> = self
                .stores
                .nodeclaims
                .state()
                .iter()
                .map(|c| c.name_any())
                .collect();
            if created.iter().all(|c| known.contains(c)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    async fn pod_event(&self, pod: &Pod, message: &str) {
        crate::runtime::events::publish(
            &self.recorder,
            pod,
            true,
            "FailedProvisioning",
            "Provision",
            message,
        )
        .await;
    }
}

/// Keeps each NodePool's `status.resources` (capacity of its NodeClaims, and `nodes`) current.
pub async fn pool_status_loop(client: kube::Client, stores: Stores) {
    stores.ready().await;
    let api: Api<NodePool> = Api::all(client);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let claims = stores.nodeclaims.state();
        for pool in stores.nodepools.state() {
            let name = pool.name_any();
            let mine: Vec<_> = claims
                .iter()
                .filter(|c| c.labels().get(labels::NODEPOOL) == Some(&name))
                .collect();
            let total = nodeclaim::launched_capacity(mine.iter().map(|c| c.as_ref()));
            let mut resources = nodeclaim::quantities(&total);
            resources.insert(
                "nodes".into(),
                crate::api::Quantity::from_units(mine.len() as i128),
            );
            let nodes = mine.len() as i64;
            let unchanged = pool
                .status
                .as_ref()
                .is_some_and(|s| s.resources == resources && s.nodes == Some(nodes));
            if unchanged {
                continue;
            }
            let patch = json!({"status": {"resources": resources, "nodes": nodes}});
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(nodepool = %name, error = %e, "updating NodePool status.resources failed");
            }
        }
    }
}
