//! Wire types of the 2025-11-25 tasks wire (SEP-1686,
//! `tasks-2025-11-25-legacy.md`) with the SEP-2268 links: the `Task` object
//! of that revision, `CreateTaskResult` (`{task}`), the `tasks/list` result
//! and the related-task metadata.
//!
//! The 2026-07-28 types ([`DetailedTask`](super::DetailedTask) and friends)
//! are the ones the runtime speaks; the server maps a snapshot to these for
//! a 2025-11-25 client. Pure data, like the rest of `model`.

use serde::{Deserialize, Deserializer, Serialize};

use super::{JsonObject, TaskId, TaskStatus, Timestamp};

/// The `_meta` key that ties a message to its task.
pub const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// A task as the 2025-11-25 wire shows it: no inlined result, error or
/// input requests, `ttl` and `pollInterval` instead of `ttlMs` and
/// `pollIntervalMs`, and no `paused` status (the server shows a paused task
/// as `working`).
///
/// # Examples
///
/// ```
/// use subtask::model::{LegacyTask, TaskStatus};
/// let t: LegacyTask = serde_json::from_str(r#"{"taskId": "786512e2-9e0d-44bd-8f29-789f320fe840",
///     "status": "working", "createdAt": "2025-11-25T10:30:00Z",
///     "lastUpdatedAt": "2025-11-25T10:40:00Z", "ttl": 30000, "pollInterval": 5000}"#).unwrap();
/// assert_eq!((t.status, t.ttl, t.poll_interval), (TaskStatus::Working, Some(30000), Some(5000)));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LegacyTask {
    /// The task's id.
    pub task_id: TaskId,
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    pub status: TaskStatus,
    /// A human-readable description of the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the task was created.
    pub created_at: Timestamp,
    /// When the task last changed.
    pub last_updated_at: Timestamp,
    /// Retention from creation in milliseconds; `null` is unlimited.
    #[serde(deserialize_with = "required_nullable")]
    pub ttl: Option<u64>,
    /// Suggested time between polls in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<u64>,
    /// The parent task (SEP-2268).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<TaskId>,
    /// The subtasks in creation order (SEP-2268); omitted while empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_task_ids: Vec<TaskId>,
}

/// `ttl` is required but may be `null`.
fn required_nullable<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<u64>::deserialize(d)
}

/// The answer to a task-augmented request: `{"task": Task}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegacyCreateTaskResult {
    /// The new task.
    pub task: LegacyTask,
    /// Optional `_meta`.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

/// The `tasks/list` result: a page of tasks and the cursor of the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResult {
    /// The page.
    pub tasks: Vec<LegacyTask>,
    /// Where the next page starts; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The related-task metadata (`_meta["io.modelcontextprotocol/related-task"]`),
/// with SEP-2268's `parentTaskId`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelatedTask {
    /// The task the message belongs to.
    pub task_id: TaskId,
    /// Its parent, when it is a subtask (SEP-2268: then it MUST be present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<TaskId>,
}
