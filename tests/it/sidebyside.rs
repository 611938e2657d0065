//! jointer's controller and upstream Karpenter's side by side, each on a fresh world of the
//! test environment (a harness run on purpose, not in the suite):
//!
//! `cargo test --workspace --test it sidebyside -- --ignored --nocapture`
//!
//! Scenario so far: the seed's scale-up — `jointer apply` of the seed's two pools (general
//! on-demand m5/c5/r5, spot tainted for batch), then 5 web pods of 1 CPU and 2 batch pods of
//! 1.5 CPU that tolerate the spot pool. jointer's world runs jointer-controller as a local
//! process; upstream's is applied with `controller.install: helm` and upstream's real chart,
//! and its controller runs with the environment the chart gave its Deployment. Both take their
//! prices from the same fixture (the pools allow only fixture-priced families). One row per
//! controller: nodes and instance types launched, $/hour by the fixture's prices, each pod's
//! time from creation to Running (p50, p95), AWS calls during the scale-up, peak RSS.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use super::provisioning::{
    class_ready, controller_role, deployment, namespace, world_claims, write_templates, WORLD_LABEL,
};
use super::scale::dollars_per_hour;
use crate::support::controller::Controller;
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

struct Row {
    peer: Peer,
    nodes: usize,
    types: BTreeMap<String, usize>,
    dollars: f64,
    p50: f64,
    p95: f64,
    aws_calls: usize,
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

async fn seed_scale_up(peer: Peer, port: u16) -> Row {
    let chart = std::env::var("JOINTER_UPSTREAM_CHART")
        .expect("JOINTER_UPSTREAM_CHART (source tests/env/.run/env)");
    let config = match peer {
        Peer::Jointer => "templates: { dir: nodes }".to_string(),
        Peer::Upstream => format!(
            "templates: {{ dir: nodes }}\ncontroller: {{ install: helm, helm: {{ chart: {chart} }} }}"
        ),
    };
    let s = Setup::new("side", &config).await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let ns = s.cluster.clone();
    namespace(&admin, &ns).await;
    let running = match peer {
        Peer::Jointer => Running::Jointer(Controller::start_with(
            &s.cluster,
            "replica-a",
            port,
            None,
            Some(controller_role(&admin, &s).await),
        )),
        Peer::Upstream => Running::Upstream(
            UpstreamController::start(&admin, &s.cluster, "kube-system", "karpenter", port).await,
        ),
    };
    class_ready(&admin, &s.cluster).await;

    testenv::clear_calls();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let started = Instant::now();
    let tolerate = json!({
        "tolerations": [{"key": "dedicated", "value": "spot", "effect": "NoSchedule"}],
        "nodeSelector": {WORLD_LABEL: s.cluster, "karpenter.sh/capacity-type": "spot"},
    });
    for d in [
        deployment("web", &s.cluster, 5, "1", json!({})),
        deployment("batch", &s.cluster, 2, "1500m", tolerate),
    ] {
        deployments
            .create(&PostParams::default(), &d)
            .await
            .expect("Deployment");
    }
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    // When each pod was first seen Running, polled every 250 ms.
    let mut running_at: BTreeMap<String, f64> = BTreeMap::new();
    while running_at.len() < 7 {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{}: only {running_at:?} Running after 300 s",
            peer.name()
        );
        for p in pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            if phase == Some("Running") {
                running_at
                    .entry(p.name_any())
                    .or_insert_with(|| started.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let aws_calls = testenv::calls().len();
    let claims = world_claims(&admin, &s.cluster).await;
    let mut types = BTreeMap::new();
    for c in &claims {
        let t = c
            .labels()
            .get("node.kubernetes.io/instance-type")
            .cloned()
            .unwrap_or_default();
        *types.entry(t).or_insert(0) += 1;
    }
    let mut times: Vec<f64> = running_at.values().copied().collect();
    times.sort_by(f64::total_cmp);
    let row = Row {
        peer,
        nodes: claims.len(),
        types,
        dollars: dollars_per_hour(&claims),
        p50: quantile(&times, 0.5),
        p95: quantile(&times, 0.95),
        aws_calls,
        peak_rss_mib: running.peak_rss_mib(),
    };

    // Teardown with the controller still running: it terminates its NodeClaims' instances.
    let _ = deployments.delete("web", &Default::default()).await;
    let _ = deployments.delete("batch", &Default::default()).await;
    let run = s.jointer(&["teardown", "--yes", "--timeout", "180"]);
    assert_eq!(run.code, 0, "teardown: {run:#?}");
    drop(running);
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .delete(&ns, &Default::default())
        .await;
    if peer == Peer::Upstream {
        // The helm path installed upstream's CRDs: jointer's back for what runs next.
        crate::upstream_crds::install(&admin, &crate::upstream_cel::karpenter_crds(false)).await;
    }
    row
}

#[tokio::test]
#[ignore = "a side-by-side harness: run on purpose with --ignored --nocapture"]
async fn sidebyside() {
    let _turn = testenv::TURN.lock().await;
    testenv::require();
    let mut rows = Vec::new();
    for (peer, port) in [(Peer::Jointer, 28480), (Peer::Upstream, 28490)] {
        rows.push(seed_scale_up(peer, port).await);
    }
    println!(
        "\nthe seed's scale-up (5 × 1 CPU web, 2 × 1.5 CPU spot batch), each on a fresh world:\n"
    );
    println!("| controller | nodes | instance types | $/hour | pod → Running p50 / p95 | AWS calls | peak RSS |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let types: Vec<String> = r.types.iter().map(|(t, n)| format!("{n}× {t}")).collect();
        println!(
            "| {} | {} | {} | {:.4} | {:.1} s / {:.1} s | {} | {} |",
            r.peer.name(),
            r.nodes,
            types.join(", "),
            r.dollars,
            r.p50,
            r.p95,
            r.aws_calls,
            r.peak_rss_mib
                .map_or("?".to_string(), |m| format!("{m:.0} MiB")),
        );
    }
    assert!(
        rows.iter().all(|r| r.nodes > 0 && r.dollars > 0.0),
        "every controller launched something priced"
    );
}
