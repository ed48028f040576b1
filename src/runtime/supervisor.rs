//! A handler's body until it starts ([`Launcher`]), and what runs it once
//! started ([`Supervisor`]): the handler's future, gated on its scheduler
//! slot, with panics caught and a grace timer for a handler that ignores
//! its cancel, turned into the task's exit.
//!
//! The supervisor is one tokio task that holds the handler's future inline
//! (monomorphized per handler type at spawn), not a boxed future inside a
//! second allocation: a parked task is one allocation for its handler, and
//! the handler's future is held once. It enters the task's span from the
//! task's cell rather than keeping a copy of the span.
//!
//! Nothing here takes a tree lock itself: the exit goes through
//! `Inner::exit`, slots through `Inner::acquire_now` (`driver/slots.rs`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::sync::oneshot;

use super::context::{HandlerBody, HandlerResult, TaskContext};
use super::tree::Exit;
use crate::core::HandlerOutcome;
use crate::model::{ErrorCode, ErrorObject};

/// A handler's body, waiting to start: [`Launcher::launch`] makes its
/// future and spawns its supervisor.
pub(crate) enum Launcher {
    /// A typed body: its future is held inline by its supervisor.
    Typed(Box<dyn Launch>),
    /// A boxed body (the server's tools): its future stays boxed, and the
    /// body needs no second box to start.
    Boxed(HandlerBody),
}

impl Launcher {
    /// Makes the handler's future for `ctx` and spawns its supervisor.
    pub(crate) fn launch(self, ctx: TaskContext) {
        match self {
            Launcher::Typed(body) => body.launch(ctx),
            Launcher::Boxed(body) => start(body, ctx),
        }
    }
}

/// A handler body that starts its own supervisor.
pub(crate) trait Launch: Send + 'static {
    /// Makes the handler's future for `ctx` and spawns it as a tokio task.
    /// A body that panics before returning its future fails the task as a
    /// handler's panic does.
    fn launch(self: Box<Self>, ctx: TaskContext);
}

/// A typed handler body: its future is held inline by its supervisor.
struct Typed<F>(F);

impl<F, Fut> Launch for Typed<F>
where
    F: FnOnce(TaskContext) -> Fut + Send + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn launch(self: Box<Self>, ctx: TaskContext) {
        start(self.0, ctx);
    }
}

/// Makes the future of body `f` for `ctx` (in the task's span) and spawns
/// its supervisor; a body that panics before returning its future fails
/// the task as a handler's panic does.
fn start<F, Fut>(f: F, ctx: TaskContext)
where
    F: FnOnce(TaskContext) -> Fut,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    let made = {
        let _entered = ctx.cell_ref().span().map(tracing::Span::enter);
        std::panic::catch_unwind(AssertUnwindSafe(|| f(ctx.clone())))
    };
    match made {
        Ok(body) => drop(tokio::spawn(Supervisor::new(ctx, body))),
        Err(panic) => {
            let error = panicked(&*panic);
            drop(tokio::spawn(Supervisor::new(ctx, std::future::ready(Err(error)))));
        }
    }
}

/// The launcher of a typed body `f`.
pub(crate) fn typed<F, Fut>(f: F) -> Launcher
where
    F: FnOnce(TaskContext) -> Fut + Send + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    Launcher::Typed(Box::new(Typed(f)))
}

/// The launcher of a boxed body (its future stays boxed).
pub(crate) fn boxed(body: HandlerBody) -> Launcher {
    Launcher::Boxed(body)
}

/// The error of a handler that panicked, logged.
fn panicked(panic: &(dyn std::any::Any + Send)) -> ErrorObject {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned());
    tracing::error!(panic = %what, "handler panicked");
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, format!("handler panicked: {what}"))
}

/// What a supervisor keeps of its handler's context: its three pointers
/// and whether it is a re-run (not what only the handler uses: its
/// dependencies, its journal cursor).
struct Handle {
    inner: std::sync::Arc<super::inner::Inner>,
    tree: std::sync::Arc<super::tree::TreeCell>,
    cell: std::sync::Arc<super::cell::TaskCell>,
    rerun: bool,
}

impl Handle {
    fn of(ctx: TaskContext) -> Handle {
        Handle {
            rerun: ctx.is_rerun(),
            cell: ctx.cell,
            tree: ctx.tree,
            inner: ctx.inner,
        }
    }

    fn cell_ref(&self) -> &std::sync::Arc<super::cell::TaskCell> {
        &self.cell
    }

    fn inner_ref(&self) -> &std::sync::Arc<super::inner::Inner> {
        &self.inner
    }

    fn root_id(&self) -> crate::model::TaskId {
        self.tree.root
    }

    fn task_id(&self) -> crate::model::TaskId {
        self.cell.id
    }
}

pin_project_lite::pin_project! {
    /// Runs a handler's future `B`: polls it only while it may run (holding
    /// a slot or inside a parked wait; a handler that dropped a parked wait
    /// midway takes a slot again before it runs on), catches its panic,
    /// aborts it once it ignored its cancel past the grace period, and
    /// queues the task's exit.
    pub(crate) struct Supervisor<B> {
        ctx: Handle,
        // `None` once the handler's future ended or was aborted (dropped
        // before the task settles).
        #[pin]
        body: Option<B>,
        // The grant of a slot being taken back for the handler (slow path
        // only; boxed: 8 bytes inline).
        acquiring: Option<Box<oneshot::Receiver<()>>>,
        // The grace timer, once the task winds down (boxed: most handlers
        // never have one).
        grace: Option<Pin<Box<tokio::time::Sleep>>>,
        // Whether the body was polled yet (for the `subtask::handler` log).
        started: bool,
        // Counted in the handler gauge (until it exits or is dropped).
        counted: bool,
        // A durable tree's handler: a drain waits for it.
        durable: bool,
    }

    impl<B> PinnedDrop for Supervisor<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.counted {
                this.ctx.inner.stats.handler_stopped();
            }
        }
    }
}

impl<B: Future<Output = HandlerResult>> Supervisor<B> {
    /// Supervises `body`, the handler of `ctx`'s task (counted as running
    /// from now on).
    pub(crate) fn new(ctx: TaskContext, body: B) -> Self {
        ctx.inner.stats.handler_running();
        // A drain waits for the handlers of durable trees (the others
        // cannot resume: they are not stopped, nor waited for).
        let durable = ctx.journal().is_some();
        if durable {
            ctx.inner.drain.handler_started();
        }
        Supervisor {
            ctx: Handle::of(ctx),
            body: Some(body),
            acquiring: None,
            grace: None,
            started: false,
            counted: true,
            durable,
        }
    }
}

/// Polls the gated body once (see [`Supervisor`]).
fn poll_gated<B: Future<Output = HandlerResult>>(
    ctx: &Handle,
    mut body: Pin<&mut B>,
    acquiring: &mut Option<Box<oneshot::Receiver<()>>>,
    started: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<HandlerResult> {
    let (cell, inner) = (ctx.cell_ref(), ctx.inner_ref());
    // Past the instance's lease the handler is frozen: another instance
    // may run it now (a cluster's fencing, `LeaseGate`).
    if let Some(gate) = inner.lease.get()
        && !gate.valid()
    {
        return Poll::Pending;
    }
    loop {
        if let Some(granted) = acquiring.as_mut() {
            // A closed channel means the runtime dropped the job; run on.
            let _ = ready!(Pin::new(&mut **granted).poll(cx));
            *acquiring = None;
        }
        if cell.slot(|s| s.needs_slot()) {
            // A slot free now is taken at once; otherwise its grant is awaited.
            *acquiring = inner.acquire_now(cell, ctx.root_id()).map(Box::new);
            continue;
        }
        // Logged from inside the gate, so no handler logs (or runs) past a
        // cluster instance's lease.
        if !*started {
            *started = true;
            tracing::debug!(target: "subtask::handler", task = %ctx.task_id(), "handler started");
        }
        let r = body.as_mut().poll(cx);
        if r.is_ready() {
            // A poll under way when the lease lapsed (the process was
            // stopped in the middle of it and runs again past its lease):
            // its outcome is not this instance's to report any more. The
            // handler stays frozen (it is never polled again).
            if let Some(gate) = inner.lease.get()
                && !gate.valid()
            {
                return Poll::Pending;
            }
            tracing::debug!(target: "subtask::handler", task = %ctx.task_id(), "handler returned");
        }
        return r;
    }
}

impl<B: Future<Output = HandlerResult>> Future for Supervisor<B> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        let ctx: &Handle = this.ctx;
        let _entered = ctx.cell_ref().span().map(tracing::Span::enter);
        let outcome = 'outcome: {
            // The handler first: one that returns as soon as it sees its
            // cancel never arms the grace timer.
            if let Some(body) = this.body.as_mut().as_pin_mut() {
                let (acquiring, started) = (&mut *this.acquiring, &mut *this.started);
                let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    poll_gated(ctx, body, acquiring, started, cx)
                }));
                match polled {
                    Ok(Poll::Ready(Ok(result))) => break 'outcome HandlerOutcome::Returned(result),
                    Ok(Poll::Ready(Err(error))) => break 'outcome HandlerOutcome::Errored(error),
                    Err(panic) => break 'outcome HandlerOutcome::Errored(panicked(&*panic)),
                    Ok(Poll::Pending) => {}
                }
            }
            // The grace period starts once the cancel flag is set (woken
            // through the cell's `grace` waker); the grace is read then.
            let cell = ctx.cell_ref();
            if this.grace.is_none() {
                cell.grace.register(cx.waker());
                if !cell.is_ending() {
                    return Poll::Pending;
                }
                *this.grace = Some(Box::pin(tokio::time::sleep(ctx.inner.config.cancel_grace)));
            }
            let grace = this.grace.as_mut().expect("armed above");
            ready!(grace.as_mut().poll(cx));
            let ms = ctx.inner.config.cancel_grace.as_millis() as u64;
            tracing::warn!(grace_ms = ms, "handler ignored cancel; aborted");
            HandlerOutcome::Aborted
        };
        // The handler's future is dropped (its guards run) before the task
        // settles.
        this.body.set(None);
        *this.acquiring = None;
        *this.grace = None;
        *this.counted = false;
        ctx.inner.stats.handler_stopped();
        if *this.durable {
            ctx.inner.drain.handler_exited();
        }
        // The task settles (in a batch with other exits of its tree) before
        // its slot lets queued work run.
        let exit = Exit {
            id: ctx.cell.id,
            slot: ctx.cell.place,
            outcome,
            cell: ctx.cell_ref().clone(),
            rerun: ctx.rerun,
        };
        ctx.inner.exit(&ctx.tree, exit);
        Poll::Ready(())
    }
}
