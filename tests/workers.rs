//! The worker protocol (`docs/workers.md`) against a real server on a real
//! socket: a worker written here with tokio-tungstenite registers tools,
//! runs a tree of worker subtasks (and a subtask of the server's own
//! tool), is refused with bad credentials or a taken name, loses a task to
//! another worker when it disconnects or goes silent past its lease (and
//! the other worker's replay redoes nothing that had finished), cannot
//! report for an attempt it lost, and hears of a cancel; and a worker tree
//! on a SQLite database resumes after the `subtask serve` process is
//! killed (SIGKILL) and started again, with nothing finished redone.

mod support;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::server::{
    ServerConfig, TaskSupport, TokenTable, ToolOutcome, ToolSpec, WorkerConfig, text_result,
};
use support::http::{Client, child_ids, full_caps, serve};
use support::process::{ServerProcess, private_binary};
use support::tempdir::TempDir;
use tokio_tungstenite::tungstenite::Message;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

#[path = "support/span_fields.rs"]
mod span_fields;

const TOKEN: &str = "worker-secret";

/// A server taking workers (lease `lease_ms`), with one tool of its own,
/// `double`.
async fn server(lease_ms: u64) -> SocketAddr {
    let mut workers = WorkerConfig::new(TokenTable::parse(&format!("{TOKEN} tests")).unwrap());
    workers.lease = Duration::from_millis(lease_ms);
    let config = ServerConfig {
        workers: Some(workers),
        ..ServerConfig::default()
    };
    let server = subtask::server::Server::builder(Runtime::new(RuntimeConfig::default()), config)
        .tool(
            ToolSpec::new(
                "double",
                "Doubles n",
                json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
                TaskSupport::Optional,
            ),
            |call: subtask::server::ToolCall| async move {
                let n = call.i64_arg("n").unwrap_or(0);
                ToolOutcome::task(move |_ctx| async move { Ok(text_result((2 * n).to_string())) })
            },
        )
        .build();
    serve(server).await
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A worker: the socket and the frames read but not yet taken.
struct Worker {
    ws: Socket,
    unread: VecDeque<Value>,
    next_ref: u64,
    /// Sends heartbeats while it waits for a frame.
    beats: bool,
}

fn tool(name: &str, schema: Value) -> Value {
    json!({"name": name, "description": format!("{name} (a worker tool)"), "inputSchema": schema})
}

fn any_object() -> Value {
    json!({"type": "object"})
}

/// The tools `parent` and `leaf`, taking any object.
fn parent_and_leaf() -> Value {
    json!([tool("parent", any_object()), tool("leaf", any_object())])
}

/// A worker of `capacity` serving [`parent_and_leaf`], a client, and a
/// `parent` task called by the client and assigned to the worker: the
/// worker, the client, the task and its attempt.
async fn parent_task(addr: SocketAddr, capacity: u32) -> (Worker, Client, String, u64) {
    let mut w = Worker::connect(addr, capacity, parent_and_leaf()).await;
    let client = Client::new(addr, full_caps());
    let root = client.start_task("parent", json!({})).await;
    let (task, attempt, _) = w.assignment("parent").await;
    assert_eq!(task, root);
    (w, client, task, attempt)
}

impl Worker {
    /// Connects and says `hello`; returns the worker and the server's first
    /// frame (`welcome` or `error`).
    async fn hello(addr: SocketAddr, token: &str, capacity: u32, tools: Value) -> (Worker, Value) {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/workers"))
            .await
            .expect("the WebSocket upgrade");
        let mut w = Worker {
            ws,
            unread: VecDeque::new(),
            next_ref: 1,
            beats: false,
        };
        w.send(
            json!({"type": "hello", "protocol": 1, "token": token, "name": "rust-test",
                      "capacity": capacity, "tools": tools}),
        )
        .await;
        let first = w.read().await.expect("an answer to hello");
        (w, first)
    }

    async fn connect(addr: SocketAddr, capacity: u32, tools: Value) -> Worker {
        let (w, first) = Worker::hello(addr, TOKEN, capacity, tools).await;
        assert_eq!(first["type"], "welcome", "{first}");
        w
    }

    async fn send(&mut self, frame: Value) {
        self.ws
            .send(Message::text(frame.to_string()))
            .await
            .expect("a frame sent");
    }

    /// The next frame from the socket (`None` once closed), 10 s at most;
    /// a worker that `beats` sends a heartbeat every 100 ms meanwhile.
    async fn read(&mut self) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let next = match tokio::time::timeout(Duration::from_millis(100), self.ws.next()).await {
                Ok(next) => next,
                Err(_) => {
                    assert!(tokio::time::Instant::now() < deadline, "a frame within 10 s");
                    if self.beats {
                        self.send(json!({"type": "heartbeat"})).await;
                    }
                    continue;
                }
            };
            match next? {
                Ok(Message::Text(t)) => return Some(serde_json::from_str(t.as_str()).expect("JSON frames")),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// The first frame (read before or now) that `pred` accepts.
    async fn take(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.unread.iter().position(&pred) {
            return self.unread.remove(i).unwrap();
        }
        loop {
            let f = self.read().await.expect("the connection stays open");
            if pred(&f) {
                return f;
            }
            self.unread.push_back(f);
        }
    }

    async fn assignment(&mut self, tool: &str) -> (String, u64, Value) {
        let a = self.take(|f| f["type"] == "assign" && f["tool"] == tool).await;
        (
            a["task"].as_str().unwrap().to_owned(),
            a["attempt"].as_u64().unwrap(),
            a,
        )
    }

    /// Sends an act of `task`'s `attempt` and returns its reply.
    async fn request(&mut self, task: &str, attempt: u64, mut frame: Value) -> Value {
        let r = self.next_ref;
        self.next_ref += 1;
        frame["task"] = json!(task);
        frame["attempt"] = json!(attempt);
        frame["ref"] = json!(r);
        self.send(frame).await;
        self.take(|f| f["type"] == "reply" && f["ref"] == r).await
    }

    async fn result(&mut self, task: &str, attempt: u64, text: &str) {
        self.send(json!({"type": "result", "task": task, "attempt": attempt,
                         "result": {"content": [{"type": "text", "text": text}]}}))
            .await;
    }
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_of_worker_subtasks_completes_in_order_with_a_server_tool_among_them() {
    let addr = server(10_000).await;
    let leaf_schema =
        json!({"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]});
    let mut w = Worker::connect(
        addr,
        8,
        json!([tool("parent", any_object()), tool("leaf", leaf_schema)]),
    )
    .await;
    let client = Client::new(addr, full_caps());

    // Worker tools are listed after the server's own.
    let list = client.call("tools/list", json!({})).await;
    let names: Vec<&str> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["double", "parent", "leaf"], "{list}");
    // Bad arguments never reach a worker: an isError result.
    let bad = client
        .call("tools/call", json!({"name": "leaf", "arguments": {"word": 3}}))
        .await;
    assert_eq!(bad["isError"], true, "{bad}");

    let root = client.start_task("parent", json!({})).await;
    let (task, attempt, assign) = w.assignment("parent").await;
    assert_eq!(task, root);
    assert_eq!(assign["replay"], false);
    let mut kids = Vec::new();
    for word in ["alpha", "beta"] {
        let r = w
            .request(
                &task,
                attempt,
                json!({"type": "spawn", "tool": "leaf", "arguments": {"word": word}}),
            )
            .await;
        kids.push(r["ok"]["taskId"].as_str().expect("a subtask id").to_owned());
    }
    let r = w
        .request(
            &task,
            attempt,
            json!({"type": "spawn", "tool": "double", "arguments": {"n": 21}}),
        )
        .await;
    kids.push(r["ok"]["taskId"].as_str().unwrap().to_owned());
    // A spawn with bad arguments is refused, and spawns nothing.
    let r = w
        .request(
            &task,
            attempt,
            json!({"type": "spawn", "tool": "leaf", "arguments": {}}),
        )
        .await;
    assert_eq!(r["error"]["code"], "bad_arguments", "{r}");
    let r = w
        .request(
            &task,
            attempt,
            json!({"type": "spawn", "tool": "nope", "arguments": {}}),
        )
        .await;
    assert_eq!(r["error"]["code"], "unknown_tool", "{r}");
    for _ in 0..2 {
        let (leaf, a, assign) = w.assignment("leaf").await;
        assert_eq!(assign["parent"], json!(root));
        let word = assign["arguments"]["word"].as_str().unwrap().to_uppercase();
        w.result(&leaf, a, &word).await;
    }
    let mut texts = Vec::new();
    for kid in &kids {
        let o = w
            .request(&task, attempt, json!({"type": "outcome", "child": kid}))
            .await;
        assert_eq!(o["ok"]["status"], "completed", "{o}");
        texts.push(text_of(&o["ok"]["result"]));
    }
    assert_eq!(texts, ["ALPHA", "BETA", "42"]);
    w.result(&task, attempt, &texts.join(" ")).await;
    let done = client.until_status(&root, "completed").await;
    assert_eq!(child_ids(&done), kids, "childTaskIds in spawn order");
    assert_eq!(text_of(&done["result"]), "ALPHA BETA 42");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_and_taken_names_are_refused() {
    let addr = server(10_000).await;
    let (mut w, first) = Worker::hello(addr, "not-a-worker-token", 1, json!([tool("t", any_object())])).await;
    assert_eq!(first["type"], "error");
    assert_eq!(first["code"], "unauthorized", "{first}");
    assert!(
        w.read().await.is_none(),
        "the connection closes after a refused hello"
    );

    let (_, first) = Worker::hello(addr, TOKEN, 1, json!([tool("double", any_object())])).await;
    assert_eq!(first["code"], "bad_hello", "the server's own tool name: {first}");

    let (_, first) = Worker::hello(addr, TOKEN, 1, json!([tool("bad name", any_object())])).await;
    assert_eq!(first["code"], "bad_hello", "{first}");

    let _held = Worker::connect(addr, 1, json!([tool("shared", any_object())])).await;
    let other = json!([tool(
        "shared",
        json!({"type": "object", "properties": {"x": {"type": "string"}}})
    )]);
    let (_, first) = Worker::hello(addr, TOKEN, 1, other).await;
    assert_eq!(
        first["code"], "bad_hello",
        "a served name with another schema: {first}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_working_until_a_worker_serving_the_tool_connects() {
    let addr = server(10_000).await;
    let client = Client::new(addr, full_caps());
    // Unknown until a worker registers it.
    let (_, e) = client
        .error("tools/call", json!({"name": "later", "arguments": {}}))
        .await;
    assert!(e["message"].as_str().unwrap().contains("unknown tool"), "{e}");
    let w = Worker::connect(addr, 1, json!([tool("later", any_object())])).await;
    drop(w);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let task = client.start_task("later", json!({})).await;
    let t = client
        .until(&task, |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.contains("none connected"))
        })
        .await;
    assert_eq!(t["status"], "working", "{t}");
    let mut w = Worker::connect(addr, 1, json!([tool("later", any_object())])).await;
    let (id, attempt, _) = w.assignment("later").await;
    assert_eq!(id, task);
    w.result(&id, attempt, "finally").await;
    let done = client.until_status(&task, "completed").await;
    assert_eq!(text_of(&done["result"]), "finally");
    assert!(
        done.get("statusMessage").is_none_or(Value::is_null),
        "the waiting message is gone: {done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_workers_task_resumes_on_another_and_redoes_nothing_finished() {
    let addr = server(10_000).await;
    let (mut first, client, task, a1) = parent_task(addr, 4).await;
    let root = task.clone();
    let spawned = first
        .request(
            &task,
            a1,
            json!({"type": "spawn", "tool": "leaf", "arguments": {"i": 1}}),
        )
        .await;
    let child = spawned["ok"]["taskId"].as_str().unwrap().to_owned();
    let (leaf, la, _) = first.assignment("leaf").await;
    first.result(&leaf, la, "leaf done").await;
    let step = first
        .request(&task, a1, json!({"type": "step", "name": "search"}))
        .await;
    assert_eq!(step["ok"]["run"], true, "{step}");
    let recorded = first
        .request(
            &task,
            a1,
            json!({"type": "stepped", "act": step["ok"]["act"], "output": {"hits": 3}}),
        )
        .await;
    assert_eq!(recorded["ok"], json!({}), "{recorded}");
    // A second step begins and the worker dies while it runs.
    let running = first
        .request(&task, a1, json!({"type": "step", "name": "summarize"}))
        .await;
    assert_eq!(running["ok"]["run"], true);
    client.until(&child, |t| t["status"] == "completed").await;

    let mut second = Worker::connect(addr, 4, parent_and_leaf()).await;
    drop(first);
    let (again, a2, assign) = second.assignment("parent").await;
    assert_eq!(again, task);
    assert_eq!(a2, a1 + 1, "{assign}");
    assert_eq!(assign["replay"], true);
    let t = client.get(&root).await;
    assert_eq!(t["status"], "working");
    // The replay: the same subtask, the finished step's output, the step
    // that was running runs again.
    let r = second
        .request(
            &task,
            a2,
            json!({"type": "spawn", "tool": "leaf", "arguments": {"i": 1}}),
        )
        .await;
    assert_eq!(
        r["ok"]["taskId"],
        json!(child),
        "the same subtask, not a new one: {r}"
    );
    let r = second
        .request(&task, a2, json!({"type": "step", "name": "search"}))
        .await;
    assert_eq!(r["ok"], json!({"done": true, "output": {"hits": 3}}));
    let r = second
        .request(&task, a2, json!({"type": "step", "name": "summarize"}))
        .await;
    assert_eq!(r["ok"]["run"], true, "{r}");
    let r = second
        .request(
            &task,
            a2,
            json!({"type": "stepped", "act": r["ok"]["act"], "output": "short"}),
        )
        .await;
    assert_eq!(r["ok"], json!({}));
    let o = second
        .request(&task, a2, json!({"type": "outcome", "child": child}))
        .await;
    assert_eq!(text_of(&o["ok"]["result"]), "leaf done");
    second.result(&task, a2, "resumed").await;
    let done = client.until_status(&root, "completed").await;
    assert_eq!(
        child_ids(&done),
        std::slice::from_ref(&child),
        "nothing appended twice"
    );
    assert_eq!(text_of(&done["result"]), "resumed");
    // The leaf ran once: the second worker was never assigned it.
    assert!(
        !second
            .unread
            .iter()
            .any(|f| f["type"] == "assign" && f["tool"] == "leaf"),
        "{:?}",
        second.unread
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_silent_past_its_lease_loses_its_task_and_its_reports_are_refused() {
    let addr = server(600).await;
    let tools = json!([tool("slow", any_object())]);
    let mut stalled = Worker::connect(addr, 1, tools.clone()).await;
    let client = Client::new(addr, full_caps());
    let task = client.start_task("slow", json!({})).await;
    let (_, a1, _) = stalled.assignment("slow").await;
    // Its last frame: the lease runs from here.
    stalled.send(json!({"type": "heartbeat"})).await;
    let silent_since = std::time::Instant::now();
    let mut other = Worker::connect(addr, 1, tools).await;
    other.beats = true;
    // `stalled` sends nothing for longer than its lease.
    let (again, a2, assign) = other.assignment("slow").await;
    let took = silent_since.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(600 + 1000),
        "reassigned {took:?} after the last frame, with a lease of 600 ms"
    );
    assert_eq!(again, task);
    assert!(a2 > a1 && assign["replay"] == true, "{assign}");
    // It wakes up: the server had revoked its attempt, and refuses it.
    let revoke = stalled.take(|f| f["type"] == "revoke").await;
    assert_eq!(revoke["attempt"], a1);
    let r = stalled
        .request(&task, a1, json!({"type": "status", "message": "still here"}))
        .await;
    assert_eq!(r["error"]["code"], "stale_attempt", "{r}");
    stalled.result(&task, a1, "stale").await;
    let refused = stalled.take(|f| f["type"] == "error").await;
    assert_eq!(refused["code"], "stale_attempt", "{refused}");
    assert_eq!(
        (&refused["task"], &refused["attempt"]),
        (&json!(task), &json!(a1)),
        "{refused}"
    );
    other.result(&task, a2, "current").await;
    let done = client.until_status(&task, "completed").await;
    assert_eq!(text_of(&done["result"]), "current");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_worker_and_steers_and_pause_reach_its_checkpoints() {
    let addr = server(10_000).await;
    let mut w = Worker::connect(addr, 2, json!([tool("long", any_object())])).await;
    let client = Client::new(addr, full_caps());
    let task = client.start_task("long", json!({})).await;
    let (id, a, _) = w.assignment("long").await;
    client
        .call("tasks/steer", json!({"taskId": task, "message": "focus on X"}))
        .await;
    let r = w.request(&id, a, json!({"type": "checkpoint"})).await;
    assert_eq!(r["ok"]["steers"], json!(["focus on X"]));
    let paused = client.call("tasks/pause", json!({"taskId": task})).await;
    assert!(
        paused["status"] == "paused" || paused["status"] == "working",
        "{paused}"
    );
    // The checkpoint parks while paused, and returns at the resume.
    w.send(json!({"type": "checkpoint", "task": id, "attempt": a, "ref": 900}))
        .await;
    client.until_status(&task, "paused").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!w.unread.iter().any(|f| f["ref"] == 900));
    client.call("tasks/resume", json!({"taskId": task})).await;
    let r = w.take(|f| f["type"] == "reply" && f["ref"] == 900).await;
    assert_eq!(r["ok"]["steers"], json!([]), "{r}");
    // Input: the task asks, a client answers, the handler gets it.
    w.send(
        json!({"type": "input", "task": id, "attempt": a, "ref": 901, "key": "ok",
                  "request": {"method": "elicitation/create", "params": {"message": "go on?",
                   "requestedSchema": {"type": "object", "properties": {"go": {"type": "boolean"}}}}}}),
    )
    .await;
    let t = client.until_status(&task, "input_required").await;
    assert!(t["inputRequests"]["ok"].is_object(), "{t}");
    client
        .call(
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"ok": {"action": "accept", "content": {"go": true}}}}),
        )
        .await;
    let r = w.take(|f| f["type"] == "reply" && f["ref"] == 901).await;
    assert_eq!(r["ok"]["response"]["content"]["go"], true, "{r}");
    client.call("tasks/cancel", json!({"taskId": task})).await;
    let c = w.take(|f| f["type"] == "cancel").await;
    assert_eq!(c["task"], json!(task));
    assert_eq!(c["attempt"], a);
    client.until_status(&task, "cancelled").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_server_kill_a_worker_tree_resumes_from_its_journal_and_redoes_nothing_finished() {
    let dir = TempDir::new("workers-restart");
    let bin = private_binary(&dir.0);
    let args: Vec<String> = vec![
        "--db".into(),
        dir.db().display().to_string(),
        "--worker-token".into(),
        TOKEN.into(),
    ];
    let log = dir.0.join("server.log");
    let first = ServerProcess::start(&bin, &args, &log, Duration::from_secs(60))
        .await
        .expect("the server starts");
    let tools = json!([tool("parent", any_object()), tool("leaf", any_object())]);
    let mut w = Worker::connect(first.addr(), 4, tools.clone()).await;
    let client = Client::new(first.addr(), full_caps());
    let root = client.start_task("parent", json!({"topic": "rust"})).await;
    let (task, a, _) = w.assignment("parent").await;
    let r = w
        .request(
            &task,
            a,
            json!({"type": "spawn", "tool": "leaf", "arguments": {"i": 1}}),
        )
        .await;
    let child = r["ok"]["taskId"].as_str().unwrap().to_owned();
    let (leaf, la, _) = w.assignment("leaf").await;
    w.result(&leaf, la, "leaf done").await;
    client.until_status(&child, "completed").await;
    let step = w
        .request(&task, a, json!({"type": "step", "name": "search"}))
        .await;
    w.request(
        &task,
        a,
        json!({"type": "stepped", "act": step["ok"]["act"], "output": {"hits": 3}}),
    )
    .await;
    client
        .call(
            "tasks/steer",
            json!({"taskId": root, "message": "before the crash"}),
        )
        .await;
    let r = w.request(&task, a, json!({"type": "checkpoint"})).await;
    assert_eq!(r["ok"]["steers"], json!(["before the crash"]));
    assert!(first.kill(), "SIGKILL the server");
    first.wait();
    drop(w);

    let second = ServerProcess::start(&bin, &args, &log, Duration::from_secs(60))
        .await
        .expect("the server starts again");
    let client = Client::new(second.addr(), full_caps());
    let t = client.get(&root).await;
    assert_eq!(t["status"], "working", "{t}");
    let mut w = Worker::connect(second.addr(), 4, tools).await;
    let (again, a, assign) = w.assignment("parent").await;
    assert_eq!(again, root);
    assert_eq!(assign["replay"], true, "{assign}");
    assert_eq!(assign["arguments"], json!({"topic": "rust"}));
    let r = w
        .request(
            &task,
            a,
            json!({"type": "spawn", "tool": "leaf", "arguments": {"i": 1}}),
        )
        .await;
    assert_eq!(
        r["ok"]["taskId"],
        json!(child),
        "the finished subtask, not a new one: {r}"
    );
    let r = w
        .request(&task, a, json!({"type": "step", "name": "search"}))
        .await;
    assert_eq!(
        r["ok"],
        json!({"done": true, "output": {"hits": 3}}),
        "the step is not run again"
    );
    let r = w.request(&task, a, json!({"type": "checkpoint"})).await;
    assert_eq!(
        r["ok"]["steers"],
        json!(["before the crash"]),
        "the same steer at the same place"
    );
    let o = w
        .request(&task, a, json!({"type": "outcome", "child": child}))
        .await;
    assert_eq!(text_of(&o["ok"]["result"]), "leaf done");
    w.result(&task, a, "resumed").await;
    let done = client.until_status(&root, "completed").await;
    assert_eq!(child_ids(&done), [child], "nothing appended twice");
    assert_eq!(text_of(&done["result"]), "resumed");
    assert!(
        !w.unread
            .iter()
            .any(|f| f["type"] == "assign" && f["tool"] == "leaf"),
        "{:?}",
        w.unread
    );
    second.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_tool_on_the_2025_11_25_tasks_wire() {
    let addr = server(10_000).await;
    let mut w = Worker::connect(
        addr,
        1,
        json!([{"name": "legacy_w", "description": "d", "inputSchema": any_object(), "taskSupport": "required"}]),
    )
    .await;
    let headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("Accept", "application/json, text/event-stream".to_owned()),
        ("MCP-Protocol-Version", "2025-11-25".to_owned()),
    ];
    let send = |method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let headers = headers.clone();
        async move {
            let r = support::http::raw(addr, "POST", &headers, body.as_bytes()).await;
            assert_eq!(r.status, 200, "{}", r.body);
            r.json()
        }
    };
    let list = send("tools/list", json!({})).await;
    let listed = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "legacy_w")
        .cloned();
    assert_eq!(
        listed.expect("listed")["execution"]["taskSupport"],
        "required",
        "{list}"
    );
    // Required: a call without `params.task` is refused as for any tool.
    let refused = send("tools/call", json!({"name": "legacy_w", "arguments": {}})).await;
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
    let created = send(
        "tools/call",
        json!({"name": "legacy_w", "arguments": {}, "task": {"ttl": 60000}}),
    )
    .await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .expect("a CreateTaskResult")
        .to_owned();
    let (task, a, _) = w.assignment("legacy_w").await;
    assert_eq!(task, id);
    w.result(&task, a, "legacy ok").await;
    let result = send("tasks/result", json!({"taskId": id})).await;
    assert_eq!(text_of(&result["result"]), "legacy ok", "{result}");
}

/// `task` and `worker attempt` spans: (id, parent id, name, fields), and
/// the ids of the spans closed.
/// A span made: its id, its parent's, its name and fields.
type Made = (
    u64,
    Option<u64>,
    String,
    std::collections::HashMap<String, String>,
);

#[derive(Clone, Default)]
struct SpanLog {
    made: std::sync::Arc<std::sync::Mutex<Vec<Made>>>,
    closed: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S> for SpanLog {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let name = attrs.metadata().name();
        if name == "task" || name == "worker attempt" {
            let mut fields = std::collections::HashMap::new();
            attrs.record(&mut span_fields::Fields(&mut fields));
            let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
            self.made
                .lock()
                .unwrap()
                .push((id.into_u64(), parent, name.to_owned(), fields));
        }
    }

    fn on_close(&self, id: tracing::span::Id, _: Context<'_, S>) {
        self.closed.lock().unwrap().push(id.into_u64());
    }
}

// Current-thread runtime: the server's handlers run on this thread, under
// the subscriber set here.
#[tokio::test]
async fn each_worker_attempt_is_a_span_inside_its_tasks_span() {
    let log = SpanLog::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(log.clone()));
    let addr = server(10_000).await;
    let mut first = Worker::connect(addr, 1, json!([tool("traced", any_object())])).await;
    let client = Client::new(addr, full_caps());
    let task = client.start_task("traced", json!({})).await;
    let (_, a1, _) = first.assignment("traced").await;
    let mut second = Worker::connect(addr, 1, json!([tool("traced", any_object())])).await;
    drop(first);
    let (_, a2, _) = second.assignment("traced").await;
    second.result(&task, a2, "traced").await;
    client.until_status(&task, "completed").await;
    let made = log.made.lock().unwrap().clone();
    let task_span = made
        .iter()
        .find(|(_, _, name, f)| name == "task" && f.get("subtask.task_id") == Some(&task))
        .expect("the task's span");
    let attempts: Vec<_> = made
        .iter()
        .filter(|(_, _, name, _)| name == "worker attempt")
        .collect();
    assert_eq!(attempts.len(), 2, "one span per attempt: {attempts:?}");
    for ((id, parent, _, fields), attempt) in attempts.iter().zip([a1, a2]) {
        assert_eq!(*parent, Some(task_span.0), "inside the task's span");
        assert_eq!(fields["subtask.attempt"], attempt.to_string());
        assert_eq!(fields["subtask.worker"], "tests/rust-test");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            log.closed.lock().unwrap().contains(id),
            "the attempt's span is closed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_awaiting_its_subtasks_leaves_room_for_them_on_a_worker_of_capacity_one() {
    let addr = server(10_000).await;
    let (mut w, client, task, a) = parent_task(addr, 1).await;
    let root = task.clone();
    let first = w
        .request(
            &task,
            a,
            json!({"type": "spawn", "tool": "leaf", "arguments": {"n": 1}}),
        )
        .await;
    let first = first["ok"]["taskId"].as_str().unwrap().to_owned();
    // The only slot is the parent's: the leaf waits until the parent waits.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!w.unread.iter().any(|f| f["type"] == "assign"), "{:?}", w.unread);
    let t = client.get(&first).await;
    assert!(
        t["statusMessage"]
            .as_str()
            .unwrap_or("")
            .contains("all 1 slots busy"),
        "{t}"
    );
    w.send(json!({"type": "outcome", "task": task, "attempt": a, "ref": 500, "child": first}))
        .await;
    let (leaf, la, _) = w.assignment("leaf").await;
    assert_eq!(leaf, first);
    // A second subtask spawned and started meanwhile: the running leaf holds
    // the slot now, so the new one waits for it.
    w.result(&leaf, la, "one").await;
    let o = w.take(|f| f["type"] == "reply" && f["ref"] == 500).await;
    assert_eq!(text_of(&o["ok"]["result"]), "one");
    w.result(&task, a, "done").await;
    client.until_status(&root, "completed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_cancels_a_subtask_and_hands_outcomes_to_its_dependents() {
    let addr = server(10_000).await;
    let (mut w, client, task, a) = parent_task(addr, 8).await;
    let root = task.clone();
    let spawn = |n: u64, after: Value| json!({"type": "spawn", "tool": "leaf", "arguments": {"n": n}, "after": after});
    let first = w.request(&task, a, spawn(1, json!([]))).await["ok"]["taskId"].clone();
    let second = w.request(&task, a, spawn(2, json!([first]))).await["ok"]["taskId"].clone();
    let doomed = w.request(&task, a, spawn(3, json!([]))).await["ok"]["taskId"].clone();
    let mut assigned = Vec::new();
    for _ in 0..2 {
        assigned.push(w.assignment("leaf").await);
    }
    let (one, oa, _) = assigned
        .iter()
        .find(|(id, _, _)| json!(id) == first)
        .cloned()
        .expect("the first leaf");
    let (three, ta, _) = assigned
        .iter()
        .find(|(id, _, _)| json!(id) == doomed)
        .cloned()
        .expect("the third leaf");
    // The dependent one starts only after the first ends, with its outcome.
    w.result(&one, oa, "first result").await;
    let (two, twa, assign) = w.assignment("leaf").await;
    assert_eq!(json!(two), second);
    assert_eq!(
        assign["dependencies"],
        json!([{"taskId": first, "status": "completed", "result": {"content": [{"type": "text", "text": "first result"}]}}]),
        "{assign}"
    );
    w.result(&two, twa, "second").await;
    // Cancel: the worker running the subtask hears of it; its outcome is cancelled.
    let r = w
        .request(&task, a, json!({"type": "cancel", "child": doomed}))
        .await;
    assert_eq!(r["ok"], json!({}), "{r}");
    let c = w
        .take(|f| f["type"] == "cancel" && f["task"] == json!(three))
        .await;
    assert_eq!(c["attempt"], ta);
    let o = w
        .request(&task, a, json!({"type": "outcome", "child": doomed}))
        .await;
    assert_eq!(o["ok"]["status"], "cancelled", "{o}");
    let r = w
        .request(&task, a, json!({"type": "cancel", "child": root}))
        .await;
    assert_eq!(r["error"]["code"], "unknown_child", "{r}");
    w.result(&task, a, "done").await;
    client.until_status(&root, "completed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_a_clear_error_and_the_connection_goes_on() {
    let addr = server(10_000).await;
    let mut w = Worker::connect(addr, 1, json!([tool("t", any_object())])).await;
    w.ws.send(Message::text("not json")).await.unwrap();
    let e = w.take(|f| f["type"] == "error").await;
    assert_eq!(e["code"], "bad_frame", "{e}");
    w.send(json!({"type": "no-such-frame", "ref": 7})).await;
    let r = w.take(|f| f["type"] == "reply" && f["ref"] == 7).await;
    assert_eq!(r["error"]["code"], "bad_frame", "{r}");
    w.send(json!({"type": "spawn", "ref": 8, "attempt": 1, "tool": "t"}))
        .await;
    let r = w.take(|f| f["type"] == "reply" && f["ref"] == 8).await;
    assert_eq!(r["error"]["code"], "bad_frame", "a spawn without its task: {r}");
    w.ws.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    let e = w.take(|f| f["type"] == "error").await;
    assert_eq!(e["code"], "bad_frame", "{e}");
    let r = w
        .request(
            "00000000-0000-4000-8000-000000000000",
            1,
            json!({"type": "checkpoint"}),
        )
        .await;
    assert_eq!(r["error"]["code"], "stale_attempt", "a task never assigned: {r}");
    // Still served: a call reaches this worker.
    let client = Client::new(addr, full_caps());
    let task = client.start_task("t", json!({})).await;
    let (id, a, _) = w.assignment("t").await;
    assert_eq!(id, task);
    w.result(&id, a, "fine").await;
    client.until_status(&task, "completed").await;
    // A first frame that is not a hello closes the connection.
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/workers"))
        .await
        .unwrap();
    let mut raw = Worker {
        ws,
        unread: VecDeque::new(),
        next_ref: 1,
        beats: false,
    };
    raw.send(json!({"type": "heartbeat"})).await;
    let e = raw.read().await.expect("an error frame");
    assert_eq!(e["code"], "bad_hello", "{e}");
    assert!(raw.read().await.is_none(), "then closed");
    // A plain GET is told what the route is.
    let r = support::http::raw(addr, "GET", &[], b"").await;
    assert_ne!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_client_credentials_are_separate() {
    let mut workers = WorkerConfig::new(TokenTable::parse(&format!("{TOKEN} tests")).unwrap());
    workers.lease = Duration::from_secs(10);
    let config = ServerConfig {
        tokens: Some(TokenTable::parse("client-secret alice").unwrap()),
        workers: Some(workers),
        ..ServerConfig::default()
    };
    let server = subtask::server::Server::builder(Runtime::new(RuntimeConfig::default()), config).build();
    let addr = serve(server).await;
    // A client's token is no worker's.
    let (_, first) = Worker::hello(addr, "client-secret", 1, json!([tool("t", any_object())])).await;
    assert_eq!(first["code"], "unauthorized", "{first}");
    // A worker's token is no client's.
    let mut w = Worker::connect(addr, 1, json!([tool("t", any_object())])).await;
    let as_worker = Client::new(addr, full_caps()).with_token(TOKEN);
    let r = as_worker.send("tools/list", json!({})).await;
    assert_eq!(r.status, 401, "{}", r.body);
    // The client's call runs on the worker, and is the client's task.
    let alice = Client::new(addr, full_caps()).with_token("client-secret");
    let task = alice.start_task("t", json!({})).await;
    let (id, a, _) = w.assignment("t").await;
    w.result(&id, a, "for alice").await;
    let done = alice.until_status(&task, "completed").await;
    assert_eq!(text_of(&done["result"]), "for alice");
}

#[test]
fn worker_tokens_with_stdio_are_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_subtask"))
        .args(["serve", "--stdio", "--memory", "--worker-token", "x"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run subtask");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("need the HTTP listener"), "{err}");
}
