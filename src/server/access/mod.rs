//! The task-access service: how every handler finds, reads, follows,
//! commands and lists the tasks a request names, wherever their tree is
//! held.
//!
//! A tree is held by one instance's runtime (the instance where it was
//! created, or the one that took it over). [`TaskAccess`] asks this
//! instance's runtime first, and for a tree it does not hold, the trees
//! held [`Elsewhere`]. That has two implementations, chosen once, when the
//! server starts (or joins a cluster):
//!
//! - [`Nowhere`]: a single instance holds every tree it can answer for, so
//!   a task it does not hold is unknown;
//! - [`Finished`] (`finished.rs`): a single instance whose runtime lets
//!   finished trees go (`RuntimeConfig::release_finished_after`, the SQLite
//!   store): they are read from the store, and lists come from it;
//! - a cluster instance (`cluster.rs` here, over `super::cluster`): the
//!   trees other instances hold, read from the database and commanded
//!   through its inbox, and the finished trees any instance let go of,
//!   read from the database and commanded on their rows.
//!
//! Handlers therefore never ask where a tree is held: the same call gives
//! the same answer on either path (the owner check, "task not found" for
//! unknown and foreign ids alike, and nothing shown before it is durable).

#[cfg(feature = "postgres")]
mod cluster;
mod finished;
#[cfg(feature = "ui")]
mod view;

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};
use serde::Serialize;
use serde_json::Value;

use super::Server;
use super::auth::Principal;
use super::reply::{invalid, runtime_error, store_error, task_result};
use super::request::TaskCommand;
use crate::model::{
    AckResult, ClientView, DetailedTask, ErrorObject, GetTaskResult, TaskId, TaskMethod, TaskStatus,
};
#[cfg(feature = "ui")]
use crate::runtime::view::TreeSummary;
use crate::runtime::{Applied, Command, ListPosition, Runtime};
pub(crate) use finished::Finished;
#[cfg(feature = "ui")]
pub(crate) use view::TreeOfRows;

/// A page of `tasks/list`: the tasks, and the cursor of the next page.
pub(crate) type Page = (Vec<DetailedTask>, Option<String>);

/// The trees this instance does not hold.
pub(crate) trait Elsewhere: Send + Sync {
    /// Task `id` as `principal` may see it, durable; `None` for unknown and
    /// foreign ids alike.
    fn get<'a>(
        &'a self,
        id: TaskId,
        principal: &'a str,
        view: ClientView,
    ) -> BoxFuture<'a, Result<Option<DetailedTask>, ErrorObject>>;

    /// Applies `command` to task `id` where its tree is held and returns
    /// that holder's answer (a 2026-07-28 `result`); "task not found" for
    /// unknown and foreign ids.
    fn command<'a>(
        &'a self,
        id: TaskId,
        principal: &'a str,
        command: &'a TaskCommand,
        view: ClientView,
    ) -> BoxFuture<'a, Result<Value, ErrorObject>>;

    /// Snapshots of task `id` as it changes (the current one first),
    /// ending after a terminal one; empty when `principal` cannot see it.
    fn watch(&self, id: TaskId, principal: &str, view: ClientView) -> BoxStream<'static, DetailedTask>;

    /// The trees `principal` created, in creation order, from `cursor` (a
    /// cursor this implementation gave), `limit` tasks, with where the next
    /// page starts; `None` when this implementation lists nothing itself
    /// (every tree is held here).
    fn list<'a>(
        &'a self,
        principal: &'a str,
        cursor: Option<&'a str>,
        limit: usize,
        view: ClientView,
    ) -> Option<BoxFuture<'a, Result<Page, ErrorObject>>>;

    /// The web view's list: up to `limit` of `principal`'s trees, newest
    /// first, before list position `before`, from where every instance
    /// sees the same list, with `tasks` and `counts` not filled in; `None`
    /// when this implementation lists nothing itself (every tree is held
    /// here). See `view.rs`.
    #[cfg(feature = "ui")]
    fn roots<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<TreeSummary>, ErrorObject>>>;

    /// The web view's rows of the trees holding the tasks `ids` that
    /// `principal` owns (each its root, tool and rows in pre-order),
    /// durable; unknown and foreign trees are left out alike.
    #[cfg(feature = "ui")]
    fn tree_rows<'a>(
        &'a self,
        ids: Vec<TaskId>,
        principal: &'a str,
    ) -> BoxFuture<'a, Result<Vec<TreeOfRows>, ErrorObject>>;

    /// A tick each time tree `root` may have changed, subscribed when
    /// called; empty (the default) when the trees held elsewhere do not
    /// change here (none, or only finished ones).
    #[cfg(feature = "ui")]
    fn tree_changes(&self, _root: TaskId) -> BoxStream<'static, ()> {
        futures::stream::empty().boxed()
    }

    /// A future that resolves once this instance is fenced: its trees may
    /// be held elsewhere now, and what follows them here must end; `None`
    /// (the default) for a single instance, which is never fenced.
    fn fenced(&self) -> Option<BoxFuture<'static, ()>> {
        None
    }

    /// The error a request gets while this instance is fenced; `None`
    /// (the default) while it serves.
    fn fenced_error(&self) -> Option<ErrorObject> {
        None
    }

    /// Whether other instances hold trees (a cluster): the web view says
    /// its live-task count is this instance's.
    #[cfg(feature = "ui")]
    fn is_cluster(&self) -> bool {
        false
    }
}

/// A single instance: no tree is held anywhere else.
pub(crate) struct Nowhere;

impl Elsewhere for Nowhere {
    fn get<'a>(
        &'a self,
        _: TaskId,
        _: &'a str,
        _: ClientView,
    ) -> BoxFuture<'a, Result<Option<DetailedTask>, ErrorObject>> {
        Box::pin(async { Ok(None) })
    }

    fn command<'a>(
        &'a self,
        _: TaskId,
        _: &'a str,
        _: &'a TaskCommand,
        _: ClientView,
    ) -> BoxFuture<'a, Result<Value, ErrorObject>> {
        Box::pin(async { Err(ErrorObject::task_not_found()) })
    }

    fn watch(&self, _: TaskId, _: &str, _: ClientView) -> BoxStream<'static, DetailedTask> {
        futures::stream::empty().boxed()
    }

    fn list<'a>(
        &'a self,
        _: &'a str,
        _: Option<&'a str>,
        _: usize,
        _: ClientView,
    ) -> Option<BoxFuture<'a, Result<Page, ErrorObject>>> {
        None
    }

    #[cfg(feature = "ui")]
    fn roots<'a>(
        &'a self,
        _: &'a str,
        _: Option<u64>,
        _: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<TreeSummary>, ErrorObject>>> {
        None
    }

    #[cfg(feature = "ui")]
    fn tree_rows<'a>(
        &'a self,
        _: Vec<TaskId>,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Vec<TreeOfRows>, ErrorObject>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// What a command answered: the `result` of the 2026-07-28 method.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Answer {
    /// An empty result (`tasks/update`, `tasks/cancel`, `tasks/steer`).
    Ack(AckResult),
    /// The task as the command left it (`tasks/pause`, `tasks/resume`).
    Task(Box<GetTaskResult>),
    /// The answer of the instance that holds the tree, as it sent it.
    Relayed(Value),
}

/// Why a command was not applied.
#[derive(Debug)]
pub(crate) enum CommandError {
    /// No task the caller may see has this id.
    NotFound,
    /// The store cannot take or keep the change now (nothing was changed,
    /// or the change is not acknowledged).
    Unavailable(ErrorObject),
    /// The task refused it (a terminal task, an unknown input key, a limit).
    Refused(ErrorObject),
}

impl From<CommandError> for ErrorObject {
    fn from(e: CommandError) -> Self {
        match e {
            CommandError::NotFound => ErrorObject::task_not_found(),
            CommandError::Unavailable(e) | CommandError::Refused(e) => e,
        }
    }
}

/// One row of a subtree as [`TaskAccess::read_subtree`] gives it.
#[derive(Debug, Clone)]
pub(crate) struct SubtreeNode {
    /// The task.
    pub(crate) id: TaskId,
    /// Its parent.
    pub(crate) parent: Option<TaskId>,
    /// Its status.
    pub(crate) status: TaskStatus,
    /// Its status message.
    pub(crate) message: Option<String>,
    /// Its children in `childTaskIds` order.
    pub(crate) children: Vec<TaskId>,
}

/// The task-access service of one request: this instance's runtime, then
/// the trees held [`Elsewhere`]. See the module documentation.
pub(crate) struct TaskAccess<'a> {
    server: &'a Server,
    elsewhere: &'a dyn Elsewhere,
}

impl Server {
    /// The task-access service.
    pub(crate) fn tasks(&self) -> TaskAccess<'_> {
        TaskAccess {
            server: self,
            elsewhere: self.elsewhere(),
        }
    }

    /// Where the trees this instance does not hold are: the cluster's
    /// database once it joined one; the store, for the finished trees the
    /// runtime let go of; else nowhere.
    fn elsewhere(&self) -> &dyn Elsewhere {
        #[cfg(feature = "postgres")]
        if let Some(node) = self.cluster() {
            return node;
        }
        if let Some(finished) = &self.inner.finished {
            return finished;
        }
        &Nowhere
    }
}

impl TaskAccess<'_> {
    fn runtime(&self) -> &Runtime {
        &self.server.inner.runtime
    }

    /// The id a request names; a malformed one is "task not found", like
    /// an unknown or foreign one.
    pub(crate) fn parse(raw: &str) -> Result<TaskId, ErrorObject> {
        raw.parse().map_err(|_| ErrorObject::task_not_found())
    }

    /// Whether this instance holds task `id`'s tree for `principal`.
    fn held_here(&self, id: TaskId, principal: &str) -> bool {
        self.runtime()
            .owner_of(id)
            .is_some_and(|owner| owner.name() == principal)
    }

    /// Task `id` as `principal` may see it, once durable; `None` for unknown
    /// and foreign ids alike. Held here: the owner check, the snapshot and
    /// its durability ticket under one lookup of the tree.
    pub(crate) async fn get(
        &self,
        id: TaskId,
        principal: &str,
        view: ClientView,
    ) -> Result<Option<DetailedTask>, ErrorObject> {
        let rt = self.runtime();
        match rt.get_owned(id, principal, view) {
            Some((snap, ticket)) => {
                rt.durable(ticket).await.map_err(store_error)?;
                Ok(Some(snap))
            }
            None => self.elsewhere.get(id, principal, view).await,
        }
    }

    /// Task `id` as `principal` may see it now, without waiting for it to
    /// be durable (a tree held elsewhere is read durable): for a handler
    /// that waits for durability itself before it shows anything.
    pub(crate) async fn peek(
        &self,
        id: TaskId,
        principal: &str,
        view: ClientView,
    ) -> Result<Option<DetailedTask>, ErrorObject> {
        // The owner check and the snapshot under one lookup of the tree.
        match self.runtime().get_owned(id, principal, view) {
            Some((snap, _)) => Ok(Some(snap)),
            None => self.elsewhere.get(id, principal, view).await,
        }
    }

    /// Whether `principal` may see task `raw` (`None` for malformed,
    /// unknown and foreign ids alike).
    pub(crate) async fn visible(
        &self,
        raw: &str,
        principal: &str,
        view: ClientView,
    ) -> Result<Option<TaskId>, ErrorObject> {
        let Ok(id) = Self::parse(raw) else {
            return Ok(None);
        };
        if self.held_here(id, principal) {
            return Ok(Some(id));
        }
        Ok(self.elsewhere.get(id, principal, view).await?.map(|_| id))
    }

    /// A `tasks/*` command other than `tasks/get` on task `id`, answered
    /// once durable. Held here: nothing is changed that the store cannot
    /// keep now.
    pub(crate) async fn command(
        &self,
        id: TaskId,
        principal: &str,
        command: &TaskCommand,
        view: ClientView,
    ) -> Result<Answer, CommandError> {
        if !self.held_here(id, principal) {
            return match self.elsewhere.command(id, principal, command, view).await {
                Ok(answer) => Ok(Answer::Relayed(answer)),
                Err(e) if e == ErrorObject::task_not_found() => Err(CommandError::NotFound),
                Err(e) => Err(CommandError::Refused(e)),
            };
        }
        self.server.writable().map_err(CommandError::Unavailable)?;
        let rt = self.runtime();
        let applied = rt
            .apply_with_receipt(id, command.command.clone(), |_| None)
            .ok_or(CommandError::NotFound)?
            .map_err(|e| CommandError::Refused(runtime_error(e)))?;
        // Nothing is acknowledged or shown before it is durable.
        rt.flushed(id)
            .await
            .map_err(|e| CommandError::Unavailable(store_error(e)))?;
        Ok(match applied {
            Applied::Ack => Answer::Ack(AckResult::new()),
            Applied::Task(snap) => Answer::Task(Box::new(task_result(*snap))),
        })
    }

    /// Cancels task `id` and waits, at most `bound`, for it to be
    /// `cancelled` (its subtree winds down leaves first); returns it as it
    /// is then, durable.
    pub(crate) async fn cancel_and_wait(
        &self,
        id: TaskId,
        principal: &str,
        view: ClientView,
        bound: Duration,
    ) -> Result<DetailedTask, ErrorObject> {
        let rt = self.runtime();
        if !self.held_here(id, principal) {
            let cancel = TaskCommand {
                method: TaskMethod::Cancel,
                task_id: id.to_string(),
                command: Command::Cancel,
            };
            self.elsewhere.command(id, principal, &cancel, view).await?;
            let mut updates = self.follow(id, principal, view);
            let ended = tokio::time::timeout(bound, async {
                while let Some(s) = updates.next().await {
                    if s.status().is_terminal() {
                        return Some(s);
                    }
                }
                None
            })
            .await;
            return match ended {
                Ok(Some(done)) => Ok(done),
                _ => self
                    .elsewhere
                    .get(id, principal, view)
                    .await?
                    .ok_or_else(ErrorObject::task_not_found),
            };
        }
        self.server.writable()?;
        let _ = rt.cancel(id).map_err(runtime_error)?;
        let snap = match tokio::time::timeout(bound, rt.wait(id, view)).await {
            Ok(Some(done)) => done,
            _ => rt.get(id, view).ok_or_else(ErrorObject::task_not_found)?,
        };
        rt.flushed(id).await.map_err(store_error)?;
        Ok(snap)
    }

    /// Snapshots of task `id` as it changes, the current one first, ending
    /// after a terminal one (not waited durable: see
    /// [`Runtime::flushed`]); empty when `principal` cannot see it.
    pub(crate) fn follow(
        &self,
        id: TaskId,
        principal: &str,
        view: ClientView,
    ) -> BoxStream<'static, DetailedTask> {
        if self.runtime().owner_of(id).is_some() {
            return self.runtime().subscribe(&[id], view).boxed();
        }
        self.elsewhere.watch(id, principal, view)
    }

    /// A page of `tasks/list` for `principal`: the tasks of the trees it
    /// created, in creation order, after `cursor`, each shown durable, and
    /// the next page's cursor. On a cluster every instance gives the same
    /// pages (they are read from the database).
    pub(crate) async fn list(
        &self,
        principal: &Principal,
        cursor: Option<&str>,
        limit: usize,
        view: ClientView,
    ) -> Result<Page, ErrorObject> {
        if let Some(page) = self.elsewhere.list(principal.name(), cursor, limit, view) {
            return page.await;
        }
        let from = match cursor {
            None => ListPosition::default(),
            Some(c) => decode_cursor(c).ok_or_else(|| invalid("invalid cursor for tasks/list"))?,
        };
        let owner = self.server.owner(principal);
        let rt = self.runtime();
        let (tasks, next) = rt.list_owned(&owner, from, limit, view);
        // Nothing is shown before it is durable: one wait per tree (a page
        // that starts inside a tree waits for that tree through its first task).
        if let Some(first) = tasks.first() {
            rt.flushed(first.task().task_id).await.map_err(store_error)?;
        }
        for t in &tasks {
            if t.task().parent_task_id.is_none() {
                rt.flushed(t.task().task_id).await.map_err(store_error)?;
            }
        }
        Ok((tasks, next.map(encode_cursor)))
    }

    /// `f` over the subtree of `top` (its tasks by id) and a reader of
    /// their snapshots, from one reading that agrees with itself, once
    /// durable; `None` when `principal` cannot see `top`. Held here: one
    /// reading under the tree's lock. Held elsewhere: task by task from
    /// the database (each task's row is one durable reading of it).
    pub(crate) async fn read_subtree<R>(
        &self,
        top: TaskId,
        principal: &str,
        view: ClientView,
        f: impl FnOnce(&HashMap<TaskId, SubtreeNode>, &dyn Fn(TaskId) -> Option<DetailedTask>) -> R,
    ) -> Result<Option<R>, ErrorObject> {
        let rt = self.runtime();
        if let Some(tree) = rt.owned_tree(top, principal) {
            let (r, _) = rt.read_tree(&tree, view, |rows, snapshot| f(&nodes_of(rows), snapshot));
            rt.flushed(top).await.map_err(store_error)?;
            return Ok(Some(r));
        }
        let mut nodes = HashMap::new();
        let mut snaps = HashMap::new();
        let mut queue = vec![top];
        while let Some(id) = queue.pop() {
            let Some(snap) = self.elsewhere.get(id, principal, view).await? else {
                if id == top {
                    return Ok(None);
                }
                continue;
            };
            let t = snap.task();
            queue.extend(t.child_task_ids.iter().copied());
            nodes.insert(
                id,
                SubtreeNode {
                    id,
                    parent: t.parent_task_id,
                    status: snap.status(),
                    message: t.status_message.clone(),
                    children: t.child_task_ids.clone(),
                },
            );
            snaps.insert(id, snap);
        }
        Ok(Some(f(&nodes, &|t| snaps.get(&t).cloned())))
    }

    /// A future that resolves once this instance is fenced (`None` for a
    /// single instance): a stream that follows trees ends then.
    pub(crate) fn fenced(&self) -> Option<BoxFuture<'static, ()>> {
        self.elsewhere.fenced()
    }

    /// The error a request gets while this instance is fenced; `None`
    /// while it serves.
    pub(crate) fn fenced_error(&self) -> Option<ErrorObject> {
        self.elsewhere.fenced_error()
    }
}

/// A tree's rows as nodes with their children in `childTaskIds` order
/// (the rows come in pre-order).
fn nodes_of(rows: &[crate::runtime::view::TaskRow]) -> HashMap<TaskId, SubtreeNode> {
    let mut nodes: HashMap<TaskId, SubtreeNode> = rows
        .iter()
        .map(|row| {
            (
                row.id,
                SubtreeNode {
                    id: row.id,
                    parent: row.parent,
                    status: row.status,
                    message: row.message.clone(),
                    children: Vec::new(),
                },
            )
        })
        .collect();
    for row in rows {
        if let Some(p) = row.parent
            && let Some(parent) = nodes.get_mut(&p)
        {
            parent.children.push(row.id);
        }
    }
    nodes
}

/// A single instance's `tasks/list` cursor: the runtime's list position.
fn encode_cursor(p: ListPosition) -> String {
    URL_SAFE_NO_PAD.encode(format!("subtask-list:{}:{}", p.tree, p.task))
}

fn decode_cursor(raw: &str) -> Option<ListPosition> {
    let bytes = URL_SAFE_NO_PAD.decode(raw).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (tree, task) = text.strip_prefix("subtask-list:")?.split_once(':')?;
    Some(ListPosition {
        tree: tree.parse().ok()?,
        task: task.parse().ok()?,
    })
}

/// A `tasks/list` cursor of a list read from a database (a cluster's, or
/// the SQLite file's): `prefix`, then the stored sequence numbers of the
/// last tree and task listed. Each reader has its own prefix, so a cursor
/// of one is refused by the other.
fn encode_stored_cursor(prefix: &str, (tree, task): (i64, i64)) -> String {
    URL_SAFE_NO_PAD.encode(format!("{prefix}:{tree}:{task}"))
}

/// The positions in a cursor [`encode_stored_cursor`] made with `prefix`.
fn decode_stored_cursor(prefix: &str, raw: &str) -> Option<(i64, i64)> {
    let bytes = URL_SAFE_NO_PAD.decode(raw).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (tree, task) = text.strip_prefix(prefix)?.strip_prefix(':')?.split_once(':')?;
    Some((tree.parse().ok()?, task.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_cursors_round_trip_and_garbage_is_refused() {
        let p = ListPosition { tree: 42, task: 7 };
        assert_eq!(decode_cursor(&encode_cursor(p)), Some(p));
        for bad in ["", "x", "c3VidGFzaw", &URL_SAFE_NO_PAD.encode("subtask-list:1")] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }
}
