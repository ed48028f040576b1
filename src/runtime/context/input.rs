//! [`TaskContext::request_input`]'s future, hand-written.
//!
//! As `async fn`s, the request, the key, the safe point's park, the wait
//! loop's closure, its `Notified` and the park around it each had their
//! own place in the handler's future, which a task awaiting input holds
//! for as long as it waits (minutes, for a human): 528 bytes of handler
//! future where `ctx.external` takes 144, and tokio rounds a task to 128
//! bytes. Here the request and the wait share one place (a task holds
//! the one or the other), the park and its `Notified` are held once, and
//! the check runs in a plain function ([`TaskContext::check_now`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures::future::Either;
use tokio::sync::futures::Notified;

use super::{TaskContext, TaskError};
use crate::model::JsonObject;
use crate::runtime::drain::AtSafePoint;
use crate::runtime::driver::Parked;
use crate::runtime::tree::TaskRt;

/// What a parked input wait awaits: the task's next change, or nothing
/// (a durable tree's handler stopped for a drain stays until the process
/// ends).
type Wake<'a> = Either<Notified<'a>, std::future::Pending<()>>;

pin_project_lite::pin_project! {
    #[project = StepProj]
    #[project_replace = StepReplace]
    enum Step<'a> {
        // Not polled yet: the request is still the handler's.
        Start { request: Option<JsonObject> },
        // The request is outstanding; its answer is looked for.
        Check,
        // Parked until the task changes (the answer, a cancel).
        Parked {
            #[pin]
            park: Parked<'a, Wake<'a>>,
            // A durable tree's handler is at a safe point while parked.
            at: Option<AtSafePoint<'a>>,
            // The request is outstanding (not when stopped for a drain
            // before it was made).
            armed: bool,
        },
        // Returned.
        Done,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`TaskContext::request_input`].
    pub(crate) struct InputWait<'a> {
        ctx: &'a TaskContext,
        key: Box<str>,
        // In `Check`, and `Parked` when armed, the request is
        // outstanding: dropping the wait withdraws it.
        #[pin]
        step: Step<'a>,
    }

    impl<'a> PinnedDrop for InputWait<'a> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if matches!(*this.step, Step::Check | Step::Parked { armed: true, .. }) {
                let (ctx, key) = (*this.ctx, &**this.key);
                ctx.with(|st, now, _| {
                    let _ = st.forest.withdraw_input(now, ctx.cell.id, key);
                    if let Some(rare) = st.rt.get_mut(ctx.cell.place).and_then(TaskRt::rare) {
                        rare.answers.remove(key);
                    }
                });
            }
        }
    }
}

impl<'a> InputWait<'a> {
    pub(super) fn new(ctx: &'a TaskContext, key: String, request: JsonObject) -> Self {
        InputWait {
            ctx,
            key: key.into_boxed_str(),
            step: Step::Start {
                request: Some(request),
            },
        }
    }
}

/// The answer to `key` if it arrived, `Interrupted` once the task winds
/// down, `None` while it waits (under the tree lock).
fn answer_of(
    ctx: &TaskContext,
    key: &str,
) -> impl FnMut(
    &mut crate::runtime::tree::TreeState,
    &mut crate::runtime::tree::Post,
) -> Option<Result<JsonObject, TaskError>> {
    let (id, slot) = (ctx.cell.id, ctx.cell.place);
    move |st, _| {
        let answer = st
            .rt
            .get_mut(slot)
            .and_then(TaskRt::rare)
            .and_then(|rare| rare.answers.remove(key));
        if let Some(answer) = answer {
            return Some(Ok(answer));
        }
        match st.forest.task(id) {
            Some(r) if !r.is_terminal() && !r.is_winding_down() => None,
            _ => Some(Err(TaskError::Interrupted)),
        }
    }
}

impl Future for InputWait<'_> {
    type Output = Result<JsonObject, TaskError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let ctx: &TaskContext = this.ctx;
        loop {
            match this.step.as_mut().project() {
                StepProj::Start { request } => {
                    // The safe point: while the runtime drains, a durable
                    // tree's handler stops here until the process ends.
                    if ctx.journal().is_some() && ctx.inner.drain.is_draining() {
                        let at = Some(AtSafePoint::enter(&ctx.inner));
                        let park = Parked::new(ctx, Either::Right(std::future::pending()), false);
                        this.step.set(Step::Parked {
                            park,
                            at,
                            armed: false,
                        });
                        continue;
                    }
                    if ctx.is_rerun() {
                        // Replaying after a restart: a key answered before
                        // the restart gets the same answer again.
                        let tree = ctx.tree.state.lock();
                        if let Some(answer) = tree
                            .forest
                            .task(ctx.cell.id)
                            .and_then(|r| r.inputs().answered().get(&**this.key).cloned())
                        {
                            drop(tree);
                            this.step.set(Step::Done);
                            return Poll::Ready(Ok(answer));
                        }
                    }
                    let request = request.take().expect("the request is issued once");
                    let key = this.key.to_string();
                    if let Err(e) =
                        ctx.with(|st, now, _| st.forest.request_input(now, ctx.cell.id, key, request))
                    {
                        this.step.set(Step::Done);
                        return Poll::Ready(Err(e.into()));
                    }
                    this.step.set(Step::Check);
                }
                StepProj::Check => {
                    let mut check = answer_of(ctx, this.key);
                    if let (Some(out), _) = ctx.check_now(&mut check, false) {
                        this.step.set(Step::Done);
                        return Poll::Ready(out);
                    }
                    let at = ctx.journal().is_some().then(|| AtSafePoint::enter(&ctx.inner));
                    let park = Parked::new(ctx, Either::Left(ctx.cell_ref().notify.notified()), false);
                    this.step.set(Step::Parked {
                        park,
                        at,
                        armed: true,
                    });
                    // Enabled before the check again, so a change between
                    // the check above and now is not missed.
                    if let StepProj::Parked { park, .. } = this.step.as_mut().project()
                        && let Either::Left(notified) = park.wait_mut().as_pin_mut()
                    {
                        notified.enable();
                    }
                    if let (Some(out), _) = ctx.check_now(&mut check, false) {
                        this.step.set(Step::Done);
                        return Poll::Ready(out);
                    }
                }
                StepProj::Parked { park, at, armed } => {
                    ready!(park.poll(cx));
                    if at.is_some() && ctx.inner.drain.is_draining() {
                        // Stopped for a drain: stays parked until the
                        // process ends, at its safe point.
                        let (at, armed) = (at.take(), *armed);
                        let park = Parked::new(ctx, Either::Right(std::future::pending()), false);
                        this.step.set(Step::Parked { park, at, armed });
                        continue;
                    }
                    this.step.set(Step::Check);
                }
                StepProj::Done => panic!("an input wait polled after it returned"),
            }
        }
    }
}
