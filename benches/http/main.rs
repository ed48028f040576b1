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
//! Its client writes each request in one piece over a keep-alive
//! `TcpStream` and reads answers with `httparse` (hyper's parser), task
//! answers by byte scans, so the load generator spends as little of the
//! shared CPU as it can (`client.rs` says why it is not hyper's whole
//! client, as the tests' is).
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
//! peer), `turul` (subtask on SQLite and PostgreSQL against turul-mcp with
//! durable task storage, the peer built from `benches/peers/turul`,
//! `turul.rs`), `workers` (a worker tool through a worker speaking the worker
//! protocol against the same tool in process, `worker.rs`), `jwt` (an
//! OAuth access token's cost per `tasks/get`, `jwt.rs`);
//! `SUBTASK_HTTP_WINDOW_MS` sets the measurement window (3000);
//! `SUBTASK_HTTP_KEEP_FINISHED` the seconds subtask's runtime keeps a
//! finished tree before the SQLite store answers for it (2, as `subtask
//! serve`; `off` keeps it until its TTL, as before issue 27).

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
use subtask::server::ClusterConfig;
use subtask::server::{
    Server, ServerConfig, ServerLimits, TaskSupport, ToolCall, ToolOutcome, ToolSpec, WorkerConfig,
    text_result,
};
use subtask::store::{Membership, PostgresConfig, PostgresStore, SqliteConfig, SqliteStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The seeded generator of the tests (fixed seeds here: every run picks
/// the same sequence of live tasks).
#[path = "../../tests/support/seed.rs"]
mod seed;
/// A fresh directory under the system's temp dir for the SQLite rounds.
#[path = "../../tests/support/tempdir.rs"]
mod tempdir;

/// The test run's PostgreSQL server (`SUBTASK_TEST_PG`), for `turul.rs`.
#[path = "../../tests/support/pg.rs"]
mod pg;
/// A PostgreSQL server started here when there is none, for `turul.rs`.
#[path = "../../tests/support/pg_server.rs"]
mod pg_server;

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
/// The threads of the bench's worker (`worker.rs`): not the server's CPU.
const WORKER_THREADS: &str = "benchworker";
/// The worker token of subtask's server in this bench.
const WORKER_TOKEN: &str = "bench-worker";

mod client;
mod figures;
mod jwt;
mod measure;
mod servers;
mod turul;
mod worker;
mod workloads;

#[allow(unused_imports)]
use client::*;
#[allow(unused_imports)]
use figures::*;
#[allow(unused_imports)]
use measure::*;
#[allow(unused_imports)]
use servers::*;
#[allow(unused_imports)]
use worker::*;
#[allow(unused_imports)]
use workloads::*;

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
    if runs("jwt") {
        jwt::jwt_overhead(&lg);
    }
    if runs("workers") {
        workers_overhead(&lg);
        python_workers(&lg);
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
    if runs("turul") {
        turul::turul_rounds(&lg);
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
