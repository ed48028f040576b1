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
//!   as the command's effects (a [`WriteOp::Receipt`]), so a command is
//!   applied once, even across a takeover (the new holder applies what is
//!   still unanswered).
//! * **Notifications.** Every commit notifies `subtask_changed` with the
//!   trees it wrote; an instance streaming a tree it does not hold re-reads
//!   the watched tasks then.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Notify, broadcast};

use super::request::InboxCommand;
use super::{Server, ServerInner};
use crate::core::decode_state;
use crate::model::{ClientView, DetailedTask, ErrorCode, ErrorObject, TaskId};
use crate::runtime::{Applied, LeaseGate, Runtime, RuntimeError};
use crate::store::{
    Membership, PostgresConfig, PostgresStore, Registration, StoreError, StoredTree, WriteOp,
};

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
    pg: postgres::Config,
    /// Idle connections for reads and inbox traffic (blocking; used from
    /// `spawn_blocking`).
    pool: Mutex<Vec<Conn>>,
    /// Commands this instance passed on, by inbox seq: woken when an
    /// answer is notified.
    answers: Mutex<HashMap<i64, Arc<Notify>>>,
    /// Trees some instance committed (for streams of trees held elsewhere);
    /// `None` after a reconnect: anything may have changed.
    changed: broadcast::Sender<Option<Arc<Vec<TaskId>>>>,
    /// Commands arrived for trees this instance holds.
    inbox: Notify,
    lost: Notify,
    is_lost: AtomicBool,
    stopped: AtomicBool,
}

/// A pooled connection and the statements prepared on it (a query run
/// often is planned once per connection, not at every call).
pub(crate) struct Conn {
    client: Client,
    prepared: HashMap<&'static str, postgres::Statement>,
}

impl Conn {
    /// `sql`, prepared on this connection once.
    fn statement(&mut self, sql: &'static str) -> Result<postgres::Statement, postgres::Error> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

fn pg_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

fn uuid_of(id: TaskId) -> uuid::Uuid {
    uuid::Uuid::from_u128(id.as_u128())
}

fn id_of(u: uuid::Uuid) -> TaskId {
    TaskId::from_u128(u.as_u128())
}

/// A command's answer as the inbox stores it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum InboxAnswer {
    Result(Value),
    Error(ErrorObject),
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
        let pg = pg_config(&config, registration.instance)?;
        let seat = Arc::new_cyclic(|seat: &Weak<Seat>| Seat {
            instance: registration.instance,
            current: parking_lot::RwLock::new((
                self.clone(),
                Node::new(registration, config.clone(), pg, seat.clone()),
            )),
            config,
            leaving: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            end: Notify::new(),
        });
        self.run_node(&seat.node())?;
        tokio::spawn(supervise(Arc::downgrade(&seat)));
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
                .spawn(move || lease_loop(&node))
                .map_err(pg_err)?;
        }
        {
            let node = node.clone();
            std::thread::Builder::new()
                .name("subtask-listen".into())
                .spawn(move || listen_loop(&node))
                .map_err(pg_err)?;
        }
        let work = tokio::spawn(work_loop(node.clone(), Arc::downgrade(&self.inner)));
        *node.work.lock() = Some(work);
        tracing::info!(
            instance = %node.instance,
            epoch = node.epoch,
            lease_ms = node.config.lease.as_millis() as u64,
            "joined the cluster"
        );
        Ok(())
    }

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
    let r = node
        .blocking(move |c| {
            c.execute(
                "UPDATE subtask_instances SET revoked = true, lease_until = now() WHERE id = $1 AND epoch = $2",
                &[&id, &epoch],
            )
        })
        .await;
    match r {
        Ok(_) => tracing::info!(instance = %id, "left the cluster; its trees go to the other instances"),
        Err(e) => tracing::warn!(error = %e, "leaving the cluster failed; its lease will expire instead"),
    }
}

/// The connection settings of instance `instance`'s own connections.
fn pg_config(config: &ClusterConfig, instance: uuid::Uuid) -> Result<postgres::Config, StoreError> {
    let mut pg: postgres::Config = config
        .url
        .parse()
        .map_err(|e| pg_err(format!("not a PostgreSQL URL: {e}")))?;
    pg.connect_timeout(Duration::from_secs(10));
    pg.application_name(&crate::store::instance_application_name(instance));
    Ok(pg)
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

impl Drop for Node {
    fn drop(&mut self) {
        // A synchronous client runs a runtime of its own to close its
        // connection, which must not happen on an async thread (the last
        // reference may go there, as when a server stops).
        let pooled = std::mem::take(&mut *self.pool.lock());
        if !pooled.is_empty() {
            let _ = std::thread::Builder::new()
                .name("subtask-pool-close".into())
                .spawn(move || drop(pooled));
        }
    }
}

impl Node {
    fn new(
        registration: &Registration,
        config: ClusterConfig,
        pg: postgres::Config,
        seat: Weak<Seat>,
    ) -> Arc<Node> {
        let (changed, _) = broadcast::channel(1024);
        Arc::new(Node {
            instance: registration.instance,
            epoch: registration.epoch,
            gate: registration.gate.clone(),
            registration: registration.clone(),
            seat,
            work: Mutex::new(None),
            config,
            pg,
            pool: Mutex::new(Vec::new()),
            answers: Mutex::new(HashMap::new()),
            changed,
            inbox: Notify::new(),
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

    fn connect(&self) -> Result<Client, StoreError> {
        self.pg.connect(NoTls).map_err(pg_err)
    }

    /// Runs `f` on a pooled connection (blocking).
    fn with_client<R>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<R, postgres::Error>,
    ) -> Result<R, StoreError> {
        let pooled = self.pool.lock().pop();
        let mut conn = match pooled {
            Some(c) if !c.client.is_closed() => c,
            _ => Conn {
                client: self.connect()?,
                prepared: HashMap::new(),
            },
        };
        let r = f(&mut conn);
        if conn.client.is_closed() {
            // What broke this connection (the server restarted, this
            // instance's sessions were ended) most likely broke the idle
            // ones too: they are not tried one by one.
            let idle = std::mem::take(&mut *self.pool.lock());
            drop(idle);
        } else {
            let mut pool = self.pool.lock();
            if pool.len() < 16 {
                pool.push(conn);
            }
        }
        r.map_err(pg_err)
    }

    /// [`Node::with_client`] off the async threads.
    async fn blocking<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut Conn) -> Result<R, postgres::Error> + Send + 'static,
    ) -> Result<R, StoreError> {
        let node = self.clone();
        tokio::task::spawn_blocking(move || node.with_client(f))
            .await
            .map_err(|e| pg_err(format!("a database call panicked: {e}")))?
    }

    /// `tasks/get` of a task this instance does not hold: the stored row
    /// and its children's ids. `None` for unknown ids and for another
    /// principal's (or an unowned) tree, alike.
    pub(crate) async fn get(
        self: &Arc<Self>,
        id: TaskId,
        principal: &str,
        view: ClientView,
    ) -> Result<Option<DetailedTask>, StoreError> {
        let principal = principal.to_owned();
        let row = self
            .blocking(move |c| {
                let st = c.statement(
                    "SELECT t.root, t.parent, t.position, t.state, r.owner,
                            ARRAY(SELECT k.id FROM subtask_tasks k WHERE k.parent = t.id ORDER BY k.position)
                     FROM subtask_tasks t JOIN subtask_tasks r ON r.id = t.root
                     WHERE t.id = $1",
                )?;
                c.query_opt(&st, &[&uuid_of(id)])
            })
            .await?;
        let Some(row) = row else { return Ok(None) };
        let owner: Option<String> = row.get(4);
        if owner.as_deref() != Some(principal.as_str()) {
            return Ok(None);
        }
        Ok(Some(task_of_row(&row, id, 0, view)?))
    }

    /// Passes a command on to the holder of the task's tree and waits for
    /// its answer. `Err` with "task not found" for unknown and foreign ids.
    pub(crate) async fn command(
        self: &Arc<Self>,
        id: TaskId,
        principal: &str,
        command: InboxCommand,
    ) -> Result<Value, ErrorObject> {
        let principal = principal.to_owned();
        let me = self.instance;
        let text = serde_json::to_string(&command).expect("commands serialize");
        let seq = self
            .blocking(move |c| {
                let lookup = c.statement(
                    "SELECT t.root, r.owner, r.holder FROM subtask_tasks t JOIN subtask_tasks r ON r.id = t.root
                     WHERE t.id = $1",
                )?;
                let insert = c.statement(
                    "INSERT INTO subtask_inbox (root, task, principal, command, from_instance)
                     VALUES ($1, $2, $3, $4::text::jsonb, $5) RETURNING seq",
                )?;
                let notify = c.statement("SELECT pg_notify('subtask_inbox', $1)")?;
                let mut tx = c.transaction()?;
                let Some(row) = tx.query_opt(&lookup, &[&uuid_of(id)])?
                else {
                    return Ok(None);
                };
                let root: uuid::Uuid = row.get(0);
                let owner: Option<String> = row.get(1);
                let holder: Option<uuid::Uuid> = row.get(2);
                if owner.as_deref() != Some(principal.as_str()) {
                    return Ok(None);
                }
                let seq: i64 = tx
                    .query_one(&insert, &[&root, &uuid_of(id), &principal, &text, &me])?
                    .get(0);
                let holder = holder.map(|h| h.to_string()).unwrap_or_default();
                tx.execute(&notify, &[&holder])?;
                tx.commit()?;
                Ok(Some((seq, root)))
            })
            .await
            .map_err(unavailable)?;
        let Some((seq, root)) = seq else {
            return Err(ErrorObject::task_not_found());
        };
        let woken = Arc::new(Notify::new());
        self.answers.lock().insert(seq, woken.clone());
        let answer = self.await_answer(seq, root, &woken).await;
        self.answers.lock().remove(&seq);
        match answer? {
            InboxAnswer::Result(v) => Ok(v),
            InboxAnswer::Error(e) => Err(e),
        }
    }

    async fn await_answer(
        self: &Arc<Self>,
        seq: i64,
        root: uuid::Uuid,
        woken: &Notify,
    ) -> Result<InboxAnswer, ErrorObject> {
        let deadline = tokio::time::Instant::now() + self.config.answer_timeout;
        loop {
            // The notification is a hint; the row is the truth (a missed
            // notification costs one poll interval).
            let _ = tokio::time::timeout(Duration::from_millis(200), woken.notified()).await;
            let answer = self
                .blocking(move |c| {
                    let st = c.statement(
                        "DELETE FROM subtask_inbox WHERE seq = $1 AND answer IS NOT NULL RETURNING answer::text",
                    )?;
                    let row = c.query_opt(&st, &[&seq])?;
                    if let Some(row) = row {
                        return Ok(Some(row.get::<_, String>(0)));
                    }
                    // The tree was deleted meanwhile: nobody will answer.
                    let gone = c.query_opt("SELECT 1 FROM subtask_tasks WHERE id = $1", &[&root])?.is_none();
                    if gone {
                        c.execute("DELETE FROM subtask_inbox WHERE seq = $1 AND answer IS NULL", &[&seq])?;
                        return Ok(Some(String::new()));
                    }
                    Ok(None)
                })
                .await;
            match answer {
                Ok(Some(text)) if text.is_empty() => return Err(ErrorObject::task_not_found()),
                Ok(Some(text)) => {
                    return serde_json::from_str(&text).map_err(|e| {
                        ErrorObject::new(
                            ErrorCode::INTERNAL_ERROR,
                            format!("an unreadable answer in the inbox: {e}"),
                        )
                    });
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, seq, "reading a command's answer failed; retrying"),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!(
                        "the instance holding this task did not answer within {:?}; the command is queued and may \
                         still be applied",
                        self.config.answer_timeout
                    ),
                ));
            }
        }
    }

    /// Snapshots of a task another instance holds, as
    /// [`Runtime::subscribe`](crate::runtime::Runtime::subscribe) gives
    /// them: the current one, then each change, ending after a terminal
    /// one. Re-read when a commit touches its tree (and every 2 s).
    pub(crate) fn watch(
        self: &Arc<Self>,
        id: TaskId,
        principal: &str,
        view: ClientView,
    ) -> BoxStream<'static, DetailedTask> {
        struct S {
            node: Arc<Node>,
            rx: broadcast::Receiver<Option<Arc<Vec<TaskId>>>>,
            principal: String,
            root: Option<TaskId>,
            last: Option<DetailedTask>,
            done: bool,
        }
        let s = S {
            node: self.clone(),
            rx: self.changed.subscribe(),
            principal: principal.to_owned(),
            root: None,
            last: None,
            done: false,
        };
        futures::stream::unfold(s, move |mut s| async move {
            loop {
                if s.done {
                    return None;
                }
                match s.node.get(id, &s.principal, view).await {
                    Ok(Some(snap)) => {
                        if s.last.as_ref() != Some(&snap) {
                            s.done = snap.status().is_terminal();
                            s.last = Some(snap.clone());
                            return Some((snap, s));
                        }
                    }
                    // Deleted (or never visible): nothing more to show.
                    Ok(None) => return None,
                    Err(e) => tracing::warn!(error = %e, task = %id, "re-reading a watched task failed"),
                }
                if s.root.is_none() {
                    s.root = s.node.root_of(id).await;
                }
                let tick = tokio::time::sleep(Duration::from_secs(2));
                tokio::pin!(tick);
                loop {
                    tokio::select! {
                        () = &mut tick => break,
                        m = s.rx.recv() => match m {
                            Ok(Some(roots)) if s.root.is_some_and(|r| !roots.contains(&r)) => continue,
                            Err(broadcast::error::RecvError::Closed) => return None,
                            _ => break,
                        }
                    }
                }
            }
        })
        .boxed()
    }

    /// A page of the principal's tasks from the database, for a 2025-11-25
    /// `tasks/list` on any instance: trees in creation order, each tree's
    /// tasks in creation order, after the position `after` (stored
    /// sequence numbers of a tree and a task), and where the next page
    /// starts.
    pub(crate) async fn list(
        self: &Arc<Self>,
        principal: &str,
        after: (i64, i64),
        limit: usize,
        view: ClientView,
    ) -> Result<(Vec<DetailedTask>, Option<(i64, i64)>), StoreError> {
        let principal = principal.to_owned();
        let rows = self
            .blocking(move |c| {
                c.query(
                    "SELECT r.seq, t.seq, t.id, t.root, t.parent, t.position, t.state, r.owner,
                            ARRAY(SELECT k.id FROM subtask_tasks k WHERE k.parent = t.id ORDER BY k.position)
                     FROM subtask_tasks r JOIN subtask_tasks t ON t.root = r.id
                     WHERE r.parent IS NULL AND r.owner = $1 AND (r.seq, t.seq) > ($2, $3)
                     ORDER BY r.seq, t.seq LIMIT $4",
                    &[&principal, &after.0, &after.1, &(limit as i64)],
                )
            })
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        let mut last = after;
        for row in &rows {
            last = (row.get(0), row.get(1));
            out.push(task_of_row(row, id_of(row.get(2)), 3, view)?);
        }
        let next = (rows.len() == limit).then_some(last);
        Ok((out, next))
    }

    async fn root_of(self: &Arc<Self>, id: TaskId) -> Option<TaskId> {
        self.blocking(move |c| {
            c.query_opt("SELECT root FROM subtask_tasks WHERE id = $1", &[&uuid_of(id)])
                .map(|r| r.map(|r| id_of(r.get(0))))
        })
        .await
        .ok()
        .flatten()
    }
}

/// A task as `view` sees it from a row holding, from column `at` on, its
/// root, parent, position, state, its tree's owner and its children's ids
/// (the queries of [`Node::get`] and [`Node::list`]).
fn task_of_row(
    row: &postgres::Row,
    id: TaskId,
    at: usize,
    view: ClientView,
) -> Result<DetailedTask, StoreError> {
    let root: uuid::Uuid = row.get(at);
    let parent: Option<uuid::Uuid> = row.get(at + 1);
    let position: i32 = row.get(at + 2);
    let state: String = row.get(at + 3);
    let children: Vec<uuid::Uuid> = row.get(at + 5);
    let rec = decode_state(
        id,
        id_of(root),
        parent.map(id_of),
        u32::try_from(position).unwrap_or(0),
        &state,
    )
    .map_err(|e| StoreError::Corrupt(format!("task {id}: {e}")))?;
    Ok(rec.detailed(children.into_iter().map(id_of).collect(), view))
}

fn unavailable(e: StoreError) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        format!("the task database is unavailable: {e}"),
    )
    .with_data(serde_json::json!({"reason": "store_unavailable"}))
}

/// The inbox answer of a command's outcome: the result the direct path
/// would send, or its error.
pub(crate) fn answer_of(outcome: &Result<Applied, RuntimeError>) -> InboxAnswer {
    match outcome {
        Ok(Applied::Ack) => {
            InboxAnswer::Result(serde_json::to_value(crate::model::AckResult::new()).expect("serializes"))
        }
        Ok(Applied::Task(snap)) => InboxAnswer::Result(
            serde_json::to_value(super::reply::task_result((**snap).clone())).expect("serializes"),
        ),
        Err(e) => InboxAnswer::Error(super::reply::runtime_error(e.clone())),
    }
}

// ----- the lease ---------------------------------------------------------------------

fn lease_loop(node: &Node) {
    let lease = node.config.lease;
    let period = lease / 3;
    let lease_s = lease.as_secs_f64();
    let mut client: Option<Client> = None;
    loop {
        if node.stopped.load(Ordering::Acquire) {
            return;
        }
        if !node.gate.valid() {
            node.lose(&format!("no renewal within its lease of {lease:?}"));
            return;
        }
        let sent = Instant::now();
        let renewed = (|| -> Result<u64, StoreError> {
            if client.as_ref().is_none_or(Client::is_closed) {
                client = Some(node.connect()?);
            }
            let c = client.as_mut().expect("connected above");
            c.execute(
                "UPDATE subtask_instances SET lease_until = now() + make_interval(secs => $3)
                 WHERE id = $1 AND epoch = $2 AND NOT revoked",
                &[&node.instance, &node.epoch, &lease_s],
            )
            .map_err(pg_err)
        })();
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
                client = None;
                tracing::warn!(error = %e, left_ms = node.gate.remaining().as_millis() as u64, "renewing the lease failed; retrying");
                std::thread::sleep(Duration::from_millis(100).min(period));
            }
        }
    }
}

// ----- notifications -----------------------------------------------------------------

fn listen_loop(node: &Node) {
    let retries = || crate::retry::delays(Duration::from_millis(50), Duration::from_secs(1));
    let mut pauses = retries();
    while !node.stopped.load(Ordering::Acquire) && !node.is_lost.load(Ordering::Acquire) {
        let mut client = match node.connect().and_then(|mut c| {
            c.batch_execute("LISTEN subtask_answer; LISTEN subtask_changed; LISTEN subtask_inbox")
                .map_err(pg_err)?;
            Ok(c)
        }) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "listening for other instances failed; retrying");
                std::thread::sleep(pauses.next().unwrap_or(Duration::from_secs(1)));
                continue;
            }
        };
        pauses = retries();
        // Whatever was notified while no connection listened: everyone re-reads.
        for w in node.answers.lock().values() {
            w.notify_one();
        }
        let _ = node.changed.send(None);
        node.inbox.notify_one();
        while !node.stopped.load(Ordering::Acquire) && !client.is_closed() {
            let mut notes = client.notifications();
            let mut it = notes.timeout_iter(Duration::from_millis(250));
            loop {
                match it.next() {
                    Ok(Some(n)) => dispatch(node, n.channel(), n.payload()),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "the notification connection broke; reconnecting");
                        break;
                    }
                }
            }
            drop(it);
            drop(notes);
            // Makes a dead connection show as closed.
            if client.is_closed() || client.simple_query("").is_err() {
                break;
            }
        }
    }
}

fn dispatch(node: &Node, channel: &str, payload: &str) {
    match channel {
        "subtask_answer" => {
            let answers = node.answers.lock();
            for seq in payload.split(',').filter_map(|s| s.parse::<i64>().ok()) {
                if let Some(w) = answers.get(&seq) {
                    w.notify_one();
                }
            }
        }
        "subtask_changed" => {
            let roots: Vec<TaskId> = payload
                .split(',')
                .filter_map(|s| s.parse::<uuid::Uuid>().ok())
                .map(id_of)
                .collect();
            let _ = node.changed.send(Some(Arc::new(roots)));
        }
        // The holder named by the requester, or none known: a holder
        // that is being taken over drains its inbox after the takeover.
        "subtask_inbox"
            if payload
                .parse::<uuid::Uuid>()
                .ok()
                .is_none_or(|h| h == node.instance) =>
        {
            node.inbox.notify_one();
        }
        _ => {}
    }
}

// ----- fencing and rejoining ---------------------------------------------------------

/// Watches the seat's incarnation; when it loses its lease, fences it and
/// rejoins as a new one, for as long as the seat lives and is not left.
async fn supervise(seat: Weak<Seat>) {
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
                        leave(node).await;
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
/// dropped. Requests are answered with [`fenced_error`] meanwhile.
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
            .blocking(move |c| {
                c.query_opt("SELECT epoch FROM subtask_instances WHERE id = $1", &[&id])
                    .map(|r| r.is_some_and(|r| r.get::<_, i64>(0) > epoch))
            })
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
    let pg = pg_config(&config, seat.instance).map_err(|e| e.to_string())?;
    let store_config = PostgresConfig {
        member: Some(Membership {
            instance: seat.instance,
            lease: config.lease,
        }),
        ..config.store.clone()
    };
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
    let node = Node::new(&registration, config, pg, Arc::downgrade(seat));
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

// ----- takeover and the inbox --------------------------------------------------------

async fn work_loop(node: Arc<Node>, server: Weak<ServerInner>) {
    let scan_every = (node.config.lease / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut next_scan = tokio::time::Instant::now();
    let mut next_gc = tokio::time::Instant::now() + Duration::from_secs(60);
    let publish_every = node.config.lease / 3;
    let mut next_publish = tokio::time::Instant::now();
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
            if let Err(e) = take_over(&node, &server).await {
                tracing::warn!(error = %e, "looking for dead instances failed; retrying");
            }
            if tokio::time::Instant::now() >= next_publish {
                next_publish = tokio::time::Instant::now() + publish_every;
                if let Err(e) = share_live_counts(&node, &server).await {
                    tracing::warn!(error = %e, "sharing live-task counts failed; retrying");
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
async fn take_over(node: &Arc<Node>, server: &Server) -> Result<(), StoreError> {
    let me = node.instance;
    let expired: Vec<uuid::Uuid> = node
        .blocking(move |c| {
            c.query(
                "SELECT id FROM subtask_instances WHERE lease_until < now() AND NOT revoked AND id <> $1",
                &[&me],
            )
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        })
        .await?;
    for dead in expired {
        // A stalled instance may hold its row's share lock in a commit
        // that never ends (the process is stopped mid-transaction): its
        // sessions are ended first (the transaction rolls back: nothing of
        // it was acknowledged), so the revoke does not wait for the process
        // to run again. The revoke waits at most a little for a commit that
        // is finishing; else the next look tries again.
        let name = crate::store::instance_application_name(dead);
        let revoked = node
            .blocking(move |c| {
                // Best effort: a role without the right to end them (not
                // the same role, no pg_signal_backend) still revokes, after
                // the lock wait.
                if let Err(e) = c.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE application_name = $1 AND pid <> pg_backend_pid()",
                    &[&name],
                ) {
                    tracing::warn!(instance = %dead, error = %e, "cannot end a dead instance's sessions");
                }
                let mut tx = c.transaction()?;
                tx.batch_execute("SET LOCAL lock_timeout = '2s'")?;
                let n = tx.execute(
                    "UPDATE subtask_instances SET revoked = true
                     WHERE id = $1 AND lease_until < now() AND NOT revoked",
                    &[&dead],
                )?;
                tx.commit()?;
                Ok(n)
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
    loop {
        if !node.serving() {
            return Ok(());
        }
        let epoch = node.epoch;
        let claimed: Option<Vec<uuid::Uuid>> = node
            .blocking(move |c| {
                let mut tx = c.transaction()?;
                // Fenced like a commit: a claim by an instance that lost
                // its own lease is not made.
                if tx
                    .query_opt(
                        "SELECT 1 FROM subtask_instances WHERE id = $1 AND epoch = $2 AND NOT revoked FOR SHARE",
                        &[&me, &epoch],
                    )?
                    .is_none()
                {
                    return Ok(None);
                }
                // The share locks keep a revoked id from being revived
                // (a restart with the same id) while its trees are claimed.
                let dead: Vec<uuid::Uuid> = tx
                    .query("SELECT id FROM subtask_instances WHERE revoked FOR SHARE", &[])?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                if dead.is_empty() {
                    return Ok(Some(Vec::new()));
                }
                let rows = tx.query(
                    "UPDATE subtask_tasks SET holder = $1 WHERE id IN (
                         SELECT id FROM subtask_tasks WHERE holder = ANY($2) AND parent IS NULL
                         LIMIT 64 FOR UPDATE SKIP LOCKED)
                     RETURNING id",
                    &[&me, &dead],
                )?;
                tx.commit()?;
                Ok(Some(rows.iter().map(|r| r.get(0)).collect()))
            })
            .await?;
        let Some(claimed) = claimed else {
            node.lose("a takeover found this instance revoked");
            return Ok(());
        };
        if claimed.is_empty() {
            return Ok(());
        }
        let roots = claimed.clone();
        let trees = node
            .blocking(move |c| Ok(crate::store::postgres_trees(c, Some(&roots))))
            .await??;
        let report = server.adopt(trees).await?;
        tracing::info!(%report, "took over trees of a dead instance");
        node.inbox.notify_one();
    }
}

/// Applies the unanswered commands for trees this instance holds, in
/// inbox order, each with its receipt in the batch of its effects, and
/// waits until they are durable.
async fn drain_inbox(node: &Arc<Node>, server: &Server) -> Result<(), StoreError> {
    let me = node.instance;
    loop {
        let rows: Vec<(i64, uuid::Uuid, String, String)> = node
            .blocking(move |c| {
                Ok(c.query(
                    "SELECT i.seq, i.task, i.principal, i.command::text
                     FROM subtask_inbox i JOIN subtask_tasks r ON r.id = i.root
                     WHERE i.answer IS NULL AND r.holder = $1
                     ORDER BY i.seq LIMIT 256",
                    &[&me],
                )?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect())
            })
            .await?;
        let full = rows.len() == 256;
        let mut touched: Vec<TaskId> = Vec::new();
        for (seq, task, principal, text) in rows {
            let id = id_of(task);
            if server.apply_inbox(seq, id, &principal, &text) {
                touched.push(id);
            }
        }
        if touched.is_empty() {
            return Ok(());
        }
        for id in touched {
            // The tree may have been deleted meanwhile: its receipt was
            // written with the deletion or the requester sees it gone.
            let _ = server.inner.runtime.flushed(id).await;
        }
        if !full {
            return Ok(());
        }
    }
}

/// Publishes this instance's live tasks per principal and reads the
/// others' (live instances only), so a principal's limit on live tasks
/// holds across the cluster, up to what others created since they last
/// published (a third of a lease).
async fn share_live_counts(node: &Arc<Node>, server: &Server) -> Result<(), StoreError> {
    let me = node.instance;
    let (names, counts): (Vec<String>, Vec<i64>) = server.inner.owners.live_counts().into_iter().unzip();
    let others: HashMap<String, usize> = node
        .blocking(move |c| {
            let mut tx = c.transaction()?;
            tx.execute("DELETE FROM subtask_live WHERE instance = $1", &[&me])?;
            tx.execute(
                "INSERT INTO subtask_live (instance, principal, live)
                 SELECT $1, p, n FROM unnest($2::text[], $3::bigint[]) AS u(p, n) WHERE n > 0",
                &[&me, &names, &counts],
            )?;
            let rows = tx.query(
                "SELECT l.principal, sum(l.live)::bigint FROM subtask_live l
                 JOIN subtask_instances i ON i.id = l.instance
                 WHERE l.instance <> $1 AND NOT i.revoked
                 GROUP BY l.principal",
                &[&me],
            )?;
            tx.commit()?;
            Ok(rows
                .iter()
                .map(|r| {
                    (
                        r.get::<_, String>(0),
                        usize::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                    )
                })
                .collect())
        })
        .await?;
    server.inner.owners.set_elsewhere(&others);
    Ok(())
}

async fn collect_garbage(node: &Arc<Node>) {
    let r = node
        .blocking(|c| {
            // Answers nobody collected (the requester died), and instances
            // that are gone and hold nothing.
            c.execute(
                "DELETE FROM subtask_inbox WHERE answer IS NOT NULL AND created_at < now() - interval '10 minutes'",
                &[],
            )?;
            c.execute(
                "DELETE FROM subtask_live l USING subtask_instances i WHERE i.id = l.instance AND i.revoked",
                &[],
            )?;
            c.execute(
                "DELETE FROM subtask_instances i WHERE revoked AND epoch > 0
                   AND NOT EXISTS (SELECT 1 FROM subtask_tasks t WHERE t.holder = i.id)",
                &[],
            )
        })
        .await;
    if let Err(e) = r {
        tracing::warn!(error = %e, "cleaning up the inbox failed");
    }
}

impl Server {
    /// Applies one inbox command to a tree this instance holds; `false`
    /// when the task is not in the runtime (the tree is being taken over
    /// or deleted: left for later).
    fn apply_inbox(&self, seq: i64, id: TaskId, principal: &str, text: &str) -> bool {
        let rt = &self.inner.runtime;
        let Some(owner) = rt.owner_of(id) else {
            return false;
        };
        let root = rt.root_of_task(id).unwrap_or(id);
        let receipt = |answer: InboxAnswer| WriteOp::Receipt {
            root,
            seq,
            answer: serde_json::to_string(&answer).expect("answers serialize"),
        };
        // The stored method is its wire name, read as a typed method (rows
        // written before the typed method have the same layout).
        let parsed = serde_json::from_str::<InboxCommand>(text)
            .map_err(|e| {
                ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("an unreadable command in the inbox: {e}"),
                )
            })
            .and_then(InboxCommand::into_command);
        let command = match parsed {
            Ok(c) if owner.name() == principal => c.command,
            Ok(_) => {
                rt.write_receipt(root, receipt(InboxAnswer::Error(ErrorObject::task_not_found())));
                return true;
            }
            Err(e) => {
                rt.write_receipt(root, receipt(InboxAnswer::Error(e)));
                return true;
            }
        };
        rt.apply_with_receipt(id, command, |outcome| Some(receipt(answer_of(outcome))))
            .is_some()
    }
}
