//! Wire task statuses, including SEP-2669's `paused`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The status of a task as clients see it.
///
/// `completed`, `failed` and `cancelled` are terminal and absorbing. `paused`
/// comes from SEP-2669 and is only shown to clients that declared the `pause`
/// sub-capability (see `docs/protocol.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The request is being processed.
    Working,
    /// The server needs input from the client (`inputRequests`).
    InputRequired,
    /// Execution is halted and may be resumed (SEP-2669).
    Paused,
    /// Finished with a result (also for tool results with `isError: true`).
    Completed,
    /// Finished with a JSON-RPC error.
    Failed,
    /// Cancelled before completion.
    Cancelled,
}

impl TaskStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Paused,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// `true` for `completed`, `failed` and `cancelled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The wire spelling (`"input_required"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Paused => "paused",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
