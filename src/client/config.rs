//! Client configuration: timing and the limits that bound what a server
//! can make the client do or hold.

use std::time::Duration;

/// Bounds on what the client accepts from a server. Every one of them turns
/// into a [`Violation`](super::Violation) when crossed; none is a hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Tasks in one tree (root included).
    pub max_tasks: usize,
    /// Levels below the root.
    pub max_depth: u32,
    /// Children of one task.
    pub max_children: usize,
    /// Bytes of one response body, one SSE event or one stdio line.
    pub max_response_bytes: usize,
    /// Distinct input request keys one task may present over its life.
    pub max_input_requests_per_task: usize,
    /// `tasks/get` attempts for a child id that answers "not found" before
    /// it counts as dangling.
    pub dangling_attempts: u32,
    /// MRTR rounds of one `tools/call` before giving up.
    pub max_mrtr_rounds: u32,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_tasks: 100_000,
            max_depth: 64,
            max_children: 10_000,
            max_response_bytes: 16 << 20,
            max_input_requests_per_task: 1_000,
            dangling_attempts: 3,
            max_mrtr_rounds: 16,
        }
    }
}

/// Configuration of a [`Client`](super::Client).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Limits on what the server may send.
    pub limits: ClientLimits,
    /// Deadline of one request (not of a `subscriptions/listen` stream).
    pub request_timeout: Duration,
    /// Poll interval when the server suggests none.
    pub default_poll_interval: Duration,
    /// The shortest poll interval used, whatever the server suggests
    /// (`pollIntervalMs: 0` must not become a busy loop).
    pub min_poll_interval: Duration,
    /// The longest poll interval used, whatever the server suggests (a huge
    /// `pollIntervalMs` must not become a hang).
    pub max_poll_interval: Duration,
    /// `tasks/get` requests in flight at once while walking a tree.
    pub max_concurrent_polls: usize,
    /// Consecutive transient failures (connection, timeout, HTTP 5xx)
    /// tolerated while walking a tree before giving up.
    pub max_retries: u32,
    /// Open a `subscriptions/listen` stream for `notifications/tasks` while
    /// walking a tree (polling continues underneath).
    pub use_subscriptions: bool,
    /// A subscription stream silent (not even a keep-alive) for this long is
    /// dropped; polling carries on alone.
    pub subscription_idle_timeout: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            limits: ClientLimits::default(),
            request_timeout: Duration::from_secs(30),
            default_poll_interval: Duration::from_secs(1),
            min_poll_interval: Duration::from_millis(20),
            max_poll_interval: Duration::from_secs(30),
            max_concurrent_polls: 8,
            max_retries: 5,
            use_subscriptions: true,
            subscription_idle_timeout: Duration::from_secs(60),
        }
    }
}

impl ClientConfig {
    /// The poll interval for a task that suggested `suggested_ms`, clamped
    /// to `[min_poll_interval, max_poll_interval]`.
    pub fn poll_interval(&self, suggested_ms: Option<u64>) -> Duration {
        let d = suggested_ms.map_or(self.default_poll_interval, Duration::from_millis);
        d.clamp(
            self.min_poll_interval,
            self.max_poll_interval.max(self.min_poll_interval),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_intervals_are_clamped() {
        let c = ClientConfig::default();
        assert_eq!(c.poll_interval(Some(0)), c.min_poll_interval);
        assert_eq!(c.poll_interval(Some(u64::MAX)), c.max_poll_interval);
        assert_eq!(c.poll_interval(Some(250)), Duration::from_millis(250));
        assert_eq!(c.poll_interval(None), c.default_poll_interval);
    }
}
