//! The AWS cloud provider: instance types and prices of the region, launch templates, EC2
//! CreateFleet for one NodeClaim at a time, and the instance calls the lifecycle needs.

pub mod fleet;
pub mod instance_types;
pub mod launch_template;
pub mod pricing;
pub mod reservations;
pub mod tags;
pub mod unavailable;
pub mod user_data;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_ec2::error::DisplayErrorContext;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, OnDemandOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use kube::ResourceExt;

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::Catalog;
use crate::runtime::metrics::Metrics;
use crate::scheduling::{CapacityType, InstanceType, Requirements, Resources};
use instance_types::RegionOfferings;
use reservations::Reservations;
use unavailable::Unavailable;
use user_data::ClusterInfo;

/// How long fetched instance types, zones and prices are used before they are fetched again.
const OFFERINGS_TTL: Duration = Duration::from_secs(300);
/// Tag naming the NodeClaim an instance was launched for: how a restarted controller finds
/// the instance of a launch whose result it never recorded.
pub const NODECLAIM_TAG: &str = "karpenter.sh/nodeclaim";

/// An instance launched (or found) for a NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct Launched {
    pub instance_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub image_id: Option<String>,
    pub subnet_id: Option<String>,
    /// Sorted.
    pub security_groups: Vec<String>,
    /// The capacity reservation it was launched into (capacity type `reserved`).
    pub capacity_reservation_id: Option<String>,
}

impl Launched {
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.zone, self.instance_id)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("EC2NodeClass {class} is not ready: {why}")]
    ClassNotReady { class: String, why: String },
    #[error(transparent)]
    NoOffering(#[from] fleet::NoOffering),
    #[error("EC2 had no capacity for any of the {offered} offerings ({errors}); they are skipped for 3 minutes")]
    InsufficientCapacity { offered: usize, errors: String },
    #[error("{0}")]
    Api(String),
}

pub struct AwsCloud {
    pub ec2: aws_sdk_ec2::Client,
    pricing: aws_sdk_pricing::Client,
    pub region: String,
    pub cluster: ClusterInfo,
    estimates: Catalog,
    pub unavailable: Unavailable,
    pub reservations: Reservations,
    offerings: tokio::sync::Mutex<Option<(Arc<RegionOfferings>, Instant)>>,
    /// Launch templates known to exist: name → id.
    templates: Mutex<BTreeMap<String, String>>,
    metrics: Arc<Metrics>,
}

fn api_error<E: std::error::Error + 'static>(
    what: &str,
    e: aws_sdk_ec2::error::SdkError<E>,
) -> LaunchError {
    LaunchError::Api(format!("{what}: {}", DisplayErrorContext(e)))
}

/// A launch template jointer made or found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Template {
    name: String,
    /// Unknown when another launch created it first and the answer named none.
    id: Option<String>,
}

/// What was launched from which template, by the template's id or name (EC2 answers with
/// either).
fn made_from(
    by_template: &BTreeMap<Template, (String, Option<String>)>,
    spec: Option<&aws_sdk_ec2::types::FleetLaunchTemplateSpecification>,
) -> Option<(String, Option<String>)> {
    let spec = spec?;
    by_template
        .iter()
        .find(|(t, _)| {
            spec.launch_template_name() == Some(t.name.as_str())
                || (t.id.is_some() && spec.launch_template_id() == t.id.as_deref())
        })
        .map(|(_, v)| v.clone())
}

/// The cluster's name, endpoint, CA and service CIDR (from eks:DescribeCluster; the endpoint
/// setting, when given, wins).
pub async fn describe_cluster(
    eks: &aws_sdk_eks::Client,
    name: &str,
    endpoint: Option<&str>,
) -> anyhow::Result<ClusterInfo> {
    let out = eks
        .describe_cluster()
        .name(name)
        .send()
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "eks:DescribeCluster {name}: {}",
                aws_sdk_eks::error::DisplayErrorContext(e)
            )
        })?;
    let cluster = out
        .cluster()
        .ok_or_else(|| anyhow::anyhow!("eks:DescribeCluster {name} returned no cluster"))?;
    let network = cluster.kubernetes_network_config();
    Ok(ClusterInfo {
        name: name.to_string(),
        endpoint: endpoint
            .map(str::to_string)
            .or_else(|| cluster.endpoint().map(str::to_string))
            .ok_or_else(|| anyhow::anyhow!("cluster {name} has no endpoint yet"))?,
        certificate_authority: cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .unwrap_or_default()
            .to_string(),
        service_cidr: network
            .and_then(|n| n.service_ipv4_cidr().or(n.service_ipv6_cidr()))
            .unwrap_or("10.100.0.0/16")
            .to_string(),
    })
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

/// The well-known labels of a node of `t` bought through `launched` (for the NodeClaim and,
/// at registration, the Node).
pub fn node_labels(t: &InstanceType, launched: &Launched) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = t
        .requirements
        .iter()
        .filter_map(|(k, r)| {
            let values = r.values()?;
            let value = values.iter().next().filter(|_| values.len() == 1)?;
            Some((k.clone(), value.clone()))
        })
        .collect();
    out.insert(labels::ZONE.into(), launched.zone.clone());
    out.insert(
        labels::CAPACITY_TYPE.into(),
        launched.capacity_type.to_string(),
    );
    out.insert(labels::INSTANCE_TYPE.into(), launched.instance_type.clone());
    if let Some(id) = &launched.capacity_reservation_id {
        out.insert(labels::CAPACITY_RESERVATION_ID.into(), id.clone());
    }
    out
}

impl AwsCloud {
    pub fn new(
        config: &aws_config::SdkConfig,
        region: &str,
        cluster: ClusterInfo,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<AwsCloud> {
        Ok(AwsCloud {
            ec2: aws_sdk_ec2::Client::new(config),
            pricing: pricing::pricing_client(config),
            region: region.to_string(),
            cluster,
            estimates: Catalog::embedded()?,
            unavailable: Unavailable::default(),
            reservations: Reservations::default(),
            offerings: tokio::sync::Mutex::new(None),
            templates: Mutex::new(BTreeMap::new()),
            metrics,
        })
    }

    /// The region's instance types, zones and prices, fetched again when older than 5 minutes.
    /// Prices AWS will not give (no pricing:GetProducts, a partition without the Pricing API)
    /// fall back to the embedded estimates with a warning; shapes and zones are required.
    pub async fn offerings(&self) -> Result<Arc<RegionOfferings>, LaunchError> {
        let mut cached = self.offerings.lock().await;
        if let Some((o, at)) = cached.as_ref() {
            if at.elapsed() < OFFERINGS_TTL {
                return Ok(o.clone());
            }
        }
        let shapes = instance_types::fetch_shapes(&self.ec2).await;
        self.metrics.call("ec2", "DescribeInstanceTypes", &shapes);
        let shapes = shapes.map_err(|e| api_error("ec2:DescribeInstanceTypes", e))?;
        let zones = instance_types::fetch_zones(&self.ec2).await;
        self.metrics
            .call("ec2", "DescribeInstanceTypeOfferings", &zones);
        let zones = zones.map_err(|e| api_error("ec2:DescribeInstanceTypeOfferings", e))?;
        let on_demand = pricing::on_demand(&self.pricing, &self.region, |_, _| {}).await;
        self.metrics.call("pricing", "GetProducts", &on_demand);
        let spot = pricing::spot(&self.ec2, |_, _| {}).await;
        self.metrics.call("ec2", "DescribeSpotPriceHistory", &spot);
        let previous = cached.as_ref().map(|(o, _)| o.clone());
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
        let fresh = Arc::new(RegionOfferings {
            region: self.region.clone(),
            shapes,
            zones,
            on_demand,
            spot,
        });
        *cached = Some((fresh.clone(), Instant::now()));
        Ok(fresh)
    }

    /// The instance types nodes of `class` can be launched as now.
    pub async fn instance_types(
        &self,
        class: &EC2NodeClass,
    ) -> Result<Vec<Arc<InstanceType>>, LaunchError> {
        let offerings = self.offerings().await?;
        self.refresh_reservations([class]).await;
        Ok(self.types_for(&offerings, class, Instant::now()))
    }

    fn types_for(
        &self,
        offerings: &RegionOfferings,
        class: &EC2NodeClass,
        now: Instant,
    ) -> Vec<Arc<InstanceType>> {
        offerings.for_class(
            class,
            &self.estimates,
            &self.unavailable,
            &self.reservations,
            now,
        )
    }

    /// Reads again how much room the reservations the classes select have, where that is
    /// older than a minute. A failed read leaves the previous figures (and is logged): the
    /// launch then finds out.
    async fn refresh_reservations<'a>(&self, classes: impl IntoIterator<Item = &'a EC2NodeClass>) {
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
        let out = self
            .ec2
            .describe_capacity_reservations()
            .set_capacity_reservation_ids(Some(stale.clone()))
            .send()
            .await;
        self.metrics
            .call("ec2", "DescribeCapacityReservations", &out);
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
                tracing::warn!(error = %DisplayErrorContext(e), "ec2:DescribeCapacityReservations failed; using the last known room")
            }
        }
    }

    /// The instance types of every Ready class, by class name (one offerings fetch for all).
    pub async fn types_of_ready_classes(
        &self,
        classes: &[Arc<EC2NodeClass>],
    ) -> Result<HashMap<String, Vec<Arc<InstanceType>>>, LaunchError> {
        let offerings = self.offerings().await?;
        let ready: Vec<&Arc<EC2NodeClass>> = classes
            .iter()
            .filter(|c| crate::provisioning::snapshot::class_not_ready(c).is_none())
            .collect();
        self.refresh_reservations(ready.iter().map(|c| c.as_ref()))
            .await;
        let now = Instant::now();
        Ok(ready
            .into_iter()
            .map(|c| (c.name_any(), self.types_for(&offerings, c, now)))
            .collect())
    }

    /// Creates the launch template unless one with that name exists.
    async fn ensure_template(
        &self,
        content: &launch_template::Content,
    ) -> Result<Template, LaunchError> {
        let name = content.name(&self.cluster.name);
        if let Some(id) = self
            .templates
            .lock()
            .ok()
            .and_then(|t| t.get(&name).cloned())
        {
            return Ok(Template { name, id: Some(id) });
        }
        let found = self
            .ec2
            .describe_launch_templates()
            .launch_template_names(&name)
            .send()
            .await;
        self.metrics.call("ec2", "DescribeLaunchTemplates", &found);
        let mut id = match found {
            Ok(out) => out
                .launch_templates()
                .first()
                .and_then(|t| t.launch_template_id())
                .map(str::to_string),
            Err(e)
                if e.as_service_error()
                    .and_then(|s| s.meta().code())
                    .is_some_and(|c| c.contains("NotFound")) =>
            {
                None
            }
            Err(e) => return Err(api_error("ec2:DescribeLaunchTemplates", e)),
        };
        if id.is_none() {
            let created = self
                .ec2
                .create_launch_template()
                .launch_template_name(&name)
                .launch_template_data(content.request())
                .tag_specifications(content.tag_specification())
                .send()
                .await;
            self.metrics.call("ec2", "CreateLaunchTemplate", &created);
            match created {
                Ok(out) => {
                    id = out
                        .launch_template()
                        .and_then(|t| t.launch_template_id())
                        .map(str::to_string);
                    tracing::info!(launch_template = %name, image = %content.image_id, "launch template created")
                }
                // Another launch made it first: the same content, so the same template.
                Err(e)
                    if e.as_service_error()
                        .and_then(|s| s.meta().code())
                        .is_some_and(|c| c.contains("AlreadyExists")) => {}
                Err(e) => return Err(api_error("ec2:CreateLaunchTemplate", e)),
            }
        }
        if let (Some(id), Ok(mut t)) = (&id, self.templates.lock()) {
            t.insert(name.clone(), id.clone());
        }
        Ok(Template { name, id })
    }

    /// Tags for everything launched for `claim` (reference §7).
    fn tags(&self, claim: &NodeClaim, class: &EC2NodeClass) -> BTreeMap<String, String> {
        let mut tags = class.spec.tags.clone();
        let pool = claim
            .labels()
            .get(labels::NODEPOOL)
            .cloned()
            .unwrap_or_default();
        tags.insert(
            format!("kubernetes.io/cluster/{}", self.cluster.name),
            "owned".into(),
        );
        tags.insert(labels::NODEPOOL.into(), pool);
        tags.insert("eks:eks-cluster-name".into(), self.cluster.name.clone());
        tags.insert(labels::EC2NODECLASS.into(), class.name_any());
        tags
    }

    /// Launches one instance for `claim`: CreateFleet (instant) over the cheapest offerings.
    pub async fn launch(
        &self,
        claim: &NodeClaim,
        class: &EC2NodeClass,
    ) -> Result<(Launched, Arc<InstanceType>), LaunchError> {
        let class_name = class.name_any();
        let status = class.status.clone().unwrap_or_default();
        let not_ready = status
            .conditions
            .iter()
            .filter(|c| c.status == "False" && c.type_ != "Ready")
            .map(|c| c.message.clone())
            .collect::<Vec<_>>();
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let Some(profile) = status.instance_profile.clone().filter(|_| ready) else {
            return Err(LaunchError::ClassNotReady {
                class: class_name,
                why: if not_ready.is_empty() {
                    "not resolved yet".into()
                } else {
                    not_ready.join("; ")
                },
            });
        };
        let types = self.instance_types(class).await?;
        let requirements = Requirements::from_api(&claim.spec.requirements);
        let (requests, _) = Resources::from_quantities(&claim.spec.resources.requests);
        let plan = fleet::plan(&requirements, &requests, &types, &status.subnets)?;

        let mut taints = claim.spec.taints.clone();
        taints.extend(claim.spec.startup_taints.iter().cloned());
        let labels = claim.labels().clone();
        let data = user_data::al2023(
            &self.cluster,
            &user_data::NodeSettings {
                kubelet: class.spec.kubelet.as_ref(),
                labels: &labels,
                taints: &taints,
            },
            class.spec.user_data.as_deref(),
        )
        .map_err(|e| LaunchError::Api(format!("EC2NodeClass {class_name}: {e}")))?;
        let tags = self.tags(claim, class);
        let image_of_arch = |arch: &str| {
            status.amis.iter().find(|a| {
                a.requirements.iter().any(|r| {
                    r.key == labels::ARCH
                        && r.values
                            .as_ref()
                            .is_some_and(|v| v.iter().any(|x| x == arch))
                })
            })
        };
        // One launch template per architecture; launching into capacity reservations, one per
        // (override, reservation): EC2 takes the reservation from the template.
        let mut groups: Vec<(&str, Option<&str>, Vec<&fleet::Override>)> = Vec::new();
        if plan.capacity_type == CapacityType::Reserved {
            for o in &plan.overrides {
                for r in self.reservations.usable(
                    &status.capacity_reservations,
                    &o.instance_type,
                    &o.zone,
                ) {
                    groups.push((o.arch.as_str(), Some(r.id.as_str()), vec![o]));
                }
            }
        } else {
            let archs: BTreeSet<&str> = plan.overrides.iter().map(|o| o.arch.as_str()).collect();
            for arch in archs {
                let of_arch = plan.overrides.iter().filter(|o| o.arch == arch).collect();
                groups.push((arch, None, of_arch));
            }
        }
        let mut configs = Vec::new();
        // Template → (AMI, capacity reservation).
        let mut by_template: BTreeMap<Template, (String, Option<String>)> = BTreeMap::new();

        for (arch, reservation, overrides) in groups {
            let Some(ami) = image_of_arch(arch) else {
                continue;
            };
            let content = launch_template::Content {
                image_id: ami.id.clone(),
                instance_profile: profile.clone(),
                security_group_ids: status
                    .security_groups
                    .iter()
                    .map(|s| s.id.clone())
                    .collect(),
                user_data: data.clone(),
                metadata_options: class.spec.metadata_options.clone(),
                block_device_mappings: class.spec.block_device_mappings.clone(),
                detailed_monitoring: class.spec.detailed_monitoring.unwrap_or(false),
                associate_public_ip_address: class.spec.associate_public_ip_address,
                tags: tags.clone(),
                capacity_reservation_id: reservation.map(str::to_string),
            }
            .with_default_volumes();
            let template = self.ensure_template(&content).await?;
            let name = template.name.clone();
            by_template.insert(template, (ami.id.clone(), reservation.map(str::to_string)));
            let overrides = overrides
                .into_iter()
                .map(|o| {
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type(aws_sdk_ec2::types::InstanceType::from(
                            o.instance_type.as_str(),
                        ))
                        .subnet_id(&o.subnet_id)
                        .availability_zone(&o.zone)
                        .build()
                })
                .collect();
            configs.push(
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(&name)
                            .version("$Latest")
                            .build(),
                    )
                    .set_overrides(Some(overrides))
                    .build(),
            );
        }
        if configs.is_empty() {
            return Err(LaunchError::ClassNotReady {
                class: class_name,
                why: "no AMI for the architectures of the instance types that fit".into(),
            });
        }
        let mut instance_tags = tags.clone();
        instance_tags.insert(NODECLAIM_TAG.into(), claim.name_any());
        instance_tags.insert("Name".into(), claim.name_any());
        let tag_spec = |rt: ResourceType| {
            TagSpecification::builder()
                .resource_type(rt)
                .set_tags(Some(
                    instance_tags
                        .iter()
                        .map(|(k, v)| Tag::builder().key(k).value(v).build())
                        .collect(),
                ))
                .build()
        };
        let spot = plan.capacity_type == CapacityType::Spot;
        let out = self
            .ec2
            .create_fleet()
            .r#type(FleetType::Instant)
            .set_launch_template_configs(Some(configs))
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
                    .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                    .build(),
            )
            .on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                    .build(),
            )
            .tag_specifications(tag_spec(ResourceType::Instance))
            .tag_specifications(tag_spec(ResourceType::Volume))
            .tag_specifications(tag_spec(ResourceType::Fleet))
            .send()
            .await;
        self.metrics.call("ec2", "CreateFleet", &out);
        let out = out.map_err(|e| api_error("ec2:CreateFleet", e))?;

        let zone_of_subnet: BTreeMap<&str, &str> = status
            .subnets
            .iter()
            .map(|s| (s.id.as_str(), s.zone.as_str()))
            .collect();
        let mut capacity_errors = Vec::new();
        let mut other_errors = Vec::new();
        for err in out.errors() {
            let o = err
                .launch_template_and_overrides()
                .and_then(|l| l.overrides());
            let itype = o
                .and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_string())
                .unwrap_or_default();
            let zone = zone_of(o, &zone_of_subnet);
            let code = err.error_code().unwrap_or("Unknown").to_string();
            if code == "ReservationCapacityExceeded" {
                let spec = err
                    .launch_template_and_overrides()
                    .and_then(|l| l.launch_template_specification());
                if let Some((_, Some(id))) = made_from(&by_template, spec) {
                    self.reservations.set(&id, 0, Instant::now());
                }
            }
            if unavailable::is_capacity_error(&code) {
                self.unavailable
                    .mark(&itype, &zone, plan.capacity_type, Instant::now());
                capacity_errors.push(format!("{itype}/{zone}: {code}"));
            } else {
                other_errors.push(format!(
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
            return Err(if other_errors.is_empty() {
                LaunchError::InsufficientCapacity {
                    offered: plan.overrides.len(),
                    errors: capacity_errors.join(", "),
                }
            } else {
                LaunchError::Api(format!(
                    "ec2:CreateFleet launched nothing: {}",
                    other_errors.join("; ")
                ))
            });
        };
        let o = instance
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let instance_type = instance
            .instance_type()
            .map(|t| t.as_str().to_string())
            .or_else(|| {
                o.and_then(|o| o.instance_type())
                    .map(|t| t.as_str().to_string())
            })
            .unwrap_or_default();
        let zone = zone_of(o, &zone_of_subnet);
        let (image_id, capacity_reservation_id) = made_from(
            &by_template,
            instance
                .launch_template_and_overrides()
                .and_then(|l| l.launch_template_specification()),
        )
        .unzip();
        let launched = Launched {
            instance_id: instance.instance_ids()[0].clone(),
            instance_type: instance_type.clone(),
            zone,
            capacity_type: plan.capacity_type,
            image_id,
            subnet_id: o.and_then(|o| o.subnet_id()).map(str::to_string),
            security_groups: {
                let mut ids: Vec<String> = status
                    .security_groups
                    .iter()
                    .map(|s| s.id.clone())
                    .collect();
                ids.sort();
                ids
            },
            capacity_reservation_id: capacity_reservation_id.flatten(),
        };
        if let Some(id) = &launched.capacity_reservation_id {
            self.reservations.took_one(id);
        }
        let chosen = types
            .iter()
            .find(|t| t.name == instance_type)
            .cloned()
            .ok_or_else(|| {
                LaunchError::Api(format!(
                    "EC2 launched {instance_type}, which was not offered"
                ))
            })?;
        let price = plan
            .overrides
            .iter()
            .find(|o| o.instance_type == instance_type && o.zone == launched.zone)
            .map_or(0.0, |o| o.price);
        tracing::info!(
            nodeclaim = %claim.name_any(),
            instance = %launched.instance_id,
            instance_type = %instance_type,
            zone = %launched.zone,
            capacity_type = %launched.capacity_type,
            price_per_hour = price,
            offered = plan.overrides.len(),
            skipped_no_capacity = capacity_errors.len(),
            "launched instance"
        );
        Ok((launched, chosen))
    }

    /// The live instance launched for `claim`, if a launch already happened (a crash may have
    /// lost its result).
    pub async fn find_launched(
        &self,
        claim: &str,
    ) -> Result<Option<(Launched, String)>, LaunchError> {
        let mut filters = tags::owned_instance_filters(&self.cluster.name, &["pending", "running"]);
        filters.push(
            aws_sdk_ec2::types::Filter::builder()
                .name(format!("tag:{NODECLAIM_TAG}"))
                .values(claim)
                .build(),
        );
        let out = self
            .ec2
            .describe_instances()
            .set_filters(Some(filters))
            .send()
            .await;
        self.metrics.call("ec2", "DescribeInstances", &out);
        let out = out.map_err(|e| api_error("ec2:DescribeInstances", e))?;
        let Some(i) = out.reservations().iter().flat_map(|r| r.instances()).next() else {
            return Ok(None);
        };
        let spot = i.instance_lifecycle().is_some_and(|l| l.as_str() == "spot");
        let itype = i
            .instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default();
        Ok(Some((
            Launched {
                instance_id: i.instance_id().unwrap_or_default().to_string(),
                instance_type: itype.clone(),
                zone: i
                    .placement()
                    .and_then(|p| p.availability_zone())
                    .unwrap_or_default()
                    .to_string(),
                capacity_type: if spot {
                    CapacityType::Spot
                } else if i.capacity_reservation_id().is_some() {
                    CapacityType::Reserved
                } else {
                    CapacityType::OnDemand
                },
                capacity_reservation_id: i.capacity_reservation_id().map(str::to_string),
                image_id: i.image_id().map(str::to_string),
                subnet_id: i.subnet_id().map(str::to_string),
                security_groups: {
                    let mut ids: Vec<String> = i
                        .security_groups()
                        .iter()
                        .filter_map(|g| g.group_id().map(str::to_string))
                        .collect();
                    ids.sort();
                    ids
                },
            },
            itype,
        )))
    }

    /// The instance's state name (`running`, `terminated`, …), None when EC2 no longer knows it.
    pub async fn instance_state(&self, instance_id: &str) -> Result<Option<String>, LaunchError> {
        let out = self
            .ec2
            .describe_instances()
            .instance_ids(instance_id)
            .send()
            .await;
        self.metrics.call("ec2", "DescribeInstances", &out);
        match out {
            Ok(out) => Ok(out
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .find_map(|i| {
                    i.state()
                        .and_then(|s| s.name())
                        .map(|n| n.as_str().to_string())
                })),
            Err(e)
                if e.as_service_error()
                    .and_then(|s| s.meta().code())
                    .is_some_and(|c| c.starts_with("InvalidInstanceID")) =>
            {
                Ok(None)
            }
            Err(e) => Err(api_error("ec2:DescribeInstances", e)),
        }
    }

    /// Terminates the instance; one EC2 no longer knows counts as terminated.
    pub async fn terminate(&self, instance_id: &str) -> Result<(), LaunchError> {
        let out = self
            .ec2
            .terminate_instances()
            .instance_ids(instance_id)
            .send()
            .await;
        self.metrics.call("ec2", "TerminateInstances", &out);
        match out {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .and_then(|s| s.meta().code())
                    .is_some_and(|c| c.starts_with("InvalidInstanceID")) =>
            {
                Ok(())
            }
            Err(e) => Err(api_error("ec2:TerminateInstances", e)),
        }
    }
}
