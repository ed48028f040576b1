//! Stored rows as the server shows them, with the code the runtime uses
//! ([`TaskRecord::detailed`](crate::core::TaskRecord::detailed),
//! [`TaskRow::of`]): for the trees another cluster instance holds (read
//! from PostgreSQL, `cluster/remote.rs`) and for the finished trees the
//! runtime let go of (read from the SQLite file, `access/finished.rs`, or
//! from PostgreSQL, `cluster/inbox.rs`), whose commands are answered on the
//! tree rebuilt from its rows ([`command_on_rows`]).

#[cfg(feature = "ui")]
use std::sync::Arc;

use crate::core::{ForestConfig, TaskRecord, decode_state};
use crate::model::{ClientView, DetailedTask, TaskId, Timestamp};
#[cfg(feature = "ui")]
use crate::runtime::view::{TaskRow, TreeSummary};
use crate::runtime::{Applied, Command, RuntimeError, command_on_stored};
#[cfg(feature = "ui")]
use crate::store::ListedRoot;
use crate::store::{ReadTask, StoreError};

/// A tree read from its stored rows: its root, its tool and its tasks as
/// the web view's rows, in pre-order.
#[cfg(feature = "ui")]
pub(crate) type TreeRead = (TaskId, Option<Arc<str>>, Vec<TaskRow>);

/// `command` on task `id` of a finished tree that no runtime holds, by the
/// lifecycle code on the tree rebuilt from `rows` (every row of the tree,
/// as `read_trees` gives them): the answer its holder would have given.
/// `None` when the tree is not `principal`'s or holds no task `id` (gone
/// meanwhile), which is "task not found".
pub(crate) fn command_on_rows(
    forest: &std::sync::Arc<ForestConfig>,
    rows: &[(ReadTask, Option<String>)],
    principal: &str,
    id: TaskId,
    command: Command,
) -> Result<Option<Result<Applied, RuntimeError>>, StoreError> {
    let Some(root) = rows
        .iter()
        .find(|(t, _)| t.parent.is_none() && t.owner.as_deref() == Some(principal))
        .map(|(t, _)| t.id)
    else {
        return Ok(None);
    };
    if !rows.iter().any(|(t, _)| t.id == id) {
        return Ok(None);
    }
    let records = rows
        .iter()
        .map(|(t, _)| record(t))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(command_on_stored(
        forest,
        root,
        records,
        id,
        command,
        Timestamp::now(),
    )))
}

/// A stored task's record, as the runtime decodes it.
pub(crate) fn record(row: &ReadTask) -> Result<TaskRecord, StoreError> {
    let id = row.id;
    decode_state(id, row.root, row.parent, row.position, &row.state)
        .map_err(|e| StoreError::Corrupt(format!("task {id}: {e}")))
}

/// A stored task as `view` sees it.
pub(crate) fn detailed(row: ReadTask, view: ClientView) -> Result<DetailedTask, StoreError> {
    let rec = record(&row)?;
    Ok(rec.detailed(row.children, view))
}

/// A tree's tool: the `name` of its stored launch (what a restart labels
/// it with).
#[cfg(feature = "ui")]
pub(crate) fn tool_of(launch: Option<&str>) -> Option<Arc<str>> {
    let launch: serde_json::Value = serde_json::from_str(launch?).ok()?;
    launch.get("name")?.as_str().map(Arc::from)
}

/// A listed root as the web view's list shows it, its `tasks` and
/// `counts` not filled in (zero: the rows of the tree fill them).
#[cfg(feature = "ui")]
pub(crate) fn summary(r: ListedRoot) -> Result<TreeSummary, StoreError> {
    let rec = record(&r.task)?;
    Ok(TreeSummary {
        position: u64::try_from(r.seq).unwrap_or(0),
        root: r.task.id,
        tool: tool_of(r.launch.as_deref()),
        status: rec.status(),
        message: rec.status_message(),
        created_at: rec.created_at(),
        last_updated_at: rec.last_updated_at(),
        tasks: 0,
        counts: Default::default(),
    })
}

/// The trees of `tasks` (every stored row of each, with each root's
/// launch) that `principal` owns, each as rows in pre-order: a task, then
/// each child's subtree in position order.
#[cfg(feature = "ui")]
pub(crate) fn trees_of(
    tasks: Vec<(ReadTask, Option<String>)>,
    principal: &str,
) -> Result<Vec<TreeRead>, StoreError> {
    use std::collections::HashMap;
    let mut records = HashMap::with_capacity(tasks.len());
    let mut children: HashMap<TaskId, Vec<(u32, TaskId)>> = HashMap::new();
    let mut roots = Vec::new();
    for (row, launch) in tasks {
        let rec = record(&row)?;
        match row.parent {
            Some(p) => children.entry(p).or_default().push((row.position, row.id)),
            None if row.owner.as_deref() == Some(principal) => {
                roots.push((row.id, tool_of(launch.as_deref())))
            }
            None => {}
        }
        records.insert(row.id, rec);
    }
    for kids in children.values_mut() {
        kids.sort_unstable();
    }
    let no_kids = Vec::new();
    let mut out = Vec::with_capacity(roots.len());
    for (root, tool) in roots {
        let mut rows = Vec::new();
        let mut stack = vec![root];
        while let Some(id) = stack.pop() {
            let Some(rec) = records.get(&id) else { continue };
            let kids = children.get(&id).unwrap_or(&no_kids);
            let ended = kids
                .iter()
                .filter(|(_, k)| records.get(k).is_some_and(|r| r.status().is_terminal()))
                .count();
            rows.push(TaskRow::of(rec, kids.len(), ended));
            // Children pushed last-first, so the first child is visited next.
            stack.extend(kids.iter().rev().map(|(_, k)| *k));
        }
        out.push((root, tool, rows));
    }
    Ok(out)
}
