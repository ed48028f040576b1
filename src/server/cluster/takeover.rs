//! Takeover: the loop every instance runs while it serves, which looks for
//! dead instances a few times per lease (revokes expired leases, claims the
//! trees of revoked instances a batch at a time and brings them back as a
//! restart does), shares live-task counts, deletes finished trees past
//! their deletion time and cleans up on its own schedules (`upkeep.rs`),
//! and applies the commands waiting in the inbox
//! for this instance's trees (`inbox.rs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Node;
use super::inbox::drain_inbox;
use super::upkeep::{collect_garbage, share_live_counts, sweep_released};
use crate::model::TaskId;
use crate::server::{Server, ServerInner};
use crate::store::StoreError;
use crate::store::postgres::{cluster as db, read_trees};

/// Runs until `node` is stopped or lost, or its server is gone: a look
/// for dead instances every lease/10 (clamped to 100 ms–1 s), live counts
/// shared and finished trees past their deletion time swept every third
/// of a lease, a cleanup every minute, and the inbox
/// drained whenever a command arrives (and at every look).
pub(super) async fn work_loop(node: Arc<Node>, server: Weak<ServerInner>) {
    let scan_every = (node.config.lease / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut next_scan = tokio::time::Instant::now();
    let mut next_gc = tokio::time::Instant::now() + Duration::from_secs(60);
    let publish_every = node.config.lease / 3;
    let mut next_publish = tokio::time::Instant::now();
    let mut unsure = false;
    loop {
        tokio::select! {
            () = node.inbox.notified() => {}
            () = tokio::time::sleep_until(next_scan) => {}
        }
        if node.stopped.load(Ordering::Acquire) || !node.serving() {
            return;
        }
        let Some(inner) = server.upgrade() else { return };
        let server = Server { inner };
        if tokio::time::Instant::now() >= next_scan {
            next_scan = tokio::time::Instant::now() + scan_every;
            if let Err(e) = take_over(&node, &server, &mut unsure).await {
                tracing::warn!(error = %e, "looking for dead instances failed; retrying");
            }
            if tokio::time::Instant::now() >= next_publish {
                next_publish = tokio::time::Instant::now() + publish_every;
                if let Err(e) = share_live_counts(&node, &server).await {
                    tracing::warn!(error = %e, "sharing live-task counts failed; retrying");
                }
                if let Err(e) = sweep_released(&node).await {
                    tracing::warn!(error = %e, "deleting finished trees past their deletion time failed; retrying");
                }
            }
            if tokio::time::Instant::now() >= next_gc {
                next_gc = tokio::time::Instant::now() + Duration::from_secs(60);
                collect_garbage(&node).await;
            }
        }
        if let Err(e) = drain_inbox(&node, &server).await {
            tracing::warn!(error = %e, "applying commands from other instances failed; retrying");
        }
    }
}

/// Revokes expired leases, then claims and brings back the trees of
/// revoked instances, a batch at a time.
///
/// `unsure` is set while a claim is under way and cleared once what it
/// claimed is loaded. A claim that failed may have claimed trees all the
/// same (its commit went through and its reply was lost), and a load that
/// failed leaves claimed trees unloaded: trees this instance holds and
/// nobody runs, since no later claim takes a tree from a live holder. So
/// after a failure, the next look first loads the trees this instance holds
/// that its runtime does not.
async fn take_over(node: &Arc<Node>, server: &Server, unsure: &mut bool) -> Result<(), StoreError> {
    let me = node.instance;
    let expired = node.blocking(move |c| db::expired_instances(c, me)).await?;
    for dead in expired {
        // A stalled instance may hold its row's share lock in a commit
        // that never ends (the process is stopped mid-transaction): its
        // sessions are ended first (the transaction rolls back: nothing of
        // it was acknowledged), so the revoke does not wait for the process
        // to run again. The revoke waits at most a little for a commit that
        // is finishing; else the next look tries again.
        let revoked = node
            .blocking(move |c| {
                // Best effort: a role without the right to end them (not
                // the same role, no pg_signal_backend) still revokes, after
                // the lock wait.
                if let Err(e) = db::end_sessions(c, dead) {
                    tracing::warn!(instance = %dead, error = %e, "cannot end a dead instance's sessions");
                }
                db::revoke_expired(c, dead)
            })
            .await;
        match revoked {
            Ok(1) => tracing::warn!(instance = %dead, "an instance's lease expired; taking over its trees"),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(instance = %dead, error = %e, "revoking an expired instance failed; trying again")
            }
        }
    }
    if *unsure {
        let held = node.blocking(move |c| db::held_roots(c, me)).await?;
        let rt = &server.inner.runtime;
        let unloaded: Vec<uuid::Uuid> = held
            .into_iter()
            .filter(|r| rt.root_of_task(TaskId::from_u128(r.as_u128())).is_none())
            .collect();
        if !unloaded.is_empty() {
            let report = load(node, server, unloaded).await?;
            tracing::warn!(%report, "loaded trees an interrupted takeover had claimed");
        }
        *unsure = false;
    }
    loop {
        if !node.serving() {
            return Ok(());
        }
        let epoch = node.epoch;
        *unsure = true;
        // Fenced like a commit: a claim by an instance that lost its own
        // lease is not made.
        let claimed = node.blocking(move |c| db::claim_trees(c, me, epoch)).await?;
        let Some(claimed) = claimed else {
            node.lose("a takeover found this instance revoked");
            return Ok(());
        };
        if claimed.is_empty() {
            *unsure = false;
            return Ok(());
        }
        let report = load(node, server, claimed).await?;
        *unsure = false;
        tracing::info!(%report, "took over trees of a dead instance");
    }
}

/// Reads the trees `roots` this instance now holds and brings them back as
/// a restart does, then applies the commands waiting for them.
async fn load(
    node: &Arc<Node>,
    server: &Server,
    roots: Vec<uuid::Uuid>,
) -> Result<crate::runtime::RecoveryReport, StoreError> {
    let trees = node
        .blocking(move |c| Ok(read_trees(c, Some(roots.as_slice()))))
        .await??;
    let report = server.adopt(trees).await?;
    node.inbox.notify_one();
    Ok(report)
}
