//! What goes back to the transport, how a task is shown on the 2026-07-28
//! wire ([`task_result`], [`modern_view`]), and the one place that maps errors to
//! JSON-RPC codes (`runtime_error`, `store_error`) and to HTTP statuses
//! (`status_for`, `Rejected`).

use futures::stream::BoxStream;

use crate::model::{
    DetailedTask, ErrorCode, ErrorObject, GetTaskResult, JsonRpcError, JsonRpcResponse, RequestId,
    TaskPayload, complete_result,
};
use crate::runtime::RuntimeError;
use crate::store::StoreError;

/// What to send back.
pub enum Reply {
    /// One JSON-RPC message (compact, one line) with its HTTP status.
    Message {
        /// HTTP status: 200 for results and for every JSON-RPC error the
        /// transport texts do not give a status of its own (see [`status_for`]).
        status: u16,
        /// The message.
        body: String,
    },
    /// A notification was accepted: HTTP 202, no body.
    Accepted,
    /// A stream of JSON-RPC messages (`subscriptions/listen`), one per SSE
    /// event or stdio line; the last one is the response when it ends.
    Stream(BoxStream<'static, String>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Message { status, body } => write!(f, "Message({status}, {body})"),
            Reply::Accepted => f.write_str("Accepted"),
            Reply::Stream(_) => f.write_str("Stream"),
        }
    }
}

/// The HTTP status of a JSON-RPC error on the 2026-07-28 path.
///
/// The transport texts give a status only to these: header mismatch
/// (`-32020`), a missing required client capability (`-32021`) and an
/// unsupported protocol version (`-32022`) are `400 Bad Request`; an unknown
/// method (`-32601`) is `404 Not Found`. A request whose `_meta` lacks a
/// required key is also `400` (the pipeline says so itself, since its code,
/// `-32602`, is shared with ordinary parameter errors). Every other error
/// is a normal JSON-RPC response: `200`, so that clients see its code
/// instead of a transport failure. On the legacy path every JSON-RPC error
/// is `200`.
pub fn status_for(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::METHOD_NOT_FOUND => 404,
        ErrorCode::HEADER_MISMATCH | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY => 400,
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => 400,
        _ => 200,
    }
}

/// A request the server answers with an error, and the HTTP status to send it with.
#[derive(Debug)]
pub(crate) struct Rejected {
    pub(crate) status: u16,
    pub(crate) error: ErrorObject,
}

impl Rejected {
    /// An error sent with an explicit HTTP status.
    pub(crate) fn with_status(status: u16, error: ErrorObject) -> Self {
        Rejected { status, error }
    }

    /// An error on the 2026-07-28 path, with the status [`status_for`] gives it.
    pub(crate) fn modern(error: ErrorObject) -> Self {
        Rejected {
            status: status_for(error.code),
            error,
        }
    }

    /// An error on the legacy path: always a normal response (200).
    pub(crate) fn legacy(error: ErrorObject) -> Self {
        Rejected { status: 200, error }
    }
}

impl From<ErrorObject> for Rejected {
    fn from(error: ErrorObject) -> Self {
        Rejected::modern(error)
    }
}

pub(crate) fn error_reply(status: u16, id: Option<RequestId>, error: ErrorObject) -> Reply {
    let body = serde_json::to_string(&JsonRpcError::new(id, error)).expect("error responses serialize");
    Reply::Message { status, body }
}

pub(crate) fn result_reply(id: &RequestId, result: impl serde::Serialize) -> Reply {
    let body = serde_json::to_string(&JsonRpcResponse::new(id.clone(), result)).expect("results serialize");
    Reply::Message { status: 200, body }
}

pub(crate) fn invalid(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INVALID_PARAMS, message)
}

pub(crate) fn store_error(e: StoreError) -> ErrorObject {
    match e {
        // Not sticky: what is refused, and until when (the path and
        // SQLite's words are in the server's log, not for clients).
        StoreError::Full(_) => ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            "the task store is full: new tasks and changes are refused until space is freed \
             (nothing acknowledged is lost; a task's changes since then are shown once they are durable)",
        )
        .with_data(serde_json::json!({"reason": "store_full"})),
        e => ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            format!("the change could not be made durable: {e}"),
        ),
    }
}

/// A read of the store that failed (a finished tree answered from the
/// file, a tree another cluster instance holds): `store_error`'s words
/// are about a change, and nothing was changed.
pub(crate) fn read_error(e: StoreError) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        format!("the task store could not be read: {e}"),
    )
}

pub(crate) fn runtime_error(e: RuntimeError) -> ErrorObject {
    match &e {
        RuntimeError::Transition(crate::core::TransitionError::UnknownTask(_)) => {
            ErrorObject::task_not_found()
        }
        _ => e.to_error_object(),
    }
}

/// A task as `tasks/get` answers it on the 2026-07-28 wire.
pub(crate) fn task_result(task: DetailedTask) -> GetTaskResult {
    GetTaskResult::new(modern_view(task))
}

/// A task as the 2026-07-28 wire shows it: a completed task's `result` is a
/// complete `CallToolResult` of that revision, so it carries `resultType:
/// "complete"` (tool handlers, subtasks included, return the bare result).
pub(crate) fn modern_view(task: DetailedTask) -> DetailedTask {
    let (task, payload) = task.into_parts();
    let payload = match payload {
        TaskPayload::Completed { result } => TaskPayload::Completed {
            result: complete_result(result),
        },
        other => other,
    };
    DetailedTask::new(task, payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store-full message, word for word as `docs/durability.md` gives it.
    #[test]
    fn the_store_full_message_is_one_sentence() {
        let e = store_error(StoreError::Full("disk full".into()));
        assert_eq!(e.code, ErrorCode::INTERNAL_ERROR);
        assert_eq!(
            e.message,
            "the task store is full: new tasks and changes are refused until space is freed \
             (nothing acknowledged is lost; a task's changes since then are shown once they are durable)"
        );
        assert_eq!(e.data, Some(serde_json::json!({"reason": "store_full"})));
    }
}
