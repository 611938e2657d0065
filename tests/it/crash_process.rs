//! Crash-anywhere for the real process: jointer-controller, run as it runs in its pod (its
//! ServiceAccount's token, moto behind the gap layer, the interruption queue `jointer apply`
//! made), is SIGKILLed at random moments — while it launches, registers, drains,
//! consolidates or handles a spot warning — and started again with the same identity, as the
//! kubelet restarts a crashed container. Nothing it held in memory survives: not its caches,
//! not the offerings it had found unavailable, not a half-handled queue message (SQS gives it
//! again after the visibility timeout). After every kill and once settled the invariants are
//! counted from EC2 and the API server themselves. `CRASH_ROUNDS` sets the rounds (5 in the
//! suite; `CRASH_ROUNDS=100` on purpose), `CRASH_SEED` the random choices.
//!
//! The in-process harness (`controller/tests/it/crash.rs`) runs more rounds faster on the
//! simulated cloud; this one proves the same of the binary, its AWS clients and its restart.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jointer_controller::core::benchmark::Rng;
use jointer_controller::core::drain::without_disrupted_taint;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use crate::provisioning::{
    claim_of, class_ready, cluster_instances, deployment, instance_id, instances_by_claim,
    nodeclaims, put_ec2_event, running, scale, world_claims, write_templates, Scene,
};
use crate::support::harness::{cpus, env_number, unclaimed_nodes};
use crate::support::testenv::{self, wait_for};
use crate::support::world::Setup;

const CPU_LIMIT: u64 = 40;

/// What the killed process was in the middle of.
#[derive(Default)]
struct Caught {
    launching: usize,
    registering: usize,
    draining: usize,
}

impl Caught {
    fn add(&mut self, claims: &[DynamicObject]) {
        for c in claims {
            let status = &c.data["status"];
            if c.metadata.deletion_timestamp.is_some() {
                self.draining += 1;
            } else if status["providerID"].is_null() {
                self.launching += 1;
            } else if status["nodeName"].is_null() {
                self.registering += 1;
            }
        }
    }
}

/// The invariants that hold at every moment, counted at every kill.
#[derive(Default)]
struct Broken {
    /// NodeClaims with more than one instance, ever.
    duplicates: BTreeSet<String>,
    over_limit: usize,
    peak_cpu: u64,
}

impl Broken {
    async fn check(&mut self, s: &Setup, claims: &[DynamicObject]) {
        for (claim, ids) in instances_by_claim(s).await {
            if ids.len() > 1 {
                self.duplicates.insert(claim);
            }
        }
        let cpu: u64 = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| c.data["status"]["capacity"]["cpu"].as_str().map(cpus))
            .sum();
        self.peak_cpu = self.peak_cpu.max(cpu);
        self.over_limit += usize::from(cpu > CPU_LIMIT);
    }
}

/// What is still wrong once the world had time to settle.
#[derive(Debug, Default, PartialEq)]
struct Settled {
    lost_pods: usize,
    leaked_instances: usize,
    stuck_finalizers: usize,
    unhandled_messages: usize,
    tainted_nodes: usize,
    /// Pool Nodes no NodeClaim accounts for (by provider ID): room the provisioner might
    /// count that no pod can use.
    phantom_nodes: usize,
}

async fn queued(s: &Setup) -> usize {
    let Some(url) = s.queue_url().await else {
        return usize::MAX;
    };
    let Ok(attrs) = s
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(
            aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        )
        .send()
        .await
    else {
        return usize::MAX;
    };
    attrs
        .attributes()
        .into_iter()
        .flat_map(|m| m.values())
        .filter_map(|v| v.parse::<usize>().ok())
        .sum()
}

async fn settled(s: &Setup, admin: &kube::Client, ns: &str, apps: &[(&str, usize)]) -> Settled {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let mut lost_pods = 0;
    for (app, replicas) in apps {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let live: Vec<Pod> = list
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        lost_pods += replicas.saturating_sub(running(&live));
    }
    let claims = world_claims(admin, &s.cluster).await;
    let named: BTreeSet<String> = claims.iter().map(|c| c.name_any()).collect();
    let leaked_instances = cluster_instances(s, &["pending", "running"])
        .await
        .iter()
        .filter(|i| !named.contains(claim_of(i)))
        .count();
    let nodes: Api<Node> = Api::all(admin.clone());
    let claimed: BTreeSet<&str> = claims
        .iter()
        .filter_map(|c| c.data["status"]["providerID"].as_str())
        .collect();
    let pool_nodes = nodes
        .list(&ListParams::default().labels("karpenter.sh/nodepool"))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let phantom_nodes = unclaimed_nodes(&pool_nodes, &claimed);
    let mut tainted_nodes = 0;
    for claim in claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        if let Some(name) = claim.data["status"]["nodeName"].as_str() {
            let node = nodes.get_opt(name).await.ok().flatten();
            tainted_nodes +=
                usize::from(node.is_some_and(|n| without_disrupted_taint(&n).is_some()));
        }
    }
    Settled {
        lost_pods,
        leaked_instances,
        stuck_finalizers: claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
            .count(),
        unhandled_messages: queued(s).await,
        tainted_nodes,
        phantom_nodes,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_process_survives_sigkill_at_random_moments() {
    let _turn = testenv::TURN.lock().await;
    let rounds = env_number("CRASH_ROUNDS", 5);
    let seed = env_number("CRASH_SEED", 7);
    let s = Setup::new("crash-proc", "templates: { dir: nodes }").await;
    write_templates(
        &s,
        "        - { key: karpenter.k8s.aws/instance-size, operator: In, values: [large, xlarge, 2xlarge] }
  limits: { cpu: \"40\" }
  disruption: { consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s }
",
    );
    s.apply().succeeded();
    let admin = testenv::kube().await;
    let mut scene = Scene::start(&s, &admin, 28350).await;
    class_ready(&admin, &s.cluster).await;
    let ns = scene.ns.clone();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    for d in [
        deployment("app", &s.cluster, 4, "1", json!({})),
        // Loners share nodes only with each other: shrinking their group leaves a node too
        // big for what stays on it, so consolidation replaces it with a cheaper one.
        deployment(
            "loner",
            &s.cluster,
            2,
            "1500m",
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "app"}},
                "topologyKey": "kubernetes.io/hostname",
            }]}}}),
        ),
    ] {
        deployments
            .create(&PostParams::default(), &d)
            .await
            .expect("deployment");
    }

    let mut rng = Rng::new(seed);
    let mut broken = Broken::default();
    let mut caught = Caught::default();
    let mut actions: BTreeMap<&str, usize> = BTreeMap::new();
    let mut restart_to_leading = Vec::new();
    let started = Instant::now();
    for _ in 0..rounds {
        let claims = world_claims(&admin, &s.cluster).await;
        let launched: Vec<&DynamicObject> = claims
            .iter()
            .filter(|c| !c.data["status"]["providerID"].is_null())
            .collect();
        let action = match rng.below(6) {
            0 if !launched.is_empty() => {
                let claim = launched[rng.below(launched.len())];
                let detail =
                    json!({"instance-id": instance_id(claim), "instance-action": "terminate"});
                put_ec2_event(
                    &s,
                    "EC2 Spot Instance Interruption Warning",
                    detail.to_string(),
                )
                .await;
                "interrupt a node"
            }
            1 if !launched.is_empty() => {
                let claim = launched[rng.below(launched.len())];
                let _ = nodeclaims(&admin)
                    .delete(&claim.name_any(), &DeleteParams::background())
                    .await;
                "delete a NodeClaim"
            }
            2 => {
                scale(&deployments, "app", 1 + rng.below(4) as i32).await;
                "scale down"
            }
            3 => {
                scale(&deployments, "loner", 1 + rng.below(4) as i32).await;
                "resize the loners"
            }
            _ => {
                scale(&deployments, "app", 4 + rng.below(28) as i32).await;
                "scale up"
            }
        };
        *actions.entry(action).or_default() += 1;
        // A restarted process first syncs its caches and waits out the pod batch (1 s idle):
        // the kill may come before it acts, while it launches, or once nodes register.
        tokio::time::sleep(Duration::from_millis(rng.below(6000) as u64)).await;
        scene.controller.kill();
        let claims = world_claims(&admin, &s.cluster).await;
        caught.add(&claims);
        broken.check(&s, &claims).await;
        tokio::time::sleep(Duration::from_millis(rng.below(500) as u64)).await;
        let restarted = Instant::now();
        scene.controller.restart();
        // The same identity takes its own Lease back at once: no standby wait per round.
        wait_for(
            "the restarted controller to lead",
            Duration::from_secs(60),
            || async {
                (scene.controller.metric("jointer_controller_leader ") == 1.0).then_some(())
            },
        )
        .await;
        restart_to_leading.push(restarted.elapsed().as_secs_f64());
    }

    let apps = [("app", 6), ("loner", 1)];
    for (app, replicas) in apps {
        scale(&deployments, app, replicas as i32).await;
    }
    let settling = Instant::now();
    let mut left = Settled::default();
    let clean = Settled::default();
    let deadline = settling + Duration::from_secs(240);
    while Instant::now() < deadline {
        let claims = world_claims(&admin, &s.cluster).await;
        broken.check(&s, &claims).await;
        left = settled(&s, &admin, &ns, &apps).await;
        if left == clean {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    restart_to_leading.sort_by(f64::total_cmp);
    let launches: usize = instances_by_claim(&s).await.values().map(Vec::len).sum();
    eprintln!(
        "process crash-anywhere, seed {seed}: {rounds} SIGKILLs survived in {:.0} s ({actions:?}), \
         restart → leading median {:.1} s; at the kills {} NodeClaims were launching, {} registering, \
         {} draining; settled in {:.0} s; {launches} instances launched, peak {} of {CPU_LIMIT} CPUs.\n\
         duplicate instances {}, NodePool limit passed {} times, {left:?}",
        started.elapsed().as_secs_f64(),
        restart_to_leading
            .get(restart_to_leading.len() / 2)
            .copied()
            .unwrap_or(0.0),
        caught.launching,
        caught.registering,
        caught.draining,
        settling.elapsed().as_secs_f64(),
        broken.peak_cpu,
        broken.duplicates.len(),
        broken.over_limit,
    );
    assert!(
        broken.duplicates.is_empty(),
        "NodeClaims launched twice: {:?}",
        broken.duplicates
    );
    assert_eq!(broken.over_limit, 0, "the NodePool's CPU limit was passed");
    assert_eq!(left, clean, "what is left wrong after settling");
    for app in ["app", "loner"] {
        deployments
            .delete(app, &DeleteParams::default())
            .await
            .expect("delete");
    }
    scene.end().await;
}
