//! How the writer connects, and retries a group's commit across a broken
//! connection.

use std::time::Duration;

use postgres::{Client, NoTls};

use super::commit::{CommitError, Statements, commit};
use super::membership::{Registration, fenced};
use super::{LOCK_KEY, io};
use crate::store::queue::WriteQueue;
use crate::store::{Durability, StoreError, WriteBatch};

/// How the writer (re)connects: the server, the writer lock, the session's
/// settings.
pub(super) struct Session {
    pub(super) pg: postgres::Config,
    pub(super) shown: String,
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
    pub(super) fn connect(&self) -> Result<Client, StoreError> {
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
    let mut pauses = crate::retry::delays(Duration::from_millis(50), Duration::from_secs(1));
    tracing::warn!(error = %failure, "the PostgreSQL connection broke; reconnecting, writes wait");
    while std::time::Instant::now() < deadline {
        std::thread::sleep(pauses.next().unwrap_or(Duration::from_secs(1)));
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
