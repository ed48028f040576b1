//! Counters and histograms in shards, each on cache lines of its own: the
//! primitives of the runtime's statistics (`runtime::stats`) and the
//! stores' commit figures (`store::CommitStats`). A thread counts in its own
//! shard and a read sums them, so threads counting at once never bounce a
//! cache line between cores.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Shards of every counter: a thread counts in shard `i % SHARDS` where
/// `i` numbers threads in the order they first count.
pub const SHARDS: usize = 16;

/// Counters per cache line (128 bytes: two 64-byte lines, as adjacent
/// lines are fetched in pairs).
const PER_LINE: usize = 16;

#[derive(Debug, Default)]
#[repr(align(128))]
struct Line([AtomicU64; PER_LINE]);

/// This thread's shard.
pub(crate) fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// `n` counters, sharded: each shard on lines of its own. Counters wrap,
/// so a signed gauge is a counter read as `i64`.
#[derive(Debug)]
pub(crate) struct Sharded {
    n: usize,
    lines_per_shard: usize,
    lines: Box<[Line]>,
}

impl Sharded {
    pub(crate) fn new(n: usize) -> Self {
        let lines_per_shard = n.div_ceil(PER_LINE).max(1);
        Sharded {
            n,
            lines_per_shard,
            lines: (0..SHARDS * lines_per_shard).map(|_| Line::default()).collect(),
        }
    }

    pub(crate) fn cell(&self, shard: usize, i: usize) -> &AtomicU64 {
        &self.lines[shard * self.lines_per_shard + i / PER_LINE].0[i % PER_LINE]
    }

    /// Adds `delta` (wrapping) to counter `i` in this thread's shard.
    pub(crate) fn add(&self, i: usize, delta: u64) {
        debug_assert!(i < self.n);
        self.cell(shard(), i).fetch_add(delta, Ordering::Relaxed);
    }

    /// Counter `i` summed over the shards.
    pub(crate) fn sum(&self, i: usize) -> u64 {
        (0..SHARDS).fold(0u64, |acc, s| {
            acc.wrapping_add(self.cell(s, i).load(Ordering::Relaxed))
        })
    }
}

/// A histogram of fixed buckets, kept with relaxed atomics: one add to a
/// bucket and one to the sum per observation (in the thread's shard). The
/// count is the sum of the buckets, so a scrape never sees a count that
/// disagrees with them.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative; the last is `+Inf`), then
    /// the sum of the observations in `scale` units.
    cells: Sharded,
    /// What one unit of the sum is worth (1e-9 for nanoseconds).
    scale: f64,
}

/// A histogram as read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// Cumulative counts: (upper bound, observations at or below it); the
    /// `+Inf` bucket is `count`.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// The sum of the observations (seconds, or items).
    pub sum: f64,
}

impl Histogram {
    /// A histogram with `bounds` (ascending) whose sum is kept in units of
    /// `scale` (a duration histogram keeps nanoseconds: `1e-9`).
    pub fn new(bounds: &'static [f64], scale: f64) -> Self {
        Histogram {
            bounds,
            cells: Sharded::new(bounds.len() + 2),
            scale,
        }
    }

    /// Records a duration (a histogram made with `scale` 1e-9).
    pub fn observe_duration(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.observe_units(d.as_secs_f64(), nanos);
    }

    /// Records a count (a histogram made with `scale` 1).
    pub fn observe_count(&self, n: u64) {
        self.observe_units(n as f64, n);
    }

    fn observe_units(&self, value: f64, units: u64) {
        let i = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        let s = shard();
        self.cells.cell(s, i).fetch_add(1, Ordering::Relaxed);
        self.cells
            .cell(s, self.bounds.len() + 1)
            .fetch_add(units, Ordering::Relaxed);
    }

    /// The histogram now.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = Vec::with_capacity(self.bounds.len());
        let mut seen = 0u64;
        for (i, b) in self.bounds.iter().enumerate() {
            seen += self.cells.sum(i);
            buckets.push((*b, seen));
        }
        seen += self.cells.sum(self.bounds.len());
        HistogramSnapshot {
            buckets,
            count: seen,
            sum: self.cells.sum(self.bounds.len() + 1) as f64 * self.scale,
        }
    }
}
