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
//! Schema (version 5), in the database's current schema: `subtask_tasks`,
//! one row per task, the tree's metadata and its holder on its root's row,
//! `id` the primary key; `subtask_instances`, `subtask_inbox` and
//! `subtask_live` for a cluster of instances; `subtask_journal`;
//! `subtask_worker_tools` and `subtask_worker_mail`; `subtask_keys`, one
//! check value per encryption key id (`docs/encryption.md`);
//! `subtask_schema(version)` (`docs/scale-out.md`, "Schema"). Migrations run in one transaction under
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
//!
//! Files by concern: `schema.rs` (migrations), `session.rs` (connecting,
//! a connection's prepared statements, a cluster member's pool, and
//! retrying a commit), `membership.rs` (a cluster member's registration,
//! lease and fencing), `commit.rs` (folding a group and the writer
//! thread), `read.rs` (decoding stored rows). What a cluster member
//! (`crate::server::Cluster`) asks of the database besides its store's
//! commits is here too, so that the server spells no SQL: `remote.rs`
//! (reading trees another instance holds), `inbox.rs` (commands passed on
//! and their answers), `cluster.rs` (leases, takeover, live counts,
//! cleanup), `listen.rs` (the notifications between instances)
//! and `reencrypt.rs` (every value sealed again with the current key).
//! With [`PostgresConfig::keys`], every value that can hold user data is
//! sealed where it is written and opened where it is read (`seal.rs`).

#[cfg(feature = "server")]
pub(crate) mod cluster;
mod commit;
#[cfg(feature = "server")]
pub(crate) mod inbox;
#[cfg(feature = "server")]
pub(crate) mod listen;
mod membership;
mod read;
mod reencrypt;
#[cfg(feature = "server")]
pub(crate) mod remote;
mod schema;
mod session;
#[cfg(feature = "server")]
pub(crate) mod workers;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use postgres::Client;

use super::queue::WriteQueue;
#[cfg(feature = "server")]
use super::seal;
use super::seal::Keyring;
use super::{CommitStats, Durability, StoreError, StoredTask, StoredTree, TaskStore, Ticket, WriteBatch};
use crate::model::TaskId;
use commit::writer_loop;
use membership::{fenced, register};
use read::{read_trees_with, row_task, to_task};
use schema::{check_keys, migrate};
pub(crate) use session::Connector;
use session::Session;
#[cfg(feature = "server")]
pub(crate) use session::{Conn, Pool};

pub use membership::{Membership, Registration, instance_application_name};
#[cfg(feature = "server")]
pub(crate) use read::read_trees;
pub use schema::PG_SCHEMA_VERSION;

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
    /// Seal task state at rest with these keys (`docs/encryption.md`):
    /// task states, launches, journal entries, inbox commands and answers
    /// and worker news are written sealed with the first key; values
    /// sealed with the others (and clear ones) are read. Refused at open
    /// like `SqliteConfig::keys`. Every
    /// session of a cluster member opened from this configuration seals
    /// and opens with them: a cluster's `ClusterConfig::store` must be this
    /// configuration (as `subtask serve` sets it), or its pool would
    /// write inbox commands in clear and not open what others sealed.
    /// `None`: values are written in clear.
    pub keys: Option<Arc<Keyring>>,
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
            keys: None,
        }
    }

    /// How every session opened with this configuration connects: the
    /// store's writer, and a cluster member's own connections
    /// (`crate::server::Cluster`). A cluster member's sessions carry its
    /// id as their `application_name`, so that a survivor (or a restart
    /// with the same id) can end the sessions of a stalled process that
    /// hold its row's lock.
    pub(crate) fn connector(&self) -> Result<Connector, StoreError> {
        let shown = redacted(&self.url);
        let mut pg: postgres::Config = self
            .url
            .parse()
            .map_err(|e| io(format!("{shown}: not a PostgreSQL URL: {e}")))?;
        pg.connect_timeout(self.connect_timeout);
        match &self.member {
            Some(m) => pg.application_name(&instance_application_name(m.instance)),
            None => pg.application_name("subtask"),
        };
        Ok(Connector {
            pg,
            shown,
            keys: self.keys.clone(),
        })
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
    keys: Option<Arc<Keyring>>,
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

/// A stored value opened for a caller whose errors are PostgreSQL's (a
/// cluster member's reads of the inbox, of other instances' trees, of
/// worker news): one that does not open is logged with the reason and
/// handed on as stored, which its reader then reports as unreadable (an
/// internal error to the client, never a guess). `jsonb` is true for the
/// inbox's `jsonb` columns, where a sealed value is a JSON string.
#[cfg(feature = "server")]
fn open_logged(keys: Option<&Keyring>, place: seal::Place, text: String, jsonb: bool) -> String {
    let sealed = if jsonb {
        if !text.starts_with("\"sealed:") {
            return text;
        }
        match serde_json::from_str::<String>(&text) {
            Ok(s) => s,
            Err(_) => return text,
        }
    } else {
        if !text.starts_with(seal::SEALED) {
            return text;
        }
        text.clone()
    };
    match seal::open(keys, place, &sealed) {
        Ok(v) => v.into_owned(),
        Err(e) => {
            tracing::error!(error = %e, "a stored value does not open");
            text
        }
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
        let connector = config.connector()?;
        let shown = connector.shown.clone();
        let mut session = Session {
            connector,
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
                    // A panic fails the store instead of leaving its
                    // callers waiting.
                    let _guard = shared.writer_guard();
                    let waiting_since = std::time::Instant::now();
                    let opened = loop {
                        match session.connect() {
                            Err(StoreError::Locked(_)) if waiting_since.elapsed() < lock_wait => {
                                std::thread::sleep(Duration::from_millis(100));
                            }
                            other => break other,
                        }
                    };
                    let mut conn = match opened {
                        Ok(conn) => conn,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    if let Err(e) = migrate(&mut conn, &shown) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                    if let Err(e) = check_keys(&mut conn, &shown) {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                    let writes = Arc::downgrade(&shared);
                    let registration = match member
                        .map(|m| register(&mut conn, &m, &shown, writes))
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
                    writer_loop(conn, &session, &shared, &stats, max);
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
            "{shown} ({}{})",
            match config.durability {
                Durability::Full => "WAL flush per group commit",
                Durability::Relaxed => "relaxed: synchronous_commit off",
            },
            match &config.keys {
                Some(k) => format!("; sealed with key {:?}", k.current()),
                None => String::new(),
            }
        );
        Ok(PostgresStore {
            shared,
            stats,
            writer: Mutex::new(Some(writer)),
            describe,
            registration,
            keys: config.keys,
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

/// The roots of the trees instance `me` holds, but those it let go of once
/// finished: what it loads at start and after a takeover.
pub(crate) fn held_roots(client: &mut Client, me: uuid::Uuid) -> Result<Vec<uuid::Uuid>, postgres::Error> {
    Ok(client
        .query(
            "SELECT id FROM subtask_tasks WHERE holder = $1 AND parent IS NULL
               AND NOT EXISTS (SELECT 1 FROM subtask_released x WHERE x.root = subtask_tasks.id)",
            &[&me],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

impl TaskStore for PostgresStore {
    /// A cluster member's store: its cluster answers for the trees its
    /// runtime let go of from the rows, as for the trees other instances
    /// hold. A store outside a cluster keeps finished trees in memory.
    fn lets_finished_go(&self) -> bool {
        self.registration.is_some()
    }

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
        let keys = self.keys.clone();
        // Trees let go of once finished stay in the rows, not in memory.
        self.shared.read(move |client| {
            let roots: Vec<uuid::Uuid> = match holder {
                None => client
                    .query(
                        "SELECT id FROM subtask_tasks WHERE parent IS NULL AND NOT EXISTS (SELECT 1 FROM subtask_released x WHERE x.root = subtask_tasks.id)",
                        &[],
                    )
                    .map_err(io)?
                    .iter()
                    .map(|r| r.get(0))
                    .collect(),
                // A cluster member loads the trees it holds.
                Some(me) => held_roots(client, me).map_err(io)?,
            };
            read_trees_with(client, Some(&roots), keys.as_deref())
        })
    }

    fn get(&self, id: TaskId) -> Result<Option<StoredTask>, StoreError> {
        let keys = self.keys.clone();
        self.shared.read(move |client| {
            let row = client
                .query_opt(
                    "SELECT id, root, parent, position, version, state FROM subtask_tasks WHERE id = $1",
                    &[&uuid(id)],
                )
                .map_err(io)?;
            row.map(|r| to_task(row_task(&r), keys.as_deref())).transpose()
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
