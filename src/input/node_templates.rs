//! Renders the EC2NodeClass/NodePool templates (minijinja, strict undefined) from the config.
//!
//! Built-in sets are compiled into the binary so `jointer render` works from any directory; a
//! `templates.dir` in the config replaces them with the user's own files.

use std::path::{Path, PathBuf};

use minijinja::{Environment, UndefinedBehavior};
use serde_json::json;

use super::config::{BuiltinTemplates, LoadedConfig};
use super::diagnostics::{Diagnostic, InputErrors};
use super::documents::read_text;

const DEFAULT_CLASS: (&str, &str) = (
    "default/ec2nodeclass.yaml.j2",
    include_str!("../../templates/nodes/default/ec2nodeclass.yaml.j2"),
);
const DEFAULT_POOL: (&str, &str) = (
    "default/nodepool.yaml.j2",
    include_str!("../../templates/nodes/default/nodepool.yaml.j2"),
);
const SPLIT_POOLS: (&str, &str) = (
    "split/nodepools.yaml.j2",
    include_str!("../../templates/nodes/split/nodepools.yaml.j2"),
);

/// A template's source and where it came from.
pub struct TemplateSource {
    /// How diagnostics name it: a path, or `builtin:<set>/<file>`.
    pub origin: String,
    pub name: String,
    pub text: String,
}

/// One template's output, ready to be parsed as YAML.
pub struct Rendered {
    pub origin: String,
    pub text: String,
}

fn builtin(set: BuiltinTemplates) -> Vec<TemplateSource> {
    let files = match set {
        BuiltinTemplates::Default => vec![DEFAULT_CLASS, DEFAULT_POOL],
        BuiltinTemplates::Split => vec![DEFAULT_CLASS, SPLIT_POOLS],
    };
    files
        .into_iter()
        .map(|(name, text)| TemplateSource {
            origin: format!("builtin:{name}"),
            name: name.to_string(),
            text: text.to_string(),
        })
        .collect()
}

fn from_dir(dir: &Path) -> Result<Vec<TemplateSource>, Diagnostic> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Diagnostic::error(dir, format!("cannot read template directory: {e}")))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.ends_with(".j2") || n.ends_with(".yaml") || n.ends_with(".yml")
                })
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(Diagnostic::error(
            dir,
            "the template directory holds no *.yaml, *.yml or *.j2 files",
        ));
    }
    paths
        .into_iter()
        .map(|path| {
            Ok(TemplateSource {
                origin: path.display().to_string(),
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                text: read_text(&path)?,
            })
        })
        .collect()
}

/// The templates the config selects.
pub fn sources(loaded: &LoadedConfig) -> Result<Vec<TemplateSource>, Diagnostic> {
    let templates = &loaded.config.templates;
    match &templates.dir {
        Some(dir) => from_dir(&loaded.base_dir().join(dir)),
        None => Ok(builtin(templates.builtin.unwrap_or_default())),
    }
}

/// The variables every template sees.
pub fn context(loaded: &LoadedConfig) -> serde_json::Value {
    let c = &loaded.config;
    json!({
        "cluster": { "name": c.cluster.name, "region": c.cluster.region },
        "nodeRole": c.node_role_name(),
        "discovery": { "tagKey": c.discovery.tag_key },
        "interruption": { "enabled": c.interruption.enabled, "queueName": c.queue_name() },
        "values": c.templates.values,
    })
}

/// How many instructions a template may run: far more than any node template needs, so a
/// runaway loop stops with an error naming its template instead of hanging the command.
pub const TEMPLATE_FUEL: u64 = 10_000_000;

/// Renders every selected template; all template errors are reported, not just the first.
pub fn render(loaded: &LoadedConfig) -> Result<Vec<Rendered>, InputErrors> {
    let sources = sources(loaded)?;
    let ctx = context(loaded);
    let mut env = Environment::new();
    // A typo in a variable name must fail loudly, never render as an empty string.
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_keep_trailing_newline(true);
    env.set_fuel(Some(TEMPLATE_FUEL));
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for source in &sources {
        let result = env
            .template_from_named_str(&source.name, &source.text)
            .and_then(|t| t.render(&ctx));
        match result {
            Ok(text) => out.push(Rendered {
                origin: source.origin.clone(),
                text,
            }),
            Err(e) => problems.push(template_error(source, &e)),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(InputErrors(problems))
    }
}

fn template_error(source: &TemplateSource, e: &minijinja::Error) -> Diagnostic {
    let snippet = e
        .range()
        .and_then(|r| source.text.get(r))
        .map(|s| s.trim().to_string());
    let message = match (e.kind(), snippet) {
        (minijinja::ErrorKind::UndefinedError, Some(expr)) => format!(
            "undefined variable in `{expr}`: templates see cluster.name, cluster.region, nodeRole, discovery.tagKey, interruption.enabled, interruption.queueName and values.* (set under templates.values in the config, or use `| default(...)`)"
        ),
        (_, Some(expr)) => format!("{} in `{expr}`", e.detail().unwrap_or(&e.kind().to_string())),
        (_, None) => e.detail().map_or_else(|| e.kind().to_string(), str::to_string),
    };
    let location = e
        .line()
        .map(|line| super::source_map::Location { line, column: 1 });
    Diagnostic::error(&source.origin, message).at(location)
}
