//! AL2023: a nodeadm `NodeConfig` (how to reach the cluster, the class's kubelet config —
//! any KubeletConfiguration field, passed through — and the node's labels and registration
//! taints as kubelet flags) as the last part of a MIME multipart document.

use serde_json::{json, Value};

use super::{mime, ClusterInfo, NodeSettings, UserDataError};

/// Whether the kubelet accepts `key` in `--node-labels` (it exits on other keys in the
/// kubernetes.io and k8s.io namespaces; those labels are set on the Node at registration).
pub fn kubelet_may_set(key: &str) -> bool {
    const ALLOWED: [&str; 11] = [
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ];
    let Some((prefix, _)) = key.split_once('/') else {
        return true;
    };
    let in_namespace = |ns: &str| prefix == ns || prefix.ends_with(&format!(".{ns}"));
    let restricted = in_namespace("kubernetes.io") || in_namespace("k8s.io");
    !restricted
        || ALLOWED.contains(&key)
        || in_namespace("kubelet.kubernetes.io")
        || in_namespace("node.kubernetes.io")
}

/// The NodeConfig document (YAML).
pub fn node_config(cluster: &ClusterInfo, node: &NodeSettings) -> String {
    let mut kubelet_config = node
        .kubelet
        .and_then(|k| serde_json::to_value(k).ok())
        .unwrap_or_else(|| json!({}));
    if let Value::Object(map) = &mut kubelet_config {
        // podsPerCore and maxPods are kubelet config fields too: passed through as written.
        map.retain(|_, v| !v.is_null());
    }
    let mut flags = Vec::new();
    if let Some(labels) = node.labels_flag() {
        flags.push(format!("--node-labels={labels}"));
    }
    flags.push(format!("--register-with-taints={}", node.taints_flag()));
    let doc = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": cluster.name,
                "apiServerEndpoint": cluster.endpoint,
                "certificateAuthority": cluster.certificate_authority,
                "cidr": cluster.service_cidr,
            },
            "kubelet": { "config": kubelet_config, "flags": flags },
        }
    });
    let mut doc = doc;
    if node.raid0_instance_stores {
        doc["spec"]["instance"] = json!({ "localStorage": { "strategy": "RAID0" } });
    }
    serde_yaml::to_string(&doc).unwrap_or_default()
}

/// The whole user data: the user's parts, then jointer's NodeConfig.
pub fn user_data(
    cluster: &ClusterInfo,
    node: &NodeSettings,
    custom: Option<&str>,
) -> Result<String, UserDataError> {
    mime::merge(
        custom,
        ("application/node.eks.aws", node_config(cluster, node)),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::cluster;
    use super::*;
    use crate::api::ec2nodeclass::KubeletConfiguration;
    use crate::api::taint::{Taint, TaintEffect};
    use std::collections::BTreeMap;

    #[test]
    fn labels_the_kubelet_refuses_stay_out_of_its_flags() {
        assert!(kubelet_may_set("karpenter.sh/nodepool"));
        assert!(kubelet_may_set("team"));
        assert!(kubelet_may_set("node.kubernetes.io/instance-type"));
        assert!(kubelet_may_set("topology.kubernetes.io/zone"));
        assert!(!kubelet_may_set("node-role.kubernetes.io/worker"));
        assert!(!kubelet_may_set("example.k8s.io/x"));
    }

    #[test]
    fn the_node_config_carries_cluster_labels_and_the_unregistered_taint() {
        let labels = BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "general".to_string()),
            ("node-role.kubernetes.io/worker".to_string(), "".to_string()),
        ]);
        let taints = [Taint {
            key: "dedicated".into(),
            value: Some("spot".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }];
        // A field jointer does not type reaches the kubelet as written.
        let kubelet: KubeletConfiguration =
            serde_json::from_value(json!({"maxPods": 58, "shutdownGracePeriod": "45s"})).unwrap();
        let node = NodeSettings {
            kubelet: Some(&kubelet),
            labels: &labels,
            taints: &taints,
            raid0_instance_stores: true,
        };
        let data = user_data(&cluster(), &node, None).unwrap();
        assert!(
            data.starts_with("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"")
        );
        let yaml = data
            .split("Content-Type: application/node.eks.aws\n\n")
            .nth(1)
            .unwrap()
            .split("\n--//--")
            .next()
            .unwrap();
        let doc: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(doc["kind"], "NodeConfig");
        assert_eq!(doc["spec"]["cluster"]["name"], "prod");
        assert_eq!(doc["spec"]["cluster"]["cidr"], "10.100.0.0/16");
        assert_eq!(doc["spec"]["kubelet"]["config"]["maxPods"], 58);
        assert_eq!(
            doc["spec"]["kubelet"]["config"]["shutdownGracePeriod"],
            "45s"
        );
        assert_eq!(doc["spec"]["instance"]["localStorage"]["strategy"], "RAID0");
        assert_eq!(
            doc["spec"]["kubelet"]["flags"],
            json!([
                "--node-labels=karpenter.sh/nodepool=general",
                "--register-with-taints=dedicated=spot:NoSchedule,karpenter.sh/unregistered:NoExecute"
            ])
        );
    }

    #[test]
    fn golden_node_config_after_the_users_script() {
        use super::super::test_support::{kubelet, labels, node, taints};
        let (labels, taints) = (labels(), taints());
        let kubelet = kubelet(json!({"maxPods": 58, "clusterDNS": ["10.100.0.10"]}));
        let data = user_data(
            &cluster(),
            &node(Some(&kubelet), &labels, &taints),
            Some("#!/bin/bash\necho mine"),
        )
        .unwrap();
        assert_eq!(
            data,
            r#"MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash
echo mine

--//
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    apiServerEndpoint: https://example.eks.amazonaws.com
    certificateAuthority: Q0E=
    cidr: 10.100.0.0/16
    name: prod
  kubelet:
    config:
      clusterDNS:
      - 10.100.0.10
      maxPods: 58
    flags:
    - --node-labels=karpenter.sh/nodepool=general
    - --register-with-taints=dedicated=spot:NoSchedule,karpenter.sh/unregistered:NoExecute

--//--
"#
        );
    }
}
