//! The HTTP/1.1 client of the tests, on hyper's client
//! connection (`hyper::client::conn::http1`) over a `TcpStream`, and the
//! client side of the 2026-07-28 wire ([`Client`]) on top of it.
//!
//! hyper writes the requests and reads the answers (`Content-Length` or
//! chunked framing alike): a body counts only once it arrived whole, and a
//! connection cut short is an error, never a guess. SSE answers are read
//! event by event as they arrive (`sse-stream`), for the long-lived
//! `subscriptions/listen` and `tasks/result` streams.
//!
//! `benches/store.rs` includes this file too, for its takeover requests.
//! The HTTP bench's load generator does not: it shares two cores with the
//! server it measures, and parses answers with `httparse` over its own
//! sockets, which costs it less CPU per request (`benches/http/client.rs`).
//! A [`Connection`] is driven in its caller's task (no task per
//! connection) until it streams.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper::header::{HOST, HeaderName, HeaderValue};
use hyper::http::response::Parts;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sse_stream::{Sse, SseStream};
use tokio::net::TcpStream;

/// How long [`raw`] waits for a whole answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// A response: status, lowercase headers, body.
#[derive(Debug)]
pub struct HttpResponse {
    /// The HTTP status code.
    pub status: u16,
    /// Every header, its name in lowercase, in the order received.
    pub headers: Vec<(String, String)>,
    /// The whole body (invalid UTF-8 replaced).
    pub body: String,
}

impl HttpResponse {
    /// The value of header `name` (lowercase), if the answer has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        header_in(&self.headers, name)
    }

    /// The body read as JSON.
    ///
    /// # Panics
    ///
    /// When the body is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn new(head: &Parts, body: &[u8]) -> HttpResponse {
        HttpResponse {
            status: head.status.as_u16(),
            headers: headers_of(head),
            body: String::from_utf8_lossy(body).into_owned(),
        }
    }
}

fn header_in<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The headers of `head` as lowercase names and values.
fn headers_of(head: &Parts) -> Vec<(String, String)> {
    head.headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The connection's half that reads and writes the socket; it makes
/// progress only while polled.
type Driver = Pin<Box<http1::Connection<TokioIo<TcpStream>, Full<Bytes>>>>;

/// One keep-alive HTTP/1.1 connection (hyper's client connection). The
/// socket is read and written only while [`Connection::send`] runs, in the
/// caller's task: a load generator pays no task switch per request.
pub struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    driver: Option<Driver>,
}

/// The head and whole body of one answer on a [`Connection`].
pub struct Answer {
    /// Status, version and headers.
    pub head: Parts,
    /// The whole body.
    pub body: Bytes,
}

impl Connection {
    /// Connects to `addr` (`TCP_NODELAY` on) and does hyper's handshake.
    ///
    /// # Errors
    ///
    /// The connection could not be opened.
    pub async fn open(addr: SocketAddr) -> Result<Connection, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("TCP_NODELAY: {e}"))?;
        // One write per request (head and body copied into one buffer)
        // rather than a vectored write.
        let (sender, driver) = http1::Builder::new()
            .writev(false)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake with {addr}: {e}"))?;
        Ok(Connection {
            sender,
            driver: Some(Box::pin(driver)),
        })
    }

    /// Sends `request` and reads its whole answer; the connection stays
    /// open for the next request (unless the server closes it).
    ///
    /// # Errors
    ///
    /// The connection is closed, failed, or closed before the whole answer.
    pub async fn send(&mut self, request: Request<Full<Bytes>>) -> Result<Answer, String> {
        let sender = &mut self.sender;
        let exchange = async move {
            sender
                .ready()
                .await
                .map_err(|e| format!("the connection is closed: {e}"))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("no answer: {e}"))?;
            let (head, body) = response.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| format!("the answer was cut short: {e}"))?
                .to_bytes();
            Ok(Answer { head, body })
        };
        tokio::pin!(exchange);
        // The connection first, then the exchange, in one poll: what the
        // connection just read is taken up at once, without another turn
        // of the task.
        let driver = &mut self.driver;
        let mut ended = None;
        let answer = std::future::poll_fn(|cx| {
            if let Some(d) = driver.as_mut()
                && let Poll::Ready(end) = d.as_mut().poll(cx)
            {
                // The server closed the connection: the answer may have
                // arrived whole before; the exchange ends either way now.
                *driver = None;
                ended = Some(end);
            }
            exchange.as_mut().poll(cx)
        })
        .await;
        answer.map_err(|e| match ended {
            Some(Err(c)) => format!("{e} (connection: {c})"),
            _ => e,
        })
    }

    /// Sends `request` and returns the answer's head once it arrived, its
    /// body as it arrives: the connection is driven by a task of its own
    /// from now on, until the body ends or is dropped.
    ///
    /// # Errors
    ///
    /// The connection is closed or failed before the answer's head.
    pub async fn stream(self, request: Request<Full<Bytes>>) -> Result<Streaming, String> {
        let Connection { mut sender, driver } = self;
        if let Some(driver) = driver {
            tokio::spawn(async move {
                let _ = driver.await;
            });
        }
        sender
            .ready()
            .await
            .map_err(|e| format!("the connection is closed: {e}"))?;
        let response: Response<Incoming> = sender
            .send_request(request)
            .await
            .map_err(|e| format!("no answer: {e}"))?;
        let (head, body) = response.into_parts();
        Ok(Streaming {
            status: head.status.as_u16(),
            headers: headers_of(&head),
            events: SseStream::new(body),
            _sender: sender,
        })
    }
}

/// An answer whose body is read as SSE events as they arrive.
pub struct Streaming {
    /// The HTTP status code.
    pub status: u16,
    /// Every header, its name in lowercase.
    pub headers: Vec<(String, String)>,
    events: SseStream<Incoming>,
    /// Kept so that the connection stays up while the body is read.
    _sender: http1::SendRequest<Full<Bytes>>,
}

impl Streaming {
    /// The value of header `name` (lowercase), if the answer has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        header_in(&self.headers, name)
    }

    /// The next whole event; `None` once the body ended (an event cut
    /// short by the end is dropped).
    ///
    /// # Errors
    ///
    /// The connection failed, or the body is not SSE.
    pub async fn next_event(&mut self) -> Option<Result<Sse, String>> {
        self.events
            .next()
            .await
            .map(|r| r.map_err(|e| format!("the event stream failed: {e}")))
    }

    /// The `data` of the next event that carries JSON (others are
    /// skipped); `None` once the body ended or the connection failed.
    pub async fn next_json(&mut self) -> Option<Value> {
        loop {
            let event = self.next_event().await?.ok()?;
            if let Some(v) = event.data.and_then(|d| serde_json::from_str::<Value>(&d).ok()) {
                return Some(v);
            }
        }
    }
}

/// A request `method path` to `addr` with `headers` and `body`, as
/// [`Connection::send`] takes it: `Host: addr` is added unless `headers`
/// has one; hyper adds `Content-Length` (none on a GET without a body).
///
/// # Errors
///
/// A header name or value that HTTP does not allow (hyper would refuse to
/// send it).
pub fn build_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: impl Into<Bytes>,
) -> Result<Request<Full<Bytes>>, String> {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .body(Full::new(body.into()))
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let map = request.headers_mut();
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        map.insert(
            HOST,
            HeaderValue::from_str(&addr.to_string()).expect("an address is a header value"),
        );
    }
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k:?}: {e}"))?;
        let value = HeaderValue::from_bytes(v.as_bytes()).map_err(|e| format!("header {k}: {v:?}: {e}"))?;
        map.append(name, value);
    }
    Ok(request)
}

/// `method path` to `addr` on a fresh connection; the whole answer.
///
/// # Errors
///
/// The request could not be built, or no whole answer came (connection
/// refused, reset or closed early).
pub async fn fetch(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<HttpResponse, String> {
    let request = build_request(addr, method, path, headers, Bytes::copy_from_slice(body))?;
    let answer = Connection::open(addr).await?.send(request).await?;
    Ok(HttpResponse::new(&answer.head, &answer.body))
}

/// `subtask_tasks_retained` from `addr`'s `/metrics` (with `token`, when
/// the server takes tokens), summed over tools: the finished tasks it holds
/// in memory.
pub async fn retained(addr: SocketAddr, token: Option<&str>) -> i64 {
    let auth: Vec<(&str, String)> = token
        .map(|t| ("authorization", format!("Bearer {t}")))
        .into_iter()
        .collect();
    let r = fetch(addr, "GET", "/metrics", &auth, b"").await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .filter(|l| l.starts_with("subtask_tasks_retained{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as i64)
        .sum()
}

/// `method path` to `addr` on a fresh connection; the answer's head, and
/// its body as SSE events as they arrive.
///
/// # Errors
///
/// The request could not be built, or no answer came.
pub async fn stream(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<Streaming, String> {
    let request = build_request(addr, method, path, headers, Bytes::copy_from_slice(body))?;
    Connection::open(addr).await?.stream(request).await
}

/// Serves `server` over Streamable HTTP on a free loopback port until the
/// test ends; returns the address.
pub async fn serve(server: subtask::server::Server) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(subtask::server::http::serve(
        server,
        listener,
        std::future::pending(),
    ));
    addr
}

/// Sends `headers` and `body` to `method /mcp` on a fresh connection and
/// returns the whole answer (`Host` added unless `headers` has one).
///
/// # Panics
///
/// No whole answer within 20 s.
pub async fn raw(addr: SocketAddr, method: &str, headers: &[(&str, String)], body: &[u8]) -> HttpResponse {
    tokio::time::timeout(ANSWER_TIMEOUT, fetch(addr, method, "/mcp", headers, body))
        .await
        .expect("response within 20 s")
        .unwrap_or_else(|e| panic!("{method} /mcp: {e}"))
}

/// The client side of the 2026-07-28 wire for tests.
#[derive(Clone)]
pub struct Client {
    /// The server's address.
    pub addr: SocketAddr,
    /// The capabilities declared in every request's `_meta`.
    pub caps: Value,
    /// The bearer token sent with every request, if any.
    pub token: Option<String>,
    next_id: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

/// Whether a task snapshot's `status` is terminal.
pub fn is_terminal(task: &Value) -> bool {
    ["completed", "failed", "cancelled"].contains(&task["status"].as_str().unwrap_or(""))
}

/// The ids in a task snapshot's `childTaskIds` (omitted while empty).
pub fn child_ids(task: &Value) -> Vec<String> {
    task["childTaskIds"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().expect("a task id string").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The first text content of a `CallToolResult` (empty when there is none).
pub fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Capabilities with the tasks extension, steer and pause.
pub fn full_caps() -> Value {
    json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {"steer": true, "pause": true}}})
}

/// Capabilities with the base tasks extension only.
pub fn base_task_caps() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

impl Client {
    /// A client of the server at `addr` declaring `caps`.
    pub fn new(addr: SocketAddr, caps: Value) -> Self {
        Client {
            addr,
            caps,
            token: None,
            next_id: std::sync::Arc::new(1.into()),
        }
    }

    /// The same client sending `Authorization: Bearer <token>`.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    fn name_for(method: &str, params: &Value) -> Option<String> {
        match method {
            "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str).map(str::to_owned),
            m if m.starts_with("tasks/") => params.get("taskId").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        }
    }

    /// The body and headers a conforming client sends.
    pub fn envelope(&self, method: &str, mut params: Value) -> (Vec<(&'static str, String)>, Vec<u8>) {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": self.caps,
            "io.modelcontextprotocol/clientInfo": {"name": "subtask-tests", "version": "0"},
        });
        let mut headers = vec![
            ("Content-Type", "application/json".to_owned()),
            ("Accept", "application/json, text/event-stream".to_owned()),
            ("MCP-Protocol-Version", "2026-07-28".to_owned()),
            ("Mcp-Method", method.to_owned()),
        ];
        if let Some(name) = Self::name_for(method, &params) {
            headers.push(("Mcp-Name", name));
        }
        if let Some(t) = &self.token {
            headers.push(("Authorization", format!("Bearer {t}")));
        }
        let body =
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
                .unwrap();
        (headers, body)
    }

    /// Sends a request; returns the HTTP response.
    pub async fn send(&self, method: &str, params: Value) -> HttpResponse {
        let (headers, body) = self.envelope(method, params);
        raw(self.addr, "POST", &headers, &body).await
    }

    /// Sends a request and returns its answer's head at once, its body as
    /// SSE events as they arrive.
    ///
    /// # Panics
    ///
    /// No answer.
    pub async fn stream(&self, method: &str, params: Value) -> Streaming {
        let (headers, body) = self.envelope(method, params);
        stream(self.addr, "POST", "/mcp", &headers, &body)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// Sends a request and returns `result`, panicking on an error response.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        let resp = self.send(method, params).await;
        let v = resp.json();
        assert!(v.get("error").is_none(), "{method} failed: {}", resp.body);
        v["result"].clone()
    }

    /// Sends a request and returns `(http status, error object)`.
    pub async fn error(&self, method: &str, params: Value) -> (u16, Value) {
        let resp = self.send(method, params).await;
        let v = resp.json();
        assert!(
            v.get("error").is_some(),
            "{method} unexpectedly succeeded: {}",
            resp.body
        );
        (resp.status, v["error"].clone())
    }

    /// `tasks/get` of `task`: its snapshot.
    pub async fn get(&self, task: &str) -> Value {
        self.call("tasks/get", json!({"taskId": task})).await
    }

    /// Polls `tasks/get` until `pred` holds (20 s at most).
    pub async fn until(&self, task: &str, pred: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..2000 {
            let t = self.get(task).await;
            if pred(&t) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "task {task} never reached the expected state: {}",
            self.get(task).await
        );
    }

    /// Polls `tasks/get` until the task's status is `status` (20 s at most).
    pub async fn until_status(&self, task: &str, status: &str) -> Value {
        self.until(task, |t| t["status"] == status).await
    }

    /// Calls `tool` with `arguments`, checks that it answered with a task
    /// (`resultType: "task"`) and returns the task's id.
    pub async fn start_task(&self, tool: &str, arguments: Value) -> String {
        let r = self
            .call("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        assert_eq!(
            r["resultType"], "task",
            "tools/call {tool} did not create a task: {r}"
        );
        r["taskId"].as_str().expect("a taskId").to_owned()
    }

    /// Polls `tasks/get` until the task lists `n` subtasks (20 s at most);
    /// returns their ids.
    pub async fn until_children(&self, task: &str, n: usize) -> Vec<String> {
        child_ids(&self.until(task, |t| child_ids(t).len() == n).await)
    }

    /// Opens `subscriptions/listen` and returns the SSE data messages (JSON)
    /// as they arrive, until the stream ends.
    pub async fn listen(&self, task_ids: &[&str]) -> tokio::sync::mpsc::Receiver<Value> {
        let mut events = self
            .stream(
                "subscriptions/listen",
                json!({"notifications": {"taskIds": task_ids}}),
            )
            .await;
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        tokio::spawn(async move {
            while let Some(v) = events.next_json().await {
                if tx.send(v).await.is_err() {
                    return;
                }
            }
        });
        rx
    }
}
