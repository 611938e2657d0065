//! Workload files for `jointer simulate`: Deployments, StatefulSets, ReplicaSets, Jobs and Pods
//! become pending pods (replicas × template); DaemonSets become per-node overhead.

use std::collections::BTreeMap;

use jointer_controller::api::Quantity;
use jointer_controller::core::scheduling::SchedPod;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::diagnostics::{Diagnostic, InputErrors};
use super::documents::YamlStream;
use super::manifest::type_of;

#[derive(Debug, Default)]
pub struct Workload {
    pub pods: Vec<SchedPod>,
    pub daemonsets: Vec<SchedPod>,
}

/// Checks every resource quantity of a pod spec (the types keep them as strings).
fn check_quantities(
    stream: &YamlStream,
    doc: usize,
    spec_path: &str,
    spec: &PodSpec,
    problems: &mut Vec<Diagnostic>,
) {
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("{spec_path}.containers[{i}]"), c));
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (format!("{spec_path}.initContainers[{i}]"), c));
    for (path, c) in containers.chain(init) {
        let Some(resources) = &c.resources else {
            continue;
        };
        for (kind, list) in [
            ("requests", &resources.requests),
            ("limits", &resources.limits),
        ] {
            for (name, q) in list.iter().flatten() {
                let field = format!("{path}.resources.{kind}.{name}");
                match q.0.parse::<Quantity>() {
                    Err(e) => problems.push(Diagnostic::error(&stream.file, e.to_string()).field(
                        &stream.map,
                        doc,
                        &field,
                    )),
                    Ok(q) if q.millis() < 0 => problems.push(
                        Diagnostic::error(
                            &stream.file,
                            format!(
                                "{name} {} is negative: requests and limits must be zero or more",
                                q
                            ),
                        )
                        .field(&stream.map, doc, &field),
                    ),
                    Ok(_) => {}
                }
            }
        }
    }
}

fn pod_from_template(meta: &ObjectMeta, template: &PodTemplateSpec, index: usize) -> SchedPod {
    let mut metadata = template.metadata.clone().unwrap_or_default();
    metadata.namespace = meta
        .namespace
        .clone()
        .or(metadata.namespace)
        .or_else(|| Some("default".into()));
    metadata.name = Some(format!(
        "{}-{index}",
        meta.name.as_deref().unwrap_or("unnamed")
    ));
    let pod = jointer_controller::api::pod::Pod {
        metadata,
        spec: template.spec.as_ref().map(Into::into),
        status: None,
    };
    SchedPod::from_k8s(&pod, None)
}

fn replicas(meta: &ObjectMeta, template: &PodTemplateSpec, count: i32) -> Vec<SchedPod> {
    (0..count.max(0) as usize)
        .map(|i| pod_from_template(meta, template, i))
        .collect()
}

/// Reads every document of every stream; all problems are reported together.
pub fn read(streams: &[YamlStream]) -> Result<Workload, InputErrors> {
    let mut workload = Workload::default();
    let mut problems = Vec::new();
    for stream in streams {
        for doc in 0..stream.documents.len() {
            if stream.documents[doc].is_null() {
                continue;
            }
            if let Err(InputErrors(mut p)) = read_document(stream, doc, &mut workload) {
                problems.append(&mut p);
            }
        }
    }
    if problems.is_empty() {
        Ok(workload)
    } else {
        Err(InputErrors(problems))
    }
}

fn read_document(
    stream: &YamlStream,
    doc: usize,
    workload: &mut Workload,
) -> Result<(), InputErrors> {
    let mut problems = Vec::new();
    let (api_version, kind) = type_of(&stream.documents[doc]);
    let template_path = "spec.template.spec";
    match (api_version, kind) {
        (Some("apps/v1"), Some("Deployment")) => {
            let d: Deployment = stream.typed_keeping_all(doc, "Deployment")?;
            let spec = d.spec;
            check_quantities(stream, doc, template_path, spec.template.spec.as_ref().unwrap_or(&PodSpec::default()), &mut problems);
            workload.pods.extend(replicas(&d.metadata, &spec.template, spec.replicas.unwrap_or(1)));
        }
        (Some("apps/v1"), Some("StatefulSet")) => {
            let s: StatefulSet = stream.typed_keeping_all(doc, "StatefulSet")?;
            let spec = s.spec;
            check_quantities(stream, doc, template_path, spec.template.spec.as_ref().unwrap_or(&PodSpec::default()), &mut problems);
            workload.pods.extend(replicas(&s.metadata, &spec.template, spec.replicas.unwrap_or(1)));
        }
        (Some("apps/v1"), Some("ReplicaSet")) => {
            let r: ReplicaSet = stream.typed_keeping_all(doc, "ReplicaSet")?;
            let spec = r.spec;
            let template = spec.template.unwrap_or_default();
            check_quantities(stream, doc, template_path, template.spec.as_ref().unwrap_or(&PodSpec::default()), &mut problems);
            workload.pods.extend(replicas(&r.metadata, &template, spec.replicas.unwrap_or(1)));
        }
        (Some("batch/v1"), Some("Job")) => {
            let j: Job = stream.typed_keeping_all(doc, "Job")?;
            let spec = j.spec.unwrap_or_default();
            check_quantities(stream, doc, template_path, spec.template.spec.as_ref().unwrap_or(&PodSpec::default()), &mut problems);
            workload.pods.extend(replicas(&j.metadata, &spec.template, spec.parallelism.unwrap_or(1)));
        }
        (Some("v1"), Some("Pod")) => {
            let mut p: Pod = stream.typed_keeping_all(doc, "Pod")?;
            check_quantities(stream, doc, "spec", p.spec.as_ref().unwrap_or(&PodSpec::default()), &mut problems);
            p.metadata.namespace.get_or_insert_with(|| "default".into());
            workload.pods.push(SchedPod::from_k8s(&p.into(), None));
        }
        (Some("apps/v1"), Some("DaemonSet")) => {
            let d: DaemonSet = stream.typed_keeping_all(doc, "DaemonSet")?;
            let spec = d.spec;
            check_quantities(stream, doc, template_path, spec.template.spec.as_ref().unwrap_or(&PodSpec::default()), &mut problems);
            workload.daemonsets.push(pod_from_template(&d.metadata, &spec.template, 0));
        }
        (api, kind) => problems.push(
            Diagnostic::error(
                &stream.file,
                format!(
                    "unsupported workload {}/{}: expected apps/v1 Deployment, StatefulSet, ReplicaSet or DaemonSet, batch/v1 Job, or v1 Pod",
                    api.unwrap_or("<no apiVersion>"),
                    kind.unwrap_or("<no kind>")
                ),
            )
            .field(&stream.map, doc, "kind"),
        ),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InputErrors(problems))
    }
}

/// Pods per owner, for compact listings (`web` × 6).
pub fn owners(pods: &[String]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for p in pods {
        let owner = p
            .rsplit_once('-')
            .map_or(p.as_str(), |(o, _)| o)
            .to_string();
        *out.entry(owner).or_default() += 1;
    }
    out
}
