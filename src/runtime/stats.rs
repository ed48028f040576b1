//! What the runtime counts for operators (`/metrics`, docs/operations.md):
//! tasks created and ended per tool, tasks held now per status, handler
//! run times, handlers inside `ctx.external`.
//!
//! Plain relaxed atomics, read at scrape time; no metrics crate here (the
//! runtime-only build depends on none). Nothing here takes a lock per task:
//! a tree resolves its tool's counters once, as it is created
//! (`Stats::tool`), and every count after that is an atomic add on them.
//! The effects of the commands absorbed in one tree-lock section are
//! counted in a `StatsDelta` on the stack and added at the end of that
//! section, still under the tree lock, so a tree's counts land in command
//! order. A scrape reads the atomics one by one: it may land between the
//! two halves of one change (a task counted in neither or both places for
//! a moment), never drift.
//!
//! Every counter, gauge and histogram is kept in shards ([`SHARDS`]), each
//! on cache lines of its own; a thread counts in its own shard and a read
//! sums them. Threads counting at once (two workers ending tasks of one
//! tool) therefore never bounce a cache line between cores: one shared
//! line measurably slowed `create_complete_1k` and `cancel_subtree_100k`.
//! A gauge taken in one shard and given back in another still sums right
//! (the shards add with wrapping arithmetic).

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use parking_lot::RwLock;

use crate::core::Slot;
use crate::model::TaskStatus;
use crate::sharded::Sharded;
pub use crate::sharded::{Histogram, HistogramSnapshot, SHARDS};
/// A store's commit figures, kept by the store (re-exported here, where
/// the runtime's other figures are).
pub use crate::store::{COMMIT_SECONDS_BUCKETS, CommitStats, GROUP_SIZE_BUCKETS};

/// Upper bounds (seconds) of the handler run time histogram: long-running
/// tasks, from a millisecond to an hour. Run times are whole milliseconds
/// of the runtime's clock (read by the commands that start a handler and
/// apply its exit, so timing costs no clock read of its own): a handler
/// shorter than a millisecond may count as 0 or 1 ms.
pub const HANDLER_SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0,
];

/// The live statuses, in the order of [`ToolStats`]' gauges.
pub const LIVE_STATUSES: [TaskStatus; 3] =
    [TaskStatus::Working, TaskStatus::InputRequired, TaskStatus::Paused];

/// The terminal statuses, in the order of [`ToolStats`]' counters.
pub const TERMINAL_STATUSES: [TaskStatus; 3] =
    [TaskStatus::Completed, TaskStatus::Failed, TaskStatus::Cancelled];

/// The index of a live status in [`LIVE_STATUSES`].
fn live_index(s: TaskStatus) -> Option<usize> {
    match s {
        TaskStatus::Working => Some(0),
        TaskStatus::InputRequired => Some(1),
        TaskStatus::Paused => Some(2),
        TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled => None,
    }
}

/// The index of a terminal status in [`TERMINAL_STATUSES`].
fn terminal_index(s: TaskStatus) -> Option<usize> {
    match s {
        TaskStatus::Completed => Some(0),
        TaskStatus::Failed => Some(1),
        TaskStatus::Cancelled => Some(2),
        TaskStatus::Working | TaskStatus::InputRequired | TaskStatus::Paused => None,
    }
}

/// The counters of one tool (every task of a tree counts under its root's
/// tool), shared by all its trees.
#[derive(Debug)]
pub struct ToolStats {
    /// The tool's name (`None` for [`Stats::unlabeled`]): its trees read
    /// their label here rather than keep a copy each.
    label: Option<Arc<str>>,
    /// `created`, `ended` (3), `live` (3, signed), `retained` (signed).
    counts: Sharded,
    handler: Histogram,
}

const CREATED: usize = 0;
const ENDED: usize = 1;
const LIVE: usize = 4;
const RETAINED: usize = 7;

impl ToolStats {
    /// The counters of the tool named `label`.
    fn labeled(label: Arc<str>) -> Self {
        ToolStats {
            label: Some(label),
            ..ToolStats::default()
        }
    }

    /// The tool's name (`None` for the counters of unlabeled trees).
    pub(crate) fn label(&self) -> Option<&Arc<str>> {
        self.label.as_ref()
    }
}

impl Default for ToolStats {
    fn default() -> Self {
        ToolStats {
            label: None,
            counts: Sharded::new(8),
            handler: Histogram::new(HANDLER_SECONDS_BUCKETS, 1e-9),
        }
    }
}

/// One tool's counters as read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSnapshot {
    /// Tasks created by this process.
    pub created: u64,
    /// Tasks that ended, by [`TERMINAL_STATUSES`].
    pub ended: [u64; 3],
    /// Tasks held now, by [`LIVE_STATUSES`].
    pub live: [i64; 3],
    /// Terminal tasks held now (until their tree is deleted).
    pub retained: i64,
    /// Handler run times.
    pub handler: HistogramSnapshot,
}

impl ToolStats {
    /// Adds a command's counts.
    pub(crate) fn apply(&self, d: &StatsDelta) {
        if d.created != 0 {
            self.counts.add(CREATED, d.created);
        }
        for (i, n) in d.ended.into_iter().enumerate() {
            if n != 0 {
                self.counts.add(ENDED + i, n);
            }
        }
        for (i, n) in d.live.into_iter().enumerate() {
            if n != 0 {
                self.counts.add(LIVE + i, n as u64);
            }
        }
        if d.retained != 0 {
            self.counts.add(RETAINED, d.retained as u64);
        }
    }

    /// Counts tasks restored from the store (not created by this process).
    pub(crate) fn restored(&self, status: TaskStatus) {
        match live_index(status) {
            Some(i) => self.counts.add(LIVE + i, 1),
            None => self.counts.add(RETAINED, 1),
        }
    }

    /// Records a handler's run time.
    pub(crate) fn handler_ran(&self, d: Duration) {
        self.handler.observe_duration(d);
    }

    /// The counters now.
    pub fn snapshot(&self) -> ToolSnapshot {
        ToolSnapshot {
            created: self.counts.sum(CREATED),
            ended: std::array::from_fn(|i| self.counts.sum(ENDED + i)),
            live: std::array::from_fn(|i| self.counts.sum(LIVE + i) as i64),
            retained: self.counts.sum(RETAINED) as i64,
            handler: self.handler.snapshot(),
        }
    }
}

/// The counts of the commands absorbed in one tree-lock section, added to
/// the tree's [`ToolStats`] at its end.
#[derive(Debug, Default)]
pub(crate) struct StatsDelta {
    created: u64,
    ended: [u64; 3],
    live: [i64; 3],
    retained: i64,
    /// A task created by the command being absorbed, whose first `Changed`
    /// (which follows its `Created` in the same command: forest.rs,
    /// `create_root` / `create_subtask`) gives its first status.
    fresh: Option<Slot>,
}

impl StatsDelta {
    /// `Effect::Created`.
    pub(crate) fn created(&mut self, slot: Slot) {
        self.created += 1;
        if let Some(earlier) = self.fresh.replace(slot) {
            // Not reached (one task per creating command); counted as
            // working rather than lost.
            debug_assert!(false, "two creations without a Changed between");
            let _ = earlier;
            self.live[0] += 1;
        }
    }

    /// `Effect::Changed`.
    pub(crate) fn changed(&mut self, slot: Slot, from: TaskStatus, to: TaskStatus) {
        let fresh = self.fresh == Some(slot);
        if fresh {
            self.fresh = None;
        } else if from == to {
            return;
        } else if let Some(i) = live_index(from) {
            self.live[i] -= 1;
        } else {
            // Terminal is absorbing: a terminal task changes no status.
            return;
        }
        match (live_index(to), terminal_index(to)) {
            (Some(i), _) => self.live[i] += 1,
            (None, Some(i)) => {
                self.ended[i] += 1;
                self.retained += 1;
            }
            (None, None) => {}
        }
    }

    /// `Effect::TreeDeleted` (only terminal trees are deleted).
    pub(crate) fn deleted(&mut self, tasks: usize) {
        self.retained -= tasks as i64;
    }
}

const HANDLERS: usize = 0;
const EXTERNAL: usize = 1;

/// A runtime's counters: one [`ToolStats`] per tool label, resolved once
/// per tree, and the handler gauges.
#[derive(Debug)]
pub struct Stats {
    tools: RwLock<HashMap<Arc<str>, Arc<ToolStats>>>,
    /// Trees without a label (started through the library, not a server
    /// tool); such a tree holds no `Arc` of it (see `Stats::tool`).
    pub(crate) unlabeled: ToolStats,
    /// Handlers started and not returned; handlers inside `external`.
    gauges: Sharded,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            tools: RwLock::default(),
            unlabeled: ToolStats::default(),
            gauges: Sharded::new(2),
        }
    }
}

impl Stats {
    /// The counters of `label`'s trees, created on first use. Called once
    /// per tree; the label set is the server's tools (and, after a restart,
    /// the tool names stored with the trees), so it stays small.
    /// `None` for an unlabeled tree: it counts in `unlabeled`, which no
    /// tree holds a reference count of (a shared count would be two
    /// contended atomic operations per tree).
    pub(crate) fn tool(&self, label: Option<&Arc<str>>) -> Option<Arc<ToolStats>> {
        let label = label?;
        if let Some(t) = self.tools.read().get(label) {
            return Some(t.clone());
        }
        Some(
            self.tools
                .write()
                .entry(label.clone())
                .or_insert_with(|| Arc::new(ToolStats::labeled(label.clone())))
                .clone(),
        )
    }

    /// A handler started: counted until [`Stats::handler_stopped`] (its
    /// supervisor keeps no guard, which would borrow the runtime).
    pub(crate) fn handler_running(&self) {
        self.gauges.add(HANDLERS, 1);
    }

    /// A handler counted by [`Stats::handler_running`] exited (or its
    /// supervisor was dropped).
    pub(crate) fn handler_stopped(&self) {
        self.gauges.add(HANDLERS, u64::MAX);
    }

    /// A handler entered `ctx.external`: counted until
    /// [`Stats::external_left`].
    pub(crate) fn external_entered(&self) {
        self.gauges.add(EXTERNAL, 1);
    }

    /// A handler left `ctx.external` (or dropped its wait).
    pub(crate) fn external_left(&self) {
        self.gauges.add(EXTERNAL, u64::MAX);
    }

    /// Every tool's counters now, by label (`None`: unlabeled trees),
    /// sorted by label.
    pub fn tools(&self) -> Vec<(Option<Arc<str>>, ToolSnapshot)> {
        let mut out: Vec<(Option<Arc<str>>, ToolSnapshot)> = self
            .tools
            .read()
            .iter()
            .map(|(l, t)| (Some(l.clone()), t.snapshot()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        let unlabeled = self.unlabeled.snapshot();
        if unlabeled.created > 0 || unlabeled.retained != 0 || unlabeled.live.iter().any(|n| *n != 0) {
            out.push((None, unlabeled));
        }
        out
    }

    /// Handlers started and not yet returned (running or parked).
    pub fn handlers(&self) -> usize {
        usize::try_from(self.gauges.sum(HANDLERS) as i64).unwrap_or(0)
    }

    /// Handlers inside `ctx.external` now.
    pub fn external(&self) -> usize {
        usize::try_from(self.gauges.sum(EXTERNAL) as i64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(i: u32) -> Slot {
        Slot(i)
    }

    #[test]
    fn a_task_created_and_ended_counts_once_in_each_place() {
        let mut d = StatsDelta::default();
        d.created(s(1));
        d.changed(s(0), TaskStatus::Working, TaskStatus::Working);
        d.changed(s(1), TaskStatus::Working, TaskStatus::Working);
        assert_eq!((d.created, d.live), (1, [1, 0, 0]));
        d.changed(s(1), TaskStatus::Working, TaskStatus::Paused);
        assert_eq!(d.live, [0, 0, 1]);
        d.changed(s(1), TaskStatus::Paused, TaskStatus::Cancelled);
        assert_eq!((d.live, d.ended, d.retained), ([0, 0, 0], [0, 0, 1], 1));
        d.changed(s(1), TaskStatus::Cancelled, TaskStatus::Cancelled);
        d.deleted(1);
        assert_eq!((d.live, d.ended, d.retained), ([0, 0, 0], [0, 0, 1], 0));
        let t = ToolStats::default();
        t.apply(&d);
        let snap = t.snapshot();
        assert_eq!(
            (snap.created, snap.ended, snap.live, snap.retained),
            (1, [0, 0, 1], [0; 3], 0)
        );
    }

    #[test]
    fn status_indices_follow_the_label_arrays() {
        for (i, s) in LIVE_STATUSES.iter().enumerate() {
            assert_eq!(live_index(*s), Some(i));
            assert_eq!(terminal_index(*s), None);
        }
        for (i, s) in TERMINAL_STATUSES.iter().enumerate() {
            assert_eq!(terminal_index(*s), Some(i));
            assert_eq!(live_index(*s), None);
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_count_is_their_total() {
        let h = Histogram::new(&[1.0, 10.0], 1.0);
        for n in [0, 1, 5, 10, 11, 100] {
            h.observe_count(n);
        }
        let snap = h.snapshot();
        assert_eq!(snap.buckets, vec![(1.0, 2), (10.0, 4)]);
        assert_eq!((snap.count, snap.sum), (6, 127.0));
        let d = Histogram::new(HANDLER_SECONDS_BUCKETS, 1e-9);
        d.observe_duration(Duration::from_millis(30));
        let snap = d.snapshot();
        assert_eq!(snap.buckets[2], (0.025, 0));
        assert_eq!(snap.buckets[3], (0.1, 1));
        assert!((snap.sum - 0.03).abs() < 1e-9);
    }

    #[test]
    fn a_tool_resolves_to_the_same_counters_every_time() {
        let stats = Stats::default();
        let a: Arc<str> = Arc::from("fanout");
        assert!(Arc::ptr_eq(
            &stats.tool(Some(&a)).unwrap(),
            &stats.tool(Some(&Arc::from("fanout"))).unwrap()
        ));
        assert!(stats.tool(None).is_none());
        stats.external_entered();
        assert_eq!(stats.external(), 1);
        stats.external_left();
        assert_eq!(stats.external(), 0);
    }
}
