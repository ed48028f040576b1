//! Method names, [`TaskMethod`] (the six `tasks/*` requests of the
//! 2026-07-28 wire) and [`Method`] (every request method the server
//! answers, on either wire).
//!
//! Every wire name is spelled once, here; the server parses a request's
//! method once ([`Method::from_name`]) and matches on the enum from then on.
//! Names only; what each method does is the server's business.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
/// `initialize`: opens a session of a protocol before 2026-07-28.
pub const INITIALIZE: &str = "initialize";
/// `ping` (protocols before 2026-07-28).
pub const PING: &str = "ping";
/// `prompts/list`.
pub const PROMPTS_LIST: &str = "prompts/list";
/// `prompts/get`.
pub const PROMPTS_GET: &str = "prompts/get";
/// `tasks/result`: the 2025-11-25 tasks wire's wait for a task's result.
pub const TASKS_RESULT: &str = "tasks/result";
/// `tasks/list`: the 2025-11-25 tasks wire's list of the caller's tasks.
pub const TASKS_LIST: &str = "tasks/list";
/// `notifications/tasks/status`: a task's state on the 2025-11-25 tasks wire.
pub const NOTIFICATIONS_TASKS_STATUS: &str = "notifications/tasks/status";
/// `elicitation/create`: a server-to-client request for user input.
pub const ELICITATION_CREATE: &str = "elicitation/create";
/// `sampling/createMessage`: a server-to-client request for an LLM completion.
pub const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
/// `roots/list`: a server-to-client request for the client's roots.
pub const ROOTS_LIST: &str = "roots/list";

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

    /// The wire name (as [`TaskMethod::as_str`]).
    pub const fn name(self) -> &'static str {
        self.as_str()
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
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

/// Written as its wire name.
impl Serialize for TaskMethod {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Read from its wire name; any other string is an error.
impl<'de> Deserialize<'de> for TaskMethod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        TaskMethod::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format_args!("unknown task method {name:?}")))
    }
}

/// A request method the server answers, on the 2026-07-28 wire or on a
/// legacy one (`initialize` sessions). Which wire answers which method is
/// the server's business: this is the name only.
///
/// # Examples
///
/// ```
/// use subtask::model::{Method, TaskMethod};
/// let m = Method::from_name("tasks/pause").unwrap();
/// assert_eq!(m, Method::Task(TaskMethod::Pause));
/// assert_eq!(m.as_str(), "tasks/pause");
/// assert_eq!(Method::from_name("tasks/list"), Some(Method::TasksList));
/// assert_eq!(Method::from_name("tasks/unknown"), None);
/// for m in Method::ALL {
///     assert_eq!(Method::from_name(m.as_str()), Some(m));
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `initialize` (protocols before 2026-07-28).
    Initialize,
    /// `ping` (protocols before 2026-07-28).
    Ping,
    /// `server/discover`.
    ServerDiscover,
    /// `tools/list`.
    ToolsList,
    /// `tools/call`.
    ToolsCall,
    /// `prompts/list`.
    PromptsList,
    /// `prompts/get`.
    PromptsGet,
    /// One of the `tasks/*` methods of the 2026-07-28 wire (`tasks/get`
    /// and `tasks/cancel` are also the 2025-11-25 wire's).
    Task(TaskMethod),
    /// `tasks/result` (2025-11-25 tasks wire).
    TasksResult,
    /// `tasks/list` (2025-11-25 tasks wire).
    TasksList,
    /// `subscriptions/listen`.
    SubscriptionsListen,
}

impl Method {
    /// Every method, in a fixed order (the order of the server's
    /// `/metrics` labels).
    pub const ALL: [Method; 16] = [
        Method::Initialize,
        Method::Ping,
        Method::ServerDiscover,
        Method::ToolsList,
        Method::ToolsCall,
        Method::PromptsList,
        Method::PromptsGet,
        Method::Task(TaskMethod::Get),
        Method::Task(TaskMethod::Update),
        Method::Task(TaskMethod::Cancel),
        Method::Task(TaskMethod::Steer),
        Method::Task(TaskMethod::Pause),
        Method::Task(TaskMethod::Resume),
        Method::TasksResult,
        Method::TasksList,
        Method::SubscriptionsListen,
    ];

    /// The method for a wire name, `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            INITIALIZE => Method::Initialize,
            PING => Method::Ping,
            SERVER_DISCOVER => Method::ServerDiscover,
            TOOLS_LIST => Method::ToolsList,
            TOOLS_CALL => Method::ToolsCall,
            PROMPTS_LIST => Method::PromptsList,
            PROMPTS_GET => Method::PromptsGet,
            TASKS_GET => Method::Task(TaskMethod::Get),
            TASKS_UPDATE => Method::Task(TaskMethod::Update),
            TASKS_CANCEL => Method::Task(TaskMethod::Cancel),
            TASKS_STEER => Method::Task(TaskMethod::Steer),
            TASKS_PAUSE => Method::Task(TaskMethod::Pause),
            TASKS_RESUME => Method::Task(TaskMethod::Resume),
            TASKS_RESULT => Method::TasksResult,
            TASKS_LIST => Method::TasksList,
            SUBSCRIPTIONS_LISTEN => Method::SubscriptionsListen,
            _ => return None,
        })
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Initialize => INITIALIZE,
            Method::Ping => PING,
            Method::ServerDiscover => SERVER_DISCOVER,
            Method::ToolsList => TOOLS_LIST,
            Method::ToolsCall => TOOLS_CALL,
            Method::PromptsList => PROMPTS_LIST,
            Method::PromptsGet => PROMPTS_GET,
            Method::Task(m) => m.as_str(),
            Method::TasksResult => TASKS_RESULT,
            Method::TasksList => TASKS_LIST,
            Method::SubscriptionsListen => SUBSCRIPTIONS_LISTEN,
        }
    }

    /// The position of this method in [`Method::ALL`].
    pub const fn index(self) -> usize {
        match self {
            Method::Initialize => 0,
            Method::Ping => 1,
            Method::ServerDiscover => 2,
            Method::ToolsList => 3,
            Method::ToolsCall => 4,
            Method::PromptsList => 5,
            Method::PromptsGet => 6,
            Method::Task(TaskMethod::Get) => 7,
            Method::Task(TaskMethod::Update) => 8,
            Method::Task(TaskMethod::Cancel) => 9,
            Method::Task(TaskMethod::Steer) => 10,
            Method::Task(TaskMethod::Pause) => 11,
            Method::Task(TaskMethod::Resume) => 12,
            Method::TasksResult => 13,
            Method::TasksList => 14,
            Method::SubscriptionsListen => 15,
        }
    }

    /// The `tasks/*` method of the 2026-07-28 wire this is, if any.
    pub const fn task(self) -> Option<TaskMethod> {
        match self {
            Method::Task(m) => Some(m),
            _ => None,
        }
    }
}

impl From<TaskMethod> for Method {
    fn from(m: TaskMethod) -> Self {
        Method::Task(m)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

    #[test]
    fn every_method_round_trips_and_sits_at_its_index() {
        for (i, m) in Method::ALL.into_iter().enumerate() {
            assert_eq!(Method::from_name(m.as_str()), Some(m));
            assert_eq!(m.index(), i, "{m}");
        }
        for m in TaskMethod::ALL {
            assert_eq!(Method::from_name(m.as_str()), Some(Method::Task(m)));
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("{:?}", m.as_str()));
            assert_eq!(serde_json::from_str::<TaskMethod>(&json).unwrap(), m);
        }
        assert!(serde_json::from_str::<TaskMethod>("\"tasks/list\"").is_err());
        assert_eq!(Method::from_name(""), None);
        assert_eq!(Method::from_name("Tools/call"), None);
    }
}
