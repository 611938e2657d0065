//! Everything jointer reads from files, checked before any AWS or Kubernetes call: the config,
//! YAML documents with their source locations, the node templates and what they render to,
//! workloads, and the lint rules over the rendered NodePools. Errors come back as located
//! diagnostics, all of them at once.

pub mod config;
pub mod diagnostics;
pub mod documents;
pub mod dropped_fields;
pub mod field_history;
pub mod lint;
pub mod manifest;
pub mod node_templates;
pub mod render;
pub mod source_map;
pub mod unknown_fields;
pub mod workload;
