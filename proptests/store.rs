//! Property tests of the stores (`subtask::store`): the SQLite backend and,
//! with the `postgres` feature, the PostgreSQL backend must be observably
//! the same store as the in-memory reference, also across a close and
//! reopen, and what they hold must restore into the same trees the core had.
//! PostgreSQL is a real server (`SUBTASK_TEST_PG`, started by
//! `scripts/pg.sh`; each case gets a database of its own, dropped when the
//! case ends, passed or failed, so that a deep run holds a bounded number of
//! them); without it the PostgreSQL cases fail, they do not skip.
//!
//! The command sequences are the lifecycle property test's
//! (`support/commands.rs`), run through its harness, so every step is still
//! checked against the reference model. After every command its `Changed`,
//! `Created` and `TreeDeleted` effects become one `WriteBatch` per touched
//! tree, exactly as `Inner::absorb` (`src/runtime/tree.rs`) builds them: a
//! `PutTree` first in the batch that creates a root, a `PutTask` with
//! `encode_state` of the record as the command left it for every `Changed`,
//! a `DeleteTree` for a deleted tree, the tree's version incremented per
//! batch. Every batch goes to a `MemoryStore` and to a `SqliteStore` on a
//! real file.
//!
//! At random steps and at the end: `load()` of both stores is equal (trees
//! sorted by root, tasks by id); `get(id)` agrees for every id ever created
//! (deleted ones included) and an unknown one; every stored record is the
//! live record (same position, `encode_state` equal, the version of the batch
//! that last wrote it); `Forest::restore` of every loaded tree passes
//! `check_invariants` and shows every task exactly as the live forest does.
//! Then, at some of those steps, the SQLite store is dropped and reopened
//! (with one batch per commit or unbounded group commit, full or relaxed
//! durability) and everything is compared again; the sequence then goes on
//! writing into the reopened file.
//!
//! `concurrent_writers_group_commit` submits the batches of several harnesses
//! (disjoint trees) from several threads at once into one `SqliteStore`,
//! waits for the last tickets with `wait_durable`, and compares with a memory
//! store fed the same per-tree sequences one thread after the other.
//!
//! The sequences mix the lifecycle test's weights (every command, growing
//! trees, pause-heavy), so stored states include pauses, pending input,
//! queued steers, endings and TTL deletions.
//! `generated_sequences_exercise_the_store` checks over a fixed seed that
//! they do (`PROP_STORE_STATS=1` prints the counts).
//!
//! Cases: `PROPTEST_CASES` if set, else a default sized for a debug build.

#[path = "support/cases.rs"]
mod cases;
#[allow(dead_code)]
#[path = "support/commands.rs"]
mod commands;
#[allow(dead_code)]
#[path = "support/harness/mod.rs"]
mod harness;
#[allow(dead_code)]
#[path = "support/reference.rs"]
mod reference;

use cases::proptest_config;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;
use std::sync::{Arc, Barrier};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use serde_json::json;
use subtask::core::{ClientView, Effect, Forest, ForestConfig, decode_state, encode_state};
use subtask::model::TaskId;
use subtask::store::{
    Durability, MemoryStore, SqliteConfig, SqliteStore, StoredTree, TaskStore, Ticket, TreeMeta, WriteBatch,
    WriteOp,
};
#[cfg(feature = "postgres")]
use subtask::store::{PostgresConfig, PostgresStore};

#[cfg(feature = "postgres")]
#[path = "../tests/support/pg.rs"]
mod pg;

use commands::{Step, Weights, config, steps};
use harness::Harness;

/// Default cases of the sequential property, for `cargo test` in debug.
const DEFAULT_CASES: u32 = 16;
/// Default cases of the concurrent property.
const CONCURRENT_CASES: u32 = 6;

// ----- a temporary directory -----------------------------------------------------

#[path = "../tests/support/tempdir.rs"]
mod tempdir;
use tempdir::TempDir;

// ----- how the SQLite file is opened ---------------------------------------------

/// One way to open the SQLite store.
#[derive(Debug, Clone, Copy)]
struct Open {
    /// `max_batches_per_commit: 1` (else unbounded group commit).
    one_per_commit: bool,
    /// `Durability::Relaxed` (else `Full`).
    relaxed: bool,
    /// `max_batches_per_commit: 3` when not one per commit: a transaction
    /// fills up while an fsync runs and must stop taking batches.
    small_groups: bool,
}

impl Open {
    fn config(self, path: &Path) -> SqliteConfig {
        SqliteConfig {
            durability: if self.relaxed {
                Durability::Relaxed
            } else {
                Durability::Full
            },
            max_batches_per_commit: match (self.one_per_commit, self.small_groups) {
                (true, _) => 1,
                (false, true) => 3,
                (false, false) => usize::MAX,
            },
            ..SqliteConfig::new(path)
        }
    }

    fn store(self, path: &Path) -> Result<SqliteStore, String> {
        SqliteStore::open(self.config(path))
            .map_err(|e| format!("opening {} ({self:?}): {e}", path.display()))
    }

    /// The same choices for the PostgreSQL store on the database `url`.
    #[cfg(feature = "postgres")]
    fn pg(self, url: &str) -> Result<PostgresStore, String> {
        let sqlite = self.config(Path::new(""));
        PostgresStore::open(PostgresConfig {
            durability: sqlite.durability,
            max_batches_per_commit: sqlite.max_batches_per_commit,
            ..PostgresConfig::new(url)
        })
        .map_err(|e| format!("opening PostgreSQL ({self:?}): {e}"))
    }
}

fn open_cfg() -> impl Strategy<Value = Open> {
    // Full durability with one fsync per batch is the slow corner: it is
    // covered, but not in most cases.
    (
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.6),
        any::<bool>(),
    )
        .prop_map(|(one_per_commit, relaxed, small_groups)| Open {
            one_per_commit,
            relaxed,
            small_groups,
        })
}

// ----- turning a command's effects into batches, as the runtime does -----------

/// What the stores were sent, for the checks.
#[derive(Default)]
struct Written {
    /// Per tree: the version of its last batch.
    versions: HashMap<TaskId, u64>,
    /// Per task: the version of the batch that last wrote it.
    last_write: HashMap<TaskId, u64>,
    /// The metadata written for each tree.
    metas: HashMap<TaskId, TreeMeta>,
    /// Every task id ever written, in creation order.
    ids: Vec<TaskId>,
    /// Roots created so far (varies the metadata).
    roots: u64,
    /// What was exercised.
    seen: Coverage,
}

/// What a run exercised, to check that the sequences are not vacuous.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    /// Batches sent.
    batches: u64,
    /// Trees created and deleted.
    put_trees: u64,
    deleted_trees: u64,
    /// Commands that wrote to several trees (timers of several trees).
    multi_tree_commands: u64,
    /// Comparisons of both stores with the forest, and reopens (by way of
    /// opening: one batch per commit with full durability, others).
    compares: u64,
    reopens_full_one_per_commit: u64,
    reopens_other: u64,
    /// Tasks restored and compared snapshot by snapshot, and the most in one tree.
    restored_tasks: u64,
    max_tree: usize,
}

impl Coverage {
    /// One comparison that restored `tasks`, the largest tree `max`.
    fn note(&mut self, (tasks, max): (usize, usize)) {
        self.compares += 1;
        self.restored_tasks += tasks as u64;
        self.max_tree = self.max_tree.max(max);
    }

    fn merge(&mut self, o: &Coverage) {
        self.batches += o.batches;
        self.put_trees += o.put_trees;
        self.deleted_trees += o.deleted_trees;
        self.multi_tree_commands += o.multi_tree_commands;
        self.compares += o.compares;
        self.reopens_full_one_per_commit += o.reopens_full_one_per_commit;
        self.reopens_other += o.reopens_other;
        self.restored_tasks += o.restored_tasks;
        self.max_tree = self.max_tree.max(o.max_tree);
    }
}

/// Metadata for the `n`th tree: every field varies, including JSON that
/// must round-trip exactly (escapes, non-ASCII, nesting, null).
fn meta_for(root: TaskId, n: u64) -> TreeMeta {
    TreeMeta {
        root,
        owner: match n % 3 {
            0 => None,
            1 => Some("alice".to_owned()),
            _ => Some(format!("bøb \"{n}\" ✓")),
        },
        resumable: n % 3 != 1,
        launch: (n % 4 != 3).then(|| {
            json!({
                "name": "tool",
                "arguments": {"n": n, "text": "ünïcode ✓ \"quoted\"\n", "nested": [1, -2, 2.5, null, true, {}]},
                "requestState": null,
            })
        }),
    }
}

impl Written {
    /// The batches of one command, one per touched tree, in the order the
    /// trees first appear in the effects (the runtime submits one per tree
    /// lock; the shared forest of the harness runs timers of several trees
    /// in one `handle_timeout`).
    fn batches(&mut self, forest: &Forest, effects: &[Effect]) -> Vec<WriteBatch> {
        let mut order: Vec<TaskId> = Vec::new();
        let mut ops: HashMap<TaskId, Vec<WriteOp>> = HashMap::new();
        let mut slot = |root: TaskId, op: WriteOp, first: bool| {
            let v = ops.entry(root).or_insert_with(|| {
                order.push(root);
                Vec::new()
            });
            if first {
                v.insert(0, op);
            } else {
                v.push(op);
            }
        };
        for e in effects {
            match e {
                Effect::Created { id, parent, .. } => {
                    self.ids.push(*id);
                    if parent.is_none() {
                        self.roots += 1;
                        let meta = meta_for(*id, self.roots);
                        self.metas.insert(*id, meta.clone());
                        // As `absorb`: the tree row comes first in the batch.
                        slot(*id, WriteOp::PutTree(meta), true);
                    }
                }
                // As `absorb`: the writes the library derives from effects.
                e => {
                    if let Some(op) = subtask::runtime::persist::write_for_effect(forest, e) {
                        slot(op.root(), op, false);
                    }
                }
            }
        }
        if order.len() > 1 {
            self.seen.multi_tree_commands += 1;
        }
        let mut out = Vec::with_capacity(order.len());
        for root in order {
            let mut ops = ops.remove(&root).unwrap_or_default();
            let version = self.versions.entry(root).or_default();
            *version += 1;
            let version = *version;
            for op in &mut ops {
                match op {
                    // The version stays as the runtime writes it (0): the
                    // store must set the batch's, as it does for the runtime.
                    WriteOp::PutTask(t) => {
                        self.last_write.insert(t.id, version);
                    }
                    WriteOp::DeleteTree(r) => {
                        self.metas.remove(r);
                        self.seen.deleted_trees += 1;
                    }
                    WriteOp::PutTree(_) => self.seen.put_trees += 1,
                    WriteOp::Receipt { .. } => unreachable!("the generator writes no receipts"),
                    WriteOp::AppendJournal(_) => unreachable!("the generator runs no handler"),
                    WriteOp::Release { .. } | WriteOp::Ended { .. } => {
                        unreachable!("the generator's runtime keeps finished trees")
                    }
                }
            }
            self.seen.batches += 1;
            out.push(WriteBatch { root, version, ops });
        }
        out
    }
}

// ----- comparisons ---------------------------------------------------------------

/// Trees sorted by root, tasks by id.
fn normalize(mut trees: Vec<StoredTree>) -> Vec<StoredTree> {
    trees.sort_by_key(|t| t.meta.root);
    for t in &mut trees {
        t.tasks.sort_by_key(|x| x.id);
    }
    trees
}

fn load(store: &dyn TaskStore, what: &str) -> Result<Vec<StoredTree>, String> {
    store
        .load()
        .map(normalize)
        .map_err(|e| format!("{what}: load failed: {e}"))
}

/// The first difference between two normalized loads (memory's and the
/// store named `other`'s), in words.
fn diff_named(a: &[StoredTree], b: &[StoredTree], other: &str) -> Option<String> {
    let roots = |t: &[StoredTree]| t.iter().map(|t| t.meta.root).collect::<Vec<_>>();
    if roots(a) != roots(b) {
        return Some(format!(
            "trees differ:\n memory {:?}\n {other} {:?}",
            roots(a),
            roots(b)
        ));
    }
    for (x, y) in a.iter().zip(b) {
        if x.meta != y.meta {
            return Some(format!("tree {}: meta {:?} vs {:?}", x.meta.root, x.meta, y.meta));
        }
        let ids = |t: &StoredTree| t.tasks.iter().map(|t| t.id).collect::<Vec<_>>();
        if ids(x) != ids(y) {
            return Some(format!(
                "tree {}: tasks {:?} vs {:?}",
                x.meta.root,
                ids(x),
                ids(y)
            ));
        }
        for (s, t) in x.tasks.iter().zip(&y.tasks) {
            if s != t {
                return Some(format!("task {}:\n memory {s:?}\n {other} {t:?}", s.id));
            }
        }
    }
    None
}

/// Both stores hold the same trees, every id reads back the same, and what
/// they hold is the live forest, restorable task by task. Returns the tasks
/// restored and the size of the largest tree.
fn compare(
    mem: &MemoryStore,
    sql: &dyn TaskStore,
    forest: &Forest,
    written: &Written,
) -> Result<(usize, usize), String> {
    compare_named(mem, sql, "sqlite", forest, written)
}

/// [`compare`] for the store named `name`.
fn compare_named(
    mem: &MemoryStore,
    sql: &dyn TaskStore,
    name: &str,
    forest: &Forest,
    written: &Written,
) -> Result<(usize, usize), String> {
    let a = load(mem, "memory")?;
    let b = load(sql, name)?;
    if let Some(d) = diff_named(&a, &b, name) {
        return Err(format!(
            "memory and {name} disagree after {} batches: {d}",
            written.seen.batches
        ));
    }
    for id in written.ids.iter().copied().chain([TaskId::from_u128(42)]) {
        let (x, y) = (mem.get(id), sql.get(id));
        if x != y {
            return Err(format!("get({id}): memory {x:?}, {name} {y:?}"));
        }
    }
    check_against_forest(&b, forest, written, None)
}

/// `stored` (normalized; restricted to `roots` when given) is exactly the
/// live forest's trees: same records, restorable into the same snapshots.
/// Returns the tasks restored and the size of the largest tree.
fn check_against_forest(
    stored: &[StoredTree],
    forest: &Forest,
    written: &Written,
    roots: Option<&[TaskId]>,
) -> Result<(usize, usize), String> {
    let (mut restored_tasks, mut max_tree) = (0, 0);
    let mine = |r: &TaskId| roots.is_none_or(|rs| rs.contains(r));
    let mut live_roots: Vec<TaskId> = forest
        .ids()
        .filter(|id| forest.task(*id).is_some_and(|r| r.parent().is_none()))
        .filter(mine)
        .collect();
    live_roots.sort();
    let stored_roots: Vec<TaskId> = stored.iter().map(|t| t.meta.root).filter(mine).collect();
    if stored_roots != live_roots {
        return Err(format!(
            "the store holds trees {stored_roots:?}, the forest has {live_roots:?}"
        ));
    }
    let mut per_tree: BTreeMap<TaskId, Vec<TaskId>> = BTreeMap::new();
    for id in forest.ids() {
        let rec = forest.task(id).expect("listed");
        if mine(&rec.root()) {
            per_tree.entry(rec.root()).or_default().push(id);
        }
    }
    for tree in stored.iter().filter(|t| mine(&t.meta.root)) {
        let root = tree.meta.root;
        if written.metas.get(&root) != Some(&tree.meta) {
            return Err(format!(
                "tree {root}: stored meta {:?}, written {:?}",
                tree.meta,
                written.metas.get(&root)
            ));
        }
        let mut live_ids = per_tree.remove(&root).unwrap_or_default();
        live_ids.sort();
        let ids: Vec<TaskId> = tree.tasks.iter().map(|t| t.id).collect();
        if ids != live_ids {
            return Err(format!("tree {root}: stored tasks {ids:?}, live {live_ids:?}"));
        }
        let mut records = Vec::with_capacity(tree.tasks.len());
        for t in &tree.tasks {
            let rec = forest.task(t.id).expect("a live id");
            let live_state = encode_state(rec);
            if (t.root, t.parent, t.position) != (rec.root(), rec.parent(), rec.position()) {
                return Err(format!(
                    "task {}: stored at ({}, {:?}, {}), live at ({}, {:?}, {})",
                    t.id,
                    t.root,
                    t.parent,
                    t.position,
                    rec.root(),
                    rec.parent(),
                    rec.position()
                ));
            }
            if t.state != live_state {
                return Err(format!(
                    "task {}: the stored state is not the live record (a change without Changed?)\n stored {}\n live   {}",
                    t.id, t.state, live_state
                ));
            }
            if written.last_write.get(&t.id) != Some(&t.version) {
                return Err(format!(
                    "task {}: stored version {}, last written by version {:?}",
                    t.id,
                    t.version,
                    written.last_write.get(&t.id)
                ));
            }
            records.push(
                decode_state(t.id, t.root, t.parent, t.position, &t.state)
                    .map_err(|e| format!("task {}: {e}", t.id))?,
            );
        }
        let restored = Forest::restore(*forest.config(), root, records, forest.now())
            .map_err(|e| format!("restoring a stored tree failed: {e}"))?;
        restored
            .check_invariants()
            .map_err(|v| format!("restored tree {root}: {v}"))?;
        if restored.len() != tree.tasks.len() {
            return Err(format!(
                "restored tree {root} has {} tasks, {} stored",
                restored.len(),
                tree.tasks.len()
            ));
        }
        for t in &tree.tasks {
            for view in [ClientView::PAUSE_AWARE, ClientView::BASE] {
                let (r, l) = (restored.snapshot(t.id, view), forest.snapshot(t.id, view));
                if r != l {
                    return Err(format!(
                        "task {} restored differs ({view:?}):\n restored {r:?}\n live     {l:?}",
                        t.id
                    ));
                }
            }
            let (r, l) = (
                restored.task(t.id).expect("restored"),
                forest.task(t.id).expect("live"),
            );
            if r.queued_steers() != l.queued_steers() || r.phase() != l.phase() || r.inputs() != l.inputs() {
                return Err(format!(
                    "task {}: restored record differs from the live one",
                    t.id
                ));
            }
            if encode_state(r) != t.state {
                return Err(format!("task {}: decode then encode does not round-trip", t.id));
            }
        }
        restored_tasks += tree.tasks.len();
        max_tree = max_tree.max(tree.tasks.len());
    }
    Ok((restored_tasks, max_tree))
}

// ----- the sequential property ----------------------------------------------------

/// Command sequences of the lifecycle test: every command (`ALL`), trees
/// that grow wide and deep and complete (`RESULTS`), or pause, resume and
/// what happens while paused (`PAUSE`).
fn sequences(max_len: usize) -> impl Strategy<Value = Vec<Step>> {
    prop_oneof![
        steps(Weights::ALL, max_len),
        steps(Weights::RESULTS, max_len),
        steps(Weights::PAUSE, max_len),
    ]
}

/// A point in the sequence where the stores are compared (and the SQLite
/// file reopened, when `reopen` is set).
#[derive(Debug, Clone)]
struct Check {
    at: Index,
    reopen: Option<Open>,
}

fn checks() -> impl Strategy<Value = Vec<Check>> {
    prop::collection::vec(
        (any::<Index>(), prop::option::weighted(0.6, open_cfg()))
            .prop_map(|(at, reopen)| Check { at, reopen }),
        0..4,
    )
}

/// The shared state of the hook and the test body.
struct Sink {
    written: Written,
    mem: MemoryStore,
    sql: Option<SqliteStore>,
    /// The PostgreSQL store (on the case's database).
    #[cfg(feature = "postgres")]
    pg: Option<PostgresStore>,
}

fn run_sequence(
    cfg: ForestConfig,
    steps: &[Step],
    first: Open,
    checks: &[Check],
    last: Open,
) -> Result<Coverage, TestCaseError> {
    let dir = TempDir::new("prop-store");
    let path = dir.db();
    // Declared before everything that uses it, so dropped after it: the
    // store's connection is closed when the database goes.
    #[cfg(feature = "postgres")]
    let db = pg::case_database();
    let sink = Rc::new(RefCell::new(Sink {
        written: Written::default(),
        mem: MemoryStore::new(),
        sql: Some(first.store(&path).map_err(TestCaseError::fail)?),
        #[cfg(feature = "postgres")]
        pg: Some(first.pg(db.url()).map_err(TestCaseError::fail)?),
    }));
    let mut h = Harness::new(cfg);
    {
        let sink = sink.clone();
        h.on_effects = Some(Box::new(move |forest, effects| {
            let mut s = sink.borrow_mut();
            let batches = s.written.batches(forest, effects);
            for b in batches {
                s.mem.submit(b.clone());
                #[cfg(feature = "postgres")]
                s.pg.as_ref().expect("open").submit(b.clone());
                s.sql.as_ref().expect("open").submit(b);
            }
        }));
    }
    let mut at: BTreeMap<usize, Vec<Option<Open>>> = BTreeMap::new();
    for c in checks {
        at.entry(c.at.index(steps.len())).or_default().push(c.reopen);
    }
    let check = |h: &Harness, reopen: Option<Open>| -> Result<(), String> {
        let mut s = sink.borrow_mut();
        let s = &mut *s;
        let compared = compare(&s.mem, s.sql.as_ref().expect("open"), &h.forest, &s.written)?;
        s.written.seen.note(compared);
        #[cfg(feature = "postgres")]
        {
            let pg = s.pg.take().expect("open");
            compare_named(&s.mem, &pg, "postgres", &h.forest, &s.written)?;
            let pg = match reopen {
                Some(open) => {
                    pg.flush().map_err(|e| format!("postgres flush: {e}"))?;
                    drop(pg); // joins the writer, closes the connection, frees the lock
                    let pg = open.pg(db.url())?;
                    compare_named(&s.mem, &pg, "postgres", &h.forest, &s.written)
                        .map_err(|e| format!("after reopening PostgreSQL with {open:?}: {e}"))?;
                    pg
                }
                None => pg,
            };
            s.pg = Some(pg);
        }
        if let Some(open) = reopen {
            s.sql
                .as_ref()
                .expect("open")
                .flush()
                .map_err(|e| format!("flush: {e}"))?;
            s.sql = None; // closes the file (the writer thread is joined)
            s.sql = Some(open.store(&path)?);
            let compared = compare(&s.mem, s.sql.as_ref().expect("open"), &h.forest, &s.written)
                .map_err(|e| format!("after reopening with {open:?}: {e}"))?;
            s.written.seen.note(compared);
            if open.one_per_commit && !open.relaxed {
                s.written.seen.reopens_full_one_per_commit += 1;
            } else {
                s.written.seen.reopens_other += 1;
            }
        }
        Ok(())
    };
    for (i, step) in steps.iter().enumerate() {
        h.step(step).map_err(|m| TestCaseError::fail(h.report(&m)))?;
        for reopen in at.get(&i).into_iter().flatten() {
            check(&h, *reopen).map_err(|m| TestCaseError::fail(h.report(&format!("after step {i}: {m}"))))?;
        }
    }
    check(&h, Some(last)).map_err(|m| TestCaseError::fail(h.report(&format!("at the end: {m}"))))?;
    let seen = sink.borrow().written.seen;
    Ok(seen)
}

proptest! {
    #![proptest_config(proptest_config(DEFAULT_CASES, 512))]

    /// Memory and SQLite hold the same trees after every sequence, at random
    /// points in it and across reopens; both are the live forest.
    #[test]
    fn sqlite_and_postgres_match_memory_and_the_forest(
        cfg in config(),
        steps in sequences(200),
        first in open_cfg(),
        checks in checks(),
        last in open_cfg(),
    ) {
        run_sequence(cfg, &steps, first, &checks, last)?;
    }
}

/// The sequences are not vacuous: over a fixed set of them, trees are
/// created and deleted, commands write to several trees at once, both
/// reopen modes happen, and big trees are restored and compared.
#[test]
fn generated_sequences_exercise_the_store() {
    use proptest::strategy::ValueTree;
    let mut runner = cases::fixed_seed_runner();
    let strategy = (config(), sequences(200), open_cfg(), checks(), open_cfg());
    let mut total = Coverage::default();
    for _ in 0..12 {
        let (cfg, steps, first, checks, last) = strategy.new_tree(&mut runner).expect("a value").current();
        match run_sequence(cfg, &steps, first, &checks, last) {
            Ok(seen) => total.merge(&seen),
            Err(e) => panic!("{e}"),
        }
    }
    if std::env::var_os("PROP_STORE_STATS").is_some() {
        eprintln!("{total:#?}");
    }
    assert!(total.batches > 300, "{total:?}");
    assert!(total.put_trees > 20, "{total:?}");
    assert!(total.deleted_trees > 3, "{total:?}");
    assert!(total.multi_tree_commands > 0, "{total:?}");
    assert!(total.reopens_full_one_per_commit > 0, "{total:?}");
    assert!(total.reopens_other > 5, "{total:?}");
    assert!(total.restored_tasks > 300, "{total:?}");
    assert!(total.max_tree >= 20, "{total:?}");
}

/// The cases of a thread share one database (`pg::case_database`), emptied
/// between cases, and the thread's end drops it: a deep run
/// (`PROPTEST_CASES=20000`, two PostgreSQL properties) holds one database
/// per test thread, not one per case, and leaves none behind.
#[cfg(feature = "postgres")]
#[test]
fn the_cases_share_one_database_and_leave_none() {
    use proptest::strategy::ValueTree;
    let made = std::thread::spawn(|| {
        let mut runner = cases::fixed_seed_runner();
        let strategy = (config(), sequences(20), open_cfg(), checks(), open_cfg());
        let (cfg, steps, first, checks, last) = strategy.new_tree(&mut runner).expect("a value").current();
        run_sequence(cfg, &steps, first, &checks, last).expect("the case passes");
        let other = strategy.new_tree(&mut runner).expect("a value").current();
        let threads = vec![(cfg, steps), (other.0, other.1)];
        concurrent(threads, first, last, Backend::Postgres).expect("the case passes");
        let made = pg::made_on_this_thread();
        assert_eq!(
            made.len(),
            1,
            "the second case made a database of its own: {made:?}"
        );
        let next = pg::case_database();
        assert!(
            pg::is_empty(next.url()),
            "the cases left tables in {}",
            next.url()
        );
        drop(next);
        assert_eq!(pg::made_on_this_thread(), made);
        made
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p));
    let left = pg::still_there(&made);
    assert!(
        left.is_empty(),
        "the thread ended and left {left:?} on the server"
    );
}

/// So do cases that fail or panic with their store open, and every rerun of
/// them while proptest shrinks them: the next case finds the database empty.
#[cfg(feature = "postgres")]
#[test]
fn failing_cases_leave_the_database_empty_and_none_behind() {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let made = std::thread::spawn(|| {
        // A fixed seed: with a fresh one, a first case of 0 (the range's
        // lowest, which cannot shrink) left nothing to rerun, about one run
        // in a hundred. This seed's first case shrinks, so reruns happen.
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: 4,
                max_shrink_iters: 4,
                failure_persistence: None,
                ..Config::default()
            },
            TestRng::deterministic_rng(RngAlgorithm::ChaCha),
        );
        let open = Open {
            one_per_commit: true,
            relaxed: true,
            small_groups: false,
        };
        let runs = std::cell::Cell::new(0);
        // Noted, not asserted: every case here fails, so a panic inside one
        // would go unseen.
        let found_tables = std::cell::Cell::new(false);
        let result = runner.run(&(0..100u32), |n| {
            runs.set(runs.get() + 1);
            let db = pg::case_database();
            if !pg::is_empty(db.url()) {
                found_tables.set(true);
            }
            let _store = open.pg(db.url()).map_err(TestCaseError::fail)?;
            if n % 2 == 0 {
                panic!("case {n} panics (as planned)");
            }
            Err(TestCaseError::fail(format!("case {n} fails (as planned)")))
        });
        assert!(result.is_err(), "the cases fail");
        assert!(runs.get() > 1, "proptest reran the failing case");
        assert!(!found_tables.get(), "a case found the tables of the one before");
        let made = pg::made_on_this_thread();
        assert_eq!(made.len(), 1, "{made:?}");
        made
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p));
    let left = pg::still_there(&made);
    assert!(
        left.is_empty(),
        "the thread ended and left {left:?} on the server"
    );
}

// ----- the concurrent property ------------------------------------------------------

/// What one writer thread did.
#[derive(Default)]
struct ThreadLog {
    /// What its batches wrote.
    written: Written,
    /// Its batches with their tickets, in submission order.
    batches: Vec<(Ticket, WriteBatch)>,
}

/// Runs `steps` on a harness of its own, submitting every batch to `sql`,
/// and checks its own trees against a load taken while the other threads
/// may still be writing.
fn writer_thread(
    cfg: ForestConfig,
    steps: &[Step],
    sql: &Arc<dyn TaskStore>,
    start: &Barrier,
) -> Result<ThreadLog, String> {
    let log: Rc<RefCell<ThreadLog>> = Rc::default();
    let mut h = Harness::new(cfg);
    {
        let log = log.clone();
        let sql = sql.clone();
        h.on_effects = Some(Box::new(move |forest, effects| {
            let mut l = log.borrow_mut();
            let batches = l.written.batches(forest, effects);
            for b in batches {
                let t = sql.submit(b.clone());
                l.batches.push((t, b));
            }
        }));
    }
    start.wait();
    for step in steps {
        h.step(step).map_err(|m| h.report(&m))?;
    }
    let stored = load(&**sql, &format!("{} (concurrent)", sql.describe()))?;
    {
        let l = log.borrow();
        let roots: Vec<TaskId> = l.written.versions.keys().copied().collect();
        check_against_forest(&stored, &h.forest, &l.written, Some(&roots)).map_err(|m| h.report(&m))?;
    }
    drop(h); // and with it the hook's handle on the store and the log
    Ok(Rc::try_unwrap(log)
        .map_err(|_| "the log is still shared")?
        .into_inner())
}

/// Which backend the concurrent property writes to.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

fn concurrent(
    threads: Vec<(ForestConfig, Vec<Step>)>,
    open: Open,
    reopen: Open,
    backend: Backend,
) -> Result<(), TestCaseError> {
    let dir = TempDir::new("prop-store-mt");
    let path = dir.db();
    // Dropped after the store (declared before it).
    #[cfg(feature = "postgres")]
    let db = matches!(backend, Backend::Postgres).then(pg::case_database);
    let opener = |o: Open| -> Result<Arc<dyn TaskStore>, String> {
        match backend {
            Backend::Sqlite => Ok(Arc::new(o.store(&path)?)),
            #[cfg(feature = "postgres")]
            Backend::Postgres => Ok(Arc::new(o.pg(db.as_ref().expect("a database").url())?)),
        }
    };
    let sql = opener(open).map_err(TestCaseError::fail)?;
    let start = Barrier::new(threads.len());
    let results: Vec<Result<ThreadLog, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = threads
            .iter()
            .map(|(cfg, steps)| {
                let (sql, start) = (&sql, &start);
                s.spawn(move || writer_thread(*cfg, steps, sql, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a writer thread panicked".into()))
            })
            .collect()
    });
    let mut logs: Vec<ThreadLog> = Vec::new();
    for (i, l) in logs_or_fail(results)?.into_iter().enumerate() {
        // Tickets of one thread increase: its batches are in the store's order.
        let tickets: Vec<Ticket> = l.batches.iter().map(|b| b.0).collect();
        prop_assert!(
            tickets.windows(2).all(|w| w[0] < w[1]),
            "thread {i}: tickets out of order"
        );
        logs.push(l);
    }
    let last: Vec<Ticket> = logs
        .iter()
        .filter_map(|l| l.batches.last().map(|b| b.0))
        .collect();
    futures::executor::block_on(async {
        for t in &last {
            sql.wait_durable(*t)
                .await
                .map_err(|e| TestCaseError::fail(format!("wait_durable({t:?}): {e}")))?;
        }
        Ok::<(), TestCaseError>(())
    })?;
    // Durable is a watermark: every earlier ticket is durable too.
    let max = last.iter().max().copied().unwrap_or_default();
    for t in 1..=max.0 {
        prop_assert_eq!(
            sql.is_durable(Ticket(t)),
            Ok(true),
            "ticket {} below the durable {:?}",
            t,
            max
        );
    }
    prop_assert_eq!(
        sql.last_ticket(),
        max,
        "every batch was submitted by a writer thread"
    );
    // The reference: each thread's batches in its order, thread after thread.
    let mem = MemoryStore::new();
    for l in &logs {
        for (_, b) in &l.batches {
            mem.submit(b.clone());
        }
    }
    let want = load(&mem, "memory").map_err(TestCaseError::fail)?;
    let got = load(&*sql, &format!("{backend:?}")).map_err(TestCaseError::fail)?;
    if let Some(d) = diff_named(&want, &got, &format!("{backend:?}")) {
        return Err(TestCaseError::fail(format!("after concurrent writers: {d}")));
    }
    // The writer threads' hooks are gone: this is the last handle, and
    // dropping it closes the store (the file, or the connection and its lock).
    prop_assert_eq!(Arc::strong_count(&sql), 1, "the store is still shared");
    drop(sql);
    let sql = opener(reopen).map_err(TestCaseError::fail)?;
    let got = load(&*sql, &format!("{backend:?} (reopened)")).map_err(TestCaseError::fail)?;
    if let Some(d) = diff_named(&want, &got, &format!("{backend:?}")) {
        return Err(TestCaseError::fail(format!(
            "after reopening with {reopen:?}: {d}"
        )));
    }
    Ok(())
}

fn logs_or_fail(logs: Vec<Result<ThreadLog, String>>) -> Result<Vec<ThreadLog>, TestCaseError> {
    logs.into_iter().map(|l| l.map_err(TestCaseError::fail)).collect()
}

proptest! {
    #![proptest_config(proptest_config(CONCURRENT_CASES, 512))]

    /// Several threads write disjoint trees into one store at once: group
    /// commits mix their batches, and each tree still ends as its own
    /// sequence of batches left it.
    #[test]
    fn concurrent_writers_group_commit(
        threads in prop::collection::vec((config(), sequences(150)), 2..=4),
        open in open_cfg(),
        reopen in open_cfg(),
    ) {
        concurrent(threads, open, reopen, Backend::Sqlite)?;
    }

    /// The same with the PostgreSQL store on a database of its own.
    #[cfg(feature = "postgres")]
    #[test]
    fn concurrent_writers_group_commit_postgres(
        threads in prop::collection::vec((config(), sequences(150)), 2..=4),
        open in open_cfg(),
        reopen in open_cfg(),
    ) {
        concurrent(threads, open, reopen, Backend::Postgres)?;
    }
}
