//! The stored-state decoder: hostile rows in the SQLite store's table, read
//! back and brought back as a restart would.
//!
//! # Input
//!
//! Text, one row of the `tasks` table per line (at most [`MAX_ROWS`]), its
//! nine columns separated by tabs in the order the store selects them:
//! `id root parent position version state owner resumable launch` (missing
//! trailing columns are NULL). SQLite columns hold any type, so each cell
//! says what it is:
//!
//! * `-`: NULL;
//! * `#N`: a 16-byte BLOB, the task id `N` (decimal);
//! * `xHEX`: a BLOB of those bytes (a task id of the wrong length);
//! * `iN`: an INTEGER; `fN`: a REAL;
//! * anything else: TEXT, as written (the JSON state, an owner, a launch).
//!
//! A row the schema refuses (NULL in a NOT NULL column) is left out, as
//! SQLite itself would refuse it.
//!
//! # Properties
//!
//! The rows are read back with the store's own query and decoding
//! (`read_back`: the scan `SqliteStore::open` makes, then `load`) and restored as [`Runtime::adopt`] does, then:
//!
//! * a failure is a clear [`StoreError::Corrupt`] or a
//!   [`RestoreError`](crate::core::RestoreError) naming the tree, never a
//!   panic, and `adopt` refuses exactly the input whose restore failed;
//! * an accepted tree keeps every invariant, holds every stored task once,
//!   encodes and restores again to the same snapshots, and keeps its
//!   invariants through what a restart does next (the lost handlers fail,
//!   a resumable root is queued again), a cancel and every timer firing.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::types::Value as Sql;

use crate::core::{ClientView, Forest, ForestConfig, TaskRecord, decode_state, encode_state};
use crate::model::{JsonObject, RootOptions, TaskId, Timestamp};
use crate::runtime::{Owner, Runtime, RuntimeConfig};
use crate::store::{StoreError, StoredTree, read_back, scratch_database};

/// Rows per input; the rest is ignored.
pub const MAX_ROWS: usize = 64;

/// The restore time of every input (2027-01-15), so runs repeat.
const NOW_MS: u64 = 1_800_000_000_000;

fn cell(s: &str) -> Sql {
    let s = s.trim_end_matches('\r');
    if s == "-" {
        return Sql::Null;
    }
    if let Some(n) = s.strip_prefix('#')
        && let Ok(n) = n.parse::<u128>()
    {
        return Sql::Blob(n.to_be_bytes().to_vec());
    }
    if let Some(hex) = s.strip_prefix('x')
        && hex.len() % 2 == 0
        && let Some(bytes) = (0..hex.len())
            .step_by(2)
            .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
            .collect::<Option<Vec<u8>>>()
    {
        return Sql::Blob(bytes);
    }
    if let Some(n) = s.strip_prefix('i')
        && let Ok(n) = n.parse::<i64>()
    {
        return Sql::Integer(n);
    }
    if let Some(f) = s.strip_prefix('f')
        && let Ok(f) = f.parse::<f64>()
    {
        return Sql::Real(f);
    }
    Sql::Text(s.to_owned())
}

fn rows(data: &[u8]) -> Vec<Vec<Sql>> {
    let text = String::from_utf8_lossy(data);
    text.lines()
        .filter(|l| !l.is_empty())
        .take(MAX_ROWS)
        .map(|line| {
            let mut cells: Vec<Sql> = line.split('\t').take(9).map(cell).collect();
            cells.resize(9, Sql::Null);
            cells
        })
        .collect()
}

/// Runs one input (see the module docs).
pub fn stored_state(data: &[u8]) {
    let conn = scratch_database().expect("an in-memory database opens");
    for row in rows(data) {
        // NOT NULL and type affinity are SQLite's; a refused row is not stored.
        let _ = conn.execute(
            "INSERT INTO tasks (id, root, parent, position, version, state, owner, resumable, launch)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            rusqlite::params_from_iter(row),
        );
    }
    let trees = match read_back(conn) {
        Ok(trees) => trees,
        Err(StoreError::Corrupt(m)) => {
            assert!(!m.is_empty(), "a damaged row is named");
            return;
        }
        Err(other) => panic!("reading rows back fails only as corrupt data, not {other:?}"),
    };
    check_grouping(&trees);
    let config = Arc::new(ForestConfig::default());
    let now = Timestamp::from_millis(NOW_MS);
    for tree in &trees {
        match restore(&config, tree, now) {
            Ok(forest) => check_forest(forest, tree, now),
            Err(e) => assert!(!e.is_empty(), "a refused tree says why"),
        }
    }
    check_adopt(trees);
}

/// Every row is in the one tree of its root, trees in first-seen order.
fn check_grouping(trees: &[StoredTree]) {
    let mut roots = std::collections::HashSet::new();
    for tree in trees {
        assert!(
            roots.insert(tree.meta.root),
            "tree {} is listed twice",
            tree.meta.root
        );
        for t in &tree.tasks {
            assert_eq!(t.root, tree.meta.root, "task {} is grouped under its root", t.id);
        }
    }
}

/// The runtime's restore of one tree: decode every record, then rebuild.
fn restore(config: &Arc<ForestConfig>, tree: &StoredTree, now: Timestamp) -> Result<Forest, String> {
    let mut records: Vec<TaskRecord> = Vec::with_capacity(tree.tasks.len());
    for t in &tree.tasks {
        let rec = decode_state(t.id, t.root, t.parent, t.position, &t.state)
            .map_err(|e| format!("task {}: {e}", t.id))?;
        records.push(rec);
    }
    Forest::restore(config.clone(), tree.meta.root, records, now).map_err(|e| e.to_string())
}

fn check_forest(mut forest: Forest, tree: &StoredTree, now: Timestamp) {
    let root = tree.meta.root;
    forest
        .check_invariants()
        .unwrap_or_else(|v| panic!("a restored tree breaks an invariant: {v}"));
    assert_eq!(
        forest.len(),
        tree.tasks.len(),
        "every stored task is in the tree once"
    );
    for t in &tree.tasks {
        assert!(forest.contains(t.id), "stored task {} is in the tree", t.id);
    }
    // What it encodes to restores to the same tree.
    let view = ClientView::PAUSE_AWARE;
    let again: Vec<TaskRecord> = forest
        .ids()
        .map(|id| {
            let r = forest.task(id).expect("listed");
            decode_state(r.id, r.root, r.parent(), r.position, &encode_state(r))
                .unwrap_or_else(|e| panic!("a restored task does not decode after encoding: {e}"))
        })
        .collect();
    let twin = Forest::restore(*forest.config(), root, again, forest.now())
        .unwrap_or_else(|e| panic!("a restored tree does not restore again: {e}"));
    for id in forest.ids() {
        assert_eq!(
            twin.snapshot(id, view),
            forest.snapshot(id, view),
            "task {id} is the same after encoding"
        );
    }
    assert_eq!(twin.next_deadline(), forest.next_deadline());
    // What a restart does next, then a cancel, then every timer.
    let later = Timestamp::from_millis(now.as_millis() + 1);
    let recovery = forest.recover_after_restart(later, root, tree.meta.resumable);
    let _ = forest.drain_effects();
    forest
        .check_invariants()
        .unwrap_or_else(|v| panic!("recovery breaks an invariant: {v}"));
    for id in forest.ids() {
        let rec = forest.task(id).expect("listed");
        assert!(
            rec.is_terminal() || recovery.rerun == Some(root) || rec.active().is_some(),
            "task {id} is settled after recovery"
        );
    }
    let _ = forest.cancel(later, root);
    let _ = forest.drain_effects();
    forest
        .check_invariants()
        .unwrap_or_else(|v| panic!("a cancel after recovery breaks an invariant: {v}"));
    let mut at = later;
    for _ in 0..64 {
        let Some(deadline) = forest.next_deadline() else {
            break;
        };
        at = at.max(deadline);
        forest.handle_timeout(at);
        let _ = forest.drain_effects();
        forest
            .check_invariants()
            .unwrap_or_else(|v| panic!("a timer after recovery breaks an invariant: {v}"));
    }
}

/// The runtime's own recovery agrees: it refuses exactly what does not
/// restore at its time, and serves every task it took.
fn check_adopt(trees: Vec<StoredTree>) {
    let ids: Vec<TaskId> = trees.iter().flat_map(|t| t.tasks.iter().map(|t| t.id)).collect();
    super::paused_runtime().block_on(async move {
        let runtime = Runtime::new(RuntimeConfig::default());
        // The runtime's clock is the wall clock at its start, and stands
        // still while nothing sleeps: a task created now shows its time.
        let clock = runtime.spawn(RootOptions::default(), |_ctx| async { Ok(JsonObject::new()) });
        let now = runtime
            .get(clock, ClientView::PAUSE_AWARE)
            .expect("a task just created is served")
            .task()
            .created_at;
        let config = Arc::new(runtime.config().forest);
        let expected = trees.iter().all(|t| restore(&config, t, now).is_ok());
        let adopted = runtime
            .adopt(trees, |name| Owner::new(name, usize::MAX), |_| async { None })
            .await;
        match adopted {
            Ok(report) => {
                assert!(expected, "the runtime adopted a tree that does not restore");
                assert_eq!(report.tasks, ids.len());
                for id in &ids {
                    assert!(
                        runtime.get(*id, ClientView::PAUSE_AWARE).is_some(),
                        "adopted task {id} is served"
                    );
                }
                // Let the recovered tasks' timers run.
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            Err(StoreError::Corrupt(m)) => {
                assert!(!expected, "the runtime refused trees that restore: {m}");
            }
            Err(other) => panic!("adopt fails only as corrupt data, not {other:?}"),
        }
    });
}
