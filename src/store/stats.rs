//! What a store's writer counts per group commit, for operators
//! (`/metrics`): commit durations, batches per commit, and the fsyncs of a
//! stage of their own.

use std::time::Duration;

use crate::sharded::{Histogram, HistogramSnapshot};

/// Upper bounds (seconds) of the store commit histogram: 50 us to 2.5 s.
pub const COMMIT_SECONDS_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 2.5,
];

/// Upper bounds of the store group size histogram (batches per commit).
pub const GROUP_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0];

/// What a store's writer counts per group commit: how long the commit
/// took and how many batches (commands) it carried. Kept by the SQLite and
/// PostgreSQL writers ([`TaskStore::commit_stats`](super::TaskStore::commit_stats)).
#[derive(Debug)]
pub struct CommitStats {
    duration: Histogram,
    group: Histogram,
    sync: Histogram,
}

impl Default for CommitStats {
    fn default() -> Self {
        CommitStats {
            duration: Histogram::new(COMMIT_SECONDS_BUCKETS, 1e-9),
            group: Histogram::new(GROUP_SIZE_BUCKETS, 1.0),
            sync: Histogram::new(COMMIT_SECONDS_BUCKETS, 1e-9),
        }
    }
}

impl CommitStats {
    /// Records one committed group of `batches` batches that took `took`.
    pub fn committed(&self, took: Duration, batches: usize) {
        self.duration.observe_duration(took);
        self.group.observe_count(batches as u64);
    }

    /// Records one fsync of a stage of its own (SQLite's syncer) that took
    /// `took`; commits the fsync covered become durable as it returns.
    pub fn synced(&self, took: Duration) {
        self.sync.observe_duration(took);
    }

    /// Durations of the fsyncs of a stage of its own (seconds).
    pub fn sync_duration(&self) -> HistogramSnapshot {
        self.sync.snapshot()
    }

    /// Commit durations (seconds).
    pub fn duration(&self) -> HistogramSnapshot {
        self.duration.snapshot()
    }

    /// Batches per commit.
    pub fn group_size(&self) -> HistogramSnapshot {
        self.group.snapshot()
    }
}
