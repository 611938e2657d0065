//! What the watch caches keep of an object: what the controllers read, not what the API
//! server sends. At thousands of pods the pod cache is most of the controller's memory: a pod
//! is cached as [`crate::api::pod::Pod`], which reads only the fields the decisions use, and
//! keeps only kube-scheduler's condition. Every cached object drops its managedFields and
//! kubectl's last-applied copy of itself.
//!
//! Whatever a controller starts reading from an object must stay out of these lists: a field
//! dropped here reads as unset everywhere.

use k8s_openapi::api::core::v1::Node;

use crate::api::pod::Pod;

/// kubectl's client-side apply keeps the whole object it applied in this annotation.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no object's reader needs: the field managers and kubectl's copy.
pub fn metadata<K: kube::Resource>(o: &mut K) {
    let meta = o.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// A pod keeps its `PodScheduled` condition, the one whose reason says kube-scheduler could not
/// place it; the kubelet's (Ready, ContainersReady, Initialized...) go.
pub fn pod(p: &mut Pod) {
    metadata(p);
    if let Some(conditions) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        conditions.retain(|c| c.type_ == "PodScheduled");
    }
}

/// A node drops the list of images it holds (up to fifty names each, on a real node).
pub fn node(n: &mut Node) {
    metadata(n);
    if let Some(status) = n.status.as_mut() {
        status.images = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    fn served_pod() -> serde_json::Value {
        serde_json::json!({
            "metadata": {
                "name": "web-1", "namespace": "default",
                "labels": {"app": "web"},
                "annotations": {
                    "karpenter.sh/do-not-disrupt": "true",
                    LAST_APPLIED: "{\"kind\":\"Pod\"}"
                },
                "managedFields": [{"manager": "kubectl", "operation": "Update"}]
            },
            "spec": {
                "nodeName": "node-a",
                "nodeSelector": {"kubernetes.io/arch": "arm64"},
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "terminationGracePeriodSeconds": 30,
                "containers": [{
                    "name": "app", "image": "nginx",
                    "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "250m"}},
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "volumeMounts": [{"name": "token", "mountPath": "/var/run"}]
                }],
                "initContainers": [{
                    "name": "proxy", "image": "envoy", "restartPolicy": "Always",
                    "command": ["envoy"],
                    "resources": {"requests": {"memory": "64Mi"}}
                }],
                "volumes": [{"name": "token", "projected": {"sources": []}}]
            },
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "PodScheduled", "status": "True"}
                ],
                "containerStatuses": [{
                    "name": "app", "image": "nginx", "imageID": "sha256:0", "ready": true,
                    "restartCount": 0
                }]
            }
        })
    }

    #[test]
    fn a_cached_pod_keeps_what_scheduling_and_disruption_read_and_drops_the_rest() {
        let full: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(served_pod()).expect("pod");
        let mut pod: Pod = serde_json::from_value(served_pod()).expect("pod");
        super::pod(&mut pod);

        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(
            pod.annotations().keys().collect::<Vec<_>>(),
            ["karpenter.sh/do-not-disrupt"]
        );
        assert_eq!(pod.metadata.labels, full.metadata.labels);
        let (spec, was) = (pod.spec.as_ref().expect("spec"), full.spec.expect("spec"));
        assert_eq!(spec.node_name, was.node_name);
        assert_eq!(spec.node_selector, was.node_selector);
        assert_eq!(spec.tolerations, was.tolerations);
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        let app = &spec.containers[0];
        assert_eq!(app.resources, was.containers[0].resources);
        assert_eq!(app.ports, was.containers[0].ports);
        let proxy = &spec.init_containers.as_ref().expect("init")[0];
        assert_eq!(proxy.restart_policy.as_deref(), Some("Always"));
        assert!(proxy.resources.is_some());
        let status = pod.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let kept: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(kept, ["PodScheduled"]);
    }

    #[test]
    fn a_node_drops_its_image_list_and_keeps_its_status() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-a", "labels": {"karpenter.sh/nodepool": "general"}},
            "status": {
                "allocatable": {"cpu": "2"},
                "images": [{"names": ["nginx"], "sizeBytes": 1}]
            }
        }))
        .expect("node");
        super::node(&mut node);
        let status = node.status.as_ref().expect("status");
        assert!(status.images.is_none());
        assert!(status.allocatable.is_some());
        assert_eq!(node.labels().len(), 1);
    }
}
