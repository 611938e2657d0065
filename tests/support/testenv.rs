//! Access to the running test environment (tests/env/up.sh): reads its env file into this
//! process's environment once, then builds clients exactly as the product does.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

fn env_file() -> PathBuf {
    std::env::var_os("JOINTER_TESTENV_RUN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/env/.run")))
        .join("env")
}

/// `export KEY=value` lines of the env file (values are simple shell words).
fn load() -> Result<(), String> {
    let path = env_file();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!("the test environment is not running ({}: {e}); start it with `tests/env/up.sh` (tests/run.sh does this for you)", path.display())
    })?;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("export ") else {
            continue;
        };
        let Some((key, value)) = rest.split_once('=') else {
            continue;
        };
        if key == "PATH" {
            continue;
        }
        let value = value.trim_matches(|c| c == '\'' || c == '"');
        // Set once, before any test spawns threads that read the environment.
        std::env::set_var(key, value);
    }
    Ok(())
}

/// Makes the environment's variables this process's; panics with how to start it if it is
/// not running. Integration tests call this first: they fail, never skip, without it.
pub fn require() {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(e) = LOADED.get_or_init(load) {
        panic!("{e}");
    }
}

pub async fn kube() -> kube::Client {
    require();
    jointer_controller::clients::kube_client()
        .await
        .expect("kube client from the test environment's KUBECONFIG")
}

pub async fn aws() -> aws_config::SdkConfig {
    require();
    jointer_controller::clients::aws_config(None).await
}

/// A name unique to this test run, so tests can share the environment.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos:x}", std::process::id())
}

/// Polls `check` until it returns Some, or fails the test after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
