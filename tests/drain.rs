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
    // 1 + 8 nodes of 8 steps of 500 ms: a drain waits for the steps in
    // flight (up to 500 ms), long enough to see a request refused even
    // when the machine is loaded (with 150 ms steps, a fresh-clone run on
    // two busy cores once saw the drain end before its first request).
    let root = client
        .start_task(
            "fanout",
            json!({"width": 8, "depth": 1, "steps": 8, "stepMs": 500}),
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
            // A read is answered while the drain lasts; a drain with every
            // handler already at a safe point may end (and the listener
            // close) before this read connects, which is not a failure:
            // the restart below checks the tree.
            let read = tokio::spawn({
                let (client, root) = (client.clone(), root.clone());
                async move { client.get(&root).await }
            })
            .await;
            if let Ok(t) = read {
                assert!(!is_terminal(&t), "the tree is not ended by a drain: {t}");
            }
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
    assert_eq!(redone.steps_recorded, 9 * 8, "{}", redone.summary());
    assert_eq!(
        redone.steps_run,
        9 * 8,
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

/// `subtask get ID --tree --json`: every task of the tree as (id, parent, status).
fn tree_of(bin: &std::path::Path, addr: std::net::SocketAddr, id: &str) -> Vec<(String, String, String)> {
    let out = std::process::Command::new(bin)
        .args([
            "get",
            id,
            "--tree",
            "--json",
            "--url",
            &format!("http://{addr}/mcp"),
        ])
        .output()
        .expect("run subtask get");
    assert!(
        out.status.success(),
        "subtask get --tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let mut all = Vec::new();
    let mut stack = vec![(v, String::new())];
    while let Some((t, parent)) = stack.pop() {
        let id = t["taskId"].as_str().unwrap_or_default().to_owned();
        all.push((
            id.clone(),
            parent,
            t["status"].as_str().unwrap_or_default().to_owned(),
        ));
        for c in t["subtasks"].as_array().into_iter().flatten() {
            stack.push((c.clone(), id.clone()));
        }
    }
    all
}

/// The README's walkthrough: `kill -9` during a `deep_research`, start
/// again, the answer arrives, and `subtask get --tree` shows one
/// generation of subtasks: every task from before in its place, none
/// twice, nothing completed run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_deep_research_resumes_with_one_generation_of_subtasks() {
    let dir = TempDir::new("walkthrough");
    let bin = support::process::private_binary(&dir.0);
    let db = dir.0.join("tasks.db");
    let first_log = dir.0.join("first.log");
    let server = start(&bin, &db, &first_log, &[]).await;
    let client = Client::new(server.addr(), full_caps());
    let root = client
        .start_task(
            "deep_research",
            json!({"question": "How do MCP tasks handle failures?", "breadth": 3, "depth": 2, "pace": 3}),
        )
        .await;
    // Until some subtasks completed and others run.
    let before = loop {
        let tree = tree_of(&bin, server.addr(), &root);
        let done = tree.iter().filter(|t| t.2 == "completed").count();
        let live = tree.iter().filter(|t| t.2 == "working").count();
        if done >= 4 && live >= 3 {
            break tree;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    server.kill();
    server.wait();
    let completed: HashSet<String> = before
        .iter()
        .filter(|t| t.2 == "completed")
        .map(|t| t.0.clone())
        .collect();

    let second_log = dir.0.join("second.log");
    let server = start(&bin, &db, &second_log, &[]).await;
    let client = Client::new(server.addr(), full_caps());
    let done = client.until(&root, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    let after = tree_of(&bin, server.addr(), &root);
    let ids: HashSet<&String> = after.iter().map(|t| &t.0).collect();
    assert_eq!(ids.len(), after.len(), "a task listed twice");
    for (id, parent, status) in &before {
        let now = after.iter().find(|t| &t.0 == id);
        let Some(now) = now else {
            panic!("task {id} (was {status}) is gone after the restart")
        };
        assert_eq!(&now.1, parent, "task {id} moved");
        if status == "completed" {
            assert_eq!(now.2, "completed");
        }
    }
    assert!(
        after.iter().all(|t| t.2 == "completed" || t.2 == "cancelled"),
        "every task ended: {after:?}"
    );
    let mut redone = Redone::default();
    redone.feed(
        &std::fs::read_to_string(&first_log).unwrap(),
        &HashSet::new(),
        "first",
    );
    redone.feed(
        &std::fs::read_to_string(&second_log).unwrap(),
        &completed,
        "second",
    );
    assert!(redone.tasks_redone.is_empty(), "{:?}", redone.tasks_redone);
    assert!(redone.steps_redone.is_empty(), "{:?}", redone.steps_redone);
    assert!(
        redone.reruns > 0 && redone.steps_replayed > 0,
        "{}",
        redone.summary()
    );
    println!(
        "walkthrough: {} tasks before the kill ({} completed), {} after; {}",
        before.len(),
        completed.len(),
        after.len(),
        redone.summary()
    );
    server.kill();
}
