//! Launch templates: everything about a node that is not its instance type or subnet (AMI,
//! instance profile, security groups, user data, metadata options, volumes). Named after a
//! hash of that content, so an unchanged class reuses its template and a changed one gets a
//! new template instead of editing one a running launch may be using.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    CapacityReservationTarget, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateCapacityReservationSpecificationRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatesMonitoringRequest,
    RequestLaunchTemplateData, ResourceType, Tag, TagSpecification, VolumeType,
};
use base64::Engine;
use serde::Serialize;

use crate::api::ec2nodeclass::{BlockDeviceMapping, MetadataOptions};

/// The root volume AL2023 nodes get when the class names none (as upstream's default).
fn default_block_devices() -> Vec<BlockDeviceMapping> {
    serde_json::from_value(serde_json::json!([{
        "deviceName": "/dev/xvda",
        "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": true, "deleteOnTermination": true}
    }]))
    .unwrap_or_default()
}

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
}

impl Content {
    pub fn with_default_volumes(mut self) -> Self {
        if self.block_device_mappings.is_empty() {
            self.block_device_mappings = default_block_devices();
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
            );
        // A public-IP choice is only expressible on a network interface, which then carries
        // the security groups (EC2 refuses them in both places).
        data = match self.associate_public_ip_address {
            Some(public) => data.network_interfaces(
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .associate_public_ip_address(public)
                    .set_groups(Some(self.security_group_ids.clone()))
                    .build(),
            ),
            None => data.set_security_group_ids(Some(self.security_group_ids.clone())),
        };
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

    pub fn tag_specification(&self) -> TagSpecification {
        TagSpecification::builder()
            .resource_type(ResourceType::LaunchTemplate)
            .set_tags(Some(
                self.tags
                    .iter()
                    .map(|(k, v)| Tag::builder().key(k).value(v).build())
                    .collect(),
            ))
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
        }
        .with_default_volumes()
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
    fn the_default_root_volume_is_20_gib_gp3_encrypted() {
        let data = content().request();
        let bdm = &data.block_device_mappings()[0];
        assert_eq!(bdm.device_name(), Some("/dev/xvda"));
        let ebs = bdm.ebs().unwrap();
        assert_eq!(ebs.volume_size(), Some(20));
        assert_eq!(ebs.encrypted(), Some(true));
        assert_eq!(data.security_group_ids(), ["sg-1".to_string()]);
    }
}
