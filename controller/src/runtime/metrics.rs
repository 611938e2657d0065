//! Prometheus metrics the controller exports on `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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

/// Every metric, registered once.
pub struct Metrics {
    pub registry: Registry,
    /// 1 while this replica holds the leader Lease.
    pub leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    pub nodeclass_reconciles: Family<OutcomeLabels, Counter<u64, AtomicU64>>,
    pub cloud_calls: Family<CallLabels, Counter<u64, AtomicU64>>,
    pub cloud_errors: Family<CallLabels, Counter<u64, AtomicU64>>,
    pub garbage_collected_instances: Counter<u64, AtomicU64>,
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
        Metrics {
            registry,
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
