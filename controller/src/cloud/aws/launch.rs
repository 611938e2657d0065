//! One launch for one NodeClaim, in three steps: [`prepare`] (pure: the fleet plan, user data
//! and one launch template content per architecture or capacity reservation), sending (the
//! templates ensured, then one CreateFleet of type `instant`), and [`interpret`] (pure: which
//! instance EC2 started, which offerings had no capacity, which reservations are full).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, OnDemandOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use kube::ResourceExt;

use super::call::metered;
use super::fleet::{self, FleetPlan, Override};
use super::launch_template::Content;
use super::templates::{tags, Template};
use super::{AwsCloud, ClusterInfo};
use crate::api::conditions::class_not_ready;
use crate::api::ec2nodeclass::{EC2NodeClass, EC2NodeClassStatus, ResolvedAmi};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::unavailable;
use crate::cloud::{CloudError, Launched};
use crate::core::ami_family::user_data::{self, NodeSettings};
use crate::core::ami_family::{image_fits, Family};
use crate::core::scheduling::{CapacityType, InstanceType, Requirements, Resources};

/// One launch template's worth of the request: what it launches and the overrides it serves.
#[derive(Debug, Clone)]
pub struct Group {
    pub content: Content,
    pub capacity_reservation_id: Option<String>,
    pub overrides: Vec<Override>,
}

/// Everything CreateFleet needs, decided before any call.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub plan: FleetPlan,
    pub groups: Vec<Group>,
    /// On the instance, its volumes and the fleet.
    pub instance_tags: BTreeMap<String, String>,
    /// The class's EC2 Fleet context (`spec.context`).
    pub context: Option<String>,
}

/// Plans the request for `claim` on `class` over the class's instance types. `usable_reservations`
/// gives the ids of the reservations with room for an (instance type, zone).
pub fn prepare(
    cluster: &ClusterInfo,
    claim: &NodeClaim,
    class: &EC2NodeClass,
    types: &[Arc<InstanceType>],
    usable_reservations: impl Fn(&EC2NodeClassStatus, &str, &str) -> Vec<String>,
) -> Result<Prepared, CloudError> {
    let class_name = class.name_any();
    let status = class.status.clone().unwrap_or_default();
    let profile = match (class_not_ready(class), status.instance_profile.clone()) {
        (None, Some(profile)) => profile,
        (why, _) => {
            return Err(CloudError::ClassNotReady {
                class: class_name,
                why: why.unwrap_or_else(|| "it has no instance profile yet".into()),
            })
        }
    };
    let requirements = Requirements::from_api(&claim.spec.requirements);
    let (requests, _) = Resources::from_quantities(&claim.spec.resources.requests);
    let plan = fleet::plan(&requirements, &requests, types, &status.subnets)
        .map_err(|e| CloudError::NoOffering(e.to_string()))?;

    let mut taints = claim.spec.taints.clone();
    taints.extend(claim.spec.startup_taints.iter().cloned());
    let node_labels = claim.labels().clone();
    let family = Family::of(class);
    // As upstream: a class without `maxPods` gets the max pods the scheduling model gave the
    // type written into its user data, so the node reports exactly that (nodeadm's own
    // default caps the ENI count at 110 or 250 pods, which the model does not).
    let user_data_for = |pods: i64| {
        let mut kubelet = class.spec.kubelet.clone();
        if family != Family::Custom {
            let k = kubelet.get_or_insert_with(Default::default);
            if k.max_pods.is_none() {
                k.max_pods = i32::try_from(pods).ok();
            }
        }
        let mut node = NodeSettings::of_class(class, &node_labels, &taints);
        node.kubelet = kubelet.as_ref();
        // The error names its field (`spec.userData: …`, `spec.kubelet.…: …`).
        user_data::generate(family, cluster, &node, class.spec.user_data.as_deref()).map_err(|e| {
            CloudError::ClassNotReady {
                class: class_name.clone(),
                why: e.to_string(),
            }
        })
    };
    let tags = tags(&cluster.name, claim, class);
    // The first selected image that boots the type (its architecture, its accelerator
    // variant: NVIDIA and Neuron types get the images with their drivers, its OS), and the
    // max pods the model gave it.
    let image_and_pods = |o: &Override| {
        let of_type = types.iter().find(|t| t.name == o.instance_type)?;
        let ami = status
            .amis
            .iter()
            .find(|a| image_fits(&a.requirements, &of_type.requirements))?;
        Some((ami, of_type.capacity.pods))
    };
    // One launch template per (image, max pods); launching into capacity reservations, one
    // per (override, reservation): EC2 takes the reservation from the template.
    type Slice<'a> = (&'a ResolvedAmi, i64, Option<String>, Vec<&'a Override>);
    let mut slices: Vec<Slice> = Vec::new();
    for o in &plan.overrides {
        let Some((ami, pods)) = image_and_pods(o) else {
            continue;
        };
        if plan.capacity_type == CapacityType::Reserved {
            for r in usable_reservations(&status, &o.instance_type, &o.zone) {
                slices.push((ami, pods, Some(r), vec![o]));
            }
        } else if let Some(slice) = slices.iter_mut().find(|s| s.0.id == ami.id && s.1 == pods) {
            slice.3.push(o);
        } else {
            slices.push((ami, pods, None, vec![o]));
        }
    }
    // Reservation slices share their user data per max pods.
    let mut user_data_of_pods: BTreeMap<i64, String> = BTreeMap::new();
    let mut groups: Vec<Group> = Vec::new();
    for (ami, pods, reservation, overrides) in slices {
        let data = match user_data_of_pods.get(&pods) {
            Some(d) => d.clone(),
            None => {
                let d = user_data_for(pods)?;
                user_data_of_pods.insert(pods, d.clone());
                d
            }
        };
        groups.push({
            let content = Content {
                image_id: ami.id.clone(),
                instance_profile: profile.clone(),
                security_group_ids: status
                    .security_groups
                    .iter()
                    .map(|s| s.id.clone())
                    .collect(),
                user_data: data,
                metadata_options: class.spec.metadata_options.clone(),
                block_device_mappings: class.spec.block_device_mappings.clone(),
                detailed_monitoring: class.spec.detailed_monitoring.unwrap_or(false),
                associate_public_ip_address: class.spec.associate_public_ip_address,
                tags: tags.clone(),
                capacity_reservation_id: reservation.clone(),
                spot: plan.capacity_type == CapacityType::Spot,
                placement_group: class.spec.placement_group_selector.clone(),
                network_interfaces: class.spec.network_interfaces.clone(),
                ip_prefix_count: class.spec.ip_prefix_count,
                connection_tracking: class.spec.connection_tracking.clone(),
                cpu_options: class.spec.cpu_options.clone(),
                enclave_options: class.spec.enclave_options.clone(),
            }
            .with_default_volumes(family);
            Group {
                content,
                capacity_reservation_id: reservation,
                overrides: overrides.into_iter().cloned().collect(),
            }
        });
    }
    if groups.is_empty() {
        return Err(CloudError::ClassNotReady {
            class: class_name,
            why: "none of its AMIs suits the instance types that fit (architecture, GPU or accelerator drivers, operating system)".into(),
        });
    }
    let mut instance_tags = tags;
    instance_tags.insert(labels::NODECLAIM_TAG.into(), claim.name_any());
    instance_tags.insert("Name".into(), claim.name_any());
    Ok(Prepared {
        plan,
        groups,
        instance_tags,
        context: class.spec.context.clone(),
    })
}

/// A launch template of the request and what launching from it means.
#[derive(Debug, Clone)]
pub struct Sent {
    pub template: Template,
    pub image_id: String,
    pub capacity_reservation_id: Option<String>,
}

/// What a CreateFleet answer says.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub launched: Option<Launched>,
    /// (instance type, zone, EC2's error code) EC2 had no capacity for.
    pub no_capacity: Vec<(String, String, String)>,
    /// Capacity reservations EC2 found full.
    pub full_reservations: Vec<String>,
    /// Why nothing launched, when it was not capacity.
    pub other_errors: Vec<String>,
}

impl Outcome {
    /// The launched instance, or why there is none.
    pub fn result(&self, offered: usize) -> Result<Launched, CloudError> {
        if let Some(l) = &self.launched {
            return Ok(l.clone());
        }
        Err(if self.other_errors.is_empty() {
            CloudError::InsufficientCapacity {
                offered,
                errors: self
                    .no_capacity
                    .iter()
                    .map(|(t, zone, code)| format!("{t}/{zone}: {code}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        } else {
            CloudError::Api {
                service: "ec2",
                operation: "CreateFleet",
                code: "LaunchedNothing".into(),
                message: self.other_errors.join("; "),
            }
        })
    }
}

/// The zone of a fleet result's override: named, or its subnet's.
fn zone_of(
    o: Option<&aws_sdk_ec2::types::FleetLaunchTemplateOverrides>,
    zone_of_subnet: &BTreeMap<&str, &str>,
) -> String {
    o.and_then(|o| {
        o.availability_zone().map(str::to_string).or_else(|| {
            o.subnet_id()
                .and_then(|s| zone_of_subnet.get(s))
                .map(|z| z.to_string())
        })
    })
    .unwrap_or_default()
}

/// Reads a CreateFleet answer: the instance started (at most one: capacity 1), and each error.
pub fn interpret(
    out: &CreateFleetOutput,
    sent: &[Sent],
    capacity_type: CapacityType,
    status: &EC2NodeClassStatus,
) -> Outcome {
    let zone_of_subnet: BTreeMap<&str, &str> = status
        .subnets
        .iter()
        .map(|s| (s.id.as_str(), s.zone.as_str()))
        .collect();
    let made_from = |spec: Option<&aws_sdk_ec2::types::FleetLaunchTemplateSpecification>| {
        spec.and_then(|spec| sent.iter().find(|s| s.template.is(spec)))
    };
    let mut outcome = Outcome {
        launched: None,
        no_capacity: Vec::new(),
        full_reservations: Vec::new(),
        other_errors: Vec::new(),
    };
    for err in out.errors() {
        let lt = err.launch_template_and_overrides();
        let o = lt.and_then(|l| l.overrides());
        let itype = o
            .and_then(|o| o.instance_type())
            .map(|t| t.as_str().to_string())
            .unwrap_or_default();
        let zone = zone_of(o, &zone_of_subnet);
        let code = err.error_code().unwrap_or("Unknown").to_string();
        if code == "ReservationCapacityExceeded" {
            let from = made_from(lt.and_then(|l| l.launch_template_specification()));
            if let Some(id) = from.and_then(|s| s.capacity_reservation_id.clone()) {
                outcome.full_reservations.push(id);
            }
        }
        if unavailable::is_capacity_error(&code) {
            outcome.no_capacity.push((itype, zone, code));
        } else {
            outcome.other_errors.push(format!(
                "{itype}/{zone}: {code}: {}",
                err.error_message().unwrap_or_default()
            ));
        }
    }
    let Some(instance) = out
        .instances()
        .iter()
        .find(|i| !i.instance_ids().is_empty())
    else {
        return outcome;
    };
    let lt = instance.launch_template_and_overrides();
    let o = lt.and_then(|l| l.overrides());
    let instance_type = instance
        .instance_type()
        .map(|t| t.as_str().to_string())
        .or_else(|| {
            o.and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_string())
        })
        .unwrap_or_default();
    let zone = zone_of(o, &zone_of_subnet);
    let from = made_from(lt.and_then(|l| l.launch_template_specification()));
    let mut security_groups: Vec<String> = status
        .security_groups
        .iter()
        .map(|s| s.id.clone())
        .collect();
    security_groups.sort();
    let reservation = from
        .and_then(|s| s.capacity_reservation_id.as_ref())
        .and_then(|id| status.capacity_reservations.iter().find(|r| &r.id == id));
    outcome.launched = Some(Launched {
        provider_id: super::instances::provider_id(&zone, &instance.instance_ids()[0]),
        instance_type,
        zone,
        capacity_type,
        image_id: from.map(|s| s.image_id.clone()),
        subnet_id: o.and_then(|o| o.subnet_id()).map(str::to_string),
        security_groups,
        capacity_reservation_id: from.and_then(|s| s.capacity_reservation_id.clone()),
        capacity_reservation_type: reservation.map(|r| r.reservation_type.clone()),
        capacity_reservation_interruptible: reservation.map(|r| r.interruptible.unwrap_or(false)),
    });
    outcome
}

/// The CreateFleet request for the prepared groups, sent through their templates.
fn fleet_request(
    ec2: &aws_sdk_ec2::Client,
    prepared: &Prepared,
    sent: &[Sent],
) -> aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder {
    let configs = prepared.groups.iter().zip(sent).map(|(group, sent)| {
        let overrides = group
            .overrides
            .iter()
            .map(|o| {
                FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(aws_sdk_ec2::types::InstanceType::from(
                        o.instance_type.as_str(),
                    ))
                    .subnet_id(&o.subnet_id)
                    .availability_zone(&o.zone)
                    // Lower is preferred; only read by the prioritized strategies.
                    .set_priority(prepared.plan.prioritized.then_some(o.price))
                    .build()
            })
            .collect();
        FleetLaunchTemplateConfigRequest::builder()
            .launch_template_specification(
                FleetLaunchTemplateSpecificationRequest::builder()
                    .launch_template_name(&sent.template.name)
                    .version("$Latest")
                    .build(),
            )
            .set_overrides(Some(overrides))
            .build()
    });
    let tag_spec = |rt: ResourceType| {
        TagSpecification::builder()
            .resource_type(rt)
            .set_tags(Some(
                prepared
                    .instance_tags
                    .iter()
                    .map(|(k, v)| Tag::builder().key(k).value(v).build())
                    .collect(),
            ))
            .build()
    };
    let spot = prepared.plan.capacity_type == CapacityType::Spot;
    let (spot_strategy, on_demand_strategy) = if prepared.plan.prioritized {
        (
            SpotAllocationStrategy::CapacityOptimizedPrioritized,
            FleetOnDemandAllocationStrategy::Prioritized,
        )
    } else {
        (
            SpotAllocationStrategy::PriceCapacityOptimized,
            FleetOnDemandAllocationStrategy::LowestPrice,
        )
    };
    ec2.create_fleet()
        .r#type(FleetType::Instant)
        .set_launch_template_configs(Some(configs.collect()))
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(if spot {
                    DefaultTargetCapacityType::Spot
                } else {
                    DefaultTargetCapacityType::OnDemand
                })
                .build(),
        )
        .spot_options(
            SpotOptionsRequest::builder()
                .allocation_strategy(spot_strategy)
                .build(),
        )
        .on_demand_options(
            OnDemandOptionsRequest::builder()
                .allocation_strategy(on_demand_strategy)
                .build(),
        )
        .tag_specifications(tag_spec(ResourceType::Instance))
        .tag_specifications(tag_spec(ResourceType::Volume))
        .tag_specifications(tag_spec(ResourceType::Fleet))
        .set_context(prepared.context.clone())
}

impl AwsCloud {
    /// Launches one instance for `claim`: CreateFleet (instant) over the cheapest offerings.
    pub(super) async fn launch_one(
        &self,
        claim: &NodeClaim,
        class: &EC2NodeClass,
        types: &[Arc<InstanceType>],
    ) -> Result<(Launched, Arc<InstanceType>), CloudError> {
        let prepared = prepare(&self.cluster, claim, class, types, |status, t, zone| {
            self.reservations
                .usable(&status.capacity_reservations, t, zone)
                .into_iter()
                .map(|r| r.id.clone())
                .collect()
        })?;
        let mut sent = Vec::new();
        for group in &prepared.groups {
            sent.push(Sent {
                template: self.ensure_template(&group.content).await?,
                image_id: group.content.image_id.clone(),
                capacity_reservation_id: group.capacity_reservation_id.clone(),
            });
        }
        let out = metered(
            &self.metrics,
            "ec2",
            "CreateFleet",
            fleet_request(&self.ec2, &prepared, &sent).send(),
        )
        .await?;
        let status = class.status.clone().unwrap_or_default();
        let outcome = interpret(&out, &sent, prepared.plan.capacity_type, &status);
        let now = Instant::now();
        for id in &outcome.full_reservations {
            self.reservations.set(id, 0, now);
        }
        for (itype, zone, _) in &outcome.no_capacity {
            self.unavailable
                .mark(itype, zone, prepared.plan.capacity_type, now);
        }
        let launched = outcome.result(prepared.plan.overrides.len())?;
        if let Some(id) = &launched.capacity_reservation_id {
            self.reservations.took_one(id);
        }
        let chosen = types
            .iter()
            .find(|t| t.name == launched.instance_type)
            .cloned()
            .ok_or_else(|| CloudError::NotFound {
                what: format!(
                    "instance type {} (EC2 launched it, the NodeClaim was not offered it)",
                    launched.instance_type
                ),
            })?;
        let price = prepared
            .plan
            .overrides
            .iter()
            .find(|o| o.instance_type == launched.instance_type && o.zone == launched.zone)
            .map_or(0.0, |o| o.price);
        tracing::info!(
            nodeclaim = %claim.name_any(),
            instance = %launched.provider_id,
            instance_type = %launched.instance_type,
            zone = %launched.zone,
            capacity_type = %launched.capacity_type,
            price_per_hour = price,
            offered = prepared.plan.overrides.len(),
            skipped_no_capacity = outcome.no_capacity.len(),
            "launched instance"
        );
        Ok((launched, chosen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::catalog::Catalog;
    use crate::core::scheduling::overhead::KubeletSettings;
    use serde_json::json;

    fn class(family: &str, amis: serde_json::Value) -> EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"amiFamily": family, "amiSelectorTerms": [{"id": "ami-any"}],
                     "subnetSelectorTerms": [{"id": "subnet-a"}], "securityGroupSelectorTerms": [{"id": "sg-1"}]},
            "status": {"amis": amis, "instanceProfile": "profile",
                       "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}],
                       "securityGroups": [{"id": "sg-1"}],
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                       "lastTransitionTime": "2026-12-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    fn claim(types: &[&str], gpus: u32) -> NodeClaim {
        let mut requests = json!({"cpu": "1"});
        if gpus > 0 {
            requests["nvidia.com/gpu"] = json!(gpus.to_string());
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "general"}},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [
                         {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
                         {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                     "resources": {"requests": requests}}
        }))
        .unwrap()
    }

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "prod".into(),
            endpoint: "https://example".into(),
            certificate_authority: "Q0E=".into(),
            service_cidr: "10.100.0.0/16".into(),
        }
    }

    fn types(family: crate::core::ami_family::Family) -> Vec<Arc<InstanceType>> {
        let kubelet = KubeletSettings {
            family,
            ..Default::default()
        };
        Catalog::embedded()
            .unwrap()
            .instance_types("us-east-1", &kubelet, None)
            .unwrap()
    }

    /// One standard and one NVIDIA image per architecture, as an al2023 alias resolves.
    fn variant_amis() -> serde_json::Value {
        json!([
            {"id": "ami-standard", "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-accelerator-count", "operator": "DoesNotExist"},
                {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"}]},
            {"id": "ami-nvidia", "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"}]}
        ])
    }

    fn launched_images(class: &EC2NodeClass, claim: &NodeClaim) -> Vec<String> {
        let types = types(Family::of(class));
        prepare(&cluster(), claim, class, &types, |_, _, _| vec![])
            .unwrap()
            .groups
            .iter()
            .map(|g| g.content.image_id.clone())
            .collect()
    }

    #[test]
    fn a_gpu_type_boots_the_image_with_its_drivers_and_a_plain_type_the_standard_one() {
        let class = class("AL2023", variant_amis());
        assert_eq!(
            launched_images(&class, &claim(&["m5.large", "g5.xlarge"], 0)),
            ["ami-standard"]
        );
        assert_eq!(
            launched_images(&class, &claim(&["m5.large", "g5.xlarge"], 1)),
            ["ami-nvidia"]
        );
    }

    #[test]
    fn each_family_writes_its_own_user_data_and_volumes() {
        let amis = json!([{"id": "ami-1", "requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]);
        let content = |family: &str| {
            let class = class(family, amis.clone());
            let types = types(Family::of(&class));
            prepare(
                &cluster(),
                &claim(&["m5.large"], 0),
                &class,
                &types,
                |_, _, _| vec![],
            )
            .unwrap()
            .groups[0]
                .content
                .clone()
        };
        let bottlerocket = content("Bottlerocket");
        assert!(bottlerocket.user_data.starts_with("[settings.kubernetes]"));
        assert_eq!(bottlerocket.block_device_mappings.len(), 2);
        let windows = content("Windows2022");
        assert!(windows.user_data.starts_with("<powershell>"));
        assert_eq!(
            windows.block_device_mappings[0].device_name.as_deref(),
            Some("/dev/sda1")
        );
        assert!(content("AL2")
            .user_data
            .contains("/etc/eks/bootstrap.sh 'prod'"));
        assert!(content("AL2023").user_data.contains("kind: NodeConfig"));
        let custom = content("Custom");
        assert_eq!(custom.user_data, "");
        assert!(custom.block_device_mappings.is_empty());
    }

    #[test]
    fn each_template_tells_the_kubelet_the_max_pods_the_model_gave_its_types() {
        let amis = json!([{"id": "ami-1", "requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]);
        let c = class("AL2023", amis.clone());
        let types = types(Family::AL2023);
        // m5.large: 29 pods; m5.4xlarge: 234 (ENI-limited, above nodeadm's own cap of 110).
        let prepared = prepare(
            &cluster(),
            &claim(&["m5.large", "m5.4xlarge"], 0),
            &c,
            &types,
            |_, _, _| vec![],
        )
        .unwrap();
        let mut pods: Vec<(String, bool)> = prepared
            .groups
            .iter()
            .map(|g| {
                let t = &g.overrides[0].instance_type;
                let expected = if t == "m5.large" { 29 } else { 234 };
                (
                    t.clone(),
                    g.content
                        .user_data
                        .contains(&format!("maxPods: {expected}")),
                )
            })
            .collect();
        pods.sort();
        assert_eq!(
            pods,
            [("m5.4xlarge".into(), true), ("m5.large".into(), true)]
        );
        // A class's own maxPods stands.
        let mut own = class("AL2023", amis);
        own.spec.kubelet = serde_json::from_value(json!({"maxPods": 58})).unwrap();
        let prepared = prepare(
            &cluster(),
            &claim(&["m5.large", "m5.4xlarge"], 0),
            &own,
            &types,
            |_, _, _| vec![],
        )
        .unwrap();
        assert!(prepared
            .groups
            .iter()
            .all(|g| g.content.user_data.contains("maxPods: 58")));
    }
}
