//! The figures of the closing notes, measured on the test environment: a benchmark harness
//! that prints (pending → NodeClaim and pending → Running p50/p95, controller RSS idle and
//! with 1,000 pending pods, AWS calls per node), not a pass/fail test. Run it on purpose:
//! `cargo test --test it figures -- --ignored --nocapture`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use super::provisioning::{class_ready, deployment, nodeclaims, running, write_templates, Scene};
use serde_json::json;

use crate::support::testenv::{self, wait_for};
use crate::support::world::Setup;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[tokio::test]
#[ignore = "a benchmark harness: prints figures, run it on purpose"]
async fn figures() {
    let _turn = testenv::TURN.lock().await;
    let s = Setup::new("prov-fig", "templates: { dir: nodes }").await;
    write_templates(&s, "");
    s.apply();
    let admin = testenv::kube().await;
    let scene = Scene::start(&s, &admin, 28230).await;
    let (controller, ns) = (&scene.controller, &scene.ns);
    class_ready(&admin, &s.cluster).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_rss = controller.rss_kib().unwrap_or(0);

    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let claims_api = nodeclaims(&admin);
    let replicas = 40;
    testenv::clear_calls();
    let t0 = Instant::now();
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", &s.cluster, replicas, "1", json!({})),
        )
        .await
        .expect("web");
    // Poll every 100 ms: when each pod was first seen unschedulable and Running, when each
    // NodeClaim was first seen.
    let mut unschedulable_at: BTreeMap<String, f64> = BTreeMap::new();
    let mut running_at: BTreeMap<String, f64> = BTreeMap::new();
    let mut claim_seen: BTreeMap<String, f64> = BTreeMap::new();
    while running_at.len() < replicas as usize && t0.elapsed() < Duration::from_secs(300) {
        let now = t0.elapsed().as_secs_f64();
        for p in pods.list(&ListParams::default()).await.expect("pods").items {
            let name = p.metadata.name.clone().unwrap_or_default();
            let status = p.status.clone().unwrap_or_default();
            let unsched = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False");
            if unsched {
                unschedulable_at.entry(name.clone()).or_insert(now);
            }
            if status.phase.as_deref() == Some("Running") {
                running_at.entry(name).or_insert(now);
            }
        }
        for c in claims_api
            .list(&ListParams::default())
            .await
            .expect("claims")
            .items
        {
            claim_seen
                .entry(c.metadata.name.clone().unwrap_or_default())
                .or_insert(now);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = testenv::calls();
    let scale_up = t0.elapsed();
    let claims = claims_api
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items;
    let claim_of_node: BTreeMap<String, String> = claims
        .iter()
        .filter_map(|c| {
            Some((
                c.data["status"]["nodeName"].as_str()?.to_string(),
                c.metadata.name.clone()?,
            ))
        })
        .collect();
    let mut to_claim = Vec::new();
    let mut to_running = Vec::new();
    for p in pods.list(&ListParams::default()).await.expect("pods").items {
        let name = p.metadata.name.clone().unwrap_or_default();
        let Some(&start) = unschedulable_at.get(&name) else {
            continue;
        };
        if let Some(claim) = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .and_then(|n| claim_of_node.get(n))
        {
            if let Some(seen) = claim_seen.get(claim) {
                to_claim.push((seen - start).max(0.0));
            }
        }
        if let Some(r) = running_at.get(&name) {
            to_running.push(r - start);
        }
    }
    to_claim.sort_by(f64::total_cmp);
    to_running.sort_by(f64::total_cmp);
    let aws_calls = calls.len();

    // Ten pods that may not share a node: ten NodeClaims, for the AWS calls per node.
    testenv::clear_calls();
    let before = claims.len();
    let apart = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "apart"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    deployments
        .create(
            &PostParams::default(),
            &deployment("apart", &s.cluster, 10, "100m", apart),
        )
        .await
        .expect("apart");
    wait_for(
        "the ten apart pods Running",
        Duration::from_secs(300),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=apart"))
                .await
                .ok()?
                .items;
            (running(&list) == 10).then_some(())
        },
    )
    .await;
    let apart_calls = testenv::calls();
    let apart_nodes = claims_api
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items
        .len()
        - before;
    let mut by_operation: BTreeMap<String, usize> = BTreeMap::new();
    for c in &apart_calls {
        *by_operation
            .entry(c["operation"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }

    // 1,000 pods no pool can take: the controller holds and re-solves them.
    deployments
        .create(
            &PostParams::default(),
            &deployment(
                "stuck",
                &s.cluster,
                1000,
                "100m",
                json!({"nodeSelector": {"jointer.dev/never": "true"}}),
            ),
        )
        .await
        .expect("stuck");
    let big = wait_for(
        "a decision over 1,000 pending pods",
        Duration::from_secs(300),
        || async {
            controller
                .log_events("provisioning decision")
                .into_iter()
                .find(|l| l["fields"]["pending"].as_u64() >= Some(1000))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let busy_rss = controller.rss_kib().unwrap_or(0);

    eprintln!(
        "FIGURES ({} pods of 1 CPU, node join delay as configured in tests/env/lib.sh)",
        replicas
    );
    eprintln!("  NodeClaims: {}", claims.len());
    eprintln!(
        "  pending → NodeClaim created: p50 {:.2} s, p95 {:.2} s (n={})",
        percentile(&to_claim, 50.0),
        percentile(&to_claim, 95.0),
        to_claim.len()
    );
    eprintln!(
        "  pending → Running:           p50 {:.2} s, p95 {:.2} s (n={})",
        percentile(&to_running, 50.0),
        percentile(&to_running, 95.0),
        to_running.len()
    );
    eprintln!(
        "  AWS calls during the scale-up: {aws_calls} ({:.1} per node); all Running after {:.1} s",
        aws_calls as f64 / claims.len().max(1) as f64,
        scale_up.as_secs_f64()
    );
    eprintln!(
        "  ten pods with hostname anti-affinity: {apart_nodes} NodeClaims, {} AWS calls ({:.1} per node): {by_operation:?}",
        apart_calls.len(),
        apart_calls.len() as f64 / apart_nodes.max(1) as f64
    );
    eprintln!(
        "  controller RSS idle: {:.1} MiB; with 1,000 pending pods: {:.1} MiB",
        idle_rss as f64 / 1024.0,
        busy_rss as f64 / 1024.0
    );
    eprintln!(
        "  solve over {} pending pods: {} ms",
        big["fields"]["pending"], big["fields"]["solve_ms"]
    );

    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    deployments
        .delete("stuck", &DeleteParams::default())
        .await
        .expect("delete");
    deployments
        .delete("apart", &DeleteParams::default())
        .await
        .expect("delete");
    scene.end().await;
}
