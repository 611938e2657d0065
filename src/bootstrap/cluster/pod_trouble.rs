//! Why a Deployment's pods do not start, read from their status the way `kubectl describe`
//! shows it: an image that cannot be pulled, a container that keeps crashing, a pod the
//! scheduler cannot place. `apply --wait` stops on these at once instead of waiting out its
//! timeout (pure: the caller lists the pods and fetches logs).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// Waiting reasons the kubelet gives for an image it cannot get.
const IMAGE_REASONS: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// Waiting reasons for a container that cannot be created from its spec.
const CONFIG_REASONS: [&str; 2] = ["CreateContainerConfigError", "CreateContainerError"];

/// How long a pod may stay unschedulable before the wait gives up on it: a node being added
/// (a managed node group scaling) gets that long.
pub const UNSCHEDULABLE_GRACE_SECS: i64 = 30;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trouble {
    /// The image cannot be pulled (or is invalid).
    Image {
        pod: String,
        container: String,
        image: String,
        reason: String,
        message: String,
    },
    /// The container cannot be created (a missing Secret or ConfigMap, say).
    Config {
        pod: String,
        container: String,
        reason: String,
        message: String,
    },
    /// The container keeps exiting; its last log lines are worth showing.
    Crashing {
        pod: String,
        container: String,
        restarts: i32,
        message: String,
    },
    Unschedulable {
        pod: String,
        message: String,
    },
}

impl std::fmt::Display for Trouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trouble::Image {
                pod,
                container,
                image,
                reason,
                message,
            } => write!(
                f,
                "pod {pod} cannot pull image {image} for container {container}: {reason}: {message}"
            ),
            Trouble::Config {
                pod,
                container,
                reason,
                message,
            } => write!(f, "pod {pod} container {container}: {reason}: {message}"),
            Trouble::Crashing {
                pod,
                container,
                restarts,
                message,
            } => write!(
                f,
                "pod {pod} container {container} keeps crashing (CrashLoopBackOff, {restarts} restarts): {message}"
            ),
            Trouble::Unschedulable { pod, message } => write!(
                f,
                "pod {pod} cannot be scheduled for over {UNSCHEDULABLE_GRACE_SECS} s: {message}"
            ),
        }
    }
}

/// The first trouble any of `pods` (not being deleted) shows at `now`.
pub fn trouble(pods: &[Pod], now: Timestamp) -> Option<Trouble> {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .find_map(|p| of_pod(p, now))
}

fn of_pod(pod: &Pod, now: Timestamp) -> Option<Trouble> {
    let name = pod.name_any();
    let status = pod.status.as_ref()?;
    let images: Vec<(String, String)> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect();
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for cs in statuses {
        let Some(waiting) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = waiting.reason.clone().unwrap_or_default();
        let message = waiting
            .message
            .clone()
            .unwrap_or_else(|| "no message".into());
        if IMAGE_REASONS.contains(&reason.as_str()) {
            let image = images
                .iter()
                .find(|(c, _)| *c == cs.name)
                .map(|(_, i)| i.clone())
                .unwrap_or_else(|| cs.image.clone());
            return Some(Trouble::Image {
                pod: name,
                container: cs.name.clone(),
                image,
                reason,
                message,
            });
        }
        if CONFIG_REASONS.contains(&reason.as_str()) {
            return Some(Trouble::Config {
                pod: name,
                container: cs.name.clone(),
                reason,
                message,
            });
        }
        if reason == "CrashLoopBackOff" {
            let last = cs
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| {
                    format!(
                        "last exit code {}{}",
                        t.exit_code,
                        t.reason
                            .as_ref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    )
                })
                .unwrap_or(message);
            return Some(Trouble::Crashing {
                pod: name,
                container: cs.name.clone(),
                restarts: cs.restart_count,
                message: last,
            });
        }
    }
    let scheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled")?;
    let since = scheduled.last_transition_time.as_ref().map(|t| t.0);
    let long_enough =
        since.is_some_and(|t| now.duration_since(t).as_secs() >= UNSCHEDULABLE_GRACE_SECS);
    (scheduled.status == "False"
        && scheduled.reason.as_deref() == Some("Unschedulable")
        && long_enough)
        .then(|| Trouble::Unschedulable {
            pod: name,
            message: scheduled
                .message
                .clone()
                .unwrap_or_else(|| "no reason given".into()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "jointer-controller-abc"},
            "spec": {"containers": [{"name": "controller", "image": "r/jc@sha256:1"}]},
            "status": status,
        }))
        .expect("pod")
    }

    fn now() -> Timestamp {
        "2026-12-02T10:00:00Z".parse().expect("time")
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_named_with_the_kubelets_reason() {
        let p = pod(
            json!({"containerStatuses": [{"name": "controller", "image": "r/jc@sha256:1",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}),
        );
        let t = trouble(&[p], now()).expect("trouble");
        assert_eq!(
            t.to_string(),
            "pod jointer-controller-abc cannot pull image r/jc@sha256:1 for container controller: ImagePullBackOff: Back-off pulling image"
        );
    }

    #[test]
    fn a_crash_loop_says_how_it_last_ended() {
        let p = pod(
            json!({"containerStatuses": [{"name": "controller", "image": "x",
            "imageID": "", "ready": false, "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
            "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}),
        );
        assert_eq!(
            trouble(&[p], now()),
            Some(Trouble::Crashing {
                pod: "jointer-controller-abc".into(),
                container: "controller".into(),
                restarts: 4,
                message: "last exit code 2 (Error)".into()
            })
        );
    }

    #[test]
    fn unschedulable_counts_only_after_the_grace() {
        let at = |t: &str| {
            pod(
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": t,
                "message": "0/3 nodes are available: 3 Insufficient cpu."}]}),
            )
        };
        assert_eq!(trouble(&[at("2026-12-02T09:59:50Z")], now()), None);
        let t = trouble(&[at("2026-12-02T09:59:00Z")], now()).expect("trouble");
        assert!(t.to_string().contains("3 Insufficient cpu"), "{t}");
    }

    #[test]
    fn running_and_starting_pods_are_no_trouble() {
        let running = pod(
            json!({"phase": "Running", "containerStatuses": [{"name": "controller",
            "image": "x", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]}),
        );
        let creating = pod(
            json!({"containerStatuses": [{"name": "controller", "image": "x",
            "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(trouble(&[running, creating], now()), None);
    }
}
