//! Workers in a cluster (`docs/workers.md`, "Workers in a cluster"): this
//! instance publishes the tools its workers serve, reads what the others'
//! serve, and passes the worker protocol's news between the instance that
//! holds a task and the one whose worker runs it, through PostgreSQL like
//! every other channel between instances (`crate::store::postgres::workers`).
//! The hub (`crate::server::workers`) decides what to send; this loop
//! carries it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::Node;
use crate::server::workers::Hub;
use crate::store::postgres::workers as db;

/// Carries worker news until `node` is stopped or fenced, or the hub takes
/// another relay (a later incarnation's): sends what the hub queued (in
/// order, retried until the database takes it), publishes the tools this
/// instance's workers serve whenever they change, reads the others' when
/// one notifies and every third of a lease, and hands the hub the news
/// stored for this instance whenever some is notified (and at every
/// refresh, in case a notification was missed).
pub(super) async fn relay_loop(
    node: Arc<Node>,
    hub: Arc<Hub>,
    mut outgoing: mpsc::UnboundedReceiver<(uuid::Uuid, String)>,
) {
    let me = node.instance;
    let refresh_every = (node.config.lease / 3).max(Duration::from_millis(100));
    let mut next_refresh = tokio::time::Instant::now();
    let mut pending: Vec<(uuid::Uuid, String)> = Vec::new();
    let (mut publish, mut take) = (true, true);
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        if node.stopped.load(Ordering::Acquire) || node.is_fenced() {
            return;
        }
        let now = tokio::time::Instant::now();
        if retry_at.is_none_or(|t| now >= t) {
            retry_at = None;
            if !pending.is_empty() {
                let batch = std::mem::take(&mut pending);
                let (to, bodies): (Vec<uuid::Uuid>, Vec<String>) = batch.iter().cloned().unzip();
                if let Err(e) = node.blocking(move |c| db::send(c, &to, &bodies)).await {
                    tracing::warn!(error = %e, "passing worker news to another instance failed; retrying");
                    pending = batch;
                    retry_at = Some(now + Duration::from_millis(200));
                }
            }
            if std::mem::take(&mut publish) {
                let (names, decls) = hub.served();
                if let Err(e) = node.blocking(move |c| db::publish(c, me, &names, &decls)).await {
                    tracing::warn!(error = %e, "publishing this instance's worker tools failed; retrying");
                    publish = true;
                    retry_at = Some(now + Duration::from_millis(200));
                }
            }
            if now >= next_refresh {
                next_refresh = now + refresh_every;
                take = true;
                match node.blocking(move |c| db::served(c, me)).await {
                    Ok((tools, live)) => hub.set_remote(tools, &live),
                    Err(e) => {
                        tracing::warn!(error = %e, "reading other instances' worker tools failed; retrying")
                    }
                }
            }
            if std::mem::take(&mut take) {
                match node.blocking(move |c| db::take(c, me)).await {
                    Ok(bodies) => {
                        for body in bodies {
                            hub.deliver(&body);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading worker news from other instances failed; retrying");
                        take = true;
                        retry_at = Some(now + Duration::from_millis(200));
                    }
                }
            }
        }
        let wake = retry_at.map_or(next_refresh, |t| t.min(next_refresh));
        tokio::select! {
            m = outgoing.recv() => match m {
                Some(m) => {
                    pending.push(m);
                    while let Ok(m) = outgoing.try_recv() {
                        pending.push(m);
                    }
                }
                // The hub took another relay.
                None => return,
            },
            () = node.worker_mail.notified() => take = true,
            () = node.worker_tools.notified() => next_refresh = tokio::time::Instant::now(),
            () = hub.changed.notified() => publish = true,
            () = node.fenced() => return,
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}
