//! Access to the running test environment (tests/env/up.sh): reads its env file into this
//! process's environment once, then builds clients exactly as the product does.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// The repository root: the first directory up from this crate's that holds tests/env/up.sh
/// (this file is shared by the CLI's and the controller's tests).
pub fn repo_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("tests/env/up.sh").exists() {
        if !dir.pop() {
            return PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        }
    }
    dir
}

fn env_file() -> PathBuf {
    std::env::var_os("JOINTER_TESTENV_RUN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("tests/env/.run"))
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
        // PATH puts the environment's kubectl and helm first: `dir:...:"$PATH"`.
        let value = if key == "PATH" {
            value.replace("\"$PATH\"", &std::env::var("PATH").unwrap_or_default())
        } else {
            value.trim_matches(|c| c == '\'' || c == '"').to_string()
        };
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

/// A token of the controller ServiceAccount `jointer apply` installs, valid `seconds`: what the
/// controller's Deployment runs with.
pub async fn controller_token(admin: &kube::Client, seconds: i64) -> String {
    service_account_token(admin, "kube-system", "jointer-controller", &[], seconds).await
}

/// A token of `namespace/name` for `audiences` (the API server's own when empty).
pub async fn service_account_token(
    admin: &kube::Client,
    namespace: &str,
    name: &str,
    audiences: &[&str],
    seconds: i64,
) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let sa: kube::Api<ServiceAccount> = kube::Api::namespaced(admin.clone(), namespace);
    sa.create_token_request(
        name,
        &kube::api::PostParams::default(),
        &TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(seconds),
                audiences: (!audiences.is_empty())
                    .then(|| audiences.iter().map(|a| a.to_string()).collect()),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("a token of {namespace}/{name}: {e}"))
    .status
    .and_then(|s| s.token)
    .expect("a token")
}

/// AWS credentials of a service account's role, the way EKS gives them to its pods: with IRSA
/// when the service account is annotated `eks.amazonaws.com/role-arn` (EKS's webhook then sets
/// `AWS_ROLE_ARN` and a projected token for STS), else through the Pod Identity agent (the
/// gap layer plays it) with a token for `pods.eks.amazonaws.com`. Either way every call made
/// with them is evaluated against the role's policies (tests/env/gap/roles.py).
pub struct RoleCredentials {
    vars: Vec<(&'static str, String)>,
}

impl RoleCredentials {
    pub async fn for_service_account(
        admin: &kube::Client,
        cluster: &str,
        namespace: &str,
        service_account: &str,
    ) -> RoleCredentials {
        use k8s_openapi::api::core::v1::ServiceAccount;
        let sa = kube::Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
            .get(service_account)
            .await
            .unwrap_or_else(|e| panic!("ServiceAccount {namespace}/{service_account}: {e}"));
        let irsa_role = sa
            .metadata
            .annotations
            .and_then(|a| a.get("eks.amazonaws.com/role-arn").cloned());
        let audience = if irsa_role.is_some() {
            "sts.amazonaws.com"
        } else {
            "pods.eks.amazonaws.com"
        };
        // EKS projects a token for the audience into the pod, valid for a day.
        let token =
            service_account_token(admin, namespace, service_account, &[audience], 86_400).await;
        let token_file = std::env::temp_dir().join(format!(
            "{cluster}-{namespace}-{service_account}-{audience}-token"
        ));
        std::fs::write(&token_file, token).expect("write the projected token");
        let token_file = token_file.display().to_string();
        let vars = match irsa_role {
            Some(role) => vec![
                ("AWS_ROLE_ARN", role),
                ("AWS_WEB_IDENTITY_TOKEN_FILE", token_file),
            ],
            None => {
                let gap = std::env::var("JOINTER_GAP_URL").expect("JOINTER_GAP_URL");
                let agent = format!(
                    "{}/_gap/pod-identity/{cluster}/credentials",
                    gap.trim_end_matches('/')
                );
                vec![
                    ("AWS_CONTAINER_CREDENTIALS_FULL_URI", agent),
                    ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file),
                ]
            }
        };
        RoleCredentials { vars }
    }

    /// Gives `cmd` these credentials instead of the environment's static admin keys.
    pub fn apply(&self, cmd: &mut std::process::Command) {
        cmd.env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_SESSION_TOKEN");
        for (name, value) in &self.vars {
            cmd.env(name, value);
        }
    }
}

/// Tests that use the shared environment take turns: controllers act on every object of
/// their kinds, the gap layer's call log and the API server's audit log are global, and the
/// world fixture resets the AWS server. Tests without the environment run beside them.
pub static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// Polls `check` every half second until it holds or `seconds` pass; whether it held.
pub async fn eventually<F, Fut>(seconds: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A call to the gap layer's control API (`/_gap/...`), with a JSON body; panics unless 2xx.
pub fn gap(method: &str, path: &str, body: Option<serde_json::Value>) -> serde_json::Value {
    require();
    let url = std::env::var("JOINTER_GAP_URL").expect("JOINTER_GAP_URL");
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut stream = std::net::TcpStream::connect(host).expect("gap layer reachable");
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).expect("request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("response");
    let (head, payload) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    assert!(
        head.starts_with("HTTP/1.1 2") || head.starts_with("HTTP/1.0 2"),
        "{method} {path}: {head}"
    );
    serde_json::from_str(payload).unwrap_or(serde_json::Value::Null)
}

/// The calls of `cluster`'s role sessions the gap layer refused while the role held all its
/// policies (tests/env/gap/roles.py): what the policies `jointer apply` attached do not cover.
/// (Once teardown starts detaching them, every call may be refused; those are not listed.)
pub fn iam_refusals(cluster: &str) -> Vec<serde_json::Value> {
    refusals_in(&gap("GET", &format!("/_gap/iam?cluster={cluster}"), None))
}

/// The refusals of a gap layer IAM report (`/_gap/iam`) made while the role held all its
/// policies.
pub fn refusals_in(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["denied"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["role_intact"] == true)
        .cloned()
        .collect()
}

/// A world of its own (tests/env/world.py): a new VPC, subnets, security groups and EKS
/// cluster named `<prefix>-...`, next to every other test's, so tests need no reset.
pub fn new_world(prefix: &str) -> serde_json::Value {
    require();
    let cluster = unique(prefix);
    let out = std::env::temp_dir().join(format!("{cluster}.json"));
    let python = std::env::var("JOINTER_TESTENV_PYTHON").expect("JOINTER_TESTENV_PYTHON");
    let status = std::process::Command::new(python)
        .arg(repo_root().join("tests/env/world.py"))
        .arg(&out)
        .env("JOINTER_TEST_CLUSTER", &cluster)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run world.py");
    assert!(status.success(), "world.py for {cluster} failed");
    let world = std::fs::read_to_string(&out).expect("world summary");
    let _ = std::fs::remove_file(&out);
    serde_json::from_str(&world).expect("world JSON")
}

/// The gap layer's call log since the last `clear_calls`.
pub fn calls() -> Vec<serde_json::Value> {
    gap("GET", "/_gap/calls", None)
        .as_array()
        .cloned()
        .unwrap_or_default()
}

pub fn clear_calls() {
    gap("DELETE", "/_gap/calls", None);
}

/// Operations of the mutating calls in the log.
pub fn mutating_calls() -> Vec<String> {
    calls()
        .iter()
        .filter(|c| c["mutating"] == true)
        .map(|c| {
            format!(
                "{}:{}",
                c["service"].as_str().unwrap_or(""),
                c["operation"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The test registry's writes (uploads, deletes) since the last reset of
/// `/_gap/registry/requests` whose path names `repository`, as `METHOD path`.
pub fn registry_writes(repository: &str) -> Vec<String> {
    gap("GET", "/_gap/registry/requests", None)
        .as_array()
        .expect("registry requests")
        .iter()
        .filter(|r| r["path"].as_str().unwrap_or("").contains(repository))
        .map(|r| {
            (
                r["method"].as_str().unwrap_or("?"),
                r["path"].as_str().unwrap_or("?"),
            )
        })
        .filter(|(method, _)| ["PUT", "POST", "PATCH", "DELETE"].contains(method))
        .map(|(method, path)| format!("{method} {path}"))
        .collect()
}

/// The running test environment's `.run/` directory.
fn run_dir() -> PathBuf {
    require();
    PathBuf::from(std::env::var("JOINTER_TESTENV_RUN_DIR").expect("run dir"))
}

fn audit_log() -> PathBuf {
    run_dir().join("audit.log")
}

/// The API server's audit log (every write, and every request of the admin user jointer runs
/// as; see tests/env/up.sh): its current length, to read what is logged after it.
pub fn audit_offset() -> u64 {
    std::fs::metadata(audit_log()).map(|m| m.len()).unwrap_or(0)
}

/// Writes to the API server by jointer (user agent `jointer/...`) logged after `offset`, as
/// `VERB URI`; server-side dry runs are not writes and are left out.
pub fn jointer_kube_writes_since(offset: u64) -> Vec<String> {
    let text = std::fs::read(audit_log()).expect("audit log");
    let start = (offset as usize).min(text.len());
    String::from_utf8_lossy(&text[start..])
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|ua| ua.starts_with("jointer/"))
        })
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete" | "deletecollection")
            )
        })
        .filter(|e| !e["requestURI"].as_str().unwrap_or("").contains("dryRun="))
        .map(|e| {
            format!(
                "{} {}",
                e["verb"].as_str().unwrap_or(""),
                e["requestURI"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Requests (reads, server-side dry runs and writes) logged after `offset` whose user agent
/// starts with `agent`: `jointer/` for the CLI, `jointer-controller/` for the controller
/// (audited when it runs as the admin user).
pub fn kube_requests_since(agent: &str, offset: u64) -> usize {
    let text = std::fs::read(audit_log()).expect("audit log");
    let start = (offset as usize).min(text.len());
    let agent = format!("\"userAgent\":\"{agent}");
    String::from_utf8_lossy(&text[start..])
        .lines()
        .filter(|l| l.contains(&agent))
        .filter(|l| l.contains("\"stage\":\"ResponseComplete\""))
        .count()
}

/// A `/proc/<pid>/status` field given in KiB (`VmRSS:`, `VmHWM:`).
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The peak RSS in MiB of each test-world process named (moto, gap, nodejoin, kube-apiserver,
/// etcd, …), from its pid file ("<pid> <program>", as up.sh records it); `None` for one not
/// running.
pub fn world_peak_rss_mib(components: &[&str]) -> Vec<(String, Option<f64>)> {
    let pids = run_dir().join("pids");
    components
        .iter()
        .map(|c| {
            let peak = std::fs::read_to_string(pids.join(format!("{c}.pid")))
                .ok()
                .and_then(|line| line.split_whitespace().next()?.parse::<u32>().ok())
                .and_then(|pid| proc_status_kib(pid, "VmHWM:"))
                .map(|kib| kib as f64 / 1024.0);
            (c.to_string(), peak)
        })
        .collect()
}

/// Deletes Karpenter's CRDs, and with them every object of their kinds. A NodeClaim or
/// EC2NodeClass whose controller is gone keeps its finalizer for ever and would hold its CRD in
/// `Terminating`: such finalizers are removed (these objects are going with their CRD).
pub async fn delete_karpenter_crds(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
    use kube::discovery::ApiResource;
    const KINDS: [(&str, &str, &str); 3] = [
        ("karpenter.sh", "NodePool", "nodepools"),
        ("karpenter.sh", "NodeClaim", "nodeclaims"),
        ("karpenter.k8s.aws", "EC2NodeClass", "ec2nodeclasses"),
    ];
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (group, _, plural) in KINDS {
        let _ = crds
            .delete(&format!("{plural}.{group}"), &DeleteParams::default())
            .await;
    }
    let unblock = serde_json::json!({"metadata": {"finalizers": null}});
    // What still holds each CRD, so a timeout says why (the API server's CRD finalizer reports
    // its progress in the Terminating condition).
    let mut left: Vec<String> = Vec::new();
    let started = tokio::time::Instant::now();
    let mut nudges = 0;
    loop {
        // The API server's CRD finalizer retries a failed pass with exponential backoff; an
        // update of the CRD requeues it at once, so a long wait is nudged every 15 s.
        let nudge = started.elapsed() > Duration::from_secs(15 * (nudges + 1));
        if nudge {
            nudges += 1;
        }
        left.clear();
        for (group, kind, plural) in KINDS {
            let crd = match crds.get_opt(&format!("{plural}.{group}")).await {
                Ok(None) => continue,
                Ok(Some(crd)) => crd,
                Err(e) => {
                    left.push(format!("{plural}.{group}: not readable: {e}"));
                    continue;
                }
            };
            let terminating = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "Terminating")
                .map(|c| {
                    format!(
                        "{}: {}",
                        c.reason.unwrap_or_default(),
                        c.message.unwrap_or_default()
                    )
                })
                .unwrap_or_else(|| "no Terminating condition yet".into());
            if nudge {
                let poke = serde_json::json!({"metadata": {"annotations": {"jointer.test/nudge": nudges.to_string()}}});
                let _ = crds
                    .patch(
                        &format!("{plural}.{group}"),
                        &PatchParams::default(),
                        &Patch::Merge(&poke),
                    )
                    .await;
            }
            let resource = ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk(group, "v1", kind),
                plural,
            );
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let objects = api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            let mut names = Vec::new();
            for o in objects {
                let name = o.metadata.name.clone().unwrap_or_default();
                names.push(format!(
                    "{name} {:?}",
                    o.metadata.finalizers.unwrap_or_default()
                ));
                let _ = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&unblock))
                    .await;
            }
            left.push(format!(
                "{plural}.{group} ({terminating}); objects: {names:?}"
            ));
        }
        if left.is_empty() {
            return;
        }
        if started.elapsed() > Duration::from_secs(180) {
            panic!("timed out after 180s waiting for Karpenter's CRDs to be gone: {left:#?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
