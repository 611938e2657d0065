//! Placing a pod on an existing node or a NodeClaim already in flight: resources, taints,
//! labels, topology and host ports, never a new purchase.

use super::{Attempt, Solver};
use crate::api::labels;
use crate::core::scheduling::pod::untolerated;
use crate::core::scheduling::problem::Rejection;
use crate::core::scheduling::topology::Placement;

pub(super) fn ports_conflict(
    used: &[(String, String, i32)],
    wanted: &[(String, String, i32)],
) -> Option<i32> {
    wanted.iter().find_map(|(proto, ip, port)| {
        used.iter()
            .any(|(p, i, n)| {
                p == proto
                    && n == port
                    && (i == ip
                        || i.is_empty()
                        || ip.is_empty()
                        || i == "0.0.0.0"
                        || ip == "0.0.0.0")
            })
            .then_some(*port)
    })
}

impl Solver<'_> {
    pub(super) fn try_existing(
        &self,
        e: usize,
        p: usize,
        attempt: &Attempt,
    ) -> Result<Placement, Rejection> {
        let existing = &self.existing[e];
        let pod = &self.problem.pods[p];
        if !pod.requests.fits_in(&existing.free) {
            return Err(Rejection::NoInstanceTypeFits {
                closest: None,
                shortfalls: Vec::new(),
            });
        }
        if let Some(t) = untolerated(&existing.node.taints, &pod.tolerations) {
            return Err(Rejection::Taint(t.key.clone()));
        }
        if let Some(port) = ports_conflict(&existing.ports, &pod.host_ports) {
            return Err(Rejection::HostPort(port));
        }
        if let Some(req) = &attempt.requirements {
            if let Some((key, r)) = req.unsatisfied_on(existing.requirements) {
                return Err(Rejection::MissingLabel {
                    key: key.to_string(),
                    pod: r.to_string(),
                });
            }
        }
        if self.topology.is_free(p) {
            return Ok(Vec::new());
        }
        let name = existing.node.name.clone();
        let labels = &existing.node.labels;
        let domains = |key: &str| -> Option<Vec<String>> {
            if key == labels::HOSTNAME {
                return Some(vec![name.clone()]);
            }
            labels.get(key).map(|v| vec![v.clone()])
        };
        self.place(p, attempt, &domains)
    }
}
