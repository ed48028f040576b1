//! stdio, client side: a child process reads one JSON-RPC message per line
//! on stdin and writes one per line on stdout.
//!
//! A writer task owns the child's stdin, a reader task its stdout. Answers
//! are routed to the waiting request by id; `notifications/tasks` to the
//! subscription named by `_meta["io.modelcontextprotocol/subscriptionId"]`.
//! Lines are bounded; a subscription whose consumer falls behind is dropped
//! (the caller polls instead) rather than buffered without end. The child is
//! killed when the transport is dropped.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::json;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

use super::{MessageStream, Outgoing, answer_of};
use crate::client::{ClientConfig, ClientError, Violation};
use crate::model::{JsonObject, JsonRpcMessage, META_SUBSCRIPTION_ID, NOTIFICATIONS_CANCELLED, RequestId};

/// Messages one subscription may have waiting before it is dropped.
const SUBSCRIPTION_BUFFER: usize = 1024;

#[derive(Default)]
struct Routes {
    pending: HashMap<RequestId, oneshot::Sender<JsonRpcMessage>>,
    subscriptions: HashMap<RequestId, mpsc::Sender<JsonRpcMessage>>,
    closed: Option<String>,
}

/// A server running as a child process.
pub(crate) struct StdioTransport {
    writer: mpsc::Sender<Vec<u8>>,
    routes: Arc<Mutex<Routes>>,
    _child: Child,
    timeout: Duration,
}

impl std::fmt::Debug for StdioTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioTransport").finish_non_exhaustive()
    }
}

impl StdioTransport {
    /// Starts `command` with piped stdin and stdout. Must be called inside a
    /// tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] when the process cannot be started.
    pub(crate) fn spawn(mut command: Command, config: &ClientConfig) -> Result<Self, ClientError> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| ClientError::Config(format!("cannot start the server process: {e}")))?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ClientError::Config(
                "the server process has no stdin/stdout".to_owned(),
            ));
        };
        let routes = Arc::new(Mutex::new(Routes::default()));
        let (writer, mut lines) = mpsc::channel::<Vec<u8>>(64);
        let r = routes.clone();
        tokio::spawn(async move {
            while let Some(mut line) = lines.recv().await {
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    close(&r, "cannot write to the server process");
                    return;
                }
            }
        });
        let r = routes.clone();
        let limit = config.limits.max_response_bytes;
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match read_line(&mut reader, &mut line, limit).await {
                    Ok(true) => route(&r, &line),
                    Ok(false) => {
                        close(&r, "the server process closed its output");
                        return;
                    }
                    Err(m) => {
                        close(&r, &m);
                        return;
                    }
                }
            }
        });
        Ok(StdioTransport {
            writer,
            routes,
            _child: child,
            timeout: config.request_timeout,
        })
    }

    fn closed_error(&self) -> ClientError {
        let why = self.routes.lock().closed.clone();
        ClientError::Connection(why.unwrap_or_else(|| "the server process is gone".to_owned()))
    }

    /// Sends one request and returns its result object.
    pub(crate) async fn request(&self, out: Outgoing) -> Result<JsonObject, ClientError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut routes = self.routes.lock();
            if let Some(why) = &routes.closed {
                return Err(ClientError::Connection(why.clone()));
            }
            routes.pending.insert(out.id.clone(), tx);
        }
        if self.writer.send(out.body).await.is_err() {
            self.routes.lock().pending.remove(&out.id);
            return Err(self.closed_error());
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(message)) => answer_of(&out.id, message),
            Ok(Err(_)) => Err(self.closed_error()),
            Err(_) => {
                self.routes.lock().pending.remove(&out.id);
                let _ = self.writer.try_send(cancel_line(&out.id));
                Err(ClientError::Timeout(format!(
                    "no answer to {} within {:?}",
                    out.method, self.timeout
                )))
            }
        }
    }

    /// Sends a `subscriptions/listen` request and returns its messages.
    pub(crate) async fn listen(&self, out: Outgoing) -> Result<MessageStream, ClientError> {
        let (tx, rx) = mpsc::channel(SUBSCRIPTION_BUFFER);
        {
            let mut routes = self.routes.lock();
            if let Some(why) = &routes.closed {
                return Err(ClientError::Connection(why.clone()));
            }
            routes.subscriptions.insert(out.id.clone(), tx);
        }
        if self.writer.send(out.body).await.is_err() {
            self.routes.lock().subscriptions.remove(&out.id);
            return Err(self.closed_error());
        }
        /// Ends the subscription on the server when the stream is dropped.
        struct Guard {
            id: RequestId,
            routes: Arc<Mutex<Routes>>,
            writer: mpsc::Sender<Vec<u8>>,
        }
        impl Drop for Guard {
            fn drop(&mut self) {
                let live = self.routes.lock().subscriptions.remove(&self.id).is_some();
                if live {
                    let _ = self.writer.try_send(cancel_line(&self.id));
                }
            }
        }
        let guard = Guard {
            id: out.id,
            routes: self.routes.clone(),
            writer: self.writer.clone(),
        };
        Ok(
            futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
                let m = rx.recv().await?;
                Some((Ok(m), (rx, guard)))
            })
            .boxed(),
        )
    }
}

fn cancel_line(id: &RequestId) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "method": NOTIFICATIONS_CANCELLED,
        "params": {"requestId": id.to_value()},
    }))
    .expect("a literal serializes")
}

fn close(routes: &Mutex<Routes>, why: &str) {
    let mut r = routes.lock();
    if r.closed.is_none() {
        r.closed = Some(why.to_owned());
    }
    // Dropping the senders wakes every waiter with "closed".
    r.pending.clear();
    r.subscriptions.clear();
}

/// Delivers one line from the server. Malformed lines and messages nobody
/// waits for are dropped: the server gets no say in what the client holds.
fn route(routes: &Mutex<Routes>, line: &[u8]) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let Ok(message) = JsonRpcMessage::parse(line) else {
        tracing::debug!("dropping a line from the server that is not a JSON-RPC message");
        return;
    };
    let mut r = routes.lock();
    match &message {
        JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {
            let Some(id) = message.id().cloned() else {
                return;
            };
            if let Some(tx) = r.pending.remove(&id) {
                let _ = tx.send(message);
            } else if let Some(tx) = r.subscriptions.remove(&id) {
                // The listen request's own response ends its stream.
                let _ = tx.try_send(message);
            }
        }
        JsonRpcMessage::Notification(n) => {
            let sub = n
                .params
                .as_ref()
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(META_SUBSCRIPTION_ID))
                .and_then(|v| RequestId::from_value(v).ok());
            let Some(sub) = sub else { return };
            let full = match r.subscriptions.get(&sub) {
                Some(tx) => tx.try_send(message).is_err(),
                None => false,
            };
            if full {
                // A consumer that fell this far behind polls instead.
                r.subscriptions.remove(&sub);
            }
        }
        JsonRpcMessage::Request(_) => {}
    }
}

/// Reads one line (without its `\n`) into `buf`, at most `limit` bytes.
/// `Ok(false)` at the end of the stream.
async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<bool, String> {
    loop {
        let available = r
            .fill_buf()
            .await
            .map_err(|e| format!("cannot read from the server process: {e}"))?;
        if available.is_empty() {
            return Ok(!buf.is_empty());
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if buf.len() + take > limit {
            return Err(Violation::ResponseTooLarge { limit }.to_string());
        }
        buf.extend_from_slice(&available[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_bounded_and_split() {
        let data: &[u8] = b"{\"a\":1}\nxxxxxxxxxxxxxxxxxxxx\nlast";
        let mut r = BufReader::with_capacity(4, data);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 16).await, Ok(true));
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert!(
            read_line(&mut r, &mut buf, 16)
                .await
                .unwrap_err()
                .contains("larger than 16")
        );
        let mut r = BufReader::new(&b"last"[..]);
        buf.clear();
        assert_eq!(read_line(&mut r, &mut buf, 16).await, Ok(true));
        buf.clear();
        assert_eq!(read_line(&mut r, &mut buf, 16).await, Ok(false));
    }
}
