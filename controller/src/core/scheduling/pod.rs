//! Pods as the solver sees them: requests and every scheduling constraint, already parsed.
//! [`SchedPod::from_k8s`] converts a Kubernetes Pod; nothing downstream touches API types.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::requirements::{normalize_key, Requirement, Requirements};
use super::resources::{Resources, UnknownResource};
use crate::api::pod::{Container, Pod, PodSpec};
use crate::api::{labels, Operator, Quantity, TaintEffect};

/// `namespace/name`
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A label selector (matchLabels and matchExpressions), evaluated against pod labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Selector {
    /// (key, operator, values); matchLabels become `In [value]`.
    pub terms: Vec<(String, SelectorOp, Vec<String>)>,
    /// A missing (null) selector selects no pods at all, unlike an empty one.
    pub selects_nothing: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SelectorOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Selector {
    pub fn from_k8s(selector: &LabelSelector) -> Self {
        let mut terms = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            terms.push((k.clone(), SelectorOp::In, vec![v.clone()]));
        }
        for e in selector.match_expressions.iter().flatten() {
            let op = match e.operator.as_str() {
                "In" => SelectorOp::In,
                "NotIn" => SelectorOp::NotIn,
                "Exists" => SelectorOp::Exists,
                _ => SelectorOp::DoesNotExist,
            };
            terms.push((e.key.clone(), op, e.values.clone().unwrap_or_default()));
        }
        Selector {
            terms,
            selects_nothing: false,
        }
    }

    /// The selector of an absent `labelSelector`.
    pub fn nothing() -> Self {
        Selector {
            terms: Vec::new(),
            selects_nothing: true,
        }
    }

    /// `key In [value]`
    pub fn label(key: &str, value: &str) -> Self {
        Selector {
            terms: vec![(key.to_string(), SelectorOp::In, vec![value.to_string()])],
            selects_nothing: false,
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.selects_nothing
            && self.terms.iter().all(|(k, op, values)| {
                let v = labels.get(k);
                match op {
                    SelectorOp::In => v.is_some_and(|v| values.contains(v)),
                    SelectorOp::NotIn => v.is_none_or(|v| !values.contains(v)),
                    SelectorOp::Exists => v.is_some(),
                    SelectorOp::DoesNotExist => v.is_none(),
                }
            })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// None tolerates every key (with `Exists`).
    pub key: Option<String>,
    /// None: operator `Exists`; Some(v): operator `Equal` with value v.
    pub value: Option<String>,
    /// None tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    pub fn tolerates(&self, taint: &crate::api::Taint) -> bool {
        self.key.as_ref().is_none_or(|k| *k == taint.key)
            && self.effect.is_none_or(|e| e == taint.effect)
            && self.value.as_ref().is_none_or(|v| {
                Some(v) == taint.value.as_ref() || (v.is_empty() && taint.value.is_none())
            })
    }
}

/// Taints a pod does not tolerate; `PreferNoSchedule` never blocks.
pub fn untolerated<'a>(
    taints: &'a [crate::api::Taint],
    tolerations: &[Toleration],
) -> Option<&'a crate::api::Taint> {
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .find(|t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unsatisfiable {
    DoNotSchedule,
    ScheduleAnyway,
}

/// A topology spread constraint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopologySpread {
    pub max_skew: i64,
    pub topology_key: String,
    pub when_unsatisfiable: Unsatisfiable,
    pub selector: Selector,
    pub min_domains: Option<i64>,
    /// Count only domains the pod's node affinity allows (`nodeAffinityPolicy: Honor`, default).
    pub honor_node_affinity: bool,
    /// Count only domains whose nodes' taints the pod tolerates (`nodeTaintsPolicy: Honor`).
    pub honor_taints: bool,
}

/// A pod (anti-)affinity term: pods matching `selector` in `namespaces`, per `topology_key`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    pub topology_key: String,
    pub selector: Selector,
    /// Empty: the pod's own namespace.
    pub namespaces: Vec<String>,
}

/// Everything the solver needs to place one pod.
#[derive(Debug, Clone)]
pub struct SchedPod {
    pub key: PodKey,
    pub labels: BTreeMap<String, String>,
    pub requests: Resources,
    /// Requested resources no instance type is modelled to provide.
    pub unknown_resources: Vec<String>,
    /// Required node affinity: a node must satisfy one term (OR); each term already includes
    /// the nodeSelector and any volume topology. Empty = no constraint.
    pub node_terms: Vec<Requirements>,
    /// Preferred node affinity terms, strongest first (relaxed one by one if unschedulable).
    pub preferred_node: Vec<Requirements>,
    pub tolerations: Vec<Toleration>,
    pub spreads: Vec<TopologySpread>,
    pub affinity: Vec<AffinityTerm>,
    pub anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<AffinityTerm>,
    pub preferred_anti_affinity: Vec<AffinityTerm>,
    /// (protocol, hostIP, port) of containers' host ports.
    pub host_ports: Vec<(String, String, i32)>,
    /// Orders otherwise-equal pods (creation time, seconds).
    pub created: i64,
}

impl SchedPod {
    /// A hash of everything but the requests and identity that decides where the pod may go:
    /// pods with equal signatures are rejected by a node for the same request-independent
    /// reasons, which lets the solver skip nodes it already knows refuse them.
    pub fn constraint_signature(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.key.namespace.hash(&mut h);
        self.labels.hash(&mut h);
        self.node_terms.hash(&mut h);
        self.preferred_node.hash(&mut h);
        self.tolerations.hash(&mut h);
        self.spreads.hash(&mut h);
        self.affinity.hash(&mut h);
        self.anti_affinity.hash(&mut h);
        self.preferred_affinity.hash(&mut h);
        self.preferred_anti_affinity.hash(&mut h);
        self.host_ports.hash(&mut h);
        self.unknown_resources.hash(&mut h);
        h.finish()
    }
}

impl SchedPod {
    /// A pod with only resource requests.
    pub fn new(namespace: &str, name: &str, requests: Resources) -> Self {
        SchedPod {
            key: PodKey {
                namespace: namespace.into(),
                name: name.into(),
            },
            labels: BTreeMap::new(),
            requests: Resources {
                pods: 1,
                ..requests
            },
            unknown_resources: Vec::new(),
            node_terms: Vec::new(),
            preferred_node: Vec::new(),
            tolerations: Vec::new(),
            spreads: Vec::new(),
            affinity: Vec::new(),
            anti_affinity: Vec::new(),
            preferred_affinity: Vec::new(),
            preferred_anti_affinity: Vec::new(),
            host_ports: Vec::new(),
            created: 0,
        }
    }

    /// A required anti-affinity term on the hostname that selects the pod itself: no two
    /// such pods share a node.
    pub fn repels_itself_per_node(&self) -> bool {
        self.anti_affinity.iter().any(|t| {
            normalize_key(&t.topology_key) == labels::HOSTNAME
                && self.term_namespaces(t).contains(&self.key.namespace)
                && t.selector.matches(&self.labels)
        })
    }

    /// The namespaces an affinity term of this pod selects in.
    pub fn term_namespaces<'a>(&'a self, term: &'a AffinityTerm) -> &'a [String] {
        if term.namespaces.is_empty() {
            std::slice::from_ref(&self.key.namespace)
        } else {
            &term.namespaces
        }
    }

    /// Converts a Kubernetes pod. `volume_zones` is the zone requirement of its bound volumes
    /// (from PVs/StorageClasses), when the caller knows one.
    pub fn from_k8s(pod: &Pod, volume_zones: Option<&[String]>) -> Self {
        let mut out = SchedPod::bound(pod);
        let no_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&no_spec);
        let mut base = Requirements::new();
        for (k, v) in spec.node_selector.iter().flatten() {
            base.add(k, Requirement::any_of([v.clone()]));
        }
        if let Some(zones) = volume_zones {
            base.add(
                crate::api::labels::ZONE,
                Requirement::any_of(zones.iter().cloned()),
            );
        }
        let node_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref());
        let required = node_affinity.and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
        out.node_terms = match required {
            Some(sel) if !sel.node_selector_terms.is_empty() => sel
                .node_selector_terms
                .iter()
                .map(|term| {
                    let mut r = base.clone();
                    r.add_all(&node_selector_term(term));
                    r
                })
                .collect(),
            _ if base.is_empty() => Vec::new(),
            _ => vec![base],
        };
        let mut preferred: Vec<(i32, Requirements)> = node_affinity
            .and_then(|n| {
                n.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .into_iter()
            .flatten()
            .map(|p| (p.weight, node_selector_term(&p.preference)))
            .collect();
        preferred.sort_by_key(|(w, _)| -w);
        out.preferred_node = preferred.into_iter().map(|(_, r)| r).collect();

        out.tolerations = spec.tolerations.iter().flatten().map(toleration).collect();
        out.spreads = spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .map(|c| spread(c, &out.labels))
            .collect();
        if let Some(a) = spec.affinity.as_ref().and_then(|a| a.pod_affinity.as_ref()) {
            out.affinity = a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(affinity_term)
                .collect();
            out.preferred_affinity = weighted_terms(
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref(),
            );
        }
        out
    }

    /// A pod bound to a node, as the pods placed around it see it: its identity and labels
    /// (their selectors count it), what it uses (requests, host ports) and its anti-affinity
    /// (which holds newcomers off, as kube-scheduler's symmetry does). Where it may go is
    /// settled, so its node affinity, tolerations, spread and affinity are left out: at
    /// 10,000 bound pods, converting them every pass was a tenth of the controller's heap.
    pub fn bound(pod: &Pod) -> Self {
        let meta = &pod.metadata;
        let no_spec = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&no_spec);
        let (requests, unknown) = pod_requests(spec);
        let mut out = SchedPod::new(
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name
                .as_deref()
                .or(meta.generate_name.as_deref())
                .unwrap_or("<unnamed>"),
            requests,
        );
        out.unknown_resources = unknown.into_iter().map(|u| u.0).collect();
        out.labels = meta.labels.clone().unwrap_or_default();
        out.created = meta
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second());
        if let Some(a) = spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
        {
            out.anti_affinity = a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(affinity_term)
                .collect();
            out.preferred_anti_affinity = weighted_terms(
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref(),
            );
        }
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            for p in c.ports.iter().flatten() {
                if let Some(port) = p.host_port.filter(|p| *p > 0) {
                    out.host_ports.push((
                        p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                        p.host_ip.clone().unwrap_or_default(),
                        port,
                    ));
                }
            }
        }
        out
    }
}

fn quantities(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> (Resources, Vec<UnknownResource>) {
    let parsed: BTreeMap<String, Quantity> = list
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.0.parse::<Quantity>().ok().map(|q| (k.clone(), q)))
        .collect();
    Resources::from_quantities(&parsed)
}

fn container_requests(c: &Container) -> (Resources, Vec<UnknownResource>) {
    let res = c.resources.as_ref();
    // Kubernetes defaults a missing request to the limit.
    let requests = res.and_then(|r| r.requests.as_ref());
    let limits = res.and_then(|r| r.limits.as_ref());
    let mut merged = limits.cloned().unwrap_or_default();
    merged.extend(requests.cloned().unwrap_or_default());
    quantities(Some(&merged))
}

/// Effective requests: max(app containers + sidecars, each init container + the sidecars
/// started before it) + pod overhead, plus one pod slot.
pub fn pod_requests(spec: &PodSpec) -> (Resources, Vec<UnknownResource>) {
    let mut unknown = Vec::new();
    let mut app = Resources::ZERO;
    for c in &spec.containers {
        let (r, mut u) = container_requests(c);
        app += r;
        unknown.append(&mut u);
    }
    let mut sidecars = Resources::ZERO;
    let mut init_peak = Resources::ZERO;
    for c in spec.init_containers.iter().flatten() {
        let (r, mut u) = container_requests(c);
        unknown.append(&mut u);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars += r;
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&(sidecars + r));
        }
    }
    let (overhead, mut u) = quantities(spec.overhead.as_ref());
    unknown.append(&mut u);
    let total = (app + sidecars).max(&init_peak) + overhead;
    (Resources { pods: 1, ..total }, unknown)
}

fn node_selector_term(term: &core::NodeSelectorTerm) -> Requirements {
    let mut r = Requirements::new();
    for e in term.match_expressions.iter().flatten() {
        let op = match e.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            // An unknown operator matches nothing, as the API server would have refused it.
            _ => Operator::In,
        };
        r.add(
            &e.key,
            Requirement::new(op, e.values.as_deref().unwrap_or_default()),
        );
    }
    r
}

fn toleration(t: &core::Toleration) -> Toleration {
    let effect = t.effect.as_deref().and_then(|e| match e {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    });
    let exists = t.operator.as_deref() == Some("Exists");
    Toleration {
        key: t.key.clone().filter(|k| !k.is_empty()),
        value: if exists {
            None
        } else {
            Some(t.value.clone().unwrap_or_default())
        },
        effect,
    }
}

fn spread(c: &core::TopologySpreadConstraint, labels: &BTreeMap<String, String>) -> TopologySpread {
    let mut selector = c
        .label_selector
        .as_ref()
        .map_or_else(Selector::nothing, Selector::from_k8s);
    // matchLabelKeys: the pod's own values for these keys join the selector.
    for key in c.match_label_keys.iter().flatten() {
        if let Some(v) = labels.get(key) {
            selector
                .terms
                .push((key.clone(), SelectorOp::In, vec![v.clone()]));
        }
    }
    TopologySpread {
        max_skew: i64::from(c.max_skew.max(1)),
        topology_key: c.topology_key.clone(),
        when_unsatisfiable: if c.when_unsatisfiable == "ScheduleAnyway" {
            Unsatisfiable::ScheduleAnyway
        } else {
            Unsatisfiable::DoNotSchedule
        },
        selector,
        min_domains: c.min_domains.map(i64::from),
        honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
        honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
    }
}

fn affinity_term(t: &core::PodAffinityTerm) -> AffinityTerm {
    AffinityTerm {
        topology_key: t.topology_key.clone(),
        selector: t
            .label_selector
            .as_ref()
            .map_or_else(Selector::nothing, Selector::from_k8s),
        namespaces: t.namespaces.clone().unwrap_or_default(),
    }
}

fn weighted_terms(terms: Option<&[core::WeightedPodAffinityTerm]>) -> Vec<AffinityTerm> {
    let mut terms: Vec<&core::WeightedPodAffinityTerm> = terms.into_iter().flatten().collect();
    terms.sort_by_key(|t| -t.weight);
    terms
        .into_iter()
        .map(|t| affinity_term(&t.pod_affinity_term))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        let anti = serde_json::json!([{"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "data", "labels": {"app": "db"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/arch": "arm64"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "db"}}}],
                "affinity": {
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti.clone()},
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti}
                },
                "containers": [{"name": "db", "ports": [{"containerPort": 5432, "hostPort": 5432}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]
            }
        }))
        .expect("pod")
    }

    #[test]
    fn a_bound_pod_keeps_what_constrains_its_neighbours_and_drops_where_it_may_go() {
        let (full, bound) = (SchedPod::from_k8s(&pod(), None), SchedPod::bound(&pod()));
        assert_eq!(bound.key, full.key);
        assert_eq!(bound.labels, full.labels);
        assert_eq!(bound.requests, full.requests);
        assert_eq!(bound.anti_affinity, full.anti_affinity);
        assert_eq!(bound.anti_affinity.len(), 1);
        assert_eq!(bound.host_ports, [("TCP".to_string(), String::new(), 5432)]);
        assert_eq!(bound.host_ports, full.host_ports);
        // Only the pod to place carries where it may go.
        assert_eq!(full.node_terms.len(), 1);
        assert_eq!(
            (
                full.tolerations.len(),
                full.spreads.len(),
                full.affinity.len()
            ),
            (1, 1, 1)
        );
        assert!(bound.node_terms.is_empty() && bound.tolerations.is_empty());
        assert!(bound.spreads.is_empty() && bound.affinity.is_empty());
    }
}
