//! Every task is one span, exported over OTLP/HTTP by the real `subtask
//! serve` to a receiver in this test (a real socket; the protobuf decoded
//! with `opentelemetry-proto`): each task of each tree has exactly one span,
//! a child's span is a child of its parent task's span, a tree is one trace
//! (a root started with `_meta.traceparent` is a child of that remote span),
//! and each span carries its task's final status. The spans are sent when
//! the server stops on SIGTERM (the exporter's flush), so nothing here
//! waits on the batch processor's schedule.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_subtask");
/// Hang guard for every wait.
const GUARD: Duration = Duration::from_secs(60);
/// The remote parent of the traced tree (W3C trace context in `_meta`).
const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const REMOTE_SPAN_ID: &str = "00f067aa0ba902b7";

/// What the receiver got: each export request's path, content type and spans.
#[derive(Default)]
struct Received {
    requests: Vec<(String, String)>,
    /// (the resource's `service.name`, the span).
    spans: Vec<(String, Span)>,
}

/// An OTLP/HTTP receiver on a free loopback port: HTTP/1.1 with keep-alive,
/// each `POST` body decoded as an `ExportTraceServiceRequest` and answered
/// with an empty `ExportTraceServiceResponse` once it is recorded.
struct Receiver {
    url: String,
    got: Arc<Mutex<Received>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got: Arc<Mutex<Received>> = Arc::default();
        let shared = got.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let got = shared.clone();
                std::thread::spawn(move || serve_conn(conn, &got));
            }
        });
        Receiver { url, got }
    }
}

fn serve_conn(conn: TcpStream, got: &Mutex<Received>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut out = conn;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').expect("a header line");
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
        let len: usize = headers
            .get("content-length")
            .expect("the exporter sends Content-Length")
            .parse()
            .unwrap();
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        assert!(
            !headers.contains_key("content-encoding"),
            "uncompressed by default"
        );
        let req =
            ExportTraceServiceRequest::decode(body.as_slice()).expect("a protobuf ExportTraceServiceRequest");
        {
            let mut got = got.lock().unwrap();
            let content_type = headers.get("content-type").cloned().unwrap_or_default();
            got.requests.push((path, content_type));
            for rs in req.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| attr(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    for span in ss.spans {
                        got.spans.push((service.clone(), span));
                    }
                }
            }
        }
        let _ = out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
        );
    }
}

/// A string attribute.
fn attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match &kv.value {
            Some(AnyValue {
                value: Some(any_value::Value::StringValue(s)),
            }) => Some(s.clone()),
            _ => None,
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `subtask serve --memory` exporting to `otlp`, killed on drop.
struct ServeProcess {
    child: Child,
    url: String,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(otlp: &str) -> ServeProcess {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--memory",
        "--listen",
        "127.0.0.1:0",
        "--otlp-endpoint",
        otlp,
    ])
    .env("RUST_LOG", "info")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // The flag alone decides where spans go and what they are called.
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_TRACES_SAMPLER",
    ] {
        cmd.env_remove(var);
    }
    let mut child = cmd.spawn().expect("start subtask serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("subtask serve printed its address").unwrap();
        if let Some(i) = line.find("http://")
            && line.contains("listening")
        {
            let rest = &line[i..];
            let end = rest.find("/mcp").expect("the endpoint path") + 4;
            break rest[..end].to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    ServeProcess { child, url }
}

/// One JSON-RPC request on the 2026-07-28 wire; `extra_meta` joins `_meta`.
async fn rpc(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: &str,
    mut params: Value,
    extra_meta: Value,
) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        }
    });
    if let (Some(meta), Some(extra)) = (meta.as_object_mut(), extra_meta.as_object()) {
        meta.extend(extra.clone());
    }
    params["_meta"] = meta;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let answer: Value = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .header("Mcp-Name", name)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(answer.get("error").is_none(), "{method} failed: {answer}");
    answer["result"].clone()
}

/// Starts a `fanout` tree and returns its root's id.
async fn start_fanout(http: &reqwest::Client, url: &str, args: Value, extra_meta: Value) -> String {
    let result = rpc(
        http,
        url,
        "tools/call",
        "fanout",
        json!({"name": "fanout", "arguments": args}),
        extra_meta,
    )
    .await;
    assert_eq!(result["resultType"], "task", "{result}");
    result["task"]["taskId"]
        .as_str()
        .or(result["taskId"].as_str())
        .unwrap_or_else(|| panic!("no task id: {result}"))
        .to_owned()
}

async fn get(http: &reqwest::Client, url: &str, id: &str) -> Value {
    rpc(http, url, "tasks/get", id, json!({"taskId": id}), json!({})).await
}

async fn wait_terminal(http: &reqwest::Client, url: &str, id: &str) -> Value {
    let deadline = Instant::now() + GUARD;
    loop {
        let task = get(http, url, id).await;
        if matches!(
            task["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} did not end: {task}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A task as `tasks/get` shows it once its tree ended.
#[derive(Debug, Clone)]
struct Task {
    parent: Option<String>,
    status: String,
}

/// Every task of the tree of `root` (walking `childTaskIds`), all terminal.
async fn tree(http: &reqwest::Client, url: &str, root: &str) -> BTreeMap<String, Task> {
    let mut tasks = BTreeMap::new();
    let mut todo = vec![(root.to_owned(), None)];
    while let Some((id, parent)) = todo.pop() {
        let task = wait_terminal(http, url, &id).await;
        for child in task["childTaskIds"].as_array().cloned().unwrap_or_default() {
            todo.push((child.as_str().unwrap().to_owned(), Some(id.clone())));
        }
        let status = task["status"].as_str().unwrap().to_owned();
        tasks.insert(id, Task { parent, status });
    }
    tasks
}

/// Checks the spans of one tree against its tasks; returns its trace id.
fn check_tree(
    what: &str,
    root: &str,
    tasks: &BTreeMap<String, Task>,
    spans: &HashMap<String, Vec<&Span>>,
    remote_parent: Option<(&str, &str)>,
) -> String {
    let one = |id: &str| -> &Span {
        let found = spans.get(id).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            found.len(),
            1,
            "{what}: task {id} has {} spans, not one",
            found.len()
        );
        found[0]
    };
    let root_span = one(root);
    let trace = hex(&root_span.trace_id);
    match remote_parent {
        None => assert!(
            root_span.parent_span_id.is_empty(),
            "{what}: the root's span has no parent (a new trace)"
        ),
        Some((trace_id, span_id)) => {
            assert_eq!(trace, trace_id, "{what}: the root joins the request's trace");
            assert_eq!(
                hex(&root_span.parent_span_id),
                span_id,
                "{what}: the root's parent is the request's span"
            );
        }
    }
    for (id, task) in tasks {
        let span = one(id);
        assert_eq!(span.name, "task fanout", "{what}: span name of {id}");
        assert_eq!(
            hex(&span.trace_id),
            trace,
            "{what}: task {id} is in its tree's trace"
        );
        assert_eq!(
            attr(&span.attributes, "subtask.task_id").as_deref(),
            Some(id.as_str())
        );
        assert_eq!(
            attr(&span.attributes, "subtask.root_task_id").as_deref(),
            Some(root)
        );
        assert_eq!(
            attr(&span.attributes, "subtask.parent_task_id"),
            task.parent,
            "{what}: {id}"
        );
        assert_eq!(attr(&span.attributes, "subtask.tool").as_deref(), Some("fanout"));
        assert_eq!(
            attr(&span.attributes, "subtask.status").as_deref(),
            Some(task.status.as_str()),
            "{what}: the span of {id} carries its final status"
        );
        let code = span.status.as_ref().map_or(StatusCode::Unset as i32, |s| s.code);
        if task.status == "failed" {
            assert_eq!(
                code,
                StatusCode::Error as i32,
                "{what}: a failed task's span is an error"
            );
            assert!(
                span.status
                    .as_ref()
                    .unwrap()
                    .message
                    .contains("failed as requested"),
                "{what}: the error's message: {:?}",
                span.status
            );
        } else {
            assert_ne!(code, StatusCode::Error as i32, "{what}: {id} is {}", task.status);
        }
        if let Some(parent) = &task.parent {
            assert_eq!(
                hex(&span.parent_span_id),
                hex(&one(parent).span_id),
                "{what}: the span of {id} is a child of its parent task's span"
            );
        }
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    }
    trace
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_is_one_span_under_its_parents_span_exported_over_otlp() {
    let receiver = Receiver::start();
    let mut server = serve(&receiver.url);
    let url = server.url.clone();
    // reqwest's rustls needs a provider (`subtask::tls`).
    subtask::tls::install_provider();
    let http = reqwest::Client::new();

    // A tree that completes, with a failed task in it (fanout folds a
    // child's failure into its parent's result).
    let done = start_fanout(
        &http,
        &url,
        json!({"width": 2, "depth": 2, "steps": 1, "stepMs": 1, "failAt": "0.1.0"}),
        json!({}),
    )
    .await;
    // A tree started by a request that carries W3C trace context.
    let traced = start_fanout(
        &http,
        &url,
        json!({"width": 3, "depth": 1, "steps": 1, "stepMs": 1}),
        json!({"traceparent": format!("00-{TRACE_ID}-{REMOTE_SPAN_ID}-01")}),
    )
    .await;
    // A tree cancelled while its tasks run.
    let cancelled = start_fanout(
        &http,
        &url,
        json!({"width": 2, "depth": 1, "steps": 1000, "stepMs": 100}),
        json!({}),
    )
    .await;
    let deadline = Instant::now() + GUARD;
    while get(&http, &url, &cancelled).await["childTaskIds"]
        .as_array()
        .map_or(0, Vec::len)
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "the cancelled tree's children never appeared"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rpc(
        &http,
        &url,
        "tasks/cancel",
        &cancelled,
        json!({"taskId": cancelled}),
        json!({}),
    )
    .await;

    let done_tasks = tree(&http, &url, &done).await;
    let traced_tasks = tree(&http, &url, &traced).await;
    let cancelled_tasks = tree(&http, &url, &cancelled).await;
    assert_eq!(done_tasks.len(), 7);
    assert_eq!(traced_tasks.len(), 4);
    assert_eq!(cancelled_tasks.len(), 3);
    assert_eq!(done_tasks[&done].status, "completed");
    assert_eq!(done_tasks.values().filter(|t| t.status == "failed").count(), 1);
    assert!(
        cancelled_tasks.values().all(|t| t.status == "cancelled"),
        "{cancelled_tasks:?}"
    );

    // SIGTERM: the server stops cleanly and flushes its spans on the way out.
    let pid = server.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + GUARD;
    let exit = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "subtask serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "subtask serve exited with {exit}");

    let got = receiver.got.lock().unwrap();
    assert!(!got.requests.is_empty(), "the exporter sent nothing");
    for (path, content_type) in &got.requests {
        assert_eq!(path, "/v1/traces");
        assert_eq!(content_type, "application/x-protobuf");
    }
    let mut by_task: HashMap<String, Vec<&Span>> = HashMap::new();
    for (service, span) in &got.spans {
        assert_eq!(service, "subtask", "the default service name");
        let id = attr(&span.attributes, "subtask.task_id")
            .unwrap_or_else(|| panic!("only task spans are exported, got {:?}", span.name));
        by_task.entry(id).or_default().push(span);
    }
    let traces: HashSet<String> = [
        check_tree("completed tree", &done, &done_tasks, &by_task, None),
        check_tree(
            "traced tree",
            &traced,
            &traced_tasks,
            &by_task,
            Some((TRACE_ID, REMOTE_SPAN_ID)),
        ),
        check_tree("cancelled tree", &cancelled, &cancelled_tasks, &by_task, None),
    ]
    .into_iter()
    .collect();
    assert_eq!(traces.len(), 3, "one trace per tree");
    assert_eq!(
        got.spans.len(),
        done_tasks.len() + traced_tasks.len() + cancelled_tasks.len(),
        "a span per task, nothing else"
    );
}

#[test]
fn serve_refuses_an_otlp_endpoint_that_is_not_an_http_url() {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--memory",
            "--listen",
            "127.0.0.1:0",
            "--otlp-endpoint",
            "127.0.0.1:4318",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--otlp-endpoint") && err.contains("http://"),
        "{err}"
    );
}
