//! A core/v1 Pod as the controller keeps it: only the fields its decisions read, under
//! Kubernetes' names and with k8s-openapi's types for each, so it deserializes straight from
//! what the API server sends and everything else is skipped as it is read. At 10,000 pods the
//! pod cache was most of the controller's memory, and half of a k8s-openapi `Pod` in memory is
//! the fixed size of fields no decision reads (probes, lifecycle hooks, security contexts, DNS
//! settings...): a pod as the harness serves it takes about a third of the room here.
//!
//! A field added to a reader must be added here first; one missing reads as unset.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as k8s;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// What scheduling and the drain read: resources, ports, selectors, affinity, tolerations,
/// spread, priority, the node and the grace period.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<k8s::Affinity>,
    #[serde(default)]
    pub containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<k8s::Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<k8s::TopologySpreadConstraint>>,
}

/// A container's name, image, ports, resources and restart policy (a sidecar's `Always`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<k8s::ContainerPort>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<k8s::ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// The phase, the conditions (kube-scheduler's `PodScheduled` says why a pod waits) and when
/// it started (a do-not-disrupt duration runs from then).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<k8s::PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

impl k8s_openapi::Resource for Pod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for Pod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A full pod (a workload file's) keeps what this one has room for.
impl From<k8s::Pod> for Pod {
    fn from(p: k8s::Pod) -> Self {
        Pod {
            spec: p.spec.as_ref().map(PodSpec::from),
            status: p.status.map(|s| PodStatus {
                conditions: s.conditions,
                phase: s.phase,
                start_time: s.start_time,
            }),
            metadata: p.metadata,
        }
    }
}

/// A full spec (a template's) copies only the fields kept here.
impl From<&k8s::PodSpec> for PodSpec {
    fn from(s: &k8s::PodSpec) -> Self {
        let containers =
            |list: &[k8s::Container]| list.iter().map(Container::from).collect::<Vec<_>>();
        PodSpec {
            affinity: s.affinity.clone(),
            containers: containers(&s.containers),
            init_containers: s.init_containers.as_deref().map(containers),
            node_name: s.node_name.clone(),
            node_selector: s.node_selector.clone(),
            overhead: s.overhead.clone(),
            priority: s.priority,
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s.tolerations.clone(),
            topology_spread_constraints: s.topology_spread_constraints.clone(),
        }
    }
}

impl From<&k8s::Container> for Container {
    fn from(c: &k8s::Container) -> Self {
        Container {
            name: c.name.clone(),
            image: c.image.clone(),
            ports: c.ports.clone(),
            resources: c.resources.clone(),
            restart_policy: c.restart_policy.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn served() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {
                "nodeName": "node-a",
                "priority": 100,
                "nodeSelector": {"topology.kubernetes.io/zone": "us-west-2a"},
                "tolerations": [{"key": "spot", "operator": "Exists"}],
                "volumes": [{"name": "token", "projected": {"sources": []}}],
                "securityContext": {"runAsUser": 1000},
                "containers": [{
                    "name": "app", "image": "registry.k8s.io/pause:3.10",
                    "command": ["/pause"], "env": [{"name": "A", "value": "b"}],
                    "resources": {"requests": {"cpu": "250m"}},
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}}
                }]
            },
            "status": {
                "phase": "Running",
                "startTime": "2026-12-07T00:00:00Z",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "x", "imageID": "y",
                    "ready": true, "restartCount": 0}]
            }
        })
    }

    #[test]
    fn a_served_pod_keeps_what_the_readers_use() {
        let pod: Pod = serde_json::from_value(served()).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-a"));
        assert_eq!(spec.priority, Some(100));
        assert_eq!(spec.tolerations.as_ref().map(Vec::len), Some(1));
        assert_eq!(spec.node_selector.as_ref().map(BTreeMap::len), Some(1));
        let c = &spec.containers[0];
        assert_eq!(c.name, "app");
        assert_eq!(c.ports.as_ref().unwrap()[0].host_port, Some(8080));
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        assert_eq!(requests.unwrap()["cpu"].0, "250m");
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.start_time.is_some());
        assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn a_full_pod_converts_to_the_same_as_served() {
        let full: k8s::Pod = serde_json::from_value(served()).unwrap();
        let served: Pod = serde_json::from_value(served()).unwrap();
        assert_eq!(Pod::from(full), served);
    }

    #[test]
    fn it_is_addressed_as_a_core_v1_pod() {
        use kube::Resource;
        assert_eq!(Pod::api_version(&()), "v1");
        assert_eq!(Pod::plural(&()), "pods");
        let pod: Pod = serde_json::from_value(served()).unwrap();
        let r = pod.object_ref(&());
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(r.namespace.as_deref(), Some("shop"));
    }

    #[test]
    fn it_is_a_fraction_of_a_full_pod_in_memory() {
        // The fixed sizes are what every cached pod pays before its strings and maps.
        let full = std::mem::size_of::<k8s::Pod>() + std::mem::size_of::<k8s::Container>();
        let slim = std::mem::size_of::<Pod>() + std::mem::size_of::<Container>();
        assert!(slim * 3 < full, "{slim} B against {full} B");
    }
}
