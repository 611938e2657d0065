//! The controller process and the only composition root (`process`: settings, JSON logs, the
//! metrics and health servers, leader election, the AWS cloud, and the controllers, which run
//! only on the elected leader). Everything the controllers share lives in [`Context`].

pub mod allocator;
mod context;
pub mod events;
pub mod finalizers;
pub mod leader;
pub mod node_pods;
pub mod nominations;
pub mod server;
pub mod stores;
pub mod taints;
pub mod trim;

// The process itself names the AWS cloud, so it exists only with the `aws` feature.
#[cfg(feature = "aws")]
mod process;

use std::sync::Arc;

pub use context::Context;
#[cfg(feature = "aws")]
pub use process::run;

use crate::controllers;

/// API writes (NodeClaims, taints, Events, deletions) one loop keeps in flight at once: a
/// thousand one round trip after another would take tens of seconds on a busy API server.
pub const WRITES_AT_ONCE: usize = 16;

/// Runs every controller over `ctx` (and the watch caches feeding it, `feeds`) until the process
/// stops. The controller tests call this with the simulated cloud.
///
/// The provisioner and disruption loops get tasks of their own: a decision over a thousand
/// nodes takes seconds of CPU, and in one joined task it would hold up launches and the
/// lifecycle meanwhile. The tasks are aborted when this future is dropped (a lost Lease, a
/// crash in the tests), so no controller outlives the leader that ran it.
pub async fn run_controllers(ctx: Arc<Context>, feeds: stores::Feeds) {
    let mut own = tokio::task::JoinSet::new();
    own.spawn(controllers::provisioner::run(ctx.clone()));
    own.spawn(controllers::disruption::run(ctx.clone()));
    tokio::join!(
        feeds.caches,
        controllers::nodeclass::run(ctx.clone(), feeds.nodeclass_changes),
        controllers::garbage::run(ctx.clone()),
        controllers::nodeclaim::run(ctx.clone(), feeds.nodeclaim_changes),
        controllers::pool_status::run(ctx.clone()),
        controllers::static_pool::run(ctx.clone()),
        controllers::overlay_status::run(ctx.clone()),
        controllers::buffer_status::run(ctx.clone()),
        controllers::pod_events::run(ctx.clone()),
        controllers::interruption::run(ctx),
        async {
            // A panic there ends this future like one here (the process then gives up the Lease).
            while let Some(done) = own.join_next().await {
                match done {
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    _ => {}
                }
            }
        },
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
