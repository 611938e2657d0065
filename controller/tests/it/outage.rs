//! The API server restarted under the running controllers. They talk to a second
//! kube-apiserver on the test world's etcd (two API servers on one etcd, as in an HA control
//! plane), which the test kills with SIGKILL, keeps down for 30 s while pods keep arriving
//! through the first, and starts again. The new process's watch cache begins at etcd's
//! current revision, so every watch resuming from before the kill is answered 410 Gone
//! (checked with a watch of our own); the controllers must relist, provision what was asked
//! meanwhile and launch nothing twice.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jointer_controller::api::nodeclaim::NodeClaim;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::controllers::{deployment, Scene};
use crate::testenv::{self, wait_for};

/// A second kube-apiserver, started with the test world's own command line (up.sh writes it
/// to `kube-apiserver.command`) on another port and with its own audit log.
struct ApiServer {
    command: Vec<String>,
    port: u16,
    log: PathBuf,
    process: Option<Child>,
}

impl ApiServer {
    fn configured() -> ApiServer {
        let run_dir = PathBuf::from(
            std::env::var("JOINTER_TESTENV_RUN_DIR")
                .expect("JOINTER_TESTENV_RUN_DIR (source tests/env/.run/env)"),
        );
        let file = run_dir.join("kube-apiserver.command");
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; an environment started before up.sh wrote it: restart it with tests/env/down.sh && tests/env/up.sh",
                file.display()
            )
        });
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let audit = run_dir.join("kube-apiserver-restarted.audit.log");
        let command = text
            .lines()
            .map(|arg| {
                if arg.starts_with("--secure-port=") {
                    format!("--secure-port={port}")
                } else if arg.starts_with("--audit-log-path=") {
                    format!("--audit-log-path={}", audit.display())
                } else {
                    arg.to_string()
                }
            })
            .collect();
        ApiServer {
            command,
            port,
            log: run_dir.join("logs").join("kube-apiserver-restarted.log"),
            process: None,
        }
    }

    /// Starts the process and waits until it serves NodeClaims (its CRDs loaded from etcd):
    /// the seconds that took.
    async fn start(&mut self, client: &kube::Client) -> f64 {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("API server log");
        let started = Instant::now();
        self.process = Some(
            Command::new(&self.command[0])
                .args(&self.command[1..])
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log"))
                .stderr(log)
                .spawn()
                .expect("start the second kube-apiserver"),
        );
        let claims: Api<NodeClaim> = Api::all(client.clone());
        let log = self.log.display().to_string();
        wait_for(
            &format!("the second kube-apiserver to serve NodeClaims (its log: {log})"),
            Duration::from_secs(120),
            || async {
                claims
                    .list(&ListParams::default().limit(1))
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
        started.elapsed().as_secs_f64()
    }

    /// SIGKILL: no graceful shutdown, every connection and watch dropped at once.
    fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// An admin client that reaches this server.
    async fn client(&self) -> kube::Client {
        let mut config = kube::Config::infer().await.expect("kubeconfig");
        config.cluster_url = format!("https://127.0.0.1:{}", self.port)
            .parse()
            .expect("URL");
        kube::Client::try_from(config).expect("client")
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a watch from `version` is refused with 410 Gone: the first thing it yields.
async fn expired(pods: &Api<Pod>, version: &str) -> bool {
    let Ok(stream) = pods
        .watch(&WatchParams::default().timeout(5), version)
        .await
    else {
        return false;
    };
    let mut stream = Box::pin(stream);
    match stream.next().await {
        Some(Ok(WatchEvent::Error(e))) => e.code == 410,
        Some(Err(kube::Error::Api(e))) => e.code == 410,
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controllers_ride_out_their_api_server_killed_and_restarted_30_seconds_later() {
    let _turn = testenv::TURN.lock().await;
    let mut s = Scene::start("restart", json!({}), |_| {}).await;
    let mut server = ApiServer::configured();
    let second = server.client().await;
    let first_start = server.start(&second).await;
    s.crash().await;
    s.controller_client = Some(second.clone());
    s.restart();
    deployment(&s, "app", 2, "1").await;
    let running = |count: usize| {
        let s = &s;
        async move {
            let pods = s
                .pods()
                .list(&ListParams::default().labels("app=app"))
                .await
                .ok()?
                .items;
            let up = pods
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            (up == count).then_some(())
        }
    };
    wait_for("2 pods Running", Duration::from_secs(60), || running(2)).await;
    let launched_before = s.sim.instances().len();

    // Killed; the revision read right after is at least any the controllers had seen.
    server.kill();
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &s.name);
    let at_kill = pods
        .list(&ListParams::default().limit(1))
        .await
        .expect("list pods")
        .metadata
        .resource_version
        .expect("a list's resourceVersion");
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &s.name);
    deployments
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 8}})),
        )
        .await
        .expect("scale");
    tokio::time::sleep(Duration::from_secs(30)).await;
    let launched_blind = s.sim.instances().len() - launched_before;
    let restart = server.start(&second).await;
    let back = Instant::now();
    let gone = expired(&Api::namespaced(second.clone(), &s.name), &at_kill).await;
    wait_for(
        "8 pods Running after the restart",
        Duration::from_secs(120),
        || running(8),
    )
    .await;
    let recovered = back.elapsed().as_secs_f64();

    let mut per_claim = std::collections::BTreeMap::<String, usize>::new();
    for i in s.sim.instances() {
        *per_claim.entry(i.nodeclaim).or_default() += 1;
    }
    let duplicates = per_claim.values().filter(|n| **n > 1).count();
    eprintln!(
        "API server killed for 30 s and restarted (it serves again {restart:.1} s after its start; \
         {first_start:.1} s the first time): a watch from before the kill is answered 410 Gone: {gone}; \
         {launched_blind} instances launched while it was down; the 6 pods asked for meanwhile \
         Running {recovered:.1} s after it served again; {} instances in all, duplicates {duplicates}",
        s.sim.instances().len()
    );
    assert!(
        gone,
        "the restarted API server resumed a watch from before the kill (resourceVersion {at_kill}): \
         the controllers' relist after 410 Gone was not exercised"
    );
    assert_eq!(
        launched_blind, 0,
        "nothing is launched without the API server"
    );
    assert_eq!(duplicates, 0, "a NodeClaim launched twice");
    // The controllers still reach the second server while the scene is cleaned up; it is
    // killed when `server` drops.
    s.finish().await;
}
