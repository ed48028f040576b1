//! Wire types of MCP 2026-07-28, the tasks extension, SEP-2268 (subtasks) and
//! SEP-2669 (steer, pause, resume).
//!
//! Pure data: serde types with precise deserialization errors, no logic and
//! no I/O. Timestamps are integers ([`Timestamp`]) until serialized; task ids
//! are `Copy` ([`TaskId`]).

mod error;
mod id;
mod json;
mod status;
mod task;
mod time;

pub use error::{ErrorCode, ErrorObject};
pub use id::{ParseTaskIdError, TaskId};
pub use json::JsonObject;
pub use status::TaskStatus;
pub use task::{
    CreateTaskResult, DetailedTask, GetTaskResult, InputRequests, InputResponses, PauseTaskResult, ResultType,
    ResumeTaskResult, Task, TaskPayload,
};
pub use time::{ParseTimestampError, Timestamp};

/// The extension identifier of the tasks extension.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
