//! `apply --wait`: until the controller Deployment is Available and every EC2NodeClass is
//! Ready, with progress, and the failing condition's reason when one is not; a controller
//! pod that cannot start (image, crash loop, scheduling) ends the wait at once, naming why.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use serde_json::Value;

use super::kube_objects::{self, ObjectRef};
use super::nodes;
use super::pod_trouble::{self, Trouble};
use crate::bootstrap::Context;
use crate::cluster as live;

/// Rolled out, as `kubectl rollout status` judges it: the controller has seen the latest
/// spec, every replica runs it and is available, and no old replica is left. (Available
/// alone is true while the old pods still serve, even if the new ones cannot start.)
fn deployment_rolled_out(d: &Deployment) -> bool {
    let Some(status) = d.status.as_ref() else {
        return false;
    };
    let wanted = d.spec.replicas.unwrap_or(1);
    let available =
        status.conditions.iter().flatten().any(|c| {
            c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True")
        });
    status.observed_generation >= d.metadata.generation
        && status.updated_replicas.unwrap_or(0) == wanted
        && status.replicas.unwrap_or(0) == wanted
        && status.available_replicas.unwrap_or(0) == wanted
        && available
}

/// Ready=True → Ok(true); Ready=False → the failing conditions as an error; no verdict yet →
/// Ok(false).
fn class_verdict(name: &str, class: &Value) -> Result<bool> {
    let conditions = class
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let status_of = |c: &Value| c["status"].as_str().unwrap_or("").to_string();
    let Some(ready) = conditions.iter().find(|c| c["type"] == "Ready") else {
        return Ok(false);
    };
    match status_of(ready).as_str() {
        "True" => Ok(true),
        "False" => {
            let failing: Vec<String> = conditions
                .iter()
                .filter(|c| c["type"] != "Ready" && status_of(c) == "False")
                .chain(std::iter::once(ready))
                .map(|c| {
                    format!(
                        "{}=False: {}",
                        c["type"].as_str().unwrap_or("?"),
                        c["message"]
                            .as_str()
                            .or(c["reason"].as_str())
                            .unwrap_or("no reason given")
                    )
                })
                .collect();
            bail!("EC2NodeClass {name} is not Ready: {}", failing.join("; "))
        }
        _ => Ok(false),
    }
}

async fn poll<F, Fut>(ctx: &Context, what: &str, mut done: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let started = Instant::now();
    let mut last = Instant::now();
    ctx.progress.note(&format!(
        "waiting for {what} (timeout {} s)",
        ctx.options.timeout.as_secs()
    ));
    loop {
        if done().await? {
            ctx.progress.note(&format!(
                "{what}: done in {:.1} s",
                started.elapsed().as_secs_f64()
            ));
            return Ok(());
        }
        if started.elapsed() > ctx.options.timeout {
            bail!(
                "{what}: not done after {} s (--timeout)",
                started.elapsed().as_secs()
            );
        }
        if last.elapsed() >= Duration::from_secs(10) {
            ctx.progress.note(&format!(
                "  still waiting for {what} ({} s)",
                started.elapsed().as_secs()
            ));
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What keeps the Deployment's pods from starting, with a crashing container's last log lines.
async fn controller_trouble(pods: &Api<Pod>, d: &Deployment) -> Result<Option<String>> {
    let selector = d
        .spec
        .selector
        .match_labels
        .as_ref()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let listed = pods.list(&ListParams::default().labels(&selector)).await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let Some(trouble) = pod_trouble::trouble(&listed.items, now) else {
        return Ok(None);
    };
    let mut text = trouble.to_string();
    if let Trouble::Crashing { pod, container, .. } = &trouble {
        let params = LogParams {
            container: Some(container.clone()),
            previous: true,
            tail_lines: Some(10),
            ..Default::default()
        };
        if let Ok(log) = pods.logs(pod, &params).await {
            if !log.trim().is_empty() {
                text.push_str("\n  last log lines:\n");
                for line in log.lines() {
                    text.push_str(&format!("    {line}\n"));
                }
            }
        }
    }
    Ok(Some(text))
}

pub async fn controller_and_classes(ctx: &Context) -> Result<()> {
    let c = &ctx.config.controller;
    if let Some((namespace, name)) = live::controller_deployment(c) {
        let api: Api<Deployment> = Api::namespaced(ctx.kube.clone(), &namespace);
        let what = format!("Deployment {namespace}/{name} to be rolled out and Available");
        let pods: Api<Pod> = Api::namespaced(ctx.kube.clone(), &namespace);
        poll(ctx, &what, || async {
            let Some(d) = api.get_opt(&name).await? else {
                return Ok(false);
            };
            if deployment_rolled_out(&d) {
                return Ok(true);
            }
            if let Some(trouble) = controller_trouble(&pods, &d).await? {
                bail!("Deployment {namespace}/{name} cannot start: {trouble}");
            }
            Ok(false)
        })
        .await?;
    }
    for object in &ctx.node_objects {
        let r = ObjectRef::of(object)?;
        if r.kind != "EC2NodeClass" {
            continue;
        }
        let what = format!("EC2NodeClass {} to be Ready", r.name);
        let name = r.name.clone();
        poll(ctx, &what, || async {
            let r = nodes::class_ref(&name);
            let Some(api) = kube_objects::api_for(ctx, &r).await? else {
                return Ok(false);
            };
            match kube_objects::get(&api, &r).await? {
                Some(live) => class_verdict(&name, &live),
                None => Ok(false),
            }
        })
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_deployment_is_rolled_out_only_when_every_replica_runs_the_latest_spec() {
        let d = |status: serde_json::Value| -> Deployment {
            serde_json::from_value(json!({"metadata": {"name": "c", "generation": 2},
                "spec": {"replicas": 2, "selector": {}, "template": {}}, "status": status}))
            .expect("deployment")
        };
        let available = json!([{"type": "Available", "status": "True"}]);
        let done = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2, "conditions": available});
        assert!(deployment_rolled_out(&d(done)));
        let old_pods_serving = json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 1,
            "availableReplicas": 2, "conditions": available});
        assert!(!deployment_rolled_out(&d(old_pods_serving)));
        let not_seen = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
            "availableReplicas": 2, "conditions": available});
        assert!(!deployment_rolled_out(&d(not_seen)));
    }

    #[test]
    fn a_class_that_is_not_ready_names_the_failing_condition() {
        let class = json!({"status": {"conditions": [
            {"type": "SubnetsReady", "status": "False", "reason": "SubnetsNotFound",
             "message": "no subnet matches tag karpenter.sh/discovery=demo"},
            {"type": "Ready", "status": "False", "reason": "NotReady"}]}});
        let err = class_verdict("default", &class).unwrap_err().to_string();
        assert!(
            err.contains("SubnetsReady=False: no subnet matches tag karpenter.sh/discovery=demo"),
            "{err}"
        );
        assert!(!class_verdict("x", &json!({})).unwrap());
        assert!(class_verdict(
            "x",
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        )
        .unwrap());
    }
}
