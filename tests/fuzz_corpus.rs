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
            // Each input on its own thread, with a hang guard (libFuzzer's
            // -timeout plays this part when fuzzing).
            let (done, ended) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = done.send(std::panic::catch_unwind(|| body(&data)));
            });
            let outcome = ended
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{target}: {} does not finish within 60 s", file.display()));
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
fn the_bearer_tokens_corpus_passes() {
    let n = run("bearer_tokens", target("bearer_tokens"));
    assert!(n > 0, "the bearer_tokens corpus is committed");
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

/// Found by `stored_state` (fuzz/regressions/stored_state/text-task-id): a
/// task id stored as TEXT made opening the database fail as an I/O error;
/// it is damage, reported as such, and nothing is changed.
#[test]
fn a_task_id_stored_as_text_is_reported_as_damage_not_as_io() {
    use subtask::core::{Forest, encode_state};
    use subtask::model::{RootOptions, Timestamp};
    use subtask::store::{
        SqliteConfig, SqliteStore, StoreError, StoredTask, TaskStore, TreeMeta, WriteBatch, WriteOp,
    };

    let dir = std::env::temp_dir().join(format!("subtask-fuzz-regression-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let path = dir.join("tasks.db");
    {
        let store = SqliteStore::open(SqliteConfig::new(&path)).expect("a new database opens");
        let mut forest = Forest::default();
        let root = forest
            .create_root(Timestamp::from_millis(1_000), RootOptions::default())
            .expect("a root");
        let rec = forest.task(root).expect("the root");
        let task = StoredTask {
            id: root,
            root,
            parent: None,
            position: 0,
            version: 1,
            state: encode_state(rec),
        };
        let meta = TreeMeta {
            root,
            owner: None,
            resumable: false,
            launch: None,
        };
        store.submit(WriteBatch {
            root,
            version: 1,
            ops: vec![WriteOp::PutTree(meta), WriteOp::PutTask(task)],
        });
        store.flush().expect("the tree is written");
    }
    let conn = rusqlite::Connection::open(&path).expect("the file opens in SQLite");
    conn.execute("UPDATE tasks SET id = 'not a blob'", [])
        .expect("the row is damaged");
    drop(conn);
    match SqliteStore::open(SqliteConfig::new(&path)) {
        Err(StoreError::Corrupt(m)) => assert!(m.contains("Invalid column type"), "{m}"),
        Err(other) => panic!("a TEXT task id is damage, not {other:?}"),
        Ok(_) => panic!("a database with a TEXT task id opens"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs a tree on a fresh runtime with one scheduler slot (a root, a busy
/// subtask, and a subtask that waits: for the slot, for the busy one with
/// `after`, paused with `pause`; with `handle`, its handler holds the busy
/// one's handle, as `deep_research` keeps its subtasks' handles), drops
/// everything, and returns how many owners a value moved into the waiting
/// subtask's handler still has (1: only the test's).
fn owners_after_drop(pause: bool, after: bool, handle: bool) -> usize {
    use std::sync::Arc;
    use std::time::Duration;
    use subtask::model::{ClientView, JsonObject, RootOptions};
    use subtask::runtime::{Runtime, RuntimeConfig, SubtaskOptions};

    let sentinel = Arc::new(());
    let held = sentinel.clone();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    tokio.block_on(async move {
        let rt = Runtime::new(RuntimeConfig {
            max_running: 1,
            ..RuntimeConfig::default()
        });
        let root = rt.spawn(RootOptions::default(), move |ctx| async move {
            let busy = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
                loop {
                    ctx.checkpoint().await?;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })?;
            let opts = if after {
                SubtaskOptions::default().after(&[&busy])
            } else {
                SubtaskOptions::default()
            };
            let busy_handle = handle.then(|| busy.clone());
            let _waiting = ctx.spawn_subtask(opts, move |_ctx| async move {
                let _held = (held, busy_handle);
                Ok(JsonObject::new())
            })?;
            loop {
                ctx.checkpoint().await?;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        if pause {
            rt.pause(root, ClientView::PAUSE_AWARE).expect("the root pauses");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    });
    drop(tokio);
    std::sync::Arc::strong_count(&sentinel)
}

/// Found by `server_entry` under LeakSanitizer
/// (fuzz/regressions/server_entry/leak-paused-queued-child and
/// leak-deep-research-handle-cycle): a job parked in its own tree (a
/// subtask paused before it could start, or waiting for a dependency) held
/// that tree, and through a captured handle the runtime itself, so dropping
/// the runtime (or the tokio runtime under it) never freed the tree, its
/// handlers' captures or the tokio timer wheel they reached.
#[test]
fn dropping_a_runtime_frees_subtasks_that_never_started() {
    for handle in [false, true] {
        assert_eq!(
            owners_after_drop(false, false, handle),
            1,
            "a queued subtask ({handle})"
        );
        assert_eq!(
            owners_after_drop(true, false, handle),
            1,
            "paused before it started ({handle})"
        );
        assert_eq!(
            owners_after_drop(false, true, handle),
            1,
            "waiting for a dependency ({handle})"
        );
        assert_eq!(owners_after_drop(true, true, handle), 1, "both ({handle})");
    }
}

/// Found by `client_answers` (fuzz/regressions/client_answers/
/// timeout-spin-while-polls-full, minimized to spin-minimal): with every
/// poll slot taken by a request the server does not answer and another
/// task due, the walk's timer was armed at a past instant and fired at
/// once, again and again: a busy loop for as long as the request took
/// (with a paused clock, forever). The walk must end (here with the
/// silent request's timeout and the retries after it); the bound is a
/// hang guard, not a timing assertion.
#[test]
fn a_walk_with_every_poll_slot_taken_waits_instead_of_spinning() {
    let script = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions/client_answers/spin-minimal"),
    )
    .expect("the reproducer");
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        target("client_answers")(&script);
        let _ = done.send(());
    });
    ended
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the walk ends instead of spinning");
}
