//! A deadline past which a runtime's handlers stop running and a store
//! writes nothing more: how a cluster instance that lost its lease (by its
//! own monotonic clock) stops running the trees another instance may take
//! over, and fences its writes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A lease deadline on this process's monotonic clock. While it is in the
/// past, [`LeaseGate::valid`] is false and the runtime it is installed in
/// ([`Runtime::set_lease`](crate::runtime::Runtime::set_lease)) polls no handler:
/// each is frozen where it is, for good (a cluster instance then fences
/// itself and rejoins with a new runtime and a new gate). Cheap to check
/// (one clock read and one atomic load).
#[derive(Debug)]
pub struct LeaseGate {
    base: Instant,
    /// Nanoseconds after `base` until which the lease holds.
    until_ns: AtomicU64,
}

impl LeaseGate {
    /// A gate valid until `deadline`.
    pub fn new(deadline: Instant) -> Self {
        let base = Instant::now();
        let gate = LeaseGate {
            base,
            until_ns: AtomicU64::new(0),
        };
        gate.extend_to(deadline);
        gate
    }

    /// Moves the deadline to `deadline` (never earlier than it is: a late
    /// renewal cannot shorten a lease already granted).
    pub fn extend_to(&self, deadline: Instant) {
        let ns = u64::try_from(deadline.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX);
        self.until_ns.fetch_max(ns, Ordering::AcqRel);
    }

    /// Ends the lease now: nothing runs from here on.
    pub fn revoke(&self) {
        self.until_ns.store(0, Ordering::Release);
    }

    /// Whether the lease still holds.
    pub fn valid(&self) -> bool {
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        now < self.until_ns.load(Ordering::Acquire)
    }

    /// Time left (zero once lapsed).
    pub fn remaining(&self) -> Duration {
        let until = self.until_ns.load(Ordering::Acquire);
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(until.saturating_sub(now))
    }
}
