//! Watch-backed caches of the objects the controllers read (pods, nodes, NodeClaims,
//! NodePools, EC2NodeClasses, NodeOverlays, DaemonSets, PodDisruptionBudgets; CapacityBuffers
//! and the PodTemplates and workloads they name): decisions read memory, not the API server.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, PodTemplate};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::{watcher, WatchStreamExt};

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::api::pod::Pod;
use crate::api::{CapacityBuffer, NodeOverlay, NodePool};
use crate::core::buffer;
use crate::core::state::Snapshot;

use super::trim;

/// How long startup waits for the CapacityBuffer list: the CRD may not be installed (it is
/// shared with Cluster Autoscaler), and then there are no buffers rather than no controller.
const BUFFERS_READY_WAIT: Duration = Duration::from_secs(10);

/// client-go's watch backoff (0.8 s doubling, jittered, reset after two healthy minutes) but
/// capped at 5 s instead of 30 s: during an API server outage the default grows to half a
/// minute, so the caches relisted up to 30 s after the server was back (45 s to recover in the
/// outage test). Thirteen watches retrying every 5 s are still a trickle for one replica.
fn watch_backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    let retries = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(800))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(retries.into(), Duration::from_secs(120))
}

#[derive(Clone)]
pub struct Stores {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub nodeclaims: Store<NodeClaim>,
    pub nodepools: Store<NodePool>,
    pub nodeclasses: Store<EC2NodeClass>,
    pub daemonsets: Store<DaemonSet>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub nodeoverlays: Store<NodeOverlay>,
    pub buffers: BufferStores,
    /// Set once every cache has its first list; see [`Stores::ready`].
    synced: std::sync::Arc<tokio::sync::OnceCell<()>>,
}

/// CapacityBuffers and what they are resolved from.
#[derive(Clone)]
pub struct BufferStores {
    pub buffers: Store<CapacityBuffer>,
    pub pod_templates: Store<PodTemplate>,
    pub deployments: Store<Deployment>,
    pub replicasets: Store<ReplicaSet>,
    pub statefulsets: Store<StatefulSet>,
}

impl BufferStores {
    pub fn sources(&self) -> buffer::Sources {
        buffer::Sources {
            buffers: self.buffers.state(),
            pod_templates: self.pod_templates.state(),
            deployments: self.deployments.state(),
            replicasets: self.replicasets.state(),
            statefulsets: self.statefulsets.state(),
        }
    }
}

/// A cache of every `K` in the cluster, each as `trim` leaves it ([`super::trim`]).
fn cache<K>(client: &kube::Client, trim: fn(&mut K)) -> (Store<K>, impl Future<Output = ()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    K: serde::de::DeserializeOwned,
{
    let (reader, writer) = reflector::store();
    (reader, fill(client, trim, writer, drop))
}

/// Every object a cache applied, as it was applied, for a controller to follow.
pub type Changes<K> = futures::channel::mpsc::UnboundedReceiver<Arc<K>>;

/// A cache and its changes, for a controller that follows them: one watch and one copy of each
/// object (kube's `Controller::new` keeps a second, untrimmed cache of its own: 33 KB per
/// NodeClaim with managedFields, a tenth of the controller's heap at 500 nodes), and the
/// caches' watch backoff, capped at 5 s, where `Controller::new`'s grows to 30 s after an
/// API server outage.
///
/// Each change is handed over as the object itself, not as a reference into the cache. kube's
/// shared-store subscription (`ReflectHandle`) looks each reference up when it is read, and
/// when the object has gone by then (a NodeClaim's finalizer removed, then the NodeClaim
/// deleted, both applied before the lifecycle read the first) it returns `Pending` without
/// asking to be woken: the lifecycle never read another change, and the NodeClaims created
/// after that were never launched (seen in the scale run). The controller takes changes as
/// they come, so the channel holds only what one pass of its scheduler has not read yet.
fn cache_with_changes<K>(
    client: &kube::Client,
    trim: fn(&mut K),
) -> (Store<K>, Changes<K>, impl Future<Output = ()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    K: serde::de::DeserializeOwned,
{
    let (reader, writer) = reflector::store();
    let (hand_over, changes) = changes();
    (reader, changes, fill(client, trim, writer, hand_over))
}

/// What hands each applied object over, and the changes it hands them to.
fn changes<K: Send + Sync + 'static>() -> (impl FnMut(K) + Send + 'static, Changes<K>) {
    let (sender, changes) = futures::channel::mpsc::unbounded();
    let hand_over = move |object: K| {
        // Nobody follows once the lifecycle controller has stopped (the process is ending).
        let _ = sender.unbounded_send(Arc::new(object));
    };
    (hand_over, changes)
}

/// Keeps `writer`'s cache filled from a watch of every `K`, trimmed as it arrives.
fn fill<K>(
    client: &kube::Client,
    trim: fn(&mut K),
    writer: reflector::store::Writer<K>,
    applied: impl FnMut(K) + Send + 'static,
) -> impl Future<Output = ()>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    K: serde::de::DeserializeOwned,
{
    let events = watcher(Api::<K>::all(client.clone()), watcher::Config::default())
        .modify(trim)
        .backoff(watch_backoff());
    follow(events, writer, applied)
}

/// Applies `events` to `writer`'s cache, handing each applied object to `applied`.
fn follow<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    writer: reflector::store::Writer<K>,
    mut applied: impl FnMut(K) + Send + 'static,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let stream = reflector::reflector(writer, events).applied_objects();
    // Boxed: a dozen watch streams joined inline make one future too large for a thread's
    // stack in unoptimized builds.
    Box::pin(stream.for_each(move |object| {
        if let Ok(object) = object {
            applied(object);
        }
        async {}
    }))
}

/// What keeps the caches filled (run it for the process's life, beside the controllers), and
/// the NodeClaim and EC2NodeClass changes their controllers follow.
pub struct Feeds {
    pub caches: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    pub nodeclaim_changes: Changes<NodeClaim>,
    pub nodeclass_changes: Changes<EC2NodeClass>,
}

impl Stores {
    /// The caches, and what feeds them.
    pub fn start(client: &kube::Client) -> (Stores, Feeds) {
        let (pods, a) = cache::<Pod>(client, trim::pod);
        let (nodes, b) = cache::<Node>(client, trim::node);
        let (nodeclaims, nodeclaim_changes, c) =
            cache_with_changes::<NodeClaim>(client, trim::metadata);
        let (nodepools, d) = cache::<NodePool>(client, trim::metadata);
        let (nodeclasses, nodeclass_changes, e) =
            cache_with_changes::<EC2NodeClass>(client, trim::metadata);
        let (daemonsets, f) = cache::<DaemonSet>(client, trim::metadata);
        let (pdbs, g) = cache::<PodDisruptionBudget>(client, trim::metadata);
        let (nodeoverlays, h) = cache::<NodeOverlay>(client, trim::metadata);
        let (buffers, i) = cache::<CapacityBuffer>(client, trim::metadata);
        let (pod_templates, j) = cache::<PodTemplate>(client, trim::metadata);
        let (deployments, k) = cache::<Deployment>(client, trim::metadata);
        let (replicasets, l) = cache::<ReplicaSet>(client, trim::metadata);
        let (statefulsets, m) = cache::<StatefulSet>(client, trim::metadata);
        let caches = Box::pin(async move {
            tokio::join!(a, b, c, d, e, f, g, h, i, j, k, l, m);
        });
        (
            Stores {
                pods,
                nodes,
                nodeclaims,
                nodepools,
                nodeclasses,
                daemonsets,
                pdbs,
                nodeoverlays,
                buffers: BufferStores {
                    buffers,
                    pod_templates,
                    deployments,
                    replicasets,
                    statefulsets,
                },
                synced: Default::default(),
            },
            Feeds {
                caches,
                nodeclaim_changes,
                nodeclass_changes,
            },
        )
    }

    /// Waits until every cache has its first full list. Any number of tasks may wait: one of
    /// them waits on the caches for all. (A kube `Store`'s readiness wakes only the task that
    /// polled it last, so controllers on tasks of their own could wait on it forever.)
    pub async fn ready(&self) {
        self.synced.get_or_init(|| self.first_lists()).await;
    }

    async fn first_lists(&self) {
        let _ = tokio::join!(
            self.pods.wait_until_ready(),
            self.nodes.wait_until_ready(),
            self.nodeclaims.wait_until_ready(),
            self.nodepools.wait_until_ready(),
            self.nodeclasses.wait_until_ready(),
            self.daemonsets.wait_until_ready(),
            self.pdbs.wait_until_ready(),
            self.nodeoverlays.wait_until_ready(),
            self.buffers.pod_templates.wait_until_ready(),
            self.buffers.deployments.wait_until_ready(),
            self.buffers.replicasets.wait_until_ready(),
            self.buffers.statefulsets.wait_until_ready(),
        );
        if tokio::time::timeout(BUFFERS_READY_WAIT, self.buffers.buffers.wait_until_ready())
            .await
            .is_err()
        {
            tracing::warn!("CapacityBuffers could not be listed (is the capacitybuffers.autoscaling.x-k8s.io CRD installed?); running without buffers until they can");
        }
    }

    /// Waits (at most `timeout`) until the NodeClaim cache holds every one of `names`: the
    /// next decision must see what this one created, or it would create them again.
    pub async fn await_nodeclaims(&self, names: &[String], timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            let known: std::collections::BTreeSet<String> = self
                .nodeclaims
                .state()
                .iter()
                .map(|c| kube::ResourceExt::name_any(c.as_ref()))
                .collect();
            if names.iter().all(|n| known.contains(n)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            pods: self.pods.state(),
            nodes: self.nodes.state(),
            nodeclaims: self.nodeclaims.state(),
            nodepools: self.nodepools.state(),
            nodeclasses: self.nodeclasses.state(),
            daemonsets: self.daemonsets.state(),
            pdbs: self.pdbs.state(),
            nodeoverlays: self.nodeoverlays.state(),
            buffers: self.buffers.sources(),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::ResourceExt;

    use super::*;

    fn named(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_change_whose_object_is_gone_when_read_does_not_hold_up_the_changes_after_it() {
        let events = futures::stream::iter([
            Ok(watcher::Event::Apply(named("a"))),
            Ok(watcher::Event::Delete(named("a"))),
            Ok(watcher::Event::Apply(named("b"))),
        ]);
        let (reader, writer) = reflector::store();
        let (hand_over, changes) = changes();
        // All three are applied before the follower reads a change, as under load.
        follow(events, writer, hand_over).await;
        let read: Vec<String> = changes.map(|c| c.name_any()).collect().await;
        assert_eq!(read, ["a", "b"]);
        let cached: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
        assert_eq!(cached, ["b"]);
    }
}
