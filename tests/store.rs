//! The SQLite store against real files: bad data at start is reported with a
//! clear error and never repaired into a different tree; a restart keeps
//! what was durable, fails what was running, runs a resumable tool again
//! with its input answers and steers, and carries out a deletion that came
//! due while the process was down.
//!
//! Every case writes a real database (through `SqliteStore`, the way the
//! runtime writes it), damages it where needed with `rusqlite` or plain file
//! I/O, and opens it again. `serve_refuses_bad_databases` runs the real
//! `subtask` binary.
//!
//! What is detected, and where (see the `truncated_files_*` tests):
//!
//! * A closed store has checkpointed its WAL into the main file and removed
//!   it. SQLite keeps no page checksums; it detects a file shorter than the
//!   page count in its header, so losing whole pages is refused at `open`
//!   ("database disk image is malformed", naming the file). A cut inside the
//!   last page is read back as zeroes and SQLite sees nothing; the zeroes
//!   land in the record content at the end of that page (task states), and
//!   `Runtime::recover` refuses the task whose state they broke.
//! * A file of 0 or 1 bytes is an *empty database* to SQLite (its unix VFS
//!   reads a 1-byte file as empty): it opens as a new, empty store. Nothing
//!   in the file can tell it from one created empty.
//! * In a crash image (the process died before a checkpoint), the pages live
//!   in the `-wal` file: cutting the main file is harmless when every page
//!   it lost is in the WAL, and cutting the WAL rolls the database back to
//!   the last commit before the cut (SQLite's crash recovery): an earlier,
//!   consistent state in which every tree restores, never a torn tree.

#[path = "support/until.rs"]
mod until;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use until::until;

use parking_lot::Mutex;
use serde_json::{Value, json};
use subtask::core::{ChildOptions, ClientView, Effect, Forest, HandlerOutcome, RootOptions};
use subtask::model::{DetailedTask, InputResponses, JsonObject, TaskId, TaskPayload, TaskStatus, Timestamp};
use subtask::runtime::{
    HandlerBody, Owner, RecoveryReport, Runtime, RuntimeConfig, SubtaskOptions, TaskError,
};
use subtask::server::{
    Incoming, Principal, Reply, Server, ServerConfig, TaskSupport, ToolCall, ToolOutcome, ToolSpec,
    elicitation,
};
use subtask::store::{
    SqliteConfig, SqliteStore, StoreError, TaskStore, Ticket, TreeMeta, WriteBatch, WriteOp,
};

const V: ClientView = ClientView::PAUSE_AWARE;

// ----- helpers ------------------------------------------------------------------

#[path = "support/tempdir.rs"]
mod tempdir;
use tempdir::TempDir;

#[path = "support/pg.rs"]
mod pg;

/// Where a recovery test keeps its trees: a SQLite file, or a PostgreSQL
/// database on the test run's server (`scripts/pg.sh`).
enum Db {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Db {
    fn open(&self) -> Result<Arc<dyn TaskStore>, StoreError> {
        match self {
            Db::Sqlite(path) => open(path).map(|s| Arc::new(s) as Arc<dyn TaskStore>),
            Db::Postgres(url) => {
                subtask::store::PostgresStore::open(subtask::store::PostgresConfig::new(url))
                    .map(|s| Arc::new(s) as Arc<dyn TaskStore>)
            }
        }
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn open(path: &Path) -> Result<SqliteStore, StoreError> {
    SqliteStore::open(SqliteConfig::new(path))
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

fn obj(v: Value) -> JsonObject {
    JsonObject::from_value(v).expect("an object")
}

fn set_len(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .unwrap_or_else(|e| panic!("truncating {}: {e}", path.display()));
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A core forest whose effects are written to a store the way the runtime
/// writes them (`Inner::absorb`): one batch per command and tree, the tree
/// row first in the batch that creates the root.
struct Writer<'a> {
    forest: Forest,
    store: &'a dyn TaskStore,
    versions: HashMap<TaskId, u64>,
}

impl<'a> Writer<'a> {
    fn new(store: &'a dyn TaskStore) -> Self {
        Writer {
            forest: Forest::default(),
            store,
            versions: HashMap::new(),
        }
    }

    fn persist(&mut self) {
        let mut order = Vec::new();
        let mut ops: HashMap<TaskId, Vec<WriteOp>> = HashMap::new();
        let effects: Vec<Effect> = self.forest.drain_effects().collect();
        for e in effects {
            let (root, op, first) = match e {
                Effect::Created { id, parent: None, .. } => (
                    id,
                    WriteOp::PutTree(TreeMeta {
                        root: id,
                        owner: Some("alice".into()),
                        resumable: false,
                        launch: Some(json!({"name": "job", "arguments": {}})),
                    }),
                    true,
                ),
                e => match subtask::runtime::persist::write_for_effect(&self.forest, &e) {
                    Some(op) => (op.root(), op, false),
                    None => continue,
                },
            };
            let v = ops.entry(root).or_insert_with(|| {
                order.push(root);
                Vec::new()
            });
            if first {
                v.insert(0, op);
            } else {
                v.push(op);
            }
        }
        for root in order {
            let version = self.versions.entry(root).or_default();
            *version += 1;
            let mut ops = ops.remove(&root).expect("listed");
            for op in &mut ops {
                if let WriteOp::PutTask(t) = op {
                    t.version = *version;
                }
            }
            self.store.submit(WriteBatch {
                root,
                version: *version,
                ops,
            });
        }
    }

    /// A started root.
    fn root(&mut self, ms: u64) -> TaskId {
        let id = self.forest.create_root(at(ms), RootOptions::default()).unwrap();
        self.forest.start(at(ms), id).unwrap();
        self.persist();
        id
    }

    /// A started child.
    fn child(&mut self, ms: u64, parent: TaskId) -> TaskId {
        let id = self
            .forest
            .create_child(at(ms), parent, ChildOptions::default())
            .unwrap();
        self.forest.start(at(ms), id).unwrap();
        self.persist();
        id
    }

    fn complete(&mut self, ms: u64, id: TaskId, result: Value) {
        self.forest
            .finish(at(ms), id, HandlerOutcome::Returned(obj(result)))
            .unwrap();
        self.persist();
    }
}

/// A closed store with `trees` completed trees of `per_tree` completed
/// children each (a few hundred KB; recovering it changes nothing).
fn write_many(path: &Path, trees: usize, per_tree: usize) -> usize {
    let store = open(path).expect("a new store");
    let mut w = Writer::new(&store);
    for i in 0..trees as u64 {
        let r = w.root(i);
        for j in 0..per_tree {
            let c = w.child(i, r);
            w.complete(i, c, json!({"tree": i, "child": j, "pad": "x".repeat(200)}));
        }
        w.complete(i, r, json!({"tree": i}));
    }
    store.flush().expect("flush");
    trees * (per_tree + 1)
}

/// Every row of every table (rowid first), the schema and the identity
/// pragmas, as SQLite stores them.
fn dump(path: &Path) -> Vec<Vec<rusqlite::types::Value>> {
    let c = rusqlite::Connection::open(path).expect("open for a dump");
    let mut queries = vec![
        "SELECT 'pragmas', (SELECT application_id FROM pragma_application_id), \
         (SELECT user_version FROM pragma_user_version)"
            .to_owned(),
        "SELECT type, name, sql FROM sqlite_master ORDER BY name".to_owned(),
    ];
    let mut stmt = c
        .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    let tables: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    for (t, sql) in tables {
        // A table without rowids (the journal) is dumped in key order.
        if sql.contains("WITHOUT ROWID") {
            queries.push(format!("SELECT '{t}', * FROM \"{t}\" ORDER BY 1, 2, 3, 4"));
        } else {
            queries.push(format!("SELECT '{t}', rowid, * FROM \"{t}\" ORDER BY rowid"));
        }
    }
    let mut out = Vec::new();
    for q in &queries {
        let mut stmt = c.prepare(q).expect("a dump query");
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                (0..n).map(|i| r.get::<_, rusqlite::types::Value>(i)).collect()
            })
            .expect("dump rows");
        for r in rows {
            out.push(r.expect("a row"));
        }
    }
    out
}

/// The schema of a store created from nothing by this build.
fn fresh_schema() -> Vec<Vec<rusqlite::types::Value>> {
    let dir = TempDir::new("fresh");
    drop(open(&dir.db()).unwrap());
    schema(&dir.db())
}

fn schema(path: &Path) -> Vec<Vec<rusqlite::types::Value>> {
    dump(path)
        .into_iter()
        .filter(|r| {
            matches!(&r[0], rusqlite::types::Value::Text(t) if t == "pragmas" || t == "table" || t == "index")
        })
        .collect()
}

/// Runs `sql` on the closed database with plain `rusqlite`.
fn edit(path: &Path, sql: &str, params: impl rusqlite::Params) {
    let c = rusqlite::Connection::open(path).expect("open for an edit");
    let n = c.execute(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert!(n > 0, "{sql} changed no row");
}

fn blob(id: TaskId) -> Vec<u8> {
    id.as_u128().to_be_bytes().to_vec()
}

fn state_of(path: &Path, id: TaskId) -> String {
    let c = rusqlite::Connection::open(path).expect("open");
    c.query_row("SELECT state FROM tasks WHERE id = ?1", [blob(id)], |r| r.get(0))
        .expect("the task's row")
}

fn owner_of(name: &str) -> Arc<Owner> {
    Owner::new(name, 1_000)
}

/// A `rebuild` for trees that must not run again.
fn no_rebuild(meta: &TreeMeta) -> std::future::Ready<Option<HandlerBody>> {
    panic!("nothing is resumable here, yet tree {} was rebuilt", meta.root)
}

// ----- (a) a newer schema --------------------------------------------------------

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let dir = TempDir::new("newer");
    let path = dir.db();
    write_many(&path, 2, 3);
    let c = rusqlite::Connection::open(&path).unwrap();
    let written: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert!(
        written >= 1,
        "a subtask database has a schema version, got {written}"
    );
    c.execute_batch(&format!("PRAGMA user_version = {}", written + 1))
        .unwrap();
    drop(c);
    let before = dump(&path);
    let err = open(&path).unwrap_err();
    assert_eq!(
        err,
        StoreError::NewerSchema {
            found: written + 1,
            supported: written
        }
    );
    assert!(err.to_string().contains("upgrade subtask"), "{err}");
    assert_eq!(
        dump(&path),
        before,
        "a refused database is not migrated or touched"
    );
    // Still refused the second time (nothing was "fixed" on the way).
    assert!(matches!(open(&path), Err(StoreError::NewerSchema { .. })));
}

// ----- (b) truncated and foreign files -----------------------------------------

fn assert_corrupt_naming(err: &StoreError, path: &Path, what: &str) {
    let StoreError::Corrupt(msg) = err else {
        panic!("expected Corrupt for {what}, got {err:?}");
    };
    assert!(
        msg.contains(&path.display().to_string()),
        "the error for {what} names the file: {msg}"
    );
}

/// What became of a damaged file.
#[derive(Debug, PartialEq, Eq)]
enum TaskOutcome {
    /// `SqliteStore::open` refused it (`Corrupt`, naming the file).
    RefusedAtOpen,
    /// It opened, and `Runtime::recover` refused a tree (`Corrupt`, naming
    /// the tree and task).
    RefusedAtRecover,
    /// It opened and recovered with exactly the trees it had before.
    Unchanged,
}

/// Opens and recovers `path`; fails on any outcome but a clear refusal or
/// the very same trees as `pristine`.
fn outcome(path: &Path, pristine: &[subtask::store::StoredTree], what: &str) -> TaskOutcome {
    let store = match open(path) {
        Err(err) => {
            assert_corrupt_naming(&err, path, what);
            return TaskOutcome::RefusedAtOpen;
        }
        Ok(s) => Arc::new(s),
    };
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = tokio.block_on(async {
        let rt = Runtime::with_store(RuntimeConfig::default(), store.clone());
        rt.recover(owner_of, no_rebuild).await
    });
    // The runtime's work ends before this returns, so the next open of the
    // file does not find the store still open (and its lock held) in a
    // task the runtime left behind: a fresh-clone run saw `Locked` there.
    tokio.shutdown_timeout(std::time::Duration::from_secs(30));
    match r {
        Err(StoreError::Corrupt(msg)) => {
            // The cut breaks the last cell's record: a task's state, or a
            // root's launch (the tree's, named so).
            assert!(
                msg.contains("tree ") && (msg.contains("task ") || msg.contains("unreadable launch")),
                "{what}: {msg}"
            );
            TaskOutcome::RefusedAtRecover
        }
        Err(e) => panic!("{what}: recover failed with {e:?}, not Corrupt"),
        Ok(report) => {
            assert_eq!(report.interrupted, 0, "{what}: every stored tree is terminal");
            let now = normalize(store.load().expect("a recovered store loads"));
            assert!(now == pristine, "{what}: recovered, but into different trees");
            // Closed here (its writer joined, its lock released), not by
            // whatever held it last.
            let store = Arc::try_unwrap(store)
                .unwrap_or_else(|_| panic!("{what}: the store is still held after the runtime ended"));
            drop(store);
            TaskOutcome::Unchanged
        }
    }
}

fn normalize(mut trees: Vec<subtask::store::StoredTree>) -> Vec<subtask::store::StoredTree> {
    trees.sort_by_key(|t| t.meta.root);
    for t in &mut trees {
        t.tasks.sort_by_key(|x| x.id);
    }
    trees
}

/// Whether the last page of the (closed) database file is a leaf page of a
/// table b-tree (type 0x0D), whose tail holds record content.
fn last_page_is_a_table_leaf(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap();
    let page = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    let last = bytes.len() - page;
    bytes[if last == 0 { 100 } else { last }] == 0x0D
}

/// A closed store (its WAL checkpointed into the main file and removed)
/// cut short. SQLite has no page checksums; what it detects is a file
/// shorter than the page count in its header, i.e. whole pages lost: then
/// `open` fails. A cut inside the last page is read back zero-filled and
/// SQLite cannot see it; the zeroes land in the tail of that page, which
/// holds record content (the task states), so the restore refuses the
/// task whose state they broke. Either way nothing is repaired.
#[test]
fn truncated_files_are_reported_as_damaged() {
    let dir = TempDir::new("trunc");
    let path = dir.db();
    let mut tasks = write_many(&path, 40, 25);
    // Index pages (schema 4) are allocated as they fill, so the file's last
    // page may hold index entries rather than record content: lone roots are
    // added until a table leaf page is the last one again.
    let mut added = 0;
    while !last_page_is_a_table_leaf(&path) {
        assert!(
            added < 400,
            "no table leaf page came last after {added} more roots"
        );
        tasks += write_many(&path, 1, 0);
        added += 1;
    }
    assert_eq!(
        dir.files().iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
        ["tasks.db", "tasks.db.lock"],
        "a closed store leaves no WAL"
    );
    let full = len(&path);
    let pristine = std::fs::read(&path).unwrap();
    let page = u64::from(u16::from_be_bytes([pristine[16], pristine[17]]));
    assert_eq!(full % page, 0);
    let before = {
        let store = open(&path).unwrap();
        let trees = normalize(store.load().unwrap());
        assert_eq!(trees.iter().map(|t| t.tasks.len()).sum::<usize>(), tasks);
        trees
    };
    assert_eq!(outcome(&path, &before, "the intact file"), TaskOutcome::Unchanged);
    // Whole pages lost (also with a partial page on top): refused at open.
    for cut in [
        full / 2,
        full / 2 / page * page,
        full / 3,
        full - page,
        full - page - 1,
        page,
        100,
        50,
        2,
    ] {
        std::fs::write(&path, &pristine[..cut as usize]).unwrap();
        let what = format!("the file cut to {cut} of {full} bytes");
        assert_eq!(
            outcome(&path, &before, &what),
            TaskOutcome::RefusedAtOpen,
            "{what}"
        );
        let err = open(&path).unwrap_err().to_string();
        assert!(
            err.contains("malformed") || err.contains("not a database") || err.contains("too short"),
            "{what}: {err}"
        );
        assert_eq!(len(&path), cut, "{what}: the damaged file is left as it was");
    }
    // A few bytes of the last page lost: SQLite reads zeroes, sees nothing
    // and opens it; the page ends with a task's state JSON, now cut by NULs,
    // which the restore refuses.
    assert_eq!(pristine.last(), Some(&b'}'), "the last page ends with JSON");
    for cut in [full - 1, full - 10] {
        std::fs::write(&path, &pristine[..cut as usize]).unwrap();
        let what = format!("the file cut to {cut} of {full} bytes");
        assert_eq!(
            outcome(&path, &before, &what),
            TaskOutcome::RefusedAtRecover,
            "{what}"
        );
    }
    // Half of the last page: refused, by SQLite's record checks or by the
    // restore, never recovered.
    let cut = full - page / 2;
    std::fs::write(&path, &pristine[..cut as usize]).unwrap();
    let what = format!("the file cut to {cut} of {full} bytes");
    assert_ne!(outcome(&path, &before, &what), TaskOutcome::Unchanged, "{what}");
}

/// SQLite's rule, pinned down: a 0- or 1-byte file is an empty database, so
/// a store cut to nothing opens as a new, empty store. Nothing in the file
/// can tell it from one created empty.
#[test]
fn an_empty_file_is_a_new_database_but_a_few_bytes_are_refused() {
    let dir = TempDir::new("trunc0");
    let path = dir.db();
    write_many(&path, 3, 3);
    // Shorter than SQLite's header but not empty: SQLite would silently
    // start over; the store refuses.
    for cut in [1, 50, 99] {
        set_len(&path, cut);
        match open(&path) {
            Err(StoreError::Corrupt(m)) => {
                assert!(
                    m.contains(&path.display().to_string()) && m.contains("too short"),
                    "{m}"
                )
            }
            other => panic!("a {cut}-byte file opened: {other:?}"),
        }
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            cut,
            "the file is left alone"
        );
    }
    // Empty: what a first start that died before writing the schema leaves.
    set_len(&path, 0);
    let store = open(&path).expect("an empty file is an empty database");
    assert!(store.load().unwrap().is_empty());
    drop(store);
    assert_eq!(schema(&path), fresh_schema(), "the store wrote a fresh schema");
}

/// A crash image: the files as they are while the store is open (no
/// checkpoint yet), copied as a crash would leave them.
fn crash_image(src: &Path, dst: &Path) {
    std::fs::copy(src, dst).unwrap();
    std::fs::copy(with_suffix(src, "-wal"), with_suffix(dst, "-wal")).unwrap();
}

#[test]
fn truncated_files_of_a_crash_image_roll_back_to_an_earlier_commit() {
    const TREES: usize = 16;
    const PER_TREE: usize = 7; // the root and six children
    let dir = TempDir::new("crash");
    let path = dir.db();
    let store = open(&path).unwrap();
    let mut w = Writer::new(&store);
    let mut roots = Vec::new();
    for i in 0..TREES as u64 {
        let r = w.root(i);
        roots.push(r);
        for j in 0..PER_TREE - 1 {
            let c = w.child(i, r);
            w.complete(i, c, json!({"tree": i, "child": j, "pad": "x".repeat(200)}));
        }
        // At least one commit per tree, so a cut WAL keeps whole trees.
        store.flush().unwrap();
    }
    let wal_path = with_suffix(&path, "-wal");
    let wal = std::fs::read(&wal_path).unwrap();
    let page = u64::from(u32::from_be_bytes([wal[8], wal[9], wal[10], wal[11]]));
    let frames = (wal.len() as u64 - 32) / (page + 24);
    assert!(
        frames < 1000 && len(&path) <= page,
        "no checkpoint has run, every page is in the WAL ({frames} frames; main file {} bytes)",
        len(&path)
    );
    let all = TREES * PER_TREE;

    // The main file cut: every page it lost is also in the WAL, which SQLite
    // reads first, so nothing is lost (and nothing can be detected).
    let d = TempDir::new("crash-main");
    crash_image(&path, &d.db());
    set_len(&d.db(), len(&d.db()) / 2);
    let s = open(&d.db()).expect("pages in the WAL cover the cut");
    let n: usize = s.load().unwrap().iter().map(|t| t.tasks.len()).sum();
    assert_eq!(n, all);
    drop(s);

    // The WAL cut: SQLite's recovery keeps the commits before the cut. The
    // result is an earlier state of the same history: the first trees
    // written, all whole but the last, and the runtime recovers it.
    for div in [2, 4] {
        let d = TempDir::new("crash-wal");
        crash_image(&path, &d.db());
        let wal = with_suffix(&d.db(), "-wal");
        set_len(&wal, len(&wal) / div);
        let s = open(&d.db()).expect("a torn WAL is a crash before the cut");
        let mut trees = s.load().unwrap();
        trees.sort_by_key(|t| roots.iter().position(|r| *r == t.meta.root));
        let n: usize = trees.iter().map(|t| t.tasks.len()).sum();
        assert!(n > PER_TREE && n < all, "WAL cut to 1/{div}: {n} of {all} tasks");
        let kept: Vec<TaskId> = trees.iter().map(|t| t.meta.root).collect();
        assert_eq!(
            kept,
            roots[..kept.len()],
            "the trees kept are the first ones written"
        );
        for t in &trees[..trees.len() - 1] {
            assert_eq!(t.tasks.len(), PER_TREE, "tree {} is whole", t.meta.root);
        }
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let report = tokio.block_on(async {
            let rt = Runtime::with_store(RuntimeConfig::default(), Arc::new(s));
            rt.recover(owner_of, no_rebuild).await
        });
        let report = report.expect("every tree of the earlier state is valid");
        assert_eq!(report.tasks, n);
    }
    drop(store);
}

#[test]
fn garbage_and_foreign_files_are_refused() {
    let dir = TempDir::new("garbage");
    let path = dir.db();
    // Garbage: not SQLite at all.
    let bytes: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &bytes).unwrap();
    let err = open(&path).unwrap_err();
    assert_corrupt_naming(&err, &path, "garbage");
    assert!(err.to_string().contains("not a database"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file is left alone");

    // A text file that starts like SQLite's header.
    std::fs::write(
        &path,
        b"SQLite format 3\0 but then nothing of the kind, for a while......",
    )
    .unwrap();
    let err = open(&path).unwrap_err();
    assert_corrupt_naming(&err, &path, "a fake header");

    // Another application's SQLite database.
    std::fs::remove_file(&path).unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('mine');",
    )
    .unwrap();
    drop(c);
    let err = open(&path).unwrap_err();
    assert_corrupt_naming(&err, &path, "a foreign database");
    assert!(err.to_string().contains("not a subtask database"), "{err}");
    let c = rusqlite::Connection::open(&path).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "no subtask table was added to someone else's database");

    // An empty database marked as another application's.
    std::fs::remove_file(&path).unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch("PRAGMA application_id = 1234").unwrap();
    drop(c);
    let err = open(&path).unwrap_err();
    assert_corrupt_naming(&err, &path, "another application's id");
}

// ----- (c) records that break an invariant ------------------------------------

/// A closed store with two trees:
///
/// ```text
/// other ─ o1 (completed)                     healthy, still running
/// root ─┬ a ─ g
///       ├ b (completed)
///       └ c
/// ```
struct Fixture {
    dir: TempDir,
    root: TaskId,
    a: TaskId,
    g: TaskId,
    b: TaskId,
    c: TaskId,
    other: TaskId,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = TempDir::new("invariant");
        let store = open(&dir.db()).unwrap();
        let mut w = Writer::new(&store);
        let other = w.root(0);
        let o1 = w.child(1, other);
        w.complete(2, o1, json!({"done": true}));
        let root = w.root(10);
        let a = w.child(11, root);
        let g = w.child(12, a);
        let b = w.child(13, root);
        w.complete(14, b, json!({"answer": 42}));
        let c = w.child(15, root);
        store.flush().unwrap();
        drop(store);
        Fixture {
            dir,
            root,
            a,
            g,
            b,
            c,
            other,
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.db()
    }

    /// Recovers with a fresh runtime: the error, after checking that nothing
    /// was loaded, nothing written, and every row is as it was.
    fn recover_fails(&self) -> String {
        let before = dump(&self.path());
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = tokio.block_on(async {
            let store = open(&self.path()).expect("the damage is below what open checks");
            let rt = Runtime::with_store(RuntimeConfig::default(), Arc::new(store));
            let err = rt
                .recover(owner_of, no_rebuild)
                .await
                .expect_err("a broken tree must not be recovered");
            assert_eq!(rt.task_count(), 0, "nothing is loaded, not even the healthy tree");
            assert!(rt.get(self.other, V).is_none());
            assert_eq!(
                rt.store().unwrap().last_ticket(),
                Ticket(0),
                "nothing was written"
            );
            err
        });
        drop(tokio);
        assert_eq!(dump(&self.path()), before, "the rows are unchanged");
        let StoreError::Corrupt(msg) = err else {
            panic!("expected Corrupt, got {err:?}");
        };
        assert!(
            msg.contains(&self.root.to_string()),
            "the error names the tree: {msg}"
        );
        assert!(
            !msg.contains(&self.other.to_string()),
            "the healthy tree is not blamed: {msg}"
        );
        eprintln!("recover refused: {msg}");
        msg
    }
}

fn names(msg: &str, id: TaskId, what: &str) {
    assert!(
        msg.contains(&id.to_string()),
        "the error names {what} ({id}): {msg}"
    );
}

#[test]
fn a_terminal_parent_with_a_live_child_is_refused() {
    let f = Fixture::new();
    // `a` completed (b's phase) while its child `g` still runs.
    let mut a: Value = serde_json::from_str(&state_of(&f.path(), f.a)).unwrap();
    let b: Value = serde_json::from_str(&state_of(&f.path(), f.b)).unwrap();
    a["phase"] = b["phase"].clone();
    edit(
        &f.path(),
        "UPDATE tasks SET state = ?1 WHERE id = ?2",
        (a.to_string(), blob(f.a)),
    );
    let msg = f.recover_fails();
    names(&msg, f.a, "the terminal parent");
    assert!(msg.contains("I4"), "{msg}");
}

#[test]
fn a_gap_in_child_positions_is_refused() {
    let f = Fixture::new();
    edit(
        &f.path(),
        "UPDATE tasks SET position = 5 WHERE id = ?1",
        [blob(f.c)],
    );
    let msg = f.recover_fails();
    names(&msg, f.c, "the misplaced child");
    assert!(msg.contains("gap"), "{msg}");
}

#[test]
fn a_task_whose_parent_is_missing_is_refused() {
    let f = Fixture::new();
    edit(&f.path(), "DELETE FROM tasks WHERE id = ?1", [blob(f.a)]);
    let msg = f.recover_fails();
    names(&msg, f.g, "the orphan");
    names(&msg, f.a, "the missing parent");
    assert!(msg.contains("does not exist"), "{msg}");
}

#[test]
fn a_cycle_is_refused() {
    let f = Fixture::new();
    // a and g are each other's parent; the root's remaining children keep
    // positions 0 and 1, so only reachability can tell.
    edit(
        &f.path(),
        "UPDATE tasks SET parent = ?1, position = 0 WHERE id = ?2",
        (blob(f.g), blob(f.a)),
    );
    edit(
        &f.path(),
        "UPDATE tasks SET position = 0 WHERE id = ?1",
        [blob(f.b)],
    );
    edit(
        &f.path(),
        "UPDATE tasks SET position = 1 WHERE id = ?1",
        [blob(f.c)],
    );
    let msg = f.recover_fails();
    assert!(msg.contains("not reachable"), "{msg}");
    names(&msg, f.a, "a task of the cycle");
    names(&msg, f.g, "a task of the cycle");
}

#[test]
fn unreadable_state_json_is_refused() {
    let f = Fixture::new();
    let state = state_of(&f.path(), f.c);
    edit(
        &f.path(),
        "UPDATE tasks SET state = ?1 WHERE id = ?2",
        (state[..state.len() / 2].to_owned(), blob(f.c)),
    );
    let msg = f.recover_fails();
    names(&msg, f.c, "the task");
    assert!(msg.contains("unreadable task state"), "{msg}");
}

#[test]
fn an_unknown_future_field_is_refused() {
    let f = Fixture::new();
    let state = state_of(&f.path(), f.b).replacen('{', r#"{"retries":3,"#, 1);
    edit(
        &f.path(),
        "UPDATE tasks SET state = ?1 WHERE id = ?2",
        (state, blob(f.b)),
    );
    let msg = f.recover_fails();
    names(&msg, f.b, "the task");
    assert!(msg.contains("retries"), "the error names the field: {msg}");
}

#[test]
fn a_newer_state_format_is_refused() {
    let f = Fixture::new();
    let state = state_of(&f.path(), f.g);
    assert!(state.starts_with(r#"{"v":1,"#), "{state}");
    let state = state.replacen(r#""v":1"#, r#""v":2"#, 1);
    edit(
        &f.path(),
        "UPDATE tasks SET state = ?1 WHERE id = ?2",
        (state, blob(f.g)),
    );
    let msg = f.recover_fails();
    names(&msg, f.g, "the task");
    assert!(msg.contains("format 2"), "{msg}");
}

#[test]
fn an_unreadable_launch_is_refused() {
    let f = Fixture::new();
    // The tree's metadata is on its root's row.
    edit(
        &f.path(),
        "UPDATE tasks SET launch = '{\"name\": ' WHERE id = ?1",
        [blob(f.root)],
    );
    let msg = f.recover_fails();
    assert!(msg.contains("launch"), "{msg}");
}

#[test]
fn a_second_root_is_refused() {
    let f = Fixture::new();
    edit(
        &f.path(),
        "UPDATE tasks SET parent = NULL WHERE id = ?1",
        [blob(f.c)],
    );
    let msg = f.recover_fails();
    names(&msg, f.c, "the second root");
    assert!(msg.contains("a second root"), "{msg}");
}

#[test]
fn a_tree_without_its_root_is_refused() {
    let f = Fixture::new();
    edit(&f.path(), "DELETE FROM tasks WHERE id = ?1", [blob(f.root)]);
    let msg = f.recover_fails();
    assert!(msg.contains("root task is missing"), "{msg}");
}

/// Damage the open itself sees (it indexes every row) is refused there.
#[test]
fn rows_that_cannot_be_indexed_are_refused_at_open() {
    // A task stored twice.
    let f = Fixture::new();
    edit(
        &f.path(),
        "INSERT INTO tasks(id, root, parent, position, version, state) \
         SELECT id, root, parent, position, version, state FROM tasks WHERE id = ?1",
        [blob(f.c)],
    );
    let before = dump(&f.path());
    let err = open(&f.path()).unwrap_err();
    let StoreError::Corrupt(msg) = &err else {
        panic!("{err:?}")
    };
    names(msg, f.c, "the duplicated task");
    assert!(msg.contains("twice"), "{msg}");
    assert!(msg.contains(&f.path().display().to_string()), "{msg}");
    assert_eq!(dump(&f.path()), before);

    // An id that is not 16 bytes.
    let f = Fixture::new();
    edit(
        &f.path(),
        "UPDATE tasks SET id = x'0102' WHERE id = ?1",
        [blob(f.c)],
    );
    let err = open(&f.path()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert!(err.to_string().contains("2 bytes"), "{err}");
}

// ----- (d) one process per database ------------------------------------------------

#[test]
fn a_second_open_of_the_same_file_is_locked() {
    let dir = TempDir::new("locked");
    let path = dir.db();
    let first = open(&path).unwrap();
    let err = open(&path).unwrap_err();
    let StoreError::Locked(msg) = &err else {
        panic!("expected Locked, got {err:?}");
    };
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    // The first store is unaffected, and the lock goes with it.
    let mut w = Writer::new(&first);
    let r = w.root(0);
    first.flush().unwrap();
    drop(w);
    drop(first);
    let again = open(&path).expect("the lock is released on drop");
    assert!(again.get(r).unwrap().is_some());
}

// ----- (e) the real binary ----------------------------------------------------------

/// Runs `subtask serve --db <db>` and returns its exit code and stderr; fails
/// if it is still running after 30 s.
fn serve(db: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_subtask"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start subtask");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for subtask") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("subtask serve --db {} is still running after 30 s", db.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), err)
}

#[test]
fn serve_refuses_bad_databases() {
    let check = |db: &Path, what: &str, words: &[&str]| {
        let (code, err) = serve(db);
        assert!(
            code.is_some_and(|c| c != 0),
            "{what}: exit code {code:?}, stderr:\n{err}"
        );
        assert!(!err.contains("panicked"), "{what}: a panic, not an error:\n{err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("subtask: "))
            .unwrap_or_else(|| panic!("{what}: no `subtask: ` error line on stderr:\n{err}"));
        for w in words {
            assert!(line.contains(w), "{what}: {w:?} not in {line:?}");
        }
    };
    let dir = TempDir::new("serve");

    let garbage = dir.0.join("garbage.db");
    std::fs::write(&garbage, vec![0xa5u8; 10_000]).unwrap();
    check(
        &garbage,
        "garbage",
        &[
            "cannot open the task database",
            &garbage.display().to_string(),
            "damaged",
            "not a database",
        ],
    );

    let newer = dir.0.join("newer.db");
    write_many(&newer, 1, 1);
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute_batch("PRAGMA user_version = 999")
        .unwrap();
    check(
        &newer,
        "a newer schema",
        &["schema version 999", "upgrade subtask"],
    );

    let f = Fixture::new();
    edit(
        &f.path(),
        "UPDATE tasks SET position = 7 WHERE id = ?1",
        [blob(f.c)],
    );
    check(
        &f.path(),
        "a broken tree",
        &[
            "cannot recover the stored tasks",
            &f.root.to_string(),
            &f.c.to_string(),
        ],
    );

    let held = dir.0.join("held.db");
    let store = open(&held).unwrap();
    check(
        &held,
        "a database in use",
        &["in use", &held.display().to_string()],
    );
    drop(store);
}

// ----- the happy path: a restart -------------------------------------------------

/// What phase one leaves for phase two.
struct BeforeRestart {
    /// Tree A (not resumable): root, a completed child, a child that had its
    /// input answered and still ran, a paused child.
    a_root: TaskId,
    a_done: TaskId,
    a_input: TaskId,
    a_paused: TaskId,
    /// Tree B (a resumable tool): root, a completed child, a running child.
    b_root: TaskId,
    b_done: TaskId,
    b_running: TaskId,
    /// The answer given to B's root before the restart.
    b_answer: JsonObject,
    /// Every task as the last durable snapshot showed it.
    snapshots: HashMap<TaskId, DetailedTask>,
}

const TOOL: &str = "resumable_job";

fn approve() -> JsonObject {
    elicitation("approve the plan?", json!({"ok": {"type": "boolean"}}), &["ok"])
}

/// Phase one: a server over a runtime over the store runs two trees to a
/// state with a bit of everything, then everything is dropped.
async fn before_restart(db: &Db) -> BeforeRestart {
    let store = db.open().unwrap();
    let rt = Runtime::with_store(RuntimeConfig::default(), store);
    assert_eq!(
        rt.recover(owner_of, no_rebuild).await.unwrap(),
        RecoveryReport::default()
    );

    // Tree A, through the runtime.
    let ids: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let got_answer: Arc<Mutex<Option<JsonObject>>> = Arc::default();
    let (ids2, got2) = (ids.clone(), got_answer.clone());
    let a_root = rt.spawn(RootOptions::default(), move |ctx| async move {
        let done = ctx.spawn_subtask(SubtaskOptions::default(), |_| async {
            Ok(obj(json!({"text": "ünïcode ✓", "n": [1, 2.5, null]})))
        })?;
        let got = got2.clone();
        let input = ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
            let a = ctx
                .request_input("color", obj(json!({"method": "elicitation/create"})))
                .await?;
            *got.lock() = Some(a);
            ctx.cancelled().await;
            Err(TaskError::Interrupted.into())
        })?;
        let paused = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
            loop {
                ctx.checkpoint().await?;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })?;
        ids2.lock().extend([done.id(), input.id(), paused.id()]);
        let _ = done.await;
        ctx.cancelled().await;
        Err(TaskError::Interrupted.into())
    });
    until("tree A's children", || ids.lock().len() == 3).await;
    let (a_done, a_input, a_paused) = {
        let v = ids.lock();
        (v[0], v[1], v[2])
    };
    until("A's first child completes", || {
        rt.get(a_done, V).unwrap().status() == TaskStatus::Completed
    })
    .await;
    until("A's input request", || {
        rt.get(a_input, V).unwrap().status() == TaskStatus::InputRequired
    })
    .await;
    let answer = obj(json!({"action": "accept", "content": {"color": "teal"}}));
    let accepted = rt
        .update(
            a_input,
            InputResponses::from([("color".to_owned(), answer.clone())]),
        )
        .unwrap();
    assert_eq!(accepted, ["color"]);
    until("A's child gets its answer", || got_answer.lock().is_some()).await;
    assert_eq!(got_answer.lock().clone(), Some(answer));
    rt.steer(a_input, "never taken: the handler does not checkpoint")
        .unwrap();
    rt.pause(a_paused, V).unwrap();
    until("A's looping child pauses", || {
        rt.get(a_paused, V).unwrap().status() == TaskStatus::Paused
    })
    .await;

    // Tree B, through the server: a resumable tool, so its launch is stored.
    let b_ids: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let b_got: Arc<Mutex<Option<JsonObject>>> = Arc::default();
    let (b_ids2, b_got2) = (b_ids.clone(), b_got.clone());
    let spec = ToolSpec::new(
        TOOL,
        "a job that asks once and listens for steers",
        json!({"type": "object", "properties": {"topic": {"type": "string"}}}),
        TaskSupport::Required,
    )
    .resumable();
    let tool = move |call: ToolCall| {
        let (ids, got) = (b_ids2.clone(), b_got2.clone());
        async move {
            assert_eq!(call.str_arg("topic"), Some("tides"));
            ToolOutcome::task(move |ctx| async move {
                let done = ctx.spawn_subtask(SubtaskOptions::default(), |_| async {
                    Ok(obj(json!({"part": 1})))
                })?;
                let done_id = done.id();
                let _ = done.await;
                let running = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
                    ctx.cancelled().await;
                    Err(TaskError::Interrupted.into())
                })?;
                ids.lock().extend([done_id, running.id()]);
                let answer = ctx.request_input("approve", approve()).await?;
                *got.lock() = Some(answer);
                // Busy until the restart: never at a safe point, so the steer
                // below stays queued and the pause stays pending.
                std::future::pending::<()>().await;
                unreachable!()
            })
        }
    };
    let server = Server::builder(rt.clone(), ServerConfig::default())
        .tool(spec, tool)
        .build();
    let body = serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": TOOL,
            "arguments": {"topic": "tides"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":
                    {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {"steer": true, "pause": true}}},
                "io.modelcontextprotocol/clientInfo": {"name": "store-tests", "version": "0"},
            },
        },
    }))
    .unwrap();
    let reply = server
        .handle(Incoming {
            body: &body,
            headers: None,
            principal: Principal::anonymous(),
            connection: None,
        })
        .await;
    let Reply::Message { status: 200, body } = reply else {
        panic!("tools/call: {reply:?}")
    };
    let reply: Value = serde_json::from_str(&body).unwrap();
    let b_root: TaskId = reply["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task id in {reply}"))
        .parse()
        .unwrap();
    until("B's input request", || {
        rt.get(b_root, V).unwrap().status() == TaskStatus::InputRequired
    })
    .await;
    let (b_done, b_running) = {
        let v = b_ids.lock();
        (v[0], v[1])
    };
    let b_answer = obj(json!({"action": "accept", "content": {"ok": true}}));
    rt.update(
        b_root,
        InputResponses::from([("approve".to_owned(), b_answer.clone())]),
    )
    .unwrap();
    until("B gets its answer", || b_got.lock().is_some()).await;
    rt.steer(b_root, "focus on the spring tides").unwrap();
    let paused = rt.pause(b_root, V).unwrap();
    assert_eq!(
        paused.status(),
        TaskStatus::Working,
        "the handler is busy: pending"
    );

    // Everything shown is durable, then the process "exits".
    let all = [a_root, a_done, a_input, a_paused, b_root, b_done, b_running];
    let mut snapshots = HashMap::new();
    for id in all {
        let snap = rt.get(id, V).unwrap();
        rt.flushed(id).await.unwrap();
        snapshots.insert(id, snap);
    }
    BeforeRestart {
        a_root,
        a_done,
        a_input,
        a_paused,
        b_root,
        b_done,
        b_running,
        b_answer,
        snapshots,
    }
}

fn json_of(t: &DetailedTask) -> String {
    serde_json::to_string(t).unwrap()
}

#[test]
fn a_restart_keeps_results_fails_what_ran_and_reruns_a_resumable_tool() {
    let dir = TempDir::new("restart");
    restart_keeps_results(&Db::Sqlite(dir.db()));
}

#[test]
fn on_postgres_a_restart_keeps_results_fails_what_ran_and_reruns_a_resumable_tool() {
    restart_keeps_results(&Db::Postgres(pg::fresh_database()));
}

fn restart_keeps_results(db: &Db) {
    // Phase one in its own tokio runtime: dropping it drops every handler,
    // the runtime and the store (as a process exit would).
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = tokio.block_on(before_restart(db));
    drop(tokio);

    // Phase two: a new runtime over the reopened file (a lock still held
    // would fail here).
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let after = tokio.block_on(async {
        let store = db.open().expect("the first store is gone");
        let rt = Runtime::with_store(RuntimeConfig::default(), store);
        let rebuilt: Arc<Mutex<Vec<TaskId>>> = Arc::default();
        let answers: Arc<Mutex<Vec<JsonObject>>> = Arc::default();
        let (rebuilt2, answers2) = (rebuilt.clone(), answers.clone());
        let report = rt
            .recover(owner_of, move |meta: &TreeMeta| {
                rebuilt2.lock().push(meta.root);
                let meta = meta.clone();
                let answers = answers2.clone();
                async move {
                    assert!(meta.resumable);
                    assert_eq!(meta.owner.as_deref(), Some("anonymous"));
                    let launch = meta.launch.expect("a resumable tree stores its launch");
                    assert_eq!(launch["name"], TOOL);
                    assert_eq!(launch["arguments"], json!({"topic": "tides"}));
                    let body: HandlerBody = Box::new(move |ctx| {
                        Box::pin(async move {
                            // The same code as the first run: its finished
                            // subtask is not run again (its stored outcome
                            // comes back), its running one runs again in place.
                            let done = ctx.spawn_subtask(SubtaskOptions::default(), |_| async {
                                panic!("a completed subtask ran again")
                            })?;
                            assert_eq!(
                                done.await,
                                subtask::model::TaskOutcome::Completed(obj(json!({"part": 1})))
                            );
                            let _running = ctx.spawn_subtask(SubtaskOptions::default(), |_| async {
                                Ok(obj(json!({"part": 2, "again": true})))
                            })?;
                            // The same key: answered before the restart, so
                            // it returns at once (no new input round).
                            let answer = ctx.request_input("approve", approve()).await?;
                            answers.lock().push(answer.clone());
                            let steers = ctx.checkpoint().await?;
                            Ok(obj(json!({"answer": answer, "steers": steers})))
                        })
                    });
                    Some(body)
                }
            })
            .await
            .expect("a clean store recovers");
        assert_eq!(
            *rebuilt.lock(),
            [before.b_root],
            "only the resumable tree is rebuilt"
        );
        assert_eq!(report.trees, 2);
        assert_eq!(report.tasks, 7);
        assert_eq!(report.interrupted, 5, "{report}");
        assert_eq!(report.failed, 3, "{report}");
        assert_eq!(report.rerun, 1, "{report}");
        assert_eq!(
            report.resumed, 1,
            "the resumable root's running subtask waits for its re-run: {report}"
        );

        // Terminal tasks are exactly as they were shown.
        for id in [before.a_done, before.b_done] {
            let now = rt.get(id, V).unwrap();
            assert_eq!(json_of(&now), json_of(&before.snapshots[&id]), "task {id}");
        }
        // What was running failed with the restart error.
        for id in [before.a_root, before.a_input, before.a_paused] {
            let now = rt.get(id, V).unwrap();
            let TaskPayload::Failed { error } = now.payload() else {
                panic!("task {id} is {} after the restart", now.status())
            };
            assert_eq!(
                error.data.as_ref().and_then(|d| d.get("reason")),
                Some(&json!("server_restarted")),
                "task {id}: {error:?}"
            );
            let b = &before.snapshots[&id];
            assert_eq!(now.task().created_at, b.task().created_at);
            assert_eq!(now.task().child_task_ids, b.task().child_task_ids);
            assert_eq!(now.task().parent_task_id, b.task().parent_task_id);
        }
        // The resumable root waits, paused (its pause was pending), with
        // its steer still queued; resuming runs the handler again.
        let b = rt.get(before.b_root, V).unwrap();
        assert_eq!(b.status(), TaskStatus::Paused, "{b:?}");
        assert_eq!(
            b.task().child_task_ids,
            before.snapshots[&before.b_root].task().child_task_ids
        );
        assert!(
            answers.lock().is_empty(),
            "a paused task's handler does not start"
        );
        rt.resume(before.b_root, V).unwrap();
        let done = tokio::time::timeout(Duration::from_secs(10), rt.wait(before.b_root, V))
            .await
            .expect("the re-run finishes without asking again")
            .expect("the task exists");
        let TaskPayload::Completed { result } = done.payload() else {
            panic!("the re-run ended {:?}", done.payload())
        };
        assert_eq!(result["answer"], serde_json::to_value(&before.b_answer).unwrap());
        assert_eq!(result["steers"], json!(["focus on the spring tides"]));
        assert_eq!(*answers.lock(), std::slice::from_ref(&before.b_answer));
        // Its running subtask waited to be spawned again, and ran again in
        // place (same id, same place) with the body the re-run passed.
        let again = rt.get(before.b_running, V).unwrap();
        let TaskPayload::Completed { result } = again.payload() else {
            panic!("the subtask the re-run spawned again is {}", again.status())
        };
        assert_eq!(result["again"], true);
        assert_eq!(
            again.task().created_at,
            before.snapshots[&before.b_running].task().created_at
        );
        assert_eq!(
            rt.get(before.b_root, V).unwrap().task().child_task_ids,
            [before.b_done, before.b_running],
            "no subtask appended"
        );
        let mut after = HashMap::new();
        for id in before.snapshots.keys() {
            rt.flushed(*id).await.unwrap();
            after.insert(*id, rt.get(*id, V).unwrap());
        }
        after
    });
    drop(tokio);

    // Phase three: what recovery and the re-run wrote is durable too.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio.block_on(async {
        let rt = Runtime::with_store(RuntimeConfig::default(), db.open().unwrap());
        let report = rt.recover(owner_of, no_rebuild).await.unwrap();
        assert_eq!(report.tasks, 7);
        assert_eq!(report.interrupted, 0, "everything is terminal now");
        for (id, snap) in &after {
            assert!(snap.status().is_terminal());
            assert_eq!(json_of(&rt.get(*id, V).unwrap()), json_of(snap), "task {id}");
        }
    });
}

/// Timers are re-armed at recovery: a terminal tree whose deletion came due
/// while the process was down is deleted right after `recover`, and the
/// deletion is durable.
#[test]
fn a_deletion_that_came_due_while_down_happens_at_recovery() {
    let dir = TempDir::new("deletion");
    deletion_due_while_down(&Db::Sqlite(dir.db()));
}

#[test]
fn on_postgres_a_deletion_that_came_due_while_down_happens_at_recovery() {
    deletion_due_while_down(&Db::Postgres(pg::fresh_database()));
}

fn deletion_due_while_down(db: &Db) {
    const TTL_MS: u64 = 600;
    let config = RuntimeConfig {
        forest: subtask::core::ForestConfig {
            deletion_grace_ms: 0,
            ..Default::default()
        },
        ..RuntimeConfig::default()
    };
    let runtime = |workers: usize| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap()
    };
    let started = Instant::now();
    let (root, keep) = runtime(1).block_on(async {
        let rt = Runtime::with_store(config, db.open().unwrap());
        rt.recover(owner_of, no_rebuild).await.unwrap();
        let opts = RootOptions {
            ttl_ms: Some(TTL_MS),
            poll_interval_ms: None,
        };
        let root = rt.spawn(opts, |ctx| async move {
            let child = ctx.spawn_subtask(SubtaskOptions::default(), |_| async { Ok(obj(json!({}))) })?;
            let _ = child.await;
            Ok(obj(json!({"done": true})))
        });
        // Without a TTL: kept.
        let keep = rt.spawn(RootOptions::default(), |_| async { Ok(obj(json!({}))) });
        for id in [root, keep] {
            rt.wait(id, V).await.unwrap();
            rt.flushed(id).await.unwrap();
        }
        assert!(rt.get(root, V).is_some());
        (root, keep)
    });
    assert!(
        started.elapsed() < Duration::from_millis(TTL_MS),
        "the machine is too slow for this test's timing ({:?})",
        started.elapsed()
    );
    // Down until past the deletion time.
    std::thread::sleep(Duration::from_millis(TTL_MS + 200).saturating_sub(started.elapsed()));
    {
        let store = db.open().unwrap();
        let stored: Vec<TaskId> = store.load().unwrap().iter().map(|t| t.meta.root).collect();
        assert!(stored.contains(&root), "the tree was still stored at the restart");
    }
    runtime(1).block_on(async {
        let rt = Runtime::with_store(config, db.open().unwrap());
        let report = rt.recover(owner_of, no_rebuild).await.unwrap();
        assert_eq!(report.trees, 2);
        until("the overdue deletion", || rt.get(root, V).is_none()).await;
        assert!(rt.get(keep, V).is_some());
        rt.flushed(root).await.unwrap();
    });
    let store = db.open().unwrap();
    let stored: Vec<TaskId> = store.load().unwrap().iter().map(|t| t.meta.root).collect();
    assert_eq!(stored, [keep], "the deletion is durable");
}
