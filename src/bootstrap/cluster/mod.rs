//! The cluster side: the steps that server-side apply jointer's objects (CRDs, the controller
//! install, the rendered node classes and pools, the inventory of what jointer applied) and
//! the plumbing they share (typed access to arbitrary kinds, ownership labels, waits). Nothing
//! here calls AWS.

pub mod controller;
pub mod crds;
pub mod inventory;
pub mod kube_objects;
pub mod nodes;
pub mod pod_trouble;
pub mod waits;
