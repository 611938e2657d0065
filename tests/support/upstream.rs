//! Upstream Karpenter's controller (built by tests/env/build.sh from Go modules) as a local
//! process, with the settings its chart gave the Deployment `jointer apply` installed: the
//! peer jointer is measured against, on the same test world.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;

use super::testenv;

pub struct UpstreamController {
    child: Child,
    pub log: PathBuf,
}

impl UpstreamController {
    /// Starts the controller with the environment of the chart's Deployment `namespace/name`
    /// (cluster name and endpoint, queue, batching, feature gates, …), its probes on
    /// `port_base` and `port_base + 1`. Out of the cluster it elects no leader. Its AWS calls
    /// are made as the controller role, through IRSA or Pod Identity as EKS would give them to
    /// the Deployment's service account in `cluster`, and evaluated against the role's policies.
    pub async fn start(
        client: &kube::Client,
        cluster: &str,
        namespace: &str,
        name: &str,
        port_base: u16,
    ) -> UpstreamController {
        testenv::require();
        let binary = std::env::var("JOINTER_UPSTREAM_CONTROLLER")
            .expect("JOINTER_UPSTREAM_CONTROLLER (source tests/env/.run/env)");
        let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
            .get(name)
            .await
            .expect("the chart's Deployment");
        // As the chart renders it: an empty value means the setting is unset.
        let env: Vec<(String, String)> = jointer::cluster::container_env(&deployment)
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .collect();
        let service_account = deployment
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|p| p.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let aws = testenv::RoleCredentials::for_service_account(
            client,
            cluster,
            namespace,
            &service_account,
        )
        .await;
        let log = std::env::temp_dir().join(format!("{name}-{namespace}-upstream.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(binary);
        aws.apply(&mut command);
        let child = command
            .envs(env)
            .env("SYSTEM_NAMESPACE", namespace)
            .env("METRICS_PORT", port_base.to_string())
            .env("HEALTH_PROBE_PORT", (port_base + 1).to_string())
            .env("DISABLE_LEADER_ELECTION", "true")
            .stdout(Stdio::from(file.try_clone().expect("log")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("start upstream Karpenter");
        UpstreamController { child, log }
    }

    /// The highest resident set size so far, in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        testenv::proc_status_kib(self.child.id(), "VmHWM:")
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log lines at level ERROR.
    pub fn errors(&self) -> Vec<String> {
        self.logs()
            .lines()
            .filter(|l| l.contains("\"level\":\"ERROR\""))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for UpstreamController {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
