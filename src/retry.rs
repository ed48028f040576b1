//! One backoff for every retry loop of the crate: exponential, capped, and
//! with jitter (backon's `ExponentialBuilder`), so that processes retrying
//! after the same outage (cluster instances reconnecting to a restarted
//! PostgreSQL, clients polling a server that went away) spread out instead
//! of arriving together.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Endless retry delays: the first about `min`, each next about twice the
/// one before, each stretched by a random part of itself, none above `max`.
pub(crate) struct Backoff {
    delays: ExponentialBackoff,
    max: Duration,
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        // Jitter adds up to the delay itself: the cap holds after it.
        Some(self.delays.next().unwrap_or(self.max).min(self.max))
    }
}

impl std::fmt::Debug for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backoff")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// The delays of a retry loop from `min` to `max`.
pub(crate) fn delays(min: Duration, max: Duration) -> Backoff {
    Backoff {
        delays: ExponentialBuilder::new()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_jitter()
            .without_max_times()
            .build(),
        max,
    }
}

/// The delay before retry number `attempt` (1 for the first), for a loop
/// that counts its attempts instead of keeping a [`Backoff`].
#[cfg(feature = "client")]
pub(crate) fn nth(min: Duration, max: Duration, attempt: u32) -> Duration {
    delays(min, max)
        .nth(attempt.saturating_sub(1) as usize)
        .unwrap_or(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_with_jitter_and_stay_under_the_cap() {
        let (min, max) = (Duration::from_millis(10), Duration::from_millis(200));
        let d: Vec<Duration> = delays(min, max).take(12).collect();
        assert!(d[0] >= min && d[0] < min * 2, "{d:?}");
        assert!(d.iter().all(|x| *x <= max), "{d:?}");
        assert!(d[1] >= min * 2, "the second doubles: {d:?}");
        assert_eq!(*d.last().unwrap(), max, "capped: {d:?}");
        // Jitter: two runs of the same loop do not wait alike.
        let runs: Vec<Vec<Duration>> = (0..8).map(|_| delays(min, max).take(4).collect()).collect();
        assert!(runs.iter().any(|r| r != &runs[0]), "{runs:?}");
    }
}
