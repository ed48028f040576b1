//! The embedded default store: one SQLite file in WAL mode. Group commit
//! runs in two stages: a writer thread commits every batch queued meanwhile
//! in one transaction without waiting for the disk, and a syncer thread
//! fsyncs the write-ahead log and releases, at once, the writers of every
//! commit that fsync covers (with full durability; see [`Syncer`]).
//!
//! Schema (version 4): one table,
//! `tasks(seq, id, root, parent, position, version, state, owner, resumable, launch)`,
//! one row per task; `journal(root, task, n, entry)`, a task's durable
//! execution journal; `seal_keys(key_id, check_value)`, one check value
//! per encryption key id (`docs/encryption.md`). A parent's `childTaskIds` are its children's rows
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

mod finished;
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
use super::seal::{Column, Keyring, Place, Reencrypted, reseal};
use super::{Durability, StoreError, StoredTask, StoredTree, TaskStore, Ticket, WriteBatch, WriteOp};
use crate::model::TaskId;
#[cfg(feature = "fuzzing")]
pub(crate) use read::{read_back, scratch_database};
use read::{read_trees, row_task, to_task};
use schema::{check_keys, prepare};
use syncer::{SyncState, Syncer, syncer_loop};
use writer::{Writer, writer_loop};

/// The writer thread's body: `writer` (the write loop), then the syncer
/// told to sync what is committed and stop, and waited for. A panic in
/// `writer` fails the store, so its callers get an error instead of
/// waiting, and still stops the syncer (which syncs what was committed):
/// it no longer stays parked for the life of the process.
fn run_writer(shared: &Shared, syncer: Option<JoinHandle<()>>, writer: impl FnOnce()) {
    /// Tells the syncer to stop, on the way out or while unwinding.
    struct StopSyncer<'a>(&'a Shared);
    impl Drop for StopSyncer<'_> {
        fn drop(&mut self) {
            if let Some(sync) = &self.0.sync {
                sync.state.lock().closing = true;
                sync.wake.notify_one();
            }
        }
    }
    // Dropped in reverse order: the store is failed first (on a panic),
    // then the syncer stopped.
    let stop = StopSyncer(shared);
    let guard = shared.queue.writer_guard();
    writer();
    drop(guard);
    drop(stop);
    if let Some(h) = syncer {
        let _ = h.join();
    }
}

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
    /// Seal task state at rest with these keys (`docs/encryption.md`):
    /// every value that can hold user data is written sealed with the
    /// first key; values sealed with the others (and clear ones, written
    /// before a key was configured) are read. The database is refused at
    /// open when it holds values sealed with a key id the keyring lacks, a
    /// key id's key differs from the one it sealed with, or it holds sealed
    /// values and this is `None`. `None`: values are written in clear.
    pub keys: Option<Arc<Keyring>>,
}

impl SqliteConfig {
    /// Full durability and unbounded group commit at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig {
            path: path.into(),
            durability: Durability::Full,
            max_batches_per_commit: usize::MAX,
            max_size: None,
            keys: None,
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
    /// Task states are sealed with these in [`TaskStore::submit`], on the
    /// callers' threads, so the one writer thread does not seal them all.
    keys: Option<Arc<Keyring>>,
    /// Read-only connections of the readers of finished trees
    /// (`finished.rs`), opened on demand and kept for the next read.
    readers: Mutex<Vec<Connection>>,
    /// Where each task's row is (the writer's maps).
    maps: Arc<parking_lot::RwLock<writer::Maps>>,
    /// The database file.
    path: PathBuf,
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
        let lock = take_lock(&path)?;
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
        check_keys(&conn, &path, config.keys.as_deref())?;
        let mut writer = Writer::open(conn, &path)?;
        writer.keys = config.keys.clone();
        let maps = writer.maps.clone();
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
                .spawn(move || run_writer(&shared, syncer, || writer_loop(writer, &shared, max, &path)))
                .map_err(io)?
        };
        finished::start_sweeper(&shared, &path).map_err(io)?;
        let describe = format!(
            "sqlite:{} ({}{})",
            path.display(),
            match (config.durability, pipelined) {
                (Durability::Full, true) => "fsync per group commit, in a stage of its own",
                (Durability::Full, false) => "fsync per commit",
                (Durability::Relaxed, _) => "relaxed: fsync at checkpoints",
            },
            match &config.keys {
                Some(k) => format!("; sealed with key {:?}", k.current()),
                None => String::new(),
            }
        );
        Ok(SqliteStore {
            shared,
            writer: Mutex::new(Some(writer)),
            describe,
            keys: config.keys.clone(),
            readers: Mutex::new(Vec::new()),
            maps,
            path,
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

/// The lock file next to the database (`subtask.db.lock`), locked: one
/// process per database.
fn take_lock(path: &Path) -> Result<File, StoreError> {
    let lock_path = {
        let mut p = path.to_path_buf().into_os_string();
        p.push(".lock");
        PathBuf::from(p)
    };
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io(format!("{}: {e}", lock_path.display())))?;
    // The lock is an `flock`, held by the open file description: a child
    // process this process forks (any `Command::spawn`) shares it until
    // its `exec` closes the descriptor. A store dropped and opened again
    // while another thread spawns a process can find its own lock still
    // held for those microseconds, so a held lock is tried again for a
    // short while before the database is reported in use (a fresh-clone
    // test run met it). Another subtask process holds it for good.
    let mut tries = 0;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(std::fs::TryLockError::WouldBlock) if tries < LOCK_TRIES => {
                tries += 1;
                std::thread::sleep(LOCK_RETRY);
            }
            Err(_) => {
                return Err(StoreError::Locked(format!(
                    "{} is used by another subtask process (lock file {})",
                    path.display(),
                    lock_path.display()
                )));
            }
        }
    }
}

/// How often a held database lock is tried again before the database is
/// reported in use ([`take_lock`]): 200 ms in all, with [`LOCK_RETRY`].
const LOCK_TRIES: u32 = 20;
/// How long apart the tries of a held database lock are.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(10);

impl SqliteStore {
    /// Seals every stored value (task states, launches, journal entries)
    /// with `keys`' current key, clear values and values sealed with an
    /// older key alike, in one transaction; then forgets the check values
    /// of the other keys (the database no longer needs them: they may be
    /// taken out of the key file), rewrites the file without its free
    /// pages (`VACUUM`, so no page of an old value is left in it) and
    /// empties the write-ahead log. Takes the database's lock: the server
    /// must be stopped (a running one makes this fail with
    /// [`StoreError::Locked`], changing nothing).
    ///
    /// # Errors
    ///
    /// `Locked`; [`StoreError::Key`] when the database holds values sealed
    /// with a key `keys` lacks or a key differs; a value that does not open
    /// (nothing is changed then); `Io`, `Corrupt`, `NewerSchema` as at open.
    pub fn reencrypt(path: impl AsRef<Path>, keys: &Keyring) -> Result<Reencrypted, StoreError> {
        let path = path.as_ref();
        if !path.exists() {
            return Err(io(format!("{}: no such database", path.display())));
        }
        let _lock = take_lock(path)?;
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql(path))?;
        prepare(&mut conn, path, true, None)?;
        check_keys(&conn, path, Some(keys))?;
        let e = sql(path);
        let mut done = Reencrypted::default();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(&e)?;
        {
            type Row = (i64, Vec<u8>, Vec<u8>, String, Option<String>);
            let mut select = tx
                .prepare(
                    "SELECT seq, id, root, state, launch FROM tasks WHERE seq > ?1 ORDER BY seq LIMIT 512",
                )
                .map_err(&e)?;
            let mut update = tx
                .prepare("UPDATE tasks SET state = ?2, launch = ?3 WHERE seq = ?1")
                .map_err(&e)?;
            let mut after = i64::MIN;
            loop {
                let rows: Vec<Row> = select
                    .query_map(params![after], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })
                    .map_err(&e)?
                    .collect::<Result<_, _>>()
                    .map_err(&e)?;
                let Some(last) = rows.last() else { break };
                after = last.0;
                for (seq, id, root, state, launch) in rows {
                    let (id, root) = (blob_id(&id)?, blob_id(&root)?);
                    let new_state = reseal(keys, Place::new(Column::State, id.as_u128()), &state)?;
                    let new_launch = match &launch {
                        Some(l) => reseal(keys, Place::new(Column::Launch, root.as_u128()), l)?,
                        None => None,
                    };
                    if new_state.is_none() && new_launch.is_none() {
                        continue;
                    }
                    done.values += u64::from(new_state.is_some()) + u64::from(new_launch.is_some());
                    update
                        .execute(params![
                            seq,
                            new_state.as_deref().unwrap_or(&state),
                            new_launch.as_deref().or(launch.as_deref())
                        ])
                        .map_err(&e)?;
                }
            }
            type Entry = (Vec<u8>, Vec<u8>, i64, String);
            let mut select = tx
                .prepare(
                    "SELECT root, task, n, entry FROM journal WHERE (root, task, n) > (?1, ?2, ?3)
                     ORDER BY root, task, n LIMIT 512",
                )
                .map_err(&e)?;
            let mut update = tx
                .prepare("UPDATE journal SET entry = ?4 WHERE root = ?1 AND task = ?2 AND n = ?3")
                .map_err(&e)?;
            let mut after: (Vec<u8>, Vec<u8>, i64) = (Vec::new(), Vec::new(), i64::MIN);
            loop {
                let rows: Vec<Entry> = select
                    .query_map(params![after.0, after.1, after.2], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })
                    .map_err(&e)?
                    .collect::<Result<_, _>>()
                    .map_err(&e)?;
                let Some(last) = rows.last() else { break };
                after = (last.0.clone(), last.1.clone(), last.2);
                for (root, task, n, entry) in rows {
                    let place = Place::nth(Column::Journal, blob_id(&task)?.as_u128(), n);
                    if let Some(sealed) = reseal(keys, place, &entry)? {
                        done.values += 1;
                        update.execute(params![root, task, n, sealed]).map_err(&e)?;
                    }
                }
            }
            let mut old = tx
                .prepare("SELECT key_id FROM seal_keys WHERE key_id <> ?1 ORDER BY key_id")
                .map_err(&e)?;
            done.retired = old
                .query_map(params![keys.current()], |r| r.get(0))
                .map_err(&e)?
                .collect::<Result<_, _>>()
                .map_err(&e)?;
            tx.execute(
                "DELETE FROM seal_keys WHERE key_id <> ?1",
                params![keys.current()],
            )
            .map_err(&e)?;
        }
        tx.commit().map_err(&e)?;
        conn.execute_batch("VACUUM").map_err(&e)?;
        let _: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(&e)?;
        Ok(done)
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
    fn submit(&self, mut batch: WriteBatch) -> Ticket {
        // Sealed here, in parallel on the callers' threads; the writer
        // passes a sealed value through (`seal::seal`).
        if let Some(keys) = &self.keys {
            for op in &mut batch.ops {
                if let WriteOp::PutTask(t) = op {
                    t.state = keys.seal(Place::new(Column::State, t.id.as_u128()), &t.state);
                }
            }
        }
        self.shared.queue.submit(batch)
    }

    fn commit_stats(&self) -> Option<&CommitStats> {
        Some(&self.shared.stats)
    }

    fn finished(&self) -> Option<&dyn super::FinishedTrees> {
        Some(self)
    }

    fn marks_ended(&self) -> bool {
        true
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
        self.shared.queue.read(|w| read_trees(w))
    }

    fn get(&self, id: TaskId) -> Result<Option<StoredTask>, StoreError> {
        self.shared.queue.read(move |w| {
            let e = |x: rusqlite::Error| StoreError::Io(x.to_string());
            let Some(rowid) = w.maps.read().rows.get(&id).copied() else {
                return Ok(None);
            };
            let row = w
                .conn
                .prepare_cached("SELECT id, root, parent, position, version, state FROM tasks WHERE seq = ?1")
                .map_err(e)?
                .query_row(params![rowid], row_task)
                .optional()
                .map_err(e)?;
            row.map(|r| to_task(r, w.keys.as_deref())).transpose()
        })
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic in the write loop fails the store and stops the syncer
    /// thread, which used to stay parked for the life of the process.
    #[test]
    fn a_writer_panic_fails_the_store_and_stops_the_syncer() {
        let path = std::env::temp_dir().join(format!("subtask-writer-panic-{}-wal", std::process::id()));
        let wal = File::create(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let shared = Arc::new(Shared {
            queue: WriteQueue::new(),
            sync: Some(Syncer {
                wal,
                state: Mutex::new(SyncState::default()),
                wake: Condvar::new(),
            }),
            stats: CommitStats::default(),
        });
        let syncer = {
            let shared = shared.clone();
            std::thread::spawn(move || syncer_loop(&shared))
        };
        let writer = {
            let shared = shared.clone();
            std::thread::spawn(move || run_writer(&shared, None, || panic!("a write loop that panics")))
        };
        assert!(writer.join().is_err(), "the panic reaches the thread's end");
        let error = shared.queue.mark.writable().expect_err("the store is failed");
        assert!(error.to_string().contains("panicked"), "{error}");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !syncer.is_finished() {
            assert!(
                std::time::Instant::now() < until,
                "the syncer is still running 10 s after the writer died"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        syncer.join().unwrap();
    }
}
