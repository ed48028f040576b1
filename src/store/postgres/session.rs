//! How every session of a PostgreSQL store or cluster member connects
//! ([`Connector`]), a connection with the statements prepared on it
//! ([`Conn`]), a pool of them for a cluster member's own work ([`Pool`]),
//! and how the writer retries a group's commit across a broken connection.
//!
//! The writer's connection, a cluster member's pooled connections and its
//! dedicated lease and LISTEN connections are all made here, by one
//! [`Connector`] built from one [`PostgresConfig`](super::PostgresConfig)
//! ([`PostgresConfig::connector`](super::PostgresConfig::connector)): the
//! same server, connect timeout and `application_name`.

use std::collections::HashMap;
use std::time::Duration;

use postgres::{Client, GenericClient, NoTls};

use super::commit::{CommitError, commit};
use super::membership::{Registration, fenced};
use super::{LOCK_KEY, io};
use crate::store::queue::WriteQueue;
use crate::store::{Durability, StoreError, WriteBatch};

/// How to open a session on the database: the server's settings (its
/// URL, the connect timeout, the `application_name` every session of a
/// cluster member carries) and the URL as logs show it (no password).
pub(crate) struct Connector {
    pub(super) pg: postgres::Config,
    pub(super) shown: String,
    /// The keys every connection seals and opens stored values with.
    pub(super) keys: Option<std::sync::Arc<crate::store::Keyring>>,
}

impl Connector {
    /// A new session (blocking; never on an async thread: the synchronous
    /// client runs a runtime of its own).
    pub(super) fn client(&self) -> Result<Client, postgres::Error> {
        self.pg.connect(NoTls)
    }

    /// A new session with no statement prepared yet, for work besides the
    /// writer's (a cluster member's pool, lease and LISTEN connections).
    ///
    /// # Errors
    ///
    /// The server cannot be reached ([`StoreError::Io`], PostgreSQL's own
    /// words).
    #[cfg(feature = "server")]
    pub(crate) fn connect(&self) -> Result<Conn, StoreError> {
        self.client().map(|c| Conn::new(c, self.keys.clone())).map_err(io)
    }

    /// A connection of its own, opened at its first use.
    #[cfg(feature = "server")]
    pub(crate) fn dedicated(&self) -> Dedicated<'_> {
        Dedicated {
            connector: self,
            conn: None,
        }
    }
}

/// A connection of one thread's own (a cluster member's lease renewal,
/// which must not queue behind other work), opened again by its
/// [`Connector`] at the next call once it broke or a call on it failed.
#[cfg(feature = "server")]
pub(crate) struct Dedicated<'a> {
    connector: &'a Connector,
    conn: Option<Conn>,
}

#[cfg(feature = "server")]
impl Dedicated<'_> {
    /// Runs `f` on the connection, opening it first if there is none or it
    /// is closed (blocking). After a failure the connection is dropped: the
    /// next call opens a new one.
    ///
    /// # Errors
    ///
    /// No connection could be opened, or `f` failed ([`StoreError::Io`]).
    pub(crate) fn run<R>(
        &mut self,
        f: impl FnOnce(&mut Conn) -> Result<R, postgres::Error>,
    ) -> Result<R, StoreError> {
        let r = (|| {
            if self.conn.as_ref().is_none_or(Conn::is_closed) {
                self.conn = Some(self.connector.connect()?);
            }
            let conn = self.conn.as_mut().expect("connected above");
            f(conn).map_err(io)
        })();
        if r.is_err() {
            self.conn = None;
        }
        r
    }
}

/// Statements prepared on one connection, by their text: a statement run
/// often is then one round trip instead of two, and planned once per
/// connection instead of at every call.
#[derive(Default)]
pub(super) struct Statements(HashMap<&'static str, postgres::Statement>);

impl Statements {
    /// `sql`, prepared through `client` (the connection or a transaction
    /// on it) the first time it is asked for.
    pub(super) fn get<C: GenericClient>(
        &mut self,
        client: &mut C,
        sql: &'static str,
    ) -> Result<postgres::Statement, postgres::Error> {
        if let Some(s) = self.0.get(sql) {
            return Ok(s.clone());
        }
        let s = client.prepare(sql)?;
        self.0.insert(sql, s.clone());
        Ok(s)
    }
}

/// A connection and the statements prepared on it. A new connection (after
/// one broke) starts with none: prepared statements belong to a session.
pub(crate) struct Conn {
    pub(super) client: Client,
    pub(super) statements: Statements,
    /// The keys stored values are sealed and opened with (`None`: clear).
    pub(super) keys: Option<std::sync::Arc<crate::store::Keyring>>,
}

impl Conn {
    pub(super) fn new(client: Client, keys: Option<std::sync::Arc<crate::store::Keyring>>) -> Conn {
        Conn {
            client,
            statements: Statements::default(),
            keys,
        }
    }

    /// `sql`, prepared on this connection once.
    #[cfg(feature = "server")]
    pub(super) fn statement(&mut self, sql: &'static str) -> Result<postgres::Statement, postgres::Error> {
        self.statements.get(&mut self.client, sql)
    }

    /// Whether the connection is closed (the server went away, or the
    /// session was ended): it is not used again.
    pub(crate) fn is_closed(&self) -> bool {
        self.client.is_closed()
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

/// Idle connections kept for a cluster member's work besides commits:
/// reads of trees held elsewhere, the inbox, takeovers, live counts and
/// cleanup. A call takes one (or opens one), and gives it back unless it
/// broke; at most [`Pool::IDLE`] are kept.
#[cfg(feature = "server")]
pub(crate) struct Pool {
    connector: Connector,
    idle: parking_lot::Mutex<Vec<Conn>>,
}

#[cfg(feature = "server")]
impl Pool {
    /// At most this many idle connections are kept.
    const IDLE: usize = 16;

    /// An empty pool whose connections `connector` opens.
    pub(crate) fn new(connector: Connector) -> Pool {
        Pool {
            connector,
            idle: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// How this pool connects (for the dedicated connections made with the
    /// same settings).
    pub(crate) fn connector(&self) -> &Connector {
        &self.connector
    }

    /// Runs `f` on a pooled connection (blocking).
    ///
    /// # Errors
    ///
    /// No connection could be opened, or `f` failed ([`StoreError::Io`]).
    pub(crate) fn run<R>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<R, postgres::Error>,
    ) -> Result<R, StoreError> {
        let pooled = self.idle.lock().pop();
        let mut conn = match pooled {
            Some(c) if !c.is_closed() => c,
            _ => self.connector.connect()?,
        };
        let r = f(&mut conn);
        if conn.is_closed() {
            // What broke this connection (the server restarted, this
            // instance's sessions were ended) most likely broke the idle
            // ones too: they are not tried one by one.
            let idle = std::mem::take(&mut *self.idle.lock());
            drop(idle);
        } else {
            let mut idle = self.idle.lock();
            if idle.len() < Self::IDLE {
                idle.push(conn);
            }
        }
        r.map_err(io)
    }
}

#[cfg(feature = "server")]
impl Drop for Pool {
    fn drop(&mut self) {
        // A synchronous client runs a runtime of its own to close its
        // connection, which must not happen on an async thread (the last
        // reference may go there, as when a server stops).
        let idle = std::mem::take(&mut *self.idle.lock());
        if !idle.is_empty() {
            let _ = std::thread::Builder::new()
                .name("subtask-pool-close".into())
                .spawn(move || drop(idle));
        }
    }
}

/// How the writer (re)connects: the server, the writer lock, the session's
/// settings.
pub(super) struct Session {
    pub(super) connector: Connector,
    pub(super) durability: Durability,
    pub(super) reconnect_for: Duration,
    /// Take the single-writer advisory lock (not for a cluster member).
    pub(super) writer_lock: bool,
    /// A cluster member's identity, proven in every commit.
    pub(super) fence: Option<Registration>,
}

impl Session {
    /// A connection holding the database's writer lock (single-writer
    /// mode), with the durability setting.
    pub(super) fn connect(&self) -> Result<Conn, StoreError> {
        let shown = &self.connector.shown;
        let mut client = self.connector.client().map_err(|e| io(format!("{shown}: {e}")))?;
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
        Ok(Conn::new(client, self.connector.keys.clone()))
    }
}

/// Whether `e` broke the connection or the transaction for reasons that a
/// new connection and a retry of the same group can overcome (the server
/// restarted or went away, a serialization conflict). Anything else (a
/// constraint, a bad statement) fails the store.
pub(super) fn transient(e: &postgres::Error) -> bool {
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
pub(super) fn commit_retrying(
    conn: &mut Conn,
    session: &Session,
    shared: &WriteQueue<Client>,
    group: &[(u64, WriteBatch)],
) -> Result<(), StoreError> {
    let fence = session.fence.as_ref();
    let mut failure = match commit(conn, group, fence) {
        Ok(()) => return Ok(()),
        Err(CommitError::Pg(e)) if transient(&e) => e.to_string(),
        Err(e) => return Err(e.into_store(fence)),
    };
    let deadline = std::time::Instant::now() + session.reconnect_for;
    let mut pauses = crate::retry::delays(Duration::from_millis(50), Duration::from_secs(1));
    tracing::warn!(error = %failure, "the PostgreSQL connection broke; reconnecting, writes wait");
    while std::time::Instant::now() < deadline {
        std::thread::sleep(pauses.next().unwrap_or(Duration::from_secs(1)));
        // A fenced instance's store retries nothing (its group failed).
        if fenced(shared) {
            return Err(StoreError::Failed("the store was fenced".into()));
        }
        match session.connect() {
            Ok(fresh) => *conn = fresh,
            // Another process took the database while we were away: ours is
            // no longer the writer; going on would corrupt its trees.
            Err(e @ StoreError::Locked(_)) => return Err(e),
            Err(e) => {
                failure = e.to_string();
                continue;
            }
        }
        match commit(conn, group, fence) {
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
        session.connector.shown, session.reconnect_for
    )))
}
