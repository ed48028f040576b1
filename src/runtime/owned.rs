//! What the server needs beyond the public runtime: trees owned by a
//! principal (created, listed and read only by it) and the durability
//! ticket of one read. Built with the `server` feature.

use std::sync::Arc;

use super::owner::Owner;
use super::{Runtime, RuntimeError};
use crate::core::{Forest, ForestConfig, TaskRecord};
use crate::model::{ClientView, DetailedTask, InputResponses, TaskId, Timestamp};
use crate::store::{StoreError, Ticket, WriteOp};

impl Runtime {
    /// Resolves once the store has made `ticket` durable (see
    /// [`Runtime::get_owned`]); immediate without a store.
    ///
    /// # Errors
    ///
    /// The store failed: the change may be lost on a crash.
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: dropping the future only stops waiting.
    pub(crate) async fn durable(&self, ticket: Ticket) -> Result<(), StoreError> {
        let Some(store) = &self.inner.store else {
            return Ok(());
        };
        if store.is_durable(ticket)? {
            return Ok(());
        }
        store.wait_durable(ticket).await
    }

    /// `tasks/get` in one lookup: the task as `view` sees it if its tree
    /// belongs to the principal named `owner`, with the ticket to await
    /// ([`Runtime::durable`]) before showing it. `None` for unknown ids and
    /// for another principal's (or an unowned) tree, alike.
    pub(crate) fn get_owned(
        &self,
        id: TaskId,
        owner: &str,
        view: ClientView,
    ) -> Option<(DetailedTask, Ticket)> {
        let tree = self.inner.tree_of(id)?;
        let st = tree.state.lock();
        if st.owner.as_ref()?.name() != owner {
            return None;
        }
        let snap = st.forest.snapshot(id, view)?;
        Some((snap, st.durable.ticket))
    }

    /// The owner of the tree holding `id` (`None` for unknown ids and
    /// unowned trees), in O(1).
    pub(crate) fn owner_of(&self, id: TaskId) -> Option<Arc<Owner>> {
        let tree = self.inner.tree_of(id)?;
        let st = tree.state.lock();
        st.owner.clone()
    }

    /// The tasks of the trees `owner` created, for a 2025-11-25
    /// `tasks/list`: trees in creation order, each tree's tasks in creation
    /// order, up to `limit` tasks from `from`, and where the next page
    /// starts (`None` after the last task). Each page costs O(`limit`) plus
    /// one short lock of the owner's list per 64 trees; it never visits
    /// another principal's trees. Trees deleted since the last page are
    /// skipped; tasks created in a tree already passed appear on no later
    /// page (a client that follows `childTaskIds` still finds them).
    pub(crate) fn list_owned(
        &self,
        owner: &Owner,
        from: ListPosition,
        limit: usize,
        view: ClientView,
    ) -> (Vec<DetailedTask>, Option<ListPosition>) {
        let mut out = Vec::new();
        let mut pos = from;
        loop {
            let batch = owner.trees_from(pos.tree, 64);
            if batch.is_empty() {
                return (out, None);
            }
            for (position, tree) in batch {
                if position != pos.tree {
                    pos = ListPosition {
                        tree: position,
                        task: 0,
                    };
                }
                let Some(tree) = tree.upgrade() else { continue };
                // Not yet published (created this instant, not yet
                // acknowledged): the next page starts at it.
                if self.inner.tree_of(tree.root).is_none() {
                    if out.is_empty() {
                        continue;
                    }
                    return (out, Some(pos));
                }
                let st = tree.state.lock();
                for id in st.forest.ids().skip(pos.task as usize) {
                    if out.len() == limit {
                        return (out, Some(pos));
                    }
                    out.extend(st.forest.snapshot(id, view));
                    pos.task += 1;
                }
            }
            pos = ListPosition {
                tree: pos.tree + 1,
                task: 0,
            };
        }
    }
}

/// Where a page of [`Runtime::list_owned`] starts: a tree's position in its
/// owner's list and a task's index in that tree's creation order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ListPosition {
    /// The tree's position in the owner's list (positions start at 1).
    pub(crate) tree: u64,
    /// The first task of that tree to list.
    pub(crate) task: u32,
}

/// A client's command on a task, as a cluster's inbox carries it.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    Update(InputResponses),
    Cancel,
    Steer(String),
    Pause(ClientView),
    Resume(ClientView),
}

impl Command {
    /// Applies this command to task `id` of `f`.
    fn apply(self, f: &mut Forest, now: Timestamp, id: TaskId) -> Result<Applied, RuntimeError> {
        match self {
            Command::Update(responses) => f.answer_input(now, id, responses).map(|_| Applied::Ack),
            Command::Cancel => f.cancel(now, id).map(|_| Applied::Ack),
            Command::Steer(message) => f.steer(now, id, message).map(|()| Applied::Ack),
            Command::Pause(view) => f
                .pause(now, id)
                .map(|_| Applied::Task(Box::new(f.snapshot(id, view).expect("the task was just paused")))),
            Command::Resume(view) => f
                .resume(now, id)
                .map(|()| Applied::Task(Box::new(f.snapshot(id, view).expect("the task was just resumed")))),
        }
        .map_err(RuntimeError::from)
    }
}

/// What `command` answers on task `id` of a finished tree the runtime let
/// go of (`RuntimeConfig::release_finished_after`), rebuilt from its
/// stored `records`: the answer it gave while it held the tree, since the
/// same lifecycle code decides it. Every task of such a tree is terminal,
/// so the command changes nothing, and the rebuilt tree is dropped.
///
/// # Errors
///
/// The command's refusal; [`RuntimeError::Journal`] when the records do
/// not make a tree (a damaged store).
pub(crate) fn command_on_stored(
    config: &Arc<ForestConfig>,
    root: TaskId,
    records: Vec<TaskRecord>,
    id: TaskId,
    command: Command,
    now: Timestamp,
) -> Result<Applied, RuntimeError> {
    let mut forest = Forest::restore(config.clone(), root, records, now)
        .map_err(|e| RuntimeError::Journal(format!("a stored tree does not load: {e}")))?;
    command.apply(&mut forest, now, id)
}

/// What a [`Command`] returned.
#[derive(Debug, Clone)]
pub(crate) enum Applied {
    /// Accepted (`update`, `cancel`, `steer`).
    Ack,
    /// The task after a `pause` or `resume`.
    Task(Box<DetailedTask>),
}

impl Runtime {
    /// Applies `command` to task `id` and writes `receipt(outcome)` (if
    /// any) in the same store batch as the command's effects: the command
    /// and the record that it was applied (with its answer) commit
    /// together, or neither does. `None` when the task is not in this
    /// runtime (no receipt is written then).
    pub(crate) fn apply_with_receipt(
        &self,
        id: TaskId,
        command: Command,
        receipt: impl FnOnce(&Result<Applied, RuntimeError>) -> Option<WriteOp>,
    ) -> Option<Result<Applied, RuntimeError>> {
        let tree = self.inner.tree_of(id)?;
        Some(self.inner.with_tree(&tree, |st, now, post| {
            let r = command.apply(&mut st.forest, now, id);
            post.extra.extend(receipt(&r));
            r
        }))
    }

    /// The root of the tree holding `id`, if this runtime holds it.
    #[cfg(feature = "postgres")]
    pub(crate) fn root_of_task(&self, id: TaskId) -> Option<TaskId> {
        Some(self.inner.tree_of(id)?.root)
    }

    /// Writes `op` (a receipt) in a batch of the tree `root`, in order with
    /// the tree's other batches; dropped when the runtime does not hold the
    /// tree or has no store.
    #[cfg(feature = "postgres")]
    pub(crate) fn write_receipt(&self, root: TaskId, op: WriteOp) {
        if let Some(tree) = self.inner.tree_of(root) {
            self.inner.with_tree(&tree, |_, _, post| post.extra.push(op));
        }
    }
}
