//! Located problems in user input, reported all together: file, line, column, field path, what
//! is wrong and what would be valid.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use super::source_map::{Location, SourceMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: String,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// Field path inside the document, e.g. `spec.template.spec.requirements[0]`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub field: String,
    /// The object the problem is in, e.g. `NodePool/default`, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// A short stable identifier for lint warnings (e.g. `no-limits`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<&'static str>,
    pub message: String,
}

impl Diagnostic {
    pub fn error(file: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: file.as_ref().display().to_string(),
            location: None,
            field: String::new(),
            object: None,
            rule: None,
            message: message.into(),
        }
    }

    pub fn warning(file: impl AsRef<Path>, rule: &'static str, message: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            rule: Some(rule),
            ..Diagnostic::error(file, message)
        }
    }

    pub fn at(mut self, location: Option<Location>) -> Self {
        self.location = location;
        self
    }

    /// Points the diagnostic at `field` of document `doc`, located through `map`.
    pub fn field(mut self, map: &SourceMap, doc: usize, field: &str) -> Self {
        self.location = map.locate(doc, field).or(self.location);
        self.field = field.to_string();
        self
    }

    pub fn object(mut self, object: impl Into<String>) -> Self {
        self.object = Some(object.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(l) = self.location {
            write!(f, ":{}:{}", l.line, l.column)?;
        }
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, ": {severity}")?;
        if let Some(rule) = self.rule {
            write!(f, "[{rule}]")?;
        }
        f.write_str(":")?;
        if let Some(object) = &self.object {
            write!(f, " {object}")?;
        }
        if !self.field.is_empty() {
            write!(f, " {}:", self.field)?;
        }
        write!(f, " {}", self.message)
    }
}

/// The error every command returns when its input is wrong: all the problems found.
#[derive(Debug, thiserror::Error)]
#[error("{} problem(s) found", .0.len())]
pub struct InputErrors(pub Vec<Diagnostic>);

impl From<Diagnostic> for InputErrors {
    fn from(d: Diagnostic) -> Self {
        InputErrors(vec![d])
    }
}
