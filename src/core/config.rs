//! Configuration of a forest: limits and the deletion grace.

/// Limits enforced by the core. Each has a safe default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest allowed subtask (the root is depth 0).
    pub max_depth: u32,
    /// Children per task.
    pub max_children: u32,
    /// Undelivered steer messages per task.
    pub max_steer_queue: u32,
    /// Bytes per steer message.
    pub max_steer_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 16,
            max_children: 10_000,
            max_steer_queue: 256,
            max_steer_bytes: 16 * 1024,
        }
    }
}

/// Configuration of a [`Forest`](super::Forest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForestConfig {
    /// Limits.
    pub limits: Limits,
    /// How long a tree stays retrievable after its root's TTL elapsed, in
    /// milliseconds, before it is deleted whole.
    pub deletion_grace_ms: u64,
}

impl Default for ForestConfig {
    fn default() -> Self {
        ForestConfig {
            limits: Limits::default(),
            deletion_grace_ms: 60_000,
        }
    }
}
