//! The world fixture (tests/env/world.sh): the AWS side of an existing EKS cluster, and a
//! jointer config for it that the CLI accepts. It resets the shared AWS server, so it takes
//! the environment's turn like every test that uses it.

use std::process::Command;

use crate::support::testenv;

#[test]
fn the_world_fixture_builds_a_cluster_and_a_config_jointer_accepts() {
    let _turn = testenv::TURN.blocking_lock();
    testenv::require();
    let root = env!("CARGO_MANIFEST_DIR");
    let status = Command::new(format!("{root}/tests/env/world.sh"))
        .status()
        .expect("run world.sh");
    assert!(status.success(), "world.sh failed");
    let run_dir = std::env::var("JOINTER_TESTENV_RUN_DIR").expect("run dir");
    let world: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{run_dir}/world.json")).expect("world.json"),
    )
    .expect("JSON");
    assert_eq!(world["cluster"]["name"], "jointer-test");
    assert_eq!(
        world["subnets"]["private"].as_object().map(|z| z.len()),
        Some(3),
        "three zones of private subnets"
    );
    assert!(world["securityGroups"]["cluster"]
        .as_str()
        .is_some_and(|s| s.starts_with("sg-")));
    assert!(world["cluster"]["oidcProviderArn"]
        .as_str()
        .is_some_and(|a| a.contains(":oidc-provider/")));

    let config = format!("{run_dir}/jointer.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_jointer"))
        .args(["render", "-f", &config])
        .output()
        .expect("run jointer");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = String::from_utf8_lossy(&out.stdout);
    assert!(
        rendered.contains("karpenter.sh/discovery: jointer-test")
            && rendered.contains("role: KarpenterNodeRole-jointer-test")
    );
}
