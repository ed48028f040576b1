//! What the operator's web view reads (`/ui`, feature `ui`): a tree's
//! tasks as compact rows in display order, and a principal's trees, newest
//! first, with their counts by status. Built with the `server` feature.
//!
//! These are operator reads, not hot paths: a tree's rows cost O(tasks of
//! that tree) under its lock, a page of trees O(tasks of the trees on it).

use std::sync::Arc;

use super::Runtime;
#[cfg(feature = "ui")]
use super::owner::Owner;
use super::tree::TreeCell;
use crate::core::ClientView;
use crate::core::{Forest, Timeline};
use crate::model::{DetailedTask, TaskId, TaskStatus, Timestamp};
use crate::store::Ticket;

/// One task as the web view draws it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TaskRow {
    pub(crate) id: TaskId,
    pub(crate) parent: Option<TaskId>,
    /// Index in the parent's `childTaskIds`.
    pub(crate) position: u32,
    pub(crate) status: TaskStatus,
    pub(crate) message: Option<String>,
    pub(crate) created_at: Timestamp,
    pub(crate) last_updated_at: Timestamp,
    pub(crate) children: u32,
    /// Children that are terminal.
    pub(crate) children_ended: u32,
    /// Outstanding input requests.
    pub(crate) inputs: u32,
    /// When the task entered each stage (one [`Stage::Unrecorded`](crate::core::Stage)
    /// mark for a row read from a store: timelines are not stored).
    pub(crate) timeline: Timeline,
}

/// Number of wire statuses.
const STATUSES: usize = TaskStatus::ALL.len();

/// A status's index in [`TaskStatus::ALL`].
fn status_index(s: TaskStatus) -> usize {
    TaskStatus::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

/// One tree in the web view's list.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TreeSummary {
    /// Position in the owner's list (newer trees have larger positions).
    pub(crate) position: u64,
    pub(crate) root: TaskId,
    pub(crate) tool: Option<Arc<str>>,
    pub(crate) status: TaskStatus,
    pub(crate) message: Option<String>,
    pub(crate) created_at: Timestamp,
    pub(crate) last_updated_at: Timestamp,
    pub(crate) tasks: usize,
    /// Tasks by status, in the order of [`TaskStatus::ALL`].
    pub(crate) counts: [usize; STATUSES],
}

/// A tree's rows, in pre-order (a task, then each child's subtree in
/// `childTaskIds` order), with what the tree is and the durability ticket
/// of this reading.
pub(crate) struct TreeRows {
    pub(crate) root: TaskId,
    pub(crate) tool: Option<Arc<str>>,
    pub(crate) rows: Vec<TaskRow>,
    pub(crate) ticket: Ticket,
}

fn row_of(rec: &crate::core::TaskRecord) -> TaskRow {
    let children = rec.child_count();
    let ended = children.saturating_sub(rec.live_children() as usize);
    TaskRow::of(rec, children, ended)
}

impl TaskRow {
    /// `rec`'s row, with its `children` of which `ended` are terminal
    /// (counted by the caller: the runtime keeps the count, rows read
    /// from a database count them).
    pub(crate) fn of(rec: &crate::core::TaskRecord, children: usize, ended: usize) -> TaskRow {
        TaskRow {
            id: rec.id(),
            parent: rec.parent(),
            position: rec.position(),
            status: rec.status(),
            message: rec.status_message(),
            created_at: rec.created_at(),
            last_updated_at: rec.last_updated_at(),
            children: u32::try_from(children).unwrap_or(u32::MAX),
            children_ended: u32::try_from(ended).unwrap_or(u32::MAX),
            inputs: u32::try_from(rec.outstanding_inputs().len()).unwrap_or(u32::MAX),
            timeline: rec.timeline().clone(),
        }
    }
}

/// Every task of `forest` under `root`, in pre-order.
fn pre_order(forest: &Forest, root: TaskId) -> Vec<TaskRow> {
    let mut out = Vec::with_capacity(forest.len());
    let Some(top) = forest.slot_of(root) else {
        return out;
    };
    let mut stack = vec![top];
    while let Some(slot) = stack.pop() {
        let Some(rec) = forest.task_at(slot) else {
            continue;
        };
        out.push(row_of(rec));
        // Children pushed last-first, so the first child is visited next.
        stack.extend(rec.child_list().iter().rev().map(|c| c.slot));
    }
    out
}

impl Runtime {
    /// The tree holding `id` if `owner` owns it (`None` for unknown ids
    /// and another principal's trees alike).
    pub(crate) fn owned_tree(&self, id: TaskId, owner: &str) -> Option<Arc<TreeCell>> {
        let tree = self.inner.tree_of(id)?;
        let mine = tree
            .state
            .lock()
            .owner
            .as_ref()
            .is_some_and(|o| o.name() == owner);
        mine.then_some(tree)
    }

    /// `f` over every task of `tree` as a row (pre-order from its root) and
    /// a reader of any of its tasks' snapshots, all under one lock of the
    /// tree, so that the rows and the snapshots agree; with the durability
    /// ticket of this reading. O(tasks of the tree) under the lock, as
    /// [`Runtime::tree_rows`]; `f` must not block.
    pub(crate) fn read_tree<R>(
        &self,
        tree: &TreeCell,
        view: ClientView,
        f: impl FnOnce(&[TaskRow], &dyn Fn(TaskId) -> Option<DetailedTask>) -> R,
    ) -> (R, Ticket) {
        let st = tree.state.lock();
        let rows = pre_order(&st.forest, tree.root);
        let snapshot = |id| st.forest.snapshot(id, view);
        (f(&rows, &snapshot), st.durable.ticket)
    }

    /// Every task of `tree` as a row, in pre-order from its root.
    pub(crate) fn tree_rows(&self, tree: &TreeCell) -> TreeRows {
        let st = tree.state.lock();
        TreeRows {
            root: tree.root,
            tool: tree.label().cloned(),
            rows: pre_order(&st.forest, tree.root),
            ticket: st.durable.ticket,
        }
    }

    /// Up to `max` of `owner`'s trees, newest first, older than list
    /// position `before` (all when `None`), that `keep` accepts; at most
    /// `scan` trees are looked at. Also returns the position to continue
    /// from (`None` when the list is exhausted).
    #[cfg(feature = "ui")]
    pub(crate) fn recent_trees(
        &self,
        owner: &Owner,
        before: Option<u64>,
        max: usize,
        scan: usize,
        mut keep: impl FnMut(&TreeSummary) -> bool,
    ) -> (Vec<TreeSummary>, Option<u64>) {
        let mut out = Vec::new();
        let mut cursor = before.unwrap_or(u64::MAX);
        let mut looked = 0;
        loop {
            let batch = owner.trees_before(cursor, 64);
            if batch.is_empty() {
                return (out, None);
            }
            for (position, tree) in batch {
                cursor = position;
                looked += 1;
                if let Some(tree) = tree.upgrade() {
                    let summary = summarize(position, &tree);
                    if keep(&summary) {
                        out.push(summary);
                    }
                }
                if out.len() >= max || looked >= scan {
                    return (out, Some(cursor));
                }
            }
        }
    }
}

/// A tree's summary: its root and its tasks counted by status.
fn summarize(position: u64, tree: &TreeCell) -> TreeSummary {
    let st = tree.state.lock();
    let forest = &st.forest;
    let mut counts = [0; STATUSES];
    let mut tasks = 0;
    for id in forest.ids() {
        if let Some(rec) = forest.task(id) {
            counts[status_index(rec.status())] += 1;
            tasks += 1;
        }
    }
    let root = forest.task(tree.root);
    TreeSummary {
        position,
        root: tree.root,
        tool: tree.label().cloned(),
        status: root.map_or(TaskStatus::Working, |r| r.status()),
        message: root.and_then(|r| r.status_message()),
        created_at: root.map_or(Timestamp::EPOCH, |r| r.created_at()),
        last_updated_at: root.map_or(Timestamp::EPOCH, |r| r.last_updated_at()),
        tasks,
        counts,
    }
}
