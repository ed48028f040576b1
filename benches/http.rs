//! The HTTP benchmark: subtask's server end to end over real loopback HTTP,
//! side by side with a peer server built here from rmcp 3.11 (its
//! Streamable HTTP server, tools backed by its own `TaskManager`), and a
//! bare axum handler as the floor of HTTP and JSON.
//!
//! A load generator in this process (a tokio runtime of its own, 2 worker
//! threads named `loadgen`) opens 64 keep-alive connections (4 for the
//! latency figure) and drives one server at a time with the same requests
//! for both: `tools/call` of a tool whose task completes at once, then
//! `tasks/get` until it shows `completed`; or `tasks/get` on random live
//! tasks. Each server runs on a tokio runtime of its own (2 worker threads,
//! named per server), so the load generator and a server never share a
//! worker; the operating system schedules both over the machine's cores.
//! Its client is a minimal HTTP/1.1 writer and reader over `TcpStream`
//! (requests written in one piece, answers read by `Content-Length`), so
//! the load generator spends as little of the shared CPU as it can.
//!
//! Live tasks are created through each server with a tool whose handler
//! waits until it is cancelled, so they stay `working`.
//!
//! Server CPU is the on-CPU time of the server's own threads, read from
//! `/proc/self/task/<tid>/schedstat` (nanoseconds) before and after each
//! measurement window: its runtime's threads (workers and blocking pool)
//! and, with the SQLite store, the store's writer and syncer threads.
//!
//! Prints one line per figure, numbers only (`name: key=value ...`), and
//! context lines starting with `#`. Run with `cargo bench --bench http`.
//! `SUBTASK_HTTP_ONLY` runs a part: `1k`, `30k`, `100k`, `sqlite`, or
//! `overhead` (the 1k figures of subtask and the axum floor, without the
//! peer); `SUBTASK_HTTP_WINDOW_MS` sets the measurement window (3000).

/// The `subtask` binary's allocator (see `src/main.rs`), so the figures are
/// the server's; `--no-default-features` measures with the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use rmcp::model as r;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use subtask::runtime::{Runtime, RuntimeConfig, TaskError};
use subtask::server::{
    Server, ServerConfig, ServerLimits, TaskSupport, ToolCall, ToolOutcome, ToolSpec, text_result,
};
use subtask::store::{SqliteConfig, SqliteStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The seeded generator of the tests (fixed seeds here: every run picks
/// the same sequence of live tasks).
#[path = "../tests/support/seed.rs"]
mod seed;
/// A fresh directory under the system's temp dir for the SQLite rounds.
#[path = "../tests/support/tempdir.rs"]
mod tempdir;

use seed::Rng;

/// Concurrent client loops (connections) of the throughput figures.
const LOOPS: usize = 64;
/// Concurrent loops of `http_get_latency_*`: light load, so latency, not
/// queueing, is measured.
const LIGHT_LOOPS: usize = 4;
/// Alternating rounds per figure.
const ROUNDS: usize = 2;
/// TTL of every task on both sides: rmcp's default (5 minutes). Every
/// server of this bench lives for less than that, so nothing expires.
const TTL_MS: u64 = 300_000;
/// Live tasks one principal may own (`max_live_tasks_per_principal`,
/// 10,000 by default): raised above the largest live count (100,000). The
/// runtime's running-handler limit stays at its default: a live task's
/// handler waits in `TaskContext::external`, which gives its scheduler
/// slot back.
const LIVE_LIMIT: usize = 200_000;
const PROTOCOL: &str = "2026-07-28";
/// The request `_meta` of the 2026-07-28 wire, with the tasks extension
/// declared (base: neither steer nor pause), the same for both servers.
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

const SUBTASK_THREADS: &str = "srv-subtask";
const RMCP_THREADS: &str = "srv-rmcp";
const AXUM_THREADS: &str = "srv-axum";
const LOADGEN_THREADS: &str = "loadgen";

// ----- measurement helpers ---------------------------------------------------

fn window() -> Duration {
    let ms = std::env::var("SUBTASK_HTTP_WINDOW_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    Duration::from_millis(ms)
}

fn only() -> Option<String> {
    std::env::var("SUBTASK_HTTP_ONLY").ok().filter(|s| !s.is_empty())
}

fn runs(part: &str) -> bool {
    only().is_none_or(|o| o == part)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// On-CPU time of this process's threads whose name starts with one of
/// `prefixes` (`/proc/self/task/<tid>/schedstat`, first field, in ns).
fn threads_cpu(prefixes: &[&str]) -> Duration {
    let mut ns = 0u64;
    let tasks = std::fs::read_dir("/proc/self/task").expect("read /proc/self/task");
    for entry in tasks.flatten() {
        let dir = entry.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        let comm = comm.trim_end();
        if !prefixes.iter().any(|p| comm.starts_with(p)) {
            continue;
        }
        if let Ok(stat) = std::fs::read_to_string(dir.join("schedstat")) {
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .expect("schedstat's first field");
        }
    }
    Duration::from_nanos(ns)
}

/// User and kernel CPU ticks (`/proc/self/task/<tid>/stat`, utime and
/// stime, 1/100 s each) of the threads `threads_cpu` counts: the share of
/// a server's CPU spent in the kernel (its socket calls and wake-ups).
fn threads_ticks(prefixes: &[&str]) -> (u64, u64) {
    let (mut user, mut sys) = (0, 0);
    let tasks = std::fs::read_dir("/proc/self/task").expect("read /proc/self/task");
    for entry in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ...`: the name may hold spaces, so split after ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !prefixes.iter().any(|p| stat[open + 1..close].starts_with(p)) {
            continue;
        }
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // Fields 14 and 15 of the line; the rest starts at field 3.
        user += fields[11].parse::<u64>().expect("utime");
        sys += fields[12].parse::<u64>().expect("stime");
    }
    (user, sys)
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    assert!(!sorted.is_empty(), "no latencies recorded");
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What one workload measured on one server, summed over its rounds.
#[derive(Default)]
struct Tally {
    /// Operations done (tasks created and seen completed, or gets).
    ops: u64,
    /// HTTP requests sent (every `tools/call` and `tasks/get`).
    requests: u64,
    elapsed: Duration,
    cpu: Duration,
    /// The load generator's CPU over the same windows.
    client_cpu: Duration,
    /// The server's user and kernel ticks over the same windows.
    ticks: (u64, u64),
    latencies_us: Vec<u32>,
    rounds: Vec<f64>,
}

impl Tally {
    fn add(&mut self, w: Window) {
        self.rounds.push(w.ops as f64 / w.elapsed.as_secs_f64());
        self.ops += w.ops;
        self.requests += w.requests;
        self.elapsed += w.elapsed;
        self.cpu += w.cpu;
        self.client_cpu += w.client_cpu;
        self.ticks.0 += w.ticks.0;
        self.ticks.1 += w.ticks.1;
        self.latencies_us.extend(w.latencies_us);
    }

    fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// Server CPU per 1,000 requests, in ms.
    fn cpu_per_1k_ms(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e3 / (self.requests as f64 / 1e3)
    }

    /// The share of the server's CPU spent in the kernel, in percent.
    fn kernel_percent(&self) -> f64 {
        let (user, sys) = self.ticks;
        100.0 * sys as f64 / (user + sys).max(1) as f64
    }

    /// The load generator's CPU per 1,000 requests, in ms.
    fn client_cpu_per_1k_ms(&self) -> f64 {
        self.client_cpu.as_secs_f64() * 1e3 / (self.requests as f64 / 1e3)
    }

    fn p(&mut self, p: f64) -> u32 {
        self.latencies_us.sort_unstable();
        percentile(&self.latencies_us, p)
    }

    fn rounds(&self) -> String {
        self.rounds
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

// ----- the load generator's HTTP client --------------------------------------

/// One keep-alive HTTP/1.1 connection to a server's `/mcp`. Requests are
/// written in one piece and answers read by `Content-Length` (or chunks)
/// with byte scans, so the load generator spends little of the CPU the
/// server under test shares with it.
struct Conn {
    stream: TcpStream,
    host: String,
    out: Vec<u8>,
    buf: Vec<u8>,
    body: Vec<u8>,
    next_id: u64,
    requests: u64,
}

/// Every this many task answers a connection also reads in full with
/// serde_json and checks that the scan read the same fields.
const FULL_READ_EVERY: u64 = 32;

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect to the server");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        Conn {
            stream,
            host: addr.to_string(),
            out: Vec::with_capacity(1024),
            buf: Vec::with_capacity(8192),
            body: Vec::with_capacity(4096),
            next_id: 1,
            requests: 0,
        }
    }

    /// POSTs one JSON-RPC request (`params` without the `_meta`, which is
    /// added) with the 2026-07-28 headers and returns the answer's body.
    ///
    /// # Panics
    ///
    /// On any HTTP status but 200, an SSE answer or a broken connection:
    /// the bench measures correct answers only.
    async fn call(&mut self, method: &str, name: &str, params: &str) -> &[u8] {
        let id = self.next_id;
        self.next_id += 1;
        self.requests += 1;
        let mut digits = [0u8; 20];
        let id = decimal(id, &mut digits);
        let body = [
            br#"{"jsonrpc":"2.0","id":"#.as_slice(),
            id,
            br#","method":""#,
            method.as_bytes(),
            br#"","params":{"#,
            params.as_bytes(),
            b",",
            META.as_bytes(),
            b"}}",
        ];
        let length: usize = body.iter().map(|p| p.len()).sum();
        let mut length_digits = [0u8; 20];
        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(b"POST /mcp HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.host.as_bytes());
        out.extend_from_slice(
            b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
              MCP-Protocol-Version: ",
        );
        out.extend_from_slice(PROTOCOL.as_bytes());
        out.extend_from_slice(b"\r\nMcp-Method: ");
        out.extend_from_slice(method.as_bytes());
        out.extend_from_slice(b"\r\nMcp-Name: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\r\nContent-Length: ");
        out.extend_from_slice(decimal(length as u64, &mut length_digits));
        out.extend_from_slice(b"\r\n\r\n");
        for part in body {
            out.extend_from_slice(part);
        }
        self.stream.write_all(&self.out).await.expect("send a request");
        let status = self.read_answer().await;
        assert!(
            status == 200,
            "{method} answered HTTP {status}: {}",
            String::from_utf8_lossy(&self.body)
        );
        &self.body
    }

    /// [`Conn::call`] for an answer that is a task (`CreateTaskResult` or
    /// `GetTaskResult`): its id and status.
    async fn task(&mut self, method: &str, name: &str, params: &str) -> TaskFields<'_> {
        let full_read = self.requests.is_multiple_of(FULL_READ_EVERY);
        let body = self.call(method, name, params).await;
        let task = task_of(body);
        if full_read {
            let full = task_read_in_full(body);
            assert!(
                full.task_id == task.task_id && full.status == task.status,
                "the scan and serde_json read different fields from {}",
                String::from_utf8_lossy(body)
            );
        }
        task
    }

    /// Reads one answer into `self.body`; returns its HTTP status.
    async fn read_answer(&mut self) -> u16 {
        let head_end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await;
        };
        let head = &self.buf[..head_end];
        assert!(
            head.len() > 12 && head.starts_with(b"HTTP/1.1 "),
            "not an HTTP/1.1 answer: {}",
            String::from_utf8_lossy(head)
        );
        let status = head[9..12]
            .iter()
            .fold(0u16, |n, d| n * 10 + u16::from(d.wrapping_sub(b'0')));
        let mut length = None;
        let mut chunked = false;
        let mut at = find(head, b"\r\n").expect("a status line") + 2;
        while at + 2 < head.len() {
            let end = at + find(&head[at..], b"\r\n").expect("a header line");
            let line = &head[at..end];
            at = end + 2;
            let Some(colon) = line.iter().position(|&c| c == b':') else {
                continue;
            };
            let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
            if name.eq_ignore_ascii_case(b"content-length") {
                length = Some(
                    value
                        .iter()
                        .fold(0usize, |n, d| n * 10 + usize::from(d.wrapping_sub(b'0'))),
                );
            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                chunked = value.eq_ignore_ascii_case(b"chunked");
            } else if name.eq_ignore_ascii_case(b"content-type") {
                assert!(
                    !value.starts_with(b"text/event-stream"),
                    "the server answered with an SSE stream, not one JSON message"
                );
            }
        }
        self.body.clear();
        if let Some(len) = length {
            while self.buf.len() < head_end + len {
                self.fill().await;
            }
            self.body.extend_from_slice(&self.buf[head_end..head_end + len]);
            self.buf.drain(..head_end + len);
        } else {
            assert!(chunked, "an answer without Content-Length that is not chunked");
            let mut at = head_end;
            loop {
                let line_end = loop {
                    if let Some(i) = find(&self.buf[at..], b"\r\n") {
                        break at + i;
                    }
                    self.fill().await;
                };
                let size_text = std::str::from_utf8(&self.buf[at..line_end]).expect("a chunk size");
                let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                    .expect("a hex chunk size");
                let data = line_end + 2;
                while self.buf.len() < data + size + 2 {
                    self.fill().await;
                }
                self.body.extend_from_slice(&self.buf[data..data + size]);
                at = data + size + 2;
                if size == 0 {
                    break;
                }
            }
            self.buf.drain(..at);
        }
        status
    }

    async fn fill(&mut self) {
        self.buf.reserve(4096);
        let n = self.stream.read_buf(&mut self.buf).await.expect("read an answer");
        assert!(n > 0, "the server closed the connection");
    }
}

/// `n` in decimal, written into `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut from = 0;
    while let Some(i) = hay[from..].iter().position(|&c| c == first) {
        let at = from + i;
        if hay[at + 1..].starts_with(rest) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The fields of a task answer (`CreateTaskResult` or `GetTaskResult`,
/// both flat on the 2026-07-28 wire) the load generator checks.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    result: Option<TaskFields<'a>>,
}

#[derive(Deserialize)]
struct TaskFields<'a> {
    #[serde(rename = "taskId", borrow)]
    task_id: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
}

/// The id and status of the task in a result answer, by a scan for the
/// first `"taskId":"…"` and `"status":"…"` after `"result":{` (both servers
/// write the task's own fields before its payload); every
/// [`FULL_READ_EVERY`]th answer is also read in full and compared.
///
/// # Panics
///
/// When the answer is not a result with a task (an error answer, say).
fn task_of(body: &[u8]) -> TaskFields<'_> {
    let fail = || -> ! { panic!("not a task result: {}", String::from_utf8_lossy(body)) };
    let result = find(body, br#""result":{"#).unwrap_or_else(|| fail());
    let string_after = |key: &[u8]| -> Cow<'_, str> {
        let at = result + find(&body[result..], key).unwrap_or_else(|| fail()) + key.len();
        let len = body[at..]
            .iter()
            .position(|&c| c == b'"')
            .unwrap_or_else(|| fail());
        let text = &body[at..at + len];
        assert!(
            !text.contains(&b'\\'),
            "an escaped string in {}",
            String::from_utf8_lossy(body)
        );
        Cow::Borrowed(std::str::from_utf8(text).unwrap_or_else(|_| fail()))
    };
    TaskFields {
        task_id: string_after(br#""taskId":""#),
        status: string_after(br#""status":""#),
    }
}

/// The same fields read with serde_json.
fn task_read_in_full(body: &[u8]) -> TaskFields<'_> {
    let answer: Answer<'_> = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("an unreadable answer ({e}): {}", String::from_utf8_lossy(body)));
    answer
        .result
        .unwrap_or_else(|| panic!("an error answer: {}", String::from_utf8_lossy(body)))
}

fn call_params(tool: &str) -> String {
    format!(r#""name":"{tool}","arguments":{{}}"#)
}

fn get_params(task_id: &str) -> String {
    format!(r#""taskId":"{task_id}""#)
}

// ----- servers -----------------------------------------------------------------

/// A server on a tokio runtime of its own (2 workers, threads named
/// `threads`), listening on a free loopback port.
struct Host {
    rt: Option<tokio::runtime::Runtime>,
    addr: SocketAddr,
    /// Name prefixes of the threads whose CPU is this server's.
    threads: Vec<&'static str>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Host {
    fn cpu(&self) -> Duration {
        threads_cpu(&self.threads)
    }

    fn ticks(&self) -> (u64, u64) {
        threads_ticks(&self.threads)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(10));
        }
    }
}

fn server_runtime(threads: &str) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(threads)
        .enable_all()
        .build()
        .expect("a server runtime")
}

/// Serves `app` (an axum router) on the host's runtime.
fn host_router(
    rt: tokio::runtime::Runtime,
    threads: Vec<&'static str>,
    app: impl FnOnce() -> axum::Router,
) -> Host {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let addr = rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let app = app();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
                .expect("serve");
        });
        addr
    });
    Host {
        rt: Some(rt),
        addr,
        threads,
        shutdown: Some(tx),
    }
}

enum Store {
    Memory,
    Sqlite(std::path::PathBuf),
}

/// subtask's server as `subtask serve` runs it (`subtask::server::http::serve`)
/// with two tools: `quick` (a task that completes at once) and `park` (a
/// task that waits until cancelled).
fn start_subtask(store: &Store) -> Host {
    let rt = server_runtime(SUBTASK_THREADS);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut threads = vec![SUBTASK_THREADS];
    let addr = rt.block_on(async {
        let config = RuntimeConfig::default();
        let runtime = match store {
            Store::Memory => Runtime::new(config),
            Store::Sqlite(path) => {
                let store = SqliteStore::open(SqliteConfig::new(path)).expect("open the SQLite store");
                Runtime::with_store(config, Arc::new(store))
            }
        };
        let server_config = ServerConfig {
            limits: ServerLimits {
                max_live_tasks_per_principal: LIVE_LIMIT,
                ..ServerLimits::default()
            },
            default_task_ttl_ms: Some(TTL_MS),
            ..ServerConfig::default()
        };
        let schema = serde_json::json!({"type": "object"});
        let server =
            Server::builder(runtime, server_config)
                .tool(
                    ToolSpec::new(
                        "quick",
                        "A task that completes at once.",
                        schema.clone(),
                        TaskSupport::Required,
                    ),
                    |_call: ToolCall| async move {
                        ToolOutcome::task(|_ctx| async move { Ok(text_result("ok")) })
                    },
                )
                .tool(
                    ToolSpec::new(
                        "park",
                        "A task that waits until it is cancelled.",
                        schema,
                        TaskSupport::Required,
                    ),
                    |_call: ToolCall| async move {
                        ToolOutcome::task(|ctx| async move {
                            // Waiting outside the runtime: the slot goes back.
                            ctx.external(ctx.cancelled()).await;
                            Err(TaskError::Interrupted.into())
                        })
                    },
                )
                .build();
        server.recover().await.expect("recover (an empty store)");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        tokio::spawn(async move {
            subtask::server::http::serve(server, listener, async move {
                let _ = rx.await;
            })
            .await
            .expect("serve");
        });
        addr
    });
    if matches!(store, Store::Sqlite(_)) {
        threads.extend(["subtask-store", "subtask-sync"]);
    }
    Host {
        rt: Some(rt),
        addr,
        threads,
        shutdown: Some(tx),
    }
}

/// The peer: rmcp 3.11's Streamable HTTP server with a handler whose task
/// tools are backed by rmcp's `TaskManager`, wired as rmcp's own task
/// example (`tests/test_task.rs` of rmcp 3.11) wires it: `call_tool`
/// spawns on the manager when the client declared the tasks extension and
/// answers `CreateTaskResult`; `tasks/get`, `tasks/update` and
/// `tasks/cancel` go to the manager.
#[derive(Clone)]
struct Peer {
    tasks: TaskManager,
}

impl rmcp::ServerHandler for Peer {
    async fn call_tool(
        &self,
        request: r::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<r::CallToolResponse, rmcp::ErrorData> {
        let tasks_declared = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if !tasks_declared {
            return Err(rmcp::ErrorData::invalid_request(
                "this tool runs only as a task: declare the tasks extension",
                None,
            ));
        }
        let task = match request.name.as_ref() {
            "quick" => self.tasks.spawn(TaskOptions::new(), |_ctx| {
                Box::pin(async move { Ok(r::CallToolResult::success(vec![r::ContentBlock::text("ok")])) })
            }),
            "park" => self.tasks.spawn(TaskOptions::new(), |ctx| {
                Box::pin(async move {
                    ctx.cancelled().await;
                    Err(TaskExit::Cancelled)
                })
            }),
            other => {
                return Err(rmcp::ErrorData::invalid_params(
                    format!("unknown tool {other:?}"),
                    None,
                ));
            }
        };
        Ok(r::CallToolResponse::Task(r::CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: r::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<r::GetTaskResult, rmcp::ErrorData> {
        Ok(r::GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: r::UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        self.tasks.update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: r::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    fn get_info(&self) -> r::ServerConfig {
        r::ServerConfig::new(
            r::ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }
}

fn start_rmcp() -> Host {
    let rt = server_runtime(RMCP_THREADS);
    host_router(rt, vec![RMCP_THREADS], || {
        let peer = Peer {
            tasks: TaskManager::new(),
        };
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true);
        let service = StreamableHttpService::new(
            move || Ok(peer.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        axum::Router::new().nest_service("/mcp", service)
    })
}

/// The floor: an axum handler on the same kind of runtime that reads the
/// request body and answers `body` (a real `tasks/get` answer of subtask's,
/// so the same size) as `application/json`.
fn start_axum(body: Bytes) -> Host {
    let rt = server_runtime(AXUM_THREADS);
    host_router(rt, vec![AXUM_THREADS], move || {
        axum::Router::new().route(
            "/mcp",
            axum::routing::post(move |request: Bytes| {
                let body = body.clone();
                async move {
                    std::hint::black_box(request);
                    ([(axum::http::header::CONTENT_TYPE, "application/json")], body)
                }
            }),
        )
    })
}

// ----- workloads -----------------------------------------------------------------

/// Connections of the load generator to one server.
struct Pool {
    conns: Vec<Conn>,
}

impl Pool {
    fn open(lg: &tokio::runtime::Runtime, addr: SocketAddr, n: usize) -> Pool {
        let conns = lg.block_on(async move {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(Conn::open(addr).await);
            }
            v
        });
        Pool { conns }
    }
}

#[derive(Default)]
struct LoopStats {
    ops: u64,
    latencies_us: Vec<u32>,
}

struct Window {
    ops: u64,
    requests: u64,
    elapsed: Duration,
    cpu: Duration,
    client_cpu: Duration,
    ticks: (u64, u64),
    latencies_us: Vec<u32>,
}

type LoopFuture = std::pin::Pin<Box<dyn std::future::Future<Output = (Conn, LoopStats)> + Send>>;

/// Runs one loop per connection of `pool` (`loops` of them) on the load
/// generator until `length` has passed, and measures: operations, requests,
/// the time until the last loop finished its last operation, and the
/// server's CPU over that time.
fn measure(
    lg: &tokio::runtime::Runtime,
    host: &Host,
    pool: &mut Pool,
    loops: usize,
    length: Duration,
    body: impl Fn(usize, Conn, Instant) -> LoopFuture,
) -> Window {
    assert!(pool.conns.len() >= loops);
    let conns: Vec<Conn> = pool.conns.drain(..loops).collect();
    let requests0: u64 = conns.iter().map(|c| c.requests).sum();
    let cpu0 = host.cpu();
    let ticks0 = host.ticks();
    let client0 = threads_cpu(&[LOADGEN_THREADS]);
    let t0 = Instant::now();
    let deadline = t0 + length;
    let futures: Vec<LoopFuture> = conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| body(i, c, deadline))
        .collect();
    let results = lg.block_on(async move {
        let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.await.expect("a client loop panicked"));
        }
        out
    });
    let elapsed = t0.elapsed();
    let cpu = host.cpu().saturating_sub(cpu0);
    let client_cpu = threads_cpu(&[LOADGEN_THREADS]).saturating_sub(client0);
    let ticks1 = host.ticks();
    let ticks = (
        ticks1.0.saturating_sub(ticks0.0),
        ticks1.1.saturating_sub(ticks0.1),
    );
    let mut w = Window {
        ops: 0,
        requests: 0,
        elapsed,
        cpu,
        client_cpu,
        ticks,
        latencies_us: Vec::new(),
    };
    for (conn, stats) in results {
        w.ops += stats.ops;
        w.latencies_us.extend(stats.latencies_us);
        w.requests += conn.requests;
        pool.conns.push(conn);
    }
    w.requests -= requests0;
    w
}

/// `tools/call` of `quick`, then `tasks/get` until it shows `completed`.
fn call_complete_loop(gets: Arc<AtomicUsize>) -> impl Fn(usize, Conn, Instant) -> LoopFuture {
    move |_, mut conn, deadline| {
        let gets = gets.clone();
        Box::pin(async move {
            let mut stats = LoopStats::default();
            let call = call_params("quick");
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let seed = conn.task("tools/call", "quick", &call).await;
                assert_eq!(seed.status, "working", "a new task's seed state");
                let id = seed.task_id.into_owned();
                let get = get_params(&id);
                loop {
                    gets.fetch_add(1, Ordering::Relaxed);
                    let task = conn.task("tasks/get", &id, &get).await;
                    assert_eq!(task.task_id, id.as_str());
                    match task.status.as_ref() {
                        "completed" => break,
                        "working" => {}
                        other => panic!("task {id} is {other}"),
                    }
                }
                stats.latencies_us.push(t0.elapsed().as_micros() as u32);
                stats.ops += 1;
            }
            (conn, stats)
        })
    }
}

/// `tasks/get` on random tasks of `ids` (live: each must answer `working`).
fn get_live_loop(ids: Arc<Vec<String>>, seed: u64) -> impl Fn(usize, Conn, Instant) -> LoopFuture {
    move |i, mut conn, deadline| {
        let ids = ids.clone();
        let mut rng = Rng::new(seed ^ ((i as u64) << 32));
        Box::pin(async move {
            let mut stats = LoopStats::default();
            while Instant::now() < deadline {
                let id = &ids[rng.below(ids.len())];
                let get = get_params(id);
                let t0 = Instant::now();
                let task = conn.task("tasks/get", id, &get).await;
                stats.latencies_us.push(t0.elapsed().as_micros() as u32);
                assert_eq!(task.task_id, id.as_str());
                assert_eq!(task.status, "working", "a live task");
                stats.ops += 1;
            }
            (conn, stats)
        })
    }
}

/// The same requests as [`get_live_loop`] against the bare handler, whose
/// answer is fixed: checked to be the expected bytes instead.
fn bare_loop(
    ids: Arc<Vec<String>>,
    expected: Bytes,
    seed: u64,
) -> impl Fn(usize, Conn, Instant) -> LoopFuture {
    move |i, mut conn, deadline| {
        let ids = ids.clone();
        let expected = expected.clone();
        let mut rng = Rng::new(seed ^ ((i as u64) << 32));
        Box::pin(async move {
            let mut stats = LoopStats::default();
            while Instant::now() < deadline {
                let id = &ids[rng.below(ids.len())];
                let get = get_params(id);
                let t0 = Instant::now();
                let body = conn.call("tasks/get", id, &get).await;
                stats.latencies_us.push(t0.elapsed().as_micros() as u32);
                assert_eq!(body, &expected[..]);
                stats.ops += 1;
            }
            (conn, stats)
        })
    }
}

/// Creates `n` live tasks (`park`) through the server with 64 loops;
/// returns their ids and how long it took.
fn prefill(lg: &tokio::runtime::Runtime, pool: &mut Pool, n: usize) -> (Vec<String>, Duration) {
    let t0 = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let conns: Vec<Conn> = pool.conns.drain(..).collect();
    let results = lg.block_on(async move {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut conn| {
                let next = next.clone();
                tokio::spawn(async move {
                    let call = call_params("park");
                    let mut ids = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        let seed = conn.task("tools/call", "park", &call).await;
                        assert_eq!(seed.status, "working");
                        ids.push(seed.task_id.into_owned());
                    }
                    (conn, ids)
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("a prefill loop panicked"));
        }
        out
    });
    let mut ids = Vec::with_capacity(n);
    for (conn, mut v) in results {
        ids.append(&mut v);
        pool.conns.push(conn);
    }
    assert_eq!(ids.len(), n);
    (ids, t0.elapsed())
}

/// A `tasks/get` answer of `host` for `id`, as bytes.
fn get_answer(lg: &tokio::runtime::Runtime, pool: &mut Pool, id: &str) -> Bytes {
    let conn = &mut pool.conns[0];
    lg.block_on(async { Bytes::copy_from_slice(conn.call("tasks/get", id, &get_params(id)).await) })
}

// ----- the figures -------------------------------------------------------------

/// One server under test at one scale: its host, connections and live tasks.
struct Side {
    host: Host,
    pool: Pool,
    ids: Arc<Vec<String>>,
    call_complete: Tally,
    /// Tasks completed by call-complete windows, warm-ups included.
    completed: u64,
    call_gets: Arc<AtomicUsize>,
    get_live: Tally,
    light: Tally,
}

impl Side {
    fn new(lg: &tokio::runtime::Runtime, name: &'static str, host: Host, live: usize) -> Side {
        let mut pool = Pool::open(lg, host.addr, LOOPS);
        let (ids, took) = prefill(lg, &mut pool, live);
        println!(
            "# {name}: {live} live tasks created through the server in {:.1} s ({:.0} calls/s)",
            took.as_secs_f64(),
            live as f64 / took.as_secs_f64()
        );
        Side {
            host,
            pool,
            ids: Arc::new(ids),
            call_complete: Tally::default(),
            completed: 0,
            call_gets: Arc::new(AtomicUsize::new(0)),
            get_live: Tally::default(),
            light: Tally::default(),
        }
    }

    fn call_complete(&mut self, lg: &tokio::runtime::Runtime, length: Duration, record: bool) {
        let gets = if record {
            self.call_gets.clone()
        } else {
            Arc::new(AtomicUsize::new(0))
        };
        let w = measure(
            lg,
            &self.host,
            &mut self.pool,
            LOOPS,
            length,
            call_complete_loop(gets),
        );
        self.completed += w.ops;
        if record {
            self.call_complete.add(w);
        }
    }

    fn get_live(&mut self, lg: &tokio::runtime::Runtime, length: Duration, loops: usize, record: bool) {
        let seed =
            0x5eed ^ self.ids.len() as u64 ^ ((self.get_live.rounds.len() + self.light.rounds.len()) as u64);
        let w = measure(
            lg,
            &self.host,
            &mut self.pool,
            loops,
            length,
            get_live_loop(self.ids.clone(), seed),
        );
        if record {
            if loops == LOOPS {
                self.get_live.add(w);
            } else {
                self.light.add(w);
            }
        }
    }

    fn gets_per_task(&self) -> f64 {
        self.call_gets.load(Ordering::Relaxed) as f64 / self.call_complete.ops as f64
    }
}

fn warm_up() -> Duration {
    (window() / 6).max(Duration::from_millis(200))
}

fn print_call_complete(name: &str, s: &mut Side, peer: Option<&mut Side>) {
    let (p50, p99) = (s.call_complete.p(0.50), s.call_complete.p(0.99));
    let mut line = format!("{name}: subtask={:.0}", s.call_complete.rate());
    if let Some(peer) = peer {
        line += &format!(
            " rmcp={:.0} ratio={:.1}",
            peer.call_complete.rate(),
            s.call_complete.rate() / peer.call_complete.rate()
        );
        println!(
            "# {name}: rmcp rounds {} tasks/s, p50_us={} p99_us={}, {:.2} gets per task, server CPU {:.1} ms \
             per 1k requests ({:.0}% in the kernel)",
            peer.call_complete.rounds(),
            peer.call_complete.p(0.50),
            peer.call_complete.p(0.99),
            peer.gets_per_task(),
            peer.call_complete.cpu_per_1k_ms(),
            peer.call_complete.kernel_percent()
        );
    }
    println!(
        "# {name}: subtask rounds {} tasks/s, {:.2} gets per task, server CPU {:.1} ms per 1k requests \
         ({:.0}% in the kernel), load generator CPU {:.1} ms per 1k requests",
        s.call_complete.rounds(),
        s.gets_per_task(),
        s.call_complete.cpu_per_1k_ms(),
        s.call_complete.kernel_percent(),
        s.call_complete.client_cpu_per_1k_ms()
    );
    println!("{line} p50_us={p50} p99_us={p99}");
}

fn print_get_live(name: &str, s: &mut Side, peer: Option<&mut Side>) {
    let (p50, p99) = (s.get_live.p(0.50), s.get_live.p(0.99));
    let mut line = format!(
        "{name}: subtask={:.0} p50_us={p50} p99_us={p99}",
        s.get_live.rate()
    );
    if let Some(peer) = peer {
        line += &format!(
            " rmcp={:.0} ratio={:.1}",
            peer.get_live.rate(),
            s.get_live.rate() / peer.get_live.rate()
        );
        println!(
            "# {name}: rmcp rounds {} gets/s, p50_us={} p99_us={}, server CPU {:.1} ms per 1k requests \
             ({:.0}% in the kernel)",
            peer.get_live.rounds(),
            peer.get_live.p(0.50),
            peer.get_live.p(0.99),
            peer.get_live.cpu_per_1k_ms(),
            peer.get_live.kernel_percent()
        );
    }
    println!(
        "# {name}: subtask rounds {} gets/s, server CPU {:.1} ms per 1k requests ({:.0}% in the kernel), \
         load generator CPU {:.1} ms per 1k requests",
        s.get_live.rounds(),
        s.get_live.cpu_per_1k_ms(),
        s.get_live.kernel_percent(),
        s.get_live.client_cpu_per_1k_ms()
    );
    println!("{line}");
}

/// The figures at one scale with the in-memory store, subtask against
/// rmcp (when `with_peer`) in alternating rounds; at 1k also the CPU
/// figures and the bare handler.
fn memory_scale(lg: &tokio::runtime::Runtime, live: usize, with_peer: bool, label: &str) {
    let length = window();
    let mut sub = Side::new(lg, "subtask", start_subtask(&Store::Memory), live);
    let mut peer = with_peer.then(|| Side::new(lg, "rmcp", start_rmcp(), live));
    let is_1k = live == 1000;
    let mut bare = if is_1k {
        let sample = get_answer(lg, &mut sub.pool, &sub.ids[0]);
        println!(
            "# bare axum handler: answers a fixed {} byte body (a real tasks/get answer of subtask's)",
            sample.len()
        );
        let host = start_axum(sample.clone());
        let pool = Pool::open(lg, host.addr, LOOPS);
        Some((host, pool, sample, Tally::default()))
    } else {
        None
    };
    // The tasks/get rounds first, while each server holds its live tasks
    // only; then the call-complete rounds, whose completed tasks each
    // server keeps for their TTL. Each part starts with an unrecorded
    // warm-up of every server; who goes first alternates by round.
    sub.get_live(lg, warm_up(), LOOPS, false);
    if let Some(p) = peer.as_mut() {
        p.get_live(lg, warm_up(), LOOPS, false);
    }
    if let Some((host, pool, sample, _)) = bare.as_mut() {
        measure(
            lg,
            host,
            pool,
            LOOPS,
            warm_up(),
            bare_loop(sub.ids.clone(), sample.clone(), 1),
        );
    }
    let orders: [[bool; 2]; 2] = [[true, false], [false, true]];
    for round in 0..ROUNDS {
        for first_is_sub in orders[round % 2] {
            if first_is_sub {
                sub.get_live(lg, length, LOOPS, true);
                if let Some((host, pool, sample, tally)) = bare.as_mut() {
                    let seed = 0xba5e ^ round as u64;
                    tally.add(measure(
                        lg,
                        host,
                        pool,
                        LOOPS,
                        length,
                        bare_loop(sub.ids.clone(), sample.clone(), seed),
                    ));
                }
            } else if let Some(p) = peer.as_mut() {
                p.get_live(lg, length, LOOPS, true);
            }
        }
    }
    sub.call_complete(lg, warm_up(), false);
    if let Some(p) = peer.as_mut() {
        p.call_complete(lg, warm_up(), false);
    }
    for round in 0..ROUNDS {
        for first_is_sub in orders[round % 2] {
            if first_is_sub {
                sub.call_complete(lg, length, true);
            } else if let Some(p) = peer.as_mut() {
                p.call_complete(lg, length, true);
            }
        }
    }
    println!(
        "# http_call_complete_{label}: completed tasks are kept for their TTL on both sides: at the end \
         subtask held {live} live and {} completed tasks{}",
        sub.completed,
        peer.as_ref()
            .map(|p| format!(", rmcp {live} live and {} completed", p.completed))
            .unwrap_or_default()
    );
    print_call_complete(&format!("http_call_complete_{label}"), &mut sub, peer.as_mut());
    print_get_live(&format!("http_get_live_{label}"), &mut sub, peer.as_mut());
    if let Some((_, _, _, mut tally)) = bare {
        let sub_get = sub.get_live.cpu_per_1k_ms();
        let sub_call = sub.call_complete.cpu_per_1k_ms();
        let axum = tally.cpu_per_1k_ms();
        println!(
            "# bare axum handler: rounds {} requests/s, p50_us={} p99_us={}, server CPU {:.2} ms per 1k \
             requests ({:.0}% in the kernel), load generator CPU {:.1} ms per 1k requests",
            tally.rounds(),
            tally.p(0.50),
            tally.p(0.99),
            tally.cpu_per_1k_ms(),
            tally.kernel_percent(),
            tally.client_cpu_per_1k_ms()
        );
        println!(
            "# http_cpu_per_1k: server CPU (ms) per 1,000 requests at 1k live: tasks/get \
             (get_ms) and the call-complete mix (call_ms: tools/call and tasks/get)"
        );
        let mut line = format!("http_cpu_per_1k: subtask_get_ms={sub_get:.2} subtask_call_ms={sub_call:.2}");
        if let Some(p) = peer.as_ref() {
            line += &format!(
                " rmcp_get_ms={:.2} rmcp_call_ms={:.2}",
                p.get_live.cpu_per_1k_ms(),
                p.call_complete.cpu_per_1k_ms()
            );
        }
        println!("{line} axum_ms={axum:.2}");
        println!("http_overhead_ratio: {:.2}", sub_get / axum);
    }
}

/// `http_get_live_100k` (64 loops) and `http_get_latency_100k` (4 loops),
/// subtask only: rmcp's `TaskManager` sweeps every task on every call,
/// so filling it with 100,000 tasks through its server would take longer
/// than this whole bench.
fn scale_100k(lg: &tokio::runtime::Runtime, store: &Store, suffix: &str) {
    let length = window();
    let name = match store {
        Store::Memory => "subtask",
        Store::Sqlite(_) => "subtask (SQLite)",
    };
    let mut sub = Side::new(lg, name, start_subtask(store), 100_000);
    sub.get_live(lg, warm_up(), LOOPS, false);
    for _ in 0..ROUNDS {
        sub.get_live(lg, length, LOOPS, true);
        sub.get_live(lg, length, LIGHT_LOOPS, true);
    }
    print_get_live(&format!("http_get_live_100k{suffix}"), &mut sub, None);
    println!(
        "# http_get_latency_100k{suffix}: {LIGHT_LOOPS} loops, rounds {} gets/s, server CPU {:.1} ms per 1k requests",
        sub.light.rounds(),
        sub.light.cpu_per_1k_ms()
    );
    println!(
        "http_get_latency_100k{suffix}: p50_us={} p99_us={}",
        sub.light.p(0.50),
        sub.light.p(0.99)
    );
}

/// The 1k and 30k figures with the durable SQLite store, subtask only.
fn sqlite_scale(lg: &tokio::runtime::Runtime, live: usize, label: &str) {
    let length = window();
    let dir = tempdir::TempDir::new("bench-http");
    let mut sub = Side::new(
        lg,
        "subtask (SQLite)",
        start_subtask(&Store::Sqlite(dir.db())),
        live,
    );
    // As at the in-memory scales: the tasks/get rounds first, then the
    // call-complete rounds.
    sub.get_live(lg, warm_up(), LOOPS, false);
    for _ in 0..ROUNDS {
        sub.get_live(lg, length, LOOPS, true);
    }
    sub.call_complete(lg, warm_up(), false);
    for _ in 0..ROUNDS {
        sub.call_complete(lg, length, true);
    }
    print_call_complete(&format!("http_call_complete_{label}_sqlite"), &mut sub, None);
    print_get_live(&format!("http_get_live_{label}_sqlite"), &mut sub, None);
    if live == 1000 {
        println!(
            "http_cpu_per_1k_sqlite: subtask_get_ms={:.2} subtask_call_ms={:.2}",
            sub.get_live.cpu_per_1k_ms(),
            sub.call_complete.cpu_per_1k_ms()
        );
    }
    drop(sub);
}

/// `SUBTASK_HTTP_ONLY=profile`: a fixed amount of work for an instruction
/// profiler (`valgrind --tool=callgrind --separate-threads=yes`, then the
/// server's threads' files): subtask's server (in memory) with 1,000 live
/// tasks, then 20,000 `tasks/get` of live tasks and 5,000 call-completes
/// from 4 loops (`SUBTASK_HTTP_PROFILE_LIVE`, `SUBTASK_HTTP_PROFILE_GETS`,
/// `SUBTASK_HTTP_PROFILE_CALLS`).
fn profile(lg: &tokio::runtime::Runtime) {
    let count = |var: &str, default: usize| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let gets = count("SUBTASK_HTTP_PROFILE_GETS", 20_000);
    let calls = count("SUBTASK_HTTP_PROFILE_CALLS", 5_000);
    let live = count("SUBTASK_HTTP_PROFILE_LIVE", 1000);
    let mut sub = Side::new(lg, "subtask", start_subtask(&Store::Memory), live);
    // `SUBTASK_HTTP_PROFILE_TARGET=axum`: the same gets against the bare
    // handler instead (its answer: a real tasks/get answer of subtask's).
    if std::env::var("SUBTASK_HTTP_PROFILE_TARGET").as_deref() == Ok("axum") {
        let sample = get_answer(lg, &mut sub.pool, &sub.ids[0]);
        let host = start_axum(sample.clone());
        let mut pool = Pool::open(lg, host.addr, LIGHT_LOOPS);
        let per_loop = gets / LIGHT_LOOPS;
        let ids = sub.ids.clone();
        let cpu0 = host.cpu();
        let conns: Vec<Conn> = pool.conns.drain(..).collect();
        let requests: u64 = lg.block_on(async move {
            let mut handles = Vec::new();
            for (i, mut conn) in conns.into_iter().enumerate() {
                let ids = ids.clone();
                let sample = sample.clone();
                handles.push(tokio::spawn(async move {
                    let mut rng = Rng::new(0x9f0f ^ i as u64);
                    for _ in 0..per_loop {
                        let id = &ids[rng.below(ids.len())];
                        assert_eq!(conn.call("tasks/get", id, &get_params(id)).await, &sample[..]);
                    }
                    conn.requests
                }));
            }
            let mut n = 0;
            for h in handles {
                n += h.await.expect("a profile loop panicked");
            }
            n
        });
        println!(
            "# profile (bare axum): {requests} requests, server CPU {:.1} ms",
            host.cpu().saturating_sub(cpu0).as_secs_f64() * 1e3
        );
        return;
    }
    let cpu0 = sub.host.cpu();
    let t0 = Instant::now();
    let conns: Vec<Conn> = sub.pool.conns.drain(..LIGHT_LOOPS).collect();
    let ids = sub.ids.clone();
    let conns = lg.block_on(async move {
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut conn)| {
                let ids = ids.clone();
                tokio::spawn(async move {
                    let mut rng = Rng::new(0x9f0f ^ i as u64);
                    for _ in 0..gets / LIGHT_LOOPS {
                        let id = &ids[rng.below(ids.len())];
                        let task = conn.task("tasks/get", id, &get_params(id)).await;
                        assert_eq!(task.status, "working");
                    }
                    let call = call_params("quick");
                    for _ in 0..calls / LIGHT_LOOPS {
                        let id = conn.task("tools/call", "quick", &call).await.task_id.into_owned();
                        while conn.task("tasks/get", &id, &get_params(&id)).await.status != "completed" {}
                    }
                    conn
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("a profile loop panicked"));
        }
        out
    });
    let requests: u64 = conns.iter().map(|c| c.requests).sum();
    println!(
        "# profile: {requests} requests ({gets} gets, {calls} call-completes) in {:.1} s, server CPU {:.1} ms",
        t0.elapsed().as_secs_f64(),
        sub.host.cpu().saturating_sub(cpu0).as_secs_f64() * 1e3
    );
}

fn main() {
    let started = Instant::now();
    println!(
        "# http bench: {} cores, load average {}, window {} ms, {ROUNDS} alternating rounds per figure",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average(),
        window().as_millis()
    );
    println!(
        "# load generator: tokio, 2 workers (threads `loadgen`), {LOOPS} keep-alive HTTP/1.1 connections \
         ({LIGHT_LOOPS} for http_get_latency_*); each server on a tokio runtime of its own, 2 workers"
    );
    println!(
        "# wire: 2026-07-28 on both sides, the native wire of each (subtask's tasks extension; rmcp 3.11's \
         TaskManager implements the same SEP-2663 tasks/get; rmcp serves these requests statelessly, \
         json_response on); the same request bytes go to both"
    );
    println!(
        "# live tasks: `park` (waits until cancelled; on subtask inside ctx.external, which gives the \
         scheduler slot back), created through each server; subtask runs with \
         max_live_tasks_per_principal raised to {LIVE_LIMIT}, max_running at its default; TTL {TTL_MS} ms \
         on both sides (rmcp's default)"
    );
    println!(
        "# server CPU: on-CPU ns of the server's threads from /proc/self/task/<tid>/schedstat \
         (its runtime's workers and blocking threads, plus the SQLite writer and syncer)"
    );
    let lg = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(LOADGEN_THREADS)
        .enable_all()
        .build()
        .expect("the load generator's runtime");
    if only().as_deref() == Some("profile") {
        profile(&lg);
        return;
    }
    if runs("1k") {
        memory_scale(&lg, 1000, true, "1k");
    }
    if only().as_deref() == Some("overhead") {
        memory_scale(&lg, 1000, false, "1k");
    }
    if runs("30k") {
        memory_scale(&lg, 30_000, true, "30k");
    }
    if runs("100k") {
        println!(
            "# http_get_live_100k: rmcp not run: its TaskManager sweeps all tasks on every call, so 100,000 \
             live tasks take minutes to create through it (30,000 already take the time printed above)"
        );
        scale_100k(&lg, &Store::Memory, "");
    }
    if runs("sqlite") {
        println!("# SQLite: full durability (group commit, fsync), a fresh file in a temp dir per scale");
        sqlite_scale(&lg, 1000, "1k");
        sqlite_scale(&lg, 30_000, "30k");
        let dir = tempdir::TempDir::new("bench-http");
        scale_100k(&lg, &Store::Sqlite(dir.db()), "_sqlite");
    }
    println!(
        "# done in {:.0} s, load average {}",
        started.elapsed().as_secs_f64(),
        load_average()
    );
}
