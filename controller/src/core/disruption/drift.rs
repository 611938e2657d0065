//! Drift (pure): a node no longer matches what its NodePool or EC2NodeClass now asks for.
//! NodeClaims carry hashes of the pool's template and the class's spec from when they were
//! made (annotations, as upstream); a different hash now, or an AMI the class no longer selects,
//! makes the node `Drifted`, and it is replaced within the pool's `Drifted` budgets.

use kube::ResourceExt;
use serde_json::Value;

use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::labels::{
    LAUNCHED_SECURITY_GROUPS as SECURITY_GROUPS, LAUNCHED_SUBNET as SUBNET, NODECLASS_HASH,
    NODEPOOL_HASH,
};
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::DisruptionReason;
use crate::api::NodePool;
use crate::core::ami_family::image_fits;
use crate::core::scheduling::Requirements;

use super::candidates::Found;
use super::simulation::reschedule;
use super::{Budgets, Command, Inputs, Method};

fn fnv(v: &Value) -> String {
    let text = serde_json::to_string(v).unwrap_or_default();
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{h:016x}")
}

/// The pool's template, without its requirements (a node that still satisfies changed
/// requirements need not go) and without the fields that only govern disruption.
pub fn pool_hash(pool: &NodePool) -> String {
    let mut t = serde_json::to_value(&pool.spec.template).unwrap_or_default();
    // Empty metadata is no longer written out; hash it as before so existing nodes keep
    // their hash (a changed hash would drift every node of the pool).
    if let Some(template) = t.as_object_mut() {
        template
            .entry("metadata")
            .or_insert_with(|| serde_json::json!({}));
    }
    if let Some(spec) = t.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("requirements");
        spec.remove("expireAfter");
        spec.remove("terminationGracePeriod");
    }
    fnv(&t)
}

/// The class's spec without its selector terms: what they select is checked on its own (the
/// AMI), so re-resolving the same subnets or images is not drift.
pub fn class_hash(class: &EC2NodeClass) -> String {
    let mut s = serde_json::to_value(&class.spec).unwrap_or_default();
    if let Some(spec) = s.as_object_mut() {
        spec.retain(|k, _| !k.ends_with("SelectorTerms"));
    }
    fnv(&s)
}

/// Why the node of `claim` has drifted, if it has.
pub fn drifted(claim: &NodeClaim, pool: &NodePool, class: Option<&EC2NodeClass>) -> Option<String> {
    let annotations = claim.annotations();
    if annotations
        .get(NODEPOOL_HASH)
        .is_some_and(|h| *h != pool_hash(pool))
    {
        return Some(format!("NodePool {}'s template changed", pool.name_any()));
    }
    let class = class?;
    if annotations
        .get(NODECLASS_HASH)
        .is_some_and(|h| *h != class_hash(class))
    {
        return Some(format!("EC2NodeClass {} changed", class.name_any()));
    }
    let status = class.status.clone().unwrap_or_default();
    // Only against a resolved class: a class that resolves nothing is NotReady, not drift.
    if let Some(subnet) = annotations.get(SUBNET) {
        if !status.subnets.is_empty() && !status.subnets.iter().any(|s| &s.id == subnet) {
            return Some(format!(
                "its subnet {subnet} is no longer selected by EC2NodeClass {}",
                class.name_any()
            ));
        }
    }
    if let Some(groups) = annotations.get(SECURITY_GROUPS) {
        let mut now: Vec<&str> = status
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect();
        now.sort();
        let now = now.join(",");
        if !now.is_empty() && *groups != now {
            return Some(format!(
                "its security groups {groups} are no longer the ones EC2NodeClass {} selects ({now})",
                class.name_any()
            ));
        }
    }
    let image = claim.status.as_ref().and_then(|s| s.image_id.as_ref())?;
    let amis = status.amis.as_slice();
    if amis.is_empty() {
        return None;
    }
    if !amis.iter().any(|a| &a.id == image) {
        return Some(format!(
            "its AMI {image} is no longer selected by EC2NodeClass {}",
            class.name_any()
        ));
    }
    // As upstream: the node should run the image a launch of its instance type would boot now
    // (the first that suits it: a newer release, or its variant's image). Judged on the
    // instance type's labels the launch put on the claim; a claim without them is not judged.
    if !claim
        .labels()
        .contains_key(crate::api::labels::INSTANCE_TYPE)
    {
        return None;
    }
    let labels = Requirements::from_labels(claim.labels());
    let now = amis.iter().find(|a| image_fits(&a.requirements, &labels))?;
    (&now.id != image).then(|| {
        format!(
            "its AMI {image} is not the one EC2NodeClass {} now boots its instance type with ({})",
            class.name_any(),
            now.id
        )
    })
}

/// The drift method: one drifted node within its pool's `Drifted` budgets, whose pods go
/// where the rest of the cluster has room, with new nodes launched first for those that need one.
pub fn command(inputs: &Inputs, found: &mut Found, budgets: &Budgets) -> Option<Command> {
    for (c, why) in &found.drifted {
        let name = c.claim.name_any();
        if budgets.allowed(c.pool, DisruptionReason::Drifted) == 0 {
            found.kept.push((
                name,
                format!(
                    "drifted ({why}), but NodePool {}'s disruption budget for Drifted allows no disruption now",
                    c.pool.name_any()
                ),
            ));
            continue;
        }
        match reschedule(inputs, &[c]) {
            Ok(plan) => {
                return Some(Command {
                    method: Method::Drifted,
                    candidates: vec![name],
                    replacements: plan.nodeclaims,
                    saving: 0.0,
                    drain_bound: None,
                    why: None,
                })
            }
            Err(why_not) => found
                .kept
                .push((name, format!("drifted ({why}), but {why_not}"))),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(labels: Value, requirements: Value) -> NodePool {
        serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {"requirements": requirements,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}}}}}))
        .unwrap()
    }

    fn class(tags: Value, amis: Value) -> EC2NodeClass {
        serde_json::from_value(json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "c"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}], "role": "r", "tags": tags},
            "status": {"amis": amis}}))
        .unwrap()
    }

    fn claim(pool: &NodePool, class: &EC2NodeClass, image: &str) -> NodeClaim {
        serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "n", "annotations": {NODEPOOL_HASH: pool_hash(pool), NODECLASS_HASH: class_hash(class)}},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "c"}},
            "status": {"imageID": image}}))
        .unwrap()
    }

    #[test]
    fn template_and_class_changes_drift_requirement_and_selector_changes_do_not() {
        let p = pool(json!({"team": "a"}), json!([]));
        let c = class(json!({}), json!([{"id": "ami-1"}]));
        let n = claim(&p, &c, "ami-1");
        assert_eq!(drifted(&n, &p, Some(&c)), None);
        let wider = pool(
            json!({"team": "a"}),
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]),
        );
        assert_eq!(drifted(&n, &wider, Some(&c)), None);
        let relabeled = pool(json!({"team": "b"}), json!([]));
        assert!(drifted(&n, &relabeled, Some(&c))
            .unwrap()
            .contains("template changed"));
        let tagged = class(json!({"cost-center": "x"}), json!([{"id": "ami-1"}]));
        assert!(drifted(&n, &p, Some(&tagged))
            .unwrap()
            .contains("EC2NodeClass c changed"));
        let new_ami = class(json!({}), json!([{"id": "ami-2"}]));
        assert!(drifted(&n, &p, Some(&new_ami))
            .unwrap()
            .contains("ami-1 is no longer selected"));
    }

    #[test]
    fn a_subnet_or_security_groups_no_longer_selected_drift() {
        let p = pool(json!({}), json!([]));
        let mut c = class(json!({}), json!([{"id": "ami-1"}]));
        let status = c.status.get_or_insert_with(Default::default);
        status.subnets = serde_json::from_value(json!([{"id": "subnet-a", "zone": "z1"}])).unwrap();
        status.security_groups =
            serde_json::from_value(json!([{"id": "sg-2"}, {"id": "sg-1"}])).unwrap();
        let mut n = claim(&p, &c, "ami-1");
        n.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend([
                (SUBNET.to_string(), "subnet-a".to_string()),
                (SECURITY_GROUPS.to_string(), "sg-1,sg-2".to_string()),
            ]);
        assert_eq!(drifted(&n, &p, Some(&c)), None);
        let mut moved = c.clone();
        moved.status.as_mut().unwrap().subnets =
            serde_json::from_value(json!([{"id": "subnet-b", "zone": "z1"}])).unwrap();
        assert!(drifted(&n, &p, Some(&moved))
            .unwrap()
            .contains("subnet subnet-a is no longer selected"));
        let mut regrouped = c.clone();
        regrouped.status.as_mut().unwrap().security_groups =
            serde_json::from_value(json!([{"id": "sg-1"}])).unwrap();
        assert!(drifted(&n, &p, Some(&regrouped))
            .unwrap()
            .contains("security groups sg-1,sg-2"));
    }

    #[test]
    fn a_node_drifts_when_its_instance_type_would_now_boot_another_selected_image() {
        let p = pool(json!({}), json!([]));
        let arch = json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]});
        let standard =
            json!({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "DoesNotExist"});
        let nvidia = json!({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Exists"});
        let c = class(
            json!({}),
            json!([{"id": "ami-new", "requirements": [arch, standard]},
                   {"id": "ami-old", "requirements": [arch, standard]},
                   {"id": "ami-gpu", "requirements": [arch, nvidia]}]),
        );
        let on = |image: &str, labels: Value| {
            let mut n = claim(&p, &c, image);
            n.metadata.labels = Some(serde_json::from_value(labels).unwrap());
            drifted(&n, &p, Some(&c))
        };
        let m5 =
            json!({"node.kubernetes.io/instance-type": "m5.large", "kubernetes.io/arch": "amd64"});
        let g5 = json!({"node.kubernetes.io/instance-type": "g5.xlarge", "kubernetes.io/arch": "amd64",
                        "karpenter.k8s.aws/instance-gpu-count": "1"});
        assert_eq!(on("ami-new", m5.clone()), None);
        assert!(on("ami-old", m5.clone())
            .unwrap()
            .contains("not the one EC2NodeClass c now boots its instance type with (ami-new)"));
        assert_eq!(on("ami-gpu", g5.clone()), None);
        assert!(on("ami-new", g5).unwrap().contains("(ami-gpu)"));
        // A claim without its instance type's labels is judged by selection alone.
        assert_eq!(on("ami-old", json!({})), None);
    }
}
