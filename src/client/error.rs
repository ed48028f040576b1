//! The client's errors: one enum for everything a call can run into, and
//! [`Violation`], a rule of the protocol the server was caught breaking.

use std::fmt;

use crate::model::{ErrorCode, ErrorObject, TaskId, TaskStatus};

/// Why a client call did not produce its result.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The client is configured wrongly (a malformed URL, an `https` URL in
    /// a build without TLS, a command that cannot be started).
    Config(String),
    /// The server could not be reached, or the connection broke.
    Connection(String),
    /// A request got no answer within the configured time.
    Timeout(String),
    /// An HTTP error status without a JSON-RPC error in the body.
    Http {
        /// The HTTP status.
        status: u16,
        /// The start of the body, for the message.
        body: String,
    },
    /// The server answered the request with a JSON-RPC error.
    Rpc(ErrorObject),
    /// The server's answer is not what the protocol allows (not JSON, the
    /// wrong shape, an answer to another request).
    Protocol(String),
    /// The server broke a rule that the client checks instead of trusting it.
    Untrusted(Violation),
    /// The task ended `failed` with this JSON-RPC error.
    TaskFailed {
        /// The task.
        task_id: TaskId,
        /// Its error.
        error: ErrorObject,
    },
    /// The task ended `cancelled`.
    TaskCancelled {
        /// The task.
        task_id: TaskId,
    },
    /// The server needs input that no [`InputHandler`](super::InputHandler)
    /// answered (or none is set) before it can answer a call.
    InputRequired(String),
}

impl ClientError {
    /// `true` when the server answered "task not found" (`-32602` to a task
    /// method): an unknown, expired, foreign or malformed id.
    pub fn is_task_not_found(&self) -> bool {
        matches!(self, ClientError::Rpc(e) if e.code == ErrorCode::INVALID_PARAMS
            && e.message.to_ascii_lowercase().contains("not found"))
    }

    /// `true` for failures worth retrying: the connection, a timeout, or an
    /// HTTP 5xx / 429 without a JSON-RPC error.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Connection(_) | ClientError::Timeout(_) => true,
            ClientError::Http { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Config(m) => write!(f, "configuration: {m}"),
            ClientError::Connection(m) => write!(f, "connection: {m}"),
            ClientError::Timeout(m) => write!(f, "timeout: {m}"),
            ClientError::Http { status, body } => {
                if body.is_empty() {
                    write!(f, "the server answered HTTP {status}")
                } else {
                    write!(f, "the server answered HTTP {status}: {body}")
                }
            }
            ClientError::Rpc(e) => write!(f, "the server answered with an error: {e}"),
            ClientError::Protocol(m) => write!(f, "protocol: {m}"),
            ClientError::Untrusted(v) => write!(f, "untrusted server: {v}"),
            ClientError::TaskFailed { task_id, error } => write!(f, "task {task_id} failed: {error}"),
            ClientError::TaskCancelled { task_id } => write!(f, "task {task_id} was cancelled"),
            ClientError::InputRequired(m) => write!(f, "input required: {m}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Untrusted(v) => Some(v),
            _ => None,
        }
    }
}

impl From<Violation> for ClientError {
    fn from(v: Violation) -> Self {
        ClientError::Untrusted(v)
    }
}

/// A rule of the tasks extension or SEP-2268 that the server broke, or a
/// client limit it pushed past. Detected, never trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// Following `childTaskIds` leads back to a task already on the path:
    /// `path` starts and ends with the same id.
    Cycle {
        /// The ids along the cycle.
        path: Vec<TaskId>,
    },
    /// A task id named as the child of two tasks, or twice by one task.
    DuplicateId {
        /// The id.
        id: TaskId,
        /// Who named it first.
        first_parent: TaskId,
        /// Who named it again.
        second_parent: TaskId,
    },
    /// A child's `parentTaskId` is not the task whose `childTaskIds` named it.
    ParentMismatch {
        /// The child.
        child: TaskId,
        /// The task that lists it.
        named_by: TaskId,
        /// What the child says its parent is.
        claims: Option<TaskId>,
    },
    /// A task's `parentTaskId` changed (I1).
    ParentChanged {
        /// The task.
        task: TaskId,
        /// The earlier parent.
        before: Option<TaskId>,
        /// The new parent.
        after: Option<TaskId>,
    },
    /// A task's `childTaskIds` lost or reordered an id seen before: the list
    /// seen earlier is no longer its prefix (I2).
    ChildrenNotAppendOnly {
        /// The task.
        task: TaskId,
        /// Ids seen before.
        seen: usize,
        /// The first position where the lists differ.
        position: usize,
    },
    /// A terminal task changed its status or its children (terminal is absorbing).
    TerminalChanged {
        /// The task.
        task: TaskId,
        /// Its terminal status.
        before: TaskStatus,
        /// What it showed later.
        after: TaskStatus,
    },
    /// `tasks/get` for one id answered with another task.
    WrongTask {
        /// The id asked for.
        asked: TaskId,
        /// The id answered.
        got: TaskId,
    },
    /// A task named in `childTaskIds` could not be retrieved ("not found"),
    /// also after retrying.
    Dangling {
        /// The id that does not resolve.
        id: TaskId,
        /// The task that names it.
        named_by: TaskId,
        /// How often it was asked for.
        attempts: u32,
    },
    /// The tree has more tasks than the client accepts.
    TooManyTasks {
        /// The limit.
        limit: usize,
    },
    /// The tree is deeper than the client accepts (the root is depth 0).
    TooDeep {
        /// The task below the limit.
        task: TaskId,
        /// The limit.
        limit: u32,
    },
    /// One task has more children than the client accepts.
    TooManyChildren {
        /// The task.
        task: TaskId,
        /// The limit.
        limit: usize,
    },
    /// One task asked for more distinct inputs than the client accepts.
    TooManyInputRequests {
        /// The task.
        task: TaskId,
        /// The limit.
        limit: usize,
    },
    /// A response (or one SSE event, or one stdio line) is larger than the
    /// client accepts.
    ResponseTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Cycle { path } => {
                let ids: Vec<String> = path.iter().map(TaskId::to_string).collect();
                write!(f, "childTaskIds form a cycle: {}", ids.join(" -> "))
            }
            Violation::DuplicateId {
                id,
                first_parent,
                second_parent,
            } => write!(
                f,
                "task {id} is named as a child by {first_parent} and again by {second_parent}"
            ),
            Violation::ParentMismatch {
                child,
                named_by,
                claims,
            } => match claims {
                Some(p) => write!(
                    f,
                    "task {child} is listed by {named_by} but says its parent is {p}"
                ),
                None => write!(f, "task {child} is listed by {named_by} but has no parentTaskId"),
            },
            Violation::ParentChanged { task, before, after } => write!(
                f,
                "parentTaskId of {task} changed from {} to {}",
                opt(before),
                opt(after)
            ),
            Violation::ChildrenNotAppendOnly { task, seen, position } => write!(
                f,
                "childTaskIds of {task} is not append-only: of the {seen} ids seen before, position {position} changed"
            ),
            Violation::TerminalChanged { task, before, after } => write!(
                f,
                "task {task} was {before} and later showed {after} or new children (terminal is absorbing)"
            ),
            Violation::WrongTask { asked, got } => write!(f, "asked for task {asked}, got task {got}"),
            Violation::Dangling {
                id,
                named_by,
                attempts,
            } => write!(
                f,
                "task {id} named by {named_by} does not resolve (not found {attempts} times)"
            ),
            Violation::TooManyTasks { limit } => write!(f, "the tree has more than {limit} tasks"),
            Violation::TooDeep { task, limit } => {
                write!(f, "task {task} is deeper than {limit} levels below the root")
            }
            Violation::TooManyChildren { task, limit } => {
                write!(f, "task {task} has more than {limit} children")
            }
            Violation::TooManyInputRequests { task, limit } => {
                write!(f, "task {task} asked for more than {limit} inputs")
            }
            Violation::ResponseTooLarge { limit } => {
                write!(f, "a response is larger than {limit} bytes")
            }
        }
    }
}

fn opt(id: &Option<TaskId>) -> String {
    id.map_or_else(|| "none".to_owned(), |i| i.to_string())
}

impl std::error::Error for Violation {}
