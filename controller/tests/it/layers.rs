//! Holds the line between the controller's layers (see `src/lib.rs`): `api` and `core` are
//! pure and import nothing below them, and no controller names a concrete cloud. A violation
//! fails here with the file, line and rule, so a shortcut is caught in review rather than
//! found as an import cycle later.

use std::path::{Path, PathBuf};

/// The Rust files of a folder (recursively), or the file itself.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    if dir.is_file() {
        return vec![dir.to_path_buf()];
    }
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// (file:line, rule) for every line of the layer's files that names a forbidden thing.
/// Comments are skipped: a doc may say what the layer must not do.
fn violations(layer: &str, forbidden: &[(&str, &str)]) -> Vec<String> {
    let src = src();
    let files = rust_files(&src.join(layer));
    assert!(!files.is_empty(), "no Rust files under src/{layer}");
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for (needle, rule) in forbidden {
                if code.contains(needle) {
                    let rel = file.strip_prefix(&src).unwrap_or(&file).display();
                    found.push(format!("src/{rel}:{}: {rule} (`{needle}`)", n + 1));
                }
            }
        }
    }
    found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

const BELOW_THE_CORE: [(&str, &str); 7] = [
    ("crate::cloud", "the pure layers do not know the cloud"),
    (
        "crate::controllers",
        "the pure layers do not know the controllers",
    ),
    ("crate::runtime", "the pure layers do not know the process"),
    ("crate::metrics", "the pure layers count nothing"),
    ("crate::settings", "settings come in as arguments"),
    ("crate::clients", "the pure layers make no connections"),
    ("aws_sdk_", "no AWS SDK in the pure layers"),
];

const NO_IO: [(&str, &str); 4] = [
    (".await", "pure code does not wait"),
    ("kube::Client", "pure code has no API client"),
    ("kube::api::Api", "pure code has no API client"),
    ("tokio", "pure code has no runtime"),
];

#[test]
fn api_imports_nothing_below_it_and_does_no_io() {
    let mut rules = BELOW_THE_CORE.to_vec();
    rules.extend(NO_IO);
    rules.push(("crate::core", "the API types do not depend on the core"));
    let found = violations("api", &rules);
    assert!(
        found.is_empty(),
        "layer rules broken:\n{}",
        found.join("\n")
    );
}

#[test]
fn core_imports_only_the_api_and_does_no_io() {
    let mut rules = BELOW_THE_CORE.to_vec();
    rules.extend(NO_IO);
    let found = violations("core", &rules);
    assert!(
        found.is_empty(),
        "layer rules broken:\n{}",
        found.join("\n")
    );
}

#[test]
fn controllers_see_the_cloud_only_through_its_trait() {
    let found = violations(
        "controllers",
        &[
            (
                "cloud::aws",
                "controllers use the CloudProvider trait, never AWS",
            ),
            (
                "cloud::sim",
                "controllers use the CloudProvider trait, never the simulator",
            ),
            ("aws_sdk_", "controllers make no AWS calls of their own"),
        ],
    );
    assert!(
        found.is_empty(),
        "layer rules broken:\n{}",
        found.join("\n")
    );
}

#[test]
fn controllers_do_not_import_each_other() {
    let dir = src().join("controllers");
    // Each controller: a file, or a folder with a mod.rs.
    let controllers: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("src/controllers")
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_stem()?.to_str()?.to_string();
            let rel = path.strip_prefix(src()).ok()?.display().to_string();
            (name != "mod").then_some((name, rel))
        })
        .collect();
    assert!(controllers.len() > 5, "found only {controllers:?}");
    let mut found = Vec::new();
    for (name, rel) in &controllers {
        let needles: Vec<(String, String)> = controllers
            .iter()
            .filter(|(other, _)| other != name)
            .flat_map(|(other, _)| {
                let rule = format!("controller {name} imports controller {other}");
                [
                    (format!("controllers::{other}"), rule.clone()),
                    (format!("super::{other}"), rule),
                ]
            })
            .collect();
        let needles: Vec<(&str, &str)> = needles
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        found.extend(violations(rel, &needles));
    }
    assert!(
        found.is_empty(),
        "layer rules broken:\n{}",
        found.join("\n")
    );
}
