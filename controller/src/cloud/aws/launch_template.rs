//! Launch templates: everything about a node that is not its instance type or subnet (AMI,
//! instance profile, security groups, user data, metadata options, volumes). Named after a
//! hash of that content, so an unchanged class reuses its template and a changed one gets a
//! new template instead of editing one a running launch may be using.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    CapacityReservationTarget, ConnectionTrackingSpecificationRequest,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateCpuOptionsRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateEnclaveOptionsRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplateTagSpecificationRequest, LaunchTemplatesMonitoringRequest,
    NestedVirtualizationSpecification, RequestLaunchTemplateData, ResourceType, Tag,
    TagSpecification, VolumeType,
};
use base64::Engine;
use serde::Serialize;

use crate::api::ec2nodeclass::{
    BlockDeviceMapping, ConnectionTracking, CpuOptions, EnclaveOptions, InterfaceType,
    MetadataOptions, NetworkInterface, PlacementGroupSelector, Toggle,
};
use crate::core::ami_family::Family;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Content {
    pub image_id: String,
    pub instance_profile: String,
    pub security_group_ids: Vec<String>,
    pub user_data: String,
    pub metadata_options: MetadataOptions,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub detailed_monitoring: bool,
    pub associate_public_ip_address: Option<bool>,
    /// Tags on the template itself.
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation its instances are launched into (one template per
    /// reservation, as EC2 takes the target from the template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    /// For spot launches: the template then also tags the spot request (skipped when false so
    /// on-demand templates keep their names).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub spot: bool,
    // The class's newer launch settings; skipped when unset so templates of classes that
    // do not use them keep their names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<PlacementGroupSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_interfaces: Vec<NetworkInterface>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_prefix_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclave_options: Option<EnclaveOptions>,
}

impl Content {
    /// The family's volumes when the class names none (as upstream's defaults).
    pub fn with_default_volumes(mut self, family: Family) -> Self {
        if self.block_device_mappings.is_empty() {
            self.block_device_mappings = family.default_block_devices();
        }
        self
    }

    /// `karpenter.k8s.aws/<hash of cluster and content>`.
    pub fn name(&self, cluster: &str) -> String {
        let text = format!(
            "{cluster}\n{}",
            serde_json::to_string(self).unwrap_or_default()
        );
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        format!("karpenter.k8s.aws/{hash:016x}")
    }

    fn block_devices(&self) -> Vec<LaunchTemplateBlockDeviceMappingRequest> {
        self.block_device_mappings
            .iter()
            .map(|m| {
                let ebs = m.ebs.as_ref().map(|e| {
                    LaunchTemplateEbsBlockDeviceRequest::builder()
                        .set_delete_on_termination(e.delete_on_termination)
                        .set_encrypted(e.encrypted)
                        .set_iops(e.iops.map(|v| v as i32))
                        .set_kms_key_id(e.kms_key_id.clone())
                        .set_snapshot_id(e.snapshot_id.clone())
                        .set_throughput(e.throughput.map(|v| v as i32))
                        .set_volume_size(
                            e.volume_size
                                .as_ref()
                                .map(|q| ((q.units_ceil() + (1 << 30) - 1) >> 30) as i32),
                        )
                        .set_volume_type(e.volume_type.map(|t| VolumeType::from(t.as_str())))
                        .set_volume_initialization_rate(e.volume_initialization_rate)
                        .build()
                });
                LaunchTemplateBlockDeviceMappingRequest::builder()
                    .set_device_name(m.device_name.clone())
                    .set_ebs(ebs)
                    .build()
            })
            .collect()
    }

    /// The CreateLaunchTemplate data.
    pub fn request(&self) -> RequestLaunchTemplateData {
        let metadata = &self.metadata_options;
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(&self.instance_profile)
                    .build(),
            )
            .user_data(base64::engine::general_purpose::STANDARD.encode(&self.user_data))
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
                        metadata.http_endpoint.as_str(),
                    ))
                    .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
                        metadata.http_protocol_ipv6.as_str(),
                    ))
                    .http_put_response_hop_limit(metadata.http_put_response_hop_limit as i32)
                    .http_tokens(LaunchTemplateHttpTokensState::from(
                        metadata.http_tokens.as_str(),
                    ))
                    .build(),
            )
            .set_block_device_mappings(Some(self.block_devices()))
            .monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(self.detailed_monitoring)
                    .build(),
            )
            .set_tag_specifications(Some(self.launched_resource_tags()));
        data = match self.interfaces() {
            Some(interfaces) => data.set_network_interfaces(Some(interfaces)),
            None => data.set_security_group_ids(Some(self.security_group_ids.clone())),
        };
        if let Some(group) = &self.placement_group {
            data = data.placement(
                LaunchTemplatePlacementRequest::builder()
                    .set_group_name(group.name.clone())
                    .set_group_id(group.id.clone())
                    .build(),
            );
        }
        if let Some(nested) = self
            .cpu_options
            .as_ref()
            .and_then(|c| c.nested_virtualization)
        {
            let nested = match nested {
                Toggle::Enabled => NestedVirtualizationSpecification::Enabled,
                Toggle::Disabled => NestedVirtualizationSpecification::Disabled,
            };
            data = data.cpu_options(
                LaunchTemplateCpuOptionsRequest::builder()
                    .nested_virtualization(nested)
                    .build(),
            );
        }
        if let Some(enclave) = &self.enclave_options {
            data = data.enclave_options(
                LaunchTemplateEnclaveOptionsRequest::builder()
                    .enabled(enclave.enabled)
                    .build(),
            );
        }
        if let Some(id) = &self.capacity_reservation_id {
            data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .capacity_reservation_id(id)
                            .build(),
                    )
                    .build(),
            );
        }
        data.build()
    }

    /// Tags for what a launch creates that CreateFleet cannot tag itself: the network
    /// interfaces and, for spot, the spot request. The controller policy allows creating them
    /// only with the cluster's tags in the request (`aws:RequestTag`), so untagged ones would
    /// make IAM refuse the whole launch.
    fn launched_resource_tags(&self) -> Vec<LaunchTemplateTagSpecificationRequest> {
        let mut kinds = vec![ResourceType::NetworkInterface];
        if self.spot {
            kinds.push(ResourceType::SpotInstancesRequest);
        }
        kinds
            .into_iter()
            .map(|kind| {
                LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(kind)
                    .set_tags(Some(self.tag_list()))
                    .build()
            })
            .collect()
    }

    fn tag_list(&self) -> Vec<Tag> {
        self.tags
            .iter()
            .map(|(k, v)| Tag::builder().key(k).value(v).build())
            .collect()
    }

    /// The network interfaces to declare, or None when the instance's default primary
    /// interface will do. A public-IP choice, prefixes, connection tracking and extra (EFA)
    /// interfaces are only expressible on interfaces, which then carry the security groups
    /// (EC2 refuses them in both places).
    fn interfaces(
        &self,
    ) -> Option<Vec<LaunchTemplateInstanceNetworkInterfaceSpecificationRequest>> {
        let primary_settings = self.associate_public_ip_address.is_some()
            || self.ip_prefix_count.is_some()
            || self.connection_tracking.is_some();
        if !primary_settings && self.network_interfaces.is_empty() {
            return None;
        }
        let primary = NetworkInterface {
            network_card_index: 0,
            device_index: 0,
            interface_type: InterfaceType::Interface,
        };
        let declared = if self.network_interfaces.is_empty() {
            vec![primary]
        } else {
            self.network_interfaces.clone()
        };
        let tracking = self.connection_tracking.as_ref().map(|t| {
            ConnectionTrackingSpecificationRequest::builder()
                .set_tcp_established_timeout(t.tcp_established_timeout)
                .set_udp_stream_timeout(t.udp_stream_timeout)
                .set_udp_timeout(t.udp_timeout)
                .build()
        });
        Some(
            declared
                .iter()
                .map(|i| {
                    let is_primary = i.network_card_index == 0 && i.device_index == 0;
                    let mut spec =
                        LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                            .network_card_index(i.network_card_index)
                            .device_index(i.device_index)
                            .set_groups(Some(self.security_group_ids.clone()));
                    if i.interface_type == InterfaceType::EfaOnly {
                        spec = spec.interface_type("efa-only");
                    }
                    if is_primary {
                        spec = spec
                            .set_associate_public_ip_address(self.associate_public_ip_address)
                            .set_ipv4_prefix_count(self.ip_prefix_count)
                            .set_connection_tracking_specification(tracking.clone());
                    }
                    spec.build()
                })
                .collect(),
        )
    }

    pub fn tag_specification(&self) -> TagSpecification {
        TagSpecification::builder()
            .resource_type(ResourceType::LaunchTemplate)
            .set_tags(Some(self.tag_list()))
            .build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content() -> Content {
        Content {
            image_id: "ami-1".into(),
            instance_profile: "prod_1".into(),
            security_group_ids: vec!["sg-1".into()],
            user_data: "data".into(),
            metadata_options: MetadataOptions::default(),
            block_device_mappings: vec![],
            detailed_monitoring: false,
            associate_public_ip_address: None,
            tags: BTreeMap::new(),
            capacity_reservation_id: None,
            spot: false,
            placement_group: None,
            network_interfaces: vec![],
            ip_prefix_count: None,
            connection_tracking: None,
            cpu_options: None,
            enclave_options: None,
        }
        .with_default_volumes(Family::AL2023)
    }

    #[test]
    fn the_name_follows_the_content_and_the_cluster() {
        let a = content();
        assert_eq!(a.name("prod"), content().name("prod"));
        assert!(a.name("prod").starts_with("karpenter.k8s.aws/"));
        assert_ne!(a.name("prod"), a.name("staging"));
        let b = Content {
            image_id: "ami-2".into(),
            ..content()
        };
        assert_ne!(a.name("prod"), b.name("prod"));
        let reserved = Content {
            capacity_reservation_id: Some("cr-1".into()),
            ..content()
        };
        assert_ne!(a.name("prod"), reserved.name("prod"));
        let target = reserved
            .request()
            .capacity_reservation_specification
            .unwrap();
        assert_eq!(
            target
                .capacity_reservation_target
                .unwrap()
                .capacity_reservation_id
                .as_deref(),
            Some("cr-1")
        );
    }

    #[test]
    fn network_interfaces_and_spot_requests_carry_the_templates_tags() {
        let tags: BTreeMap<String, String> = [(
            "kubernetes.io/cluster/prod".to_string(),
            "owned".to_string(),
        )]
        .into();
        let kinds = |c: &Content| -> Vec<(String, usize)> {
            c.request()
                .tag_specifications()
                .iter()
                .map(|t| {
                    let kind = t.resource_type().map(|r| r.as_str().to_string());
                    (kind.unwrap_or_default(), t.tags().len())
                })
                .collect()
        };
        let on_demand = Content {
            tags: tags.clone(),
            ..content()
        };
        assert_eq!(kinds(&on_demand), [("network-interface".to_string(), 1)]);
        let spot = Content {
            spot: true,
            ..on_demand.clone()
        };
        assert_eq!(
            kinds(&spot),
            [
                ("network-interface".to_string(), 1),
                ("spot-instances-request".to_string(), 1)
            ]
        );
        assert_ne!(spot.name("prod"), on_demand.name("prod"));
        // On-demand templates keep the names they had before `spot` existed.
        let named = serde_json::to_value(&on_demand).expect("json");
        assert!(named.get("spot").is_none(), "{named}");
    }

    #[test]
    fn the_default_root_volume_is_20_gib_gp3_encrypted() {
        let data = content().request();
        let bdm = &data.block_device_mappings()[0];
        assert_eq!(bdm.device_name(), Some("/dev/xvda"));
        let ebs = bdm.ebs().unwrap();
        assert_eq!(ebs.volume_size(), Some(20));
        assert_eq!(ebs.encrypted(), Some(true));
        assert_eq!(data.security_group_ids(), ["sg-1".to_string()]);
    }

    #[test]
    fn a_class_without_the_newer_settings_keeps_its_template_name() {
        // Pinned: the name a plain class's template had before the newer fields existed, so
        // upgrading jointer does not replace every launch template.
        assert_eq!(content().name("prod"), "karpenter.k8s.aws/f07301fd712a9113");
    }

    #[test]
    fn efa_interfaces_prefixes_tracking_placement_cpu_and_enclaves_reach_the_template() {
        let class: crate::api::EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
            "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
            "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}],
            "ipPrefixCount": 2,
            "connectionTracking": {"tcpEstablishedTimeout": 600},
            "placementGroupSelector": {"name": "training"},
            "cpuOptions": {"nestedVirtualization": "enabled"},
            "enclaveOptions": {"enabled": true},
            "blockDeviceMappings": [{"deviceName": "/dev/xvda",
                "ebs": {"snapshotID": "snap-1", "volumeInitializationRate": 200}}]
        }))
        .expect("spec");
        let with = Content {
            network_interfaces: class.network_interfaces,
            ip_prefix_count: class.ip_prefix_count,
            connection_tracking: class.connection_tracking,
            placement_group: class.placement_group_selector,
            cpu_options: class.cpu_options,
            enclave_options: class.enclave_options,
            block_device_mappings: class.block_device_mappings,
            ..content()
        };
        assert_ne!(with.name("prod"), content().name("prod"));
        let data = with.request();
        // Interfaces carry the security groups; the template then has none of its own.
        assert!(data.security_group_ids().is_empty());
        let interfaces = data.network_interfaces();
        assert_eq!(interfaces.len(), 2);
        let primary = &interfaces[0];
        assert_eq!(primary.ipv4_prefix_count(), Some(2));
        assert_eq!(primary.groups(), ["sg-1".to_string()]);
        assert_eq!(
            primary
                .connection_tracking_specification()
                .and_then(|t| t.tcp_established_timeout()),
            Some(600)
        );
        assert_eq!(primary.interface_type(), None);
        let efa = &interfaces[1];
        assert_eq!(efa.interface_type(), Some("efa-only"));
        assert_eq!(
            (efa.network_card_index(), efa.device_index()),
            (Some(1), Some(1))
        );
        assert_eq!(efa.ipv4_prefix_count(), None);
        assert_eq!(
            data.placement().and_then(|p| p.group_name()),
            Some("training")
        );
        assert_eq!(
            data.cpu_options().and_then(|c| c.nested_virtualization()),
            Some(&NestedVirtualizationSpecification::Enabled)
        );
        assert_eq!(data.enclave_options().and_then(|e| e.enabled()), Some(true));
        let ebs = data.block_device_mappings()[0].ebs().expect("ebs");
        assert_eq!(ebs.volume_initialization_rate(), Some(200));
    }

    #[test]
    fn a_public_ip_choice_alone_declares_just_the_primary_interface() {
        let data = Content {
            associate_public_ip_address: Some(false),
            ..content()
        }
        .request();
        let interfaces = data.network_interfaces();
        assert_eq!(interfaces.len(), 1);
        assert_eq!(interfaces[0].associate_public_ip_address(), Some(false));
        assert_eq!(interfaces[0].device_index(), Some(0));
        assert!(data.placement().is_none() && data.cpu_options().is_none());
    }
}
