//! `/metrics` on the metrics port, `/healthz` and `/readyz` on the health port.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;

/// Ready once the clients work and the caches are filled; alive while the process runs.
#[derive(Default)]
pub struct Health {
    pub ready: AtomicBool,
}

pub async fn serve(
    metrics_port: u16,
    health_port: u16,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> anyhow::Result<()> {
    let metrics_app = Router::new()
        .route("/metrics", get(render_metrics))
        .with_state(metrics);
    let health_app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health);
    let metrics_listener =
        tokio::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], metrics_port))).await?;
    let health_listener =
        tokio::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], health_port))).await?;
    tokio::try_join!(
        axum::serve(metrics_listener, metrics_app),
        axum::serve(health_listener, health_app)
    )?;
    Ok(())
}

async fn render_metrics(State(metrics): State<Arc<Metrics>>) -> String {
    metrics.encode()
}

async fn readyz(State(health): State<Arc<Health>>) -> (StatusCode, &'static str) {
    if health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}
