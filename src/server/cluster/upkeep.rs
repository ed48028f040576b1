//! What the takeover loop also does on its own schedules: sharing live-task
//! counts, so a principal's limit holds across the cluster, and cleaning up
//! rows nobody needs any more.

use std::sync::Arc;

use super::Node;
use crate::server::Server;
use crate::store::StoreError;
use crate::store::postgres::cluster as db;

/// Publishes this instance's live tasks per principal and reads the
/// others' (live instances only), so a principal's limit on live tasks
/// holds across the cluster, up to what others created since they last
/// published (a third of a lease).
pub(super) async fn share_live_counts(node: &Arc<Node>, server: &Server) -> Result<(), StoreError> {
    let me = node.instance;
    let (names, counts): (Vec<String>, Vec<i64>) = server.inner.owners.live_counts().into_iter().unzip();
    let others = node
        .blocking(move |c| db::share_live_counts(c, me, &names, &counts))
        .await?;
    server.inner.owners.set_elsewhere(&others);
    Ok(())
}

/// Deletes answers nobody collected (the requester died), the live counts
/// of revoked instances, and instances that are gone and hold nothing.
pub(super) async fn collect_garbage(node: &Arc<Node>) {
    if let Err(e) = node.blocking(|c| db::collect_garbage(c)).await {
        tracing::warn!(error = %e, "cleaning up the inbox failed");
    }
}

/// Released trees deleted per transaction of a sweep.
const SWEEP_BATCH: i64 = 64;

/// Deletes the finished trees let go of from memory (by any instance) whose
/// deletion time has come, a batch per transaction (`docs/scale-out.md`,
/// "Finished trees").
pub(super) async fn sweep_released(node: &Arc<Node>) -> Result<usize, StoreError> {
    let mut swept = 0;
    loop {
        let now = crate::store::now_ms();
        let n = node
            .blocking(move |c| db::sweep_released(c, now, SWEEP_BATCH))
            .await?;
        swept += n;
        if n < SWEEP_BATCH as usize {
            return Ok(swept);
        }
    }
}
