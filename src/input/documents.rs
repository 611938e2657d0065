//! Reading YAML input: files, multi-document streams, and typed deserialization whose errors
//! name the file, line, column and field.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::diagnostics::{Diagnostic, InputErrors};
use super::dropped_fields::dropped;
use super::source_map::{Location, SourceMap};

/// Reads a UTF-8 text file, with errors a person can act on.
pub fn read_text(path: &Path) -> Result<String, Diagnostic> {
    std::fs::read_to_string(path).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "file not found".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            std::io::ErrorKind::InvalidData => "not UTF-8 text".to_string(),
            _ if path.is_dir() => "is a directory, expected a YAML file".to_string(),
            _ => e.to_string(),
        };
        Diagnostic::error(path, format!("cannot read: {why}"))
    })
}

/// One YAML stream: its text, its documents as untyped values, and where each field is.
pub struct YamlStream {
    pub file: String,
    pub documents: Vec<serde_yaml::Value>,
    pub map: SourceMap,
}

impl YamlStream {
    /// Parses every document of `text`; empty documents (e.g. after a trailing `---`) are kept
    /// as `Null` so document indexes match the source map.
    pub fn parse(file: impl AsRef<Path>, text: &str) -> Result<Self, Diagnostic> {
        let file = file.as_ref().display().to_string();
        let mut documents = Vec::new();
        for document in serde_yaml::Deserializer::from_str(text) {
            let value = serde_yaml::Value::deserialize(document).map_err(|e| {
                Diagnostic::error(&file, format!("invalid YAML: {}", yaml_message(&e)))
                    .at(yaml_location(&e))
            })?;
            documents.push(value);
        }
        Ok(YamlStream {
            file,
            documents,
            map: SourceMap::new(text),
        })
    }

    /// Deserializes document `doc` into `T`; an error names the field and its location.
    pub fn typed<T: DeserializeOwned>(&self, doc: usize) -> Result<T, Diagnostic> {
        let value = self.documents[doc].clone();
        serde_path_to_error::deserialize(value).map_err(|e| {
            let field = e.path().to_string();
            let field = if field == "." { String::new() } else { field };
            Diagnostic::error(&self.file, yaml_message(e.inner())).field(&self.map, doc, &field)
        })
    }
}

impl YamlStream {
    /// As [`YamlStream::typed`], for types that ignore fields they do not know (Kubernetes'
    /// own): a field the type would drop is refused, located, rather than lost.
    pub fn typed_keeping_all<T: DeserializeOwned + Serialize>(
        &self,
        doc: usize,
        what: &str,
    ) -> Result<T, InputErrors> {
        let value: T = self.typed(doc)?;
        let input = serde_json::to_value(&self.documents[doc]).unwrap_or_default();
        let back = serde_json::to_value(&value).unwrap_or_default();
        let problems: Vec<Diagnostic> = dropped(&input, &back)
            .into_iter()
            .map(|path| {
                let name = path.rsplit(['.', '[']).next().unwrap_or(&path).to_string();
                Diagnostic::error(
                    &self.file,
                    format!("unknown field `{name}`: not a field of a Kubernetes {what} (it would be ignored); check its spelling against the {what} API"),
                )
                .field(&self.map, doc, &path)
            })
            .collect();
        if problems.is_empty() {
            Ok(value)
        } else {
            Err(InputErrors(problems))
        }
    }
}

fn yaml_location(e: &serde_yaml::Error) -> Option<Location> {
    e.location().map(|l| Location {
        line: l.line(),
        column: l.column(),
    })
}

/// serde_yaml appends " at line X column Y" to its messages; the location is reported
/// separately, so keep the message short.
fn yaml_message(e: &serde_yaml::Error) -> String {
    let text = e.to_string();
    match text.find(" at line ") {
        Some(cut) => text[..cut].to_string(),
        None => text,
    }
}

/// Reads and parses a YAML file that must not be empty (`what` says what it should hold).
pub fn read_stream(path: &Path, what: &str) -> Result<YamlStream, Diagnostic> {
    let text = read_text(path)?;
    if is_blank(&text) {
        return Err(Diagnostic::error(
            path,
            format!("the file is empty: expected {what}"),
        ));
    }
    YamlStream::parse(path, &text)
}

/// True when a text holds nothing but whitespace and comments.
pub fn is_blank(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#') || l == "---")
}
