//! The scheduler: a global limit on running handlers and a per-tree limit,
//! round-robin across trees so one huge fan-out cannot starve other callers.
//!
//! It counts slots and queues jobs, and knows nothing else: a job is any
//! `J` (the runtime's is `tree::Job`), handed back to the caller to run
//! after the lock is released. One short critical section per decision.
//! Who holds a slot, and when it is given back, is the driver's business
//! (`driver/slots.rs`, `cell.rs`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::core::IdMap;
use crate::model::TaskId;

struct TreeQueue<J> {
    ready: VecDeque<J>,
    running: usize,
    in_rr: bool,
}

impl<J> TreeQueue<J> {
    fn new() -> Self {
        TreeQueue {
            ready: VecDeque::new(),
            running: 0,
            in_rr: false,
        }
    }
}

struct SchedState<J> {
    running: usize,
    trees: IdMap<TreeQueue<J>>,
    rr: VecDeque<TaskId>,
}

/// Slots and queues of jobs `J`, per tree (by root id) and in all.
pub(crate) struct Scheduler<J> {
    max_running: usize,
    per_tree: usize,
    state: Mutex<SchedState<J>>,
    /// Jobs waiting for a slot (written under `state`'s lock, read without
    /// it for a queued task's status message).
    waiting: AtomicUsize,
}

impl<J> Scheduler<J> {
    /// At most `max_running` jobs at once, `per_tree` of one tree.
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
        let q = st.trees.entry(root).or_insert_with(TreeQueue::new);
        if !q.ready.is_empty() || q.running >= per_tree {
            return false;
        }
        q.running += 1;
        st.running += 1;
        true
    }

    /// Takes a slot for `root` even above the limits (a handler that
    /// abandoned a parked wait runs on at once).
    pub(crate) fn force_acquire(&self, root: TaskId) {
        let mut st = self.state.lock();
        st.running += 1;
        st.trees.entry(root).or_insert_with(TreeQueue::new).running += 1;
    }

    /// Queues a job (at the front for resumed handlers) and returns the jobs
    /// that may run now.
    pub(crate) fn submit(&self, root: TaskId, job: J, front: bool) -> Vec<(TaskId, J)> {
        let mut st = self.state.lock();
        let q = st.trees.entry(root).or_insert_with(TreeQueue::new);
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
    /// (`Inner::shut_down`): none of them can run any more.
    pub(crate) fn take_queued(&self) -> Vec<J> {
        let mut st = self.state.lock();
        st.rr.clear();
        let jobs: Vec<J> = st
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
    pub(crate) fn release(&self, root: TaskId) -> Vec<(TaskId, J)> {
        self.release_n(root, 1)
    }

    /// Gives back `n` slots of `root` and returns the jobs that may run now.
    pub(crate) fn release_n(&self, root: TaskId, n: usize) -> Vec<(TaskId, J)> {
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

    fn pick(&self, st: &mut SchedState<J>) -> Vec<(TaskId, J)> {
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
