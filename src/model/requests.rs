//! Params of the task requests (`tasks/get`, `tasks/update`,
//! `tasks/cancel`, and SEP-2669's `tasks/steer`, `tasks/pause`,
//! `tasks/resume`) and of `subscriptions/listen`.
//!
//! Task ids stay strings here. A server must answer a malformed id exactly
//! as it answers an unknown one (`-32602`, same message), so that a task's
//! existence never leaks; a malformed id therefore parses, and
//! [`TaskIdParams::task_id`] reports it as `None` for the server to treat
//! as "not found".

use serde::{Deserialize, Serialize};

use super::{InputResponses, RequestMeta, TaskId, TasksCapability};

/// Anything that carries a request `_meta`.
pub trait RequestParams {
    /// The request's `_meta`, if present.
    fn meta(&self) -> Option<&RequestMeta>;

    /// The tasks extension's settings if the request declared the
    /// extension, `None` if it did not.
    fn tasks_capability(&self) -> Option<TasksCapability> {
        self.meta().and_then(RequestMeta::tasks_capability)
    }
}

fn parse_task_id(raw: &str) -> Option<TaskId> {
    raw.parse().ok()
}

/// Params naming one task: `tasks/get`, `tasks/cancel`, `tasks/pause`,
/// `tasks/resume`.
///
/// # Examples
///
/// ```
/// use subtask::model::GetTaskParams;
/// let p: GetTaskParams = serde_json::from_str(r#"{"taskId": "not-a-uuid"}"#).unwrap();
/// assert_eq!(p.task_id(), None); // answered like an unknown task
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<RequestMeta>,
    /// The task id as sent; see [`TaskIdParams::task_id`].
    pub task_id: String,
}

impl TaskIdParams {
    /// Params for task `id` without `_meta`.
    pub fn new(id: TaskId) -> Self {
        TaskIdParams {
            meta: None,
            task_id: id.to_string(),
        }
    }

    /// The task id, or `None` when it is not a canonical task id (answer
    /// as for an unknown task).
    pub fn task_id(&self) -> Option<TaskId> {
        parse_task_id(&self.task_id)
    }
}

impl RequestParams for TaskIdParams {
    fn meta(&self) -> Option<&RequestMeta> {
        self.meta.as_ref()
    }
}

/// Params of `tasks/get`.
pub type GetTaskParams = TaskIdParams;
/// Params of `tasks/cancel`.
pub type CancelTaskParams = TaskIdParams;
/// Params of `tasks/pause` (SEP-2669).
pub type PauseTaskParams = TaskIdParams;
/// Params of `tasks/resume` (SEP-2669).
pub type ResumeTaskParams = TaskIdParams;

/// Params of `tasks/update`: responses to outstanding `inputRequests`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateTaskParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<RequestMeta>,
    /// The task id as sent; see [`UpdateTaskParams::task_id`].
    pub task_id: String,
    /// Responses by input request key.
    pub input_responses: InputResponses,
}

impl UpdateTaskParams {
    /// Params for task `id` without `_meta`.
    pub fn new(id: TaskId, input_responses: InputResponses) -> Self {
        UpdateTaskParams {
            meta: None,
            task_id: id.to_string(),
            input_responses,
        }
    }

    /// The task id, or `None` when it is not a canonical task id.
    pub fn task_id(&self) -> Option<TaskId> {
        parse_task_id(&self.task_id)
    }
}

impl RequestParams for UpdateTaskParams {
    fn meta(&self) -> Option<&RequestMeta> {
        self.meta.as_ref()
    }
}

/// Params of `tasks/steer` (SEP-2669): feedback for a running task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SteerTaskParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<RequestMeta>,
    /// The task id as sent; see [`SteerTaskParams::task_id`].
    pub task_id: String,
    /// Natural-language feedback, delivered at the task's next safe point.
    pub message: String,
}

impl SteerTaskParams {
    /// Params for task `id` without `_meta`.
    pub fn new(id: TaskId, message: impl Into<String>) -> Self {
        SteerTaskParams {
            meta: None,
            task_id: id.to_string(),
            message: message.into(),
        }
    }

    /// The task id, or `None` when it is not a canonical task id.
    pub fn task_id(&self) -> Option<TaskId> {
        parse_task_id(&self.task_id)
    }
}

impl RequestParams for SteerTaskParams {
    fn meta(&self) -> Option<&RequestMeta> {
        self.meta.as_ref()
    }
}

/// The `notifications` filter of `subscriptions/listen` and of its
/// acknowledgement. Omitted fields subscribe to nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationFilter {
    /// `notifications/tools/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_list_changed: Option<bool>,
    /// `notifications/prompts/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts_list_changed: Option<bool>,
    /// `notifications/resources/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_list_changed: Option<bool>,
    /// `notifications/resources/updated` for these URIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_subscriptions: Option<Vec<String>>,
    /// `notifications/tasks` for these task ids (tasks extension), as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_ids: Option<Vec<String>>,
}

impl NotificationFilter {
    /// A filter for task notifications on `ids` only.
    pub fn tasks(ids: impl IntoIterator<Item = TaskId>) -> Self {
        NotificationFilter {
            task_ids: Some(ids.into_iter().map(|id| id.to_string()).collect()),
            ..Self::default()
        }
    }

    /// Each requested task id with its parsed form (`None` when malformed;
    /// treat as unknown). Empty when no task ids were requested.
    pub fn task_ids(&self) -> impl Iterator<Item = (&str, Option<TaskId>)> {
        self.task_ids
            .iter()
            .flatten()
            .map(|raw| (raw.as_str(), parse_task_id(raw)))
    }

    /// Whether task notifications were requested at all (the server answers
    /// `-32021` if so and the request did not declare the tasks extension).
    pub fn wants_tasks(&self) -> bool {
        self.task_ids.is_some()
    }
}

/// Params of `subscriptions/listen`.
///
/// # Examples
///
/// ```
/// use subtask::model::SubscriptionsListenParams;
/// let p: SubscriptionsListenParams = serde_json::from_str(
///     r#"{"notifications": {"taskIds": ["786512e2-9e0d-44bd-8f29-789f320fe840", "x"]}}"#,
/// ).unwrap();
/// let parsed: Vec<_> = p.notifications.task_ids().map(|(_, id)| id.is_some()).collect();
/// assert_eq!(parsed, [true, false]);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionsListenParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<RequestMeta>,
    /// What to receive.
    pub notifications: NotificationFilter,
}

impl RequestParams for SubscriptionsListenParams {
    fn meta(&self) -> Option<&RequestMeta> {
        self.meta.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn malformed_task_ids_parse_but_read_as_none() {
        for raw in ["", "task-1", "786512E2-9E0D-44BD-8F29-789F320FE840x"] {
            let p: CancelTaskParams = serde_json::from_value(json!({"taskId": raw})).unwrap();
            assert_eq!(p.task_id(), None, "{raw}");
        }
    }

    #[test]
    fn a_non_string_task_id_is_a_type_error() {
        let e = serde_json::from_value::<GetTaskParams>(json!({"taskId": 7})).unwrap_err();
        assert!(e.to_string().contains("expected a string"), "{e}");
    }

    #[test]
    fn steer_requires_a_message() {
        let e = serde_json::from_value::<SteerTaskParams>(json!({"taskId": "t"})).unwrap_err();
        assert!(e.to_string().contains("missing field `message`"), "{e}");
    }

    #[test]
    fn update_requires_input_responses_as_objects() {
        let e = serde_json::from_value::<UpdateTaskParams>(json!({"taskId": "t"})).unwrap_err();
        assert!(e.to_string().contains("missing field `inputResponses`"), "{e}");
        let e =
            serde_json::from_value::<UpdateTaskParams>(json!({"taskId": "t", "inputResponses": {"k": 1}}))
                .unwrap_err();
        assert!(
            e.to_string().contains("expected a JSON object, found a number"),
            "{e}"
        );
    }
}
