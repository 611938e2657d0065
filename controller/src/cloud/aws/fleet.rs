//! Choosing what one CreateFleet request offers EC2 for a NodeClaim (pure): the instance types
//! that fit, the capacity type (reserved > spot > on-demand; spot dearer than the cheapest
//! on-demand is dropped), the 60 cheapest types, and one override per (type × zone subnet).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::ec2nodeclass::ResolvedSubnet;
use crate::api::labels;
use crate::core::scheduling::{CapacityType, InstanceType, Requirements, Resources};

/// (zone, capacity type, USD/hour) of one usable offering.
type Offer = (String, CapacityType, f64);

/// At most this many instance types go into one request (as upstream: more only slows EC2).
pub const MAX_TYPES: usize = 60;

/// One (instance type, subnet) EC2 may fill the request with.
#[derive(Debug, Clone, PartialEq)]
pub struct Override {
    pub instance_type: String,
    pub arch: String,
    pub zone: String,
    pub subnet_id: String,
    pub price: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FleetPlan {
    pub capacity_type: CapacityType,
    /// Cheapest first.
    pub overrides: Vec<Override>,
    /// A NodeOverlay priced one of the offered types: EC2 must take the overrides in this
    /// order (its `prioritized` strategies), since its own price order knows nothing of the
    /// overlay (as upstream).
    pub prioritized: bool,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoOffering {
    #[error("no instance type satisfies the NodeClaim's requirements and fits {requests}")]
    NoInstanceType { requests: String },
    #[error("no available offering in the EC2NodeClass's subnets' zones ({zones}) matches the NodeClaim's zone and capacity-type requirements (offerings may be unavailable for 3 minutes after an insufficient-capacity error)")]
    NoOffering { zones: String },
}

fn is_exotic(t: &InstanceType) -> bool {
    t.capacity.nvidia_gpu > 0
        || t.capacity.amd_gpu > 0
        || t.capacity.neuron > 0
        || t.requirements
            .get(labels::INSTANCE_SIZE)
            .and_then(|r| r.values())
            .is_some_and(|v| v.iter().any(|s| s.contains("metal")))
}

fn arch_of(t: &InstanceType) -> String {
    t.requirements
        .get(labels::ARCH)
        .and_then(|r| r.values())
        .and_then(|v| v.iter().next().cloned())
        .unwrap_or_else(|| "amd64".into())
}

pub fn plan(
    requirements: &Requirements,
    requests: &Resources,
    instance_types: &[Arc<InstanceType>],
    subnets: &[ResolvedSubnet],
) -> Result<FleetPlan, NoOffering> {
    let fits: Vec<&Arc<InstanceType>> = instance_types
        .iter()
        .filter(|t| t.requirements.conflict(requirements).is_none())
        .filter(|t| requests.fits_in(&t.allocatable))
        .collect();
    if fits.is_empty() {
        return Err(NoOffering::NoInstanceType {
            requests: requests.to_string(),
        });
    }
    // GPUs and bare metal only when nothing ordinary fits: they cost far more per pod.
    let ordinary: Vec<&Arc<InstanceType>> =
        fits.iter().copied().filter(|t| !is_exotic(t)).collect();
    let candidates = if ordinary.is_empty() { fits } else { ordinary };

    // The first subnet of each zone (by id, so the choice is stable).
    let mut subnet_of_zone: BTreeMap<&str, &str> = BTreeMap::new();
    let mut sorted: Vec<&ResolvedSubnet> = subnets.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    for s in sorted {
        subnet_of_zone
            .entry(s.zone.as_str())
            .or_insert(s.id.as_str());
    }
    let usable = |t: &InstanceType| -> Vec<Offer> {
        t.offerings
            .iter()
            .filter(|o| o.available && o.matches(requirements))
            .filter(|o| subnet_of_zone.contains_key(o.zone.as_str()))
            .map(|o| (o.zone.clone(), o.capacity_type, o.price))
            .collect()
    };
    let offers: Vec<(&Arc<InstanceType>, Vec<Offer>)> = candidates
        .into_iter()
        .map(|t| (t, usable(t)))
        .filter(|(_, o)| !o.is_empty())
        .collect();
    let cheapest_on_demand = offers
        .iter()
        .flat_map(|(_, o)| o)
        .filter(|o| o.1 == CapacityType::OnDemand)
        .map(|o| o.2)
        .min_by(f64::total_cmp);
    let worth = |o: &Offer| match o.1 {
        // A spot price above what on-demand would cost is no saving, only interruption risk.
        CapacityType::Spot => cheapest_on_demand.is_none_or(|od| o.2 <= od),
        _ => true,
    };
    let has = |ct: CapacityType| {
        offers
            .iter()
            .flat_map(|(_, o)| o)
            .any(|o| o.1 == ct && worth(o))
    };
    let Some(capacity_type) = [
        CapacityType::Reserved,
        CapacityType::Spot,
        CapacityType::OnDemand,
    ]
    .into_iter()
    .find(|ct| has(*ct)) else {
        return Err(NoOffering::NoOffering {
            zones: subnet_of_zone
                .keys()
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let mut per_type: Vec<(f64, Vec<Override>)> = offers
        .iter()
        .filter_map(|(t, o)| {
            let overrides: Vec<Override> = o
                .iter()
                .filter(|o| o.1 == capacity_type && worth(o))
                .map(|(zone, _, price)| Override {
                    instance_type: t.name.clone(),
                    arch: arch_of(t),
                    zone: zone.clone(),
                    subnet_id: subnet_of_zone[zone.as_str()].to_string(),
                    price: *price,
                })
                .collect();
            let cheapest = overrides.iter().map(|o| o.price).min_by(f64::total_cmp)?;
            Some((cheapest, overrides))
        })
        .collect();
    per_type.sort_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then(a.1[0].instance_type.cmp(&b.1[0].instance_type))
    });
    let mut overrides: Vec<Override> = per_type
        .into_iter()
        .take(MAX_TYPES)
        .flat_map(|(_, o)| o)
        .collect();
    overrides.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then(a.instance_type.cmp(&b.instance_type))
    });
    let prioritized = overrides.iter().any(|o| {
        offers
            .iter()
            .any(|(t, _)| t.price_overlaid && t.name == o.instance_type)
    });
    Ok(FleetPlan {
        capacity_type,
        overrides,
        prioritized,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::scheduling::{Offering, Requirement};

    fn itype(name: &str, cpu: i64, offers: &[(&str, CapacityType, f64)]) -> Arc<InstanceType> {
        let mut req = Requirements::new();
        req.add(labels::ARCH, Requirement::any_of(["amd64"]));
        let cap = Resources::cpu_memory(cpu * 1000, (cpu * 4) << 30);
        Arc::new(InstanceType::new(
            name,
            req,
            cap,
            Resources::ZERO,
            offers
                .iter()
                .map(|(z, ct, p)| Offering {
                    zone: z.to_string(),
                    capacity_type: *ct,
                    price: *p,
                    available: true,
                })
                .collect(),
        ))
    }

    fn subnets() -> Vec<ResolvedSubnet> {
        ["a", "b"]
            .iter()
            .map(|z| ResolvedSubnet {
                id: format!("subnet-{z}"),
                zone: format!("us-east-1{z}"),
                zone_id: None,
            })
            .collect()
    }

    fn allow(capacity: &[&str]) -> Requirements {
        let mut r = Requirements::new();
        r.add(
            labels::CAPACITY_TYPE,
            Requirement::any_of(capacity.iter().copied()),
        );
        r
    }

    use CapacityType::{OnDemand, Reserved, Spot};

    #[test]
    fn a_reservation_with_room_wins_only_where_the_pool_allows_reserved() {
        let types = [
            itype(
                "m5.large",
                2,
                &[
                    ("us-east-1a", OnDemand, 0.096),
                    ("us-east-1a", Reserved, 0.096e-7),
                    ("us-east-1a", Spot, 0.04),
                ],
            ),
            itype("c5.large", 2, &[("us-east-1b", OnDemand, 0.085)]),
        ];
        let one_cpu = Resources::cpu_memory(1000, 1 << 30);
        let p = plan(
            &allow(&["reserved", "spot", "on-demand"]),
            &one_cpu,
            &types,
            &subnets(),
        )
        .unwrap();
        assert_eq!(p.capacity_type, Reserved);
        assert_eq!(p.overrides.len(), 1, "only the reserved (type, zone)");
        assert_eq!(p.overrides[0].instance_type, "m5.large");
        let p = plan(&allow(&["spot", "on-demand"]), &one_cpu, &types, &subnets()).unwrap();
        assert_eq!(p.capacity_type, Spot);
    }

    #[test]
    fn spot_wins_when_allowed_and_cheaper_and_overrides_are_cheapest_first() {
        let types = [
            itype(
                "m5.large",
                2,
                &[
                    ("us-east-1a", OnDemand, 0.096),
                    ("us-east-1a", Spot, 0.04),
                    ("us-east-1b", Spot, 0.03),
                ],
            ),
            itype(
                "m5.xlarge",
                4,
                &[("us-east-1a", OnDemand, 0.192), ("us-east-1b", Spot, 0.08)],
            ),
        ];
        let p = plan(
            &allow(&["spot", "on-demand"]),
            &Resources::cpu_memory(1000, 1 << 30),
            &types,
            &subnets(),
        )
        .unwrap();
        assert_eq!(p.capacity_type, Spot);
        let order: Vec<(&str, &str)> = p
            .overrides
            .iter()
            .map(|o| (o.instance_type.as_str(), o.zone.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("m5.large", "us-east-1b"),
                ("m5.large", "us-east-1a"),
                ("m5.xlarge", "us-east-1b")
            ]
        );
        assert_eq!(p.overrides[0].subnet_id, "subnet-b");
    }

    #[test]
    fn spot_dearer_than_the_cheapest_on_demand_is_dropped() {
        let types = [
            itype("m5.large", 2, &[("us-east-1a", OnDemand, 0.096)]),
            itype(
                "m5.xlarge",
                4,
                &[("us-east-1a", Spot, 0.12), ("us-east-1b", Spot, 0.09)],
            ),
        ];
        let p = plan(
            &allow(&["spot", "on-demand"]),
            &Resources::cpu_memory(1000, 1 << 30),
            &types,
            &subnets(),
        )
        .unwrap();
        assert_eq!(p.capacity_type, Spot);
        assert_eq!(p.overrides.len(), 1);
        assert_eq!(p.overrides[0].price, 0.09);
        let od_only = plan(
            &allow(&["on-demand"]),
            &Resources::cpu_memory(1000, 1 << 30),
            &types,
            &subnets(),
        )
        .unwrap();
        assert_eq!(od_only.capacity_type, OnDemand);
    }

    #[test]
    fn types_too_small_and_unavailable_offerings_are_not_offered() {
        let mut gone = (*itype("m5.2xlarge", 8, &[("us-east-1a", OnDemand, 0.384)])).clone();
        gone.offerings[0].available = false;
        let types = [
            itype("m5.large", 2, &[("us-east-1a", OnDemand, 0.096)]),
            Arc::new(gone),
        ];
        assert!(matches!(
            plan(
                &allow(&["on-demand"]),
                &Resources::cpu_memory(4000, 1 << 30),
                &types,
                &subnets()
            ),
            Err(NoOffering::NoOffering { .. })
        ));
        assert!(matches!(
            plan(
                &allow(&["on-demand"]),
                &Resources::cpu_memory(64_000, 1 << 30),
                &types,
                &subnets()
            ),
            Err(NoOffering::NoInstanceType { .. })
        ));
    }

    #[test]
    fn at_most_sixty_types_go_to_ec2() {
        let types: Vec<_> = (0..80)
            .map(|i| {
                itype(
                    &format!("t{i}.large"),
                    2,
                    &[("us-east-1a", OnDemand, 1.0 + i as f64)],
                )
            })
            .collect();
        let p = plan(
            &allow(&["on-demand"]),
            &Resources::cpu_memory(1000, 1 << 30),
            &types,
            &subnets(),
        )
        .unwrap();
        assert_eq!(p.overrides.len(), MAX_TYPES);
        assert_eq!(p.overrides.last().unwrap().instance_type, "t59.large");
    }
}
