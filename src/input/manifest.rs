//! Karpenter v1 objects read from YAML (rendered templates, converted files), typed and
//! validated with the same CEL rules the CRDs carry; every problem is located.

use jointer_controller::api::{EC2NodeClass, FieldError, NodeOverlay, NodePool, Validate};
use jointer_controller::core::ami_family::user_data;
use kube::ResourceExt;
use serde::Serialize;

use super::diagnostics::{Diagnostic, InputErrors};
use super::documents::YamlStream;
use super::field_history::{value_history, KNOWN_VALUES};
use super::unknown_fields::unknown_fields;
use crate::api_versions::{NODECLASS_V1, NODEOVERLAY_V1ALPHA1, NODEPOOL_V1};

/// An object `render` and `convert` produce (and `simulate` reads; only it takes NodeOverlays).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Object {
    NodePool(Box<NodePool>),
    EC2NodeClass(Box<EC2NodeClass>),
    NodeOverlay(Box<NodeOverlay>),
}

impl Object {
    pub fn kind(&self) -> &'static str {
        match self {
            Object::NodePool(_) => "NodePool",
            Object::EC2NodeClass(_) => "EC2NodeClass",
            Object::NodeOverlay(_) => "NodeOverlay",
        }
    }

    pub fn name(&self) -> String {
        match self {
            Object::NodePool(o) => o.name_any(),
            Object::EC2NodeClass(o) => o.name_any(),
            Object::NodeOverlay(o) => o.name_any(),
        }
    }

    /// `NodePool/default`
    pub fn id(&self) -> String {
        format!("{}/{}", self.kind(), self.name())
    }

    fn validate(&self) -> Vec<FieldError> {
        match self {
            Object::NodePool(o) => o.validate(),
            Object::EC2NodeClass(o) => o.validate(),
            Object::NodeOverlay(o) => o.validate(),
        }
    }
}

/// An object and where it was read from (for locating lint findings later).
pub struct Located {
    pub object: Object,
    pub file: String,
    pub doc: usize,
}

/// `(apiVersion, kind)` of a document, if it has them.
pub fn type_of(value: &serde_yaml::Value) -> (Option<&str>, Option<&str>) {
    (
        value.get("apiVersion").and_then(|v| v.as_str()),
        value.get("kind").and_then(|v| v.as_str()),
    )
}

/// RFC 1123 subdomain, as Kubernetes requires of cluster-scoped object names.
fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
    if valid {
        Ok(())
    } else {
        Err(format!("{name:?} is not a valid object name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"))
    }
}

fn name_of(value: &serde_yaml::Value) -> &str {
    value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("<unnamed>")
}

/// Values of other Karpenter releases (`WhenUnderutilized`), said with what v1 calls them
/// rather than as a bare "unknown variant".
fn old_values(stream: &YamlStream, doc: usize, kind: &str) -> Vec<Diagnostic> {
    let value = &stream.documents[doc];
    KNOWN_VALUES
        .iter()
        .filter(|known| known.kind == kind)
        .filter_map(|known| {
            let given = known
                .path
                .split('.')
                .try_fold(value, |v, key| v.get(key))?
                .as_str()?;
            let note = value_history(kind, known.path, given)?;
            Some(
                Diagnostic::error(&stream.file, note)
                    .field(&stream.map, doc, known.path)
                    .object(format!("{kind}/{}", name_of(value))),
            )
        })
        .collect()
}

/// A v1beta1 EC2NodeClass could choose its AMIs by `amiFamily` alone; v1 requires
/// `amiSelectorTerms`. Said before typed reading, whose "missing field" would not say why.
fn v1beta1_ami_family(stream: &YamlStream, doc: usize) -> Option<Diagnostic> {
    let spec = stream.documents[doc].get("spec")?;
    if spec.get("amiSelectorTerms").is_some() {
        return None;
    }
    let family = spec.get("amiFamily")?.as_str().unwrap_or("AL2023");
    Some(
        Diagnostic::error(&stream.file, format!(
            "amiSelectorTerms is required since Karpenter v1.0: a v1beta1 class could choose its AMIs by amiFamily alone; v1 says amiSelectorTerms: [{{alias: {}@latest}}] (pin a version for controlled rollouts; `jointer convert` writes it)",
            family.to_lowercase()
        ))
        .field(&stream.map, doc, "spec.amiFamily")
        .object(format!("EC2NodeClass/{}", name_of(&stream.documents[doc]))),
    )
}

/// Reads document `doc` of `stream` as a v1 object and validates it: every field jointer
/// does not know is reported (with where it is known from), none dropped.
pub fn read_object(stream: &YamlStream, doc: usize) -> Result<Object, InputErrors> {
    let value = &stream.documents[doc];
    if let (Some(api), Some(kind)) = type_of(value) {
        let unknown = unknown_fields(api, kind, value);
        let mut problems: Vec<Diagnostic> = unknown
            .into_iter()
            .map(|u| {
                Diagnostic::error(&stream.file, u.message)
                    .field(&stream.map, doc, &u.path)
                    .object(format!("{kind}/{}", name_of(value)))
            })
            .collect();
        problems.extend(old_values(stream, doc, kind));
        if api == NODECLASS_V1 && kind == "EC2NodeClass" {
            problems.extend(v1beta1_ami_family(stream, doc));
        }
        if !problems.is_empty() {
            return Err(InputErrors(problems));
        }
    }
    let object = match type_of(value) {
        (Some(NODEPOOL_V1), Some("NodePool")) => Object::NodePool(stream.typed(doc)?),
        (Some(NODECLASS_V1), Some("EC2NodeClass")) => {
            Object::EC2NodeClass(stream.typed(doc)?)
        }
        (Some(NODEOVERLAY_V1ALPHA1), Some("NodeOverlay")) => {
            Object::NodeOverlay(stream.typed(doc)?)
        }
        (Some(api @ ("karpenter.sh/v1beta1" | "karpenter.k8s.aws/v1beta1")), _) => {
            return Err(Diagnostic::error(&stream.file, format!("{api} is not served any more: convert the file with `jointer convert`"))
                .field(&stream.map, doc, "apiVersion")
                .into())
        }
        (Some("autoscaling.x-k8s.io/v1beta1"), Some("CapacityBuffer")) => {
            // Its fields were checked above; what it keeps warm depends on the cluster's
            // workloads, which render and simulate do not model.
            return Err(Diagnostic::error(&stream.file, "CapacityBuffers are not read here (simulate does not model buffers yet): apply them to the cluster, where the controller keeps their headroom")
                .field(&stream.map, doc, "kind")
                .object(format!("CapacityBuffer/{}", name_of(value)))
                .into());
        }
        (api, kind) => {
            return Err(Diagnostic::error(
                &stream.file,
                format!(
                    "unsupported object {}/{}: expected {NODEPOOL_V1} NodePool, {NODECLASS_V1} EC2NodeClass or {NODEOVERLAY_V1ALPHA1} NodeOverlay",
                    api.unwrap_or("<no apiVersion>"),
                    kind.unwrap_or("<no kind>")
                ),
            )
            .field(&stream.map, doc, "kind")
            .into())
        }
    };
    let mut problems = Vec::new();
    if let Err(e) = check_name(&object.name()) {
        problems.push(
            Diagnostic::error(&stream.file, e)
                .field(&stream.map, doc, "metadata.name")
                .object(object.id()),
        );
    }
    for e in object.validate() {
        problems.push(
            Diagnostic::error(&stream.file, e.message)
                .field(&stream.map, doc, &e.path)
                .object(object.id()),
        );
    }
    // What the controller would refuse the class for (user data its AMI family cannot read).
    if let Object::EC2NodeClass(class) = &object {
        if let Err(e) = user_data::validate(class) {
            // The location names the field; the message need not say it again.
            let message = e.to_string();
            let message = message
                .strip_prefix(&format!("{}: ", e.field()))
                .unwrap_or(&message);
            problems.push(
                Diagnostic::error(&stream.file, message)
                    .field(&stream.map, doc, &e.field())
                    .object(object.id()),
            );
        }
    }
    if problems.is_empty() {
        Ok(object)
    } else {
        Err(InputErrors(problems))
    }
}

/// Reads every non-empty document of `stream`; collects every problem of every document.
pub fn read_objects(stream: &YamlStream) -> Result<Vec<Located>, InputErrors> {
    let mut objects = Vec::new();
    let mut problems = Vec::new();
    for doc in 0..stream.documents.len() {
        if stream.documents[doc].is_null() {
            continue;
        }
        match read_object(stream, doc) {
            Ok(object) => objects.push(Located {
                object,
                file: stream.file.clone(),
                doc,
            }),
            Err(InputErrors(mut p)) => problems.append(&mut p),
        }
    }
    if problems.is_empty() {
        Ok(objects)
    } else {
        Err(InputErrors(problems))
    }
}

/// Refuses two objects of the same kind and name (the second would silently replace the first).
pub fn check_unique(objects: &[Located]) -> Result<(), InputErrors> {
    let mut seen = std::collections::HashMap::new();
    let mut problems = Vec::new();
    for o in objects {
        if let Some(first) = seen.insert(o.object.id(), &o.file) {
            problems.push(
                Diagnostic::error(
                    &o.file,
                    format!("{} is defined twice (also in {first})", o.object.id()),
                )
                .object(o.object.id()),
            );
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(InputErrors(problems))
    }
}

/// Objects as a YAML stream (`---` separated), the way `kubectl apply -f` takes them.
pub fn to_yaml_stream<'a>(
    objects: impl IntoIterator<Item = &'a Object>,
) -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(object)?);
    }
    Ok(out)
}
