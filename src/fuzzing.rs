//! The bodies of the fuzz targets (`fuzz/fuzz_targets/`): each takes arbitrary bytes to one
//! input surface and must return, never panic, whatever the bytes. The corpus replay test
//! (`tests/it/fuzz_corpus.rs`) runs the same bodies over the kept corpus on stable Rust.

use std::path::Path;

use minijinja::{Environment, UndefinedBehavior};

use crate::commands::convert::convert_streams;
use crate::input::config::load_text;
use crate::input::documents::YamlStream;
use crate::input::{lint, manifest, render, workload};

/// A fuzz target's body: any bytes in, never a panic.
pub type Body = fn(&[u8]);

/// The fuzz targets, by name (the file names under `fuzz/fuzz_targets/` and `fuzz/corpus/`).
pub const TARGETS: [(&str, Body); 5] = [
    ("config", config),
    ("template", template),
    ("manifests", manifests),
    ("interruption", interruption),
    ("quantities", quantities),
];

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// `jointer.yaml`: loaded, its node templates rendered and read, and linted.
pub fn config(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(loaded) = load_text(Path::new("fuzz/jointer.yaml"), text) else {
        return;
    };
    // A template directory would be read from the disk: only built-in templates here.
    if loaded.config.templates.dir.is_some() {
        return;
    }
    if let Ok(nodes) = render::node_objects(&loaded) {
        let _ = lint::lint(&loaded.config, &nodes);
    }
}

/// A node template's text, rendered with the bundled example's values and read as objects.
pub fn template(data: &[u8]) {
    let Some(source) = text(data) else { return };
    let config = "cluster: { name: fuzz, region: us-east-1 }\ntemplates: { values: { team: a, sizes: [large, xlarge] } }\n";
    let Ok(loaded) = load_text(Path::new("fuzz/jointer.yaml"), config) else {
        return;
    };
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(crate::input::node_templates::TEMPLATE_FUEL));
    let ctx = crate::input::node_templates::context(&loaded);
    let Ok(rendered) = env.render_str(source, &ctx) else {
        return;
    };
    if let Ok(stream) = YamlStream::parse("fuzz/nodes.yaml", &rendered) {
        let _ = manifest::read_objects(&stream);
    }
}

/// Kubernetes manifests as `simulate` (workloads, node objects) and `convert` read them.
pub fn manifests(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(stream) = YamlStream::parse("fuzz/manifests.yaml", text) else {
        return;
    };
    if let Ok(objects) = manifest::read_objects(&stream) {
        let _ = manifest::check_unique(&objects);
    }
    let _ = workload::read(std::slice::from_ref(&stream));
    let _ = convert_streams(vec![stream]);
}

/// An interruption queue message body.
pub fn interruption(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let _ = jointer_controller::core::interruption::parse(text);
}

/// Quantities and durations, as NodePools, pods and settings write them.
pub fn quantities(data: &[u8]) {
    let Some(text) = text(data) else { return };
    if let Ok(q) = text.parse::<jointer_controller::api::Quantity>() {
        let _ = (q.millis(), q.units_ceil());
    }
    let _ = jointer_controller::api::duration::parse_duration(text);
}
