//! How requests reach a server: Streamable HTTP ([`http`]) or the stdio of
//! a child process ([`stdio`]).
//!
//! A transport moves one request and returns its result object, or opens a
//! `subscriptions/listen` stream and yields its messages. It knows nothing
//! of tasks; it bounds every read (body, SSE event, stdio line) and turns
//! every failure into a [`ClientError`].

pub(crate) mod http;
#[cfg(feature = "fuzzing")]
pub(crate) mod scripted;
mod sse;
pub(crate) mod stdio;

use futures::stream::BoxStream;

use super::ClientError;
use crate::model::{JsonObject, JsonRpcMessage, RequestId};

/// One request, ready to send.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// Its id.
    pub(crate) id: RequestId,
    /// Its method (the `Mcp-Method` header).
    pub(crate) method: String,
    /// The `Mcp-Name` header value (tool name or task id), if the method has one.
    pub(crate) name: Option<String>,
    /// The serialized JSON-RPC request.
    pub(crate) body: Vec<u8>,
}

/// The messages of a `subscriptions/listen` stream, ending with its response.
pub(crate) type MessageStream = BoxStream<'static, Result<JsonRpcMessage, ClientError>>;

/// A connection to one server.
#[derive(Debug)]
pub(crate) enum Transport {
    /// Streamable HTTP.
    Http(http::HttpTransport),
    /// A child process speaking newline-delimited JSON-RPC.
    Stdio(stdio::StdioTransport),
    /// Answers from a function, decoded as HTTP answers (the fuzz harness).
    #[cfg(feature = "fuzzing")]
    Scripted(scripted::ScriptedTransport),
}

impl Transport {
    /// Sends `out` and returns the result object of its response.
    pub(crate) async fn request(&self, out: Outgoing) -> Result<JsonObject, ClientError> {
        match self {
            Transport::Http(t) => t.request(out).await,
            Transport::Stdio(t) => t.request(out).await,
            #[cfg(feature = "fuzzing")]
            Transport::Scripted(t) => t.request(out).await,
        }
    }

    /// Sends a `subscriptions/listen` request and returns its messages.
    pub(crate) async fn listen(&self, out: Outgoing) -> Result<MessageStream, ClientError> {
        match self {
            Transport::Http(t) => t.listen(out).await,
            Transport::Stdio(t) => t.listen(out).await,
            #[cfg(feature = "fuzzing")]
            Transport::Scripted(t) => t.listen(out).await,
        }
    }
}

/// Reads a complete message as the answer to request `id`.
fn answer_of(id: &RequestId, message: JsonRpcMessage) -> Result<JsonObject, ClientError> {
    match message {
        JsonRpcMessage::Response(r) if &r.id == id => Ok(r.result),
        JsonRpcMessage::Response(r) => Err(ClientError::Protocol(format!(
            "got the answer to request {} while waiting for request {id}",
            r.id
        ))),
        JsonRpcMessage::Error(e) => Err(ClientError::Rpc(e.error)),
        JsonRpcMessage::Request(r) => Err(ClientError::Protocol(format!(
            "the server sent a request ({:?}) instead of an answer",
            r.method
        ))),
        JsonRpcMessage::Notification(n) => Err(ClientError::Protocol(format!(
            "the server sent a notification ({:?}) instead of an answer",
            n.method
        ))),
    }
}

/// The first `max` characters of a body, for error messages.
fn snippet(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let trimmed = text.trim();
    match trimmed.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &trimmed[..i]),
        None => trimmed.to_owned(),
    }
}
