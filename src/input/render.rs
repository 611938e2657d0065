//! `jointer render`: config → templates → typed, validated Karpenter objects.

use std::collections::HashMap;

use super::config::LoadedConfig;
use super::diagnostics::{Diagnostic, InputErrors};
use super::documents::YamlStream;
use super::manifest::{check_unique, read_objects, Located, Object};
use super::node_templates;
use super::source_map::SourceMap;

/// Rendered, validated objects and the source maps of the rendered text they came from.
pub struct NodeObjects {
    pub objects: Vec<Located>,
    pub maps: HashMap<String, SourceMap>,
}

/// The node objects a config renders to, validated; every problem in every template reported.
pub fn node_objects(loaded: &LoadedConfig) -> Result<NodeObjects, InputErrors> {
    let rendered = node_templates::render(loaded)?;
    let mut out = NodeObjects {
        objects: Vec::new(),
        maps: HashMap::new(),
    };
    let mut problems = Vec::new();
    for r in rendered {
        let stream = match YamlStream::parse(format!("{} (rendered)", r.origin), &r.text) {
            Ok(stream) => stream,
            Err(d) => {
                problems.push(d);
                continue;
            }
        };
        match read_objects(&stream) {
            Ok(mut o) => out.objects.append(&mut o),
            Err(InputErrors(mut p)) => problems.append(&mut p),
        }
        out.maps.insert(stream.file, stream.map);
    }
    // `apply` converges, prunes and tears down NodePools and EC2NodeClasses only; an overlay
    // it would silently leave out must not look applied.
    for o in &out.objects {
        if let Object::NodeOverlay(_) = o.object {
            problems.push(
                Diagnostic::error(
                    &o.file,
                    "NodeOverlays are not applied from node templates yet: apply them with kubectl, or pass them to `jointer simulate --nodepools`",
                )
                .object(o.object.id()),
            );
        }
    }
    if !problems.is_empty() {
        return Err(InputErrors(problems));
    }
    check_unique(&out.objects)?;
    Ok(out)
}
