//! The embedded default store: one SQLite file in WAL mode, written by one
//! thread that commits every batch queued meanwhile in one transaction and
//! one fsync (group commit), then releases all of their writers at once.
//!
//! Schema (version 1):
//!
//! * `trees(root PRIMARY KEY, owner, resumable, launch)`: one row per tree.
//! * `tasks(id PRIMARY KEY, root, parent, position, version, state)`: one row
//!   per task, indexed by `root` so a tree is deleted whole with one range
//!   delete. A parent's `childTaskIds` are its children's rows ordered by
//!   `position`, so adding a child never rewrites the parent's list.
//!
//! `PRAGMA user_version` holds the schema version and `application_id`
//! marks the file as subtask's; a newer schema or a foreign file is refused.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::BoxFuture;
use parking_lot::{Condvar, Mutex};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};

use super::{
    Durability, StoreError, StoredTask, StoredTree, TaskStore, Ticket, TreeMeta, Watermark, WriteBatch,
    WriteOp,
};
use crate::model::TaskId;

/// `PRAGMA application_id` of a subtask database ("sbtk").
const APPLICATION_ID: i64 = 0x7362_746b;

/// Schema migrations; `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &["
    CREATE TABLE trees (
        root      BLOB PRIMARY KEY NOT NULL,
        owner     TEXT,
        resumable INTEGER NOT NULL,
        launch    TEXT
    );
    CREATE TABLE tasks (
        id       BLOB PRIMARY KEY NOT NULL,
        root     BLOB NOT NULL,
        parent   BLOB,
        position INTEGER NOT NULL,
        version  INTEGER NOT NULL,
        state    TEXT NOT NULL
    );
    CREATE INDEX tasks_by_root ON tasks(root);
"];

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
    /// transaction (and fsync) per batch: the baseline group commit is
    /// measured against.
    pub max_batches_per_commit: usize,
}

impl SqliteConfig {
    /// Full durability and unbounded group commit at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig {
            path: path.into(),
            durability: Durability::Full,
            max_batches_per_commit: usize::MAX,
        }
    }
}

type ReadJob = Box<dyn FnOnce(&mut Connection) + Send>;

enum Job {
    Write(u64, WriteBatch),
    Read(ReadJob),
}

#[derive(Default)]
struct Queue {
    next: u64,
    pending: VecDeque<Job>,
    closing: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    mark: Arc<Watermark>,
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

/// Maps SQLite's "not a database" and "malformed" to [`StoreError::Corrupt`].
fn sql(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |e| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            StoreError::Corrupt(format!("{}: {e}", path.display()))
        }
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
        let mut conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql(&path))?;
        prepare(&mut conn, &path, config.durability)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            mark: Watermark::new(),
        });
        let writer = {
            let shared = shared.clone();
            let max = config.max_batches_per_commit.max(1);
            let path = path.clone();
            std::thread::Builder::new()
                .name("subtask-store".into())
                .spawn(move || writer_loop(conn, &shared, max, &path))
                .map_err(io)?
        };
        let describe = format!(
            "sqlite:{} ({})",
            path.display(),
            match config.durability {
                Durability::Full => "fsync per group commit",
                Durability::Relaxed => "relaxed: fsync at checkpoints",
            }
        );
        Ok(SqliteStore {
            shared,
            writer: Mutex::new(Some(writer)),
            describe,
            _lock: lock,
        })
    }

    /// Runs `f` on the writer's connection after every batch submitted
    /// before, and waits for its answer.
    fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        {
            let mut q = self.shared.queue.lock();
            if q.closing {
                return Err(StoreError::Failed("the store is closed".into()));
            }
            q.pending.push_back(Job::Read(Box::new(move |c| {
                let _ = tx.send(f(c));
            })));
        }
        self.shared.wake.notify_one();
        rx.recv()
            .map_err(|_| StoreError::Failed("the store's writer thread stopped".into()))?
    }

    /// Waits until every batch submitted so far is durable (blocking).
    ///
    /// # Errors
    ///
    /// The store failed.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.shared.mark.wait_blocking(self.last_ticket())
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.shared.queue.lock().closing = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
    }
}

/// Pragmas, identity and schema checks, migrations, an integrity check.
fn prepare(conn: &mut Connection, path: &Path, durability: Durability) -> Result<(), StoreError> {
    let e = sql(path);
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(&e)?;
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
    let sync = match durability {
        Durability::Full => "FULL",
        Durability::Relaxed => "NORMAL",
    };
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY;"
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

fn writer_loop(mut conn: Connection, shared: &Shared, max: usize, path: &Path) {
    let mut group: Vec<(u64, WriteBatch)> = Vec::new();
    let mut failed = false;
    loop {
        let read = {
            let mut q = shared.queue.lock();
            while q.pending.is_empty() && !q.closing {
                shared.wake.wait(&mut q);
            }
            if q.pending.is_empty() {
                return;
            }
            let mut read = None;
            while group.len() < max {
                match q.pending.pop_front() {
                    Some(Job::Write(t, b)) => group.push((t, b)),
                    Some(Job::Read(r)) if group.is_empty() => {
                        read = Some(r);
                        break;
                    }
                    Some(job @ Job::Read(_)) => {
                        q.pending.push_front(job);
                        break;
                    }
                    None => break,
                }
            }
            read
        };
        if let Some(read) = read {
            read(&mut conn);
            continue;
        }
        let (Some(first), Some(last)) = (group.first().map(|g| g.0), group.last().map(|g| g.0)) else {
            continue;
        };
        if failed {
            group.clear();
            continue;
        }
        match commit(&mut conn, &group, path) {
            Ok(()) => shared.mark.advance(Ticket(last)),
            Err(e) => {
                tracing::error!(error = %e, "a store commit failed; no further writes are accepted");
                failed = true;
                shared.mark.fail(Ticket(first), e);
            }
        }
        group.clear();
    }
}

/// One transaction for the whole group. A task written by several batches
/// of the group is written once, with its last state.
fn commit(conn: &mut Connection, group: &[(u64, WriteBatch)], path: &Path) -> Result<(), StoreError> {
    let e = sql(path);
    let mut skip: HashSet<(usize, usize)> = HashSet::new();
    if group.len() > 1 {
        let mut seen: HashSet<TaskId> = HashSet::new();
        for (bi, (_, batch)) in group.iter().enumerate().rev() {
            for (oi, op) in batch.ops.iter().enumerate().rev() {
                if let WriteOp::PutTask(t) = op
                    && !seen.insert(t.id)
                {
                    skip.insert((bi, oi));
                }
            }
        }
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(&e)?;
    {
        let mut put_tree = tx
            .prepare_cached(
                "INSERT OR REPLACE INTO trees(root, owner, resumable, launch) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(&e)?;
        let mut put_task = tx
            .prepare_cached(
                "INSERT INTO tasks(id, root, parent, position, version, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(id) DO UPDATE SET version = excluded.version, state = excluded.state",
            )
            .map_err(&e)?;
        let mut del_tasks = tx
            .prepare_cached("DELETE FROM tasks WHERE root = ?1")
            .map_err(&e)?;
        let mut del_tree = tx
            .prepare_cached("DELETE FROM trees WHERE root = ?1")
            .map_err(&e)?;
        for (bi, (_, batch)) in group.iter().enumerate() {
            for (oi, op) in batch.ops.iter().enumerate() {
                match op {
                    WriteOp::PutTree(meta) => {
                        let launch = meta.launch.as_ref().map(|l| l.to_string());
                        put_tree
                            .execute(params![
                                &id_blob(meta.root)[..],
                                meta.owner.as_deref(),
                                meta.resumable,
                                launch
                            ])
                            .map_err(&e)?;
                    }
                    WriteOp::PutTask(t) => {
                        if skip.contains(&(bi, oi)) {
                            continue;
                        }
                        let parent = t.parent.map(id_blob);
                        put_task
                            .execute(params![
                                &id_blob(t.id)[..],
                                &id_blob(t.root)[..],
                                parent.as_ref().map(|p| &p[..]),
                                t.position,
                                batch.version as i64,
                                t.state
                            ])
                            .map_err(&e)?;
                    }
                    WriteOp::DeleteTree(root) => {
                        del_tasks.execute(params![&id_blob(*root)[..]]).map_err(&e)?;
                        del_tree.execute(params![&id_blob(*root)[..]]).map_err(&e)?;
                    }
                }
            }
        }
    }
    tx.commit().map_err(&e)
}

fn row_task(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<(Vec<u8>, Vec<u8>, Option<Vec<u8>>, i64, i64, String)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
}

fn to_task(
    (id, root, parent, position, version, state): (Vec<u8>, Vec<u8>, Option<Vec<u8>>, i64, i64, String),
) -> Result<StoredTask, StoreError> {
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

impl TaskStore for SqliteStore {
    fn submit(&self, batch: WriteBatch) -> Ticket {
        let t = {
            let mut q = self.shared.queue.lock();
            q.next += 1;
            let t = q.next;
            q.pending.push_back(Job::Write(t, batch));
            t
        };
        self.shared.wake.notify_one();
        Ticket(t)
    }

    fn is_durable(&self, ticket: Ticket) -> Result<bool, StoreError> {
        self.shared.mark.check(ticket)
    }

    fn wait_durable(&self, ticket: Ticket) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(self.shared.mark.clone().wait(ticket))
    }

    fn last_ticket(&self) -> Ticket {
        Ticket(self.shared.queue.lock().next)
    }

    fn load(&self) -> Result<Vec<StoredTree>, StoreError> {
        self.read(|conn| {
            let e = |x: rusqlite::Error| StoreError::Corrupt(x.to_string());
            let mut trees: std::collections::HashMap<TaskId, StoredTree> = std::collections::HashMap::new();
            let mut stmt = conn
                .prepare("SELECT root, owner, resumable, launch FROM trees")
                .map_err(e)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, Vec<u8>>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, bool>(2)?,
                        r.get::<_, Option<String>>(3)?,
                    ))
                })
                .map_err(e)?;
            for row in rows {
                let (root, owner, resumable, launch) = row.map_err(e)?;
                let root = blob_id(&root)?;
                let launch = launch
                    .map(|l| serde_json::from_str(&l))
                    .transpose()
                    .map_err(|x| StoreError::Corrupt(format!("tree {root}: unreadable launch: {x}")))?;
                trees.insert(
                    root,
                    StoredTree {
                        meta: TreeMeta {
                            root,
                            owner,
                            resumable,
                            launch,
                        },
                        tasks: Vec::new(),
                    },
                );
            }
            let mut stmt = conn
                .prepare("SELECT id, root, parent, position, version, state FROM tasks")
                .map_err(e)?;
            let rows = stmt.query_map([], row_task).map_err(e)?;
            for row in rows {
                let task = to_task(row.map_err(e)?)?;
                let Some(tree) = trees.get_mut(&task.root) else {
                    return Err(StoreError::Corrupt(format!(
                        "task {} belongs to tree {}, which has no tree record",
                        task.id, task.root
                    )));
                };
                tree.tasks.push(task);
            }
            Ok(trees.into_values().collect())
        })
    }

    fn get(&self, id: TaskId) -> Result<Option<StoredTask>, StoreError> {
        self.read(move |conn| {
            let e = |x: rusqlite::Error| StoreError::Io(x.to_string());
            let row = conn
                .prepare_cached("SELECT id, root, parent, position, version, state FROM tasks WHERE id = ?1")
                .map_err(e)?
                .query_row(params![&id_blob(id)[..]], row_task)
                .optional()
                .map_err(e)?;
            row.map(to_task).transpose()
        })
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}
