//! AMI families: what differs between AL2023, AL2, Bottlerocket, Windows and Custom nodes.
//! Each family has its own EKS SSM parameters for an alias (per architecture and accelerator
//! variant), its own user data (see [`user_data`]), default volumes, operating system and the
//! kubelet's pod density and reservations — the facts `simulate`, the solver and the launch
//! path all read from here.

pub mod user_data;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use crate::api::ec2nodeclass::{AmiFamily, BlockDeviceMapping, EC2NodeClass};
use crate::api::{labels, Operator};
use crate::core::scheduling::requirements::{Requirement, Requirements};

/// `node.kubernetes.io/windows-build`: the kube-scheduler's way to keep Windows containers on
/// the Windows Server build they were built for.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";
pub const ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WindowsVersion {
    Server2019,
    Server2022,
    Server2025,
}

impl WindowsVersion {
    pub fn year(self) -> &'static str {
        match self {
            WindowsVersion::Server2019 => "2019",
            WindowsVersion::Server2022 => "2022",
            WindowsVersion::Server2025 => "2025",
        }
    }

    /// The OS build a node of this version reports.
    pub fn build(self) -> &'static str {
        match self {
            WindowsVersion::Server2019 => "10.0.17763",
            WindowsVersion::Server2022 => "10.0.20348",
            WindowsVersion::Server2025 => "10.0.26100",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    AL2023,
    AL2,
    Bottlerocket,
    Windows(WindowsVersion),
    /// The user's own image and bootstrap: jointer generates no user data.
    Custom,
}

/// Which accelerators an image's drivers serve (EKS publishes one image per variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    Standard,
    Nvidia,
    Neuron,
}

impl Variant {
    /// The instance types an image of this variant suits: standard images only types
    /// without GPUs or accelerators, NVIDIA images types with GPUs, Neuron images types with
    /// Inferentia/Trainium accelerators.
    pub fn requirements(self) -> Vec<NodeSelectorRequirement> {
        let absent = |key: &str| NodeSelectorRequirement {
            key: key.into(),
            operator: "DoesNotExist".into(),
            values: None,
        };
        let present = |key: &str| NodeSelectorRequirement {
            key: key.into(),
            operator: "Exists".into(),
            values: None,
        };
        match self {
            Variant::Standard => vec![
                absent(ACCELERATOR_COUNT),
                absent(labels::INSTANCE_GPU_COUNT),
            ],
            Variant::Nvidia => vec![present(labels::INSTANCE_GPU_COUNT)],
            Variant::Neuron => vec![present(ACCELERATOR_COUNT)],
        }
    }
}

/// One SSM parameter an alias reads, and the images it names.
#[derive(Debug, Clone, PartialEq)]
pub struct AliasParameter {
    pub name: String,
    /// `amd64` or `arm64`.
    pub arch: &'static str,
    /// More than one when one image serves several (AL2's GPU image has both drivers).
    pub variants: Vec<Variant>,
    /// Extra requirements every image of the family carries (Windows: its OS and build).
    pub requirements: Vec<NodeSelectorRequirement>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AliasError {
    #[error("alias {alias}: unknown family {family:?} (valid: al2023, al2, bottlerocket, windows2019, windows2022, windows2025)")]
    UnknownFamily { alias: String, family: String },
    #[error("alias {alias}: EKS publishes no AL2 AMIs for Kubernetes {kubernetes} (AL2 images stop at 1.32); use al2023@latest or bottlerocket@latest, or an AL2-based image of your own with amiFamily: AL2 and amiSelectorTerms by id, name or tags")]
    Al2Retired { alias: String, kubernetes: String },
    #[error("alias {alias}: Windows images are published only as the newest per Kubernetes version; use {family}@latest")]
    WindowsPinned { alias: String, family: String },
}

fn requirement_in(key: &str, value: &str) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: "In".into(),
        values: Some(vec![value.into()]),
    }
}

/// Whether an image with these requirements boots an instance type with these labels: each
/// requirement must hold for the type's value, or allow the label to be absent.
pub fn image_fits(image: &[NodeSelectorRequirement], type_labels: &Requirements) -> bool {
    image.iter().all(|r| {
        let Ok(operator) = serde_json::from_value::<Operator>(r.operator.clone().into()) else {
            return false;
        };
        let required = Requirement::new(operator, r.values.as_deref().unwrap_or_default());
        match type_labels.get(&r.key) {
            Some(offered) => required.intersects(offered),
            None => required.allows_absence(),
        }
    })
}

/// `1.33` → (1, 33).
fn minor(kubernetes: &str) -> Option<(u32, u32)> {
    let (major, minor) = kubernetes.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

impl Family {
    /// The family of a class: `spec.amiFamily`, else its alias's family. (The API requires
    /// `amiFamily` when no term is an alias; AL2023 is upstream's default.)
    pub fn of(class: &EC2NodeClass) -> Family {
        if let Some(f) = class.spec.ami_family {
            return Family::from_api(f);
        }
        class
            .spec
            .ami_selector_terms
            .iter()
            .find_map(|t| t.alias.as_deref())
            .and_then(|alias| Family::from_alias(alias).ok())
            .unwrap_or(Family::AL2023)
    }

    pub fn from_api(f: AmiFamily) -> Family {
        match f {
            AmiFamily::AL2 => Family::AL2,
            AmiFamily::AL2023 => Family::AL2023,
            AmiFamily::Bottlerocket => Family::Bottlerocket,
            AmiFamily::Custom => Family::Custom,
            AmiFamily::Windows2019 => Family::Windows(WindowsVersion::Server2019),
            AmiFamily::Windows2022 => Family::Windows(WindowsVersion::Server2022),
            AmiFamily::Windows2025 => Family::Windows(WindowsVersion::Server2025),
        }
    }

    /// The family before the `@` of an alias (case-insensitive, as the API's rule).
    pub fn from_alias(alias: &str) -> Result<Family, AliasError> {
        let family = alias.split('@').next().unwrap_or_default();
        Ok(match family.to_ascii_lowercase().as_str() {
            "al2023" => Family::AL2023,
            "al2" => Family::AL2,
            "bottlerocket" => Family::Bottlerocket,
            "windows2019" => Family::Windows(WindowsVersion::Server2019),
            "windows2022" => Family::Windows(WindowsVersion::Server2022),
            "windows2025" => Family::Windows(WindowsVersion::Server2025),
            _ => {
                return Err(AliasError::UnknownFamily {
                    alias: alias.into(),
                    family: family.into(),
                })
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Family::AL2023 => "AL2023",
            Family::AL2 => "AL2",
            Family::Bottlerocket => "Bottlerocket",
            Family::Windows(WindowsVersion::Server2019) => "Windows2019",
            Family::Windows(WindowsVersion::Server2022) => "Windows2022",
            Family::Windows(WindowsVersion::Server2025) => "Windows2025",
            Family::Custom => "Custom",
        }
    }

    pub fn is_windows(self) -> bool {
        matches!(self, Family::Windows(_))
    }

    /// `kubernetes.io/os` of its nodes.
    pub fn os(self) -> &'static str {
        if self.is_windows() {
            "windows"
        } else {
            "linux"
        }
    }

    /// Architectures EKS publishes images of this family for.
    pub fn architectures(self) -> &'static [&'static str] {
        if self.is_windows() {
            &["amd64"]
        } else {
            &["amd64", "arm64"]
        }
    }

    /// Whether the kubelet's default max pods follows the instance's ENI limit (the EKS
    /// Linux AMIs ship the ENI table); Windows nodes default to the kubelet's 110.
    pub fn eni_limited_pods(self) -> bool {
        !self.is_windows()
    }

    /// AL2's bootstrap.sh and AL2023's nodeadm compute kube-reserved memory from the ENI
    /// max pods before any user maxPods is applied; Bottlerocket and Windows from the
    /// node's actual max pods.
    pub fn reserves_memory_for_eni_pods(self) -> bool {
        matches!(self, Family::AL2 | Family::AL2023 | Family::Custom)
    }

    /// Bottlerocket has no pods-per-core setting, so `kubelet.podsPerCore` has no effect there.
    pub fn honours_pods_per_core(self) -> bool {
        self != Family::Bottlerocket
    }

    /// The volumes a node gets when the class names none. Bottlerocket keeps the OS on a
    /// small first volume and the kubelet's and containers' data on a second one.
    pub fn default_block_devices(self) -> Vec<BlockDeviceMapping> {
        let volume = |device: &str, size: &str| {
            serde_json::json!({
                "deviceName": device,
                "ebs": {"volumeSize": size, "volumeType": "gp3", "encrypted": true, "deleteOnTermination": true}
            })
        };
        let devices = match self {
            Family::AL2023 | Family::AL2 => vec![volume("/dev/xvda", "20Gi")],
            Family::Bottlerocket => vec![volume("/dev/xvda", "4Gi"), volume("/dev/xvdb", "20Gi")],
            Family::Windows(_) => vec![volume("/dev/sda1", "50Gi")],
            // A custom image's device names are unknown: EC2 uses the image's own mappings.
            Family::Custom => vec![],
        };
        serde_json::from_value(serde_json::Value::Array(devices)).unwrap_or_default()
    }

    /// The device whose size is the node's ephemeral storage.
    pub fn ephemeral_device(self) -> Option<&'static str> {
        match self {
            Family::AL2023 | Family::AL2 => Some("/dev/xvda"),
            Family::Bottlerocket => Some("/dev/xvdb"),
            Family::Windows(_) => Some("/dev/sda1"),
            Family::Custom => None,
        }
    }

    /// Labels every node of the family carries beyond the instance type's.
    pub fn node_labels(self) -> Vec<(&'static str, &'static str)> {
        let mut out = vec![(labels::OS, self.os())];
        if let Family::Windows(v) = self {
            out.push((WINDOWS_BUILD, v.build()));
        }
        out
    }

    /// The EKS SSM parameters `alias` reads for a cluster of Kubernetes `kubernetes` (`1.34`).
    /// A parameter may be missing (not every variant exists for every architecture and
    /// version); the alias fails only when none resolves.
    pub fn alias_parameters(
        alias: &str,
        kubernetes: &str,
    ) -> Result<(Family, Vec<AliasParameter>), AliasError> {
        let family = Family::from_alias(alias)?;
        let version = alias.split_once('@').map_or("latest", |(_, v)| v);
        let latest = version == "latest";
        let k = kubernetes;
        let param = |name: String, arch, variants: &[Variant]| AliasParameter {
            name,
            arch,
            variants: variants.to_vec(),
            requirements: Vec::new(),
        };
        use Variant::*;
        let params = match family {
            Family::AL2023 => {
                let mut out = Vec::new();
                for (ssm_arch, arch, variants) in [
                    ("x86_64", "amd64", &[Standard, Nvidia, Neuron][..]),
                    ("arm64", "arm64", &[Standard, Nvidia][..]),
                ] {
                    for &variant in variants {
                        let v = match variant {
                            Standard => "standard",
                            Nvidia => "nvidia",
                            Neuron => "neuron",
                        };
                        let leaf = if latest {
                            "recommended".to_string()
                        } else {
                            format!("amazon-eks-node-al2023-{ssm_arch}-{v}-{k}-{version}")
                        };
                        out.push(param(
                            format!("/aws/service/eks/optimized-ami/{k}/amazon-linux-2023/{ssm_arch}/{v}/{leaf}/image_id"),
                            arch,
                            &[variant],
                        ));
                    }
                }
                out
            }
            Family::AL2 => {
                if minor(k).is_some_and(|m| m >= (1, 33)) {
                    return Err(AliasError::Al2Retired {
                        alias: alias.into(),
                        kubernetes: k.into(),
                    });
                }
                [
                    ("", "", "amd64", &[Standard][..]),
                    ("-arm64", "-arm64", "arm64", &[Standard][..]),
                    ("-gpu", "-gpu", "amd64", &[Neuron, Nvidia][..]),
                ]
                .into_iter()
                .map(|(path, image, arch, variants)| {
                    let leaf = if latest {
                        "recommended".to_string()
                    } else {
                        format!("amazon-eks{image}-node-{k}-{version}")
                    };
                    param(
                        format!("/aws/service/eks/optimized-ami/{k}/amazon-linux-2{path}/{leaf}/image_id"),
                        arch,
                        variants,
                    )
                })
                .collect()
            }
            Family::Bottlerocket => {
                // Bottlerocket's releases are v-prefixed on GitHub but not in SSM.
                let v = version.trim_start_matches('v');
                [
                    ("", "x86_64", "amd64", &[Standard, Neuron][..]),
                    ("", "arm64", "arm64", &[Standard][..]),
                    ("-nvidia", "x86_64", "amd64", &[Nvidia][..]),
                    ("-nvidia", "arm64", "arm64", &[Nvidia][..]),
                ]
                .into_iter()
                .map(|(flavour, ssm_arch, arch, variants)| {
                    param(
                        format!("/aws/service/bottlerocket/aws-k8s-{k}{flavour}/{ssm_arch}/{v}/image_id"),
                        arch,
                        variants,
                    )
                })
                .collect()
            }
            Family::Windows(w) => {
                if !latest {
                    return Err(AliasError::WindowsPinned {
                        alias: alias.into(),
                        family: format!("windows{}", w.year()),
                    });
                }
                vec![AliasParameter {
                    name: format!(
                        "/aws/service/ami-windows-latest/Windows_Server-{}-English-Core-EKS_Optimized-{k}/image_id",
                        w.year()
                    ),
                    arch: "amd64",
                    // One image for every Windows instance type.
                    variants: Vec::new(),
                    requirements: vec![
                        requirement_in(labels::OS, "windows"),
                        requirement_in(WINDOWS_BUILD, w.build()),
                    ],
                }]
            }
            Family::Custom => unreachable!("from_alias never yields Custom"),
        };
        Ok((family, params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(alias: &str, k: &str) -> Vec<String> {
        Family::alias_parameters(alias, k)
            .unwrap()
            .1
            .into_iter()
            .map(|p| p.name)
            .collect()
    }

    #[test]
    fn each_alias_reads_its_familys_eks_parameters() {
        assert_eq!(
            names("al2023@latest", "1.34")[0],
            "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert_eq!(names("al2023@latest", "1.34").len(), 5);
        assert_eq!(
            names("al2023@v20261101", "1.34")[4],
            "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/arm64/nvidia/amazon-eks-node-al2023-arm64-nvidia-1.34-v20261101/image_id"
        );
        assert_eq!(
            names("al2@v20250101", "1.32"),
            [
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2/amazon-eks-node-1.32-v20250101/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2-arm64/amazon-eks-arm64-node-1.32-v20250101/image_id",
                "/aws/service/eks/optimized-ami/1.32/amazon-linux-2-gpu/amazon-eks-gpu-node-1.32-v20250101/image_id",
            ]
        );
        assert_eq!(
            names("bottlerocket@v1.50.0", "1.34")[2],
            "/aws/service/bottlerocket/aws-k8s-1.34-nvidia/x86_64/1.50.0/image_id"
        );
        assert_eq!(
            names("Windows2022@latest", "1.34"),
            ["/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.34/image_id"]
        );
    }

    #[test]
    fn retired_or_impossible_aliases_say_what_to_use() {
        let err = Family::alias_parameters("al2@latest", "1.34").unwrap_err();
        assert!(err.to_string().contains("use al2023@latest"), "{err}");
        let err = Family::alias_parameters("windows2019@v1", "1.34").unwrap_err();
        assert!(err.to_string().contains("windows2019@latest"), "{err}");
        let err = Family::alias_parameters("ubuntu@latest", "1.34").unwrap_err();
        assert!(err.to_string().contains("valid: al2023"), "{err}");
    }

    #[test]
    fn windows_images_pin_os_and_build_and_variants_pin_accelerators() {
        let (_, params) = Family::alias_parameters("windows2025@latest", "1.34").unwrap();
        let r = &params[0].requirements;
        assert_eq!(r[0].values.as_deref(), Some(&["windows".to_string()][..]));
        assert_eq!(
            r[1].values.as_deref(),
            Some(&["10.0.26100".to_string()][..])
        );
        assert_eq!(Variant::Standard.requirements()[1].operator, "DoesNotExist");
        assert_eq!(
            Variant::Nvidia.requirements()[0].key,
            labels::INSTANCE_GPU_COUNT
        );
    }

    #[test]
    fn bottlerocket_keeps_its_data_on_a_second_volume() {
        let devices = Family::Bottlerocket.default_block_devices();
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[1].device_name.as_deref(), Some("/dev/xvdb"));
        assert_eq!(Family::Bottlerocket.ephemeral_device(), Some("/dev/xvdb"));
        assert!(Family::Custom.default_block_devices().is_empty());
    }
}
