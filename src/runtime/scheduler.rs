//! The scheduler: a global limit on running handlers and a per-tree limit,
//! round-robin across trees so one huge fan-out cannot starve other callers.
//!
//! One short critical section per decision; jobs are handed back to the
//! caller and run after the lock is released.

use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use std::sync::Arc;

use super::tree::StartJob;
use super::tree::TaskCell;
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
        }
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
        if !q.in_rr && q.running < self.per_tree {
            q.in_rr = true;
            st.rr.push_back(root);
        }
        self.pick(&mut st)
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
