//! Slot accounting: the slot a task takes as it is created, the slot a
//! handler gives back while parked and takes again, the slots given back
//! when handlers exit, and the gate that polls a handler only while it may
//! run. Every `try_acquire`, `release` and `force_acquire` of the runtime
//! is here; the per-handler state machine is `cell.rs`'s [`SlotState`].

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::model::TaskId;
use crate::runtime::cell::{Grant, Park, SlotState, TaskCell, Unpark};
use crate::runtime::context::{HandlerResult, TaskContext};
use crate::runtime::inner::Inner;
use crate::runtime::tree::{Job, StartJob};

impl Inner {
    /// `cell`'s handler enters a parked wait: its first gives its slot back.
    fn park(self: &Arc<Self>, cell: &TaskCell, root: TaskId) {
        if cell.slot(SlotState::park) == Park::ReleaseSlot {
            self.release_slots(root, 1);
        }
    }

    /// Takes a slot for `cell`'s handler. The scheduler marks the slot held
    /// as it grants it ([`Inner::run_jobs`]), so a slot granted to a handler
    /// that is dropped before it runs again is still released on exit.
    async fn acquire(self: &Arc<Self>, cell: &Arc<TaskCell>, root: TaskId) {
        if self.sched.try_acquire(root) {
            // Surplus when an earlier request, abandoned with its wait, was
            // granted meanwhile: the handler holds that one.
            if cell.slot(SlotState::grant) == Grant::Surplus {
                self.release_slots(root, 1);
            }
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let ready = self.sched.submit(root, Job::Resume(cell.clone(), tx), true);
        self.run_jobs(ready);
        // A closed channel means the runtime dropped the job; run on.
        let _ = rx.await;
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
    inner.park(cell, root);
    let _guard = BlockGuard { cell, inner, root };
    let out = fut.await;
    if cell.slot(|s| s.leaving_without_slot()) {
        inner.acquire(cell, root).await;
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
            if cell.slot(|s| s.needs_slot()) {
                let root = ctx.root_id();
                self.acquiring = Some(Box::pin(async move { inner.acquire(cell, root).await }));
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
        if self.cell.slot(SlotState::unpark) == Unpark::ForceSlot {
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
                    match cell.slot(SlotState::grant) {
                        Grant::Taken => tx.send(()).is_ok() || !cell.slot(SlotState::ungrant),
                        Grant::Surplus => {
                            // The handler already took a slot back: this one is surplus.
                            let _ = tx.send(());
                            false
                        }
                    }
                }
            };
            if !used {
                ready.extend(self.sched.release(root));
            }
        }
    }
}
