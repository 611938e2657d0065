//! The controller's settings: environment variables (as the Deployment sets them) or flags.

use std::time::Duration;

use clap::Args;

/// `DISRUPTION_SETTLE`'s default (also what `jointer explain node` assumes without a Deployment).
pub const DEFAULT_DISRUPTION_SETTLE: &str = "30s";

/// A duration setting: `10s`, `500ms`, `5m` (a bare number is seconds).
pub fn seconds(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 10s or 500ms"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "ms" => Ok(Duration::from_millis(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?} is not a duration like 10s or 500ms")),
    }
}

#[derive(Args, Debug, Clone)]
pub struct Settings {
    /// The EKS cluster's name (required).
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// The API server's URL as nodes reach it (default: from eks:DescribeCluster).
    #[arg(long, env = "CLUSTER_ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// The interruption queue's name (not its URL or ARN); unset turns interruption handling off.
    #[arg(long, env = "INTERRUPTION_QUEUE")]
    pub interruption_queue: Option<String>,
    #[arg(long, env = "AWS_REGION")]
    pub region: String,
    /// How long the provisioner waits for more pending pods after the last one.
    #[arg(long, env = "BATCH_IDLE_DURATION", value_parser = seconds, default_value = "1s")]
    pub batch_idle: Duration,
    /// The longest a batch of pending pods is held.
    #[arg(long, env = "BATCH_MAX_DURATION", value_parser = seconds, default_value = "10s")]
    pub batch_max: Duration,
    /// How often every EC2NodeClass is resolved again (subnet tags, AMI releases).
    #[arg(long, env = "NODECLASS_RESYNC", value_parser = seconds, default_value = "60s")]
    pub nodeclass_resync: Duration,
    /// How long an instance may run with no NodeClaim before it is terminated.
    #[arg(long, env = "GC_GRACE", value_parser = seconds, default_value = "5m")]
    pub gc_grace: Duration,
    /// How often the disruption loop decides.
    #[arg(long, env = "DISRUPTION_POLL", value_parser = seconds, default_value = "10s")]
    pub disruption_poll: Duration,
    /// How long a disruption decision must keep holding before it is carried out.
    #[arg(long, env = "DISRUPTION_VALIDATION", value_parser = seconds, default_value = "15s")]
    pub disruption_validation: Duration,
    /// A node initialized more recently than this is not disrupted (its pods are arriving).
    #[arg(long, env = "DISRUPTION_SETTLE", value_parser = seconds, default_value = DEFAULT_DISRUPTION_SETTLE)]
    pub disruption_settle: Duration,
    /// Replace a node on an EC2 rebalance recommendation (otherwise only an Event).
    #[arg(long, env = "INTERRUPTION_ACT_ON_REBALANCE", default_value_t = false, action = clap::ArgAction::Set)]
    pub interruption_act_on_rebalance: bool,
    /// Let consolidation replace a spot node by a cheaper spot node (needs 15 cheaper types).
    #[arg(long, env = "SPOT_TO_SPOT_CONSOLIDATION", default_value_t = false, action = clap::ArgAction::Set)]
    pub spot_to_spot_consolidation: bool,
    /// A NodeClaim not launched after this long is deleted (upstream: 5 minutes).
    #[arg(long, env = "LAUNCH_TIMEOUT", value_parser = seconds, default_value = "5m")]
    pub launch_timeout: Duration,
    /// A launched NodeClaim whose Node has not registered after this long is deleted
    /// (upstream: 15 minutes).
    #[arg(long, env = "REGISTRATION_TIMEOUT", value_parser = seconds, default_value = "15m")]
    pub registration_timeout: Duration,
    /// `error`, `warn`, `info`, `debug`, or a tracing filter.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    #[arg(long, env = "HEALTH_PORT", default_value_t = 8081)]
    pub health_port: u16,
    /// Where the leader-election Lease lives (default: the pod's namespace, else kube-system).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// This replica's name in the Lease (default: the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

impl Settings {
    /// The namespace of the Lease: the flag, else the service account's, else kube-system.
    pub fn lease_namespace(&self) -> String {
        self.leader_election_namespace.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "kube-system".to_string())
        })
    }

    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| format!("jointer-controller-{}", std::process::id()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_the_upstream_settings() {
        assert_eq!(seconds("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(seconds("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds("2m"), Ok(Duration::from_secs(120)));
        assert!(seconds("ten").is_err());
    }
}
