//! Disruption budgets (pure): how many of a NodePool's nodes may be disrupted now for a reason.
//! Each budget applies to its reasons (all when unset) and, with a `schedule`, only while a
//! window of `duration` that started at a cron time (UTC) covers now. The smallest active budget
//! wins; percentages round up; a schedule that does not parse allows nothing.

use std::str::FromStr;

use k8s_openapi::jiff::Timestamp;

use crate::api::nodepool::{Budget, DisruptionReason};
use crate::api::NodePool;

/// Whether the budget's window covers `now` (always, without a schedule). None: the schedule
/// does not parse.
fn active(budget: &Budget, now: Timestamp) -> Option<bool> {
    let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) else {
        return Some(true);
    };
    let cron = croner::Cron::from_str(schedule).ok()?;
    let minutes = (duration.0.as_secs() / 60) as i64;
    let now_minute = now.as_second() - now.as_second().rem_euclid(60);
    // A window that started at a cron time within the last `duration` is open.
    for back in 0..minutes.max(1) {
        let at = chrono::DateTime::from_timestamp(now_minute - back * 60, 0)?;
        if cron.is_time_matching(&at).ok()? {
            return Some(true);
        }
    }
    Some(false)
}

fn nodes_of(budget: &Budget, total: usize) -> usize {
    match budget.nodes.strip_suffix('%') {
        Some(pct) => {
            let pct: usize = pct.parse().unwrap_or(0);
            (pct * total).div_ceil(100)
        }
        None => budget.nodes.parse().unwrap_or(0),
    }
}

/// How many more nodes of `pool` (with `total` nodes, `disrupting` already on their way out)
/// may be disrupted for `reason` now.
pub fn allowed(
    pool: &NodePool,
    reason: DisruptionReason,
    total: usize,
    disrupting: usize,
    now: Timestamp,
) -> usize {
    let mut limit = total;
    for budget in &pool.spec.disruption.budgets {
        if budget
            .reasons
            .as_ref()
            .is_some_and(|r| !r.contains(&reason))
        {
            continue;
        }
        match active(budget, now) {
            Some(true) => limit = limit.min(nodes_of(budget, total)),
            Some(false) => {}
            None => return 0,
        }
    }
    limit.saturating_sub(disrupting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(budgets: serde_json::Value) -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}}},
                     "disruption": {"budgets": budgets}}
        }))
        .unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn counts_and_rounded_up_percentages_with_what_is_already_disrupting() {
        let now = at("2026-11-30T12:00:00Z");
        let p = pool(serde_json::json!([{"nodes": "10%"}]));
        assert_eq!(allowed(&p, DisruptionReason::Underutilized, 11, 0, now), 2);
        assert_eq!(allowed(&p, DisruptionReason::Underutilized, 11, 2, now), 0);
        let p = pool(serde_json::json!([{"nodes": "5"}, {"nodes": "0", "reasons": ["Drifted"]}]));
        assert_eq!(allowed(&p, DisruptionReason::Empty, 20, 1, now), 4);
        assert_eq!(allowed(&p, DisruptionReason::Drifted, 20, 0, now), 0);
    }

    #[test]
    fn a_scheduled_budget_applies_only_inside_its_window() {
        // No consolidation on weekdays 09:00–17:00 UTC.
        let p = pool(
            serde_json::json!([{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}, {"nodes": "100%"}]),
        );
        let monday_noon = at("2026-11-30T12:00:00Z");
        let monday_evening = at("2026-11-30T18:00:00Z");
        let sunday_noon = at("2026-11-29T12:00:00Z");
        assert_eq!(
            allowed(&p, DisruptionReason::Underutilized, 4, 0, monday_noon),
            0
        );
        assert_eq!(
            allowed(&p, DisruptionReason::Underutilized, 4, 0, monday_evening),
            4
        );
        assert_eq!(
            allowed(&p, DisruptionReason::Underutilized, 4, 0, sunday_noon),
            4
        );
    }

    #[test]
    fn an_invalid_schedule_allows_nothing() {
        let p = pool(
            serde_json::json!([{"nodes": "100%", "schedule": "61 * * * *", "duration": "1h"}]),
        );
        assert_eq!(
            allowed(
                &p,
                DisruptionReason::Empty,
                4,
                0,
                at("2026-11-30T12:00:00Z")
            ),
            0
        );
    }
}
