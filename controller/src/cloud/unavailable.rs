//! Offerings EC2 recently said it has no capacity for (the AWS cloud's and the simulated one's). An insufficient-capacity error makes an
//! (instance type, zone, capacity type) unavailable for a while, so the next launch (and the
//! solver) tries the rest instead of hitting the same empty pool again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::core::scheduling::CapacityType;

/// How long an offering stays unavailable after an insufficient-capacity error (as upstream).
pub const TTL: Duration = Duration::from_secs(180);

/// EC2 fleet error codes that mean "no capacity here now", not "the request is wrong".
pub fn is_capacity_error(code: &str) -> bool {
    matches!(
        code,
        "InsufficientInstanceCapacity"
            | "InsufficientCapacity"
            | "UnfulfillableCapacity"
            | "MaxSpotInstanceCountExceeded"
            | "InsufficientFreeAddressesInSubnet"
            | "ReservationCapacityExceeded"
            | "Unsupported"
    )
}

type Key = (String, String, CapacityType);

#[derive(Debug, Default)]
pub struct Unavailable {
    until: Mutex<HashMap<Key, Instant>>,
}

impl Unavailable {
    pub fn mark(&self, instance_type: &str, zone: &str, capacity: CapacityType, now: Instant) {
        if let Ok(mut map) = self.until.lock() {
            map.insert(
                (instance_type.to_string(), zone.to_string(), capacity),
                now + TTL,
            );
        }
    }

    pub fn is_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity: CapacityType,
        now: Instant,
    ) -> bool {
        let Ok(mut map) = self.until.lock() else {
            return false;
        };
        map.retain(|_, until| *until > now);
        map.contains_key(&(instance_type.to_string(), zone.to_string(), capacity))
    }

    /// Whether no offering is unavailable at `now` (the common case, checked first).
    pub fn is_empty(&self, now: Instant) -> bool {
        self.until
            .lock()
            .map_or(true, |map| map.values().all(|until| *until <= now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offering_is_unavailable_for_three_minutes_only() {
        let cache = Unavailable::default();
        let t0 = Instant::now();
        assert!(cache.is_empty(t0));
        cache.mark("m5.large", "us-east-1a", CapacityType::Spot, t0);
        assert!(!cache.is_empty(t0));
        assert!(cache.is_unavailable("m5.large", "us-east-1a", CapacityType::Spot, t0));
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", CapacityType::OnDemand, t0));
        assert!(!cache.is_unavailable("m5.large", "us-east-1b", CapacityType::Spot, t0));
        let later = t0 + TTL + Duration::from_millis(1);
        assert!(!cache.is_unavailable("m5.large", "us-east-1a", CapacityType::Spot, later));
        assert!(cache.is_empty(later));
    }

    #[test]
    fn only_capacity_errors_count() {
        assert!(is_capacity_error("InsufficientInstanceCapacity"));
        assert!(!is_capacity_error("InvalidParameterValue"));
    }
}
