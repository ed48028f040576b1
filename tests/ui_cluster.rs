//! The web view's HTTP side on a cluster: two real `subtask serve`
//! processes on one PostgreSQL database, and `/ui/api` on either lists,
//! shows, follows live and commands the trees held by both (through the
//! database and the cluster's command inbox, as `/mcp` does). The page
//! itself is driven in a real browser against two instances by
//! `scripts/ui.sh` (`tests/ui/cluster.mjs`).
//!
//! Needs `SUBTASK_TEST_PG` (`scripts/pg.sh cargo test --test ui_cluster`);
//! fails without it.

#![cfg(unix)]

mod support;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use support::http::{Client, child_ids, full_caps};
use support::process::{ServerProcess, private_binary};
use support::tempdir::TempDir;

const GUARD: Duration = Duration::from_secs(60);
const ANN: &str = "ann-token";
const BOB: &str = "bob-token";

struct Cluster {
    dir: TempDir,
    bin: PathBuf,
    url: String,
}

impl Cluster {
    async fn new(tag: &str) -> Cluster {
        let dir = TempDir::new(tag);
        let bin = private_binary(dir.0.as_path());
        let url = tokio::task::spawn_blocking(support::pg::fresh_database)
            .await
            .unwrap();
        std::fs::write(dir.0.join("tokens"), format!("{ANN} ann\n{BOB} bob\n")).unwrap();
        Cluster { dir, bin, url }
    }

    async fn start(&self, name: &str) -> ServerProcess {
        let tokens = self.dir.0.join("tokens");
        let args = vec![
            "--db".to_owned(),
            self.url.clone(),
            "--tokens".to_owned(),
            tokens.to_str().unwrap().to_owned(),
        ];
        let log = self.dir.0.join(format!("{name}.log"));
        ServerProcess::start(&self.bin, &args, &log, GUARD)
            .await
            .unwrap_or_else(|e| panic!("instance {name} starts: {e}"))
    }
}

fn http() -> reqwest::Client {
    subtask::tls::install_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn get(server: &ServerProcess, path: &str, token: &str) -> (u16, Value) {
    let resp = http()
        .get(format!("http://{}{path}", server.addr()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn post(server: &ServerProcess, path: &str, token: &str) -> Value {
    let resp = http()
        .post(format!("http://{}{path}", server.addr()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    resp.json().await.unwrap()
}

fn roots(list: &Value) -> Vec<String> {
    list["trees"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["root"].as_str().unwrap().to_owned())
        .collect()
}

/// Every tree of `query`'s list on `server`, `limit` per page, newest to
/// oldest; every page but the last full, the last saying none is left.
async fn page_through(server: &ServerProcess, query: &str, limit: usize) -> Vec<String> {
    let mut seen = Vec::new();
    let mut before = String::new();
    loop {
        let path = format!("/ui/api/trees?limit={limit}{query}{before}");
        let (status, page) = get(server, &path, ANN).await;
        assert_eq!(status, 200, "{path}: {page}");
        let got = roots(&page);
        seen.extend(got.iter().cloned());
        match page["next"].as_str() {
            None => return seen,
            Some(next) => {
                assert_eq!(got.len(), limit, "{path}: a page before the last is full");
                before = format!("&before={next}");
            }
        }
        assert!(seen.len() < 10_000, "the list does not end");
    }
}

/// Polls `client` until `pred` holds for task `id`.
async fn until(client: &Client, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let t = client.get(id).await;
        if pred(&t) {
            return t;
        }
        assert!(start.elapsed() < GUARD, "task {id} never got there: {t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `rows` events and whether `end` came, from SSE text.
fn events(text: &str) -> (Vec<Value>, bool) {
    let rows = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("event: rows\ndata: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    (rows, text.contains("event: end"))
}

/// Each task's last row in `events`.
fn last_rows(events: &[Value]) -> std::collections::HashMap<String, Value> {
    let mut last = std::collections::HashMap::new();
    for e in events {
        for r in e["rows"].as_array().unwrap() {
            last.insert(r["id"].as_str().unwrap().to_owned(), r.clone());
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_view_on_any_instance_lists_shows_follows_and_commands_every_tree() {
    let c = Cluster::new("ui-cluster").await;
    let a = c.start("a").await;
    let b = c.start("b").await;
    let ann_a = Client::new(a.addr(), full_caps()).with_token(ANN);
    let ann_b = Client::new(b.addr(), full_caps()).with_token(ANN);
    let bob_b = Client::new(b.addr(), full_caps()).with_token(BOB);

    // 40 trees, created in turn on A and B (each acknowledged, so stored,
    // before the next); two stay live, one on each.
    let mut made = Vec::new();
    for i in 0..40 {
        let client = if i % 2 == 0 { &ann_a } else { &ann_b };
        let args = if i == 10 || i == 31 {
            json!({"width": 2, "depth": 1, "steps": 1000, "stepMs": 100})
        } else {
            json!({"width": 1, "depth": 0, "steps": 0})
        };
        made.push(client.start_task("fanout", args).await);
    }
    bob_b
        .start_task("fanout", json!({"width": 1, "depth": 0, "steps": 0}))
        .await;
    let held_a = made[10].clone();
    let held_b = made[31].clone();
    for id in &made {
        if *id != held_a && *id != held_b {
            until(&ann_a, id, |t| t["status"] == "completed").await;
        }
    }
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();

    // Both instances list every tree once, newest first, to the oldest, the
    // same pages; with a filter too.
    for server in [&a, &b] {
        for limit in [7, 20, 50] {
            let seen = page_through(server, "", limit).await;
            assert_eq!(seen.iter().collect::<HashSet<_>>().len(), seen.len());
            assert_eq!(seen, newest_first, "limit {limit}");
        }
        let live = page_through(server, "&status=live", 1).await;
        assert_eq!(live, vec![held_b.clone(), held_a.clone()]);
        let done = page_through(server, "&status=completed&tool=fanout", 6).await;
        assert_eq!(done.len(), 38);
        assert!(!done.contains(&held_a) && !done.contains(&held_b));
    }
    // A tree held by A, listed by B: its tool, status and counts.
    let (_, list) = get(&b, "/ui/api/trees?status=live", ANN).await;
    let item = list["trees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["root"] == held_a.as_str())
        .unwrap()
        .clone();
    assert_eq!(item["tool"], "fanout", "{item}");
    assert_eq!(item["tasks"], 3, "{item}");
    assert_eq!(item["counts"], json!({"working": 3}), "{item}");
    // Bob sees only his tree, on either instance.
    for server in [&a, &b] {
        let (_, list) = get(server, "/ui/api/trees", BOB).await;
        assert_eq!(roots(&list).len(), 1, "{list}");
    }

    // The tree view of A's tree on B, from any of its tasks: the same rows
    // A shows.
    let children = child_ids(&ann_a.get(&held_a).await);
    assert_eq!(children.len(), 2);
    let (status, via_b) = get(&b, &format!("/ui/api/trees/{}", children[1]), ANN).await;
    assert_eq!(status, 200, "{via_b}");
    let (_, via_a) = get(&a, &format!("/ui/api/trees/{held_a}"), ANN).await;
    assert_eq!(via_b["root"], held_a.as_str());
    assert_eq!(via_b["tool"], "fanout");
    let ids = |t: &Value| -> Vec<(Value, Value, Value)> {
        t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["id"].clone(), r["parent"].clone(), r["pos"].clone()))
            .collect()
    };
    assert_eq!(ids(&via_b), ids(&via_a));
    assert_eq!(via_b["rows"][0]["id"], held_a.as_str());
    assert_eq!(via_b["rows"][0]["kids"], 2);
    // Another principal: not found, as an unknown tree.
    for path in [
        format!("/ui/api/trees/{held_a}"),
        format!("/ui/api/trees/{held_a}/live"),
    ] {
        assert_eq!(get(&b, &path, BOB).await.0, 404, "{path}");
    }

    // The live view of A's tree on B: every row, then each change; a
    // pause from B's page API reaches A (every task paused there), and the
    // stream shows it; a cancel ends the tree and the stream.
    let resp = http()
        .get(format!("http://{}/ui/api/trees/{held_a}/live", b.addr()))
        .bearer_auth(ANN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut read_until = async |text: &mut String, pred: &dyn Fn(&[Value], bool) -> bool| {
        let got = tokio::time::timeout(GUARD, async {
            loop {
                let (rows, end) = events(text);
                if pred(&rows, end) {
                    return;
                }
                let chunk = body.next().await.expect("the stream stays open").unwrap();
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await;
        assert!(got.is_ok(), "the live stream on B: {text}");
    };
    read_until(&mut text, &|rows, _| !rows.is_empty()).await;
    let (first, _) = events(&text);
    assert_eq!(first[0]["full"], true);
    assert_eq!(first[0]["rows"].as_array().unwrap().len(), 3);

    let paused = post(&b, &format!("/ui/api/tasks/{held_a}/pause"), ANN).await;
    assert_eq!(paused["result"]["taskId"], held_a.as_str(), "{paused}");
    for id in std::iter::once(&held_a).chain(&children) {
        until(&ann_a, id, |t| t["status"] == "paused").await;
    }
    read_until(&mut text, &|rows, _| {
        let last = last_rows(rows);
        last.len() == 3 && last.values().all(|r| r["status"] == "paused")
    })
    .await;
    let resumed = post(&b, &format!("/ui/api/tasks/{held_a}/resume"), ANN).await;
    assert_eq!(resumed["result"]["taskId"], held_a.as_str(), "{resumed}");
    let cancelled = post(&b, &format!("/ui/api/tasks/{held_a}/cancel"), ANN).await;
    assert!(cancelled.get("result").is_some(), "{cancelled}");
    read_until(&mut text, &|_, end| end).await;
    let (rows, _) = events(&text);
    let last = last_rows(&rows);
    assert_eq!(last.len(), 3);
    for (id, r) in &last {
        assert_eq!(r["status"], "cancelled", "{id}");
        assert_eq!(ann_a.get(id).await["status"], "cancelled", "{id}");
    }
    // Details of a task held elsewhere: `tasks/get` through B.
    let (_, detail) = get(&b, &format!("/ui/api/tasks/{held_a}"), ANN).await;
    assert_eq!(detail["result"]["status"], "cancelled", "{detail}");

    // B's own live tree, seen from A, and cancelled from A.
    let (status, via_a) = get(&a, &format!("/ui/api/trees/{held_b}"), ANN).await;
    assert_eq!(status, 200, "{via_a}");
    assert_eq!(via_a["rows"].as_array().unwrap().len(), 3);
    post(&a, &format!("/ui/api/tasks/{held_b}/cancel"), ANN).await;
    until(&ann_b, &held_b, |t| t["status"] == "cancelled").await;

    a.kill();
    b.kill();
}
