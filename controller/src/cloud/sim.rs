//! The simulated cloud: instance types from a catalog, as an EC2NodeClass would see them.

use std::sync::Arc;

use crate::api::ec2nodeclass::AmiFamily;
use crate::api::labels;
use crate::api::EC2NodeClass;
use crate::catalog::{Catalog, CatalogError, PriceOverrides};
use crate::scheduling::overhead::KubeletSettings;
use crate::scheduling::{InstanceType, Resources};

/// Where the instance types (and so the prices) of a simulation come from.
pub enum Source {
    /// The embedded catalog for a region; prices estimated unless overridden.
    Embedded {
        catalog: Catalog,
        region: String,
        prices: Option<PriceOverrides>,
    },
    /// A user-supplied catalog (allocatable derived per node class unless stated).
    User(Vec<crate::catalog::UserInstanceType>),
}

pub struct SimCloud {
    pub source: Source,
}

/// The kubelet settings of a node class that change capacity or overhead.
pub fn kubelet_settings(class: &EC2NodeClass) -> KubeletSettings {
    let mut settings = KubeletSettings::default();
    if let Some(k) = &class.spec.kubelet {
        settings.max_pods = k.max_pods.map(i64::from);
        settings.pods_per_core = k.pods_per_core.map(i64::from);
        if !k.kube_reserved.is_empty() {
            settings.kube_reserved = Some(Resources::from_quantities(&k.kube_reserved).0);
        }
        settings.system_reserved = Resources::from_quantities(&k.system_reserved).0;
        let memory_threshold = |map: &Option<std::collections::BTreeMap<String, String>>| {
            map.as_ref()
                .and_then(|m| m.get("memory.available"))
                .and_then(|v| v.parse::<crate::api::Quantity>().ok())
                .map(|q| q.units_ceil() as i64)
        };
        settings.eviction_memory = match (
            memory_threshold(&k.eviction_hard),
            memory_threshold(&k.eviction_soft),
        ) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    settings.root_volume_bytes = class
        .spec
        .block_device_mappings
        .iter()
        .find(|m| m.root_volume == Some(true))
        .or_else(|| class.spec.block_device_mappings.first())
        .and_then(|m| m.ebs.as_ref())
        .and_then(|e| e.volume_size.as_ref())
        .map(|q| q.units_ceil() as i64);
    settings
}

/// Architectures the class's AMIs exist for (Windows AMIs are x86 only).
fn architectures(class: &EC2NodeClass) -> &'static [&'static str] {
    let family = class.spec.ami_family.or_else(|| {
        let alias = class
            .spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())?;
        match alias.split('@').next()?.to_ascii_lowercase().as_str() {
            "windows2019" => Some(AmiFamily::Windows2019),
            "windows2022" => Some(AmiFamily::Windows2022),
            "windows2025" => Some(AmiFamily::Windows2025),
            _ => None,
        }
    });
    match family {
        Some(AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025) => {
            &["amd64"]
        }
        _ => &["amd64", "arm64"],
    }
}

impl SimCloud {
    /// The instance types nodes of `class` could be launched as.
    pub fn instance_types(
        &self,
        class: &EC2NodeClass,
    ) -> Result<Vec<Arc<InstanceType>>, CatalogError> {
        match &self.source {
            Source::User(entries) => {
                crate::catalog::user_instance_types(entries, &kubelet_settings(class))
            }
            Source::Embedded {
                catalog,
                region,
                prices,
            } => {
                let archs = architectures(class);
                let types =
                    catalog.instance_types(region, &kubelet_settings(class), prices.as_ref())?;
                Ok(types
                    .into_iter()
                    .filter(|t| {
                        t.requirements
                            .get(labels::ARCH)
                            .and_then(|r| r.values())
                            .is_some_and(|v| v.iter().any(|a| archs.contains(&a.as_str())))
                    })
                    .collect())
            }
        }
    }
}
