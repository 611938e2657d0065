//! Emptiness (pure): every node without pods to move goes at once, as many per pool as its
//! `Empty` budgets allow — except those whose room a CapacityBuffer's headroom needs (an empty
//! node kept warm on purpose is not waste).

use std::collections::{BTreeSet, HashMap};

use kube::ResourceExt;

use super::candidates::{Candidate, Found};
use super::price::claim_price;
use super::simulation::reschedule;
use super::{Budgets, Command, Inputs, Method};
use crate::api::nodepool::DisruptionReason;
use crate::core::buffer;
use crate::core::scheduling::Plan;

pub fn command(inputs: &Inputs, found: &mut Found, budgets: &Budgets) -> Option<Command> {
    let mut empty = Vec::new();
    let mut used: HashMap<String, usize> = HashMap::new();
    let mut kept = Vec::new();
    let buffered = !inputs.snapshot.buffers.buffers.is_empty();
    let mut going: Vec<&Candidate> = Vec::new();
    for c in found.consolidatable.iter().filter(|c| c.pods.is_empty()) {
        let pool = c.pool.name_any();
        let n = used.entry(pool.clone()).or_default();
        if *n >= budgets.allowed(c.pool, DisruptionReason::Empty) {
            kept.push((
                c.claim.name_any(),
                format!(
                    "empty, but NodePool {pool}'s disruption budget for Empty allows no more now"
                ),
            ));
            continue;
        }
        if buffered {
            // The headroom must still fit the rest of the cluster without this node (and
            // those already chosen), with no node launched for it.
            going.push(c);
            let why = match reschedule(inputs, &going) {
                Ok(plan) if plan.nodeclaims.is_empty() => None,
                Ok(plan) => Some(relaunched(&plan)),
                Err(why) => Some(why),
            };
            if let Some(why) = why {
                going.pop();
                kept.push((c.claim.name_any(), format!("empty, but {why}")));
                continue;
            }
        }
        *n += 1;
        empty.push(c.claim);
    }
    found.kept.extend(kept);
    if empty.is_empty() {
        return None;
    }
    Some(Command {
        method: Method::Empty,
        saving: empty
            .iter()
            .filter_map(|c| claim_price(c, inputs.types_of_pool))
            .sum(),
        candidates: empty.iter().map(|c| c.name_any()).collect(),
        replacements: Vec::new(),
        drain_bound: None,
        why: None,
    })
}

/// The buffers whose headroom a plan has to launch again.
fn relaunched(plan: &Plan) -> String {
    let buffers: BTreeSet<String> = plan
        .nodeclaims
        .iter()
        .flat_map(|n| &n.pods)
        .filter(|k| buffer::is_virtual(k))
        .map(|k| format!("CapacityBuffer {}/{}", k.namespace, buffer::buffer_name(k)))
        .collect();
    let names: Vec<String> = buffers.into_iter().collect();
    format!(
        "it holds the headroom of {}, which would have to be launched again",
        names.join(", ")
    )
}
