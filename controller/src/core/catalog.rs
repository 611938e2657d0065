//! Instance type catalogs: the embedded AWS catalog (shapes and per-zone availability from
//! moto's bundled AWS data, prices *estimated*; see `controller/catalog/README.md`) and
//! user-supplied JSON catalogs. Both become [`InstanceType`]s with AWS allocatable.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::api::labels;
use crate::core::scheduling::overhead::{capacity_and_overhead, Hardware, KubeletSettings};
use crate::core::scheduling::{
    CapacityType, InstanceType, Offering, Requirement, Requirements, Resources,
};

const EMBEDDED: &str = include_str!("../../catalog/aws.json");

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("the catalog is not valid JSON of the expected shape: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("region {region:?} is not in the catalog (it has: {known})")]
    UnknownRegion { region: String, known: String },
    #[error("the catalog has no instance types")]
    Empty,
    #[error("instance type {name:?}: {problem}")]
    Invalid { name: String, problem: String },
}

/// One instance type's hardware, as the embedded catalog records it (defaulted fields are
/// omitted in the file; the defaults here are the file's `defaults`).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Shape {
    pub name: String,
    pub vcpu: i64,
    pub memory_mib: i64,
    pub arch: String,
    pub family: String,
    pub category: String,
    #[serde(default)]
    pub generation: Option<i64>,
    pub size: String,
    #[serde(default)]
    pub cpu_manufacturer: Option<String>,
    #[serde(default)]
    pub hypervisor: Option<String>,
    #[serde(default)]
    pub bare_metal: bool,
    #[serde(default)]
    pub gpu_count: i64,
    #[serde(default)]
    pub gpu_name: Option<String>,
    #[serde(default)]
    pub gpu_manufacturer: Option<String>,
    #[serde(default)]
    pub gpu_memory_mib: i64,
    #[serde(default)]
    pub accelerator_count: i64,
    #[serde(default)]
    pub accelerator_name: Option<String>,
    pub enis: i64,
    pub ipv4_per_eni: i64,
    #[serde(default)]
    pub network_bandwidth_mbps: i64,
    #[serde(default)]
    pub local_nvme_gb: i64,
    #[serde(default = "yes")]
    pub spot: bool,
    /// Estimated on-demand USD/hour.
    pub od_price: f64,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
struct Region {
    zones: Vec<String>,
    spot_discount: BTreeMap<String, f64>,
    offerings: BTreeMap<String, Vec<usize>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Catalog {
    pub source: String,
    pub price_model: String,
    #[serde(default)]
    pub spot_model: String,
    types: Vec<Shape>,
    regions: BTreeMap<String, Region>,
}

/// Prices that override the estimate: on-demand per type, spot per (type, zone).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PriceOverrides {
    pub on_demand: BTreeMap<String, f64>,
    pub spot: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Catalog {
    /// The catalog compiled into the binary.
    pub fn embedded() -> Result<Catalog, CatalogError> {
        Ok(serde_json::from_str(EMBEDDED)?)
    }

    pub fn regions(&self) -> impl Iterator<Item = &str> {
        self.regions.keys().map(String::as_str)
    }

    pub fn shapes(&self) -> &[Shape] {
        &self.types
    }

    /// The instance types offered in `region`, with allocatable under `kubelet`. Spot prices
    /// are the estimate × (1 − the zone's discount) unless `prices` has real ones.
    pub fn instance_types(
        &self,
        region: &str,
        kubelet: &KubeletSettings,
        prices: Option<&PriceOverrides>,
    ) -> Result<Vec<Arc<InstanceType>>, CatalogError> {
        let r = self
            .regions
            .get(region)
            .ok_or_else(|| CatalogError::UnknownRegion {
                region: region.to_string(),
                known: self.regions.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        let mut out = Vec::new();
        for shape in &self.types {
            let Some(zone_indexes) = r.offerings.get(&shape.name) else {
                continue;
            };
            let od_price = prices
                .and_then(|p| p.on_demand.get(&shape.name))
                .copied()
                .unwrap_or(shape.od_price);
            let mut offerings = Vec::new();
            for &z in zone_indexes {
                let Some(zone) = r.zones.get(z) else { continue };
                offerings.push(Offering {
                    zone: zone.clone(),
                    capacity_type: CapacityType::OnDemand,
                    price: od_price,
                    available: true,
                });
                if shape.spot {
                    let real = prices
                        .and_then(|p| p.spot.get(&shape.name))
                        .and_then(|z| z.get(zone))
                        .copied();
                    let estimate =
                        od_price * (1.0 - r.spot_discount.get(zone).copied().unwrap_or(0.6));
                    offerings.push(Offering {
                        zone: zone.clone(),
                        capacity_type: CapacityType::Spot,
                        price: real.unwrap_or(estimate),
                        available: true,
                    });
                }
            }
            out.push(Arc::new(instance_type(shape, region, kubelet, offerings)));
        }
        Ok(out)
    }

    /// The estimated spot discount in `zone` of `region` (0.6 when the catalog has none).
    pub fn spot_discount(&self, region: &str, zone: &str) -> f64 {
        self.regions
            .get(region)
            .and_then(|r| r.spot_discount.get(zone))
            .copied()
            .unwrap_or(0.6)
    }

    /// The estimated on-demand USD/hour of a type, if the catalog knows it.
    pub fn on_demand_estimate(&self, name: &str) -> Option<f64> {
        self.types
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.od_price)
    }
}

/// An instance type of `shape` in `region`: its labels, capacity and allocatable under
/// `kubelet`, and the given offerings. Shared by the embedded catalog and the live AWS one, so
/// simulation and provisioning compute allocatable the same way.
pub fn instance_type(
    shape: &Shape,
    region: &str,
    kubelet: &KubeletSettings,
    offerings: Vec<Offering>,
) -> InstanceType {
    let mut requirements = shape_labels(shape);
    requirements.add(labels::REGION, Requirement::any_of([region]));
    add_family_labels(&mut requirements, kubelet);
    let hw = Hardware {
        vcpu: shape.vcpu,
        memory_mib: shape.memory_mib,
        enis: shape.enis,
        ipv4_per_eni: shape.ipv4_per_eni,
        local_nvme_gb: shape.local_nvme_gb,
    };
    let (mut capacity, overhead) = capacity_and_overhead(&hw, kubelet);
    add_devices(shape, &mut capacity);
    InstanceType::new(&shape.name, requirements, capacity, overhead, offerings)
}

/// The OS (and Windows build) its nodes run: the class's AMI family's.
fn add_family_labels(requirements: &mut Requirements, kubelet: &KubeletSettings) {
    for (key, value) in kubelet.family.node_labels() {
        requirements.add(key, Requirement::any_of([value]));
    }
}

fn add_devices(shape: &Shape, capacity: &mut Resources) {
    match shape
        .gpu_manufacturer
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("nvidia") => capacity.nvidia_gpu = shape.gpu_count,
        Some("amd") => capacity.amd_gpu = shape.gpu_count,
        _ => {}
    }
    let accelerator = shape
        .accelerator_name
        .as_deref()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if accelerator.contains("inferentia") || accelerator.contains("trainium") {
        capacity.neuron = shape.accelerator_count;
    }
}

/// The well-known labels a node of this shape carries.
pub fn shape_labels(shape: &Shape) -> Requirements {
    let mut r = Requirements::new();
    let mut set = |key: &str, value: String| r.add(key, Requirement::any_of([value]));
    set(labels::ARCH, shape.arch.clone());
    set(labels::INSTANCE_CATEGORY, shape.category.clone());
    set(labels::INSTANCE_FAMILY, shape.family.clone());
    if let Some(g) = shape.generation {
        set(labels::INSTANCE_GENERATION, g.to_string());
    }
    set(labels::INSTANCE_SIZE, shape.size.clone());
    set(labels::INSTANCE_CPU, shape.vcpu.to_string());
    set(labels::INSTANCE_MEMORY, shape.memory_mib.to_string());
    if let Some(m) = &shape.cpu_manufacturer {
        set("karpenter.k8s.aws/instance-cpu-manufacturer", m.clone());
    }
    if let Some(h) = &shape.hypervisor {
        set("karpenter.k8s.aws/instance-hypervisor", h.clone());
    }
    if shape.network_bandwidth_mbps > 0 {
        set(
            "karpenter.k8s.aws/instance-network-bandwidth",
            shape.network_bandwidth_mbps.to_string(),
        );
    }
    if shape.local_nvme_gb > 0 {
        set(
            "karpenter.k8s.aws/instance-local-nvme",
            shape.local_nvme_gb.to_string(),
        );
    }
    if shape.gpu_count > 0 {
        set(labels::INSTANCE_GPU_COUNT, shape.gpu_count.to_string());
        if let Some(n) = &shape.gpu_name {
            set(
                "karpenter.k8s.aws/instance-gpu-name",
                n.to_ascii_lowercase(),
            );
        }
        if let Some(m) = &shape.gpu_manufacturer {
            set(
                "karpenter.k8s.aws/instance-gpu-manufacturer",
                m.to_ascii_lowercase(),
            );
        }
        set(
            "karpenter.k8s.aws/instance-gpu-memory",
            shape.gpu_memory_mib.to_string(),
        );
    }
    if shape.accelerator_count > 0 {
        set(
            "karpenter.k8s.aws/instance-accelerator-count",
            shape.accelerator_count.to_string(),
        );
        if let Some(n) = &shape.accelerator_name {
            set(
                "karpenter.k8s.aws/instance-accelerator-name",
                n.to_ascii_lowercase(),
            );
        }
    }
    r
}

/// An entry of a user catalog (`jointer simulate --catalog FILE`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserInstanceType {
    pub name: String,
    pub vcpu: i64,
    pub memory_mib: i64,
    /// Defaults to the ENI formula of a type this size would have, i.e. 110 when unknown.
    #[serde(default)]
    pub max_pods: Option<i64>,
    #[serde(default = "amd64")]
    pub arch: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub offerings: Vec<UserOffering>,
    /// Used as-is when given; otherwise derived with the AWS formula.
    #[serde(default)]
    pub allocatable: Option<BTreeMap<String, crate::api::Quantity>>,
}

fn amd64() -> String {
    "amd64".into()
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserOffering {
    pub zone: String,
    pub capacity_type: CapacityType,
    pub price: f64,
    #[serde(default = "yes")]
    pub available: bool,
}

/// The labels an AWS-style name (`m6g.xlarge`) implies: family, category, generation, size.
/// Other names imply none.
fn name_labels(name: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some((family, size)) = name.split_once('.') else {
        return out;
    };
    let category: String = family
        .chars()
        .take_while(|c| c.is_ascii_lowercase())
        .collect();
    let generation: String = family[category.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    if category.is_empty() || generation.is_empty() {
        return out;
    }
    out.insert(labels::INSTANCE_FAMILY.to_string(), family.to_string());
    out.insert(labels::INSTANCE_CATEGORY.to_string(), category);
    out.insert(labels::INSTANCE_GENERATION.to_string(), generation);
    out.insert(labels::INSTANCE_SIZE.to_string(), size.to_string());
    out
}

/// Instance types from a user catalog. Allocatable follows the AWS formula (max pods as given,
/// else 110), unless the entry states it.
pub fn user_instance_types(
    entries: &[UserInstanceType],
    kubelet: &KubeletSettings,
) -> Result<Vec<Arc<InstanceType>>, CatalogError> {
    if entries.is_empty() {
        return Err(CatalogError::Empty);
    }
    let mut out = Vec::new();
    for e in entries {
        let invalid = |problem: &str| CatalogError::Invalid {
            name: e.name.clone(),
            problem: problem.to_string(),
        };
        if e.vcpu <= 0 || e.memory_mib <= 0 {
            return Err(invalid("vcpu and memory_mib must be positive"));
        }
        if e.offerings.is_empty() {
            return Err(invalid("needs at least one offering"));
        }
        if e.offerings
            .iter()
            .any(|o| !(o.price.is_finite() && o.price >= 0.0))
        {
            return Err(invalid("offering prices must be non-negative numbers"));
        }
        let mut labels = name_labels(&e.name);
        labels.extend(e.labels.clone());
        let mut requirements = Requirements::from_labels(&labels);
        requirements.add(labels::ARCH, Requirement::any_of([e.arch.clone()]));
        add_family_labels(&mut requirements, kubelet);
        requirements.add(
            labels::INSTANCE_CPU,
            Requirement::any_of([e.vcpu.to_string()]),
        );
        requirements.add(
            labels::INSTANCE_MEMORY,
            Requirement::any_of([e.memory_mib.to_string()]),
        );
        let settings = KubeletSettings {
            max_pods: kubelet.max_pods.or(e.max_pods).or(Some(110)),
            ..kubelet.clone()
        };
        let hw = Hardware {
            vcpu: e.vcpu,
            memory_mib: e.memory_mib,
            enis: 0,
            ipv4_per_eni: 0,
            local_nvme_gb: 0,
        };
        let (capacity, overhead) = capacity_and_overhead(&hw, &settings);
        let offerings = e
            .offerings
            .iter()
            .map(|o| Offering {
                zone: o.zone.clone(),
                capacity_type: o.capacity_type,
                price: o.price,
                available: o.available,
            })
            .collect();
        let mut it = InstanceType::new(&e.name, requirements, capacity, overhead, offerings);
        if let Some(explicit) = &e.allocatable {
            let (stated, unknown) = Resources::from_quantities(explicit);
            if let Some(u) = unknown.first() {
                return Err(invalid(&format!("allocatable names an unsupported resource {:?} (use cpu, memory, pods, ephemeral-storage, nvidia.com/gpu, amd.com/gpu, aws.amazon.com/neuron)", u.0)));
            }
            // Stated dimensions are used as-is; the others keep the derived value.
            it.allocatable = stated.or(&it.allocatable);
            it.overhead = it.capacity - it.allocatable;
        }
        out.push(Arc::new(it));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_catalog_loads_every_region() {
        let catalog = Catalog::embedded().unwrap();
        let regions: Vec<&str> = catalog.regions().collect();
        assert!(
            regions.contains(&"us-east-1") && regions.len() >= 7,
            "{regions:?}"
        );
        let types = catalog
            .instance_types("us-east-1", &KubeletSettings::default(), None)
            .unwrap();
        assert!(types.len() > 1000);
        let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
        assert_eq!(m5.capacity.pods, 29);
        assert_eq!(m5.allocatable.cpu, 1930);
        let od = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::OnDemand)
            .unwrap();
        let spot = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::Spot && o.zone == od.zone)
            .unwrap();
        assert!(spot.price < od.price);
        let p = types.iter().find(|t| t.name == "p3dn.24xlarge").unwrap();
        assert_eq!(p.capacity.nvidia_gpu, 8);
    }

    #[test]
    fn the_file_defaults_are_the_loader_defaults() {
        let raw: serde_json::Value = serde_json::from_str(EMBEDDED).unwrap();
        let d = &raw["defaults"];
        assert_eq!(d["gpu_count"], 0);
        assert_eq!(d["spot"], true);
        assert_eq!(d["bare_metal"], false);
        assert!(d["gpu_name"].is_null() && d["accelerator_name"].is_null());
        assert_eq!(d["local_nvme_gb"], 0);
    }

    #[test]
    fn unknown_regions_are_named() {
        let err = Catalog::embedded()
            .unwrap()
            .instance_types("mars-north-1", &KubeletSettings::default(), None)
            .unwrap_err();
        assert!(err.to_string().contains("us-east-1"));
    }
}
