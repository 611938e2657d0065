//! Placing a pod on an existing node or a NodeClaim already in flight: resources, taints,
//! labels, topology and host ports, never a new purchase.

use super::{Attempt, Solver};
use crate::api::labels;
use crate::core::scheduling::pod::untolerated;
use crate::core::scheduling::problem::{PodOrder, Rejection};
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
    /// The existing node (from the `from`th on) the pod goes to under the policies' order,
    /// with where it lands in each topology domain; and how many nodes from `from` on refuse
    /// it for good, one after another (see [`Rejection::is_permanent`]).
    pub(super) fn find_existing(
        &self,
        p: usize,
        attempt: &Attempt,
        from: usize,
    ) -> (Option<(usize, Placement)>, usize) {
        let mut refusing = 0;
        let mut best: Option<(f64, usize, Placement)> = None;
        for e in from..self.existing.len() {
            match self.try_existing(e, p, attempt) {
                Ok(placement) => {
                    if self.policies.order == PodOrder::Packing {
                        return (Some((e, placement)), refusing);
                    }
                    let room = self.room_left(e);
                    if best.as_ref().is_none_or(|(most, _, _)| room > *most) {
                        best = Some((room, e, placement));
                    }
                }
                Err(r) if r.is_permanent() && e == from + refusing => refusing += 1,
                Err(_) => {}
            }
        }
        (best.map(|(_, e, placement)| (e, placement)), refusing)
    }

    /// kube-scheduler's `LeastAllocated` score of a node, before the pod: the share of its
    /// CPU and memory still free, averaged.
    fn room_left(&self, e: usize) -> f64 {
        let existing = &self.existing[e];
        let share = |free: i64, of: i64| if of > 0 { free as f64 / of as f64 } else { 0.0 };
        let (free, of) = (existing.free, existing.node.allocatable);
        (share(free.cpu, of.cpu) + share(free.memory, of.memory)) / 2.0
    }

    pub(super) fn bind_existing(&mut self, e: usize, p: usize, placement: &Placement) {
        let pod = &self.problem.pods[p];
        let existing = &mut self.existing[e];
        existing.free = existing.free - pod.requests;
        existing.pods.push(p);
        existing.ports.extend(pod.host_ports.iter().cloned());
        self.placed.push(p);
        self.topology.record(p, placement);
    }

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
