//! The tokio runtime: runs tool handlers as tasks, drives the core.
//!
//! The lifecycle rules live in [`crate::core`]; this layer runs handlers,
//! delivers steer / pause / cancel / input to them, schedules them under a
//! global and a per-tree limit, fires timers and streams ordered results.
//!
//! * State is sharded by tree: each tree has its own `Forest` behind its own
//!   lock, found through a sharded id index, so independent trees never
//!   contend on one lock and `get` is O(1).
//! * No lock is held across `.await`: effects are computed under the tree
//!   lock and acted on (wake-ups, scheduling, timers) after it is released.
//! * Timers live in ordered heaps (one per tree in the core, one across trees
//!   here); nothing sweeps over all tasks.
//!
//! # Layout
//!
//! Each type has one home, and the modules form layers (a module uses only
//! those above it, but for the one loop every handler runtime has: the
//! driver starts a handler with a [`TaskContext`], and the context calls
//! back into the driver):
//!
//! * `scheduler`: slots and queues of jobs, generic over the job; knows
//!   nothing of tasks. `cell`: a live task's cell and its slot state
//!   machine (`SlotState`, transitions returning `#[must_use]` outcomes).
//! * `tree`: one tree's data (its lock, side table, jobs, exits, `Post`);
//!   `owner`: a principal's live-task limit and tree list; `inner`: the
//!   runtime's shared state (index, scheduler, timers, clock, store).
//! * `driver`: every `impl Inner` that moves trees (commands and effects,
//!   handler starts and exits, slot accounting, timers), with the complete
//!   lock order in its module documentation.
//! * `context` (the handler's API), `durable` (its journal cursor), `plan`,
//!   then `Runtime`'s methods here and in `recovery`, `drain`, `owned`, `view`.
//!
//! The lifecycle rules themselves (including the check of a subtask's
//! `after` dependencies) are the core's; the store knows nothing of this
//! layer.
//!
//! # Examples
//!
//! ```
//! use subtask::core::{ClientView, RootOptions};
//! use subtask::model::{JsonObject, TaskStatus};
//! use subtask::runtime::{Runtime, RuntimeConfig, SubtaskOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let rt = Runtime::new(RuntimeConfig::default());
//! let root = rt.spawn(RootOptions::default(), |ctx| async move {
//!     let child = ctx.spawn_subtask(SubtaskOptions::default(), |_| async { Ok(JsonObject::new()) })?;
//!     let _outcome = child.await;
//!     Ok(JsonObject::new())
//! });
//! let done = rt.wait(root, ClientView::PAUSE_AWARE).await.unwrap();
//! assert_eq!(done.status(), TaskStatus::Completed);
//! # }
//! ```

mod cell;
mod config;
mod context;
mod drain;
mod driver;
mod durable;
mod error;
mod inner;
#[cfg(feature = "server")]
mod owned;
mod owner;
pub mod persist;
mod plan;
mod recovery;
mod scheduler;
mod span;
pub mod stats;
mod supervisor;
mod tree;
// The web view's reads; a tree's rows also serve the control tools
// (`server`), the tree list only the web view.
#[cfg(feature = "server")]
#[cfg_attr(not(feature = "ui"), allow(dead_code))]
pub(crate) mod view;

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use futures::Stream;

/// How a task ended (the one outcome type, defined in [`model`](crate::model)).
pub use crate::model::TaskOutcome;
/// A cluster lease's deadline, kept by the store (re-exported here: it stops the runtime's handlers).
pub use crate::store::LeaseGate;
pub use config::RuntimeConfig;
pub use context::{
    DependencyOutcome, HandlerBody, HandlerResult, SubtaskHandle, SubtaskOptions, TaskContext, TaskError,
};
pub use drain::DrainReport;
pub use durable::JOURNAL_TARGET;
pub use error::{Interrupted, RuntimeError};
pub use plan::SubtaskPlan;
pub use span::STATUS_TARGET;

use crate::core::{Forest, ResultCursor};
/// The forest's limits and deletion grace, set in [`RuntimeConfig::forest`].
pub use crate::core::{ForestConfig, Limits};
use crate::model::{CancelOutcome, ClientView, RootOptions};
use crate::model::{DetailedTask, InputResponses, TaskId};
use crate::store::{StoreError, TaskStore, TreeMeta};
use inner::Inner;
#[cfg(feature = "server")]
pub(crate) use owned::{Applied, Command, ListPosition, command_on_stored};
pub use owner::Owner;
pub use recovery::{Launch, RecoveryReport};
use tree::{Durable, RtTable, StartJob, TreeCell, TreeState};

/// The task runtime. Cheap to clone and share; every clone drives the same tasks.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Runtime {
    /// A runtime with its timer driver.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the timer driver is spawned here).
    pub fn new(config: RuntimeConfig) -> Self {
        Self::build(config, None)
    }

    /// A runtime that writes every change to `store`. Call
    /// [`Runtime::recover`] before starting new work to bring back the
    /// trees the store holds.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (the timer driver is spawned here).
    pub fn with_store(config: RuntimeConfig, store: Arc<dyn TaskStore>) -> Self {
        Self::build(config, Some(store))
    }

    fn build(config: RuntimeConfig, store: Option<Arc<dyn TaskStore>>) -> Self {
        let inner = Arc::new(Inner::new(config, store));
        tokio::spawn(driver::timer_driver(Arc::downgrade(&inner)));
        Runtime { inner }
    }

    /// The store, if the runtime has one.
    pub fn store(&self) -> Option<&Arc<dyn TaskStore>> {
        self.inner.store.as_ref()
    }

    /// Installs a lease: once `gate` lapses no handler of this runtime is
    /// polled again (each stays frozen where it was), so an instance that
    /// lost its lease never runs work another instance may have taken
    /// over. Set once; later calls are ignored.
    pub fn set_lease(&self, gate: Arc<LeaseGate>) {
        let _ = self.inner.lease.set(gate);
    }

    /// Resolves once everything the tree holding `id` has shown so far is
    /// durable: call it after reading a snapshot and before showing it, and
    /// after any command before acknowledging it. Immediate without a store
    /// or when nothing is pending; for an unknown id it waits for every
    /// batch submitted so far.
    ///
    /// # Errors
    ///
    /// The store failed: the change may be lost on a crash.
    pub async fn flushed(&self, id: TaskId) -> Result<(), StoreError> {
        let Some(store) = &self.inner.store else {
            return Ok(());
        };
        let ticket = match self.inner.tree_of(id) {
            Some(tree) => tree.state.lock().durable.ticket,
            None => store.last_ticket(),
        };
        if store.is_durable(ticket)? {
            return Ok(());
        }
        store.wait_durable(ticket).await
    }

    /// The store that answers for the finished trees this runtime lets go
    /// of ([`RuntimeConfig::release_finished_after`]), with the forests'
    /// configuration; `None` when finished trees stay in memory.
    #[cfg(feature = "server")]
    pub(crate) fn finished_store(&self) -> Option<(Arc<dyn TaskStore>, Arc<ForestConfig>)> {
        self.inner.release_grace()?;
        let store = self.inner.store.clone()?;
        store.finished()?;
        Some((store, self.inner.forest_config.clone()))
    }

    /// The forests' configuration (for commands on a tree rebuilt from its
    /// rows).
    #[cfg(all(feature = "postgres", feature = "server"))]
    pub(crate) fn forest_config(&self) -> Arc<ForestConfig> {
        self.inner.forest_config.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// What the runtime counts for operators: tasks per tool and status,
    /// handler run times (read by the server's `/metrics`).
    pub fn stats(&self) -> &stats::Stats {
        &self.inner.stats
    }

    /// The scheduler now: (handlers holding a slot, jobs queued for one,
    /// the most handlers allowed to run at once). Takes the scheduler's
    /// lock once, briefly.
    pub fn scheduler_load(&self) -> (usize, usize, usize) {
        let sched = &self.inner.sched;
        (sched.running(), sched.waiting(), sched.max_running())
    }

    /// Starts `f` as a root task. The task is retrievable when this returns.
    pub fn spawn<F, Fut>(&self, opts: RootOptions, f: F) -> TaskId
    where
        F: FnOnce(TaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.start_root_with(None, opts, supervisor::typed(f), None, None, None)
            .expect("a root without an owner has no limit to hit")
    }

    /// Starts `f` as the root of a **durable** tree: its handlers keep a
    /// journal (subtasks, [steps](TaskContext::step), steers taken), and
    /// after a stop [`Runtime::recover`] runs the root's handler again in
    /// place with the body its `rebuild` returns for `call` (what the
    /// caller needs to rebuild it, stored as JSON): finished subtasks and
    /// steps are not run again. Without a store it runs as
    /// [`Runtime::spawn`] does.
    pub fn spawn_resumable<F, Fut>(&self, opts: RootOptions, call: serde_json::Value, f: F) -> TaskId
    where
        F: FnOnce(TaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let launch = Launch {
            resumable: true,
            call,
        };
        self.start_root_with(None, opts, supervisor::typed(f), Some(launch), None, None)
            .expect("a root without an owner has no limit to hit")
    }

    /// Starts a boxed handler body as a root task owned by `owner`, with
    /// what a store needs to run it again after a restart, the tree's
    /// label (the tool it runs) and the W3C `traceparent` of the request
    /// that started it, if it carried one (its span's remote parent).
    #[cfg(feature = "server")]
    pub(crate) fn start_root_launch(
        &self,
        owner: Option<Arc<Owner>>,
        opts: RootOptions,
        body: HandlerBody,
        launch: Option<Launch>,
        label: Option<Arc<str>>,
        trace_parent: Option<&str>,
    ) -> Result<TaskId, RuntimeError> {
        self.start_root_with(owner, opts, supervisor::boxed(body), launch, label, trace_parent)
    }

    /// [`Runtime::start_root_launch`] with a typed or boxed body.
    fn start_root_with(
        &self,
        owner: Option<Arc<Owner>>,
        mut opts: RootOptions,
        body: supervisor::Launcher,
        launch: Option<Launch>,
        label: Option<Arc<str>>,
        trace_parent: Option<&str>,
    ) -> Result<TaskId, RuntimeError> {
        let inner = &self.inner;
        if let Some(owner) = &owner {
            owner.try_reserve()?;
        }
        if opts.poll_interval_ms.is_none() {
            opts.poll_interval_ms = inner.config.default_poll_interval_ms;
        }
        let mut forest = Forest::new(inner.forest_config.clone());
        let id = forest
            .create_root(inner.now(), opts)
            .expect("creating a root task has no failure mode");
        let tool = inner.stats.tool(label.as_ref());
        let journaled = launch.as_ref().is_some_and(|l| l.resumable);
        let tree = Arc::new(TreeCell::new(
            id,
            TreeState {
                forest,
                rt: RtTable::default(),
                owner: owner.clone(),
                durable: Durable::default(),
            },
            tool,
            journaled,
        ));
        if let Some(owner) = &owner {
            owner.enlist(&tree);
        }
        let meta = inner.store.as_ref().map(|_| {
            let owner = owner.as_ref().map(|o| o.name().to_owned());
            let (resumable, launch) = launch.map_or((false, None), |l| (l.resumable, Some(l.call)));
            TreeMeta {
                root: id,
                owner,
                resumable,
                launch,
            }
        });
        let mut job = StartJob {
            tree: tree.clone(),
            id,
            body,
            deps: Vec::new(),
            rerun: false,
            meta: None,
            span: span::task_span(
                &tracing::Span::current(),
                id,
                None,
                id,
                tree.label().map(|l| &**l),
                trace_parent,
            ),
        };
        match inner.creation_slot(id) {
            // Created and started in one step: one batch for the store, and
            // the id is published (indexed) only then.
            Some(slot) => {
                job.meta = meta;
                slot.start(job);
            }
            None => inner.with_tree(&tree, |st, now, post| {
                post.meta = meta;
                let none = tree::admit(st, now, job, &[], Some(&inner.sched), post);
                debug_assert!(none.is_none(), "a root without a slot is queued");
            }),
        }
        Ok(id)
    }

    fn tree(&self, id: TaskId) -> Result<Arc<TreeCell>, RuntimeError> {
        self.inner.tree_of(id).ok_or(RuntimeError::Transition(
            crate::core::TransitionError::UnknownTask(id),
        ))
    }

    /// The task as `view` sees it, in O(1) (plus its payload size). With a
    /// store, the snapshot may hold changes not yet durable: await
    /// [`Runtime::flushed`] before showing it to anyone who may outlive a
    /// crash (the server does).
    pub fn get(&self, id: TaskId, view: ClientView) -> Option<DetailedTask> {
        let tree = self.inner.tree_of(id)?;
        let st = tree.state.lock();
        st.forest.snapshot(id, view)
    }

    /// `tasks/update`: delivers input responses; returns the accepted keys
    /// (answers to keys that are not outstanding are ignored).
    ///
    /// # Errors
    ///
    /// Unknown task; paused task (resume first).
    pub fn update(&self, id: TaskId, responses: InputResponses) -> Result<Vec<String>, RuntimeError> {
        let tree = self.tree(id)?;
        Ok(self
            .inner
            .with_tree(&tree, |st, now, _| st.forest.answer_input(now, id, responses))?)
    }

    /// `tasks/cancel`: cancels the task and its subtree (leaves first).
    ///
    /// # Errors
    ///
    /// Unknown task.
    pub fn cancel(&self, id: TaskId) -> Result<CancelOutcome, RuntimeError> {
        let tree = self.tree(id)?;
        Ok(self
            .inner
            .with_tree(&tree, |st, now, _| st.forest.cancel(now, id))?)
    }

    /// `tasks/steer`: queues a message for the task's next safe point.
    ///
    /// # Errors
    ///
    /// Unknown or terminal task, a task winding down or whose handler
    /// finished, or a steer limit.
    pub fn steer(&self, id: TaskId, message: impl Into<String>) -> Result<(), RuntimeError> {
        let tree = self.tree(id)?;
        let message = message.into();
        Ok(self
            .inner
            .with_tree(&tree, |st, now, _| st.forest.steer(now, id, message))?)
    }

    /// `tasks/pause`: pauses the task and its live descendants; returns the
    /// task as it is now (`paused`, or unchanged with a pending-pause message).
    ///
    /// # Errors
    ///
    /// Unknown, terminal or already paused task.
    pub fn pause(&self, id: TaskId, view: ClientView) -> Result<DetailedTask, RuntimeError> {
        let tree = self.tree(id)?;
        Ok(self.inner.with_tree(&tree, |st, now, _| {
            st.forest
                .pause(now, id)
                .map(|_| st.forest.snapshot(id, view).expect("the task was just paused"))
        })?)
    }

    /// `tasks/resume`: resumes the task and the descendants paused through
    /// it; returns the task after resuming.
    ///
    /// # Errors
    ///
    /// Unknown task, or not paused.
    pub fn resume(&self, id: TaskId, view: ClientView) -> Result<DetailedTask, RuntimeError> {
        let tree = self.tree(id)?;
        Ok(self.inner.with_tree(&tree, |st, now, _| {
            st.forest
                .resume(now, id)
                .map(|()| st.forest.snapshot(id, view).expect("the task was just resumed"))
        })?)
    }

    /// Deletes a terminal tree now.
    ///
    /// # Errors
    ///
    /// Unknown task, not a root, or not terminal.
    pub fn delete_tree(&self, root: TaskId) -> Result<(), RuntimeError> {
        let tree = self.tree(root)?;
        Ok(self
            .inner
            .with_tree(&tree, |st, now, _| st.forest.delete_tree(now, root))?)
    }

    /// Number of retrievable tasks.
    pub fn task_count(&self) -> usize {
        self.inner.task_count()
    }

    /// Handlers holding a scheduler slot now.
    pub fn running_handlers(&self) -> usize {
        self.inner.sched.running()
    }

    /// The terminal tasks of a tree in result order (I12): each child's
    /// subtree in `childTaskIds` order, then the parent; each exactly once,
    /// as soon as the order allows. Ends after the root (or if the tree is
    /// deleted).
    pub fn results(
        &self,
        root: TaskId,
        view: ClientView,
    ) -> impl Stream<Item = DetailedTask> + Send + 'static {
        struct S {
            tree: Option<Arc<TreeCell>>,
            cursor: ResultCursor,
            buf: VecDeque<DetailedTask>,
        }
        let s = S {
            tree: self.inner.tree_of(root),
            cursor: ResultCursor::new(root),
            buf: VecDeque::new(),
        };
        futures::stream::unfold(s, move |mut s| async move {
            loop {
                if let Some(t) = s.buf.pop_front() {
                    return Some((t, s));
                }
                let tree = s.tree.clone()?;
                if s.cursor.is_finished() {
                    return None;
                }
                let notified = tree.changed().notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let st = tree.state.lock();
                    while let Some(id) = s.cursor.next_ready(&st.forest) {
                        s.buf.extend(st.forest.snapshot(id, view));
                    }
                }
                if s.buf.is_empty() {
                    if s.cursor.is_finished() {
                        return None;
                    }
                    notified.await;
                }
            }
        })
    }

    /// A `DetailedTask` snapshot of each task on every observable change.
    /// Intermediate snapshots may coalesce under load; the final (terminal)
    /// one is never dropped. Each task's stream ends after its terminal
    /// snapshot (or when its tree is deleted); unknown ids yield nothing.
    pub fn subscribe(
        &self,
        ids: &[TaskId],
        view: ClientView,
    ) -> impl Stream<Item = DetailedTask> + Send + 'static {
        let streams: Vec<_> = ids.iter().map(|&id| Box::pin(self.watch(id, view))).collect();
        futures::stream::select_all(streams)
    }

    fn watch(&self, id: TaskId, view: ClientView) -> impl Stream<Item = DetailedTask> + Send + 'static {
        struct S {
            tree: Option<Arc<TreeCell>>,
            last: Option<DetailedTask>,
            done: bool,
        }
        let s = S {
            tree: self.inner.tree_of(id),
            last: None,
            done: false,
        };
        futures::stream::unfold(s, move |mut s| async move {
            loop {
                if s.done {
                    return None;
                }
                let tree = s.tree.clone()?;
                let notify = tree.state.lock().notify_of(id);
                let notified = notify.as_ref().map(|n| n.notify.notified());
                tokio::pin!(notified);
                if let Some(n) = notified.as_mut().as_pin_mut() {
                    n.enable();
                }
                let snap = tree.state.lock().forest.snapshot(id, view);
                let snap = snap?;
                if s.last.as_ref() != Some(&snap) {
                    s.done = snap.status().is_terminal();
                    s.last = Some(snap.clone());
                    return Some((snap, s));
                }
                match notified.as_pin_mut() {
                    Some(n) => n.await,
                    // Terminal and already sent.
                    None => return None,
                }
            }
        })
    }

    /// Waits until the task is terminal and returns its final snapshot;
    /// `None` if it does not exist (or its tree is deleted first).
    pub async fn wait(&self, id: TaskId, view: ClientView) -> Option<DetailedTask> {
        use futures::StreamExt;
        let mut last = None;
        let mut stream = Box::pin(self.watch(id, view));
        while let Some(t) = stream.next().await {
            last = Some(t);
        }
        last.filter(|t| t.status().is_terminal())
    }
}
