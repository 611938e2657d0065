//! Discovery tags: `karpenter.sh/discovery=<cluster>` on the subnets nodes may use and on
//! exactly one security group. Without them an EC2NodeClass resolves nothing and pods stay
//! Pending silently; with two tagged groups every node gets both and the AWS Load Balancer
//! Controller breaks. Subnets and groups are shared, so jointer records the keys it added in
//! `jointer.dev/added-tags` and teardown removes only those.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};
use aws_sdk_ec2::types::{Filter, Tag};

use super::clients::failed;
use super::ownership::ADDED_TAGS_KEY;
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
use crate::input::config::Selection;

#[derive(Debug, Clone)]
pub enum Action {
    /// Set tags on a subnet or security group.
    Tag {
        id: String,
        tags: BTreeMap<String, String>,
    },
    /// Remove tag keys from a subnet or security group.
    Untag { id: String, keys: Vec<String> },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::Discovery(a)
    }
}

/// A subnet or security group as observed: its tags and where it is.
#[derive(Debug, Clone)]
pub struct Tagged {
    pub id: String,
    pub kind: &'static str,
    pub vpc_id: String,
    /// The zone of a subnet.
    pub zone: Option<String>,
    pub tags: BTreeMap<String, String>,
}

impl Tagged {
    fn label(&self) -> String {
        match &self.zone {
            Some(zone) => format!("{} {} ({zone})", self.kind, self.id),
            None => format!("{} {}", self.kind, self.id),
        }
    }

    fn added_by_us(&self, key: &str) -> bool {
        self.tags
            .get(ADDED_TAGS_KEY)
            .is_some_and(|v| v.split(' ').any(|k| k == key))
    }
}

/// What the world holds: the resources that should carry the tag, and every other resource
/// that carries it with this cluster's value.
pub struct Observed {
    pub wanted: Vec<Tagged>,
    pub others: Vec<Tagged>,
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let observed = observe(ctx, goal).await?;
    Ok(diff(
        &ctx.config.discovery.tag_key,
        &ctx.cluster.name,
        &observed,
        goal,
    ))
}

/// The pure diff: which tags to add, correct or remove.
pub fn diff(key: &str, cluster: &str, observed: &Observed, goal: Goal) -> StepPlan {
    let mut plan = StepPlan::new(Step::DiscoveryTags);
    let field = format!("tag {key}");
    if goal == Goal::Converge {
        for r in &observed.wanted {
            let current = r.tags.get(key);
            if current.map(String::as_str) == Some(cluster) {
                continue;
            }
            let mut added = r
                .tags
                .get(ADDED_TAGS_KEY)
                .map(|v| v.split(' ').map(str::to_string).collect::<BTreeSet<_>>())
                .unwrap_or_default();
            added.insert(key.to_string());
            let tags = BTreeMap::from([
                (key.to_string(), cluster.to_string()),
                (
                    ADDED_TAGS_KEY.to_string(),
                    added.into_iter().collect::<Vec<_>>().join(" "),
                ),
            ]);
            let (op, detail) = match current {
                None => (Op::Create, cluster.to_string()),
                Some(v) => (Op::Update, format!("{v} → {cluster}")),
            };
            plan.changes.push(
                Change::new(
                    op,
                    r.label(),
                    Action::Tag {
                        id: r.id.clone(),
                        tags,
                    },
                )
                .field(field.clone())
                .detail(detail),
            );
        }
    }
    for r in &observed.others {
        let ours = r.added_by_us(key);
        if goal == Goal::Remove && !ours {
            continue; // there before jointer: left alone
        }
        let mut keys = vec![key.to_string()];
        if r.tags.contains_key(ADDED_TAGS_KEY) {
            keys.push(ADDED_TAGS_KEY.to_string());
        }
        let why = match (goal, r.kind) {
            (Goal::Remove, _) => "added by jointer".to_string(),
            (Goal::Converge, "security group") => {
                let warning = format!(
                    "{} also carries {key}={cluster}: every node would get it too (list it under discovery.securityGroups to keep it)",
                    r.label()
                );
                plan.warnings.push(warning);
                "a second tagged security group is attached to every node".to_string()
            }
            (Goal::Converge, _) if !ours => continue, // extra subnets are the user's choice
            (Goal::Converge, _) => "no longer selected".to_string(),
        };
        plan.changes.push(
            Change::new(
                Op::Delete,
                r.label(),
                Action::Untag {
                    id: r.id.clone(),
                    keys,
                },
            )
            .field(field.clone())
            .detail(why),
        );
    }
    plan
}

async fn observe(ctx: &Context, goal: Goal) -> Result<Observed> {
    let key = &ctx.config.discovery.tag_key;
    let cluster = &ctx.cluster;
    let tagged = [Filter::builder()
        .name(format!("tag:{key}"))
        .values(&cluster.name)
        .build()];
    let mut wanted = Vec::new();
    if goal == Goal::Converge {
        wanted.extend(wanted_subnets(ctx).await?);
        wanted.extend(wanted_security_groups(ctx).await?);
    }
    let wanted_ids: BTreeSet<String> = wanted.iter().map(|r| r.id.clone()).collect();
    let mut others = subnets(ctx, tagged.to_vec()).await?;
    others.extend(security_groups(ctx, tagged.to_vec()).await?);
    others.retain(|r| !wanted_ids.contains(&r.id));
    Ok(Observed { wanted, others })
}

async fn wanted_subnets(ctx: &Context) -> Result<Vec<Tagged>> {
    let cluster = &ctx.cluster;
    match &ctx.config.discovery.subnets {
        Selection::Ids(ids) => {
            let found = subnets(ctx, vec![id_filter("subnet-id", ids)]).await?;
            check_explicit(ids, &found, "discovery.subnets", "subnet", &cluster.vpc_id)?;
            Ok(found)
        }
        Selection::Auto => {
            if cluster.subnet_ids.is_empty() {
                bail!(
                    "cluster {} lists no subnets: list them under discovery.subnets",
                    cluster.name
                );
            }
            let all = subnets(ctx, vec![id_filter("subnet-id", &cluster.subnet_ids)]).await?;
            let public = public_subnets(ctx, &cluster.vpc_id).await?;
            let private: Vec<Tagged> = all
                .into_iter()
                .filter(|s| !public.contains(&s.id))
                .collect();
            if private.is_empty() {
                bail!(
                    "none of cluster {}'s subnets ({}) is private (each routes to an internet gateway): list the node subnets under discovery.subnets",
                    cluster.name,
                    cluster.subnet_ids.join(", ")
                );
            }
            Ok(private)
        }
    }
}

async fn wanted_security_groups(ctx: &Context) -> Result<Vec<Tagged>> {
    let cluster = &ctx.cluster;
    let ids = match &ctx.config.discovery.security_groups {
        Selection::Ids(ids) => ids.clone(),
        Selection::Auto => match &cluster.security_group_id {
            Some(id) => vec![id.clone()],
            None => bail!(
                "cluster {} reports no cluster security group: list the node security group under discovery.securityGroups",
                cluster.name
            ),
        },
    };
    let found = security_groups(ctx, vec![id_filter("group-id", &ids)]).await?;
    check_explicit(
        &ids,
        &found,
        "discovery.securityGroups",
        "security group",
        &cluster.vpc_id,
    )?;
    Ok(found)
}

/// Every listed ID exists and is in the cluster's VPC.
fn check_explicit(
    ids: &[String],
    found: &[Tagged],
    field: &str,
    kind: &str,
    vpc_id: &str,
) -> Result<()> {
    let missing: Vec<&String> = ids
        .iter()
        .filter(|id| !found.iter().any(|f| &f.id == *id))
        .collect();
    if !missing.is_empty() {
        bail!(
            "{field}: no {kind} {} in this account and region",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(stray) = found.iter().find(|f| f.vpc_id != vpc_id) {
        bail!(
            "{field}: {kind} {} is in {}, not in the cluster's VPC {vpc_id}: nodes there could not reach the cluster",
            stray.id,
            stray.vpc_id
        );
    }
    Ok(())
}

fn id_filter(name: &str, ids: &[String]) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(ids.to_vec()))
        .build()
}

fn tag_map(tags: Option<&[Tag]>) -> BTreeMap<String, String> {
    tags.unwrap_or_default()
        .iter()
        .filter_map(|t| Some((t.key.clone()?, t.value.clone().unwrap_or_default())))
        .collect()
}

async fn subnets(ctx: &Context, filters: Vec<Filter>) -> Result<Vec<Tagged>> {
    let mut out = Vec::new();
    let mut pages = ctx
        .aws
        .ec2
        .describe_subnets()
        .set_filters(Some(filters))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| failed("ec2:DescribeSubnets", e))?;
        for s in page.subnets.unwrap_or_default() {
            out.push(Tagged {
                id: s.subnet_id.clone().unwrap_or_default(),
                kind: "subnet",
                vpc_id: s.vpc_id.clone().unwrap_or_default(),
                zone: s.availability_zone.clone(),
                tags: tag_map(s.tags.as_deref()),
            });
        }
    }
    Ok(out)
}

async fn security_groups(ctx: &Context, filters: Vec<Filter>) -> Result<Vec<Tagged>> {
    let mut out = Vec::new();
    let mut pages = ctx
        .aws
        .ec2
        .describe_security_groups()
        .set_filters(Some(filters))
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| failed("ec2:DescribeSecurityGroups", e))?;
        for g in page.security_groups.unwrap_or_default() {
            out.push(Tagged {
                id: g.group_id.clone().unwrap_or_default(),
                kind: "security group",
                vpc_id: g.vpc_id.clone().unwrap_or_default(),
                zone: None,
                tags: tag_map(g.tags.as_deref()),
            });
        }
    }
    Ok(out)
}

/// Subnets whose route table (their own, else the VPC's main one) sends traffic to an
/// internet gateway: public, so not for nodes.
async fn public_subnets(ctx: &Context, vpc_id: &str) -> Result<BTreeSet<String>> {
    let tables = ctx
        .aws
        .ec2
        .describe_route_tables()
        .filters(Filter::builder().name("vpc-id").values(vpc_id).build())
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .map_err(|e| failed("ec2:DescribeRouteTables", e))?;
    let to_internet = |t: &aws_sdk_ec2::types::RouteTable| {
        t.routes().iter().any(|r| {
            r.gateway_id().is_some_and(|g| g.starts_with("igw-"))
                && r.state().is_none_or(|s| s.as_str() != "blackhole")
        })
    };
    let main_is_public = tables
        .iter()
        .find(|t| t.associations().iter().any(|a| a.main() == Some(true)))
        .is_some_and(to_internet);
    let mut explicit: BTreeMap<String, bool> = BTreeMap::new();
    for t in &tables {
        for a in t.associations() {
            if let Some(subnet) = a.subnet_id() {
                explicit.insert(subnet.to_string(), to_internet(t));
            }
        }
    }
    let cluster_subnets = &ctx.cluster.subnet_ids;
    Ok(cluster_subnets
        .iter()
        .filter(|s| explicit.get(*s).copied().unwrap_or(main_is_public))
        .cloned()
        .collect())
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    let ec2 = &ctx.aws.ec2;
    match action {
        Action::Tag { id, tags } => {
            let tags: Vec<Tag> = tags
                .iter()
                .map(|(k, v)| Tag::builder().key(k).value(v).build())
                .collect();
            ec2.create_tags()
                .resources(id)
                .set_tags(Some(tags))
                .send()
                .await
                .map_err(|e| failed(&format!("ec2:CreateTags on {id}"), e))?;
        }
        Action::Untag { id, keys } => {
            let tags: Vec<Tag> = keys.iter().map(|k| Tag::builder().key(k).build()).collect();
            ec2.delete_tags()
                .resources(id)
                .set_tags(Some(tags))
                .send()
                .await
                .map_err(|e| failed(&format!("ec2:DeleteTags on {id}"), e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "karpenter.sh/discovery";

    fn res(id: &str, kind: &'static str, tags: &[(&str, &str)]) -> Tagged {
        Tagged {
            id: id.into(),
            kind,
            vpc_id: "vpc-1".into(),
            zone: None,
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn tags_are_added_with_a_record_and_corrected_in_place() {
        let observed = Observed {
            wanted: vec![
                res("subnet-a", "subnet", &[]),
                res("subnet-b", "subnet", &[(KEY, "old")]),
                res("subnet-c", "subnet", &[(KEY, "demo")]),
            ],
            others: vec![],
        };
        let plan = diff(KEY, "demo", &observed, Goal::Converge);
        assert_eq!(plan.changes.len(), 2);
        assert_eq!(plan.changes[0].op, Op::Create);
        assert_eq!(plan.changes[1].op, Op::Update);
        assert_eq!(plan.changes[1].detail.as_deref(), Some("old → demo"));
        match &plan.changes[0].action {
            crate::bootstrap::Action::Discovery(Action::Tag { tags, .. }) => {
                assert_eq!(tags[KEY], "demo");
                assert_eq!(tags[ADDED_TAGS_KEY], KEY);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn teardown_removes_only_what_jointer_added() {
        let observed = Observed {
            wanted: vec![],
            others: vec![
                res(
                    "subnet-a",
                    "subnet",
                    &[(KEY, "demo"), (ADDED_TAGS_KEY, KEY)],
                ),
                res("subnet-b", "subnet", &[(KEY, "demo")]),
            ],
        };
        let plan = diff(KEY, "demo", &observed, Goal::Remove);
        assert_eq!(plan.changes.len(), 1);
        assert_eq!(plan.changes[0].resource, "subnet subnet-a");
    }

    #[test]
    fn a_second_tagged_security_group_is_drift_with_a_warning() {
        let observed = Observed {
            wanted: vec![res("sg-1", "security group", &[(KEY, "demo")])],
            others: vec![
                res("sg-2", "security group", &[(KEY, "demo")]),
                res("subnet-x", "subnet", &[(KEY, "demo")]),
            ],
        };
        let plan = diff(KEY, "demo", &observed, Goal::Converge);
        assert_eq!(plan.changes.len(), 1, "{:?}", plan.changes);
        assert_eq!(plan.changes[0].op, Op::Delete);
        assert_eq!(plan.changes[0].resource, "security group sg-2");
        assert_eq!(plan.warnings.len(), 1);
    }
}
