//! The web view's reads (`/ui`, feature `ui`) through the task-access
//! service: a principal's trees a page at a time, a whole tree as rows,
//! and a tree's readings as it changes, wherever each tree is held.
//!
//! A single instance reads its runtime. A cluster instance lists from the
//! database (every instance lists the same trees, in the order their root
//! rows were stored), shows the trees it holds from memory and the others
//! from their stored rows, and follows a tree held elsewhere by re-reading
//! it when a commit touches it (the notifications `subscriptions/listen`
//! follows such trees by), as [`Elsewhere`](super::Elsewhere) does for
//! `tasks/get`, `tasks/list` and streams.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};
use parking_lot::Mutex;

use super::TaskAccess;
use crate::model::{ErrorObject, TaskId, TaskStatus};
use crate::runtime::view::{TaskRow, TreeSummary};
use crate::server::auth::Principal;
use crate::server::reply::store_error;

/// One tree as the web view draws it: its root, its tool and every task as
/// a row, in pre-order (a task, then each child's subtree in
/// `childTaskIds` order).
pub(crate) struct TreeOfRows {
    /// The tree's root.
    pub(crate) root: TaskId,
    /// The tool that started it (`None` for a tree without one).
    pub(crate) tool: Option<Arc<str>>,
    /// Its tasks, the root first.
    pub(crate) rows: Vec<TaskRow>,
}

/// Root rows read from the database per query of a cluster's list.
const LIST_BATCH: usize = 128;

/// Counts of finished trees held elsewhere kept at most (a finished tree
/// never changes: its counts are read from the database once).
const DONE_CACHE: usize = 8_192;

/// Tasks and counts by status of finished trees held elsewhere, by root.
type DoneCounts = HashMap<TaskId, (usize, [usize; TaskStatus::ALL.len()])>;

fn done_cache() -> &'static Mutex<DoneCounts> {
    static DONE: OnceLock<Mutex<DoneCounts>> = OnceLock::new();
    DONE.get_or_init(Mutex::default)
}

impl TaskAccess<'_> {
    /// Up to `max` of `principal`'s trees that `keep` accepts, newest
    /// first, created before list position `before` (all when `None`); at
    /// most `scan` trees are looked at. Also returns the position the next
    /// page starts from: `None` when no older tree is left (a full page
    /// looks one tree further to know), `Some` when there are more, or
    /// when `scan` ran out first (that page may be short, or empty).
    pub(crate) async fn tree_page(
        &self,
        principal: &Principal,
        before: Option<u64>,
        max: usize,
        scan: usize,
        mut keep: impl FnMut(&TreeSummary) -> bool + Send,
    ) -> Result<(Vec<TreeSummary>, Option<u64>), ErrorObject> {
        let (mut page, next) = match self
            .elsewhere
            .roots(principal.name(), before, LIST_BATCH.min(scan))
        {
            // A cluster: the list is the database's.
            Some(first) => self.stored_page(first, principal, max, scan, &mut keep).await?,
            None => {
                let owner = self.server.owner(principal);
                self.runtime().recent_trees(&owner, before, max + 1, scan, keep)
            }
        };
        if page.len() > max {
            page.truncate(max);
            let next = page.last().map(|t| t.position);
            return Ok((page, next));
        }
        Ok((page, next))
    }

    /// Whether this instance is one of a cluster: trees may be held by
    /// other instances (a page's live-task count is this instance's).
    pub(crate) fn is_cluster(&self) -> bool {
        self.elsewhere.is_cluster()
    }

    /// [`TaskAccess::tree_page`] from the database, up to `max + 1` trees:
    /// the trees held here summarized from memory, the others from their
    /// stored rows.
    async fn stored_page(
        &self,
        first: BoxFuture<'_, Result<Vec<TreeSummary>, ErrorObject>>,
        principal: &Principal,
        max: usize,
        scan: usize,
        keep: &mut (impl FnMut(&TreeSummary) -> bool + Send),
    ) -> Result<(Vec<TreeSummary>, Option<u64>), ErrorObject> {
        let name = principal.name();
        let rt = self.runtime();
        let mut out: Vec<TreeSummary> = Vec::new();
        let mut cursor = None;
        let mut looked = 0;
        let mut read = Some(first);
        let mut want = LIST_BATCH.min(scan);
        let next = 'scan: loop {
            let Some(batch) = read.take() else {
                break None;
            };
            let batch = batch.await?;
            let exhausted = batch.len() < want;
            let last = batch.len();
            for (i, mut tree) in batch.into_iter().enumerate() {
                cursor = Some(tree.position);
                looked += 1;
                if let Some(cell) = rt.owned_tree(tree.root, name) {
                    let rows = rt.tree_rows(&cell);
                    summarize(&mut tree, rows.tool, &rows.rows);
                }
                if keep(&tree) {
                    out.push(tree);
                }
                if out.len() > max {
                    break 'scan cursor;
                }
                if looked >= scan {
                    // The last tree looked at may be the oldest.
                    break 'scan if exhausted && i + 1 == last { None } else { cursor };
                }
            }
            if exhausted {
                break None;
            }
            want = (scan - looked).min(LIST_BATCH);
            read = self.elsewhere.roots(name, cursor, want);
        };
        self.count_elsewhere(&mut out, name).await?;
        Ok((out, next))
    }

    /// Fills in the tasks and counts of the trees of `page` that are held
    /// elsewhere (those with no task counted yet): a finished one from the
    /// cache when it was read before, the others from their stored rows in
    /// one read.
    async fn count_elsewhere(&self, page: &mut [TreeSummary], principal: &str) -> Result<(), ErrorObject> {
        let mut missing = Vec::new();
        {
            let done = done_cache().lock();
            for tree in page.iter_mut().filter(|t| t.tasks == 0) {
                match done.get(&tree.root) {
                    Some(&(tasks, counts)) if tree.status.is_terminal() => {
                        tree.tasks = tasks;
                        tree.counts = counts;
                    }
                    _ => missing.push(tree.root),
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let read = self.elsewhere.tree_rows(missing, principal).await?;
        let by_root: HashMap<TaskId, TreeOfRows> = read.into_iter().map(|t| (t.root, t)).collect();
        let mut done = done_cache().lock();
        for tree in page.iter_mut().filter(|t| t.tasks == 0) {
            if let Some(read) = by_root.get(&tree.root) {
                summarize(tree, read.tool.clone(), &read.rows);
                if tree.status.is_terminal() {
                    if done.len() >= DONE_CACHE {
                        done.clear();
                    }
                    done.insert(tree.root, (tree.tasks, tree.counts));
                }
            }
        }
        Ok(())
    }

    /// The tree holding task `id` as rows, once durable; `None` for unknown
    /// and foreign ids alike.
    pub(crate) async fn tree(&self, id: TaskId, principal: &str) -> Result<Option<TreeOfRows>, ErrorObject> {
        let rt = self.runtime();
        if let Some(cell) = rt.owned_tree(id, principal) {
            let rows = rt.tree_rows(&cell);
            rt.durable(rows.ticket).await.map_err(store_error)?;
            return Ok(Some(TreeOfRows {
                root: rows.root,
                tool: rows.tool,
                rows: rows.rows,
            }));
        }
        Ok(self
            .elsewhere
            .tree_rows(vec![id], principal)
            .await?
            .into_iter()
            .next())
    }

    /// The tree holding task `id` as it changes: every row first (`full`),
    /// then the rows that changed, each time the tree changed, at most every
    /// `interval`, each reading durable; the last change is `done` (every
    /// task is terminal). `None` for unknown and foreign ids alike. A
    /// stream that ends without `done` failed (the store failed, the
    /// database cannot be read now, or the tree is gone).
    pub(crate) async fn watch_tree(
        &self,
        id: TaskId,
        principal: &str,
        interval: Duration,
    ) -> Result<Option<BoxStream<'static, TreeChange>>, ErrorObject> {
        let rt = self.runtime();
        if let Some(cell) = rt.owned_tree(id, principal) {
            let server = self.server.clone();
            let changes = stream::unfold((Sent::new(), true, false), move |(mut sent, first, ended)| {
                let cell = cell.clone();
                let server = server.clone();
                async move {
                    if ended {
                        return None;
                    }
                    loop {
                        let notified = cell.changed().notified();
                        tokio::pin!(notified);
                        notified.as_mut().enable();
                        let rt = server.runtime();
                        let rows = rt.tree_rows(&cell);
                        // Shown only once durable; a failed store ends the stream.
                        rt.durable(rows.ticket).await.ok()?;
                        if let Some(change) = diff(&mut sent, rows.rows, first) {
                            let done = change.done;
                            return Some((change, (sent, false, done)));
                        }
                        notified.await;
                        tokio::time::sleep(interval).await;
                    }
                }
            });
            return Ok(Some(changes.boxed()));
        }
        // Subscribed before the first reading: no change after it is missed.
        let Some(root) = self
            .elsewhere
            .tree_rows(vec![id], principal)
            .await?
            .first()
            .map(|t| t.root)
        else {
            return Ok(None);
        };
        let changes = self.elsewhere.tree_changes(root);
        // Read again once subscribed (the reading above found the root).
        let Some(reading) = self.elsewhere.tree_rows(vec![root], principal).await?.pop() else {
            return Ok(None);
        };
        let watch = Remote {
            changes,
            next: Some(reading.rows),
            server: self.server.clone(),
            principal: principal.to_owned(),
            root,
            sent: Sent::new(),
            first: true,
            ended: false,
        };
        let changes = stream::unfold(watch, move |mut w| async move {
            if w.ended {
                return None;
            }
            loop {
                let rows = match w.next.take() {
                    Some(rows) => rows,
                    None => {
                        w.changes.next().await?;
                        tokio::time::sleep(interval).await;
                        let read = w
                            .server
                            .tasks()
                            .elsewhere
                            .tree_rows(vec![w.root], &w.principal)
                            .await;
                        match read {
                            Ok(trees) => trees.into_iter().next()?.rows,
                            Err(e) => {
                                tracing::warn!(error = %e.message, tree = %w.root, "re-reading a watched tree failed");
                                return None;
                            }
                        }
                    }
                };
                let first = std::mem::replace(&mut w.first, false);
                if let Some(change) = diff(&mut w.sent, rows, first) {
                    w.ended = change.done;
                    return Some((change, w));
                }
            }
        });
        Ok(Some(changes.boxed()))
    }
}

/// One step of a tree followed by [`TaskAccess::watch_tree`].
pub(crate) struct TreeChange {
    /// The rows that changed since the last step (every row when `full`).
    pub(crate) rows: Vec<TaskRow>,
    /// The first step: `rows` is the whole tree.
    pub(crate) full: bool,
    /// Every task of the tree is terminal: the last step.
    pub(crate) done: bool,
}

/// What a follower last sent of each task.
type Sent = HashMap<TaskId, TaskRow>;

/// Following a tree held elsewhere: its change ticks and what was sent.
struct Remote {
    changes: BoxStream<'static, ()>,
    /// A reading not stepped on yet (the first).
    next: Option<Vec<TaskRow>>,
    server: crate::server::Server,
    principal: String,
    root: TaskId,
    sent: Sent,
    first: bool,
    ended: bool,
}

/// The step of a reading of a tree (`None`: nothing to show, wait for the
/// next change): the rows that differ from `sent` (now recorded there),
/// and whether every task is terminal. The first reading is always a step.
fn diff(sent: &mut Sent, rows: Vec<TaskRow>, first: bool) -> Option<TreeChange> {
    let done = rows.iter().all(|r| r.status.is_terminal());
    let changed: Vec<TaskRow> = rows
        .into_iter()
        .filter(|r| {
            if sent.get(&r.id) == Some(r) {
                return false;
            }
            sent.insert(r.id, r.clone());
            true
        })
        .collect();
    (first || done || !changed.is_empty()).then_some(TreeChange {
        rows: changed,
        full: first,
        done,
    })
}

/// `tree`'s status, message, times, tool, tasks and counts from its rows
/// (the root first).
fn summarize(tree: &mut TreeSummary, tool: Option<Arc<str>>, rows: &[TaskRow]) {
    let mut counts = [0; TaskStatus::ALL.len()];
    for row in rows {
        if let Some(i) = TaskStatus::ALL.iter().position(|s| *s == row.status) {
            counts[i] += 1;
        }
    }
    if let Some(root) = rows.first() {
        tree.status = root.status;
        tree.message = root.message.clone();
        tree.created_at = root.created_at;
        tree.last_updated_at = root.last_updated_at;
    }
    tree.tool = tool;
    tree.tasks = rows.len();
    tree.counts = counts;
}
