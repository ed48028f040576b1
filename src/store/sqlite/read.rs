//! Stored rows decoded into trees.

use rusqlite::Connection;

use super::blob_id;
use super::writer::Writer;
#[cfg(feature = "fuzzing")]
use super::{io, schema::MIGRATIONS};
use crate::model::IdMap;
use crate::store::queue::assemble;
use crate::store::seal::{Column, Keyring, Place, open, open_owned};
use crate::store::{StoreError, StoredTask, StoredTree, TreeMeta};

/// `(id, root, parent, position, version, state)` as read from a row.
type TaskRow = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, i64, i64, String);

pub(super) fn row_task(r: &rusqlite::Row<'_>) -> rusqlite::Result<TaskRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
}

pub(super) fn to_task(
    (id, root, parent, position, version, state): TaskRow,
    keys: Option<&Keyring>,
) -> Result<StoredTask, StoreError> {
    let id = blob_id(&id)?;
    let state = open_owned(keys, Place::new(Column::State, id.as_u128()), state)?;
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

/// Every stored tree the runtime holds (not released: see
/// [`WriteOp::Release`](crate::store::WriteOp::Release)), read from the
/// `tasks` table as [`TaskStore::load`](crate::store::TaskStore::load)
/// reads it: each row decoded (a value of the wrong type, a task id that is
/// not 16 bytes, a negative position or version, an unreadable launch are
/// [`StoreError::Corrupt`]), then grouped by tree in row order. When most
/// rows are of released trees (a server's history), only the others' rows
/// are read, by rowid; otherwise the table is scanned once.
pub(super) fn read_trees(w: &Writer) -> Result<Vec<StoredTree>, StoreError> {
    let e = |x: rusqlite::Error| StoreError::Corrupt(x.to_string());
    let keys = w.keys.as_deref();
    let journal = read_journal(&w.conn, keys)?;
    let mut read = Vec::new();
    const COLUMNS: &str = "id, root, parent, position, version, state, owner, resumable, launch";
    // Only this (the writer's) thread changes the maps.
    let maps = w.maps.read();
    let live: Vec<i64> = if maps.released.is_empty() {
        Vec::new()
    } else {
        let mut rowids: Vec<i64> = maps
            .trees
            .iter()
            .filter(|(root, _)| !maps.released.contains_key(*root))
            .flat_map(|(_, rows)| rows.rowids())
            .collect();
        rowids.sort_unstable();
        rowids
    };
    if !maps.released.is_empty() && live.len() * 4 < maps.rows.len() {
        let mut stmt = w
            .conn
            .prepare(&format!("SELECT {COLUMNS} FROM tasks WHERE seq = ?1"))
            .map_err(e)?;
        for rowid in live {
            let mut rows = stmt.query([rowid]).map_err(e)?;
            if let Some(r) = rows.next().map_err(e)? {
                read.push(decode(r, keys, &journal));
            }
        }
    } else {
        let mut stmt = w
            .conn
            .prepare(&format!("SELECT {COLUMNS} FROM tasks ORDER BY seq"))
            .map_err(e)?;
        let mut rows = stmt.query([]).map_err(e)?;
        while let Some(r) = rows.next().map_err(e)? {
            let root = blob_id(&r.get::<_, Vec<u8>>(1).map_err(e)?)?;
            if maps.released.contains_key(&root) {
                continue;
            }
            read.push(decode(r, keys, &journal));
        }
    }
    assemble(read)
}

/// One row of [`read_trees`]' queries: the task, and its tree's metadata
/// when it is a root.
fn decode(
    r: &rusqlite::Row<'_>,
    keys: Option<&Keyring>,
    journal: &IdMap<Vec<String>>,
) -> Result<(StoredTask, Option<TreeMeta>), StoreError> {
    let e = |x: rusqlite::Error| StoreError::Corrupt(x.to_string());
    let mut task = to_task(row_task(r).map_err(e)?, keys)?;
    if let Some(entries) = journal.get(&task.id) {
        task.state = crate::store::with_journal(&task.state, entries)?;
    }
    if task.parent.is_some() {
        return Ok((task, None));
    }
    let launch = r
        .get::<_, Option<String>>(8)
        .map_err(e)?
        .map(|l| {
            let l = open(keys, Place::new(Column::Launch, task.root.as_u128()), &l)?;
            serde_json::from_str(&l)
                .map_err(|x| StoreError::Corrupt(format!("tree {}: unreadable launch: {x}", task.root)))
        })
        .transpose()?;
    let meta = TreeMeta {
        root: task.root,
        owner: r.get(6).map_err(e)?,
        resumable: r.get::<_, Option<bool>>(7).map_err(e)?.unwrap_or(false),
        launch,
    };
    Ok((task, Some(meta)))
}

/// Every task's journal entries, in order.
fn read_journal(conn: &Connection, keys: Option<&Keyring>) -> Result<IdMap<Vec<String>>, StoreError> {
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
        let entry: String = r.get(2).map_err(e)?;
        entries.push(open_owned(
            keys,
            Place::nth(Column::Journal, task.as_u128(), n),
            entry,
        )?);
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
    let w = Writer::open(conn, std::path::Path::new(":memory:"))?;
    read_trees(&w)
}
