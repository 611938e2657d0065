//! The controller's settings: environment variables (as the Deployment sets them) or flags.

use std::time::Duration;

use clap::Args;

use crate::core::disruption::ConsolidationTimeouts;
use crate::core::scheduling::{MinValuesPolicy, Policies, PreferencePolicy};

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
    /// `Strict`: a NodeClaim that cannot offer a requirement's `minValues` distinct values is
    /// not made. `BestEffort`: it is made with as many as there are, annotated
    /// `karpenter.sh/nodeclaim-min-values-relaxed`.
    #[arg(long, env = "MIN_VALUES_POLICY", value_enum, default_value = "Strict")]
    pub min_values_policy: MinValuesPolicy,
    /// `Respect`: preferred affinities and ScheduleAnyway spreads are tried first and relaxed
    /// only when they cannot be met. `Ignore`: they are not considered.
    #[arg(long, env = "PREFERENCE_POLICY", value_enum, default_value = "Respect")]
    pub preference_policy: PreferencePolicy,
    /// How long multi-node consolidation searches before it settles for what it found.
    #[arg(long, env = "MULTI_NODE_CONSOLIDATION_TIMEOUT", value_parser = seconds, default_value = "1m")]
    pub multi_node_consolidation_timeout: Duration,
    /// How long single-node consolidation tries candidates before it stops for this pass.
    #[arg(long, env = "SINGLE_NODE_CONSOLIDATION_TIMEOUT", value_parser = seconds, default_value = "3m")]
    pub single_node_consolidation_timeout: Duration,
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

/// The settings jointer itself sets from `jointer.yaml`'s cluster and interruption fields.
const SET_BY_JOINTER: [&str; 4] = [
    "CLUSTER_NAME",
    "CLUSTER_ENDPOINT",
    "INTERRUPTION_QUEUE",
    "AWS_REGION",
];

/// Checks user overrides of the controller's settings (environment variable → value) with
/// the controller's own parsers, so `jointer plan` refuses what the controller would.
pub fn check_overrides<'a>(
    overrides: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Result<(), String> {
    use clap::{Args as _, Command};
    let command = Settings::augment_args(Command::new("run").no_binary_name(true));
    let known: Vec<(String, String)> = command
        .get_arguments()
        .filter_map(|a| {
            let env = a.get_env()?.to_str()?.to_string();
            Some((env, a.get_long()?.to_string()))
        })
        .filter(|(env, _)| !SET_BY_JOINTER.contains(&env.as_str()))
        .collect();
    let base = [
        "--cluster-name".to_string(),
        "check".to_string(),
        "--region".to_string(),
        "us-east-1".to_string(),
    ];
    for (key, value) in overrides {
        if SET_BY_JOINTER.contains(&key.as_str()) {
            return Err(format!(
                "{key} is set by jointer from the cluster and interruption fields; set it there"
            ));
        }
        let Some((_, long)) = known.iter().find(|(env, _)| env == key) else {
            let names: Vec<&str> = known.iter().map(|(env, _)| env.as_str()).collect();
            return Err(format!(
                "{key} is not a setting of jointer-controller; known: {}",
                names.join(", ")
            ));
        };
        let mut argv = base.to_vec();
        argv.push(format!("--{long}={value}"));
        if let Err(e) = command.clone().try_get_matches_from(argv) {
            return Err(format!("{key}: {}", invalid_value(&e, value)));
        }
    }
    Ok(())
}

/// What clap says of a setting's value, without its flag syntax: `'Sometimes' is not one of
/// Strict, BestEffort` or `'soon': <the parser's reason>`.
fn invalid_value(e: &clap::Error, value: &str) -> String {
    use clap::error::{ContextKind, ContextValue};
    if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) {
        return format!("{value:?} is not one of {}", valid.join(", "));
    }
    let reason = std::error::Error::source(e)
        .map(|s| s.to_string())
        .unwrap_or_else(|| e.kind().to_string());
    format!("{value:?} is not valid: {reason}")
}

impl Settings {
    pub fn policies(&self) -> Policies {
        Policies {
            min_values: self.min_values_policy,
            preferences: self.preference_policy,
            ..Policies::default()
        }
    }

    pub fn consolidation_timeouts(&self) -> ConsolidationTimeouts {
        ConsolidationTimeouts {
            multi_node: self.multi_node_consolidation_timeout,
            single_node: self.single_node_consolidation_timeout,
        }
    }

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

#[cfg(test)]
mod overrides {
    use std::collections::BTreeMap;

    use super::*;

    fn check(pairs: &[(&str, &str)]) -> Result<(), String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        check_overrides(&map)
    }

    #[test]
    fn overrides_are_checked_by_the_controllers_own_parsers() {
        assert_eq!(
            check(&[
                ("MIN_VALUES_POLICY", "BestEffort"),
                ("PREFERENCE_POLICY", "Ignore"),
                ("MULTI_NODE_CONSOLIDATION_TIMEOUT", "30s"),
                ("BATCH_IDLE_DURATION", "2s"),
            ]),
            Ok(())
        );
        let bad = check(&[("MIN_VALUES_POLICY", "Loose")]).unwrap_err();
        assert!(bad.contains("Loose") && bad.contains("BestEffort"), "{bad}");
        let bad = check(&[("BATCH_IDLE_DURATION", "soon")]).unwrap_err();
        assert!(bad.contains("soon"), "{bad}");
        let unknown = check(&[("FEATURE_GATES", "x")]).unwrap_err();
        assert!(
            unknown.contains("FEATURE_GATES") && unknown.contains("MIN_VALUES_POLICY"),
            "{unknown}"
        );
        let ours = check(&[("CLUSTER_NAME", "other")]).unwrap_err();
        assert!(ours.contains("set by jointer"), "{ours}");
    }
}
