//! Runtime errors: what a client call or a handler call can run into.

use std::fmt;

use crate::core::TransitionError;
use crate::model::{ErrorCode, ErrorObject, TaskId};

/// Why a runtime call was rejected. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RuntimeError {
    /// The lifecycle does not allow the command.
    Transition(TransitionError),
    /// `after` named a task that is not an earlier sibling of the new subtask.
    InvalidDependency {
        /// The offending dependency.
        dependency: TaskId,
    },
    /// The principal already has its maximum of live tasks.
    TooManyLiveTasks {
        /// The limit.
        max: usize,
    },
    /// A subtask plan's dependencies form a cycle.
    DependencyCycle {
        /// Names of the steps on the cycle, in order.
        steps: Vec<String>,
    },
    /// A step's output could not be made durable (the store failed), or
    /// could not be encoded as JSON.
    Journal(String),
}

impl RuntimeError {
    /// The JSON-RPC code for this error.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            RuntimeError::Transition(e) => e.error_code(),
            RuntimeError::TooManyLiveTasks { .. } => ErrorCode::INVALID_PARAMS,
            RuntimeError::InvalidDependency { .. }
            | RuntimeError::DependencyCycle { .. }
            | RuntimeError::Journal(_) => ErrorCode::INTERNAL_ERROR,
        }
    }

    /// The JSON-RPC error object.
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject::new(self.error_code(), self.to_string())
    }
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Transition(e) => e.fmt(f),
            RuntimeError::TooManyLiveTasks { max } => {
                write!(
                    f,
                    "limit of {max} live tasks for this principal reached; wait for some to finish"
                )
            }
            RuntimeError::InvalidDependency { dependency } => {
                write!(
                    f,
                    "dependency {dependency} is not an earlier sibling of the new subtask"
                )
            }
            RuntimeError::DependencyCycle { steps } => {
                write!(f, "subtask plan has a dependency cycle: {}", steps.join(" -> "))
            }
            RuntimeError::Journal(why) => write!(f, "the step could not be journaled: {why}"),
        }
    }
}

impl std::error::Error for RuntimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RuntimeError::Transition(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TransitionError> for RuntimeError {
    fn from(e: TransitionError) -> Self {
        RuntimeError::Transition(e)
    }
}

impl From<RuntimeError> for ErrorObject {
    fn from(e: RuntimeError) -> Self {
        e.to_error_object()
    }
}

/// Returned to a handler whose task is being cancelled (or failed by TTL or a
/// fail-fast sibling): stop and return. Converts into a JSON-RPC error so `?`
/// works in handlers; the task's final status is decided by the core anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("task was cancelled")
    }
}

impl std::error::Error for Interrupted {}

impl From<Interrupted> for ErrorObject {
    fn from(_: Interrupted) -> Self {
        ErrorObject::new(ErrorCode::INTERNAL_ERROR, "task was cancelled")
    }
}
