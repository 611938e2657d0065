//! Bottlerocket: one TOML document of API settings. The user's own settings stay; jointer
//! writes the cluster's (`settings.kubernetes`: endpoint, CA, name, the node's labels and
//! taints, the class's kubelet settings) over theirs, as those must match the NodeClaim.

use toml::{Table, Value};

use super::{effect, kubelet_args, ClusterInfo, NodeSettings, UserDataError};

/// The table at `path` under `table`, made if missing.
fn table_at<'t>(table: &'t mut Table, path: &[&str]) -> Result<&'t mut Table, UserDataError> {
    let mut at = table;
    for (i, key) in path.iter().enumerate() {
        at = at
            .entry(key.to_string())
            .or_insert_with(|| Value::Table(Table::new()))
            .as_table_mut()
            .ok_or_else(|| UserDataError::NotATable {
                path: path[..=i].join("."),
            })?;
    }
    Ok(at)
}

fn strings<V: ToString>(map: &std::collections::BTreeMap<String, V>) -> Value {
    Value::Table(
        map.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.to_string())))
            .collect(),
    )
}

pub fn user_data(
    cluster: &ClusterInfo,
    node: &NodeSettings,
    custom: Option<&str>,
) -> Result<String, UserDataError> {
    let mut doc: Table = match custom {
        Some(c) => c
            .parse()
            .map_err(|e: toml::de::Error| UserDataError::NotToml(e.message().to_string()))?,
        None => Table::new(),
    };
    let k8s = table_at(&mut doc, &["settings", "kubernetes"])?;
    k8s.insert("api-server".into(), cluster.endpoint.clone().into());
    k8s.insert(
        "cluster-certificate".into(),
        cluster.certificate_authority.clone().into(),
    );
    k8s.insert("cluster-name".into(), cluster.name.clone().into());
    if let Some(dns) = kubelet_args::cluster_dns(node) {
        k8s.insert("cluster-dns-ip".into(), dns.into());
    }
    let labels = table_at(k8s, &["node-labels"])?;
    for (k, v) in node.kubelet_labels() {
        labels.insert(k.clone(), v.clone().into());
    }
    // Bottlerocket's node-taints: key → ["value:Effect", …].
    let taints = table_at(k8s, &["node-taints"])?;
    for t in node.registration_taints() {
        let entry = format!(
            "{}:{}",
            t.value.clone().unwrap_or_default(),
            effect(t.effect)
        );
        let list = taints
            .entry(t.key.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        match list {
            Value::Array(items) if !items.iter().any(|i| i.as_str() == Some(&entry)) => {
                items.push(entry.into())
            }
            Value::Array(_) => {}
            other => *other = Value::Array(vec![entry.into()]),
        }
    }
    if let Some(k) = node.kubelet {
        if let Some((field, _)) = k.other.iter().next() {
            return Err(UserDataError::UnsupportedKubeletField {
                field: field.clone(),
                family: "Bottlerocket",
                hint:
                    "; set its Bottlerocket equivalent under [settings.kubernetes] in spec.userData",
            });
        }
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(v) = value {
                k8s.insert(key.into(), v);
            }
        };
        set("max-pods", k.max_pods.map(|n| Value::Integer(n.into())));
        set(
            "kube-reserved",
            (!k.kube_reserved.is_empty()).then(|| strings(&k.kube_reserved)),
        );
        set(
            "system-reserved",
            (!k.system_reserved.is_empty()).then(|| strings(&k.system_reserved)),
        );
        set("eviction-hard", k.eviction_hard.as_ref().map(strings));
        set("eviction-soft", k.eviction_soft.as_ref().map(strings));
        set(
            "eviction-soft-grace-period",
            k.eviction_soft_grace_period.as_ref().map(strings),
        );
        set(
            "eviction-max-pod-grace-period",
            k.eviction_max_pod_grace_period
                .map(|n| Value::Integer(n.into())),
        );
        set(
            "image-gc-high-threshold-percent",
            k.image_gc_high_threshold_percent
                .map(|n| Value::Integer(n.into())),
        );
        set(
            "image-gc-low-threshold-percent",
            k.image_gc_low_threshold_percent
                .map(|n| Value::Integer(n.into())),
        );
        set(
            "cpu-cfs-quota-enforced",
            k.cpu_cfs_quota.map(Value::Boolean),
        );
        // Bottlerocket has no pods-per-core setting: podsPerCore is left out, as upstream does.
    }
    if node.raid0_instance_stores {
        // Bottlerocket's own API stripes the instance stores and binds the kubelet's and
        // containerd's directories onto them before they start.
        let step = table_at(
            &mut doc,
            &[
                "settings",
                "bootstrap-commands",
                "000-mount-instance-storage",
            ],
        )?;
        step.insert(
            "commands".into(),
            Value::Array(vec![
                Value::Array(vec![
                    "apiclient".into(),
                    "ephemeral-storage".into(),
                    "init".into(),
                ]),
                Value::Array(
                    [
                        "apiclient",
                        "ephemeral-storage",
                        "bind",
                        "--dirs",
                        "/var/lib/containerd",
                        "/var/lib/kubelet",
                        "/var/log/pods",
                    ]
                    .map(Value::from)
                    .to_vec(),
                ),
            ]),
        );
        step.insert("mode".into(), "always".into());
        step.insert("essential".into(), true.into());
    }
    Ok(toml::to_string(&doc).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn golden_settings_over_the_users_own() {
        let (labels, taints) = (labels(), taints());
        let kubelet = kubelet(serde_json::json!({
            "maxPods": 110, "clusterDNS": ["10.100.0.10"],
            "systemReserved": {"memory": "100Mi"},
            "evictionHard": {"memory.available": "200Mi"},
        }));
        let mine = "[settings.host-containers.admin]\nenabled = true\n\n[settings.kubernetes]\ncluster-name = \"someone-elses\"\n\n[settings.kubernetes.node-labels]\nteam = \"a\"\n";
        let data = user_data(
            &cluster(),
            &node(Some(&kubelet), &labels, &taints),
            Some(mine),
        )
        .unwrap();
        assert_eq!(
            data,
            r#"[settings.host-containers.admin]
enabled = true

[settings.kubernetes]
api-server = "https://example.eks.amazonaws.com"
cluster-certificate = "Q0E="
cluster-dns-ip = "10.100.0.10"
cluster-name = "prod"
max-pods = 110

[settings.kubernetes.eviction-hard]
"memory.available" = "200Mi"

[settings.kubernetes.node-labels]
"karpenter.sh/nodepool" = "general"
team = "a"

[settings.kubernetes.node-taints]
dedicated = ["spot:NoSchedule"]
"karpenter.sh/unregistered" = [":NoExecute"]

[settings.kubernetes.system-reserved]
memory = "100Mi"
"#
        );
    }

    #[test]
    fn bad_toml_and_unsupported_fields_are_named() {
        let labels = labels();
        let err = user_data(
            &cluster(),
            &node(None, &labels, &[]),
            Some("[settings\nx = 1"),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("spec.userData: not valid TOML"),
            "{err}"
        );
        let err = user_data(
            &cluster(),
            &node(None, &labels, &[]),
            Some("settings = \"flat\""),
        )
        .unwrap_err();
        assert_eq!(
            err,
            UserDataError::NotATable {
                path: "settings".into()
            }
        );
        let kubelet = kubelet(serde_json::json!({"shutdownGracePeriod": "45s"}));
        let err = user_data(&cluster(), &node(Some(&kubelet), &labels, &[]), None).unwrap_err();
        assert!(err.to_string().contains("Bottlerocket family"), "{err}");
    }

    #[test]
    fn raid0_asks_bottlerocket_to_stripe_the_instance_stores() {
        let labels = labels();
        let mut n = node(None, &labels, &[]);
        n.raid0_instance_stores = true;
        let data = user_data(&cluster(), &n, None).unwrap();
        let doc: Table = data.parse().unwrap();
        let step = &doc["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
        assert_eq!(step["mode"].as_str(), Some("always"));
        assert_eq!(step["commands"][0][2].as_str(), Some("init"));
    }
}
