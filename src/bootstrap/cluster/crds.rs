//! The CRDs (NodePool, NodeClaim, EC2NodeClass, NodeOverlay, CapacityBuffer), server-side
//! applied on every run: unlike `helm upgrade`, which never touches CRDs, this upgrades their
//! schemas in place, and the objects stored under them stay. With `controller.install: helm`
//! they are the chart's own, so upstream's controller runs on exactly upstream's API.

use anyhow::Result;
use serde_json::Value;

use super::kube_objects::{self, ownership_labels, with_labels, ObjectRef};
use crate::bootstrap::{Change, Context, Goal, Op, Step, StepPlan};
use crate::input::config::Install;

/// Which jointer version the applied CRDs came from (an older one is drift).
pub const VERSION_LABEL: &str = "jointer.dev/version";

/// The CRDs, labelled for this cluster and version: jointer's bundled ones, or with
/// `controller.install: helm` the chart's own.
pub fn desired(ctx: &Context) -> Result<Vec<Value>> {
    let mut labels = ownership_labels(&ctx.cluster.name);
    labels.insert(
        VERSION_LABEL.to_string(),
        env!("CARGO_PKG_VERSION").to_string(),
    );
    let crds = if ctx.config.controller.install == Install::Helm {
        ctx.chart_crds()?.to_vec()
    } else {
        jointer_controller::crds::all()
            .into_iter()
            .map(|(_, crd)| serde_json::to_value(crd))
            .collect::<Result<_, _>>()?
    };
    Ok(crds
        .into_iter()
        .map(|crd| with_labels(crd, &labels))
        .collect())
}

/// A CRD of an API group other tools install too: CapacityBuffer's
/// (`autoscaling.x-k8s.io`) comes with Cluster Autoscaler and upstream Karpenter as well. One
/// another tool installed serves the same API, so it is used as it is — neither refused nor
/// taken over — and teardown, which deletes only CRDs labelled as jointer's, leaves it.
fn is_shared(crd: &Value) -> bool {
    crd["spec"]["group"] == jointer_controller::api::AUTOSCALING_GROUP
}

pub async fn plan(ctx: &Context, goal: Goal) -> Result<StepPlan> {
    let mut plan = StepPlan::new(Step::Crds);
    let crds = desired(ctx)?;
    match goal {
        Goal::Converge => {
            for crd in crds {
                let observed = kube_objects::observe(ctx, &crd).await?;
                if is_shared(&crd) && matches!(observed, kube_objects::Observed::Foreign { .. }) {
                    continue;
                }
                plan.changes.extend(kube_objects::diff(crd, &observed)?);
            }
        }
        // Deleting a CRD deletes every object of its kind: only when asked.
        Goal::Remove if ctx.options.delete_crds => {
            for crd in &crds {
                let r = ObjectRef::of(crd)?;
                let Some(api) = kube_objects::api_for(ctx, &r).await? else {
                    continue;
                };
                if let Some(live) = kube_objects::get(&api, &r).await? {
                    if kube_objects::is_ours(&live) {
                        plan.changes.push(
                            Change::new(
                                Op::Delete,
                                r.label(),
                                kube_objects::Action::Delete { object: r },
                            )
                            .detail("--delete-crds"),
                        );
                    }
                }
            }
        }
        Goal::Remove => {}
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_capacitybuffer_crd_is_shared_with_other_tools() {
        let shared: Vec<String> = jointer_controller::crds::all()
            .into_iter()
            .filter(|(_, crd)| is_shared(&serde_json::to_value(crd).expect("CRD")))
            .map(|(file, _)| file)
            .collect();
        assert_eq!(shared, ["autoscaling.x-k8s.io_capacitybuffers.yaml"]);
    }
}
