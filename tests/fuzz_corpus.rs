//! The fuzz corpora as a regression test on the stable toolchain: every
//! file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` runs
//! once through the same function the `cargo fuzz` target calls
//! (`subtask::fuzzing`), so what the fuzzer found and checked stays
//! checked in `cargo test --all-features` (`docs/fuzzing.md`).

use std::path::{Path, PathBuf};

use subtask::fuzzing::TARGETS;

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `target` over its corpus and regressions; returns how many inputs ran.
fn run(target: &str, body: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        for file in files(&root.join(dir).join(target)) {
            let data = std::fs::read(&file).expect("a readable corpus file");
            let outcome = std::panic::catch_unwind(|| body(&data));
            if let Err(e) = outcome {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                panic!("{target}: {} fails: {msg}", file.display());
            }
            n += 1;
        }
    }
    n
}

fn target(name: &str) -> fn(&[u8]) {
    TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .expect("a known target")
}

#[test]
fn the_server_entry_corpus_passes() {
    let n = run("server_entry", target("server_entry"));
    assert!(n > 0, "the server_entry corpus is committed");
}

#[test]
fn the_stored_state_corpus_passes() {
    let n = run("stored_state", target("stored_state"));
    assert!(n > 0, "the stored_state corpus is committed");
}

#[test]
fn the_client_answers_corpus_passes() {
    let n = run("client_answers", target("client_answers"));
    assert!(n > 0, "the client_answers corpus is committed");
}

#[test]
fn every_target_has_its_corpus_directory() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (name, _) in TARGETS {
        assert!(root.join(name).is_dir(), "fuzz/corpus/{name} exists");
    }
}
