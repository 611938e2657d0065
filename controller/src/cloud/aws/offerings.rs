//! The region's instance types, zones and prices (refetched in the background every five
//! minutes) and the room left in the capacity reservations classes select: what a class's
//! instance types are built from.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::call::metered;
use super::instance_types::{self, RegionOfferings};
use super::reservations::Reservations;
use super::{pricing, reservations, AwsCloud};
use crate::api::conditions::class_not_ready;
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::cloud::class_types::mark_unavailable;
use crate::cloud::{CloudError, TypesOfClass};
use crate::core::scheduling::overhead::{kubelet_settings, KubeletSettings};
use crate::core::scheduling::InstanceType;
use crate::metrics::Metrics;

/// How long fetched instance types, zones and prices are used before they are fetched again.
pub(super) const OFFERINGS_TTL: Duration = Duration::from_secs(300);
/// How soon a failed refetch is tried again (the previous offerings are used meanwhile).
pub(super) const OFFERINGS_RETRY: Duration = Duration::from_secs(30);

/// What a class's instance types are built from: the region's offerings as last fetched, and
/// the class's zones, architectures, kubelet settings and reservations with room.
pub(super) struct TypesInputs {
    offerings: Arc<RegionOfferings>,
    zones: BTreeSet<String>,
    architectures: BTreeSet<String>,
    kubelet: KubeletSettings,
    reservations_with_room: Vec<String>,
}

impl TypesInputs {
    fn of(offerings: &Arc<RegionOfferings>, class: &EC2NodeClass, room: &Reservations) -> Self {
        let status = class.status.as_ref();
        TypesInputs {
            offerings: offerings.clone(),
            zones: status
                .iter()
                .flat_map(|s| &s.subnets)
                .map(|s| s.zone.clone())
                .collect(),
            architectures: instance_types::class_architectures(class),
            kubelet: kubelet_settings(class),
            reservations_with_room: status
                .iter()
                .flat_map(|s| &s.capacity_reservations)
                .filter(|r| room.room(&r.id) > 0)
                .map(|r| r.id.clone())
                .collect(),
        }
    }
}

impl PartialEq for TypesInputs {
    fn eq(&self, other: &Self) -> bool {
        // The same fetch, not merely equal contents: a refetch every 5 minutes rebuilds.
        Arc::ptr_eq(&self.offerings, &other.offerings)
            && self.zones == other.zones
            && self.architectures == other.architectures
            && self.kubelet == other.kubelet
            && self.reservations_with_room == other.reservations_with_room
    }
}

/// What the region's offerings are fetched with, owned so a background refresh can outlive
/// the pass that found them due.
struct OfferingsSource {
    ec2: aws_sdk_ec2::Client,
    pricing: aws_sdk_pricing::Client,
    region: String,
    metrics: Arc<Metrics>,
}

impl OfferingsSource {
    async fn fetch(
        self,
        previous: Option<Arc<RegionOfferings>>,
    ) -> Result<RegionOfferings, CloudError> {
        let shapes = metered(
            &self.metrics,
            "ec2",
            "DescribeInstanceTypes",
            instance_types::fetch_shapes(&self.ec2),
        )
        .await?;
        let zones = metered(
            &self.metrics,
            "ec2",
            "DescribeInstanceTypeOfferings",
            instance_types::fetch_zones(&self.ec2),
        )
        .await?;
        let on_demand = pricing::on_demand(&self.pricing, &self.region, |_, _| {}).await;
        self.metrics.call("pricing", "GetProducts", &on_demand);
        let spot = pricing::spot(&self.ec2, |_, _| {}).await;
        self.metrics.call("ec2", "DescribeSpotPriceHistory", &spot);
        let on_demand = on_demand.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "on-demand prices unavailable; using the previous ones or the embedded estimates");
            previous.as_ref().map(|p| p.on_demand.clone()).unwrap_or_default()
        });
        let spot = spot.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "spot prices unavailable; using the previous ones or the embedded estimates");
            previous.as_ref().map(|p| p.spot.clone()).unwrap_or_default()
        });
        tracing::info!(
            instance_types = shapes.len(),
            priced = on_demand.len(),
            spot_priced = spot.len(),
            "instance types and prices refreshed"
        );
        Ok(RegionOfferings {
            region: self.region,
            shapes,
            zones,
            on_demand,
            spot,
        })
    }
}

impl AwsCloud {
    /// The region's instance types, zones and prices. Older than 5 minutes, they are still
    /// served while a fresh copy is fetched in the background (only the first fetch is
    /// awaited). Prices AWS will not give (no pricing:GetProducts, a partition without the
    /// Pricing API) fall back to the previous ones or the embedded estimates with a warning;
    /// shapes and zones are required.
    pub(super) async fn offerings(&self) -> Result<Arc<RegionOfferings>, CloudError> {
        // The clients are cloned only when a fetch starts, not on every call.
        let fetch = |previous| {
            let source = OfferingsSource {
                ec2: self.ec2.clone(),
                pricing: self.pricing.clone(),
                region: self.region.clone(),
                metrics: self.metrics.clone(),
            };
            source.fetch(previous)
        };
        self.offerings.get(fetch).await
    }

    /// Fetches the region's offerings ahead of any provisioning pass (a failure is only
    /// logged: the first pass fetches them again).
    pub async fn prefetch_offerings(&self) {
        if let Err(e) = self.offerings().await {
            tracing::warn!(error = %e, "instance types and prices could not be fetched ahead of provisioning");
        }
    }

    /// The instance types of every Ready class, by class name (one offerings fetch for all).
    pub(super) async fn types_of_ready_classes(
        &self,
        classes: &[Arc<EC2NodeClass>],
    ) -> Result<TypesOfClass, CloudError> {
        let offerings = self.offerings().await?;
        let ready: Vec<&Arc<EC2NodeClass>> = classes
            .iter()
            .filter(|c| class_not_ready(c).is_none())
            .collect();
        self.refresh_reservations(ready.iter().map(|c| c.as_ref()))
            .await;
        let now = Instant::now();
        let types: HashMap<String, Vec<Arc<InstanceType>>> = ready
            .into_iter()
            .map(|c| (c.name_any(), self.types_for(&offerings, c, now)))
            .collect();
        Ok(types)
    }

    /// The instance types of `class`: built from `offerings` once per change of what they
    /// depend on, then marked with the offerings EC2 recently had no capacity for.
    pub(super) fn types_for(
        &self,
        offerings: &Arc<RegionOfferings>,
        class: &EC2NodeClass,
        now: Instant,
    ) -> Vec<Arc<InstanceType>> {
        let inputs = TypesInputs::of(offerings, class, &self.reservations);
        let types = self
            .class_types
            .get_or_build(&class.name_any(), inputs, || {
                offerings.for_class(class, &self.estimates, &self.reservations)
            });
        mark_unavailable(&types, &self.unavailable, now)
    }

    /// Reads again how much room the reservations the classes select have, where that is
    /// older than a minute. A failed read leaves the previous figures (and is logged): the
    /// launch then finds out.
    pub(super) async fn refresh_reservations<'a>(
        &self,
        classes: impl IntoIterator<Item = &'a EC2NodeClass>,
    ) {
        let now = Instant::now();
        let ids: Vec<&str> = classes
            .into_iter()
            .filter_map(|c| c.status.as_ref())
            .flat_map(|s| &s.capacity_reservations)
            .map(|r| r.id.as_str())
            .collect();
        let stale = self.reservations.stale(ids, now);
        if stale.is_empty() {
            return;
        }
        let out = metered(
            &self.metrics,
            "ec2",
            "DescribeCapacityReservations",
            self.ec2
                .describe_capacity_reservations()
                .set_capacity_reservation_ids(Some(stale.clone()))
                .send(),
        )
        .await;
        match out {
            Ok(out) => {
                for id in &stale {
                    let room = out
                        .capacity_reservations()
                        .iter()
                        .find(|r| r.capacity_reservation_id() == Some(id.as_str()))
                        .filter(|r| {
                            r.state()
                                .is_some_and(|s| reservations::USABLE_STATES.contains(&s.as_str()))
                        })
                        .and_then(|r| r.available_instance_count())
                        .unwrap_or(0);
                    self.reservations.set(id, i64::from(room), now);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "using the last known room of the capacity reservations")
            }
        }
    }
}
