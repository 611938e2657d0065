//! A planned node as a NodeClaim object (pure).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::labels;
use crate::api::nodeclaim::{NodeClaim, NodeClaimSpec, ResourceRequirements};
use crate::api::{NodePool, Quantity};
use crate::core::disruption::drift;
use crate::core::scheduling::{NodeClaimPlan, Requirement, Resources};

/// The API allows at most this many values per requirement.
const MAX_VALUES: usize = 100;

/// Keys a NodeClaim's requirements may not carry (the API refuses them): labels Karpenter
/// sets itself, and the hostname the solver used only to tell planned nodes apart.
fn restricted(key: &str) -> bool {
    key == labels::HOSTNAME
        || (key != labels::CAPACITY_TYPE
            && key
                .split_once('/')
                .is_some_and(|(p, _)| p == "karpenter.sh" || p.ends_with(".karpenter.sh")))
}

pub fn quantities(r: &Resources) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    let mut put = |name: &str, v: i64| {
        if v > 0 {
            let q = if name == "cpu" {
                Quantity::from_millis(i128::from(v))
            } else {
                Quantity::from_units(i128::from(v))
            };
            out.insert(name.to_string(), q);
        }
    };
    put("cpu", r.cpu);
    put("memory", r.memory);
    put("pods", r.pods);
    put("ephemeral-storage", r.ephemeral_storage);
    put("nvidia.com/gpu", r.nvidia_gpu);
    put("amd.com/gpu", r.amd_gpu);
    put("aws.amazon.com/neuron", r.neuron);
    out
}

/// The capacity of the launched NodeClaims among `claims` (the ones still launching add none).
pub fn launched_capacity<'a>(claims: impl IntoIterator<Item = &'a NodeClaim>) -> Resources {
    claims.into_iter().fold(Resources::ZERO, |acc, c| {
        acc + c
            .status
            .as_ref()
            .map(|s| Resources::from_quantities(&s.capacity).0)
            .unwrap_or(Resources::ZERO)
    })
}

/// The NodeClaim for `plan`, owned by its NodePool (deleting the pool deletes its claims).
pub fn from_plan(plan: &NodeClaimPlan, pool: &NodePool, class: Option<&EC2NodeClass>) -> NodeClaim {
    let template = &pool.spec.template;
    let mut requirements = plan.requirements.clone();
    // The instance types that fit every pod, cheapest first, as far as the API allows.
    requirements.add(
        labels::INSTANCE_TYPE,
        Requirement::any_of(
            plan.instance_types
                .iter()
                .take(MAX_VALUES)
                .map(|t| t.name.clone()),
        ),
    );
    let mut api_requirements = Vec::new();
    for (key, req) in requirements.iter() {
        if restricted(key) {
            continue;
        }
        let mut entries = req.to_api(key);
        for e in &mut entries {
            e.values.truncate(MAX_VALUES);
        }
        api_requirements.extend(entries);
    }
    let mut node_labels = template.metadata.labels.clone();
    node_labels.insert(labels::NODEPOOL.into(), pool.name_any());
    // What the node was made from, to tell later whether it drifted.
    let mut annotations = template.metadata.annotations.clone();
    annotations.insert(labels::NODEPOOL_HASH.into(), drift::pool_hash(pool));
    if let Some(class) = class {
        annotations.insert(labels::NODECLASS_HASH.into(), drift::class_hash(class));
    }
    if plan.min_values_relaxed {
        annotations.insert(labels::MIN_VALUES_RELAXED.into(), "true".into());
    }
    let owner = OwnerReference {
        api_version: NodePool::api_version(&()).to_string(),
        kind: NodePool::kind(&()).to_string(),
        name: pool.name_any(),
        uid: pool.uid().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    };
    NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", pool.name_any())),
            labels: Some(node_labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: NodeClaimSpec {
            taints: template.spec.taints.clone(),
            startup_taints: template.spec.startup_taints.clone(),
            requirements: api_requirements,
            resources: ResourceRequirements {
                requests: quantities(&plan.requests),
            },
            node_class_ref: template.spec.node_class_ref.clone(),
            expire_after: template.spec.expire_after,
            termination_grace_period: template.spec.termination_grace_period,
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_keys_stay_out_of_the_requirements() {
        assert!(restricted("karpenter.sh/nodepool"));
        assert!(restricted("kubernetes.io/hostname"));
        assert!(!restricted("karpenter.sh/capacity-type"));
        assert!(!restricted("karpenter.k8s.aws/instance-family"));
        assert!(!restricted("topology.kubernetes.io/zone"));
    }

    #[test]
    fn requests_become_quantities() {
        let q = quantities(&Resources {
            pods: 3,
            ..Resources::cpu_memory(1500, 2 << 30)
        });
        assert_eq!(q["cpu"].millis(), 1500);
        assert_eq!(q["memory"].units_ceil(), 2 << 30);
        assert_eq!(q["pods"].units_ceil(), 3);
        assert!(!q.contains_key("nvidia.com/gpu"));
    }
}
