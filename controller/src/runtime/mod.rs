//! The controller process and the only composition root (`process`: settings, JSON logs, the
//! metrics and health servers, leader election, the AWS cloud, and the controllers, which run
//! only on the elected leader). Everything the controllers share lives in [`Context`].

mod context;
pub mod events;
pub mod finalizers;
pub mod leader;
pub mod nominations;
pub mod server;
pub mod stores;
pub mod taints;

// The process itself names the AWS cloud, so it exists only with the `aws` feature.
#[cfg(feature = "aws")]
mod process;

use std::sync::Arc;

pub use context::Context;
#[cfg(feature = "aws")]
pub use process::run;

use crate::controllers;

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

/// Runs CPU-bound core work (a disruption decision over a thousand nodes takes seconds) so it
/// holds up no other controller: on the multi-threaded runtime the worker hands its other
/// tasks to another thread meanwhile; elsewhere (a single-threaded test runtime) it just runs.
pub fn compute<T>(f: impl FnOnce() -> T) -> T {
    let flavor = tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor());
    match flavor {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}
