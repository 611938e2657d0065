//! The fuzz corpus and every crash input the fuzzer found (`fuzz/corpus/`, `fuzz/regressions/`)
//! replayed through the fuzz targets' own bodies on stable Rust: no input may panic.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::support::testenv::repo_root;

#[test]
fn every_kept_fuzz_input_is_handled_without_a_panic() {
    let fuzz = repo_root().join("fuzz");
    let mut replayed: BTreeMap<&str, usize> = BTreeMap::new();
    let mut panicked = Vec::new();
    for (target, body) in jointer::fuzzing::TARGETS {
        for kept in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(fuzz.join(kept).join(target)) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let data = std::fs::read(&path).expect("readable fuzz input");
                if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
                    panicked.push(path.display().to_string());
                }
                *replayed.entry(target).or_default() += 1;
            }
        }
    }
    eprintln!("fuzz inputs replayed: {replayed:?}");
    assert!(panicked.is_empty(), "inputs that panic: {panicked:#?}");
    for (target, _) in jointer::fuzzing::TARGETS {
        assert!(
            replayed.get(target).copied().unwrap_or(0) > 0,
            "no kept inputs for fuzz target {target}"
        );
    }
}
