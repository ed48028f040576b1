//! A raw `subscriptions/listen` stream on one root, read as the wire sends
//! it (the client library falls back to polling when a stream fails, which
//! would hide a broken stream from the soak): the acknowledgement first,
//! then `notifications/tasks` for the root and every subtask as it appears,
//! then the response once every followed task is terminal.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use serde_json::{Value, json};
use subtask::model::{
    ClientCapabilities, DetailedTask, PROTOCOL_VERSION, RequestMeta, TaskId, TaskStatusNotificationParams,
    TasksCapability,
};

use crate::api::{Floor, Seen};
use crate::stats::Stats;

/// What one stream delivered.
#[derive(Debug, Default)]
pub struct ListenLog {
    /// The task ids the acknowledgement agreed to notify about.
    pub acked: Vec<TaskId>,
    /// The `notifications/tasks` in arrival order.
    pub notes: Vec<DetailedTask>,
    /// Whether the stream ended with the listen request's response.
    pub ended: bool,
    /// What went wrong on the stream, if anything did.
    pub error: Option<String>,
}

/// Opens `subscriptions/listen` for `root` at `url` with `http` and reads
/// the stream to its end (or its first error).
pub async fn listen(
    http: reqwest::Client,
    url: String,
    root: TaskId,
    request_id: i64,
    stats: Arc<Stats>,
    seen: Arc<Seen>,
) -> ListenLog {
    stats.listens_opened.fetch_add(1, Ordering::Relaxed);
    stats.request("subscriptions/listen");
    let mut log = ListenLog::default();
    if let Err(e) = read(&http, &url, root, request_id, &stats, &seen, &mut log).await {
        log.error = Some(e);
    }
    if log.ended {
        stats.listens_ended.fetch_add(1, Ordering::Relaxed);
    }
    log
}

async fn read(
    http: &reqwest::Client,
    url: &str,
    root: TaskId,
    request_id: i64,
    stats: &Stats,
    seen: &Seen,
    log: &mut ListenLog,
) -> Result<(), String> {
    let meta = RequestMeta::new(ClientCapabilities::with_tasks(TasksCapability::FULL));
    let body = json!({
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": [root]}, "_meta": meta},
    });
    let resp = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", PROTOCOL_VERSION)
        .header("Mcp-Method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("cannot open the stream: {e}"))?;
    let status = resp.status();
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !status.is_success() || !sse {
        let text = resp.text().await.unwrap_or_default();
        return Err(format!("HTTP {status} without an event stream: {text}"));
    }
    let mut body = resp.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("the stream broke: {e}"))?;
        buf.extend_from_slice(&chunk);
        while let Some(end) = event_end(&buf) {
            let event: Vec<u8> = buf.drain(..end.0 + end.1).take(end.0).collect();
            let text = String::from_utf8(event).map_err(|_| "an event is not UTF-8".to_owned())?;
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() {
                continue; // a keep-alive comment
            }
            let msg: Value =
                serde_json::from_str(&data.join("\n")).map_err(|e| format!("an event is not JSON: {e}"))?;
            if take(&msg, root, request_id, stats, seen, log)? {
                return Ok(());
            }
        }
    }
    Err("the stream ended without the response".to_owned())
}

/// Where the first event of `buf` ends: (its length, the separator's).
fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// Takes one message; `true` once the response arrived.
fn take(
    msg: &Value,
    root: TaskId,
    request_id: i64,
    stats: &Stats,
    seen: &Seen,
    log: &mut ListenLog,
) -> Result<bool, String> {
    if msg.get("id") == Some(&json!(request_id)) {
        if let Some(e) = msg.get("error") {
            return Err(format!("the listen request failed: {e}"));
        }
        if log.acked.is_empty() {
            return Err("the response came before any acknowledgement".to_owned());
        }
        log.ended = true;
        return Ok(true);
    }
    let sub_id = &msg["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"];
    if sub_id != &json!(request_id) {
        return Err(format!("a message without this subscription's id: {msg}"));
    }
    match msg["method"].as_str() {
        Some("notifications/subscriptions/acknowledged") => {
            let ids = msg["params"]["notifications"]["taskIds"]
                .as_array()
                .ok_or_else(|| format!("an acknowledgement without taskIds: {msg}"))?;
            log.acked = ids
                .iter()
                .map(|v| v.as_str().and_then(|s| s.parse().ok()))
                .collect::<Option<Vec<TaskId>>>()
                .ok_or_else(|| format!("an acknowledgement with a malformed task id: {msg}"))?;
            if log.acked != [root] {
                return Err(format!(
                    "the acknowledgement agreed to {:?}, not [{root}]",
                    log.acked
                ));
            }
        }
        Some("notifications/tasks") => {
            if log.acked.is_empty() {
                return Err("a notification before the acknowledgement".to_owned());
            }
            let params: TaskStatusNotificationParams = serde_json::from_value(msg["params"].clone())
                .map_err(|e| format!("a malformed notifications/tasks: {e}: {msg}"))?;
            let task = params.task;
            stats.notifications.fetch_add(1, Ordering::Relaxed);
            if let Err(p) = seen.observe(&task, Floor::default(), "notifications/tasks") {
                stats.problem(&p);
            }
            log.notes.push(task);
        }
        _ => return Err(format!("an unexpected message on the stream: {msg}")),
    }
    Ok(false)
}
