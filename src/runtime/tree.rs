//! One tree's state behind its own lock, and how effects of the core are
//! turned into wake-ups, scheduling, timers and index updates.
//!
//! Lock order: a tree's `state` lock is never held while taking the
//! scheduler's, the timer queue's or the index's lock; effects are absorbed
//! under the tree lock into a [`Post`] list that runs after it is released
//! (compute under the lock, notify after unlock).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::context::{DependencyOutcome, HandlerResult, Started, TaskContext};
use super::error::RuntimeError;
use super::inner::Inner;
use super::scheduler::{Scheduler, SlotState};
use super::stats::{StatsDelta, ToolStats};
use crate::core::{Effect, Forest, HandlerOutcome, Slot, TaskRecord, TransitionError};
use crate::model::{JsonObject, TaskId, Timestamp};
use crate::store::{Ticket, TreeMeta, WriteBatch, WriteOp};

/// The body of a handler, boxed until it starts.
pub type HandlerBody = Box<dyn FnOnce(TaskContext) -> BoxFuture<'static, HandlerResult> + Send>;

/// A queued task's handler, waiting for its dependencies, a slot, or resume.
pub(crate) struct StartJob {
    pub(crate) tree: Arc<TreeCell>,
    pub(crate) id: TaskId,
    pub(crate) body: HandlerBody,
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

/// A live task's shared runtime state: its wake-up channel (for everything
/// that waits on the task: its handler, a parent awaiting it, subscribers),
/// its cancel flag, and, while its handler runs, whether that handler holds
/// a scheduler slot. One allocation per task that is waited on or running.
pub(crate) struct TaskCell {
    /// Woken on every change of the task (status, steer, input, resume, cancel).
    pub(crate) notify: Notify,
    /// Set under the tree lock once the task winds down (a cancel or a
    /// failure was decided) or ends, before its waiters are woken: the
    /// handler's `cancelled()` reads it without taking the tree lock.
    ending: AtomicBool,
    /// The forest epoch of the last command that queued this cell for a
    /// wake-up, so one command wakes it once however many effects it had.
    stamp: AtomicU64,
    /// The handler's task, woken when the cancel flag is set so its grace
    /// timer starts even if the handler itself waits on something else.
    pub(crate) grace: AtomicWaker,
    /// Whether the handler holds a scheduler slot (see `scheduler.rs`).
    pub(crate) sched_slot: Mutex<SlotState>,
    /// The task's span, from its handler's start (`Inner::start_job`): the
    /// parent of its subtasks' spans, and where its final status is
    /// recorded as it turns terminal.
    pub(crate) span: std::sync::OnceLock<tracing::Span>,
    /// When the handler started (ms on the runtime's clock, as the start
    /// command read it), for the handler run time metric: taken from the
    /// clock readings the start and exit commands make anyway, so timing
    /// a handler reads no clock of its own.
    pub(crate) started_ms: AtomicU64,
}

impl TaskCell {
    fn new(ending: bool) -> Arc<TaskCell> {
        Arc::new(TaskCell {
            notify: Notify::new(),
            ending: AtomicBool::new(ending),
            stamp: AtomicU64::new(u64::MAX),
            grace: AtomicWaker::new(),
            sched_slot: Mutex::new(SlotState::default()),
            span: std::sync::OnceLock::new(),
            started_ms: AtomicU64::new(0),
        })
    }

    /// Whether the task winds down or ended.
    pub(crate) fn is_ending(&self) -> bool {
        self.ending.load(Ordering::Acquire)
    }

    fn set_ending(&self) {
        self.ending.store(true, Ordering::Release);
    }
}

/// Runtime-side data of a live task: created on demand, dropped when the
/// task becomes terminal.
#[derive(Default)]
pub(crate) struct TaskRt {
    /// The task's cell, once something waits on it or its handler runs.
    pub(crate) cell: Option<Arc<TaskCell>>,
    /// What few tasks need, kept out of line so the table stays dense.
    rare: Option<Box<RareRt>>,
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
    fn take_all(&mut self) -> Vec<TaskRt> {
        let all = std::mem::take(&mut self.slots).into_iter().flatten().collect();
        self.occupied = 0;
        all
    }

    /// Frees the table when no entry is left (an idle tree holds none).
    fn shrink_if_idle(&mut self) {
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

/// A principal that owns trees, with a limit on its live (non-terminal)
/// tasks and the list of its trees in creation order (for `tasks/list`).
///
/// Lock order: a tree's lock may be held while taking the list's lock
/// (a deleted tree leaves the list under its own lock), never the reverse.
#[derive(Debug)]
pub struct Owner {
    name: Arc<str>,
    live: AtomicUsize,
    /// Live tasks of this principal on other cluster instances, as they
    /// last published them (counted against the limit).
    elsewhere: AtomicUsize,
    max_live: usize,
    trees: Mutex<OwnedTrees>,
}

/// An owner's trees by list position (a position is never reused), and
/// each root's position, so that a deleted tree leaves the list.
#[derive(Debug, Default)]
struct OwnedTrees {
    last: u64,
    by_position: BTreeMap<u64, Weak<TreeCell>>,
    position_of: HashMap<TaskId, u64>,
}

impl Owner {
    /// A principal allowed `max_live` non-terminal tasks at once.
    pub fn new(name: impl Into<Arc<str>>, max_live: usize) -> Arc<Owner> {
        Arc::new(Owner {
            name: name.into(),
            live: AtomicUsize::new(0),
            elsewhere: AtomicUsize::new(0),
            max_live,
            trees: Mutex::new(OwnedTrees::default()),
        })
    }

    /// Appends a tree to the owner's list.
    pub(crate) fn enlist(&self, tree: &Arc<TreeCell>) {
        let mut trees = self.trees.lock();
        trees.last += 1;
        let position = trees.last;
        trees.by_position.insert(position, Arc::downgrade(tree));
        trees.position_of.insert(tree.root, position);
    }

    /// Removes a deleted tree from the list.
    pub(crate) fn delist(&self, root: TaskId) {
        let mut trees = self.trees.lock();
        if let Some(position) = trees.position_of.remove(&root) {
            trees.by_position.remove(&position);
        }
    }

    #[cfg(feature = "server")]
    /// Up to `max` listed trees from `position` on, in list order.
    pub(crate) fn trees_from(&self, position: u64, max: usize) -> Vec<(u64, Weak<TreeCell>)> {
        self.trees
            .lock()
            .by_position
            .range(position..)
            .take(max)
            .map(|(p, t)| (*p, t.clone()))
            .collect()
    }

    /// Up to `max` listed trees before `position`, newest first.
    #[cfg(feature = "ui")]
    pub(crate) fn trees_before(&self, position: u64, max: usize) -> Vec<(u64, Weak<TreeCell>)> {
        self.trees
            .lock()
            .by_position
            .range(..position)
            .rev()
            .take(max)
            .map(|(p, t)| (*p, t.clone()))
            .collect()
    }

    /// The principal's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Non-terminal tasks it owns now.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The limit on live tasks.
    pub fn max_live(&self) -> usize {
        self.max_live
    }

    /// Counts `n` live tasks recovered after a restart (not limited: they
    /// existed before).
    pub(crate) fn force_reserve(&self, n: usize) {
        self.live.fetch_add(n, Ordering::AcqRel);
    }

    /// Reserves one live task, or says the limit is reached.
    pub(crate) fn try_reserve(&self) -> Result<(), RuntimeError> {
        let before = self.live.fetch_add(1, Ordering::AcqRel);
        if before + self.elsewhere.load(Ordering::Relaxed) >= self.max_live {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return Err(RuntimeError::TooManyLiveTasks { max: self.max_live });
        }
        Ok(())
    }

    /// Sets the live tasks this principal has on other cluster instances.
    #[cfg(all(feature = "server", feature = "postgres"))]
    pub(crate) fn set_elsewhere(&self, n: usize) {
        self.elsewhere.store(n, Ordering::Relaxed);
    }

    pub(crate) fn release(&self) {
        let _ = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
    }
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
        Some(
            self.rt
                .entry(slot)
                .cell
                .get_or_insert_with(|| TaskCell::new(ending))
                .clone(),
        )
    }
}

/// A tree: its state behind one lock, and a notifier for ordered-result streams.
pub(crate) struct TreeCell {
    pub(crate) root: TaskId,
    /// What the tree runs, for operators (the server's tool name): shown
    /// by the web view and used as the `tool` label of metrics.
    pub(crate) label: Option<Arc<str>>,
    /// The counters of the label's tool, resolved once for the tree
    /// (`None`: unlabeled, counted in the runtime's `Stats::unlabeled`;
    /// read it with [`Inner::tool_of`]).
    pub(crate) tool: Option<Arc<ToolStats>>,
    /// Durable execution: the tree's handlers keep a journal and run
    /// again in place after a stop (a resumable tool's tree).
    pub(crate) journaled: bool,
    pub(crate) state: Mutex<TreeState>,
    /// Woken whenever any task of the tree changes.
    pub(crate) changed: Notify,
    /// Handlers that returned and wait for their `finish` to be applied
    /// ([`Inner::exit`]); boxed while any wait, `None` otherwise.
    exits: Mutex<Option<Box<Exits>>>,
}

/// Exits waiting for the tree lock. A returning handler never blocks on the
/// tree lock: it queues its exit here, and one thread at a time (the
/// drainer) applies every queued exit under one tree lock acquisition.
#[derive(Default)]
struct Exits {
    queue: Vec<Exit>,
    /// A thread is applying exits; it takes the queue again before it stops.
    draining: bool,
}

impl TreeCell {
    /// A tree around `state`.
    pub(crate) fn new(
        root: TaskId,
        state: TreeState,
        label: Option<Arc<str>>,
        tool: Option<Arc<ToolStats>>,
        journaled: bool,
    ) -> TreeCell {
        TreeCell {
            root,
            label,
            tool,
            journaled,
            state: Mutex::new(state),
            changed: Notify::new(),
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

/// Exits applied by one drainer before it hands the rest to a fresh tokio
/// task, so a worker is not held by a long stream of exits.
const DRAIN_BUDGET: usize = 4096;

/// What to do once the tree lock is released.
#[derive(Default)]
pub(crate) struct Post {
    notify: Vec<Arc<TaskCell>>,
    tree_changed: bool,
    created: Vec<TaskId>,
    deleted: Vec<TaskId>,
    arm: Option<Timestamp>,
    submit_front: Vec<StartJob>,
    submit_back: Vec<StartJob>,
    /// The tree row to write with the root's first batch.
    pub(crate) meta: Option<TreeMeta>,
    /// Writes that must land in the same batch as this command's effects
    /// (a cluster's inbox receipt: the command and its answer commit
    /// together). Dropped without a store.
    pub(crate) extra: Vec<WriteOp>,
}

impl Post {
    /// Queues a wake-up of `cell`, once per command.
    fn wake(&mut self, cell: &Arc<TaskCell>, stamp: u64) {
        if cell.stamp.swap(stamp, Ordering::Relaxed) != stamp {
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

impl Inner {
    /// Runs a command on a tree: `f` under the tree lock, effects absorbed,
    /// then the follow-up work after the lock is released.
    pub(crate) fn with_tree<R>(
        self: &Arc<Self>,
        tree: &Arc<TreeCell>,
        f: impl FnOnce(&mut TreeState, Timestamp, &mut Post) -> R,
    ) -> R {
        let mut post = Post::default();
        let r = {
            let mut st = tree.state.lock();
            let now = self.now();
            let r = f(&mut st, now, &mut post);
            self.absorb(self.tool_of(tree), &mut st, &mut post);
            r
        };
        self.run_post(tree, post);
        r
    }

    /// Turns the forest's effects into follow-up work, and counts them
    /// for the tree's `tool`. Under the tree lock.
    pub(crate) fn absorb(&self, tool: &ToolStats, st: &mut TreeState, post: &mut Post) {
        let mut counts = StatsDelta::default();
        let mut ops: Vec<WriteOp> = Vec::new();
        if let Some(meta) = post.meta.take() {
            ops.push(WriteOp::PutTree(meta));
        }
        let persist = self.store.is_some();
        let stamp = st.forest.epoch();
        for effect in st.forest.take_effects() {
            if persist && let Some(op) = super::persist::write_for_effect(&st.forest, &effect) {
                ops.push(op);
            }
            match effect {
                Effect::Created { id, slot, .. } => {
                    counts.created(slot);
                    post.created.push(id);
                }
                Effect::Changed { slot, from, to, .. } => {
                    counts.changed(slot, from, to);
                    post.tree_changed = true;
                    if to.is_terminal() {
                        if let Some(owner) = &st.owner {
                            owner.release();
                        }
                        if let Some(mut rt) = st.rt.remove(slot) {
                            if let Some(rec) = st.forest.task_at(slot) {
                                // A started task's span is in its cell; one
                                // that never started has it in its job.
                                let cell_span = rt.cell.as_ref().and_then(|c| c.span.get());
                                let job_span = rt.rare.as_ref().and_then(|r| r.job.as_ref()).map(|j| &j.span);
                                if let Some(span) = cell_span.or(job_span) {
                                    super::span::record_end(span, rec);
                                }
                            }
                            if let Some(cell) = &rt.cell {
                                cell.set_ending();
                                post.wake(cell, stamp);
                            }
                            if let Some(rare) = rt.rare() {
                                for d in std::mem::take(&mut rare.dependents) {
                                    dependency_done(st, d, post);
                                }
                            }
                        }
                    } else if let Some(cell) = st.rt.get(slot).and_then(|rt| rt.cell.as_ref()) {
                        post.wake(cell, stamp);
                    }
                }
                Effect::SteerQueued { slot, .. } => {
                    if let Some(cell) = st.rt.get(slot).and_then(|rt| rt.cell.as_ref()) {
                        post.wake(cell, stamp);
                    }
                }
                Effect::CancelHandler { slot, .. } => {
                    if let Some(cell) = st.rt.get(slot).and_then(|rt| rt.cell.as_ref()) {
                        cell.set_ending();
                        post.wake(cell, stamp);
                    }
                }
                Effect::WakeHandler { slot, .. } => {
                    if let Some(rt) = st.rt.get_mut(slot) {
                        if let Some(rare) = rt.rare()
                            && rare.pending_deps == 0
                            && let Some(job) = rare.job.take()
                        {
                            post.submit(job, true);
                        }
                        if let Some(cell) = &rt.cell {
                            post.wake(cell, stamp);
                        }
                    }
                }
                Effect::InputAnswered {
                    slot, key, response, ..
                } => {
                    let rt = st.rt.entry(slot);
                    rt.rare_mut().answers.insert(key, response);
                    if let Some(cell) = &rt.cell {
                        post.wake(cell, stamp);
                    }
                }
                Effect::ArmTimer { at } => post.arm = Some(post.arm.map_or(at, |a| a.min(at))),
                // Written above (`write_for_effect`); nothing wakes on it.
                Effect::Journaled { .. } => {}
                Effect::TreeDeleted { root, ids } => {
                    counts.deleted(ids.len());
                    post.tree_changed = true;
                    if let Some(owner) = &st.owner {
                        owner.delist(root);
                    }
                    for rt in st.rt.take_all() {
                        if let Some(cell) = rt.cell {
                            cell.set_ending();
                            post.wake(&cell, stamp);
                        }
                    }
                    post.deleted.extend(ids);
                }
            }
        }
        if persist {
            ops.append(&mut post.extra);
        }
        if let (Some(store), false) = (&self.store, ops.is_empty()) {
            // Submitted under the tree lock: the tree's batches reach the
            // store in command order.
            st.durable.version += 1;
            st.durable.ticket = store.submit(WriteBatch {
                root: ops[0].root(),
                version: st.durable.version,
                ops,
            });
        }
        // An idle tree holds no side-table allocation.
        st.rt.shrink_if_idle();
        // Relaxed adds, a few per command, under this tree's lock: a tree's
        // counts land in command order.
        tool.apply(&counts);
    }

    /// Follow-up work after the tree lock is released.
    pub(crate) fn run_post(self: &Arc<Self>, tree: &Arc<TreeCell>, post: Post) {
        for id in post.created {
            self.index_insert(id, tree);
        }
        for id in &post.deleted {
            self.index_remove(*id);
        }
        // Each task is woken once per command (`Post::wake`), in effect
        // order (cancels reach the leaves first), however many effects it had.
        for cell in post.notify {
            cell.notify.notify_waiters();
            if cell.is_ending() {
                // Starts the handler's grace timer (a no-op once woken).
                cell.grace.wake();
            }
        }
        if post.tree_changed {
            tree.changed.notify_waiters();
        }
        if let Some(at) = post.arm {
            self.timers.arm(at, tree.root);
        }
        for job in post.submit_front {
            self.schedule(job, true);
        }
        for job in post.submit_back {
            self.schedule(job, false);
        }
    }

    /// A handler returned: queues its exit and applies every queued exit of
    /// the tree unless another thread is already doing so (flat combining:
    /// many handlers exiting at once, as when a large subtree is cancelled,
    /// cost one lock acquisition and one round of wake-ups per batch, and
    /// the returning handlers never wait for the tree lock).
    pub(crate) fn exit(self: &Arc<Self>, tree: &Arc<TreeCell>, exit: Exit) {
        let drain = {
            let mut guard = tree.exits.lock();
            let exits = guard.get_or_insert_with(Box::default);
            exits.queue.push(exit);
            !std::mem::replace(&mut exits.draining, true)
        };
        if drain {
            self.drain_exits(tree);
        }
    }

    /// Applies queued exits until the queue is empty. Called by the thread
    /// that set `draining`; clears it under the same lock that finds the
    /// queue empty, so no exit is left behind.
    fn drain_exits(self: &Arc<Self>, tree: &Arc<TreeCell>) {
        let mut applied = 0;
        loop {
            let batch = {
                let mut guard = tree.exits.lock();
                match guard.as_mut() {
                    Some(exits) if !exits.queue.is_empty() => std::mem::take(&mut exits.queue),
                    // Drained: the next exit starts over (and drains).
                    _ => {
                        *guard = None;
                        return;
                    }
                }
            };
            if applied >= DRAIN_BUDGET {
                // Hand the rest to a fresh task (still draining), so one
                // worker is not held by an endless stream of exits.
                if let Some(exits) = tree.exits.lock().as_mut() {
                    exits.queue.splice(0..0, batch);
                }
                let (inner, tree) = (self.clone(), tree.clone());
                tokio::spawn(async move { inner.drain_exits(&tree) });
                return;
            }
            applied += batch.len();
            self.apply_exits(tree, batch);
        }
    }

    /// Applies a batch of exits in one command round, then releases the
    /// slots of the handlers that held one: a task settles before its slot
    /// lets queued work run.
    fn apply_exits(self: &Arc<Self>, tree: &Arc<TreeCell>, batch: Vec<Exit>) {
        let mut cells = Vec::with_capacity(batch.len());
        let mut reruns = Vec::new();
        let finishes: Vec<(TaskId, Slot, HandlerOutcome)> = batch
            .into_iter()
            .map(|exit| {
                cells.push(exit.cell);
                if exit.rerun {
                    reruns.push(exit.id);
                }
                (exit.id, exit.slot, exit.outcome)
            })
            .collect();
        self.with_tree(tree, |st, now, _| {
            for id in reruns {
                st.forest.fail_unclaimed(now, id);
            }
            let counts = self.tool_of(tree);
            for cell in &cells {
                let ran = now
                    .as_millis()
                    .saturating_sub(cell.started_ms.load(Ordering::Relaxed));
                counts.handler_ran(std::time::Duration::from_millis(ran));
            }
            for e in st
                .forest
                .finish_all(now, finishes)
                .into_iter()
                .filter_map(Result::err)
            {
                tracing::debug!(error = %e, "finish after the task ended");
            }
        });
        let held = cells.iter().filter(|c| c.take_for_exit()).count();
        if held > 0 {
            self.release_slots(tree.root, held);
        }
    }

    /// Starts a queued task's handler in a slot it already holds. Returns
    /// `false` (give the slot back) when the task is paused (the job waits
    /// for resume) or already terminal (cancelled while queued).
    pub(crate) fn start_job(self: &Arc<Self>, job: StartJob) -> bool {
        let tree = job.tree.clone();
        let id = job.id;
        let rerun = job.rerun;
        let mut job = job;
        let meta = job.meta.take();
        let started = self.with_tree(&tree, |st, now, post| {
            post.meta = meta;
            let slot = st.forest.slot_of(id)?;
            if self.drain.is_draining() && st.forest.task_at(slot).is_some_and(|r| !r.is_terminal()) {
                // Draining: nothing new starts; it runs on the next start.
                st.rt.entry(slot).rare_mut().job = Some(job);
                return None;
            }
            match st.forest.start(now, id) {
                Ok(()) => {}
                Err(TransitionError::Paused(_)) => {
                    st.rt.entry(slot).rare_mut().job = Some(job);
                    return None;
                }
                Err(_) => {
                    // Ended while queued (cancelled, or its tree failed):
                    // its span ends with the job.
                    if let Some(rec) = st.forest.task_at(slot) {
                        super::span::record_end(&job.span, rec);
                    }
                    return None;
                }
            }
            if st
                .forest
                .task_at(slot)
                .and_then(TaskRecord::handler_message)
                .is_some()
            {
                let _ = st.forest.set_status_message(now, id, None);
            }
            let deps: Vec<DependencyOutcome> = job
                .deps
                .iter()
                .filter_map(|d| {
                    st.forest
                        .task(*d)
                        .and_then(super::context::outcome_of)
                        .map(|outcome| DependencyOutcome { id: *d, outcome })
                })
                .collect();
            let parent = st.forest.task_at(slot).and_then(TaskRecord::parent);
            // The handler's cell exists from its start: its cancel flag is
            // then always current, and it starts holding its slot.
            let cell = st.notify_at(slot).expect("a started task is live");
            cell.hold_from_start();
            cell.started_ms.store(now.as_millis(), Ordering::Relaxed);
            let span = job.span.clone();
            let _ = cell.span.set(job.span);
            let journal = tree.journaled.then(|| {
                let cursor = if rerun {
                    super::durable::Cursor::replay(st.forest.replay_of(id))
                } else {
                    super::durable::Cursor::default()
                };
                Arc::new(Mutex::new(cursor))
            });
            Some((job.body, span, deps, parent, slot, cell, journal))
        });
        let Some((body, span, deps, parent, slot, cell, journal)) = started else {
            return false;
        };
        if journal.is_some() {
            tracing::debug!(target: super::durable::JOURNAL_TARGET, task = %id, rerun, "handler starts");
        }
        let start = Started {
            id,
            slot,
            cell,
            parent,
            deps,
            rerun,
            journal,
        };
        let ctx = TaskContext::new(self.clone(), tree, start);
        tokio::spawn(ctx.supervise(body, span));
        true
    }
}

/// The last step of creating a task, roots and subtasks alike, under the
/// tree lock once the forest holds the task: a task whose dependencies are
/// pending waits for them; a task created with a slot
/// ([`CreationSlot`](super::scheduler::CreationSlot); `queue` is then
/// `None`) is handed back to start in it after the lock; any other queues
/// for a slot of `queue`, saying so (and its place) in its status message.
pub(crate) fn admit(
    st: &mut TreeState,
    now: Timestamp,
    job: StartJob,
    pending: &[TaskId],
    queue: Option<&Scheduler>,
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
        let _ = st.forest.set_status_message(
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
fn queued_message(sched: &Scheduler) -> String {
    format!(
        "queued: waiting for a scheduler slot (place {} in the queue; at most {} handlers run at once)",
        sched.waiting() + 1,
        sched.max_running()
    )
}

/// A dependency of `dependent` became terminal.
fn dependency_done(st: &mut TreeState, dependent: Slot, post: &mut Post) {
    let Some(rare) = st.rt.get_mut(dependent).and_then(TaskRt::rare) else {
        return;
    };
    rare.pending_deps = rare.pending_deps.saturating_sub(1);
    if rare.pending_deps == 0
        && let Some(job) = rare.job.take()
    {
        post.submit(job, false);
    }
}
