//! The embedded default store: one SQLite file in WAL mode. Group commit
//! runs in two stages: a writer thread commits every batch queued meanwhile
//! in one transaction without waiting for the disk, and a syncer thread
//! fsyncs the write-ahead log and releases, at once, the writers of every
//! commit that fsync covers (with full durability; see [`Syncer`]).
//!
//! Schema (version 1): one table,
//! `tasks(seq, id, root, parent, position, version, state, owner, resumable, launch)`,
//! one row per task. A parent's `childTaskIds` are its children's rows
//! ordered by `position`, so adding a child never rewrites the parent's
//! list. The tree's metadata (owner, resumable, launch) is on its root's
//! row, so creating a task writes one row.
//!
//! Rows are keyed by an integer `seq` (the rowid) in creation order, and
//! there is no index on the random task ids: new rows append to the end of
//! the table, so a group commit of many creates dirties a few pages instead
//! of one random index page per create. The writer thread keeps the id to
//! rowid map in memory (rebuilt by one scan at start, about 40 bytes per
//! stored task); uniqueness of ids is checked then too.
//!
//! `PRAGMA user_version` holds the schema version and `application_id`
//! marks the file as subtask's; a newer schema or a foreign file is refused.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::BoxFuture;
use parking_lot::{Condvar, Mutex};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};

use super::CommitStats;
use super::queue::{Next, WriteQueue, assemble};
use super::{
    Durability, StoreError, StoredTask, StoredTree, TaskStore, Ticket, TreeMeta, WriteBatch, WriteOp,
};
use crate::model::IdMap;
use crate::model::TaskId;

/// `PRAGMA application_id` of a subtask database ("sbtk").
const APPLICATION_ID: i64 = 0x7362_746b;

/// Schema migrations; `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE tasks (
        seq       INTEGER PRIMARY KEY,
        id        BLOB NOT NULL,
        root      BLOB NOT NULL,
        parent    BLOB,
        position  INTEGER NOT NULL,
        version   INTEGER NOT NULL,
        state     TEXT NOT NULL,
        owner     TEXT,
        resumable INTEGER,
        launch    TEXT
    );
",
    "
    CREATE TABLE journal (
        root  BLOB NOT NULL,
        task  BLOB NOT NULL,
        n     INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (root, task, n)
    ) WITHOUT ROWID;
",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How to open a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteConfig {
    /// The database file (created if missing).
    pub path: PathBuf,
    /// fsync per group commit, or relaxed.
    pub durability: Durability,
    /// At most this many batches share one transaction. `1` forces one
    /// transaction and one fsync (inside SQLite's commit, no syncer stage)
    /// per batch: the baseline group commit is measured against.
    pub max_batches_per_commit: usize,
    /// The most bytes the database's pages may take (SQLite's
    /// `max_page_count`, rounded down to whole pages; `None`: no limit but
    /// the disk's). When it is reached the store is full, as on a full
    /// disk: new work is refused and held writes land once space returns
    /// (`docs/durability.md`, "Full disk"). It bounds the database file,
    /// not its write-ahead log, which grows by up to the checkpoint
    /// interval (32 MiB) beside it. A database already larger opens, but
    /// only writes that fit in its free pages succeed.
    pub max_size: Option<u64>,
}

impl SqliteConfig {
    /// Full durability and unbounded group commit at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig {
            path: path.into(),
            durability: Durability::Full,
            max_batches_per_commit: usize::MAX,
            max_size: None,
        }
    }
}

struct Shared {
    /// Batches and reads for the writer, and the durable watermark.
    queue: WriteQueue<Writer>,
    /// Commits waiting for the syncer's fsync (full durability with group
    /// commit); `None` when SQLite's own commit is the durability point.
    sync: Option<Syncer>,
    /// Per group commit: its duration and size (`/metrics`).
    stats: CommitStats,
}

/// The second stage of group commit: the writer commits a group to the
/// write-ahead log without waiting for the disk and goes on with the next
/// group, while this stage fsyncs the log and releases the writers of
/// every commit the fsync covered. The inserts of one group overlap the
/// fsync of the previous one, and one fsync covers every commit made
/// while the previous fsync ran.
struct Syncer {
    /// The write-ahead log, opened a second time: an fsync flushes the
    /// file's data whichever descriptor wrote it.
    wal: File,
    state: Mutex<SyncState>,
    wake: Condvar,
}

#[derive(Default)]
struct SyncState {
    /// The last ticket committed to the log.
    committed: u64,
    /// The writer stopped: sync what is committed and stop too.
    closing: bool,
}

/// A [`TaskStore`] in a SQLite file with group commit.
pub struct SqliteStore {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    describe: String,
    /// Held for the store's lifetime: one process per database.
    _lock: File,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

/// Maps SQLite's "not a database" and "malformed" to [`StoreError::Corrupt`],
/// and `SQLITE_FULL` (a full disk, `ENOSPC` on a write, or `max_page_count`
/// reached) to [`StoreError::Full`].
fn sql(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt(format!("{}: {e}", path.display()))
        }
        Some(rusqlite::ErrorCode::DiskFull) => StoreError::Full(format!("{}: {e}", path.display())),
        _ => StoreError::Io(format!("{}: {e}", path.display())),
    }
}

fn id_blob(id: TaskId) -> [u8; 16] {
    id.as_u128().to_be_bytes()
}

fn blob_id(b: &[u8]) -> Result<TaskId, StoreError> {
    let bytes: [u8; 16] = b
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("a task id of {} bytes", b.len())))?;
    Ok(TaskId::from_u128(u128::from_be_bytes(bytes)))
}

impl SqliteStore {
    /// Opens (or creates) the database, migrates an older schema, checks
    /// the file and starts the writer thread.
    ///
    /// # Errors
    ///
    /// `Locked` when another process has it open; `NewerSchema`;
    /// `Corrupt` for a damaged or foreign file; `Io`.
    pub fn open(config: SqliteConfig) -> Result<SqliteStore, StoreError> {
        let path = config.path.clone();
        let lock_path = {
            let mut p = path.clone().into_os_string();
            p.push(".lock");
            PathBuf::from(p)
        };
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io(format!("{}: {e}", lock_path.display())))?;
        lock.try_lock().map_err(|_| {
            StoreError::Locked(format!(
                "{} is used by another subtask process (lock file {})",
                path.display(),
                lock_path.display()
            ))
        })?;
        // SQLite treats any file shorter than its 100-byte header as a new,
        // empty database; a file that short but not empty is a damaged one.
        // (An empty file is what a first start that died before writing the
        // schema leaves: it opens as a new database.)
        if let Ok(meta) = std::fs::metadata(&path)
            && meta.len() > 0
            && meta.len() < 100
        {
            return Err(StoreError::Corrupt(format!(
                "{}: {} bytes is too short to be a database (truncated?)",
                path.display(),
                meta.len()
            )));
        }
        let mut conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql(&path))?;
        let max = config.max_batches_per_commit.max(1);
        // Full durability with group commit syncs the log in a stage of its
        // own (`Syncer`); SQLite's commit then only writes (synchronous=NORMAL
        // in WAL mode). One batch per commit keeps SQLite's fsync in every
        // commit: the baseline group commit is measured against.
        let pipelined = config.durability == Durability::Full && max > 1;
        let fsync_in_commit = config.durability == Durability::Full && !pipelined;
        prepare(&mut conn, &path, fsync_in_commit, config.max_size)?;
        let writer = Writer::open(conn, &path)?;
        let sync = if pipelined {
            let wal_path = {
                let mut p = path.clone().into_os_string();
                p.push("-wal");
                PathBuf::from(p)
            };
            // SQLite created the log when the connection first read in WAL mode.
            let wal = File::open(&wal_path).map_err(|e| io(format!("{}: {e}", wal_path.display())))?;
            Some(Syncer {
                wal,
                state: Mutex::new(SyncState::default()),
                wake: Condvar::new(),
            })
        } else {
            None
        };
        let shared = Arc::new(Shared {
            queue: WriteQueue::new(),
            sync,
            stats: CommitStats::default(),
        });
        let syncer = if shared.sync.is_some() {
            let shared = shared.clone();
            Some(
                std::thread::Builder::new()
                    .name("subtask-sync".into())
                    .spawn(move || syncer_loop(&shared))
                    .map_err(io)?,
            )
        } else {
            None
        };
        let writer = {
            let shared = shared.clone();
            let path = path.clone();
            std::thread::Builder::new()
                .name("subtask-store".into())
                .spawn(move || {
                    writer_loop(writer, &shared, max, &path);
                    if let Some(sync) = &shared.sync {
                        sync.state.lock().closing = true;
                        sync.wake.notify_one();
                    }
                    if let Some(h) = syncer {
                        let _ = h.join();
                    }
                })
                .map_err(io)?
        };
        let describe = format!(
            "sqlite:{} ({})",
            path.display(),
            match (config.durability, pipelined) {
                (Durability::Full, true) => "fsync per group commit, in a stage of its own",
                (Durability::Full, false) => "fsync per commit",
                (Durability::Relaxed, _) => "relaxed: fsync at checkpoints",
            }
        );
        Ok(SqliteStore {
            shared,
            writer: Mutex::new(Some(writer)),
            describe,
            _lock: lock,
        })
    }

    /// Waits until every batch submitted so far is durable (blocking).
    ///
    /// # Errors
    ///
    /// The store failed.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.shared.queue.mark.wait_blocking(self.last_ticket())
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.shared.queue.close();
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
    }
}

/// Pragmas, identity and schema checks, migrations, an integrity check.
/// `fsync_in_commit` chooses `synchronous=FULL` (SQLite fsyncs in every
/// commit) or `NORMAL` (the WAL is fsynced only before checkpoints; the
/// syncer stage or nobody does the rest).
fn prepare(
    conn: &mut Connection,
    path: &Path,
    fsync_in_commit: bool,
    max_size: Option<u64>,
) -> Result<(), StoreError> {
    let e = sql(path);
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(&e)?;
    if let Some(bytes) = max_size {
        // Per connection, not stored in the file: set at every open.
        let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).map_err(&e)?;
        let pages = i64::try_from(bytes / page.max(1) as u64)
            .unwrap_or(i64::MAX)
            .max(1);
        let _set: i64 = conn
            .query_row(&format!("PRAGMA max_page_count={pages}"), [], |r| r.get(0))
            .map_err(&e)?;
    }
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(&e)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(&e)?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(&e)?;
    if app != APPLICATION_ID && (app != 0 || tables != 0) {
        return Err(StoreError::Corrupt(format!(
            "{} is not a subtask database (application_id {app:#x}, {tables} schema objects)",
            path.display()
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(&e)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io(format!(
            "{}: cannot switch to WAL mode (got {mode})",
            path.display()
        )));
    }
    let sync = if fsync_in_commit { "FULL" } else { "NORMAL" };
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY; PRAGMA wal_autocheckpoint=8192;"
    ))
    .map_err(&e)?;
    if version > 0 {
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(&e)?;
        if check != "ok" {
            return Err(StoreError::Corrupt(format!("{}: {check}", path.display())));
        }
    }
    for (from, step) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction().map_err(&e)?;
        tx.execute_batch(step).map_err(&e)?;
        tx.execute_batch(&format!(
            "PRAGMA application_id={APPLICATION_ID}; PRAGMA user_version={};",
            from + 1
        ))
        .map_err(&e)?;
        tx.commit().map_err(&e)?;
    }
    Ok(())
}

/// The writer thread's state: the connection and where each task's row is.
struct Writer {
    conn: Connection,
    /// Task id to rowid.
    rows: IdMap<i64>,
    /// Root to (rowid, id) of each task of the tree.
    trees: IdMap<Vec<(i64, TaskId)>>,
    /// Time spent in SQLite's COMMIT (write and fsync), for `SUBTASK_STORE_DEBUG`.
    in_commit: std::time::Duration,
}

impl Writer {
    fn open(conn: Connection, path: &Path) -> Result<Writer, StoreError> {
        let mut w = Writer {
            conn,
            rows: IdMap::default(),
            trees: IdMap::default(),
            in_commit: std::time::Duration::ZERO,
        };
        let e = sql(path);
        // A value of the wrong type in a row (a TEXT task id) is damage,
        // not an I/O error (found by the stored_state fuzz target).
        let value = |x: rusqlite::Error| match x {
            rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..) => {
                StoreError::Corrupt(format!("{}: {x}", path.display()))
            }
            other => e(other),
        };
        {
            let mut stmt = w.conn.prepare("SELECT seq, id, root FROM tasks").map_err(&e)?;
            let mut rows = stmt.query([]).map_err(&e)?;
            while let Some(r) = rows.next().map_err(&e)? {
                let rowid: i64 = r.get(0).map_err(value)?;
                let id = blob_id(&r.get::<_, Vec<u8>>(1).map_err(value)?)?;
                let root = blob_id(&r.get::<_, Vec<u8>>(2).map_err(value)?)?;
                if w.rows.insert(id, rowid).is_some() {
                    return Err(StoreError::Corrupt(format!(
                        "{}: task {id} is stored twice",
                        path.display()
                    )));
                }
                w.trees.entry(root).or_default().push((rowid, id));
            }
        }
        Ok(w)
    }

    /// One transaction for the whole group (a task written by several
    /// batches is inserted once, then updated). Returns what the writer's
    /// maps must learn once the transaction is durable ([`Writer::fold`]).
    fn commit(&mut self, group: &[(u64, WriteBatch)], path: &Path) -> Result<Folded, StoreError> {
        let e = sql(path);
        // The maps change only once the transaction commits.
        let mut new_rows: Vec<(TaskId, TaskId, i64)> = Vec::new();
        let mut fresh: IdMap<i64> = IdMap::default();
        let mut deleted: Vec<TaskId> = Vec::new();
        let mut metas: IdMap<&TreeMeta> = IdMap::default();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&e)?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO tasks(id, root, parent, position, version, state, owner, resumable, launch)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .map_err(&e)?;
            let mut update = tx
                .prepare_cached("UPDATE tasks SET version = ?2, state = ?3 WHERE seq = ?1")
                .map_err(&e)?;
            let mut update_meta = tx
                .prepare_cached("UPDATE tasks SET owner = ?2, resumable = ?3, launch = ?4 WHERE seq = ?1")
                .map_err(&e)?;
            let mut delete = tx
                .prepare_cached("DELETE FROM tasks WHERE seq = ?1")
                .map_err(&e)?;
            let mut append = tx
                .prepare_cached("INSERT INTO journal(root, task, n, entry) VALUES (?1, ?2, ?3, ?4)")
                .map_err(&e)?;
            let mut delete_journal = tx
                .prepare_cached("DELETE FROM journal WHERE root = ?1")
                .map_err(&e)?;
            for (_, batch) in group {
                for op in &batch.ops {
                    match op {
                        WriteOp::PutTree(meta) => {
                            let row = fresh.get(&meta.root).or_else(|| self.rows.get(&meta.root));
                            match row {
                                Some(&rowid) => {
                                    let launch = meta.launch.as_ref().map(|l| l.to_string());
                                    update_meta
                                        .execute(params![
                                            rowid,
                                            meta.owner.as_deref(),
                                            meta.resumable,
                                            launch
                                        ])
                                        .map_err(&e)?;
                                }
                                // Written with the root's row, which follows.
                                None => {
                                    metas.insert(meta.root, meta);
                                }
                            }
                        }
                        WriteOp::PutTask(t) => match fresh.get(&t.id).or_else(|| self.rows.get(&t.id)) {
                            Some(&rowid) => {
                                update
                                    .execute(params![rowid, batch.version as i64, t.state])
                                    .map_err(&e)?;
                            }
                            None => {
                                let parent = t.parent.map(id_blob);
                                let meta = metas.remove(&t.id);
                                let launch = meta.and_then(|m| m.launch.as_ref()).map(|l| l.to_string());
                                insert
                                    .execute(params![
                                        &id_blob(t.id)[..],
                                        &id_blob(t.root)[..],
                                        parent.as_ref().map(|p| &p[..]),
                                        t.position,
                                        batch.version as i64,
                                        t.state,
                                        meta.and_then(|m| m.owner.as_deref()),
                                        meta.map(|m| m.resumable),
                                        launch,
                                    ])
                                    .map_err(&e)?;
                                let rowid = tx.last_insert_rowid();
                                fresh.insert(t.id, rowid);
                                new_rows.push((t.id, t.root, rowid));
                            }
                        },
                        WriteOp::DeleteTree(root) => {
                            let mut rowids: Vec<i64> = self
                                .trees
                                .get(root)
                                .map(|t| t.iter().map(|r| r.0).collect())
                                .unwrap_or_default();
                            for r in new_rows.iter().filter(|r| r.1 == *root) {
                                rowids.push(r.2);
                                fresh.remove(&r.0);
                            }
                            for rowid in rowids {
                                delete.execute(params![rowid]).map_err(&e)?;
                            }
                            new_rows.retain(|r| r.1 != *root);
                            delete_journal.execute(params![&id_blob(*root)[..]]).map_err(&e)?;
                            deleted.push(*root);
                        }
                        WriteOp::AppendJournal(row) => {
                            append
                                .execute(params![
                                    &id_blob(row.root)[..],
                                    &id_blob(row.task)[..],
                                    row.n,
                                    row.entry
                                ])
                                .map_err(&e)?;
                        }
                        // One process per SQLite file: no cluster inbox.
                        WriteOp::Receipt { .. } => {}
                    }
                }
            }
        }
        let t_commit = std::time::Instant::now();
        tx.commit().map_err(&e)?;
        self.in_commit += t_commit.elapsed();
        Ok(Folded { deleted, new_rows })
    }

    /// Checkpoints the whole write-ahead log into the database and
    /// truncates it to zero bytes (`wal_checkpoint(TRUNCATE)`; the log is
    /// synced before and the database after, so nothing committed is put
    /// at risk). `true` when it did; `false` when it could not (no room
    /// for the database to grow: the log stays valid and is used as is).
    fn truncate_log(&mut self) -> bool {
        let r = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get::<_, i64>(0));
        matches!(r, Ok(0))
    }

    /// Brings the maps up to a committed transaction.
    fn fold(&mut self, f: Folded) {
        for root in f.deleted {
            for (_, id) in self.trees.remove(&root).unwrap_or_default() {
                self.rows.remove(&id);
            }
        }
        for (id, root, rowid) in f.new_rows {
            self.rows.insert(id, rowid);
            self.trees.entry(root).or_default().push((rowid, id));
        }
    }
}

/// Rows a committed transaction deleted and inserted: (id, root, rowid).
struct Folded {
    deleted: Vec<TaskId>,
    new_rows: Vec<(TaskId, TaskId, i64)>,
}

/// Moves queued writes into `group` (at most `max`), or takes the read job
/// at the front when `group` is empty. Reads never overtake writes.
///
/// A commit that fails for lack of space ([`StoreError::Full`]) holds the
/// store: the group's waiters (and every later one) learn it at once, new
/// work is refused ([`TaskStore::writable`]), and the writer commits the
/// group one batch at a time, in order: the batches before the first that
/// does not fit land, and that one is retried with a backoff (5 ms
/// doubling to [`FULL_RETRY_MAX`]; the log is checkpointed and truncated
/// between tries when there is room) until it fits. The hold ends when
/// the whole group is written. Any other failure is sticky.
fn writer_loop(mut w: Writer, shared: &Shared, max: usize, path: &Path) {
    let mut group: Vec<(u64, WriteBatch)> = Vec::new();
    let mut failed = false;
    let mut full = false;
    let debug = std::env::var_os("SUBTASK_STORE_DEBUG").is_some();
    let (mut groups, mut batches, mut busy) = (0u64, 0u64, std::time::Duration::ZERO);
    loop {
        match shared.queue.next(&mut group, max) {
            Next::Stop => {
                if debug {
                    eprintln!(
                        "# store writer: {groups} group commits, {batches} batches ({:.1} per commit), {:.0} us per commit, {:.0} us in COMMIT",
                        batches as f64 / groups.max(1) as f64,
                        busy.as_secs_f64() * 1e6 / groups.max(1) as f64,
                        w.in_commit.as_secs_f64() * 1e6 / groups.max(1) as f64
                    );
                }
                return;
            }
            Next::Read(read) => {
                read(&mut w);
                continue;
            }
            Next::Commit => {}
        }
        if failed {
            group.clear();
            continue;
        }
        let mut from = 0;
        let mut retry = FULL_RETRY_MIN;
        while from < group.len() {
            // While full, one batch at a time: whatever fits lands, in order.
            let to = if full { from + 1 } else { group.len() };
            let part = &group[from..to];
            let (first, last) = (part[0].0, part[part.len() - 1].0);
            let t0 = std::time::Instant::now();
            let r = w.commit(part, path);
            let took = t0.elapsed();
            groups += 1;
            batches += part.len() as u64;
            busy += took;
            match r {
                Ok(folded) => {
                    shared.stats.committed(took, part.len());
                    match &shared.sync {
                        // Durable once the syncer's next fsync returns.
                        Some(sync) => {
                            sync.state.lock().committed = last;
                            sync.wake.notify_one();
                        }
                        // Durable now: release the writers first; the writer's
                        // own maps can wait.
                        None => shared.queue.mark.advance(Ticket(last)),
                    }
                    w.fold(folded);
                    from = to;
                    if full && let Some(next) = group.get(from) {
                        // The hold moves past what was just written.
                        if let Err(e) = shared.queue.mark.writable() {
                            shared.queue.mark.hold(Ticket(next.0), e);
                        }
                        retry = FULL_RETRY_MIN;
                    }
                }
                Err(e @ StoreError::Full(_)) => {
                    if !full {
                        full = true;
                        tracing::error!(
                            error = %e,
                            "the task store is full: new work is refused; changes are kept and written once space is freed"
                        );
                        shared.queue.mark.hold(Ticket(first), e);
                    }
                    if part.len() > 1 {
                        continue;
                    }
                    // Most of a full disk may be the log's old page versions:
                    // move them into the database and empty the log if the
                    // little room left allows (a no-op that fails otherwise).
                    w.truncate_log();
                    if !shared.queue.pause_unless_closing(retry) {
                        let e = StoreError::Failed(
                            "the store closed while it was full; these changes were never written".into(),
                        );
                        shared.queue.mark.fail(Ticket(first), e);
                        failed = true;
                        break;
                    }
                    retry = (retry * 2).min(FULL_RETRY_MAX);
                }
                Err(e) => {
                    tracing::error!(error = %e, "a store commit failed; no further writes are accepted");
                    failed = true;
                    shared.queue.mark.fail(Ticket(first), e);
                    break;
                }
            }
        }
        if full && !failed {
            full = false;
            shared.queue.mark.lift();
            // The log grew through the episode (up to the checkpoint
            // interval, 32 MiB) and keeps its size until a checkpoint
            // resets it: give that space back now that there is room to.
            let truncated = w.truncate_log();
            tracing::info!(
                log_truncated = truncated,
                "the task store has space again: new work is accepted"
            );
        }
        group.clear();
    }
}

/// The first wait before a batch that did not fit is written again...
const FULL_RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(5);
/// ...doubling up to this.
const FULL_RETRY_MAX: std::time::Duration = std::time::Duration::from_millis(200);

/// Fsyncs the write-ahead log whenever something was committed since the
/// last fsync began, then releases the writers of everything committed
/// before it began. Stops after the writer, once everything it committed
/// is synced (or a sync failed: every later ticket then fails too).
fn syncer_loop(shared: &Shared) {
    let Some(sync) = &shared.sync else { return };
    let mut synced = 0u64;
    // Batches released by the fsync before the last one: under a closed
    // loop those writers are coming back now, and the next fsync should
    // cover them all rather than whichever of them committed first.
    let (mut released_before, mut released_last) = (0u64, 0u64);
    let mut stats = SyncStats::default();
    loop {
        let tw = std::time::Instant::now();
        let target = {
            let mut st = sync.state.lock();
            while st.committed == synced && !st.closing {
                sync.wake.wait(&mut st);
            }
            if st.committed == synced {
                stats.report(synced);
                return;
            }
            // The disk is idle: wait a little for the rest of the returning
            // group (bounded; a group that does not come back costs at most
            // GATHER_MAX, and a pause in arrivals ends the wait early).
            let want = synced + released_before;
            let until = tw + GATHER_MAX;
            while st.committed < want && !st.closing {
                let before = st.committed;
                let deadline = (std::time::Instant::now() + GATHER_IDLE).min(until);
                let timed_out = sync.wake.wait_until(&mut st, deadline).timed_out();
                if timed_out && (st.committed == before || std::time::Instant::now() >= until) {
                    break;
                }
            }
            st.committed
        };
        stats.waiting += tw.elapsed();
        let t0 = std::time::Instant::now();
        let r = sync.wal.sync_data();
        let took = t0.elapsed();
        stats.syncing += took;
        stats.syncs += 1;
        if let Err(e) = r {
            let e = StoreError::Io(format!("fsync of the write-ahead log failed: {e}"));
            tracing::error!(error = %e, "the store cannot make commits durable; no further writes are accepted");
            shared.queue.mark.fail(Ticket(synced + 1), e);
            return;
        }
        shared.stats.synced(took);
        shared.queue.mark.advance(Ticket(target));
        released_before = released_last;
        released_last = target - synced;
        synced = target;
    }
}

/// How long the syncer waits, when the disk is idle, for the writers it
/// released one fsync ago to commit again: at most this long in all...
const GATHER_MAX: std::time::Duration = std::time::Duration::from_micros(400);
/// ...and at most this long without a new commit.
const GATHER_IDLE: std::time::Duration = std::time::Duration::from_micros(100);

/// The syncer's timings, printed when `SUBTASK_STORE_DEBUG` is set.
#[derive(Default)]
struct SyncStats {
    syncs: u64,
    syncing: std::time::Duration,
    waiting: std::time::Duration,
}

impl SyncStats {
    fn report(&self, synced: u64) {
        if std::env::var_os("SUBTASK_STORE_DEBUG").is_none() {
            return;
        }
        let n = self.syncs.max(1) as f64;
        eprintln!(
            "# store syncer: {} fsyncs, {:.1} batches each, {:.0} us per fsync, {:.0} us waiting for commits",
            self.syncs,
            synced as f64 / n,
            self.syncing.as_secs_f64() * 1e6 / n,
            self.waiting.as_secs_f64() * 1e6 / n
        );
    }
}

/// `(id, root, parent, position, version, state)` as read from a row.
type TaskRow = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, i64, i64, String);

fn row_task(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
}

fn to_task((id, root, parent, position, version, state): TaskRow) -> Result<StoredTask, StoreError> {
    let id = blob_id(&id)?;
    let bad = |what: &str| StoreError::Corrupt(format!("task {id}: {what}"));
    Ok(StoredTask {
        id,
        root: blob_id(&root)?,
        parent: parent.as_deref().map(blob_id).transpose()?,
        position: u32::try_from(position).map_err(|_| bad("position out of range"))?,
        version: u64::try_from(version).map_err(|_| bad("negative version"))?,
        state,
    })
}

/// Every stored tree, read from the `tasks` table as [`TaskStore::load`]
/// reads it: each row decoded (a value of the wrong type, a task id that
/// is not 16 bytes, a negative position or version, an unreadable launch
/// are [`StoreError::Corrupt`]), then grouped by tree in row order.
fn read_trees(conn: &Connection) -> Result<Vec<StoredTree>, StoreError> {
    let e = |x: rusqlite::Error| StoreError::Corrupt(x.to_string());
    let mut stmt = conn
        .prepare(
            "SELECT id, root, parent, position, version, state, owner, resumable, launch FROM tasks
             ORDER BY seq",
        )
        .map_err(e)?;
    let journal = read_journal(conn)?;
    let mut rows = stmt.query([]).map_err(e)?;
    let mut read = Vec::new();
    while let Some(r) = rows.next().map_err(e)? {
        let mut task = to_task(row_task(r).map_err(e)?)?;
        if let Some(entries) = journal.get(&task.id) {
            task.state = super::with_journal(&task.state, entries)?;
        }
        if task.parent.is_some() {
            read.push(Ok((task, None)));
            continue;
        }
        let launch = r
            .get::<_, Option<String>>(8)
            .map_err(e)?
            .map(|l| serde_json::from_str(&l))
            .transpose()
            .map_err(|x| StoreError::Corrupt(format!("tree {}: unreadable launch: {x}", task.root)))?;
        let meta = TreeMeta {
            root: task.root,
            owner: r.get(6).map_err(e)?,
            resumable: r.get::<_, Option<bool>>(7).map_err(e)?.unwrap_or(false),
            launch,
        };
        read.push(Ok((task, Some(meta))));
    }
    assemble(read)
}

/// Every task's journal entries, in order.
fn read_journal(conn: &Connection) -> Result<IdMap<Vec<String>>, StoreError> {
    let e = |x: rusqlite::Error| StoreError::Corrupt(x.to_string());
    let mut stmt = conn
        .prepare("SELECT task, n, entry FROM journal ORDER BY root, task, n")
        .map_err(e)?;
    let mut rows = stmt.query([]).map_err(e)?;
    let mut out: IdMap<Vec<String>> = IdMap::default();
    while let Some(r) = rows.next().map_err(e)? {
        let task: Vec<u8> = r.get(0).map_err(e)?;
        let task = blob_id(&task)?;
        let n: i64 = r.get(1).map_err(e)?;
        let entries = out.entry(task).or_default();
        if n != entries.len() as i64 {
            return Err(StoreError::Corrupt(format!(
                "task {task}: journal entry {n} follows {} entries",
                entries.len()
            )));
        }
        entries.push(r.get(2).map_err(e)?);
    }
    Ok(out)
}

/// For the fuzz harness (`subtask::fuzzing`): an in-memory database with
/// this build's schema, for rows that [`read_back`] reads.
#[cfg(feature = "fuzzing")]
pub(crate) fn scratch_database() -> Result<Connection, StoreError> {
    let conn = Connection::open_in_memory().map_err(io)?;
    for step in MIGRATIONS {
        conn.execute_batch(step).map_err(io)?;
    }
    Ok(conn)
}

/// For the fuzz harness: what [`SqliteStore::open`] and then
/// [`TaskStore::load`] read from `conn`'s rows (the writer's scan of ids,
/// then every tree).
#[cfg(feature = "fuzzing")]
pub(crate) fn read_back(conn: Connection) -> Result<Vec<StoredTree>, StoreError> {
    let w = Writer::open(conn, Path::new(":memory:"))?;
    read_trees(&w.conn)
}

impl TaskStore for SqliteStore {
    fn submit(&self, batch: WriteBatch) -> Ticket {
        self.shared.queue.submit(batch)
    }

    fn commit_stats(&self) -> Option<&CommitStats> {
        Some(&self.shared.stats)
    }

    fn is_durable(&self, ticket: Ticket) -> Result<bool, StoreError> {
        self.shared.queue.mark.check(ticket)
    }

    fn wait_durable(&self, ticket: Ticket) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(self.shared.queue.mark.clone().wait(ticket))
    }

    fn last_ticket(&self) -> Ticket {
        self.shared.queue.last_ticket()
    }

    fn writable(&self) -> Result<(), StoreError> {
        self.shared.queue.mark.writable()
    }

    fn load(&self) -> Result<Vec<StoredTree>, StoreError> {
        self.shared.queue.read(|w| read_trees(&w.conn))
    }

    fn get(&self, id: TaskId) -> Result<Option<StoredTask>, StoreError> {
        self.shared.queue.read(move |w| {
            let e = |x: rusqlite::Error| StoreError::Io(x.to_string());
            let Some(&rowid) = w.rows.get(&id) else {
                return Ok(None);
            };
            let row = w
                .conn
                .prepare_cached("SELECT id, root, parent, position, version, state FROM tasks WHERE seq = ?1")
                .map_err(e)?
                .query_row(params![rowid], row_task)
                .optional()
                .map_err(e)?;
            row.map(to_task).transpose()
        })
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}
