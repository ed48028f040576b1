//! How a task ended: one type for the runtime (a subtask's outcome, a
//! dependency's), the client (a followed task's) and a tool author.
//!
//! The core keeps its own storage form (`core::Terminal`, with shared error
//! and reason pointers); this is the value handed out.

use super::{ErrorObject, JsonObject, TaskPayload, TaskStatus};

/// How a task ended.
///
/// # Examples
///
/// ```
/// use subtask::model::{JsonObject, TaskOutcome, TaskStatus};
/// let done = TaskOutcome::Completed(JsonObject::new());
/// assert_eq!(done.status(), TaskStatus::Completed);
/// assert!(done.result().is_some());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum TaskOutcome {
    /// `completed` with its result (a `CallToolResult` for a tool call; also
    /// when the tool reported `isError: true`).
    Completed(JsonObject),
    /// `failed` with its JSON-RPC error.
    Failed(ErrorObject),
    /// `cancelled`.
    Cancelled,
}

impl TaskOutcome {
    /// The terminal status.
    pub fn status(&self) -> TaskStatus {
        match self {
            TaskOutcome::Completed(_) => TaskStatus::Completed,
            TaskOutcome::Failed(_) => TaskStatus::Failed,
            TaskOutcome::Cancelled => TaskStatus::Cancelled,
        }
    }

    /// The result when completed.
    pub fn result(&self) -> Option<&JsonObject> {
        match self {
            TaskOutcome::Completed(r) => Some(r),
            _ => None,
        }
    }

    /// The error when failed.
    pub fn error(&self) -> Option<&ErrorObject> {
        match self {
            TaskOutcome::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// The outcome of a terminal payload, `None` for a live one.
    pub fn of_payload(payload: &TaskPayload) -> Option<TaskOutcome> {
        match payload {
            TaskPayload::Completed { result } => Some(TaskOutcome::Completed(result.clone())),
            TaskPayload::Failed { error } => Some(TaskOutcome::Failed(error.clone())),
            TaskPayload::Cancelled => Some(TaskOutcome::Cancelled),
            _ => None,
        }
    }
}

/// `result` as a complete 2026-07-28 result: with `resultType: "complete"`
/// added when it is missing (tool handlers, subtasks included, return the
/// bare `CallToolResult`). Returned as is, without a copy, when present.
///
/// # Examples
///
/// ```
/// use subtask::model::{JsonObject, complete_result};
/// let r = complete_result(JsonObject::new());
/// assert_eq!(r["resultType"], "complete");
/// ```
pub fn complete_result(result: JsonObject) -> JsonObject {
    if result.as_map().contains_key("resultType") {
        return result;
    }
    let mut map = result.as_map().clone();
    map.insert("resultType".to_owned(), serde_json::Value::from("complete"));
    JsonObject::from_map(map)
}
