//! The controller process: settings, JSON logs, the metrics and health servers, leader
//! election, the AWS cloud, and the controllers, which run only on the elected leader.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context as _, Result};

use super::server::{self, Health};
use super::{leader, run_controllers, Context};
use crate::cloud::aws::{self, AwsCloud};
use crate::cloud::InterruptionQueue;
use crate::metrics::Metrics;
use crate::settings::Settings;

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
    tokio::spawn(super::allocator::release_freed_pages());
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
    // Only the leader acts; two leaders must never act at once, so losing the Lease (or a
    // signal) ends the process, and its supervisor restarts it as a standby.
    let work = || async {
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
        // The region's instance types and prices, fetched while the caches sync and the
        // classes resolve, so the first pending pods do not wait for them.
        tokio::spawn({
            let cloud = cloud.clone();
            async move { cloud.prefetch_offerings().await }
        });
        let queue = settings.interruption_queue.clone().map(|name| {
            Arc::new(aws::Sqs::new(&config, name, metrics.clone())) as Arc<dyn InterruptionQueue>
        });
        let (ctx, feeds) = Context::new(
            client.clone(),
            cloud,
            queue,
            settings.clone(),
            metrics.clone(),
            elector.identity(),
        );
        // Spawned, so a panicking controller ends leadership cleanly (the Lease is released).
        let _ = tokio::spawn(run_controllers(Arc::new(ctx), feeds)).await;
        Ok::<_, anyhow::Error>("a controller stopped")
    };
    let reason = tokio::select! {
        led = leader::lead(&elector, &metrics.leader, work) => match led {
            leader::Led::Lost(why) => why,
            leader::Led::Done(done) => done?,
        },
        _ = tokio::signal::ctrl_c() => "interrupted",
        _ = terminate() => "terminated",
        _ = servers => "the metrics or health server stopped",
    };
    metrics.leader.set(0);
    elector.release().await;
    tracing::info!(reason, "jointer-controller stopping");
    Ok(())
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
