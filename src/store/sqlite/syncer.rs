//! The fsync stage of group commit.

use std::fs::File;

use parking_lot::{Condvar, Mutex};

use super::Shared;
use crate::store::{StoreError, Ticket};

/// The second stage of group commit: the writer commits a group to the
/// write-ahead log without waiting for the disk and goes on with the next
/// group, while this stage fsyncs the log and releases the writers of
/// every commit the fsync covered. The inserts of one group overlap the
/// fsync of the previous one, and one fsync covers every commit made
/// while the previous fsync ran.
pub(super) struct Syncer {
    /// The write-ahead log, opened a second time: an fsync flushes the
    /// file's data whichever descriptor wrote it.
    pub(super) wal: File,
    pub(super) state: Mutex<SyncState>,
    pub(super) wake: Condvar,
}

#[derive(Default)]
pub(super) struct SyncState {
    /// The last ticket committed to the log.
    pub(super) committed: u64,
    /// The writer stopped: sync what is committed and stop too.
    pub(super) closing: bool,
}

/// Fsyncs the write-ahead log whenever something was committed since the
/// last fsync began, then releases the writers of everything committed
/// before it began. Stops after the writer, once everything it committed
/// is synced (or a sync failed: every later ticket then fails too).
pub(super) fn syncer_loop(shared: &Shared) {
    let Some(sync) = &shared.sync else { return };
    let mut synced = 0u64;
    // Batches released by the fsync before the last one: under a closed
    // loop those writers are coming back now, and the next fsync should
    // cover them all rather than whichever of them committed first.
    let (mut released_before, mut released_last) = (0u64, 0u64);
    let mut stats = SyncStats::default();
    loop {
        let tw = std::time::Instant::now();
        let target = {
            let mut st = sync.state.lock();
            while st.committed == synced && !st.closing {
                sync.wake.wait(&mut st);
            }
            if st.committed == synced {
                stats.report(synced);
                return;
            }
            // The disk is idle: wait a little for the rest of the returning
            // group (bounded; a group that does not come back costs at most
            // GATHER_MAX, and a pause in arrivals ends the wait early).
            let want = synced + released_before;
            let until = tw + GATHER_MAX;
            while st.committed < want && !st.closing {
                let before = st.committed;
                let deadline = (std::time::Instant::now() + GATHER_IDLE).min(until);
                let timed_out = sync.wake.wait_until(&mut st, deadline).timed_out();
                if timed_out && (st.committed == before || std::time::Instant::now() >= until) {
                    break;
                }
            }
            st.committed
        };
        stats.waiting += tw.elapsed();
        let t0 = std::time::Instant::now();
        let r = sync.wal.sync_data();
        let took = t0.elapsed();
        stats.syncing += took;
        stats.syncs += 1;
        if let Err(e) = r {
            let e = StoreError::Io(format!("fsync of the write-ahead log failed: {e}"));
            tracing::error!(error = %e, "the store cannot make commits durable; no further writes are accepted");
            shared.queue.mark.fail(Ticket(synced + 1), e);
            return;
        }
        shared.stats.synced(took);
        shared.queue.mark.advance(Ticket(target));
        released_before = released_last;
        released_last = target - synced;
        synced = target;
    }
}

/// How long the syncer waits, when the disk is idle, for the writers it
/// released one fsync ago to commit again: at most this long in all...
const GATHER_MAX: std::time::Duration = std::time::Duration::from_micros(400);
/// ...and at most this long without a new commit.
const GATHER_IDLE: std::time::Duration = std::time::Duration::from_micros(100);

/// The syncer's timings, printed when `SUBTASK_STORE_DEBUG` is set.
#[derive(Default)]
struct SyncStats {
    syncs: u64,
    syncing: std::time::Duration,
    waiting: std::time::Duration,
}

impl SyncStats {
    fn report(&self, synced: u64) {
        if std::env::var_os("SUBTASK_STORE_DEBUG").is_none() {
            return;
        }
        let n = self.syncs.max(1) as f64;
        eprintln!(
            "# store syncer: {} fsyncs, {:.1} batches each, {:.0} us per fsync, {:.0} us waiting for commits",
            self.syncs,
            synced as f64 / n,
            self.syncing.as_secs_f64() * 1e6 / n,
            self.waiting.as_secs_f64() * 1e6 / n
        );
    }
}
