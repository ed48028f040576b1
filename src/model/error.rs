//! JSON-RPC error codes and the error object.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A JSON-RPC error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// `-32700`: the body is not valid JSON.
    pub const PARSE_ERROR: ErrorCode = ErrorCode(-32700);
    /// `-32600`: not a valid JSON-RPC request.
    pub const INVALID_REQUEST: ErrorCode = ErrorCode(-32600);
    /// `-32601`: unknown or unsupported method.
    pub const METHOD_NOT_FOUND: ErrorCode = ErrorCode(-32601);
    /// `-32602`: invalid params, including unknown or foreign task ids.
    pub const INVALID_PARAMS: ErrorCode = ErrorCode(-32602);
    /// `-32603`: internal error.
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(-32603);
    /// `-32020`: an `Mcp-Method` / `Mcp-Name` header disagrees with the body (SEP-2243).
    pub const HEADER_MISMATCH: ErrorCode = ErrorCode(-32020);
    /// `-32021`: the request needs a client capability it did not declare.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: ErrorCode = ErrorCode(-32021);
    /// `-32022`: the request's protocol version is not one this server speaks.
    pub const UNSUPPORTED_PROTOCOL_VERSION: ErrorCode = ErrorCode(-32022);
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A JSON-RPC error object: the `error` member of a response, and the
/// `error` payload of a `failed` task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code.
    pub code: ErrorCode,
    /// A short description.
    pub message: String,
    /// Optional structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and message and no data.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorObject {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// `-32602` with the one message used for every task id that does not
    /// name a task this caller may see: unknown, expired and deleted,
    /// foreign, or malformed. Using it everywhere keeps a task's existence
    /// from leaking.
    pub fn task_not_found() -> Self {
        ErrorObject::new(ErrorCode::INVALID_PARAMS, Self::TASK_NOT_FOUND_MESSAGE)
    }

    /// The message of [`ErrorObject::task_not_found`] (the tasks
    /// extension's own example text).
    pub const TASK_NOT_FOUND_MESSAGE: &'static str = "Failed to retrieve task: Task not found";

    /// Sets `data`.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl fmt::Display for ErrorObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}
