//! One tree's runtime data: its state behind its own lock (the forest, the
//! side table of live tasks, its owner, its write position), the handlers
//! waiting to start ([`StartJob`], [`Job`]), the exits waiting to be applied,
//! and the follow-up work a command leaves for after the lock ([`Post`]).
//!
//! Data and the small steps done under the tree lock only; the code that
//! drives a tree (commands, effects, starts and exits, slots) is the
//! driver's (`driver/`), whose module documentation gives the lock order.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};

use super::cell::TaskCell;
use super::owner::Owner;
use super::scheduler::Scheduler;
use super::stats::ToolStats;
use super::supervisor::Launcher;
use crate::core::{Forest, HandlerOutcome, Slot};
use crate::model::{JsonObject, TaskId, Timestamp};
use crate::store::{Ticket, TreeMeta, WriteOp};

/// Work waiting for a scheduler slot.
pub(crate) enum Job {
    /// Start a queued task's handler.
    Start(StartJob),
    /// Give a slot back to a handler that was parked (awaiting input, a
    /// subtask, or resume) and wants to continue.
    Resume(Arc<TaskCell>, oneshot::Sender<()>),
}

/// A queued task's handler, waiting for its dependencies, a slot, or resume.
pub(crate) struct StartJob {
    pub(crate) tree: Arc<TreeCell>,
    pub(crate) id: TaskId,
    pub(crate) body: Launcher,
    pub(crate) deps: Vec<TaskId>,
    /// The handler runs again after a restart: answers it had received
    /// before are handed back when it asks the same keys.
    pub(crate) rerun: bool,
    /// The tree row, written with this job's first batch (a root created
    /// and started in one step).
    pub(crate) meta: Option<TreeMeta>,
    /// The task's own span (`span.rs`), created with the task: a child of
    /// its parent task's span, or for a root of the span of whoever
    /// started it. Moved into the task's cell when the handler starts;
    /// closed with the job when the task ends before it started.
    pub(crate) span: tracing::Span,
}

/// Runtime-side data of a live task: created on demand, dropped when the
/// task becomes terminal.
#[derive(Default)]
pub(crate) struct TaskRt {
    /// The task's cell, once something waits on it or its handler runs.
    pub(crate) cell: Option<Arc<TaskCell>>,
    /// What few tasks need, kept out of line so the table stays dense.
    pub(crate) rare: Option<Box<RareRt>>,
}

/// The rarely used part of [`TaskRt`].
#[derive(Default)]
pub(crate) struct RareRt {
    /// Answers delivered by `tasks/update`, waiting for the handler.
    pub(crate) answers: BTreeMap<String, JsonObject>,
    /// The handler, while it cannot start yet (dependencies or pause).
    pub(crate) job: Option<StartJob>,
    /// Dependencies not yet terminal.
    pub(crate) pending_deps: u32,
    /// Tasks whose `after` names this one.
    pub(crate) dependents: Vec<Slot>,
}

impl TaskRt {
    /// The rare part, created on demand.
    pub(crate) fn rare_mut(&mut self) -> &mut RareRt {
        self.rare.get_or_insert_with(Box::default)
    }

    /// The rare part, if any.
    pub(crate) fn rare(&mut self) -> Option<&mut RareRt> {
        self.rare.as_deref_mut()
    }
}

/// [`TaskRt`] by slot: the effects of a command name their task's slot, so
/// acting on them never hashes an id. Freed when the tree holds no live
/// task's data.
#[derive(Default)]
pub(crate) struct RtTable {
    slots: Vec<Option<TaskRt>>,
    occupied: usize,
}

impl RtTable {
    pub(crate) fn get(&self, slot: Slot) -> Option<&TaskRt> {
        self.slots.get(slot.index())?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, slot: Slot) -> Option<&mut TaskRt> {
        self.slots.get_mut(slot.index())?.as_mut()
    }

    /// The entry of `slot`, created on demand.
    pub(crate) fn entry(&mut self, slot: Slot) -> &mut TaskRt {
        let i = slot.index();
        if i >= self.slots.len() {
            if self.slots.capacity() == 0 {
                // Most trees have one live task (a root): its entry's
                // worth, not the four a first push reserves.
                self.slots.reserve_exact(i + 1);
            }
            self.slots.resize_with(i + 1, || None);
        }
        let entry = &mut self.slots[i];
        if entry.is_none() {
            self.occupied += 1;
        }
        entry.get_or_insert_with(TaskRt::default)
    }

    pub(crate) fn remove(&mut self, slot: Slot) -> Option<TaskRt> {
        let rt = self.slots.get_mut(slot.index())?.take()?;
        self.occupied -= 1;
        Some(rt)
    }

    /// Takes every entry (the tree was deleted).
    pub(crate) fn take_all(&mut self) -> Vec<TaskRt> {
        let all = std::mem::take(&mut self.slots).into_iter().flatten().collect();
        self.occupied = 0;
        all
    }

    /// Frees the table when no entry is left (an idle tree holds none).
    pub(crate) fn shrink_if_idle(&mut self) {
        if self.occupied == 0 && self.slots.capacity() > 0 {
            self.slots = Vec::new();
        }
    }
}

/// State of one tree.
pub(crate) struct TreeState {
    pub(crate) forest: Forest,
    pub(crate) rt: RtTable,
    /// The principal that created the tree, if any.
    pub(crate) owner: Option<Arc<Owner>>,
    /// Persistence bookkeeping (unused without a store).
    pub(crate) durable: Durable,
}

/// A tree's write position in the store.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Durable {
    /// Version of the tree's last batch.
    pub(crate) version: u64,
    /// Ticket of the tree's last batch: what a reader waits for.
    pub(crate) ticket: Ticket,
}

impl TreeState {
    /// The task's notifier, created on demand; `None` once terminal or gone
    /// (a terminal task never changes again).
    pub(crate) fn notify_of(&mut self, id: TaskId) -> Option<Arc<TaskCell>> {
        let slot = self.forest.slot_of(id)?;
        self.notify_at(slot)
    }

    /// [`TreeState::notify_of`] by slot.
    pub(crate) fn notify_at(&mut self, slot: Slot) -> Option<Arc<TaskCell>> {
        let rec = self.forest.task_at(slot).filter(|r| !r.is_terminal())?;
        let ending = rec.is_winding_down();
        let (id, parent) = (rec.id(), rec.parent().unwrap_or(rec.id()));
        Some(
            self.rt
                .entry(slot)
                .cell
                .get_or_insert_with(|| TaskCell::new(ending, parent, id, slot))
                .clone(),
        )
    }
}

/// A tree: its state behind one lock, and a notifier for ordered-result streams.
pub(crate) struct TreeCell {
    pub(crate) root: TaskId,
    /// What the tree runs, for operators (the server's tool name), as the
    /// counters of that tool, resolved once for the tree (`None`:
    /// unlabeled, counted in the runtime's `Stats::unlabeled`; read them
    /// with `Inner::tool_of`). The name, shown by the web view and used as
    /// the `tool` label of metrics, is read from them
    /// ([`TreeCell::label`]): a tree keeps no copy.
    pub(crate) tool: Option<Arc<ToolStats>>,
    /// Durable execution: the tree's handlers keep a journal and run
    /// again in place after a stop (a resumable tool's tree).
    pub(crate) journaled: bool,
    pub(crate) state: Mutex<TreeState>,
    /// Woken whenever any task of the tree changes: created by the first
    /// waiter (an ordered-result stream, the web view), so a tree no one
    /// watches keeps 8 bytes here, not a 32-byte `Notify`. Wait with
    /// [`TreeCell::changed`], wake with [`TreeCell::notify_changed`].
    changed: once_cell::race::OnceBox<Notify>,
    /// Handlers that returned and wait for their `finish` to be applied
    /// (`Inner::exit`); boxed while any wait, `None` otherwise.
    pub(crate) exits: Mutex<Option<Box<Exits>>>,
}

/// Exits waiting for the tree lock. A returning handler never blocks on the
/// tree lock: it queues its exit here, and one thread at a time (the
/// drainer) applies every queued exit under one tree lock acquisition.
#[derive(Default)]
pub(crate) struct Exits {
    pub(crate) queue: Vec<Exit>,
    /// A thread is applying exits; it takes the queue again before it stops.
    pub(crate) draining: bool,
}

impl TreeCell {
    /// The tree's change notifier, created on first use. A waiter makes
    /// its `Notified` (and enables it) before it reads the tree under its
    /// lock; a change is made under that lock before
    /// [`TreeCell::notify_changed`] looks for the notifier, so a waiter
    /// that created it after that look has read the change already.
    pub(crate) fn changed(&self) -> &Notify {
        self.changed.get_or_init(|| Box::new(Notify::new()))
    }

    /// Wakes the tree's waiters: nothing to do when no one ever waited.
    pub(crate) fn notify_changed(&self) {
        if let Some(changed) = self.changed.get() {
            changed.notify_waiters();
        }
    }

    /// What the tree runs (its tool's name), if labeled.
    pub(crate) fn label(&self) -> Option<&Arc<str>> {
        self.tool.as_deref().and_then(ToolStats::label)
    }

    /// A tree around `state`, counted under `tool`.
    pub(crate) fn new(
        root: TaskId,
        state: TreeState,
        tool: Option<Arc<ToolStats>>,
        journaled: bool,
    ) -> TreeCell {
        TreeCell {
            root,
            tool,
            journaled,
            state: Mutex::new(state),
            changed: once_cell::race::OnceBox::new(),
            exits: Mutex::new(None),
        }
    }
}

/// A handler that returned (or was aborted), queued for its `finish`.
pub(crate) struct Exit {
    pub(crate) id: TaskId,
    pub(crate) slot: Slot,
    pub(crate) outcome: HandlerOutcome,
    /// Its cell: the scheduler slot is released once the task has settled.
    pub(crate) cell: Arc<TaskCell>,
    /// The handler was a re-run: children it did not spawn again fail.
    pub(crate) rerun: bool,
}

/// What to do once the tree lock is released.
#[derive(Default)]
pub(crate) struct Post {
    pub(crate) notify: Vec<Arc<TaskCell>>,
    pub(crate) tree_changed: bool,
    pub(crate) created: Vec<TaskId>,
    pub(crate) deleted: Vec<TaskId>,
    pub(crate) arm: Option<Timestamp>,
    pub(crate) submit_front: Vec<StartJob>,
    pub(crate) submit_back: Vec<StartJob>,
    /// The tree row to write with the root's first batch.
    pub(crate) meta: Option<TreeMeta>,
    /// Writes that must land in the same batch as this command's effects
    /// (a cluster's inbox receipt: the command and its answer commit
    /// together). Dropped without a store.
    pub(crate) extra: Vec<WriteOp>,
    /// The tree's root became terminal in this command: the runtime may
    /// let the tree go later (`driver/release.rs`).
    pub(crate) root_finished: bool,
    /// This command lets the finished tree go rather than delete it: its
    /// removal is written as [`WriteOp::Release`] with this deletion time
    /// (ms since the Unix epoch; `None`: never), not as a deletion.
    pub(crate) release: Option<Option<u64>>,
}

impl Post {
    /// Queues a wake-up of `cell`, once per command.
    pub(crate) fn wake(&mut self, cell: &Arc<TaskCell>, stamp: u64) {
        if cell.first_wake_of(stamp) {
            self.notify.push(cell.clone());
        }
    }

    /// Queues a job to be scheduled after unlock.
    pub(crate) fn submit(&mut self, job: StartJob, front: bool) {
        if front {
            self.submit_front.push(job);
        } else {
            self.submit_back.push(job);
        }
    }
}

/// The last step of creating a task, roots and subtasks alike, under the
/// tree lock once the forest holds the task: a task whose dependencies are
/// pending waits for them; a task created with a slot
/// (`CreationSlot`, `driver/slots.rs`; `queue` is then
/// `None`) is handed back to start in it after the lock; any other queues
/// for a slot of `queue`, saying so (and its place) in its status message.
pub(crate) fn admit(
    st: &mut TreeState,
    now: Timestamp,
    job: StartJob,
    pending: &[TaskId],
    queue: Option<&Scheduler<Job>>,
    post: &mut Post,
) -> Option<StartJob> {
    let id = job.id;
    if !pending.is_empty() {
        let slot = st.forest.slot_of(id).expect("just created");
        for d in pending {
            let d = st.forest.slot_of(*d).expect("a pending dependency exists");
            st.rt.entry(d).rare_mut().dependents.push(slot);
        }
        let rare = st.rt.entry(slot).rare_mut();
        rare.pending_deps = pending.len() as u32;
        rare.job = Some(job);
        let _ = st.forest.await_dependencies(
            now,
            id,
            Some(format!("queued: waiting for {} dependencies", pending.len())),
        );
        return None;
    }
    let Some(sched) = queue else {
        return Some(job);
    };
    let _ = st.forest.set_status_message(now, id, Some(queued_message(sched)));
    post.submit(job, false);
    None
}

/// The status message of a task queued for a scheduler slot: its place in
/// the queue as it joins it (jobs already waiting, plus itself) and the
/// limit that holds it back.
fn queued_message(sched: &Scheduler<Job>) -> String {
    format!(
        "queued: waiting for a scheduler slot (place {} in the queue; at most {} handlers run at once)",
        sched.waiting() + 1,
        sched.max_running()
    )
}

/// A dependency of `dependent` became terminal.
pub(crate) fn dependency_done(st: &mut TreeState, dependent: Slot, post: &mut Post) {
    let Some(rare) = st.rt.get_mut(dependent).and_then(TaskRt::rare) else {
        return;
    };
    rare.pending_deps = rare.pending_deps.saturating_sub(1);
    if rare.pending_deps == 0 {
        st.forest.dependencies_met(dependent);
        if let Some(job) = rare.job.take() {
            post.submit(job, false);
        }
    }
}
