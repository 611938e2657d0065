//! `controller.install: helm`: the upstream chart through the `helm` CLI, with the values the
//! AWS side determines (cluster name and endpoint, the queue *name*, the IRSA annotation).

use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::bootstrap::cluster::kube_objects::differences;
use crate::bootstrap::{Change, Context, Goal, Op, StepPlan};
use crate::cluster::HELM_RELEASE;

#[derive(Debug, Clone)]
pub enum Action {
    UpgradeInstall { values: Value },
    Uninstall,
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::Helm(a)
    }
}

/// The values jointer sets; the chart's defaults cover the rest.
pub fn values(ctx: &Context) -> Value {
    let mut sa = json!({ "name": ctx.config.controller.service_account_name() });
    if let Some(role) = ctx.irsa_role_arn() {
        sa["annotations"] = json!({ "eks.amazonaws.com/role-arn": role });
    }
    json!({
        "settings": {
            "clusterName": ctx.cluster.name,
            "clusterEndpoint": ctx.cluster.endpoint,
            "interruptionQueue": ctx.scope().queue_name.unwrap_or_default(),
        },
        "serviceAccount": sa,
        "replicas": ctx.config.controller.replicas,
    })
}

/// The chart reference: a local chart directory is taken relative to the config file.
fn chart(ctx: &Context) -> String {
    let chart = &ctx.config.controller.helm.chart;
    let local = ctx.config_dir.join(chart);
    if !chart.contains("://") && local.is_dir() {
        return local.display().to_string();
    }
    chart.clone()
}

fn helm(ctx: &Context, args: &[&str]) -> Result<std::process::Output> {
    let mut cmd = Command::new("helm");
    cmd.args(args)
        .args(["--namespace", &ctx.config.controller.namespace]);
    if let Some(context) = &ctx.kube_context {
        cmd.args(["--kube-context", context]);
    }
    match cmd.output() {
        Ok(out) => Ok(out),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "controller.install is helm, but the helm CLI is not on PATH: install Helm 3 (https://helm.sh/docs/intro/install/) or set controller.install: bundled"
        ),
        Err(e) => Err(e).context("running helm"),
    }
}

fn run_ok(ctx: &Context, args: &[&str]) -> Result<String> {
    let out = helm(ctx, args)?;
    if !out.status.success() {
        bail!(
            "helm {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The CRDs the chart carries (its `crds/`), as upstream ships them: with `install: helm`
/// these are what jointer applies, never its own, so the upstream controller gets exactly
/// the API it was built for. Helm itself installs them only once and never upgrades them.
pub fn chart_crds(ctx: &Context) -> Result<Vec<Value>> {
    let chart = chart(ctx);
    let mut args = vec!["show", "crds", chart.as_str()];
    if let Some(version) = &ctx.config.controller.helm.version {
        args.extend(["--version", version]);
    }
    let text = run_ok(ctx, &args)?;
    let mut crds = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let crd = Value::deserialize(document)
            .with_context(|| format!("the CRDs of chart {chart} are not valid YAML"))?;
        if crd["kind"] == "CustomResourceDefinition" {
            crds.push(crd);
        }
    }
    if crds.is_empty() {
        bail!(
            "chart {chart} carries no CRDs (no crds/ directory): with controller.install: helm jointer applies the chart's own; use a packaged release of the chart (e.g. oci://public.ecr.aws/karpenter/karpenter), whose crds/ holds them"
        );
    }
    Ok(crds)
}

/// The release as Helm lists it, if installed.
fn release(ctx: &Context) -> Result<Option<Value>> {
    let listed = run_ok(
        ctx,
        &[
            "list",
            "--filter",
            &format!("^{HELM_RELEASE}$"),
            "--all",
            "-o",
            "json",
        ],
    )?;
    let releases: Vec<Value> = serde_json::from_str(&listed).context("helm list output")?;
    Ok(releases.into_iter().next())
}

/// The release as Helm lists it and, when it is installed and the goal is to converge, the
/// values it was installed with.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub release: Option<Value>,
    pub values: Value,
}

fn observe(ctx: &Context, goal: Goal) -> Result<Observed> {
    let release = release(ctx)?;
    let values = if goal == Goal::Converge && release.is_some() {
        serde_json::from_str(&run_ok(
            ctx,
            &["get", "values", HELM_RELEASE, "-o", "json"],
        )?)
        .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    Ok(Observed { release, values })
}

/// What the config wants of the release: its values, the chart version it pins and how the
/// chart reads in a plan.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub resource: String,
    pub values: Value,
    pub version: Option<String>,
    pub chart: String,
}

pub async fn plan(ctx: &Context, goal: Goal, plan: &mut StepPlan) -> Result<()> {
    let wanted = Wanted {
        resource: format!(
            "helm release {}/{HELM_RELEASE}",
            ctx.config.controller.namespace
        ),
        values: values(ctx),
        version: ctx.config.controller.helm.version.clone(),
        chart: chart_detail(ctx),
    };
    let observed = observe(ctx, goal)?;
    plan.changes.extend(diff(&wanted, &observed, goal));
    Ok(())
}

/// The pure diff: install, upgrade (values, a failed status or another chart version), or
/// uninstall.
pub fn diff(wanted: &Wanted, observed: &Observed, goal: Goal) -> Option<Change> {
    let resource = &wanted.resource;
    let upgrade = || Action::UpgradeInstall {
        values: wanted.values.clone(),
    };
    match (goal, &observed.release) {
        (Goal::Converge, None) => {
            Some(Change::new(Op::Create, resource, upgrade()).detail(wanted.chart.clone()))
        }
        (Goal::Converge, Some(release)) => {
            let mut why = differences(&observed.values, &wanted.values);
            let status = release["status"].as_str().unwrap_or("");
            if status != "deployed" {
                why.push(format!("status: {status} → deployed"));
            }
            if let Some(version) = &wanted.version {
                let chart = release["chart"].as_str().unwrap_or("");
                if !chart.ends_with(&format!("-{version}")) {
                    why.push(format!("chart: {chart} → version {version}"));
                }
            }
            (!why.is_empty()).then(|| {
                Change::new(Op::Update, resource, upgrade())
                    .field("values")
                    .detail(why.join("; "))
            })
        }
        (Goal::Remove, Some(_)) => Some(Change::new(Op::Delete, resource, Action::Uninstall)),
        (Goal::Remove, None) => None,
    }
}

fn chart_detail(ctx: &Context) -> String {
    match &ctx.config.controller.helm.version {
        Some(v) => format!("{} {v}", chart(ctx)),
        None => chart(ctx),
    }
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    match action {
        Action::UpgradeInstall { values } => {
            // Removed when dropped, whatever helm did.
            let file = values_file(values)?;
            let chart = chart(ctx);
            let path = file.path().display().to_string();
            // The CRDs step applied the chart's CRDs already, and keeps them upgraded.
            let mut args = vec![
                "upgrade",
                "--install",
                "--skip-crds",
                HELM_RELEASE,
                &chart,
                "--values",
                &path,
            ];
            if let Some(version) = &ctx.config.controller.helm.version {
                args.extend(["--version", version]);
            }
            run_ok(ctx, &args)?;
        }
        Action::Uninstall => {
            run_ok(ctx, &["uninstall", HELM_RELEASE, "--wait"])?;
        }
    }
    Ok(())
}

fn values_file(values: &Value) -> Result<tempfile::NamedTempFile> {
    let mut file = tempfile::Builder::new()
        .prefix("jointer-helm-values-")
        .suffix(".json")
        .tempfile()
        .context("creating a temporary values file")?;
    std::io::Write::write_all(&mut file, serde_json::to_string_pretty(values)?.as_bytes())
        .context("writing the helm values file")?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted() -> Wanted {
        Wanted {
            resource: "helm release kube-system/karpenter".into(),
            values: json!({"settings": {"clusterName": "demo"}, "replicas": 2}),
            version: Some("1.6.0".into()),
            chart: "oci://public.ecr.aws/karpenter/karpenter 1.6.0".into(),
        }
    }

    fn installed(status: &str, chart: &str, values: Value) -> Observed {
        Observed {
            release: Some(json!({"name": "karpenter", "status": status, "chart": chart})),
            values,
        }
    }

    fn line(change: Option<Change>) -> Option<String> {
        change.map(|c| c.to_string())
    }

    #[test]
    fn a_deployed_release_with_the_wanted_values_and_version_is_in_sync() {
        let w = wanted();
        let world = installed("deployed", "karpenter-1.6.0", w.values.clone());
        assert!(diff(&w, &world, Goal::Converge).is_none());
    }

    #[test]
    fn a_missing_release_is_installed() {
        assert_eq!(
            line(diff(&wanted(), &Observed::default(), Goal::Converge)).as_deref(),
            Some("+ helm release kube-system/karpenter  (oci://public.ecr.aws/karpenter/karpenter 1.6.0)")
        );
    }

    #[test]
    fn changed_values_a_failed_status_or_another_version_upgrade_it() {
        let w = wanted();
        let world = installed(
            "failed",
            "karpenter-1.5.0",
            json!({"settings": {"clusterName": "demo"}, "replicas": 1}),
        );
        assert_eq!(
            line(diff(&w, &world, Goal::Converge)).as_deref(),
            Some("~ helm release kube-system/karpenter  values: replicas: 1 → 2; status: failed → deployed; chart: karpenter-1.5.0 → version 1.6.0")
        );
    }

    #[test]
    fn teardown_uninstalls_an_installed_release() {
        let w = wanted();
        let world = installed("deployed", "karpenter-1.6.0", Value::Null);
        assert_eq!(
            line(diff(&w, &world, Goal::Remove)).as_deref(),
            Some("- helm release kube-system/karpenter")
        );
        assert!(diff(&w, &Observed::default(), Goal::Remove).is_none());
    }
}
