//! Node access: how nodes running as the node role may join the cluster. An EKS access entry
//! of type `EC2_LINUX` (a `STANDARD` entry leaves nodes NotReady/Unauthorized) when the
//! cluster's authentication mode allows access entries, else a mapping in the `aws-auth`
//! ConfigMap, merged with the mappings already there and never clobbering them.
//!
//! When a rendered EC2NodeClass uses a Windows AMI family, Windows nodes need what EKS gives
//! only `EC2_WINDOWS` entries (or the `eks:kube-proxy-windows` group in aws-auth): the
//! kube-proxy on Windows runs as the node. One principal has one entry, and an `EC2_WINDOWS`
//! entry admits the role's Linux nodes as well, so the role's entry becomes `EC2_WINDOWS`.

use std::collections::BTreeMap;

use anyhow::{bail, Context as _, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};

use super::clients::{code, failed, gone_ok, tag_eks_resource};
use super::iam::owned;
use super::ownership::Ownership;
use super::propagation::retry_until_visible;
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
use crate::input::config::NodeAccess;

const LINUX_ENTRY: &str = "EC2_LINUX";
const WINDOWS_ENTRY: &str = "EC2_WINDOWS";
const AWS_AUTH_NAMESPACE: &str = "kube-system";
const AWS_AUTH: &str = "aws-auth";
const NODE_USERNAME: &str = "system:node:{{EC2PrivateDNSName}}";
const NODE_GROUPS: [&str; 2] = ["system:bootstrappers", "system:nodes"];
const WINDOWS_GROUP: &str = "eks:kube-proxy-windows";

/// What the node role's access must allow: Linux nodes only, or Windows nodes too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nodes {
    Linux,
    WithWindows,
}

impl Nodes {
    fn entry_type(self) -> &'static str {
        match self {
            Nodes::Linux => LINUX_ENTRY,
            Nodes::WithWindows => WINDOWS_ENTRY,
        }
    }

    fn groups(self) -> Vec<String> {
        let mut groups: Vec<String> = NODE_GROUPS.iter().map(|g| g.to_string()).collect();
        if self == Nodes::WithWindows {
            groups.push(WINDOWS_GROUP.into());
        }
        groups
    }
}

#[derive(Debug, Clone)]
pub enum Action {
    CreateEntry {
        principal: String,
        kind: &'static str,
        tags: BTreeMap<String, String>,
    },
    TagEntry {
        arn: String,
        tags: BTreeMap<String, String>,
    },
    /// The type of an access entry cannot change: delete it and create it again.
    ReplaceEntry {
        principal: String,
        kind: &'static str,
        tags: BTreeMap<String, String>,
    },
    DeleteEntry {
        principal: String,
    },
    /// Add or correct the node role's `mapRoles` entry.
    MapRole {
        role_arn: String,
        nodes: Nodes,
    },
    UnmapRole {
        role_arn: String,
    },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::NodeAccess(a)
    }
}

/// Which mechanism the config and the cluster call for.
fn use_access_entry(ctx: &Context) -> Result<bool> {
    let mode = &ctx.cluster.authentication_mode;
    match ctx.config.node_role.access {
        NodeAccess::Auto => Ok(ctx.cluster.access_entries_enabled()),
        NodeAccess::AwsAuth => Ok(false),
        NodeAccess::AccessEntry if ctx.cluster.access_entries_enabled() => Ok(true),
        NodeAccess::AccessEntry => bail!(
            "nodeRole.access is access-entry but cluster {} authenticates with {mode} only: set nodeRole.access to auto or aws-auth, or switch the cluster to API_AND_CONFIG_MAP",
            ctx.cluster.name
        ),
    }
}

fn node_role_arn(ctx: &Context) -> String {
    ctx.scope().node_role_arn()
}

/// An access entry as EKS holds it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `EC2_LINUX`, `STANDARD`, …
    pub kind: String,
    pub arn: String,
    pub tags: BTreeMap<String, String>,
}

/// The node role's access as observed, by the mechanism the cluster uses: its access entry,
/// or its `mapRoles` entry in aws-auth (`None`: there is none).
#[derive(Debug, Clone)]
pub enum Observed {
    Entry(Option<Entry>),
    Mapping(Option<RoleMapping>),
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let role_arn = node_role_arn(ctx);
    let observed = if use_access_entry(ctx)? {
        Observed::Entry(get_entry(ctx, &role_arn).await?)
    } else {
        Observed::Mapping(get_mapping(ctx, &role_arn).await?)
    };
    let nodes = if ctx.windows_nodes() {
        Nodes::WithWindows
    } else {
        Nodes::Linux
    };
    diff(&role_arn, &observed, &ctx.ownership, goal, nodes)
}

/// The pure diff for the node role `role_arn`.
pub fn diff(
    role_arn: &str,
    observed: &Observed,
    ours: &Ownership,
    goal: Goal,
    nodes: Nodes,
) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::NodeAccess);
    match observed {
        Observed::Entry(entry) => {
            diff_entry(role_arn, entry.as_ref(), ours, goal, nodes, &mut plan)?
        }
        Observed::Mapping(mapping) => {
            diff_mapping(role_arn, mapping.as_ref(), goal, nodes, &mut plan)
        }
    }
    Ok(plan)
}

async fn get_entry(ctx: &Context, principal: &str) -> Result<Option<Entry>> {
    let entry = match ctx
        .aws
        .eks
        .describe_access_entry()
        .cluster_name(&ctx.cluster.name)
        .principal_arn(principal)
        .send()
        .await
    {
        Ok(out) => out.access_entry,
        Err(e) if code(&e) == Some("ResourceNotFoundException") => None,
        Err(e) => return Err(failed(&format!("eks:DescribeAccessEntry {principal}"), e)),
    };
    Ok(entry.map(|e| Entry {
        kind: e.r#type.unwrap_or_default(),
        arn: e.access_entry_arn.unwrap_or_default(),
        tags: e.tags.map(|t| t.into_iter().collect()).unwrap_or_default(),
    }))
}

fn diff_entry(
    principal: &str,
    entry: Option<&Entry>,
    ours: &Ownership,
    goal: Goal,
    nodes: Nodes,
    plan: &mut StepPlan,
) -> Result<()> {
    let principal = principal.to_string();
    let wanted = nodes.entry_type();
    let resource = format!("eks access entry {principal}");
    match (goal, entry) {
        (Goal::Converge, None) => plan.changes.push(
            Change::new(
                Op::Create,
                &resource,
                Action::CreateEntry {
                    principal,
                    kind: wanted,
                    tags: ours.tags(),
                },
            )
            .detail(format!("type {wanted}")),
        ),
        (Goal::Converge, Some(entry)) => {
            let kind = &entry.kind;
            if kind != wanted {
                if !owned(ours, &entry.tags) && !ours.adopt {
                    let consequence = if kind == LINUX_ENTRY {
                        "which Windows nodes cannot join with (a class uses a Windows AMI family)"
                    } else {
                        "which leaves nodes NotReady (Unauthorized)"
                    };
                    bail!(
                        "{resource} has type {kind}, {consequence}, and jointer did not create it: delete it or re-run with --adopt to replace it with an {wanted} entry"
                    );
                }
                plan.changes.push(
                    Change::new(
                        Op::Update,
                        &resource,
                        Action::ReplaceEntry {
                            principal,
                            kind: wanted,
                            tags: ours.tags(),
                        },
                    )
                    .field("type")
                    .detail(format!("{kind} → {wanted} (replaced)")),
                );
            } else if !owned(ours, &entry.tags) {
                // An entry of the right type for the node role is exactly what nodes need: use it,
                // and take it over only when asked.
                if ours.adopt {
                    plan.changes.push(
                        Change::new(
                            Op::Update,
                            &resource,
                            Action::TagEntry {
                                arn: entry.arn.clone(),
                                tags: ours.tags(),
                            },
                        )
                        .field("ownership tags")
                        .detail("adopted (--adopt)"),
                    );
                } else {
                    plan.warnings.push(format!(
                        "{resource} was not created by jointer: it is used as it is and teardown leaves it (--adopt takes it over)"
                    ));
                }
            }
        }
        (Goal::Remove, Some(entry)) if owned(ours, &entry.tags) => plan.changes.push(Change::new(
            Op::Delete,
            &resource,
            Action::DeleteEntry { principal },
        )),
        (Goal::Remove, _) => {}
    }
    Ok(())
}

/// One `mapRoles` entry of aws-auth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleMapping {
    pub rolearn: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

fn node_mapping(role_arn: &str, nodes: Nodes) -> RoleMapping {
    RoleMapping {
        rolearn: role_arn.to_string(),
        username: NODE_USERNAME.to_string(),
        groups: nodes.groups(),
    }
}

fn map_roles(cm: &ConfigMap) -> Result<Vec<RoleMapping>> {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("mapRoles"))
        .map(String::as_str)
        .unwrap_or("");
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_yaml::from_str(text).with_context(|| {
        "configmap kube-system/aws-auth: data.mapRoles is not a YAML list of {rolearn, username, groups}; fix it by hand before jointer merges into it"
    })
}

fn aws_auth_api(ctx: &Context) -> Api<ConfigMap> {
    Api::namespaced(ctx.kube.clone(), AWS_AUTH_NAMESPACE)
}

/// The node role's current `mapRoles` entry.
async fn get_mapping(ctx: &Context, role_arn: &str) -> Result<Option<RoleMapping>> {
    let cm = aws_auth_api(ctx)
        .get_opt(AWS_AUTH)
        .await
        .context("reading configmap kube-system/aws-auth")?;
    let mappings = match &cm {
        Some(cm) => map_roles(cm)?,
        None => Vec::new(),
    };
    Ok(mappings.into_iter().find(|m| m.rolearn == role_arn))
}

fn diff_mapping(
    role_arn: &str,
    current: Option<&RoleMapping>,
    goal: Goal,
    nodes: Nodes,
    plan: &mut StepPlan,
) {
    let role_arn = role_arn.to_string();
    let resource = "configmap kube-system/aws-auth";
    let wanted = node_mapping(&role_arn, nodes);
    match (goal, current) {
        (Goal::Converge, None) => plan.changes.push(
            Change::new(
                Op::Create,
                resource,
                Action::MapRole {
                    role_arn: role_arn.clone(),
                    nodes,
                },
            )
            .field("mapRoles")
            .detail(format!("{role_arn} as {NODE_USERNAME}")),
        ),
        (Goal::Converge, Some(m)) if *m != wanted => plan.changes.push(
            Change::new(
                Op::Update,
                resource,
                Action::MapRole {
                    role_arn: role_arn.clone(),
                    nodes,
                },
            )
            .field("mapRoles")
            .detail(format!(
                "{role_arn}: username {:?} groups {:?} → {NODE_USERNAME:?} {:?}",
                m.username, m.groups, wanted.groups
            )),
        ),
        (Goal::Remove, Some(_)) => plan.changes.push(
            Change::new(Op::Delete, resource, Action::UnmapRole { role_arn }).field("mapRoles"),
        ),
        _ => {}
    }
}

/// Read, merge, write with the read's resourceVersion: a concurrent edit makes the write fail
/// (409) instead of being overwritten, and the merge is retried on the fresh object.
async fn edit_mappings(ctx: &Context, role_arn: &str, add: Option<Nodes>) -> Result<()> {
    let api = aws_auth_api(ctx);
    for _ in 0..5 {
        let existing = api.get_opt(AWS_AUTH).await.context("reading aws-auth")?;
        let mut mappings = match &existing {
            Some(cm) => map_roles(cm)?,
            None => Vec::new(),
        };
        mappings.retain(|m| m.rolearn != role_arn);
        if let Some(nodes) = add {
            mappings.push(node_mapping(role_arn, nodes));
        }
        let text = serde_yaml::to_string(&mappings)?;
        let result = match existing {
            Some(mut cm) => {
                cm.data
                    .get_or_insert_with(Default::default)
                    .insert("mapRoles".into(), text);
                api.replace(AWS_AUTH, &PostParams::default(), &cm).await
            }
            None if add.is_some() => {
                let cm = ConfigMap {
                    metadata: kube::api::ObjectMeta {
                        name: Some(AWS_AUTH.into()),
                        namespace: Some(AWS_AUTH_NAMESPACE.into()),
                        ..Default::default()
                    },
                    data: Some(BTreeMap::from([("mapRoles".to_string(), text)])),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &cm).await
            }
            None => return Ok(()),
        };
        match result {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e).context("writing configmap kube-system/aws-auth"),
        }
    }
    bail!("configmap kube-system/aws-auth kept changing under jointer (5 conflicting writes); re-run apply")
}

async fn create_entry(
    ctx: &Context,
    principal: &str,
    kind: &str,
    tags: &BTreeMap<String, String>,
) -> Result<()> {
    // The node role may have been created a moment ago.
    retry_until_visible(&*ctx.progress, principal, || {
        ctx.aws
            .eks
            .create_access_entry()
            .cluster_name(&ctx.cluster.name)
            .principal_arn(principal)
            .r#type(kind)
            .set_tags(Some(tags.clone().into_iter().collect()))
            .send()
    })
    .await
    .map(|_| ())
    .map_err(|e| failed(&format!("eks:CreateAccessEntry {principal}"), e))
}

async fn delete_entry(ctx: &Context, principal: &str) -> Result<()> {
    gone_ok(
        ctx.aws
            .eks
            .delete_access_entry()
            .cluster_name(&ctx.cluster.name)
            .principal_arn(principal)
            .send()
            .await,
        &["ResourceNotFoundException"],
        &format!("eks:DeleteAccessEntry {principal}"),
    )
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    match action {
        Action::CreateEntry {
            principal,
            kind,
            tags,
        } => create_entry(ctx, principal, kind, tags).await,
        Action::TagEntry { arn, tags } => tag_eks_resource(&ctx.aws.eks, arn, tags).await,
        Action::ReplaceEntry {
            principal,
            kind,
            tags,
        } => {
            delete_entry(ctx, principal).await?;
            create_entry(ctx, principal, kind, tags).await
        }
        Action::DeleteEntry { principal } => delete_entry(ctx, principal).await,
        Action::MapRole { role_arn, nodes } => edit_mappings(ctx, role_arn, Some(*nodes)).await,
        Action::UnmapRole { role_arn } => edit_mappings(ctx, role_arn, None).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLE: &str = "arn:aws:iam::1:role/KarpenterNodeRole-demo";

    fn ours(adopt: bool) -> Ownership {
        Ownership {
            cluster: "demo".into(),
            adopt,
        }
    }

    fn entry(kind: &str, owned: bool) -> Observed {
        Observed::Entry(Some(Entry {
            kind: kind.into(),
            arn: "arn:aws:eks:us-east-1:1:access-entry/demo/role/1/KarpenterNodeRole-demo/x".into(),
            tags: if owned {
                ours(false).tags()
            } else {
                BTreeMap::new()
            },
        }))
    }

    /// The plan converging `observed` for `nodes` (`adopt`: as with `--adopt`).
    fn converge(observed: &Observed, adopt: bool, nodes: Nodes) -> Result<StepPlan> {
        diff(ROLE, observed, &ours(adopt), Goal::Converge, nodes)
    }

    fn lines(plan: &StepPlan) -> Vec<String> {
        plan.changes.iter().map(Change::to_string).collect()
    }

    #[test]
    fn an_owned_ec2_linux_entry_or_the_node_mapping_is_in_sync() {
        let plan = converge(&entry(LINUX_ENTRY, true), false, Nodes::Linux).unwrap();
        assert!(plan.changes.is_empty() && plan.warnings.is_empty());
        let mapped = Observed::Mapping(Some(node_mapping(ROLE, Nodes::Linux)));
        let plan = converge(&mapped, false, Nodes::Linux).unwrap();
        assert!(plan.changes.is_empty(), "{:?}", lines(&plan));
    }

    #[test]
    fn a_missing_entry_or_mapping_is_created() {
        let plan = converge(&Observed::Entry(None), false, Nodes::Linux).unwrap();
        assert_eq!(
            lines(&plan),
            vec![format!("+ eks access entry {ROLE}  (type EC2_LINUX)")]
        );
        let plan = converge(&Observed::Mapping(None), false, Nodes::Linux).unwrap();
        assert_eq!(
            lines(&plan),
            vec![format!(
                "+ configmap kube-system/aws-auth  mapRoles: {ROLE} as {NODE_USERNAME}"
            )]
        );
    }

    #[test]
    fn a_wrong_type_or_mapping_is_updated_by_field() {
        let plan = converge(&entry("STANDARD", true), false, Nodes::Linux).unwrap();
        assert_eq!(
            lines(&plan),
            vec![format!(
                "~ eks access entry {ROLE}  type: STANDARD → EC2_LINUX (replaced)"
            )]
        );
        let mut mapping = node_mapping(ROLE, Nodes::Linux);
        mapping.groups = vec!["system:nodes".into()];
        let plan = converge(&Observed::Mapping(Some(mapping)), false, Nodes::Linux).unwrap();
        assert_eq!(plan.changes.len(), 1);
        assert_eq!(
            (plan.changes[0].op, plan.changes[0].field.as_deref()),
            (Op::Update, Some("mapRoles"))
        );
    }

    #[test]
    fn a_foreign_entry_of_the_wrong_type_is_an_error_unless_adopted() {
        let err = converge(&entry("STANDARD", false), false, Nodes::Linux).unwrap_err();
        assert!(
            err.to_string().contains("jointer did not create it"),
            "{err}"
        );
        let plan = converge(&entry("STANDARD", false), true, Nodes::Linux).unwrap();
        assert_eq!(plan.changes[0].field.as_deref(), Some("type"));
    }

    #[test]
    fn a_foreign_ec2_linux_entry_is_used_with_a_warning_or_adopted() {
        let plan = converge(&entry(LINUX_ENTRY, false), false, Nodes::Linux).unwrap();
        assert!(plan.changes.is_empty());
        assert_eq!(plan.warnings.len(), 1);
        let plan = converge(&entry(LINUX_ENTRY, false), true, Nodes::Linux).unwrap();
        assert_eq!(
            lines(&plan),
            vec![format!(
                "~ eks access entry {ROLE}  ownership tags: adopted (--adopt)"
            )]
        );
    }

    #[test]
    fn teardown_deletes_an_owned_entry_and_the_mapping_but_not_a_foreign_entry() {
        let plan = diff(
            ROLE,
            &entry(LINUX_ENTRY, true),
            &ours(false),
            Goal::Remove,
            Nodes::Linux,
        )
        .unwrap();
        assert_eq!(lines(&plan), vec![format!("- eks access entry {ROLE}")]);
        let plan = diff(
            ROLE,
            &entry(LINUX_ENTRY, false),
            &ours(false),
            Goal::Remove,
            Nodes::Linux,
        )
        .unwrap();
        assert!(plan.changes.is_empty());
        let mapped = Observed::Mapping(Some(node_mapping(ROLE, Nodes::Linux)));
        let plan = diff(ROLE, &mapped, &ours(false), Goal::Remove, Nodes::Linux).unwrap();
        assert_eq!(
            lines(&plan),
            vec!["- configmap kube-system/aws-auth  mapRoles"]
        );
    }

    #[test]
    fn a_windows_class_makes_the_entry_ec2_windows_and_adds_the_kube_proxy_group() {
        let plan = converge(&Observed::Entry(None), false, Nodes::WithWindows).unwrap();
        assert_eq!(
            lines(&plan),
            vec![format!("+ eks access entry {ROLE}  (type EC2_WINDOWS)")]
        );
        let plan = converge(&entry(LINUX_ENTRY, true), false, Nodes::WithWindows).unwrap();
        assert_eq!(
            lines(&plan),
            vec![format!(
                "~ eks access entry {ROLE}  type: EC2_LINUX → EC2_WINDOWS (replaced)"
            )]
        );
        let err = converge(&entry(LINUX_ENTRY, false), false, Nodes::WithWindows).unwrap_err();
        assert!(
            err.to_string().contains("Windows nodes cannot join"),
            "{err}"
        );
        let linux_mapping = Observed::Mapping(Some(node_mapping(ROLE, Nodes::Linux)));
        let plan = converge(&linux_mapping, false, Nodes::WithWindows).unwrap();
        assert!(
            lines(&plan)[0].contains("eks:kube-proxy-windows"),
            "{:?}",
            lines(&plan)
        );
    }
}
