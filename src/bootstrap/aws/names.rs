//! Names of the AWS resources jointer creates, fitted to each service's length limit: a
//! 100-character cluster name is valid in EKS but too long for an IAM role (64) or an SQS
//! queue (80), so long names are cut and given a short hash that keeps them unique.

use crate::input::config::Config;

pub const ROLE_MAX: usize = 64;
pub const POLICY_MAX: usize = 128;
pub const QUEUE_MAX: usize = 80;
pub const RULE_MAX: usize = 64;

/// `name` if it fits `max`, else its first characters and 8 hex digits of its hash.
pub fn fit(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let hash = format!("{:016x}", fnv1a(name.as_bytes()));
    format!("{}-{}", &name[..max - 9], &hash[..8])
}

/// FNV-1a: stable across releases and platforms (unlike std's hasher), which names need.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Every name of one cluster's bootstrap.
#[derive(Debug, Clone)]
pub struct Names {
    pub node_role: String,
    pub controller_role: String,
    pub queue: String,
    pub cluster: String,
}

impl Names {
    pub fn of(config: &Config) -> Names {
        let cluster = &config.cluster.name;
        Names {
            node_role: config
                .node_role
                .name
                .clone()
                .unwrap_or_else(|| fit(&format!("KarpenterNodeRole-{cluster}"), ROLE_MAX)),
            controller_role: fit(&format!("KarpenterControllerRole-{cluster}"), ROLE_MAX),
            queue: config
                .interruption
                .queue_name
                .clone()
                .unwrap_or_else(|| fit(cluster, QUEUE_MAX)),
            cluster: cluster.clone(),
        }
    }

    /// A controller policy: `<controller role>-<group>`.
    pub fn controller_policy(&self, group: &str) -> String {
        fit(&format!("{}-{group}", self.controller_role), POLICY_MAX)
    }

    /// An EventBridge rule: `jointer-<cluster>-<kind>`.
    pub fn rule(&self, kind: &str) -> String {
        let max_cluster = RULE_MAX - "jointer--".len() - kind.len();
        format!("jointer-{}-{kind}", fit(&self.cluster, max_cluster))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_fit_and_stay_distinct() {
        let a = "a".repeat(100);
        let b = format!("{}b", "a".repeat(99));
        assert_eq!(fit("short", 10), "short");
        assert_eq!(fit(&a, ROLE_MAX).len(), ROLE_MAX);
        assert_ne!(fit(&a, ROLE_MAX), fit(&b, ROLE_MAX));
        assert_eq!(fit(&a, ROLE_MAX), fit(&a, ROLE_MAX));
        let config: Config =
            serde_yaml::from_str(&format!("cluster: {{ name: {a}, region: us-east-1 }}"))
                .expect("config");
        let names = Names::of(&config);
        assert!(names.node_role.len() <= ROLE_MAX);
        assert!(names.controller_role.len() <= ROLE_MAX);
        assert!(names.queue.len() <= QUEUE_MAX);
        for kind in ["CapacityReservation", "Spot"] {
            assert!(names.rule(kind).len() <= RULE_MAX, "{}", names.rule(kind));
        }
        assert!(names.controller_policy("ResourceDiscovery").len() <= POLICY_MAX);
    }
}
