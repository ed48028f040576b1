//! Finished trees on a durable store, as an operator runs them: the real
//! `subtask serve` on a SQLite file (`docs/performance.md`, "Finished
//! trees").
//!
//! - `retained_terminal_bytes`: the server's RSS growth per finished task
//!   it retains (for its TTL, one hour by default), measured once the
//!   finished trees left memory (`--keep-finished`, 2 s; the RSS as the
//!   last tree ended is printed beside it), from after the first tree,
//!   so it also counts the working set the server reaches at full speed
//!   (the growth from after a warm-up of 20 trees is printed beside it),
//!   over `fanout` trees of
//!   2,551 tasks (width 50, depth 2, no steps) created three at a time
//!   until 1,000,000 tasks are stored (392 trees), after one tree of
//!   warm-up;
//! - `get_terminal_1m_p99_us`: `tasks/get` of a random finished task among
//!   them, 4 keep-alive connections, 20,000 gets;
//! - `restart_1m_ms`: the server SIGKILLed and started again on that
//!   file, from the process's start to the first `tasks/get` of a stored
//!   task answered.
//!
//! `SUBTASK_BENCH_ONLY=terminal` runs only these; `SUBTASK_BENCH_TERMINAL_TASKS`
//! sets the number of stored tasks (1,000,000).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;

use super::serve::{Serve, headers, result_of};
use super::{http, percentile, request_body};

/// Nodes of a `fanout` tree of width 50 and depth 2.
const TREE: usize = 1 + 50 + 50 * 50;
/// Trees being created at once: three stay under the default limit of
/// 10,000 live tasks per principal.
const AT_ONCE: usize = 3;
const GETS: usize = 20_000;
/// Trees run before the second baseline RSS is read: the server's working
/// set (the trees in flight and those finished in the last
/// `--keep-finished` seconds, about 100,000 tasks at full speed, and what
/// the allocator keeps of them) reaches its steady size; the growth after
/// it is printed as context (the figure counts from the first tree).
const WARM_UP: usize = 20;
const CONNECTIONS: usize = 4;

/// Creates one fanout tree and returns its root's id.
fn create(s: &Serve) -> String {
    let r = s
        .call(
            "tools/call",
            "fanout",
            json!({"name": "fanout", "arguments": {"width": 50, "depth": 2, "steps": 0, "stepMs": 0}}),
        )
        .unwrap_or_else(|e| panic!("tools/call fanout: {e}"));
    assert_eq!(r["resultType"], "task", "fanout did not create a task: {r}");
    r["taskId"].as_str().expect("a taskId").to_owned()
}

fn status(s: &Serve, id: &str) -> String {
    s.call("tasks/get", id, json!({"taskId": id}))
        .map(|t| t["status"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

/// Runs `trees` trees to completion, `AT_ONCE` at a time.
fn run_trees(s: &Serve, trees: usize) {
    let mut open: Vec<String> = Vec::new();
    let mut started = 0;
    let t0 = Instant::now();
    while started < trees || !open.is_empty() {
        while open.len() < AT_ONCE && started < trees {
            open.push(create(s));
            started += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
        open.retain(|id| match status(s, id).as_str() {
            "completed" => false,
            "working" | "" => true,
            other => panic!("tree {id} ended {other} (log {})", s.log.display()),
        });
        assert!(
            t0.elapsed() < Duration::from_secs(1800),
            "{started} trees started in 30 minutes, {} still open",
            open.len()
        );
    }
}

/// The server's RSS once no finished task is held in memory any more (the
/// server lets finished trees go `--keep-finished` seconds after they end;
/// those of the last seconds are live work, not history), and a second
/// for the allocator to give their memory back.
fn settled(s: &Serve) -> u64 {
    let t0 = Instant::now();
    loop {
        match s.retained() {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => panic!("/metrics: {e}"),
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "finished trees stayed in memory for 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    s.rss()
}

/// Up to `n` random stored task ids, read from the database file.
fn sample_ids(db: &Path, n: usize) -> Vec<String> {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open the bench database read-only");
    let mut st = c
        .prepare("SELECT id FROM tasks ORDER BY random() LIMIT ?1")
        .expect("a query of task ids");
    st.query_map([n as i64], |r| r.get::<_, Vec<u8>>(0))
        .expect("task ids")
        .map(|id| {
            let id = id.expect("a task id");
            uuid::Uuid::from_slice(&id).expect("16 bytes").to_string()
        })
        .collect()
}

/// `tasks/get` latencies (µs) of `ids` over `CONNECTIONS` keep-alive
/// connections; every answer must be a completed task.
fn get_latencies(addr: SocketAddr, ids: &[String]) -> Vec<f64> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the load");
    rt.block_on(async {
        let mut loops = Vec::new();
        for part in ids.chunks(ids.len().div_ceil(CONNECTIONS)) {
            let part = part.to_vec();
            loops.push(tokio::spawn(async move {
                let mut c = http::Connection::open(addr).await.expect("a connection");
                let mut lat = Vec::with_capacity(part.len());
                for id in part {
                    let body = request_body(1, "tasks/get", json!({"taskId": id}));
                    let req = http::build_request(
                        addr,
                        "POST",
                        "/mcp",
                        &headers("tasks/get", &id),
                        Bytes::from(body),
                    )
                    .expect("a request");
                    let t0 = Instant::now();
                    let a = c.send(req).await.expect("an answer");
                    lat.push(t0.elapsed().as_secs_f64() * 1e6);
                    let body = String::from_utf8_lossy(&a.body);
                    let t = result_of(&body, &a.head).unwrap_or_else(|e| panic!("tasks/get {id}: {e}"));
                    assert_eq!(t["status"], "completed", "tasks/get {id}: {t}");
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for l in loops {
            all.extend(l.await.expect("a load loop"));
        }
        all
    })
}

pub(crate) fn figures(db: &Path, dir: &Path) {
    let tasks: usize = std::env::var("SUBTASK_BENCH_TERMINAL_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let trees = tasks.div_ceil(TREE).max(1);
    let db_arg = db.display().to_string();
    println!(
        "# finished trees: `subtask serve --db {}` (SQLite, default durability and TTL), fanout width 50 \
         depth 2 (2,551 tasks), {AT_ONCE} trees at a time, {trees} trees after {WARM_UP} of warm-up",
        db.display()
    );
    let s = Serve::start(&["--db", &db_arg], &dir.join("terminal-0.log"));
    run_trees(&s, 1);
    let first = settled(&s);
    run_trees(&s, WARM_UP - 1);
    let before = settled(&s);
    let t0 = Instant::now();
    run_trees(&s, trees);
    let took = t0.elapsed();
    let made = trees * TREE;
    let at_end = s.rss();
    let after = settled(&s);
    let since_first = made + (WARM_UP - 1) * TREE;
    println!(
        "# {made} tasks in {:.0} s ({:.0} tasks/s); RSS {:.0} MiB after the first tree, {:.0} MiB after the \
         warm-up, {:.0} MiB as the last tree ended, {:.0} MiB once the finished trees left memory \
         (--keep-finished, 2 s); from after the warm-up: {:.0} B per task (the working set's memory, kept \
         by the allocator, takes the store's maps)",
        took.as_secs_f64(),
        made as f64 / took.as_secs_f64(),
        first as f64 / 1048576.0,
        before as f64 / 1048576.0,
        at_end as f64 / 1048576.0,
        after as f64 / 1048576.0,
        after.saturating_sub(before) as f64 / made as f64
    );
    println!(
        "retained_terminal_bytes: subtask={:.0}",
        after.saturating_sub(first) as f64 / since_first as f64
    );
    let ids = sample_ids(db, GETS);
    let mut lat = get_latencies(s.addr, &ids);
    println!(
        "# tasks/get of {} random finished tasks among {}: p50 {:.0} µs",
        lat.len(),
        made + TREE,
        percentile(&mut lat, 0.5)
    );
    println!(
        "get_terminal_1m_p99_us: subtask={:.0}",
        percentile(&mut lat, 0.99)
    );
    drop(s);
    let probe = &ids[0];
    let start = Instant::now();
    let s = Serve::spawn(&["--db", &db_arg], &dir.join("terminal-1.log")).listening(Duration::from_secs(600));
    let listening = start.elapsed();
    loop {
        if let Ok(t) = s.call("tasks/get", probe, json!({"taskId": probe})) {
            assert_eq!(t["status"], "completed", "after the restart: {t}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "no tasks/get answered within 10 minutes of the restart"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    println!(
        "# restart: listening after {:.0} ms; RSS {:.0} MiB at the first answer",
        listening.as_secs_f64() * 1000.0,
        s.rss() as f64 / 1048576.0
    );
    println!("restart_1m_ms: subtask={ms:.0}");
}
