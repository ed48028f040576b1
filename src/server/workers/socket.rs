//! `GET /workers`: the WebSocket a worker connects to (`docs/workers.md`).
//! A reader loop takes the worker's frames (its lease renewed by each one)
//! and a writer task sends what the hub and the proxies queue for it.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use super::wire::{self, FromWorker, Hello, WireError};
use super::{Hub, text};
use crate::server::http_base::AppState;

/// How long a new connection may take to send its `hello`.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// The `/workers` route: 404 when the server takes no workers.
pub(crate) async fn route(
    State(state): State<AppState>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let Some(hub) = state.server.inner.workers.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Ok(upgrade) = upgrade else {
        return (
            StatusCode::UPGRADE_REQUIRED,
            "/workers is the worker protocol's WebSocket (docs/workers.md)",
        )
            .into_response();
    };
    upgrade.on_upgrade(move |socket| serve(hub, socket))
}

async fn serve(hub: Arc<Hub>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (out, mut queue) = mpsc::unbounded_channel::<Message>();
    // The writer: everything queued for this worker, flushed in groups.
    let writer = tokio::spawn(async move {
        while let Some(first) = queue.recv().await {
            if sink.feed(first).await.is_err() {
                return;
            }
            while let Ok(more) = queue.try_recv() {
                if sink.feed(more).await.is_err() {
                    return;
                }
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    let worker = match hello(&hub, &mut stream, &out).await {
        Ok(id) => id,
        Err(e) => {
            tracing::info!(code = e.code, message = %e.message, "worker refused");
            let _ = out.send(text(wire::error(&e)));
            drop(out);
            let _ = writer.await;
            return;
        }
    };
    let lease = hub.config.lease;
    // Whether the worker went silent past its lease (decided here, so a
    // frame of a live worker costs no look at the hub).
    let mut expired = false;
    loop {
        let next = match tokio::time::timeout(lease, stream.next()).await {
            Ok(next) => next,
            Err(_) => {
                // Silent past its lease: its tasks go elsewhere; it may
                // come back and get new ones.
                hub.lose(worker, false);
                expired = true;
                stream.next().await
            }
        };
        // Any frame renews the lease.
        if matches!(next, Some(Ok(_))) && std::mem::take(&mut expired) {
            hub.revive(worker);
        }
        let frame = match next {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Binary(_))) => {
                let _ = out.send(text(wire::error(&WireError::new(
                    "bad_frame",
                    "frames are JSON text frames",
                ))));
                continue;
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(_)) | Err(_)) | None => break,
        };
        let parsed: FromWorker = match serde_json::from_str(frame.as_str()) {
            Ok(f) => f,
            Err(e) => {
                let e = WireError::new("bad_frame", format!("{e}"));
                let reference = serde_json::from_str::<serde_json::Value>(frame.as_str())
                    .ok()
                    .and_then(|v| v.get("ref").and_then(serde_json::Value::as_u64));
                let msg = match reference {
                    Some(r) => wire::reply(r, &Err(e)),
                    None => wire::error(&e),
                };
                let _ = out.send(text(msg));
                continue;
            }
        };
        let reference = parsed.reference();
        let about = parsed.task();
        if let Err(e) = hub.route(worker, parsed, frame.as_str()) {
            let msg = match (reference, about) {
                (Some(r), _) => wire::reply(r, &Err(e)),
                (None, Some((task, attempt))) => wire::error_about(&e, task, attempt),
                (None, None) => continue,
            };
            let _ = out.send(text(msg));
        }
    }
    hub.lose(worker, true);
    drop(out);
    writer.abort();
}

/// Reads and checks the `hello`, registers the worker, says `welcome`.
async fn hello(
    hub: &Arc<Hub>,
    stream: &mut futures::stream::SplitStream<WebSocket>,
    out: &mpsc::UnboundedSender<Message>,
) -> Result<u64, WireError> {
    let first = match tokio::time::timeout(HELLO_TIMEOUT, stream.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => t,
        Ok(_) => {
            return Err(WireError::new(
                "bad_hello",
                "the first frame must be a `hello` text frame",
            ));
        }
        Err(_) => return Err(WireError::new("bad_hello", "no `hello` within 10 s")),
    };
    let value: serde_json::Value = serde_json::from_str(first.as_str())
        .map_err(|e| WireError::new("bad_hello", format!("not JSON: {e}")))?;
    if value.get("type").and_then(serde_json::Value::as_str) != Some("hello") {
        return Err(WireError::new("bad_hello", "the first frame must be a `hello`"));
    }
    let hello: Hello =
        serde_json::from_value(value).map_err(|e| WireError::new("bad_hello", format!("hello: {e}")))?;
    let Some(name) = hub.config.tokens.authenticate(&hello.token) else {
        return Err(WireError::new("unauthorized", "unknown worker token"));
    };
    if hello.protocol != wire::PROTOCOL {
        return Err(WireError::new(
            "bad_hello",
            format!(
                "protocol {} is not supported (this server speaks {})",
                hello.protocol,
                wire::PROTOCOL
            ),
        ));
    }
    if hello.capacity == 0 {
        return Err(WireError::new("bad_hello", "capacity must be at least 1"));
    }
    let label: Arc<str> = match hello.name {
        Some(n) if !n.is_empty() => Arc::from(format!("{}/{n}", name.name())),
        _ => Arc::from(name.name()),
    };
    // `connect` says `welcome` before any assignment it makes.
    hub.connect(label, hello.capacity as usize, hello.tools, out.clone())
}
