//! How the controller's own AWS resources are found, for the controller (which
//! garbage-collects them) and the CLI (whose teardown sweeps them): instances tagged
//! `kubernetes.io/cluster/<cluster>=owned` with a `karpenter.sh/nodepool` tag, and instance
//! profiles under `/karpenter/<region>/<cluster>/`. The tag names are `api::labels`'.

use aws_sdk_ec2::types::Filter;

use crate::api::labels;

/// DescribeInstances filters for the cluster's NodePool instances in the given states.
pub fn owned_instance_filters(cluster: &str, states: &[&str]) -> Vec<Filter> {
    vec![
        Filter::builder()
            .name(format!("tag:{}", labels::cluster_tag(cluster)))
            .values("owned")
            .build(),
        Filter::builder()
            .name("tag-key")
            .values(labels::NODEPOOL)
            .build(),
        Filter::builder()
            .name("instance-state-name")
            .set_values(Some(states.iter().map(|s| s.to_string()).collect()))
            .build(),
    ]
}

/// The IAM path every instance profile of the cluster lives under.
pub fn profile_path_prefix(region: &str, cluster: &str) -> String {
    format!("/karpenter/{region}/{cluster}/")
}
