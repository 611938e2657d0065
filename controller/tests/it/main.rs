//! The controller's integration tests, one binary (as cargo and ripgrep do): a module per
//! area. The pure core's case and property tests run anywhere; `nodeclass` and `controllers`
//! need the test environment (`tests/env/up.sh`), as `tests/run.sh` starts it.

mod benchmark_input;
mod controllers;
mod crash;
mod crds;
mod disruption_cases;
mod layers;
mod nodeclass;
mod outage;
mod scene_log;
mod solver_cases;
mod solver_properties;
mod upstream_api;
mod upstream_examples;
mod validation;

// The CLI's test support for the environment, shared rather than copied.
#[path = "../../../tests/support/harness.rs"]
mod harness;
#[path = "../../../tests/support/testenv.rs"]
#[allow(dead_code)]
mod testenv;
