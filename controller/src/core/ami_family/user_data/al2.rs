//! AL2: the EKS AMI's `/etc/eks/bootstrap.sh`, called from a shell-script part after the
//! user's own parts. Kubelet settings travel as `--kubelet-extra-args`; `--use-max-pods false`
//! lets `--max-pods` (when the class sets one) win over the AMI's ENI table.

use super::{kubelet_args, mime, ClusterInfo, NodeSettings, UserDataError};

pub fn user_data(
    cluster: &ClusterInfo,
    node: &NodeSettings,
    custom: Option<&str>,
) -> Result<String, UserDataError> {
    let extra = kubelet_args::flags(node, "AL2")?;
    let mut script = String::from(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
    );
    script.push_str(&format!(
        "/etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}' --b64-cluster-ca '{}'",
        cluster.name, cluster.endpoint, cluster.certificate_authority
    ));
    if let Some(dns) = kubelet_args::cluster_dns(node) {
        script.push_str(&format!(" \\\n--dns-cluster-ip '{dns}'"));
    }
    if node.raid0_instance_stores {
        script.push_str(" \\\n--local-disks raid0");
    }
    if node.kubelet.and_then(|k| k.max_pods).is_some() {
        script.push_str(" \\\n--use-max-pods false");
    }
    script.push_str(&format!(
        " \\\n--kubelet-extra-args '{}'\n",
        extra.join(" ")
    ));
    mime::merge(custom, ("text/x-shellscript; charset=\"us-ascii\"", script))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn golden_bootstrap_after_the_users_script() {
        let (labels, taints) = (labels(), taints());
        let kubelet = kubelet(serde_json::json!({
            "maxPods": 58, "clusterDNS": ["10.100.0.10"],
            "kubeReserved": {"cpu": "100m", "memory": "1Gi"},
            "evictionHard": {"memory.available": "5%"},
        }));
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
Content-Type: text/x-shellscript; charset="us-ascii"

#!/bin/bash -xe
exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1
/etc/eks/bootstrap.sh 'prod' --apiserver-endpoint 'https://example.eks.amazonaws.com' --b64-cluster-ca 'Q0E=' \
--dns-cluster-ip '10.100.0.10' \
--use-max-pods false \
--kubelet-extra-args '--node-labels="karpenter.sh/nodepool=general" --register-with-taints="dedicated=spot:NoSchedule,karpenter.sh/unregistered:NoExecute" --max-pods=58 --kube-reserved="cpu=100m,memory=1Gi" --eviction-hard="memory.available<5%"'

--//--
"#
        );
    }

    #[test]
    fn a_kubelet_field_bootstrap_sh_cannot_pass_is_named() {
        let labels = labels();
        let kubelet = kubelet(serde_json::json!({"shutdownGracePeriod": "45s"}));
        let err = user_data(&cluster(), &node(Some(&kubelet), &labels, &[]), None).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.kubelet.shutdownGracePeriod: the AL2 family"),
            "{err}"
        );
    }
}
