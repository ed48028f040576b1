//! stdio transport: one JSON-RPC message per line on stdin, replies as
//! lines on stdout (logs go to stderr). Requests run concurrently;
//! `notifications/cancelled` aborts an in-flight request by id.
//!
//! The connection is one era for its whole life ([`Connection`]): a
//! 2026-07-28 one (requests carry their version in `_meta`), or a legacy
//! session opened by `initialize`, served as on the legacy HTTP path, with
//! the tasks' status notifications and input requests written to stdout
//! and the client's answers read from stdin.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::reply::Reply;
use super::request::Incoming;
use super::session::Connection;
use super::{Principal, Server};

/// Serves `server` over stdin/stdout until stdin closes.
///
/// # Errors
///
/// I/O errors on stdin or stdout.
pub async fn serve_stdio(server: Server) -> std::io::Result<()> {
    serve_lines(server, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves `server` over any line-oriented reader and writer (stdio, pipes, tests).
///
/// # Errors
///
/// I/O errors on the reader or writer.
pub async fn serve_lines(
    server: Server,
    input: impl AsyncRead + Unpin + Send + 'static,
    mut output: impl AsyncWrite + Unpin + Send + 'static,
) -> std::io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<String>(256);
    let writer = tokio::spawn(async move {
        while let Some(line) = rx.recv().await {
            output.write_all(line.as_bytes()).await?;
            output.write_all(b"\n").await?;
            output.flush().await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let inflight: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>> = Arc::default();
    let connection = Arc::new(Connection::new(tx.clone()));
    let mut lines = BufReader::new(input).lines();
    let max = server.config().limits.max_body_bytes;
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        if line.len() > max {
            let err = crate::model::JsonRpcError::new(
                None,
                crate::model::ErrorObject::new(
                    crate::model::ErrorCode::INVALID_REQUEST,
                    format!("message is larger than the limit of {max} bytes"),
                ),
            );
            let _ = tx
                .send(serde_json::to_string(&err).expect("errors serialize"))
                .await;
            continue;
        }
        // `notifications/cancelled {requestId}` aborts that request (stdio only).
        let peek: Option<serde_json::Value> = serde_json::from_str(&line).ok();
        if let Some(v) = &peek
            && v.get("method").and_then(|m| m.as_str()) == Some(crate::model::NOTIFICATIONS_CANCELLED)
        {
            if let Some(rid) = v.pointer("/params/requestId")
                && let Some(h) = inflight.lock().remove(&rid.to_string())
            {
                h.abort();
            }
            continue;
        }
        let key = peek.as_ref().and_then(|v| v.get("id")).map(ToString::to_string);
        let server = server.clone();
        let tx = tx.clone();
        let inflight2 = inflight.clone();
        let key2 = key.clone();
        let connection = connection.clone();
        let task = tokio::spawn(async move {
            let reply = server
                .handle(Incoming {
                    body: line.as_bytes(),
                    headers: None,
                    principal: Principal::anonymous(),
                    connection: Some(&connection),
                })
                .await;
            match reply {
                Reply::Message { body, .. } => {
                    let _ = tx.send(body).await;
                }
                Reply::Accepted => {}
                Reply::Stream(mut s) => {
                    while let Some(m) = s.next().await {
                        if tx.send(m).await.is_err() {
                            break;
                        }
                    }
                }
            }
            if let Some(k) = key2 {
                inflight2.lock().remove(&k);
            }
        });
        if let Some(k) = key
            && !task.is_finished()
        {
            inflight.lock().insert(k, task.abort_handle());
        }
    }
    // The client went away: the status followers end; requests in flight
    // are still answered (a script may close stdin after its last request).
    connection.close();
    drop(connection);
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}
