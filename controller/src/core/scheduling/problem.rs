//! The solver's input and output, as plain data.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::sync::{Arc, OnceLock};

use super::instance_type::{Buyable, CapacityType, InstanceType, Offering};
use super::pod::{untolerated, PodKey, SchedPod};
use super::requirements::{type_satisfies, Requirements};
use super::resources::{format_amount, Resources};
use super::topology::TopologyRejection;
use crate::api::labels::{CAPACITY_TYPE, HOSTNAME, ZONE};
use crate::api::Taint;

/// Upper bounds from `NodePool.spec.limits` (None: unlimited).
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    pub cpu: Option<i64>,
    pub memory: Option<i64>,
    pub nodes: Option<i64>,
}

/// A NodePool, resolved: requirements (including its template labels), taints, the instance
/// types its EC2NodeClass can launch, and what it already uses.
#[derive(Debug, Clone)]
pub struct PoolInput {
    pub name: String,
    pub weight: i32,
    /// Pool requirements, template labels (as `In [v]`) and `karpenter.sh/nodepool`.
    pub requirements: Requirements,
    /// Labels nodes of this pool carry (template labels and the pool name).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub instance_types: Vec<Arc<InstanceType>>,
    /// Requests of the DaemonSet pods that will run on every node of this pool.
    pub daemon_overhead: Resources,
    pub limits: Limits,
    /// Capacity of this pool's existing and in-flight nodes (counted against limits).
    pub in_use: Resources,
    pub nodes_in_use: i64,
    /// A static pool's node count (`spec.replicas`): it is kept at that count, not
    /// provisioned for pods.
    pub replicas: Option<i64>,
    /// [`PoolInput::admitted`], made at first use and kept. Leave it `Default::default()`.
    pub admitted: OnceLock<AdmittedTypes>,
}

/// The instance types a node of a pool can be: they satisfy its requirements and have an
/// offering it allows.
#[derive(Debug, Clone)]
pub struct AdmittedTypes {
    /// Cheapest (allowed) offering first; ties by name, for determinism.
    pub types: Vec<Arc<InstanceType>>,
    /// Label keys the types define (so a pod may require them).
    pub keys: HashSet<String>,
}

impl PoolInput {
    /// Whether the pool's nodes could hold the pod at all, its requests aside: every taint
    /// tolerated and, when it has required node affinity, one of its terms compatible with
    /// the pool's requirements (and so its template labels).
    pub fn may_take(&self, pod: &SchedPod) -> bool {
        untolerated(&self.taints, &pod.tolerations).is_none()
            && (pod.node_terms.is_empty()
                || pod
                    .node_terms
                    .iter()
                    .any(|t| t.conflict(&self.requirements).is_none()))
    }

    pub fn admitted(&self) -> &AdmittedTypes {
        self.admitted.get_or_init(|| {
            let provided: HashSet<String> = self
                .instance_types
                .iter()
                .flat_map(|t| t.requirements.iter().map(|(k, _)| k.clone()))
                .collect();
            let mut types: Vec<(f64, &Arc<InstanceType>)> = self
                .instance_types
                .iter()
                .filter(|t| type_satisfies(&t.requirements, &self.requirements, &provided))
                .filter_map(|t| t.cheapest(&self.requirements).map(|o| (o.price, t)))
                .collect();
            types.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
            let keys = types
                .iter()
                .flat_map(|(_, t)| t.requirements.iter().map(|(k, _)| k.clone()))
                .collect();
            AdmittedTypes {
                types: types.into_iter().map(|(_, t)| t.clone()).collect(),
                keys,
            }
        })
    }

    /// The pool with only the types it can have for less than `price` an hour (at the
    /// cheapest offering it allows). A consolidation's new nodes must cost less than the nodes
    /// they replace, so a simulation need not try the dearer types: at a thousand nodes,
    /// pricing them for every candidate is most of single-node consolidation's time.
    pub fn cheaper_than(&self, price: f64) -> PoolInput {
        let types = self.types_cheaper_than(price).to_vec();
        PoolInput {
            instance_types: types.clone(),
            admitted: OnceLock::from(AdmittedTypes {
                types,
                keys: self.admitted().keys.clone(),
            }),
            ..self.clone()
        }
    }

    /// The admitted types the pool can have for less than `price` an hour, cheapest first.
    pub fn types_cheaper_than(&self, price: f64) -> &[Arc<InstanceType>] {
        let types = &self.admitted().types;
        let buyable = Buyable::of(&self.requirements);
        // Sorted cheapest first, so the cheaper ones are a prefix.
        let cheaper =
            types.partition_point(|t| t.cheapest_of(buyable).is_some_and(|o| o.price < price));
        &types[..cheaper]
    }
}

/// A node that exists (or a NodeClaim in flight), with what is already on it.
#[derive(Debug, Clone)]
pub struct ExistingNode {
    pub name: String,
    pub pool: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub allocatable: Resources,
    /// Requests of the pods already bound (DaemonSets included).
    pub requested: Resources,
    pub pods: Vec<SchedPod>,
    /// `labels` as requirements, made at first use ([`ExistingNode::requirements`]) and kept:
    /// the same node is solved over again in every simulation of a disruption pass. Leave it
    /// `Default::default()`.
    pub label_requirements: OnceLock<Requirements>,
}

impl ExistingNode {
    /// What the node offers a pod's node selector and affinity: its labels.
    pub fn requirements(&self) -> &Requirements {
        self.label_requirements
            .get_or_init(|| Requirements::from_labels(&self.labels))
    }
}

/// What `MIN_VALUES_POLICY` and `PREFERENCE_POLICY` choose (upstream's settings).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policies {
    pub min_values: MinValuesPolicy,
    pub preferences: PreferencePolicy,
    /// Never regroup pods into more NodeClaims than the heuristic made: consolidation asks
    /// whether a node's pods fit on one cheaper node, and a cheaper split into two would turn
    /// that replacement into a refusal. Provisioning leaves it off.
    pub keep_node_count: bool,
    pub order: PodOrder,
}

/// The order pods are placed in and which existing node each takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PodOrder {
    /// Biggest first (upstream's order), each on the first node that takes it: dense.
    #[default]
    Packing,
    /// As kube-scheduler's default profile binds pods the drain evicts: biggest first (its
    /// queue order among equal priorities is arrival, and the drain evicts a node's biggest
    /// pods first, a size a pass: `core::drain::pass_steps`), each on the node that takes it
    /// with the most room left (NodeResourcesFit `LeastAllocated`), which need not be where
    /// the plan put it.
    KubeScheduler,
}

/// `Strict`: a NodeClaim that cannot offer `minValues` distinct values is not made.
/// `BestEffort`: it is made with as many as there are, and says so
/// (`karpenter.sh/nodeclaim-min-values-relaxed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MinValuesPolicy {
    #[default]
    #[value(name = "Strict")]
    Strict,
    #[value(name = "BestEffort")]
    BestEffort,
}

/// `Respect`: preferences (preferred affinities, ScheduleAnyway spreads) are tried first
/// and relaxed only when they cannot be met. `Ignore`: they are not considered at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PreferencePolicy {
    #[default]
    #[value(name = "Respect")]
    Respect,
    #[value(name = "Ignore")]
    Ignore,
}

#[derive(Debug, Clone, Default)]
pub struct Problem {
    /// Shared, like `existing`: every simulation of a disruption pass solves over the same
    /// pools, so each pool's admitted instance types are made once for all of them.
    pub pools: Vec<Arc<PoolInput>>,
    /// Shared: a disruption simulation leaves some nodes out of the same cluster many times a
    /// pass, and copying a thousand nodes with their pods each time was most of its cost.
    pub existing: Vec<Arc<ExistingNode>>,
    pub pods: Vec<SchedPod>,
}

/// A node to launch: its pool, requirements, pods, and the instance types that fit them all,
/// cheapest first.
#[derive(Debug, Clone)]
pub struct NodeClaimPlan {
    pub pool: String,
    pub hostname: String,
    pub requirements: Requirements,
    pub instance_types: Vec<Arc<InstanceType>>,
    pub pods: Vec<PodKey>,
    /// Pods plus DaemonSet overhead.
    pub requests: Resources,
    /// `MIN_VALUES_POLICY=BestEffort` lowered a `minValues` to what the types could offer.
    pub min_values_relaxed: bool,
}

/// What would be bought: a type and an offering.
#[derive(Debug, Clone)]
pub struct LaunchChoice<'a> {
    pub instance_type: &'a InstanceType,
    pub offering: &'a Offering,
}

impl LaunchChoice<'_> {
    /// The labels a node launched as this choice carries: its pool's (`pool_labels`), the
    /// type's single-valued requirements, the offering's zone and capacity type, and
    /// `hostname`.
    pub fn node_labels(
        &self,
        pool_labels: &BTreeMap<String, String>,
        hostname: &str,
    ) -> BTreeMap<String, String> {
        let mut labels = pool_labels.clone();
        for (key, req) in self.instance_type.requirements.iter() {
            if let Some(v) = req.single_value() {
                labels.insert(key.clone(), v.clone());
            }
        }
        labels.insert(ZONE.into(), self.offering.zone.clone());
        labels.insert(
            CAPACITY_TYPE.into(),
            self.offering.capacity_type.as_str().into(),
        );
        labels.insert(HOSTNAME.into(), hostname.to_string());
        labels
    }
}

impl NodeClaimPlan {
    /// The offering a launch would use: reserved capacity first, otherwise the cheapest
    /// offering (spot dearer than on-demand is never chosen, since the cheapest wins).
    pub fn launch_choice(&self) -> Option<LaunchChoice<'_>> {
        let buyable = Buyable::of(&self.requirements);
        let offerings = self.instance_types.iter().flat_map(move |t| {
            t.offerings
                .iter()
                .filter(move |o| o.available && buyable.allows(o))
                .map(move |o| (t.as_ref(), o))
        });
        offerings
            .min_by(|(_, a), (_, b)| {
                (a.capacity_type != CapacityType::Reserved)
                    .cmp(&(b.capacity_type != CapacityType::Reserved))
                    .then(a.price.total_cmp(&b.price))
            })
            .map(|(instance_type, offering)| LaunchChoice {
                instance_type,
                offering,
            })
    }

    /// Distinct values of `key` among the remaining instance types (for `minValues`).
    pub fn distinct_values(&self, key: &str) -> BTreeSet<String> {
        self.instance_types
            .iter()
            .filter_map(|t| t.requirements.get(key).and_then(|r| r.values()))
            .flatten()
            .cloned()
            .collect()
    }
}

/// Why one NodePool (or the existing nodes) cannot take a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// The pool's taint is not tolerated.
    Taint(String),
    /// The pool's requirement on `key` and the pod's cannot both hold.
    Requirement {
        key: String,
        pool: String,
        pod: String,
    },
    /// The pod needs a label the pool's nodes will not have.
    MissingLabel {
        key: String,
        pod: String,
    },
    /// No instance type is large enough; the closest one and what it lacks.
    NoInstanceTypeFits {
        closest: Option<String>,
        shortfalls: Vec<(&'static str, i64, i64)>,
    },
    /// No instance type (of the ones the requirements allow) is left at all.
    NoInstanceTypes,
    /// None of the instance types the pool allows has any of this resource.
    NotProvided(&'static str),
    /// The pod requests a resource no instance type provides.
    UnknownResource(String),
    MinValues {
        key: String,
        needed: usize,
        available: usize,
    },
    Limit {
        resource: &'static str,
        limit: i64,
        in_use: i64,
    },
    Topology(TopologyRejection),
    HostPort(i32),
}

impl Rejection {
    /// Whether the node will refuse the pod's constraint signature forever, whatever its
    /// requests: taints, labels and host ports of a node never change, and the pods whose
    /// presence triggers anti-affinity (or a hostname spread, whose minimum stays 0) are never
    /// removed during a solve.
    pub fn is_permanent(&self) -> bool {
        match self {
            Rejection::Taint(_)
            | Rejection::Requirement { .. }
            | Rejection::MissingLabel { .. }
            | Rejection::HostPort(_)
            | Rejection::UnknownResource(_) => true,
            Rejection::Topology(
                TopologyRejection::AntiAffinity { .. }
                | TopologyRejection::ExcludedByOthers { .. }
                | TopologyRejection::UnknownDomain { .. },
            ) => true,
            // A node's count only grows, and a hostname spread balances against an empty node.
            Rejection::Topology(
                TopologyRejection::Spread { key, .. } | TopologyRejection::OrderDependent { key },
            ) => key == crate::api::labels::HOSTNAME,
            _ => false,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Taint(t) => write!(f, "taint {t} is not tolerated"),
            Rejection::NotProvided(r) => {
                write!(f, "none of the instance types it allows provides {r}")
            }
            Rejection::Requirement { key, pool, pod } => write!(
                f,
                "requirement {key}: the pool allows {pool}, the pod needs {pod}"
            ),
            Rejection::MissingLabel { key, pod } => write!(
                f,
                "the pod needs label {key} {pod}, which the pool's nodes do not carry"
            ),
            Rejection::NoInstanceTypeFits {
                closest: Some(name),
                shortfalls,
            } => {
                let parts: Vec<String> = shortfalls
                    .iter()
                    .map(|(r, need, have)| {
                        format!(
                            "{r} {} > {} allocatable (short by {})",
                            format_amount(r, *need),
                            format_amount(r, *have),
                            format_amount(r, need - have)
                        )
                    })
                    .collect();
                write!(
                    f,
                    "no instance type fits; closest is {name}: {}",
                    parts.join(", ")
                )
            }
            Rejection::NoInstanceTypeFits { closest: None, .. } => {
                f.write_str("no instance type fits")
            }
            Rejection::NoInstanceTypes => {
                f.write_str("no instance type satisfies its requirements")
            }
            Rejection::UnknownResource(r) => {
                write!(f, "resource {r} is provided by no instance type")
            }
            Rejection::MinValues {
                key,
                needed,
                available,
            } => write!(
                f,
                "minValues {needed} for {key} cannot be met: only {available} distinct values fit"
            ),
            Rejection::Limit {
                resource,
                limit,
                in_use,
            } => write!(
                f,
                "limit {resource} {} reached ({} in use or in flight)",
                format_amount(resource, *limit),
                format_amount(resource, *in_use)
            ),
            Rejection::Topology(t) => t.fmt(f),
            Rejection::HostPort(p) => write!(f, "host port {p} is already taken"),
        }
    }
}

/// A pod that cannot be placed, with every pool's reason.
#[derive(Debug, Clone)]
pub struct Unschedulable {
    pub pod: PodKey,
    /// (NodePool name, why not)
    pub reasons: Vec<(String, Rejection)>,
}

impl Unschedulable {
    /// One line for an Event or `jointer explain`.
    pub fn message(&self) -> String {
        if self.reasons.is_empty() {
            return "no NodePool is available (none exists, or none has a Ready node class)"
                .to_string();
        }
        let parts: Vec<String> = self
            .reasons
            .iter()
            .map(|(pool, r)| format!("NodePool {pool}: {r}"))
            .collect();
        parts.join("; ")
    }
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub nodeclaims: Vec<NodeClaimPlan>,
    /// Pods placed on existing nodes, by node name.
    pub existing: BTreeMap<String, Vec<PodKey>>,
    pub unschedulable: Vec<Unschedulable>,
    /// The order the solver placed the pods in. Every topology rule held at each placement
    /// against the pods placed before, so kube-scheduler binding in this order passes them
    /// all: the witness the checker verifies first (empty: none given).
    pub binding_order: Vec<PodKey>,
}

impl Plan {
    /// Total $/hour of the launch choices.
    pub fn price_per_hour(&self) -> f64 {
        self.nodeclaims
            .iter()
            .filter_map(|n| n.launch_choice())
            .map(|c| c.offering.price)
            .sum()
    }
}
