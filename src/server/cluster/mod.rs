//! Several `subtask serve` instances on one PostgreSQL database (features
//! `server` and `postgres`; `docs/scale-out.md`).
//!
//! PostgreSQL holds the truth and is the only channel between instances:
//!
//! * **Ownership.** The instance where a tree was created holds it (the
//!   `holder` of its root row) and runs its handlers; its store proves in
//!   every commit that its instance row is neither revoked nor of a newer
//!   epoch (fencing, [`crate::store::PostgresConfig::member`]).
//! * **Leases.** A thread renews this instance's lease every third of it.
//!   By this process's monotonic clock, a lease not renewed in time lapses:
//!   from then on no handler is polled ([`LeaseGate`]) and every request is
//!   refused.
//! * **Fencing and rejoining.** An instance that lost its lease (it lapsed,
//!   or another instance revoked it) fences itself and keeps running: its
//!   store writes nothing more ([`Registration::fence`]), requests are
//!   answered `-32603` with `data.reason` `"fenced"`, and its in-memory
//!   trees are dropped. Once the database answers, it registers again (a
//!   new epoch under the same id), builds a new runtime on a new store,
//!   brings back the trees its id still holds as a restart does, and joins
//!   as a fresh member ([`Server::current`] is then that incarnation). Only
//!   a newer process with the same id ends it ([`Cluster::lost`]).
//! * **Takeover.** Every instance looks for expired leases a few times per
//!   lease, revokes them (the revocation waits for a fenced commit in
//!   flight), claims the trees of revoked instances a batch at a time
//!   (`FOR UPDATE SKIP LOCKED`, so survivors share them) and brings them
//!   back as a restart does ([`Server::recover`]).
//! * **Reads** of a tree another instance holds come from its stored rows:
//!   the task's row and its children's ids, the same answer the holder
//!   gives (a holder shows nothing before it is stored).
//! * **Commands** on a tree another instance holds go through
//!   `subtask_inbox`: the receiving instance inserts the command and waits;
//!   the holder applies it and writes the answer in the same transaction
//!   as the command's effects (a
//!   [`WriteOp::Receipt`](crate::store::WriteOp::Receipt)), so a command
//!   is applied once, even across a takeover (the new holder applies what
//!   is still unanswered).
//! * **Notifications.** Every commit notifies `subtask_changed` with the
//!   trees it wrote; an instance streaming a tree it does not hold re-reads
//!   the watched tasks then.
//!
//! # Where the code lives
//!
//! One concept per file: this one holds the types ([`ClusterConfig`],
//! [`Cluster`], the seat that outlives incarnations, a [`Node`] per
//! incarnation) and joining and leaving; `remote.rs` reads trees another
//! instance holds (`tasks/get`, streams, `tasks/list`); `inbox.rs` passes
//! commands on and applies the ones passed to this instance; `lease.rs`
//! renews the lease; `listen.rs` receives the other instances'
//! notifications; `rejoin.rs` fences an instance that lost its lease and
//! rejoins; `takeover.rs` is the loop that takes over dead instances'
//! trees and drains the inbox; `upkeep.rs` shares live-task counts and
//! cleans up; `workers.rs` carries worker tools and tasks between
//! instances. Every SQL statement is the store's
//! (`crate::store::postgres`: `remote`, `inbox`, `cluster`, `listen`).
//!
//! # Connections
//!
//! Every connection an instance opens is made by one
//! [`Connector`] from one
//! [`PostgresConfig`] (the same URL, connect timeout, and
//! `application_name` `subtask <instance id>`, by which a survivor ends a
//! stalled instance's sessions), with the store's statement cache:
//!
//! * the store's **writer** connection (commits, and the store's reads,
//!   which follow the commits submitted before them);
//! * a **pool** ([`Pool`], up to 16 idle) for this module's database
//!   work: reads of trees held elsewhere, the inbox, takeovers, live
//!   counts and cleanup (blocking calls, run with `spawn_blocking`);
//! * the **lease** thread's own connection: a renewal must never queue
//!   behind commits or reads, or a busy instance would lose its lease;
//! * the **LISTEN** connection: `LISTEN` belongs to a session, which must
//!   be read as notifications come and cannot be lent out.

mod inbox;
mod lease;
mod listen;
mod rejoin;
mod remote;
mod takeover;
mod upkeep;
mod workers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast};

use super::Server;
use crate::model::{ErrorCode, ErrorObject, TaskId};
use crate::runtime::LeaseGate;
use crate::store::postgres::{Conn, Connector, Pool, cluster as db};
use crate::store::{Membership, PostgresConfig, Registration, StoreError, StoredTree};

/// Settings of a [`Cluster`].
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The database, as given to the store.
    pub url: String,
    /// How long a lease lasts (the store's
    /// [`Membership::lease`](crate::store::Membership::lease)); renewed
    /// every third of it.
    pub lease: Duration,
    /// How long an instance waits for the holder's answer to a command it
    /// passed on. Long enough to outlive a takeover.
    pub answer_timeout: Duration,
    /// How an instance that lost its lease opens its store again to rejoin
    /// (its [`PostgresConfig::member`] is set to this instance and lease).
    pub store: PostgresConfig,
}

impl ClusterConfig {
    /// Defaults for `url` and `lease`: answers are awaited for 30 s or
    /// three leases, whichever is longer; the store is opened again with
    /// [`PostgresConfig::new`]'s settings.
    pub fn new(url: impl Into<String>, lease: Duration) -> Self {
        let url = url.into();
        ClusterConfig {
            store: PostgresConfig::new(url.clone()),
            url,
            lease,
            answer_timeout: (lease * 3).max(Duration::from_secs(30)),
        }
    }

    /// The store's configuration for instance `instance` of this cluster:
    /// what a rejoining instance opens.
    fn member_store(&self, instance: uuid::Uuid) -> PostgresConfig {
        PostgresConfig {
            member: Some(Membership {
                instance,
                lease: self.lease,
            }),
            ..self.store.clone()
        }
    }

    /// How instance `instance`'s own connections (the pool, the lease,
    /// LISTEN) connect: as its store does, on [`ClusterConfig::url`].
    fn connector(&self, instance: uuid::Uuid) -> Result<Connector, StoreError> {
        PostgresConfig {
            url: self.url.clone(),
            ..self.member_store(instance)
        }
        .connector()
    }
}

/// This process's membership in a cluster of instances on one database:
/// lease renewal, takeover, reads and commands for trees other instances
/// hold, and fencing and rejoining after a lost lease. Started by
/// [`Server::join_cluster`]; keep it while serving (once every clone is
/// dropped, an instance that loses its lease stays fenced instead of
/// rejoining).
#[derive(Clone)]
pub struct Cluster {
    seat: Arc<Seat>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let node = self.seat.node();
        f.debug_struct("Cluster")
            .field("instance", &node.instance)
            .field("epoch", &node.epoch)
            .finish()
    }
}

/// What outlives an instance's incarnations: its id, its settings, and the
/// incarnation (server and membership) that serves now. A fenced instance
/// that rejoins replaces the incarnation here.
pub(crate) struct Seat {
    instance: uuid::Uuid,
    config: ClusterConfig,
    current: parking_lot::RwLock<(Server, Arc<Node>)>,
    /// [`Cluster::leave`] was called: no more rejoining.
    leaving: AtomicBool,
    /// Another process registered with this id: this one cannot go on.
    ended: AtomicBool,
    end: Notify,
}

impl Seat {
    fn node(&self) -> Arc<Node> {
        self.current.read().1.clone()
    }

    fn incarnation(&self) -> (Server, Arc<Node>) {
        self.current.read().clone()
    }
}

/// One incarnation's membership: its registration (an epoch), lease,
/// connections, notifications and work loop.
pub(crate) struct Node {
    instance: uuid::Uuid,
    epoch: i64,
    gate: Arc<LeaseGate>,
    /// The registration of this incarnation's store ([`Registration::fence`]).
    registration: Registration,
    /// The seat this incarnation serves in ([`Server::current`]).
    seat: Weak<Seat>,
    /// The takeover and inbox loop, awaited before the fenced
    /// incarnation's trees are dropped (it may be adopting some).
    work: Mutex<Option<tokio::task::JoinHandle<()>>>,
    config: ClusterConfig,
    /// The forests' configuration, for commands on finished trees rebuilt
    /// from their rows (`inbox.rs`).
    forest: Arc<crate::core::ForestConfig>,
    /// Connections for reads, the inbox, takeovers and upkeep (blocking;
    /// used from `spawn_blocking`), and how the lease and LISTEN
    /// connections are made.
    pool: Pool,
    /// Commands this instance passed on, by inbox seq: woken when an
    /// answer is notified.
    answers: Mutex<HashMap<i64, Arc<Notify>>>,
    /// Trees some instance committed (for streams of trees held elsewhere);
    /// `None` after a reconnect: anything may have changed.
    changed: broadcast::Sender<Option<Arc<Vec<TaskId>>>>,
    /// Commands arrived for trees this instance holds.
    inbox: Notify,
    /// Worker news arrived for this instance (`workers.rs`).
    worker_mail: Notify,
    /// Some instance's workers serve other tools now.
    worker_tools: Notify,
    lost: Notify,
    is_lost: AtomicBool,
    stopped: AtomicBool,
}

impl Server {
    /// Joins the cluster this server's store registered with: starts lease
    /// renewal, the listener for other instances' notifications, and the
    /// loop that takes over dead instances' trees and applies commands
    /// passed on by other instances. Call it after [`Server::recover`] (the
    /// trees this instance held under the same id are back), before
    /// serving.
    ///
    /// # Errors
    ///
    /// The database URL is not valid.
    pub fn join_cluster(
        &self,
        registration: &Registration,
        config: ClusterConfig,
    ) -> Result<Cluster, StoreError> {
        let pool = Pool::new(config.connector(registration.instance)?);
        let seat = Arc::new_cyclic(|seat: &Weak<Seat>| Seat {
            instance: registration.instance,
            current: parking_lot::RwLock::new((
                self.clone(),
                Node::new(
                    registration,
                    config.clone(),
                    pool,
                    seat.clone(),
                    self.inner.runtime.forest_config(),
                ),
            )),
            config,
            leaving: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            end: Notify::new(),
        });
        self.run_node(&seat.node())?;
        tokio::spawn(rejoin::supervise(Arc::downgrade(&seat)));
        Ok(Cluster { seat })
    }

    /// Starts `node` as this server's membership: the lease gate, the
    /// renewal and notification threads, the takeover and inbox loop.
    fn run_node(&self, node: &Arc<Node>) -> Result<(), StoreError> {
        self.inner.runtime.set_lease(node.gate.clone());
        let _ = self.inner.cluster.set(node.clone());
        {
            let node = node.clone();
            std::thread::Builder::new()
                .name("subtask-lease".into())
                .spawn(move || lease::lease_loop(&node))
                .map_err(thread_err)?;
        }
        {
            let node = node.clone();
            std::thread::Builder::new()
                .name("subtask-listen".into())
                .spawn(move || listen::listen_loop(&node))
                .map_err(thread_err)?;
        }
        if let Some(hub) = &self.inner.workers {
            // Worker tools and tasks across instances (`workers.rs`).
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            hub.set_relay(node.instance, tx);
            tokio::spawn(workers::relay_loop(node.clone(), hub.clone(), rx));
        }
        let work = tokio::spawn(takeover::work_loop(node.clone(), Arc::downgrade(&self.inner)));
        *node.work.lock() = Some(work);
        tracing::info!(
            instance = %node.instance,
            epoch = node.epoch,
            lease_ms = node.config.lease.as_millis() as u64,
            "joined the cluster"
        );
        Ok(())
    }

    /// This incarnation's cluster membership (`None` when it serves no
    /// cluster).
    pub(crate) fn cluster(&self) -> Option<&Arc<Node>> {
        self.inner.cluster.get()
    }

    /// Brings back trees another instance held, as a restart does.
    async fn adopt(&self, trees: Vec<StoredTree>) -> Result<crate::runtime::RecoveryReport, StoreError> {
        let inner = self.inner.clone();
        let owners = self.inner.clone();
        self.inner
            .runtime
            .adopt(
                trees,
                move |name| owners.owners.of_name(name),
                move |meta| super::rebuild(inner.clone(), meta.launch.clone()),
            )
            .await
    }
}

impl Cluster {
    /// This instance's id.
    pub fn instance(&self) -> uuid::Uuid {
        self.seat.instance
    }

    /// Whether this instance holds its lease and serves now (`false` while
    /// it is fenced, until it has rejoined).
    pub fn serving(&self) -> bool {
        self.seat.node().serving()
    }

    /// Resolves once this instance cannot go on as a member: another
    /// process registered with its id (a newer epoch), which is the
    /// instance from then on. Nothing of this one runs any more, and the
    /// process should exit. A lease lost any other way (a database outage,
    /// a stall, a takeover by another instance) does not end it: it fences
    /// itself and rejoins.
    pub async fn lost(&self) {
        loop {
            let n = self.seat.end.notified();
            if self.seat.ended.load(Ordering::Acquire) {
                return;
            }
            n.await;
        }
    }

    /// Leaves the cluster at a clean shutdown: freezes this instance's
    /// handlers ([`LeaseGate::revoke`]), stops renewing, taking over and
    /// rejoining, and revokes its row, so that the other instances take its
    /// trees over at their next look instead of after the lease. Call it
    /// last: nothing of this instance runs afterwards.
    pub async fn leave(&self) {
        self.seat.leaving.store(true, Ordering::Release);
        leave(self.seat.node()).await;
    }
}

/// [`Cluster::leave`] for one incarnation.
async fn leave(node: Arc<Node>) {
    node.gate.revoke();
    node.stopped.store(true, Ordering::Release);
    let (id, epoch) = (node.instance, node.epoch);
    let r = node.blocking(move |c| db::leave(c, id, epoch)).await;
    match r {
        Ok(_) => tracing::info!(instance = %id, "left the cluster; its trees go to the other instances"),
        Err(e) => tracing::warn!(error = %e, "leaving the cluster failed; its lease will expire instead"),
    }
}

/// A thread that could not be started, as a store error.
fn thread_err(e: std::io::Error) -> StoreError {
    StoreError::Io(e.to_string())
}

/// The answer to every request of a fenced instance (HTTP 503).
pub(crate) fn fenced_error() -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        "this instance lost its cluster lease and is fenced until it rejoins the cluster; retry on another \
         instance, or here shortly",
    )
    .with_data(serde_json::json!({"reason": "fenced"}))
}

impl Node {
    fn new(
        registration: &Registration,
        config: ClusterConfig,
        pool: Pool,
        seat: Weak<Seat>,
        forest: Arc<crate::core::ForestConfig>,
    ) -> Arc<Node> {
        let (changed, _) = broadcast::channel(1024);
        Arc::new(Node {
            forest,
            instance: registration.instance,
            epoch: registration.epoch,
            gate: registration.gate.clone(),
            registration: registration.clone(),
            seat,
            work: Mutex::new(None),
            config,
            pool,
            answers: Mutex::new(HashMap::new()),
            changed,
            inbox: Notify::new(),
            worker_mail: Notify::new(),
            worker_tools: Notify::new(),
            lost: Notify::new(),
            is_lost: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        })
    }

    /// Whether this instance may still answer from memory (losing the
    /// lease revokes the gate, so the gate says it all).
    pub(crate) fn serving(&self) -> bool {
        self.gate.valid()
    }

    /// The incarnation that serves in this one's seat now (`None` once the
    /// seat is gone).
    pub(crate) fn current_server(&self) -> Option<Server> {
        Some(self.seat.upgrade()?.current.read().0.clone())
    }

    /// Resolves once this incarnation lost its lease (and is, or is about
    /// to be, fenced).
    pub(crate) async fn fenced(&self) {
        loop {
            let n = self.lost.notified();
            if self.is_lost.load(Ordering::Acquire) {
                return;
            }
            n.await;
        }
    }

    /// Whether this incarnation lost its lease.
    pub(crate) fn is_fenced(&self) -> bool {
        self.is_lost.load(Ordering::Acquire) || !self.gate.valid()
    }

    /// Marks this incarnation as having lost its lease (`why` is logged
    /// once): its gate is revoked and [`Node::fenced`] resolves.
    fn lose(&self, why: &str) {
        self.gate.revoke();
        if !self.is_lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                instance = %self.instance,
                epoch = self.epoch,
                "this instance lost its lease: {why}; it fences itself and rejoins the cluster"
            );
        }
        self.lost.notify_waiters();
    }

    /// Runs `f` on a pooled connection ([`Pool::run`]), off the async
    /// threads.
    async fn blocking<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Conn) -> Result<R, postgres::Error> + Send + 'static,
    ) -> Result<R, StoreError> {
        let node = self.clone();
        tokio::task::spawn_blocking(move || node.pool.run(f))
            .await
            .map_err(|e| StoreError::Io(format!("a database call panicked: {e}")))?
    }
}
