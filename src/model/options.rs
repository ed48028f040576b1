//! What a caller chooses about a task, and what a command achieved, shared
//! by the runtime's API and the core: how a client sees tasks
//! ([`ClientView`]), the options of a new root task ([`RootOptions`]) and
//! what a cancel did ([`CancelOutcome`]). They live in `model` so that the
//! runtime's signatures name no core type.

/// How a client sees tasks: whether it declared SEP-2669's `pause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientView {
    /// `true` when the client understands the `paused` status. Otherwise a
    /// paused task is shown as `working` with a status message saying it is
    /// paused.
    pub show_paused: bool,
}

impl ClientView {
    /// A client that declared the `pause` sub-capability.
    pub const PAUSE_AWARE: ClientView = ClientView { show_paused: true };
    /// A base-extension client.
    pub const BASE: ClientView = ClientView { show_paused: false };
}

/// Options of a new root task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RootOptions {
    /// TTL in milliseconds from creation; `None` is unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: Option<u64>,
}

/// What `tasks/cancel` achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum CancelOutcome {
    /// The cancel was accepted and propagated to every live descendant.
    Accepted,
    /// A cancel or failure was already under way.
    AlreadyEnding,
    /// The task was already terminal; nothing changed.
    AlreadyTerminal,
}
