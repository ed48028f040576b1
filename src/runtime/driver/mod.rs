//! The driver: everything that moves a runtime's trees. A command runs
//! under its tree's lock ([`Inner::with_tree`]); the core's effects it
//! leaves are absorbed there into store writes, counts and a [`Post`] list
//! that runs after the lock is released (wake-ups, index updates, timers,
//! scheduling). Handlers start here ([`Inner::start_job`]) and their exits
//! are applied here ([`Inner::exit`]); slots are accounted in `slots.rs`
//! and timers fire in `timers.rs`.
//!
//! # Lock order
//!
//! Every lock of the runtime, and which may be taken while another is held
//! (an arrow reads "held while taking"; no other nesting exists):
//!
//! * tree lock (`TreeCell::state`; never two trees' at once) → a handler's
//!   journal cursor (`durable::Cursor`, in the closure of a command);
//! * tree lock → a task cell's slot state (`TaskCell::slot`, as a handler
//!   starts in its slot);
//! * tree lock → the store's submit queue (`TaskStore::submit` in
//!   [`Inner::absorb`]: a tree's batches reach the store in command order);
//! * tree lock → an owner's tree list (`Owner`, as a deleted tree leaves it).
//!
//! Each of these is only ever taken alone, with no other runtime lock held:
//! a tree's exit queue (`TreeCell::exits`), the scheduler's, the timer
//! queue's, an index shard's, the tool registry's (`Stats`), and the four
//! above when not under a tree lock. In particular the tree lock is never
//! held while taking the scheduler's, the timer queue's or an index
//! shard's: that work is queued in a [`Post`] and done after unlock. A task
//! cell's slot state takes nothing under it: its transitions return what to
//! do (`cell::Park`, `cell::Unpark`, `cell::Grant`), done after its mutex
//! is released. No lock is held across an `.await`; the drain's state and
//! the counters are atomics.

mod release;
mod slots;
mod timers;

use std::sync::Arc;

use parking_lot::Mutex;

use super::cell::SlotState;
use super::context::{DependencyOutcome, Started, TaskContext};
use super::inner::Inner;
use super::stats::{StatsDelta, ToolStats};
use super::tree::{Exit, Post, StartJob, TreeCell, TreeState, dependency_done};
use crate::core::{Effect, HandlerOutcome, Slot, TaskRecord, TransitionError};
use crate::model::{TaskId, Timestamp};
use crate::store::{WriteBatch, WriteOp};

pub(crate) use slots::Parked;
pub(crate) use timers::timer_driver;

/// Exits applied by one drainer before it hands the rest to a fresh tokio
/// task, so a worker is not held by a long stream of exits.
const DRAIN_BUDGET: usize = 4096;

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
            if persist {
                let op = match (&effect, post.release) {
                    // The tree leaves memory, not the store: marked so
                    // now, unless it was as it ended (`WriteOp::Ended`).
                    (Effect::TreeDeleted { root, .. }, Some(delete_at)) => {
                        (!self.marks_ended()).then_some(WriteOp::Release {
                            root: *root,
                            delete_at,
                        })
                    }
                    _ => super::persist::write_for_effect(&st.forest, &effect),
                };
                // A root that ends is marked as let go in the same batch,
                // just before its terminal state, on a store that asks
                // (`driver/release.rs`).
                if let Effect::Changed { slot, to, .. } = &effect
                    && to.is_terminal()
                    && let Some(rec) = st.forest.task_at(*slot)
                    && rec.parent().is_none()
                    && self.marks_ended()
                {
                    ops.push(WriteOp::Ended {
                        root: rec.id(),
                        delete_at: st.forest.next_deadline().map(|t| t.as_millis()),
                    });
                }
                ops.extend(op);
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
                        if st.forest.task_at(slot).is_some_and(|r| r.parent().is_none()) {
                            post.root_finished = true;
                        }
                        if let Some(mut rt) = st.rt.remove(slot) {
                            if let Some(rec) = st.forest.task_at(slot) {
                                // A started task's span is in its cell; one
                                // that never started has it in its job.
                                let cell_span = rt.cell.as_ref().and_then(|c| c.span());
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
            tree.notify_changed();
        }
        if let Some(at) = post.arm {
            self.timers.arm(at, tree.root);
        }
        if post.root_finished
            && let Some(grace) = self.release_grace()
        {
            self.timers.arm(self.now().saturating_add(grace), tree.root);
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
                if let Some(rec) = st.forest.task_at(cell.place) {
                    let ran = now.millis_since(rec.handler_started_at());
                    counts.handler_ran(std::time::Duration::from_millis(ran));
                }
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
        let held = cells.iter().filter(|c| c.slot(SlotState::exit)).count();
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
                        .and_then(TaskRecord::outcome)
                        .map(|outcome| DependencyOutcome { id: *d, outcome })
                })
                .collect();
            // The handler's cell exists from its start: its cancel flag is
            // then always current, and it starts holding its slot.
            let cell = st.notify_at(slot).expect("a started task is live");
            cell.slot(SlotState::start);
            st.forest.handler_started(slot, now);
            // The supervisor enters the span from the cell.
            cell.set_span(job.span);
            let journal = tree.journaled.then(|| {
                let cursor = if rerun {
                    super::durable::Cursor::replay(st.forest.replay_of(id))
                } else {
                    super::durable::Cursor::default()
                };
                Arc::new(Mutex::new(cursor))
            });
            Some((job.body, deps, cell, journal))
        });
        let Some((body, deps, cell, journal)) = started else {
            return false;
        };
        if journal.is_some() {
            tracing::debug!(target: super::durable::JOURNAL_TARGET, task = %id, rerun, "handler starts");
        }
        let start = Started {
            cell,
            deps,
            rerun,
            journal,
        };
        body.launch(TaskContext::new(self.clone(), tree, start));
        true
    }
}
