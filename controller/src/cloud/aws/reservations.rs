//! How many more instances each selected capacity reservation has room for: read from
//! `DescribeCapacityReservations` (again once a minute), counted down by every launch into
//! it, so a full reservation stops being offered at once instead of failing the next launch.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::ec2nodeclass::ResolvedCapacityReservation;

/// Reservation states instances can still be launched into.
pub const USABLE_STATES: [&str; 2] = ["active", "expiring"];

/// How long a reservation's room, as AWS last said, is trusted.
pub const REFRESH: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub struct Reservations {
    room: Mutex<HashMap<String, (i64, Instant)>>,
}

impl Reservations {
    /// Instances the reservation can still take (0 when never read).
    pub fn room(&self, id: &str) -> i64 {
        self.room
            .lock()
            .ok()
            .and_then(|m| m.get(id).map(|(n, _)| *n))
            .unwrap_or(0)
    }

    /// The ids among `ids` never read or read longer ago than [`REFRESH`].
    pub fn stale<'a>(&self, ids: impl IntoIterator<Item = &'a str>, now: Instant) -> Vec<String> {
        let Ok(map) = self.room.lock() else {
            return Vec::new();
        };
        let mut out: Vec<String> = ids
            .into_iter()
            .filter(|id| {
                map.get(*id)
                    .is_none_or(|(_, at)| now.duration_since(*at) >= REFRESH)
            })
            .map(str::to_string)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn set(&self, id: &str, room: i64, now: Instant) {
        if let Ok(mut map) = self.room.lock() {
            map.insert(id.to_string(), (room.max(0), now));
        }
    }

    /// One instance launched into the reservation.
    pub fn took_one(&self, id: &str) {
        if let Ok(mut map) = self.room.lock() {
            if let Some((n, _)) = map.get_mut(id) {
                *n = (*n - 1).max(0);
            }
        }
    }

    /// The class's usable reservations for one instance type in one zone, roomiest first.
    pub fn usable<'a>(
        &self,
        selected: &'a [ResolvedCapacityReservation],
        instance_type: &str,
        zone: &str,
    ) -> Vec<&'a ResolvedCapacityReservation> {
        let mut out: Vec<&ResolvedCapacityReservation> = selected
            .iter()
            .filter(|r| r.instance_type == instance_type && r.availability_zone == zone)
            .filter(|r| self.room(&r.id) > 0)
            .collect();
        out.sort_by_key(|r| (std::cmp::Reverse(self.room(&r.id)), r.id.clone()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(id: &str, instance_type: &str, zone: &str) -> ResolvedCapacityReservation {
        ResolvedCapacityReservation {
            id: id.into(),
            availability_zone: zone.into(),
            instance_type: instance_type.into(),
            owner_id: "123456789012".into(),
            instance_match_criteria: "targeted".into(),
            reservation_type: "default".into(),
            state: "active".into(),
            end_time: None,
            interruptible: None,
        }
    }

    #[test]
    fn a_reservation_is_usable_while_it_has_room_and_launches_count_it_down() {
        let r = Reservations::default();
        let now = Instant::now();
        let selected = vec![
            reservation("cr-a", "m5.large", "us-east-1a"),
            reservation("cr-b", "m5.large", "us-east-1a"),
            reservation("cr-c", "c5.large", "us-east-1a"),
        ];
        assert!(
            r.usable(&selected, "m5.large", "us-east-1a").is_empty(),
            "never read: no room"
        );
        r.set("cr-a", 1, now);
        r.set("cr-b", 2, now);
        let ids = |v: Vec<&ResolvedCapacityReservation>| {
            v.into_iter().map(|r| r.id.clone()).collect::<Vec<_>>()
        };
        assert_eq!(
            ids(r.usable(&selected, "m5.large", "us-east-1a")),
            ["cr-b", "cr-a"]
        );
        assert!(r.usable(&selected, "m5.large", "us-east-1b").is_empty());
        r.took_one("cr-a");
        assert_eq!(ids(r.usable(&selected, "m5.large", "us-east-1a")), ["cr-b"]);
        assert_eq!(r.room("cr-a"), 0);
    }

    #[test]
    fn room_is_read_again_once_a_minute() {
        let r = Reservations::default();
        let now = Instant::now();
        r.set("cr-a", 1, now);
        assert_eq!(r.stale(["cr-a", "cr-b", "cr-b"], now), ["cr-b"]);
        assert_eq!(r.stale(["cr-a"], now + REFRESH), ["cr-a"]);
    }
}
