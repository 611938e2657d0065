//! The instance types a region really offers: shapes from `DescribeInstanceTypes`, zones from
//! `DescribeInstanceTypeOfferings`, prices from the Pricing API and spot price history (the
//! embedded catalog's estimates stand in for prices AWS did not give). Turned into the
//! solver's [`InstanceType`]s per EC2NodeClass: only its subnets' zones and only architectures
//! it has an AMI for (offerings EC2 recently had no capacity for are marked by the caller,
//! `cloud::class_types`, on the kept list).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use aws_sdk_ec2::types::{InstanceTypeInfo, LocationType, UsageClassType};

use super::reservations::Reservations;
use crate::api::labels;
use crate::api::EC2NodeClass;
use crate::core::catalog::{Catalog, Shape};
use crate::core::disruption::price::RESERVED_PRICE_FACTOR;
use crate::core::scheduling::overhead::kubelet_settings;
use crate::core::scheduling::{CapacityType, InstanceType, Offering};

/// `m5.large` → family `m5`, category `m`, generation 5, size `large`.
pub fn parse_name(name: &str) -> Option<(String, String, Option<i64>, String)> {
    let (family, size) = name.split_once('.')?;
    let category: String = family
        .chars()
        .take_while(|c| c.is_ascii_lowercase())
        .collect();
    let generation = family[category.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok();
    Some((family.into(), category, generation, size.into()))
}

/// The shape of one `DescribeInstanceTypes` entry (None for types nodes cannot use: 32-bit
/// or Mac-only). `od_price` is filled in later from the price list.
pub fn shape_of(info: &InstanceTypeInfo) -> Option<Shape> {
    let name = info.instance_type()?.as_str().to_string();
    let archs = info.processor_info()?.supported_architectures();
    let arch = archs.iter().find_map(|a| match a.as_str() {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    })?;
    let (family, category, generation, size) = parse_name(&name)?;
    let network = info.network_info();
    let gpus = info.gpu_info().map(|g| g.gpus()).unwrap_or_default();
    let gpu = gpus.first();
    Some(Shape {
        vcpu: i64::from(info.v_cpu_info()?.default_v_cpus()?),
        memory_mib: info.memory_info()?.size_in_mib()?,
        arch: arch.into(),
        family,
        category,
        generation,
        size,
        cpu_manufacturer: None,
        hypervisor: info.hypervisor().map(|h| h.as_str().to_string()),
        bare_metal: info.bare_metal().unwrap_or(false),
        gpu_count: gpus.iter().filter_map(|g| g.count()).map(i64::from).sum(),
        gpu_name: gpu.and_then(|g| g.name()).map(str::to_string),
        gpu_manufacturer: gpu.and_then(|g| g.manufacturer()).map(str::to_string),
        gpu_memory_mib: gpu
            .and_then(|g| g.memory_info())
            .and_then(|m| m.size_in_mib())
            .map(i64::from)
            .unwrap_or(0),
        accelerator_count: 0,
        accelerator_name: None,
        enis: network
            .and_then(|n| n.maximum_network_interfaces())
            .map(i64::from)
            .unwrap_or(3),
        ipv4_per_eni: network
            .and_then(|n| n.ipv4_addresses_per_interface())
            .map(i64::from)
            .unwrap_or(10),
        network_bandwidth_mbps: 0,
        local_nvme_gb: info
            .instance_storage_info()
            .and_then(|s| s.total_size_in_gb())
            .unwrap_or(0),
        spot: info
            .supported_usage_classes()
            .contains(&UsageClassType::Spot),
        od_price: 0.0,
        name,
    })
}

/// What the region offers, as last fetched.
#[derive(Debug, Clone, Default)]
pub struct RegionOfferings {
    pub region: String,
    pub shapes: Vec<Shape>,
    /// Instance type → zones it is offered in.
    pub zones: BTreeMap<String, BTreeSet<String>>,
    pub on_demand: BTreeMap<String, f64>,
    pub spot: BTreeMap<String, BTreeMap<String, f64>>,
}

/// The architectures a class has AMIs for (from its resolved `status.amis`).
pub fn class_architectures(class: &EC2NodeClass) -> BTreeSet<String> {
    class
        .status
        .iter()
        .flat_map(|s| &s.amis)
        .flat_map(|a| &a.requirements)
        .filter(|r| r.key == labels::ARCH && r.operator == "In")
        .flat_map(|r| r.values.clone().unwrap_or_default())
        .collect()
}

impl RegionOfferings {
    /// The instance types nodes of `class` can be launched as, every offering available.
    pub fn for_class(
        &self,
        class: &EC2NodeClass,
        estimates: &Catalog,
        reservations: &Reservations,
    ) -> Vec<Arc<InstanceType>> {
        let selected = class
            .status
            .as_ref()
            .map(|s| s.capacity_reservations.as_slice())
            .unwrap_or_default();
        let class_zones: BTreeSet<&str> = class
            .status
            .iter()
            .flat_map(|s| &s.subnets)
            .map(|s| s.zone.as_str())
            .collect();
        let archs = class_architectures(class);
        let kubelet = kubelet_settings(class);
        let mut out = Vec::new();
        for shape in &self.shapes {
            if !archs.contains(&shape.arch) {
                continue;
            }
            let Some(od_price) = self
                .on_demand
                .get(&shape.name)
                .copied()
                .or_else(|| estimates.on_demand_estimate(&shape.name))
            else {
                continue;
            };
            let zones = self.zones.get(&shape.name).into_iter().flatten();
            let mut offerings = Vec::new();
            for zone in zones.filter(|z| class_zones.contains(z.as_str())) {
                let offer = |capacity_type, price| Offering {
                    zone: zone.clone(),
                    capacity_type,
                    price,
                    available: true,
                };
                offerings.push(offer(CapacityType::OnDemand, od_price));
                // A reservation is paid for whether used or not: launching into it costs next
                // to nothing, so it is always the cheapest choice while it has room.
                if !reservations.usable(selected, &shape.name, zone).is_empty() {
                    offerings.push(offer(
                        CapacityType::Reserved,
                        od_price * RESERVED_PRICE_FACTOR,
                    ));
                }
                if shape.spot {
                    let price = self
                        .spot
                        .get(&shape.name)
                        .and_then(|z| z.get(zone))
                        .copied()
                        .unwrap_or_else(|| {
                            od_price * (1.0 - estimates.spot_discount(&self.region, zone))
                        });
                    offerings.push(offer(CapacityType::Spot, price));
                }
            }
            if offerings.is_empty() {
                continue;
            }
            let shape = Shape {
                od_price,
                ..shape.clone()
            };
            out.push(Arc::new(crate::core::catalog::instance_type(
                &shape,
                &self.region,
                &kubelet,
                offerings,
            )));
        }
        out
    }
}

/// Every instance type of the region (paginated `DescribeInstanceTypes`).
pub async fn fetch_shapes(
    ec2: &aws_sdk_ec2::Client,
) -> Result<
    Vec<Shape>,
    aws_sdk_ec2::error::SdkError<
        aws_sdk_ec2::operation::describe_instance_types::DescribeInstanceTypesError,
    >,
> {
    let mut pages = ec2.describe_instance_types().into_paginator().send();
    let mut shapes = Vec::new();
    while let Some(page) = pages.next().await {
        shapes.extend(page?.instance_types().iter().filter_map(shape_of));
    }
    Ok(shapes)
}

/// Instance type → the zones it is offered in.
pub async fn fetch_zones(
    ec2: &aws_sdk_ec2::Client,
) -> Result<BTreeMap<String, BTreeSet<String>>, aws_sdk_ec2::error::SdkError<aws_sdk_ec2::operation::describe_instance_type_offerings::DescribeInstanceTypeOfferingsError>>
{
    let mut pages = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .into_paginator()
        .send();
    let mut zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    while let Some(page) = pages.next().await {
        for o in page?.instance_type_offerings() {
            if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                zones
                    .entry(t.as_str().to_string())
                    .or_default()
                    .insert(zone.to_string());
            }
        }
    }
    Ok(zones)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_into_family_category_generation_and_size() {
        assert_eq!(
            parse_name("m5.large"),
            Some(("m5".into(), "m".into(), Some(5), "large".into()))
        );
        assert_eq!(
            parse_name("c6gn.16xlarge"),
            Some(("c6gn".into(), "c".into(), Some(6), "16xlarge".into()))
        );
        assert_eq!(
            parse_name("u-6tb1.metal").map(|p| p.1),
            Some("u".to_string())
        );
        assert_eq!(parse_name("nonsense"), None);
    }
}
