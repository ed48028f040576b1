//! Reads of stored trees for the server, when the runtime has let go of
//! finished ones ([`WriteOp::Release`](crate::store::WriteOp::Release);
//! `docs/durability.md`, "Finished trees"), and the sweep that deletes
//! released trees once their deletion time passes.
//!
//! Reads run on the caller's (blocking) thread, on read-only connections
//! of their own: WAL mode lets them read beside the writer, so a slow
//! commit or a full disk (the writer retrying) does not hold them. They
//! find rows through the writer's maps (read under their lock, briefly,
//! never across a query), so the file needs no index that a create would
//! write to: a task is one rowid lookup, its tree's root another; its
//! children are found in its tree's map (each row's parent) and their ids
//! read by rowid; a principal's trees are its list of roots' rowids in the
//! maps, paged, each root read by rowid. They see committed rows: the
//! server waits for durability before it shows a live tree's rows.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::writer::{Children, Maps};
use super::{Shared, SqliteStore, blob_id, sql};
use crate::model::TaskId;
use crate::store::seal::{Column, Keyring, Place, open_owned};
use crate::store::{FinishedTrees, ListPosition, ListedRoot, ReadTask, StoreError};

/// Roots taken from a principal's list at a time (under the maps' lock).
const ROOTS_PAGE: usize = 64;

/// How often the sweeper looks for released trees past their deletion time.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Released trees deleted per transaction of a sweep.
pub(super) const SWEEP_BATCH: usize = 64;

use crate::store::now_ms;

/// One row as [`COLUMNS`] gives it, its state and launch opened.
struct Row {
    seq: i64,
    id: TaskId,
    root: TaskId,
    parent: Option<TaskId>,
    position: u32,
    state: String,
    owner: Option<String>,
    launch: Option<String>,
    released: Option<i64>,
}

const COLUMNS: &str = "seq, id, root, parent, position, state, owner, launch, released";

/// A row of [`COLUMNS`] as read, before it is decoded.
type RawRow = (
    i64,
    Vec<u8>,
    Vec<u8>,
    Option<Vec<u8>>,
    i64,
    String,
    Option<String>,
    Option<String>,
    Option<i64>,
);

fn raw_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
    ))
}

/// A read-only connection with the keys to open sealed values and the
/// writer's maps.
struct Reader<'a> {
    conn: &'a Connection,
    keys: Option<&'a Keyring>,
    maps: &'a RwLock<Maps>,
}

fn read_err(x: rusqlite::Error) -> StoreError {
    StoreError::Io(x.to_string())
}

impl Reader<'_> {
    fn decode(
        &self,
        (seq, id, root, parent, position, state, owner, launch, released): RawRow,
    ) -> Result<Row, StoreError> {
        let id = blob_id(&id)?;
        let root = blob_id(&root)?;
        Ok(Row {
            seq,
            id,
            root,
            parent: parent.as_deref().map(blob_id).transpose()?,
            position: u32::try_from(position)
                .map_err(|_| StoreError::Corrupt(format!("task {id}: position out of range")))?,
            state: open_owned(self.keys, Place::new(Column::State, id.as_u128()), state)?,
            owner,
            launch: launch
                .map(|l| open_owned(self.keys, Place::new(Column::Launch, root.as_u128()), l))
                .transpose()?,
            released,
        })
    }

    /// The row at `rowid`, if any.
    fn row_at(&self, rowid: i64) -> Result<Option<Row>, StoreError> {
        let mut st = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM tasks WHERE seq = ?1"))
            .map_err(read_err)?;
        let found = st
            .query_row(params![rowid], raw_row)
            .optional()
            .map_err(read_err)?;
        found.map(|x| self.decode(x)).transpose()
    }

    /// The row of task `id`, if stored.
    fn row_of(&self, id: TaskId) -> Result<Option<Row>, StoreError> {
        let rowid = self.maps.read().rows.get(&id).copied();
        match rowid {
            Some(rowid) => Ok(self.row_at(rowid)?.filter(|r| r.id == id)),
            None => Ok(None),
        }
    }

    /// The root row of `root`'s tree, `None` when it is not stored or its
    /// deletion time has passed.
    fn live_root(&self, root: TaskId, now: i64) -> Result<Option<Row>, StoreError> {
        Ok(self
            .row_of(root)?
            .filter(|r| r.released.is_none_or(|at| at > now)))
    }

    /// The ids of the children of the task at `task` (its row) in
    /// position order: found in the tree's map, their ids read from their
    /// rows when the tree is released (its map keeps rowids only).
    fn children(&self, task: &Row) -> Result<Vec<TaskId>, StoreError> {
        let found = match self.maps.read().trees.get(&task.root) {
            Some(rows) => rows.children(task.seq),
            None => return Ok(Vec::new()),
        };
        let rowids = match found {
            Children::Ids(ids) => return Ok(ids),
            Children::Rowids(r) if r.is_empty() => return Ok(Vec::new()),
            Children::Rowids(r) => r,
        };
        // One statement for them all: each a rowid lookup.
        let list = rowids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT id FROM tasks WHERE seq IN (SELECT value FROM json_each(?1)) ORDER BY position",
            )
            .map_err(read_err)?;
        let ids = st
            .query_map(params![format!("[{list}]")], |r| r.get::<_, Vec<u8>>(0))
            .map_err(read_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(read_err)?;
        ids.iter().map(|b| blob_id(b)).collect()
    }

    /// Up to [`ROOTS_PAGE`] of `owner`'s roots' rowids in `range`, newest
    /// first when `newest`, read under the maps' lock.
    fn roots_page(&self, owner: &str, range: impl std::ops::RangeBounds<i64>, newest: bool) -> Vec<i64> {
        let maps = self.maps.read();
        let Some(roots) = maps.owned.get(owner) else {
            return Vec::new();
        };
        let range = roots.range(range).copied();
        if newest {
            range.rev().take(ROOTS_PAGE).collect()
        } else {
            range.take(ROOTS_PAGE).collect()
        }
    }

    /// The root row at `rowid` when it is still `owner`'s tree's, stored
    /// and not past its deletion time (the list is read apart from the
    /// rows: one may have gone since).
    fn owned_root(&self, rowid: i64, owner: &str, now: i64) -> Result<Option<Row>, StoreError> {
        Ok(self.row_at(rowid)?.filter(|r| {
            r.parent.is_none() && r.owner.as_deref() == Some(owner) && r.released.is_none_or(|at| at > now)
        }))
    }

    /// The rowids of `root`'s tree in creation order.
    fn tree_rowids(&self, root: TaskId) -> Vec<i64> {
        self.maps
            .read()
            .trees
            .get(&root)
            .map(super::writer::TreeRows::rowids)
            .unwrap_or_default()
    }
}

fn read_task(row: Row, owner: Option<String>, children: Vec<TaskId>) -> ReadTask {
    ReadTask {
        id: row.id,
        root: row.root,
        parent: row.parent,
        position: row.position,
        state: row.state,
        owner,
        children,
    }
}

impl SqliteStore {
    /// `f` on a read-only connection of the pool (one is opened when none
    /// is free), on the calling thread.
    fn with_reader<T>(&self, f: impl FnOnce(&Reader<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let conn = match self.readers.lock().pop() {
            Some(c) => c,
            None => {
                let c = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(sql(&self.path))?;
                c.busy_timeout(Duration::from_secs(5)).map_err(sql(&self.path))?;
                c
            }
        };
        let out = f(&Reader {
            conn: &conn,
            keys: self.keys.as_deref(),
            maps: &self.maps,
        });
        self.readers.lock().push(conn);
        out
    }
}

impl FinishedTrees for SqliteStore {
    fn read_task(&self, id: TaskId) -> Result<Option<ReadTask>, StoreError> {
        self.with_reader(|r| {
            let now = now_ms();
            let Some(task) = r.row_of(id)? else {
                return Ok(None);
            };
            let owner = if task.parent.is_none() {
                if task.released.is_some_and(|at| at <= now) {
                    return Ok(None);
                }
                task.owner.clone()
            } else {
                match r.live_root(task.root, now)? {
                    Some(root) => root.owner,
                    None => return Ok(None),
                }
            };
            let children = r.children(&task)?;
            Ok(Some(read_task(task, owner, children)))
        })
    }

    fn list_tasks(
        &self,
        owner: &str,
        after: (i64, i64),
        limit: usize,
    ) -> Result<Vec<(ListPosition, ReadTask)>, StoreError> {
        self.with_reader(|r| {
            let now = now_ms();
            let mut out = Vec::new();
            let mut from = after.0;
            'trees: while out.len() < limit {
                // A page of roots at a time: a long list is not read whole.
                let roots = r.roots_page(owner, from.., false);
                let Some(&last) = roots.last() else { break };
                from = last + 1;
                for tree_seq in roots {
                    let Some(root) = r.owned_root(tree_seq, owner, now)? else {
                        continue;
                    };
                    let rowids = r.tree_rowids(root.id);
                    // The root's row, read already: its tree's first.
                    let mut root = Some(root);
                    for rowid in rowids {
                        if (tree_seq, rowid) <= after {
                            continue;
                        }
                        if out.len() == limit {
                            break 'trees;
                        }
                        let task = match root.take_if(|t| t.seq == rowid) {
                            Some(t) => t,
                            None => match r.row_at(rowid)? {
                                Some(t) => t,
                                None => continue,
                            },
                        };
                        let children = r.children(&task)?;
                        out.push((
                            (tree_seq, rowid),
                            read_task(task, Some(owner.to_owned()), children),
                        ));
                    }
                }
            }
            Ok(out)
        })
    }

    fn list_roots(&self, owner: &str, before: i64, limit: usize) -> Result<Vec<ListedRoot>, StoreError> {
        self.with_reader(|r| {
            let now = now_ms();
            let mut out = Vec::new();
            let mut before = before;
            'roots: while out.len() < limit {
                let roots = r.roots_page(owner, ..before, true);
                let Some(&last) = roots.last() else { break };
                before = last;
                for rowid in roots {
                    let Some(mut row) = r.owned_root(rowid, owner, now)? else {
                        continue;
                    };
                    let launch = row.launch.take();
                    let owner = row.owner.clone();
                    out.push(ListedRoot {
                        seq: row.seq,
                        task: read_task(row, owner, Vec::new()),
                        launch,
                    });
                    if out.len() == limit {
                        break 'roots;
                    }
                }
            }
            Ok(out)
        })
    }

    fn read_trees(&self, ids: &[TaskId]) -> Result<Vec<(ReadTask, Option<String>)>, StoreError> {
        self.with_reader(|r| {
            let now = now_ms();
            let mut roots: Vec<TaskId> = Vec::new();
            for id in ids {
                if let Some(row) = r.row_of(*id)?
                    && !roots.contains(&row.root)
                {
                    roots.push(row.root);
                }
            }
            let mut out = Vec::new();
            for root in roots {
                let Some(top) = r.live_root(root, now)? else {
                    continue;
                };
                let owner = top.owner.clone();
                for rowid in r.tree_rowids(root) {
                    if let Some(mut row) = r.row_at(rowid)? {
                        let launch = row.launch.take();
                        out.push((read_task(row, owner.clone(), Vec::new()), launch));
                    }
                }
            }
            Ok(out)
        })
    }
}

/// Starts the sweeper: every [`SWEEP_EVERY`], the writer deletes the
/// released trees past their deletion time (64 per transaction, until none
/// is left). It holds the store weakly and ends once the store is closed.
/// A failed sweep is logged and tried again next time; nothing is swept
/// while the store is failed or full.
pub(super) fn start_sweeper(shared: &Arc<Shared>, path: &Path) -> std::io::Result<()> {
    let shared = Arc::downgrade(shared);
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("subtask-sweep".into())
        .spawn(move || {
            loop {
                // Its own sleep: the writer's condition variable wakes one
                // waiter per batch, and must wake the writer.
                std::thread::sleep(SWEEP_EVERY);
                let Some(shared) = shared.upgrade() else { return };
                if shared.queue.mark.writable().is_err() {
                    continue;
                }
                loop {
                    let path = path.clone();
                    match shared.queue.read(move |w| w.sweep(now_ms(), &path)) {
                        Ok(SWEEP_BATCH) => continue,
                        Ok(_) => break,
                        Err(StoreError::Failed(_)) => return,
                        Err(e) => {
                            tracing::warn!(error = %e, "deleting finished trees past their deletion time failed; tried again later");
                            break;
                        }
                    }
                }
            }
        })
        .map(|_| ())
}
