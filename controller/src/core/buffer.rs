//! CapacityBuffers (pure): each buffer resolved to a chunk shape and a number of chunks, and
//! the chunks turned into virtual pods. Virtual pods join the provisioner's pending set, so the
//! solver keeps room for them (on free capacity first, else on new nodes), and disruption must
//! find them a home before it removes a node — but they are never created, bound, evicted or
//! counted as real pods. Their names contain a `/`, which no real pod name can, so a virtual
//! pod's key never collides with a real one.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::capacitybuffer::{CapacityBuffer, ACTIVE_CAPACITY};
use crate::api::pod::{Pod, PodSpec};
use crate::core::scheduling::pod::pod_requests;
use crate::core::scheduling::{solve, ExistingNode, PodKey, Problem, Resources, SchedPod};

/// Virtual pod names start with this (and carry the buffer's name and the chunk's index).
pub const VIRTUAL_POD_PREFIX: &str = "capacitybuffer/";

/// No buffer keeps room for more chunks than this: a generous limit over a tiny chunk would
/// otherwise flood the solver with placeholders.
pub const MAX_CHUNKS: i32 = 1000;

/// The objects buffers are resolved from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub buffers: Vec<Arc<CapacityBuffer>>,
    pub pod_templates: Vec<Arc<PodTemplate>>,
    pub deployments: Vec<Arc<Deployment>>,
    pub replicasets: Vec<Arc<ReplicaSet>>,
    pub statefulsets: Vec<Arc<StatefulSet>>,
}

/// Why a buffer cannot be resolved; the message names the field and what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    #[error("spec: set podTemplateRef or scalableRef (the shape of one chunk)")]
    NoRef,
    #[error("spec.provisioningStrategy: {0:?} is not supported; the only strategy is {ACTIVE_CAPACITY:?}")]
    UnsupportedStrategy(String),
    #[error("spec.podTemplateRef.name: PodTemplate {namespace}/{name} does not exist")]
    PodTemplateNotFound { namespace: String, name: String },
    #[error("spec.scalableRef: {api_group:?}/{kind} is not supported; use apiGroup \"apps\" with kind Deployment, ReplicaSet or StatefulSet")]
    UnsupportedScalableRef { api_group: String, kind: String },
    #[error("spec.scalableRef.name: {kind} {namespace}/{name} does not exist")]
    ScalableRefNotFound {
        kind: String,
        namespace: String,
        name: String,
    },
    #[error("spec: set replicas, percentage (with scalableRef) or limits to say how many chunks to keep")]
    NoCount,
    #[error("spec.limits: a chunk requests none of the limited resources ({0}), so limits alone cannot bound the chunks; set replicas")]
    LimitsUnmeasurable(String),
}

impl BufferError {
    /// The condition reason (CamelCase) that reports this error.
    pub fn reason(&self) -> &'static str {
        match self {
            BufferError::NoRef => "NoReference",
            BufferError::UnsupportedStrategy(_) => "UnsupportedProvisioningStrategy",
            BufferError::PodTemplateNotFound { .. } => "PodTemplateNotFound",
            BufferError::UnsupportedScalableRef { .. } => "UnsupportedScalableRef",
            BufferError::ScalableRefNotFound { .. } => "ScalableRefNotFound",
            BufferError::NoCount => "NoChunkCount",
            BufferError::LimitsUnmeasurable(_) => "LimitsUnmeasurable",
        }
    }
}

/// A buffer resolved: the shape of one chunk and how many to keep room for.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub namespace: String,
    pub name: String,
    pub template: PodTemplateSpec,
    /// The PodTemplate used (None for a scalableRef: the workload's own template is used).
    pub pod_template: Option<String>,
    /// The generation of the PodTemplate or workload the shape came from.
    pub generation: Option<i64>,
    pub replicas: i32,
}

/// The chunk shape, the source's generation, the PodTemplate name, and the workload's replicas.
type Shape = (PodTemplateSpec, Option<i64>, Option<String>, Option<i32>);

fn shape(buffer: &CapacityBuffer, sources: &Sources) -> Result<Shape, BufferError> {
    let namespace = buffer.namespace().unwrap_or_default();
    let same = |meta: &ObjectMeta, name: &str| {
        meta.namespace.as_deref() == Some(namespace.as_str()) && meta.name.as_deref() == Some(name)
    };
    if let Some(r) = &buffer.spec.pod_template_ref {
        let template = sources
            .pod_templates
            .iter()
            .find(|t| same(&t.metadata, &r.name))
            .ok_or_else(|| BufferError::PodTemplateNotFound {
                namespace: namespace.clone(),
                name: r.name.clone(),
            })?;
        return Ok((
            template.template.clone().unwrap_or_default(),
            template.metadata.generation,
            Some(r.name.clone()),
            None,
        ));
    }
    let Some(r) = &buffer.spec.scalable_ref else {
        return Err(BufferError::NoRef);
    };
    let group = r.api_group.clone().unwrap_or_default();
    let not_found = || BufferError::ScalableRefNotFound {
        kind: r.kind.clone(),
        namespace: namespace.clone(),
        name: r.name.clone(),
    };
    // An unset replicas count is 1, as the API server defaults it for these kinds.
    let found = match (group.as_str(), r.kind.as_str()) {
        ("apps", "Deployment") => sources
            .deployments
            .iter()
            .find(|d| same(&d.metadata, &r.name))
            .map(|d| {
                let spec = d.spec.clone();
                (spec.template, d.metadata.generation, spec.replicas)
            }),
        ("apps", "ReplicaSet") => sources
            .replicasets
            .iter()
            .find(|d| same(&d.metadata, &r.name))
            .map(|d| {
                let spec = d.spec.clone();
                (
                    spec.template.unwrap_or_default(),
                    d.metadata.generation,
                    spec.replicas,
                )
            }),
        ("apps", "StatefulSet") => sources
            .statefulsets
            .iter()
            .find(|d| same(&d.metadata, &r.name))
            .map(|d| {
                let spec = d.spec.clone();
                (spec.template, d.metadata.generation, spec.replicas)
            }),
        _ => {
            return Err(BufferError::UnsupportedScalableRef {
                api_group: group,
                kind: r.kind.clone(),
            })
        }
    };
    let (template, generation, replicas) = found.ok_or_else(not_found)?;
    Ok((template, generation, None, Some(replicas.unwrap_or(1))))
}

/// Chunks from `percentage` of a workload's replicas: rounded up, and at least 1 when any
/// percentage is asked for.
fn from_percentage(percentage: i32, workload_replicas: i32) -> i32 {
    if percentage <= 0 {
        return 0;
    }
    let chunks = (i64::from(percentage) * i64::from(workload_replicas.max(0)) + 99) / 100;
    i32::try_from(chunks).unwrap_or(i32::MAX).max(1)
}

/// How many chunks fit in `limits` (None when no limited resource is requested by a chunk).
fn within_limits(buffer: &CapacityBuffer, chunk: &Resources) -> Option<i64> {
    let limits = buffer.spec.limits.as_ref()?;
    let (limit, _) = Resources::from_quantities(limits);
    limits
        .keys()
        .filter_map(|name| {
            let per_chunk = chunk.get(name).filter(|r| *r > 0)?;
            Some(limit.get(name)? / per_chunk)
        })
        .min()
}

/// Resolves one buffer against the objects it names.
pub fn resolve(buffer: &CapacityBuffer, sources: &Sources) -> Result<Resolved, BufferError> {
    if buffer.spec.provisioning_strategy != ACTIVE_CAPACITY {
        return Err(BufferError::UnsupportedStrategy(
            buffer.spec.provisioning_strategy.clone(),
        ));
    }
    let (template, generation, pod_template, workload_replicas) = shape(buffer, sources)?;
    let spec = &buffer.spec;
    // Replicas and percentage: the smaller of those set; limits cap them (or alone decide).
    let mut counts: Vec<i64> = Vec::new();
    counts.extend(spec.replicas.map(|r| i64::from(r.max(0))));
    if let (Some(p), Some(w)) = (spec.percentage, workload_replicas) {
        counts.push(i64::from(from_percentage(p, w)));
    }
    let chunk = pod_requests(
        &template
            .spec
            .as_ref()
            .map(PodSpec::from)
            .unwrap_or_default(),
    )
    .0;
    match within_limits(buffer, &chunk) {
        Some(n) => counts.push(n),
        None if counts.is_empty() => {
            return Err(match &spec.limits {
                Some(l) if !l.is_empty() => BufferError::LimitsUnmeasurable(
                    l.keys().cloned().collect::<Vec<_>>().join(", "),
                ),
                _ => BufferError::NoCount,
            })
        }
        None => {}
    }
    let replicas = counts
        .into_iter()
        .min()
        .unwrap_or(0)
        .clamp(0, MAX_CHUNKS.into());
    Ok(Resolved {
        namespace: buffer.namespace().unwrap_or_default(),
        name: buffer.name_any(),
        template,
        pod_template,
        generation,
        replicas: i32::try_from(replicas).unwrap_or(MAX_CHUNKS),
    })
}

/// Whether a pod key is a buffer's placeholder rather than a real pod.
pub fn is_virtual(key: &PodKey) -> bool {
    key.name.starts_with(VIRTUAL_POD_PREFIX)
}

/// The buffer a placeholder belongs to (its own key's name, for a real pod).
pub fn buffer_name(key: &PodKey) -> &str {
    key.name
        .strip_prefix(VIRTUAL_POD_PREFIX)
        .and_then(|rest| rest.rsplit_once('/'))
        .map_or(key.name.as_str(), |(name, _)| name)
}

/// The placeholder pods of one resolved buffer (never sent to the API server).
pub fn virtual_pods(resolved: &Resolved, created: Option<&ObjectMeta>) -> Vec<Pod> {
    let base = resolved.template.metadata.clone().unwrap_or_default();
    let spec = resolved.template.spec.as_ref().map(|s| PodSpec {
        node_name: None,
        ..PodSpec::from(s)
    });
    (0..resolved.replicas)
        .map(|i| Pod {
            metadata: ObjectMeta {
                namespace: Some(resolved.namespace.clone()),
                name: Some(format!("{VIRTUAL_POD_PREFIX}{}/{i}", resolved.name)),
                labels: base.labels.clone(),
                creation_timestamp: created.and_then(|m| m.creation_timestamp.clone()),
                ..Default::default()
            },
            spec: spec.clone(),
            status: None,
        })
        .collect()
}

/// A resolved buffer with its placeholders as the solver sees them.
pub type Placeholders = (Resolved, Vec<SchedPod>);
/// A buffer that does not resolve, and why.
pub type Unresolved = (Arc<CapacityBuffer>, BufferError);

/// Every buffer that resolves, with its placeholders as the solver sees them; and the
/// buffers that do not, with why.
pub fn resolve_all(sources: &Sources) -> (Vec<Placeholders>, Vec<Unresolved>) {
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for buffer in &sources.buffers {
        if buffer.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match resolve(buffer, sources) {
            Ok(r) => {
                let pods = virtual_pods(&r, Some(&buffer.metadata))
                    .iter()
                    .map(|p| SchedPod::from_k8s(p, None))
                    .collect();
                ok.push((r, pods));
            }
            Err(e) => failed.push((buffer.clone(), e)),
        }
    }
    (ok, failed)
}

/// The placeholders of every buffer that resolves.
pub fn sched_pods(sources: &Sources) -> Vec<SchedPod> {
    resolve_all(sources)
        .0
        .into_iter()
        .flat_map(|(_, pods)| pods)
        .collect()
}

/// Which placeholders the given nodes have room for now, besides the pods already on them:
/// the headroom that exists (the solver over those nodes alone, no new nodes).
pub fn housed(existing: Vec<ExistingNode>, pods: Vec<SchedPod>) -> BTreeSet<PodKey> {
    if pods.is_empty() {
        return BTreeSet::new();
    }
    let plan = solve(&Problem {
        pools: Vec::new(),
        existing: existing.into_iter().map(Arc::new).collect(),
        pods,
    });
    plan.existing.into_values().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn from<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).expect("object"))
    }

    fn buffer(spec: Value) -> Arc<CapacityBuffer> {
        from(
            json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "warm", "namespace": "team"}, "spec": spec}),
        )
    }

    fn chunk(cpu: &str, memory: &str) -> Value {
        json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}})
    }

    fn sources(buffer: Arc<CapacityBuffer>) -> Sources {
        Sources {
            buffers: vec![buffer],
            pod_templates: vec![from(json!({"apiVersion": "v1", "kind": "PodTemplate",
                "metadata": {"name": "chunk", "namespace": "team", "generation": 3},
                "template": chunk("1", "2Gi")}))],
            deployments: vec![from(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "team", "generation": 7},
                "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}}, "template": chunk("500m", "1Gi")}}))],
            statefulsets: vec![from(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": "team"},
                "spec": {"selector": {"matchLabels": {"app": "db"}}, "template": chunk("2", "4Gi")}}))],
            ..Default::default()
        }
    }

    fn replicas(spec: Value) -> Result<i32, BufferError> {
        let b = buffer(spec);
        resolve(&b, &sources(b.clone())).map(|r| r.replicas)
    }

    #[test]
    fn replicas_percentage_and_limits_decide_the_chunks_together() {
        let template = json!({"name": "chunk"});
        assert_eq!(
            replicas(json!({"podTemplateRef": template, "replicas": 3})),
            Ok(3)
        );
        // Limits alone: as many 1-CPU/2Gi chunks as fit in 5 CPUs and 6Gi.
        assert_eq!(
            replicas(json!({"podTemplateRef": template, "limits": {"cpu": "5", "memory": "6Gi"}})),
            Ok(3)
        );
        // Limits cap replicas.
        assert_eq!(
            replicas(
                json!({"podTemplateRef": template, "replicas": 10, "limits": {"cpu": "2500m"}})
            ),
            Ok(2)
        );
        let web = json!({"apiGroup": "apps", "kind": "Deployment", "name": "web"});
        // 20 % of 10 replicas; 15 % of 10 rounds up to 2; 1 % of 10 is still one chunk.
        assert_eq!(
            replicas(json!({"scalableRef": web, "percentage": 20})),
            Ok(2)
        );
        assert_eq!(
            replicas(json!({"scalableRef": web, "percentage": 15})),
            Ok(2)
        );
        assert_eq!(
            replicas(json!({"scalableRef": web, "percentage": 1})),
            Ok(1)
        );
        // Both set: the smaller.
        assert_eq!(
            replicas(json!({"scalableRef": web, "percentage": 50, "replicas": 3})),
            Ok(3)
        );
        // A StatefulSet without replicas has one; 100 % of it is one chunk.
        let db = json!({"apiGroup": "apps", "kind": "StatefulSet", "name": "db"});
        assert_eq!(
            replicas(json!({"scalableRef": db, "percentage": 100})),
            Ok(1)
        );
        // A huge limit over a small chunk is capped.
        assert_eq!(
            replicas(json!({"podTemplateRef": template, "limits": {"cpu": "100000"}})),
            Ok(MAX_CHUNKS)
        );
    }

    #[test]
    fn a_scalable_ref_takes_its_workloads_pod_template_and_generation() {
        let b = buffer(
            json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}, "replicas": 2}),
        );
        let r = resolve(&b, &sources(b.clone())).expect("resolves");
        assert_eq!((r.pod_template.clone(), r.generation), (None, Some(7)));
        let pods = virtual_pods(&r, None);
        assert_eq!(pods.len(), 2);
        let p = SchedPod::from_k8s(&pods[1], None);
        assert_eq!(p.requests.cpu, 500);
        assert_eq!(p.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(p.key.namespace, "team");
        assert!(is_virtual(&p.key), "{:?}", p.key);
        assert_eq!(buffer_name(&p.key), "warm");
        assert!(!is_virtual(&PodKey {
            namespace: "team".into(),
            name: "web-7d9f".into()
        }));
    }

    #[test]
    fn what_does_not_resolve_says_which_field_and_what_is_valid() {
        let missing = replicas(json!({"podTemplateRef": {"name": "nope"}, "replicas": 1}));
        assert_eq!(
            missing.unwrap_err().to_string(),
            "spec.podTemplateRef.name: PodTemplate team/nope does not exist"
        );
        let kind = replicas(json!({"scalableRef": {"apiGroup": "batch", "kind": "Job", "name": "j"}, "replicas": 1}))
            .unwrap_err();
        assert_eq!(kind.reason(), "UnsupportedScalableRef");
        assert!(
            kind.to_string()
                .contains("Deployment, ReplicaSet or StatefulSet"),
            "{kind}"
        );
        let gone = replicas(
            json!({"scalableRef": {"apiGroup": "apps", "kind": "ReplicaSet", "name": "rs"}, "replicas": 1}),
        );
        assert_eq!(gone.unwrap_err().reason(), "ScalableRefNotFound");
        let uncounted = replicas(
            json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}}),
        );
        assert_eq!(uncounted, Err(BufferError::NoCount));
        let unmeasurable = replicas(
            json!({"podTemplateRef": {"name": "chunk"}, "limits": {"nvidia.com/gpu": "4"}}),
        );
        assert_eq!(unmeasurable.unwrap_err().reason(), "LimitsUnmeasurable");
        let strategy = replicas(
            json!({"podTemplateRef": {"name": "chunk"}, "replicas": 1, "provisioningStrategy": "other"}),
        );
        assert!(strategy
            .unwrap_err()
            .to_string()
            .contains("buffer.x-k8s.io/active-capacity"));
        assert_eq!(replicas(json!({"replicas": 1})), Err(BufferError::NoRef));
    }

    #[test]
    fn the_crds_rules_reject_what_upstream_rejects() {
        use crate::api::Validate;
        let errors = |spec: Value| -> Vec<String> {
            buffer(spec)
                .validate()
                .into_iter()
                .map(|e| e.to_string())
                .collect()
        };
        assert!(errors(json!({"podTemplateRef": {"name": "chunk"}, "replicas": 1})).is_empty());
        let both = errors(json!({"podTemplateRef": {"name": "chunk"}, "replicas": 1,
            "scalableRef": {"kind": "Deployment", "name": "web"}}));
        assert!(both.iter().any(|e| e.contains("not both")), "{both:?}");
        let uncounted = errors(json!({"podTemplateRef": {"name": "chunk"}}));
        assert!(
            uncounted
                .iter()
                .any(|e| e.contains("needs replicas or limits")),
            "{uncounted:?}"
        );
        let negative = errors(json!({"podTemplateRef": {"name": "chunk"}, "replicas": -1}));
        assert!(
            negative
                .iter()
                .any(|e| e.contains("replicas must be 0 or more")),
            "{negative:?}"
        );
    }

    #[test]
    fn placeholders_fill_free_room_first() {
        let b = buffer(json!({"podTemplateRef": {"name": "chunk"}, "replicas": 3}));
        let pods = sched_pods(&sources(b));
        let node = ExistingNode {
            name: "n1".into(),
            pool: None,
            labels: Default::default(),
            taints: Vec::new(),
            allocatable: Resources {
                pods: 110,
                ..Resources::cpu_memory(2500, 8 << 30)
            },
            requested: Resources::ZERO,
            pods: Vec::new(),
            label_requirements: Default::default(),
        };
        // 2.5 CPUs free hold two 1-CPU chunks; the third needs a node.
        assert_eq!(housed(vec![node], pods).len(), 2);
    }
}
