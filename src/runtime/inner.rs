//! Shared state of a runtime: the tree index, the scheduler, the timer
//! queue, the tool registry and the clock. The code that drives it is
//! `driver/`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::config::RuntimeConfig;
use super::scheduler::Scheduler;
use super::tree::{Job, TreeCell};
use crate::core::IdMap;
use crate::model::{TaskId, Timestamp};
use crate::store::TaskStore;

const INDEX_SHARDS: usize = 64;

/// Wall-clock time derived from tokio's clock, so tests with paused time
/// drive TTLs deterministically.
pub(crate) struct Clock {
    wall0: Timestamp,
    instant0: tokio::time::Instant,
}

impl Clock {
    fn new() -> Self {
        Clock {
            wall0: Timestamp::now(),
            instant0: tokio::time::Instant::now(),
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.instant0);
        self.wall0.saturating_add(elapsed.as_millis() as u64)
    }

    pub(crate) fn instant_of(&self, at: Timestamp) -> tokio::time::Instant {
        self.instant0 + Duration::from_millis(at.millis_since(self.wall0))
    }
}

/// Deadlines of all trees, earliest first. Entries may be stale (the tree
/// re-armed or was deleted); firing a stale entry is a no-op.
pub(crate) struct TimerQueue {
    heap: Mutex<BinaryHeap<Reverse<(Timestamp, TaskId)>>>,
    pub(crate) changed: Arc<Notify>,
}

impl TimerQueue {
    pub(crate) fn arm(&self, at: Timestamp, root: TaskId) {
        let mut heap = self.heap.lock();
        let earlier = heap.peek().is_none_or(|Reverse((first, _))| at < *first);
        heap.push(Reverse((at, root)));
        drop(heap);
        if earlier {
            self.changed.notify_one();
        }
    }

    pub(crate) fn next(&self) -> Option<Timestamp> {
        self.heap.lock().peek().map(|Reverse((at, _))| *at)
    }

    pub(crate) fn pop_due(&self, now: Timestamp) -> Vec<TaskId> {
        let mut heap = self.heap.lock();
        let mut due = Vec::new();
        while let Some(Reverse((at, root))) = heap.peek().copied() {
            if at > now {
                break;
            }
            heap.pop();
            due.push(root);
        }
        due
    }
}

pub(crate) struct Inner {
    pub(crate) config: RuntimeConfig,
    /// `config.forest`, shared by every tree's forest.
    pub(crate) forest_config: Arc<crate::core::ForestConfig>,
    index: Box<[Mutex<IdMap<Arc<TreeCell>>>]>,
    pub(crate) sched: Scheduler<Job>,
    pub(crate) timers: TimerQueue,
    pub(crate) clock: Clock,
    /// Where every tree's changes are written; `None` keeps them in memory only.
    pub(crate) store: Option<Arc<dyn TaskStore>>,
    /// Set by a cluster instance: no handler runs past its lease.
    pub(crate) lease: std::sync::OnceLock<Arc<super::LeaseGate>>,
    /// What operators see at `/metrics`.
    pub(crate) stats: super::stats::Stats,
    /// Draining (`Runtime::drain`): handlers of durable trees stop at their
    /// next safe point and no queued handler starts.
    pub(crate) drain: super::drain::DrainState,
}

/// When the last reference is gone, nothing can start, resume or answer a
/// task of this runtime again: see [`Inner::shut_down`].
impl Drop for Inner {
    fn drop(&mut self) {
        self.shut_down();
    }
}

impl Inner {
    pub(crate) fn new(config: RuntimeConfig, store: Option<Arc<dyn TaskStore>>) -> Self {
        Inner {
            config,
            forest_config: Arc::new(config.forest),
            index: (0..INDEX_SHARDS).map(|_| Mutex::new(IdMap::default())).collect(),
            sched: Scheduler::new(config.max_running, config.max_running_per_tree),
            timers: TimerQueue {
                heap: Mutex::new(BinaryHeap::new()),
                changed: Arc::new(Notify::new()),
            },
            clock: Clock::new(),
            store,
            lease: std::sync::OnceLock::new(),
            stats: super::stats::Stats::default(),
            drain: super::drain::DrainState::default(),
        }
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn shard(&self, id: TaskId) -> &Mutex<IdMap<Arc<TreeCell>>> {
        let v = id.as_u128();
        &self.index[((v as u64) ^ ((v >> 64) as u64)) as usize % INDEX_SHARDS]
    }

    /// The counters `tree`'s tasks count in: its tool's, or the
    /// unlabeled trees'.
    pub(crate) fn tool_of<'a>(&'a self, tree: &'a TreeCell) -> &'a super::stats::ToolStats {
        tree.tool.as_deref().unwrap_or(&self.stats.unlabeled)
    }

    /// The tree holding `id`, in O(1).
    pub(crate) fn tree_of(&self, id: TaskId) -> Option<Arc<TreeCell>> {
        self.shard(id).lock().get(&id).cloned()
    }

    pub(crate) fn index_insert(&self, id: TaskId, tree: &Arc<TreeCell>) {
        self.shard(id).lock().insert(id, tree.clone());
    }

    pub(crate) fn index_remove(&self, id: TaskId) {
        let mut shard = self.shard(id).lock();
        shard.remove(&id);
        if shard.is_empty() && shard.capacity() > 1024 {
            shard.shrink_to_fit();
        }
    }

    /// Number of retrievable tasks (sums the index shards).
    pub(crate) fn task_count(&self) -> usize {
        self.index.iter().map(|s| s.lock().len()).sum()
    }

    /// No handler or job of this runtime can run again (the runtime is
    /// dropped, or the tokio runtime it was started on shuts down): every
    /// queued job and every tree's runtime side table (parked jobs, task
    /// cells, undelivered answers) is dropped. A job parked in its own tree
    /// (paused before it started, or waiting for a dependency) holds that
    /// tree, and a handler's captures may hold this runtime (a
    /// `SubtaskHandle` in shared state, as `deep_research` keeps): without
    /// this, such a tree and everything it reached were never freed (found
    /// by the `server_entry` fuzz target under LeakSanitizer). The forests
    /// are kept: `get` still answers while anyone holds the runtime.
    pub(crate) fn shut_down(&self) {
        let queued = self.sched.take_queued();
        drop(queued);
        for shard in self.index.iter() {
            let trees: Vec<Arc<TreeCell>> = shard
                .lock()
                .iter()
                .filter(|(id, tree)| **id == tree.root)
                .map(|(_, tree)| tree.clone())
                .collect();
            for tree in trees {
                let rt = std::mem::take(&mut tree.state.lock().rt);
                // Dropped after the lock: a job's body may own anything.
                drop(rt);
            }
        }
    }
}
