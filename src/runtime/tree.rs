//! One tree's state behind its own lock, and how effects of the core are
//! turned into wake-ups, scheduling, timers and index updates.
//!
//! Lock order: a tree's `state` lock is never held while taking the
//! scheduler's, the timer queue's or the index's lock; effects are absorbed
//! under the tree lock into a [`Post`] list that runs after it is released
//! (compute under the lock, notify after unlock).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::context::{DependencyOutcome, HandlerResult, TaskContext, TaskOutcome};
use super::error::RuntimeError;
use super::inner::Inner;
use super::scheduler::Job;
use crate::core::{Effect, Forest, IdMap, TaskRecord, TransitionError};
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
}

/// Runtime-side data of a live task: created on demand, dropped when the
/// task becomes terminal.
#[derive(Default)]
pub(crate) struct TaskRt {
    /// Woken on every change of the task (status, steer, input, resume, cancel).
    pub(crate) notify: Option<Arc<Notify>>,
    /// Answers delivered by `tasks/update`, waiting for the handler.
    pub(crate) answers: BTreeMap<String, JsonObject>,
    /// The handler, while it cannot start yet (dependencies or pause).
    pub(crate) job: Option<StartJob>,
    /// Dependencies not yet terminal.
    pub(crate) pending_deps: u32,
    /// Tasks whose `after` names this one.
    pub(crate) dependents: Vec<TaskId>,
}

/// State of one tree.
pub(crate) struct TreeState {
    pub(crate) forest: Forest,
    pub(crate) rt: IdMap<TaskRt>,
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

/// A principal that owns trees, with a limit on its live (non-terminal) tasks.
#[derive(Debug)]
pub struct Owner {
    name: Arc<str>,
    live: AtomicUsize,
    max_live: usize,
}

impl Owner {
    /// A principal allowed `max_live` non-terminal tasks at once.
    pub fn new(name: impl Into<Arc<str>>, max_live: usize) -> Arc<Owner> {
        Arc::new(Owner {
            name: name.into(),
            live: AtomicUsize::new(0),
            max_live,
        })
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
        if before >= self.max_live {
            self.live.fetch_sub(1, Ordering::AcqRel);
            return Err(RuntimeError::TooManyLiveTasks { max: self.max_live });
        }
        Ok(())
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
    pub(crate) fn notify_of(&mut self, id: TaskId) -> Option<Arc<Notify>> {
        if self.forest.task(id).is_none_or(TaskRecord::is_terminal) {
            return None;
        }
        Some(
            self.rt
                .entry(id)
                .or_default()
                .notify
                .get_or_insert_with(|| Arc::new(Notify::new()))
                .clone(),
        )
    }
}

/// A tree: its state behind one lock, and a notifier for ordered-result streams.
pub(crate) struct TreeCell {
    pub(crate) root: TaskId,
    pub(crate) state: Mutex<TreeState>,
    /// Woken whenever any task of the tree changes.
    pub(crate) changed: Notify,
}

/// What to do once the tree lock is released.
#[derive(Default)]
pub(crate) struct Post {
    notify: Vec<Arc<Notify>>,
    tree_changed: bool,
    created: Vec<TaskId>,
    deleted: Vec<TaskId>,
    arm: Option<Timestamp>,
    submit_front: Vec<StartJob>,
    submit_back: Vec<StartJob>,
    /// The tree row to write with the root's first batch.
    pub(crate) meta: Option<TreeMeta>,
}

impl Post {
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
            self.absorb(&mut st, &mut post);
            r
        };
        self.run_post(tree, post);
        r
    }

    /// Turns the forest's effects into follow-up work. Under the tree lock.
    pub(crate) fn absorb(&self, st: &mut TreeState, post: &mut Post) {
        let mut ops: Vec<WriteOp> = Vec::new();
        if let Some(meta) = post.meta.take() {
            ops.push(WriteOp::PutTree(meta));
        }
        let persist = self.store.is_some();
        for effect in st.forest.take_effects() {
            if persist && let Some(op) = WriteOp::for_effect(&st.forest, &effect) {
                ops.push(op);
            }
            match effect {
                Effect::Created { id, .. } => post.created.push(id),
                Effect::Changed { id, to, .. } => {
                    post.tree_changed = true;
                    if to.is_terminal() {
                        if let Some(owner) = &st.owner {
                            owner.release();
                        }
                        if let Some(rt) = st.rt.remove(&id) {
                            post.notify.extend(rt.notify);
                            for d in rt.dependents {
                                dependency_done(st, d, post);
                            }
                        }
                    } else if let Some(n) = st.rt.get(&id).and_then(|rt| rt.notify.clone()) {
                        post.notify.push(n);
                    }
                }
                Effect::SteerQueued { id } | Effect::CancelHandler { id } => {
                    if let Some(n) = st.rt.get(&id).and_then(|rt| rt.notify.clone()) {
                        post.notify.push(n);
                    }
                }
                Effect::WakeHandler { id } => {
                    if let Some(rt) = st.rt.get_mut(&id) {
                        if rt.pending_deps == 0
                            && let Some(job) = rt.job.take()
                        {
                            post.submit(job, true);
                        }
                        post.notify.extend(rt.notify.clone());
                    }
                }
                Effect::InputAnswered { id, key, response } => {
                    let rt = st.rt.entry(id).or_default();
                    rt.answers.insert(key, response);
                    post.notify.extend(rt.notify.clone());
                }
                Effect::ArmTimer { at } => post.arm = Some(post.arm.map_or(at, |a| a.min(at))),
                Effect::TreeDeleted { ids, .. } => {
                    post.tree_changed = true;
                    for id in &ids {
                        if let Some(rt) = st.rt.remove(id) {
                            post.notify.extend(rt.notify);
                        }
                    }
                    post.deleted.extend(ids);
                }
                Effect::Persist { .. } => {}
            }
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
        if st.rt.is_empty() && st.rt.capacity() > 0 {
            st.rt = IdMap::default();
        }
    }

    /// Follow-up work after the tree lock is released.
    pub(crate) fn run_post(self: &Arc<Self>, tree: &Arc<TreeCell>, post: Post) {
        for id in post.created {
            self.index_insert(id, tree);
        }
        for id in &post.deleted {
            self.index_remove(*id);
        }
        // Each task is woken once per command, in effect order (cancels reach
        // the leaves first), however many effects it had.
        let mut seen = std::collections::HashSet::with_capacity(post.notify.len());
        for n in post.notify {
            if seen.insert(Arc::as_ptr(&n) as usize) {
                n.notify_waiters();
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
                Job::Resume(slot, tx) => {
                    // The grant and the ownership are one step: a handler
                    // dropped right after this still releases the slot on exit.
                    if slot.grant() {
                        tx.send(()).is_ok() || !slot.ungrant()
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
            match st.forest.start(now, id) {
                Ok(()) => {}
                Err(TransitionError::Paused(_)) => {
                    st.rt.entry(id).or_default().job = Some(job);
                    return None;
                }
                Err(_) => return None,
            }
            if st.forest.task(id).and_then(TaskRecord::handler_message).is_some() {
                let _ = st.forest.set_status_message(now, id, None);
            }
            let deps: Vec<DependencyOutcome> = job
                .deps
                .iter()
                .filter_map(|d| {
                    st.forest
                        .task(*d)
                        .and_then(TaskOutcome::of)
                        .map(|outcome| DependencyOutcome { id: *d, outcome })
                })
                .collect();
            let parent = st.forest.task(id).and_then(TaskRecord::parent);
            Some((job.body, deps, parent))
        });
        let Some((body, deps, parent)) = started else {
            return false;
        };
        let ctx = TaskContext::new(self.clone(), tree, id, parent, deps, rerun);
        tokio::spawn(ctx.supervise(body));
        true
    }
}

/// A dependency of `dependent` became terminal.
fn dependency_done(st: &mut TreeState, dependent: TaskId, post: &mut Post) {
    let Some(rt) = st.rt.get_mut(&dependent) else {
        return;
    };
    rt.pending_deps = rt.pending_deps.saturating_sub(1);
    if rt.pending_deps == 0
        && let Some(job) = rt.job.take()
    {
        post.submit(job, false);
    }
}
