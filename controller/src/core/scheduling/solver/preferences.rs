//! Preference relaxation: a pod first tries with every preference (preferred node affinity,
//! preferred pod affinity and anti-affinity, ScheduleAnyway spreads) as if required, then with
//! them dropped one at a time, as kube-scheduler and upstream Karpenter do. A pod that a spread
//! counts tries each level first without unsettling a placed spread pod (see
//! [`ActiveTerms::order_safe`]).

use super::{Attempt, Solver};
use crate::core::scheduling::pod::SchedPod;
use crate::core::scheduling::problem::PreferencePolicy;
use crate::core::scheduling::requirements::Requirements;
use crate::core::scheduling::topology::ActiveTerms;

impl Solver<'_> {
    /// The attempts for a pod, strictest first: every preference as if required; then
    /// preferred pod (anti-)affinity dropped; then preferred node terms dropped one by one
    /// (weakest first); then ScheduleAnyway spreads ignored; then each further required
    /// node-affinity term (OR) without preferences. With `order_safe_first`, each of these is
    /// tried order-safe before as it is.
    pub(super) fn attempts(
        pod: &SchedPod,
        policy: PreferencePolicy,
        order_safe_first: bool,
    ) -> Vec<Attempt> {
        let terms: Vec<Option<&Requirements>> = if pod.node_terms.is_empty() {
            vec![None]
        } else {
            pod.node_terms.iter().map(Some).collect()
        };
        let anyway = pod.spreads.iter().any(|s| {
            s.when_unsatisfiable == crate::core::scheduling::pod::Unsatisfiable::ScheduleAnyway
        });
        let pref_affinity =
            !(pod.preferred_affinity.is_empty() && pod.preferred_anti_affinity.is_empty());
        let attempt = |term: Option<&Requirements>,
                       kept: usize,
                       preferred_affinity: bool,
                       schedule_anyway_spreads: bool| {
            let mut r = term.cloned().unwrap_or_default();
            for p in &pod.preferred_node[..kept] {
                r.add_all(p);
            }
            Attempt {
                requirements: (!r.is_empty()).then_some(r),
                active: ActiveTerms {
                    preferred_affinity,
                    schedule_anyway_spreads,
                    order_safe: false,
                },
                rules: None,
            }
        };
        let mut out = Vec::new();
        for (i, term) in terms.into_iter().enumerate() {
            // PREFERENCE_POLICY=Ignore: the required terms alone, never a preference.
            if i > 0 || policy == PreferencePolicy::Ignore {
                out.push(attempt(term, 0, false, false));
                continue;
            }
            let all = pod.preferred_node.len();
            out.push(attempt(term, all, pref_affinity, anyway));
            if pref_affinity {
                out.push(attempt(term, all, false, anyway));
            }
            for kept in (0..all).rev() {
                out.push(attempt(term, kept, false, anyway));
            }
            if anyway {
                out.push(attempt(term, 0, false, false));
            }
        }
        if !order_safe_first {
            return out;
        }
        out.into_iter()
            .flat_map(|a| {
                let mut safe = a.clone();
                safe.active.order_safe = true;
                [safe, a]
            })
            .collect()
    }
}
