//! Windows: one `<powershell>` script. The user's own lines run first, then the EKS AMI's
//! `Start-EKSBootstrap.ps1` with the cluster and the kubelet's extra arguments.

use super::{kubelet_args, ClusterInfo, NodeSettings, UserDataError};

/// The user's script without its `<powershell>` wrapper (there is one script per document).
fn users_lines(custom: &str) -> String {
    custom
        .replace("<powershell>", "")
        .replace("</powershell>", "")
        .trim()
        .to_string()
}

pub fn user_data(
    cluster: &ClusterInfo,
    node: &NodeSettings,
    custom: Option<&str>,
) -> Result<String, UserDataError> {
    let extra = kubelet_args::flags(node, "Windows")?;
    let mut out = String::from("<powershell>\n");
    if let Some(c) = custom {
        out.push_str(&users_lines(c));
        out.push('\n');
    }
    out.push_str(
        "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n",
    );
    out.push_str(&format!(
        "& $EKSBootstrapScriptFile -EKSClusterName '{}' -APIServerEndpoint '{}' -Base64ClusterCA '{}' -KubeletExtraArgs '{}'",
        cluster.name,
        cluster.endpoint,
        cluster.certificate_authority,
        extra.join(" ")
    ));
    if let Some(dns) = kubelet_args::cluster_dns(node) {
        out.push_str(&format!(" -DNSClusterIP '{dns}'"));
    }
    out.push_str("\n</powershell>\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    #[test]
    fn golden_bootstrap_after_the_users_lines() {
        let (labels, taints) = (labels(), taints());
        let kubelet = kubelet(serde_json::json!({"clusterDNS": ["10.100.0.10"], "maxPods": 50}));
        let data = user_data(
            &cluster(),
            &node(Some(&kubelet), &labels, &taints),
            Some("<powershell>\nWrite-Host 'mine'\n</powershell>"),
        )
        .unwrap();
        assert_eq!(
            data,
            r#"<powershell>
Write-Host 'mine'
[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\Amazon\EKS\Start-EKSBootstrap.ps1"
& $EKSBootstrapScriptFile -EKSClusterName 'prod' -APIServerEndpoint 'https://example.eks.amazonaws.com' -Base64ClusterCA 'Q0E=' -KubeletExtraArgs '--node-labels="karpenter.sh/nodepool=general" --register-with-taints="dedicated=spot:NoSchedule,karpenter.sh/unregistered:NoExecute" --max-pods=50' -DNSClusterIP '10.100.0.10'
</powershell>
"#
        );
    }
}
