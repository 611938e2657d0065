//! Resolving an EC2NodeClass against AWS: its subnets, security groups, AMIs and capacity
//! reservations by selector terms, and its instance profile (made from `spec.role`, or the
//! given `spec.instanceProfile`); and, when the class goes, removing what was made for it.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::Filter;

use kube::ResourceExt;

use super::call::{codes, metered};
use super::reservations::USABLE_STATES;
use super::AwsCloud as Ctx;
use crate::api::ec2nodeclass::{
    EC2NodeClass, ResolvedAmi, ResolvedCapacityReservation, ResolvedSecurityGroup, ResolvedSubnet,
};
use crate::api::labels;
use crate::cloud::arch_requirement;
use crate::cloud::CloudError;
use crate::core::ami_family::Family;
use crate::core::nodeclass::{
    describe_ami_terms, describe_security_group_terms, describe_subnet_terms, Found,
};

/// Selector tags as EC2 filters: a `*` value means "has the key".
fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

pub async fn subnets(ctx: &Ctx, class: &EC2NodeClass) -> Found<Vec<ResolvedSubnet>> {
    let mut found: BTreeMap<String, ResolvedSubnet> = BTreeMap::new();
    for term in &class.spec.subnet_selector_terms {
        let filters = match (&term.id, &term.tags) {
            (Some(id), _) => vec![Filter::builder().name("subnet-id").values(id).build()],
            (None, Some(tags)) => tag_filters(tags),
            (None, None) => continue,
        };
        let out = metered(
            &ctx.metrics,
            "ec2",
            "DescribeSubnets",
            ctx.ec2.describe_subnets().set_filters(Some(filters)).send(),
        )
        .await
        .map_err(|e| e.to_string())?;
        for s in out.subnets() {
            if let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) {
                found.insert(
                    id.to_string(),
                    ResolvedSubnet {
                        id: id.to_string(),
                        zone: zone.to_string(),
                        zone_id: s.availability_zone_id().map(str::to_string),
                    },
                );
            }
        }
    }
    if found.is_empty() {
        return Err(format!(
            "no subnet matches {}",
            describe_subnet_terms(&class.spec.subnet_selector_terms)
        ));
    }
    Ok(found.into_values().collect())
}

pub async fn security_groups(ctx: &Ctx, class: &EC2NodeClass) -> Found<Vec<ResolvedSecurityGroup>> {
    let mut found: BTreeMap<String, ResolvedSecurityGroup> = BTreeMap::new();
    for term in &class.spec.security_group_selector_terms {
        let filters = match (&term.id, &term.name, &term.tags) {
            (Some(id), _, _) => vec![Filter::builder().name("group-id").values(id).build()],
            (None, Some(name), _) => {
                vec![Filter::builder().name("group-name").values(name).build()]
            }
            (None, None, Some(tags)) => tag_filters(tags),
            (None, None, None) => continue,
        };
        let out = metered(
            &ctx.metrics,
            "ec2",
            "DescribeSecurityGroups",
            ctx.ec2
                .describe_security_groups()
                .set_filters(Some(filters))
                .send(),
        )
        .await
        .map_err(|e| e.to_string())?;
        for g in out.security_groups() {
            if let Some(id) = g.group_id() {
                found.insert(
                    id.to_string(),
                    ResolvedSecurityGroup {
                        id: id.to_string(),
                        name: g.group_name().map(str::to_string),
                    },
                );
            }
        }
    }
    if found.is_empty() {
        return Err(format!(
            "no security group matches {}",
            describe_security_group_terms(&class.spec.security_group_selector_terms)
        ));
    }
    Ok(found.into_values().collect())
}

/// The active (or expiring) reservations the class selects: by id, or by tags (and owner).
/// A reservation that is gone or used up is no error — the class then simply has none.
pub async fn capacity_reservations(
    ctx: &Ctx,
    class: &EC2NodeClass,
) -> Found<Vec<ResolvedCapacityReservation>> {
    let mut found: BTreeMap<String, ResolvedCapacityReservation> = BTreeMap::new();
    for term in &class.spec.capacity_reservation_selector_terms {
        let mut filters = vec![Filter::builder()
            .name("state")
            .set_values(Some(USABLE_STATES.map(String::from).to_vec()))
            .build()];
        let mut request = ctx.ec2.describe_capacity_reservations();
        match (&term.id, &term.tags) {
            (Some(id), _) => request = request.capacity_reservation_ids(id),
            (None, Some(tags)) => filters.extend(tag_filters(tags)),
            // A term of only `instanceMatchCriteria` selects every such reservation.
            (None, None) if term.instance_match_criteria.is_some() => {}
            (None, None) => continue,
        }
        if let Some(owner) = &term.owner_id {
            filters.push(Filter::builder().name("owner-id").values(owner).build());
        }
        let request = request.set_filters(Some(filters));
        let out = metered(
            &ctx.metrics,
            "ec2",
            "DescribeCapacityReservations",
            request.send(),
        )
        .await;
        let out = match out {
            Ok(out) => out,
            Err(e) if e.is(&["InvalidCapacityReservationId.NotFound"]) => continue,
            Err(e) => return Err(e.to_string()),
        };
        for r in out.capacity_reservations() {
            let (Some(id), Some(zone), Some(itype)) = (
                r.capacity_reservation_id(),
                r.availability_zone(),
                r.instance_type(),
            ) else {
                continue;
            };
            // Filtered here rather than by EC2's `instance-match-criteria` filter, which not
            // every EC2 endpoint (moto among them) implements.
            let criteria = r
                .instance_match_criteria()
                .map_or("open", |c| c.as_str())
                .to_string();
            if term
                .instance_match_criteria
                .is_some_and(|wanted| wanted.as_str() != criteria)
            {
                continue;
            }
            found.insert(
                id.to_string(),
                ResolvedCapacityReservation {
                    id: id.to_string(),
                    availability_zone: zone.to_string(),
                    instance_type: itype.to_string(),
                    owner_id: r.owner_id().unwrap_or_default().to_string(),
                    instance_match_criteria: criteria,
                    reservation_type: r
                        .reservation_type()
                        .map_or("default".into(), |t| t.as_str().to_string()),
                    state: r
                        .state()
                        .map_or("active".into(), |s| s.as_str().to_string()),
                    end_time: r.end_date().map(|d| d.to_string()),
                    interruptible: r.interruptible(),
                },
            );
        }
    }
    Ok(found.into_values().collect())
}

/// An SSM parameter's value; None when there is no such parameter.
async fn parameter(ctx: &Ctx, name: &str) -> Found<Option<String>> {
    let got = metered(
        &ctx.metrics,
        "ssm",
        "GetParameter",
        ctx.ssm.get_parameter().name(name).send(),
    )
    .await;
    match got {
        Ok(p) => Ok(p.parameter().and_then(|p| p.value()).map(str::to_string)),
        Err(e) if e.is(&["ParameterNotFound"]) => Ok(None),
        Err(e) => Err(format!("SSM parameter {name}: {e}")),
    }
}

/// An alias → its family's EKS AMI parameters for the cluster's Kubernetes version: one image
/// per architecture and accelerator variant. Not every variant exists everywhere; the alias
/// fails only when none does.
async fn alias_amis(ctx: &Ctx, alias: &str) -> Found<Vec<ResolvedAmi>> {
    let (family, params) =
        Family::alias_parameters(alias, &ctx.kubernetes_version).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for p in params {
        let Some(id) = parameter(ctx, &p.name).await? else {
            missing.push(p.name);
            continue;
        };
        let mut base = vec![arch_requirement(p.arch)];
        base.extend(p.requirements.iter().cloned());
        // One entry per variant the image serves (AL2's GPU image has both drivers).
        let variants: Vec<Vec<_>> = if p.variants.is_empty() {
            vec![Vec::new()]
        } else {
            p.variants.iter().map(|v| v.requirements()).collect()
        };
        for extra in variants {
            let mut requirements = base.clone();
            requirements.extend(extra);
            out.push(ResolvedAmi {
                id: id.clone(),
                name: None,
                requirements,
                deprecated: None,
            });
        }
    }
    if out.is_empty() {
        return Err(format!(
            "alias {alias}: no {} image is published for Kubernetes {} (none of {} exists)",
            family.name(),
            ctx.kubernetes_version,
            missing.join(", ")
        ));
    }
    Ok(out)
}

pub async fn amis(ctx: &Ctx, class: &EC2NodeClass) -> Found<Vec<ResolvedAmi>> {
    let mut found: Vec<ResolvedAmi> = Vec::new();
    // (creation date, image) of the images the non-alias terms select.
    let mut selected: Vec<(String, ResolvedAmi)> = Vec::new();
    for term in &class.spec.ami_selector_terms {
        if let Some(alias) = &term.alias {
            found.extend(alias_amis(ctx, alias).await?);
            continue;
        }
        let mut request = ctx.ec2.describe_images();
        if let Some(id) = &term.id {
            request = request.image_ids(id);
        }
        if let Some(name) = &term.ssm_parameter {
            // The user's parameter names the image; a missing one selects nothing, as upstream.
            match parameter(ctx, name).await? {
                Some(id) if id.starts_with("ami-") => request = request.image_ids(id),
                Some(value) => {
                    tracing::warn!(ssm_parameter = %name, %value, "the SSM parameter's value is not an AMI id; ignored");
                    continue;
                }
                None => continue,
            }
        }
        let mut filters = Vec::new();
        if let Some(name) = &term.name {
            filters.push(Filter::builder().name("name").values(name).build());
        }
        if let Some(tags) = &term.tags {
            filters.extend(tag_filters(tags));
        }
        if let Some(owner) = &term.owner {
            request = request.owners(owner);
        }
        let out = metered(
            &ctx.metrics,
            "ec2",
            "DescribeImages",
            request.set_filters(Some(filters)).send(),
        )
        .await
        .map_err(|e| e.to_string())?;
        for image in out.images() {
            let arch = match image.architecture().map(|a| a.as_str()) {
                Some("arm64") => "arm64",
                _ => "amd64",
            };
            if let Some(id) = image.image_id() {
                let ami = ResolvedAmi {
                    id: id.to_string(),
                    name: image.name().map(str::to_string),
                    requirements: vec![arch_requirement(arch)],
                    deprecated: image.deprecation_time().map(is_past),
                };
                selected.push((image.creation_date().unwrap_or_default().to_string(), ami));
            }
        }
    }
    // Newest first across all terms, as upstream: each instance type boots the newest image
    // that suits it, deprecated ones only when nothing else does (ISO 8601 dates sort as
    // text); an image two terms select is listed once.
    selected.sort_by(|(a_created, a), (b_created, b)| {
        (a.deprecated == Some(true), b_created, &a.id).cmp(&(
            b.deprecated == Some(true),
            a_created,
            &b.id,
        ))
    });
    for (_, ami) in selected {
        if !found.iter().any(|f| f.id == ami.id) {
            found.push(ami);
        }
    }
    if found.is_empty() {
        return Err(format!(
            "no AMI matches {}",
            describe_ami_terms(&class.spec.ami_selector_terms)
        ));
    }
    Ok(found)
}

/// The profile name the controller gives a class's role: stable per cluster, region and class.
pub fn profile_name(cluster: &str, region: &str, class: &str) -> String {
    let hash = format!("{region}/{class}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let name = format!("{cluster}_{hash}");
    name.chars().take(128).collect()
}

/// Where profiles of a class live (teardown sweeps `/karpenter/<region>/<cluster>/`).
pub fn profile_path(ctx: &Ctx, uid: &str) -> String {
    format!(
        "{}{uid}/",
        crate::cloud::aws::tags::profile_path_prefix(&ctx.region, &ctx.cluster.name)
    )
}

pub async fn instance_profile(ctx: &Ctx, class: &EC2NodeClass) -> Found<String> {
    let iam = &ctx.iam;
    let get = |name: &str| {
        metered(
            &ctx.metrics,
            "iam",
            "GetInstanceProfile",
            iam.get_instance_profile()
                .instance_profile_name(name)
                .send(),
        )
    };
    if let Some(name) = &class.spec.instance_profile {
        return get(name)
            .await
            .map(|_| name.clone())
            .map_err(|_| format!("instance profile {name} does not exist"));
    }
    let Some(role) = &class.spec.role else {
        return Err("neither spec.role nor spec.instanceProfile is set".into());
    };
    let class_name = class.name_any();
    let name = profile_name(&ctx.cluster.name, &ctx.region, &class_name);
    let roles: Vec<String> = match get(&name).await {
        Ok(out) => out
            .instance_profile()
            .map(|p| {
                p.roles()
                    .iter()
                    .map(|r| r.role_name().to_string())
                    .collect()
            })
            .unwrap_or_default(),
        Err(e) if e.is(codes::NO_SUCH_ENTITY) => {
            create_profile(ctx, class, &name).await?;
            tracing::info!(instance_profile = %name, role = %role, ec2nodeclass = %class_name, "created instance profile");
            Vec::new()
        }
        Err(e) => return Err(e.to_string()),
    };
    if roles.iter().any(|r| r == role) {
        return Ok(name);
    }
    // A profile holds one role: swap it when spec.role changed.
    for old in roles {
        metered(
            &ctx.metrics,
            "iam",
            "RemoveRoleFromInstanceProfile",
            iam.remove_role_from_instance_profile()
                .instance_profile_name(&name)
                .role_name(&old)
                .send(),
        )
        .await
        .map_err(|e| e.to_string())?;
    }
    metered(
        &ctx.metrics,
        "iam",
        "AddRoleToInstanceProfile",
        iam.add_role_to_instance_profile()
            .instance_profile_name(&name)
            .role_name(role)
            .send(),
    )
    .await
    .map_err(|e| format!("role {role} cannot be added to instance profile {name}: {e}"))?;
    Ok(name)
}

/// The class's instance profile, under its path and with the controller's tags.
async fn create_profile(ctx: &Ctx, class: &EC2NodeClass, name: &str) -> Found<()> {
    let class_name = class.name_any();
    let uid = class.metadata.uid.clone().unwrap_or_default();
    let mut tags = labels::owned_tags(&ctx.cluster.name);
    tags.insert(labels::REGION.into(), ctx.region.clone());
    tags.insert(labels::EC2NODECLASS.into(), class_name);
    let tags = tags
        .iter()
        .filter_map(|(k, v)| {
            aws_sdk_iam::types::Tag::builder()
                .key(k)
                .value(v)
                .build()
                .ok()
        })
        .collect();
    metered(
        &ctx.metrics,
        "iam",
        "CreateInstanceProfile",
        ctx.iam
            .create_instance_profile()
            .instance_profile_name(name)
            .path(profile_path(ctx, &uid))
            .set_tags(Some(tags))
            .send(),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(())
}

/// After the class's NodeClaims are gone: its instance profile (roles first) and the launch
/// templates made for it.
pub async fn release(ctx: &Ctx, class: &EC2NodeClass) -> Result<(), CloudError> {
    let name = class.name_any();
    let profile = profile_name(&ctx.cluster.name, &ctx.region, &name);
    let got = metered(
        &ctx.metrics,
        "iam",
        "GetInstanceProfile",
        ctx.iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send(),
    )
    .await;
    match got {
        Ok(out) => {
            for role in out
                .instance_profile()
                .map(|p| p.roles())
                .unwrap_or_default()
            {
                metered(
                    &ctx.metrics,
                    "iam",
                    "RemoveRoleFromInstanceProfile",
                    ctx.iam
                        .remove_role_from_instance_profile()
                        .instance_profile_name(&profile)
                        .role_name(role.role_name())
                        .send(),
                )
                .await?;
            }
            metered(
                &ctx.metrics,
                "iam",
                "DeleteInstanceProfile",
                ctx.iam
                    .delete_instance_profile()
                    .instance_profile_name(&profile)
                    .send(),
            )
            .await?;
            tracing::info!(ec2nodeclass = %name, instance_profile = %profile, "instance profile deleted");
        }
        Err(e) if e.is(codes::NO_SUCH_ENTITY) => {}
        Err(e) => return Err(e),
    }
    let templates = metered(
        &ctx.metrics,
        "ec2",
        "DescribeLaunchTemplates",
        ctx.ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name(format!("tag:{}", labels::EC2NODECLASS))
                    .values(&name)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name(format!("tag:{}", labels::EKS_CLUSTER_TAG))
                    .values(&ctx.cluster.name)
                    .build(),
            )
            .send(),
    )
    .await?;
    for id in templates
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_id())
    {
        metered(
            &ctx.metrics,
            "ec2",
            "DeleteLaunchTemplate",
            ctx.ec2
                .delete_launch_template()
                .launch_template_id(id)
                .send(),
        )
        .await?;
    }
    Ok(())
}

/// Whether an RFC 3339 time (an image's `DeprecationTime`) has passed; an unreadable one
/// counts as not yet.
fn is_past(time: &str) -> bool {
    time.parse::<k8s_openapi::jiff::Timestamp>()
        .is_ok_and(|t| t <= k8s_openapi::jiff::Timestamp::now())
}
