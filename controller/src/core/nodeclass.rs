//! EC2NodeClass status conditions from what resolution found: pure, so the messages that make
//! a missing discovery tag loud are tested without AWS.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::ec2nodeclass::{AmiSelectorTerm, SecurityGroupSelectorTerm, SubnetSelectorTerm};

/// One resolution: what was found, or why nothing was.
pub type Found<T> = Result<T, String>;

fn tags_phrase(tags: &BTreeMap<String, String>) -> String {
    tags.iter()
        .map(|(k, v)| format!("tag {k}={v}"))
        .collect::<Vec<_>>()
        .join(" and ")
}

pub fn describe_subnet_terms(terms: &[SubnetSelectorTerm]) -> String {
    terms
        .iter()
        .map(|t| match (&t.id, &t.tags) {
            (Some(id), _) => format!("id {id}"),
            (None, Some(tags)) => tags_phrase(tags),
            (None, None) => "an empty term".into(),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

pub fn describe_security_group_terms(terms: &[SecurityGroupSelectorTerm]) -> String {
    terms
        .iter()
        .map(|t| match (&t.id, &t.name, &t.tags) {
            (Some(id), _, _) => format!("id {id}"),
            (None, Some(name), _) => format!("name {name}"),
            (None, None, Some(tags)) => tags_phrase(tags),
            (None, None, None) => "an empty term".into(),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

pub fn describe_ami_terms(terms: &[AmiSelectorTerm]) -> String {
    terms
        .iter()
        .map(|t| {
            if let Some(alias) = &t.alias {
                format!("alias {alias}")
            } else if let Some(id) = &t.id {
                format!("id {id}")
            } else if let Some(name) = &t.name {
                format!("name {name}")
            } else if let Some(parameter) = &t.ssm_parameter {
                format!("ssmParameter {parameter}")
            } else if let Some(tags) = &t.tags {
                tags_phrase(tags)
            } else {
                "an empty term".into()
            }
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// (type, found or why not) for each part, in the order the conditions are listed.
pub struct Verdicts {
    pub subnets: Found<()>,
    pub security_groups: Found<()>,
    pub amis: Found<()>,
    pub instance_profile: Found<()>,
    /// Fails only when AWS cannot be asked: a class whose reservations have all ended is
    /// still usable (on-demand and spot).
    pub capacity_reservations: Found<()>,
    /// The class's own settings make sense for its AMI family (its `spec.userData` parses,
    /// its kubelet fields can be passed on).
    pub validation: Found<()>,
}

fn condition(
    kind: &str,
    verdict: &Found<()>,
    reason_ok: &str,
    reason_bad: &str,
    previous: &[Condition],
    generation: Option<i64>,
) -> Condition {
    let (status, reason, message) = match verdict {
        Ok(()) => ("True", reason_ok, String::new()),
        Err(why) => ("False", reason_bad, why.clone()),
    };
    // The transition time moves only when the status does.
    let last = previous
        .iter()
        .find(|c| c.type_ == kind && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(Timestamp::now()));
    Condition {
        type_: kind.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: last,
        observed_generation: generation,
    }
}

/// The part conditions and `Ready`, which is True only when all of them are.
pub fn conditions(v: &Verdicts, previous: &[Condition], generation: Option<i64>) -> Vec<Condition> {
    let parts = [
        (
            "SubnetsReady",
            &v.subnets,
            "SubnetsFound",
            "SubnetsNotFound",
        ),
        (
            "SecurityGroupsReady",
            &v.security_groups,
            "SecurityGroupsFound",
            "SecurityGroupsNotFound",
        ),
        ("AMIsReady", &v.amis, "AMIsFound", "AMIsNotFound"),
        (
            "InstanceProfileReady",
            &v.instance_profile,
            "InstanceProfileReady",
            "InstanceProfileNotReady",
        ),
        (
            "CapacityReservationsReady",
            &v.capacity_reservations,
            "CapacityReservationsResolved",
            "CapacityReservationsNotResolved",
        ),
        (
            "ValidationSucceeded",
            &v.validation,
            "ValidationSucceeded",
            "ValidationFailed",
        ),
    ];
    let mut out: Vec<Condition> = parts
        .iter()
        .map(|(kind, verdict, ok, bad)| condition(kind, verdict, ok, bad, previous, generation))
        .collect();
    let failing: Vec<String> = out
        .iter()
        .filter(|c| c.status != "True")
        .map(|c| format!("{}=False", c.type_))
        .collect();
    let ready: Found<()> = if failing.is_empty() {
        Ok(())
    } else {
        Err(failing.join(", "))
    };
    out.push(condition(
        "Ready", &ready, "Ready", "NotReady", previous, generation,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_discovery_tag_names_the_selector() {
        let terms = vec![SubnetSelectorTerm {
            tags: Some(BTreeMap::from([(
                "karpenter.sh/discovery".to_string(),
                "demo".to_string(),
            )])),
            id: None,
        }];
        let v = Verdicts {
            subnets: Err(format!(
                "no subnet matches {}",
                describe_subnet_terms(&terms)
            )),
            security_groups: Ok(()),
            amis: Ok(()),
            instance_profile: Ok(()),
            capacity_reservations: Ok(()),
            validation: Ok(()),
        };
        let c = conditions(&v, &[], Some(1));
        assert_eq!(c[0].status, "False");
        assert_eq!(
            c[0].message,
            "no subnet matches tag karpenter.sh/discovery=demo"
        );
        let ready = c.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "False");
        assert_eq!(ready.message, "SubnetsReady=False");
        // Unchanged status keeps its transition time.
        let again = conditions(&v, &c, Some(2));
        assert_eq!(again[0].last_transition_time, c[0].last_transition_time);
    }
}
