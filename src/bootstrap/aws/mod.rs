//! The AWS side: the steps that own IAM roles and policies, the node access entry, the
//! interruption queue and its rules, the discovery tags and the sweep of what the controller
//! left, and the plumbing they share (clients and error wording, policy documents, ownership
//! tags, names fitted to each service's limits, waiting out IAM propagation). Nothing here
//! touches the cluster's objects.

pub mod clients;
pub mod controller_identity;
pub mod controller_image;
pub mod discovery;
pub mod iam;
pub mod interruption;
pub mod names;
pub mod node_access;
pub mod node_role;
pub mod ownership;
pub mod permissions;
pub mod policy;
pub mod propagation;
pub mod sweep;
