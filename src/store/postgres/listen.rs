//! The notifications between cluster instances, on a session of their own
//! (`LISTEN` belongs to a session, and its notifications must be read as
//! they come): `subtask_answer` (inbox seqs answered), `subtask_changed`
//! (trees a commit wrote), `subtask_inbox` (a command for a holder),
//! `subtask_workers` (what workers serve changed) and `subtask_mail`
//! (worker news for an instance, `workers.rs`).
//! The commits and the inbox send them (`commit.rs`, `inbox.rs`).

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;

use super::session::{Conn, Connector};
use super::{io, task_id};
use crate::model::TaskId;
use crate::store::StoreError;

/// A notification, decoded.
#[derive(Debug)]
pub(crate) enum Note {
    /// Commands passed on were answered (their inbox seqs).
    Answered(Vec<i64>),
    /// A commit wrote these trees (their roots).
    Changed(Vec<TaskId>),
    /// A command was stored for the holder named (`None`: no holder known).
    Inbox(Option<uuid::Uuid>),
    /// Some instance's workers serve other tools now.
    Workers,
    /// Worker news was stored for the instance named.
    Mail(Option<uuid::Uuid>),
}

impl Note {
    /// The notification on `channel` with `payload` (comma-separated ids;
    /// an unreadable item is skipped), `None` for another channel.
    fn parse(channel: &str, payload: &str) -> Option<Note> {
        Some(match channel {
            "subtask_answer" => Note::Answered(payload.split(',').filter_map(|s| s.parse().ok()).collect()),
            "subtask_changed" => Note::Changed(
                payload
                    .split(',')
                    .filter_map(|s| s.parse::<uuid::Uuid>().ok())
                    .map(task_id)
                    .collect(),
            ),
            "subtask_inbox" => Note::Inbox(payload.parse().ok()),
            "subtask_workers" => Note::Workers,
            "subtask_mail" => Note::Mail(payload.parse().ok()),
            _ => return None,
        })
    }
}

/// A session listening to the cluster's channels.
pub(crate) struct Listener(Conn);

impl Listener {
    /// A new session (made by `connector`) listening to every channel.
    ///
    /// # Errors
    ///
    /// The server cannot be reached ([`StoreError::Io`]).
    pub(crate) fn open(connector: &Connector) -> Result<Listener, StoreError> {
        let mut conn = connector.connect()?;
        conn.batch_execute(
            "LISTEN subtask_answer; LISTEN subtask_changed; LISTEN subtask_inbox; LISTEN subtask_workers; \
             LISTEN subtask_mail",
        )
        .map_err(io)?;
        Ok(Listener(conn))
    }

    /// Whether the session is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.0.is_closed()
    }

    /// Hands `each` the notifications that arrive until none has for
    /// `quiet` (blocking).
    ///
    /// # Errors
    ///
    /// Reading them failed (the connection broke): see [`Listener::alive`].
    pub(crate) fn deliver(&mut self, quiet: Duration, mut each: impl FnMut(Note)) -> Result<(), StoreError> {
        let mut notes = self.0.notifications();
        let mut it = notes.timeout_iter(quiet);
        loop {
            match it.next() {
                Ok(Some(n)) => {
                    if let Some(note) = Note::parse(n.channel(), n.payload()) {
                        each(note);
                    }
                }
                Ok(None) => return Ok(()),
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// Whether the session still answers (a round trip: makes a dead
    /// connection show as closed).
    pub(crate) fn alive(&mut self) -> bool {
        !self.0.is_closed() && self.0.simple_query("").is_ok()
    }
}
