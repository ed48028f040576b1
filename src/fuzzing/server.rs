//! The server's entry: HTTP requests into the axum router.
//!
//! # Input
//!
//! Text, split into requests by lines starting with `===` (at most
//! [`MAX_REQUESTS`]). A request is either
//!
//! * *raw*: a first line `METHOD [PATH]` (e.g. `POST /mcp`), header lines
//!   `name: value`, a blank line, then the body, sent exactly so; or
//! * *auto*: just a body; the harness adds what a well-behaved client sends
//!   (`Content-Type`, `Host`, the fuzz principal's bearer token, and
//!   `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` as the body implies),
//!   so that mutations of the body reach the methods behind the checks;
//! * or `@sleep MS`: lets that much virtual time pass (tasks run meanwhile).
//!
//! In bodies and header values, `$T0`..`$T9` stand for the task ids the
//! server returned so far (in order of appearance), `$META` for a complete
//! 2026-07-28 `_meta` member (tasks with steer and pause, elicitation),
//! `$STATE` for the last `requestState` returned and `$KEY` for the last
//! input request key seen, so that sequences reach `tasks/*` on live tasks
//! and complete input rounds.
//!
//! # Properties
//!
//! * Every answer is a clear HTTP error without a body (202 for an accepted
//!   notification, 404 for another path) or one JSON-RPC response or error
//!   (an SSE stream for `subscriptions/listen`: JSON-RPC messages, the
//!   response last), with a known error code and a message; a request's id
//!   is echoed; a result has the shape its method defines (parsed with the
//!   model's own types).
//! * Afterwards, a valid client (another principal) is still served: it
//!   discovers the server, calls a task tool and polls it to completion, and
//!   cannot see the fuzz principal's tasks.
//! * The store holds exactly the live trees: every stored tree restores
//!   (every invariant checked) to the snapshots the runtime serves.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Method, Request, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::text::sections;
use crate::core::{ClientView, Forest, ForestConfig, Limits, TaskRecord, decode_state};
use crate::model::{
    AckResult, CreateTaskResult, DetailedTask, DiscoverResult, ErrorCode, GetTaskResult, InputRequiredResult,
    JsonObject, JsonRpcMessage, PROTOCOL_VERSION, TaskId, TaskStatus, TaskStatusNotificationParams,
};
use crate::runtime::{Runtime, RuntimeConfig, SubtaskOptions};
use crate::server::{
    ElicitAnswer, Server, ServerConfig, ServerLimits, TaskSupport, TokenTable, ToolCall, ToolOutcome,
    ToolSpec, elicitation, error_result, text_result,
};
use crate::store::MemoryStore;

/// Requests per input; the rest is ignored.
pub const MAX_REQUESTS: usize = 24;
/// SSE events read from one stream before it is dropped.
const MAX_EVENTS: usize = 64;
/// Virtual time a stream is read for before it is dropped.
const STREAM_WINDOW: Duration = Duration::from_secs(30);
/// Longest `@sleep`.
const MAX_SLEEP_MS: u64 = 120_000;
/// The fuzz principal's token (auto requests carry it).
const FUZZ_TOKEN: &str = "fuzz-token";
/// The probe's token: another principal.
const PROBE_TOKEN: &str = "probe-token";
/// JSON-RPC error codes this server may answer with.
const KNOWN_CODES: [ErrorCode; 8] = [
    ErrorCode::PARSE_ERROR,
    ErrorCode::INVALID_REQUEST,
    ErrorCode::METHOD_NOT_FOUND,
    ErrorCode::INVALID_PARAMS,
    ErrorCode::INTERNAL_ERROR,
    ErrorCode::HEADER_MISMATCH,
    ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
    ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
];
/// Statuses of answers refused before the body was read (no id to echo).
const HTTP_LAYER: [u16; 5] = [401, 403, 405, 413, 415];

/// One step of the input.
#[derive(Debug)]
enum Step {
    Raw {
        method: String,
        path: String,
        headers: Vec<(String, String)>,
        body: String,
    },
    Auto {
        body: String,
    },
    Sleep(u64),
}

fn parse_steps(data: &[u8]) -> Vec<Step> {
    let text = String::from_utf8_lossy(data);
    let (preamble, secs) = sections(&text);
    let mut bodies: Vec<&str> = Vec::new();
    if !preamble.trim().is_empty() {
        bodies.push(preamble);
    }
    bodies.extend(secs.iter().map(|s| s.body));
    bodies.into_iter().take(MAX_REQUESTS).map(parse_step).collect()
}

fn is_method_token(s: &str) -> bool {
    !s.is_empty() && s.len() <= 16 && s.bytes().all(|b| b.is_ascii_uppercase())
}

fn parse_step(text: &str) -> Step {
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    let first = first.trim_end_matches('\r');
    if let Some(ms) = first.strip_prefix("@sleep") {
        return Step::Sleep(ms.trim().parse::<u64>().unwrap_or(1000).min(MAX_SLEEP_MS));
    }
    let mut words = first.split(' ');
    let method = words.next().unwrap_or("");
    if !is_method_token(method) {
        return Step::Auto {
            body: text.to_owned(),
        };
    }
    let path = words.next().unwrap_or("/mcp").to_owned();
    let mut headers = Vec::new();
    let mut body = "";
    let mut remaining = rest;
    loop {
        let (line, after) = remaining.split_once('\n').unwrap_or((remaining, ""));
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            body = after;
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim_start().to_owned()));
        }
        if after.is_empty() {
            break;
        }
        remaining = after;
    }
    Step::Raw {
        method: method.to_owned(),
        path,
        headers,
        body: body.to_owned(),
    }
}

/// What earlier answers told the harness.
#[derive(Debug, Default)]
struct Seen {
    tasks: Vec<TaskId>,
    state: Option<Value>,
    key: Option<String>,
}

/// The `_meta` member `$META` stands for.
fn meta_member() -> String {
    format!(
        "\"_meta\":{{\"io.modelcontextprotocol/protocolVersion\":\"{PROTOCOL_VERSION}\",\
         \"io.modelcontextprotocol/clientCapabilities\":{{\"extensions\":{{\"io.modelcontextprotocol/tasks\":\
         {{\"steer\":true,\"pause\":true}}}},\"elicitation\":{{}}}}}}"
    )
}

impl Seen {
    fn substitute(&self, s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let tail = &rest[i + 1..];
            let (word, len) = if let Some(d) = tail.strip_prefix('T').and_then(|t| t.chars().next())
                && d.is_ascii_digit()
            {
                let n = d as usize - '0' as usize;
                let id = self
                    .tasks
                    .get(n)
                    .copied()
                    .unwrap_or_else(|| TaskId::from_u128(0xdead_0000 + n as u128));
                (id.to_string(), 2)
            } else if tail.starts_with("META") {
                (meta_member(), 4)
            } else if tail.starts_with("STATE") {
                let state = self.state.clone().unwrap_or(Value::Null);
                (state.to_string(), 5)
            } else if tail.starts_with("KEY") {
                (self.key.clone().unwrap_or_else(|| "confirm".to_owned()), 3)
            } else {
                ("$".to_owned(), 0)
            };
            out.push_str(&word);
            rest = &tail[len..];
        }
        out.push_str(rest);
        out
    }

    /// Learns task ids, the request state and input keys from an answer.
    fn learn(&mut self, v: &Value) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("taskId" | "parentTaskId", Value::String(s)) => self.task(s),
                        ("childTaskIds", Value::Array(ids)) => {
                            for id in ids.iter().filter_map(Value::as_str) {
                                self.task(id);
                            }
                        }
                        ("requestState", s) => self.state = Some(s.clone()),
                        ("inputRequests", Value::Object(reqs)) => {
                            if let Some(k) = reqs.keys().next_back() {
                                self.key = Some(k.clone());
                            }
                        }
                        _ => {}
                    }
                    self.learn(v);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| self.learn(v)),
            _ => {}
        }
    }

    fn task(&mut self, s: &str) {
        if let Ok(id) = s.parse::<TaskId>()
            && self.tasks.len() < 10
            && !self.tasks.contains(&id)
        {
            self.tasks.push(id);
        }
    }
}

/// A request as the harness sent it, for checking its answer.
struct Sent {
    /// The body parsed as JSON-RPC.
    message: Option<JsonRpcMessage>,
    /// Whether it reached the endpoint's POST path.
    post_mcp: bool,
}

fn build(step: &Step, seen: &Seen) -> Option<(Request<Body>, Sent)> {
    let (method, path, headers, body) = match step {
        Step::Raw {
            method,
            path,
            headers,
            body,
        } => (
            Method::from_bytes(method.as_bytes()).unwrap_or(Method::POST),
            path.clone(),
            headers
                .iter()
                .map(|(k, v)| (k.clone(), seen.substitute(v)))
                .collect::<Vec<_>>(),
            seen.substitute(body),
        ),
        Step::Auto { body } => {
            let body = seen.substitute(body);
            let headers = auto_headers(&body);
            (Method::POST, "/mcp".to_owned(), headers, body)
        }
        Step::Sleep(_) => unreachable!("sleeps are not requests"),
    };
    let uri = match path.parse::<axum::http::Uri>() {
        Ok(uri) if path.starts_with('/') => uri,
        _ => axum::http::Uri::from_static("/mcp"),
    };
    let post_mcp = method == Method::POST && uri.path() == "/mcp";
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in &headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_bytes(v.as_bytes()),
        ) {
            req = req.header(k, v);
        }
    }
    let message = JsonRpcMessage::parse(body.as_bytes()).ok();
    let req = req.body(Body::from(body)).ok()?;
    Some((req, Sent { message, post_mcp }))
}

/// The headers a well-behaved client sends with `body`.
fn auto_headers(body: &str) -> Vec<(String, String)> {
    let mut h = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("host".to_owned(), "127.0.0.1:8750".to_owned()),
        ("authorization".to_owned(), format!("Bearer {FUZZ_TOKEN}")),
    ];
    let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(body) else {
        h.push(("mcp-protocol-version".to_owned(), PROTOCOL_VERSION.to_owned()));
        return h;
    };
    let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
    let params = msg.get("params");
    let modern = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    match modern {
        Some(v) => {
            h.push(("mcp-protocol-version".to_owned(), v.to_owned()));
            h.push(("mcp-method".to_owned(), method.to_owned()));
            let name = params
                .and_then(|p| p.get("name").or_else(|| p.get("taskId")))
                .and_then(Value::as_str);
            if let Some(name) = name.filter(|n| HeaderValue::from_str(n).is_ok()) {
                h.push(("mcp-name".to_owned(), name.to_owned()));
            }
        }
        None if method == "initialize" => {}
        None => h.push(("mcp-protocol-version".to_owned(), "2025-11-25".to_owned())),
    }
    h
}

/// The harness's server: the demo tools and three small tools of its own,
/// two principals, small limits (so the limits are reached), the
/// in-memory store.
fn forest_config() -> ForestConfig {
    ForestConfig {
        limits: Limits {
            max_depth: 6,
            max_children: 32,
            max_steer_queue: 16,
            max_steer_bytes: 1024,
        },
        ..ForestConfig::default()
    }
}

fn server() -> Server {
    let forest = forest_config();
    let runtime = Runtime::with_store(
        RuntimeConfig {
            forest,
            ..RuntimeConfig::default()
        },
        Arc::new(MemoryStore::new()),
    );
    let mut tokens = TokenTable::default();
    tokens.insert(FUZZ_TOKEN, "fuzz");
    tokens.insert(PROBE_TOKEN, "probe");
    let config = ServerConfig {
        limits: ServerLimits {
            max_body_bytes: 64 * 1024,
            max_live_tasks_per_principal: 64,
            max_subscription_tasks: 16,
        },
        tokens: Some(tokens),
        ..ServerConfig::default()
    };
    let no_args = || json!({"type": "object", "properties": {}});
    crate::demo::register(Server::builder(runtime, config))
        .tool(
            ToolSpec::new(
                "probe",
                "Two subtasks, then the root.",
                no_args(),
                TaskSupport::Required,
            ),
            probe_tool,
        )
        .tool(
            ToolSpec::new(
                "ask",
                "Asks for a confirmation inside the task.",
                no_args(),
                TaskSupport::Required,
            ),
            ask_tool,
        )
        .tool(
            ToolSpec::new(
                "mrtr",
                "One input_required round, then a result.",
                no_args(),
                TaskSupport::Forbidden,
            ),
            mrtr_tool,
        )
        .build()
}

async fn probe_tool(_call: ToolCall) -> ToolOutcome {
    ToolOutcome::task(|ctx| async move {
        let mut leaves = Vec::new();
        for _ in 0..2 {
            leaves.push(ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
                ctx.checkpoint().await?;
                Ok(text_result("leaf"))
            })?);
        }
        let mut done = 0;
        for leaf in leaves {
            if leaf.await.status() == TaskStatus::Completed {
                done += 1;
            }
        }
        Ok(text_result(format!("probe ok: {done}")))
    })
}

fn confirmation() -> JsonObject {
    elicitation("Go on?", json!({"ok": {"type": "boolean"}}), &["ok"])
}

async fn ask_tool(_call: ToolCall) -> ToolOutcome {
    ToolOutcome::task(|ctx| async move {
        let ask = confirmation();
        let answer = ctx.request_input("confirm", ask.clone()).await?;
        ctx.checkpoint().await?;
        Ok(match ElicitAnswer::parse("confirm", &answer, &ask)? {
            ElicitAnswer::Accepted(_) => text_result("confirmed"),
            _ => error_result("not confirmed"),
        })
    })
}

async fn mrtr_tool(call: ToolCall) -> ToolOutcome {
    let ask = confirmation();
    match call.elicited("confirm", &ask) {
        Err(e) => ToolOutcome::Error(e),
        Ok(ElicitAnswer::Missing) => {
            ToolOutcome::input_required([("confirm", ask)], Some(json!({"round": 1})))
        }
        Ok(ElicitAnswer::Accepted(_)) => ToolOutcome::Complete(text_result("confirmed")),
        Ok(ElicitAnswer::Refused(action)) => ToolOutcome::Complete(error_result(action)),
    }
}

/// Runs one input: the requests, then the probe and the store check.
pub fn server_entry(data: &[u8]) {
    let steps = parse_steps(data);
    super::paused_runtime().block_on(async move {
        let server = server();
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let router = crate::server::http::router(server.clone(), shutdown);
        let mut seen = Seen::default();
        for step in &steps {
            if let Step::Sleep(ms) = step {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                continue;
            }
            // Parts the http crate refuses (a CONNECT to a path) never reach a server.
            let Some((req, sent)) = build(step, &seen) else {
                continue;
            };
            let resp = router
                .clone()
                .oneshot(req)
                .await
                .expect("the router is infallible");
            check_answer(resp, &sent, &mut seen).await;
        }
        probe(&router, &seen).await;
        check_store(server.runtime());
    });
}

async fn check_answer(resp: Response<Body>, sent: &Sent, seen: &mut Seen) {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if content_type.starts_with("text/event-stream") {
        assert_eq!(status, 200, "a stream is a 200 answer");
        return check_stream(resp.into_body(), sent, seen).await;
    }
    let body = axum::body::to_bytes(resp.into_body(), 16 << 20)
        .await
        .expect("an answer body is read whole");
    if body.is_empty() {
        let accepted = matches!(
            sent.message,
            Some(JsonRpcMessage::Notification(_) | JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_))
        );
        assert!(
            (status == 202 && accepted && sent.post_mcp) || (status == 404 && !sent.post_mcp),
            "an answer without a body: HTTP {status} (post_mcp {}, request {:?})",
            sent.post_mcp,
            sent.message
        );
        return;
    }
    assert!(
        content_type.starts_with("application/json"),
        "a body answer is JSON, not {content_type:?}"
    );
    let answer = match JsonRpcMessage::parse(&body) {
        Ok(m) => m,
        Err(e) => panic!(
            "the answer is not JSON-RPC ({e}): {}",
            String::from_utf8_lossy(&body)
        ),
    };
    check_message(&answer, status, sent, seen, &body);
}

fn check_message(answer: &JsonRpcMessage, status: u16, sent: &Sent, seen: &mut Seen, raw: &[u8]) {
    let text = || String::from_utf8_lossy(raw).into_owned();
    let asked = match &sent.message {
        Some(JsonRpcMessage::Request(r)) => Some(r),
        _ => None,
    };
    match answer {
        JsonRpcMessage::Response(r) => {
            assert_eq!(status, 200, "a result is a 200 answer: {}", text());
            let req = asked.unwrap_or_else(|| panic!("a result answers a request: {}", text()));
            assert_eq!(r.id, req.id, "a result echoes the request id: {}", text());
            let result = Value::Object(r.result.as_map().clone());
            check_result(&req.method, req.params.as_ref(), &result, &text());
            seen.learn(&result);
        }
        JsonRpcMessage::Error(e) => {
            assert!(
                KNOWN_CODES.contains(&e.error.code),
                "unknown error code {}: {}",
                e.error.code.0,
                text()
            );
            assert!(!e.error.message.is_empty(), "an error says what is wrong");
            assert!(
                matches!(status, 200 | 400 | 404) || HTTP_LAYER.contains(&status),
                "an error with HTTP {status}: {}",
                text()
            );
            if let Some(req) = asked
                && !HTTP_LAYER.contains(&status)
                && sent.post_mcp
            {
                assert_eq!(
                    e.id.as_ref(),
                    Some(&req.id),
                    "an error echoes the request id: {}",
                    text()
                );
            }
            if sent.message.is_none() && sent.post_mcp && !HTTP_LAYER.contains(&status) {
                assert_eq!(status, 400, "a body that is not JSON-RPC is a 400: {}", text());
            }
        }
        JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => {
            panic!("the server answered with a request or notification: {}", text())
        }
    }
}

/// The method of the request `sent` carried, if it was a request.
fn asked_method(sent: &Sent) -> Option<&str> {
    match &sent.message {
        Some(JsonRpcMessage::Request(r)) => Some(r.method.as_str()),
        _ => None,
    }
}

/// Whether the request went down the 2026-07-28 path (its `_meta` names the version).
fn is_modern(params: Option<&JsonObject>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str)
        == Some(PROTOCOL_VERSION)
}

fn parses<T: serde::de::DeserializeOwned>(what: &str, v: &Value, text: &str) -> T {
    match serde_json::from_value(v.clone()) {
        Ok(t) => t,
        Err(e) => panic!("the {what} answer does not parse as its model type ({e}): {text}"),
    }
}

fn check_result(method: &str, params: Option<&JsonObject>, result: &Value, text: &str) {
    if !is_modern(params) {
        return;
    }
    let asked_task = params
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<TaskId>().ok());
    match method {
        "tools/call" | "prompts/get" => match result.get("resultType").and_then(Value::as_str) {
            Some("task") => {
                let _: CreateTaskResult = parses(method, result, text);
            }
            Some("input_required") => {
                let _: InputRequiredResult = parses(method, result, text);
            }
            Some("complete") | None => {
                let key = if method == "tools/call" {
                    "content"
                } else {
                    "messages"
                };
                assert!(
                    result.get(key).is_some_and(Value::is_array),
                    "a complete {method} result has `{key}`: {text}"
                );
            }
            Some(other) => panic!("{method} answered with resultType {other:?}: {text}"),
        },
        "tasks/get" | "tasks/pause" | "tasks/resume" => {
            let r: GetTaskResult = parses(method, result, text);
            if let Some(id) = asked_task {
                assert_eq!(
                    r.task.task().task_id,
                    id,
                    "{method} answers about the asked task: {text}"
                );
            }
        }
        "tasks/update" | "tasks/cancel" | "tasks/steer" => {
            let _: AckResult = parses(method, result, text);
        }
        "server/discover" => {
            let d: DiscoverResult = parses(method, result, text);
            assert!(d.supported_versions.iter().any(|v| v == PROTOCOL_VERSION));
        }
        "tools/list" => assert!(result.get("tools").is_some_and(Value::is_array), "{text}"),
        _ => {}
    }
}

/// Reads an SSE answer: JSON-RPC messages, notifications first, the
/// response last and then the end.
async fn check_stream(body: Body, sent: &Sent, seen: &mut Seen) {
    let mut chunks = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut events = 0;
    let deadline = tokio::time::Instant::now() + STREAM_WINDOW;
    let mut answered = false;
    loop {
        let next = tokio::time::timeout_at(deadline, chunks.next()).await;
        let chunk = match next {
            Err(_) => break,
            Ok(None) => {
                assert!(buf.is_empty(), "a stream ends between events");
                break;
            }
            Ok(Some(chunk)) => chunk.expect("a stream chunk"),
        };
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = buf.drain(..end + 2).collect();
            let event = String::from_utf8(event).expect("SSE is UTF-8");
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .collect();
            if data.is_empty() {
                assert!(
                    event
                        .lines()
                        .all(|l| l.is_empty() || l.starts_with(':') || l.starts_with("event:")),
                    "an SSE event without data is a comment: {event:?}"
                );
                continue;
            }
            assert!(!answered, "nothing follows the response on a stream: {event:?}");
            let data = data.join("\n");
            let msg = JsonRpcMessage::parse(data.as_bytes())
                .unwrap_or_else(|e| panic!("an SSE event is not JSON-RPC ({e}): {data}"));
            match &msg {
                JsonRpcMessage::Notification(n) => {
                    let params = Value::Object(n.params.clone().unwrap_or_default().as_map().clone());
                    if n.method == crate::model::NOTIFICATIONS_TASKS {
                        let p: TaskStatusNotificationParams = parses(&n.method, &params, &data);
                        let _: &DetailedTask = &p.task;
                    }
                    seen.learn(&params);
                }
                // The 2025-11-25 `tasks/result` stream carries the task's
                // input requests to the client, ids naming task and key.
                JsonRpcMessage::Request(r) if asked_method(sent) == Some("tasks/result") => {
                    assert!(
                        matches!(
                            r.method.as_str(),
                            "elicitation/create" | "sampling/createMessage" | "roots/list"
                        ),
                        "a tasks/result stream asks for input only: {data}"
                    );
                    assert!(
                        r.id.to_string().contains("subtask-input:"),
                        "an input request's id names its task and key: {data}"
                    );
                }
                _ => {
                    check_message(&msg, 200, sent, seen, data.as_bytes());
                    answered = true;
                }
            }
            events += 1;
            if events >= MAX_EVENTS {
                return;
            }
        }
    }
}

/// A well-behaved client of another principal after the fuzzed requests.
async fn probe(router: &axum::Router, seen: &Seen) {
    let call = |method: &str, name: Option<&str>, params: Value| {
        let mut params = params;
        let meta: Value =
            serde_json::from_str(&format!("{{{}}}", meta_member())).expect("the meta member is JSON");
        params["_meta"] = meta["_meta"].clone();
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
        let mut req = Request::builder()
            .method(Method::POST)
            .uri("/mcp")
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {PROBE_TOKEN}"))
            .header("mcp-protocol-version", PROTOCOL_VERSION)
            .header("mcp-method", method);
        if let Some(name) = name {
            req = req.header("mcp-name", name);
        }
        let req = req.body(Body::from(body)).expect("a valid request");
        let router = router.clone();
        async move {
            let resp = router.oneshot(req).await.expect("the router is infallible");
            let status = resp.status().as_u16();
            let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .expect("a body");
            let v: Value = serde_json::from_slice(&body).expect("the probe's answer is JSON");
            (status, v)
        }
    };
    let (status, v) = call("server/discover", None, json!({})).await;
    assert_eq!(status, 200, "the probe's discover: {v}");
    let _: DiscoverResult = parses("server/discover", &v["result"], &v.to_string());

    let (status, v) = call(
        "tools/call",
        Some("probe"),
        json!({"name": "probe", "arguments": {}}),
    )
    .await;
    assert_eq!(status, 200, "the probe's call: {v}");
    let created: CreateTaskResult = parses("tools/call", &v["result"], &v.to_string());
    let root = created.task.task().task_id;
    let root_s = root.to_string();
    let mut last = None;
    for _ in 0..200 {
        let (status, v) = call("tasks/get", Some(&root_s), json!({"taskId": root_s})).await;
        assert_eq!(status, 200, "the probe's tasks/get: {v}");
        let got: GetTaskResult = parses("tasks/get", &v["result"], &v.to_string());
        if got.task.status().is_terminal() {
            last = Some(got.task);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = last.expect("the probe's task ends within 20 s of virtual time");
    assert_eq!(
        done.status(),
        TaskStatus::Completed,
        "the probe's task completes: {done:?}"
    );
    let shown = serde_json::to_string(&done).expect("a task serializes");
    assert!(shown.contains("probe ok: 2"), "both subtasks completed: {shown}");
    for child in &done.task().child_task_ids {
        let c = child.to_string();
        let (_, v) = call("tasks/get", Some(&c), json!({"taskId": c})).await;
        let got: GetTaskResult = parses("tasks/get", &v["result"], &v.to_string());
        assert_eq!(got.task.status(), TaskStatus::Completed);
    }
    // The fuzz principal's tasks are not the probe's.
    for id in seen.tasks.iter().take(3) {
        let s = id.to_string();
        let (_, v) = call("tasks/get", Some(&s), json!({"taskId": s})).await;
        assert!(
            v.get("error").is_some(),
            "another principal's task {id} is not visible: {v}"
        );
    }
}

/// The store holds exactly the live trees, and every one restores to what
/// the runtime serves.
fn check_store(runtime: &Runtime) {
    let store = runtime.store().expect("the harness runs with a store");
    let trees = store.load().expect("the memory store loads");
    let config = Arc::new(forest_config());
    let mut stored = 0;
    let mut ids = HashSet::new();
    for tree in trees {
        let root = tree.meta.root;
        let mut records: Vec<TaskRecord> = Vec::new();
        for t in &tree.tasks {
            let rec = decode_state(t.id, t.root, t.parent, t.position, &t.state)
                .unwrap_or_else(|e| panic!("stored task {} does not decode: {e}", t.id));
            records.push(rec);
            assert!(ids.insert(t.id), "task {} is stored twice", t.id);
        }
        stored += records.len();
        let forest = Forest::restore(config.clone(), root, records, crate::model::Timestamp::EPOCH)
            .unwrap_or_else(|e| panic!("a stored tree does not restore: {e}"));
        for id in forest.ids() {
            let view = ClientView::PAUSE_AWARE;
            let live = runtime.get(id, view);
            assert_eq!(
                forest.snapshot(id, view),
                live,
                "the stored task {id} is what the runtime serves"
            );
        }
    }
    assert_eq!(
        stored,
        runtime.task_count(),
        "every live task is stored, and only those"
    );
}
