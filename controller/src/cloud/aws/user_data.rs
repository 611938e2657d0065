//! AL2023 user data: MIME multipart (boundary `//`) with an `application/node.eks.aws` part
//! holding the `NodeConfig` nodeadm reads: how to reach the cluster, the kubelet config of the
//! EC2NodeClass, and the node's labels and registration taints as kubelet flags. A user's own
//! `spec.userData` parts come first, as upstream merges them.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::api::ec2nodeclass::KubeletConfiguration;
use crate::api::taint::{Taint, TaintEffect};

/// Registration taint every node starts with until the controller has synced it with its
/// NodeClaim; it keeps pods off a node whose labels and taints are not final yet.
use crate::api::labels::UNREGISTERED_TAINT;

const BOUNDARY: &str = "//";

/// What a node needs to find and trust the cluster (from eks:DescribeCluster).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterInfo {
    pub name: String,
    pub endpoint: String,
    /// Base64 of the cluster CA's PEM, as DescribeCluster returns it.
    pub certificate_authority: String,
    pub service_cidr: String,
}

/// The node-specific part: kubelet settings, labels and taints to register with.
#[derive(Debug, Clone)]
pub struct NodeSettings<'a> {
    pub kubelet: Option<&'a KubeletConfiguration>,
    pub labels: &'a BTreeMap<String, String>,
    pub taints: &'a [Taint],
    /// `instanceStorePolicy: RAID0`: nodeadm stripes the instance stores for kubelet data.
    pub raid0_instance_stores: bool,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum UserDataError {
    #[error("spec.userData is MIME multipart but has no boundary parameter in its Content-Type")]
    NoBoundary,
}

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

fn effect(e: TaintEffect) -> &'static str {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

fn taint_flag(t: &Taint) -> String {
    match &t.value {
        Some(v) => format!("{}={v}:{}", t.key, effect(t.effect)),
        None => format!("{}:{}", t.key, effect(t.effect)),
    }
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
    let labels: Vec<String> = node
        .labels
        .iter()
        .filter(|(k, _)| kubelet_may_set(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !labels.is_empty() {
        flags.push(format!("--node-labels={}", labels.join(",")));
    }
    let mut taints: Vec<String> = node.taints.iter().map(taint_flag).collect();
    let unregistered = Taint {
        key: UNREGISTERED_TAINT.into(),
        value: None,
        effect: TaintEffect::NoExecute,
        time_added: None,
    };
    if !node.taints.iter().any(|t| t.key == UNREGISTERED_TAINT) {
        taints.push(taint_flag(&unregistered));
    }
    flags.push(format!("--register-with-taints={}", taints.join(",")));
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

/// `(content type, body)` of each part of the user's own user data.
fn custom_parts(custom: &str) -> Result<Vec<(String, String)>, UserDataError> {
    let header_end = custom.find("\n\n").or_else(|| custom.find("\r\n\r\n"));
    let is_mime = custom
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .any(|l| {
            l.to_ascii_lowercase()
                .starts_with("content-type: multipart/")
        });
    if !is_mime {
        let kind = if custom.contains("kind: NodeConfig") {
            "application/node.eks.aws"
        } else {
            "text/x-shellscript; charset=\"us-ascii\""
        };
        return Ok(vec![(kind.to_string(), custom.to_string())]);
    }
    let header = &custom[..header_end.unwrap_or(custom.len())];
    let boundary = header
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| {
            b.lines()
                .next()
                .unwrap_or_default()
                .trim()
                .trim_matches('"')
        })
        .filter(|b| !b.is_empty())
        .ok_or(UserDataError::NoBoundary)?;
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    for chunk in custom.split(delimiter.as_str()).skip(1) {
        if chunk.starts_with("--") {
            break;
        }
        let chunk = chunk.trim_start_matches(['\r', '\n']);
        let (head, body) = chunk
            .split_once("\n\n")
            .or_else(|| chunk.split_once("\r\n\r\n"))
            .unwrap_or(("", chunk));
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "text/x-shellscript".to_string());
        parts.push((content_type, body.trim_end().to_string()));
    }
    Ok(parts)
}

/// The whole user data: the user's parts, then jointer's NodeConfig.
pub fn al2023(
    cluster: &ClusterInfo,
    node: &NodeSettings,
    custom: Option<&str>,
) -> Result<String, UserDataError> {
    let mut parts = match custom {
        Some(c) if !c.trim().is_empty() => custom_parts(c)?,
        _ => Vec::new(),
    };
    parts.push((
        "application/node.eks.aws".to_string(),
        node_config(cluster, node),
    ));
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for (content_type, body) in parts {
        out.push_str(&format!(
            "--{BOUNDARY}\nContent-Type: {content_type}\n\n{}\n\n",
            body.trim_end()
        ));
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "prod".into(),
            endpoint: "https://example.eks.amazonaws.com".into(),
            certificate_authority: "Q0E=".into(),
            service_cidr: "10.100.0.0/16".into(),
        }
    }

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
        let data = al2023(&cluster(), &node, None).unwrap();
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
    fn a_users_mime_parts_come_first() {
        let custom = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUND\"\n\n--BOUND\nContent-Type: text/x-shellscript\n\n#!/bin/sh\necho hi\n--BOUND--\n";
        let labels = BTreeMap::new();
        let data = al2023(
            &cluster(),
            &NodeSettings {
                kubelet: None,
                raid0_instance_stores: false,
                labels: &labels,
                taints: &[],
            },
            Some(custom),
        )
        .unwrap();
        let script = data.find("echo hi").unwrap();
        let config = data.find("kind: NodeConfig").unwrap();
        assert!(script < config);
        assert_eq!(data.matches("--//\n").count(), 2);
        let bad = "Content-Type: multipart/mixed\n\n--x\n\nbody\n";
        assert_eq!(
            al2023(
                &cluster(),
                &NodeSettings {
                    kubelet: None,
                    raid0_instance_stores: false,
                    labels: &labels,
                    taints: &[],
                },
                Some(bad)
            ),
            Err(UserDataError::NoBoundary)
        );
    }
}
