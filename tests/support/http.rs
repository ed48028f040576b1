//! A minimal HTTP/1.1 client over a real TCP socket, for end-to-end tests
//! of the Streamable HTTP endpoint. Deliberately small: one request per
//! connection (`Connection: close`), JSON or SSE bodies.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A response: status, lowercase headers, body.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
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

/// Sends raw `headers` and `body` to `POST path` (or another method).
pub async fn raw(addr: SocketAddr, method: &str, headers: &[(&str, String)], body: &[u8]) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut head = format!(
        "{method} /mcp HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut buf))
        .await
        .expect("response within 20 s")
        .unwrap();
    parse_response(&buf)
}

fn parse_response(buf: &[u8]) -> HttpResponse {
    let text = String::from_utf8_lossy(buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_owned() };
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

/// The client side of the 2026-07-28 wire for tests.
#[derive(Clone)]
pub struct Client {
    pub addr: SocketAddr,
    pub caps: Value,
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
    pub fn new(addr: SocketAddr, caps: Value) -> Self {
        Client {
            addr,
            caps,
            token: None,
            next_id: std::sync::Arc::new(1.into()),
        }
    }

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

    /// Opens `subscriptions/listen` and returns the SSE data lines as they arrive.
    pub async fn listen(&self, task_ids: &[&str]) -> tokio::sync::mpsc::Receiver<Value> {
        let (headers, body) = self.envelope(
            "subscriptions/listen",
            json!({"notifications": {"taskIds": task_ids}}),
        );
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&body).await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                // Chunked framing lines and SSE fields other than data are skipped.
                if let Some(data) = line.trim_end().strip_prefix("data: ")
                    && let Ok(v) = serde_json::from_str::<Value>(data)
                    && tx.send(v).await.is_err()
                {
                    return;
                }
            }
        });
        rx
    }
}
