//! What the kubelet on an EKS-optimized AMI keeps for itself, so the solver's allocatable
//! matches what the node will report (if it over-estimates, pods do not fit on the node that
//! was launched for them and the provisioner loops).
//!
//! The formulas are those nodeadm/bootstrap apply on AWS: VM memory overhead 7.5 %, max pods
//! from ENI limits, kube-reserved memory 11 MiB per pod + 255 MiB, kube-reserved CPU on a
//! sliding scale per core, 1 GiB kube-reserved ephemeral storage, hard eviction at 100 Mi.
//! Families differ (see [`Family`]): Windows nodes are not ENI-limited (110 pods), AL2 and
//! AL2023 reserve memory for their ENI max pods whatever `maxPods` says, Bottlerocket has no
//! pods-per-core, and each keeps its kubelet's data on its own default volume.

use crate::api::ec2nodeclass::InstanceStorePolicy;
use crate::api::EC2NodeClass;
use crate::core::ami_family::Family;

use super::resources::Resources;

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// The hardware of an instance type that overhead depends on.
#[derive(Debug, Clone, Copy)]
pub struct Hardware {
    pub vcpu: i64,
    pub memory_mib: i64,
    pub enis: i64,
    pub ipv4_per_eni: i64,
    /// Local NVMe instance storage, GB (0 without).
    pub local_nvme_gb: i64,
}

/// Kubelet settings from the EC2NodeClass that change capacity or overhead.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletSettings {
    pub max_pods: Option<i64>,
    pub pods_per_core: Option<i64>,
    /// Replaces the computed kube-reserved for the resources it names.
    pub kube_reserved: Option<Resources>,
    pub system_reserved: Resources,
    /// memory.available eviction threshold in bytes, if configured.
    pub eviction_memory: Option<i64>,
    /// Root volume size in bytes (ephemeral storage capacity).
    pub root_volume_bytes: Option<i64>,
    /// `instanceStorePolicy: RAID0`: the instance stores, striped, hold the kubelet's and
    /// the container runtime's data, so ephemeral storage is their size where there are any.
    pub ephemeral_on_instance_store: bool,
    /// The AMI family, whose bootstrap decides pod density and reservations.
    pub family: Family,
}

impl Default for KubeletSettings {
    fn default() -> Self {
        KubeletSettings {
            max_pods: None,
            pods_per_core: None,
            kube_reserved: None,
            system_reserved: Resources::ZERO,
            eviction_memory: None,
            root_volume_bytes: None,
            ephemeral_on_instance_store: false,
            family: Family::AL2023,
        }
    }
}

/// Virtualisation takes this share of the advertised memory before the kubelet sees it.
pub const VM_MEMORY_OVERHEAD: f64 = 0.075;
/// Karpenter's default root volume for AL2023.
pub const DEFAULT_ROOT_VOLUME: i64 = 20 * GIB;
/// The kubelet's own default when no ENI table applies (Windows).
pub const KUBELET_DEFAULT_MAX_PODS: i64 = 110;

/// ENIs × (IPv4 addresses per ENI − 1) + 2: one address per ENI is the ENI's own, and two
/// host-network pods (aws-node, kube-proxy) need none.
pub fn eni_max_pods(hw: &Hardware) -> i64 {
    (hw.enis * (hw.ipv4_per_eni - 1) + 2).max(1)
}

/// The max pods the family's bootstrap would compute, before any `maxPods`.
fn default_max_pods(hw: &Hardware, family: Family) -> i64 {
    if family.eni_limited_pods() {
        eni_max_pods(hw)
    } else {
        KUBELET_DEFAULT_MAX_PODS
    }
}

pub fn max_pods(hw: &Hardware, kubelet: &KubeletSettings) -> i64 {
    let base = kubelet
        .max_pods
        .unwrap_or_else(|| default_max_pods(hw, kubelet.family));
    match kubelet.pods_per_core {
        Some(per_core) if per_core > 0 && kubelet.family.honours_pods_per_core() => {
            base.min(per_core * hw.vcpu)
        }
        _ => base,
    }
}

/// 6 % of the first core, 1 % of the second, 0.5 % of cores 3–4, 0.25 % of the rest (in m).
pub fn kube_reserved_cpu_millis(vcpu: i64) -> i64 {
    let mut reserved: f64 = 0.0;
    for core in 1..=vcpu {
        reserved += match core {
            1 => 60.0,
            2 => 10.0,
            3 | 4 => 5.0,
            _ => 2.5,
        };
    }
    reserved.ceil() as i64
}

fn ephemeral_storage(hw: &Hardware, kubelet: &KubeletSettings) -> i64 {
    if kubelet.ephemeral_on_instance_store && hw.local_nvme_gb > 0 {
        // EC2 states instance storage in decimal gigabytes.
        return hw.local_nvme_gb * 1_000_000_000;
    }
    kubelet.root_volume_bytes.unwrap_or(DEFAULT_ROOT_VOLUME)
}

/// Capacity and overhead of a node of this hardware under these kubelet settings.
pub fn capacity_and_overhead(hw: &Hardware, kubelet: &KubeletSettings) -> (Resources, Resources) {
    let pods = max_pods(hw, kubelet);
    let memory = hw.memory_mib * MIB;
    let capacity = Resources {
        cpu: hw.vcpu * 1000,
        memory: memory - (memory as f64 * VM_MEMORY_OVERHEAD).ceil() as i64,
        pods,
        ephemeral_storage: ephemeral_storage(hw, kubelet),
        ..Resources::ZERO
    };
    // AL2/AL2023 compute it from their ENI table (when the hardware says what its ENIs are).
    let reserved_for = if kubelet.family.reserves_memory_for_eni_pods() && hw.enis > 0 {
        default_max_pods(hw, kubelet.family)
    } else {
        pods
    };
    let computed = Resources {
        cpu: kube_reserved_cpu_millis(hw.vcpu),
        memory: (11 * reserved_for + 255) * MIB,
        ephemeral_storage: GIB,
        ..Resources::ZERO
    };
    // Explicit kube-reserved replaces the computed value only for the resources it names.
    let kube_reserved = kubelet
        .kube_reserved
        .map_or(computed, |explicit| explicit.or(&computed));
    let eviction = Resources {
        memory: kubelet.eviction_memory.unwrap_or(100 * MIB),
        // nodefs.available defaults to 10 % of the root volume.
        ephemeral_storage: capacity.ephemeral_storage / 10,
        ..Resources::ZERO
    };
    (capacity, kube_reserved + kubelet.system_reserved + eviction)
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
    settings.family = Family::of(class);
    settings.root_volume_bytes = ephemeral_volume_bytes(class, settings.family);
    settings.ephemeral_on_instance_store =
        class.spec.instance_store_policy == Some(InstanceStorePolicy::RAID0);
    settings
}

/// The volume the kubelet keeps its data on: the one marked `rootVolume`, else the family's
/// data device (a custom image's last volume), else the family's default.
fn ephemeral_volume_bytes(class: &EC2NodeClass, family: Family) -> Option<i64> {
    let size = |m: &crate::api::ec2nodeclass::BlockDeviceMapping| {
        m.ebs
            .as_ref()
            .and_then(|e| e.volume_size.as_ref())
            .map(|q| q.units_ceil() as i64)
    };
    let mappings = &class.spec.block_device_mappings;
    if let Some(root) = mappings.iter().find(|m| m.root_volume == Some(true)) {
        return size(root);
    }
    let device = family.ephemeral_device();
    let on_device = match device {
        Some(d) => mappings
            .iter()
            .find(|m| m.device_name.as_deref() == Some(d)),
        None => mappings.last(),
    };
    on_device.and_then(size).or_else(|| {
        family
            .default_block_devices()
            .iter()
            .find(|m| m.device_name.as_deref() == device)
            .and_then(size)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn m5_large_matches_what_an_eks_node_reports() {
        // m5.large: 2 vCPU, 8 GiB, 3 ENIs × 10 IPv4 → 29 pods.
        let hw = Hardware {
            vcpu: 2,
            memory_mib: 8192,
            enis: 3,
            ipv4_per_eni: 10,
            local_nvme_gb: 0,
        };
        let (capacity, overhead) = capacity_and_overhead(&hw, &KubeletSettings::default());
        assert_eq!(capacity.pods, 29);
        assert_eq!(overhead.cpu, 70);
        assert_eq!(overhead.memory, (11 * 29 + 255 + 100) * MIB);
        let allocatable = capacity - overhead;
        assert_eq!(allocatable.cpu, 1930);
        // 8192 Mi × 0.925 − 574 Mi − 100 Mi ≈ 6903 Mi
        assert_eq!(allocatable.memory / MIB, 6903);
    }

    #[test]
    fn raid0_makes_the_instance_stores_ephemeral_storage_where_there_are_any() {
        let with_nvme = Hardware {
            vcpu: 2,
            memory_mib: 16384,
            enis: 3,
            ipv4_per_eni: 10,
            local_nvme_gb: 118,
        };
        let without = Hardware {
            local_nvme_gb: 0,
            ..with_nvme
        };
        let raid0 = KubeletSettings {
            ephemeral_on_instance_store: true,
            ..Default::default()
        };
        let ephemeral =
            |hw: &Hardware, k: &KubeletSettings| capacity_and_overhead(hw, k).0.ephemeral_storage;
        assert_eq!(ephemeral(&with_nvme, &raid0), 118_000_000_000);
        assert_eq!(ephemeral(&without, &raid0), DEFAULT_ROOT_VOLUME);
        assert_eq!(
            ephemeral(&with_nvme, &KubeletSettings::default()),
            DEFAULT_ROOT_VOLUME
        );
        // nodefs eviction follows the disk it is on.
        assert_eq!(
            capacity_and_overhead(&with_nvme, &raid0)
                .1
                .ephemeral_storage,
            GIB + 11_800_000_000
        );
    }

    #[test]
    fn cpu_reservation_follows_the_sliding_scale() {
        assert_eq!(kube_reserved_cpu_millis(1), 60);
        assert_eq!(kube_reserved_cpu_millis(4), 80);
        assert_eq!(kube_reserved_cpu_millis(96), 80 + 92 * 5 / 2);
    }

    #[test]
    fn kubelet_settings_override_max_pods() {
        let hw = Hardware {
            vcpu: 4,
            memory_mib: 16384,
            enis: 4,
            ipv4_per_eni: 15,
            local_nvme_gb: 0,
        };
        assert_eq!(max_pods(&hw, &KubeletSettings::default()), 58);
        let kubelet = KubeletSettings {
            max_pods: Some(110),
            pods_per_core: Some(10),
            ..Default::default()
        };
        assert_eq!(max_pods(&hw, &kubelet), 40);
    }

    fn m5_large() -> Hardware {
        Hardware {
            vcpu: 2,
            memory_mib: 8192,
            enis: 3,
            ipv4_per_eni: 10,
            local_nvme_gb: 0,
        }
    }

    fn of(family: Family, max_pods: Option<i64>) -> (Resources, Resources) {
        let kubelet = KubeletSettings {
            family,
            max_pods,
            pods_per_core: Some(4),
            ..Default::default()
        };
        capacity_and_overhead(&m5_large(), &kubelet)
    }

    #[test]
    fn each_family_has_its_own_pod_density_and_memory_reservation() {
        use crate::core::ami_family::WindowsVersion;
        // AL2023: ENI-limited 29, capped by pods-per-core at 8; memory reserved for the 29
        // the ENI table gives, whatever maxPods says.
        let (cap, over) = of(Family::AL2023, None);
        assert_eq!(cap.pods, 8);
        assert_eq!(over.memory, (11 * 29 + 255 + 100) * MIB);
        assert_eq!(of(Family::AL2023, Some(110)).1.memory, over.memory);
        // Bottlerocket: no pods-per-core; memory reserved for the pods it runs.
        let (cap, over) = of(Family::Bottlerocket, Some(110));
        assert_eq!(cap.pods, 110);
        assert_eq!(over.memory, (11 * 110 + 255 + 100) * MIB);
        // Windows: not ENI-limited.
        let windows = Family::Windows(WindowsVersion::Server2022);
        let (cap, over) = capacity_and_overhead(
            &m5_large(),
            &KubeletSettings {
                family: windows,
                ..Default::default()
            },
        );
        assert_eq!(cap.pods, 110);
        assert_eq!(over.memory, (11 * 110 + 255 + 100) * MIB);
    }

    #[test]
    fn ephemeral_storage_is_the_familys_data_volume() {
        let class = |family: &str, devices: serde_json::Value| -> EC2NodeClass {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "c"},
                "spec": {"amiFamily": family, "amiSelectorTerms": [{"id": "ami-1"}],
                         "subnetSelectorTerms": [{"id": "s"}], "securityGroupSelectorTerms": [{"id": "g"}],
                         "blockDeviceMappings": devices}
            }))
            .unwrap()
        };
        let volume = |c: &EC2NodeClass| kubelet_settings(c).root_volume_bytes;
        assert_eq!(
            volume(&class("Bottlerocket", serde_json::json!([]))),
            Some(20 * GIB)
        );
        assert_eq!(
            volume(&class("Windows2022", serde_json::json!([]))),
            Some(50 * GIB)
        );
        let data = serde_json::json!([
            {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi"}},
            {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi"}}]);
        assert_eq!(
            volume(&class("Bottlerocket", data.clone())),
            Some(100 * GIB)
        );
        assert_eq!(volume(&class("AL2023", data.clone())), Some(4 * GIB));
        assert_eq!(volume(&class("Custom", data)), Some(100 * GIB));
    }
}
