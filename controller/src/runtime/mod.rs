//! The controller process: settings, JSON logs, the metrics and health servers, leader
//! election, and the controllers, which run only on the elected leader.

pub mod events;
pub mod finalizers;
pub mod leader;
pub mod metrics;
pub mod server;
pub mod settings;
pub mod stores;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context as _, Result};

use crate::cloud::aws::{describe_cluster, AwsCloud};
use crate::{disruption, garbage, interruption, lifecycle, nodeclass, provisioning};
use metrics::Metrics;
use server::Health;
use settings::Settings;

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
    let aws = crate::clients::aws_config(Some(&settings.region)).await;
    let ctx = Arc::new(nodeclass::Ctx {
        kubernetes_version: kubernetes_version(&client).await?,
        ec2: aws_sdk_ec2::Client::new(&aws),
        iam: aws_sdk_iam::Client::new(&aws),
        ssm: aws_sdk_ssm::Client::new(&aws),
        client: client.clone(),
        settings: settings.clone(),
        metrics: metrics.clone(),
    });
    health.ready.store(true, Ordering::Relaxed);
    tracing::info!(cluster = %settings.cluster_name, region = %settings.region, kubernetes = %ctx.kubernetes_version, "jointer-controller started");

    let elector = leader::Elector::new(client, &settings.lease_namespace(), settings.identity());
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

    let collector = garbage::Collector {
        client: ctx.client.clone(),
        ec2: ctx.ec2.clone(),
        cluster: settings.cluster_name.clone(),
        grace: settings.gc_grace,
        metrics: metrics.clone(),
    };
    let cluster = describe_cluster(
        &aws_sdk_eks::Client::new(&aws),
        &settings.cluster_name,
        settings.cluster_endpoint.as_deref(),
    )
    .await?;
    let cloud = Arc::new(AwsCloud::new(
        &aws,
        &settings.region,
        cluster,
        metrics.clone(),
    )?);
    let (stores, caches) = stores::Stores::start(&ctx.client);
    let reporter = kube::runtime::events::Reporter {
        controller: "jointer-controller".into(),
        instance: Some(elector.identity().to_string()),
    };
    let recorder = kube::runtime::events::Recorder::new(ctx.client.clone(), reporter);
    let provisioner = provisioning::Provisioner {
        client: ctx.client.clone(),
        cloud: cloud.clone(),
        stores: stores.clone(),
        settings: settings.clone(),
        metrics: metrics.clone(),
        recorder: recorder.clone(),
    };
    let lifecycle_ctx = Arc::new(lifecycle::Ctx {
        client: ctx.client.clone(),
        cloud,
        stores: stores.clone(),
        metrics: metrics.clone(),
        recorder,
    });
    let disruptor = disruption::Disruptor {
        client: ctx.client.clone(),
        cloud: lifecycle_ctx.cloud.clone(),
        stores: stores.clone(),
        settings: settings.clone(),
        metrics: metrics.clone(),
        recorder: lifecycle_ctx.recorder.clone(),
    };
    let interruption = settings
        .interruption_queue
        .clone()
        .map(|queue| interruption::Handler {
            sqs: aws_sdk_sqs::Client::new(&aws),
            queue,
            client: ctx.client.clone(),
            stores: stores.clone(),
            cloud: lifecycle_ctx.cloud.clone(),
            metrics: metrics.clone(),
            recorder: lifecycle_ctx.recorder.clone(),
            act_on_rebalance: settings.interruption_act_on_rebalance,
        });
    let interruption = async move {
        match interruption {
            Some(h) => h.run().await,
            None => {
                tracing::info!("INTERRUPTION_QUEUE unset: interruption handling is off");
                std::future::pending::<()>().await
            }
        }
    };
    let pool_status = provisioning::pool_status_loop(ctx.client.clone(), stores);
    let controllers = tokio::spawn(async move {
        tokio::join!(
            caches,
            nodeclass::run(ctx),
            collector.run(),
            provisioner.run(),
            lifecycle::run(lifecycle_ctx),
            pool_status,
            disruptor.run(),
            interruption,
        );
    });
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

/// SIGTERM, as Kubernetes sends on pod deletion.
async fn terminate() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending::<()>().await,
    }
}
