//! The PostgreSQL store (feature `postgres`): the same contract as the
//! SQLite store, on a server operators already run and replicate.
//!
//! A writer thread owns one connection (the synchronous `postgres` client)
//! and commits every batch queued meanwhile in one transaction: the group is
//! folded first (the last record of each task wins, a deleted tree's records
//! are dropped) and written with one multi-row statement per kind (`unnest`
//! of arrays), so a group of a thousand creates is three round trips. With
//! [`Durability::Full`] the commit waits for PostgreSQL's WAL flush
//! (`synchronous_commit = on`, PostgreSQL's own group commit joins
//! concurrent flushes); [`Durability::Relaxed`] sets it `off`.
//!
//! Schema (version 2), in the database's current schema: `subtask_tasks`,
//! one row per task, the tree's metadata and its holder on its root's row,
//! `id` the primary key; `subtask_instances`, `subtask_inbox` and
//! `subtask_live` for a cluster of instances; `subtask_schema(version)`
//! (`docs/scale-out.md`, "Schema"). Migrations run in one transaction under
//! an advisory lock.
//!
//! Two modes. Used directly, one process writes a database at a time: the
//! store holds a session-level advisory lock from open to drop, and a
//! second store on the same database is refused with
//! [`StoreError::Locked`]. With [`PostgresConfig::member`] the store is one
//! instance of a cluster (`crate::server::Cluster`, what `subtask serve`
//! runs): no lock, every commit fenced by the instance's row, and [`load`]
//! returns the trees this instance holds.
//!
//! [`load`]: TaskStore::load
//!
//! A broken connection (the server restarted, a network blip) does not fail
//! the store: the writer reconnects (taking the writer lock again in the
//! single-writer mode) and
//! commits the same group again, for up to
//! [`PostgresConfig::reconnect_for`]; writers wait meanwhile. Only a
//! failure that is not transient, or an outage longer than that, fails the
//! group's tickets and every later one, as the store contract says: the
//! store keeps no state it cannot write.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use postgres::{Client, NoTls};

use super::queue::{Next, WriteQueue, assemble};
use super::{CommitStats, LeaseGate};
use super::{
    Durability, StoreError, StoredTask, StoredTree, TaskStore, Ticket, TreeMeta, WriteBatch, WriteOp,
};
use crate::model::{IdMap, TaskId};

/// Schema migrations; `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE subtask_tasks (
        seq       BIGSERIAL NOT NULL,
        id        UUID PRIMARY KEY,
        root      UUID NOT NULL,
        parent    UUID,
        position  INTEGER NOT NULL,
        version   BIGINT NOT NULL,
        state     TEXT NOT NULL,
        owner     TEXT,
        resumable BOOLEAN,
        launch    TEXT
    );
    CREATE INDEX subtask_tasks_root ON subtask_tasks (root);
",
    "
    CREATE TABLE subtask_instances (
        id          UUID PRIMARY KEY,
        epoch       BIGINT NOT NULL,
        lease_until TIMESTAMPTZ NOT NULL,
        revoked     BOOLEAN NOT NULL DEFAULT false,
        started_at  TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    ALTER TABLE subtask_tasks ADD COLUMN holder UUID;
    CREATE INDEX subtask_tasks_holder ON subtask_tasks (holder) WHERE holder IS NOT NULL;
    CREATE INDEX subtask_tasks_parent ON subtask_tasks (parent, position) WHERE parent IS NOT NULL;
    CREATE INDEX subtask_tasks_owner ON subtask_tasks (owner, seq) WHERE parent IS NULL;
    CREATE TABLE subtask_live (
        instance  UUID NOT NULL,
        principal TEXT NOT NULL,
        live      BIGINT NOT NULL,
        PRIMARY KEY (instance, principal)
    );
    CREATE TABLE subtask_inbox (
        seq           BIGSERIAL PRIMARY KEY,
        root          UUID NOT NULL,
        task          UUID NOT NULL,
        principal     TEXT NOT NULL,
        command       JSONB NOT NULL,
        from_instance UUID NOT NULL,
        created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
        answer        JSONB
    );
    CREATE INDEX subtask_inbox_open ON subtask_inbox (root, seq) WHERE answer IS NULL;
    -- Trees written before clustering (or by a single-writer store) are
    -- held by the nil instance, revoked from the start: the first cluster
    -- instance takes them over.
    INSERT INTO subtask_instances (id, epoch, lease_until, revoked)
        VALUES ('00000000-0000-0000-0000-000000000000', 0, 'epoch', true);
    UPDATE subtask_tasks SET holder = '00000000-0000-0000-0000-000000000000' WHERE parent IS NULL;
",
    "
    CREATE TABLE subtask_journal (
        root  UUID NOT NULL,
        task  UUID NOT NULL,
        n     INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (task, n)
    );
    CREATE INDEX subtask_journal_root ON subtask_journal (root);
",
];

/// The schema version this build writes.
pub const PG_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock key of a subtask database ("sbtk" as a number).
const LOCK_KEY: i64 = 0x7362_746b;

/// Configuration of a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresConfig {
    /// A libpq-style URL or key/value string: `postgres://user@host:port/db`.
    pub url: String,
    /// Wait for the WAL flush at every commit, or not.
    pub durability: Durability,
    /// At most this many batches share one transaction; `1` is one commit
    /// per batch (the baseline group commit is measured against).
    pub max_batches_per_commit: usize,
    /// How long to wait for the server when connecting.
    pub connect_timeout: Duration,
    /// How long the writer keeps reconnecting and retrying a group whose
    /// connection broke (a server restart, a dropped connection) before the
    /// store fails for good. Writers of that group and later ones wait
    /// meanwhile; nothing is acknowledged that is not written.
    pub reconnect_for: Duration,
    /// How long `open` waits for the writer lock before refusing: the
    /// previous holder may be a process killed a moment ago, whose
    /// connection the server has not closed yet.
    pub lock_wait: Duration,
    /// Serve as one instance of a cluster on this database instead of as
    /// its one writer: no writer lock; this instance's row in
    /// `subtask_instances` is registered at open (a new epoch when the id
    /// was there before, which fences any older process with the same id),
    /// every commit proves inside its transaction that the row is neither
    /// revoked nor of a newer epoch (fencing), root rows record this
    /// instance as their holder, and [`TaskStore::load`] returns only the
    /// trees this instance holds. `None`: the single-writer mode.
    pub member: Option<Membership>,
}

/// This instance's identity in a cluster (see [`PostgresConfig::member`]).
#[derive(Debug, Clone)]
pub struct Membership {
    /// The instance id; the same id after a restart takes its trees back
    /// at once.
    pub instance: uuid::Uuid,
    /// How long a lease lasts; renewed every third of it
    /// (`subtask::cluster`).
    pub lease: Duration,
}

/// What [`PostgresStore::open`] registered for a cluster member.
#[derive(Clone)]
pub struct Registration {
    /// The instance id.
    pub instance: uuid::Uuid,
    /// The epoch of this registration under that id: greater than every
    /// epoch the id had before, even one whose row was deleted since.
    pub epoch: i64,
    /// The lease: valid until the registration's start plus the lease, by
    /// this process's monotonic clock; revoked when a commit finds the
    /// instance fenced.
    pub gate: Arc<LeaseGate>,
    /// The store's queue, for [`Registration::fence`].
    writes: std::sync::Weak<WriteQueue<Client>>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("instance", &self.instance)
            .field("epoch", &self.epoch)
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// Fences this registration's store, for an instance that lost its
    /// lease: the lease gate is revoked (no handler is polled again), every
    /// write not yet durable fails with `why` at once (its waiters are
    /// woken), new work and later writes are refused with it, and the
    /// writer commits nothing more (a commit already under way may still
    /// land: it proves the instance's row in its transaction, as every
    /// commit does) and stops. The store cannot be used again; a rejoining
    /// instance opens a new one (a new epoch).
    pub fn fence(&self, why: &str) {
        self.gate.revoke();
        if let Some(q) = self.writes.upgrade() {
            q.mark.fail(
                Ticket(0),
                StoreError::Failed(format!(
                    "instance {} (epoch {}) is fenced: {why}",
                    self.instance, self.epoch
                )),
            );
            q.close();
        }
    }
}

/// Whether the store of `queue` was fenced ([`Registration::fence`]) or
/// failed: it writes nothing more.
fn fenced(queue: &WriteQueue<Client>) -> bool {
    queue.mark.writable().is_err()
}

impl PostgresConfig {
    /// Full durability and unbounded group commit on `url`.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresConfig {
            url: url.into(),
            durability: Durability::Full,
            max_batches_per_commit: usize::MAX,
            connect_timeout: Duration::from_secs(10),
            reconnect_for: Duration::from_secs(60),
            lock_wait: Duration::from_secs(5),
            member: None,
        }
    }
}

/// The PostgreSQL store (feature `postgres`): the store contract on a
/// PostgreSQL database. One writer thread folds every batch queued
/// meanwhile into one transaction (one `unnest` upsert, one delete); one
/// process writes a database at a time (an advisory lock), or each of a
/// cluster's instances writes the trees it holds ([`PostgresConfig::member`],
/// fenced in every commit); a server restart
/// or a dropped connection is waited out by reconnecting and committing the
/// same group again, for up to [`PostgresConfig::reconnect_for`]. Schema,
/// decisions and figures: `docs/scale-out.md`.
pub struct PostgresStore {
    shared: Arc<WriteQueue<Client>>,
    /// Per group commit: its duration and size (`/metrics`).
    stats: Arc<CommitStats>,
    writer: Mutex<Option<JoinHandle<()>>>,
    describe: String,
    registration: Option<Registration>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

/// The URL without its password, for logs and errors.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}{}", &url[..scheme + 3], &url[at..])
        }
        (Some(_), _) => url.to_owned(),
        // key=value form
        (None, _) => url
            .split_whitespace()
            .map(|kv| {
                if kv.starts_with("password=") {
                    "password=…"
                } else {
                    kv
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn uuid(id: TaskId) -> uuid::Uuid {
    uuid::Uuid::from_u128(id.as_u128())
}

fn task_id(u: uuid::Uuid) -> TaskId {
    TaskId::from_u128(u.as_u128())
}

impl PostgresStore {
    /// Connects, takes the database's writer lock, migrates the schema and
    /// starts the writer thread.
    ///
    /// # Errors
    ///
    /// The server cannot be reached ([`StoreError::Io`]); another process
    /// writes the database ([`StoreError::Locked`]); the schema is newer than
    /// this build's ([`StoreError::NewerSchema`]).
    pub fn open(config: PostgresConfig) -> Result<PostgresStore, StoreError> {
        let shown = redacted(&config.url);
        let mut pg: postgres::Config = config
            .url
            .parse()
            .map_err(|e| io(format!("{shown}: not a PostgreSQL URL: {e}")))?;
        pg.connect_timeout(config.connect_timeout);
        // A cluster member's sessions carry its id, so that a survivor
        // (or a restart with the same id) can end the sessions of a
        // stalled process that hold its row's lock.
        match &config.member {
            Some(m) => pg.application_name(&instance_application_name(m.instance)),
            None => pg.application_name("subtask"),
        };
        let mut session = Session {
            pg,
            shown: shown.clone(),
            durability: config.durability,
            reconnect_for: config.reconnect_for,
            writer_lock: config.member.is_none(),
            fence: None,
        };
        let member = config.member.clone();
        let shared = Arc::new(WriteQueue::new());
        let max = config.max_batches_per_commit.max(1);
        let lock_wait = config.lock_wait;
        // The writer thread connects and migrates too: the synchronous client
        // runs a runtime of its own, which must not start on a tokio thread,
        // so `open` is safe to call from async code.
        let (ready_tx, ready_rx) =
            std::sync::mpsc::sync_channel::<Result<Option<Registration>, StoreError>>(1);
        let stats = Arc::new(CommitStats::default());
        let writer = {
            let shared = shared.clone();
            let stats = stats.clone();
            let shown = shown.clone();
            std::thread::Builder::new()
                .name("subtask-pg".into())
                .spawn(move || {
                    let waiting_since = std::time::Instant::now();
                    let opened = loop {
                        match session.connect() {
                            Err(StoreError::Locked(_)) if waiting_since.elapsed() < lock_wait => {
                                std::thread::sleep(Duration::from_millis(100));
                            }
                            other => break other,
                        }
                    };
                    let mut client = match opened {
                        Ok(client) => client,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    if let Err(e) = migrate(&mut client, &shown) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                    let writes = Arc::downgrade(&shared);
                    let registration = match member
                        .map(|m| register(&mut client, &m, &shown, writes))
                        .transpose()
                    {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    session.fence = registration.clone();
                    let _ = ready_tx.send(Ok(registration));
                    writer_loop(client, &session, &shared, &stats, max);
                })
                .map_err(io)?
        };
        let ready = ready_rx
            .recv()
            .unwrap_or_else(|_| Err(StoreError::Failed("the store's writer thread stopped".into())));
        let registration = match ready {
            Ok(r) => r,
            Err(e) => {
                let _ = writer.join();
                return Err(e);
            }
        };
        let describe = format!(
            "{shown} ({})",
            match config.durability {
                Durability::Full => "WAL flush per group commit",
                Durability::Relaxed => "relaxed: synchronous_commit off",
            }
        );
        Ok(PostgresStore {
            shared,
            stats,
            writer: Mutex::new(Some(writer)),
            describe,
            registration,
        })
    }

    /// This process's cluster registration (`None` in the single-writer
    /// mode).
    pub fn registration(&self) -> Option<&Registration> {
        self.registration.as_ref()
    }

    /// Waits until every batch submitted so far is durable (blocking).
    ///
    /// # Errors
    ///
    /// The store failed.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.shared.mark.wait_blocking(self.last_ticket())
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.shared.close();
        if let Some(h) = self.writer.lock().take() {
            // A fenced (or failed) store's writer commits nothing more and
            // stops by itself, possibly after a reconnection pause: it is
            // not waited for (the last reference may go on an async thread).
            if !fenced(&self.shared) {
                let _ = h.join();
            }
        }
    }
}

/// How the writer (re)connects: the server, the writer lock, the session's
/// settings.
struct Session {
    pg: postgres::Config,
    shown: String,
    durability: Durability,
    reconnect_for: Duration,
    /// Take the single-writer advisory lock (not for a cluster member).
    writer_lock: bool,
    /// A cluster member's identity, proven in every commit.
    fence: Option<Registration>,
}

impl Session {
    /// A connection holding the database's writer lock (single-writer
    /// mode), with the durability setting.
    fn connect(&self) -> Result<Client, StoreError> {
        let shown = &self.shown;
        let mut client = self.pg.connect(NoTls).map_err(|e| io(format!("{shown}: {e}")))?;
        let locked: bool = !self.writer_lock
            || client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&LOCK_KEY])
                .map_err(|e| io(format!("{shown}: {e}")))?
                .get(0);
        if !locked {
            return Err(StoreError::Locked(format!(
                "{shown} is used by another subtask process (advisory lock {LOCK_KEY:#x})"
            )));
        }
        let sync = match self.durability {
            Durability::Full => "on",
            Durability::Relaxed => "off",
        };
        client
            .batch_execute(&format!("SET synchronous_commit = {sync}"))
            .map_err(|e| io(format!("{shown}: {e}")))?;
        Ok(client)
    }
}

/// Whether `e` broke the connection or the transaction for reasons that a
/// new connection and a retry of the same group can overcome (the server
/// restarted or went away, a serialization conflict). Anything else (a
/// constraint, a bad statement) fails the store.
fn transient(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        // No SQLSTATE: an I/O error on the socket.
        None => true,
        Some(code) => {
            let c = code.code();
            c.starts_with("08") // connection exception
                || c == "57P01" // admin_shutdown
                || c == "57P02" // crash_shutdown
                || c == "57P03" // cannot_connect_now
                || c == "40001" // serialization_failure
                || c == "40P01" // deadlock_detected
        }
    }
}

/// Commits `group`, reconnecting and retrying it while the failure is
/// transient and `session.reconnect_for` has not passed. A retried group is
/// written whole (its folded upserts and deletes are idempotent), so a
/// commit whose acknowledgement was lost with the connection is harmless
/// to repeat.
fn commit_retrying(
    client: &mut Client,
    statements: &mut Statements,
    session: &Session,
    shared: &WriteQueue<Client>,
    group: &[(u64, WriteBatch)],
) -> Result<(), StoreError> {
    let fence = session.fence.as_ref();
    let mut failure = match commit(client, statements, group, fence) {
        Ok(()) => return Ok(()),
        Err(CommitError::Pg(e)) if transient(&e) => e.to_string(),
        Err(e) => return Err(e.into_store(fence)),
    };
    let deadline = std::time::Instant::now() + session.reconnect_for;
    let mut pause = Duration::from_millis(50);
    tracing::warn!(error = %failure, "the PostgreSQL connection broke; reconnecting, writes wait");
    while std::time::Instant::now() < deadline {
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
        // A fenced instance's store retries nothing (its group failed).
        if fenced(shared) {
            return Err(StoreError::Failed("the store was fenced".into()));
        }
        match session.connect() {
            Ok(fresh) => {
                *client = fresh;
                *statements = Statements::default();
            }
            // Another process took the database while we were away: ours is
            // no longer the writer; going on would corrupt its trees.
            Err(e @ StoreError::Locked(_)) => return Err(e),
            Err(e) => {
                failure = e.to_string();
                continue;
            }
        }
        match commit(client, statements, group, fence) {
            Ok(()) => {
                tracing::info!("reconnected to PostgreSQL; writes go on");
                return Ok(());
            }
            Err(CommitError::Pg(e)) if transient(&e) => failure = e.to_string(),
            Err(e) => return Err(e.into_store(fence)),
        }
    }
    Err(io(format!(
        "{}: no connection for {:?}: {failure}",
        session.shown, session.reconnect_for
    )))
}

/// The `application_name` of every session of cluster instance `id`.
pub fn instance_application_name(id: uuid::Uuid) -> String {
    format!("subtask {id}")
}

/// Registers this process as instance `m.instance`: a new row, or the
/// next epoch of an existing one (fencing an older process with the same
/// id), with a lease from now. The lease gate's deadline is taken before
/// the statement is sent, so by this process's clock it ends no later than
/// the database's `lease_until`.
///
/// An epoch is never given twice to one id, even after the id's row was
/// deleted (a revoked instance that holds nothing is cleaned up): a new row
/// starts at the database clock's milliseconds, and a registration takes
/// the greater of that and the row's epoch plus one. So a process of this
/// id that was fenced and registers again (or a stalled older one) can
/// never find its old epoch valid again.
fn register(
    client: &mut Client,
    m: &Membership,
    shown: &str,
    writes: std::sync::Weak<WriteQueue<Client>>,
) -> Result<Registration, StoreError> {
    // An older process with this id may be stopped in a commit that holds
    // the row's lock: its sessions end first (nothing of that transaction
    // was acknowledged), so the registration does not wait for it.
    // Best effort: without the right to end them, the registration waits
    // for the older process instead.
    if let Err(e) = client.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1 AND pid <> pg_backend_pid()",
        &[&instance_application_name(m.instance)],
    ) {
        tracing::warn!(instance = %m.instance, error = %e, "{shown}: cannot end an older process's sessions");
    }
    let sent = std::time::Instant::now();
    let lease_s = m.lease.as_secs_f64();
    let epoch: i64 = client
        .query_one(
            "INSERT INTO subtask_instances (id, epoch, lease_until, revoked)
             VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                     now() + make_interval(secs => $2), false)
             ON CONFLICT (id) DO UPDATE
                 SET epoch = GREATEST(subtask_instances.epoch + 1, EXCLUDED.epoch),
                     lease_until = EXCLUDED.lease_until, revoked = false
             RETURNING epoch",
            &[&m.instance, &lease_s],
        )
        .map_err(|e| io(format!("{shown}: registering instance {}: {e}", m.instance)))?
        .get(0);
    Ok(Registration {
        instance: m.instance,
        epoch,
        gate: Arc::new(LeaseGate::new(sent + m.lease)),
        writes,
    })
}

/// Creates or upgrades the schema in one transaction, under a transaction
/// advisory lock so that two starting processes do not both migrate.
fn migrate(client: &mut Client, shown: &str) -> Result<(), StoreError> {
    let e = |x: postgres::Error| io(format!("{shown}: {x}"));
    let mut tx = client.transaction().map_err(e)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&(LOCK_KEY + 1)])
        .map_err(e)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS subtask_schema (version BIGINT NOT NULL)")
        .map_err(e)?;
    let found: Option<i64> = tx
        .query_opt("SELECT max(version) FROM subtask_schema", &[])
        .map_err(e)?
        .and_then(|r| r.get(0));
    let found = found.unwrap_or(0);
    if found > PG_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(step).map_err(e)?;
        let version = i as i64 + 1;
        tx.execute("DELETE FROM subtask_schema", &[]).map_err(e)?;
        tx.execute("INSERT INTO subtask_schema (version) VALUES ($1)", &[&version])
            .map_err(e)?;
    }
    tx.commit().map_err(e)
}

/// A group folded into what the database must end up with.
#[derive(Default)]
struct Folded {
    deleted: Vec<uuid::Uuid>,
    /// The last record of each task, in first-write order.
    tasks: Vec<(StoredTask, Option<TreeMeta>)>,
    /// Inbox receipts: (seq, answer).
    receipts: Vec<(i64, String)>,
    /// Journal rows to append: (root, task, n, entry).
    journal: Vec<(uuid::Uuid, uuid::Uuid, i32, String)>,
    /// Every tree the group wrote, once (for a cluster's change
    /// notifications).
    roots: Vec<uuid::Uuid>,
}

fn fold(group: &[(u64, WriteBatch)]) -> Folded {
    let mut out = Folded::default();
    let mut at: IdMap<usize> = IdMap::default();
    let mut metas: IdMap<TreeMeta> = IdMap::default();
    let mut gone: IdMap<()> = IdMap::default();
    let mut roots: IdMap<()> = IdMap::default();
    for (_, batch) in group {
        if roots.insert(batch.root, ()).is_none() {
            out.roots.push(uuid(batch.root));
        }
        for op in &batch.ops {
            match op {
                WriteOp::PutTree(meta) => {
                    metas.insert(meta.root, meta.clone());
                }
                WriteOp::PutTask(task) => {
                    let mut task = task.clone();
                    task.version = batch.version;
                    let meta = if task.parent.is_none() {
                        metas.remove(&task.id)
                    } else {
                        None
                    };
                    match at.get(&task.id) {
                        Some(&i) => {
                            let slot = &mut out.tasks[i];
                            slot.1 = meta.or(slot.1.take());
                            slot.0 = task;
                        }
                        None => {
                            at.insert(task.id, out.tasks.len());
                            out.tasks.push((task, meta));
                        }
                    }
                }
                WriteOp::DeleteTree(root) => {
                    gone.insert(*root, ());
                    out.deleted.push(uuid(*root));
                }
                WriteOp::Receipt { seq, answer, .. } => out.receipts.push((*seq, answer.clone())),
                WriteOp::AppendJournal(row) => {
                    out.journal
                        .push((uuid(row.root), uuid(row.task), row.n as i32, row.entry.clone()));
                }
            }
        }
    }
    // A tree deleted in this group writes nothing more (its ids never come back).
    out.tasks.retain(|(t, _)| !gone.contains_key(&t.root));
    out.journal
        .retain(|(root, ..)| !gone.contains_key(&task_id(*root)));
    out
}

/// Why a commit failed.
enum CommitError {
    Pg(postgres::Error),
    /// This cluster member's row is revoked or of a newer epoch: another
    /// instance took its trees (or a newer process took its id).
    Fenced,
}

impl From<postgres::Error> for CommitError {
    fn from(e: postgres::Error) -> Self {
        CommitError::Pg(e)
    }
}

impl CommitError {
    fn into_store(self, fence: Option<&Registration>) -> StoreError {
        match self {
            // The server's own words (a "db error" alone says nothing).
            CommitError::Pg(e) => match e.as_db_error() {
                Some(db) => io(format!("{e}: {} (SQLSTATE {})", db.message(), db.code().code())),
                None => io(e),
            },
            CommitError::Fenced => {
                let fence = fence.expect("only a cluster member is fenced");
                // Nothing of this instance runs from here on.
                fence.gate.revoke();
                StoreError::Failed(format!(
                    "instance {} (epoch {}) lost its lease: its trees belong to another instance now",
                    fence.instance, fence.epoch
                ))
            }
        }
    }
}

/// Payloads of `NOTIFY`, at most this many items each (the payload limit
/// is 8000 bytes).
const NOTIFY_CHUNK: usize = 150;

/// The writer's statements, prepared once per connection (each is then one
/// round trip instead of two, and planned once).
#[derive(Default)]
struct Statements(HashMap<&'static str, postgres::Statement>);

impl Statements {
    fn get(
        &mut self,
        tx: &mut postgres::Transaction<'_>,
        sql: &'static str,
    ) -> Result<postgres::Statement, postgres::Error> {
        if let Some(s) = self.0.get(sql) {
            return Ok(s.clone());
        }
        let s = tx.prepare(sql)?;
        self.0.insert(sql, s.clone());
        Ok(s)
    }
}

/// `NOTIFY` payloads: ids joined by commas.
fn payloads<T: ToString>(items: &[T]) -> Vec<String> {
    items
        .chunks(NOTIFY_CHUNK)
        .map(|c| c.iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
        .collect()
}

fn commit(
    client: &mut Client,
    statements: &mut Statements,
    group: &[(u64, WriteBatch)],
    fence: Option<&Registration>,
) -> Result<(), CommitError> {
    let f = fold(group);
    let mut tx = client.transaction()?;
    // Instances following these trees for their subscribers re-read them
    // (notifications are delivered at commit, with the change).
    let mut changed = if fence.is_some() {
        payloads(&f.roots)
    } else {
        Vec::new()
    };
    if let Some(fence) = fence {
        // Fencing: a share lock on this instance's row, held to the commit.
        // A takeover revokes the row first (its update waits for this
        // transaction), so a fenced write lands before the takeover reads
        // the tree, or not at all. The first change notification rides on
        // the same statement.
        let st = statements.get(
            &mut tx,
            "SELECT pg_notify('subtask_changed', $3) FROM subtask_instances
             WHERE id = $1 AND epoch = $2 AND NOT revoked FOR SHARE",
        )?;
        let first = if changed.is_empty() {
            String::new()
        } else {
            changed.remove(0)
        };
        let alive = tx.query_opt(&st, &[&fence.instance, &fence.epoch, &first])?;
        if alive.is_none() {
            return Err(CommitError::Fenced);
        }
    }
    // A single-writer store's trees are held by the nil instance (taken
    // over by the first cluster instance on this database).
    let holder = fence.map_or(uuid::Uuid::nil(), |f| f.instance);
    if !f.deleted.is_empty() {
        let st = statements.get(&mut tx, "DELETE FROM subtask_tasks WHERE root = ANY($1)")?;
        tx.execute(&st, &[&f.deleted])?;
        let st = statements.get(&mut tx, "DELETE FROM subtask_journal WHERE root = ANY($1)")?;
        tx.execute(&st, &[&f.deleted])?;
    }
    if !f.journal.is_empty() {
        let n = f.journal.len();
        let (mut root, mut task, mut at, mut entry) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (r, t, i, e) in &f.journal {
            root.push(*r);
            task.push(*t);
            at.push(*i);
            entry.push(e.as_str());
        }
        let st = statements.get(
            &mut tx,
            // Idempotent like the rest of the group: a group whose commit
            // landed but whose acknowledgement was lost with the connection
            // (a PostgreSQL restart) is committed again.
            "INSERT INTO subtask_journal (root, task, n, entry)
             SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[])
             ON CONFLICT (task, n) DO NOTHING",
        )?;
        tx.execute(&st, &[&root, &task, &at, &entry])?;
    }
    if !f.tasks.is_empty() {
        let n = f.tasks.len();
        let (mut id, mut root, mut parent) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut position, mut version, mut state) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut owner, mut resumable, mut launch) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (t, meta) in &f.tasks {
            id.push(uuid(t.id));
            root.push(uuid(t.root));
            parent.push(t.parent.map(uuid));
            position.push(i32::try_from(t.position).unwrap_or(i32::MAX));
            version.push(i64::try_from(t.version).unwrap_or(i64::MAX));
            state.push(t.state.as_str());
            owner.push(meta.as_ref().and_then(|m| m.owner.clone()));
            resumable.push(meta.as_ref().map(|m| m.resumable));
            launch.push(
                meta.as_ref()
                    .and_then(|m| m.launch.as_ref().map(ToString::to_string)),
            );
        }
        // Position, root and parent never change after the first write (I1,
        // I2); the metadata comes with the root's first record (`resumable`
        // is set exactly when a record carries it).
        // A cluster member records itself as the holder of the trees it
        // writes (on root rows; it only ever writes trees it holds).
        let st = statements.get(
            &mut tx,
            "INSERT INTO subtask_tasks (id, root, parent, position, version, state, owner, resumable, launch, holder)
             SELECT id, root, parent, position, version, state, owner, resumable, launch,
                    CASE WHEN parent IS NULL THEN $10::uuid END
             FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int[], $5::bigint[], $6::text[],
                         $7::text[], $8::bool[], $9::text[])
                  AS u(id, root, parent, position, version, state, owner, resumable, launch)
             ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, state = EXCLUDED.state,
                 owner = CASE WHEN EXCLUDED.resumable IS NULL THEN subtask_tasks.owner ELSE EXCLUDED.owner END,
                 resumable = COALESCE(EXCLUDED.resumable, subtask_tasks.resumable),
                 launch = CASE WHEN EXCLUDED.resumable IS NULL THEN subtask_tasks.launch ELSE EXCLUDED.launch END,
                 holder = CASE WHEN subtask_tasks.parent IS NULL THEN EXCLUDED.holder END",
        )?;
        tx.execute(
            &st,
            &[
                &id, &root, &parent, &position, &version, &state, &owner, &resumable, &launch, &holder,
            ],
        )?;
    }
    let notify = "SELECT pg_notify($1, $2)";
    if !f.receipts.is_empty() {
        let (seqs, answers): (Vec<i64>, Vec<&str>) = f.receipts.iter().map(|(q, a)| (*q, a.as_str())).unzip();
        let st = statements.get(
            &mut tx,
            "UPDATE subtask_inbox i SET answer = u.answer::jsonb
             FROM unnest($1::bigint[], $2::text[]) AS u(seq, answer) WHERE i.seq = u.seq",
        )?;
        tx.execute(&st, &[&seqs, &answers])?;
        let st = statements.get(&mut tx, notify)?;
        for payload in payloads(&seqs) {
            tx.execute(&st, &[&"subtask_answer", &payload])?;
        }
    }
    if !changed.is_empty() {
        let st = statements.get(&mut tx, notify)?;
        for payload in changed {
            tx.execute(&st, &[&"subtask_changed", &payload])?;
        }
    }
    tx.commit()?;
    Ok(())
}

fn writer_loop(
    mut client: Client,
    session: &Session,
    shared: &WriteQueue<Client>,
    stats: &CommitStats,
    max: usize,
) {
    let mut group: Vec<(u64, WriteBatch)> = Vec::new();
    let mut statements = Statements::default();
    let mut failed = false;
    loop {
        let read = match shared.next(&mut group, max) {
            Next::Stop => return,
            Next::Read(read) => Some(read),
            Next::Commit => None,
        };
        if let Some(read) = read {
            // A connection that broke while idle is replaced before a read
            // (a failed attempt leaves the read to report the error).
            if client.is_closed()
                && let Ok(fresh) = session.connect()
            {
                client = fresh;
                statements = Statements::default();
            }
            read(&mut client);
            continue;
        }
        let (Some(first), Some(last)) = (group.first().map(|g| g.0), group.last().map(|g| g.0)) else {
            continue;
        };
        // A fenced store (`Registration::fence`) writes nothing more.
        if failed || fenced(shared) {
            group.clear();
            continue;
        }
        let t0 = std::time::Instant::now();
        match commit_retrying(&mut client, &mut statements, session, shared, &group) {
            Ok(()) => {
                stats.committed(t0.elapsed(), group.len());
                shared.mark.advance(Ticket(last));
            }
            Err(e) if fenced(shared) => {
                // The instance fenced itself meanwhile: the group's
                // waiters already have that error.
                tracing::debug!(error = %e, "a fenced instance's commit was not made");
                failed = true;
            }
            Err(e) => {
                tracing::error!(error = %e, "a PostgreSQL commit failed; no further writes are accepted");
                failed = true;
                shared.mark.fail(Ticket(first), e);
            }
        }
        group.clear();
    }
}

/// The trees `roots` (all when `None`), with their journals.
pub(crate) fn read_trees(
    client: &mut Client,
    roots: Option<&[uuid::Uuid]>,
) -> Result<Vec<StoredTree>, StoreError> {
    let (rows, journal) = match roots {
        None => (
            client.query(
                "SELECT id, root, parent, position, version, state, owner, resumable, launch
                 FROM subtask_tasks ORDER BY seq",
                &[],
            ),
            client.query("SELECT task, n, entry FROM subtask_journal ORDER BY task, n", &[]),
        ),
        Some(roots) => (
            client.query(
                "SELECT id, root, parent, position, version, state, owner, resumable, launch
                 FROM subtask_tasks WHERE root = ANY($1) ORDER BY seq",
                &[&roots],
            ),
            client.query(
                "SELECT task, n, entry FROM subtask_journal WHERE root = ANY($1) ORDER BY task, n",
                &[&roots],
            ),
        ),
    };
    trees_of_rows(rows.map_err(io)?, journal.map_err(io)?)
}

/// Trees from rows of `SELECT id, root, parent, position, version, state,
/// owner, resumable, launch`, in the order read, and their journal rows
/// (`SELECT task, n, entry`, in task and entry order).
fn trees_of_rows(
    rows: Vec<postgres::Row>,
    journal: Vec<postgres::Row>,
) -> Result<Vec<StoredTree>, StoreError> {
    let mut entries: IdMap<Vec<String>> = IdMap::default();
    for r in &journal {
        let task = task_id(r.get(0));
        let n: i32 = r.get(1);
        let list = entries.entry(task).or_default();
        if n as usize != list.len() {
            return Err(StoreError::Corrupt(format!(
                "task {task}: journal entry {n} follows {} entries",
                list.len()
            )));
        }
        list.push(r.get(2));
    }
    assemble(rows.iter().map(|r| {
        let mut task = to_task(row_task(r))?;
        if let Some(list) = entries.get(&task.id) {
            task.state = super::with_journal(&task.state, list)?;
        }
        if task.parent.is_some() {
            return Ok((task, None));
        }
        let launch = r
            .get::<_, Option<String>>(8)
            .map(|l| serde_json::from_str(&l))
            .transpose()
            .map_err(|x| StoreError::Corrupt(format!("tree {}: unreadable launch: {x}", task.root)))?;
        let meta = TreeMeta {
            root: task.root,
            owner: r.get(6),
            resumable: r.get::<_, Option<bool>>(7).unwrap_or(false),
            launch,
        };
        Ok((task, Some(meta)))
    }))
}

type TaskRow = (uuid::Uuid, uuid::Uuid, Option<uuid::Uuid>, i32, i64, String);

fn to_task((id, root, parent, position, version, state): TaskRow) -> Result<StoredTask, StoreError> {
    Ok(StoredTask {
        id: task_id(id),
        root: task_id(root),
        parent: parent.map(task_id),
        position: u32::try_from(position)
            .map_err(|_| StoreError::Corrupt(format!("task {id}: negative position {position}")))?,
        version: u64::try_from(version)
            .map_err(|_| StoreError::Corrupt(format!("task {id}: negative version {version}")))?,
        state,
    })
}

fn row_task(r: &postgres::Row) -> TaskRow {
    (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))
}

impl TaskStore for PostgresStore {
    fn submit(&self, batch: WriteBatch) -> Ticket {
        self.shared.submit(batch)
    }

    fn commit_stats(&self) -> Option<&CommitStats> {
        Some(&self.stats)
    }

    fn writable(&self) -> Result<(), StoreError> {
        self.shared.mark.writable()
    }

    fn is_durable(&self, ticket: Ticket) -> Result<bool, StoreError> {
        self.shared.mark.check(ticket)
    }

    fn wait_durable(&self, ticket: Ticket) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(self.shared.mark.clone().wait(ticket))
    }

    fn last_ticket(&self) -> Ticket {
        self.shared.last_ticket()
    }

    fn load(&self) -> Result<Vec<StoredTree>, StoreError> {
        let holder = self.registration.as_ref().map(|r| r.instance);
        self.shared.read(move |client| match holder {
            None => read_trees(client, None),
            // A cluster member loads the trees it holds.
            Some(me) => {
                let roots: Vec<uuid::Uuid> = client
                    .query("SELECT id FROM subtask_tasks WHERE holder = $1", &[&me])
                    .map_err(io)?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                read_trees(client, Some(&roots))
            }
        })
    }

    fn get(&self, id: TaskId) -> Result<Option<StoredTask>, StoreError> {
        self.shared.read(move |client| {
            let row = client
                .query_opt(
                    "SELECT id, root, parent, position, version, state FROM subtask_tasks WHERE id = $1",
                    &[&uuid(id)],
                )
                .map_err(io)?;
            row.map(|r| to_task(row_task(&r))).transpose()
        })
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_log() {
        assert_eq!(
            redacted("postgres://ann:secret@db:5432/x"),
            "postgres://ann@db:5432/x"
        );
        assert_eq!(redacted("postgres://ann@db/x"), "postgres://ann@db/x");
        assert_eq!(
            redacted("host=db user=ann password=x"),
            "host=db user=ann password=…"
        );
    }
}
