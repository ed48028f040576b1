//! The scheduler: a global limit on running handlers and a per-tree limit,
//! round-robin across trees so one huge fan-out cannot starve other callers;
//! and all slot accounting: the slot a task takes as it is created, the slot
//! a handler gives back while parked and takes again, and the slots given
//! back when handlers exit.
//!
//! One short critical section per decision; jobs are handed back to the
//! caller and run after the lock is released.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::context::{HandlerResult, TaskContext};
use super::inner::Inner;
use super::tree::{StartJob, TaskCell};
use crate::core::IdMap;
use crate::model::TaskId;

/// Work waiting for a slot.
pub(crate) enum Job {
    /// Start a queued task's handler.
    Start(StartJob),
    /// Give a slot back to a handler that was parked (awaiting input, a
    /// subtask, or resume) and wants to continue.
    Resume(Arc<TaskCell>, oneshot::Sender<()>),
}

struct TreeQueue {
    ready: VecDeque<Job>,
    running: usize,
    in_rr: bool,
}

struct SchedState {
    running: usize,
    trees: IdMap<TreeQueue>,
    rr: VecDeque<TaskId>,
}

pub(crate) struct Scheduler {
    max_running: usize,
    per_tree: usize,
    state: Mutex<SchedState>,
    /// Jobs waiting for a slot (written under `state`'s lock, read without
    /// it for a queued task's status message).
    waiting: AtomicUsize,
}

impl Scheduler {
    pub(crate) fn new(max_running: usize, per_tree: usize) -> Self {
        Scheduler {
            max_running: max_running.max(1),
            per_tree: per_tree.max(1),
            state: Mutex::new(SchedState {
                running: 0,
                trees: IdMap::default(),
                rr: VecDeque::new(),
            }),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Jobs waiting for a slot now (queued tasks and parked handlers wanting
    /// theirs back); read without the scheduler's lock.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The most handlers allowed to run at once.
    pub(crate) fn max_running(&self) -> usize {
        self.max_running
    }

    /// Takes a slot for `root` at once if nothing of that tree is waiting and
    /// both limits allow it.
    pub(crate) fn try_acquire(&self, root: TaskId) -> bool {
        let mut st = self.state.lock();
        if st.running >= self.max_running || !st.rr.is_empty() {
            return false;
        }
        let per_tree = self.per_tree;
        let q = st.trees.entry(root).or_insert_with(|| TreeQueue {
            ready: VecDeque::new(),
            running: 0,
            in_rr: false,
        });
        if !q.ready.is_empty() || q.running >= per_tree {
            return false;
        }
        q.running += 1;
        st.running += 1;
        true
    }

    /// Takes a slot for `root` even above the limits (a handler that
    /// abandoned a parked wait runs on at once; see `BlockGuard`).
    pub(crate) fn force_acquire(&self, root: TaskId) {
        let mut st = self.state.lock();
        st.running += 1;
        st.trees
            .entry(root)
            .or_insert_with(|| TreeQueue {
                ready: VecDeque::new(),
                running: 0,
                in_rr: false,
            })
            .running += 1;
    }

    /// Queues a job (at the front for resumed handlers) and returns the jobs
    /// that may run now.
    pub(crate) fn submit(&self, root: TaskId, job: Job, front: bool) -> Vec<(TaskId, Job)> {
        let mut st = self.state.lock();
        let q = st.trees.entry(root).or_insert_with(|| TreeQueue {
            ready: VecDeque::new(),
            running: 0,
            in_rr: false,
        });
        if front {
            q.ready.push_front(job);
        } else {
            q.ready.push_back(job);
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        if !q.in_rr && q.running < self.per_tree {
            q.in_rr = true;
            st.rr.push_back(root);
        }
        self.pick(&mut st)
    }

    /// Takes every queued job out, for a runtime whose executor is gone
    /// ([`Inner::shut_down`]): none of them can run any more.
    pub(crate) fn take_queued(&self) -> Vec<Job> {
        let mut st = self.state.lock();
        st.rr.clear();
        let jobs: Vec<Job> = st
            .trees
            .values_mut()
            .flat_map(|q| {
                q.in_rr = false;
                std::mem::take(&mut q.ready)
            })
            .collect();
        self.waiting.store(0, Ordering::Relaxed);
        jobs
    }

    /// Gives back a slot of `root` and returns the jobs that may run now.
    pub(crate) fn release(&self, root: TaskId) -> Vec<(TaskId, Job)> {
        self.release_n(root, 1)
    }

    /// Gives back `n` slots of `root` and returns the jobs that may run now.
    pub(crate) fn release_n(&self, root: TaskId, n: usize) -> Vec<(TaskId, Job)> {
        let mut st = self.state.lock();
        st.running = st.running.saturating_sub(n);
        let per_tree = self.per_tree;
        let mut requeue = false;
        let mut remove = false;
        if let Some(q) = st.trees.get_mut(&root) {
            q.running = q.running.saturating_sub(n);
            if !q.ready.is_empty() && !q.in_rr && q.running < per_tree {
                q.in_rr = true;
                requeue = true;
            }
            remove = q.running == 0 && q.ready.is_empty();
        }
        if requeue {
            st.rr.push_back(root);
        }
        if remove {
            st.trees.remove(&root);
        }
        self.pick(&mut st)
    }

    fn pick(&self, st: &mut SchedState) -> Vec<(TaskId, Job)> {
        let mut out = Vec::new();
        while st.running < self.max_running {
            let Some(root) = st.rr.pop_front() else { break };
            let Some(q) = st.trees.get_mut(&root) else {
                continue;
            };
            if q.running >= self.per_tree {
                q.in_rr = false;
                continue;
            }
            let Some(job) = q.ready.pop_front() else {
                q.in_rr = false;
                continue;
            };
            q.running += 1;
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            if !q.ready.is_empty() && q.running < self.per_tree {
                st.rr.push_back(root);
            } else {
                q.in_rr = false;
            }
            st.running += 1;
            out.push((root, job));
        }
        out
    }

    /// Handlers running now (for statistics and tests).
    pub(crate) fn running(&self) -> usize {
        self.state.lock().running
    }
}

// ---------------------------------------------------------------------------
// Slot accounting: who holds a slot, when it is given back. Every
// `try_acquire`, `release` and `force_acquire` of the runtime is below.
// ---------------------------------------------------------------------------

/// Whether a handler holds a scheduler slot, and how many parked waits it is in.
#[derive(Default)]
pub(crate) struct SlotState {
    holding: bool,
    blocked: u32,
}

/// Whether this handler holds a scheduler slot. A handler gives its slot
/// back while it is parked (paused, awaiting input, awaiting a subtask) and
/// takes one again before it continues.
impl TaskCell {
    /// A handler that holds its slot from its start (`Inner::start_job`).
    pub(crate) fn hold_from_start(&self) {
        self.sched_slot.lock().holding = true;
    }

    fn block(&self, inner: &Arc<Inner>, root: TaskId) {
        let release = {
            let mut st = self.sched_slot.lock();
            st.blocked += 1;
            let release = st.blocked == 1 && st.holding;
            if release {
                st.holding = false;
            }
            release
        };
        if release {
            let ready = inner.sched.release(root);
            inner.run_jobs(ready);
        }
    }

    /// Whether the last parked wait is ending without a slot (it must take
    /// one before the handler runs on; it stays counted as blocked meanwhile).
    fn last_wait_without_slot(&self) -> bool {
        let st = self.sched_slot.lock();
        st.blocked == 1 && !st.holding
    }

    /// Whether the handler may run only after taking a slot: it holds none
    /// and is not inside a parked wait (which takes one itself on the way out).
    fn needs_slot(&self) -> bool {
        let st = self.sched_slot.lock();
        st.blocked == 0 && !st.holding
    }

    /// Takes a slot. The scheduler marks the slot held when it grants it
    /// ([`TaskCell::grant`]), so a slot granted to a handler that is dropped
    /// before it runs again is still released on exit.
    async fn acquire(self: &Arc<Self>, inner: &Arc<Inner>, root: TaskId) {
        if inner.sched.try_acquire(root) {
            self.grant();
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ready = inner.sched.submit(root, Job::Resume(self.clone(), tx), true);
        inner.run_jobs(ready);
        // A closed channel means the runtime dropped the job; run on.
        let _ = rx.await;
    }

    /// Records a slot as held (called by the scheduler as it grants one);
    /// `false` when the handler already held one (the grant is surplus).
    pub(crate) fn grant(&self) -> bool {
        !std::mem::replace(&mut self.sched_slot.lock().holding, true)
    }

    /// Takes back a grant whose receiver was gone; returns whether it was held.
    pub(crate) fn ungrant(&self) -> bool {
        std::mem::replace(&mut self.sched_slot.lock().holding, false)
    }

    /// The handler exited: whether it held a slot (which the caller releases).
    pub(crate) fn take_for_exit(&self) -> bool {
        std::mem::replace(&mut self.sched_slot.lock().holding, false)
    }
}

/// Runs `fut` with the handler's scheduler slot given back: a parked wait
/// (paused, awaiting input, awaiting a subtask).
pub(crate) async fn parked<F: Future>(
    inner: &Arc<Inner>,
    cell: &Arc<TaskCell>,
    root: TaskId,
    fut: F,
) -> F::Output {
    cell.block(inner, root);
    let _guard = BlockGuard { cell, inner, root };
    let out = fut.await;
    if cell.last_wait_without_slot() {
        cell.acquire(inner, root).await;
    }
    out
}

/// Polls a handler body only while it may run: holding a slot or inside a
/// parked wait. A handler that dropped a parked wait midway (a `select!` or a
/// timeout around a context call) takes a slot again before it runs on.
pub(crate) struct Gated<'a> {
    body: BoxFuture<'static, HandlerResult>,
    ctx: &'a TaskContext,
    acquiring: Option<BoxFuture<'a, ()>>,
    /// Whether the body was polled yet (for the `subtask::handler` log).
    started: bool,
}

impl<'a> Gated<'a> {
    /// Gates `body`, the handler of the task of `ctx`.
    pub(crate) fn new(body: BoxFuture<'static, HandlerResult>, ctx: &'a TaskContext) -> Self {
        Gated {
            body,
            ctx,
            acquiring: None,
            started: false,
        }
    }
}

impl Future for Gated<'_> {
    type Output = HandlerResult;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<HandlerResult> {
        let ctx = self.ctx;
        let (cell, inner) = (ctx.cell_ref(), ctx.inner_ref());
        // Past the instance's lease the handler is frozen: another
        // instance may run it now (a cluster's fencing, `LeaseGate`).
        if let Some(gate) = inner.lease.get()
            && !gate.valid()
        {
            return std::task::Poll::Pending;
        }
        loop {
            if let Some(acq) = self.acquiring.as_mut() {
                std::task::ready!(acq.as_mut().poll(cx));
                self.acquiring = None;
            }
            if cell.needs_slot() {
                let root = ctx.root_id();
                self.acquiring = Some(Box::pin(async move { cell.acquire(inner, root).await }));
                continue;
            }
            // Logged from inside the gate, so no handler logs (or runs)
            // past a cluster instance's lease.
            if !self.started {
                self.started = true;
                tracing::debug!(target: "subtask::handler", task = %ctx.task_id(), "handler started");
            }
            let r = self.body.as_mut().poll(cx);
            if r.is_ready() {
                // A poll under way when the lease lapsed (the process was
                // stopped in the middle of it and runs again past its
                // lease): its outcome is not this instance's to report any
                // more. The handler stays frozen (it is never polled again).
                if let Some(gate) = inner.lease.get()
                    && !gate.valid()
                {
                    return std::task::Poll::Pending;
                }
                tracing::debug!(target: "subtask::handler", task = %ctx.task_id(), "handler returned");
            }
            return r;
        }
    }
}

/// Ends a parked wait, also when its future is dropped midway (a `select!`
/// or a timeout around a context call). A handler that abandons a wait
/// without its slot back takes one at once, over the limit if need be: it
/// runs on in the same poll, and a slot must never leak or be missing.
struct BlockGuard<'a> {
    cell: &'a TaskCell,
    inner: &'a Arc<Inner>,
    root: TaskId,
}

impl Drop for BlockGuard<'_> {
    fn drop(&mut self) {
        let force = {
            let mut st = self.cell.sched_slot.lock();
            st.blocked = st.blocked.saturating_sub(1);
            let force = st.blocked == 0 && !st.holding;
            if force {
                st.holding = true;
            }
            force
        };
        if force {
            self.inner.sched.force_acquire(self.root);
        }
    }
}

/// A slot taken for a task as it is created, before its job exists: given
/// back when dropped, unless the job started in it. Roots and subtasks take
/// it the same way (`Inner::creation_slot`); hold it outside any tree lock.
pub(crate) struct CreationSlot<'a> {
    inner: &'a Arc<Inner>,
    root: TaskId,
}

impl CreationSlot<'_> {
    /// Starts `job` in this slot; a job that cannot start (paused, or
    /// cancelled meanwhile) gives the slot back.
    pub(crate) fn start(self, job: StartJob) {
        if self.inner.start_job(job) {
            std::mem::forget(self);
        }
    }
}

impl Drop for CreationSlot<'_> {
    fn drop(&mut self) {
        self.inner.release_slots(self.root, 1);
    }
}

impl Inner {
    /// A slot for a new task of the tree of `root`, when one is free now and
    /// nothing of that tree waits for one.
    pub(crate) fn creation_slot(self: &Arc<Self>, root: TaskId) -> Option<CreationSlot<'_>> {
        // Built only when the slot was taken: the guard releases on drop.
        self.sched
            .try_acquire(root)
            .then(|| CreationSlot { inner: self, root })
    }

    /// Gives back `n` slots of the tree of `root` and runs what they let start.
    pub(crate) fn release_slots(self: &Arc<Self>, root: TaskId, n: usize) {
        let ready = self.sched.release_n(root, n);
        self.run_jobs(ready);
    }

    /// Queues a job for a slot and runs whatever the scheduler hands back.
    pub(crate) fn schedule(self: &Arc<Self>, job: StartJob, front: bool) {
        let root = job.tree.root;
        let ready = self.sched.submit(root, Job::Start(job), front);
        self.run_jobs(ready);
    }

    /// Runs jobs that were given a slot; a job that cannot use its slot
    /// gives it back (iteratively, never recursively).
    pub(crate) fn run_jobs(self: &Arc<Self>, mut ready: Vec<(TaskId, Job)>) {
        while let Some((root, job)) = ready.pop() {
            let used = match job {
                Job::Start(job) => self.start_job(job),
                Job::Resume(cell, tx) => {
                    // The grant and the ownership are one step: a handler
                    // dropped right after this still releases the slot on exit.
                    if cell.grant() {
                        tx.send(()).is_ok() || !cell.ungrant()
                    } else {
                        // The handler already took a slot back: this one is surplus.
                        let _ = tx.send(());
                        false
                    }
                }
            };
            if !used {
                ready.extend(self.sched.release(root));
            }
        }
    }
}
