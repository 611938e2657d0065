//! The kubelet settings of an EC2NodeClass as kubelet command-line flags, for the families
//! whose bootstrap takes extra kubelet arguments (AL2's bootstrap.sh, Windows'
//! Start-EKSBootstrap.ps1) rather than a KubeletConfiguration document.

use std::collections::BTreeMap;

use super::{NodeSettings, UserDataError};

/// `k=v,k2=v2`.
fn pairs<V: std::fmt::Display>(map: &BTreeMap<String, V>, sep: &str) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}{sep}{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `--node-labels=… --register-with-taints=… --max-pods=…` and the rest, each value quoted.
/// Fields the flags cannot express are an error naming the field.
pub fn flags(node: &NodeSettings, family: &'static str) -> Result<Vec<String>, UserDataError> {
    let mut out = Vec::new();
    if let Some(labels) = node.labels_flag() {
        out.push(format!("--node-labels=\"{labels}\""));
    }
    out.push(format!("--register-with-taints=\"{}\"", node.taints_flag()));
    let Some(k) = node.kubelet else {
        return Ok(out);
    };
    if let Some((field, _)) = k.other.iter().next() {
        return Err(UserDataError::UnsupportedKubeletField {
            field: field.clone(),
            family,
            hint: "; set it in spec.userData or use amiFamily AL2023",
        });
    }
    if let Some(n) = k.max_pods {
        out.push(format!("--max-pods={n}"));
    }
    if let Some(n) = k.pods_per_core {
        out.push(format!("--pods-per-core={n}"));
    }
    if !k.kube_reserved.is_empty() {
        out.push(format!(
            "--kube-reserved=\"{}\"",
            pairs(&k.kube_reserved, "=")
        ));
    }
    if !k.system_reserved.is_empty() {
        out.push(format!(
            "--system-reserved=\"{}\"",
            pairs(&k.system_reserved, "=")
        ));
    }
    for (flag, map) in [
        ("eviction-hard", &k.eviction_hard),
        ("eviction-soft", &k.eviction_soft),
    ] {
        if let Some(m) = map.as_ref().filter(|m| !m.is_empty()) {
            out.push(format!("--{flag}=\"{}\"", pairs(m, "<")));
        }
    }
    if let Some(m) = k
        .eviction_soft_grace_period
        .as_ref()
        .filter(|m| !m.is_empty())
    {
        out.push(format!(
            "--eviction-soft-grace-period=\"{}\"",
            pairs(m, "=")
        ));
    }
    if let Some(n) = k.eviction_max_pod_grace_period {
        out.push(format!("--eviction-max-pod-grace-period={n}"));
    }
    if let Some(n) = k.image_gc_high_threshold_percent {
        out.push(format!("--image-gc-high-threshold={n}"));
    }
    if let Some(n) = k.image_gc_low_threshold_percent {
        out.push(format!("--image-gc-low-threshold={n}"));
    }
    if let Some(b) = k.cpu_cfs_quota {
        out.push(format!("--cpu-cfs-quota={b}"));
    }
    Ok(out)
}

/// The cluster DNS address the kubelet is told, when the class sets one.
pub fn cluster_dns(node: &NodeSettings) -> Option<String> {
    node.kubelet.and_then(|k| k.cluster_dns.first().cloned())
}
