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

/// One rule a domain must pass for a pod to join it, with the counts it compares against.
#[derive(Debug, Clone)]
enum Rule {
    /// The spread's skew stays within maxSkew: `count + own - min <= max_skew`.
    Spread {
        group: usize,
        own: i64,
        min: i64,
        max_skew: i64,
    },
    /// A pod the affinity term selects is already there.
    Affinity { group: usize },
    /// No pod the anti-affinity term selects is there.
    AntiAffinity { group: usize },
    /// No placed pod's anti-affinity excludes this pod from there.
    Excluded { group: usize },
    /// Joining leaves every spread pod there valid were it bound last.
    OrderSafe { group: usize, min: i64 },
}

impl Rule {
    fn admits(&self, groups: &[Group], domain: &str) -> bool {
        match *self {
            Rule::Spread {
                group,
                own,
                min,
                max_skew,
            } => groups[group].count(domain) + own - min <= max_skew,
            Rule::Affinity { group } => groups[group].count(domain) > 0,
            Rule::AntiAffinity { group } => groups[group].count(domain) == 0,
            Rule::Excluded { group } => !groups[group].anti_owners.contains_key(domain),
            Rule::OrderSafe { group, min } => {
                let g = &groups[group];
                g.constrained_skew
                    .get(domain)
                    .is_none_or(|&skew| g.count(domain) + 1 - min <= skew)
            }
        }
    }

    fn rejection(&self, key: &str) -> TopologyRejection {
        let key = key.to_string();
        match self {
            Rule::Spread { max_skew, .. } => TopologyRejection::Spread {
                key,
                max_skew: *max_skew,
            },
            Rule::Affinity { .. } => TopologyRejection::Affinity { key },
            Rule::AntiAffinity { .. } => TopologyRejection::AntiAffinity { key },
            Rule::Excluded { .. } => TopologyRejection::ExcludedByOthers { key },
            Rule::OrderSafe { .. } => TopologyRejection::OrderDependent { key },
        }
    }
}

/// How a pod chooses among the domains its rules allow.
#[derive(Debug, Clone)]
enum Balance {
    /// The least-populated domain of its first spread.
    Spread(usize),
    /// The domain where the spreads that count it have the fewest pods.
    Counting(Vec<usize>),
    /// Any: the first.
    First,
}

#[derive(Debug, Clone)]
struct KeyRules {
    key: String,
    /// The pod's own terms name the key, so a node without it cannot take the pod.
    constrained: bool,
    rules: Vec<Rule>,
    balance: Balance,
}

impl KeyRules {
    /// The first rule that refuses `domain`, if any.
    fn first_refusal(&self, groups: &[Group], domain: &str) -> Option<usize> {
        self.rules.iter().position(|r| !r.admits(groups, domain))
    }
}

/// A pod's topology rules for one attempt, per key it involves (see [`Topology::rules`]).
#[derive(Debug, Clone)]
pub struct PodRules {
    keys: Vec<KeyRules>,
}

impl PodRules {
    /// No rule at all: for a pod moved between nodes of the same domains, whose counts stay
    /// as they are.
    pub fn unchanged() -> Self {
        PodRules { keys: Vec::new() }
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

    /// The topology keys of every group involving the pod: its own terms' and those counting it.
    pub fn keys_of(&self, pod: usize) -> impl Iterator<Item = &str> {
        let terms = &self.pods[pod];
        let own = terms.spreads.iter().map(|(g, _)| *g);
        let listed = [
            &terms.affinity,
            &terms.anti_affinity,
            &terms.preferred_affinity,
            &terms.preferred_anti_affinity,
            &terms.selected_by,
        ];
        own.chain(listed.into_iter().flatten().copied())
            .map(|g| self.groups[g].key.as_str())
    }

    /// True when topology cannot affect this pod (the common case: skip all of it).
    pub fn is_free(&self, pod: usize) -> bool {
        !self.pods[pod].has_any()
    }

    /// The topology keys this pod's placement involves.
    fn keys(&self, pod: usize, active: ActiveTerms) -> BTreeSet<&str> {
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

    /// The rules each involved key's domains must pass for this pod and attempt, with the
    /// counts they compare against taken now. Counts change only when a pod is recorded, so
    /// one set of rules serves a whole scan of the nodes for one pod. `pod_requirements` are
    /// the pod's node requirements for this attempt (spread counts only domains they allow,
    /// by default).
    pub fn rules(
        &self,
        pod: usize,
        self_pod: &SchedPod,
        active: ActiveTerms,
        pod_requirements: Option<&Requirements>,
    ) -> PodRules {
        let terms = &self.pods[pod];
        let preferred_affinity: &[usize] = if active.preferred_affinity {
            &terms.preferred_affinity
        } else {
            &[]
        };
        let preferred_anti_affinity: &[usize] = if active.preferred_affinity {
            &terms.preferred_anti_affinity
        } else {
            &[]
        };
        let keys = self
            .keys(pod, active)
            .into_iter()
            .map(|key| {
                let on_key = |g: &usize| self.groups[*g].key == key;
                let constrained = terms.spreads.iter().any(|(g, _)| on_key(g))
                    || terms
                        .affinity
                        .iter()
                        .chain(&terms.anti_affinity)
                        .any(on_key)
                    || preferred_affinity
                        .iter()
                        .chain(preferred_anti_affinity)
                        .any(on_key);
                let mut rules = Vec::new();
                let mut first_spread = None;
                for (g, spread) in &terms.spreads {
                    if !on_key(g)
                        || (spread.when_unsatisfiable == Unsatisfiable::ScheduleAnyway
                            && !active.schedule_anyway_spreads)
                    {
                        continue;
                    }
                    let group = &self.groups[*g];
                    rules.push(Rule::Spread {
                        group: *g,
                        own: i64::from(group.selects(self_pod)),
                        min: self.global_min(self_pod, group, spread, pod_requirements),
                        max_skew: spread.max_skew,
                    });
                    first_spread.get_or_insert(*g);
                }
                for g in terms.affinity.iter().chain(preferred_affinity) {
                    let group = &self.groups[*g];
                    // The first pod of a self-affine set may go anywhere.
                    if on_key(g) && !(group.total == 0 && group.selects(self_pod)) {
                        rules.push(Rule::Affinity { group: *g });
                    }
                }
                for g in terms.anti_affinity.iter().chain(preferred_anti_affinity) {
                    if on_key(g) {
                        rules.push(Rule::AntiAffinity { group: *g });
                    }
                }
                for g in terms.selected_by.iter().filter(|g| on_key(g)) {
                    let group = &self.groups[*g];
                    if !group.anti_owners.is_empty() {
                        rules.push(Rule::Excluded { group: *g });
                    }
                    if active.order_safe && !group.constrained_skew.is_empty() {
                        rules.push(Rule::OrderSafe {
                            group: *g,
                            min: self.lowest_count(group),
                        });
                    }
                }
                // Balance: the least-populated domain of the first spread group; for a pod
                // spreads only count, of those groups (so counted pods do not pile into one
                // domain); else the first.
                let counting: Vec<usize> = terms
                    .selected_by
                    .iter()
                    .copied()
                    .filter(|g| on_key(g) && self.groups[*g].spread)
                    .collect();
                let balance = match first_spread {
                    Some(g) => Balance::Spread(g),
                    None if counting.is_empty() => Balance::First,
                    None => Balance::Counting(counting),
                };
                KeyRules {
                    key: key.to_string(),
                    constrained,
                    rules,
                    balance,
                }
            })
            .collect();
        PodRules { keys }
    }

    /// True when, for some key other than the hostname, the rules refuse every domain the key
    /// is known to have: no node, planned or new, can take the pod under these rules, so a
    /// scan would only collect refusals.
    pub fn refuses_everywhere(&self, rules: &PodRules) -> bool {
        rules.keys.iter().any(|k| {
            k.key != labels::HOSTNAME
                && !k.rules.is_empty()
                && self.universe.get(&k.key).is_some_and(|sources| {
                    let mut domains = sources.iter().flat_map(|s| s.values.iter()).peekable();
                    domains.peek().is_some()
                        && domains.all(|d| k.first_refusal(&self.groups, d).is_some())
                })
        })
    }

    /// Chooses a domain per involved key among a node's possible values (`domains(key)`:
    /// `None` when unknown), or says which rule rules them all out: the one a sequential
    /// filter would have stopped at (the latest first-failing rule among the domains).
    pub fn place(
        &self,
        rules: &PodRules,
        domains: &dyn Fn(&str) -> Option<Vec<String>>,
    ) -> Result<Placement, TopologyRejection> {
        let mut placement = Vec::with_capacity(rules.keys.len());
        for k in &rules.keys {
            let Some(mut allowed) = domains(&k.key) else {
                if k.constrained {
                    return Err(TopologyRejection::UnknownDomain { key: k.key.clone() });
                }
                continue;
            };
            let mut stopped_at: Option<usize> = None;
            allowed.retain(|d| match k.first_refusal(&self.groups, d) {
                None => true,
                Some(i) => {
                    stopped_at = Some(stopped_at.map_or(i, |s| s.max(i)));
                    false
                }
            });
            if allowed.is_empty() {
                // With no domain at all, the first rule is the one that fails.
                match stopped_at.or((!k.rules.is_empty()).then_some(0)) {
                    Some(i) => return Err(k.rules[i].rejection(&k.key)),
                    None => continue,
                }
            }
            let least = |count: &dyn Fn(&str) -> i64| {
                allowed
                    .iter()
                    .min_by(|a, b| count(a).cmp(&count(b)).then_with(|| a.cmp(b)))
                    .cloned()
            };
            let chosen = match &k.balance {
                Balance::Spread(g) => least(&|d| self.groups[*g].count(d)),
                Balance::Counting(groups) => {
                    least(&|d| groups.iter().map(|g| self.groups[*g].count(d)).sum())
                }
                Balance::First => allowed.first().cloned(),
            };
            if let Some(d) = chosen {
                placement.push((k.key.clone(), d));
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
    node.get(key).and_then(|r| r.single_value()).cloned()
}
