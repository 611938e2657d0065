//! Expiration (pure): a node older than its NodeClaim's `expireAfter` goes, first of all
//! methods, and neither consolidation settings, do-not-disrupt nor budgets hold it back.

use kube::ResourceExt;

use super::candidates::Candidate;
use super::{Command, Method};
use crate::api::duration::NillableDuration;
use crate::core::pods::since;
use k8s_openapi::jiff::Timestamp;

/// The first expired node, as a command.
pub fn command(live: &[Candidate], now: Timestamp) -> Option<Command> {
    let expired = live.iter().find(|c| {
        let claim = c.claim;
        match (
            claim.spec.expire_after,
            claim.metadata.creation_timestamp.as_ref(),
        ) {
            (NillableDuration::After(d), Some(created)) => since(now, created.0) >= d,
            _ => false,
        }
    })?;
    Some(Command {
        method: Method::Expired,
        candidates: vec![expired.claim.name_any()],
        replacements: Vec::new(),
        saving: 0.0,
        drain_bound: None,
        why: None,
    })
}
