//! Fields people write that jointer's v1 types do not have but a Karpenter release (or a
//! proposal) did: where they came from and what v1 says instead. Only the CLI needs this: the
//! API server refuses or prunes such fields before the controller could see them.
//!
//! Sources: Karpenter's upgrade guides (v0.32 introduced v1beta1 NodePool/EC2NodeClass in place
//! of the v1alpha5 Provisioner and v1alpha1 AWSNodeTemplate, v0.33 removed those; v1.0 moved
//! `expireAfter` and `kubelet` and replaced `nodeClassRef.apiVersion` by `group`) and
//! kubernetes-sigs/karpenter pull requests for the proposed fields that were not merged.

/// Where a field jointer does not carry is known from.
pub struct KnownField {
    pub kind: &'static str,
    /// Field path with array items as `[]`, e.g. `spec.template.spec.kubelet`.
    pub path: &'static str,
    /// Which Karpenter release had (or proposed) it and what to write instead.
    pub note: &'static str,
}

const fn field(kind: &'static str, path: &'static str, note: &'static str) -> KnownField {
    KnownField { kind, path, note }
}

const V1ALPHA5: &str =
    "a v1alpha5 Provisioner field (Karpenter v0.31 and earlier; removed in v0.33)";

/// The table, grouped by kind. Upstream v1.15.2's own fields are all carried (see
/// `controller/tests/it/upstream_api.rs`), so everything here is older, renamed or proposed.
pub const KNOWN_ELSEWHERE: &[KnownField] = &[
    // NodePool: v1beta1 fields v1 moved.
    field("NodePool", "spec.disruption.expireAfter",
        "removed in Karpenter v1.0 (was v1beta1): v1 moved it to spec.template.spec.expireAfter; `jointer convert` moves it"),
    field("NodePool", "spec.template.spec.kubelet",
        "removed in Karpenter v1.0 (was v1beta1): v1 moved kubelet settings to the EC2NodeClass's spec.kubelet; `jointer convert` moves them"),
    field("NodePool", "spec.template.spec.nodeClassRef.apiVersion",
        "removed in Karpenter v1.0 (was v1beta1): v1 names the class by `group` (karpenter.k8s.aws) and `kind`; `jointer convert` rewrites it"),
    // NodePool: proposed upstream, never released.
    field("NodePool", "spec.disruption.consolidationThreshold",
        "not in any Karpenter release (utilization thresholds were proposed upstream, not merged): `consolidationPolicy: Balanced` (Karpenter v1.15) consolidates only moves whose savings are worth their disruption"),
    field("NodePool", "spec.disruption.minSavingsPerDisruptionCost",
        "proposed in kubernetes-sigs/karpenter#2733 (not merged, in no release): `consolidationPolicy: Balanced` (Karpenter v1.15) weighs savings against disruption"),
    // NodePool: v1alpha5 Provisioner fields.
    field("NodePool", "spec.ttlSecondsAfterEmpty",
        "a v1alpha5 Provisioner field (Karpenter v0.31 and earlier; removed in v0.33): v1 says spec.disruption.consolidationPolicy: WhenEmpty with spec.disruption.consolidateAfter"),
    field("NodePool", "spec.ttlSecondsUntilExpired",
        "a v1alpha5 Provisioner field (Karpenter v0.31 and earlier; removed in v0.33): v1 says spec.template.spec.expireAfter (a duration such as 720h)"),
    field("NodePool", "spec.consolidation",
        "a v1alpha5 Provisioner field (Karpenter v0.31 and earlier; removed in v0.33): v1 says spec.disruption.consolidationPolicy"),
    field("NodePool", "spec.providerRef",
        "a v1alpha5 Provisioner field (Karpenter v0.31 and earlier; removed in v0.33): v1 says spec.template.spec.nodeClassRef {group, kind, name}"),
    field("NodePool", "spec.provider",
        "a v1alpha5 Provisioner field (Karpenter v0.31 and earlier; removed in v0.33): v1 puts launch settings in an EC2NodeClass referenced by spec.template.spec.nodeClassRef"),
    field("NodePool", "spec.kubeletConfiguration",
        "a v1alpha5 Provisioner field (Karpenter v0.31 and earlier; removed in v0.33): v1 puts kubelet settings in the EC2NodeClass's spec.kubelet"),
    field("NodePool", "spec.requirements", V1ALPHA5),
    field("NodePool", "spec.taints", V1ALPHA5),
    field("NodePool", "spec.startupTaints", V1ALPHA5),
    field("NodePool", "spec.labels", V1ALPHA5),
    field("NodePool", "spec.annotations", V1ALPHA5),
    // EC2NodeClass: v1alpha1 AWSNodeTemplate fields.
    field("EC2NodeClass", "spec.subnetSelector",
        "a v1alpha1 AWSNodeTemplate field (Karpenter v0.31 and earlier; removed in v0.33): v1 says spec.subnetSelectorTerms [{tags: …} or {id: …}]"),
    field("EC2NodeClass", "spec.securityGroupSelector",
        "a v1alpha1 AWSNodeTemplate field (Karpenter v0.31 and earlier; removed in v0.33): v1 says spec.securityGroupSelectorTerms [{tags: …}, {id: …} or {name: …}]"),
    field("EC2NodeClass", "spec.amiSelector",
        "a v1alpha1 AWSNodeTemplate field (Karpenter v0.31 and earlier; removed in v0.33): v1 says spec.amiSelectorTerms (e.g. [{alias: al2023@latest}])"),
    field("EC2NodeClass", "spec.launchTemplate",
        "a v1alpha1 AWSNodeTemplate field (Karpenter v0.31 and earlier; removed in v0.33): v1 has no custom launch templates; use userData, blockDeviceMappings and metadataOptions"),
    field("EC2NodeClass", "spec.instanceProfileName",
        "not an EC2NodeClass field: v1 says spec.instanceProfile (or spec.role, for which Karpenter manages the profile)"),
];

/// A value a Karpenter release took at a field that v1 no longer does.
pub struct KnownValue {
    pub kind: &'static str,
    /// A field path without arrays, e.g. `spec.disruption.consolidationPolicy`.
    pub path: &'static str,
    pub value: &'static str,
    pub note: &'static str,
}

pub const KNOWN_VALUES: &[KnownValue] = &[KnownValue {
    kind: "NodePool",
    path: "spec.disruption.consolidationPolicy",
    value: "WhenUnderutilized",
    note: "`WhenUnderutilized` was removed in Karpenter v1.0 (a v1beta1 value): v1 says WhenEmptyOrUnderutilized (or Balanced, v1.15); `jointer convert` renames it",
}];

/// What is known about a value a document gives `kind`'s field at `path`, if anything.
pub fn value_history(kind: &str, path: &str, value: &str) -> Option<&'static str> {
    KNOWN_VALUES
        .iter()
        .find(|v| v.kind == kind && v.path == path && v.value == value)
        .map(|v| v.note)
}

/// Where V1ALPHA5 entries point to: the v1 place of a Provisioner field that only moved.
fn v1alpha5_move(path: &str) -> Option<&'static str> {
    Some(match path {
        "spec.requirements" => "spec.template.spec.requirements",
        "spec.taints" => "spec.template.spec.taints",
        "spec.startupTaints" => "spec.template.spec.startupTaints",
        "spec.labels" => "spec.template.metadata.labels",
        "spec.annotations" => "spec.template.metadata.annotations",
        _ => return None,
    })
}

/// `spec.requirements[3].foo` → `spec.requirements[].foo`.
pub fn generic_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// What is known about `path` of a `kind` from other Karpenter releases, if anything.
pub fn history(kind: &str, path: &str) -> Option<String> {
    let generic = generic_path(path);
    let known = KNOWN_ELSEWHERE
        .iter()
        .find(|f| f.kind == kind && f.path == generic)?;
    Some(match v1alpha5_move(known.path) {
        Some(to) => format!("{}: v1 says {to}", known.note),
        None => known.note.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_indexes_are_generic() {
        assert_eq!(
            generic_path("spec.requirements[12].values[0]"),
            "spec.requirements[].values[]"
        );
    }

    #[test]
    fn known_fields_name_their_release_and_the_v1_place() {
        let note = history("NodePool", "spec.disruption.expireAfter").expect("known");
        assert!(note.contains("v1.0") && note.contains("spec.template.spec.expireAfter"));
        let note = history("NodePool", "spec.taints").expect("known");
        assert!(note.contains("v1alpha5") && note.ends_with("spec.template.spec.taints"));
        assert_eq!(history("EC2NodeClass", "spec.disruption.expireAfter"), None);
        assert_eq!(history("NodePool", "spec.nothing"), None);
    }

    #[test]
    fn known_values_are_found_only_at_their_field() {
        let note = value_history(
            "NodePool",
            "spec.disruption.consolidationPolicy",
            "WhenUnderutilized",
        );
        assert!(note.is_some_and(|n| n.contains("WhenEmptyOrUnderutilized")));
        assert_eq!(
            value_history(
                "NodePool",
                "spec.disruption.consolidationPolicy",
                "WhenEmpty"
            ),
            None
        );
    }

    #[test]
    fn no_entry_is_a_field_jointer_carries() {
        // A field of the v1 schema must never be described as unknown.
        for f in KNOWN_ELSEWHERE {
            let carried = crate::input::unknown_fields::schema_has(f.kind, f.path);
            assert!(
                !carried,
                "{} {} is carried by jointer's CRD",
                f.kind, f.path
            );
        }
    }
}
