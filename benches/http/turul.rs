//! `SUBTASK_HTTP_ONLY=turul`: turul-mcp as a second peer, with durable
//! task storage on both sides.
//!
//! The peer is `benches/peers/turul` (a Cargo project of its own, so turul
//! is never a dependency of this crate): turul-mcp-server 0.4.5's
//! Streamable HTTP server on its 2025-11-25 lane, where
//! `with_task_storage` serves task-augmented `tools/call`, `tasks/get` and
//! `tasks/result`, with turul-mcp-task-storage on SQLite (a file) or
//! PostgreSQL (a database of the bench's server). This part builds it
//! (`cargo build --release`, target dir `target/turul-peer`), starts it as
//! a child process per scale and measures it against subtask's server on
//! its SQLite store and on its PostgreSQL store (opened as `subtask serve
//! --db postgres://…` opens it), both on the 2025-11-25 tasks wire: the
//! same request bytes to both (`initialize` once per server, its
//! `Mcp-Session-Id`, when the server issues one, on every request of every
//! connection), alternating rounds. Whatever turul cannot do is printed on
//! a `#` line and the part goes on.
//!
//! Server CPU: subtask's threads as in the other parts; the peer's whole
//! process (`/proc/<pid>/task/*/schedstat`), its SQLite connections'
//! threads included. PostgreSQL's own CPU is counted for neither.

#[allow(unused_imports)]
use super::*;

use std::future::Future;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};

/// The wire of this part: turul's durable task storage serves it.
const WIRE: &str = "2025-11-25";
const PEER_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers/turul");
const PEER_TARGET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/turul-peer");
/// The peer's tokio workers: as each server of this bench.
const PEER_THREADS: &str = "2";
/// `params.task` of every `tools/call`: the TTL of the other parts.
const TASK: &str = r#""task":{"ttl":300000}"#;

/// A connection speaking the 2025-11-25 wire: [`Conn`]'s socket, buffers
/// and answer reader, this wire's headers, an SSE answer read to its end
/// (turul answers `tools/call` with one), failures returned, not panicked.
pub(crate) struct LegacyConn {
    pub(crate) conn: Conn,
    pub(crate) session: Option<Arc<str>>,
}

impl LegacyConn {
    /// POSTs `body` (a whole JSON-RPC message); the answer's body, its
    /// SSE stream's last `data:` when it is one.
    async fn post(&mut self, body: &str) -> Result<&[u8], String> {
        self.conn.requests += 1;
        let mut digits = [0u8; 20];
        let out = &mut self.conn.out;
        out.clear();
        out.extend_from_slice(b"POST /mcp HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.conn.host.as_bytes());
        out.extend_from_slice(
            b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
              MCP-Protocol-Version: ",
        );
        out.extend_from_slice(WIRE.as_bytes());
        if let Some(session) = &self.session {
            out.extend_from_slice(b"\r\nMcp-Session-Id: ");
            out.extend_from_slice(session.as_bytes());
        }
        out.extend_from_slice(b"\r\nContent-Length: ");
        out.extend_from_slice(decimal(body.len() as u64, &mut digits));
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(body.as_bytes());
        self.conn
            .stream
            .write_all(&self.conn.out)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let (status, sse) = self.conn.read_answer_framed().await;
        if !(200..300).contains(&status) {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&self.conn.body)
            ));
        }
        if sse {
            let data = last_sse_data(&self.conn.body).ok_or_else(|| {
                format!(
                    "an SSE answer without data: {}",
                    String::from_utf8_lossy(&self.conn.body)
                )
            })?;
            let data = data.to_vec();
            self.conn.body.clear();
            self.conn.body.extend_from_slice(&data);
        }
        Ok(&self.conn.body)
    }

    /// A request (`params` inside `{}`); its answer's body.
    async fn rpc(&mut self, method: &str, params: &str) -> Result<&[u8], String> {
        let id = self.conn.next_id;
        self.conn.next_id += 1;
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params}}}}}"#);
        self.post(&body).await
    }

    /// A request whose answer is a task (`CreateTaskResult` or
    /// `GetTaskResult`): its id and status, read by a scan (every
    /// [`FULL_READ_EVERY`]th also with serde_json and compared).
    async fn task(&mut self, method: &str, params: &str) -> Result<(String, String), String> {
        let full_read = self.conn.requests.is_multiple_of(FULL_READ_EVERY);
        let body = self.rpc(method, params).await?;
        let task = scan_task(body)?;
        if full_read {
            let full = read_task(body)?;
            if full != task {
                return Err(format!(
                    "the scan and serde_json read different fields from {}",
                    String::from_utf8_lossy(body)
                ));
            }
        }
        Ok(task)
    }
}

/// The payload of the last `data:` line of an SSE body.
fn last_sse_data(body: &[u8]) -> Option<&[u8]> {
    body.split(|&c| c == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .map(|d| d.strip_prefix(b" ").unwrap_or(d))
        .map(|d| d.strip_suffix(b"\r").unwrap_or(d))
        .rfind(|d| !d.is_empty())
}

/// The id and status of the task in a result answer: the first `taskId`
/// and `status` after `"result":{` (flat in `GetTaskResult`, inside
/// `task` in `CreateTaskResult`; both servers write no other `status` or
/// `taskId` before them).
fn scan_task(body: &[u8]) -> Result<(String, String), String> {
    let fail = || format!("not a task result: {}", String::from_utf8_lossy(body));
    let result = find(body, br#""result":{"#).ok_or_else(fail)?;
    let string_after = |key: &[u8]| -> Result<String, String> {
        let at = result + find(&body[result..], key).ok_or_else(fail)? + key.len();
        let len = body[at..].iter().position(|&c| c == b'"').ok_or_else(fail)?;
        String::from_utf8(body[at..at + len].to_vec()).map_err(|_| fail())
    };
    Ok((string_after(br#""taskId":""#)?, string_after(br#""status":""#)?))
}

/// The same fields read with serde_json.
fn read_task(body: &[u8]) -> Result<(String, String), String> {
    let fail = || format!("not a task result: {}", String::from_utf8_lossy(body));
    let answer: serde_json::Value = serde_json::from_slice(body).map_err(|_| fail())?;
    let result = answer.get("result").ok_or_else(fail)?;
    let task = result.get("task").unwrap_or(result);
    let field = |k: &str| {
        task.get(k)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .ok_or_else(fail)
    };
    Ok((field("taskId")?, field("status")?))
}

fn call_params_legacy(tool: &str) -> String {
    format!(r#""name":"{tool}","arguments":{{}},{TASK}"#)
}

/// The turul peer, a child process of this bench.
pub(crate) struct PeerProcess {
    child: Child,
    addr: SocketAddr,
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// On-CPU time and (user, kernel) ticks of every thread of process `pid`.
fn process_cpu(pid: u32) -> (Duration, (u64, u64)) {
    let (mut ns, mut user, mut sys) = (0u64, 0u64, 0u64);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (Duration::ZERO, (0, 0));
    };
    for entry in tasks.flatten() {
        let dir = entry.path();
        if let Ok(stat) = std::fs::read_to_string(dir.join("schedstat")) {
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
        if let Ok(stat) = std::fs::read_to_string(dir.join("stat"))
            && let Some(close) = stat.rfind(')')
        {
            let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            user += fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
            sys += fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        }
    }
    (Duration::from_nanos(ns), (user, sys))
}

/// A server of this part.
enum Served {
    Subtask(Host),
    Turul(PeerProcess),
}

impl Served {
    fn addr(&self) -> SocketAddr {
        match self {
            Served::Subtask(h) => h.addr,
            Served::Turul(p) => p.addr,
        }
    }

    fn cpu(&self) -> (Duration, (u64, u64)) {
        match self {
            Served::Subtask(h) => (h.cpu(), h.ticks()),
            Served::Turul(p) => process_cpu(p.child.id()),
        }
    }
}

/// Builds the peer; its binary.
fn build_peer() -> Result<std::path::PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let t0 = Instant::now();
    let out = Command::new(&cargo)
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(format!("{PEER_DIR}/Cargo.toml"))
        .env("CARGO_TARGET_DIR", PEER_TARGET)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(12).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!(
            "`cargo build --release --manifest-path benches/peers/turul/Cargo.toml` failed ({}):\n# {}",
            out.status,
            tail.join("\n# ")
        ));
    }
    println!(
        "# turul: peer built ({:.0} s): {PEER_TARGET}/release/turul-peer",
        t0.elapsed().as_secs_f64()
    );
    Ok(format!("{PEER_TARGET}/release/turul-peer").into())
}

/// Starts the peer on `db` (`sqlite <file>` or `postgres <url>`) and waits
/// for its `listening on <addr>` and its port.
fn start_peer(bin: &std::path::Path, kind: &str, target: &str) -> Result<PeerProcess, String> {
    use std::io::BufRead;
    let mut child = Command::new(bin)
        .args([kind, target, PEER_THREADS])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let stdout = child.stdout.take().expect("piped");
    let mut line = String::new();
    let read = std::io::BufReader::new(stdout).read_line(&mut line);
    let addr = match read
        .ok()
        .and_then(|_| line.trim().strip_prefix("listening on ")?.parse().ok())
    {
        Some(addr) => addr,
        None => {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(format!("the peer did not start ({status}): {line:?}"));
        }
    };
    let peer = PeerProcess { child, addr };
    let t0 = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(format!("the peer does not listen on {addr}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(peer)
}

/// Opens `n` connections to `addr`: `initialize` (2025-11-25) and
/// `notifications/initialized` on the first, then every connection sends
/// the `Mcp-Session-Id` the server issued (if any). Returns them and what
/// the server did.
fn open_session(
    lg: &tokio::runtime::Runtime,
    addr: SocketAddr,
    n: usize,
) -> Result<(Vec<LegacyConn>, String), String> {
    lg.block_on(async move {
        let mut first = LegacyConn {
            conn: Conn::open(addr).await,
            session: None,
        };
        let body = first
            .rpc(
                "initialize",
                &format!(
                    r#""protocolVersion":"{WIRE}","capabilities":{{}},"clientInfo":{{"name":"subtask-http-bench","version":"0"}}"#
                ),
            )
            .await?;
        let answer: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| format!("initialize: {e}"))?;
        let result = answer
            .get("result")
            .ok_or_else(|| format!("initialize: {answer}"))?;
        if result["protocolVersion"] != WIRE {
            return Err(format!("initialize answered {}", result["protocolVersion"]));
        }
        if result["capabilities"]["tasks"]["requests"]["tools"]["call"].is_null() {
            return Err(format!(
                "initialize: no task-augmented tools/call in capabilities.tasks: {}",
                result["capabilities"]
            ));
        }
        let session: Option<Arc<str>> = first.conn.session_header.take().map(Into::into);
        first.session = session.clone();
        first
            .post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await?;
        let mut conns = vec![first];
        for _ in 1..n {
            conns.push(LegacyConn {
                conn: Conn::open(addr).await,
                session: session.clone(),
            });
        }
        let how = match &session {
            Some(_) => "issued an Mcp-Session-Id (sent by every connection)".to_owned(),
            None => "issued no Mcp-Session-Id (stateless)".to_owned(),
        };
        Ok((conns, how))
    })
}

/// One `quick` task to its end and its result through `tasks/result`, one
/// `park` task seen `working`: the answers are the tasks they should be.
async fn check_answers(conn: &mut LegacyConn) -> Result<(), String> {
    let (id, status) = conn.task("tools/call", &call_params_legacy("quick")).await?;
    if status != "working" && status != "completed" {
        return Err(format!("a new quick task is {status}"));
    }
    let t0 = Instant::now();
    loop {
        let (got, status) = conn.task("tasks/get", &get_params(&id)).await?;
        if got != id {
            return Err(format!("tasks/get {id} answered task {got}"));
        }
        match status.as_str() {
            "completed" => break,
            "working" if t0.elapsed() < Duration::from_secs(10) => {}
            other => return Err(format!("the quick task is {other}")),
        }
    }
    let body = conn.rpc("tasks/result", &get_params(&id)).await?;
    let answer: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("tasks/result: {e}"))?;
    let result = &answer["result"];
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    if result["isError"] == true || !text.contains("ok") {
        return Err(format!("tasks/result of a quick task answered {answer}"));
    }
    let (id, status) = conn.task("tools/call", &call_params_legacy("park")).await?;
    let (_, now) = conn.task("tasks/get", &get_params(&id)).await?;
    if status != "working" || now != "working" {
        return Err(format!("a park task is {status}, then {now}"));
    }
    Ok(())
}

/// A server under test at one scale.
struct Durable {
    served: Served,
    conns: Vec<LegacyConn>,
    ids: Arc<Vec<String>>,
    get: Tally,
    call: Tally,
    /// Tasks completed by call-complete windows, warm-ups included.
    completed: u64,
    call_gets: u64,
}

type DurableLoop = Pin<Box<dyn Future<Output = (LegacyConn, LoopStats, Option<String>)> + Send>>;

impl Durable {
    /// Sets up the session, checks the answers, creates `live` parked tasks.
    fn new(
        lg: &tokio::runtime::Runtime,
        name: &'static str,
        served: Served,
        live: usize,
    ) -> Result<Durable, String> {
        let (mut conns, how) = open_session(lg, served.addr(), LOOPS)?;
        lg.block_on(check_answers(&mut conns[0]))?;
        println!(
            "# {name}: initialize {how}; a quick task completed with its result through tasks/result, \
             a park task stays working"
        );
        let t0 = Instant::now();
        let next = Arc::new(AtomicUsize::new(0));
        let results = lg.block_on(async {
            let handles: Vec<_> = conns
                .drain(..)
                .map(|mut conn| {
                    let next = next.clone();
                    tokio::spawn(async move {
                        let call = call_params_legacy("park");
                        let mut ids = Vec::new();
                        while next.fetch_add(1, Ordering::Relaxed) < live {
                            match conn.task("tools/call", &call).await {
                                Ok((id, status)) if status == "working" => ids.push(id),
                                Ok((id, status)) => {
                                    return (conn, ids, Some(format!("a new park task {id} is {status}")));
                                }
                                Err(e) => return (conn, ids, Some(e)),
                            }
                        }
                        (conn, ids, None)
                    })
                })
                .collect();
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.expect("a prefill loop panicked"));
            }
            out
        });
        let mut ids = Vec::with_capacity(live);
        let mut failure = None;
        for (conn, mut v, e) in results {
            ids.append(&mut v);
            conns.push(conn);
            failure = failure.or(e);
        }
        if let Some(e) = failure {
            return Err(format!("creating {live} live tasks (after {}): {e}", ids.len()));
        }
        let took = t0.elapsed();
        println!(
            "# {name}: {live} live tasks created through the server in {:.1} s ({:.0} calls/s)",
            took.as_secs_f64(),
            live as f64 / took.as_secs_f64()
        );
        Ok(Durable {
            served,
            conns,
            ids: Arc::new(ids),
            get: Tally::default(),
            call: Tally::default(),
            completed: 0,
            call_gets: 0,
        })
    }

    /// One measurement window of `body` on every connection.
    fn window(
        &mut self,
        lg: &tokio::runtime::Runtime,
        length: Duration,
        body: impl Fn(usize, LegacyConn, Instant) -> DurableLoop,
    ) -> Result<Window, String> {
        let conns: Vec<LegacyConn> = self.conns.drain(..).collect();
        let requests0: u64 = conns.iter().map(|c| c.conn.requests).sum();
        let (cpu0, ticks0) = self.served.cpu();
        let client0 = threads_cpu(&[LOADGEN_THREADS]);
        let t0 = Instant::now();
        let deadline = t0 + length;
        let futures: Vec<DurableLoop> = conns
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
        let (cpu1, ticks1) = self.served.cpu();
        let mut w = Window {
            ops: 0,
            requests: 0,
            elapsed,
            cpu: cpu1.saturating_sub(cpu0),
            client_cpu: threads_cpu(&[LOADGEN_THREADS]).saturating_sub(client0),
            ticks: (
                ticks1.0.saturating_sub(ticks0.0),
                ticks1.1.saturating_sub(ticks0.1),
            ),
            latencies_us: Vec::new(),
        };
        let mut failure = None;
        for (conn, stats, e) in results {
            w.ops += stats.ops;
            w.latencies_us.extend(stats.latencies_us);
            w.requests += conn.conn.requests;
            self.conns.push(conn);
            failure = failure.or(e);
        }
        w.requests -= requests0;
        match failure {
            Some(e) => Err(e),
            None => Ok(w),
        }
    }

    /// `tasks/get` of random live tasks, every answer the task asked for
    /// and `working`.
    fn get_live(
        &mut self,
        lg: &tokio::runtime::Runtime,
        length: Duration,
        record: bool,
    ) -> Result<(), String> {
        let ids = self.ids.clone();
        let seed = 0x5eed ^ ids.len() as u64 ^ self.get.rounds.len() as u64;
        let w = self.window(lg, length, move |i, mut conn, deadline| {
            let ids = ids.clone();
            let mut rng = Rng::new(seed ^ ((i as u64) << 32));
            Box::pin(async move {
                let mut stats = LoopStats::default();
                while Instant::now() < deadline {
                    let id = &ids[rng.below(ids.len())];
                    let t0 = Instant::now();
                    match conn.task("tasks/get", &get_params(id)).await {
                        Ok((got, status)) if got == *id && status == "working" => {}
                        Ok((got, status)) => {
                            let e = format!("tasks/get {id} answered task {got}, {status}");
                            return (conn, stats, Some(e));
                        }
                        Err(e) => return (conn, stats, Some(e)),
                    }
                    stats.latencies_us.push(t0.elapsed().as_micros() as u32);
                    stats.ops += 1;
                }
                (conn, stats, None)
            })
        })?;
        if record {
            self.get.add(w);
        }
        Ok(())
    }

    /// `tools/call` of `quick` with `params.task`, then `tasks/get` until
    /// it shows `completed`.
    fn call_complete(
        &mut self,
        lg: &tokio::runtime::Runtime,
        length: Duration,
        record: bool,
    ) -> Result<(), String> {
        let gets = Arc::new(AtomicUsize::new(0));
        let counted = gets.clone();
        let w = self.window(lg, length, move |_, mut conn, deadline| {
            let gets = counted.clone();
            Box::pin(async move {
                let mut stats = LoopStats::default();
                let call = call_params_legacy("quick");
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    let id = match conn.task("tools/call", &call).await {
                        Ok((id, status)) if status == "working" || status == "completed" => id,
                        Ok((id, status)) => {
                            return (conn, stats, Some(format!("a new task {id} is {status}")));
                        }
                        Err(e) => return (conn, stats, Some(e)),
                    };
                    let get = get_params(&id);
                    loop {
                        gets.fetch_add(1, Ordering::Relaxed);
                        match conn.task("tasks/get", &get).await {
                            Ok((got, _)) if got != id => {
                                return (conn, stats, Some(format!("tasks/get {id} answered task {got}")));
                            }
                            Ok((_, status)) if status == "completed" => break,
                            Ok((_, status)) if status == "working" => {}
                            Ok((_, status)) => return (conn, stats, Some(format!("task {id} is {status}"))),
                            Err(e) => return (conn, stats, Some(e)),
                        }
                    }
                    stats.latencies_us.push(t0.elapsed().as_micros() as u32);
                    stats.ops += 1;
                }
                (conn, stats, None)
            })
        })?;
        self.completed += w.ops;
        if record {
            self.call_gets += gets.load(Ordering::Relaxed) as u64;
            self.call.add(w);
        }
        Ok(())
    }
}

/// The rounds of one workload: a warm-up of each side, then [`ROUNDS`]
/// alternating rounds (who goes first alternates). A turul failure drops
/// the peer for the rest of the scale (why is returned); subtask's panics.
fn alternate(
    lg: &tokio::runtime::Runtime,
    sub: &mut Durable,
    peer: &mut Option<Durable>,
    why: &mut Option<String>,
    run: impl Fn(&mut Durable, &tokio::runtime::Runtime, Duration, bool) -> Result<(), String>,
) {
    let length = window();
    let sub_run = |s: &mut Durable, length, record| {
        run(s, lg, length, record).unwrap_or_else(|e| panic!("subtask: {e}"));
    };
    let mut peer_run = |peer: &mut Option<Durable>, length, record| {
        if let Some(p) = peer.as_mut()
            && let Err(e) = run(p, lg, length, record)
        {
            *why = Some(e);
            *peer = None;
        }
    };
    sub_run(sub, warm_up(), false);
    peer_run(peer, warm_up(), false);
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            sub_run(sub, length, true);
            peer_run(peer, length, true);
        } else {
            peer_run(peer, length, true);
            sub_run(sub, length, true);
        }
    }
}

/// The figure line of one workload and its context lines.
fn print_figure(
    name: &str,
    unit: &str,
    sub: &mut Tally,
    peer: Option<&mut Tally>,
    why: Option<&str>,
    extra: &str,
) {
    let describe = |who: &str, t: &mut Tally| {
        println!(
            "# {name}: {who} rounds {} {unit}, p50_us={} p99_us={}, server CPU {:.1} ms per 1k requests \
             ({:.0}% in the kernel), load generator CPU {:.1} ms per 1k requests",
            t.rounds(),
            t.p(0.50),
            t.p(0.99),
            t.cpu_per_1k_ms(),
            t.kernel_percent(),
            t.client_cpu_per_1k_ms()
        );
    };
    describe("subtask", sub);
    if !extra.is_empty() {
        println!("# {name}: {extra}");
    }
    match peer {
        Some(p) if p.ops > 0 => {
            describe("turul", p);
            println!(
                "{name}: subtask={:.0} turul={:.0} ratio={:.1}",
                sub.rate(),
                p.rate(),
                sub.rate() / p.rate()
            );
        }
        _ => {
            println!(
                "# {name}: turul not measured: {}",
                why.unwrap_or("it completed no operation")
            );
            println!("{name}: subtask={:.0}", sub.rate());
        }
    }
}

/// Where the PostgreSQL rounds' databases come from.
enum PgSource {
    /// `SUBTASK_TEST_PG`'s server (`scripts/pg.sh`): fresh databases,
    /// dropped after their scale.
    External,
    /// A server started here (`tests/support/pg_server.rs`).
    Own(pg_server::PgServer),
}

/// A fresh database on the PostgreSQL server, kept while the value lives.
enum PgDatabase {
    Dropped(pg::Database),
    Kept(String),
}

impl PgDatabase {
    fn url(&self) -> &str {
        match self {
            PgDatabase::Dropped(d) => d.url(),
            PgDatabase::Kept(url) => url,
        }
    }
}

impl PgSource {
    fn database(&self) -> Result<PgDatabase, String> {
        static N: AtomicUsize = AtomicUsize::new(0);
        match self {
            PgSource::External => Ok(PgDatabase::Dropped(pg::database())),
            PgSource::Own(server) => server
                .create_database(&format!("bench_http_{}", N.fetch_add(1, Ordering::Relaxed)))
                .map(PgDatabase::Kept),
        }
    }
}

/// Which store, which scale.
#[derive(Clone, Copy)]
enum Db {
    Sqlite,
    Postgres,
}

/// The figures at one scale on one kind of store: subtask against turul,
/// alternating.
fn durable_scale(
    lg: &tokio::runtime::Runtime,
    peer_bin: Result<&std::path::Path, &str>,
    db: Db,
    pg: Option<&PgSource>,
    live: usize,
    label: &str,
) {
    let suffix = match db {
        Db::Sqlite => "sqlite",
        Db::Postgres => "pg",
    };
    let dir = tempdir::TempDir::new("bench-http-durable");
    let mut databases = Vec::new();
    let mut target = |who: &str| -> Result<String, String> {
        match db {
            Db::Sqlite => Ok(dir.0.join(format!("{who}.db")).to_string_lossy().into_owned()),
            Db::Postgres => {
                let d = pg.expect("a PostgreSQL source").database()?;
                let url = d.url().to_owned();
                databases.push(d);
                Ok(url)
            }
        }
    };
    let sub_target = target("subtask").unwrap_or_else(|e| panic!("a database for subtask: {e}"));
    let store = match db {
        Db::Sqlite => Store::Sqlite(sub_target.into()),
        Db::Postgres => Store::Postgres(sub_target),
    };
    let mut sub = Durable::new(lg, "subtask", Served::Subtask(start_subtask(&store)), live)
        .unwrap_or_else(|e| panic!("subtask: {e}"));
    let mut why = None;
    let mut peer = match peer_bin {
        Err(e) => {
            why = Some(e.to_owned());
            None
        }
        Ok(bin) => {
            let kind = match db {
                Db::Sqlite => "sqlite",
                Db::Postgres => "postgres",
            };
            let started = target("turul")
                .and_then(|t| start_peer(bin, kind, &t))
                .and_then(|p| Durable::new(lg, "turul", Served::Turul(p), live));
            match started {
                Ok(p) => Some(p),
                Err(e) => {
                    why = Some(e);
                    None
                }
            }
        }
    };
    // As the rmcp rounds: tasks/get first, while each server holds its
    // live tasks only; then call-complete (at 1k), whose completed tasks
    // each server keeps for their TTL.
    alternate(lg, &mut sub, &mut peer, &mut why, |s, lg, l, r| {
        s.get_live(lg, l, r)
    });
    let get_name = format!("http_durable_get_{label}_{suffix}");
    let get_why = why.clone();
    let mut get_tally = peer.as_mut().map(|p| std::mem::take(&mut p.get));
    if live == 1000 {
        alternate(lg, &mut sub, &mut peer, &mut why, |s, lg, l, r| {
            s.call_complete(lg, l, r)
        });
        let name = format!("http_durable_call_complete_{label}_{suffix}");
        let gets_per_task = |d: &Durable| d.call_gets as f64 / d.call.ops.max(1) as f64;
        let extra = format!(
            "gets per task: subtask {:.2}{}; completed tasks are kept for their TTL: at the end subtask \
             held {live} live and {} completed{}",
            gets_per_task(&sub),
            peer.as_ref()
                .map(|p| format!(", turul {:.2}", gets_per_task(p)))
                .unwrap_or_default(),
            sub.completed,
            peer.as_ref()
                .map(|p| format!(", turul {live} live and {} completed", p.completed))
                .unwrap_or_default()
        );
        let mut peer_call = peer.as_mut().map(|p| std::mem::take(&mut p.call));
        print_figure(
            &name,
            "tasks/s",
            &mut sub.call,
            peer_call.as_mut(),
            why.as_deref(),
            &extra,
        );
    }
    print_figure(
        &get_name,
        "gets/s",
        &mut sub.get,
        get_tally.as_mut(),
        get_why.as_deref(),
        "",
    );
    drop(peer);
    drop(sub);
    drop(databases);
}

/// `SUBTASK_HTTP_ONLY=turul`.
pub(crate) fn turul_rounds(lg: &tokio::runtime::Runtime) {
    println!(
        "# turul: turul-mcp-server 0.4.5 with turul-mcp-task-storage 0.4 (benches/peers/turul, built here \
         with cargo into target/turul-peer; the first build takes minutes), its Streamable HTTP server on a \
         tokio runtime of {PEER_THREADS} workers in a process of its own, task storage on SQLite (sqlx, \
         turul's defaults: rollback journal, synchronous=FULL, 10 connections) or PostgreSQL (sqlx, 20 \
         connections), max_tasks 0 (no cap: turul's default cap of 10,000 stored tasks is below these \
         scales, and a cap costs a COUNT(*) per create)"
    );
    println!(
        "# turul: wire {WIRE} on both sides, the wire of turul's durable task storage (with_task_storage): \
         tools/call with params.task (ttl {TTL_MS} ms), tasks/get, tasks/result; the same request bytes to \
         both (Accept: application/json, text/event-stream); turul answers tools/call as an SSE stream (its \
         2025-11-25 choice for that method), subtask and turul's tasks/get as JSON; `initialize` once per \
         server and its Mcp-Session-Id, if any, on every connection (turul keeps tasks per session)"
    );
    println!(
        "# turul: subtask on its SQLite store (full durability) and on its PostgreSQL store opened as \
         `subtask serve --db postgres://…` opens it (a cluster member); server CPU: subtask's threads, the \
         peer's whole process; PostgreSQL's own CPU in neither"
    );
    println!("# turul: building the peer");
    let built = build_peer();
    if let Err(e) = &built {
        println!("# turul: the peer could not be built, subtask runs alone: {e}");
    }
    let bin = built.as_deref().map_err(|_| "the peer could not be built");
    durable_scale(lg, bin, Db::Sqlite, None, 1000, "1k");
    durable_scale(lg, bin, Db::Sqlite, None, 30_000, "30k");
    let pg = if std::env::var("SUBTASK_TEST_PG").is_ok() {
        Ok(PgSource::External)
    } else {
        pg_server::PgServer::start().map(PgSource::Own)
    };
    match &pg {
        Ok(source) => {
            println!(
                "# turul: PostgreSQL: {}, a fresh database per server and scale",
                match source {
                    PgSource::External => "SUBTASK_TEST_PG's server",
                    PgSource::Own(_) => "a server the bench started (tests/support/pg_server.rs)",
                }
            );
            durable_scale(lg, bin, Db::Postgres, Some(source), 1000, "1k");
            durable_scale(lg, bin, Db::Postgres, Some(source), 30_000, "30k");
        }
        Err(e) => println!("# http_durable_*_pg skipped: no PostgreSQL server: {e}"),
    }
}
