//! `subtask::client` against a deliberately malicious server: a tiny axum
//! server on 127.0.0.1 that answers with crafted JSON (cycles, dangling and
//! duplicate ids, endless children, endless depth, rewritten `childTaskIds`,
//! lying parents, endless bodies, silence). Every case must end in a clear
//! error: no hang, no panic, and no more held than the limits allow.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};
use subtask::client::{ClientBuilder, ClientConfig, ClientError, ClientLimits, Violation};
use subtask::model::{JsonObject, TaskId};

/// A hang guard, never a timing assertion.
const GUARD: Duration = Duration::from_secs(30);

/// What the malicious server does with one request.
enum Reply {
    Json(Value),
    /// A JSON-RPC error with this code and message.
    Error(i64, &'static str),
    /// A body that never ends.
    Endless,
    /// An SSE stream whose one data line never ends.
    EndlessSse,
    /// No answer at all.
    Silence,
    /// SSE events: the first messages once, then the others every 20 ms.
    Sse(Vec<Value>, Vec<Value>),
}

type Handler = dyn Fn(&str, &Value, usize) -> Reply + Send + Sync;

struct Served {
    handler: Arc<Handler>,
    requests: AtomicUsize,
}

async fn endpoint(State(s): State<Arc<Served>>, body: Bytes) -> Response {
    let n = s.requests.fetch_add(1, Ordering::SeqCst);
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let id = req["id"].clone();
    let method = req["method"].as_str().unwrap_or_default().to_owned();
    let reply = (s.handler)(&method, &req["params"], n);
    let json_body = |v: Value| {
        Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(v.to_string()))
            .unwrap()
    };
    match reply {
        Reply::Json(result) => json_body(json!({"jsonrpc": "2.0", "id": id, "result": result})),
        Reply::Error(code, message) => {
            let mut r =
                json_body(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}));
            *r.status_mut() = StatusCode::BAD_REQUEST;
            r
        }
        Reply::Endless => Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(
                futures::stream::repeat(Bytes::from_static(&[b' '; 64 * 1024])).map(Ok::<_, std::io::Error>),
            ))
            .unwrap(),
        Reply::EndlessSse => {
            let head = futures::stream::once(async { Bytes::from_static(b"data: {\"jsonrpc\":\"2.0\",") });
            let tail = futures::stream::repeat(Bytes::from_static(&[b'x'; 64 * 1024]));
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(head.chain(tail).map(Ok::<_, std::io::Error>)))
                .unwrap()
        }
        Reply::Sse(once, again) => {
            let event = |m: &Value| Bytes::from(format!("event: message\ndata: {m}\n\n"));
            let first = futures::stream::iter(once.iter().map(event).collect::<Vec<_>>());
            let repeated = futures::stream::unfold(again, move |again| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let chunk: Vec<u8> = again.iter().flat_map(|m| event(m).to_vec()).collect();
                Some((Bytes::from(chunk), again))
            });
            Response::builder()
                .header(header::CONTENT_TYPE, "text/event-stream")
                .body(Body::from_stream(
                    first.chain(repeated).map(Ok::<_, std::io::Error>),
                ))
                .unwrap()
        }
        Reply::Silence => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            json_body(Value::Null)
        }
    }
}

/// Starts a server answering with `handler(method, params, request number)`.
async fn serve(
    handler: impl Fn(&str, &Value, usize) -> Reply + Send + Sync + 'static,
) -> (String, Arc<Served>) {
    let served = Arc::new(Served {
        handler: Arc::new(handler),
        requests: AtomicUsize::new(0),
    });
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(endpoint))
        .with_state(served.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/mcp"), served)
}

fn config() -> ClientConfig {
    ClientConfig {
        default_poll_interval: Duration::from_millis(10),
        min_poll_interval: Duration::from_millis(5),
        request_timeout: Duration::from_secs(5),
        ..ClientConfig::default()
    }
}

/// A task as `tasks/get` answers it.
fn task(id: TaskId, parent: Option<TaskId>, children: &[TaskId], status: &str, at_ms: u64) -> Value {
    let mut t = json!({
        "resultType": "complete",
        "taskId": id,
        "status": status,
        "createdAt": "2026-01-01T00:00:00Z",
        "lastUpdatedAt": format!("2026-01-01T00:00:{:02}.{:03}Z", (at_ms / 1000) % 60, at_ms % 1000),
        "ttlMs": null,
        "pollIntervalMs": 0,
    });
    if let Some(p) = parent {
        t["parentTaskId"] = json!(p);
    }
    if !children.is_empty() {
        t["childTaskIds"] = json!(children);
    }
    if status == "completed" {
        t["result"] = json!({"content": [], "isError": false});
    }
    t
}

fn created(root: TaskId) -> Reply {
    let mut t = task(root, None, &[], "working", 0);
    t["resultType"] = json!("task");
    Reply::Json(t)
}

fn asked(params: &Value) -> TaskId {
    params["taskId"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| TaskId::from_u128(0))
}

/// Runs `call_tool_stream("t")` to its end with `config` and returns the
/// error it must end with.
async fn follow_until_error(url: &str, config: ClientConfig) -> ClientError {
    let client = ClientBuilder::http(url).config(config).build().unwrap();
    let outcome = tokio::time::timeout(GUARD, async {
        let mut stream = client.call_tool_stream("t", JsonObject::new()).await?;
        while let Some(r) = stream.next().await {
            r?;
        }
        Ok::<(), ClientError>(())
    })
    .await
    .expect("the client must not hang");
    outcome.expect_err("a malicious server must end in an error")
}

fn violation(e: ClientError) -> Violation {
    match e {
        ClientError::Untrusted(v) => v,
        other => panic!("expected a violation, got {other}"),
    }
}

#[tokio::test]
async fn a_cycle_through_child_task_ids_is_an_error() {
    let (r, a, b) = (TaskId::random(), TaskId::random(), TaskId::random());
    let (url, _) = serve(move |method, params, _| match method {
        "tools/call" => created(r),
        "tasks/get" => {
            let id = asked(params);
            Reply::Json(match id {
                x if x == r => task(r, None, &[a], "working", 1),
                x if x == a => task(a, Some(r), &[b], "working", 1),
                _ => task(b, Some(a), &[r], "working", 1),
            })
        }
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let v = violation(follow_until_error(&url, config()).await);
    assert_eq!(
        v,
        Violation::Cycle {
            path: vec![r, a, b, r]
        }
    );
    assert!(v.to_string().contains("cycle"), "{v}");
}

#[tokio::test]
async fn a_child_that_never_resolves_is_dangling_after_bounded_retries() {
    let (r, a) = (TaskId::random(), TaskId::random());
    let (url, served) = serve(move |method, params, _| match method {
        "tools/call" => created(r),
        "tasks/get" if asked(params) == r => Reply::Json(task(r, None, &[a], "working", 1)),
        "tasks/get" => Reply::Error(-32602, "Failed to retrieve task: Task not found"),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let v = violation(follow_until_error(&url, config()).await);
    assert_eq!(
        v,
        Violation::Dangling {
            id: a,
            named_by: r,
            attempts: 3
        }
    );
    // Bounded: a handful of requests, not a retry storm.
    assert!(served.requests.load(Ordering::SeqCst) < 100);
}

#[tokio::test]
async fn endless_children_stop_at_the_task_limit() {
    let r = TaskId::random();
    let grown = Arc::new(parking_lot::Mutex::new(Vec::<TaskId>::new()));
    let g = grown.clone();
    let (url, _) = serve(move |method, params, n| match method {
        "tools/call" => created(r),
        "tasks/get" if asked(params) == r => {
            // Every poll of the root adds 500 more children.
            let mut kids = g.lock();
            kids.extend((0..500).map(|_| TaskId::random()));
            Reply::Json(task(r, None, &kids, "working", n as u64))
        }
        "tasks/get" => Reply::Json(task(asked(params), Some(r), &[], "working", 1)),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let mut c = config();
    c.limits = ClientLimits {
        max_tasks: 2_000,
        ..ClientLimits::default()
    };
    let v = violation(follow_until_error(&url, c).await);
    assert_eq!(v, Violation::TooManyTasks { limit: 2_000 });
    assert!(grown.lock().len() <= 2_500);

    // And one task with too many children at once.
    let (url, _) = serve(move |method, params, _| match method {
        "tools/call" => created(r),
        "tasks/get" if asked(params) == r => {
            let kids: Vec<TaskId> = (0..101).map(|_| TaskId::random()).collect();
            Reply::Json(task(r, None, &kids, "working", 1))
        }
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let mut c = config();
    c.limits.max_children = 100;
    let v = violation(follow_until_error(&url, c).await);
    assert_eq!(v, Violation::TooManyChildren { task: r, limit: 100 });
}

#[tokio::test]
async fn endless_depth_stops_at_the_depth_limit() {
    let r = TaskId::random();
    // Each task's only child is derived from its id; parents are consistent.
    let child_of =
        |id: TaskId| TaskId::from_u128(id.as_u128().wrapping_mul(6364136223846793005).wrapping_add(1));
    let parent_of = Arc::new(parking_lot::Mutex::new(
        std::collections::HashMap::<TaskId, TaskId>::new(),
    ));
    let p = parent_of.clone();
    let (url, _) = serve(move |method, params, _| match method {
        "tools/call" => created(r),
        "tasks/get" => {
            let id = asked(params);
            let c = child_of(id);
            p.lock().insert(c, id);
            let parent = p.lock().get(&id).copied();
            Reply::Json(task(id, parent, &[c], "working", 1))
        }
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let mut c = config();
    c.limits.max_depth = 20;
    let v = violation(follow_until_error(&url, c).await);
    assert!(matches!(v, Violation::TooDeep { limit: 20, .. }), "{v}");
}

#[tokio::test]
async fn child_task_ids_that_shrink_or_reorder_are_errors() {
    let (r, a, b) = (TaskId::random(), TaskId::random(), TaskId::random());
    let (url, _) = serve(move |method, params, n| match method {
        "tools/call" => created(r),
        "tasks/get" if asked(params) == r => {
            // First [a, b], later [b] with a newer timestamp.
            let kids: &[TaskId] = if n < 3 { &[a, b] } else { &[b] };
            Reply::Json(task(r, None, kids, "working", n as u64))
        }
        "tasks/get" => Reply::Json(task(asked(params), Some(r), &[], "working", 1)),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let v = violation(follow_until_error(&url, config()).await);
    assert!(
        matches!(v, Violation::ChildrenNotAppendOnly { task, seen: 2, position: 0 } if task == r),
        "{v}"
    );
}

#[tokio::test]
async fn lying_parents_duplicates_and_wrong_answers_are_errors() {
    let (r, a, stranger) = (TaskId::random(), TaskId::random(), TaskId::random());
    let (url, _) = serve(move |method, params, _| match method {
        "tools/call" => created(r),
        "tasks/get" if asked(params) == r => Reply::Json(task(r, None, &[a], "working", 1)),
        "tasks/get" => Reply::Json(task(a, Some(stranger), &[], "working", 1)),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let v = violation(follow_until_error(&url, config()).await);
    assert_eq!(
        v,
        Violation::ParentMismatch {
            child: a,
            named_by: r,
            claims: Some(stranger)
        }
    );

    let (url, _) = serve(move |method, _, _| match method {
        "tools/call" => created(r),
        "tasks/get" => Reply::Json(task(r, None, &[a, a], "working", 1)),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let v = violation(follow_until_error(&url, config()).await);
    assert!(matches!(v, Violation::DuplicateId { id, .. } if id == a), "{v}");

    let (url, _) = serve(move |method, _, _| match method {
        "tools/call" => created(r),
        "tasks/get" => Reply::Json(task(stranger, None, &[], "working", 1)),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let v = violation(follow_until_error(&url, config()).await);
    assert_eq!(
        v,
        Violation::WrongTask {
            asked: r,
            got: stranger
        }
    );
}

#[tokio::test]
async fn a_terminal_task_that_comes_back_to_life_is_an_error() {
    // Seen through notifications: the client never polls a terminal task
    // again, but a subscription may push it.
    let (r, a) = (TaskId::random(), TaskId::random());
    let (url, _) = serve(move |method, params, _| match method {
        "tools/call" => created(r),
        // Repeated, so it also lands after the client learned of `a`.
        "subscriptions/listen" => Reply::Sse(
            vec![json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                         "params": {"notifications": {"taskIds": [r]}}})],
            vec![
                json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": task(a, Some(r), &[], "completed", 5)}),
                json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": task(a, Some(r), &[], "working", 9)}),
            ],
        ),
        "tasks/get" if asked(params) == r => Reply::Json(task(r, None, &[a], "working", 1)),
        "tasks/get" => Reply::Json(task(a, Some(r), &[], "working", 1)),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let v = violation(follow_until_error(&url, config()).await);
    assert!(
        matches!(v, Violation::TerminalChanged { task, .. } if task == a),
        "{v}"
    );
}

#[tokio::test]
async fn an_endless_body_is_cut_at_the_response_limit() {
    let r = TaskId::random();
    let (url, _) = serve(move |method, _, _| match method {
        "tools/call" => created(r),
        "tasks/get" => Reply::Endless,
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let mut c = config();
    c.limits.max_response_bytes = 1 << 20;
    let v = violation(follow_until_error(&url, c).await);
    assert_eq!(v, Violation::ResponseTooLarge { limit: 1 << 20 });
}

#[tokio::test]
async fn a_poisoned_subscription_falls_back_to_polling() {
    let r = TaskId::random();
    let (url, _) = serve(move |method, _, n| match method {
        "tools/call" => created(r),
        "subscriptions/listen" => Reply::EndlessSse,
        "tasks/get" if n < 6 => Reply::Json(task(r, None, &[], "working", n as u64)),
        "tasks/get" => Reply::Json(task(r, None, &[], "completed", n as u64)),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let mut c = config();
    c.limits.max_response_bytes = 1 << 20;
    let client = ClientBuilder::http(&url).config(c).build().unwrap();
    let r = tokio::time::timeout(GUARD, client.call_tool("t", JsonObject::new()))
        .await
        .expect("no hang")
        .expect("polling alone finishes the call");
    assert_eq!(r["isError"], false);
}

#[tokio::test]
async fn a_silent_server_times_out_after_bounded_retries() {
    let r = TaskId::random();
    let (url, served) = serve(move |method, _, _| match method {
        "tools/call" => created(r),
        "tasks/get" => Reply::Silence,
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let mut c = config();
    c.request_timeout = Duration::from_millis(200);
    c.max_retries = 2;
    let e = follow_until_error(&url, c).await;
    assert!(matches!(e, ClientError::Timeout(_)), "{e}");
    assert!(served.requests.load(Ordering::SeqCst) <= 6);
}

#[tokio::test]
async fn a_zero_poll_interval_does_not_become_a_busy_loop() {
    let r = TaskId::random();
    let started = std::time::Instant::now();
    let (url, served) = serve(move |method, _, _| match method {
        "tools/call" => created(r),
        "tasks/get" if started.elapsed() < Duration::from_millis(300) => {
            Reply::Json(task(r, None, &[], "working", 1))
        }
        "tasks/get" => Reply::Json(task(r, None, &[], "completed", 2)),
        _ => Reply::Error(-32601, "no"),
    })
    .await;
    let mut c = config();
    c.min_poll_interval = Duration::from_millis(20);
    let client = ClientBuilder::http(&url).config(c).build().unwrap();
    let t0 = std::time::Instant::now();
    tokio::time::timeout(GUARD, client.call_tool("t", JsonObject::new()))
        .await
        .unwrap()
        .unwrap();
    let elapsed = t0.elapsed();
    // At most one poll per 20 ms (plus the call and the listen attempt),
    // however fast the machine is.
    let polls = served.requests.load(Ordering::SeqCst);
    let bound = (elapsed.as_millis() / 20) as usize + 4;
    assert!(polls <= bound, "{polls} requests in {elapsed:?}");
}

#[tokio::test]
async fn the_suggested_poll_interval_is_honoured() {
    let r = TaskId::random();
    let started = std::time::Instant::now();
    let (url, served) = serve(move |method, _, _| {
        let mut t = task(r, None, &[], "working", 1);
        t["pollIntervalMs"] = json!(150);
        match method {
            "tools/call" => {
                t["resultType"] = json!("task");
                Reply::Json(t)
            }
            "tasks/get" if started.elapsed() < Duration::from_millis(600) => Reply::Json(t),
            "tasks/get" => Reply::Json(task(r, None, &[], "completed", 2)),
            _ => Reply::Error(-32601, "no"),
        }
    })
    .await;
    let mut c = config();
    c.use_subscriptions = false;
    let client = ClientBuilder::http(&url).config(c).build().unwrap();
    let t0 = std::time::Instant::now();
    tokio::time::timeout(GUARD, client.call_tool("t", JsonObject::new()))
        .await
        .unwrap()
        .unwrap();
    let elapsed = t0.elapsed();
    // At most one tasks/get per 150 ms (plus the first poll and the call).
    let requests = served.requests.load(Ordering::SeqCst);
    let bound = (elapsed.as_millis() / 150) as usize + 2;
    assert!(requests <= bound, "{requests} requests in {elapsed:?}");
}

#[tokio::test]
async fn malformed_answers_are_protocol_errors_not_panics() {
    for bad in [
        json!({"resultType": "task", "taskId": "not-a-uuid", "status": "working"}),
        json!({"resultType": "task", "taskId": TaskId::random(), "status": "exploded",
               "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": null}),
        json!({"resultType": "mystery"}),
        json!({"resultType": "input_required"}),
    ] {
        let (url, _) = serve(move |method, _, _| match method {
            "tools/call" => Reply::Json(bad.clone()),
            _ => Reply::Error(-32601, "no"),
        })
        .await;
        let client = ClientBuilder::http(&url).config(config()).build().unwrap();
        let e = client.call_tool("t", JsonObject::new()).await.unwrap_err();
        assert!(
            matches!(e, ClientError::Protocol(_) | ClientError::InputRequired(_)),
            "{e}"
        );
    }
}
