//! NodeOverlays applied to instance types (pure): what the scheduler, disruption and
//! `jointer simulate` believe an instance type costs and provides, once the cluster's
//! overlays are taken into account. This is how a Savings Plan or reserved-instance discount
//! EC2's list prices know nothing of reaches every decision.
//!
//! Karpenter's rules, honoured here:
//! - An overlay matches an instance type of a NodePool when its requirements hold for the
//!   type's labels plus `karpenter.sh/nodepool` and the pool's template labels; of the type's
//!   offerings it changes those whose zone and capacity type it allows.
//! - Overlays are considered by weight, highest first (unset is 0); among equal weights the
//!   name later in the alphabet first. For each offering the first overlay that sets a price
//!   wins; for each extended resource the first overlay that sets it wins.
//! - Two overlays of the same weight that both price one offering (or both set one resource of
//!   one type) conflict: the one considered later is rejected whole (status
//!   `ValidationSucceeded=False`, reason `Conflict`) and changes nothing, anywhere.
//! - A price replaces the offering's, an adjustment adds dollars or a percentage of it; a
//!   result below zero is zero.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use kube::ResourceExt;

use crate::api::nodeoverlay::{REASON_CONFLICT, REASON_RUNTIME_VALIDATION};
use crate::api::{labels, NodeOverlay, NodePool};
use crate::core::scheduling::resources::{AMD_GPU, NEURON, NVIDIA_GPU};
use crate::core::scheduling::{InstanceType, Requirement, Requirements, Resources};

/// How an overlay changes an offering's price (dollars per hour).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// `price: "0.05"`: this price instead.
    Set(f64),
    /// `priceAdjustment: "-0.05"`: this many dollars more (or less).
    Add(f64),
    /// `priceAdjustment: "-30%"`: this percentage more (or less).
    Percent(f64),
}

impl PriceChange {
    pub fn price(text: &str) -> Result<PriceChange, String> {
        match text.parse::<f64>() {
            Ok(p) if p >= 0.0 && p.is_finite() => Ok(PriceChange::Set(p)),
            _ => Err(format!(
                "spec.price {text:?} is not a non-negative number of dollars per hour"
            )),
        }
    }

    pub fn adjustment(text: &str) -> Result<PriceChange, String> {
        let signed = text.starts_with('+') || text.starts_with('-');
        let (number, percent) = match text.strip_suffix('%') {
            Some(n) => (n, true),
            None => (text, false),
        };
        match number.parse::<f64>() {
            Ok(n) if signed && n.is_finite() && (!percent || n >= -100.0) => Ok(if percent {
                PriceChange::Percent(n)
            } else {
                PriceChange::Add(n)
            }),
            _ => Err(format!(
                "spec.priceAdjustment {text:?} is neither a signed amount ('-0.05') nor a signed percentage ('-30%', at most -100%)"
            )),
        }
    }

    /// The offering's price after the change, never below zero.
    pub fn apply(self, price: f64) -> f64 {
        let changed = match self {
            PriceChange::Set(p) => p,
            PriceChange::Add(d) => price + d,
            PriceChange::Percent(pct) => price * (1.0 + pct / 100.0),
        };
        changed.max(0.0)
    }
}

/// The extended resources the scheduling model tracks, the only ones an overlay's capacity
/// can give a node that pods will then be placed against.
const EXTENDED: [&str; 3] = [NVIDIA_GPU, AMD_GPU, NEURON];

/// Why an overlay changes nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// Its spec cannot be applied (the message names the field).
    Invalid(String),
    /// It and `with`, of the same weight, both change `what` of `instance_type` in `pool`.
    Conflict {
        with: String,
        pool: String,
        instance_type: String,
        what: String,
    },
}

impl Rejection {
    /// The `ValidationSucceeded` condition reason upstream reports it with.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Invalid(_) => REASON_RUNTIME_VALIDATION,
            Rejection::Conflict { .. } => REASON_CONFLICT,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Invalid(why) => f.write_str(why),
            Rejection::Conflict {
                with,
                pool,
                instance_type,
                what,
            } => write!(
                f,
                "conflicts with NodeOverlay {with} of the same weight: both set the {what} of {instance_type} in NodePool {pool}; give one a higher weight"
            ),
        }
    }
}

/// An overlay in the form it is applied in.
#[derive(Debug, Clone)]
struct Overlay {
    name: String,
    weight: i32,
    requirements: Requirements,
    price: Option<PriceChange>,
    /// (resource, amount) of the tracked extended resources it sets.
    capacity: Vec<(&'static str, i64)>,
}

impl Overlay {
    fn parse(o: &NodeOverlay) -> Result<Overlay, Rejection> {
        let spec = &o.spec;
        let mut requirements = Requirements::new();
        for r in &spec.requirements {
            requirements.add(&r.key, Requirement::new(r.operator, &r.values));
        }
        let price = match (&spec.price, &spec.price_adjustment) {
            (Some(_), Some(_)) => {
                return Err(Rejection::Invalid(
                    "spec: cannot set both price and priceAdjustment".into(),
                ))
            }
            (Some(p), None) => Some(PriceChange::price(p).map_err(Rejection::Invalid)?),
            (None, Some(a)) => Some(PriceChange::adjustment(a).map_err(Rejection::Invalid)?),
            (None, None) => None,
        };
        let mut capacity = Vec::new();
        for (name, quantity) in spec.capacity.iter().flatten() {
            let Some(known) = EXTENDED.iter().find(|k| **k == name) else {
                return Err(Rejection::Invalid(format!(
                    "spec.capacity {name:?}: jointer schedules only on the extended resources {}; pods requesting others cannot be placed, so an overlay adding them would do nothing",
                    EXTENDED.join(", ")
                )));
            };
            let amount = i64::try_from(quantity.units_ceil())
                .unwrap_or(i64::MAX)
                .max(0);
            capacity.push((*known, amount));
        }
        Ok(Overlay {
            name: o.name_any(),
            weight: spec.weight.unwrap_or(0),
            requirements,
            price,
            capacity,
        })
    }

    /// Whether its requirements hold for `t` in a pool whose nodes carry `pool_labels`: each
    /// key it names must be one of their labels with an allowed value, or be allowed absent.
    fn matches_type(&self, t: &InstanceType, pool_labels: &Requirements) -> bool {
        self.requirements.iter().all(|(key, req)| {
            match (t.requirements.get(key), pool_labels.get(key)) {
                (None, None) => req.allows_absence(),
                (a, b) => {
                    a.is_none_or(|a| req.intersects(a)) && b.is_none_or(|b| req.intersects(b))
                }
            }
        })
    }

    /// The indices of `t`'s offerings whose zone and capacity type it allows.
    fn offerings(&self, t: &InstanceType) -> Vec<usize> {
        t.offerings
            .iter()
            .enumerate()
            .filter(|(_, o)| o.matches(&self.requirements))
            .map(|(i, _)| i)
            .collect()
    }
}

/// Labels every node of `pool` carries besides its instance type's: its name and its
/// template's labels.
fn pool_labels(pool: &NodePool) -> Requirements {
    let mut out = Requirements::from_labels(&pool.spec.template.metadata.labels);
    out.add(labels::NODEPOOL, Requirement::any_of([pool.name_any()]));
    out
}

/// A NodePool and the instance types its class offers, before overlays.
pub struct PoolTypes<'a> {
    pub pool: &'a NodePool,
    pub types: &'a [Arc<InstanceType>],
}

/// The cluster's overlays, checked against every pool's instance types: which apply (in
/// precedence order) and why the others do not.
#[derive(Debug, Clone, Default)]
pub struct Overlays {
    applied: Vec<Overlay>,
    rejected: BTreeMap<String, Rejection>,
}

/// Who set something first: (weight, overlay name).
type Claim = (i32, String);

impl Overlays {
    /// Orders `overlays` by precedence and rejects the invalid and the conflicting ones.
    pub fn resolve(overlays: &[Arc<NodeOverlay>], pools: &[PoolTypes]) -> Overlays {
        let mut parsed: Vec<Result<Overlay, (String, Rejection)>> = overlays
            .iter()
            .filter(|o| o.metadata.deletion_timestamp.is_none())
            .map(|o| Overlay::parse(o).map_err(|r| (o.name_any(), r)))
            .collect();
        let key = |r: &Result<Overlay, (String, Rejection)>| match r {
            Ok(o) => (o.weight, o.name.clone()),
            Err((name, _)) => (i32::MIN, name.clone()),
        };
        // Highest weight first; equal weights by name, later in the alphabet first.
        parsed.sort_by_key(|r| std::cmp::Reverse(key(r)));
        let labels: Vec<Requirements> = pools.iter().map(|p| pool_labels(p.pool)).collect();
        // What each accepted overlay set, by (pool, type, offering) and (pool, type, resource).
        let mut prices: HashMap<(usize, String, usize), Claim> = HashMap::new();
        let mut resources: HashMap<(usize, String, &'static str), Claim> = HashMap::new();
        let mut out = Overlays::default();
        for entry in parsed {
            let overlay = match entry {
                Ok(o) => o,
                Err((name, why)) => {
                    out.rejected.insert(name, why);
                    continue;
                }
            };
            // Every change it would make, checked before any is recorded: an overlay that
            // conflicts anywhere applies nowhere.
            let mut changes = Vec::new();
            for (pi, p) in pools.iter().enumerate() {
                for t in p.types {
                    if !overlay.matches_type(t, &labels[pi]) {
                        continue;
                    }
                    let offerings = overlay.offerings(t);
                    if offerings.is_empty() {
                        continue;
                    }
                    changes.push((pi, t, offerings));
                }
            }
            let same_weight = |c: Option<&Claim>| {
                c.filter(|(w, _)| *w == overlay.weight)
                    .map(|(_, n)| n.clone())
            };
            let conflict = changes.iter().find_map(|(pi, t, offerings)| {
                let what = |w: String| (pools[*pi].pool.name_any(), t.name.clone(), w);
                if overlay.price.is_some() {
                    for &i in offerings {
                        if let Some(with) = same_weight(prices.get(&(*pi, t.name.clone(), i))) {
                            let o = &t.offerings[i];
                            return Some((
                                with,
                                what(format!("price of {} {}", o.zone, o.capacity_type)),
                            ));
                        }
                    }
                }
                overlay.capacity.iter().find_map(|(r, _)| {
                    same_weight(resources.get(&(*pi, t.name.clone(), *r)))
                        .map(|with| (with, what(format!("{r} capacity"))))
                })
            });
            if let Some((with, (pool, instance_type, what))) = conflict {
                out.rejected.insert(
                    overlay.name.clone(),
                    Rejection::Conflict {
                        with,
                        pool,
                        instance_type,
                        what,
                    },
                );
                continue;
            }
            let claim = (overlay.weight, overlay.name.clone());
            for (pi, t, offerings) in changes {
                if overlay.price.is_some() {
                    for i in offerings {
                        prices.insert((pi, t.name.clone(), i), claim.clone());
                    }
                }
                for (r, _) in &overlay.capacity {
                    resources.insert((pi, t.name.clone(), *r), claim.clone());
                }
            }
            out.applied.push(overlay);
        }
        out
    }

    /// Why the overlay named `name` changes nothing, or None when it applies.
    pub fn rejection(&self, name: &str) -> Option<&Rejection> {
        self.rejected.get(name)
    }

    /// The overlays that apply to `pool`'s instance types.
    pub fn for_pool(&self, pool: &NodePool) -> PoolOverlays {
        PoolOverlays {
            labels: pool_labels(pool),
            applied: self.applied.clone(),
        }
    }

    /// `types` of `pool` as the overlays change them.
    pub fn apply(&self, pool: &NodePool, types: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
        self.for_pool(pool).apply(types)
    }
}

/// The overlays of one NodePool, in precedence order.
#[derive(Debug, Clone, Default)]
pub struct PoolOverlays {
    labels: Requirements,
    applied: Vec<Overlay>,
}

impl PoolOverlays {
    /// `types` with their prices and extended resources as the overlays set them; a type no
    /// overlay changes is returned as it was (the same `Arc`).
    pub fn apply(&self, types: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
        types.iter().map(|t| self.apply_one(t)).collect()
    }

    fn apply_one(&self, t: &Arc<InstanceType>) -> Arc<InstanceType> {
        let mut priced = vec![false; t.offerings.len()];
        let mut offerings = t.offerings.clone();
        let mut capacity: Resources = t.capacity;
        let mut set: Vec<&str> = Vec::new();
        for overlay in &self.applied {
            if !overlay.matches_type(t, &self.labels) {
                continue;
            }
            let matching = overlay.offerings(t);
            if matching.is_empty() {
                continue;
            }
            if let Some(change) = overlay.price {
                for i in matching {
                    if !priced[i] {
                        offerings[i].price = change.apply(t.offerings[i].price);
                        priced[i] = true;
                    }
                }
            }
            for (r, amount) in &overlay.capacity {
                if !set.contains(r) {
                    capacity.set(r, *amount);
                    set.push(r);
                }
            }
        }
        let price_overlaid = priced.iter().any(|p| *p);
        if !price_overlaid && set.is_empty() {
            return t.clone();
        }
        let mut changed = InstanceType::clone(t);
        changed.offerings = offerings;
        changed.capacity = capacity;
        changed.allocatable = capacity - t.overhead;
        changed.price_overlaid = t.price_overlaid || price_overlaid;
        Arc::new(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::nodeoverlay::NodeOverlaySpec;
    use crate::api::{Operator, OverlayRequirement, Quantity};
    use crate::core::scheduling::{CapacityType, Offering};

    fn offering(zone: &str, capacity_type: CapacityType, price: f64) -> Offering {
        Offering {
            zone: zone.into(),
            capacity_type,
            price,
            available: true,
        }
    }

    fn itype(name: &str, family: &str, offerings: Vec<Offering>) -> Arc<InstanceType> {
        let mut req = Requirements::new();
        req.add(labels::INSTANCE_FAMILY, Requirement::any_of([family]));
        Arc::new(InstanceType::new(
            name,
            req,
            Resources::cpu_memory(4000, 16 << 30),
            Resources::cpu_memory(100, 1 << 30),
            offerings,
        ))
    }

    fn types() -> Vec<Arc<InstanceType>> {
        vec![
            itype(
                "m5.xlarge",
                "m5",
                vec![
                    offering("z1", CapacityType::OnDemand, 0.20),
                    offering("z1", CapacityType::Spot, 0.08),
                    offering("z2", CapacityType::OnDemand, 0.20),
                ],
            ),
            itype(
                "c5.xlarge",
                "c5",
                vec![offering("z1", CapacityType::OnDemand, 0.17)],
            ),
        ]
    }

    fn pool(name: &str, labels: &[(&str, &str)]) -> NodePool {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"},
                "requirements": [],
            }}},
        }))
        .expect("pool")
    }

    fn overlay(name: &str, weight: Option<i32>, reqs: Vec<OverlayRequirement>) -> NodeOverlay {
        NodeOverlay::new(
            name,
            NodeOverlaySpec {
                requirements: reqs,
                price_adjustment: None,
                price: None,
                capacity: None,
                weight,
            },
        )
    }

    fn family(f: &str) -> OverlayRequirement {
        OverlayRequirement::new(labels::INSTANCE_FAMILY, Operator::In, &[f])
    }

    fn priced(mut o: NodeOverlay, price: &str) -> Arc<NodeOverlay> {
        o.spec.price = Some(price.into());
        Arc::new(o)
    }

    fn adjusted(mut o: NodeOverlay, adjustment: &str) -> Arc<NodeOverlay> {
        o.spec.price_adjustment = Some(adjustment.into());
        Arc::new(o)
    }

    /// Resolves `overlays` for one pool and returns (type, zone, capacity type) → price.
    fn prices(overlays: &[Arc<NodeOverlay>], pool: &NodePool) -> (BTreeMap<String, f64>, Overlays) {
        let t = types();
        let resolved = Overlays::resolve(overlays, &[PoolTypes { pool, types: &t }]);
        let out = resolved
            .apply(pool, &t)
            .iter()
            .flat_map(|t| {
                t.offerings
                    .iter()
                    .map(|o| {
                        (
                            format!("{} {} {}", t.name, o.zone, o.capacity_type),
                            o.price,
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        (out, resolved)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn price_changes_parse_and_apply_with_a_floor_of_zero() {
        assert_eq!(PriceChange::price("0.05"), Ok(PriceChange::Set(0.05)));
        assert!(close(
            PriceChange::adjustment("-30%").unwrap().apply(0.2),
            0.14
        ));
        assert!(close(
            PriceChange::adjustment("+10%").unwrap().apply(0.2),
            0.22
        ));
        assert!(close(
            PriceChange::adjustment("-0.05").unwrap().apply(0.2),
            0.15
        ));
        assert!(close(
            PriceChange::adjustment("+1").unwrap().apply(0.2),
            1.2
        ));
        assert_eq!(PriceChange::adjustment("-1").unwrap().apply(0.2), 0.0);
        assert_eq!(PriceChange::adjustment("-100%").unwrap().apply(0.2), 0.0);
        for bad in ["10%", "0.5", "-101%", "x", "+"] {
            assert!(PriceChange::adjustment(bad).is_err(), "{bad}");
        }
        assert!(PriceChange::price("-1").is_err());
    }

    #[test]
    fn an_overlay_prices_only_the_types_and_offerings_it_matches() {
        let p = pool("default", &[]);
        let mut spot_only = overlay("spot-m5", None, vec![family("m5")]);
        spot_only.spec.requirements.push(OverlayRequirement::new(
            labels::CAPACITY_TYPE,
            Operator::In,
            &["spot"],
        ));
        let (prices, resolved) = prices(&[priced(spot_only, "0.01")], &p);
        assert_eq!(resolved.rejection("spot-m5"), None);
        assert!(close(prices["m5.xlarge z1 spot"], 0.01));
        assert!(close(prices["m5.xlarge z1 on-demand"], 0.20));
        assert!(close(prices["c5.xlarge z1 on-demand"], 0.17));
    }

    #[test]
    fn an_adjusted_type_is_marked_and_an_untouched_one_is_shared() {
        let p = pool("default", &[]);
        let t = types();
        let o = [adjusted(overlay("sp", None, vec![family("m5")]), "-50%")];
        let resolved = Overlays::resolve(
            &o,
            &[PoolTypes {
                pool: &p,
                types: &t,
            }],
        );
        let out = resolved.apply(&p, &t);
        assert!(out[0].price_overlaid);
        assert!(close(out[0].offerings[0].price, 0.10));
        assert!(
            Arc::ptr_eq(&out[1], &t[1]),
            "c5 is not matched, so not copied"
        );
    }

    #[test]
    fn the_highest_weight_sets_the_price() {
        let p = pool("default", &[]);
        let heavy = priced(overlay("heavy", Some(20), vec![family("m5")]), "0.05");
        let light = priced(overlay("light", Some(10), vec![family("m5")]), "0.01");
        let (prices, resolved) = prices(&[light, heavy], &p);
        assert!(close(prices["m5.xlarge z1 on-demand"], 0.05));
        assert_eq!(
            resolved.rejection("light"),
            None,
            "lower weight is no conflict"
        );
    }

    #[test]
    fn equal_weights_pricing_one_offering_conflict_and_the_later_name_wins() {
        let p = pool("default", &[]);
        let a = priced(overlay("a-discount", Some(5), vec![family("m5")]), "0.01");
        let b = adjusted(overlay("b-discount", Some(5), vec![family("m5")]), "-10%");
        let (prices, resolved) = prices(&[a, b], &p);
        // Upstream considers equal weights in reverse alphabetical order: b first.
        assert_eq!(resolved.rejection("b-discount"), None);
        let why = resolved.rejection("a-discount").expect("a conflicts");
        assert_eq!(why.reason(), "Conflict");
        assert!(why.to_string().contains("b-discount"), "{why}");
        assert!(close(prices["m5.xlarge z1 on-demand"], 0.18));
    }

    #[test]
    fn equal_weights_on_different_types_do_not_conflict() {
        let p = pool("default", &[]);
        let a = priced(overlay("a", Some(5), vec![family("m5")]), "0.01");
        let c = priced(overlay("c", Some(5), vec![family("c5")]), "0.02");
        let (prices, resolved) = prices(&[a, c], &p);
        assert_eq!(resolved.rejection("a"), None);
        assert_eq!(resolved.rejection("c"), None);
        assert!(close(prices["m5.xlarge z2 on-demand"], 0.01));
        assert!(close(prices["c5.xlarge z1 on-demand"], 0.02));
    }

    #[test]
    fn a_conflicting_overlay_changes_nothing_anywhere() {
        let p = pool("default", &[]);
        // "a" and "b" collide on m5; "a" would also price c5, but is rejected whole.
        let a = overlay("a", None, vec![]);
        let b = priced(overlay("b", None, vec![family("m5")]), "0.03");
        let (prices, resolved) = prices(&[priced(a, "0.01"), b], &p);
        assert!(matches!(
            resolved.rejection("a"),
            Some(Rejection::Conflict { .. })
        ));
        assert!(close(prices["c5.xlarge z1 on-demand"], 0.17));
        assert!(close(prices["m5.xlarge z1 on-demand"], 0.03));
    }

    #[test]
    fn an_overlay_can_select_a_pool_by_name_or_template_label() {
        let batch = pool("batch", &[("team", "data")]);
        let web = pool("web", &[]);
        let by_name = priced(
            overlay(
                "by-name",
                None,
                vec![OverlayRequirement::new(
                    labels::NODEPOOL,
                    Operator::In,
                    &["batch"],
                )],
            ),
            "0.01",
        );
        let by_label = adjusted(
            overlay(
                "by-label",
                Some(3),
                vec![OverlayRequirement::new("team", Operator::In, &["data"])],
            ),
            "-50%",
        );
        let overlays = [by_name, by_label];
        let (batch_prices, _) = prices(&overlays, &batch);
        let (web_prices, _) = prices(&overlays, &web);
        assert!(
            close(batch_prices["c5.xlarge z1 on-demand"], 0.085),
            "weight 3 beats unset"
        );
        assert!(close(web_prices["c5.xlarge z1 on-demand"], 0.17));
        // A label the type and pool lack: In fails, NotIn holds.
        let absent = adjusted(
            overlay(
                "absent",
                None,
                vec![OverlayRequirement::new("team", Operator::NotIn, &["data"])],
            ),
            "+100%",
        );
        let (web_prices, _) = prices(&[absent], &web);
        assert!(close(web_prices["c5.xlarge z1 on-demand"], 0.34));
    }

    #[test]
    fn capacity_sets_tracked_extended_resources_by_weight() {
        let p = pool("default", &[]);
        let t = types();
        let mut strong = overlay("strong", Some(9), vec![family("m5")]);
        strong.spec.capacity = Some(BTreeMap::from([(
            NVIDIA_GPU.to_string(),
            "2".parse::<Quantity>().unwrap(),
        )]));
        let mut weak = overlay("weak", Some(1), vec![]);
        weak.spec.capacity = Some(BTreeMap::from([
            (NVIDIA_GPU.to_string(), "1".parse::<Quantity>().unwrap()),
            (NEURON.to_string(), "4".parse::<Quantity>().unwrap()),
        ]));
        let o = [Arc::new(weak), Arc::new(strong)];
        let resolved = Overlays::resolve(
            &o,
            &[PoolTypes {
                pool: &p,
                types: &t,
            }],
        );
        let out = resolved.apply(&p, &t);
        assert_eq!(out[0].capacity.nvidia_gpu, 2, "the heavier overlay wins");
        assert_eq!(out[0].allocatable.nvidia_gpu, 2);
        assert_eq!(out[0].capacity.neuron, 4, "resources merge across overlays");
        assert_eq!(out[1].capacity.nvidia_gpu, 1);
        assert_eq!(out[0].capacity.cpu, 4000, "cpu stays the type's own");
        assert!(!out[0].price_overlaid);
    }

    #[test]
    fn equal_weights_setting_one_resource_conflict() {
        let p = pool("default", &[]);
        let t = types();
        let gpu = |name: &str| {
            let mut o = overlay(name, None, vec![family("c5")]);
            o.spec.capacity = Some(BTreeMap::from([(
                AMD_GPU.to_string(),
                "1".parse::<Quantity>().unwrap(),
            )]));
            Arc::new(o)
        };
        let resolved = Overlays::resolve(
            &[gpu("x"), gpu("y")],
            &[PoolTypes {
                pool: &p,
                types: &t,
            }],
        );
        assert_eq!(resolved.rejection("y"), None);
        assert!(
            matches!(resolved.rejection("x"), Some(Rejection::Conflict { what, .. }) if what.contains(AMD_GPU))
        );
    }

    #[test]
    fn untracked_extended_resources_are_rejected_loudly() {
        let p = pool("default", &[]);
        let mut o = overlay("hugepages", None, vec![]);
        o.spec.capacity = Some(BTreeMap::from([(
            "hugepages-2Mi".to_string(),
            "1Gi".parse::<Quantity>().unwrap(),
        )]));
        let (_, resolved) = prices(&[Arc::new(o)], &p);
        let why = resolved.rejection("hugepages").expect("rejected");
        assert_eq!(why.reason(), "RuntimeValidation");
        assert!(why.to_string().contains("hugepages-2Mi"), "{why}");
    }
}
