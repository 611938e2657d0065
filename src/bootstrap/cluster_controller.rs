//! The controller install. `bundled`: jointer-controller's manifests, rendered from
//! `templates/controller/` and server-side applied; `helm`: the upstream chart through the
//! `helm` CLI with values derived from the AWS side; `none`: nothing (and a bundle jointer
//! installed before is removed).

use anyhow::{Context as _, Result};
use minijinja::{Environment, UndefinedBehavior};
use serde_json::{json, Value};

use super::kube_objects::{self, ownership_labels, with_labels, ObjectRef};
use super::{helm, Change, Context, Goal, Op, Step, StepPlan};
use crate::input::config::Install;

const TEMPLATES: [(&str, &str); 4] = [
    (
        "serviceaccount.yaml.j2",
        include_str!("../../templates/controller/serviceaccount.yaml.j2"),
    ),
    (
        "rbac.yaml.j2",
        include_str!("../../templates/controller/rbac.yaml.j2"),
    ),
    (
        "deployment.yaml.j2",
        include_str!("../../templates/controller/deployment.yaml.j2"),
    ),
    (
        "service.yaml.j2",
        include_str!("../../templates/controller/service.yaml.j2"),
    ),
];

/// The bundle's objects, rendered and labelled.
pub fn desired(ctx: &Context) -> Result<Vec<Value>> {
    let c = &ctx.config.controller;
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    let mut labels = ownership_labels(&ctx.cluster.name);
    labels.insert(
        "app.kubernetes.io/part-of".to_string(),
        "jointer".to_string(),
    );
    let values = json!({
        "namespace": c.namespace,
        "replicas": c.replicas,
        "image": format!("{}:{}", c.image.repository, c.image.tag),
        "service_account": c.service_account_name(),
        "irsa_role_arn": ctx.irsa_role_arn().unwrap_or_default(),
        "cluster_name": ctx.cluster.name,
        "cluster_endpoint": ctx.cluster.endpoint,
        "interruption_queue": ctx.scope().queue_name.unwrap_or_default(),
        "region": ctx.cluster.region,
        "labels": labels,
        "version": env!("CARGO_PKG_VERSION"),
    });
    let mut objects = Vec::new();
    for (name, text) in TEMPLATES {
        let rendered = env
            .render_str(text, &values)
            .with_context(|| format!("rendering the controller bundle template {name}"))?;
        for doc in serde_yaml::Deserializer::from_str(&rendered) {
            let value: Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("the controller bundle template {name} is not YAML"))?;
            if !value.is_null() {
                objects.push(with_labels(value, &labels));
            }
        }
    }
    Ok(objects)
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::ControllerInstall);
    let install = ctx.config.controller.install;
    if install == Install::Helm {
        helm::plan(ctx, goal, &mut plan).await?;
    }
    let bundle = desired(ctx)?;
    if goal == Goal::Converge && install == Install::Bundled {
        for object in bundle {
            kube_objects::converge(ctx, object, &mut plan.changes).await?;
        }
    } else {
        // Removing, or installed another way now: the bundle jointer applied before goes,
        // the Deployment first so nothing runs without its permissions.
        for object in bundle.iter().rev() {
            remove_if_ours(ctx, object, &mut plan.changes).await?;
        }
    }
    Ok(plan)
}

/// A delete change for `object` when it exists and jointer made it.
pub async fn remove_if_ours(
    ctx: &Context,
    object: &Value,
    changes: &mut Vec<Change>,
) -> Result<()> {
    let r = ObjectRef::of(object)?;
    let Some(api) = kube_objects::api_for(ctx, &r).await? else {
        return Ok(());
    };
    if let Some(live) = kube_objects::get(&api, &r).await? {
        if kube_objects::is_ours(&live) {
            changes.push(Change::new(
                Op::Delete,
                r.label(),
                kube_objects::Action::Delete { object: r },
            ));
        }
    }
    Ok(())
}
