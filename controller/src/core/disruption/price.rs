//! What nodes cost (pure): the price of a NodeClaim's instance and the dearest offering a
//! replacement could land on, by which consolidation compares.

use kube::ResourceExt;

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::core::scheduling::{Buyable, CapacityType, InstanceType, Requirements};
use crate::core::state::TypesOfPool;

/// What launching into a capacity reservation is priced at, relative to on-demand (as
/// upstream: near zero, yet keeping the types' order).
pub const RESERVED_PRICE_FACTOR: f64 = 1e-7;

/// The price of the instance a NodeClaim launched (its labels name type, zone, capacity type),
/// as its NodePool's instance types price it (`types_of_pool`: NodeOverlays applied, so a
/// discounted node is compared at the price its replacement would be).
pub fn claim_price(claim: &NodeClaim, types_of_pool: &TypesOfPool) -> Option<f64> {
    let l = claim.labels();
    let (t, zone, ct) = (
        l.get(labels::INSTANCE_TYPE)?,
        l.get(labels::ZONE)?,
        CapacityType::parse(l.get(labels::CAPACITY_TYPE)?)?,
    );
    let offerings = &types_of_pool
        .get(l.get(labels::NODEPOOL)?)?
        .iter()
        .find(|it| &it.name == t)?
        .offerings;
    let price = |ct: CapacityType| {
        offerings
            .iter()
            .find(|o| &o.zone == zone && o.capacity_type == ct)
            .map(|o| o.price)
    };
    // A full reservation is no longer offered, yet its nodes cost what reserved ones do.
    price(ct).or_else(|| {
        (ct == CapacityType::Reserved)
            .then(|| price(CapacityType::OnDemand))
            .flatten()
            .map(|od| od * RESERVED_PRICE_FACTOR)
    })
}

/// The dearest available offering of `t` that `req` allows: what a replacement launched as
/// `t` may cost at worst.
pub fn worst_price(t: &InstanceType, req: &Requirements) -> Option<f64> {
    let buyable = Buyable::of(req);
    t.offerings
        .iter()
        .filter(|o| o.available && buyable.allows(o))
        .map(|o| o.price)
        .max_by(f64::total_cmp)
}
