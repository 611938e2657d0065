//! The bundled controller's manifests (service account, RBAC, Deployment, Service), rendered
//! from `templates/controller/` with the values the AWS side determines and labelled as
//! jointer's.

use std::collections::BTreeMap;

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

/// The bundle's objects, rendered and labelled, the Deployment running `image`.
pub fn desired(ctx: &Context, image: &str) -> Result<Vec<Value>> {
    let c = &ctx.config.controller;
    let mut labels = ownership_labels(&ctx.cluster.name);
    labels.insert(
        "app.kubernetes.io/part-of".to_string(),
        "jointer".to_string(),
    );
    let values = json!({
        "namespace": c.namespace,
        "replicas": c.replicas,
        "image": image,
        "service_account": c.service_account_name(),
        "irsa_role_arn": ctx.irsa_role_arn().unwrap_or_default(),
        "cluster_name": ctx.cluster.name,
        "cluster_endpoint": ctx.cluster.endpoint,
        "interruption_queue": ctx.scope().queue_name.unwrap_or_default(),
        "region": ctx.cluster.region,
        // Each value as a JSON string, which is also a safely quoted YAML scalar.
        "settings": c.settings.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()).to_string())).collect::<BTreeMap<_, _>>(),
        "labels": labels,
        "version": env!("CARGO_PKG_VERSION"),
    });
    render(&values, &labels)
}

/// Which objects the bundle has (their content aside): what removal and the inventory need,
/// without building an image.
pub fn refs(ctx: &Context) -> Result<Vec<Value>> {
    desired(ctx, "image-not-resolved")
}

/// The bundle's templates rendered with `values`, each object labelled.
fn render(values: &Value, labels: &BTreeMap<String, String>) -> Result<Vec<Value>> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    let mut objects = Vec::new();
    for (name, text) in TEMPLATES {
        let rendered = env
            .render_str(text, values)
            .with_context(|| format!("rendering the controller bundle template {name}"))?;
        for doc in serde_yaml::Deserializer::from_str(&rendered) {
            let value: Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("the controller bundle template {name} is not YAML"))?;
            if !value.is_null() {
                objects.push(with_labels(value, labels));
            }
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(objects: &[Value]) -> Vec<(String, String)> {
        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .expect("a Deployment");
        deployment["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (s("name"), s("value"))
            })
            .collect()
    }

    #[test]
    fn controller_settings_become_env_and_replace_the_defaults_they_name() {
        let values = |settings: Value| {
            json!({"namespace": "kube-system", "replicas": 2, "image": "x:1", "service_account": "jointer-controller",
                "irsa_role_arn": "", "cluster_name": "demo", "cluster_endpoint": "", "interruption_queue": "q",
                "region": "us-east-1", "settings": settings, "labels": {}, "version": "0"})
        };
        let plain = env_of(&render(&values(json!({})), &BTreeMap::new()).expect("renders"));
        assert!(plain.contains(&("BATCH_IDLE_DURATION".into(), "1s".into())));
        let tuned = env_of(
            &render(
                &values(
                    json!({"MIN_VALUES_POLICY": "\"BestEffort\"", "BATCH_IDLE_DURATION": "\"2s\""}),
                ),
                &BTreeMap::new(),
            )
            .expect("renders"),
        );
        assert!(tuned.contains(&("MIN_VALUES_POLICY".into(), "BestEffort".into())));
        let idle: Vec<_> = tuned
            .iter()
            .filter(|(n, _)| n == "BATCH_IDLE_DURATION")
            .collect();
        assert_eq!(
            idle,
            [&("BATCH_IDLE_DURATION".to_string(), "2s".to_string())]
        );
    }
}
