//! Topology bookkeeping for spread constraints and pod (anti-)affinity.
//!
//! A *group* is a (topology key, label selector, namespaces) triple shared by every term that
//! names it; it counts the pods it selects per domain (zone, hostname, …). Placing a pod narrows
//! the node's domain to one value and increments the counts of every group the pod matches, so
//! later pods see it, exactly as kube-scheduler will once the nodes exist.

use std::collections::{BTreeSet, HashMap};

use super::pod::{AffinityTerm, SchedPod, Selector, TopologySpread, Unsatisfiable};
use super::requirements::{normalize_key, Requirements};
use crate::api::labels;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupKey {
    key: String,
    selector: Selector,
    namespaces: Vec<String>,
}

#[derive(Debug)]
struct Group {
    key: String,
    selector: Selector,
    namespaces: Vec<String>,
    counts: HashMap<String, i64>,
    total: i64,
    /// Domains holding a pod with a *required anti-affinity* term naming this group: pods this
    /// group selects may not join them (anti-affinity is symmetric).
    anti_owners: HashMap<String, i64>,
    /// Some pending pod spreads over this group.
    spread: bool,
    /// Per domain, the smallest maxSkew of the `DoNotSchedule` spreads placed there: a pod
    /// this group counts that joins the domain later must keep it within that skew, or the
    /// spread pod is refused when kube-scheduler binds it after the newcomer.
    constrained_skew: HashMap<String, i64>,
}

impl Group {
    fn selects(&self, pod: &SchedPod) -> bool {
        self.namespaces.contains(&pod.key.namespace) && self.selector.matches(&pod.labels)
    }
    fn count(&self, domain: &str) -> i64 {
        self.counts.get(domain).copied().unwrap_or(0)
    }
}

/// Which of a pod's terms are in force for one scheduling attempt (preferences may be relaxed).
#[derive(Debug, Clone, Copy)]
pub struct ActiveTerms {
    pub preferred_affinity: bool,
    pub schedule_anyway_spreads: bool,
    /// Keep every placed spread pod valid whatever order kube-scheduler binds the pods in
    /// (each as if bound last): a preference, tried first for pods a spread counts.
    pub order_safe: bool,
}

/// The group indexes of one pod's terms.
#[derive(Debug, Default, Clone)]
struct PodTerms {
    spreads: Vec<(usize, TopologySpread)>,
    affinity: Vec<usize>,
    anti_affinity: Vec<usize>,
    preferred_affinity: Vec<usize>,
    preferred_anti_affinity: Vec<usize>,
    /// Groups that select this pod.
    selected_by: Vec<usize>,
}

impl PodTerms {
    fn has_any(&self) -> bool {
        !(self.spreads.is_empty()
            && self.affinity.is_empty()
            && self.anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
            && self.selected_by.is_empty())
    }
}

/// Why topology rules out a node for a pod.
#[derive(Debug, Clone, PartialEq)]
pub enum TopologyRejection {
    /// Nodes of this kind have no known value for the key.
    UnknownDomain {
        key: String,
    },
    Spread {
        key: String,
        max_skew: i64,
    },
    Affinity {
        key: String,
    },
    AntiAffinity {
        key: String,
    },
    /// A placed pod's anti-affinity excludes this pod.
    ExcludedByOthers {
        key: String,
    },
    /// Joining would let a spread pod already in the domain be refused if kube-scheduler
    /// bound it after this one (only while [`ActiveTerms::order_safe`]).
    OrderDependent {
        key: String,
    },
}

impl std::fmt::Display for TopologyRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopologyRejection::UnknownDomain { key } => write!(
                f,
                "its nodes have no {key} label for the pod's topology terms"
            ),
            TopologyRejection::Spread { key, max_skew } => write!(
                f,
                "topology spread on {key} (maxSkew {max_skew}) would be exceeded"
            ),
            TopologyRejection::Affinity { key } => write!(
                f,
                "pod affinity on {key} finds no matching pod in its domain"
            ),
            TopologyRejection::AntiAffinity { key } => write!(
                f,
                "pod anti-affinity on {key}: a matching pod is already in its domain"
            ),
            TopologyRejection::ExcludedByOthers { key } => write!(
                f,
                "another pod's anti-affinity on {key} excludes this pod from its domain"
            ),
            TopologyRejection::OrderDependent { key } => write!(
                f,
                "a spread pod on {key} there would depend on being bound before this one"
            ),
        }
    }
}

/// Values a topology key can take on one pool's (or existing node's) nodes, and those nodes'
/// taints.
#[derive(Debug, Clone)]
pub struct DomainSource {
    pub values: BTreeSet<String>,
    pub taints: Vec<crate::api::Taint>,
}

/// The domain chosen for each topology key a placement involves.
pub type Placement = Vec<(String, String)>;

#[derive(Debug, Default)]
pub struct Topology {
    groups: Vec<Group>,
    index: HashMap<GroupKey, usize>,
    pods: Vec<PodTerms>,
    /// Every known value per (non-hostname) key: the domains spread is balanced across.
    universe: HashMap<String, Vec<DomainSource>>,
}

impl Topology {
    /// Registers the terms of `pending` (indexed as the solver indexes them) and counts the
    /// pods already running, given as (pod, its node's labels).
    pub fn new(
        pending: &[SchedPod],
        running: &[(&SchedPod, &Requirements, &str)],
        universe: HashMap<String, Vec<DomainSource>>,
    ) -> Self {
        let mut t = Topology {
            universe,
            ..Default::default()
        };
        for pod in pending {
            let mut terms = PodTerms::default();
            for s in &pod.spreads {
                let g = t.group(
                    &s.topology_key,
                    &s.selector,
                    std::slice::from_ref(&pod.key.namespace),
                );
                t.groups[g].spread = true;
                terms.spreads.push((g, s.clone()));
            }
            let term_groups = |t: &mut Topology, list: &[AffinityTerm]| -> Vec<usize> {
                list.iter()
                    .map(|a| t.group(&a.topology_key, &a.selector, pod.term_namespaces(a)))
                    .collect()
            };
            terms.affinity = term_groups(&mut t, &pod.affinity);
            terms.anti_affinity = term_groups(&mut t, &pod.anti_affinity);
            terms.preferred_affinity = term_groups(&mut t, &pod.preferred_affinity);
            terms.preferred_anti_affinity = term_groups(&mut t, &pod.preferred_anti_affinity);
            t.pods.push(terms);
        }
        for (i, pod) in pending.iter().enumerate() {
            t.pods[i].selected_by = (0..t.groups.len())
                .filter(|&g| t.groups[g].selects(pod))
                .collect();
        }
        for (pod, node, hostname) in running {
            for g in 0..t.groups.len() {
                if t.groups[g].selects(pod) {
                    if let Some(d) = node_domain(node, hostname, &t.groups[g].key) {
                        *t.groups[g].counts.entry(d).or_default() += 1;
                        t.groups[g].total += 1;
                    }
                }
            }
            for a in &pod.anti_affinity {
                let key = GroupKey {
                    key: normalize_key(&a.topology_key).to_string(),
                    selector: a.selector.clone(),
                    namespaces: sorted(pod.term_namespaces(a)),
                };
                if let Some(&g) = t.index.get(&key) {
                    if let Some(d) = node_domain(node, hostname, &t.groups[g].key) {
                        *t.groups[g].anti_owners.entry(d).or_default() += 1;
                    }
                }
            }
        }
        t
    }

    fn group(&mut self, key: &str, selector: &Selector, namespaces: &[String]) -> usize {
        let gk = GroupKey {
            key: normalize_key(key).to_string(),
            selector: selector.clone(),
            namespaces: sorted(namespaces),
        };
        if let Some(&g) = self.index.get(&gk) {
            return g;
        }
        self.groups.push(Group {
            key: gk.key.clone(),
            selector: gk.selector.clone(),
            namespaces: gk.namespaces.clone(),
            counts: HashMap::new(),
            total: 0,
            anti_owners: HashMap::new(),
            spread: false,
            constrained_skew: HashMap::new(),
        });
        self.index.insert(gk, self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// True when topology cannot affect this pod (the common case: skip all of it).
    pub fn is_free(&self, pod: usize) -> bool {
        !self.pods[pod].has_any()
    }

    /// The topology keys this pod's placement involves.
    pub fn keys(&self, pod: usize, active: ActiveTerms) -> BTreeSet<&str> {
        let terms = &self.pods[pod];
        let mut keys = BTreeSet::new();
        let mut add = |g: &usize| {
            keys.insert(self.groups[*g].key.as_str());
        };
        terms
            .spreads
            .iter()
            .filter(|(_, s)| {
                s.when_unsatisfiable == Unsatisfiable::DoNotSchedule
                    || active.schedule_anyway_spreads
            })
            .for_each(|(g, _)| add(g));
        terms
            .affinity
            .iter()
            .chain(&terms.anti_affinity)
            .chain(&terms.selected_by)
            .for_each(&mut add);
        if active.preferred_affinity {
            terms
                .preferred_affinity
                .iter()
                .chain(&terms.preferred_anti_affinity)
                .for_each(&mut add);
        }
        keys
    }

    /// Chooses a domain per involved key among a node's possible values (`domains(key)`:
    /// `None` when unknown), or says why none works. `pod_requirements` are the pod's node
    /// requirements for this attempt (spread counts only domains they allow, by default).
    pub fn place(
        &self,
        pod: usize,
        self_pod: &SchedPod,
        active: ActiveTerms,
        pod_requirements: Option<&Requirements>,
        domains: &dyn Fn(&str) -> Option<Vec<String>>,
    ) -> Result<Placement, TopologyRejection> {
        let terms = &self.pods[pod];
        let mut placement = Vec::new();
        for key in self.keys(pod, active) {
            let constrained = terms
                .spreads
                .iter()
                .any(|(g, _)| self.groups[*g].key == key)
                || terms
                    .affinity
                    .iter()
                    .chain(&terms.anti_affinity)
                    .any(|g| self.groups[*g].key == key)
                || (active.preferred_affinity
                    && terms
                        .preferred_affinity
                        .iter()
                        .chain(&terms.preferred_anti_affinity)
                        .any(|g| self.groups[*g].key == key));
            let Some(mut allowed) = domains(key) else {
                if constrained {
                    return Err(TopologyRejection::UnknownDomain {
                        key: key.to_string(),
                    });
                }
                continue;
            };
            let mut first_spread = None;
            for (g, spread) in &terms.spreads {
                let group = &self.groups[*g];
                if group.key != key
                    || (spread.when_unsatisfiable == Unsatisfiable::ScheduleAnyway
                        && !active.schedule_anyway_spreads)
                {
                    continue;
                }
                let min = self.global_min(self_pod, group, spread, pod_requirements);
                let own = i64::from(group.selects(self_pod));
                allowed.retain(|d| group.count(d) + own - min <= spread.max_skew);
                if allowed.is_empty() {
                    return Err(TopologyRejection::Spread {
                        key: key.to_string(),
                        max_skew: spread.max_skew,
                    });
                }
                first_spread.get_or_insert(group);
            }
            let preferred: &[usize] = if active.preferred_affinity {
                &terms.preferred_affinity
            } else {
                &[]
            };
            for g in terms.affinity.iter().chain(preferred) {
                let group = &self.groups[*g];
                // The first pod of a self-affine set may go anywhere.
                if group.key == key && !(group.total == 0 && group.selects(self_pod)) {
                    allowed.retain(|d| group.count(d) > 0);
                    if allowed.is_empty() {
                        return Err(TopologyRejection::Affinity {
                            key: key.to_string(),
                        });
                    }
                }
            }
            let preferred: &[usize] = if active.preferred_affinity {
                &terms.preferred_anti_affinity
            } else {
                &[]
            };
            for g in terms.anti_affinity.iter().chain(preferred) {
                let group = &self.groups[*g];
                if group.key == key {
                    allowed.retain(|d| group.count(d) == 0);
                    if allowed.is_empty() {
                        return Err(TopologyRejection::AntiAffinity {
                            key: key.to_string(),
                        });
                    }
                }
            }
            for g in &terms.selected_by {
                let group = &self.groups[*g];
                if group.key == key && !group.anti_owners.is_empty() {
                    allowed.retain(|d| !group.anti_owners.contains_key(d.as_str()));
                    if allowed.is_empty() {
                        return Err(TopologyRejection::ExcludedByOthers {
                            key: key.to_string(),
                        });
                    }
                }
                if active.order_safe && group.key == key && !group.constrained_skew.is_empty() {
                    let min = self.lowest_count(group);
                    allowed.retain(|d| {
                        group
                            .constrained_skew
                            .get(d.as_str())
                            .is_none_or(|&skew| group.count(d) + 1 - min <= skew)
                    });
                    if allowed.is_empty() {
                        return Err(TopologyRejection::OrderDependent {
                            key: key.to_string(),
                        });
                    }
                }
            }
            // Balance: the least-populated domain of the first spread group; for a pod spreads
            // only count, of those groups (so counted pods do not pile into one domain); else
            // the first.
            let counting = || -> Vec<&Group> {
                terms
                    .selected_by
                    .iter()
                    .map(|g| &self.groups[*g])
                    .filter(|g| g.spread && g.key == key)
                    .collect()
            };
            let chosen = match first_spread {
                Some(group) => allowed
                    .iter()
                    .min_by_key(|d| (group.count(d), (*d).clone()))
                    .cloned(),
                None => match counting() {
                    counting if counting.is_empty() => allowed.first().cloned(),
                    counting => allowed
                        .iter()
                        .min_by_key(|d| {
                            (
                                counting.iter().map(|g| g.count(d)).sum::<i64>(),
                                (*d).clone(),
                            )
                        })
                        .cloned(),
                },
            };
            if let Some(d) = chosen {
                placement.push((key.to_string(), d));
            }
        }
        Ok(placement)
    }

    /// The smallest count among the domains a spread is balanced over. A new node is always an
    /// empty hostname domain, so hostname spreads balance against zero.
    fn global_min(
        &self,
        self_pod: &SchedPod,
        group: &Group,
        spread: &TopologySpread,
        pod_requirements: Option<&Requirements>,
    ) -> i64 {
        if group.key == labels::HOSTNAME {
            return 0;
        }
        let Some(sources) = self.universe.get(&group.key) else {
            return 0;
        };
        let filter = pod_requirements
            .filter(|_| spread.honor_node_affinity)
            .and_then(|r| r.get(&group.key));
        let eligible: BTreeSet<&String> = sources
            .iter()
            .filter(|s| {
                !spread.honor_taints
                    || super::pod::untolerated(&s.taints, &self_pod.tolerations).is_none()
            })
            .flat_map(|s| s.values.iter())
            .filter(|d| filter.is_none_or(|r| r.has(d)))
            .collect();
        if spread
            .min_domains
            .is_some_and(|m| (eligible.len() as i64) < m)
        {
            return 0;
        }
        eligible.iter().map(|d| group.count(d)).min().unwrap_or(0)
    }

    /// The lowest count over every domain the group's key is known to have: never above the
    /// minimum kube-scheduler will take for any pod, so a skew judged against it is safe.
    fn lowest_count(&self, group: &Group) -> i64 {
        if group.key == labels::HOSTNAME {
            return 0;
        }
        self.universe
            .get(&group.key)
            .into_iter()
            .flatten()
            .flat_map(|s| s.values.iter())
            .map(|d| group.count(d))
            .min()
            .unwrap_or(0)
    }

    /// True when a spread counts this pod, so where it goes can unsettle a spread pod.
    pub fn counted_by_spread(&self, pod: usize) -> bool {
        self.pods[pod]
            .selected_by
            .iter()
            .any(|&g| self.groups[g].spread)
    }

    /// Records a placed pod in its chosen domains.
    pub fn record(&mut self, pod: usize, placement: &Placement) {
        let domain_of = |key: &str| {
            placement
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, d)| d.clone())
        };
        // Borrow the pod's terms and the groups separately: no copy on this hot path.
        let Topology { groups, pods, .. } = self;
        let terms = &pods[pod];
        for &g in &terms.selected_by {
            if let Some(d) = domain_of(&groups[g].key) {
                *groups[g].counts.entry(d).or_default() += 1;
                groups[g].total += 1;
            }
        }
        for &g in &terms.anti_affinity {
            if let Some(d) = domain_of(&groups[g].key) {
                *groups[g].anti_owners.entry(d).or_default() += 1;
            }
        }
        for (g, spread) in &terms.spreads {
            if spread.when_unsatisfiable != Unsatisfiable::DoNotSchedule {
                continue;
            }
            if let Some(d) = domain_of(&groups[*g].key) {
                let skew = groups[*g].constrained_skew.entry(d).or_insert(i64::MAX);
                *skew = (*skew).min(spread.max_skew);
            }
        }
    }
}

fn sorted(namespaces: &[String]) -> Vec<String> {
    let mut v = namespaces.to_vec();
    v.sort();
    v.dedup();
    v
}

fn node_domain(node: &Requirements, hostname: &str, key: &str) -> Option<String> {
    if key == labels::HOSTNAME {
        return Some(hostname.to_string());
    }
    node.get(key)
        .and_then(|r| r.values())
        .filter(|v| v.len() == 1)
        .and_then(|v| v.iter().next().cloned())
}
