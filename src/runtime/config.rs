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
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            forest: ForestConfig::default(),
            max_running: 1024,
            max_running_per_tree: 64,
            cancel_grace: Duration::from_secs(5),
            default_poll_interval_ms: Some(1000),
        }
    }
}
