//! The requirements algebra: a set of allowed values per label key, with the eight operators,
//! intersection, compatibility and `minValues`.
//!
//! Every requirement is a (possibly complemented) value set plus optional integer bounds:
//! `In [a b]` = {a, b}; `NotIn [a]` = everything but a; `Exists` = everything; `DoesNotExist` =
//! nothing; `Gt 4` = every integer above 4. Intersection of two such sets is again one, so a
//! NodeClaim can accumulate the requirements of its pool, its pods and its instance types.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::api::labels;
use crate::api::{NodeSelectorRequirementWithMinValues, Operator};

/// Allowed values of one label key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Requirement {
    /// When true, `values` are the *excluded* values and everything else is allowed.
    complement: bool,
    values: BTreeSet<String>,
    /// Exclusive integer bounds; a value must parse as an integer to satisfy them.
    greater_than: Option<i64>,
    less_than: Option<i64>,
    pub min_values: Option<usize>,
}

impl Requirement {
    pub fn new(operator: Operator, values: &[String]) -> Self {
        let set = || values.iter().cloned().collect();
        let first_int = || values.first().and_then(|v| v.parse::<i64>().ok());
        match operator {
            Operator::In => Requirement {
                values: set(),
                ..Default::default()
            },
            Operator::NotIn => Requirement {
                complement: true,
                values: set(),
                ..Default::default()
            },
            Operator::Exists => Requirement {
                complement: true,
                ..Default::default()
            },
            Operator::DoesNotExist => Requirement::default(),
            Operator::Gt => Requirement {
                complement: true,
                greater_than: first_int(),
                ..Default::default()
            },
            Operator::Gte => Requirement {
                complement: true,
                greater_than: first_int().map(|n| n - 1),
                ..Default::default()
            },
            Operator::Lt => Requirement {
                complement: true,
                less_than: first_int(),
                ..Default::default()
            },
            Operator::Lte => Requirement {
                complement: true,
                less_than: first_int().map(|n| n + 1),
                ..Default::default()
            },
        }
    }

    /// Exactly these values (`In`).
    pub fn any_of<I: IntoIterator<Item = S>, S: Into<String>>(values: I) -> Self {
        Requirement {
            values: values.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    fn within_bounds(&self, value: &str) -> bool {
        if self.greater_than.is_none() && self.less_than.is_none() {
            return true;
        }
        match value.parse::<i64>() {
            Ok(n) => {
                self.greater_than.is_none_or(|g| n > g) && self.less_than.is_none_or(|l| n < l)
            }
            Err(_) => false,
        }
    }

    /// Whether a node whose label has `value` satisfies this requirement.
    pub fn has(&self, value: &str) -> bool {
        self.within_bounds(value) && (self.values.contains(value) != self.complement)
    }

    /// Whether a node *without* the label satisfies this requirement (`NotIn`, `DoesNotExist`).
    pub fn allows_absence(&self) -> bool {
        let unbounded = self.greater_than.is_none() && self.less_than.is_none();
        unbounded && (self.complement != self.values.is_empty())
    }

    /// No value satisfies it (a finite, empty set).
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// As API requirements on `key` (a bounded range needs one entry per bound; values
    /// excluded from a range are dropped, which only widens it).
    pub fn to_api(&self, key: &str) -> Vec<NodeSelectorRequirementWithMinValues> {
        let entry = |operator, values: Vec<String>| NodeSelectorRequirementWithMinValues {
            key: key.to_string(),
            operator,
            values,
            min_values: self.min_values.map(|m| m as i64),
        };
        let values = || self.values.iter().cloned().collect::<Vec<_>>();
        if self.greater_than.is_some() || self.less_than.is_some() {
            let mut out = Vec::new();
            if let Some(g) = self.greater_than {
                out.push(entry(Operator::Gt, vec![g.max(0).to_string()]));
            }
            if let Some(l) = self.less_than {
                out.push(entry(Operator::Lt, vec![l.to_string()]));
            }
            return out;
        }
        vec![match (self.complement, self.values.is_empty()) {
            (false, false) => entry(Operator::In, values()),
            (false, true) => entry(Operator::DoesNotExist, vec![]),
            (true, true) => entry(Operator::Exists, vec![]),
            (true, false) => entry(Operator::NotIn, values()),
        }]
    }

    /// The finite set of allowed values, if the requirement is finite.
    pub fn values(&self) -> Option<&BTreeSet<String>> {
        (!self.complement).then_some(&self.values)
    }

    /// The one value allowed, when exactly one is: what a node's label must then be.
    pub fn single_value(&self) -> Option<&String> {
        self.values()
            .filter(|v| v.len() == 1)
            .and_then(|v| v.iter().next())
    }

    /// The set of values allowed by both.
    pub fn intersect(&self, other: &Requirement) -> Requirement {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        let min_values = max_opt(self.min_values, other.min_values);
        let mut out = match (self.complement, other.complement) {
            (true, true) => Requirement {
                complement: true,
                values: self.values.union(&other.values).cloned().collect(),
                greater_than,
                less_than,
                min_values,
            },
            (false, false) => Requirement {
                values: self.values.intersection(&other.values).cloned().collect(),
                ..Default::default()
            },
            (false, true) => Requirement {
                values: self.values.difference(&other.values).cloned().collect(),
                ..Default::default()
            },
            (true, false) => Requirement {
                values: other.values.difference(&self.values).cloned().collect(),
                ..Default::default()
            },
        };
        if !out.complement {
            // A finite set absorbs the bounds: keep only the values inside them.
            let bounds = Requirement {
                complement: true,
                greater_than,
                less_than,
                ..Default::default()
            };
            out.values.retain(|v| bounds.within_bounds(v));
            out.min_values = min_values;
        }
        out
    }

    /// Whether `self` (e.g. a pod's) and `other` (e.g. a node's) can both hold: some value
    /// satisfies both, or both allow the label to be absent.
    pub fn intersects(&self, other: &Requirement) -> bool {
        (self.allows_absence() && other.allows_absence()) || self.shares_a_value(other)
    }

    /// Whether [`Requirement::intersect`] would allow some value, without building it (which
    /// copies the value sets: every instance type of a plan is checked this way in every
    /// consolidation simulation).
    fn shares_a_value(&self, other: &Requirement) -> bool {
        let bounds = Requirement {
            complement: true,
            greater_than: max_opt(self.greater_than, other.greater_than),
            less_than: min_opt(self.less_than, other.less_than),
            ..Default::default()
        };
        let allowed = |v: &&String| bounds.within_bounds(v);
        match (self.complement, other.complement) {
            (true, true) => true,
            (false, false) => self
                .values
                .iter()
                .filter(allowed)
                .any(|v| other.values.contains(v)),
            (false, true) => self
                .values
                .iter()
                .filter(allowed)
                .any(|v| !other.values.contains(v)),
            (true, false) => other
                .values
                .iter()
                .filter(allowed)
                .any(|v| !self.values.contains(v)),
        }
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = || self.values.iter().cloned().collect::<Vec<_>>().join(", ");
        match (self.complement, self.values.is_empty()) {
            (false, true) => f.write_str("DoesNotExist")?,
            (false, false) => write!(f, "In [{}]", list())?,
            (true, true) if self.greater_than.is_none() && self.less_than.is_none() => {
                f.write_str("Exists")?
            }
            (true, true) => {}
            (true, false) => write!(f, "NotIn [{}]", list())?,
        }
        if let Some(g) = self.greater_than {
            write!(f, "Gt {g}")?;
        }
        if let Some(l) = self.less_than {
            write!(
                f,
                "{}Lt {l}",
                if self.greater_than.is_some() { " " } else { "" }
            )?;
        }
        Ok(())
    }
}

/// Beta and legacy label names normalised to the ones Karpenter and the kubelet use today.
pub fn normalize_key(key: &str) -> &str {
    match key {
        "beta.kubernetes.io/arch" => labels::ARCH,
        "beta.kubernetes.io/os" => labels::OS,
        "beta.kubernetes.io/instance-type" => labels::INSTANCE_TYPE,
        "failure-domain.beta.kubernetes.io/zone" => labels::ZONE,
        "failure-domain.beta.kubernetes.io/region" => labels::REGION,
        "topology.ebs.csi.aws.com/zone" => labels::ZONE,
        other => other,
    }
}

/// Requirements on several keys, all of which must hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Requirements(BTreeMap<String, Requirement>);

impl Requirements {
    pub fn new() -> Self {
        Requirements::default()
    }

    /// From API requirements (a NodePool's, a NodeClaim's).
    pub fn from_api(list: &[NodeSelectorRequirementWithMinValues]) -> Self {
        let mut out = Requirements::new();
        for r in list {
            let mut req = Requirement::new(r.operator, &r.values);
            req.min_values = r.min_values.map(|m| m.max(0) as usize);
            out.add(&r.key, req);
        }
        out
    }

    /// Each label as `In [value]`.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        let mut out = Requirements::new();
        for (k, v) in labels {
            out.add(k, Requirement::any_of([v.clone()]));
        }
        out
    }

    /// Adds a requirement, intersecting with any existing one on the same key.
    pub fn add(&mut self, key: &str, req: Requirement) {
        let key = normalize_key(key);
        match self.0.get_mut(key) {
            Some(existing) => *existing = existing.intersect(&req),
            None => {
                self.0.insert(key.to_string(), req);
            }
        }
    }

    pub fn add_all(&mut self, other: &Requirements) {
        for (k, r) in &other.0 {
            self.add(k, r.clone());
        }
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.0.get(normalize_key(key))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Requirement)> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Lowers `key`'s `minValues` to `to` (`MIN_VALUES_POLICY=BestEffort`).
    pub fn relax_min_values(&mut self, key: &str, to: usize) {
        if let Some(r) = self.0.get_mut(key) {
            r.min_values = r.min_values.map(|m| m.min(to));
        }
    }

    /// The first key on which `self` and `other` cannot both hold, if any. Keys only one side
    /// constrains are fine (see [`Requirements::compatible_with_node`] for labels a node lacks).
    pub fn conflict<'a>(
        &'a self,
        other: &'a Requirements,
    ) -> Option<(&'a str, &'a Requirement, &'a Requirement)> {
        // Iterate the smaller map: pods usually constrain few keys.
        let (small, large, flipped) = if self.0.len() <= other.0.len() {
            (self, other, false)
        } else {
            (other, self, true)
        };
        for (key, a) in &small.0 {
            if let Some(b) = large.0.get(key) {
                if !a.intersects(b) {
                    let (mine, theirs) = if flipped { (b, a) } else { (a, b) };
                    return Some((key.as_str(), mine, theirs));
                }
            }
        }
        None
    }

    /// Whether a node carrying exactly the labels `node` describes satisfies `self`: every key
    /// `self` constrains must match the node's value, or be absent and allowed absent.
    pub fn unsatisfied_on<'a>(&'a self, node: &Requirements) -> Option<(&'a str, &'a Requirement)> {
        self.0.iter().find_map(|(key, req)| {
            let ok = match node.0.get(key) {
                Some(n) => req.intersects(n),
                None => req.allows_absence(),
            };
            (!ok).then_some((key.as_str(), req))
        })
    }
}

/// Whether instance type labels `type_labels` satisfy pool `requirements` on the keys
/// instance types provide (`provided`): a type without such a label fits only requirements
/// that allow it to be absent. Keys no instance type provides are the pool's own labels.
pub fn type_satisfies(
    type_labels: &Requirements,
    requirements: &Requirements,
    provided: &std::collections::HashSet<String>,
) -> bool {
    type_labels.conflict(requirements).is_none()
        && requirements.iter().all(|(key, req)| {
            !provided.contains(key) || type_labels.get(key).is_some() || req.allows_absence()
        })
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, r)| format!("{k} {r}")).collect();
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(
            op,
            &values.iter().map(|v| v.to_string()).collect::<Vec<_>>(),
        )
    }

    #[test]
    fn operators_allow_what_kubernetes_allows() {
        assert!(req(Operator::In, &["a", "b"]).has("a"));
        assert!(!req(Operator::In, &["a"]).has("c"));
        assert!(req(Operator::NotIn, &["a"]).has("c"));
        assert!(!req(Operator::NotIn, &["a"]).has("a"));
        assert!(req(Operator::Exists, &[]).has("anything"));
        assert!(!req(Operator::DoesNotExist, &[]).has("anything"));
        assert!(req(Operator::Gt, &["4"]).has("5") && !req(Operator::Gt, &["4"]).has("4"));
        assert!(req(Operator::Gte, &["4"]).has("4") && !req(Operator::Gte, &["4"]).has("3"));
        assert!(req(Operator::Lt, &["4"]).has("3") && !req(Operator::Lt, &["4"]).has("4"));
        assert!(req(Operator::Lte, &["4"]).has("4") && !req(Operator::Lte, &["4"]).has("5"));
        assert!(!req(Operator::Gt, &["4"]).has("x"), "bounds need integers");
    }

    #[test]
    fn absence_is_allowed_only_by_notin_and_doesnotexist() {
        assert!(req(Operator::NotIn, &["a"]).allows_absence());
        assert!(req(Operator::DoesNotExist, &[]).allows_absence());
        for op in [Operator::In, Operator::Exists, Operator::Gt, Operator::Lt] {
            assert!(!req(op, &["1"]).allows_absence(), "{op:?}");
        }
    }

    #[test]
    fn intersection_combines_sets_complements_and_bounds() {
        let i = req(Operator::In, &["1", "5", "9"]).intersect(&req(Operator::Gt, &["2"]));
        assert_eq!(i.values().map(|v| v.len()), Some(2));
        let i = req(Operator::Gt, &["2"]).intersect(&req(Operator::Lt, &["6"]));
        assert!(i.has("3") && i.has("5") && !i.has("6") && !i.has("2"));
        let i = req(Operator::NotIn, &["a"]).intersect(&req(Operator::In, &["a", "b"]));
        assert_eq!(i, Requirement::any_of(["b"]));
        assert!(!req(Operator::In, &["a"]).intersects(&req(Operator::NotIn, &["a"])));
        assert!(req(Operator::NotIn, &["a"]).intersects(&req(Operator::DoesNotExist, &[])));
        assert!(!req(Operator::In, &["a"]).intersects(&req(Operator::DoesNotExist, &[])));
    }

    /// `intersects` answers without building the intersection: it must agree with it for
    /// every pair of operators and value sets.
    #[test]
    fn intersects_agrees_with_the_intersection() {
        let values: [&[&str]; 4] = [&[], &["a"], &["1", "5"], &["5", "a", "9"]];
        let ops = [
            Operator::In,
            Operator::NotIn,
            Operator::Exists,
            Operator::DoesNotExist,
            Operator::Gt,
            Operator::Gte,
            Operator::Lt,
            Operator::Lte,
        ];
        let mut all = Vec::new();
        for op in ops {
            for v in values {
                all.push(req(op, v));
            }
        }
        all.push(req(Operator::Gt, &["1"]).intersect(&req(Operator::Lt, &["5"])));
        for a in &all {
            for b in &all {
                let built =
                    !a.intersect(b).is_empty() || (a.allows_absence() && b.allows_absence());
                assert_eq!(a.intersects(b), built, "{a} and {b}");
            }
        }
    }

    #[test]
    fn beta_labels_are_normalised() {
        let mut r = Requirements::new();
        r.add("beta.kubernetes.io/arch", Requirement::any_of(["arm64"]));
        assert!(r.get(labels::ARCH).is_some_and(|r| r.has("arm64")));
    }

    #[test]
    fn node_label_checks_respect_absent_labels() {
        let node = Requirements::from_labels(&BTreeMap::from([("a".to_string(), "1".to_string())]));
        let mut pod = Requirements::new();
        pod.add("b", req(Operator::NotIn, &["x"]));
        assert!(pod.unsatisfied_on(&node).is_none());
        pod.add("c", req(Operator::Exists, &[]));
        assert_eq!(pod.unsatisfied_on(&node).map(|(k, _)| k), Some("c"));
    }
}
