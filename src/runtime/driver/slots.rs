//! Slot accounting: the slot a task takes as it is created, the slot a
//! handler gives back while parked and takes again ([`Parked`]), the slots
//! given back when handlers exit. Every `try_acquire`, `release` and
//! `force_acquire` of the runtime is here; the per-handler state machine is
//! `cell.rs`'s [`SlotState`], and the gate that polls a handler only while
//! it may run is its supervisor's (`supervisor.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::sync::oneshot;

use crate::model::TaskId;
use crate::runtime::cell::{Grant, Park, SlotState, TaskCell, Unpark};
use crate::runtime::context::TaskContext;
use crate::runtime::inner::Inner;
use crate::runtime::tree::{Job, StartJob};

impl Inner {
    /// `cell`'s handler enters a parked wait: its first gives its slot back.
    fn park(self: &Arc<Self>, cell: &TaskCell, root: TaskId) {
        if cell.slot(SlotState::park) == Park::ReleaseSlot {
            self.release_slots(root, 1);
        }
    }

    /// Takes a slot for `cell`'s handler: a free one now (`None`), or
    /// queues a request for one and returns the receiver of its grant. The
    /// scheduler marks the slot held as it grants it ([`Inner::run_jobs`]),
    /// so a slot granted to a handler that is dropped before it runs again
    /// is still released on exit.
    pub(crate) fn acquire_now(
        self: &Arc<Self>,
        cell: &Arc<TaskCell>,
        root: TaskId,
    ) -> Option<oneshot::Receiver<()>> {
        if self.sched.try_acquire(root) {
            // Surplus when an earlier request, abandoned with its wait, was
            // granted meanwhile: the handler holds that one.
            if cell.slot(SlotState::grant) == Grant::Surplus {
                self.release_slots(root, 1);
            }
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let ready = self.sched.submit(root, Job::Resume(cell.clone(), tx), true);
        self.run_jobs(ready);
        Some(rx)
    }

    /// Leaves a parked wait, also one dropped midway (a `select!` or a
    /// timeout around a context call). A handler that abandons a wait
    /// without its slot back takes one at once, over the limit if need be:
    /// it runs on in the same poll, and a slot must never leak or be missing.
    fn unpark(&self, cell: &TaskCell, root: TaskId) {
        if cell.slot(SlotState::unpark) == Unpark::ForceSlot {
            self.sched.force_acquire(root);
        }
    }
}

/// Where a [`Parked`] wait is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Not polled yet: the slot is still held.
    Start,
    /// The slot was given back; the wait runs.
    Waiting,
    /// The wait ended; a slot is being taken back.
    Acquiring,
    /// Returned (or never started): nothing to undo.
    Done,
}

pin_project_lite::pin_project! {
    /// Runs `fut` with the handler's scheduler slot given back: a parked
    /// wait (paused, awaiting input, a subtask or something outside the
    /// runtime), and takes a slot again before returning.
    ///
    /// Hand-written rather than an `async fn`: it holds `fut` once (an
    /// `async fn` keeps its argument apart from the future it awaits, and
    /// each async layer above did so again) and its slot request in one
    /// pointer, so a parked handler's future stays small.
    pub(crate) struct Parked<'a, F: Future> {
        // The handler's context: its runtime, cell and tree (one pointer,
        // not three: a parked wait is part of a parked handler's future).
        ctx: &'a TaskContext,
        #[pin]
        fut: F,
        // The wait's output while a slot is being taken back.
        out: Option<F::Output>,
        // The grant of a slot request queued when none was free (boxed:
        // the slow path only, and 8 bytes inline rather than 16).
        granted: Option<Box<oneshot::Receiver<()>>>,
        step: Step,
        // Counted in the gauge of handlers in `ctx.external` while parked.
        external: bool,
    }

    impl<'a, F: Future> PinnedDrop for Parked<'a, F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if matches!(*this.step, Step::Waiting | Step::Acquiring) {
                let ctx = *this.ctx;
                ctx.inner_ref().unpark(ctx.cell_ref(), ctx.root_id());
                if *this.external {
                    ctx.inner_ref().stats.external_left();
                }
            }
        }
    }
}

impl<'a, F: Future> Parked<'a, F> {
    /// A parked wait on `fut` for `ctx`'s handler; `external`: counted as
    /// a wait in `ctx.external`.
    pub(crate) fn new(ctx: &'a TaskContext, fut: F, external: bool) -> Self {
        Parked {
            ctx,
            fut,
            out: None,
            granted: None,
            step: Step::Start,
            external,
        }
    }
}

impl<F: Future> Parked<'_, F> {
    /// The awaited future, pinned (to prepare it before the first poll).
    pub(crate) fn wait_mut(self: Pin<&mut Self>) -> Pin<&mut F> {
        self.project().fut
    }
}

impl<F: Future> Future for Parked<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let ctx = *this.ctx;
        let (inner, cell, root) = (ctx.inner_ref(), ctx.cell_ref(), ctx.root_id());
        loop {
            match *this.step {
                Step::Start => {
                    if *this.external {
                        inner.stats.external_entered();
                    }
                    inner.park(cell, root);
                    *this.step = Step::Waiting;
                }
                Step::Waiting => {
                    let out = ready!(this.fut.as_mut().poll(cx));
                    if cell.slot(|s| s.leaving_without_slot())
                        && let Some(granted) = inner.acquire_now(cell, root)
                    {
                        *this.out = Some(out);
                        *this.granted = Some(Box::new(granted));
                        *this.step = Step::Acquiring;
                        continue;
                    }
                    *this.step = Step::Done;
                    inner.unpark(cell, root);
                    if *this.external {
                        inner.stats.external_left();
                    }
                    return Poll::Ready(out);
                }
                Step::Acquiring => {
                    let granted = this
                        .granted
                        .as_mut()
                        .expect("a request is queued while acquiring");
                    // A closed channel means the runtime dropped the job; run on.
                    let _ = ready!(Pin::new(&mut **granted).poll(cx));
                    *this.granted = None;
                    *this.step = Step::Done;
                    inner.unpark(cell, root);
                    if *this.external {
                        inner.stats.external_left();
                    }
                    return Poll::Ready(this.out.take().expect("the output is kept while acquiring"));
                }
                Step::Done => panic!("a parked wait polled after it returned"),
            }
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
