//! Clouds the controller provisions from. `sim` is an in-memory cloud over an instance catalog
//! (used by `jointer simulate`, tests and benchmarks); `aws` launches real EC2 instances.

pub mod aws;
pub mod sim;
