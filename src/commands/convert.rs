//! `jointer convert`: Karpenter v1beta1 NodePool/EC2NodeClass YAML → v1.
//!
//! Works on the YAML tree so the output keeps the user's fields and order; the result is then
//! read as typed v1 objects and validated with the CRDs' CEL rules, and problems are located in
//! the *input* file (moved fields are traced back to where the user wrote them).

use std::path::PathBuf;

use jointer_controller::api::labels::{
    DO_NOT_DISRUPT, LEGACY_DO_NOT_CONSOLIDATE, LEGACY_DO_NOT_EVICT,
};
use serde::Serialize;
use serde_yaml::{Mapping, Value};

use crate::api_versions::{NODECLASS_V1, NODEPOOL_V1};
use crate::input::diagnostics::{Diagnostic, InputErrors};
use crate::input::documents::{read_stream, YamlStream};
use crate::input::manifest::{read_object, type_of};

/// One change `convert` made, reported on stderr (or in JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub file: String,
    pub object: String,
    pub change: String,
}

/// The converted documents of all inputs, in input order, and what changed.
#[derive(Debug, Serialize)]
pub struct Conversion {
    pub documents: Vec<Value>,
    pub changes: Vec<Change>,
}

/// A NodePool's v1beta1 `kubelet`, waiting to move to the EC2NodeClass it references.
struct MovedKubelet {
    pool: String,
    class: String,
    kubelet: Value,
    file: String,
}

struct Input {
    stream: YamlStream,
    converted: Vec<Value>,
}

fn key(k: &str) -> Value {
    Value::String(k.to_string())
}

fn mapping_mut<'a>(value: &'a mut Value, path: &[&str]) -> Option<&'a mut Mapping> {
    let mut cur = value;
    for p in path {
        cur = cur.get_mut(*p)?;
    }
    cur.as_mapping_mut()
}

fn object_id(value: &Value) -> String {
    let (_, kind) = type_of(value);
    let name = value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    format!("{}/{name}", kind.unwrap_or("<no kind>"))
}

struct Recorder<'a> {
    changes: &'a mut Vec<Change>,
    file: String,
    object: String,
}

impl Recorder<'_> {
    fn note(&mut self, change: impl Into<String>) {
        self.changes.push(Change {
            file: self.file.clone(),
            object: self.object.clone(),
            change: change.into(),
        });
    }
}

/// `do-not-evict` / `do-not-consolidate` → `do-not-disrupt`, in one annotations mapping.
fn rename_disruption_annotations(annotations: &mut Mapping, where_: &str, rec: &mut Recorder) {
    for legacy in [LEGACY_DO_NOT_EVICT, LEGACY_DO_NOT_CONSOLIDATE] {
        if let Some(v) = annotations.remove(key(legacy)) {
            rec.note(format!("{where_}: annotation {legacy} → {DO_NOT_DISRUPT}"));
            if !annotations.contains_key(key(DO_NOT_DISRUPT)) {
                annotations.insert(key(DO_NOT_DISRUPT), v);
            }
        }
    }
}

fn convert_annotations(doc: &mut Value, rec: &mut Recorder) {
    for (path, label) in [
        (&["metadata", "annotations"][..], "metadata.annotations"),
        (
            &["spec", "template", "metadata", "annotations"][..],
            "spec.template.metadata.annotations",
        ),
    ] {
        if let Some(a) = mapping_mut(doc, path) {
            rename_disruption_annotations(a, label, rec);
        }
    }
}

fn convert_nodepool(
    doc: &mut Value,
    map: &mut crate::input::source_map::SourceMap,
    index: usize,
    rec: &mut Recorder,
) -> Option<(String, Value)> {
    doc["apiVersion"] = key(NODEPOOL_V1);
    rec.note("apiVersion karpenter.sh/v1beta1 → karpenter.sh/v1");
    convert_annotations(doc, rec);

    let mut expire_after = None;
    if let Some(disruption) = mapping_mut(doc, &["spec", "disruption"]) {
        let policy = disruption
            .get("consolidationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string);
        if policy.as_deref() == Some("WhenUnderutilized") {
            disruption.insert(key("consolidationPolicy"), key("WhenEmptyOrUnderutilized"));
            rec.note(
                "spec.disruption.consolidationPolicy WhenUnderutilized → WhenEmptyOrUnderutilized",
            );
            if let Some(after) = disruption.get("consolidateAfter") {
                rec.note(format!(
                    "spec.disruption.consolidateAfter {} kept: v1beta1 refused consolidateAfter with WhenUnderutilized, v1 accepts and honours it (a node is consolidated only after that long without pod changes)",
                    serde_yaml::to_string(after).unwrap_or_default().trim()
                ));
            }
        }
        expire_after = disruption.remove(key("expireAfter"));
    }
    let template_spec = mapping_mut(doc, &["spec", "template", "spec"])?;
    if let Some(expire) = expire_after {
        template_spec.insert(key("expireAfter"), expire);
        map.alias(
            index,
            "spec.template.spec.expireAfter",
            "spec.disruption.expireAfter",
        );
        rec.note("spec.disruption.expireAfter → spec.template.spec.expireAfter");
    }
    if let Some(Value::Mapping(reference)) = template_spec.get_mut("nodeClassRef") {
        if let Some(api_version) = reference.remove(key("apiVersion")) {
            let group = api_version
                .as_str()
                .and_then(|a| a.split('/').next())
                .unwrap_or("karpenter.k8s.aws")
                .to_string();
            reference.insert(key("group"), key(&group));
            rec.note(format!(
                "spec.template.spec.nodeClassRef.apiVersion → group {group}"
            ));
        }
        if !reference.contains_key("group") {
            reference.insert(key("group"), key("karpenter.k8s.aws"));
            rec.note(
                "spec.template.spec.nodeClassRef.group set to karpenter.k8s.aws (required in v1)",
            );
        }
        if !reference.contains_key("kind") {
            reference.insert(key("kind"), key("EC2NodeClass"));
            rec.note("spec.template.spec.nodeClassRef.kind set to EC2NodeClass (required in v1)");
        }
    }
    let class = template_spec
        .get("nodeClassRef")
        .and_then(|r| r.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    template_spec.remove(key("kubelet")).map(|k| (class, k))
}

fn convert_nodeclass(
    doc: &mut Value,
    map: &mut crate::input::source_map::SourceMap,
    index: usize,
    rec: &mut Recorder,
) -> Result<(), String> {
    doc["apiVersion"] = key(NODECLASS_V1);
    rec.note("apiVersion karpenter.k8s.aws/v1beta1 → karpenter.k8s.aws/v1");
    convert_annotations(doc, rec);
    let Some(spec) = mapping_mut(doc, &["spec"]) else {
        return Ok(());
    };
    if !spec.contains_key("amiSelectorTerms") {
        let family = match spec.remove(key("amiFamily")) {
            Some(Value::String(f)) => f,
            Some(_) => return Err("spec.amiFamily must be a string such as AL2023".into()),
            // v1beta1 defaulted to AL2 when neither was given.
            None => "AL2".to_string(),
        };
        if family == "Custom" {
            return Err("amiFamily Custom needs amiSelectorTerms to say which AMIs to use; add them and convert again".into());
        }
        let alias = format!("{}@latest", family.to_lowercase());
        let mut term = Mapping::new();
        term.insert(key("alias"), key(&alias));
        spec.insert(
            key("amiSelectorTerms"),
            Value::Sequence(vec![Value::Mapping(term)]),
        );
        map.alias(index, "spec.amiSelectorTerms", "spec.amiFamily");
        rec.note(format!("spec.amiFamily {family} → spec.amiSelectorTerms [{{alias: {alias}}}] (pin a version instead of latest for controlled rollouts)"));
    }
    let options = spec
        .entry(key("metadataOptions"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if let Value::Mapping(options) = options {
        if !options.contains_key("httpPutResponseHopLimit") {
            options.insert(key("httpPutResponseHopLimit"), Value::from(2));
            rec.note("spec.metadataOptions.httpPutResponseHopLimit set to 2, the v1beta1 default (v1 defaults to 1, which keeps pods away from the node's IMDS credentials; remove this line to adopt it if no pod needs IMDS)");
        }
    }
    Ok(())
}

/// Converts every document of every file; on any problem nothing is returned but the problems.
pub fn convert(files: &[PathBuf]) -> Result<Conversion, InputErrors> {
    let mut problems = Vec::new();
    let mut streams = Vec::new();
    for path in files {
        match read_stream(path, "v1beta1 NodePool or EC2NodeClass YAML") {
            Ok(s) => streams.push(s),
            Err(d) => problems.push(d),
        }
    }
    let converted = convert_streams(streams);
    match (converted, problems.is_empty()) {
        (Ok(conversion), true) => Ok(conversion),
        (Ok(_), false) => Err(InputErrors(problems)),
        (Err(InputErrors(mut more)), _) => {
            problems.append(&mut more);
            Err(InputErrors(problems))
        }
    }
}

/// Converts parsed streams (what [`convert`] reads from files).
pub fn convert_streams(streams: Vec<YamlStream>) -> Result<Conversion, InputErrors> {
    let mut problems = Vec::new();
    let mut changes = Vec::new();
    let mut inputs = Vec::new();
    let mut kubelets = Vec::new();
    for mut stream in streams {
        let mut converted = stream.documents.clone();
        for (index, doc) in converted.iter_mut().enumerate() {
            if doc.is_null() {
                continue;
            }
            let mut rec = Recorder {
                changes: &mut changes,
                file: stream.file.clone(),
                object: object_id(doc),
            };
            match type_of(doc) {
                (Some("karpenter.sh/v1beta1"), Some("NodePool")) => {
                    if let Some((class, kubelet)) =
                        convert_nodepool(doc, &mut stream.map, index, &mut rec)
                    {
                        kubelets.push(MovedKubelet {
                            pool: object_id(doc),
                            class,
                            kubelet,
                            file: stream.file.clone(),
                        });
                    }
                }
                (Some("karpenter.k8s.aws/v1beta1"), Some("EC2NodeClass")) => {
                    if let Err(message) = convert_nodeclass(doc, &mut stream.map, index, &mut rec) {
                        problems.push(
                            Diagnostic::error(&stream.file, message)
                                .field(&stream.map, index, "spec.amiFamily")
                                .object(object_id(doc)),
                        );
                    }
                }
                (Some(NODEPOOL_V1), Some("NodePool"))
                | (Some(NODECLASS_V1), Some("EC2NodeClass")) => {
                    rec.note("already v1, unchanged");
                }
                (Some(_), Some(_)) => convert_annotations(doc, &mut rec),
                _ => problems.push(
                    Diagnostic::error(
                        &stream.file,
                        "not a Kubernetes object: apiVersion and kind are required",
                    )
                    .field(&stream.map, index, ""),
                ),
            }
        }
        inputs.push(Input { stream, converted });
    }
    move_kubelets(&mut inputs, kubelets, &mut changes, &mut problems);

    // Validate the v1 result as `render` would, located in the input.
    for input in &mut inputs {
        let check = YamlStream {
            file: input.stream.file.clone(),
            documents: input.converted.clone(),
            map: std::mem::take(&mut input.stream.map),
        };
        for (index, doc) in check.documents.iter().enumerate() {
            let karpenter = matches!(
                type_of(doc),
                (Some(NODEPOOL_V1), Some("NodePool")) | (Some(NODECLASS_V1), Some("EC2NodeClass"))
            );
            if karpenter {
                if let Err(InputErrors(mut p)) = read_object(&check, index) {
                    problems.append(&mut p);
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(InputErrors(problems));
    }
    let documents = inputs
        .into_iter()
        .flat_map(|i| i.converted)
        .filter(|d| !d.is_null())
        .collect();
    Ok(Conversion { documents, changes })
}

/// v1 moved `kubelet` from the NodePool to its EC2NodeClass: attach each to the class it
/// references, refusing conflicts and classes not among the inputs (nothing may be lost).
fn move_kubelets(
    inputs: &mut [Input],
    kubelets: Vec<MovedKubelet>,
    changes: &mut Vec<Change>,
    problems: &mut Vec<Diagnostic>,
) {
    for moved in kubelets {
        let target = inputs.iter_mut().find_map(|input| {
            let file = input.stream.file.clone();
            input
                .converted
                .iter_mut()
                .find(|d| {
                    type_of(d) == (Some(NODECLASS_V1), Some("EC2NodeClass"))
                        && object_id(d) == format!("EC2NodeClass/{}", moved.class)
                })
                .map(|d| (d, file))
        });
        let Some((class, class_file)) = target else {
            problems.push(Diagnostic::error(&moved.file, format!(
                "{} sets spec.template.spec.kubelet, which v1 moved to its EC2NodeClass {:?}; that class is not among the inputs: pass its file too so the settings can move (nothing was written)",
                moved.pool, moved.class
            )).object(moved.pool.clone()));
            continue;
        };
        let Some(spec) = class.get_mut("spec").and_then(Value::as_mapping_mut) else {
            continue;
        };
        match spec.get("kubelet") {
            Some(existing) if *existing != moved.kubelet => problems.push(Diagnostic::error(&moved.file, format!(
                "{} and another NodePool set different kubelet settings but share EC2NodeClass {:?}; v1 keeps kubelet on the class: give each pool its own class",
                moved.pool, moved.class
            )).object(moved.pool.clone())),
            Some(_) => {}
            None => {
                spec.insert(key("kubelet"), moved.kubelet);
                changes.push(Change {
                    file: moved.file.clone(),
                    object: moved.pool.clone(),
                    change: format!("spec.template.spec.kubelet → EC2NodeClass/{} spec.kubelet ({class_file})", moved.class),
                });
            }
        }
    }
}
