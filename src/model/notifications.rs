//! Params of the notifications the tasks extension uses:
//! `notifications/tasks` (a task's full state) and
//! `notifications/subscriptions/acknowledged` (the filter a server agreed to).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::task::TaskWire;
use super::{DetailedTask, NotificationFilter, NotificationMeta};

/// Params of `notifications/tasks`: the complete [`DetailedTask`], identical
/// to what `tasks/get` would return at that moment (without `resultType`),
/// plus the notification's `_meta` (the subscription id on a stream).
///
/// A `resultType` member on the wire is ignored.
///
/// # Examples
///
/// ```
/// use subtask::model::TaskStatusNotificationParams;
/// let p: TaskStatusNotificationParams = serde_json::from_str(r#"{
///     "taskId": "786512e2-9e0d-44bd-8f29-789f320fe840", "status": "working",
///     "createdAt": "2025-11-25T10:30:00Z", "lastUpdatedAt": "2025-11-25T10:30:00Z", "ttlMs": null,
///     "_meta": {"io.modelcontextprotocol/subscriptionId": 1}
/// }"#).unwrap();
/// assert!(p.meta.unwrap().subscription_id.is_some());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatusNotificationParams {
    /// The task.
    pub task: DetailedTask,
    /// The notification's `_meta`.
    pub meta: Option<NotificationMeta>,
}

impl TaskStatusNotificationParams {
    /// Params for `task` without `_meta`.
    pub fn new(task: DetailedTask) -> Self {
        TaskStatusNotificationParams { task, meta: None }
    }
}

impl Serialize for TaskStatusNotificationParams {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let meta = self.meta.as_ref().map(NotificationMeta::to_object);
        TaskWire::from_detailed(&self.task, None, meta).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TaskStatusNotificationParams {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let (task, _, meta) = TaskWire::deserialize(deserializer)?
            .into_detailed()
            .map_err(serde::de::Error::custom)?;
        let meta = meta
            .map(|m| NotificationMeta::from_object(&m))
            .transpose()
            .map_err(serde::de::Error::custom)?;
        Ok(TaskStatusNotificationParams { task, meta })
    }
}

/// Params of `notifications/subscriptions/acknowledged`: the subset of the
/// requested filter the server agreed to honor (for tasks: the `taskIds` it
/// will send `notifications/tasks` for).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionsAcknowledgedParams {
    /// Carries the subscription id.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<NotificationMeta>,
    /// What the server will send.
    pub notifications: NotificationFilter,
}
