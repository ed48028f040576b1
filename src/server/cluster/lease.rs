//! The lease: a thread renews this incarnation's lease every third of it,
//! on a connection of its own (a renewal must not queue behind commits or
//! reads), and marks the incarnation lost when the lease lapsed by this
//! process's clock or the renewal found its row revoked or superseded.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Node;
use crate::store::postgres::cluster as db;

/// Renews `node`'s lease until it is stopped or lost (blocking; the
/// `subtask-lease` thread). The lease is taken from the moment before the
/// renewal is sent, so by this process's clock it ends no later than the
/// database's `lease_until`.
pub(super) fn lease_loop(node: &Node) {
    let lease = node.config.lease;
    let period = lease / 3;
    let mut conn = node.pool.connector().dedicated();
    loop {
        if node.stopped.load(Ordering::Acquire) {
            return;
        }
        if !node.gate.valid() {
            node.lose(&format!("no renewal within its lease of {lease:?}"));
            return;
        }
        let sent = Instant::now();
        // A failed renewal drops the connection: the next opens a new one.
        let renewed = conn.run(|c| db::renew_lease(c, node.instance, node.epoch, lease));
        match renewed {
            Ok(1) => {
                node.gate.extend_to(sent + lease);
                std::thread::sleep(period);
            }
            Ok(_) => {
                node.lose("its instance row was revoked or taken by a newer process with the same id");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, left_ms = node.gate.remaining().as_millis() as u64, "renewing the lease failed; retrying");
                std::thread::sleep(Duration::from_millis(100).min(period));
            }
        }
    }
}
