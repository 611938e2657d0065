//! `jointer` as a library: everything the command line (`main.rs`) dispatches to, so the fuzz
//! targets (`fuzz/`) and tests can reach the input layer directly.

// A `Diagnostic` (file, location, field, message) travels only on the input-error path, once
// per command; boxing it everywhere would cost clarity for no measurable gain.
#![allow(clippy::result_large_err)]

pub mod api_versions;
#[cfg(feature = "aws")]
pub mod bootstrap;
#[cfg(feature = "aws")]
pub mod cluster;
pub mod commands;
pub mod failure;
pub mod fuzzing;
#[cfg(feature = "aws")]
pub mod image;
pub mod input;
#[cfg(feature = "aws")]
pub mod output;
pub mod progress;
