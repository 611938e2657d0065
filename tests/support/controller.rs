//! jointer-controller as a local process against the test environment, with the settings
//! `jointer apply` gives its Deployment, as tests/env/controller.sh runs it for people.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::testenv;

pub struct Controller {
    /// None once killed (its PID may then belong to another process).
    child: Option<Child>,
    pub log: PathBuf,
    pub metrics_port: u16,
    cluster: String,
    identity: String,
    options: Options,
}

/// How a replica runs, beyond its cluster and identity.
#[derive(Default)]
pub struct Options {
    /// Replaces the admin kubeconfig (e.g. with the controller ServiceAccount's token).
    pub kubeconfig: Option<PathBuf>,
    /// The controller role's credentials; the environment's admin keys when None.
    pub aws: Option<testenv::RoleCredentials>,
    /// The controller's own default timings (disruption polling, validation and settling, node
    /// class resync, garbage-collection grace) instead of the suite's short ones.
    pub default_timings: bool,
}

/// The binary `cargo test --workspace` builds next to this crate's, or the one of the cargo
/// profile `JOINTER_CONTROLLER_PROFILE` names (the benchmarks measure a `release` build, as
/// users run it).
fn binary() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| testenv::repo_root().join("target"));
    let profile = std::env::var("JOINTER_CONTROLLER_PROFILE").unwrap_or_else(|_| "debug".into());
    let bin = dir.join(&profile).join("jointer-controller");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p jointer-controller` (cargo test --workspace builds \
         it; `--release` for JOINTER_CONTROLLER_PROFILE=release)",
        bin.display()
    );
    bin
}

impl Controller {
    /// Starts a replica for `cluster` with the environment's admin AWS credentials.
    /// `kubeconfig` replaces the admin one (e.g. with the controller ServiceAccount's token).
    pub fn start(
        cluster: &str,
        identity: &str,
        port_base: u16,
        kubeconfig: Option<&Path>,
    ) -> Controller {
        let options = Options {
            kubeconfig: kubeconfig.map(Path::to_path_buf),
            ..Options::default()
        };
        Controller::start_with(cluster, identity, port_base, options)
    }

    /// Starts a replica as `options` say.
    pub fn start_with(
        cluster: &str,
        identity: &str,
        port_base: u16,
        options: Options,
    ) -> Controller {
        testenv::require();
        let log = std::env::temp_dir().join(format!("{cluster}-{identity}.log"));
        std::fs::File::create(&log).expect("log file");
        let mut controller = Controller {
            child: None,
            log,
            metrics_port: port_base,
            cluster: cluster.to_string(),
            identity: identity.to_string(),
            options,
        };
        controller.spawn();
        controller
    }

    /// Starts the process (again), its output appended to the log.
    fn spawn(&mut self) {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .expect("log file");
        let mut cmd = Command::new(binary());
        cmd.arg("run")
            .env("CLUSTER_NAME", &self.cluster)
            .env("AWS_REGION", "us-east-1")
            .env("INTERRUPTION_QUEUE", &self.cluster)
            .env("LEADER_ELECTION_NAMESPACE", "kube-system")
            .env("POD_NAME", &self.identity)
            .env("METRICS_PORT", self.metrics_port.to_string())
            .env("HEALTH_PORT", (self.metrics_port + 1).to_string())
            // `JOINTER_CONTROLLER_LOG` (a tracing filter, e.g.
            // `info,jointer_controller::controllers::disruption=debug` for why each node is
            // kept) when a run needs more than the default.
            .env(
                "LOG_LEVEL",
                std::env::var("JOINTER_CONTROLLER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::from(file.try_clone().expect("log")))
            .stderr(Stdio::from(file));
        if !self.options.default_timings {
            cmd.env("NODECLASS_RESYNC", "2s")
                .env("GC_GRACE", "5s")
                .env("DISRUPTION_POLL", "2s")
                .env("DISRUPTION_VALIDATION", "2s")
                .env("DISRUPTION_SETTLE", "5s");
        }
        if let Some(k) = &self.options.kubeconfig {
            cmd.env("KUBECONFIG", k);
        }
        if let Some(aws) = &self.options.aws {
            aws.apply(&mut cmd);
        }
        self.child = Some(cmd.spawn().expect("start jointer-controller"));
    }

    /// SIGKILL, as a crash; [`Controller::restart`] starts it again with the same identity
    /// (a container restarted in its pod), which takes its own Lease back at once.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Resident set size in KiB (Linux /proc).
    pub fn rss_kib(&self) -> Option<u64> {
        self.status_kib("VmRSS:")
    }

    /// The highest resident set size so far, in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.status_kib("VmHWM:")
    }

    fn status_kib(&self, field: &str) -> Option<u64> {
        testenv::proc_status_kib(self.child.as_ref()?.id(), field)
    }

    /// CPU seconds used so far, user and system (/proc/PID/stat fields 14 and 15, in clock
    /// ticks of 1/100 s, the Linux default).
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.as_ref()?.id())).ok()?;
        // The command name is in parentheses and may hold spaces: count fields after it.
        let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
        let user: u64 = fields.nth(11)?.parse().ok()?;
        let system: u64 = fields.next()?.parse().ok()?;
        Some((user + system) as f64 / 100.0)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log lines whose message is `message`, as JSON.
    pub fn log_events(&self, message: &str) -> Vec<serde_json::Value> {
        self.logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["fields"]["message"] == message)
            .collect()
    }

    /// `/metrics`, or "" while not serving.
    pub fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)) else {
            return String::new();
        };
        let _ = write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let mut body = String::new();
        let _ = stream.read_to_string(&mut body);
        body
    }

    /// The value of a metric line starting with `prefix` (summed over matching lines).
    pub fn metric(&self, prefix: &str) -> f64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// SIGKILL: no Lease release, no cleanup (a crash).
    pub fn crash(mut self) {
        self.kill();
    }
}

impl Drop for Controller {
    /// SIGTERM first, so the replica gives up its Lease and the next test's replica need not
    /// wait for it to expire.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        for _ in 0..50 {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
