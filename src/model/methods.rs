//! Method names, and [`TaskMethod`]: the six `tasks/*` requests.
//!
//! Names only; what each method does is the server's business.

use std::fmt;

use super::TasksCapability;

/// `tasks/get`: poll a task.
pub const TASKS_GET: &str = "tasks/get";
/// `tasks/update`: deliver `inputResponses`.
pub const TASKS_UPDATE: &str = "tasks/update";
/// `tasks/cancel`: ask to cancel a task.
pub const TASKS_CANCEL: &str = "tasks/cancel";
/// `tasks/steer`: unsolicited feedback to a running task (SEP-2669).
pub const TASKS_STEER: &str = "tasks/steer";
/// `tasks/pause`: cooperative halt (SEP-2669).
pub const TASKS_PAUSE: &str = "tasks/pause";
/// `tasks/resume`: continue a paused task (SEP-2669).
pub const TASKS_RESUME: &str = "tasks/resume";
/// `notifications/tasks`: a task's full state, pushed on a subscription.
pub const NOTIFICATIONS_TASKS: &str = "notifications/tasks";
/// `subscriptions/listen`: open a notification stream.
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
/// `notifications/subscriptions/acknowledged`: first message of a stream.
pub const NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// `notifications/cancelled`: cancel an in-flight request (never a task).
pub const NOTIFICATIONS_CANCELLED: &str = "notifications/cancelled";
/// `tools/call`: the request that may become a task.
pub const TOOLS_CALL: &str = "tools/call";
/// `tools/list`.
pub const TOOLS_LIST: &str = "tools/list";
/// `server/discover`.
pub const SERVER_DISCOVER: &str = "server/discover";

/// One of the `tasks/*` request methods.
///
/// # Examples
///
/// ```
/// use subtask::model::{TaskMethod, TasksCapability};
/// let m = TaskMethod::from_name("tasks/pause").unwrap();
/// assert_eq!(m.name(), "tasks/pause");
/// assert!(!m.is_offered_by(TasksCapability::BASE));
/// assert!(m.is_offered_by(TasksCapability::FULL));
/// assert_eq!(TaskMethod::from_name("tasks/list"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskMethod {
    /// `tasks/get`.
    Get,
    /// `tasks/update`.
    Update,
    /// `tasks/cancel`.
    Cancel,
    /// `tasks/steer` (SEP-2669).
    Steer,
    /// `tasks/pause` (SEP-2669).
    Pause,
    /// `tasks/resume` (SEP-2669).
    Resume,
}

impl TaskMethod {
    /// Every task method.
    pub const ALL: [TaskMethod; 6] = [
        TaskMethod::Get,
        TaskMethod::Update,
        TaskMethod::Cancel,
        TaskMethod::Steer,
        TaskMethod::Pause,
        TaskMethod::Resume,
    ];

    /// The method for a wire name, `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            TASKS_GET => TaskMethod::Get,
            TASKS_UPDATE => TaskMethod::Update,
            TASKS_CANCEL => TaskMethod::Cancel,
            TASKS_STEER => TaskMethod::Steer,
            TASKS_PAUSE => TaskMethod::Pause,
            TASKS_RESUME => TaskMethod::Resume,
            _ => return None,
        })
    }

    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            TaskMethod::Get => TASKS_GET,
            TaskMethod::Update => TASKS_UPDATE,
            TaskMethod::Cancel => TASKS_CANCEL,
            TaskMethod::Steer => TASKS_STEER,
            TaskMethod::Pause => TASKS_PAUSE,
            TaskMethod::Resume => TASKS_RESUME,
        }
    }

    /// Whether `caps` includes this method: the base methods always, steer
    /// with `steer`, pause and resume with `pause`.
    pub fn is_offered_by(self, caps: TasksCapability) -> bool {
        match self {
            TaskMethod::Get | TaskMethod::Update | TaskMethod::Cancel => true,
            TaskMethod::Steer => caps.steer,
            TaskMethod::Pause | TaskMethod::Resume => caps.pause,
        }
    }
}

impl fmt::Display for TaskMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in TaskMethod::ALL {
            assert_eq!(TaskMethod::from_name(m.name()), Some(m));
        }
    }
}
