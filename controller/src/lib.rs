//! jointer-controller: a Karpenter-v1-compatible provisioning controller.
//!
//! This library holds the API types (`api`), their generated CRDs (`crds`) and, as the
//! controller grows, the pure scheduling and disruption core. The `jointer` CLI depends on it
//! for types, validation and CRD generation so the two halves can never disagree.

pub mod api;
pub mod benchmark;
pub mod catalog;
pub mod clients;
pub mod cloud;
pub mod crds;
pub mod disruption;
pub mod garbage;
pub mod interruption;
pub mod lifecycle;
pub mod nodeclass;
pub mod provisioning;
pub mod runtime;
pub mod scheduling;
