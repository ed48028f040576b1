//! The handler's view of its task: subtasks, input, steering, pause, cancel.

use std::future::{Future, IntoFuture};
use std::sync::Arc;

use futures::Stream;
use futures::future::BoxFuture;

mod input;

use super::cell::TaskCell;
use super::driver::Parked;
use super::durable::JournalCursor;
use super::error::{Interrupted, RuntimeError};
use super::inner::Inner;
use super::supervisor::Launcher;
use super::tree::{Post, StartJob, TreeCell, TreeState};
use crate::core::{ChildOptions, SafePoint, TaskRecord, TransitionError};
use crate::model::{ErrorObject, JsonObject, TaskId, TaskOutcome};

/// What a handler returns: a result (e.g. a `CallToolResult`, also with
/// `isError: true`), or a JSON-RPC error that fails the task.
pub type HandlerResult = Result<JsonObject, ErrorObject>;

/// The body of a handler, boxed until it starts.
pub type HandlerBody = Box<dyn FnOnce(TaskContext) -> BoxFuture<'static, HandlerResult> + Send>;

/// The outcome of a dependency named in [`SubtaskOptions::after`], handed to
/// the dependent subtask when it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyOutcome {
    /// The dependency.
    pub id: TaskId,
    /// How it ended.
    pub outcome: TaskOutcome,
}

/// Options of a subtask.
#[derive(Debug, Clone, Default)]
pub struct SubtaskOptions {
    /// TTL in milliseconds, clamped to the parent's expiry (I8).
    pub ttl_ms: Option<u64>,
    /// Suggested poll interval; inherited when unset.
    pub poll_interval_ms: Option<u64>,
    /// Fail-fast: if this subtask fails, its siblings are cancelled and the
    /// parent fails. Default is supervise: the parent sees the outcome.
    pub fail_fast: bool,
    /// Earlier siblings that must be terminal before this subtask starts;
    /// their outcomes are in [`TaskContext::dependencies`].
    pub after: Vec<TaskId>,
    /// What the subtask is, for a durable tree's journal: a re-run that
    /// spawns something else at this place fails with a divergence error.
    pub name: Option<String>,
    /// The digest of the subtask's arguments, checked like `name`.
    pub args: Option<String>,
}

impl SubtaskOptions {
    /// Starts only after these sibling subtasks are terminal.
    #[must_use]
    pub fn after(mut self, handles: &[&SubtaskHandle]) -> Self {
        self.after.extend(handles.iter().map(|h| h.id));
        self
    }

    /// Names the subtask (a durable tree's journal checks it on a re-run).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The subtask's arguments, checked by digest on a re-run (they are not
    /// stored): a re-run that spawns it with other arguments diverges.
    #[must_use]
    pub fn args(mut self, args: &impl serde::Serialize) -> Self {
        let value = serde_json::to_value(args).unwrap_or(serde_json::Value::Null);
        self.args = Some(super::durable::digest(&value));
        self
    }

    /// Fail-fast instead of supervise.
    #[must_use]
    pub fn fail_fast(mut self) -> Self {
        self.fail_fast = true;
        self
    }

    /// Sets the TTL.
    #[must_use]
    pub fn ttl_ms(mut self, ttl: u64) -> Self {
        self.ttl_ms = Some(ttl);
        self
    }
}

/// Why a context call did not return normally.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskError {
    /// The task is being cancelled (or failed): stop and return.
    Interrupted,
    /// The runtime rejected the call (a limit, a duplicate input key...).
    Rejected(RuntimeError),
    /// A re-run did something else than its first run at this place (see
    /// [`TaskContext::step`]): the task is failing with this error.
    Diverged(ErrorObject),
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskError::Interrupted => Interrupted.fmt(f),
            TaskError::Rejected(e) => e.fmt(f),
            TaskError::Diverged(e) => f.write_str(&e.message),
        }
    }
}

impl std::error::Error for TaskError {}

impl From<TaskError> for ErrorObject {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::Interrupted => Interrupted.into(),
            TaskError::Rejected(e) => e.into(),
            TaskError::Diverged(e) => e,
        }
    }
}

impl From<TransitionError> for TaskError {
    fn from(e: TransitionError) -> Self {
        match e {
            TransitionError::WindingDown(_)
            | TransitionError::Terminal { .. }
            | TransitionError::UnknownTask(_) => TaskError::Interrupted,
            other => TaskError::Rejected(other.into()),
        }
    }
}

/// What a handler starts with (from `Inner::start_job`).
pub(crate) struct Started {
    /// The task's cell (its id and slot are read there).
    pub(crate) cell: Arc<TaskCell>,
    pub(crate) deps: Vec<DependencyOutcome>,
    pub(crate) rerun: bool,
    /// Its journal cursor, in a durable tree.
    pub(crate) journal: Option<JournalCursor>,
}

/// The handler's view of its task. Cheap to clone.
///
/// Every waiting method is cancellation safe: dropping its future leaves the
/// task consistent (an input request whose future is dropped is withdrawn).
#[derive(Clone)]
pub struct TaskContext {
    pub(super) inner: Arc<Inner>,
    pub(super) tree: Arc<TreeCell>,
    /// The task's cell: its id and slot, its cancel flag, wake-ups,
    /// scheduler slot and parent.
    pub(super) cell: Arc<TaskCell>,
    /// What few handlers have (dependencies, a re-run, a journal), behind
    /// one thin pointer: a context is in every handler's future (and each
    /// subtask handle's), and 32 bytes here keep a parked handler's tokio
    /// task in tokio's 256-byte step.
    extra: Option<Arc<Extra>>,
}

/// The rarely set part of a [`TaskContext`].
struct Extra {
    deps: Vec<DependencyOutcome>,
    rerun: bool,
    /// Where the handler is in its journal (a durable tree only).
    journal: Option<JournalCursor>,
}

impl std::fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskContext")
            .field("task_id", &self.cell.id)
            .field("parent", &self.parent_task_id())
            .finish()
    }
}

impl TaskContext {
    pub(crate) fn new(inner: Arc<Inner>, tree: Arc<TreeCell>, start: Started) -> Self {
        // No allocation for the common case: no dependencies, a first run,
        // no journal.
        let extra = (!start.deps.is_empty() || start.rerun || start.journal.is_some()).then(|| {
            Arc::new(Extra {
                deps: start.deps,
                rerun: start.rerun,
                journal: start.journal,
            })
        });
        TaskContext {
            inner,
            tree,
            cell: start.cell,
            extra,
        }
    }

    /// Whether this handler runs again after a restart or a takeover (a
    /// durable tree's re-run: its journal is replayed; `docs/durability.md`).
    pub fn is_rerun(&self) -> bool {
        self.extra.as_ref().is_some_and(|e| e.rerun)
    }

    /// This task's id.
    pub fn task_id(&self) -> TaskId {
        self.cell.id
    }

    /// The parent task, `None` for a root.
    pub fn parent_task_id(&self) -> Option<TaskId> {
        self.cell.parent_of(self.cell.id)
    }

    /// The root of this task's tree.
    pub fn root_task_id(&self) -> TaskId {
        self.tree.root
    }

    /// Outcomes of the dependencies named in [`SubtaskOptions::after`], in that order.
    pub fn dependencies(&self) -> &[DependencyOutcome] {
        self.extra.as_deref().map_or(&[], |e| e.deps.as_slice())
    }

    /// Where the handler is in its journal (a durable tree only).
    pub(super) fn journal(&self) -> Option<&JournalCursor> {
        self.extra.as_deref().and_then(|e| e.journal.as_ref())
    }

    fn with<R>(&self, f: impl FnOnce(&mut TreeState, crate::model::Timestamp, &mut Post) -> R) -> R {
        self.inner.with_tree(&self.tree, f)
    }

    /// Runs `fut` with this handler's scheduler slot given back.
    fn parked<F: Future>(&self, fut: F) -> Parked<'_, F> {
        Parked::new(self, fut, false)
    }

    /// A wait at a safe point (parked, and not busy for a drain). While
    /// the runtime drains, a handler of a durable tree does not run on
    /// after it: it stays here until the process ends.
    fn safe_wait<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        if self.journal().is_none() {
            return futures::future::Either::Left(self.parked(fut));
        }
        futures::future::Either::Right(async move {
            let at = super::drain::AtSafePoint::enter(&self.inner);
            let out = self.parked(fut).await;
            if self.inner.drain.is_draining() {
                self.parked(std::future::pending::<()>()).await;
            }
            drop(at);
            out
        })
    }

    /// A safe point: while the runtime drains, a handler of a durable tree
    /// stops here (its slot given back) until the process ends; it resumes
    /// from its journal on the next start.
    pub(crate) async fn safe_point(&self) {
        if self.journal().is_some() && self.inner.drain.is_draining() {
            let _at = super::drain::AtSafePoint::enter(&self.inner);
            self.parked(std::future::pending::<()>()).await;
        }
    }

    /// Awaits `fut`, a wait on something outside the runtime (an LLM or
    /// HTTP call, a database query, a sleep), with this handler's scheduler
    /// slot given back meanwhile, and takes a slot again before returning.
    ///
    /// A handler holds one of the runtime's
    /// [`max_running`](super::RuntimeConfig::max_running) slots while it
    /// runs; a handler that spends minutes awaiting a remote answer while
    /// holding its slot keeps new tasks queued behind it. Wrap such waits:
    ///
    /// ```no_run
    /// # async fn llm(_: &str) -> String { String::new() }
    /// # async fn handler(ctx: subtask::runtime::TaskContext) {
    /// let answer = ctx.external(llm("summarise the sources")).await;
    /// # }
    /// ```
    ///
    /// Only the wait is outside the limit: CPU-heavy work belongs outside
    /// this call (or on `spawn_blocking`). The task stays `working`; pause,
    /// steer and cancel reach it at its next [`checkpoint`](Self::checkpoint)
    /// as usual.
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop and to use in `select!` (with [`cancelled`](Self::cancelled),
    /// say): a dropped wait takes the slot back at once.
    pub fn external<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        // A hand-written future that holds `fut` once (`driver/slots.rs`):
        // a model call's future may be kilobytes.
        Parked::new(self, fut, true)
    }

    /// Sets the status message clients see while the task runs.
    pub fn set_status_message(&self, message: impl Into<String>) {
        let message = message.into();
        self.with(|st, now, _| {
            let _ = st.forest.set_status_message(now, self.cell.id, Some(message));
        });
    }

    /// Clears the status message (a completed task then shows none).
    pub fn clear_status_message(&self) {
        self.with(|st, now, _| {
            let _ = st.forest.set_status_message(now, self.cell.id, None);
        });
    }

    /// Whether a cancel was accepted (or a failure decided) for this task,
    /// or it ended. Takes no lock.
    pub fn is_cancelled(&self) -> bool {
        self.cell.is_ending()
    }

    /// Resolves once the task is being cancelled (or failed by its TTL or a
    /// fail-fast sibling). Takes no lock.
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop and to use in `select!`.
    pub async fn cancelled(&self) {
        let cell = &self.cell;
        loop {
            let notified = cell.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cell.is_ending() {
                return;
            }
            notified.await;
        }
    }

    /// Waits on this task's notifier after `check` (run under the tree lock)
    /// returns `None`; returns `check`'s value once it is `Some`.
    async fn wait_until<R>(
        &self,
        park: bool,
        mut check: impl FnMut(&mut TreeState, &mut Post) -> Option<R>,
    ) -> R {
        loop {
            let (ready, notify) = self.check_now(&mut check, true);
            if let Some(r) = ready {
                return r;
            }
            let Some(notify) = notify else { continue };
            let notified = notify.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // Re-check after enabling so a change between unlock and enable is not missed.
            if let (Some(r), _) = self.check_now(&mut check, false) {
                return r;
            }
            if park {
                self.safe_wait(notified).await;
            } else {
                notified.await;
            }
        }
    }

    /// Runs `check` under the tree lock, its effects absorbed and followed
    /// up after the lock; with `notify`, when it returns `None`, also the
    /// task's cell to wait on. A plain function, so the [`Post`] (a few
    /// hundred bytes) is never part of a waiting handler's future.
    fn check_now<R>(
        &self,
        check: &mut impl FnMut(&mut TreeState, &mut Post) -> Option<R>,
        notify: bool,
    ) -> (Option<R>, Option<Arc<TaskCell>>) {
        let mut post = Post::default();
        let (r, cell) = {
            let mut st = self.tree.state.lock();
            let r = check(&mut st, &mut post);
            let cell = if r.is_none() && notify {
                st.notify_at(self.cell.place)
            } else {
                None
            };
            self.inner
                .absorb(self.inner.tool_of(&self.tree), &mut st, &mut post);
            (r, cell)
        };
        self.inner.run_post(&self.tree, post);
        (r, cell)
    }

    /// The safe point. Returns the steer messages queued since the last
    /// one, oldest first, each exactly once (I10); parks while the task is
    /// paused (giving its scheduler slot back); returns
    /// [`TaskError::Interrupted`] once a cancel is requested.
    ///
    /// # Errors
    ///
    /// `Interrupted` when the task is being cancelled or failed.
    ///
    /// # Cancellation safety
    ///
    /// Safe: steers are only taken when the call returns them.
    pub async fn checkpoint(&self) -> Result<Vec<String>, TaskError> {
        self.safe_point().await;
        let id = self.cell.id;
        let now = || self.inner.now();
        let Some(journal) = self.journal() else {
            return self
                .wait_until(true, |st, _| match st.forest.reach_safe_point(now(), id) {
                    Ok(SafePoint::Continue(steers)) => Some(Ok(steers)),
                    Ok(SafePoint::Stop) => Some(Err(TaskError::Interrupted)),
                    Ok(SafePoint::Park) => None,
                    Err(e) => Some(Err(e.into())),
                })
                .await;
        };
        // A re-run hands back the steers its first run took here; where the
        // first run took none (another act is recorded at this place), it
        // takes none either, until it is past what was recorded.
        let replayed = {
            let mut c = journal.lock();
            let seq = c.next;
            match c.recorded.get(&seq) {
                Some(crate::core::Recorded::Steers(_)) => {
                    c.next += 1;
                    match c.recorded.remove(&seq) {
                        Some(crate::core::Recorded::Steers(m)) => Some(m),
                        _ => unreachable!("matched above"),
                    }
                }
                Some(_) => Some(Vec::new()),
                None if c.replaying() => Some(Vec::new()),
                None => None,
            }
        };
        if let Some(steers) = replayed {
            return self
                .wait_until(true, |st, _| match st.forest.wait_point(now(), id) {
                    Ok(SafePoint::Continue(_)) => Some(Ok(steers.clone())),
                    Ok(SafePoint::Stop) => Some(Err(TaskError::Interrupted)),
                    Ok(SafePoint::Park) => None,
                    Err(e) => Some(Err(e.into())),
                })
                .await;
        }
        self.wait_until(true, |st, _| {
            let mut c = journal.lock();
            let seq = c.next;
            match st.forest.reach_safe_point_at(now(), id, Some(seq)) {
                Ok(SafePoint::Continue(steers)) => {
                    if !steers.is_empty() {
                        c.next += 1;
                    }
                    Some(Ok(steers))
                }
                Ok(SafePoint::Stop) => Some(Err(TaskError::Interrupted)),
                Ok(SafePoint::Park) => None,
                Err(e) => Some(Err(e.into())),
            }
        })
        .await
    }

    /// Parks while the task is paused (taking no steers); returns at once
    /// otherwise, also when the task winds down (the next checkpoint reports it).
    pub(crate) async fn wait_point(&self) {
        let id = self.cell.id;
        let now = || self.inner.now();
        self.wait_until(true, |st, _| match st.forest.wait_point(now(), id) {
            Ok(SafePoint::Park) => None,
            _ => Some(()),
        })
        .await;
    }

    /// Server-initiated pause (SEP-2669): the task turns `paused` now, with
    /// its live descendants, and this call parks until a client resumes it.
    /// Returns the steers queued meanwhile.
    ///
    /// # Errors
    ///
    /// `Interrupted` when cancelled while paused; `Rejected` if already paused.
    ///
    /// # Cancellation safety
    ///
    /// If dropped while parked, the task stays paused until resumed.
    pub async fn pause_self(&self, reason: impl Into<String>) -> Result<Vec<String>, TaskError> {
        let reason = reason.into();
        self.with(|st, now, _| st.forest.pause_self(now, self.cell.id, Some(reason)))?;
        self.checkpoint().await
    }

    /// Asks the client for input under `key` (the task shows
    /// `input_required`) and waits for the response delivered by
    /// `tasks/update`. Keys are unique over the task's lifetime (I9).
    ///
    /// # Errors
    ///
    /// `Rejected` for a key used before; `Interrupted` on cancel.
    ///
    /// # Cancellation safety
    ///
    /// Dropping the future withdraws the request.
    pub fn request_input(
        &self,
        key: impl Into<String>,
        request: JsonObject,
    ) -> impl Future<Output = Result<JsonObject, TaskError>> + Send + '_ {
        // Hand-written (`context/input.rs`): a task awaiting input holds
        // this future for as long as a human takes to answer.
        input::InputWait::new(self, key.into(), request)
    }

    /// Steer messages as a stream, oldest first, each exactly once. Nothing
    /// is delivered while the task is paused. Ends when the task winds down.
    pub fn steers(&self) -> impl Stream<Item = String> + Send + 'static {
        let ctx = self.clone();
        futures::stream::unfold(
            (ctx, std::collections::VecDeque::<String>::new()),
            |(ctx, mut buf)| async move {
                loop {
                    if let Some(m) = buf.pop_front() {
                        return Some((m, (ctx, buf)));
                    }
                    if let Some(journal) = ctx.journal() {
                        // A re-run's stream hands back what the first run's took.
                        let replayed: Vec<String> = journal.lock().streamed.drain(..).collect();
                        if !replayed.is_empty() {
                            buf.extend(replayed);
                            continue;
                        }
                    }
                    let id = ctx.cell.id;
                    let now = ctx.inner.now();
                    let journaled = ctx.journal().is_some();
                    let got = ctx
                        .wait_until(false, |st, _| {
                            match st.forest.take_steers_journaled(now, id, journaled) {
                                Ok(s) if !s.is_empty() => Some(Some(s)),
                                Ok(_) => match st.forest.task(id) {
                                    Some(r) if !r.is_winding_down() => None,
                                    _ => Some(None),
                                },
                                Err(_) => Some(None),
                            }
                        })
                        .await;
                    match got {
                        Some(s) => buf.extend(s),
                        None => return None,
                    }
                }
            },
        )
    }

    /// Starts a subtask running `f`, appended to this task's `childTaskIds`.
    /// It starts when its `after` dependencies are terminal and a scheduler
    /// slot is free; until then it shows `working` with a status message
    /// saying what it waits for.
    ///
    /// # Errors
    ///
    /// `Interrupted` if this task is being cancelled (I5); `Rejected` for a
    /// limit (depth, fan-out) or an `after` entry that is not an earlier
    /// sibling.
    pub fn spawn_subtask<F, Fut>(&self, opts: SubtaskOptions, f: F) -> Result<SubtaskHandle, TaskError>
    where
        F: FnOnce(TaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.spawn_launcher(opts, super::supervisor::typed(f))
    }

    /// [`TaskContext::spawn_subtask`] with a boxed body.
    pub(crate) fn spawn_body(
        &self,
        opts: SubtaskOptions,
        body: HandlerBody,
    ) -> Result<SubtaskHandle, TaskError> {
        self.spawn_launcher(opts, super::supervisor::boxed(body))
    }

    fn spawn_launcher(&self, opts: SubtaskOptions, body: Launcher) -> Result<SubtaskHandle, TaskError> {
        let mut mark = None;
        if let Some(journal) = self.journal() {
            use crate::core::{Recorded, describe_spawn};
            let what = super::durable::spawn_identity(opts.name.as_deref(), opts.args.as_deref());
            let mut c = journal.lock();
            let seq = c.next;
            match c.recorded.remove(&seq) {
                Some(Recorded::Spawn { id, what: was, .. }) => {
                    drop(c);
                    if was != what {
                        return Err(self.diverge(seq, &describe_spawn(&was), &describe_spawn(&what)));
                    }
                    journal.lock().next += 1;
                    return Ok(self.respawn(id, &opts, body));
                }
                Some(other) => {
                    drop(c);
                    return Err(self.diverge(seq, &other.describe(), &describe_spawn(&what)));
                }
                None if c.replaying() => {
                    drop(c);
                    return Err(self.diverge(
                        seq,
                        "an act that was not recorded (a step still running at the stop)",
                        &describe_spawn(&what),
                    ));
                }
                None => {
                    c.next += 1;
                    mark = Some(crate::core::SpawnMark { seq, what });
                }
            }
        }
        // A subtask that waits for dependencies takes no slot now.
        let slot = if opts.after.is_empty() {
            self.inner.creation_slot(self.tree.root)
        } else {
            None
        };
        let parent = self.cell.id;
        let (id, job) = self.with(|st, now, post| -> Result<(TaskId, Option<StartJob>), TaskError> {
            if let Err(dependency) = st.forest.check_after(parent, &opts.after) {
                return Err(TaskError::Rejected(RuntimeError::InvalidDependency {
                    dependency,
                }));
            }
            if let Some(owner) = &st.owner {
                owner.try_reserve().map_err(TaskError::Rejected)?;
            }
            let created = st.forest.create_child_marked(
                now,
                parent,
                ChildOptions {
                    ttl_ms: opts.ttl_ms,
                    poll_interval_ms: opts.poll_interval_ms,
                    fail_fast: opts.fail_fast,
                },
                mark,
            );
            let id = match created {
                Ok(id) => id,
                Err(e) => {
                    if let Some(owner) = &st.owner {
                        owner.release();
                    }
                    return Err(e.into());
                }
            };
            let (job, pending) = self.child_job(st, id, body, &opts.after, false);
            Ok((
                id,
                super::tree::admit(
                    st,
                    now,
                    job,
                    &pending,
                    slot.is_none().then_some(&self.inner.sched),
                    post,
                ),
            ))
        })?;
        // The slot is given back (dropped) unless the job starts in it.
        if let (Some(slot), Some(job)) = (slot, job) {
            slot.start(job);
        }
        Ok(SubtaskHandle {
            ctx: self.clone(),
            id,
        })
    }

    /// The start job of child `id` of this task (`rerun` when a re-run
    /// spawns it again), and which of its `after` dependencies are not
    /// terminal yet. Under the tree lock.
    fn child_job(
        &self,
        st: &TreeState,
        id: TaskId,
        body: Launcher,
        after: &[TaskId],
        rerun: bool,
    ) -> (StartJob, Vec<TaskId>) {
        let tree = &self.tree;
        let job = StartJob {
            tree: tree.clone(),
            id,
            body,
            deps: after.to_vec(),
            rerun,
            meta: None,
            // A child of the parent task's span, also when the handler
            // spawns from a future of its own that is outside it.
            span: super::span::task_span(
                self.cell.parent_span(),
                id,
                Some(self.cell.id),
                tree.root,
                tree.label().map(|l| &**l),
                None,
            ),
        };
        let pending = after
            .iter()
            .copied()
            .filter(|d| st.forest.task(*d).is_some_and(|r| !r.is_terminal()))
            .collect();
        (job, pending)
    }

    /// A re-run spawns the child its first run spawned at this place:
    /// a child waiting to run again runs `body` (queued as any new
    /// subtask, after `opts.after`); a terminal child keeps its stored
    /// outcome and one whose handler had returned completes with its
    /// subtasks, `body` unused.
    fn respawn(&self, id: TaskId, opts: &SubtaskOptions, body: Launcher) -> SubtaskHandle {
        let unused = self.with(|st, now, post| {
            if !st.forest.claim(now, id) {
                return Some(body);
            }
            let (job, pending) = self.child_job(st, id, body, &opts.after, true);
            let queued = super::tree::admit(st, now, job, &pending, Some(&self.inner.sched), post);
            debug_assert!(queued.is_none(), "a job admitted with a queue is queued");
            None
        });
        // Dropped after the lock: a body may own anything.
        drop(unused);
        SubtaskHandle {
            ctx: self.clone(),
            id,
        }
    }
}

/// A subtask started by [`TaskContext::spawn_subtask`]. Await it (or call
/// [`SubtaskHandle::outcome`]) for the child's outcome; the awaiting parent
/// gives its scheduler slot back meanwhile.
#[derive(Clone)]
pub struct SubtaskHandle {
    ctx: TaskContext,
    id: TaskId,
}

impl std::fmt::Debug for SubtaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubtaskHandle").field("id", &self.id).finish()
    }
}

impl SubtaskHandle {
    /// The subtask's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// Cancels the subtask and its own subtree (`tasks/cancel` from inside
    /// the parent). The subtask ends `cancelled` once its subtree is terminal.
    ///
    /// # Errors
    ///
    /// Never for a live handle; kept for symmetry with `Runtime::cancel`.
    pub fn cancel(&self) -> Result<crate::model::CancelOutcome, RuntimeError> {
        let id = self.id;
        Ok(self.ctx.with(|st, now, _| st.forest.cancel(now, id))?)
    }

    /// Waits for the subtask to be terminal and returns its outcome.
    ///
    /// # Cancellation safety
    ///
    /// Safe to drop; the subtask keeps running.
    pub async fn outcome(&self) -> TaskOutcome {
        // Awaiting a subtask parks the parent: a pause takes effect at once,
        // and a parent paused meanwhile does not run on until resumed.
        let ctx = &self.ctx;
        ctx.safe_point().await;
        let entered = ctx.with(|st, now, _| st.forest.enter_wait(now, ctx.cell.id).is_ok());
        struct Leave<'a>(&'a TaskContext, bool);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                if self.1 {
                    let ctx = self.0;
                    ctx.with(|st, now, _| {
                        let _ = st.forest.leave_wait(now, ctx.cell.id);
                    });
                }
            }
        }
        let mut leave = Leave(ctx, entered);
        let outcome = self.child_outcome().await;
        leave.1 = false;
        if entered {
            ctx.with(|st, now, _| {
                let _ = st.forest.leave_wait(now, ctx.cell.id);
            });
        }
        ctx.wait_point().await;
        outcome
    }

    async fn child_outcome(&self) -> TaskOutcome {
        let id = self.id;
        loop {
            let notify: Option<Arc<TaskCell>> = {
                let mut st = self.ctx.tree.state.lock();
                match st.forest.task(id) {
                    None => return TaskOutcome::Cancelled,
                    Some(r) => {
                        if let Some(o) = r.outcome() {
                            return o;
                        }
                    }
                }
                st.notify_of(id)
            };
            let Some(notify) = notify else { continue };
            let notified = notify.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self
                .ctx
                .tree
                .state
                .lock()
                .forest
                .task(id)
                .is_none_or(TaskRecord::is_terminal)
            {
                continue;
            }
            self.ctx.safe_wait(notified).await;
        }
    }
}

impl IntoFuture for SubtaskHandle {
    type Output = TaskOutcome;
    type IntoFuture = BoxFuture<'static, TaskOutcome>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.outcome().await })
    }
}

impl TaskContext {
    /// The task's cell (for the scheduler's gate).
    pub(crate) fn cell_ref(&self) -> &Arc<TaskCell> {
        &self.cell
    }

    /// The runtime's shared state (for the scheduler's gate).
    pub(crate) fn inner_ref(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The root of the task's tree.
    pub(crate) fn root_id(&self) -> TaskId {
        self.tree.root
    }
}
