//! An in-process transport for the fuzz harness (feature `fuzzing`): a
//! function answers every request with what an HTTP server would send (a
//! status, a content type, body chunks) or with a broken or silent
//! connection, and the answer goes through the decoding of the Streamable
//! HTTP transport ([`http`](super::http)): the same size limits, the same
//! SSE decoder, the same interpretation of status and body. There is no
//! socket, so a harness can pause tokio's clock and run the client's poll
//! intervals, backoffs and timeouts in virtual time.
//!
//! It is not a way to talk to a real server and must not grow into one.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::http::{answer_of_sse, interpret, listen_answered_at_once, sse_messages};
use super::{MessageStream, Outgoing};
use crate::client::{ClientConfig, ClientError, Violation};
use crate::model::{JsonObject, RequestId};

/// One request as the scripted server sees it.
#[derive(Debug, Clone)]
pub struct ScriptedRequest {
    /// The JSON-RPC method (the `Mcp-Method` header).
    pub method: String,
    /// The `Mcp-Name` header value (tool name or task id), if any.
    pub name: Option<String>,
    /// The JSON-RPC id of the request.
    pub id: RequestId,
    /// The serialized request.
    pub body: Vec<u8>,
}

/// What the scripted server does with one request.
#[derive(Debug, Clone)]
pub enum ScriptedAnswer {
    /// An HTTP response.
    Http {
        /// The HTTP status.
        status: u16,
        /// The `Content-Type` header (`text/event-stream` makes it a stream).
        content_type: String,
        /// The body, in the chunks it arrives in.
        chunks: Vec<Vec<u8>>,
        /// The body does not end after its chunks: the connection stays
        /// open and silent.
        open: bool,
    },
    /// The connection fails with this message.
    Broken(String),
    /// No answer at all.
    Silent,
}

/// The scripted server.
pub type Responder = Arc<dyn Fn(ScriptedRequest) -> ScriptedAnswer + Send + Sync>;

/// The transport: answers come from a [`Responder`].
pub(crate) struct ScriptedTransport {
    responder: Responder,
    max_bytes: usize,
    timeout: Duration,
    idle: Duration,
}

impl std::fmt::Debug for ScriptedTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptedTransport")
    }
}

fn is_sse(content_type: &str) -> bool {
    content_type
        .trim()
        .to_ascii_lowercase()
        .starts_with("text/event-stream")
}

fn body_stream(
    chunks: Vec<Vec<u8>>,
    open: bool,
) -> futures::stream::BoxStream<'static, Result<Bytes, String>> {
    let chunks = futures::stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from(c))));
    if open {
        chunks.chain(futures::stream::pending()).boxed()
    } else {
        chunks.boxed()
    }
}

impl ScriptedTransport {
    /// A transport answered by `responder`, with `config`'s limits and timeouts.
    pub(crate) fn new(responder: Responder, config: &ClientConfig) -> Self {
        ScriptedTransport {
            responder,
            max_bytes: config.limits.max_response_bytes,
            timeout: config.request_timeout,
            idle: config.subscription_idle_timeout,
        }
    }

    fn ask(&self, out: &Outgoing) -> ScriptedAnswer {
        (self.responder)(ScriptedRequest {
            method: out.method.clone(),
            name: out.name.clone(),
            id: out.id.clone(),
            body: out.body.clone(),
        })
    }

    fn timed_out(&self) -> ClientError {
        ClientError::Timeout(format!(
            "no answer from the scripted server within {:?}",
            self.timeout
        ))
    }

    /// A plain body, bounded as the HTTP transport bounds it.
    fn body(&self, chunks: Vec<Vec<u8>>) -> Result<Vec<u8>, ClientError> {
        let mut buf = Vec::new();
        for chunk in chunks {
            if buf.len() + chunk.len() > self.max_bytes {
                return Err(Violation::ResponseTooLarge {
                    limit: self.max_bytes,
                }
                .into());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    }

    /// Sends one request and returns its result object.
    pub(crate) async fn request(&self, out: Outgoing) -> Result<JsonObject, ClientError> {
        match self.ask(&out) {
            ScriptedAnswer::Silent => {
                tokio::time::sleep(self.timeout).await;
                Err(self.timed_out())
            }
            ScriptedAnswer::Broken(m) => Err(ClientError::Connection(m)),
            ScriptedAnswer::Http {
                status,
                content_type,
                chunks,
                open,
            } => {
                if is_sse(&content_type) {
                    let messages = sse_messages(body_stream(chunks, open), self.max_bytes, None);
                    return tokio::time::timeout(self.timeout, answer_of_sse(messages, &out))
                        .await
                        .map_err(|_| self.timed_out())?;
                }
                if open {
                    // A plain body that never ends: the request times out.
                    tokio::time::sleep(self.timeout).await;
                    return Err(self.timed_out());
                }
                let body = self.body(chunks)?;
                interpret(&out.id, status, &body)
            }
        }
    }

    /// Sends a `subscriptions/listen` request and returns its messages.
    pub(crate) async fn listen(&self, out: Outgoing) -> Result<MessageStream, ClientError> {
        match self.ask(&out) {
            ScriptedAnswer::Silent => {
                tokio::time::sleep(self.timeout).await;
                Err(self.timed_out())
            }
            ScriptedAnswer::Broken(m) => Err(ClientError::Connection(m)),
            ScriptedAnswer::Http {
                status,
                content_type,
                chunks,
                open,
            } => {
                if is_sse(&content_type) {
                    return Ok(sse_messages(
                        body_stream(chunks, open),
                        self.max_bytes,
                        Some(self.idle),
                    ));
                }
                if open {
                    tokio::time::sleep(self.timeout).await;
                    return Err(self.timed_out());
                }
                let body = self.body(chunks)?;
                Err(listen_answered_at_once(&out.id, status, &body))
            }
        }
    }
}
