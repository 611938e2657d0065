//! Prometheus metrics the controller exports on `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub service: String,
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub nodepool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

type PoolCounter = Family<PoolLabels, Counter<u64, AtomicU64>>;

/// Every metric, registered once.
pub struct Metrics {
    pub registry: Registry,
    /// 1 while this replica holds the leader Lease.
    pub leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    pub nodeclass_reconciles: Family<OutcomeLabels, Counter<u64, AtomicU64>>,
    pub cloud_calls: Family<CallLabels, Counter<u64, AtomicU64>>,
    pub cloud_errors: Family<CallLabels, Counter<u64, AtomicU64>>,
    pub garbage_collected_instances: Counter<u64, AtomicU64>,
    pub nodeclaims_created: PoolCounter,
    pub nodeclaims_launched: PoolCounter,
    pub nodeclaims_registered: PoolCounter,
    pub nodeclaims_initialized: PoolCounter,
    pub nodeclaims_terminated: PoolCounter,
    /// Pending pod seen unschedulable → its NodeClaim created.
    pub decision_latency: Histogram,
    pub solve_duration: Histogram,
    /// One provisioning pass: from its batch closing to its NodeClaims created.
    pub provisioning_pass: Histogram,
    pub pods_pending: Family<ReasonLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    pub interruption_messages: Family<ReasonLabels, Counter<u64, AtomicU64>>,
    pub disruption_commands: Family<ReasonLabels, Counter<u64, AtomicU64>>,
    /// One disruption pass's decision over every candidate (upstream's
    /// `voluntary_disruption_decision_evaluation_duration_seconds`).
    pub disruption_decision: Histogram,
}

fn pool_counter(registry: &mut Registry, name: &str, help: &str) -> PoolCounter {
    let family = PoolCounter::default();
    registry.register(name, help, family.clone());
    family
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("jointer_controller");
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica is the elected leader",
            leader.clone(),
        );
        let nodeclass_reconciles = Family::default();
        registry.register(
            "ec2nodeclass_reconciles",
            "EC2NodeClass reconciliations by outcome (ready, not_ready, error)",
            nodeclass_reconciles.clone(),
        );
        let cloud_calls = Family::default();
        registry.register(
            "cloudprovider_calls",
            "AWS API calls by service and operation",
            cloud_calls.clone(),
        );
        let cloud_errors = Family::default();
        registry.register(
            "cloudprovider_errors",
            "failed AWS API calls by service and operation",
            cloud_errors.clone(),
        );
        let garbage_collected_instances = Counter::default();
        registry.register(
            "garbage_collected_instances",
            "instances terminated because no NodeClaim accounted for them",
            garbage_collected_instances.clone(),
        );
        let nodeclaims_created = pool_counter(
            &mut registry,
            "nodeclaims_created",
            "NodeClaims created by the provisioner, by NodePool",
        );
        let nodeclaims_launched = pool_counter(
            &mut registry,
            "nodeclaims_launched",
            "NodeClaims whose instance was launched, by NodePool",
        );
        let nodeclaims_registered = pool_counter(
            &mut registry,
            "nodeclaims_registered",
            "NodeClaims whose Node registered, by NodePool",
        );
        let nodeclaims_initialized = pool_counter(
            &mut registry,
            "nodeclaims_initialized",
            "NodeClaims whose Node became Ready and lost its startup taints, by NodePool",
        );
        let nodeclaims_terminated = pool_counter(
            &mut registry,
            "nodeclaims_terminated",
            "NodeClaims drained and terminated, by NodePool",
        );
        let decision_latency = Histogram::new(exponential_buckets(0.1, 2.0, 12));
        registry.register(
            "provisioning_decision_seconds",
            "time from a pod being marked unschedulable to the NodeClaim that will hold it being created",
            decision_latency.clone(),
        );
        let solve_duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "scheduling_solve_seconds",
            "duration of one scheduling solve",
            solve_duration.clone(),
        );
        let provisioning_pass = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register(
            "provisioning_pass_seconds",
            "time from a batch of pending pods closing to the NodeClaims it needs being created",
            provisioning_pass.clone(),
        );
        let disruption_decision = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "disruption_decision_seconds",
            "duration of one disruption pass's decision over every candidate",
            disruption_decision.clone(),
        );
        let pods_pending = Family::default();
        registry.register(
            "pods_pending",
            "pending pods the provisioner could not place at its last decision, by reason",
            pods_pending.clone(),
        );
        let interruption_messages = Family::default();
        registry.register(
            "interruption_messages",
            "interruption queue messages by kind (spot_interruption, scheduled_change, rebalance, state_change, ignored, malformed, ...)",
            interruption_messages.clone(),
        );
        let disruption_commands = Family::default();
        registry.register(
            "disruption_commands",
            "disruption commands carried out, by method (Expired, Empty, Underutilized)",
            disruption_commands.clone(),
        );
        Metrics {
            registry,
            disruption_commands,
            disruption_decision,
            interruption_messages,
            nodeclaims_created,
            nodeclaims_launched,
            nodeclaims_registered,
            nodeclaims_initialized,
            nodeclaims_terminated,
            decision_latency,
            solve_duration,
            provisioning_pass,
            pods_pending,
            garbage_collected_instances,
            leader,
            nodeclass_reconciles,
            cloud_calls,
            cloud_errors,
        }
    }

    /// Counts one AWS call and, when it failed, one error.
    pub fn call<T, E>(&self, service: &str, operation: &str, result: &Result<T, E>) {
        let labels = CallLabels {
            service: service.into(),
            operation: operation.into(),
        };
        self.cloud_calls.get_or_create(&labels).inc();
        if result.is_err() {
            self.cloud_errors.get_or_create(&labels).inc();
        }
    }

    pub fn count_pool(family: &PoolCounter, pool: &str) {
        family
            .get_or_create(&PoolLabels {
                nodepool: pool.to_string(),
            })
            .inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
