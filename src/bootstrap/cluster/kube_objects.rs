//! Kubernetes objects the way jointer manages them: server-side apply with field manager
//! `jointer`, a server-side dry run to learn what an apply would change (so a converged run
//! writes nothing and drift is reported field by field, with the API server's own defaulting),
//! and labels that say whose an object is.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bootstrap::{Change, Context, Op};

pub const FIELD_MANAGER: &str = "jointer";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "jointer";
pub const CLUSTER_LABEL: &str = "jointer.dev/cluster";

/// Which object: enough to find it again.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn of(object: &Value) -> Result<ObjectRef> {
        let field = |path: &[&str]| {
            path.iter()
                .try_fold(object, |v, k| v.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Ok(ObjectRef {
            api_version: field(&["apiVersion"]).context("object without apiVersion")?,
            kind: field(&["kind"]).context("object without kind")?,
            namespace: field(&["metadata", "namespace"]),
            name: field(&["metadata", "name"]).context("object without metadata.name")?,
        })
    }

    /// `NodePool default`, `Deployment kube-system/jointer-controller`.
    pub fn label(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    fn gvk(&self) -> GroupVersionKind {
        let (group, version) = match self.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", self.api_version.as_str()),
        };
        GroupVersionKind::gvk(group, version, &self.kind)
    }
}

/// The API for an object's kind, or `None` when the server does not serve it (its CRD is not
/// installed yet). A kind found once is remembered for the run (one discovery request per
/// kind, not per object); one not served is asked again, since this run may install its CRD.
pub async fn api_for(ctx: &Context, r: &ObjectRef) -> Result<Option<Api<DynamicObject>>> {
    let key = format!("{}/{}", r.api_version, r.kind);
    let known = ctx.kinds.lock().ok().and_then(|k| k.get(&key).cloned());
    let resource = match known {
        Some(resource) => resource,
        None => match kube::discovery::pinned_kind(&ctx.kube, &r.gvk()).await {
            Ok((resource, _)) => {
                if let Ok(mut kinds) = ctx.kinds.lock() {
                    kinds.insert(key, resource.clone());
                }
                resource
            }
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(kube::Error::Discovery(_)) => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("discovering {}", r.api_version)),
        },
    };
    Ok(Some(api(&ctx.kube, &resource, r)))
}

fn api(client: &kube::Client, resource: &ApiResource, r: &ObjectRef) -> Api<DynamicObject> {
    match &r.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

pub async fn get(api: &Api<DynamicObject>, r: &ObjectRef) -> Result<Option<Value>> {
    let found = api
        .get_opt(&r.name)
        .await
        .with_context(|| format!("reading {}", r.label()))?;
    Ok(found.map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
}

fn apply_params(dry_run: bool) -> PatchParams {
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = dry_run;
    params
}

/// Server-side apply (forced: jointer's fields are jointer's, whoever edited them since).
pub async fn apply(api: &Api<DynamicObject>, object: &Value, dry_run: bool) -> Result<Value> {
    let r = ObjectRef::of(object)?;
    let applied = api
        .patch(&r.name, &apply_params(dry_run), &Patch::Apply(object))
        .await
        .with_context(|| {
            format!(
                "{} {}",
                if dry_run { "checking" } else { "applying" },
                r.label()
            )
        })?;
    Ok(serde_json::to_value(applied)?)
}

/// Deletes with background propagation: the object goes at once and the garbage collector
/// removes its dependents (a Deployment's ReplicaSets and pods) after it; a foreground delete
/// would keep it listed, with a finalizer, until they are gone.
pub async fn delete(api: &Api<DynamicObject>, r: &ObjectRef) -> Result<()> {
    match api.delete(&r.name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting {}", r.label())),
    }
}

/// Labels that mark an object as jointer's for `cluster`.
pub fn ownership_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY.to_string()),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ])
}

pub fn with_labels(mut object: Value, labels: &BTreeMap<String, String>) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let existing = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(map) = existing.as_object_mut() {
            for (k, v) in labels {
                map.insert(k.clone(), Value::String(v.clone()));
            }
        }
    }
    object
}

fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// Whether jointer applied it. An API server serves exactly one EKS cluster (the kubeconfig is
/// checked against the cluster's endpoint), so the cluster label is information, not a second
/// owner test: a config renamed in jointer.yaml still owns what it applied.
pub fn is_ours(object: &Value) -> bool {
    label(object, MANAGED_BY_LABEL) == Some(MANAGED_BY)
}

/// Who else manages it, for the error message.
fn manager(object: &Value) -> String {
    match label(object, MANAGED_BY_LABEL) {
        Some(m) => format!("it is labelled {MANAGED_BY_LABEL}={m}"),
        None => format!("it lacks the label {MANAGED_BY_LABEL}={MANAGED_BY}"),
    }
}

/// The fields in which `after` differs from `live`, as `path: old → new`; the bookkeeping an
/// apply always touches (managed fields, resource version, generation) is not a difference.
pub fn differences(live: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_into("", live, after, &mut out);
    out.retain(|d| {
        ![
            "metadata.managedFields",
            "metadata.resourceVersion",
            "metadata.generation",
        ]
        .iter()
        .any(|p| d.starts_with(p))
    });
    out
}

fn diff_into(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                diff_into(
                    &join(k),
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff_into(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ if a == b => {}
        _ => {
            let (a, b) = short_pair(a, b);
            out.push(format!("{path}: {a} → {b}"))
        }
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "unset".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn cut(s: &str) -> String {
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(77).collect::<String>())
    } else {
        s.to_string()
    }
}

fn short(v: &Value) -> String {
    cut(&text(v))
}

/// Two long values that share a long prefix (image references pinned by digest) are shown
/// from a little before where they differ, so the change is visible.
fn short_pair(a: &Value, b: &Value) -> (String, String) {
    let (a, b) = (text(a), text(b));
    let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    if (a.chars().count() > 80 || b.chars().count() > 80) && common > 40 {
        let from = |s: &str| format!("…{}", cut(&s.chars().skip(common - 12).collect::<String>()));
        return (from(&a), from(&b));
    }
    (cut(&a), cut(&b))
}

/// One object as the cluster holds it, against what jointer would apply.
#[derive(Debug, Clone)]
pub enum Observed {
    /// Its kind is not installed yet (its CRD is applied first).
    NoKind,
    Missing,
    /// There, and neither jointer's nor to be adopted: not looked at further.
    Foreign {
        live: Value,
    },
    /// There; `after` is the server's dry run of applying the desired object, so defaults
    /// and other managers' fields do not count as drift.
    Live {
        live: Value,
        after: Value,
    },
}

/// Reads the object `desired` names and, when jointer may change it, dry-runs the apply.
pub async fn observe(ctx: &Context, desired: &Value) -> Result<Observed> {
    let r = ObjectRef::of(desired)?;
    let Some(api) = api_for(ctx, &r).await? else {
        return Ok(Observed::NoKind);
    };
    let Some(live) = get(&api, &r).await? else {
        return Ok(Observed::Missing);
    };
    if !is_ours(&live) && !ctx.adopt() {
        return Ok(Observed::Foreign { live });
    }
    let after = apply(&api, desired, true).await?;
    Ok(Observed::Live { live, after })
}

/// The pure diff: the change (if any) that makes the cluster hold `desired`, which already
/// carries the ownership labels. An object jointer does not own stops the run (`observe`
/// only reports one as `Live` when adopting).
pub fn diff(desired: Value, observed: &Observed) -> Result<Option<Change>> {
    let resource = ObjectRef::of(&desired)?.label();
    let apply = |desired| Action::Apply {
        object: desired,
        reset: Vec::new(),
    };
    Ok(match observed {
        Observed::NoKind => Some(
            Change::new(Op::Create, resource, apply(desired))
                .detail("its kind is installed first"),
        ),
        Observed::Missing => Some(Change::new(Op::Create, resource, apply(desired))),
        Observed::Foreign { live } => bail!(
            "{resource} already exists and jointer does not manage it ({}): remove it, or re-run with --adopt to take it over",
            manager(live)
        ),
        Observed::Live { live, after } => {
            let mut diffs = differences(live, after);
            // Fields of its spec only another manager set: an apply leaves them, so they are
            // reset to what jointer renders (unset, when it renders none).
            let foreign = foreign_fields(after);
            for (path, manager) in &foreign {
                let now = in_spec(live, path).map_or("…".to_string(), short);
                diffs.push(format!(
                    "spec.{}: {now} (set by {manager}) → {}",
                    path.join("."),
                    in_spec(&desired, path).map_or("unset".to_string(), short)
                ));
            }
            if diffs.is_empty() {
                None
            } else {
                let (field, detail) = summarize(&diffs, is_ours(live));
                let action = Action::Apply {
                    object: desired,
                    reset: foreign.into_iter().map(|(path, _)| path).collect(),
                };
                Some(
                    Change::new(Op::Update, resource, action)
                        .field(field)
                        .detail(detail),
                )
            }
        }
    })
}

/// Observes and diffs one object into `changes`.
pub async fn converge(ctx: &Context, desired: Value, changes: &mut Vec<Change>) -> Result<()> {
    let observed = observe(ctx, &desired).await?;
    changes.extend(diff(desired, &observed)?);
    Ok(())
}

/// The fields (at most three named) and their `old → new` values.
fn summarize(diffs: &[String], ours: bool) -> (String, String) {
    let split: Vec<(&str, &str)> = diffs
        .iter()
        .map(|d| d.split_once(": ").unwrap_or((d.as_str(), "")))
        .collect();
    let more = |n: usize| {
        if n > 3 {
            format!(" (+{} more)", n - 3)
        } else {
            String::new()
        }
    };
    let field = split
        .iter()
        .take(3)
        .map(|(p, _)| *p)
        .collect::<Vec<_>>()
        .join(", ")
        + &more(split.len());
    let mut detail = split
        .iter()
        .take(3)
        .map(|(_, v)| *v)
        .collect::<Vec<_>>()
        .join("; ");
    if !ours {
        detail = format!("adopted (--adopt); {detail}");
    }
    (field, detail)
}

#[derive(Debug, Clone)]
pub enum Action {
    /// Server-side apply; then each `reset` path under `spec` (set by another field manager)
    /// back to the desired value, or removed.
    Apply {
        object: Value,
        reset: Vec<Vec<String>>,
    },
    Delete {
        object: ObjectRef,
    },
}

impl From<Action> for crate::bootstrap::Action {
    fn from(a: Action) -> Self {
        crate::bootstrap::Action::Kube(a)
    }
}

pub async fn execute(ctx: &Context, action: &Action) -> Result<()> {
    match action {
        Action::Apply { object, reset } => {
            let r = ObjectRef::of(object)?;
            let api = match api_for(ctx, &r).await? {
                Some(api) => api,
                None => served(ctx, &r).await?,
            };
            apply(&api, object, false).await?;
            if !reset.is_empty() {
                api.patch(
                    &r.name,
                    &PatchParams::default(),
                    &Patch::Merge(reset_patch(object, reset)),
                )
                .await
                .with_context(|| format!("resetting the fields others set on {}", r.label()))?;
            }
            if r.kind == "CustomResourceDefinition" {
                established(ctx, &r.name).await?;
            }
        }
        Action::Delete { object } => {
            if let Some(api) = api_for(ctx, object).await? {
                delete(&api, object).await?;
            }
        }
    }
    Ok(())
}

/// The paths under `spec` that a field manager other than jointer set and jointer does not
/// (per `managedFields`), with that manager. Status writes (the `status` subresource) are not
/// looked at, and neither are API-server defaults (no manager owns them). A path ends at a
/// list whose items are owned one by one: the list is reset as a whole.
pub fn foreign_fields(object: &Value) -> Vec<(Vec<String>, String)> {
    let entries = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let spec_paths = |e: &Value| {
        let mut out = Vec::new();
        if let Some(spec) = e.pointer("/fieldsV1/f:spec") {
            owned_paths(spec, &mut Vec::new(), &mut out);
        }
        out
    };
    let main = |e: &&Value| e.get("subresource").is_none_or(|s| s.as_str() == Some(""));
    let ours: std::collections::BTreeSet<Vec<String>> = entries
        .iter()
        .filter(main)
        .filter(|e| e["manager"] == FIELD_MANAGER)
        .flat_map(spec_paths)
        .collect();
    let mut foreign: Vec<(Vec<String>, String)> = Vec::new();
    for e in entries
        .iter()
        .filter(main)
        .filter(|e| e["manager"] != FIELD_MANAGER)
    {
        let manager = e["manager"].as_str().unwrap_or("another field manager");
        for path in spec_paths(e) {
            let covered = ours
                .iter()
                .any(|o| path.starts_with(o) || o.starts_with(&path));
            if !covered && !foreign.iter().any(|(p, _)| *p == path) {
                foreign.push((path, manager.to_string()));
            }
        }
    }
    foreign
}

/// The leaf field paths of a `fieldsV1` tree (`f:name` keys; a `k:`/`v:`/`i:` key marks a list
/// item, whose list is then the path).
fn owned_paths(node: &Value, path: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(map) = node.as_object() else {
        return;
    };
    let fields: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| *k != ".").collect();
    if fields.is_empty() {
        out.push(path.clone());
        return;
    }
    if fields.iter().any(|(k, _)| !k.starts_with("f:")) {
        out.push(path.clone());
        return;
    }
    for (k, child) in fields {
        path.push(k.trim_start_matches("f:").to_string());
        owned_paths(child, path, out);
        path.pop();
    }
}

/// The value at `path` under the object's `spec`.
fn in_spec<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(&object["spec"], |v, k| v.get(k))
}

/// A merge patch setting each path under `spec` to its value in `desired`, or removing it.
fn reset_patch(desired: &Value, paths: &[Vec<String>]) -> Value {
    let mut patch = serde_json::json!({"spec": {}});
    for path in paths {
        let value = in_spec(desired, path).cloned().unwrap_or(Value::Null);
        let mut at = &mut patch["spec"];
        for k in &path[..path.len().saturating_sub(1)] {
            if !at.get(k).is_some_and(Value::is_object) {
                at[k.as_str()] = serde_json::json!({});
            }
            at = &mut at[k.as_str()];
        }
        if let Some(last) = path.last() {
            at[last.as_str()] = value;
        }
    }
    patch
}

/// How long a CRD applied a moment ago may take to be Established and its kind served.
const SERVE_TIMEOUT: Duration = Duration::from_secs(60);
const SERVE_POLL: Duration = Duration::from_millis(250);

/// Waits until the API server reports the CRD `Established` (it accepts objects of its kind
/// only then; on a real cluster that takes a moment after the CRD is created).
async fn established(ctx: &Context, name: &str) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.kube.clone());
    let started = Instant::now();
    let mut said = false;
    loop {
        let crd = crds
            .get(name)
            .await
            .with_context(|| format!("reading CustomResourceDefinition {name}"))?;
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        if conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
        {
            return Ok(());
        }
        if started.elapsed() > SERVE_TIMEOUT {
            let why: Vec<String> = conditions
                .iter()
                .map(|c| {
                    format!(
                        "{}={}: {}",
                        c.type_,
                        c.status,
                        c.message.clone().unwrap_or_default()
                    )
                })
                .collect();
            bail!(
                "CustomResourceDefinition {name} is not Established after {} s ({}); re-running apply picks up from here",
                SERVE_TIMEOUT.as_secs(),
                if why.is_empty() { "no conditions yet".to_string() } else { why.join("; ") }
            );
        }
        if !said {
            ctx.progress
                .note_inline(" (waiting for it to be Established)");
            said = true;
        }
        tokio::time::sleep(SERVE_POLL).await;
    }
}

/// The API of a kind the server does not serve yet: its CRD was just applied and discovery
/// has not caught up. Asked again until it is, for a bounded time.
async fn served(ctx: &Context, r: &ObjectRef) -> Result<Api<DynamicObject>> {
    let started = Instant::now();
    let mut said = false;
    loop {
        if let Some(api) = api_for(ctx, r).await? {
            return Ok(api);
        }
        if started.elapsed() > SERVE_TIMEOUT {
            bail!(
                "{}: the API server does not serve {} {} after {} s (is its CustomResourceDefinition installed and Established?)",
                r.label(),
                r.api_version,
                r.kind,
                SERVE_TIMEOUT.as_secs()
            );
        }
        if !said {
            ctx.progress.note_inline(&format!(
                " (waiting for the API server to serve {} {})",
                r.api_version, r.kind
            ));
            said = true;
        }
        tokio::time::sleep(SERVE_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn two_long_references_differing_late_are_shown_where_they_differ() {
        let image = |d: &str| {
            json!(format!(
                "123456789012.dkr.ecr.us-east-1.amazonaws.com/jointer-controller/demo@sha256:{d}"
            ))
        };
        let (a, b) = short_pair(&image("aaaa1111"), &image("bbbb2222"));
        assert!(a.starts_with('…') && a.ends_with("sha256:aaaa1111"), "{a}");
        assert!(b.ends_with("sha256:bbbb2222"), "{b}");
        assert_eq!(short_pair(&json!(1), &json!(2)), ("1".into(), "2".into()));
    }

    #[test]
    fn fields_only_another_manager_set_under_spec_are_foreign() {
        let object = json!({"metadata": {"managedFields": [
            {"manager": "jointer", "operation": "Apply", "fieldsV1": {"f:spec": {
                "f:template": {"f:spec": {"f:requirements": {}}}, "f:limits": {"f:cpu": {}}}}},
            {"manager": "kubectl-patch", "operation": "Update", "fieldsV1": {"f:spec": {
                "f:weight": {}, "f:limits": {"f:cpu": {}}}}},
            {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {
                "f:template": {"f:spec": {"f:taints": {"k:{\"key\":\"x\"}": {".": {}}}}}}}},
            {"manager": "jointer-controller", "operation": "Update", "subresource": "status",
                "fieldsV1": {"f:status": {"f:nodes": {}}}},
        ]}});
        assert_eq!(
            foreign_fields(&object),
            vec![
                (vec!["weight".to_string()], "kubectl-patch".to_string()),
                (
                    vec![
                        "template".to_string(),
                        "spec".to_string(),
                        "taints".to_string()
                    ],
                    "kubectl-edit".to_string()
                ),
            ],
            "co-owned limits.cpu and status writes are not foreign"
        );
        let desired = json!({"spec": {"template": {"spec": {"taints": [{"key": "y"}]}}}});
        assert_eq!(
            reset_patch(
                &desired,
                &[
                    vec!["weight".into()],
                    vec!["template".into(), "spec".into(), "taints".into()]
                ]
            ),
            json!({"spec": {"weight": null, "template": {"spec": {"taints": [{"key": "y"}]}}}})
        );
    }

    #[test]
    fn differences_name_the_field_and_ignore_bookkeeping() {
        let live = json!({"metadata": {"name": "a", "resourceVersion": "1", "managedFields": [1]},
            "spec": {"limits": {"cpu": "2000"}, "list": [1, 2]}});
        let after = json!({"metadata": {"name": "a", "resourceVersion": "2", "managedFields": [2]},
            "spec": {"limits": {"cpu": "1000"}, "list": [1, 3]}});
        assert_eq!(
            differences(&live, &after),
            vec!["spec.limits.cpu: 2000 → 1000", "spec.list[1]: 2 → 3"]
        );
        assert!(differences(&live, &live).is_empty());
    }

    fn pool(cpu: &str, owner: Option<&str>) -> Value {
        let mut pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general"}, "spec": {"limits": {"cpu": cpu}}});
        if let Some(owner) = owner {
            pool["metadata"]["labels"] = json!({ MANAGED_BY_LABEL: owner });
        }
        pool
    }

    fn lines(change: Option<Change>) -> Option<String> {
        change.map(|c| c.to_string())
    }

    #[test]
    fn a_missing_object_is_created_even_before_its_kind_exists() {
        let desired = pool("1000", Some(MANAGED_BY));
        assert_eq!(
            lines(diff(desired.clone(), &Observed::Missing).unwrap()).as_deref(),
            Some("+ NodePool general")
        );
        assert_eq!(
            lines(diff(desired, &Observed::NoKind).unwrap()).as_deref(),
            Some("+ NodePool general  (its kind is installed first)")
        );
    }

    #[test]
    fn a_changed_field_is_an_update_naming_it_and_an_unchanged_object_is_no_change() {
        let live = pool("2000", Some(MANAGED_BY));
        let after = pool("1000", Some(MANAGED_BY));
        let changed = Observed::Live {
            live: live.clone(),
            after,
        };
        assert_eq!(
            lines(diff(pool("1000", Some(MANAGED_BY)), &changed).unwrap()).as_deref(),
            Some("~ NodePool general  spec.limits.cpu: 2000 → 1000")
        );
        let same = Observed::Live {
            live: live.clone(),
            after: live,
        };
        assert!(diff(pool("2000", Some(MANAGED_BY)), &same)
            .unwrap()
            .is_none());
    }

    #[test]
    fn an_object_jointer_does_not_manage_is_an_error_unless_adopted() {
        let live = pool("2000", Some("Helm"));
        let err = diff(
            pool("1000", Some(MANAGED_BY)),
            &Observed::Foreign { live: live.clone() },
        )
        .unwrap_err();
        assert!(
            err.to_string().contains(&format!(
                "NodePool general already exists and jointer does not manage it (it is labelled {MANAGED_BY_LABEL}=Helm)"
            )),
            "{err}"
        );
        // Adopting: observed as Live, and the change says so.
        let adopted = Observed::Live {
            live,
            after: pool("1000", Some(MANAGED_BY)),
        };
        let change = diff(pool("1000", Some(MANAGED_BY)), &adopted)
            .unwrap()
            .unwrap();
        assert!(
            change
                .detail
                .as_deref()
                .unwrap_or("")
                .starts_with("adopted (--adopt); "),
            "{change}"
        );
    }

    #[test]
    fn ownership_is_the_managed_by_label() {
        let ours = with_labels(
            json!({"metadata": {"name": "x"}}),
            &ownership_labels("demo"),
        );
        assert!(is_ours(&ours));
        assert_eq!(label(&ours, CLUSTER_LABEL), Some("demo"));
        assert!(!is_ours(
            &json!({"metadata": {"labels": {MANAGED_BY_LABEL: "Helm"}}})
        ));
        assert!(!is_ours(&json!({"metadata": {"name": "x"}})));
    }
}
