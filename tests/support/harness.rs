//! What the on-purpose harnesses share, in both test binaries (the controller's includes this
//! file by path): knobs from the environment, CPU counting, Nodes without a NodeClaim. (Their reproducible chance is
//! the benchmarks' generator, `jointer_controller::core::benchmark::Rng`.)

/// A whole-number knob from the environment (`CRASH_ROUNDS=100`), or `default`.
pub fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whole CPUs of a quantity (`4`, `3500m`), rounded up.
pub fn cpus(q: &str) -> u64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse::<u64>().map_or(0, |m| m.div_ceil(1000)),
        None => q.parse().unwrap_or(0),
    }
}

/// Nodes whose provider ID is none of `claimed` (the NodeClaims' `status.providerID`): room
/// the provisioner might count that no pod can use.
pub fn unclaimed_nodes(
    nodes: &[k8s_openapi::api::core::v1::Node],
    claimed: &std::collections::BTreeSet<&str>,
) -> usize {
    nodes
        .iter()
        .filter(|n| {
            let id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            !id.is_some_and(|id| claimed.contains(id))
        })
        .count()
}
