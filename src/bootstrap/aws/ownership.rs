//! Ownership tags: how jointer knows, with no state file, what it created and which tags it
//! added to resources it does not own.

use std::collections::BTreeMap;

pub const MANAGED_BY_KEY: &str = "jointer.dev/managed-by";
pub const MANAGED_BY_VALUE: &str = "jointer";
pub const CLUSTER_KEY: &str = "jointer.dev/cluster";
/// On a shared resource (subnet, security group): the tag keys jointer itself added there,
/// space-separated, so teardown removes those and leaves tags that were there before.
pub const ADDED_TAGS_KEY: &str = "jointer.dev/added-tags";

/// The tags on everything jointer creates for `cluster`.
pub fn tags(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_KEY.to_string(), MANAGED_BY_VALUE.to_string()),
        (CLUSTER_KEY.to_string(), cluster.to_string()),
    ])
}

/// Who a resource with these tags belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Created by jointer for this cluster.
    Us,
    /// Created by jointer for another cluster.
    OtherCluster(String),
    /// Not created by jointer.
    Foreign,
}

pub fn owner<'a>(cluster: &str, tags: impl IntoIterator<Item = (&'a str, &'a str)>) -> Owner {
    let tags: BTreeMap<&str, &str> = tags.into_iter().collect();
    if tags.get(MANAGED_BY_KEY) != Some(&MANAGED_BY_VALUE) {
        return Owner::Foreign;
    }
    match tags.get(CLUSTER_KEY) {
        Some(c) if *c == cluster => Owner::Us,
        Some(c) => Owner::OtherCluster(c.to_string()),
        None => Owner::Foreign,
    }
}

/// Whose resources a run may change: this cluster's, and with `--adopt` also those with
/// jointer's names that jointer did not create. The pure diffs take this instead of a context.
#[derive(Debug, Clone)]
pub struct Ownership {
    pub cluster: String,
    pub adopt: bool,
}

impl Ownership {
    /// The tags jointer puts on what it creates.
    pub fn tags(&self) -> BTreeMap<String, String> {
        tags(&self.cluster)
    }

    pub fn owns(&self, tags: &BTreeMap<String, String>) -> bool {
        owner(
            &self.cluster,
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ) == Owner::Us
    }
}

/// The error for a name that is taken by something jointer does not own.
pub fn conflict(resource: &str, owner: &Owner, cluster: &str, rename_hint: &str) -> anyhow::Error {
    let whose = match owner {
        Owner::OtherCluster(c) => format!("jointer manages it for cluster {c:?}"),
        _ => format!(
            "it lacks the tags {MANAGED_BY_KEY}={MANAGED_BY_VALUE}, {CLUSTER_KEY}={cluster}"
        ),
    };
    anyhow::anyhow!(
        "{resource} already exists and jointer does not own it ({whose}): {rename_hint}, or re-run with --adopt to take it over"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_needs_both_tags_and_the_cluster() {
        let ours = tags("demo");
        let pairs: Vec<(&str, &str)> = ours.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(owner("demo", pairs.clone()), Owner::Us);
        assert_eq!(owner("prod", pairs), Owner::OtherCluster("demo".into()));
        assert_eq!(owner("demo", [(CLUSTER_KEY, "demo")]), Owner::Foreign);
        assert_eq!(owner("demo", []), Owner::Foreign);
    }
}
