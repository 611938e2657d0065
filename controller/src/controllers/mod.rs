//! The controllers: thin I/O shells that read the watch caches, call the pure core, and act
//! through the Kubernetes API and the [`CloudProvider`](crate::cloud::CloudProvider) trait.
//! Each takes the one shared [`Context`](crate::runtime::Context); none imports another, and
//! none names a concrete cloud.

pub mod buffer_status;
pub mod disruption;
pub mod garbage;
pub mod interruption;
pub mod nodeclaim;
pub mod nodeclass;
pub mod overlay_status;
pub mod pod_events;
pub mod pool_status;
pub mod provisioner;
pub mod static_pool;
