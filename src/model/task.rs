//! `Task`, `DetailedTask` and the task-shaped results (`CreateTaskResult`,
//! `GetTaskResult`, and the pause/resume results of SEP-2669).
//!
//! `DetailedTask` is a sum type by status: the payload enum decides the
//! status, so a `completed` task without a result cannot be built or parsed.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{ErrorObject, JsonObject, TaskId, TaskStatus, Timestamp};

/// Outstanding server-to-client requests of an `input_required` task, by key.
pub type InputRequests = BTreeMap<String, JsonObject>;

/// Responses to input requests (`tasks/update` `inputResponses`), by key.
pub type InputResponses = BTreeMap<String, JsonObject>;

/// The `resultType` discriminator of a result.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ResultType {
    /// `"complete"`: the standard result of the request.
    Complete,
    /// `"input_required"`: an MRTR round (`InputRequiredResult`).
    InputRequired,
    /// `"task"`: a `CreateTaskResult`.
    Task,
    /// Any other value, kept for forward compatibility.
    Other(String),
}

impl ResultType {
    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            ResultType::Complete => "complete",
            ResultType::InputRequired => "input_required",
            ResultType::Task => "task",
            ResultType::Other(s) => s,
        }
    }
}

impl Serialize for ResultType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ResultType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(match s.as_str() {
            "complete" => ResultType::Complete,
            "input_required" => ResultType::InputRequired,
            "task" => ResultType::Task,
            _ => ResultType::Other(s),
        })
    }
}

/// Operational metadata of a task (the spec's `Task`), with the SEP-2268
/// links `parentTaskId` and `childTaskIds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Stable identifier.
    pub task_id: TaskId,
    /// Current status. In a [`DetailedTask`] it always agrees with the payload.
    pub status: TaskStatus,
    /// Human-readable description of the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the task was created.
    pub created_at: Timestamp,
    /// When the task last changed observably.
    pub last_updated_at: Timestamp,
    /// Time to live from creation in milliseconds; `null` is unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// The parent task (SEP-2268); absent for a root task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_task_id: Option<TaskId>,
    /// Subtasks in creation order (SEP-2268); omitted while empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_task_ids: Vec<TaskId>,
}

/// The status-specific part of a [`DetailedTask`].
#[derive(Debug, Clone, PartialEq)]
pub enum TaskPayload {
    /// `working`.
    Working,
    /// `input_required` with every outstanding request.
    InputRequired {
        /// Outstanding requests by key.
        input_requests: InputRequests,
    },
    /// `paused` (SEP-2669).
    Paused,
    /// `completed` with the final result of the request.
    Completed {
        /// The result, e.g. a `CallToolResult`.
        result: JsonObject,
    },
    /// `failed` with the JSON-RPC error.
    Failed {
        /// The error.
        error: ErrorObject,
    },
    /// `cancelled`.
    Cancelled,
}

impl TaskPayload {
    /// The status this payload stands for.
    pub fn status(&self) -> TaskStatus {
        match self {
            TaskPayload::Working => TaskStatus::Working,
            TaskPayload::InputRequired { .. } => TaskStatus::InputRequired,
            TaskPayload::Paused => TaskStatus::Paused,
            TaskPayload::Completed { .. } => TaskStatus::Completed,
            TaskPayload::Failed { .. } => TaskStatus::Failed,
            TaskPayload::Cancelled => TaskStatus::Cancelled,
        }
    }
}

/// A task with its status-specific fields inlined (`tasks/get`,
/// `notifications/tasks`, `tasks/pause`, `tasks/resume`).
#[derive(Debug, Clone, PartialEq)]
pub struct DetailedTask {
    task: Task,
    payload: TaskPayload,
}

impl DetailedTask {
    /// Builds a detailed task; `task.status` is overwritten by the payload's.
    pub fn new(mut task: Task, payload: TaskPayload) -> Self {
        task.status = payload.status();
        DetailedTask { task, payload }
    }

    /// The common task fields.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The status-specific payload.
    pub fn payload(&self) -> &TaskPayload {
        &self.payload
    }

    /// The status.
    pub fn status(&self) -> TaskStatus {
        self.task.status
    }

    /// Splits into the common fields and the payload.
    pub fn into_parts(self) -> (Task, TaskPayload) {
        (self.task, self.payload)
    }
}

/// Wire helper shared by every task-shaped object. Flat on purpose: no
/// `#[serde(flatten)]`, so errors name the offending field.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TaskWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result_type: Option<ResultType>,
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    meta: Option<JsonObject>,
    task_id: TaskId,
    status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status_message: Option<String>,
    created_at: Timestamp,
    last_updated_at: Timestamp,
    #[serde(deserialize_with = "required_nullable")]
    ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    poll_interval_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent_task_id: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    child_task_ids: Vec<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_requests: Option<InputRequests>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorObject>,
}

/// `ttlMs` is required but may be `null`.
fn required_nullable<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<u64>::deserialize(d)
}

impl TaskWire {
    pub(super) fn from_detailed(
        t: &DetailedTask,
        result_type: Option<ResultType>,
        meta: Option<JsonObject>,
    ) -> Self {
        let (input_requests, result, error) = match &t.payload {
            TaskPayload::InputRequired { input_requests } => (Some(input_requests.clone()), None, None),
            TaskPayload::Completed { result } => (None, Some(result.clone()), None),
            TaskPayload::Failed { error } => (None, None, Some(error.clone())),
            _ => (None, None, None),
        };
        let task = &t.task;
        TaskWire {
            result_type,
            meta,
            task_id: task.task_id,
            status: task.status,
            status_message: task.status_message.clone(),
            created_at: task.created_at,
            last_updated_at: task.last_updated_at,
            ttl_ms: task.ttl_ms,
            poll_interval_ms: task.poll_interval_ms,
            parent_task_id: task.parent_task_id,
            child_task_ids: task.child_task_ids.clone(),
            input_requests,
            result,
            error,
        }
    }

    pub(super) fn into_detailed(
        self,
    ) -> Result<(DetailedTask, Option<ResultType>, Option<JsonObject>), String> {
        let payload = match self.status {
            TaskStatus::Working => TaskPayload::Working,
            TaskStatus::Paused => TaskPayload::Paused,
            TaskStatus::Cancelled => TaskPayload::Cancelled,
            TaskStatus::InputRequired => TaskPayload::InputRequired {
                input_requests: self
                    .input_requests
                    .ok_or("task with status \"input_required\" is missing `inputRequests`")?,
            },
            TaskStatus::Completed => TaskPayload::Completed {
                result: self
                    .result
                    .ok_or("task with status \"completed\" is missing `result`")?,
            },
            TaskStatus::Failed => TaskPayload::Failed {
                error: self
                    .error
                    .ok_or("task with status \"failed\" is missing `error`")?,
            },
        };
        let task = Task {
            task_id: self.task_id,
            status: self.status,
            status_message: self.status_message,
            created_at: self.created_at,
            last_updated_at: self.last_updated_at,
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            parent_task_id: self.parent_task_id,
            child_task_ids: self.child_task_ids,
        };
        Ok((DetailedTask { task, payload }, self.result_type, self.meta))
    }
}

impl Serialize for DetailedTask {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        TaskWire::from_detailed(self, None, None).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for DetailedTask {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (t, _, _) = TaskWire::deserialize(deserializer)?
            .into_detailed()
            .map_err(serde::de::Error::custom)?;
        Ok(t)
    }
}

/// A task-shaped result: `resultType` plus a [`DetailedTask`].
///
/// Used for `tasks/get`, `tasks/pause` and `tasks/resume` (`resultType:
/// "complete"`). For the `tools/call` answer that creates a task use
/// [`CreateTaskResult`].
#[derive(Debug, Clone, PartialEq)]
pub struct GetTaskResult {
    /// The task.
    pub task: DetailedTask,
    /// Optional `_meta`.
    pub meta: Option<JsonObject>,
}

/// Result of `tasks/pause` (SEP-2669): the task as it is now.
pub type PauseTaskResult = GetTaskResult;
/// Result of `tasks/resume` (SEP-2669): the task after resuming.
pub type ResumeTaskResult = GetTaskResult;

impl GetTaskResult {
    /// Wraps a task.
    pub fn new(task: DetailedTask) -> Self {
        GetTaskResult { task, meta: None }
    }
}

impl Serialize for GetTaskResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        TaskWire::from_detailed(&self.task, Some(ResultType::Complete), self.meta.clone())
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for GetTaskResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (task, rt, meta) = TaskWire::deserialize(deserializer)?
            .into_detailed()
            .map_err(serde::de::Error::custom)?;
        match rt {
            None | Some(ResultType::Complete) => Ok(GetTaskResult { task, meta }),
            Some(other) => Err(serde::de::Error::custom(format_args!(
                "a task result must have resultType \"complete\", found {:?}",
                other.as_str()
            ))),
        }
    }
}

/// The answer to a request that became a task (`resultType: "task"`): the
/// seed state of the task.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTaskResult {
    /// The task's seed state. Its payload is normally `Working`.
    pub task: DetailedTask,
    /// Optional `_meta`.
    pub meta: Option<JsonObject>,
}

impl CreateTaskResult {
    /// Wraps a seed task.
    pub fn new(task: DetailedTask) -> Self {
        CreateTaskResult { task, meta: None }
    }
}

impl Serialize for CreateTaskResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        TaskWire::from_detailed(&self.task, Some(ResultType::Task), self.meta.clone()).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CreateTaskResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (task, rt, meta) = TaskWire::deserialize(deserializer)?
            .into_detailed()
            .map_err(serde::de::Error::custom)?;
        match rt {
            Some(ResultType::Task) => Ok(CreateTaskResult { task, meta }),
            None => Err(serde::de::Error::custom(
                "CreateTaskResult requires resultType \"task\", found none",
            )),
            Some(other) => Err(serde::de::Error::custom(format_args!(
                "CreateTaskResult requires resultType \"task\", found {:?}",
                other.as_str()
            ))),
        }
    }
}
