//! The controller's permission set (Karpenter v1, scoped by tags) and the trust documents of
//! the two roles, as typed statements. Split into several managed policies so that each stays
//! under IAM's 6,144-character limit even for a 100-character cluster name.

use jointer_controller::api::labels;
use serde_json::json;

use super::policy::{Document, Partition, Statement};

/// What the documents name.
#[derive(Debug, Clone)]
pub struct Scope {
    pub partition: Partition,
    pub region: String,
    pub account: String,
    pub cluster: String,
    pub node_role_name: String,
    /// The interruption queue, when interruption handling is on.
    pub queue_name: Option<String>,
    /// The users' own SSM parameters classes select AMIs by (`amiSelectorTerms[].ssmParameter`).
    pub ssm_parameters: Vec<String>,
}

impl Scope {
    fn arn(&self, service: &str, region: &str, account: &str, resource: &str) -> String {
        format!(
            "arn:{}:{service}:{region}:{account}:{resource}",
            self.partition.name()
        )
    }

    pub fn node_role_arn(&self) -> String {
        self.arn(
            "iam",
            "",
            &self.account,
            &format!("role/{}", self.node_role_name),
        )
    }

    pub fn cluster_arn(&self) -> String {
        self.arn(
            "eks",
            &self.region,
            &self.account,
            &format!("cluster/{}", self.cluster),
        )
    }

    pub fn queue_arn(&self, queue: &str) -> String {
        self.arn("sqs", &self.region, &self.account, queue)
    }

    /// Any account: AMIs and snapshots may belong to Amazon or a publisher.
    fn ec2(&self, resource: &str) -> String {
        self.arn("ec2", &self.region, "*", resource)
    }
}

/// One customer-managed policy of the controller role.
#[derive(Debug, Clone)]
pub struct NamedPolicy {
    /// Short group name, appended to the role name to form the policy name.
    pub group: &'static str,
    pub document: Document,
}

const CREATE_ACTIONS: [&str; 3] = ["RunInstances", "CreateFleet", "CreateLaunchTemplate"];

/// The tagged-for-the-cluster conditions on resources the controller creates.
fn request_tags(s: Statement, scope: &Scope) -> Statement {
    s.when(
        "StringEquals",
        &format!("aws:RequestTag/{}", labels::cluster_tag(&scope.cluster)),
        &["owned"],
    )
    .when(
        "StringEquals",
        &format!("aws:RequestTag/{}", labels::EKS_CLUSTER_TAG),
        &[&scope.cluster],
    )
    .when(
        "StringLike",
        &format!("aws:RequestTag/{}", labels::NODEPOOL),
        &["*"],
    )
}

/// The owned-by-the-cluster conditions on resources the controller touches later.
fn resource_tags(s: Statement, scope: &Scope) -> Statement {
    s.when(
        "StringEquals",
        &format!("aws:ResourceTag/{}", labels::cluster_tag(&scope.cluster)),
        &["owned"],
    )
    .when(
        "StringLike",
        &format!("aws:ResourceTag/{}", labels::NODEPOOL),
        &["*"],
    )
}

fn created_resources(scope: &Scope) -> Vec<String> {
    [
        "fleet/*",
        "instance/*",
        "volume/*",
        "network-interface/*",
        "launch-template/*",
        "spot-instances-request/*",
    ]
    .iter()
    .map(|r| scope.ec2(r))
    .collect()
}

fn node_lifecycle(scope: &Scope) -> Document {
    let instance_access = Statement::allow(
        "AllowScopedEC2InstanceAccessActions",
        &["ec2:RunInstances", "ec2:CreateFleet"],
        vec![
            scope.ec2("image/*"),
            scope.ec2("snapshot/*"),
            scope.ec2("security-group/*"),
            scope.ec2("subnet/*"),
            scope.ec2("capacity-reservation/*"),
            scope.ec2("placement-group/*"),
        ],
    );
    let launch_template_access = resource_tags(
        Statement::allow(
            "AllowScopedEC2LaunchTemplateAccessActions",
            &["ec2:RunInstances", "ec2:CreateFleet"],
            vec![scope.ec2("launch-template/*")],
        ),
        scope,
    );
    let create_with_tags = request_tags(
        Statement::allow(
            "AllowScopedEC2InstanceActionsWithTags",
            &[
                "ec2:RunInstances",
                "ec2:CreateFleet",
                "ec2:CreateLaunchTemplate",
            ],
            created_resources(scope),
        ),
        scope,
    );
    let tag_on_create = request_tags(
        Statement::allow(
            "AllowScopedResourceCreationTagging",
            &["ec2:CreateTags"],
            created_resources(scope),
        ),
        scope,
    )
    .when("StringEquals", "ec2:CreateAction", &CREATE_ACTIONS);
    let tag_later = resource_tags(
        Statement::allow(
            "AllowScopedResourceTagging",
            &["ec2:CreateTags"],
            vec![scope.ec2("instance/*")],
        ),
        scope,
    )
    .when(
        "ForAllValues:StringEquals",
        "aws:TagKeys",
        &[labels::EKS_CLUSTER_TAG, labels::NODECLAIM_TAG, "Name"],
    );
    let delete = resource_tags(
        Statement::allow(
            "AllowScopedDeletion",
            &["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            vec![scope.ec2("instance/*"), scope.ec2("launch-template/*")],
        ),
        scope,
    );
    Document::new(vec![
        instance_access,
        launch_template_access,
        create_with_tags,
        tag_on_create,
        tag_later,
        delete,
    ])
}

/// Conditions on instance profiles the controller creates (`RequestTag`) or manages
/// (`ResourceTag`): this cluster's, in this region, for some EC2NodeClass.
fn profile_tags(s: Statement, scope: &Scope, tag: &str) -> Statement {
    let s = s
        .when(
            "StringEquals",
            &format!("aws:{tag}/{}", labels::cluster_tag(&scope.cluster)),
            &["owned"],
        )
        .when(
            "StringEquals",
            &format!("aws:{tag}/{}", labels::REGION),
            &[&scope.region],
        )
        .when(
            "StringLike",
            &format!("aws:{tag}/{}", labels::EC2NODECLASS),
            &["*"],
        );
    if tag == "RequestTag" {
        s.when(
            "StringEquals",
            &format!("aws:RequestTag/{}", labels::EKS_CLUSTER_TAG),
            &[&scope.cluster],
        )
    } else {
        s
    }
}

fn iam_integration(scope: &Scope) -> Document {
    let profile = scope.arn("iam", "", &scope.account, "instance-profile/*");
    let pass_role = Statement::allow(
        "AllowPassingInstanceRole",
        &["iam:PassRole"],
        vec![scope.node_role_arn()],
    )
    .when(
        "StringEquals",
        "iam:PassedToService",
        &ec2_principals(scope),
    );
    let create_profile = profile_tags(
        Statement::allow(
            "AllowScopedInstanceProfileCreationActions",
            &["iam:CreateInstanceProfile"],
            vec![profile.clone()],
        ),
        scope,
        "RequestTag",
    );
    let tag_profile = profile_tags(
        profile_tags(
            Statement::allow(
                "AllowScopedInstanceProfileTagActions",
                &["iam:TagInstanceProfile"],
                vec![profile.clone()],
            ),
            scope,
            "ResourceTag",
        ),
        scope,
        "RequestTag",
    );
    let manage_profile = profile_tags(
        Statement::allow(
            "AllowScopedInstanceProfileActions",
            &[
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            vec![profile.clone()],
        ),
        scope,
        "ResourceTag",
    );
    let read_profile = Statement::allow(
        "AllowInstanceProfileReadActions",
        &["iam:GetInstanceProfile"],
        vec![profile],
    );
    let list_profiles = Statement::allow(
        "AllowInstanceProfileListActions",
        &["iam:ListInstanceProfiles"],
        vec!["*".into()],
    );
    Document::new(vec![
        pass_role,
        create_profile,
        tag_profile,
        manage_profile,
        read_profile,
        list_profiles,
    ])
}

/// EC2's service principal everywhere, plus China's own name for it there.
fn ec2_principals(scope: &Scope) -> Vec<&'static str> {
    let mut principals = vec!["ec2.amazonaws.com"];
    if scope.partition.ec2_principal() != principals[0] {
        principals.push(scope.partition.ec2_principal());
    }
    principals
}

fn eks_integration(scope: &Scope) -> Document {
    Document::new(vec![Statement::allow(
        "AllowAPIServerEndpointDiscovery",
        &["eks:DescribeCluster"],
        vec![scope.cluster_arn()],
    )])
}

fn interruption(scope: &Scope, queue: &str) -> Document {
    Document::new(vec![Statement::allow(
        "AllowInterruptionQueueActions",
        &["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
        vec![scope.queue_arn(queue)],
    )])
}

fn resource_discovery(scope: &Scope) -> Document {
    let describe = Statement::allow(
        "AllowRegionalReadActions",
        &[
            "ec2:DescribeCapacityReservations",
            "ec2:DescribeImages",
            "ec2:DescribeInstances",
            "ec2:DescribeInstanceStatus",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplates",
            "ec2:DescribePlacementGroups",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeSpotPriceHistory",
            "ec2:DescribeSubnets",
        ],
        vec!["*".into()],
    )
    .when("StringEquals", "aws:RequestedRegion", &[&scope.region]);
    // EKS's public AMI parameters, and exactly the users' own ones their classes name.
    let mut parameters = vec![scope.arn("ssm", &scope.region, "", "parameter/aws/service/*")];
    parameters.extend(scope.ssm_parameters.iter().map(|name| {
        scope.arn(
            "ssm",
            &scope.region,
            &scope.account,
            &format!("parameter/{}", name.trim_start_matches('/')),
        )
    }));
    let ssm = Statement::allow("AllowSSMReadActions", &["ssm:GetParameter"], parameters);
    let pricing = Statement::allow(
        "AllowPricingReadActions",
        &["pricing:GetProducts"],
        vec!["*".into()],
    );
    // Zonal shift: the condition key, not the resource, is what scopes this action.
    let zonal_shift = Statement::allow(
        "AllowUnscopedZonalShiftReadActions",
        &["arc-zonal-shift:GetManagedResource"],
        vec!["*".into()],
    )
    .when(
        "StringEquals",
        "arc-zonal-shift:ResourceIdentifier",
        &[&scope.cluster_arn()],
    );
    Document::new(vec![describe, ssm, pricing, zonal_shift])
}

/// The controller's policies, one per group.
pub fn controller_policies(scope: &Scope) -> Vec<NamedPolicy> {
    let mut policies = vec![
        NamedPolicy {
            group: "NodeLifecycle",
            document: node_lifecycle(scope),
        },
        NamedPolicy {
            group: "IAMIntegration",
            document: iam_integration(scope),
        },
        NamedPolicy {
            group: "EKSIntegration",
            document: eks_integration(scope),
        },
        NamedPolicy {
            group: "ResourceDiscovery",
            document: resource_discovery(scope),
        },
    ];
    if let Some(queue) = &scope.queue_name {
        policies.push(NamedPolicy {
            group: "Interruption",
            document: interruption(scope, queue),
        });
    }
    policies
}

/// Trust for EKS Pod Identity: the agent assumes the role and tags the session.
pub fn pod_identity_trust() -> Document {
    Document::new(vec![Statement::allow(
        "AllowEksPodIdentity",
        &["sts:AssumeRole", "sts:TagSession"],
        vec![],
    )
    .principal(json!({ "Service": "pods.eks.amazonaws.com" }))])
}

/// Trust for IRSA: only the controller's service account, through the cluster's OIDC provider.
pub fn irsa_trust(provider_arn: &str, issuer_host: &str, namespace: &str, sa: &str) -> Document {
    Document::new(vec![Statement::allow(
        "AllowServiceAccountWebIdentity",
        &["sts:AssumeRoleWithWebIdentity"],
        vec![],
    )
    .principal(json!({ "Federated": provider_arn }))
    .when(
        "StringEquals",
        &format!("{issuer_host}:sub"),
        &[&format!("system:serviceaccount:{namespace}:{sa}")],
    )
    .when(
        "StringEquals",
        &format!("{issuer_host}:aud"),
        &["sts.amazonaws.com"],
    )])
}

/// Trust for the node role: EC2 instances.
pub fn node_trust(partition: Partition) -> Document {
    Document::new(vec![Statement::allow(
        "AllowEC2",
        &["sts:AssumeRole"],
        vec![],
    )
    .principal(json!({ "Service": partition.ec2_principal() }))])
}

/// The AWS-managed policies the node role carries (IPv6 clusters use an account-local CNI
/// policy instead of the IPv4 one).
pub fn node_managed_policies(partition: Partition, account: &str, ipv6: bool) -> Vec<String> {
    let p = partition.name();
    let cni = if ipv6 {
        format!("arn:{p}:iam::{account}:policy/AmazonEKS_CNI_IPv6_Policy")
    } else {
        format!("arn:{p}:iam::aws:policy/AmazonEKS_CNI_Policy")
    };
    vec![
        format!("arn:{p}:iam::aws:policy/AmazonEKSWorkerNodePolicy"),
        cni,
        format!("arn:{p}:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly"),
        format!("arn:{p}:iam::aws:policy/AmazonSSMManagedInstanceCore"),
    ]
}

/// The account-local CNI policy IPv6 clusters need (AWS documents it; it is not AWS-managed).
pub fn cni_ipv6_policy(partition: Partition) -> Document {
    Document::new(vec![
        Statement::allow(
            "AssignIpv6Addresses",
            &[
                "ec2:AssignIpv6Addresses",
                "ec2:DescribeInstances",
                "ec2:DescribeTags",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeInstanceTypes",
            ],
            vec!["*".into()],
        ),
        Statement::allow(
            "TagNetworkInterfaces",
            &["ec2:CreateTags"],
            vec![format!(
                "arn:{}:ec2:*:*:network-interface/*",
                partition.name()
            )],
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::policy::{Effect, MANAGED_POLICY_MAX_CHARS};
    use super::*;

    fn scope(cluster: &str, region: &str) -> Scope {
        Scope {
            partition: Partition::of_region(region),
            region: region.into(),
            account: "123456789012".into(),
            cluster: cluster.into(),
            node_role_name: format!("KarpenterNodeRole-{}", &cluster[..cluster.len().min(40)]),
            queue_name: Some(cluster[..cluster.len().min(80)].to_string()),
            ssm_parameters: Vec::new(),
        }
    }

    fn statements(scope: &Scope) -> Vec<Statement> {
        controller_policies(scope)
            .into_iter()
            .flat_map(|p| p.document.statements)
            .collect()
    }

    /// Every AWS action the controller calls, from the provisioning, interruption, node class
    /// and garbage-collection paths.
    const NEEDED: &[&str] = &[
        "ec2:RunInstances",
        "ec2:CreateFleet",
        "ec2:CreateLaunchTemplate",
        "ec2:CreateTags",
        "ec2:TerminateInstances",
        "ec2:DeleteLaunchTemplate",
        "ec2:DescribeImages",
        "ec2:DescribeInstances",
        "ec2:DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeSpotPriceHistory",
        "ec2:DescribeSubnets",
        "ec2:DescribeCapacityReservations",
        "iam:PassRole",
        "iam:CreateInstanceProfile",
        "iam:TagInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:RemoveRoleFromInstanceProfile",
        "iam:DeleteInstanceProfile",
        "iam:GetInstanceProfile",
        "iam:ListInstanceProfiles",
        "eks:DescribeCluster",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueUrl",
        "ssm:GetParameter",
        "pricing:GetProducts",
    ];

    #[test]
    fn every_action_the_controller_needs_is_granted() {
        let granted: Vec<String> = statements(&scope("demo", "us-east-1"))
            .into_iter()
            .flat_map(|s| s.actions)
            .collect();
        for action in NEEDED {
            assert!(
                granted.iter().any(|g| g == action),
                "{action} is not granted"
            );
        }
        assert!(
            granted.iter().all(|g| !g.contains('*')),
            "no wildcard actions"
        );
    }

    #[test]
    fn no_mutating_action_is_unconditional_on_every_resource() {
        let read = |a: &str| {
            let verb = a.split(':').nth(1).unwrap_or("");
            ["Describe", "Get", "List"]
                .iter()
                .any(|p| verb.starts_with(p))
        };
        for s in statements(&scope("demo", "us-east-1")) {
            assert_eq!(s.effect, Effect::Allow);
            let on_everything = s.resources.iter().any(|r| r == "*");
            if on_everything && s.conditions.is_empty() {
                for a in &s.actions {
                    assert!(
                        read(a),
                        "{} grants mutating {a} on * unconditionally",
                        s.sid
                    );
                }
            }
            // Mutating EC2 actions on instances and templates always carry the cluster tag.
            for a in s.actions.iter().filter(|a| !read(a)) {
                let touches_owned = s
                    .resources
                    .iter()
                    .any(|r| r.ends_with("instance/*") || r.ends_with("launch-template/*"));
                if a.starts_with("ec2:") && touches_owned {
                    assert!(
                        s.conditions.values().any(|keys| keys
                            .keys()
                            .any(|k| k.contains("kubernetes.io/cluster/demo"))),
                        "{} lets {a} touch instances of other clusters",
                        s.sid
                    );
                }
            }
        }
    }

    #[test]
    fn pass_role_names_only_the_node_role_for_ec2() {
        let scope = scope("demo", "cn-north-1");
        let pass: Vec<Statement> = statements(&scope)
            .into_iter()
            .filter(|s| s.actions.iter().any(|a| a == "iam:PassRole"))
            .collect();
        assert_eq!(pass.len(), 1);
        assert_eq!(
            pass[0].resources,
            vec!["arn:aws-cn:iam::123456789012:role/KarpenterNodeRole-demo".to_string()]
        );
        assert_eq!(pass[0].actions, vec!["iam:PassRole".to_string()]);
        assert_eq!(
            pass[0].conditions["StringEquals"]["iam:PassedToService"],
            vec![
                "ec2.amazonaws.com".to_string(),
                "ec2.amazonaws.com.cn".to_string()
            ]
        );
    }

    #[test]
    fn interruption_actions_only_on_the_queue_and_region_scoped_reads() {
        for s in statements(&scope("demo", "us-gov-west-1")) {
            if s.actions.iter().any(|a| a.starts_with("sqs:")) {
                assert_eq!(
                    s.resources,
                    vec!["arn:aws-us-gov:sqs:us-gov-west-1:123456789012:demo".to_string()]
                );
            }
            if s.actions.iter().any(|a| a.starts_with("ec2:Describe")) {
                assert_eq!(
                    s.conditions["StringEquals"]["aws:RequestedRegion"],
                    vec!["us-gov-west-1".to_string()]
                );
            }
            if s.actions.iter().any(|a| a.starts_with("arc-zonal-shift:")) {
                assert_eq!(s.resources, vec!["*".to_string()]);
                assert!(
                    s.conditions["StringEquals"]["arc-zonal-shift:ResourceIdentifier"][0]
                        .starts_with("arn:aws-us-gov:eks:us-gov-west-1:123456789012:cluster/demo")
                );
            }
        }
        let without_queue = Scope {
            queue_name: None,
            ..scope("demo", "us-east-1")
        };
        assert!(statements(&without_queue)
            .iter()
            .all(|s| s.actions.iter().all(|a| !a.starts_with("sqs:"))));
    }

    #[test]
    fn each_policy_fits_for_a_100_character_cluster_name_in_every_partition() {
        let long = "c".repeat(100);
        for region in ["us-east-1", "cn-northwest-1", "us-gov-west-1"] {
            for policy in controller_policies(&scope(&long, region)) {
                let size = policy.document.to_json().len();
                assert!(
                    size < MANAGED_POLICY_MAX_CHARS,
                    "{} is {size} characters in {region}",
                    policy.group
                );
                assert!(policy
                    .document
                    .to_json()
                    .contains(Partition::of_region(region).name()));
            }
        }
    }

    #[test]
    fn trusts_are_exact() {
        let irsa = irsa_trust(
            "arn:aws:iam::1:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/AB",
            "oidc.eks.us-east-1.amazonaws.com/id/AB",
            "kube-system",
            "karpenter",
        )
        .to_value();
        let s = &irsa["Statement"][0];
        assert_eq!(s["Action"], "sts:AssumeRoleWithWebIdentity");
        assert_eq!(
            s["Condition"]["StringEquals"]["oidc.eks.us-east-1.amazonaws.com/id/AB:sub"],
            "system:serviceaccount:kube-system:karpenter"
        );
        assert_eq!(
            s["Condition"]["StringEquals"]["oidc.eks.us-east-1.amazonaws.com/id/AB:aud"],
            "sts.amazonaws.com"
        );
        let pod = pod_identity_trust().to_value();
        assert_eq!(
            pod["Statement"][0]["Action"],
            json!(["sts:AssumeRole", "sts:TagSession"])
        );
        assert_eq!(
            node_trust(Partition::AwsCn).to_value()["Statement"][0]["Principal"]["Service"],
            "ec2.amazonaws.com.cn"
        );
        assert!(node_managed_policies(Partition::Aws, "1", true)[1]
            .ends_with(":1:policy/AmazonEKS_CNI_IPv6_Policy"));
    }

    #[test]
    fn a_users_own_ami_parameter_is_readable_and_nothing_else_of_theirs() {
        let mut s = scope("demo", "us-east-1");
        s.ssm_parameters = vec!["/team/ami/golden".into()];
        let policies = controller_policies(&s);
        let statement = policies
            .iter()
            .flat_map(|p| p.document.statements.iter())
            .find(|st| st.actions == ["ssm:GetParameter"])
            .expect("an SSM statement");
        assert_eq!(
            statement.resources,
            [
                "arn:aws:ssm:us-east-1::parameter/aws/service/*",
                "arn:aws:ssm:us-east-1:123456789012:parameter/team/ami/golden",
            ]
        );
    }
}
