//! The pure core: every decision the controller (and `jointer simulate`/`explain`) makes,
//! over plain data. No `.await`, no AWS SDK, no `kube::Client`, no clock: time and settings
//! come in as arguments, so each rule has a unit or case test.

pub mod ami_family;
pub mod benchmark;
pub mod buffer;
pub mod buffer_status;
pub mod catalog;
pub mod disruption;
pub mod drain;
pub mod interruption;
pub mod nodeclaim;
pub mod nodeclass;
pub mod overlay;
pub mod pods;
pub mod scheduling;
pub mod state;
pub mod static_pool;
