//! jointer-controller: a Karpenter-v1-compatible provisioning controller, as a library the
//! `jointer` CLI shares (types, CRDs, the pure core, the simulated cloud) and a binary.
//!
//! Layers, each importing only those above it (`tests/layers.rs` holds the line):
//!
//! - [`api`]: the Karpenter v1 types with their CEL rules, well-known names, conditions.
//! - [`core`]: pure decisions — scheduling, the cluster snapshot, pod policy, NodeClaim
//!   construction, disruption, drain steps. No I/O, no `.await`, no SDK, no `kube::Client`.
//! - [`cloud`]: the `CloudProvider` trait with its typed errors; `aws` (EC2 and friends) and
//!   `sim` (in-process, for `jointer simulate` and the controller tests).
//! - `controllers`: the I/O shells, one per controller, sharing one [`runtime::Context`].
//! - [`runtime`]: the process — the Context, watch caches, Events, leader election, servers;
//!   its `run` is the only place that names `cloud::aws`.
//!
//! [`metrics`], [`settings`], [`clients`] and [`crds`] are leaves any layer may use.

pub mod api;
pub mod clients;
pub mod cloud;
mod controllers;
pub mod core;
pub mod crds;
pub mod metrics;
pub mod runtime;
pub mod settings;
