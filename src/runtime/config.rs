//! Runtime configuration.

use std::time::Duration;

use crate::core::ForestConfig;

/// Configuration of a [`Runtime`](super::Runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Limits and deletion grace of every tree.
    pub forest: ForestConfig,
    /// Handlers allowed to run at once across all trees. Handlers parked at a
    /// safe point, awaiting input or awaiting a subtask do not count.
    pub max_running: usize,
    /// Handlers allowed to run at once within one tree, so one huge fan-out
    /// cannot take every slot.
    pub max_running_per_tree: usize,
    /// How long a handler may ignore a cancel request before it is aborted
    /// and recorded as cancelled.
    pub cancel_grace: Duration,
    /// Poll interval suggested for root tasks that do not set one.
    pub default_poll_interval_ms: Option<u64>,
    /// How long a finished tree (its root terminal) stays in memory once
    /// every change of it is durable, when the runtime's store answers for
    /// finished trees ([`TaskStore::lets_finished_go`](crate::store::TaskStore::lets_finished_go):
    /// the SQLite store, and a cluster member's PostgreSQL store): after it the runtime lets the tree go, the store
    /// keeps it until its deletion time and deletes it then, and the
    /// runtime no longer answers for it ([`Runtime::get`](super::Runtime::get)
    /// gives `None`; the server answers from the store). So a server's
    /// memory follows its live work, not its history
    /// (`docs/durability.md`, "Finished trees"). `None` (the default)
    /// keeps finished trees in memory until their deletion.
    pub release_finished_after: Option<Duration>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            forest: ForestConfig::default(),
            max_running: 1024,
            max_running_per_tree: 64,
            cancel_grace: Duration::from_secs(5),
            default_poll_interval_ms: Some(1000),
            release_finished_after: None,
        }
    }
}
