//! The commands that are not bootstrap runs. Each takes what the command line gave it and
//! returns what it found or did as a value; `output` prints it, and progress goes through
//! `Progress`, so nothing here writes to stdout or stderr.

pub mod bench;
pub mod catalog;
pub mod convert;
#[cfg(feature = "aws")]
pub mod explain;
pub mod init;
pub mod lint;
pub mod render;
pub mod simulate;
mod static_pools;
#[cfg(feature = "aws")]
pub mod status;
