//! The writer thread: commits groups of batches, and rides out a full disk.

use std::path::Path;

use std::sync::Arc;

use parking_lot::RwLock;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::finished::SWEEP_BATCH;
use super::{Shared, blob_id, id_blob, sql};
use crate::model::{IdMap, TaskId};
use crate::store::queue::Next;
use crate::store::seal::{Column, Keyring, Place, seal};
use crate::store::{StoreError, Ticket, TreeMeta, WriteBatch, WriteOp};

/// Where each task's row is: kept by the writer, read by the store's
/// readers (`finished.rs`) under the lock, briefly.
#[derive(Default)]
pub(super) struct Maps {
    /// Task id to rowid.
    pub(super) rows: IdMap<i64>,
    /// Root to the rows of its tree.
    pub(super) trees: IdMap<TreeRows>,
    /// The trees the runtime let go of ([`WriteOp::Release`]), with when
    /// each is deleted (ms since the Unix epoch; `i64::MAX`: never).
    pub(super) released: IdMap<i64>,
}

/// The rows of one tree, in rowid order.
pub(super) enum TreeRows {
    /// A tree the runtime holds: each task's rowid and id.
    Live(Vec<(i64, TaskId)>),
    /// A released tree: its rowids only, in the least memory (its ids are
    /// read back as its rows are deleted). Its rows never change.
    Released(Box<[i64]>),
}

impl Default for TreeRows {
    fn default() -> Self {
        TreeRows::Live(Vec::new())
    }
}

impl TreeRows {
    /// The rowids, in order.
    pub(super) fn rowids(&self) -> Vec<i64> {
        match self {
            TreeRows::Live(rows) => rows.iter().map(|r| r.0).collect(),
            TreeRows::Released(rowids) => rowids.to_vec(),
        }
    }

    /// A new row (of a live tree; a released tree gets none).
    fn push(&mut self, rowid: i64, id: TaskId) {
        match self {
            TreeRows::Live(rows) => rows.push((rowid, id)),
            TreeRows::Released(_) => debug_assert!(false, "a row added to a released tree"),
        }
    }

    /// Keeps only the rowids: the tree was released.
    fn release(&mut self) {
        if let TreeRows::Live(rows) = self {
            *self = TreeRows::Released(rows.iter().map(|r| r.0).collect());
        }
    }
}

/// The writer thread's state: the connection and where each task's row is.
pub(super) struct Writer {
    pub(super) conn: Connection,
    /// Where each task's row is; changed only by this thread, once a
    /// transaction committed ([`Writer::fold`]).
    pub(super) maps: Arc<RwLock<Maps>>,
    /// Time spent in SQLite's COMMIT (write and fsync), for `SUBTASK_STORE_DEBUG`.
    pub(super) in_commit: std::time::Duration,
    /// The keys values are sealed with (`None`: written in clear).
    pub(super) keys: Option<std::sync::Arc<Keyring>>,
}

impl Writer {
    pub(super) fn open(conn: Connection, path: &Path) -> Result<Writer, StoreError> {
        let w = Writer {
            conn,
            maps: Arc::default(),
            in_commit: std::time::Duration::ZERO,
            keys: None,
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
            let mut maps = w.maps.write();
            let mut stmt = w
                .conn
                .prepare("SELECT seq, id, root, released FROM tasks")
                .map_err(&e)?;
            let mut rows = stmt.query([]).map_err(&e)?;
            while let Some(r) = rows.next().map_err(&e)? {
                let rowid: i64 = r.get(0).map_err(value)?;
                let id = blob_id(&r.get::<_, Vec<u8>>(1).map_err(value)?)?;
                let root = blob_id(&r.get::<_, Vec<u8>>(2).map_err(value)?)?;
                if maps.rows.insert(id, rowid).is_some() {
                    return Err(StoreError::Corrupt(format!(
                        "{}: task {id} is stored twice",
                        path.display()
                    )));
                }
                maps.trees.entry(root).or_default().push(rowid, id);
                if let Some(at) = r.get::<_, Option<i64>>(3).map_err(value)? {
                    maps.released.insert(root, at);
                }
            }
            let released: Vec<TaskId> = maps.released.keys().copied().collect();
            for root in released {
                if let Some(rows) = maps.trees.get_mut(&root) {
                    rows.release();
                }
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
        let mut released: Vec<(TaskId, i64)> = Vec::new();
        let mut metas: IdMap<&TreeMeta> = IdMap::default();
        let keys = self.keys.as_deref();
        // Read only here; changed by `fold`, on this thread, after commit.
        let maps = self.maps.clone();
        let maps = maps.read();
        // A tree's launch, as stored (sealed with its root's id).
        let launch_text = |meta: &TreeMeta| {
            meta.launch.as_ref().map(|l| {
                let l = l.to_string();
                match keys {
                    None => l,
                    Some(k) => k.seal(Place::new(Column::Launch, meta.root.as_u128()), &l),
                }
            })
        };
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
            let mut release = tx
                .prepare_cached("UPDATE tasks SET released = ?2 WHERE seq = ?1")
                .map_err(&e)?;
            for (_, batch) in group {
                for op in &batch.ops {
                    match op {
                        WriteOp::PutTree(meta) => {
                            let row = fresh.get(&meta.root).or_else(|| maps.rows.get(&meta.root));
                            match row {
                                Some(&rowid) => {
                                    let launch = launch_text(meta);
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
                        WriteOp::PutTask(t) => match fresh.get(&t.id).or_else(|| maps.rows.get(&t.id)) {
                            Some(&rowid) => {
                                let state = seal(keys, Place::new(Column::State, t.id.as_u128()), &t.state);
                                update
                                    .execute(params![rowid, batch.version as i64, state.as_ref()])
                                    .map_err(&e)?;
                            }
                            None => {
                                let parent = t.parent.map(id_blob);
                                let meta = metas.remove(&t.id);
                                let launch = meta.and_then(launch_text);
                                let state = seal(keys, Place::new(Column::State, t.id.as_u128()), &t.state);
                                insert
                                    .execute(params![
                                        &id_blob(t.id)[..],
                                        &id_blob(t.root)[..],
                                        parent.as_ref().map(|p| &p[..]),
                                        t.position,
                                        batch.version as i64,
                                        state.as_ref(),
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
                            let mut rowids: Vec<i64> =
                                maps.trees.get(root).map(TreeRows::rowids).unwrap_or_default();
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
                            let place = Place::nth(Column::Journal, row.task.as_u128(), i64::from(row.n));
                            let entry = seal(keys, place, &row.entry);
                            append
                                .execute(params![
                                    &id_blob(row.root)[..],
                                    &id_blob(row.task)[..],
                                    row.n,
                                    entry.as_ref()
                                ])
                                .map_err(&e)?;
                        }
                        WriteOp::Release { root, delete_at } => {
                            let at = delete_at.map_or(i64::MAX, |t| i64::try_from(t).unwrap_or(i64::MAX));
                            if let Some(&rowid) = fresh.get(root).or_else(|| maps.rows.get(root)) {
                                release.execute(params![rowid, at]).map_err(&e)?;
                                // A finished tree never runs again: its
                                // journal is of no further use.
                                delete_journal.execute(params![&id_blob(*root)[..]]).map_err(&e)?;
                                released.push((*root, at));
                            }
                        }
                        // One process per SQLite file: no cluster inbox.
                        WriteOp::Receipt { .. } => {}
                    }
                }
            }
        }
        drop(maps);
        let t_commit = std::time::Instant::now();
        tx.commit().map_err(&e)?;
        self.in_commit += t_commit.elapsed();
        Ok(Folded {
            deleted,
            deleted_ids: Vec::new(),
            new_rows,
            released,
        })
    }

    /// Deletes up to [`SWEEP_BATCH`] released trees whose deletion time is `now_ms` or
    /// earlier, in one transaction (outside the batches' order: nobody
    /// waits for it, and no batch names a released tree again); returns
    /// how many. Called by the store's sweeper through the writer's read
    /// queue, so it never runs beside a commit.
    pub(super) fn sweep(&mut self, now_ms: i64, path: &Path) -> Result<usize, StoreError> {
        let e = sql(path);
        let due: Vec<TaskId> = {
            let mut st = self
                .conn
                .prepare_cached("SELECT id FROM tasks WHERE released <= ?1 ORDER BY released LIMIT ?2")
                .map_err(&e)?;
            let rows = st
                .query_map(params![now_ms, SWEEP_BATCH as i64], |r| r.get::<_, Vec<u8>>(0))
                .map_err(&e)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(&e)?;
            rows.iter().map(|b| blob_id(b)).collect::<Result<_, _>>()?
        };
        if due.is_empty() {
            return Ok(0);
        }
        let mut ids = Vec::new();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&e)?;
        {
            let mut delete = tx
                .prepare_cached("DELETE FROM tasks WHERE seq = ?1 RETURNING id")
                .map_err(&e)?;
            let mut delete_journal = tx
                .prepare_cached("DELETE FROM journal WHERE root = ?1")
                .map_err(&e)?;
            let maps = self.maps.read();
            for root in &due {
                for rowid in maps.trees.get(root).map(TreeRows::rowids).unwrap_or_default() {
                    let id: Option<Vec<u8>> = delete
                        .query_row(params![rowid], |r| r.get(0))
                        .optional()
                        .map_err(&e)?;
                    if let Some(id) = id {
                        ids.push(blob_id(&id)?);
                    }
                }
                delete_journal.execute(params![&id_blob(*root)[..]]).map_err(&e)?;
            }
        }
        tx.commit().map_err(&e)?;
        let n = due.len();
        self.fold(Folded {
            deleted: due,
            deleted_ids: ids,
            new_rows: Vec::new(),
            released: Vec::new(),
        });
        Ok(n)
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
        let mut maps = self.maps.write();
        for root in f.deleted {
            maps.released.remove(&root);
            if let Some(TreeRows::Live(rows)) = maps.trees.remove(&root) {
                for (_, id) in rows {
                    maps.rows.remove(&id);
                }
            }
        }
        for id in f.deleted_ids {
            maps.rows.remove(&id);
        }
        for (root, at) in f.released {
            maps.released.insert(root, at);
            if let Some(rows) = maps.trees.get_mut(&root) {
                rows.release();
            }
        }
        for (id, root, rowid) in f.new_rows {
            maps.rows.insert(id, rowid);
            maps.trees.entry(root).or_default().push(rowid, id);
        }
    }
}

/// Trees a committed transaction deleted and released, and the rows it
/// inserted: (id, root, rowid).
struct Folded {
    deleted: Vec<TaskId>,
    /// Ids of deleted released trees' tasks (their trees keep no ids).
    deleted_ids: Vec<TaskId>,
    new_rows: Vec<(TaskId, TaskId, i64)>,
    released: Vec<(TaskId, i64)>,
}

/// Moves queued writes into `group` (at most `max`), or takes the read job
/// at the front when `group` is empty. Reads never overtake writes.
///
/// A commit that fails for lack of space ([`StoreError::Full`]) holds the
/// store: the group's waiters (and every later one) learn it at once, new
/// work is refused ([`TaskStore::writable`]), and the writer commits the
/// group one batch at a time, in order: the batches before the first that
/// does not fit land, and that one is retried with a backoff (5 ms
/// doubling to [`FULL_RETRY_MAX`], with jitter; the log is checkpointed and truncated
/// between tries when there is room) until it fits. The hold ends when
/// the whole group is written. Any other failure is sticky.
pub(super) fn writer_loop(mut w: Writer, shared: &Shared, max: usize, path: &Path) {
    let mut group: Vec<(u64, WriteBatch)> = Vec::new();
    let mut state = WriterState::Writing;
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
        if matches!(state, WriterState::Failed) {
            group.clear();
            continue;
        }
        let mut from = 0;
        while from < group.len() {
            // While full, one batch at a time: whatever fits lands, in order.
            let to = match state {
                WriterState::Full { .. } => from + 1,
                _ => group.len(),
            };
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
                    // The maps first: a reader that waited for a ticket
                    // finds its rows in them.
                    w.fold(folded);
                    match &shared.sync {
                        // Durable once the syncer's next fsync returns.
                        Some(sync) => {
                            sync.state.lock().committed = last;
                            sync.wake.notify_one();
                        }
                        // Durable now.
                        None => shared.queue.mark.advance(Ticket(last)),
                    }
                    from = to;
                    if let WriterState::Full { retry } = &mut state
                        && let Some(next) = group.get(from)
                    {
                        // The hold moves past what was just written.
                        if let Err(e) = shared.queue.mark.writable() {
                            shared.queue.mark.hold(Ticket(next.0), e);
                        }
                        *retry = full_retries();
                    }
                }
                Err(e @ StoreError::Full(_)) => {
                    if !matches!(state, WriterState::Full { .. }) {
                        tracing::error!(
                            error = %e,
                            "the task store is full: new work is refused; changes are kept and written once space is freed"
                        );
                        shared.queue.mark.hold(Ticket(first), e);
                        state = WriterState::Full {
                            retry: full_retries(),
                        };
                    }
                    if part.len() > 1 {
                        continue;
                    }
                    let pause = match &mut state {
                        WriterState::Full { retry } => retry.next().unwrap_or(FULL_RETRY_MAX),
                        _ => FULL_RETRY_MIN,
                    };
                    // Most of a full disk may be the log's old page versions:
                    // move them into the database and empty the log if the
                    // little room left allows (a no-op that fails otherwise).
                    w.truncate_log();
                    if !shared.queue.pause_unless_closing(pause) {
                        let e = StoreError::Failed(
                            "the store closed while it was full; these changes were never written".into(),
                        );
                        shared.queue.mark.fail(Ticket(first), e);
                        state = WriterState::Failed;
                        break;
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "a store commit failed; no further writes are accepted");
                    state = WriterState::Failed;
                    shared.queue.mark.fail(Ticket(first), e);
                    break;
                }
            }
        }
        if let WriterState::Full { .. } = state {
            state = WriterState::Writing;
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

/// What the writer does with the next group.
#[derive(Debug)]
enum WriterState {
    /// Commits each group whole.
    Writing,
    /// The disk is full: the store is held (new work refused), the group is
    /// committed one batch at a time, and the batch that did not fit is
    /// tried again after the next of `retry`'s waits. Back to `Writing`
    /// once the group is written.
    Full {
        /// The waits before the next tries (doubling, started over by a
        /// batch that fits).
        retry: crate::retry::Backoff,
    },
    /// A commit failed for good, or the store closed while full: nothing
    /// more is written (every later ticket fails).
    Failed,
}

/// The first wait before a batch that did not fit is written again...
const FULL_RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(5);
/// ...doubling up to this.
const FULL_RETRY_MAX: std::time::Duration = std::time::Duration::from_millis(200);

/// The waits of a batch that does not fit, from the first try.
fn full_retries() -> crate::retry::Backoff {
    crate::retry::delays(FULL_RETRY_MIN, FULL_RETRY_MAX)
}
