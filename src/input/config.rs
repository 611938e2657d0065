//! `jointer.yaml`: the one declarative file jointer works from.
//!
//! Typed, strict (`deny_unknown_fields`), defaulted; `load` reports every problem with its file,
//! line, column and field path before anything else runs.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{de, Deserialize, Deserializer, Serialize};

use super::diagnostics::{Diagnostic, InputErrors};
use super::documents::{is_blank, read_text, YamlStream};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    pub cluster: Cluster,
    #[serde(default)]
    pub identity: Identity,
    #[serde(default)]
    pub controller: Controller,
    #[serde(default)]
    pub interruption: Interruption,
    #[serde(default)]
    pub discovery: Discovery,
    #[serde(default)]
    pub node_role: NodeRole,
    #[serde(default)]
    pub templates: Templates,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cluster {
    /// The existing EKS cluster's name.
    pub name: String,
    /// Its AWS region, e.g. us-east-1.
    pub region: String,
}

/// How the controller gets AWS credentials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Identity {
    /// EKS Pod Identity (needs the eks-pod-identity-agent add-on).
    #[default]
    PodIdentity,
    /// IAM roles for service accounts through the cluster's OIDC provider.
    Irsa,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Install {
    /// jointer-controller, from this workspace.
    #[default]
    Bundled,
    /// Upstream Karpenter from its Helm chart.
    Helm,
    /// Set up AWS and the node objects only.
    None,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Controller {
    #[serde(default)]
    pub install: Install,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// The controller's service account (default: jointer-controller for the bundled
    /// controller, karpenter for the Helm chart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    #[serde(default)]
    pub image: Image,
    #[serde(default)]
    pub helm: HelmChart,
    /// The bundled controller's settings, by environment variable (`MIN_VALUES_POLICY:
    /// BestEffort`, `BATCH_IDLE_DURATION: 2s`, …), checked with the controller's own parsers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub settings: BTreeMap<String, String>,
}

impl Controller {
    pub fn service_account_name(&self) -> String {
        self.service_account.clone().unwrap_or_else(|| {
            match self.install {
                Install::Helm => "karpenter",
                _ => "jointer-controller",
            }
            .to_string()
        })
    }
}

fn default_namespace() -> String {
    "kube-system".into()
}
fn default_replicas() -> u32 {
    2
}

impl Default for Controller {
    fn default() -> Self {
        Controller {
            install: Install::default(),
            namespace: default_namespace(),
            replicas: default_replicas(),
            service_account: None,
            image: Image::default(),
            helm: HelmChart::default(),
            settings: BTreeMap::new(),
        }
    }
}

/// The bundled controller's image. By default jointer builds it from the workspace it was
/// built from and pushes it to an ECR repository it creates; `repository` (and `tag`) name
/// an image you publish instead, which jointer then installs as it is.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Image {
    /// A published image's repository (`ghcr.io/me/jointer-controller`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The published image's tag (default: this jointer's version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The ECR repository jointer builds into (default `jointer-controller/<cluster>`: one per
    /// cluster, so tearing one cluster down never removes an image another runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecr_repository: Option<String>,
    /// How many images the repository's lifecycle policy keeps.
    #[serde(default = "default_keep_images")]
    pub keep_images: u32,
}

fn default_keep_images() -> u32 {
    10
}

impl Default for Image {
    fn default() -> Self {
        Image {
            repository: None,
            tag: None,
            ecr_repository: None,
            keep_images: default_keep_images(),
        }
    }
}

/// Where the controller's image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageSource {
    /// `repository:tag`, as given.
    Published(String),
    /// Built by jointer into the ECR repository `Image::ecr_target` names.
    Built,
}

impl Image {
    pub fn source(&self) -> ImageSource {
        match &self.repository {
            Some(repository) => ImageSource::Published(format!(
                "{repository}:{}",
                self.tag
                    .clone()
                    .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_string())
            )),
            None => ImageSource::Built,
        }
    }

    /// The ECR repository an image jointer builds goes to, and how many images it keeps
    /// (also when a published image is used now: teardown finds the repository by it).
    pub fn ecr_target(&self, cluster: &str) -> (String, u32) {
        let name = self
            .ecr_repository
            .clone()
            .unwrap_or_else(|| format!("jointer-controller/{}", cluster.to_ascii_lowercase()));
        (name, self.keep_images)
    }
}

/// ECR's repository-name rule: lower-case components of letters and digits joined by `.`,
/// `_` or `-`, separated by `/`; 2 to 256 characters.
pub fn check_ecr_repository(name: &str) -> Result<(), String> {
    let component = |c: &str| {
        !c.is_empty()
            && c.split(['.', '_', '-']).all(|w| {
                !w.is_empty()
                    && w.chars()
                        .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit())
            })
    };
    if (2..=256).contains(&name.len()) && name.split('/').all(component) {
        Ok(())
    } else {
        Err(format!("{name:?} is not a valid ECR repository name (2-256 characters: lower-case letters and digits, words joined by '.', '_' or '-', namespaces separated by '/', e.g. jointer-controller/prod)"))
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HelmChart {
    #[serde(default = "default_chart")]
    pub chart: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

fn default_chart() -> String {
    "oci://public.ecr.aws/karpenter/karpenter".into()
}

impl Default for HelmChart {
    fn default() -> Self {
        HelmChart {
            chart: default_chart(),
            version: None,
        }
    }
}

/// The spot-interruption queue and its EventBridge rules. `interruption: true|false` is
/// shorthand for `{ enabled: true|false }`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Interruption {
    pub enabled: bool,
    /// Defaults to the cluster name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    /// A customer-managed KMS key for the queue (default: SQS-managed encryption). Its key
    /// policy must let events.amazonaws.com use it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kms_key_id: Option<String>,
}

impl Default for Interruption {
    fn default() -> Self {
        Interruption {
            enabled: true,
            queue_name: None,
            kms_key_id: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InterruptionFields {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default)]
    queue_name: Option<String>,
    #[serde(default)]
    kms_key_id: Option<String>,
}

fn yes() -> bool {
    true
}

impl<'de> Deserialize<'de> for Interruption {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = Interruption;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false, or a mapping { enabled, queueName, kmsKeyId }")
            }
            fn visit_bool<E: de::Error>(self, enabled: bool) -> Result<Interruption, E> {
                Ok(Interruption {
                    enabled,
                    queue_name: None,
                    kms_key_id: None,
                })
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<Interruption, A::Error> {
                let f =
                    InterruptionFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Interruption {
                    enabled: f.enabled,
                    queue_name: f.queue_name,
                    kms_key_id: f.kms_key_id,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `auto`, or an explicit list of resource IDs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Selection {
    #[default]
    Auto,
    Ids(Vec<String>),
}

impl Serialize for Selection {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Selection::Auto => s.serialize_str("auto"),
            Selection::Ids(ids) => ids.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Selection {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> de::Visitor<'de> for V {
            type Value = Selection;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`auto` or a list of IDs")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Selection, E> {
                match v {
                    "auto" => Ok(Selection::Auto),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Selection, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element::<String>()? {
                    ids.push(id);
                }
                Ok(Selection::Ids(ids))
            }
        }
        d.deserialize_any(V)
    }
}

/// Which subnets and security group get the discovery tag.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Discovery {
    /// `auto`: the cluster's private subnets.
    #[serde(default)]
    pub subnets: Selection,
    /// `auto`: the cluster security group.
    #[serde(default)]
    pub security_groups: Selection,
    #[serde(default = "default_discovery_key")]
    pub tag_key: String,
}

fn default_discovery_key() -> String {
    "karpenter.sh/discovery".into()
}

impl Default for Discovery {
    fn default() -> Self {
        Discovery {
            subnets: Selection::Auto,
            security_groups: Selection::Auto,
            tag_key: default_discovery_key(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeAccess {
    /// An EKS access entry when the cluster's authentication mode allows it, else aws-auth.
    #[default]
    Auto,
    AccessEntry,
    AwsAuth,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeRole {
    /// Defaults to `KarpenterNodeRole-<cluster>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub access: NodeAccess,
}

/// The built-in node template sets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BuiltinTemplates {
    /// One EC2NodeClass and one mixed spot/on-demand NodePool.
    #[default]
    Default,
    /// A tainted spot pool for interruption-tolerant work and an on-demand pool for the rest.
    Split,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Templates {
    /// A built-in set (default when `dir` is not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builtin: Option<BuiltinTemplates>,
    /// A directory of minijinja templates, relative to the config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Free-form values available to templates as `values`.
    #[serde(default)]
    pub values: BTreeMap<String, serde_json::Value>,
}

impl Config {
    pub fn node_role_name(&self) -> String {
        self.node_role
            .name
            .clone()
            .unwrap_or_else(|| format!("KarpenterNodeRole-{}", self.cluster.name))
    }

    pub fn queue_name(&self) -> String {
        self.interruption
            .queue_name
            .clone()
            .unwrap_or_else(|| self.cluster.name.clone())
    }
}

/// A config and where it came from (template directories are relative to it).
pub struct LoadedConfig {
    pub path: PathBuf,
    pub config: Config,
}

impl LoadedConfig {
    pub fn base_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }
}

/// Reads, parses and validates a config file; every problem is reported, located.
pub fn load(path: &Path) -> Result<LoadedConfig, InputErrors> {
    let text = read_text(path)?;
    load_text(path, &text)
}

/// Parses and validates config text read from `path` (which names it in errors and anchors
/// relative template directories).
pub fn load_text(path: &Path, text: &str) -> Result<LoadedConfig, InputErrors> {
    if is_blank(text) {
        return Err(Diagnostic::error(
            path,
            "the file is empty; a config needs at least `cluster: { name: <eks cluster>, region: <aws region> }` (`jointer init` writes a starter)",
        )
        .into());
    }
    let stream = YamlStream::parse(path, text)?;
    if stream.documents.len() != 1 {
        return Err(Diagnostic::error(
            path,
            format!(
                "expected one YAML document, found {}",
                stream.documents.len()
            ),
        )
        .into());
    }
    if !stream.documents[0].is_mapping() {
        return Err(Diagnostic::error(
            path,
            "expected a mapping with `cluster:` and other settings at the top level",
        )
        .into());
    }
    let config: Config = stream.typed(0)?;
    let problems = validate(&config)
        .into_iter()
        .map(|(field, message)| Diagnostic::error(path, message).field(&stream.map, 0, field))
        .collect::<Vec<_>>();
    if !problems.is_empty() {
        return Err(InputErrors(problems));
    }
    Ok(LoadedConfig {
        path: path.to_path_buf(),
        config,
    })
}

/// EKS cluster names: 1–100 characters, alphanumerics, hyphens and underscores, starting with
/// an alphanumeric.
pub fn check_cluster_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 100
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!("{name:?} is not a valid EKS cluster name: use 1-100 letters, digits, '-' or '_', starting with a letter or digit"))
    }
}

/// AWS region names such as us-east-1, eu-central-2, us-gov-west-1, cn-north-1.
pub fn check_region(region: &str) -> Result<(), String> {
    let parts: Vec<&str> = region.split('-').collect();
    let valid = parts.len() >= 3
        && parts[0].len() == 2
        && parts[0].chars().all(|c| c.is_ascii_lowercase())
        && parts[1..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase()))
        && parts[parts.len() - 1].parse::<u32>().is_ok();
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{region:?} is not an AWS region name (expected e.g. us-east-1, eu-west-2, us-gov-west-1)"
        ))
    }
}

/// An AWS tag key jointer can put on subnets and security groups: 1-128 characters, not the
/// reserved `aws:` prefix, and only the characters EC2 tags allow everywhere.
pub fn check_tag_key(key: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_alphanumeric() || c.is_whitespace() || "_.:/=+-@".contains(c);
    if key.is_empty() || key.chars().count() > 128 || !key.chars().all(allowed) {
        return Err(format!(
            "{key:?} is not a valid tag key (1-128 letters, digits, spaces and _.:/=+-@)"
        ));
    }
    if key.to_ascii_lowercase().starts_with("aws:") {
        return Err(format!(
            "{key:?} starts with aws:, which AWS reserves for its own tags"
        ));
    }
    Ok(())
}

/// Semantic checks serde cannot express, as (field path, message).
fn validate(config: &Config) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if let Err(e) = check_cluster_name(&config.cluster.name) {
        problems.push(("cluster.name", e));
    }
    if let Err(e) = check_region(&config.cluster.region) {
        problems.push(("cluster.region", e));
    }
    if config.controller.namespace.is_empty()
        || config.controller.namespace.len() > 63
        || !config
            .controller
            .namespace
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        problems.push((
            "controller.namespace",
            format!(
                "{:?} is not a valid namespace name (lower-case letters, digits and '-', at most 63)",
                config.controller.namespace
            ),
        ));
    }
    let image = &config.controller.image;
    if image.repository.is_some() && image.ecr_repository.is_some() {
        problems.push((
            "controller.image",
            "repository names a published image and ecrRepository one jointer builds: give one of them".to_string(),
        ));
    }
    if image.tag.is_some() && image.repository.is_none() {
        problems.push((
            "controller.image.tag",
            "a tag without repository: add the published image's repository, or remove tag to let jointer build the image".to_string(),
        ));
    }
    if let Some(name) = &image.ecr_repository {
        if let Err(e) = check_ecr_repository(name) {
            problems.push(("controller.image.ecrRepository", e));
        }
    }
    if !(1..=1000).contains(&image.keep_images) {
        problems.push((
            "controller.image.keepImages",
            format!("{}: keep 1 to 1000 images", image.keep_images),
        ));
    }
    if let Err(e) = jointer_controller::settings::check_overrides(&config.controller.settings) {
        problems.push(("controller.settings", e));
    }
    if !(1..=10).contains(&config.controller.replicas) {
        problems.push((
            "controller.replicas",
            format!(
                "{} replicas: use 1 to 10 (2 gives a standby leader)",
                config.controller.replicas
            ),
        ));
    }
    if let Some(queue) = &config.interruption.queue_name {
        let valid = !queue.is_empty()
            && queue.len() <= 80
            && queue
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            problems.push((
                "interruption.queueName",
                format!(
                    "{queue:?} is not a valid SQS queue name (1-80 letters, digits, '-' or '_')"
                ),
            ));
        }
    }
    if let Some(key) = &config.interruption.kms_key_id {
        // EventBridge cannot encrypt with the AWS-managed SQS key: the queue would silently
        // receive nothing.
        if key.ends_with("alias/aws/sqs") {
            problems.push((
                "interruption.kmsKeyId",
                format!("{key:?} is the AWS-managed SQS key, which EventBridge cannot use (no event would arrive): remove kmsKeyId for SQS-managed encryption, or give a customer-managed key whose policy allows events.amazonaws.com"),
            ));
        } else if key.is_empty() {
            problems.push((
                "interruption.kmsKeyId",
                "empty: remove it for SQS-managed encryption, or give a key ID, ARN or alias"
                    .to_string(),
            ));
        }
    }
    if let Some(sa) = &config.controller.service_account {
        let valid = !sa.is_empty()
            && sa.len() <= 253
            && sa
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !valid {
            problems.push((
                "controller.serviceAccount",
                format!("{sa:?} is not a valid service account name (lower-case letters, digits, '-' and '.')"),
            ));
        }
    }
    if let Some(name) = &config.node_role.name {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+=,.@-_".contains(c));
        if !valid {
            problems.push((
                "nodeRole.name",
                format!("{name:?} is not a valid IAM role name (1-64 letters, digits or +=,.@-_)"),
            ));
        }
    }
    for (field, selection, prefix) in [
        ("discovery.subnets", &config.discovery.subnets, "subnet-"),
        (
            "discovery.securityGroups",
            &config.discovery.security_groups,
            "sg-",
        ),
    ] {
        if let Selection::Ids(ids) = selection {
            if ids.is_empty() {
                problems.push((
                    field,
                    "an empty list selects nothing: use `auto` or list IDs".to_string(),
                ));
            }
            for id in ids.iter().filter(|id| !id.starts_with(prefix)) {
                problems.push((field, format!("{id:?} is not an ID starting with {prefix}")));
            }
        }
    }
    if config.controller.helm.chart.trim().is_empty() {
        problems.push((
            "controller.helm.chart",
            "empty: give an OCI reference (oci://…), a chart repository URL or a local chart directory, or remove it for upstream's chart".to_string(),
        ));
    }
    if let Err(e) = check_tag_key(&config.discovery.tag_key) {
        problems.push(("discovery.tagKey", e));
    }
    if config.templates.builtin.is_some() && config.templates.dir.is_some() {
        problems.push((
            "templates",
            "set either `builtin` or `dir`, not both".to_string(),
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_and_name_rules() {
        for ok in ["us-east-1", "us-gov-west-1", "cn-north-1", "ap-southeast-4"] {
            assert!(check_region(ok).is_ok(), "{ok}");
        }
        for bad in ["", "useast1", "us-east", "US-EAST-1", "us--1"] {
            assert!(check_region(bad).is_err(), "{bad}");
        }
        assert!(check_cluster_name("demo_1-a").is_ok());
        for bad in ["", "-demo", "de mo", &"x".repeat(101)] {
            assert!(check_cluster_name(bad).is_err(), "{bad}");
        }
    }
}
