//! Which nodes the provisioner has just planned pending pods onto. Between a node becoming
//! Ready and kube-scheduler binding its pods, the node looks empty; disruption must not take
//! it (as upstream's nomination of a state node). Kept in memory, as upstream's: after a
//! restart `DISRUPTION_SETTLE` covers the same gap.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Nominations {
    window: Duration,
    until: Mutex<HashMap<String, Instant>>,
}

impl Nominations {
    /// Upstream's window, `max(2 × BATCH_MAX_DURATION, 10 s)`. The provisioner re-plans a
    /// still-pending set every 10 s, and each plan renews the nomination.
    pub fn new(batch_max: Duration) -> Nominations {
        Nominations {
            window: (2 * batch_max).max(Duration::from_secs(10)),
            until: Mutex::default(),
        }
    }

    /// Nominates each named node or in-flight NodeClaim for the window from `now`.
    pub fn nominate<'a>(&self, names: impl IntoIterator<Item = &'a str>, now: Instant) {
        let until = now + self.window;
        let mut map = self.until.lock().unwrap_or_else(|p| p.into_inner());
        for name in names {
            map.insert(name.to_string(), until);
        }
    }

    /// The names nominated at `now` (forgetting the lapsed ones).
    pub fn active(&self, now: Instant) -> HashSet<String> {
        let mut map = self.until.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, until| *until > now);
        map.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nomination_lasts_its_window_and_is_renewed_by_the_next() {
        let n = Nominations::new(Duration::from_secs(2));
        assert_eq!(n.window, Duration::from_secs(10), "never under 10 s");
        let n = Nominations::new(Duration::from_secs(15));
        assert_eq!(n.window, Duration::from_secs(30));

        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        n.nominate(["node-a", "claim-b"], t0);
        assert_eq!(n.active(at(29)).len(), 2);
        n.nominate(["node-a"], at(20));
        assert_eq!(n.active(at(30)), HashSet::from(["node-a".to_string()]));
        assert!(n.active(at(50)).is_empty());
    }
}
