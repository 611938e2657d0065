//! The CLI's integration tests, one binary with a module per area (as cargo and ripgrep do:
//! one link of the AWS SDK instead of one per file). Tests that use the test environment
//! (`tests/env/up.sh`, which `tests/run.sh` starts) take `support::testenv::TURN`; the rest
//! run beside them.

mod ami_families;
mod bootstrap;
mod bootstrap_cluster;
mod cli;
mod cli_bad_input;
mod controller_image;
mod crash_process;
mod figures;
mod fuzz_corpus;
mod permissions;
mod provisioning;
mod scale;
mod sidebyside;
mod simulate;
mod testenv;
mod testenv_gap;
mod testenv_prices;
mod testenv_world;
mod upstream_cel;
mod upstream_crds;
mod upstream_examples;

#[path = "../support/mod.rs"]
mod support;
