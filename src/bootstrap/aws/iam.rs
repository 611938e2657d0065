//! IAM roles and customer-managed policies: observation, the changes that converge or remove
//! them, and the calls. Shared by the node role and the controller identity.

use std::collections::BTreeMap;

use anyhow::Result;
use aws_sdk_iam::types::Tag;
use serde_json::Value;

use super::clients::{code, failed, gone_ok};
use super::ownership::{self, Owner, Ownership};
use super::policy::{self, Document};
use super::propagation::retry_until_visible;
use crate::bootstrap::{Change, Context, Op};

#[derive(Debug, Clone)]
pub enum Action {
    CreateRole {
        name: String,
        trust: String,
        description: String,
        tags: BTreeMap<String, String>,
    },
    TagRole {
        name: String,
        tags: BTreeMap<String, String>,
    },
    UpdateTrust {
        name: String,
        trust: String,
    },
    Attach {
        role: String,
        policy_arn: String,
    },
    Detach {
        role: String,
        policy_arn: String,
    },
    RemoveFromInstanceProfile {
        role: String,
        profile: String,
    },
    DeleteInlinePolicy {
        role: String,
        policy: String,
    },
    DeleteRole {
        name: String,
    },
    DeleteInstanceProfile {
        name: String,
    },
    CreatePolicy {
        name: String,
        document: String,
        description: String,
        tags: BTreeMap<String, String>,
    },
    TagPolicy {
        arn: String,
        tags: BTreeMap<String, String>,
    },
    /// A new default version; the oldest non-default one goes first when IAM's limit of five
    /// versions is reached.
    UpdatePolicy {
        arn: String,
        document: String,
    },
    DeletePolicy {
        arn: String,
    },
    /// "Already exists" is success: the role is per account and shared.
    CreateServiceLinkedRole {
        service: String,
    },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::Iam(a)
    }
}

/// A role as IAM holds it.
#[derive(Debug, Clone)]
pub struct Role {
    pub name: String,
    pub tags: BTreeMap<String, String>,
    pub trust: Value,
    pub attached: Vec<String>,
    pub inline: Vec<String>,
    pub instance_profiles: Vec<String>,
}

/// A customer-managed policy as IAM holds it.
#[derive(Debug, Clone)]
pub struct Policy {
    pub arn: String,
    pub tags: BTreeMap<String, String>,
    pub document: Value,
}

fn tag_map(tags: &[Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect()
}

pub fn iam_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok())
        .collect()
}

/// Every item of a paginated IAM listing about role `$name`, all pages collected, or the
/// error naming the call (`iam:$op $name`). A macro because each operation's paginator is its
/// own type, and the stream they share is not nameable from here.
macro_rules! all_for_role {
    ($iam:expr, $method:ident, $op:literal, $name:expr) => {
        $iam.$method()
            .role_name($name)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .map_err(|e| failed(&format!(concat!("iam:", $op, " {}"), $name), e))
    };
}

pub async fn get_role(ctx: &Context, name: &str) -> Result<Option<Role>> {
    let iam = &ctx.aws.iam;
    let role = match iam.get_role().role_name(name).send().await {
        Ok(out) => out.role,
        Err(e) if code(&e) == Some("NoSuchEntity") => return Ok(None),
        Err(e) => return Err(failed(&format!("iam:GetRole {name}"), e)),
    };
    let Some(role) = role else { return Ok(None) };
    // GetRole may omit tags; ListRoleTags is authoritative.
    let tags = iam
        .list_role_tags()
        .role_name(name)
        .send()
        .await
        .map_err(|e| failed(&format!("iam:ListRoleTags {name}"), e))?;
    let attached = all_for_role!(
        iam,
        list_attached_role_policies,
        "ListAttachedRolePolicies",
        name
    )?;
    let inline = all_for_role!(iam, list_role_policies, "ListRolePolicies", name)?;
    let profiles = all_for_role!(
        iam,
        list_instance_profiles_for_role,
        "ListInstanceProfilesForRole",
        name
    )?;
    Ok(Some(Role {
        name: name.to_string(),
        tags: tag_map(tags.tags()),
        trust: role
            .assume_role_policy_document()
            .and_then(policy::parse_returned)
            .unwrap_or(Value::Null),
        attached: attached.into_iter().filter_map(|p| p.policy_arn).collect(),
        inline,
        instance_profiles: profiles
            .into_iter()
            .map(|p| p.instance_profile_name)
            .collect(),
    }))
}

pub async fn get_policy(ctx: &Context, arn: &str) -> Result<Option<Policy>> {
    let iam = &ctx.aws.iam;
    let policy = match iam.get_policy().policy_arn(arn).send().await {
        Ok(out) => out.policy,
        Err(e) if code(&e) == Some("NoSuchEntity") => return Ok(None),
        Err(e) => return Err(failed(&format!("iam:GetPolicy {arn}"), e)),
    };
    let Some(policy) = policy else {
        return Ok(None);
    };
    let tags = iam
        .list_policy_tags()
        .policy_arn(arn)
        .send()
        .await
        .map_err(|e| failed(&format!("iam:ListPolicyTags {arn}"), e))?;
    let version = policy.default_version_id().unwrap_or("v1");
    let document = iam
        .get_policy_version()
        .policy_arn(arn)
        .version_id(version)
        .send()
        .await
        .map_err(|e| failed(&format!("iam:GetPolicyVersion {arn} {version}"), e))?
        .policy_version
        .and_then(|v| v.document)
        .and_then(|d| policy::parse_returned(&d))
        .unwrap_or(Value::Null);
    Ok(Some(Policy {
        arn: arn.to_string(),
        tags: tag_map(tags.tags()),
        document,
    }))
}

/// What a role should be.
#[derive(Debug, Clone)]
pub struct DesiredRole {
    pub name: String,
    pub description: String,
    pub trust: Document,
    pub managed_policies: Vec<String>,
}

/// Changes that make `observed` the desired role. A role jointer does not own is an error
/// unless `--adopt` was given.
pub fn converge_role(
    ours: &Ownership,
    desired: &DesiredRole,
    observed: Option<&Role>,
    rename_hint: &str,
    changes: &mut Vec<Change>,
) -> Result<()> {
    let resource = format!("iam role {}", desired.name);
    let trust = desired.trust.to_json();
    let Some(role) = observed else {
        changes.push(Change::new(
            Op::Create,
            &resource,
            Action::CreateRole {
                name: desired.name.clone(),
                trust,
                description: desired.description.clone(),
                tags: ours.tags(),
            },
        ));
        for arn in &desired.managed_policies {
            changes.push(attach(&resource, &desired.name, arn));
        }
        return Ok(());
    };
    adopt_or_refuse(ours, &resource, &role.tags, rename_hint, changes, || {
        Action::TagRole {
            name: desired.name.clone(),
            tags: ours.tags(),
        }
        .into()
    })?;
    if let Some(diff) = policy::difference(&role.trust, &desired.trust.to_value()) {
        changes.push(
            Change::new(
                Op::Update,
                &resource,
                Action::UpdateTrust {
                    name: desired.name.clone(),
                    trust,
                },
            )
            .field("trust policy")
            .detail(diff),
        );
    }
    for arn in &desired.managed_policies {
        if !role.attached.contains(arn) {
            changes.push(attach(&resource, &desired.name, arn));
        }
    }
    Ok(())
}

fn attach(resource: &str, role: &str, arn: &str) -> Change {
    Change::new(
        Op::Create,
        resource,
        Action::Attach {
            role: role.to_string(),
            policy_arn: arn.to_string(),
        },
    )
    .field("attached policy")
    .detail(short_policy_name(arn))
}

/// Detaching a managed policy from a role.
pub fn detach_change(role: &str, arn: &str) -> Change {
    Change::new(
        Op::Delete,
        format!("iam role {role}"),
        Action::Detach {
            role: role.to_string(),
            policy_arn: arn.to_string(),
        },
    )
    .field("attached policy")
    .detail(short_policy_name(arn))
}

pub fn short_policy_name(arn: &str) -> String {
    arn.rsplit('/').next().unwrap_or(arn).to_string()
}

/// The resource is ours; or, with `--adopt`, becomes ours; else the run stops.
pub fn adopt_or_refuse(
    ours: &Ownership,
    resource: &str,
    tags: &BTreeMap<String, String>,
    rename_hint: &str,
    changes: &mut Vec<Change>,
    tag_action: impl FnOnce() -> crate::bootstrap::Action,
) -> Result<()> {
    let owner = ownership::owner(
        &ours.cluster,
        tags.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    if owner == Owner::Us {
        return Ok(());
    }
    if !ours.adopt {
        return Err(ownership::conflict(
            resource,
            &owner,
            &ours.cluster,
            rename_hint,
        ));
    }
    changes.push(
        Change::new(Op::Update, resource, tag_action())
            .field("ownership tags")
            .detail("adopted (--adopt)"),
    );
    Ok(())
}

/// Changes that delete a role jointer owns: out of its instance profiles, policies off, gone
/// (IAM refuses to delete a role with either: `DeleteConflict`).
pub fn remove_role(ours: &Ownership, role: &Role, changes: &mut Vec<Change>) {
    if !owned(ours, &role.tags) {
        return;
    }
    let resource = format!("iam role {}", role.name);
    for profile in &role.instance_profiles {
        changes.push(
            Change::new(
                Op::Delete,
                &resource,
                Action::RemoveFromInstanceProfile {
                    role: role.name.clone(),
                    profile: profile.clone(),
                },
            )
            .field("instance profile")
            .detail(profile.clone()),
        );
    }
    for arn in &role.attached {
        changes.push(detach_change(&role.name, arn));
    }
    for policy in &role.inline {
        changes.push(
            Change::new(
                Op::Delete,
                &resource,
                Action::DeleteInlinePolicy {
                    role: role.name.clone(),
                    policy: policy.clone(),
                },
            )
            .field("inline policy")
            .detail(policy.clone()),
        );
    }
    changes.push(Change::new(
        Op::Delete,
        &resource,
        Action::DeleteRole {
            name: role.name.clone(),
        },
    ));
}

pub fn owned(ours: &Ownership, tags: &BTreeMap<String, String>) -> bool {
    ours.owns(tags)
}

/// Changes that make a customer-managed policy hold `document`.
pub fn converge_policy(
    ours: &Ownership,
    name: &str,
    arn: &str,
    description: &str,
    document: &Document,
    observed: Option<&Policy>,
    changes: &mut Vec<Change>,
) -> Result<()> {
    let resource = format!("iam policy {name}");
    let size = document.to_json().len();
    if size > policy::MANAGED_POLICY_MAX_CHARS {
        anyhow::bail!(
            "{resource} would be {size} characters, over IAM's {} for a managed policy",
            policy::MANAGED_POLICY_MAX_CHARS
        );
    }
    let Some(policy) = observed else {
        changes.push(Change::new(
            Op::Create,
            &resource,
            Action::CreatePolicy {
                name: name.to_string(),
                document: document.to_json(),
                description: description.to_string(),
                tags: ours.tags(),
            },
        ));
        return Ok(());
    };
    adopt_or_refuse(
        ours,
        &resource,
        &policy.tags,
        "remove or rename that policy",
        changes,
        || {
            Action::TagPolicy {
                arn: arn.to_string(),
                tags: ours.tags(),
            }
            .into()
        },
    )?;
    if let Some(diff) = policy::difference(&policy.document, &document.to_value()) {
        changes.push(
            Change::new(
                Op::Update,
                &resource,
                Action::UpdatePolicy {
                    arn: arn.to_string(),
                    document: document.to_json(),
                },
            )
            .field("document")
            .detail(diff),
        );
    }
    Ok(())
}

pub fn remove_policy(ours: &Ownership, name: &str, policy: &Policy, changes: &mut Vec<Change>) {
    if owned(ours, &policy.tags) {
        changes.push(Change::new(
            Op::Delete,
            format!("iam policy {name}"),
            Action::DeletePolicy {
                arn: policy.arn.clone(),
            },
        ));
    }
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    let iam = &ctx.aws.iam;
    match action {
        Action::CreateRole {
            name,
            trust,
            description,
            tags,
        } => {
            // An IRSA trust names an OIDC provider that may have been created a moment ago.
            retry_until_visible(&*ctx.progress, name, || {
                iam.create_role()
                    .role_name(name)
                    .assume_role_policy_document(trust)
                    .description(description)
                    .set_tags(Some(iam_tags(tags)))
                    .send()
            })
            .await
            .map_err(|e| failed(&format!("iam:CreateRole {name}"), e))?;
        }
        Action::TagRole { name, tags } => {
            iam.tag_role()
                .role_name(name)
                .set_tags(Some(iam_tags(tags)))
                .send()
                .await
                .map_err(|e| failed(&format!("iam:TagRole {name}"), e))?;
        }
        Action::UpdateTrust { name, trust } => {
            retry_until_visible(&*ctx.progress, name, || {
                iam.update_assume_role_policy()
                    .role_name(name)
                    .policy_document(trust)
                    .send()
            })
            .await
            .map_err(|e| failed(&format!("iam:UpdateAssumeRolePolicy {name}"), e))?;
        }
        Action::Attach { role, policy_arn } => {
            iam.attach_role_policy()
                .role_name(role)
                .policy_arn(policy_arn)
                .send()
                .await
                .map_err(|e| failed(&format!("iam:AttachRolePolicy {policy_arn} to {role}"), e))?;
        }
        Action::Detach { role, policy_arn } => detach(ctx, role, policy_arn).await?,
        Action::RemoveFromInstanceProfile { role, profile } => {
            iam.remove_role_from_instance_profile()
                .role_name(role)
                .instance_profile_name(profile)
                .send()
                .await
                .map_err(|e| {
                    failed(
                        &format!("iam:RemoveRoleFromInstanceProfile {role} from {profile}"),
                        e,
                    )
                })?;
        }
        Action::DeleteInlinePolicy { role, policy } => {
            iam.delete_role_policy()
                .role_name(role)
                .policy_name(policy)
                .send()
                .await
                .map_err(|e| failed(&format!("iam:DeleteRolePolicy {policy} of {role}"), e))?;
        }
        Action::DeleteInstanceProfile { name } => gone_ok(
            iam.delete_instance_profile()
                .instance_profile_name(name)
                .send()
                .await,
            &["NoSuchEntity"],
            &format!("iam:DeleteInstanceProfile {name}"),
        )?,
        Action::DeleteRole { name } => gone_ok(
            iam.delete_role().role_name(name).send().await,
            &["NoSuchEntity"],
            &format!("iam:DeleteRole {name}"),
        )?,
        Action::CreatePolicy {
            name,
            document,
            description,
            tags,
        } => {
            iam.create_policy()
                .policy_name(name)
                .policy_document(document)
                .description(description)
                .set_tags(Some(iam_tags(tags)))
                .send()
                .await
                .map_err(|e| failed(&format!("iam:CreatePolicy {name}"), e))?;
        }
        Action::TagPolicy { arn, tags } => {
            iam.tag_policy()
                .policy_arn(arn)
                .set_tags(Some(iam_tags(tags)))
                .send()
                .await
                .map_err(|e| failed(&format!("iam:TagPolicy {arn}"), e))?;
        }
        Action::UpdatePolicy { arn, document } => {
            let versions = iam
                .list_policy_versions()
                .policy_arn(arn)
                .send()
                .await
                .map_err(|e| failed(&format!("iam:ListPolicyVersions {arn}"), e))?;
            let mut old: Vec<_> = versions
                .versions()
                .iter()
                .filter(|v| !v.is_default_version())
                .collect();
            old.sort_by_key(|v| v.create_date().map(|d| d.secs()));
            // IAM keeps at most five versions per policy.
            if versions.versions().len() >= 5 {
                if let Some(oldest) = old.first().and_then(|v| v.version_id()) {
                    iam.delete_policy_version()
                        .policy_arn(arn)
                        .version_id(oldest)
                        .send()
                        .await
                        .map_err(|e| {
                            failed(&format!("iam:DeletePolicyVersion {arn} {oldest}"), e)
                        })?;
                }
            }
            iam.create_policy_version()
                .policy_arn(arn)
                .policy_document(document)
                .set_as_default(true)
                .send()
                .await
                .map_err(|e| failed(&format!("iam:CreatePolicyVersion {arn}"), e))?;
        }
        Action::DeletePolicy { arn } => delete_policy(ctx, arn).await?,
        Action::CreateServiceLinkedRole { service } => {
            match iam
                .create_service_linked_role()
                .aws_service_name(service)
                .send()
                .await
            {
                Ok(_) => {}
                // AWS says InvalidInput "...has been taken in this account"; others say
                // EntityAlreadyExists. Both mean it is there.
                Err(e)
                    if code(&e) == Some("EntityAlreadyExists")
                        || (code(&e) == Some("InvalidInput")
                            && format!("{e:?}").contains("has been taken")) => {}
                Err(e) => return Err(failed(&format!("iam:CreateServiceLinkedRole {service}"), e)),
            }
        }
    }
    Ok(())
}

async fn detach(ctx: &Context, role: &str, policy_arn: &str) -> Result<()> {
    gone_ok(
        ctx.aws
            .iam
            .detach_role_policy()
            .role_name(role)
            .policy_arn(policy_arn)
            .send()
            .await,
        &["NoSuchEntity"],
        &format!("iam:DetachRolePolicy {policy_arn} from {role}"),
    )
}

/// Detach from every entity, drop non-default versions, delete: IAM refuses otherwise.
async fn delete_policy(ctx: &Context, arn: &str) -> Result<()> {
    let iam = &ctx.aws.iam;
    let entities = match iam.list_entities_for_policy().policy_arn(arn).send().await {
        Ok(out) => out,
        Err(e) if code(&e) == Some("NoSuchEntity") => return Ok(()),
        Err(e) => return Err(failed(&format!("iam:ListEntitiesForPolicy {arn}"), e)),
    };
    for role in entities.policy_roles() {
        if let Some(name) = role.role_name() {
            detach(ctx, name, arn).await?;
        }
    }
    let versions = iam
        .list_policy_versions()
        .policy_arn(arn)
        .send()
        .await
        .map_err(|e| failed(&format!("iam:ListPolicyVersions {arn}"), e))?;
    for v in versions
        .versions()
        .iter()
        .filter(|v| !v.is_default_version())
    {
        if let Some(id) = v.version_id() {
            iam.delete_policy_version()
                .policy_arn(arn)
                .version_id(id)
                .send()
                .await
                .map_err(|e| failed(&format!("iam:DeletePolicyVersion {arn} {id}"), e))?;
        }
    }
    gone_ok(
        iam.delete_policy().policy_arn(arn).send().await,
        &["NoSuchEntity"],
        &format!("iam:DeletePolicy {arn}"),
    )
}
