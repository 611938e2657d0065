//! The simulated cloud: instance types from a catalog, as an EC2NodeClass would see them, and
//! an in-process [`CloudProvider`] over them — it launches the cheapest offering a NodeClaim
//! allows, remembers its instances, records every launch and termination, and fails when a
//! test asks it to (an error for the next launches, no capacity for an offering). It is what
//! `jointer simulate` prices with and what the controllers' tests run against.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::{
    arch_requirement, CloudError, CloudProvider, InstanceState, InterruptionQueue, Launched,
    OwnedInstance, QueueMessage, Resolution, TypesOfClass,
};
use crate::api::conditions::class_not_ready;
use crate::api::ec2nodeclass::{ResolvedAmi, ResolvedSecurityGroup, ResolvedSubnet};
use crate::api::nodeclaim::{instance_key, NodeClaim};
use crate::cloud::class_types::{mark_unavailable, ClassTypes};
use crate::cloud::unavailable::Unavailable;
use crate::core::scheduling::{CapacityType, Requirements, Resources};

use crate::api::labels;
use crate::api::EC2NodeClass;
use crate::core::ami_family::Family;
use crate::core::catalog::{Catalog, CatalogError, PriceOverrides};
use crate::core::overlay::PoolOverlays;
use crate::core::scheduling::overhead::{kubelet_settings, KubeletSettings};
use crate::core::scheduling::InstanceType;

/// Where the instance types (and so the prices) of a simulation come from.
pub enum Source {
    /// The embedded catalog for a region; prices estimated unless overridden.
    Embedded {
        catalog: Catalog,
        region: String,
        prices: Option<PriceOverrides>,
    },
    /// A user-supplied catalog (allocatable derived per node class unless stated).
    User(Vec<crate::core::catalog::UserInstanceType>),
}

pub struct SimCloud {
    pub source: Source,
    state: Mutex<State>,
    /// Offerings left out after a capacity error, for 3 minutes as the AWS provider does.
    unavailable: Unavailable,
    built: ClassTypes<KubeletSettings>,
}

/// An instance the simulated cloud runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SimInstance {
    pub launched: Launched,
    pub nodeclaim: String,
    pub launched_at: Timestamp,
    pub state: InstanceState,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// By instance id.
    instances: BTreeMap<String, SimInstance>,
    /// Provider IDs, in termination order.
    terminated: Vec<String>,
    /// Errors the next launches fail with, in order.
    failing_launches: VecDeque<CloudError>,
    /// (instance type, zone, capacity type) EC2 would have no capacity for.
    scarce: BTreeSet<(String, String, CapacityType)>,
    launch_calls: usize,
    /// How long listing the owned instances takes (EC2 pages through hundreds of them).
    listing_delay: std::time::Duration,
}

/// Architectures the class's AMIs exist for (Windows AMIs are x86 only).
fn architectures(class: &EC2NodeClass) -> &'static [&'static str] {
    Family::of(class).architectures()
}

impl SimCloud {
    pub fn new(source: Source) -> SimCloud {
        SimCloud {
            source,
            state: Mutex::default(),
            unavailable: Unavailable::default(),
            built: ClassTypes::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock leaves consistent data behind.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next `launch` calls fail with these errors, in order.
    pub fn fail_next_launches(&self, errors: impl IntoIterator<Item = CloudError>) {
        self.state().failing_launches.extend(errors);
    }

    /// EC2 has no capacity for this offering: a launch that lands on it fails with
    /// insufficient capacity (and the offering is skipped afterwards).
    pub fn no_capacity(&self, instance_type: &str, zone: &str, capacity: CapacityType) {
        self.state()
            .scarce
            .insert((instance_type.into(), zone.into(), capacity));
    }

    /// Listing the owned instances takes this long from now on; what it returns is read at
    /// the end, as a slow DescribeInstances answers with what runs when it is done.
    pub fn slow_listing(&self, by: std::time::Duration) {
        self.state().listing_delay = by;
    }

    /// Every instance launched so far, terminated ones included.
    pub fn instances(&self) -> Vec<SimInstance> {
        self.state().instances.values().cloned().collect()
    }

    /// Provider IDs terminated so far, in order.
    pub fn terminated(&self) -> Vec<String> {
        self.state().terminated.clone()
    }

    /// How many times `launch` was called (failed calls included).
    pub fn launch_calls(&self) -> usize {
        self.state().launch_calls
    }

    /// The instance types of `class`, without offerings that ran out of capacity.
    fn offered(&self, class: &EC2NodeClass) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        let types = self
            .class_types(class)
            .map_err(|e| CloudError::ClassNotReady {
                class: class.name_any(),
                why: e.to_string(),
            })?;
        Ok(mark_unavailable(&types, &self.unavailable, Instant::now()))
    }

    /// The instance types nodes of `class` could be launched as (built again only when its
    /// kubelet settings or AMI family change).
    pub fn class_types(
        &self,
        class: &EC2NodeClass,
    ) -> Result<Vec<Arc<InstanceType>>, CatalogError> {
        let types =
            self.built
                .get_or_try_build(&class.name_any(), kubelet_settings(class), || {
                    self.build_types(class)
                })?;
        Ok(types.to_vec())
    }

    fn build_types(&self, class: &EC2NodeClass) -> Result<Vec<Arc<InstanceType>>, CatalogError> {
        match &self.source {
            Source::User(entries) => {
                crate::core::catalog::user_instance_types(entries, &kubelet_settings(class))
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

#[async_trait::async_trait]
impl CloudProvider for SimCloud {
    async fn instance_types(
        &self,
        classes: &[Arc<EC2NodeClass>],
    ) -> Result<TypesOfClass, CloudError> {
        classes
            .iter()
            .filter(|c| class_not_ready(c).is_none())
            .map(|c| Ok((c.name_any(), self.offered(c)?)))
            .collect()
    }

    async fn launch(
        &self,
        claim: &NodeClaim,
        class: &EC2NodeClass,
        overlays: &PoolOverlays,
    ) -> Result<(Launched, Arc<InstanceType>), CloudError> {
        if let Some(why) = class_not_ready(class) {
            return Err(CloudError::ClassNotReady {
                class: class.name_any(),
                why,
            });
        }
        let types = overlays.apply(&self.offered(class)?);
        let mut state = self.state();
        state.launch_calls += 1;
        if let Some(e) = state.failing_launches.pop_front() {
            return Err(e);
        }
        let requirements = Requirements::from_api(&claim.spec.requirements);
        let (requests, _) = Resources::from_quantities(&claim.spec.resources.requests);
        let cheapest = types
            .iter()
            .filter(|t| t.requirements.conflict(&requirements).is_none())
            .filter(|t| requests.fits_in(&t.allocatable))
            .filter_map(|t| Some((t, t.cheapest(&requirements)?.clone())))
            .min_by(|a, b| a.1.price.total_cmp(&b.1.price));
        let Some((t, offering)) = cheapest else {
            return Err(CloudError::NoOffering(format!(
                "no instance type of EC2NodeClass {} satisfies NodeClaim {}",
                class.name_any(),
                claim.name_any()
            )));
        };
        let key = (
            t.name.clone(),
            offering.zone.clone(),
            offering.capacity_type,
        );
        if state.scarce.contains(&key) {
            self.unavailable.mark(&key.0, &key.1, key.2, Instant::now());
            return Err(CloudError::InsufficientCapacity {
                offered: 1,
                errors: format!("{}/{}: InsufficientInstanceCapacity", t.name, offering.zone),
            });
        }
        state.next_id += 1;
        let id = format!("i-{:017x}", state.next_id);
        let status = class.status.clone().unwrap_or_default();
        let launched = Launched {
            provider_id: format!("sim:///{}/{id}", offering.zone),
            instance_type: t.name.clone(),
            zone: offering.zone.clone(),
            capacity_type: offering.capacity_type,
            // As the AWS provider picks it: the first image that suits the type.
            image_id: status
                .amis
                .iter()
                .find(|a| crate::core::ami_family::image_fits(&a.requirements, &t.requirements))
                .map(|a| a.id.clone()),
            subnet_id: status
                .subnets
                .iter()
                .find(|s| s.zone == offering.zone)
                .map(|s| s.id.clone()),
            security_groups: status
                .security_groups
                .iter()
                .map(|g| g.id.clone())
                .collect(),
            capacity_reservation_id: None,
            capacity_reservation_type: None,
            capacity_reservation_interruptible: None,
        };
        state.instances.insert(
            id,
            SimInstance {
                launched: launched.clone(),
                nodeclaim: claim.name_any(),
                launched_at: Timestamp::now(),
                state: InstanceState::Live,
            },
        );
        Ok((launched, t.clone()))
    }

    async fn find_launched(
        &self,
        claim: &str,
    ) -> Result<Option<(Launched, InstanceState)>, CloudError> {
        Ok(self
            .state()
            .instances
            .values()
            .filter(|i| i.nodeclaim == claim)
            .min_by_key(|i| i.state != InstanceState::Live)
            .map(|i| (i.launched.clone(), i.state)))
    }

    async fn instance_state(&self, provider_id: &str) -> Result<InstanceState, CloudError> {
        Ok(self
            .state()
            .instances
            .get(instance_key(provider_id))
            .map_or(InstanceState::Gone, |i| i.state))
    }

    async fn terminate(&self, provider_ids: &[String]) -> Result<(), CloudError> {
        let mut state = self.state();
        for p in provider_ids {
            let live = state
                .instances
                .get_mut(instance_key(p))
                .filter(|i| i.state == InstanceState::Live);
            if let Some(i) = live {
                i.state = InstanceState::Gone;
                state.terminated.push(p.clone());
            }
        }
        Ok(())
    }

    async fn owned_instances(&self) -> Result<Vec<OwnedInstance>, CloudError> {
        let delay = self.state().listing_delay;
        tokio::time::sleep(delay).await;
        Ok(self
            .state()
            .instances
            .values()
            .filter(|i| i.state == InstanceState::Live)
            .map(|i| OwnedInstance {
                provider_id: i.launched.provider_id.clone(),
                launched_at: i.launched_at,
                nodeclaim: Some(i.nodeclaim.clone()),
            })
            .collect())
    }

    fn offering_unavailable(&self, instance_type: &str, zone: &str, capacity: CapacityType) {
        self.unavailable
            .mark(instance_type, zone, capacity, Instant::now());
    }

    /// One subnet per zone the catalog offers, one security group, one AMI per architecture.
    async fn resolve(&self, class: &EC2NodeClass) -> Resolution {
        let types = self.class_types(class);
        let zones: BTreeSet<String> = types
            .iter()
            .flatten()
            .flat_map(|t| t.offerings.iter().map(|o| o.zone.clone()))
            .collect();
        let subnets = if zones.is_empty() {
            Err("the catalog offers no zone".to_string())
        } else {
            Ok(zones
                .iter()
                .map(|z| ResolvedSubnet {
                    id: format!("subnet-sim-{z}"),
                    zone: z.clone(),
                    zone_id: None,
                })
                .collect())
        };
        Resolution {
            subnets,
            security_groups: Ok(vec![ResolvedSecurityGroup {
                id: "sg-sim".into(),
                name: Some("sim".into()),
            }]),
            amis: Ok(architectures(class)
                .iter()
                .map(|arch| ResolvedAmi {
                    deprecated: None,
                    id: format!("ami-sim-{arch}"),
                    name: Some(format!("sim {arch}")),
                    requirements: vec![arch_requirement(arch)],
                })
                .collect()),
            instance_profile: Ok(format!("sim-{}", class.name_any())),
            capacity_reservations: Ok(Vec::new()),
        }
    }

    async fn release(&self, _class: &EC2NodeClass) -> Result<(), CloudError> {
        Ok(())
    }
}

/// An in-process interruption queue: what a test sends is received, and stays pending until it
/// is acknowledged; as on SQS, a message received and not acknowledged within the visibility
/// timeout (30 s unless set) is received again.
pub struct SimQueue {
    /// Each message, and until when it is invisible (received, not yet acknowledged).
    messages: Mutex<Vec<(QueueMessage, Option<std::time::Instant>)>>,
    next: std::sync::atomic::AtomicU64,
    visibility_timeout: std::time::Duration,
}

impl Default for SimQueue {
    fn default() -> SimQueue {
        SimQueue::with_visibility_timeout(std::time::Duration::from_secs(30))
    }
}

impl SimQueue {
    pub fn with_visibility_timeout(visibility_timeout: std::time::Duration) -> SimQueue {
        SimQueue {
            messages: Mutex::default(),
            next: std::sync::atomic::AtomicU64::new(0),
            visibility_timeout,
        }
    }

    /// Puts an EventBridge event on the queue.
    pub fn send(&self, body: &str) {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let message = QueueMessage {
            body: body.to_string(),
            receipt: format!("receipt-{n}"),
        };
        self.lock().push((message, None));
    }

    /// Messages sent and not yet acknowledged.
    pub fn pending(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(QueueMessage, Option<std::time::Instant>)>> {
        self.messages.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait::async_trait]
impl InterruptionQueue for SimQueue {
    async fn receive(&self) -> Result<Vec<QueueMessage>, CloudError> {
        let now = std::time::Instant::now();
        let batch: Vec<QueueMessage> = {
            let mut messages = self.lock();
            messages
                .iter_mut()
                .filter(|(_, invisible_until)| invisible_until.is_none_or(|t| t <= now))
                .take(10)
                .map(|(m, invisible_until)| {
                    *invisible_until = Some(now + self.visibility_timeout);
                    m.clone()
                })
                .collect()
        };
        if batch.is_empty() {
            // A long poll that found nothing.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        Ok(batch)
    }

    async fn acknowledge(&self, receipts: &[String]) -> Result<(), CloudError> {
        self.lock().retain(|(m, _)| !receipts.contains(&m.receipt));
        Ok(())
    }
}
