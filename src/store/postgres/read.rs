//! Stored rows decoded into trees.

use postgres::Client;

#[cfg(feature = "server")]
use super::session::Conn;
use super::{io, task_id};
use crate::model::IdMap;
use crate::store::queue::assemble;
use crate::store::seal::{Column, Keyring, Place, open, open_owned};
use crate::store::{StoreError, StoredTask, StoredTree, TreeMeta};

/// The trees `roots` (all when `None`), with their journals, opened with
/// the connection's keys.
#[cfg(feature = "server")]
pub(crate) fn read_trees(
    conn: &mut Conn,
    roots: Option<&[uuid::Uuid]>,
) -> Result<Vec<StoredTree>, StoreError> {
    let keys = conn.keys.clone();
    read_trees_with(&mut conn.client, roots, keys.as_deref())
}

/// The trees `roots` (all when `None`), with their journals, opened with `keys`.
pub(super) fn read_trees_with(
    client: &mut Client,
    roots: Option<&[uuid::Uuid]>,
    keys: Option<&Keyring>,
) -> Result<Vec<StoredTree>, StoreError> {
    let (rows, journal) = match roots {
        None => (
            client.query(
                "SELECT id, root, parent, position, version, state, owner, resumable, launch
                 FROM subtask_tasks ORDER BY seq",
                &[],
            ),
            client.query("SELECT task, n, entry FROM subtask_journal ORDER BY task, n", &[]),
        ),
        Some(roots) => (
            client.query(
                "SELECT id, root, parent, position, version, state, owner, resumable, launch
                 FROM subtask_tasks WHERE root = ANY($1) ORDER BY seq",
                &[&roots],
            ),
            client.query(
                "SELECT task, n, entry FROM subtask_journal WHERE root = ANY($1) ORDER BY task, n",
                &[&roots],
            ),
        ),
    };
    trees_of_rows(rows.map_err(io)?, journal.map_err(io)?, keys)
}

/// Trees from rows of `SELECT id, root, parent, position, version, state,
/// owner, resumable, launch`, in the order read, and their journal rows
/// (`SELECT task, n, entry`, in task and entry order).
fn trees_of_rows(
    rows: Vec<postgres::Row>,
    journal: Vec<postgres::Row>,
    keys: Option<&Keyring>,
) -> Result<Vec<StoredTree>, StoreError> {
    let mut entries: IdMap<Vec<String>> = IdMap::default();
    for r in &journal {
        let task = task_id(r.get(0));
        let n: i32 = r.get(1);
        let list = entries.entry(task).or_default();
        if n as usize != list.len() {
            return Err(StoreError::Corrupt(format!(
                "task {task}: journal entry {n} follows {} entries",
                list.len()
            )));
        }
        let entry: String = r.get(2);
        list.push(open_owned(
            keys,
            Place::nth(Column::Journal, task.as_u128(), i64::from(n)),
            entry,
        )?);
    }
    assemble(rows.iter().map(|r| {
        let mut task = to_task(row_task(r), keys)?;
        if let Some(list) = entries.get(&task.id) {
            task.state = crate::store::with_journal(&task.state, list)?;
        }
        if task.parent.is_some() {
            return Ok((task, None));
        }
        let launch = r
            .get::<_, Option<String>>(8)
            .map(|l| {
                let l = open(keys, Place::new(Column::Launch, task.root.as_u128()), &l)?;
                serde_json::from_str(&l)
                    .map_err(|x| StoreError::Corrupt(format!("tree {}: unreadable launch: {x}", task.root)))
            })
            .transpose()?;
        let meta = TreeMeta {
            root: task.root,
            owner: r.get(6),
            resumable: r.get::<_, Option<bool>>(7).unwrap_or(false),
            launch,
        };
        Ok((task, Some(meta)))
    }))
}

type TaskRow = (uuid::Uuid, uuid::Uuid, Option<uuid::Uuid>, i32, i64, String);

pub(super) fn to_task(
    (id, root, parent, position, version, state): TaskRow,
    keys: Option<&Keyring>,
) -> Result<StoredTask, StoreError> {
    let state = open_owned(keys, Place::new(Column::State, id.as_u128()), state)?;
    Ok(StoredTask {
        id: task_id(id),
        root: task_id(root),
        parent: parent.map(task_id),
        position: u32::try_from(position)
            .map_err(|_| StoreError::Corrupt(format!("task {id}: negative position {position}")))?,
        version: u64::try_from(version)
            .map_err(|_| StoreError::Corrupt(format!("task {id}: negative version {version}")))?,
        state,
    })
}

pub(super) fn row_task(r: &postgres::Row) -> TaskRow {
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))
}
