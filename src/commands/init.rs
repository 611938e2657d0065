//! `jointer init`: writes a commented starter config, never over an existing file.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::input::config::{check_cluster_name, check_region};
use crate::input::diagnostics::{Diagnostic, InputErrors};

pub fn starter(cluster: &str, region: &str) -> String {
    format!(
        r#"# jointer.yaml — everything jointer sets up for Karpenter-style autoscaling on one EKS cluster.
# `jointer plan` shows what would change, `jointer apply` makes it so, `jointer drift` checks it in CI.

cluster:
  name: {cluster}          # the existing EKS cluster
  region: {region}

# How the controller gets AWS credentials: pod-identity (EKS Pod Identity agent add-on) or irsa.
identity: pod-identity

controller:
  install: bundled        # bundled (jointer-controller) | helm (upstream Karpenter chart) | none
  namespace: kube-system
  replicas: 2             # two replicas elect a leader; the second takes over in seconds
  # By default jointer builds the controller's image from its own workspace and pushes it to
  # ECR repository jointer-controller/<cluster>; or name an image you publish:
  # image: {{ repository: ghcr.io/me/jointer-controller, tag: "{version}" }}
  # helm: {{ chart: oci://public.ecr.aws/karpenter/karpenter, version: "1.8.1" }}

# Spot interruption handling: an SQS queue (named after the cluster) fed by five EventBridge rules.
interruption: true        # or {{ enabled: true, queueName: my-queue }}

# Which subnets and security group get the `karpenter.sh/discovery: <cluster>` tag.
discovery:
  subnets: auto           # auto = the cluster's private subnets, or a list of subnet IDs
  securityGroups: auto    # auto = the cluster security group, or a list of security group IDs

nodeRole:
  # name: KarpenterNodeRole-{cluster}
  access: auto            # auto | access-entry | aws-auth

# EC2NodeClass and NodePool templates (minijinja). `builtin: default` is one mixed spot/on-demand
# pool; `builtin: split` is a tainted spot pool for batch work plus an on-demand pool.
# Use `dir: path/to/templates` for your own; they see cluster.*, nodeRole, discovery.*,
# interruption.* and the values below.
templates:
  builtin: default
  values:
    cpu_limit: 1000
    memory_limit: 1000Gi
"#,
        version = env!("CARGO_PKG_VERSION")
    )
}

/// `jointer init`: the file written.
pub struct Initialized {
    pub file: PathBuf,
}

/// Writes the starter to `path`; refuses to overwrite and to write an invalid config.
pub fn init(path: &Path, cluster: &str, region: &str) -> Result<Initialized, InputErrors> {
    let mut problems = Vec::new();
    if let Err(e) = check_cluster_name(cluster) {
        problems.push(Diagnostic::error("--cluster", e));
    }
    if let Err(e) = check_region(region) {
        problems.push(Diagnostic::error("--region", e));
    }
    if !problems.is_empty() {
        return Err(InputErrors(problems));
    }
    // create_new: fails if the file appeared in the meantime, so nothing is ever clobbered.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
                "already exists; not overwriting it (remove it or pass -f with another path)"
                    .to_string()
            } else {
                format!("cannot create: {e}")
            };
            Diagnostic::error(path, why)
        })?;
    file.write_all(starter(cluster, region).as_bytes())
        .map_err(|e| Diagnostic::error(path, format!("cannot write: {e}")))?;
    Ok(Initialized {
        file: path.to_path_buf(),
    })
}
