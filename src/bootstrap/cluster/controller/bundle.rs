//! The bundled controller's manifests (service account, RBAC, Deployment, Service), rendered
//! from `templates/controller/` with the values the AWS side determines and labelled as
//! jointer's.

use anyhow::{Context as _, Result};
use minijinja::{Environment, UndefinedBehavior};
use serde_json::{json, Value};

use crate::bootstrap::cluster::kube_objects::{ownership_labels, with_labels};
use crate::bootstrap::Context;

const TEMPLATES: [(&str, &str); 4] = [
    (
        "serviceaccount.yaml.j2",
        include_str!("../../../../templates/controller/serviceaccount.yaml.j2"),
    ),
    (
        "rbac.yaml.j2",
        include_str!("../../../../templates/controller/rbac.yaml.j2"),
    ),
    (
        "deployment.yaml.j2",
        include_str!("../../../../templates/controller/deployment.yaml.j2"),
    ),
    (
        "service.yaml.j2",
        include_str!("../../../../templates/controller/service.yaml.j2"),
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
