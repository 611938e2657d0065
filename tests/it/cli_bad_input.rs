//! Bad input to every command: exit code 1, a message that names the file, line and field and
//! says what would be valid, no panic, and nothing written (empty stdout, files untouched).

use crate::support::Workspace;

const CONFIG: &str = "cluster: { name: demo, region: us-east-1 }\n";

/// A config using the template directory `nodes/` of the workspace.
fn with_templates(ws: &Workspace, files: &[(&str, &str)]) {
    ws.write(
        "jointer.yaml",
        "cluster: { name: demo, region: us-east-1 }\ntemplates: { dir: nodes }\n",
    );
    for (name, text) in files {
        ws.write(&format!("nodes/{name}"), text);
    }
}

const CLASS: &str = "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: { name: default }
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms: [ { alias: al2023@latest } ]
  subnetSelectorTerms: [ { tags: { karpenter.sh/discovery: demo } } ]
  securityGroupSelectorTerms: [ { tags: { karpenter.sh/discovery: demo } } ]
";

/// A NodePool template whose 8th line is `requirement`.
fn pool_with_requirement(requirement: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{ name: default }}
spec:
  template:
    spec:
      requirements:
        - {requirement}
      nodeClassRef: {{ group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }}
"
    )
}

fn render_refuses_requirement(requirement: &str, message: &str) {
    let ws = Workspace::new();
    with_templates(
        &ws,
        &[
            ("class.yaml", CLASS),
            ("pool.yaml", &pool_with_requirement(requirement)),
        ],
    );
    ws.jointer(&["render"]).refused(&[
        "pool.yaml (rendered):8:",
        "NodePool/default",
        "spec.template.spec.requirements[0]",
        message,
    ]);
}

#[test]
fn yaml_syntax_error() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster:\n  name: demo\n  region: [us-east-1\n",
    );
    ws.jointer(&["render"])
        .refused(&["jointer.yaml:", "invalid YAML"]);
}

#[test]
fn unknown_field_names_the_valid_ones() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster: { name: demo, region: us-east-1 }\ncontroler: { replicas: 2 }\n",
    );
    ws.jointer(&["render"]).refused(&[
        "jointer.yaml:2:1",
        "unknown field `controler`",
        "controller",
    ]);
}

#[test]
fn wrong_type() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster: { name: demo, region: us-east-1 }\ncontroller:\n  replicas: two\n",
    );
    ws.jointer(&["render"])
        .refused(&["jointer.yaml:3:3", "controller.replicas", "invalid type"]);
}

#[test]
fn unknown_enum_value_lists_the_valid_ones() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster: { name: demo, region: us-east-1 }\nidentity: iam-user\n",
    );
    ws.jointer(&["render"])
        .refused(&["jointer.yaml:2:1", "identity", "pod-identity", "irsa"]);
}

#[test]
fn missing_cluster_name() {
    let ws = Workspace::new();
    ws.write("jointer.yaml", "cluster:\n  region: us-east-1\n");
    ws.jointer(&["render"])
        .refused(&["jointer.yaml:1:1", "cluster", "missing field `name`"]);
}

#[test]
fn invalid_cluster_name_and_region_are_both_reported() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster:\n  name: -demo\n  region: us-east\n",
    );
    let run = ws.jointer(&["render"]);
    run.refused(&[
        "jointer.yaml:2:3",
        "cluster.name",
        "not a valid EKS cluster name",
    ]);
    run.refused(&["jointer.yaml:3:3", "cluster.region", "e.g. us-east-1"]);
}

#[test]
fn invalid_duration_with_a_space() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        &format!("{CONFIG}templates:\n  values: {{ expire_after: 30 s }}\n"),
    );
    ws.jointer(&["render"]).refused(&[
        "nodepool.yaml.j2 (rendered):",
        "spec.template.spec.expireAfter",
        "invalid duration \"30 s\"",
        "1h30m",
    ]);
}

#[test]
fn negative_duration() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        &format!("{CONFIG}templates:\n  values: {{ expire_after: -1h }}\n"),
    );
    ws.jointer(&["render"]).refused(&[
        "spec.template.spec.expireAfter",
        "invalid duration \"-1h\"",
        "Never",
    ]);
}

#[test]
fn invalid_quantity() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        &format!("{CONFIG}templates:\n  values: {{ memory_limit: 10 GB }}\n"),
    );
    ws.jointer(&["render"])
        .refused(&["spec.limits.memory", "invalid quantity \"10 GB\"", "512Mi"]);
}

#[test]
fn gt_with_two_values() {
    render_refuses_requirement(
        "{ key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ['2', '3'] }",
        "single non-negative integer",
    );
}

#[test]
fn in_without_values() {
    render_refuses_requirement(
        "{ key: karpenter.k8s.aws/instance-category, operator: In }",
        "must have a value",
    );
}

#[test]
fn min_values_above_the_value_count() {
    render_refuses_requirement(
        "{ key: karpenter.k8s.aws/instance-category, operator: In, values: [c], minValues: 2 }",
        "minValues",
    );
}

#[test]
fn restricted_label_domain() {
    render_refuses_requirement(
        "{ key: karpenter.sh/team, operator: In, values: [x] }",
        "label domain \"karpenter.sh\" is restricted",
    );
    // A NodeClaim may name its NodePool; a NodePool's requirement list may not (the rule is on
    // the list, so the error points there).
    let ws = Workspace::new();
    with_templates(
        &ws,
        &[
            ("class.yaml", CLASS),
            (
                "pool.yaml",
                &pool_with_requirement("{ key: karpenter.sh/nodepool, operator: In, values: [x] }"),
            ),
        ],
    );
    ws.jointer(&["render"]).refused(&[
        "pool.yaml (rendered):7:",
        "NodePool/default spec.template.spec.requirements:",
        "label \"karpenter.sh/nodepool\" is restricted",
    ]);
}

#[test]
fn unknown_operator() {
    let ws = Workspace::new();
    with_templates(
        &ws,
        &[
            ("class.yaml", CLASS),
            (
                "pool.yaml",
                &pool_with_requirement("{ key: a, operator: Contains, values: [x] }"),
            ),
        ],
    );
    ws.jointer(&["render"]).refused(&[
        "pool.yaml (rendered):8:",
        "spec.template.spec.requirements[0].operator",
        "unknown variant `Contains`",
        "Gte",
    ]);
}

#[test]
fn budget_schedule_without_duration() {
    let pool = format!(
        "{}  disruption:\n    budgets:\n      - {{ nodes: '0', schedule: '0 9 * * *' }}\n",
        pool_with_requirement("{ key: a, operator: Exists }")
    );
    let ws = Workspace::new();
    with_templates(&ws, &[("class.yaml", CLASS), ("pool.yaml", &pool)]);
    ws.jointer(&["render"]).refused(&[
        "pool.yaml (rendered):12:",
        "spec.disruption.budgets[0]",
        "'schedule' must be set with 'duration'",
    ]);
}

#[test]
fn role_and_instance_profile_together() {
    let class = CLASS.replace(
        "  role: KarpenterNodeRole-demo\n",
        "  role: KarpenterNodeRole-demo\n  instanceProfile: my-profile\n",
    );
    let ws = Workspace::new();
    with_templates(&ws, &[("class.yaml", &class)]);
    ws.jointer(&["render"]).refused(&[
        "class.yaml (rendered):4:",
        "EC2NodeClass/default",
        "exactly one of ['role', 'instanceProfile']",
    ]);
}

#[test]
fn alias_without_version() {
    let class = CLASS.replace("al2023@latest", "al2023");
    let ws = Workspace::new();
    with_templates(&ws, &[("class.yaml", &class)]);
    ws.jointer(&["render"]).refused(&[
        "class.yaml (rendered):6:",
        "spec.amiSelectorTerms[0].alias",
        "family@version",
    ]);
}

#[test]
fn reserved_tag_key() {
    let class = format!("{CLASS}  tags: {{ kubernetes.io/cluster/demo: owned }}\n");
    let ws = Workspace::new();
    with_templates(&ws, &[("class.yaml", &class)]);
    ws.jointer(&["render"])
        .refused(&["class.yaml (rendered):9:", "spec.tags", "reserved"]);
}

#[test]
fn template_with_an_undefined_variable() {
    let ws = Workspace::new();
    with_templates(
        &ws,
        &[(
            "class.yaml",
            &CLASS.replace("KarpenterNodeRole-demo", "{{ values.rol }}"),
        )],
    );
    ws.jointer(&["render"]).refused(&[
        "nodes/class.yaml:5",
        "undefined variable in `values.rol`",
        "templates.values",
    ]);
}

#[test]
fn template_rendering_invalid_yaml() {
    let ws = Workspace::new();
    with_templates(
        &ws,
        &[(
            "class.yaml",
            "apiVersion: karpenter.k8s.aws/v1\nkind: [EC2NodeClass\n",
        )],
    );
    ws.jointer(&["render"])
        .refused(&["class.yaml (rendered):", "invalid YAML"]);
}

#[test]
fn template_syntax_error() {
    let ws = Workspace::new();
    with_templates(&ws, &[("class.yaml", "name: {{ cluster.name \n")]);
    ws.jointer(&["render"])
        .refused(&["nodes/class.yaml:1", "error"]);
}

#[test]
fn missing_file() {
    let ws = Workspace::new();
    ws.jointer(&["render", "-f", "nope.yaml"])
        .refused(&["nope.yaml", "file not found"]);
}

#[test]
fn unreadable_file_is_a_directory() {
    let ws = Workspace::new();
    ws.write("dir.yaml/x", "");
    ws.jointer(&["lint", "-f", "dir.yaml"])
        .refused(&["dir.yaml", "cannot read"]);
}

#[test]
fn empty_file() {
    let ws = Workspace::new();
    ws.write("jointer.yaml", "# nothing yet\n\n");
    ws.jointer(&["render"])
        .refused(&["jointer.yaml", "empty", "jointer init"]);
}

#[test]
fn builtin_and_dir_together() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        &format!("{CONFIG}templates:\n  builtin: split\n  dir: nodes\n"),
    );
    ws.jointer(&["render"])
        .refused(&["jointer.yaml:2:1", "either `builtin` or `dir`"]);
}

#[test]
fn template_directory_missing() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        &format!("{CONFIG}templates: {{ dir: missing }}\n"),
    );
    ws.jointer(&["render"])
        .refused(&["missing", "cannot read template directory"]);
}

#[test]
fn v1beta1_objects_in_templates_point_to_convert() {
    let ws = Workspace::new();
    with_templates(
        &ws,
        &[(
            "class.yaml",
            &CLASS.replace("karpenter.k8s.aws/v1", "karpenter.k8s.aws/v1beta1"),
        )],
    );
    ws.jointer(&["render"])
        .refused(&["class.yaml (rendered):1:1", "jointer convert"]);
}

#[test]
fn the_same_object_twice() {
    let ws = Workspace::new();
    with_templates(&ws, &[("a.yaml", CLASS), ("b.yaml", CLASS)]);
    ws.jointer(&["render"])
        .refused(&["EC2NodeClass/default is defined twice"]);
}

#[test]
fn init_refuses_to_overwrite() {
    let ws = Workspace::new();
    ws.write("jointer.yaml", "keep me\n");
    ws.jointer(&["init", "--cluster", "demo"])
        .refused(&["jointer.yaml", "already exists"]);
    assert_eq!(ws.read("jointer.yaml"), "keep me\n");
}

#[test]
fn init_refuses_an_invalid_cluster_name() {
    let ws = Workspace::new();
    ws.jointer(&["init", "--cluster", "my cluster"])
        .refused(&["--cluster", "not a valid EKS cluster name"]);
    assert!(!ws.path("jointer.yaml").exists());
}

#[test]
fn convert_refuses_a_bad_operator() {
    let ws = Workspace::new();
    let input = ws.fixture("convert/seed-v1beta1.yaml").replace(
        "operator: In, values: [\"amd64\"",
        "operator: Equals, values: [\"amd64\"",
    );
    ws.write("in.yaml", &input);
    ws.jointer(&["convert", "in.yaml"]).refused(&[
        "in.yaml:20:",
        "requirements[1].operator",
        "unknown variant `Equals`",
    ]);
}

#[test]
fn convert_refuses_malformed_yaml() {
    let ws = Workspace::new();
    ws.write(
        "in.yaml",
        "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\n  spec: x\n",
    );
    ws.jointer(&["convert", "in.yaml"])
        .refused(&["in.yaml:", "invalid YAML"]);
}

#[test]
fn convert_refuses_invalid_values_located_in_the_input() {
    let ws = Workspace::new();
    let input = ws
        .fixture("convert/seed-v1beta1.yaml")
        .replace("expireAfter: 720h", "expireAfter: 30 days")
        .replace(
            "values: [\"c\", \"m\", \"r\"]",
            "values: [\"c\"], minValues: 3",
        )
        .replace(
            "role: \"KarpenterNodeRole-demo\"",
            "role: \"KarpenterNodeRole-demo\"\n  instanceProfile: p",
        );
    ws.write("in.yaml", &input);
    let run = ws.jointer(&["convert", "in.yaml"]);
    // The moved expireAfter is reported where the user wrote it (spec.disruption, line 24).
    run.refused(&["in.yaml:24:", "invalid duration \"30 days\""]);
}

#[test]
fn convert_reports_every_validation_problem() {
    let ws = Workspace::new();
    let input = ws
        .fixture("convert/seed-v1beta1.yaml")
        .replace(
            "values: [\"c\", \"m\", \"r\"]",
            "values: [\"c\"], minValues: 3",
        )
        .replace(
            "role: \"KarpenterNodeRole-demo\"",
            "role: \"KarpenterNodeRole-demo\"\n  instanceProfile: p",
        );
    ws.write("in.yaml", &input);
    let run = ws.jointer(&["convert", "in.yaml"]);
    run.refused(&["in.yaml:22:", "requirements[2]", "minValues"]);
    run.refused(&["in.yaml:5:1", "exactly one of ['role', 'instanceProfile']"]);
}

#[test]
fn convert_refuses_kubelet_without_its_class() {
    let ws = Workspace::new();
    let pool = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: { name: p }\nspec:\n  template:\n    spec:\n      nodeClassRef: { name: elsewhere }\n      requirements: []\n      kubelet: { maxPods: 50 }\n";
    ws.write("pool.yaml", pool);
    ws.jointer(&["convert", "pool.yaml"]).refused(&[
        "NodePool/p",
        "kubelet",
        "\"elsewhere\"",
        "pass its file too",
    ]);
}

#[test]
fn convert_of_a_missing_file() {
    let ws = Workspace::new();
    ws.jointer(&["convert", "gone.yaml"])
        .refused(&["gone.yaml", "file not found"]);
}

#[test]
fn json_output_carries_the_same_diagnostics() {
    let ws = Workspace::new();
    ws.write("jointer.yaml", "cluster: { name: demo, region: nowhere }\n");
    let run = ws.jointer(&["render", "--output", "json"]);
    assert_eq!(run.code, 1, "{run:?}");
    let out: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert_eq!(out["ok"], false);
    let d = &out["diagnostics"][0];
    assert_eq!(d["field"], "cluster.region");
    assert_eq!(d["line"], 1);
    assert_eq!(d["severity"], "error");
}

#[test]
fn apply_refuses_an_interruption_queue_eventbridge_cannot_write_to_before_any_aws_call() {
    let ws = Workspace::new();
    ws.write(
        "jointer.yaml",
        "cluster: { name: demo, region: us-east-1 }\ninterruption: { kmsKeyId: alias/aws/sqs }\n",
    );
    // No AWS endpoint is configured for this test: the config is refused before any call.
    ws.jointer(&["apply", "--yes"]).refused(&[
        "jointer.yaml:2:",
        "interruption.kmsKeyId",
        "EventBridge cannot use",
    ]);
}

#[test]
fn bootstrap_commands_refuse_bad_templates_before_any_aws_call() {
    let ws = Workspace::new();
    with_templates(
        &ws,
        &[(
            "pool.yaml",
            &pool_with_requirement("        - { key: kubernetes.io/arch, operator: In }"),
        )],
    );
    for command in ["plan", "apply", "drift"] {
        ws.jointer(&[command])
            .refused(&["pool.yaml", "requirements"]);
    }
}

/// A v1 NodePool with fields of other Karpenter releases and a typo, line by line.
const POOL_WITH_UNKNOWN_FIELDS: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: { name: default, lables: { team: a } }
spec:
  disruption:
    consolidationThreshold: 0.5
    expireAfter: 720h
  ttlSecondsAfterEmpty: 30
  template:
    spec:
      kubelet: { maxPods: 20 }
      requirements:
        - { key: kubernetes.io/arch, operator: In, values: [amd64], minValue: 1 }
      nodeClassRef: { group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }
";

#[test]
fn simulate_reports_every_unknown_field_with_the_karpenter_version_it_comes_from() {
    let ws = Workspace::new();
    ws.write("class.yaml", CLASS);
    ws.write("pool.yaml", POOL_WITH_UNKNOWN_FIELDS);
    let run = ws.jointer(&[
        "simulate",
        "--nodepools",
        "class.yaml",
        "--nodepools",
        "pool.yaml",
    ]);
    run.refused(&[
        "pool.yaml:3:28:",
        "NodePool/default metadata.lables:",
        "unknown field `lables`",
        "`labels`",
    ]);
    run.refused(&[
        "pool.yaml:6:5:",
        "spec.disruption.consolidationThreshold:",
        "not in any Karpenter release",
        "consolidationPolicy: Balanced",
        "valid fields in spec.disruption: `budgets`, `consolidateAfter`, `consolidationPolicy`",
    ]);
    run.refused(&[
        "pool.yaml:7:5:",
        "spec.disruption.expireAfter:",
        "removed in Karpenter v1.0 (was v1beta1)",
        "spec.template.spec.expireAfter",
        "jointer convert",
    ]);
    run.refused(&[
        "pool.yaml:8:3:",
        "spec.ttlSecondsAfterEmpty:",
        "v1alpha5 Provisioner",
        "removed in v0.33",
        "consolidateAfter",
    ]);
    run.refused(&[
        "pool.yaml:11:7:",
        "spec.template.spec.kubelet:",
        "removed in Karpenter v1.0",
        "EC2NodeClass's spec.kubelet",
    ]);
    run.refused(&[
        "pool.yaml:13:",
        "spec.template.spec.requirements[0].minValue:",
        "not a field of Karpenter v1.15's NodePool",
        "`minValues`",
    ]);
    let errors = run
        .stderr
        .lines()
        .filter(|l| l.contains(": error:"))
        .count();
    assert_eq!(errors, 6, "one error per unknown field:\n{}", run.stderr);
}

#[test]
fn render_and_lint_report_unknown_fields_of_templates() {
    let ws = Workspace::new();
    let class = CLASS.replace(
        "  role: KarpenterNodeRole-demo\n",
        "  role: KarpenterNodeRole-demo\n  subnetSelector: { karpenter.sh/discovery: demo }\n",
    );
    with_templates(&ws, &[("class.yaml", &class)]);
    for command in ["render", "lint"] {
        ws.jointer(&[command]).refused(&[
            "class.yaml (rendered):6:3:",
            "EC2NodeClass/default spec.subnetSelector:",
            "v1alpha1 AWSNodeTemplate",
            "spec.subnetSelectorTerms",
        ]);
    }
}

#[test]
fn an_unknown_field_in_untyped_kubelet_settings_is_kept_not_refused() {
    // Upstream leaves the EC2NodeClass's kubelet open (any KubeletConfiguration field); render
    // must keep such a field, not drop it.
    let ws = Workspace::new();
    let class = format!("{CLASS}  kubelet: {{ maxPods: 20, containerLogMaxSize: 50Mi }}\n");
    with_templates(&ws, &[("class.yaml", &class)]);
    let run = ws.jointer(&["render"]);
    run.succeeded();
    assert!(
        run.stdout.contains("containerLogMaxSize: 50Mi"),
        "{}",
        run.stdout
    );
}

#[test]
fn an_ami_family_without_selector_terms_points_to_the_v1_alias() {
    let ws = Workspace::new();
    let class = CLASS.replace(
        "  amiSelectorTerms: [ { alias: al2023@latest } ]\n",
        "  amiFamily: Bottlerocket\n",
    );
    with_templates(&ws, &[("class.yaml", &class)]);
    ws.jointer(&["render"]).refused(&[
        "class.yaml (rendered):6:3:",
        "spec.amiFamily:",
        "required since Karpenter v1.0",
        "alias: bottlerocket@latest",
    ]);
}

#[test]
fn convert_reports_the_fields_it_cannot_carry() {
    let ws = Workspace::new();
    let input = ws
        .fixture("convert/seed-v1beta1.yaml")
        .replace(
            "  role: \"KarpenterNodeRole-demo\"\n",
            "  role: \"KarpenterNodeRole-demo\"\n  launchTemplate: my-template\n",
        )
        .replace(
            "consolidateAfter: 30s,",
            "consolidateAfter: 30s, consolidationThreshold: 0.5,",
        );
    ws.write("in.yaml", &input);
    let run = ws.jointer(&["convert", "in.yaml"]);
    run.refused(&[
        "in.yaml:8:3:",
        "EC2NodeClass/default spec.launchTemplate:",
        "v1alpha1 AWSNodeTemplate",
    ]);
    run.refused(&[
        "in.yaml:24:",
        "NodePool/default spec.disruption.consolidationThreshold:",
        "not in any Karpenter release",
    ]);
}

#[test]
fn simulate_refuses_a_workload_field_kubernetes_does_not_have() {
    // k8s-openapi's types ignore unknown fields: without the check the misspelt selector
    // would be dropped and the pod simulated as if it could go anywhere.
    let ws = Workspace::new();
    ws.write(
        "app.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: { name: app }
spec:
  replicas: 2
  selector: { matchLabels: { app: app } }
  template:
    metadata: { labels: { app: app } }
    spec:
      nodeSelektor: { kubernetes.io/arch: arm64 }
      containers:
        - { name: app, image: x, resources: { requests: { cpu: 500m } } }
",
    );
    ws.jointer(&["simulate", "--workload", "app.yaml"])
        .refused(&[
            "app.yaml:10:7:",
            "spec.template.spec.nodeSelektor:",
            "unknown field `nodeSelektor`",
            "Deployment",
        ]);
}

#[test]
fn a_v1beta1_value_names_its_v1_successor() {
    let ws = Workspace::new();
    let pool = pool_with_requirement("{ key: kubernetes.io/arch, operator: In, values: [amd64] }")
        + "  disruption: { consolidationPolicy: WhenUnderutilized }\n";
    with_templates(&ws, &[("class.yaml", CLASS), ("pool.yaml", &pool)]);
    ws.jointer(&["render"]).refused(&[
        "pool.yaml (rendered):10:",
        "spec.disruption.consolidationPolicy:",
        "removed in Karpenter v1.0",
        "WhenEmptyOrUnderutilized",
    ]);
}

#[test]
fn user_data_or_kubelet_settings_the_ami_family_cannot_take_are_located() {
    let bottlerocket = CLASS.replace("al2023@latest", "bottlerocket@latest");
    let cases = [
        (
            format!("{bottlerocket}  userData: \"[settings.kubernetes\"\n"),
            "class.yaml (rendered):9:",
            "spec.userData: not valid TOML, which Bottlerocket reads",
        ),
        (
            format!("{bottlerocket}  kubelet: {{ shutdownGracePeriod: 45s }}\n"),
            "class.yaml (rendered):9:",
            "spec.kubelet.shutdownGracePeriod: the Bottlerocket family",
        ),
        (
            format!("{CLASS}  userData: \"Content-Type: multipart/mixed\\n\\n--x\\n\"\n"),
            "class.yaml (rendered):9:",
            "MIME multipart without a boundary parameter",
        ),
    ];
    for (class, location, message) in cases {
        let ws = Workspace::new();
        with_templates(&ws, &[("class.yaml", &class)]);
        ws.jointer(&["render"])
            .refused(&[location, "EC2NodeClass/default", message]);
    }
}

/// One mistake per line of `jointer.yaml`: `render` exits 1, prints nothing on stdout, and a
/// diagnostic names the file, line and field and says what would be valid.
#[test]
fn config_mistakes_are_each_located_with_what_would_be_valid() {
    let cases: &[(&str, &[&str])] = &[
        (
            "identity: iam",
            &[":2:", "identity", "`pod-identity` or `irsa`"],
        ),
        (
            "controller: { install: docker }",
            &[":2:", "controller.install", "`bundled`, `helm`, `none`"],
        ),
        (
            "controller: { replicas: 0 }",
            &[":2:", "controller.replicas", "use 1 to 10"],
        ),
        (
            "controller: { replicas: 11 }",
            &[":2:", "controller.replicas", "use 1 to 10"],
        ),
        (
            "controller: { replicas: two }",
            &[":2:", "controller.replicas", "expected u32"],
        ),
        (
            "controller: { replicas: 1.5 }",
            &[":2:", "controller.replicas", "expected u32"],
        ),
        (
            "controller: { namespace: Kube_System }",
            &[":2:", "controller.namespace", "lower-case letters"],
        ),
        (
            "controller: { serviceAccount: \"\" }",
            &[":2:", "controller.serviceAccount", "lower-case letters"],
        ),
        (
            "controller: { image: { keepImages: 0 } }",
            &[":2:", "controller.image.keepImages", "keep 1 to 1000"],
        ),
        (
            "controller: { image: { keepImages: 1001 } }",
            &[":2:", "controller.image.keepImages", "keep 1 to 1000"],
        ),
        (
            "controller: { image: { ecrRepository: UPPER/Case } }",
            &[":2:", "controller.image.ecrRepository", "lower-case"],
        ),
        (
            "controller: { image: { tag: v1 } }",
            &[
                ":2:",
                "controller.image.tag",
                "add the published image's repository",
            ],
        ),
        (
            "controller: { image: { repository: ghcr.io/me/c, ecrRepository: jc/demo } }",
            &[":2:", "controller.image", "give one of them"],
        ),
        (
            "controller: { install: helm, helm: { chart: \"\" } }",
            &[":2:", "controller.helm.chart", "OCI reference"],
        ),
        (
            "controller: { settings: { NOT_A_SETTING: x } }",
            &[":2:", "controller.settings", "known: BATCH_IDLE_DURATION"],
        ),
        (
            "controller: { settings: { MIN_VALUES_POLICY: Sometimes } }",
            &[
                ":2:",
                "MIN_VALUES_POLICY",
                "is not one of Strict, BestEffort",
            ],
        ),
        (
            "controller: { settings: { BATCH_IDLE_DURATION: soon } }",
            &[":2:", "BATCH_IDLE_DURATION", "\"soon\" is not valid"],
        ),
        (
            "controller: { settings: { CLUSTER_NAME: other } }",
            &[":2:", "CLUSTER_NAME", "set by jointer"],
        ),
        (
            "interruption: maybe",
            &[":2:", "interruption", "true, false, or a mapping"],
        ),
        (
            "interruption: { enabled: true, queueName: \"bad name!\" }",
            &[":2:", "interruption.queueName", "1-80 letters"],
        ),
        (
            "interruption: { kmsKeyId: \"\" }",
            &[":2:", "interruption.kmsKeyId", "key ID, ARN or alias"],
        ),
        (
            "interruption: { kmsKeyId: alias/aws/sqs }",
            &[":2:", "interruption.kmsKeyId", "EventBridge cannot use"],
        ),
        (
            "discovery: { subnets: [vpc-123] }",
            &[":2:", "discovery.subnets", "starting with subnet-"],
        ),
        (
            "discovery: { subnets: [] }",
            &[":2:", "discovery.subnets", "use `auto` or list IDs"],
        ),
        (
            "discovery: { securityGroups: [subnet-1] }",
            &[":2:", "discovery.securityGroups", "starting with sg-"],
        ),
        (
            "discovery: { subnets: manual }",
            &[":2:", "discovery.subnets", "`auto` or a list of IDs"],
        ),
        (
            "discovery: { tagKey: \"\" }",
            &[":2:", "discovery.tagKey", "1-128 letters"],
        ),
        (
            "discovery: { tagKey: \"aws:reserved\" }",
            &[":2:", "discovery.tagKey", "AWS reserves"],
        ),
        (
            "nodeRole: { name: \"role with spaces\" }",
            &[":2:", "nodeRole.name", "1-64 letters"],
        ),
        (
            "nodeRole: { access: configmap }",
            &[
                ":2:",
                "nodeRole.access",
                "`auto`, `access-entry`, `aws-auth`",
            ],
        ),
        (
            "templates: { builtin: fancy }",
            &[":2:", "templates.builtin", "`default` or `split`"],
        ),
        (
            "templates: { values: [1, 2] }",
            &[":2:", "templates.values", "expected a map"],
        ),
        (
            "templates: { builtin: split, dir: nodes }",
            &[":2:", "templates", "not both"],
        ),
        (
            "identity: irsa\nidentity: pod-identity",
            &["jointer.yaml", "duplicate entry with key \"identity\""],
        ),
        (
            "controler: { replicas: 2 }",
            &[":2:", "controler", "controller"],
        ),
    ];
    for (line, needles) in cases {
        let ws = Workspace::new();
        ws.write("jointer.yaml", &format!("{CONFIG}{line}\n"));
        let mut expected = vec!["jointer.yaml"];
        expected.extend_from_slice(needles);
        ws.jointer(&["render"]).refused(&expected);
    }
    let cluster_cases: &[(&str, &[&str])] = &[
        (
            "cluster: { name: demo, region: useast1 }",
            &[":1:", "cluster.region", "e.g. us-east-1"],
        ),
        (
            "cluster: { name: -demo, region: us-east-1 }",
            &[":1:", "cluster.name", "starting with a letter or digit"],
        ),
        (
            "cluster: { name: null, region: us-east-1 }",
            &[":1:", "cluster.name", "expected a string"],
        ),
        (
            "cluster: { region: us-east-1 }",
            &["jointer.yaml", "cluster", "name"],
        ),
        ("cluster: []", &[":1:", "cluster", "invalid type: sequence"]),
        ("- cluster", &["jointer.yaml", "a mapping with `cluster:`"]),
        ("cluster:\n\tname: demo", &[":2:", "invalid YAML"]),
    ];
    for (text, needles) in cluster_cases {
        let ws = Workspace::new();
        ws.write("jointer.yaml", &format!("{text}\n"));
        ws.jointer(&["render"]).refused(needles);
    }
}

/// One mistake per node template, located in the rendered template with the object and field,
/// for what the API server's schema or CEL rules would refuse at apply.
#[test]
fn node_template_mistakes_are_each_located_before_any_apply() {
    let pool = |spec: &str, template_spec: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{ name: default }}\nspec:\n{spec}  template:\n    spec:\n{template_spec}      requirements: [ {{ key: kubernetes.io/arch, operator: In, values: [amd64] }} ]\n      nodeClassRef: {{ group: karpenter.k8s.aws, kind: EC2NodeClass, name: default }}\n"
        )
    };
    let pool_cases: &[(String, &[&str])] = &[
        (pool("  weight: 101\n", ""), &["pool.yaml (rendered):5:", "spec.weight", "between 1 and 100"]),
        (pool("  limits: { cpu: abc }\n", ""), &["pool.yaml (rendered):5:", "spec.limits.cpu", "e.g. 500m"]),
        (pool("  disruption: { consolidateAfter: soon }\n", ""), &["pool.yaml (rendered):5:", "consolidateAfter", "e.g. 30s"]),
        (pool("  disruption: { consolidationPolicy: Always }\n", ""), &["pool.yaml (rendered):5:", "consolidationPolicy", "`WhenEmptyOrUnderutilized`"]),
        (pool("  disruption: { budgets: [ { nodes: \"150%\" } ] }\n", ""), &["pool.yaml (rendered):5:", "budgets[0].nodes", "from 0% to 100%"]),
        (pool("  disruption: { budgets: [ { nodes: \"1\", schedule: every day, duration: 1h } ] }\n", ""), &["pool.yaml (rendered):5:", "budgets[0].schedule", "cron expression"]),
        (pool("  replicas: -1\n", ""), &["pool.yaml (rendered):5:", "spec.replicas", "may not be negative"]),
        (pool("", "      expireAfter: -1h\n"), &["pool.yaml (rendered):7:", "expireAfter", "e.g. 30s"]),
        (pool("", "      terminationGracePeriod: forever\n"), &["pool.yaml (rendered):7:", "terminationGracePeriod", "e.g. 30s"]),
        (pool("", "      taints: [ { key: a, effect: Sometimes } ]\n"), &["pool.yaml (rendered):7:", "taints[0].effect", "`NoSchedule`"]),
        (pool("", "      taints: [ { key: \"\", effect: NoSchedule } ]\n"), &["pool.yaml (rendered):7:", "taints[0].key", "at least 1 characters"]),
        (pool("", "      startupTaints: [ { key: \"bad key\", effect: NoSchedule } ]\n"), &["pool.yaml (rendered):7:", "startupTaints[0].key", "should match"]),
    ];
    for (text, needles) in pool_cases {
        let ws = Workspace::new();
        with_templates(&ws, &[("class.yaml", CLASS), ("pool.yaml", text)]);
        ws.jointer(&["render"]).refused(needles);
    }
    let valid_pool = pool("", "");
    let class_cases: &[(String, &[&str])] = &[
        (CLASS.replace("[ { alias: al2023@latest } ]", "[]"), &["class.yaml (rendered):6:", "amiSelectorTerms", "between 1 and 30"]),
        (CLASS.replace("al2023@latest", "ubuntu@latest"), &["class.yaml (rendered):6:", "alias", "al2023, bottlerocket"]),
        (CLASS.replace("role: KarpenterNodeRole-demo", "role: \"\""), &["class.yaml (rendered):5:", "spec.role", "role cannot be empty"]),
        (format!("{CLASS}  metadataOptions: {{ httpTokens: maybe }}\n"), &["class.yaml (rendered):9:", "httpTokens", "supported values: \"required\", \"optional\""]),
        (format!("{CLASS}  metadataOptions: {{ httpPutResponseHopLimit: 100 }}\n"), &["class.yaml (rendered):9:", "httpPutResponseHopLimit", "between 1 and 64"]),
        (format!("{CLASS}  blockDeviceMappings: [ {{ deviceName: /dev/xvda, ebs: {{ volumeSize: 0Gi }} }} ]\n"), &["class.yaml (rendered):9:", "volumeSize", "should match"]),
        (format!("{CLASS}  blockDeviceMappings: [ {{ deviceName: /dev/xvda, ebs: {{ volumeType: gp9 }} }} ]\n"), &["class.yaml (rendered):9:", "volumeType", "`gp3`"]),
        (format!("{CLASS}  kubelet: {{ maxPods: -1 }}\n"), &["class.yaml (rendered):9:", "kubelet.maxPods", "may not be negative"]),
        (format!("{CLASS}  kubelet: {{ evictionHard: {{ memory.available: 5 }} }}\n"), &["class.yaml (rendered):9:", "evictionHard", "expected a string"]),
        (format!("{CLASS}  tags: {{ kubernetes.io/cluster/x: owned }}\n"), &["class.yaml (rendered):9:", "spec.tags", "reserved"]),
        (format!("{CLASS}  associatePublicIPAddress: maybe\n"), &["class.yaml (rendered):9:", "associatePublicIPAddress", "expected a boolean"]),
        (CLASS.replace("[ { tags: { karpenter.sh/discovery: demo } } ]\n  securityGroup", "[ { id: subnet-1, tags: { a: b } } ]\n  securityGroup"), &["class.yaml (rendered):7:", "subnetSelectorTerms[0]", "mutually exclusive"]),
    ];
    for (text, needles) in class_cases {
        let ws = Workspace::new();
        with_templates(&ws, &[("class.yaml", text), ("pool.yaml", &valid_pool)]);
        ws.jointer(&["render"]).refused(needles);
    }
}
