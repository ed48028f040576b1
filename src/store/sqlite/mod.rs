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
//!
//! Files by concern: `schema.rs` (pragmas, identity, migrations),
//! `writer.rs` (the writer thread, with its full-disk states), `syncer.rs`
//! (the fsync stage), `read.rs` (decoding stored rows).

mod read;
mod schema;
mod syncer;
mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use futures::future::BoxFuture;
use parking_lot::{Condvar, Mutex};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::CommitStats;
use super::queue::WriteQueue;
use super::{Durability, StoreError, StoredTask, StoredTree, TaskStore, Ticket, WriteBatch};
use crate::model::TaskId;
#[cfg(feature = "fuzzing")]
pub(crate) use read::{read_back, scratch_database};
use read::{read_trees, row_task, to_task};
use schema::prepare;
use syncer::{SyncState, Syncer, syncer_loop};
use writer::{Writer, writer_loop};

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
