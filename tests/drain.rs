//! Drain on SIGTERM (a deploy), on the real `subtask serve` binary and a
//! real SQLite file: the server stops its handlers at their next safe point
//! within the drain time, refuses new tasks meanwhile while still answering
//! reads, makes everything durable and exits 0; started again, the trees
//! resume where they stopped and every step ran exactly once, the ones in
//! flight at the signal included (they finished before the handler
//! stopped). A second signal exits at once.

#![cfg(unix)]

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;
use support::http::{Client, child_ids, full_caps, is_terminal};
use support::process::ServerProcess;
use support::redone::{RUST_LOG, Redone};
use support::tempdir::TempDir;

const READY: Duration = Duration::from_secs(30);

fn signal(server: &ServerProcess, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(server.pid().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

async fn start(
    bin: &std::path::Path,
    db: &std::path::Path,
    log: &std::path::Path,
    extra: &[&str],
) -> ServerProcess {
    let mut args: Vec<String> = vec!["--db".into(), db.display().to_string()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    ServerProcess::start_env(bin, &args, log, READY, &[("RUST_LOG", RUST_LOG)])
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the server did not start: {e}\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
}

fn wait_exit(server: &ServerProcess, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = server.exited() {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_at_safe_points_and_the_restart_redoes_nothing() {
    let dir = TempDir::new("drain");
    let bin = support::process::private_binary(&dir.0);
    let db = dir.0.join("tasks.db");
    let first_log = dir.0.join("first.log");
    let server = start(&bin, &db, &first_log, &["--drain-timeout", "20"]).await;
    let client = Client::new(server.addr(), full_caps());
    // 1 + 8 nodes of 10 steps of 150 ms: a drain waits for the steps in
    // flight (up to 150 ms), long enough to see a request refused.
    let root = client
        .start_task(
            "fanout",
            json!({"width": 8, "depth": 1, "steps": 10, "stepMs": 150}),
        )
        .await;
    let kids = client.until_children(&root, 8).await;
    // Let some steps finish, then SIGTERM with steps in flight.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    signal(&server, "TERM");
    // While it drains, reads are answered and new tasks refused.
    let mut refused = false;
    let addr = server.addr();
    for _ in 0..200 {
        // A connection refused (a panic in the helper) means the drain is over.
        let call = tokio::spawn(async move {
            Client::new(addr, full_caps())
                .send(
                    "tools/call",
                    json!({"name": "fanout", "arguments": {"width": 0, "steps": 0}}),
                )
                .await
                .json()
        })
        .await;
        let Ok(body) = call else { break };
        if body["error"]["data"]["reason"] == "draining" {
            refused = true;
            let t = client.get(&root).await;
            assert!(!is_terminal(&t), "the tree is not ended by a drain: {t}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let status = tokio::task::spawn_blocking({
        let server = std::sync::Arc::new(server);
        move || wait_exit(&server, Duration::from_secs(25))
    })
    .await
    .unwrap();
    let drain_ms = signalled.elapsed().as_millis();
    assert!(status.success(), "a drained server exits 0: {status}");
    let first = std::fs::read_to_string(&first_log).unwrap();
    let drained = first
        .lines()
        .find(|l| l.contains("drained:"))
        .unwrap_or_else(|| panic!("no drain line in the log:\n{first}"));
    assert!(
        drained.contains("busy=0"),
        "every handler reached a safe point: {drained}"
    );
    assert!(
        refused,
        "a tools/call during the drain was not refused with reason \"draining\""
    );

    // The restart: everything resumes; no step runs twice, in flight or not.
    let second_log = dir.0.join("second.log");
    let server = start(&bin, &db, &second_log, &[]).await;
    let client = Client::new(server.addr(), full_caps());
    let done = client.until(&root, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        child_ids(&client.get(&root).await),
        kids,
        "one generation of subtasks"
    );
    let mut redone = Redone::default();
    redone.feed(&first, &HashSet::new(), "first");
    redone.feed(
        &std::fs::read_to_string(&second_log).unwrap(),
        &HashSet::new(),
        "second",
    );
    assert!(redone.steps_redone.is_empty(), "{:?}", redone.steps_redone);
    assert_eq!(redone.steps_recorded, 9 * 10, "{}", redone.summary());
    assert_eq!(
        redone.steps_run,
        9 * 10,
        "after a drain no step runs twice, not even one in flight at the signal: {}",
        redone.summary()
    );
    assert!(
        redone.steps_replayed > 0 && redone.reruns == 9,
        "{}",
        redone.summary()
    );
    println!("drain: SIGTERM to exit {drain_ms} ms; {}", redone.summary());
    server.kill();

    // A second signal exits at once, whatever is running.
    let third_log = dir.0.join("third.log");
    let server = start(&bin, &db, &third_log, &["--drain-timeout", "60"]).await;
    let client = Client::new(server.addr(), full_caps());
    // A handler that never reaches a safe point: a node whose steps are
    // one long external wait (60 s) keeps the drain waiting.
    client
        .start_task(
            "fanout",
            json!({"width": 0, "depth": 0, "steps": 1, "stepMs": 60000}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    signal(&server, "TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(server.exited().is_none(), "the drain waits for the handler");
    let second = Instant::now();
    signal(&server, "TERM");
    let server = std::sync::Arc::new(server);
    let s = server.clone();
    let status = tokio::task::spawn_blocking(move || wait_exit(&s, Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(
        !status.success(),
        "a second signal exits at once, not cleanly: {status}"
    );
    assert!(second.elapsed() < Duration::from_secs(5));
}
