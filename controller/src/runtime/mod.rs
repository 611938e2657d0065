//! The controller process and the only composition root: settings, JSON logs, the metrics
//! and health servers, leader election, the AWS cloud, and the controllers, which run only on
//! the elected leader. Everything the controllers share lives in [`Context`].

mod context;
pub mod events;
pub mod finalizers;
pub mod leader;
pub mod server;
pub mod stores;
pub mod taints;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context as _, Result};

pub use context::Context;

use crate::cloud::aws::{self, AwsCloud};
use crate::cloud::InterruptionQueue;
use crate::controllers;
use crate::metrics::Metrics;
use crate::settings::Settings;
use server::Health;
fn init_logs(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_current_span(false)
        .with_env_filter(filter)
        .try_init();
}

/// `1.34` from the API server's version.
async fn kubernetes_version(client: &kube::Client) -> Result<String> {
    let info = client
        .apiserver_version()
        .await
        .context("reading the API server's version")?;
    let minor: String = info
        .minor
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Ok(format!("{}.{minor}", info.major))
}

pub async fn run(settings: Settings) -> Result<()> {
    init_logs(&settings.log_level);
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let servers = tokio::spawn(server::serve(
        settings.metrics_port,
        settings.health_port,
        metrics.clone(),
        health.clone(),
    ));

    let client = crate::clients::kube_client()
        .await
        .context("connecting to the Kubernetes API (in-cluster or KUBECONFIG)")?;
    let config = crate::clients::aws_config(Some(&settings.region)).await;
    let kubernetes = kubernetes_version(&client).await?;
    health.ready.store(true, Ordering::Relaxed);
    tracing::info!(cluster = %settings.cluster_name, region = %settings.region, %kubernetes, "jointer-controller started");

    let elector = leader::Elector::new(
        client.clone(),
        &settings.lease_namespace(),
        settings.identity(),
    );
    // Wait for the Lease; a standby replica stays here.
    loop {
        match elector.try_acquire_or_renew().await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election"),
        }
        tokio::time::sleep(leader::RETRY).await;
    }
    metrics.leader.set(1);
    tracing::info!(identity = %elector.identity(), "elected leader");

    let cluster = aws::describe_cluster(
        &aws_sdk_eks::Client::new(&config),
        &settings.cluster_name,
        settings.cluster_endpoint.as_deref(),
        &metrics,
    )
    .await?;
    let cloud = Arc::new(AwsCloud::new(
        &config,
        &settings.region,
        cluster,
        &kubernetes,
        metrics.clone(),
    )?);
    let queue = settings.interruption_queue.clone().map(|name| {
        Arc::new(aws::Sqs::new(&config, name, metrics.clone())) as Arc<dyn InterruptionQueue>
    });
    let (ctx, caches) = Context::new(
        client,
        cloud,
        queue,
        settings,
        metrics.clone(),
        elector.identity(),
    );
    let controllers = tokio::spawn(run_controllers(Arc::new(ctx), caches));
    // Keep the Lease; losing it (or a signal) ends the process, and its supervisor restarts
    // it as a standby: two leaders must never act at once.
    let renew = async {
        let mut failures: u64 = 0;
        loop {
            tokio::time::sleep(leader::RETRY).await;
            match elector.try_acquire_or_renew().await {
                Ok(true) => failures = 0,
                Ok(false) => return "the leader Lease was taken by another replica",
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "renewing the leader Lease");
                    if failures * leader::RETRY.as_secs() >= leader::LEASE_DURATION.as_secs() {
                        return "could not renew the leader Lease";
                    }
                }
            }
        }
    };
    let reason = tokio::select! {
        why = renew => why,
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = terminate() => "terminated",
        _ = controllers => "a controller stopped",
        _ = servers => "the metrics or health server stopped",
    };
    metrics.leader.set(0);
    elector.release().await;
    tracing::info!(reason, "jointer-controller stopping");
    Ok(())
}

/// Runs every controller over `ctx` (and the watch caches feeding it) until the process
/// stops. The controller tests call this with the simulated cloud.
pub async fn run_controllers(ctx: Arc<Context>, caches: impl std::future::Future<Output = ()>) {
    tokio::join!(
        caches,
        controllers::nodeclass::run(ctx.clone()),
        controllers::garbage::run(ctx.clone()),
        controllers::provisioner::run(ctx.clone()),
        controllers::nodeclaim::run(ctx.clone()),
        controllers::pool_status::run(ctx.clone()),
        controllers::static_pool::run(ctx.clone()),
        controllers::overlay_status::run(ctx.clone()),
        controllers::buffer_status::run(ctx.clone()),
        controllers::pod_events::run(ctx.clone()),
        controllers::disruption::run(ctx.clone()),
        controllers::interruption::run(ctx),
    );
}

/// SIGTERM, as Kubernetes sends on pod deletion.
async fn terminate() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}
