//! Draining: what a server does with its handlers on SIGTERM (a deploy).
//!
//! [`Runtime::drain`] stops every handler of a durable tree at its next
//! safe point (a checkpoint, the start of a step, a wait for input or for a
//! subtask) and starts no queued handler; it resolves once no handler is
//! between safe points (or the time is up), with everything recorded made
//! durable. What was stopped resumes in place on the next start (or on
//! another instance of a cluster, once this one leaves): its finished steps
//! and subtasks are not run again, and it had nothing unrecorded in flight.
//!
//! A handler of a durable tree counts as *busy* from its start to its
//! exit, except while it waits at a safe point. Handlers of trees that are
//! not durable are neither stopped nor waited for (they cannot resume: they
//! run on until the process exits, and the restart fails them), so the
//! drain costs them nothing.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::Runtime;
use super::inner::Inner;

/// The drain's shared state (in `Inner`).
#[derive(Default)]
pub(crate) struct DrainState {
    draining: AtomicBool,
    /// Handlers running code between safe points.
    busy: AtomicUsize,
    /// Woken when `busy` falls while draining.
    changed: Notify,
}

impl DrainState {
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// A handler starts (busy until it exits or waits at a safe point).
    pub(crate) fn handler_started(&self) {
        self.busy.fetch_add(1, Ordering::AcqRel);
    }

    /// A handler exits.
    pub(crate) fn handler_exited(&self) {
        self.idle();
    }

    fn idle(&self) {
        self.busy.fetch_sub(1, Ordering::AcqRel);
        if self.is_draining() {
            self.changed.notify_waiters();
        }
    }
}

/// A handler waiting at a safe point: not busy until dropped.
pub(crate) struct AtSafePoint<'a>(&'a DrainState);

impl<'a> AtSafePoint<'a> {
    pub(crate) fn enter(inner: &'a Inner) -> Self {
        inner.drain.idle();
        AtSafePoint(&inner.drain)
    }
}

impl Drop for AtSafePoint<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_add(1, Ordering::AcqRel);
    }
}

/// What [`Runtime::drain`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    /// Handlers still between safe points when the time was up (0 when the
    /// drain completed): what they did since their last step runs again.
    pub busy: usize,
    /// How long the drain took.
    pub elapsed: Duration,
    /// Whether everything recorded is durable.
    pub durable: bool,
}

impl Runtime {
    /// Drains the runtime (see the module documentation): handlers of
    /// durable trees stop at their next safe point, no queued handler
    /// starts, and this resolves once no handler is between safe points or
    /// after `within`, with every write submitted so far durable. The
    /// runtime keeps answering reads and commands meanwhile; call it once,
    /// on shutdown: a drained runtime does not start handlers again.
    pub async fn drain(&self, within: Duration) -> DrainReport {
        let started = tokio::time::Instant::now();
        let drain = &self.inner.drain;
        drain.draining.store(true, Ordering::Release);
        let deadline = started + within;
        loop {
            let changed = drain.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if drain.busy.load(Ordering::Acquire) == 0 {
                break;
            }
            tokio::select! {
                () = &mut changed => {}
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        let busy = drain.busy.load(Ordering::Acquire);
        let durable = match &self.inner.store {
            Some(store) => store.wait_durable(store.last_ticket()).await.is_ok(),
            None => true,
        };
        DrainReport {
            busy,
            elapsed: started.elapsed(),
            durable,
        }
    }

    /// Whether [`Runtime::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.inner.drain.is_draining()
    }
}
