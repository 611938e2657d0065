//! User data per AMI family: what a node's bootstrap reads to find the cluster and register
//! with the NodeClaim's labels and taints (plus the registration taint), merged with the
//! class's own `spec.userData` the way each family's bootstrap expects.
//!
//! - AL2023: MIME multipart; the user's parts, then a nodeadm `NodeConfig`.
//! - AL2: MIME multipart; the user's parts, then a script calling `/etc/eks/bootstrap.sh`.
//! - Bottlerocket: one TOML document; the user's settings with jointer's cluster settings
//!   written over them.
//! - Windows: one `<powershell>` script; the user's lines, then `Start-EKSBootstrap.ps1`.
//! - Custom: the user's user data, untouched.

mod al2;
pub mod al2023;
mod bottlerocket;
mod kubelet_args;
mod mime;
mod windows;

use std::collections::BTreeMap;

use crate::api::ec2nodeclass::{EC2NodeClass, InstanceStorePolicy, KubeletConfiguration};
use crate::api::labels::UNREGISTERED_TAINT;
use crate::api::taint::{Taint, TaintEffect};

use super::Family;

pub use al2023::kubelet_may_set;

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
    /// `instanceStorePolicy: RAID0`: the instance stores, striped, hold the kubelet's data.
    pub raid0_instance_stores: bool,
}

impl<'a> NodeSettings<'a> {
    pub fn of_class(
        class: &'a EC2NodeClass,
        labels: &'a BTreeMap<String, String>,
        taints: &'a [Taint],
    ) -> Self {
        NodeSettings {
            kubelet: class.spec.kubelet.as_ref(),
            labels,
            taints,
            raid0_instance_stores: class.spec.instance_store_policy
                == Some(InstanceStorePolicy::RAID0),
        }
    }

    /// Labels the kubelet accepts in `--node-labels` (the others are set at registration).
    fn kubelet_labels(&self) -> impl Iterator<Item = (&String, &String)> {
        self.labels.iter().filter(|(k, _)| kubelet_may_set(k))
    }

    /// `k=v,k2=v2` for `--node-labels`, None without labels.
    fn labels_flag(&self) -> Option<String> {
        let labels: Vec<String> = self
            .kubelet_labels()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        (!labels.is_empty()).then(|| labels.join(","))
    }

    /// `key=value:Effect,…` for `--register-with-taints`.
    fn taints_flag(&self) -> String {
        self.registration_taints()
            .iter()
            .map(taint_flag)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The NodeClaim's taints and, unless it already has it, the registration taint that
    /// keeps pods off the node until the controller has synced it with its NodeClaim.
    fn registration_taints(&self) -> Vec<Taint> {
        let mut taints = self.taints.to_vec();
        if !taints.iter().any(|t| t.key == UNREGISTERED_TAINT) {
            taints.push(Taint {
                key: UNREGISTERED_TAINT.into(),
                value: None,
                effect: TaintEffect::NoExecute,
                time_added: None,
            });
        }
        taints
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum UserDataError {
    #[error("spec.userData: MIME multipart without a boundary parameter in its Content-Type")]
    NoBoundary,
    #[error("spec.userData: not valid TOML, which Bottlerocket reads: {0}")]
    NotToml(String),
    #[error("spec.userData: {path} must be a TOML table for Bottlerocket")]
    NotATable { path: String },
    #[error("spec.kubelet.{field}: the {family} family sets kubelet options through its bootstrap, which has no such option (only AL2023 takes any KubeletConfiguration field){hint}")]
    UnsupportedKubeletField {
        field: String,
        family: &'static str,
        hint: &'static str,
    },
}

impl UserDataError {
    /// The class field the error is about (`spec.userData`, `spec.kubelet.<field>`).
    pub fn field(&self) -> String {
        match self {
            UserDataError::UnsupportedKubeletField { field, .. } => format!("spec.kubelet.{field}"),
            _ => "spec.userData".into(),
        }
    }
}

pub(crate) fn effect(e: TaintEffect) -> &'static str {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// `key=value:Effect` (or `key:Effect`), as `--register-with-taints` takes it.
pub(crate) fn taint_flag(t: &Taint) -> String {
    match &t.value {
        Some(v) => format!("{}={v}:{}", t.key, effect(t.effect)),
        None => format!("{}:{}", t.key, effect(t.effect)),
    }
}

/// The user data of a node of `family`.
pub fn generate(
    family: Family,
    cluster: &ClusterInfo,
    node: &NodeSettings,
    custom: Option<&str>,
) -> Result<String, UserDataError> {
    let custom = custom.filter(|c| !c.trim().is_empty());
    match family {
        Family::AL2023 => al2023::user_data(cluster, node, custom),
        Family::AL2 => al2::user_data(cluster, node, custom),
        Family::Bottlerocket => bottlerocket::user_data(cluster, node, custom),
        Family::Windows(_) => windows::user_data(cluster, node, custom),
        Family::Custom => Ok(custom.unwrap_or_default().to_string()),
    }
}

/// Whether the class's user data and kubelet settings make sense for its family: checked
/// when the class is resolved, so a mistake shows on the class instead of on every launch.
pub fn validate(class: &EC2NodeClass) -> Result<(), UserDataError> {
    let cluster = ClusterInfo {
        name: "validation".into(),
        endpoint: "https://validation.invalid".into(),
        certificate_authority: String::new(),
        service_cidr: "10.100.0.0/16".into(),
    };
    let labels = BTreeMap::new();
    let node = NodeSettings::of_class(class, &labels, &[]);
    generate(
        Family::of(class),
        &cluster,
        &node,
        class.spec.user_data.as_deref(),
    )
    .map(|_| ())
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "prod".into(),
            endpoint: "https://example.eks.amazonaws.com".into(),
            certificate_authority: "Q0E=".into(),
            service_cidr: "10.100.0.0/16".into(),
        }
    }

    pub fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "general".to_string()),
            ("node-role.kubernetes.io/worker".to_string(), "".to_string()),
        ])
    }

    pub fn taints() -> Vec<Taint> {
        vec![Taint {
            key: "dedicated".into(),
            value: Some("spot".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }]
    }

    pub fn kubelet(json: serde_json::Value) -> KubeletConfiguration {
        serde_json::from_value(json).expect("a valid kubelet configuration")
    }

    pub fn node<'a>(
        kubelet: Option<&'a KubeletConfiguration>,
        labels: &'a BTreeMap<String, String>,
        taints: &'a [Taint],
    ) -> NodeSettings<'a> {
        NodeSettings {
            kubelet,
            labels,
            taints,
            raid0_instance_stores: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn custom_passes_the_users_user_data_through_untouched() {
        let labels = labels();
        let taints = taints();
        let node = node(None, &labels, &taints);
        let mine = "#!/bin/bash\n/opt/my-bootstrap --cluster prod\n";
        assert_eq!(
            generate(Family::Custom, &cluster(), &node, Some(mine)).unwrap(),
            mine
        );
        assert_eq!(
            generate(Family::Custom, &cluster(), &node, None).unwrap(),
            ""
        );
    }
}
