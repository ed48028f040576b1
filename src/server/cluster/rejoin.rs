//! Fencing and rejoining (`docs/scale-out.md`, "Fencing and rejoining"):
//! an incarnation that lost its lease is fenced (its store writes nothing
//! more, its loops stop, its in-memory trees are dropped); unless another
//! process took its id, the instance registers again with a new epoch,
//! builds a new runtime on a new store, brings back the trees its id still
//! holds as a restart does, and serves as a new incarnation in its seat.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Node, Seat};
use crate::runtime::Runtime;
use crate::server::Server;
use crate::store::PostgresStore;
use crate::store::postgres::{Pool, cluster as db};

/// Watches the seat's incarnation; when it loses its lease, fences it and
/// rejoins as a new one, for as long as the seat lives and is not left.
pub(super) async fn supervise(seat: Weak<Seat>) {
    loop {
        let Some((server, node)) = seat.upgrade().map(|s| s.incarnation()) else {
            return;
        };
        node.fenced().await;
        if seat.upgrade().is_none_or(|s| s.leaving.load(Ordering::Acquire)) {
            return;
        }
        fence(&server, &node);
        // Another process registered with this id meanwhile: it is the
        // instance now (rejoining would fence it in turn).
        match superseded(&seat, &node).await {
            None => return,
            Some(true) => {
                tracing::error!(
                    instance = %node.instance,
                    epoch = node.epoch,
                    "another process registered with this instance id: this one stops"
                );
                if let Some(s) = seat.upgrade() {
                    s.ended.store(true, Ordering::Release);
                    s.end.notify_waiters();
                }
                return;
            }
            Some(false) => {}
        }
        let mut pauses = crate::retry::delays(Duration::from_millis(100), Duration::from_secs(1));
        let mut tries = 0u32;
        loop {
            let Some(s) = seat.upgrade() else { return };
            if s.leaving.load(Ordering::Acquire) {
                return;
            }
            tries += 1;
            match rejoin(&s, &server).await {
                Ok(node) => {
                    if s.leaving.load(Ordering::Acquire) {
                        super::leave(node).await;
                        return;
                    }
                    break;
                }
                // The database may still be away: said once, then quietly.
                Err(e) if tries == 1 => {
                    tracing::warn!(error = %e, "cannot rejoin the cluster yet; retrying until the database answers")
                }
                Err(e) => tracing::debug!(error = %e, "cannot rejoin the cluster yet"),
            }
            drop(s);
            tokio::time::sleep(pauses.next().unwrap_or(Duration::from_secs(1))).await;
        }
    }
}

/// Fences the incarnation `server` runs as `node`, which lost its lease:
/// its store writes nothing more and fails what waits for it, its loops
/// stop, and (once its work loop has stopped) its in-memory trees are
/// dropped. Requests are answered with [`fenced_error`](super::fenced_error) meanwhile.
fn fence(server: &Server, node: &Arc<Node>) {
    node.stopped.store(true, Ordering::Release);
    node.registration.fence("this instance lost its cluster lease");
    tracing::warn!(
        instance = %node.instance,
        epoch = node.epoch,
        "fenced: no handler runs, nothing is written and requests are refused until this instance is back \
         in the cluster"
    );
    let work = node.work.lock().take();
    let old = server.clone();
    tokio::spawn(async move {
        if let Some(work) = work {
            let _ = work.await;
        }
        old.discard();
    });
}

/// Whether another process registered with this instance's id since
/// `node` did (a newer epoch), asked once the database answers; `None`
/// when the seat is gone or left meanwhile.
async fn superseded(seat: &Weak<Seat>, node: &Arc<Node>) -> Option<bool> {
    let mut pauses = crate::retry::delays(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        if seat.upgrade()?.leaving.load(Ordering::Acquire) {
            return None;
        }
        let (id, epoch) = (node.instance, node.epoch);
        let newer = node
            .blocking(move |c| db::registered_epoch(c, id).map(|e| e.is_some_and(|e| e > epoch)))
            .await;
        match newer {
            Ok(newer) => return Some(newer),
            Err(e) => tracing::debug!(error = %e, "the database does not answer yet"),
        }
        tokio::time::sleep(pauses.next().unwrap_or(Duration::from_secs(1))).await;
    }
}

/// One attempt to rejoin: a new registration (a new epoch) on a new store,
/// a new runtime with the configuration of `old`'s, the trees this id
/// still holds brought back as a restart brings them back, and a new
/// membership; then the new incarnation answers in the seat.
async fn rejoin(seat: &Arc<Seat>, old: &Server) -> Result<Arc<Node>, String> {
    let config = seat.config.clone();
    let pool = Pool::new(config.connector(seat.instance).map_err(|e| e.to_string())?);
    let store_config = config.member_store(seat.instance);
    let store = tokio::task::spawn_blocking(move || PostgresStore::open(store_config))
        .await
        .map_err(|e| format!("opening the store panicked: {e}"))?
        .map_err(|e| format!("cannot open the store: {e}"))?;
    let registration = store
        .registration()
        .cloned()
        .ok_or("the store registered no instance")?;
    tracing::info!(
        instance = %registration.instance,
        epoch = registration.epoch,
        "registered again with a new epoch; bringing back the trees its id still holds"
    );
    let runtime = Runtime::with_store(*old.inner.runtime.config(), Arc::new(store));
    runtime.set_lease(registration.gate.clone());
    let server = old.successor(runtime);
    let report = match server.recover().await {
        Ok(report) => report,
        Err(e) => {
            registration.fence("its rejoining failed");
            return Err(format!("cannot bring its trees back: {e}"));
        }
    };
    let forest = server.inner.runtime.forest_config();
    let node = Node::new(&registration, config, pool, Arc::downgrade(seat), forest);
    if let Err(e) = server.run_node(&node) {
        registration.fence("its rejoining failed");
        return Err(e.to_string());
    }
    *seat.current.write() = (server, node.clone());
    tracing::info!(
        instance = %node.instance,
        epoch = node.epoch,
        %report,
        "rejoined the cluster"
    );
    Ok(node)
}

impl Server {
    /// Drops a fenced incarnation's trees from memory: each is cancelled
    /// in this runtime only (its store refuses every write, so nothing of
    /// it reaches the database, and nothing is shown: every wait for
    /// durability fails), which ends its frozen handlers without polling
    /// them again (they are aborted after the runtime's cancel grace, and
    /// their tasks freed).
    fn discard(&self) {
        let rt = &self.inner.runtime;
        let mut trees = 0usize;
        for owner in self.inner.owners.all() {
            for (_, tree) in owner.trees_from(0, usize::MAX) {
                if let Some(tree) = tree.upgrade()
                    && rt.cancel(tree.root).is_ok()
                {
                    trees += 1;
                }
            }
        }
        tracing::info!(
            trees,
            "dropped the fenced incarnation's trees from memory (their frozen handlers are aborted, never run)"
        );
    }
}
