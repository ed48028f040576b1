//! Why the core rejected a command.

use std::fmt;

use crate::model::{ErrorCode, TaskId, TaskStatus};

/// Which configured limit a command would exceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// Depth of a task below its root.
    Depth {
        /// The configured maximum.
        max: u32,
    },
    /// Children of one task.
    Children {
        /// The configured maximum.
        max: u32,
    },
    /// Undelivered steer messages queued on one task.
    SteerQueue {
        /// The configured maximum.
        max: u32,
    },
    /// Size of one steer message in bytes.
    SteerBytes {
        /// The configured maximum.
        max: u32,
    },
}

/// A command the lifecycle does not allow. Nothing was changed.
///
/// [`TransitionError::error_code`] is the one place these map to JSON-RPC
/// codes: client-caused errors are `-32602`, handler misuse is `-32603`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransitionError {
    /// No such task (never existed, or its tree was deleted).
    UnknownTask(TaskId),
    /// The task is terminal.
    Terminal {
        /// The task.
        id: TaskId,
        /// Its terminal status.
        status: TaskStatus,
    },
    /// `pause` on a task that is already `paused`.
    AlreadyPaused(TaskId),
    /// `resume` on a task that is not `paused`.
    NotPaused {
        /// The task.
        id: TaskId,
        /// Its current wire status.
        status: TaskStatus,
    },
    /// The task is paused: resume it first (`tasks/update` while paused, or
    /// starting a paused task).
    Paused(TaskId),
    /// A cancel was accepted or a failure decided; the task only winds down.
    WindingDown(TaskId),
    /// The task's handler has already finished, so nothing can reach it.
    HandlerFinished(TaskId),
    /// The operation needs a running handler and the task has not started.
    NotStarted(TaskId),
    /// `start` on a task whose handler already started.
    AlreadyStarted(TaskId),
    /// An input request key was used before on this task (I9).
    DuplicateInputKey {
        /// The task.
        id: TaskId,
        /// The key.
        key: String,
    },
    /// The task is not the root of its tree.
    NotARoot(TaskId),
    /// A tree can only be deleted once its root is terminal.
    TreeNotTerminal(TaskId),
    /// A configured limit would be exceeded.
    LimitExceeded {
        /// The task the command was for.
        id: TaskId,
        /// Which limit.
        limit: Limit,
    },
}

impl TransitionError {
    /// The JSON-RPC error code for this rejection.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            TransitionError::DuplicateInputKey { .. }
            | TransitionError::NotStarted(_)
            | TransitionError::AlreadyStarted(_)
            | TransitionError::NotARoot(_)
            | TransitionError::TreeNotTerminal(_) => ErrorCode::INTERNAL_ERROR,
            _ => ErrorCode::INVALID_PARAMS,
        }
    }

    /// The task the rejected command named.
    pub fn task_id(&self) -> TaskId {
        match self {
            TransitionError::UnknownTask(id)
            | TransitionError::AlreadyPaused(id)
            | TransitionError::Paused(id)
            | TransitionError::WindingDown(id)
            | TransitionError::HandlerFinished(id)
            | TransitionError::NotStarted(id)
            | TransitionError::AlreadyStarted(id)
            | TransitionError::NotARoot(id)
            | TransitionError::TreeNotTerminal(id) => *id,
            TransitionError::Terminal { id, .. }
            | TransitionError::NotPaused { id, .. }
            | TransitionError::DuplicateInputKey { id, .. }
            | TransitionError::LimitExceeded { id, .. } => *id,
        }
    }
}

impl fmt::Display for TransitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransitionError::UnknownTask(_) => write!(f, "task not found"),
            TransitionError::Terminal { status, .. } => write!(f, "task is already {status}"),
            TransitionError::AlreadyPaused(_) => write!(f, "task is already paused"),
            TransitionError::NotPaused { status, .. } => {
                write!(f, "task is not paused (status is {status})")
            }
            TransitionError::Paused(_) => write!(f, "task is paused: resume it first"),
            TransitionError::WindingDown(_) => {
                write!(f, "task is being cancelled or failed and accepts no further work")
            }
            TransitionError::HandlerFinished(_) => {
                write!(f, "task's handler has finished and can no longer be steered")
            }
            TransitionError::NotStarted(_) => write!(f, "task's handler has not started"),
            TransitionError::AlreadyStarted(_) => write!(f, "task's handler has already started"),
            TransitionError::DuplicateInputKey { key, .. } => {
                write!(f, "input request key {key:?} was already used on this task")
            }
            TransitionError::NotARoot(_) => write!(f, "task is not the root of its tree"),
            TransitionError::TreeNotTerminal(_) => write!(f, "tree is not terminal"),
            TransitionError::LimitExceeded { limit, .. } => match limit {
                Limit::Depth { max } => write!(f, "subtask depth limit of {max} reached"),
                Limit::Children { max } => write!(f, "limit of {max} subtasks per task reached"),
                Limit::SteerQueue { max } => write!(f, "steer queue is full ({max} undelivered messages)"),
                Limit::SteerBytes { max } => write!(f, "steer message is larger than {max} bytes"),
            },
        }
    }
}

impl std::error::Error for TransitionError {}
