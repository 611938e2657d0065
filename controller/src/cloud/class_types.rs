//! Each EC2NodeClass's instance types, built once and kept until what they are built from
//! changes. Every provisioning pass, disruption poll and launch asks for them, and building
//! the region's ~800 types with their offerings each time was most of a scale-up's CPU and
//! allocations (dozens of launches side by side each held a private copy). Offerings EC2
//! recently had no capacity for are marked on the way out instead, copying only the types
//! they touch, so an insufficient-capacity error never rebuilds the list.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::unavailable::Unavailable;
use crate::core::scheduling::{InstanceType, Offering};

/// One class's instance types, shared by every caller until they are built again.
pub type Types = Arc<[Arc<InstanceType>]>;

/// The types last built per class name, with the inputs (`K`) they were built from.
#[derive(Debug)]
pub struct ClassTypes<K> {
    built: Mutex<HashMap<String, (K, Types)>>,
}

impl<K> Default for ClassTypes<K> {
    fn default() -> Self {
        ClassTypes {
            built: Mutex::default(),
        }
    }
}

impl<K: PartialEq> ClassTypes<K> {
    /// The types of `class` as built from `inputs`: the kept ones when they were built from
    /// equal inputs, else `build`'s (kept for next time; an error keeps nothing). Concurrent
    /// callers wait for one build rather than each making their own.
    pub fn get_or_try_build<E>(
        &self,
        class: &str,
        inputs: K,
        build: impl FnOnce() -> Result<Vec<Arc<InstanceType>>, E>,
    ) -> Result<Types, E> {
        // A panic elsewhere while holding the lock leaves at worst a stale entry, which the
        // inputs check replaces.
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((kept, types)) = built.get(class) {
            if *kept == inputs {
                return Ok(types.clone());
            }
        }
        let types: Types = build()?.into();
        built.insert(class.to_string(), (inputs, types.clone()));
        Ok(types)
    }

    /// [`ClassTypes::get_or_try_build`] for a build that cannot fail.
    pub fn get_or_build(
        &self,
        class: &str,
        inputs: K,
        build: impl FnOnce() -> Vec<Arc<InstanceType>>,
    ) -> Types {
        match self.get_or_try_build(class, inputs, || Ok::<_, Infallible>(build())) {
            Ok(types) => types,
            Err(never) => match never {},
        }
    }
}

/// `types` with the offerings `unavailable` holds at `now` marked unavailable; a type none of
/// whose offerings is held is the same `Arc`.
pub fn mark_unavailable(
    types: &[Arc<InstanceType>],
    unavailable: &Unavailable,
    now: Instant,
) -> Vec<Arc<InstanceType>> {
    if unavailable.is_empty(now) {
        return types.to_vec();
    }
    let held = |t: &InstanceType, o: &Offering| {
        o.available && unavailable.is_unavailable(&t.name, &o.zone, o.capacity_type, now)
    };
    types
        .iter()
        .map(|t| {
            if t.offerings.iter().any(|o| held(t, o)) {
                Arc::new(t.without_offerings(|o| held(t, o)))
            } else {
                t.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::labels;
    use crate::core::scheduling::{CapacityType, Requirements, Resources};
    use std::cell::Cell;

    fn one_type(name: &str) -> Arc<InstanceType> {
        let offering = |capacity_type, price| Offering {
            zone: "us-east-1a".into(),
            capacity_type,
            price,
            available: true,
        };
        Arc::new(InstanceType::new(
            name,
            Requirements::new(),
            Resources::cpu_memory(2000, 8 << 30),
            Resources::ZERO,
            vec![
                offering(CapacityType::Spot, 0.03),
                offering(CapacityType::OnDemand, 0.1),
            ],
        ))
    }

    #[test]
    fn types_are_built_again_only_when_their_inputs_change() {
        let cache: ClassTypes<u32> = ClassTypes::default();
        let builds = Cell::new(0);
        let build = || {
            builds.set(builds.get() + 1);
            Ok::<_, ()>(vec![one_type("m5.large")])
        };
        let first = cache.get_or_try_build("default", 1, build).unwrap();
        let again = cache.get_or_try_build("default", 1, build).unwrap();
        assert_eq!(builds.get(), 1);
        assert!(Arc::ptr_eq(&first, &again), "the kept list is handed out");
        cache.get_or_try_build("default", 2, build).unwrap();
        assert_eq!(builds.get(), 2, "other inputs build again");
        cache.get_or_try_build("other", 2, build).unwrap();
        assert_eq!(builds.get(), 3, "each class has its own entry");
        assert!(cache.get_or_try_build("x", 1, || Err("no")).is_err());
        cache.get_or_try_build("x", 1, build).unwrap();
        assert_eq!(builds.get(), 4, "a failed build keeps nothing");
    }

    #[test]
    fn unavailable_offerings_are_marked_on_copies_of_the_types_they_touch() {
        let types = vec![one_type("m5.large"), one_type("c5.large")];
        let unavailable = Unavailable::default();
        let now = Instant::now();
        let same = mark_unavailable(&types, &unavailable, now);
        assert!(same.iter().zip(&types).all(|(a, b)| Arc::ptr_eq(a, b)));
        unavailable.mark("m5.large", "us-east-1a", CapacityType::Spot, now);
        let marked = mark_unavailable(&types, &unavailable, now);
        assert_eq!(
            marked[0]
                .offerings
                .iter()
                .map(|o| o.available)
                .collect::<Vec<_>>(),
            [false, true],
            "only the spot offering ran out"
        );
        let capacity = marked[0].requirements.get(labels::CAPACITY_TYPE);
        assert!(
            capacity.is_some_and(|r| !r.has("spot") && r.has("on-demand")),
            "the solver no longer sees it as spot: {capacity:?}"
        );
        assert!(
            types[0].offerings.iter().all(|o| o.available),
            "the kept type is untouched"
        );
        assert!(
            Arc::ptr_eq(&marked[1], &types[1]),
            "an untouched type is not copied"
        );
        let later = now + crate::cloud::unavailable::TTL + std::time::Duration::from_secs(1);
        assert!(mark_unavailable(&types, &unavailable, later)[0]
            .offerings
            .iter()
            .all(|o| o.available));
    }
}
