//! Clouds the controller provisions from. `sim` is an in-memory cloud over an instance catalog
//! (used by `jointer simulate`, tests and benchmarks); the AWS implementation arrives with the
//! provisioning controller.

pub mod aws_tags;
pub mod sim;
