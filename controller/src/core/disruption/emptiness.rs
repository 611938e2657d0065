//! Emptiness (pure): every node without pods to move goes at once, as many per pool as its
//! `Empty` budgets allow.

use std::collections::HashMap;

use kube::ResourceExt;

use super::candidates::Found;
use super::price::claim_price;
use super::{Budgets, Command, Inputs, Method};
use crate::api::nodepool::DisruptionReason;

pub fn command(inputs: &Inputs, found: &mut Found, budgets: &Budgets) -> Option<Command> {
    let mut empty = Vec::new();
    let mut used: HashMap<String, usize> = HashMap::new();
    let mut kept = Vec::new();
    for c in found.consolidatable.iter().filter(|c| c.pods.is_empty()) {
        let pool = c.pool.name_any();
        let n = used.entry(pool.clone()).or_default();
        if *n < budgets.allowed(c.pool, DisruptionReason::Empty) {
            *n += 1;
            empty.push(c.claim);
        } else {
            kept.push((
                c.claim.name_any(),
                format!(
                    "empty, but NodePool {pool}'s disruption budget for Empty allows no more now"
                ),
            ));
        }
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
    })
}
