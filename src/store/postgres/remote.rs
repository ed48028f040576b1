//! Reading tasks of trees another cluster instance holds: the stored row
//! of a task with its tree's owner and its children's ids, a principal's
//! tasks a page at a time, and a task's root. The holder shows nothing
//! before it is stored, so the rows hold at least what it showed.

use postgres::Client;

use super::session::Conn;
use super::{open_logged, task_id, uuid};
use crate::model::TaskId;
use crate::store::Keyring;
#[cfg(feature = "ui")]
use crate::store::ListedRoot;
use crate::store::seal::{Column, Place};
use crate::store::{ReadTask, now_ms};

/// Task `id` from a row holding, from column `at` on, its root, parent,
/// position, state, its tree's owner and its children's ids (the queries
/// of [`read_task`] and [`list_tasks`]); a stored negative position reads
/// as `0` (no writer stores one).
fn of_row(row: &postgres::Row, id: TaskId, at: usize, keys: Option<&Keyring>) -> ReadTask {
    let parent: Option<uuid::Uuid> = row.get(at + 1);
    let position: i32 = row.get(at + 2);
    let children: Vec<uuid::Uuid> = row.get(at + 5);
    ReadTask {
        id,
        root: task_id(row.get(at)),
        parent: parent.map(task_id),
        position: u32::try_from(position).unwrap_or(0),
        state: open_logged(
            keys,
            Place::new(Column::State, id.as_u128()),
            row.get(at + 3),
            false,
        ),
        owner: row.get(at + 4),
        children: children.into_iter().map(task_id).collect(),
    }
}

/// Task `id` as stored (two index lookups: the task's row with its root's,
/// and its children's ids), or `None` when no such task is stored (or its
/// tree was let go of and is past its deletion time: deleted, swept or
/// not).
pub(crate) fn read_task(conn: &mut Conn, id: TaskId) -> Result<Option<ReadTask>, postgres::Error> {
    // Prepared: the non-owner read is the hot path of a cluster's reads.
    let st = conn.statement(
        "SELECT t.root, t.parent, t.position, t.state, r.owner,
                ARRAY(SELECT k.id FROM subtask_tasks k WHERE k.parent = t.id ORDER BY k.position)
         FROM subtask_tasks t JOIN subtask_tasks r ON r.id = t.root
         WHERE t.id = $1
           AND NOT EXISTS (SELECT 1 FROM subtask_released x WHERE x.root = r.id AND x.delete_at <= $2)",
    )?;
    let row = conn.query_opt(&st, &[&uuid(id), &now_ms()])?;
    let keys = conn.keys.clone();
    Ok(row.map(|row| of_row(&row, id, 0, keys.as_deref())))
}

/// Where a listed task is in the listing order: the stored sequence
/// numbers of its tree's root and of the task.
pub(crate) type ListPosition = (i64, i64);

/// A page of at most `limit` tasks of `principal`'s trees: trees in
/// creation order, each tree's tasks in creation order, after the position
/// `after`; each with its position (where a next page starts).
pub(crate) fn list_tasks(
    conn: &mut Conn,
    principal: &str,
    after: ListPosition,
    limit: usize,
) -> Result<Vec<(ListPosition, ReadTask)>, postgres::Error> {
    let keys = conn.keys.clone();
    let rows = conn.query(
        "SELECT r.seq, t.seq, t.id, t.root, t.parent, t.position, t.state, r.owner,
                ARRAY(SELECT k.id FROM subtask_tasks k WHERE k.parent = t.id ORDER BY k.position)
         FROM subtask_tasks r JOIN subtask_tasks t ON t.root = r.id
         WHERE r.parent IS NULL AND r.owner = $1 AND (r.seq, t.seq) > ($2, $3)
           AND NOT EXISTS (SELECT 1 FROM subtask_released x WHERE x.root = r.id AND x.delete_at <= $5)
         ORDER BY r.seq, t.seq LIMIT $4",
        &[&principal, &after.0, &after.1, &(limit as i64), &now_ms()],
    )?;
    Ok(rows
        .iter()
        .map(|row| {
            (
                (row.get(0), row.get(1)),
                of_row(row, task_id(row.get(2)), 3, keys.as_deref()),
            )
        })
        .collect())
}

/// The root of task `id`'s tree, `None` when no such task is stored.
pub(crate) fn root_of(client: &mut Client, id: TaskId) -> Result<Option<TaskId>, postgres::Error> {
    client
        .query_opt("SELECT root FROM subtask_tasks WHERE id = $1", &[&uuid(id)])
        .map(|r| r.map(|r| task_id(r.get(0))))
}

/// Up to `limit` of `principal`'s trees, newest first, created before the
/// sequence number `before` (one range of the `(owner, seq)` index of root
/// rows).
#[cfg(feature = "ui")]
pub(crate) fn list_roots(
    conn: &mut Conn,
    principal: &str,
    before: i64,
    limit: usize,
) -> Result<Vec<ListedRoot>, postgres::Error> {
    let keys = conn.keys.clone();
    let st = conn.statement(
        "SELECT seq, id, root, parent, position, state, owner, '{}'::uuid[], launch
         FROM subtask_tasks
         WHERE parent IS NULL AND owner = $1 AND seq < $2
           AND NOT EXISTS (SELECT 1 FROM subtask_released x WHERE x.root = subtask_tasks.id AND x.delete_at <= $4)
         ORDER BY seq DESC LIMIT $3",
    )?;
    let rows = conn.query(&st, &[&principal, &before, &(limit as i64), &now_ms()])?;
    Ok(rows
        .iter()
        .map(|row| {
            let id = task_id(row.get(1));
            let launch: Option<String> = row.get(8);
            ListedRoot {
                seq: row.get(0),
                task: of_row(row, id, 2, keys.as_deref()),
                launch: launch.map(|l| {
                    open_logged(
                        keys.as_deref(),
                        Place::new(Column::Launch, id.as_u128()),
                        l,
                        false,
                    )
                }),
            }
        })
        .collect())
}

/// Every task of the trees holding the tasks `ids` as stored, in creation
/// order (their `children` are not read: the caller has every row of each
/// tree), with each root's opened launch (primary-key lookups of `ids`,
/// then one range of the `root` index per tree).
pub(crate) fn read_trees(
    conn: &mut Conn,
    ids: &[TaskId],
) -> Result<Vec<(ReadTask, Option<String>)>, postgres::Error> {
    let keys = conn.keys.clone();
    let ids: Vec<uuid::Uuid> = ids.iter().map(|r| uuid(*r)).collect();
    let st = conn.statement(
        "SELECT id, root, parent, position, state, owner, '{}'::uuid[], launch
         FROM subtask_tasks
         WHERE root IN (
             SELECT t.root FROM subtask_tasks t JOIN subtask_tasks r ON r.id = t.root
             WHERE t.id = ANY($1)
               AND NOT EXISTS (SELECT 1 FROM subtask_released x WHERE x.root = r.id AND x.delete_at <= $2))
         ORDER BY seq",
    )?;
    let rows = conn.query(&st, &[&ids, &now_ms()])?;
    Ok(rows
        .iter()
        .map(|row| {
            let id = task_id(row.get(0));
            let launch: Option<String> = row.get(7);
            (
                of_row(row, id, 1, keys.as_deref()),
                launch.map(|l| {
                    open_logged(
                        keys.as_deref(),
                        Place::new(Column::Launch, id.as_u128()),
                        l,
                        false,
                    )
                }),
            )
        })
        .collect())
}
