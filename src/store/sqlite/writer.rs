//! The writer thread: commits groups of batches, and rides out a full disk.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};

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
    /// The same trees by deletion time, for the sweep (in place of an
    /// index on the file that every mark would write to: about 32 bytes
    /// per released tree).
    pub(super) due: BTreeSet<(i64, TaskId)>,
    /// Each principal's trees, live or released: their roots' rowids, in
    /// creation order (a tree without an owner is in none). What
    /// `list_roots` and `list_tasks` page through, in place of an index
    /// on the file that every create would write to
    /// (`docs/durability.md`, "Finished trees").
    pub(super) owned: HashMap<Box<str>, BTreeSet<i64>>,
    /// The trees with journal rows (durable execution): a tree's journal
    /// is deleted only when it has one (most trees never write one, and
    /// a `DELETE` that finds nothing still costs a statement and a seek).
    pub(super) journaled: IdMap<()>,
}

/// The parent of a row whose parent is not in its tree (the root's).
const NO_PARENT: u32 = u32::MAX;

/// The rows of one tree, in rowid order (the order they were created in,
/// the root first), and each row's parent: its index in that order, for
/// every row after the first ([`NO_PARENT`] when unknown: a damaged
/// file). Children follow their parent, siblings in position order, so a
/// task's children are the later rows naming it, in that order.
pub(super) enum TreeRows {
    /// A tree the runtime holds: each task's rowid and id.
    Live {
        rows: Vec<(i64, TaskId)>,
        parents: Vec<u32>,
    },
    /// A released tree: its rowids only, in the least memory (its ids are
    /// read back as its rows are deleted). Its rows never change.
    Released { rowids: Box<[i64]>, parents: Box<[u32]> },
}

impl Default for TreeRows {
    fn default() -> Self {
        TreeRows::Live {
            rows: Vec::new(),
            parents: Vec::new(),
        }
    }
}

/// The children of a task, as [`TreeRows::children`] finds them.
pub(super) enum Children {
    /// Their ids (a live tree's).
    Ids(Vec<TaskId>),
    /// Their rowids (a released tree's: the ids are in the rows).
    Rowids(Vec<i64>),
}

impl TreeRows {
    /// The rowids, in order.
    pub(super) fn rowids(&self) -> Vec<i64> {
        match self {
            TreeRows::Live { rows, .. } => rows.iter().map(|r| r.0).collect(),
            TreeRows::Released { rowids, .. } => rowids.to_vec(),
        }
    }

    fn rowid_at(&self, i: usize) -> i64 {
        match self {
            TreeRows::Live { rows, .. } => rows[i].0,
            TreeRows::Released { rowids, .. } => rowids[i],
        }
    }

    /// The index of the row at `rowid`, if it is one of this tree's.
    fn index_of(&self, rowid: i64) -> Option<usize> {
        match self {
            TreeRows::Live { rows, .. } => rows.binary_search_by_key(&rowid, |r| r.0).ok(),
            TreeRows::Released { rowids, .. } => rowids.binary_search(&rowid).ok(),
        }
    }

    /// A new row (of a live tree; a released tree gets none), `parent` the
    /// rowid of its parent's row.
    fn push(&mut self, rowid: i64, id: TaskId, parent: Option<i64>) {
        let parent = parent
            .and_then(|p| self.index_of(p))
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(NO_PARENT);
        match self {
            TreeRows::Live { rows, parents } => {
                if !rows.is_empty() {
                    parents.push(parent);
                }
                rows.push((rowid, id));
            }
            TreeRows::Released { .. } => debug_assert!(false, "a row added to a released tree"),
        }
    }

    /// Keeps only the rowids and parents: the tree was released.
    fn release(&mut self) {
        if let TreeRows::Live { rows, parents } = self {
            *self = TreeRows::Released {
                rowids: rows.iter().map(|r| r.0).collect(),
                parents: std::mem::take(parents).into_boxed_slice(),
            };
        }
    }

    /// The children of the task at `rowid`, in position order (empty when
    /// it is not one of this tree's rows). A scan of the rows after it:
    /// about a nanosecond per row.
    pub(super) fn children(&self, rowid: i64) -> Children {
        let parents: &[u32] = match self {
            TreeRows::Live { parents, .. } => parents,
            TreeRows::Released { parents, .. } => parents,
        };
        let found: Vec<usize> = match self.index_of(rowid).and_then(|i| u32::try_from(i).ok()) {
            // `parents[j]` is row `j + 1`'s.
            Some(at) => parents
                .iter()
                .enumerate()
                .skip(at as usize)
                .filter(|(_, p)| **p == at)
                .map(|(j, _)| j + 1)
                .collect(),
            None => Vec::new(),
        };
        match self {
            TreeRows::Live { rows, .. } => Children::Ids(found.into_iter().map(|j| rows[j].1).collect()),
            TreeRows::Released { .. } => {
                Children::Rowids(found.into_iter().map(|j| self.rowid_at(j)).collect())
            }
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
        // A task id read in place; anything but a blob fails as a typed read does.
        let id_at = |r: &rusqlite::Row<'_>, i: usize| match r.get_ref(i) {
            Ok(ValueRef::Blob(b)) => blob_id(b),
            _ => blob_id(&r.get::<_, Vec<u8>>(i).map_err(value)?),
        };
        {
            let mut maps = w.maps.write();
            let maps = &mut *maps;
            // In rowid order: a tree's rows in the order they were created,
            // each parent before its children. The parent and the owner
            // only place a row (a damaged one is found when it is read).
            let mut stmt = w
                .conn
                .prepare(
                    "SELECT seq, id, root, parent, released, CASE WHEN parent IS NULL THEN owner END
                     FROM tasks ORDER BY seq",
                )
                .map_err(&e)?;
            let mut rows = stmt.query([]).map_err(&e)?;
            while let Some(r) = rows.next().map_err(&e)? {
                let rowid: i64 = r.get(0).map_err(value)?;
                // Read in place (no copy per row: a million rows at start).
                let id = id_at(r, 1)?;
                let root = id_at(r, 2)?;
                let parent = match r.get_ref(3) {
                    Ok(ValueRef::Blob(b)) => blob_id(b).ok().and_then(|p| maps.rows.get(&p).copied()),
                    _ => None,
                };
                if maps.rows.insert(id, rowid).is_some() {
                    return Err(StoreError::Corrupt(format!(
                        "{}: task {id} is stored twice",
                        path.display()
                    )));
                }
                maps.trees.entry(root).or_default().push(rowid, id, parent);
                if let Some(at) = r.get::<_, Option<i64>>(4).map_err(value)? {
                    maps.released.insert(root, at);
                    maps.due.insert((at, root));
                }
                if let Some(owner) = text(r, 5) {
                    own(&mut maps.owned, Cow::Borrowed(owner), rowid);
                }
            }
            let mut st = w.conn.prepare("SELECT DISTINCT root FROM journal").map_err(&e)?;
            let mut rows = st.query([]).map_err(&e)?;
            while let Some(r) = rows.next().map_err(&e)? {
                maps.journaled.insert(id_at(r, 0)?, ());
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
    fn commit<'g>(&mut self, group: &'g [(u64, WriteBatch)], path: &Path) -> Result<Folded<'g>, StoreError> {
        let e = sql(path);
        // The maps change only once the transaction commits.
        let mut new_rows: Vec<NewRow> = Vec::new();
        let mut owned: Vec<OwnedChange<'g>> = Vec::new();
        let mut fresh: IdMap<i64> = IdMap::default();
        let mut deleted: Vec<TaskId> = Vec::new();
        let mut deleted_ids: Vec<TaskId> = Vec::new();
        let mut released: Vec<(TaskId, i64)> = Vec::new();
        // Roots whose `Ended` mark rides on their next row write in this
        // group (the root's terminal state, which follows it).
        let mut ending: IdMap<i64> = IdMap::default();
        let mut journals = Journals::default();
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
        let tx = Tx::begin(&self.conn).map_err(&e)?;
        {
            // Prepared (from the connection's cache) on first use: most
            // groups use two or three of these.
            let mut st = Statements::new(&self.conn);
            for (_, batch) in group {
                for op in &batch.ops {
                    match op {
                        WriteOp::PutTree(meta) => {
                            let row = fresh.get(&meta.root).or_else(|| maps.rows.get(&meta.root));
                            match row {
                                Some(&rowid) => {
                                    // A tree's owner is written with its root;
                                    // should it change, its list follows.
                                    let old = st
                                        .get(Sql::OwnerOf)
                                        .map_err(&e)?
                                        .query_row(params![rowid], |r| Ok(text(r, 0).map(str::to_owned)))
                                        .optional()
                                        .map_err(&e)?
                                        .flatten();
                                    if let Some(old) = old {
                                        owned.push((Cow::Owned(old), rowid, false));
                                    }
                                    if let Some(owner) = meta.owner.as_deref() {
                                        owned.push((Cow::Borrowed(owner), rowid, true));
                                    }
                                    let launch = launch_text(meta);
                                    st.get(Sql::UpdateMeta)
                                        .map_err(&e)?
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
                                match ending.remove(&t.id) {
                                    None => st.get(Sql::Update).map_err(&e)?.execute(params![
                                        rowid,
                                        batch.version as i64,
                                        state.as_ref()
                                    ]),
                                    Some(at) => st.get(Sql::UpdateEnded).map_err(&e)?.execute(params![
                                        rowid,
                                        batch.version as i64,
                                        state.as_ref(),
                                        at
                                    ]),
                                }
                                .map_err(&e)?;
                            }
                            None => {
                                let parent = t.parent.map(id_blob);
                                let meta = metas.remove(&t.id);
                                let launch = meta.and_then(launch_text);
                                let state = seal(keys, Place::new(Column::State, t.id.as_u128()), &t.state);
                                st.get(Sql::Insert)
                                    .map_err(&e)?
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
                                        ending.remove(&t.id),
                                    ])
                                    .map_err(&e)?;
                                let rowid = self.conn.last_insert_rowid();
                                fresh.insert(t.id, rowid);
                                new_rows.push((t.id, t.root, rowid, t.parent));
                                if let Some(owner) = meta.and_then(|m| m.owner.as_deref()) {
                                    owned.push((Cow::Borrowed(owner), rowid, true));
                                }
                            }
                        },
                        // A tree marked as it ended keeps no ids in its
                        // tree's map (`TreeRows::Released`); deleted before
                        // its release (its TTL inside the grace), its rows
                        // name them as they go, for the id map.
                        WriteOp::DeleteTree(root)
                            if matches!(maps.trees.get(root), Some(TreeRows::Released { .. })) =>
                        {
                            for rowid in maps.trees.get(root).map(TreeRows::rowids).unwrap_or_default() {
                                let gone = st
                                    .get(Sql::DeleteReturning)
                                    .map_err(&e)?
                                    .query_row(params![rowid], |r| {
                                        Ok((r.get::<_, Vec<u8>>(0)?, text(r, 1).map(str::to_owned)))
                                    })
                                    .optional()
                                    .map_err(&e)?;
                                if let Some((id, owner)) = gone {
                                    deleted_ids.push(blob_id(&id)?);
                                    if let Some(owner) = owner {
                                        owned.push((Cow::Owned(owner), rowid, false));
                                    }
                                }
                            }
                            journals.drop(&mut st, &maps, *root).map_err(&e)?;
                            released.retain(|r| r.0 != *root);
                            deleted.push(*root);
                        }
                        WriteOp::DeleteTree(root) => {
                            let root_row = fresh.get(root).or_else(|| maps.rows.get(root)).copied();
                            let mut rowids: Vec<i64> =
                                maps.trees.get(root).map(TreeRows::rowids).unwrap_or_default();
                            for r in new_rows.iter().filter(|r| r.1 == *root) {
                                rowids.push(r.2);
                                fresh.remove(&r.0);
                            }
                            for rowid in rowids {
                                if Some(rowid) != root_row {
                                    st.get(Sql::Delete)
                                        .map_err(&e)?
                                        .execute(params![rowid])
                                        .map_err(&e)?;
                                    continue;
                                }
                                // The root's row: its owner's list loses it.
                                let owner = st
                                    .get(Sql::DeleteRoot)
                                    .map_err(&e)?
                                    .query_row(params![rowid], |r| Ok(text(r, 0).map(str::to_owned)))
                                    .optional()
                                    .map_err(&e)?
                                    .flatten();
                                if let Some(owner) = owner {
                                    owned.push((Cow::Owned(owner), rowid, false));
                                }
                            }
                            new_rows.retain(|r| r.1 != *root);
                            journals.drop(&mut st, &maps, *root).map_err(&e)?;
                            // A mark earlier in the group goes with it.
                            ending.remove(root);
                            released.retain(|r| r.0 != *root);
                            deleted.push(*root);
                        }
                        WriteOp::AppendJournal(row) => {
                            let place = Place::nth(Column::Journal, row.task.as_u128(), i64::from(row.n));
                            let entry = seal(keys, place, &row.entry);
                            st.get(Sql::Append)
                                .map_err(&e)?
                                .execute(params![
                                    &id_blob(row.root)[..],
                                    &id_blob(row.task)[..],
                                    row.n,
                                    entry.as_ref()
                                ])
                                .map_err(&e)?;
                            if !maps.journaled.contains_key(&row.root) {
                                journals.added.insert(row.root, ());
                            }
                        }
                        // Marked with the root's terminal state, which
                        // follows in this batch (or by itself at the end
                        // of the group, below); folded as a release.
                        WriteOp::Ended { root, delete_at } => {
                            let at = delete_time(*delete_at);
                            ending.insert(*root, at);
                            // A finished tree never runs again: its
                            // journal is of no further use.
                            journals.drop(&mut st, &maps, *root).map_err(&e)?;
                            released.push((*root, at));
                        }
                        // Marked already (`Ended`, or a release written twice).
                        WriteOp::Release { root, .. } if maps.released.contains_key(root) => {}
                        WriteOp::Release { root, delete_at } => {
                            let at = delete_time(*delete_at);
                            if let Some(&rowid) = fresh.get(root).or_else(|| maps.rows.get(root)) {
                                st.get(Sql::Release)
                                    .map_err(&e)?
                                    .execute(params![rowid, at])
                                    .map_err(&e)?;
                                journals.drop(&mut st, &maps, *root).map_err(&e)?;
                                released.push((*root, at));
                            }
                        }
                        // One process per SQLite file: no cluster inbox.
                        WriteOp::Receipt { .. } => {}
                    }
                }
            }
            // A mark whose row was not written after it (a tree that had
            // ended before a restart): on the root's row by itself.
            for (root, at) in ending {
                match fresh.get(&root).or_else(|| maps.rows.get(&root)) {
                    Some(&rowid) => {
                        st.get(Sql::Release)
                            .map_err(&e)?
                            .execute(params![rowid, at])
                            .map_err(&e)?;
                    }
                    None => released.retain(|r| r.0 != root),
                }
            }
        }
        drop(maps);
        let t_commit = std::time::Instant::now();
        tx.commit().map_err(&e)?;
        self.in_commit += t_commit.elapsed();
        Ok(Folded {
            deleted,
            deleted_ids,
            new_rows,
            released,
            owned,
            journals,
        })
    }

    /// Deletes up to [`SWEEP_BATCH`] released trees whose deletion time is `now_ms` or
    /// earlier, in one transaction (outside the batches' order: nobody
    /// waits for it, and no batch names a released tree again); returns
    /// how many. Called by the store's sweeper through the writer's read
    /// queue, so it never runs beside a commit.
    pub(super) fn sweep(&mut self, now_ms: i64, path: &Path) -> Result<usize, StoreError> {
        let e = sql(path);
        let due: Vec<TaskId> = self
            .maps
            .read()
            .due
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .take(SWEEP_BATCH)
            .map(|(_, root)| *root)
            .collect();
        if due.is_empty() {
            return Ok(0);
        }
        let mut ids = Vec::new();
        let mut owned = Vec::new();
        let mut journals = Journals::default();
        let tx = Tx::begin(&self.conn).map_err(&e)?;
        {
            let mut st = Statements::new(&self.conn);
            let maps = self.maps.read();
            for root in &due {
                for rowid in maps.trees.get(root).map(TreeRows::rowids).unwrap_or_default() {
                    let row: Option<(Vec<u8>, Option<String>)> = st
                        .get(Sql::DeleteReturning)
                        .map_err(&e)?
                        .query_row(params![rowid], |r| Ok((r.get(0)?, text(r, 1).map(str::to_owned))))
                        .optional()
                        .map_err(&e)?;
                    if let Some((id, owner)) = row {
                        ids.push(blob_id(&id)?);
                        if let Some(owner) = owner {
                            owned.push((Cow::Owned(owner), rowid, false));
                        }
                    }
                }
                journals.drop(&mut st, &maps, *root).map_err(&e)?;
            }
        }
        tx.commit().map_err(&e)?;
        let n = due.len();
        self.fold(Folded {
            deleted: due,
            deleted_ids: ids,
            new_rows: Vec::new(),
            released: Vec::new(),
            owned,
            journals,
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
    fn fold(&mut self, f: Folded<'_>) {
        let mut maps = self.maps.write();
        let maps = &mut *maps;
        for root in f.deleted {
            if let Some(at) = maps.released.remove(&root) {
                maps.due.remove(&(at, root));
            }
            if let Some(TreeRows::Live { rows, .. }) = maps.trees.remove(&root) {
                for (_, id) in rows {
                    maps.rows.remove(&id);
                }
            }
        }
        for id in f.deleted_ids {
            maps.rows.remove(&id);
        }
        // The rows before the releases: a tree's last rows and its release
        // may share a group, and a released tree takes no new row.
        for (id, root, rowid, parent) in f.new_rows {
            // A parent is stored before its children (in this group or before).
            let parent = parent.and_then(|p| maps.rows.get(&p).copied());
            maps.rows.insert(id, rowid);
            maps.trees.entry(root).or_default().push(rowid, id, parent);
        }
        for (root, at) in f.released {
            if let Some(was) = maps.released.insert(root, at) {
                maps.due.remove(&(was, root));
            }
            maps.due.insert((at, root));
            if let Some(rows) = maps.trees.get_mut(&root) {
                rows.release();
            }
        }
        maps.journaled.extend(f.journals.added);
        for root in f.journals.dropped {
            maps.journaled.remove(&root);
        }
        for (owner, rowid, added) in f.owned {
            if added {
                own(&mut maps.owned, owner, rowid);
            } else if let Some(roots) = maps.owned.get_mut(&*owner) {
                roots.remove(&rowid);
                if roots.is_empty() {
                    maps.owned.remove(&*owner);
                }
            }
        }
    }
}

/// A write transaction on the writer's connection: `BEGIN IMMEDIATE` and
/// `COMMIT` as cached statements (a `rusqlite::Transaction` parses both
/// again for every group: about 3,500 instructions a commit), rolled
/// back when dropped uncommitted, as a `rusqlite::Transaction` is.
struct Tx<'c> {
    conn: &'c Connection,
}

impl<'c> Tx<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Tx<'c>> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Tx { conn })
    }

    fn commit(self) -> rusqlite::Result<()> {
        // On failure, dropped here: rolled back unless SQLite already did.
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// The statements a group's transaction may run.
#[derive(Clone, Copy)]
enum Sql {
    Insert,
    Update,
    UpdateEnded,
    UpdateMeta,
    OwnerOf,
    Delete,
    DeleteRoot,
    DeleteReturning,
    Append,
    DeleteJournal,
    Release,
}

impl Sql {
    const COUNT: usize = Sql::Release as usize + 1;

    fn text(self) -> &'static str {
        match self {
            Sql::Insert => {
                "INSERT INTO tasks(id, root, parent, position, version, state, owner, resumable, launch, released)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
            }
            Sql::Update => "UPDATE tasks SET version = ?2, state = ?3 WHERE seq = ?1",
            Sql::UpdateEnded => "UPDATE tasks SET version = ?2, state = ?3, released = ?4 WHERE seq = ?1",
            Sql::UpdateMeta => "UPDATE tasks SET owner = ?2, resumable = ?3, launch = ?4 WHERE seq = ?1",
            Sql::OwnerOf => "SELECT owner FROM tasks WHERE seq = ?1",
            Sql::Delete => "DELETE FROM tasks WHERE seq = ?1",
            Sql::DeleteRoot => "DELETE FROM tasks WHERE seq = ?1 RETURNING owner",
            // The sweep's too (`sweep`): one cached statement for both.
            Sql::DeleteReturning => "DELETE FROM tasks WHERE seq = ?1 RETURNING id, owner",
            Sql::Append => "INSERT INTO journal(root, task, n, entry) VALUES (?1, ?2, ?3, ?4)",
            Sql::DeleteJournal => "DELETE FROM journal WHERE root = ?1",
            Sql::Release => "UPDATE tasks SET released = ?2 WHERE seq = ?1",
        }
    }
}

/// A transaction's statements, each taken from the connection's cache on
/// first use and held until the transaction ends (taking all of them for
/// every group cost a cache lookup and a reset of each: about 800
/// instructions a statement, where most groups use two or three).
struct Statements<'c> {
    conn: &'c Connection,
    held: [Option<rusqlite::CachedStatement<'c>>; Sql::COUNT],
}

impl<'c> Statements<'c> {
    fn new(conn: &'c Connection) -> Statements<'c> {
        Statements {
            conn,
            held: Default::default(),
        }
    }

    fn get(&mut self, sql: Sql) -> rusqlite::Result<&mut rusqlite::CachedStatement<'c>> {
        let slot = &mut self.held[sql as usize];
        if slot.is_none() {
            *slot = Some(self.conn.prepare_cached(sql.text())?);
        }
        Ok(slot.as_mut().expect("prepared above"))
    }
}

/// Adds the root at `rowid` to `owner`'s trees.
fn own(owned: &mut HashMap<Box<str>, BTreeSet<i64>>, owner: Cow<'_, str>, rowid: i64) {
    match owned.get_mut(&*owner) {
        Some(roots) => {
            roots.insert(rowid);
        }
        None => {
            owned.insert(owner.into(), BTreeSet::from([rowid]));
        }
    }
}

/// Column `i` of `r` when it holds text (an owner; anything else places
/// nothing: a damaged value is found when its row is read).
fn text<'r>(r: &'r rusqlite::Row<'_>, i: usize) -> Option<&'r str> {
    match r.get_ref(i) {
        Ok(ValueRef::Text(t)) => std::str::from_utf8(t).ok(),
        _ => None,
    }
}

/// A row a committed transaction inserted: (id, root, rowid, parent).
type NewRow = (TaskId, TaskId, i64, Option<TaskId>);

/// A root's rowid added to (`true`) or taken from its owner's trees
/// ([`Maps::owned`]), in the order the transaction made them.
type OwnedChange<'g> = (Cow<'g, str>, i64, bool);

/// Trees a committed transaction deleted and released, the rows it
/// inserted, and the changes to the principals' lists of trees (owners
/// borrowed from the group's batches, or read back from deleted rows).
struct Folded<'g> {
    deleted: Vec<TaskId>,
    /// Ids of deleted released trees' tasks (their trees keep no ids).
    deleted_ids: Vec<TaskId>,
    new_rows: Vec<NewRow>,
    released: Vec<(TaskId, i64)>,
    owned: Vec<OwnedChange<'g>>,
    journals: Journals,
}

/// What a transaction changed of the trees with journal rows
/// ([`Maps::journaled`]), folded once it commits.
#[derive(Default)]
struct Journals {
    /// Trees that wrote their first journal rows.
    added: IdMap<()>,
    /// Trees whose journal was deleted.
    dropped: Vec<TaskId>,
}

impl Journals {
    /// Deletes `root`'s journal if it has one (in the maps, or written
    /// earlier in this transaction): most trees never write one, and a
    /// `DELETE` that finds nothing still costs a statement and a seek.
    fn drop(&mut self, st: &mut Statements<'_>, maps: &Maps, root: TaskId) -> rusqlite::Result<()> {
        if maps.journaled.contains_key(&root) || self.added.remove(&root).is_some() {
            st.get(Sql::DeleteJournal)?.execute(params![&id_blob(root)[..]])?;
            self.dropped.push(root);
        }
        Ok(())
    }
}

/// A release's deletion time as stored: ms since the Unix epoch,
/// `i64::MAX` for never.
fn delete_time(delete_at: Option<u64>) -> i64 {
    delete_at.map_or(i64::MAX, |t| i64::try_from(t).unwrap_or(i64::MAX))
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::store::{SqliteConfig, SqliteStore, StoredTask, TaskStore};

    fn id(n: u128) -> TaskId {
        TaskId::from_u128(n)
    }

    fn ids(c: Children) -> Vec<TaskId> {
        match c {
            Children::Ids(ids) => ids,
            Children::Rowids(r) => panic!("rowids {r:?} of a live tree"),
        }
    }

    fn rowids(c: Children) -> Vec<i64> {
        match c {
            Children::Rowids(r) => r,
            Children::Ids(ids) => panic!("ids {ids:?} of a released tree"),
        }
    }

    /// A tree's children are the later rows naming their parent, in row
    /// order, live (ids) and released (rowids); a row whose parent is not
    /// in the tree (a damaged file) is nobody's child.
    #[test]
    fn a_trees_rows_know_each_tasks_children() {
        let mut t = TreeRows::default();
        t.push(10, id(1), None);
        t.push(11, id(2), Some(10));
        t.push(15, id(3), Some(10));
        t.push(16, id(4), Some(11));
        t.push(20, id(5), Some(999));
        t.push(21, id(6), Some(10));
        assert_eq!(ids(t.children(10)), vec![id(2), id(3), id(6)]);
        assert_eq!(ids(t.children(11)), vec![id(4)]);
        assert!(ids(t.children(16)).is_empty());
        assert!(ids(t.children(12)).is_empty(), "not a row of the tree");
        t.release();
        assert_eq!(t.rowids(), vec![10, 11, 15, 16, 20, 21]);
        assert_eq!(rowids(t.children(10)), vec![11, 15, 21]);
        assert_eq!(rowids(t.children(11)), vec![16]);
        assert!(rowids(t.children(20)).is_empty());
        let lone = {
            let mut t = TreeRows::default();
            t.push(30, id(7), None);
            t.release();
            t
        };
        assert!(rowids(lone.children(30)).is_empty());
    }

    /// A fresh directory for a test's database, and the database's path.
    fn scratch(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("subtask-{name}-{}", TaskId::random()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.db");
        (dir, path)
    }

    fn owned(store: &SqliteStore) -> BTreeMap<String, Vec<i64>> {
        store
            .maps
            .read()
            .owned
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().copied().collect()))
            .collect()
    }

    fn root(n: u128, owner: Option<&str>) -> WriteBatch {
        WriteBatch {
            root: id(n),
            version: 1,
            ops: vec![
                WriteOp::PutTree(TreeMeta {
                    root: id(n),
                    owner: owner.map(str::to_owned),
                    resumable: false,
                    launch: None,
                }),
                WriteOp::PutTask(StoredTask {
                    id: id(n),
                    root: id(n),
                    parent: None,
                    position: 0,
                    version: 0,
                    state: "{}".into(),
                }),
            ],
        }
    }

    /// The principals' lists of roots follow what is written: a root with
    /// an owner joins its list (one without joins none, nor do subtasks),
    /// a changed owner moves it, a deleted or swept tree leaves it, an
    /// emptied list goes; and the scan at open rebuilds the same lists.
    #[test]
    fn the_principals_lists_follow_creates_owner_changes_deletes_and_sweeps() {
        let (dir, path) = scratch("owned");
        let open = || SqliteStore::open(SqliteConfig::new(&path)).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let rows = {
            let store = open();
            for (n, owner) in [
                (1, Some("alice")),
                (2, Some("bob")),
                (3, None),
                (4, Some("alice")),
            ] {
                store.submit(root(n, owner));
            }
            // A subtask, and a root created and deleted in one group.
            let mut b = root(5, Some("carol"));
            b.ops.push(WriteOp::PutTask(StoredTask {
                id: id(6),
                root: id(5),
                parent: Some(id(5)),
                position: 0,
                version: 0,
                state: "{}".into(),
            }));
            b.ops.push(WriteOp::DeleteTree(id(5)));
            store.submit(b);
            store.flush().unwrap();
            let rows: Vec<i64> = (1..=4).map(|n| store.maps.read().rows[&id(n)]).collect();
            assert_eq!(
                owned(&store),
                BTreeMap::from([
                    ("alice".into(), vec![rows[0], rows[3]]),
                    ("bob".into(), vec![rows[1]]),
                ])
            );
            // Bob's tree becomes dave's; alice's first is deleted, her
            // second let go, to be deleted (swept) in a second.
            let mut b = root(2, Some("dave"));
            b.ops.truncate(1);
            store.submit(b);
            store.submit(WriteBatch {
                root: id(1),
                version: 2,
                ops: vec![WriteOp::DeleteTree(id(1))],
            });
            store.submit(WriteBatch {
                root: id(4),
                version: 2,
                ops: vec![WriteOp::Release {
                    root: id(4),
                    delete_at: Some(now + 1_000),
                }],
            });
            store.flush().unwrap();
            assert_eq!(
                owned(&store),
                BTreeMap::from([("alice".into(), vec![rows[3]]), ("dave".into(), vec![rows[1]]),])
            );
            let t0 = std::time::Instant::now();
            while store.maps.read().rows.contains_key(&id(4)) {
                assert!(t0.elapsed() < std::time::Duration::from_secs(30), "not swept");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert_eq!(owned(&store), BTreeMap::from([("dave".into(), vec![rows[1]])]));
            rows
        };
        let store = open();
        assert_eq!(owned(&store), BTreeMap::from([("dave".into(), vec![rows[1]])]));
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A panic on the writer thread fails the store instead of leaving its
    /// callers waiting forever: what was durable stays so, and a flush, a
    /// read and a later write report the failure at once; the file opens
    /// again with what was committed. The panic is injected through a
    /// read, the one way to run code on the writer thread.
    #[test]
    fn a_panicking_writer_fails_the_store_and_leaves_nobody_waiting() {
        let (dir, path) = scratch("panic");
        let open = || SqliteStore::open(SqliteConfig::new(&path)).unwrap();
        let store = open();
        let before = store.submit(root(1, Some("alice")));
        store.flush().unwrap();
        let read = store
            .shared
            .queue
            .read(|_w| -> Result<(), StoreError> { panic!("injected into the writer") });
        assert!(matches!(read, Err(StoreError::Failed(_))), "{read:?}");
        let after = store.submit(root(2, None));
        // Waited for on another thread, so a regression fails here rather
        // than hanging the test binary.
        let store = std::sync::Arc::new(store);
        let (tx, rx) = std::sync::mpsc::channel();
        let flusher = std::thread::spawn({
            let store = store.clone();
            move || {
                let _ = tx.send(store.flush());
            }
        });
        let failed = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a flush after the writer died waits forever")
            .expect_err("a flush after the writer died");
        flusher.join().unwrap();
        assert!(failed.to_string().contains("writer thread stopped"), "{failed}");
        assert!(matches!(store.shared.queue.mark.check(before), Ok(true)));
        assert!(store.shared.queue.mark.check(after).is_err());
        assert!(store.get(id(1)).is_err(), "a read after the writer died");
        assert!(store.shared.queue.mark.writable().is_err());
        drop(std::sync::Arc::into_inner(store).expect("the flush thread is done"));
        let store = open();
        assert!(store.get(id(1)).unwrap().is_some());
        assert!(store.get(id(2)).unwrap().is_none());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
