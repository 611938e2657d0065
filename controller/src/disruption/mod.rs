//! The disruption loop (leader only): keeps each NodeClaim's `lastPodEventTime` and
//! `Consolidatable` condition, decides with the pure core (`decide`) every `DISRUPTION_POLL`,
//! re-validates a decision after `DISRUPTION_VALIDATION`, then acts: taint the candidates
//! `karpenter.sh/disrupted:NoSchedule`; for a replacement, launch it and wait until it is
//! initialized (untaint and back off if it fails); then delete the candidates' NodeClaims,
//! which the lifecycle drains through the eviction API and terminates.

pub mod budget;
pub mod decide;
pub mod drift;

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::Recorder;
use kube::ResourceExt;
use serde_json::json;

use crate::api::duration::NillableDuration;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::aws::AwsCloud;
use crate::lifecycle::conditions::{is_true, set, INITIALIZED};
use crate::lifecycle::drain::{self, must_evict, DISRUPTED_TAINT};
use crate::provisioning::nodeclaim::from_plan;
use crate::runtime::metrics::{Metrics, ReasonLabels};
use crate::runtime::settings::Settings;
use crate::runtime::stores::Stores;
use decide::{decide, Command, Inputs};
use drift::drifted;

pub const CONSOLIDATABLE: &str = "Consolidatable";
pub const DRIFTED: &str = "Drifted";
/// How long a replacement may take to become initialized before the command is abandoned.
const REPLACEMENT_TIMEOUT: Duration = Duration::from_secs(600);

pub struct Disruptor {
    pub client: kube::Client,
    pub cloud: Arc<AwsCloud>,
    pub stores: Stores,
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
}

impl Disruptor {
    pub async fn run(self) {
        self.stores.ready().await;
        let mut pod_sets: HashMap<String, u64> = HashMap::new();
        loop {
            tokio::time::sleep(self.settings.disruption_poll).await;
            if let Err(e) = self.track(&mut pod_sets).await {
                tracing::warn!(error = %e, "updating lastPodEventTime failed");
            }
            let Some(command) = self.decide().await else {
                continue;
            };
            // The cluster moves on: act only if the same decision still holds a little later.
            tokio::time::sleep(self.settings.disruption_validation).await;
            match self.decide().await {
                Some(again) if again.same_as(&command) => {
                    if let Err(e) = self.execute(&again).await {
                        tracing::error!(error = %e, method = again.method.as_str(), "disruption failed");
                    }
                }
                _ => {
                    tracing::info!(method = command.method.as_str(), nodeclaims = %command.candidates.join(","), "disruption no longer valid after the validation delay")
                }
            }
        }
    }

    async fn decide(&self) -> Option<Command> {
        let snapshot = self.stores.snapshot();
        let types_of_class = match self
            .cloud
            .types_of_ready_classes(&snapshot.nodeclasses)
            .await
        {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "no instance types: no disruption decision this round");
                return None;
            }
        };
        let decision = decide(&Inputs {
            snapshot: &snapshot,
            types_of_class: &types_of_class,
            now: Timestamp::now(),
            settle: self.settings.disruption_settle,
            spot_to_spot: self.settings.spot_to_spot_consolidation,
        });
        for (claim, why) in &decision.kept {
            tracing::debug!(nodeclaim = %claim, reason = %why, "kept");
        }
        decision.command
    }

    /// `lastPodEventTime` moves when the set of pods on a node changes; `Consolidatable`
    /// follows `consolidateAfter`.
    async fn track(&self, pod_sets: &mut HashMap<String, u64>) -> Result<(), kube::Error> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let pods = self.stores.pods.state();
        let pools = self.stores.nodepools.state();
        let classes = self.stores.nodeclasses.state();
        let now = Timestamp::now();
        // Each node's evictable pods, once: "name/deleting" in a stable order.
        let mut on_node: HashMap<&str, Vec<String>> = HashMap::new();
        for p in pods.iter().filter(|p| must_evict(p)) {
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                on_node.entry(node).or_default().push(format!(
                    "{}/{}/{}",
                    p.namespace().unwrap_or_default(),
                    p.name_any(),
                    p.metadata.deletion_timestamp.is_some()
                ));
            }
        }
        let claims = self.stores.nodeclaims.state();
        for claim in &claims {
            let Some(mut status) = claim.status.clone() else {
                continue;
            };
            let Some(node) = status.node_name.clone() else {
                continue;
            };
            let mut names = on_node.get(node.as_str()).cloned().unwrap_or_default();
            names.sort();
            let mut h = DefaultHasher::new();
            names.hash(&mut h);
            let hash = h.finish();
            let name = claim.name_any();
            let changed = pod_sets
                .insert(name.clone(), hash)
                .is_some_and(|old| old != hash);
            let mut dirty = false;
            if changed || status.last_pod_event_time.is_none() {
                status.last_pod_event_time = Some(Time(now));
                dirty = true;
            }
            let after = pools
                .iter()
                .find(|p| Some(&p.name_any()) == claim.labels().get(labels::NODEPOOL))
                .map(|p| p.spec.disruption.consolidate_after);
            let consolidatable = match (after, &status.last_pod_event_time) {
                (Some(NillableDuration::After(d)), Some(t)) => {
                    is_true(&status.conditions, INITIALIZED)
                        && Duration::try_from(now.duration_since(t.0)).unwrap_or_default() >= d
                }
                _ => false,
            };
            let pool = pools
                .iter()
                .find(|p| Some(&p.name_any()) == claim.labels().get(labels::NODEPOOL));
            let class = classes
                .iter()
                .find(|c| c.name_any() == claim.spec.node_class_ref.name);
            let drift = pool.and_then(|p| drifted(claim, p, class.map(|c| c.as_ref())));
            let was_drifted = is_true(&status.conditions, DRIFTED);
            if drift.is_some() != was_drifted
                || drift.as_deref().is_some_and(|why| {
                    !status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == DRIFTED && c.message == why)
                })
            {
                match &drift {
                    Some(why) => {
                        tracing::info!(nodeclaim = %name, reason = %why, "drifted");
                        set(&mut status.conditions, DRIFTED, true, "Drifted", why)
                    }
                    None => status.conditions.retain(|c| c.type_ != DRIFTED),
                }
                dirty = true;
            }
            if is_true(&status.conditions, CONSOLIDATABLE) != consolidatable {
                let reason = if consolidatable {
                    "Consolidatable"
                } else {
                    "NotConsolidatable"
                };
                set(
                    &mut status.conditions,
                    CONSOLIDATABLE,
                    consolidatable,
                    reason,
                    "",
                );
                dirty = true;
            }
            if dirty {
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": status})),
                )
                .await?;
            }
        }
        let live: std::collections::HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
        pod_sets.retain(|k, _| live.contains(k));
        Ok(())
    }

    async fn event(&self, claim: &NodeClaim, warning: bool, reason: &str, note: String) {
        crate::runtime::events::publish(&self.recorder, claim, warning, reason, "Disrupt", &note)
            .await;
    }

    async fn set_taint(&self, claim: &NodeClaim, on: bool) -> Result<(), kube::Error> {
        let Some(node_name) = claim.status.as_ref().and_then(|s| s.node_name.clone()) else {
            return Ok(());
        };
        let nodes: Api<Node> = Api::all(self.client.clone());
        let Some(node) = nodes.get_opt(&node_name).await? else {
            return Ok(());
        };
        if on {
            return drain::taint(&nodes, &node).await;
        }
        let taints: Vec<_> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key != DISRUPTED_TAINT)
            .collect();
        nodes
            .patch(
                &node_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": taints}})),
            )
            .await?;
        Ok(())
    }

    async fn execute(&self, command: &Command) -> anyhow::Result<()> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let claims: Vec<NodeClaim> = self
            .stores
            .nodeclaims
            .state()
            .iter()
            .filter(|c| command.candidates.contains(&c.name_any()))
            .map(|c| c.as_ref().clone())
            .collect();
        let method = command.method.as_str();
        for c in &claims {
            self.set_taint(c, true).await?;
        }
        let mut replacements = Vec::new();
        for plan in &command.replacements {
            let pool = self
                .stores
                .nodepools
                .state()
                .into_iter()
                .find(|p| p.name_any() == plan.pool)
                .ok_or_else(|| anyhow::anyhow!("NodePool {} is gone", plan.pool))?;
            let class = self
                .stores
                .nodeclasses
                .state()
                .into_iter()
                .find(|c| c.name_any() == pool.spec.template.spec.node_class_ref.name);
            let made = api
                .create(
                    &PostParams::default(),
                    &from_plan(plan, &pool, class.as_deref()),
                )
                .await?;
            tracing::info!(method, nodeclaims = %command.candidates.join(","), replacement = %made.name_any(), saving_per_hour = command.saving, "launching a replacement");
            replacements.push(made.name_any());
        }
        let started = Instant::now();
        while !replacements.is_empty() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let current = self.stores.nodeclaims.state();
            let find = |name: &String| current.iter().find(|c| &c.name_any() == name);
            let gone = replacements.iter().any(|r| find(r).is_none());
            let ready = replacements.iter().all(|r| {
                find(r)
                    .and_then(|c| c.status.as_ref())
                    .is_some_and(|s| is_true(&s.conditions, INITIALIZED))
            });
            if ready {
                tracing::info!(replacements = %replacements.join(","), "replacement initialized");
                break;
            }
            if gone || started.elapsed() > REPLACEMENT_TIMEOUT {
                // Give the candidates back and try again later.
                let names = replacements.join(",");
                for c in &claims {
                    self.set_taint(c, false).await?;
                    self.event(
                        c,
                        true,
                        "DisruptionFailed",
                        format!("the replacement {names} did not become ready; the node stays"),
                    )
                    .await;
                }
                for r in &replacements {
                    let _ = api.delete(r, &DeleteParams::background()).await;
                }
                anyhow::bail!("replacement {names} did not become ready");
            }
        }
        for c in &claims {
            let note = format!("{method}: saves ${:.4}/h", command.saving);
            self.event(c, false, "Disrupting", note).await;
            match api.delete(&c.name_any(), &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.metrics
            .disruption_commands
            .get_or_create(&ReasonLabels {
                reason: method.to_string(),
            })
            .inc();
        tracing::info!(method, nodeclaims = %command.candidates.join(","), replacements = command.replacements.len(), saving_per_hour = command.saving, "disrupting");
        Ok(())
    }
}
