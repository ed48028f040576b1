//! Protocol eras: the versions of the `initialize` handshake this server
//! answers, what each of them has, and the era of one stdio connection.
//!
//! A 2026-07-28 request carries its version in `_meta` and needs no
//! session. The versions before it open one with `initialize`: over
//! Streamable HTTP the version then comes back on every request (the
//! `MCP-Protocol-Version` header, from 2025-06-18 on; a request with
//! neither header nor `_meta` is 2025-03-26, as the 2025-06-18 transport
//! text says), so the HTTP endpoint stays stateless. A stdio connection
//! has no header: it is a session for the whole process, of the era its
//! first `initialize` or first 2026-07-28 request chose ([`Connection`]).

use std::collections::HashSet;
use std::sync::OnceLock;

use futures::StreamExt;
use futures::stream::BoxStream;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::model::{ErrorCode, ErrorObject, PROTOCOL_VERSION, TaskId};

/// A protocol version of the `initialize` era, oldest first, so that `<`
/// compares release dates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LegacyVersion {
    /// 2024-11-05: tools, no batches (stdio only here: its HTTP+SSE
    /// transport is not served).
    V2024_11_05,
    /// 2025-03-26: JSON-RPC batches, tool annotations, Streamable HTTP
    /// without the `MCP-Protocol-Version` header.
    V2025_03_26,
    /// 2025-06-18: structured tool output and elicitation; batches removed.
    V2025_06_18,
    /// 2025-11-25: the tasks utility (SEP-1686), with SEP-2268 subtasks.
    V2025_11_25,
}

impl LegacyVersion {
    /// Newest first, as [`super::LEGACY_VERSIONS`] lists them.
    pub(crate) const ALL: [LegacyVersion; 4] = [
        LegacyVersion::V2025_11_25,
        LegacyVersion::V2025_06_18,
        LegacyVersion::V2025_03_26,
        LegacyVersion::V2024_11_05,
    ];

    /// The newest: what an `initialize` asking for a version this server
    /// does not know is answered with.
    pub(crate) const LATEST: LegacyVersion = LegacyVersion::V2025_11_25;

    /// The version's name on the wire.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            LegacyVersion::V2024_11_05 => "2024-11-05",
            LegacyVersion::V2025_03_26 => "2025-03-26",
            LegacyVersion::V2025_06_18 => "2025-06-18",
            LegacyVersion::V2025_11_25 => "2025-11-25",
        }
    }

    /// The version named `name`, if this server speaks it.
    pub(crate) fn parse(name: &str) -> Option<LegacyVersion> {
        Self::ALL.into_iter().find(|v| v.as_str() == name)
    }

    /// What `initialize` answers to a client asking for `requested`: that
    /// version if it is known, else the newest (the client disconnects if
    /// it does not speak it: lifecycle, "Version Negotiation").
    pub(crate) fn negotiate(requested: Option<&str>) -> LegacyVersion {
        requested.and_then(Self::parse).unwrap_or(Self::LATEST)
    }

    /// Whether the tasks utility exists (`params.task`, `tasks/*`).
    pub(crate) fn has_tasks(self) -> bool {
        self >= LegacyVersion::V2025_11_25
    }

    /// Whether a server must take JSON-RPC batches (2025-03-26 only: the
    /// next version removed them).
    pub(crate) fn has_batches(self) -> bool {
        self == LegacyVersion::V2025_03_26
    }

    /// Whether tool results may carry `structuredContent` (2025-06-18 on).
    pub(crate) fn has_structured_content(self) -> bool {
        self >= LegacyVersion::V2025_06_18
    }
}

/// The era a stdio connection settled on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// `initialize` came first: a session of this version.
    Legacy(LegacyVersion),
    /// A request with 2026-07-28 `_meta` came first: stateless requests.
    Modern,
}

/// One stdio connection: the era its first `initialize` or first
/// 2026-07-28 request chose, kept for its whole life, and the status
/// notifications it writes for the tasks it follows.
///
/// Made by [`super::stdio::serve_lines`]; the HTTP endpoint has none (its
/// requests say their version themselves).
#[derive(Debug)]
pub struct Connection {
    era: OnceLock<Era>,
    /// Where messages for the client go (the writer of stdout).
    outbox: mpsc::Sender<String>,
    /// Tasks whose status changes this connection writes out.
    followed: Mutex<HashSet<TaskId>>,
    /// The followers, ended when the connection ends.
    followers: Mutex<Vec<AbortHandle>>,
}

impl Connection {
    /// A connection whose server-to-client messages go to `outbox`.
    pub(crate) fn new(outbox: mpsc::Sender<String>) -> Self {
        Connection {
            era: OnceLock::new(),
            outbox,
            followed: Mutex::default(),
            followers: Mutex::default(),
        }
    }

    /// The era chosen so far, if any.
    pub(crate) fn era(&self) -> Option<Era> {
        self.era.get().copied()
    }

    /// Chooses `era` for good if none was chosen; the era in force either way.
    pub(crate) fn settle(&self, era: Era) -> Era {
        *self.era.get_or_init(|| era)
    }

    /// Writes the notifications of `notes` (task `id`'s status changes,
    /// each with whether it is the last) as they come, once per task, until
    /// the last one or the connection's end.
    /// `notes` is called only for a task not followed yet.
    pub(crate) fn follow(&self, id: TaskId, notes: impl FnOnce() -> BoxStream<'static, (String, bool)>) {
        if !self.followed.lock().insert(id) {
            return;
        }
        let outbox = self.outbox.clone();
        let mut notes = notes();
        let task = tokio::spawn(async move {
            let mut last: Option<String> = None;
            while let Some((note, terminal)) = notes.next().await {
                if last.as_deref() != Some(note.as_str()) {
                    if outbox.send(note.clone()).await.is_err() {
                        return;
                    }
                    last = Some(note);
                }
                if terminal {
                    return;
                }
            }
        });
        let mut followers = self.followers.lock();
        followers.retain(|h| !h.is_finished());
        followers.push(task.abort_handle());
    }

    /// Ends the followers (the client went away).
    pub(crate) fn close(&self) {
        for h in self.followers.lock().drain(..) {
            h.abort();
        }
    }
}

/// The refusal of a request whose era differs from its connection's.
pub(crate) fn mixed_eras(era: Era, got: &str) -> ErrorObject {
    let (this, how) = match era {
        Era::Legacy(v) => (
            format!("protocol {} (negotiated by initialize)", v.as_str()),
            "requests on it carry no io.modelcontextprotocol/protocolVersion `_meta`",
        ),
        Era::Modern => (
            format!("protocol {PROTOCOL_VERSION} (per-request `_meta`)"),
            "it takes no initialize",
        ),
    };
    ErrorObject::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "this connection speaks {this} and {how}; got {got}. One connection speaks one era: \
             start a new server process for the other"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_negotiate_to_themselves_or_the_newest() {
        for v in LegacyVersion::ALL {
            assert_eq!(LegacyVersion::negotiate(Some(v.as_str())), v);
        }
        assert_eq!(
            LegacyVersion::negotiate(Some("2099-01-01")),
            LegacyVersion::LATEST
        );
        assert_eq!(LegacyVersion::negotiate(None), LegacyVersion::LATEST);
        assert_eq!(
            LegacyVersion::ALL.map(LegacyVersion::as_str),
            super::super::LEGACY_VERSIONS
        );
    }

    #[test]
    fn features_follow_the_version_table() {
        use LegacyVersion::*;
        let row = |v: LegacyVersion| (v.has_tasks(), v.has_batches(), v.has_structured_content());
        assert_eq!(row(V2024_11_05), (false, false, false));
        assert_eq!(row(V2025_03_26), (false, true, false));
        assert_eq!(row(V2025_06_18), (false, false, true));
        assert_eq!(row(V2025_11_25), (true, false, true));
    }

    #[test]
    fn the_first_era_stays() {
        let (tx, _rx) = mpsc::channel(1);
        let c = Connection::new(tx);
        assert_eq!(c.era(), None);
        assert_eq!(
            c.settle(Era::Legacy(LegacyVersion::V2025_03_26)),
            Era::Legacy(LegacyVersion::V2025_03_26)
        );
        assert_eq!(c.settle(Era::Modern), Era::Legacy(LegacyVersion::V2025_03_26));
    }
}
