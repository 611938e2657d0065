//! Where each field of a YAML file is: a map from field paths (`spec.requirements[0].key`) to
//! line and column, per document. Used to point every error at the line a person must edit,
//! including errors found after parsing (validation, lint).

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// A 1-based line and column in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

/// Field locations of every document of one YAML stream.
#[derive(Debug, Default)]
pub struct SourceMap {
    documents: Vec<HashMap<String, Location>>,
    /// `(doc, from, to)`: fields under `from` are looked up under `to` (fields that a
    /// conversion moved, located where the user wrote them).
    aliases: Vec<(usize, String, String)>,
}

impl SourceMap {
    /// Indexes `text`. A stream the YAML parser rejects yields the documents read before the
    /// error (the parse error itself is reported by the deserializer, with its own location).
    pub fn new(text: &str) -> Self {
        let mut builder = Builder::default();
        let _ = Parser::new_from_str(text).load(&mut builder, true);
        SourceMap {
            documents: builder.documents,
            aliases: Vec::new(),
        }
    }

    /// Makes lookups of `from` (and fields under it) in document `doc` resolve to `to`.
    pub fn alias(&mut self, doc: usize, from: &str, to: &str) {
        self.aliases.push((doc, from.to_string(), to.to_string()));
    }

    /// The location of `path` in document `doc`, or of its closest enclosing field.
    pub fn locate(&self, doc: usize, path: &str) -> Option<Location> {
        let fields = self.documents.get(doc)?;
        let aliased = self.aliases.iter().find_map(|(d, from, to)| {
            let rest = path.strip_prefix(from.as_str())?;
            (*d == doc && (rest.is_empty() || rest.starts_with(['.', '['])))
                .then(|| format!("{to}{rest}"))
        });
        let mut path = aliased.as_deref().unwrap_or(path);
        loop {
            if let Some(location) = fields.get(path) {
                return Some(*location);
            }
            if path.is_empty() {
                return None;
            }
            path = parent(path);
        }
    }
}

fn parent(path: &str) -> &str {
    let cut = path.rfind(['.', '[']).unwrap_or(0);
    &path[..cut]
}

enum Frame {
    Mapping { path: String, key: Option<String> },
    Sequence { path: String, index: usize },
}

#[derive(Default)]
struct Builder {
    documents: Vec<HashMap<String, Location>>,
    stack: Vec<Frame>,
}

impl Builder {
    fn record(&mut self, path: String, mark: Marker) {
        if let Some(doc) = self.documents.last_mut() {
            doc.entry(path).or_insert(Location {
                line: mark.line(),
                column: mark.col() + 1,
            });
        }
    }

    /// Called for every node; returns the node's path (None when the node is a mapping key).
    /// A block mapping's start mark is unreliable (it can point past its first key), so a
    /// mapping is located at its first key instead.
    fn node(&mut self, mark: Marker, scalar: Option<&str>, mapping: bool) -> Option<String> {
        match self.stack.last_mut() {
            None => {
                self.record(String::new(), mark);
                Some(String::new())
            }
            Some(Frame::Sequence { path, index }) => {
                let item = format!("{path}[{index}]");
                *index += 1;
                if !mapping {
                    self.record(item.clone(), mark);
                }
                Some(item)
            }
            Some(Frame::Mapping { path, key }) => match key.take() {
                Some(key) => Some(join(path, &key)),
                None => {
                    let name = scalar.unwrap_or("?").to_string();
                    let (mapping_path, field) = (path.clone(), join(path, &name));
                    *key = Some(name);
                    self.record(mapping_path, mark);
                    self.record(field, mark);
                    None
                }
            },
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        match event {
            Event::DocumentStart => {
                self.documents.push(HashMap::new());
                self.stack.clear();
            }
            Event::Scalar(value, ..) => {
                self.node(mark, Some(&value), false);
            }
            Event::Alias(_) => {
                self.node(mark, None, false);
            }
            Event::MappingStart(..) => {
                let path = self.node(mark, None, true).unwrap_or_default();
                self.stack.push(Frame::Mapping { path, key: None });
            }
            Event::SequenceStart(..) => {
                let path = self.node(mark, None, false).unwrap_or_default();
                self.stack.push(Frame::Sequence { path, index: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "a: 1\nspec:\n  items:\n    - key: x\n      values: [p, q]\n    - { key: y }\n---\nb:\n  c: true\n";

    #[test]
    fn locates_keys_and_sequence_items() {
        let map = SourceMap::new(TEXT);
        let at = |doc, path| map.locate(doc, path).map(|l| (l.line, l.column));
        assert_eq!(at(0, "a"), Some((1, 1)));
        assert_eq!(at(0, "spec.items"), Some((3, 3)));
        assert_eq!(at(0, "spec.items[0]"), Some((4, 7)));
        assert_eq!(at(0, "spec.items[0].values"), Some((5, 7)));
        assert_eq!(at(0, "spec.items[0].values[1]"), Some((5, 19)));
        assert_eq!(at(0, "spec.items[1].key"), Some((6, 9)));
        assert_eq!(at(1, "b.c"), Some((9, 3)));
    }

    #[test]
    fn falls_back_to_the_closest_enclosing_field() {
        let map = SourceMap::new(TEXT);
        assert_eq!(
            map.locate(0, "spec.items[0].minValues").map(|l| l.line),
            Some(4)
        );
        assert_eq!(map.locate(0, "nothing.here").map(|l| l.line), Some(1));
        assert_eq!(map.locate(5, "a"), None);
    }
}
