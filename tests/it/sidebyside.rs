//! jointer's controller and upstream Karpenter's side by side, each on a fresh world of the
//! test environment (a harness run on purpose, not in the suite):
//!
//! `cargo test --workspace --test it sidebyside -- --ignored --nocapture`
//!
//! (`SIDEBYSIDE=mixed,interruption` runs only the scenarios named, `SIDEBYSIDE_PEER=jointer`
//! or `=upstream` only that controller; `SIDEBYSIDE_EXPLAIN=1` prints `jointer explain node`
//! for each of jointer's nodes after settling.) jointer's world runs
//! jointer-controller as a local process with its default timings; upstream's is applied with
//! `controller.install: helm` and upstream's real chart, and its controller runs with the
//! environment the chart gave its Deployment. Both run as the controller role (every AWS call
//! evaluated against the policies jointer attached) and price from the same fixture (the pools
//! allow only fixture-priced families). The scenarios:
//!
//! - **seed scale-up**: the seed's pools (general on-demand m5/c5/r5; spot, tainted, for
//!   batch), 5 web pods of 1 CPU and 2 batch pods of 1.5 CPU that tolerate the spot pool;
//! - **mixed**: zone-spread API pods, cache pods apart by hostname, arm64 pods (the general
//!   pool also allows m6g/c6g/r6g) and spot batch next to them;
//! - **one type** and **eight types**: the seed's experiment, its workload (12 × 250m, 6 × 1
//!   CPU, 3 × 1 CPU/12 GiB, 10 × 3 CPU) on a pool of m5.xlarge on-demand only, then on one of
//!   eight types across spot and on-demand;
//! - **scale-down**: the seed's pools, 10 web pods then 2 (consolidation);
//! - **interruption**: the seed's scale-up, then a spot interruption warning for the batch node.
//!
//! One row per scenario and controller: NodeClaims and instance types after settling, $/hour by
//! the fixture's prices, each pod's time from creation to Running (p50, p95), the time the
//! scale-down or the interruption took to settle, AWS calls, IAM refusals, peak RSS.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use super::provisioning::{
    class_ready, cluster_instances, controller_role, deployment, namespace, put_ec2_event, scale,
    world_claims, write_class, write_pool, write_templates, WORLD_LABEL,
};
use super::scale::dollars_per_hour;
use crate::support::controller::{Controller, Options};
use crate::support::testenv;
use crate::support::upstream::UpstreamController;
use crate::support::world::Setup;

#[derive(Clone, Copy, PartialEq)]
enum Peer {
    Jointer,
    Upstream,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::Jointer => "jointer-controller",
            Peer::Upstream => "upstream Karpenter v1.15.0",
        }
    }
}

/// The controller process of one world.
enum Running {
    Jointer(Controller),
    Upstream(UpstreamController),
}

impl Running {
    fn peak_rss_mib(&self) -> Option<f64> {
        let kib = match self {
            Running::Jointer(c) => c.peak_rss_kib(),
            Running::Upstream(u) => u.peak_rss_kib(),
        };
        kib.map(|k| k as f64 / 1024.0)
    }
}

/// What happens once every pod runs.
#[derive(Clone, Copy)]
enum Then {
    Settle,
    ScaleDown { deployment: &'static str, to: i32 },
    InterruptSpot,
}

#[derive(Clone, Copy)]
struct Scenario {
    name: &'static str,
    pools: fn(&Setup),
    workload: fn(&str) -> Vec<Deployment>,
    then: Then,
}

const SCENARIOS: [Scenario; 6] = [
    Scenario {
        name: "seed scale-up",
        pools: seed_pools,
        workload: seed_workload,
        then: Then::Settle,
    },
    Scenario {
        name: "mixed",
        pools: mixed_pools,
        workload: mixed_workload,
        then: Then::Settle,
    },
    Scenario {
        name: "one type",
        pools: one_type_pool,
        workload: experiment_workload,
        then: Then::Settle,
    },
    Scenario {
        name: "eight types",
        pools: eight_types_pool,
        workload: experiment_workload,
        then: Then::Settle,
    },
    Scenario {
        name: "scale-down",
        pools: seed_pools,
        workload: scale_down_workload,
        then: Then::ScaleDown {
            deployment: "web",
            to: 2,
        },
    },
    Scenario {
        name: "interruption",
        pools: seed_pools,
        workload: seed_workload,
        then: Then::InterruptSpot,
    },
];

fn seed_pools(s: &Setup) {
    write_templates(s, "");
}

fn mixed_pools(s: &Setup) {
    write_templates(s, "");
    write_pool(
        s,
        "general",
        "on-demand",
        "key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5, r5, m6g, c6g, r6g]",
        "",
    );
}

fn one_type_pool(s: &Setup) {
    write_class(s);
    write_pool(
        s,
        "general",
        "on-demand",
        "key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]",
        "",
    );
}

fn eight_types_pool(s: &Setup) {
    write_class(s);
    write_pool(
        s,
        "general",
        "spot, on-demand",
        "key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge, \
         m5.2xlarge, c5.xlarge, c5.2xlarge, c5.4xlarge, r5.large, r5.xlarge]",
        "",
    );
}

/// Pods that tolerate the spot pool's taint and ask for spot capacity.
fn spot_batch(cluster: &str, replicas: i32, cpu: &str) -> Deployment {
    let tolerate = json!({
        "tolerations": [{"key": "dedicated", "value": "spot", "effect": "NoSchedule"}],
        "nodeSelector": {WORLD_LABEL: cluster, "karpenter.sh/capacity-type": "spot"},
    });
    deployment("batch", cluster, replicas, cpu, tolerate)
}

fn seed_workload(cluster: &str) -> Vec<Deployment> {
    vec![
        deployment("web", cluster, 5, "1", json!({})),
        spot_batch(cluster, 2, "1500m"),
    ]
}

fn scale_down_workload(cluster: &str) -> Vec<Deployment> {
    vec![
        deployment("web", cluster, 10, "1", json!({})),
        spot_batch(cluster, 2, "1500m"),
    ]
}

/// A Deployment whose pods ask for `memory` instead of the helper's 512Mi.
fn with_memory(mut d: Deployment, memory: &str) -> Deployment {
    if let Some(spec) = d.spec.template.spec.as_mut() {
        for c in &mut spec.containers {
            if let Some(requests) = c.resources.as_mut().and_then(|r| r.requests.as_mut()) {
                requests.insert(
                    "memory".into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(memory.into()),
                );
            }
        }
    }
    d
}

fn mixed_workload(cluster: &str) -> Vec<Deployment> {
    let selector = |app: &str| json!({"matchLabels": {"app": app}});
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector("api")}]});
    let apart = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "topologyKey": "kubernetes.io/hostname", "labelSelector": selector("cache")}]}}});
    let arm = json!({"nodeSelector": {WORLD_LABEL: cluster, "kubernetes.io/arch": "arm64"}});
    vec![
        with_memory(deployment("api", cluster, 6, "500m", spread), "1Gi"),
        with_memory(deployment("cache", cluster, 3, "1", apart), "2Gi"),
        with_memory(deployment("arm", cluster, 2, "1", arm), "2Gi"),
        with_memory(spot_batch(cluster, 4, "1500m"), "2Gi"),
    ]
}

/// The seed's experiment (manifests/examples/seed/workload.yaml), as Deployments.
fn experiment_workload(cluster: &str) -> Vec<Deployment> {
    vec![
        deployment("frontend", cluster, 12, "250m", json!({})),
        with_memory(deployment("checkout", cluster, 6, "1", json!({})), "2Gi"),
        with_memory(deployment("search", cluster, 3, "1", json!({})), "12Gi"),
        with_memory(deployment("resize", cluster, 10, "3", json!({})), "2Gi"),
    ]
}

fn replicas(workload: &[Deployment]) -> usize {
    workload
        .iter()
        .map(|d| d.spec.replicas.unwrap_or(1) as usize)
        .sum()
}

struct Row {
    scenario: &'static str,
    peer: Peer,
    /// Instances launched over the run.
    launched: usize,
    nodes: usize,
    types: BTreeMap<String, usize>,
    dollars: f64,
    p50: f64,
    p95: f64,
    /// Seconds from the scale-down or the interruption warning to the last NodeClaim change.
    settle: Option<f64>,
    aws_calls: usize,
    refused: usize,
    peak_rss_mib: Option<f64>,
}

/// The `q`-quantile of sorted `values` (nearest rank).
fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// The world's NodeClaims not being deleted.
async fn live_claims(admin: &kube::Client, cluster: &str) -> Vec<kube::api::DynamicObject> {
    world_claims(admin, cluster)
        .await
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .collect()
}

fn running_pods(pods: &[Pod]) -> usize {
    pods.iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count()
}

/// Waits until `expected` pods run and the world's live NodeClaims have not changed for
/// 90 s; returns the seconds from `since` to the last change.
async fn settle(
    admin: &kube::Client,
    cluster: &str,
    pods: &Api<Pod>,
    expected: usize,
    since: Instant,
) -> f64 {
    // Long enough for jointer's consolidation of a fresh node: DISRUPTION_SETTLE (30 s), a
    // poll (10 s) and validation (15 s); upstream's has no settle.
    let quiet = Duration::from_secs(90);
    let limit = Duration::from_secs(600);
    let mut last: Option<(Vec<String>, usize)> = None;
    let mut changed = since.elapsed();
    loop {
        let claims: Vec<String> = live_claims(admin, cluster)
            .await
            .iter()
            .map(|c| c.name_any())
            .collect();
        let list = pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let state = (claims, running_pods(&list));
        if last.as_ref() != Some(&state) {
            changed = since.elapsed();
            last = Some(state.clone());
        }
        if state.1 >= expected && since.elapsed() - changed >= quiet {
            return changed.as_secs_f64();
        }
        assert!(
            since.elapsed() < limit,
            "not settled after {limit:?}: {} NodeClaims, {} of {expected} pods Running",
            state.0.len(),
            state.1
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Creates the workload and records when each pod is first seen Running (every 250 ms).
async fn scale_up(
    pods: &Api<Pod>,
    deployments: &Api<Deployment>,
    workload: &[Deployment],
) -> Vec<f64> {
    let started = Instant::now();
    for d in workload {
        deployments
            .create(&PostParams::default(), d)
            .await
            .expect("Deployment");
    }
    let expected = replicas(workload);
    let mut running_at: BTreeMap<String, f64> = BTreeMap::new();
    while running_at.len() < expected {
        assert!(
            started.elapsed() < Duration::from_secs(420),
            "only {} of {expected} pods Running after 420 s",
            running_at.len()
        );
        for p in pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                running_at
                    .entry(p.name_any())
                    .or_insert_with(|| started.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut times: Vec<f64> = running_at.into_values().collect();
    times.sort_by(f64::total_cmp);
    times
}

async fn run(scenario: Scenario, peer: Peer, port: u16) -> Row {
    let chart = std::env::var("JOINTER_UPSTREAM_CHART")
        .expect("JOINTER_UPSTREAM_CHART (source tests/env/.run/env)");
    let config = match peer {
        Peer::Jointer => "templates: { dir: nodes }".to_string(),
        Peer::Upstream => format!(
            "templates: {{ dir: nodes }}\ncontroller: {{ install: helm, helm: {{ chart: {chart} }} }}"
        ),
    };
    let s = Setup::new("side", &config).await;
    (scenario.pools)(&s);
    s.apply();
    let admin = testenv::kube().await;
    let ns = s.cluster.clone();
    namespace(&admin, &ns).await;
    let running = match peer {
        Peer::Jointer => Running::Jointer(Controller::start_with(
            &s.cluster,
            "replica-a",
            port,
            Options {
                aws: Some(controller_role(&admin, &s).await),
                default_timings: true,
                ..Options::default()
            },
        )),
        Peer::Upstream => Running::Upstream(
            UpstreamController::start(&admin, &s.cluster, "kube-system", "karpenter", port).await,
        ),
    };
    class_ready(&admin, &s.cluster).await;

    testenv::clear_calls();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let workload = (scenario.workload)(&s.cluster);
    let times = scale_up(&pods, &deployments, &workload).await;
    let mut expected = replicas(&workload);
    let settled = match scenario.then {
        Then::Settle => {
            settle(&admin, &s.cluster, &pods, expected, Instant::now()).await;
            None
        }
        Then::ScaleDown { deployment, to } => {
            // Settled first, so the figure is the scale-down's alone.
            settle(&admin, &s.cluster, &pods, expected, Instant::now()).await;
            let before = workload
                .iter()
                .find(|d| d.name_any() == deployment)
                .and_then(|d| d.spec.replicas)
                .unwrap_or(0);
            expected -= (before - to) as usize;
            let since = Instant::now();
            scale(&deployments, deployment, to).await;
            Some(settle(&admin, &s.cluster, &pods, expected, since).await)
        }
        Then::InterruptSpot => {
            let spot = live_claims(&admin, &s.cluster)
                .await
                .into_iter()
                .find(|c| {
                    c.labels()
                        .get("karpenter.sh/capacity-type")
                        .map(String::as_str)
                        == Some("spot")
                })
                .expect("a spot NodeClaim to interrupt");
            let instance = super::provisioning::instance_id(&spot);
            let since = Instant::now();
            let warning = json!({"instance-id": instance, "instance-action": "terminate"});
            put_ec2_event(
                &s,
                "EC2 Spot Instance Interruption Warning",
                warning.to_string(),
            )
            .await;
            Some(settle(&admin, &s.cluster, &pods, expected, since).await)
        }
    };
    // Counted before `jointer explain node`, whose own AWS reads are not the controller's.
    let calls = testenv::calls();
    if peer == Peer::Jointer && std::env::var_os("SIDEBYSIDE_EXPLAIN").is_some() {
        // Why each node stayed as it is: `jointer explain node`'s verdicts after settling.
        for claim in live_claims(&admin, &s.cluster).await {
            let node = claim.data["status"]["nodeName"]
                .as_str()
                .unwrap_or_default();
            let run = s.jointer(&["explain", "node", node]);
            println!("{}: {}{}", scenario.name, run.stdout, run.stderr);
        }
    }
    let aws_calls = calls.len();
    // Every instance launched for the world, terminated ones included (upstream launches
    // several NodeClaims' instances with one CreateFleet, so calls do not count them).
    let launched = cluster_instances(&s, &[]).await.len();
    let claims = live_claims(&admin, &s.cluster).await;
    let mut types = BTreeMap::new();
    for c in &claims {
        let t = c
            .labels()
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .unwrap_or_default();
        let capacity = c
            .labels()
            .get("karpenter.sh/capacity-type")
            .cloned()
            .unwrap_or_default();
        *types.entry(format!("{t} {capacity}")).or_insert(0) += 1;
    }
    let row = Row {
        scenario: scenario.name,
        peer,
        launched,
        nodes: claims.len(),
        types,
        dollars: dollars_per_hour(&claims),
        p50: quantile(&times, 0.5),
        p95: quantile(&times, 0.95),
        settle: settled,
        aws_calls,
        refused: 0,
        peak_rss_mib: running.peak_rss_mib(),
    };

    // Teardown with the controller still running: it terminates its NodeClaims' instances.
    for d in &workload {
        let _ = deployments.delete(&d.name_any(), &Default::default()).await;
    }
    let run = s.jointer(&["teardown", "--yes", "--timeout", "300"]);
    assert_eq!(run.code, 0, "teardown: {run:#?}");
    drop(running);
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .delete(&ns, &Default::default())
        .await;
    if peer == Peer::Upstream {
        // The helm path installed upstream's CRDs: jointer's back for what runs next.
        crate::upstream_crds::install(&admin, &crate::upstream_cel::karpenter_crds(false)).await;
    }
    Row {
        refused: testenv::iam_refusals(&s.cluster).len(),
        ..row
    }
}

fn print_table(rows: &[Row]) {
    println!("\n| scenario | controller | launched | nodes after settling | instance types | $/hour | pod → Running p50 / p95 | settled after | AWS calls | IAM refused | peak RSS |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let types: Vec<String> = r.types.iter().map(|(t, n)| format!("{n}× {t}")).collect();
        println!(
            "| {} | {} | {} | {} | {} | {:.4} | {:.1} s / {:.1} s | {} | {} | {} | {} |",
            r.scenario,
            r.peer.name(),
            r.launched,
            r.nodes,
            types.join(", "),
            r.dollars,
            r.p50,
            r.p95,
            r.settle.map_or("–".to_string(), |s| format!("{s:.0} s")),
            r.aws_calls,
            r.refused,
            r.peak_rss_mib
                .map_or("?".to_string(), |m| format!("{m:.0} MiB")),
        );
    }
}

#[tokio::test]
#[ignore = "a side-by-side harness: run on purpose with --ignored --nocapture"]
async fn sidebyside() {
    let _turn = testenv::TURN.lock().await;
    testenv::require();
    let only = std::env::var("SIDEBYSIDE").unwrap_or_default();
    let chosen: Vec<Scenario> = SCENARIOS
        .into_iter()
        .filter(|s| only.is_empty() || only.split(',').any(|o| s.name.contains(o.trim())))
        .collect();
    assert!(
        !chosen.is_empty(),
        "SIDEBYSIDE={only:?} names none of: {}",
        SCENARIOS.map(|s| s.name).join(", ")
    );
    let peer_only = std::env::var("SIDEBYSIDE_PEER").unwrap_or_default();
    let peers: Vec<(Peer, u16)> = [(Peer::Jointer, 28480), (Peer::Upstream, 28490)]
        .into_iter()
        .filter(|(p, _)| peer_only.is_empty() || p.name().starts_with(peer_only.as_str()))
        .collect();
    let mut rows = Vec::new();
    for scenario in chosen {
        for &(peer, port) in &peers {
            let row = run(scenario, peer, port).await;
            print_table(std::slice::from_ref(&row));
            rows.push(row);
        }
    }
    println!("\nside by side, each on a fresh world:");
    print_table(&rows);
    assert!(
        rows.iter().all(|r| r.nodes > 0 && r.dollars > 0.0),
        "every controller launched something priced"
    );
    assert!(
        rows.iter().all(|r| r.refused == 0),
        "IAM refused no controller's call while the role held its policies"
    );
}
