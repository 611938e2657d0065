//! Instance types and their offerings: plain data the solver filters and prices.

use std::fmt;

use super::requirements::{Requirement, Requirements};
use super::resources::Resources;
use crate::api::labels;

/// How an instance is bought.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityType {
    Reserved,
    Spot,
    OnDemand,
}

impl CapacityType {
    pub fn as_str(&self) -> &'static str {
        match self {
            CapacityType::Reserved => labels::CAPACITY_RESERVED,
            CapacityType::Spot => labels::CAPACITY_SPOT,
            CapacityType::OnDemand => labels::CAPACITY_ON_DEMAND,
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "reserved" => Some(CapacityType::Reserved),
            "spot" => Some(CapacityType::Spot),
            "on-demand" => Some(CapacityType::OnDemand),
            _ => None,
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One way to buy an instance type: a zone and capacity type at a price.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub zone: String,
    pub capacity_type: CapacityType,
    /// USD per hour.
    pub price: f64,
    /// False while the cloud reports insufficient capacity for it.
    pub available: bool,
}

impl Offering {
    /// Whether a node with these requirements could be bought through this offering.
    pub fn matches(&self, requirements: &Requirements) -> bool {
        Buyable::of(requirements).allows(self)
    }
}

/// What of a set of requirements an offering is judged by (its zone and capacity type), looked
/// up once for all the offerings of many types: a plan prices hundreds of types in every
/// consolidation simulation.
#[derive(Debug, Clone, Copy)]
pub struct Buyable<'r> {
    zone: Option<&'r Requirement>,
    capacity_type: Option<&'r Requirement>,
}

impl<'r> Buyable<'r> {
    pub fn of(requirements: &'r Requirements) -> Self {
        Buyable {
            zone: requirements.get(labels::ZONE),
            capacity_type: requirements.get(labels::CAPACITY_TYPE),
        }
    }

    pub fn allows(&self, offering: &Offering) -> bool {
        self.zone.is_none_or(|r| r.has(&offering.zone))
            && self
                .capacity_type
                .is_none_or(|r| r.has(offering.capacity_type.as_str()))
    }
}

/// A shape of machine the cloud can launch, with the labels its nodes get, what the kubelet
/// will report as allocatable, and where and how it can be bought.
#[derive(Debug, Clone)]
pub struct InstanceType {
    pub name: String,
    /// Its labels as requirements (instance-type, arch, os, family, …, and the zones and
    /// capacity types of its available offerings).
    pub requirements: Requirements,
    pub capacity: Resources,
    /// Kube-reserved + system-reserved + eviction threshold.
    pub overhead: Resources,
    /// `capacity - overhead`: what pods can request.
    pub allocatable: Resources,
    pub offerings: Vec<Offering>,
    /// A NodeOverlay set the price of one of its offerings: EC2's own price order no longer
    /// says which offering is cheapest, so a launch must ask for them in this order.
    pub price_overlaid: bool,
}

/// Narrows the zone and capacity-type requirements to where `offerings` can still be bought,
/// so requirement checks see where the type can actually launch.
fn narrow_to_available(requirements: &mut Requirements, offerings: &[Offering]) {
    let available = || offerings.iter().filter(|o| o.available);
    requirements.add(
        labels::ZONE,
        Requirement::any_of(available().map(|o| o.zone.clone())),
    );
    requirements.add(
        labels::CAPACITY_TYPE,
        Requirement::any_of(available().map(|o| o.capacity_type.as_str())),
    );
}

impl InstanceType {
    /// Builds an instance type; zone and capacity-type requirements are derived from the
    /// available offerings so requirement checks see where it can actually launch.
    pub fn new(
        name: &str,
        mut requirements: Requirements,
        capacity: Resources,
        overhead: Resources,
        offerings: Vec<Offering>,
    ) -> Self {
        requirements.add(labels::INSTANCE_TYPE, Requirement::any_of([name]));
        narrow_to_available(&mut requirements, &offerings);
        InstanceType {
            name: name.to_string(),
            requirements,
            capacity,
            overhead,
            allocatable: capacity - overhead,
            offerings,
            price_overlaid: false,
        }
    }

    /// A copy with the offerings `gone` picks unavailable, its zone and capacity-type
    /// requirements narrowed to the offerings still available (as [`InstanceType::new`]
    /// derives them), so the solver no longer sees it where it cannot be bought.
    pub fn without_offerings(&self, gone: impl Fn(&Offering) -> bool) -> InstanceType {
        let mut copy = self.clone();
        for o in copy.offerings.iter_mut().filter(|o| gone(o)) {
            o.available = false;
        }
        narrow_to_available(&mut copy.requirements, &copy.offerings);
        copy
    }

    /// The cheapest available offering compatible with `requirements`.
    pub fn cheapest(&self, requirements: &Requirements) -> Option<&Offering> {
        self.cheapest_of(Buyable::of(requirements))
    }

    /// [`InstanceType::cheapest`] with the requirements looked up already.
    pub fn cheapest_of(&self, buyable: Buyable) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available && buyable.allows(o))
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }
}
