//! The CEL rules of the generated CRDs, evaluated offline through `Validate`.

use jointer_controller::api::{
    EC2NodeClass, FieldError, NodeClaim, NodeOverlay, NodePool, Validate,
};

fn nodepool(spec: &str) -> NodePool {
    let yaml = format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{ name: p }}\nspec:\n{spec}"
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("fixture does not parse: {e}\n{yaml}"))
}

fn nodeclass(spec: &str) -> EC2NodeClass {
    let yaml = format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{ name: c }}\nspec:\n{spec}"
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("fixture does not parse: {e}\n{yaml}"))
}

const POOL_TEMPLATE: &str = "  template:\n    spec:\n      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }\n";

fn pool_with_requirement(req: &str) -> NodePool {
    nodepool(&format!("{POOL_TEMPLATE}      requirements: [ {req} ]\n"))
}

const CLASS_BASE: &str = "  role: KarpenterNodeRole-demo\n  subnetSelectorTerms: [ { tags: { karpenter.sh/discovery: demo } } ]\n  securityGroupSelectorTerms: [ { tags: { karpenter.sh/discovery: demo } } ]\n";

fn class_with(extra: &str) -> EC2NodeClass {
    nodeclass(&format!("{CLASS_BASE}{extra}"))
}

fn assert_single_error(errors: &[FieldError], path: &str, needle: &str) {
    assert!(
        errors
            .iter()
            .any(|e| e.path == path && e.message.contains(needle)),
        "expected an error at {path} containing {needle:?}, got {errors:#?}"
    );
    assert!(
        errors.iter().all(|e| !e.message.starts_with("internal")),
        "a rule failed to evaluate: {errors:#?}"
    );
}

#[test]
fn a_complete_valid_pool_passes() {
    let pool = nodepool(&format!(
        "{POOL_TEMPLATE}      requirements:\n        - {{ key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand] }}\n        - {{ key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r], minValues: 2 }}\n        - {{ key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ['2'] }}\n        - {{ key: example.com/team, operator: Exists }}\n  limits: {{ cpu: 1000, memory: 1000Gi }}\n  weight: 10\n  disruption:\n    budgets: [ {{ nodes: '20%' }}, {{ nodes: '0', schedule: '0 9 * * mon-fri', duration: 8h, reasons: [Drifted] }} ]\n"
    ));
    assert_eq!(pool.validate(), vec![]);
}

#[test]
fn in_needs_values() {
    let errors = pool_with_requirement("{ key: a, operator: In }").validate();
    assert_single_error(
        &errors,
        "spec.template.spec.requirements[0]",
        "must have a value",
    );
}

#[test]
fn numeric_operators_need_one_non_negative_integer() {
    for values in ["['1', '2']", "['-1']", "['x']", "[]"] {
        let errors =
            pool_with_requirement(&format!("{{ key: a, operator: Gt, values: {values} }}"))
                .validate();
        assert_single_error(
            &errors,
            "spec.template.spec.requirements[0]",
            "single non-negative integer",
        );
    }
    assert_eq!(
        pool_with_requirement("{ key: a, operator: Lte, values: ['4'] }").validate(),
        vec![]
    );
}

#[test]
fn min_values_cannot_exceed_values() {
    let errors =
        pool_with_requirement("{ key: a, operator: In, values: [x, y], minValues: 3 }").validate();
    assert_single_error(&errors, "spec.template.spec.requirements[0]", "minValues");
}

#[test]
fn restricted_label_domains_are_refused() {
    for key in [
        "kubernetes.io/hostname",
        "karpenter.sh/custom",
        "x.karpenter.sh/y",
    ] {
        let errors =
            pool_with_requirement(&format!("{{ key: {key}, operator: Exists }}")).validate();
        assert_single_error(&errors, "spec.template.spec.requirements[0]", "restricted");
    }
    // A NodeClaim may name its NodePool (upstream's controller writes it); a NodePool may not:
    // the rule is on the NodePool's list.
    let errors =
        pool_with_requirement("{ key: karpenter.sh/nodepool, operator: Exists }").validate();
    assert_single_error(&errors, "spec.template.spec.requirements", "restricted");
    let errors = nodepool(&format!(
        "  template:\n    metadata: {{ labels: {{ karpenter.sh/foo: x }} }}\n{}      requirements: []\n",
        &POOL_TEMPLATE["  template:\n".len()..]
    ))
    .validate();
    assert_single_error(&errors, "spec.template.metadata.labels", "restricted");
}

#[test]
fn budget_schedule_needs_duration() {
    let errors = nodepool(&format!(
        "{POOL_TEMPLATE}      requirements: []\n  disruption: {{ budgets: [ {{ nodes: '1', schedule: '@daily' }} ] }}\n"
    ))
    .validate();
    assert_single_error(
        &errors,
        "spec.disruption.budgets[0]",
        "'schedule' must be set with 'duration'",
    );
}

#[test]
fn budget_nodes_and_weight_are_bounded() {
    let errors = nodepool(&format!(
        "{POOL_TEMPLATE}      requirements: []\n  weight: 0\n  disruption: {{ budgets: [ {{ nodes: '150%' }} ] }}\n"
    ))
    .validate();
    assert_single_error(&errors, "spec.weight", "between 1 and 100");
    assert_single_error(&errors, "spec.disruption.budgets[0].nodes", "percentage");
}

#[test]
fn empty_node_class_ref_name_is_refused() {
    let errors = nodepool(
        "  template:\n    spec:\n      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: '' }\n      requirements: []\n",
    )
    .validate();
    assert_single_error(
        &errors,
        "spec.template.spec.nodeClassRef.name",
        "may not be empty",
    );
}

#[test]
fn a_complete_valid_class_passes() {
    let class = class_with(
        "  amiSelectorTerms: [ { alias: al2023@latest } ]\n  tags: { team: platform }\n  kubelet: { maxPods: 110, evictionSoft: { memory.available: 5% }, evictionSoftGracePeriod: { memory.available: 1m } }\n  blockDeviceMappings: [ { deviceName: /dev/xvda, rootVolume: true, ebs: { volumeSize: 100Gi, volumeType: gp3 } } ]\n",
    );
    assert_eq!(class.validate(), vec![]);
    assert_eq!(class.spec.metadata_options.http_put_response_hop_limit, 1);
    assert_eq!(class.spec.metadata_options.http_tokens, "required");
}

#[test]
fn role_and_instance_profile_are_exclusive() {
    let errors =
        class_with("  instanceProfile: p\n  amiSelectorTerms: [ { alias: al2023@latest } ]\n")
            .validate();
    assert_single_error(
        &errors,
        "spec",
        "exactly one of ['role', 'instanceProfile']",
    );
}

#[test]
fn alias_needs_family_at_version_and_is_exclusive() {
    let errors = class_with("  amiSelectorTerms: [ { alias: al2023 } ]\n").validate();
    assert_single_error(&errors, "spec.amiSelectorTerms[0].alias", "family@version");
    let errors = class_with("  amiSelectorTerms: [ { alias: ubuntu@latest } ]\n").validate();
    assert_single_error(
        &errors,
        "spec.amiSelectorTerms[0].alias",
        "family is not supported",
    );
    let errors = class_with("  amiSelectorTerms: [ { alias: al2023@latest }, { id: ami-123 } ]\n")
        .validate();
    assert_single_error(&errors, "spec.amiSelectorTerms", "mutually exclusive");
    let errors = class_with("  amiFamily: AL2\n  amiSelectorTerms: [ { alias: al2023@latest } ]\n")
        .validate();
    assert_single_error(&errors, "spec", "must match the family of the alias");
    let errors = class_with("  amiSelectorTerms: [ { id: ami-123 } ]\n").validate();
    assert_single_error(&errors, "spec", "amiFamily is required");
}

#[test]
fn reserved_tag_keys_are_refused() {
    for key in [
        "karpenter.sh/nodepool",
        "kubernetes.io/cluster/demo",
        "eks:eks-cluster-name",
    ] {
        let errors = class_with(&format!(
            "  amiSelectorTerms: [ {{ alias: al2023@latest }} ]\n  tags: {{ '{key}': x }}\n"
        ))
        .validate();
        assert_single_error(&errors, "spec.tags", "reserved");
    }
}

#[test]
fn selector_terms_need_content() {
    let errors = nodeclass(
        "  role: r\n  subnetSelectorTerms: [ {} ]\n  securityGroupSelectorTerms: []\n  amiSelectorTerms: [ { alias: al2023@latest } ]\n",
    )
    .validate();
    assert_single_error(
        &errors,
        "spec.subnetSelectorTerms[0]",
        "needs 'tags' or 'id'",
    );
    assert_single_error(
        &errors,
        "spec.securityGroupSelectorTerms",
        "between 1 and 30",
    );
}

#[test]
fn nodeclaim_spec_is_valid_on_create() {
    let claim: NodeClaim = serde_yaml::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: { name: c }\nspec:\n  nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }\n  requirements: [ { key: node.kubernetes.io/instance-type, operator: In, values: [m5.large] }, { key: karpenter.sh/nodepool, operator: In, values: [default] } ]\n  resources: { requests: { cpu: 1500m, memory: 2Gi } }\n",
    )
    .unwrap();
    assert_eq!(claim.validate(), vec![]);
}

fn overlay(spec: &str) -> NodeOverlay {
    let yaml = format!(
        "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{ name: o }}\nspec:\n{spec}"
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("fixture does not parse: {e}\n{yaml}"))
}

const OVERLAY_M5: &str =
    "  requirements: [ { key: karpenter.k8s.aws/instance-family, operator: In, values: [m5] } ]\n";

#[test]
fn valid_overlays_pass() {
    for extra in [
        "  price: '0.05'\n  weight: 10\n",
        "  priceAdjustment: '-30%'\n",
        "  priceAdjustment: '-100%'\n",
        "  priceAdjustment: '+0.5'\n",
        "  priceAdjustment: '-.25'\n",
        "  capacity: { example.com/fpga: 2 }\n",
    ] {
        let o = overlay(&format!("{OVERLAY_M5}{extra}"));
        assert_eq!(o.validate(), vec![], "{extra}");
    }
    // An overlay may select a pool by name, which a NodePool's own requirements may not.
    let by_pool = overlay(
        "  requirements: [ { key: karpenter.sh/nodepool, operator: In, values: [batch] } ]\n  priceAdjustment: '-10%'\n",
    );
    assert_eq!(by_pool.validate(), vec![]);
}

#[test]
fn price_and_price_adjustment_exclude_each_other() {
    let errors = overlay(&format!(
        "{OVERLAY_M5}  price: '1'\n  priceAdjustment: '-1'\n"
    ))
    .validate();
    assert_single_error(
        &errors,
        "spec",
        "cannot set both 'price' and 'priceAdjustment'",
    );
}

#[test]
fn prices_and_adjustments_must_be_numbers_of_their_form() {
    for (extra, path, needle) in [
        ("  price: '-1'\n", "spec.price", "non-negative number"),
        ("  price: 'cheap'\n", "spec.price", "non-negative number"),
        (
            "  priceAdjustment: '10%'\n",
            "spec.priceAdjustment",
            "signed",
        ),
        (
            "  priceAdjustment: '-101%'\n",
            "spec.priceAdjustment",
            "at most -100%",
        ),
        (
            "  priceAdjustment: '0.5'\n",
            "spec.priceAdjustment",
            "signed",
        ),
    ] {
        let errors = overlay(&format!("{OVERLAY_M5}{extra}")).validate();
        assert_single_error(&errors, path, needle);
    }
}

#[test]
fn overlay_capacity_adds_only_extended_resources() {
    let errors = overlay(&format!("{OVERLAY_M5}  capacity: {{ memory: 1Gi }}\n")).validate();
    assert_single_error(&errors, "spec.capacity", "only add extended resources");
}

#[test]
fn overlay_weight_is_between_1_and_10000() {
    for w in ["0", "10001"] {
        let errors = overlay(&format!("{OVERLAY_M5}  weight: {w}\n")).validate();
        assert_single_error(&errors, "spec.weight", "between 1 and 10000");
    }
}

#[test]
fn overlay_requirements_follow_upstreams_rules() {
    for (req, needle) in [
        ("{ key: a, operator: NotIn }", "must have a value"),
        (
            "{ key: a, operator: Gt, values: ['x'] }",
            "single non-negative integer",
        ),
        (
            "{ key: karpenter.sh/registered, operator: Exists }",
            "karpenter.sh",
        ),
        (
            "{ key: kubernetes.io/hostname, operator: Exists }",
            "hostname",
        ),
        (
            "{ key: karpenter.k8s.aws/made-up, operator: Exists }",
            "karpenter.k8s.aws",
        ),
        (
            "{ key: 'bad key', operator: Exists }",
            "qualified label name",
        ),
    ] {
        let errors = overlay(&format!("  requirements: [ {req} ]\n")).validate();
        assert_single_error(&errors, "spec.requirements[0]", needle);
    }
}

#[test]
fn a_static_pool_takes_only_limits_nodes_and_no_weight() {
    let ok = nodepool(&format!(
        "  replicas: 3\n  limits: {{ nodes: 5 }}\n{POOL_TEMPLATE}      requirements: []\n"
    ));
    assert!(ok.validate().is_empty(), "{:#?}", ok.validate());
    let weighted = nodepool(&format!(
        "  replicas: 3\n  weight: 10\n{POOL_TEMPLATE}      requirements: []\n"
    ));
    assert_single_error(
        &weighted.validate(),
        "spec",
        "weight is not supported on a static NodePool",
    );
    let cpu = nodepool(&format!(
        "  replicas: 3\n  limits: {{ cpu: 100 }}\n{POOL_TEMPLATE}      requirements: []\n"
    ));
    assert_single_error(&cpu.validate(), "spec", "supports only limits.nodes");
    let negative = nodepool(&format!(
        "  replicas: -1\n{POOL_TEMPLATE}      requirements: []\n"
    ));
    assert!(
        negative
            .validate()
            .iter()
            .any(|e| e.message.contains("may not be negative")),
        "{:#?}",
        negative.validate()
    );
}

#[test]
fn efa_interfaces_need_the_primary_and_no_repeated_slot() {
    let alias = "  amiSelectorTerms: [ { alias: al2023@latest } ]\n";
    let primary = "{ networkCardIndex: 0, deviceIndex: 0, interfaceType: interface }";
    let efa = "{ networkCardIndex: 1, deviceIndex: 1, interfaceType: efa-only }";
    let ok = class_with(&format!(
        "{alias}  networkInterfaces: [ {primary}, {efa} ]\n"
    ));
    assert!(ok.validate().is_empty(), "{:#?}", ok.validate());
    let no_primary = class_with(&format!("{alias}  networkInterfaces: [ {efa} ]\n"));
    assert_single_error(
        &no_primary.validate(),
        "spec.networkInterfaces",
        "must include the primary interface",
    );
    let twice = class_with(&format!(
        "{alias}  networkInterfaces: [ {primary}, {efa}, {efa} ]\n"
    ));
    assert_single_error(
        &twice.validate(),
        "spec.networkInterfaces",
        "may not repeat",
    );
    let both = class_with(&format!(
        "{alias}  placementGroupSelector: {{ name: a, id: pg-1 }}\n"
    ));
    assert_single_error(&both.validate(), "spec.placementGroupSelector", "not both");
}
