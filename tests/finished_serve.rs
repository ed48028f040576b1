//! The server answers for finished trees the runtime let go of
//! (`docs/durability.md`, "Finished trees") exactly as it did while it held
//! them: every answer a client or the web view can get about them, on both
//! wires, is captured while the trees are in memory and again once they
//! live only in the SQLite file, and the two must be equal. Then the real
//! binary: SIGKILLed and started again, it loads none of them and still
//! answers for them.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use subtask::model::TaskId;
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::server::{Server, ServerConfig, TokenTable};
use subtask::store::{SqliteConfig, SqliteStore};
use support::http::{Client, child_ids, full_caps, raw, serve};
use support::process::{ServerProcess, private_binary};
use support::tempdir::TempDir;

const ALICE: &str = "token-alice";
const BOB: &str = "token-bob";
/// How long a finished tree stays in memory in the in-process server: the
/// first capture must end within it (checked).
const GRACE: Duration = Duration::from_secs(4);

fn tokens() -> TokenTable {
    let mut t = TokenTable::default();
    t.insert(ALICE, "alice");
    t.insert(BOB, "bob");
    t
}

async fn start(db: &std::path::Path) -> (Server, SocketAddr) {
    let store = Arc::new(SqliteStore::open(SqliteConfig::new(db)).expect("open SQLite"));
    let runtime = Runtime::with_store(
        RuntimeConfig {
            release_finished_after: Some(GRACE),
            ..RuntimeConfig::default()
        },
        store,
    );
    let config = ServerConfig {
        tokens: Some(tokens()),
        ui: true,
        ..ServerConfig::default()
    };
    let server = subtask::demo::register(Server::builder(runtime, config)).build();
    let addr = serve(server.clone()).await;
    (server, addr)
}

/// The `result` or `error` of a JSON-RPC answer, with its HTTP status.
fn outcome(status: u16, body: &str) -> Value {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    match v.get("error") {
        Some(e) => json!({"status": status, "error": e}),
        None => json!({"status": status, "result": v["result"]}),
    }
}

async fn modern(c: &Client, method: &str, params: Value) -> Value {
    let r = c.send(method, params).await;
    outcome(r.status, &r.body)
}

async fn legacy(addr: SocketAddr, token: &str, method: &str, params: Value) -> Value {
    let headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("Accept", "application/json, text/event-stream".to_owned()),
        ("MCP-Protocol-Version", "2025-11-25".to_owned()),
        ("Authorization", format!("Bearer {token}")),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let r = raw(addr, "POST", &headers, body.to_string().as_bytes()).await;
    outcome(r.status, &r.body)
}

async fn ui(addr: SocketAddr, token: &str, method: &str, path: &str) -> Value {
    let client = reqwest_client();
    let req = match method {
        "POST" => client.post(format!("http://{addr}{path}")),
        _ => client.get(format!("http://{addr}{path}")),
    };
    let resp = req.bearer_auth(token).send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    // The page's clock and this instance's live count are not the tree's.
    if let Some(o) = v.as_object_mut() {
        o.remove("now");
    }
    json!({"status": status, "body": v})
}

fn reqwest_client() -> reqwest::Client {
    subtask::tls::install_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Every answer about the trees `roots` (and their tasks `ids`) a client
/// and the web view can get, labelled.
async fn capture(addr: SocketAddr, roots: &[String], ids: &[String]) -> Vec<(String, Value)> {
    let alice = Client::new(addr, full_caps()).with_token(ALICE);
    let bob = Client::new(addr, full_caps()).with_token(BOB);
    let mut out = Vec::new();
    for id in ids {
        out.push((
            format!("get {id}"),
            modern(&alice, "tasks/get", json!({"taskId": id})).await,
        ));
        out.push((
            format!("legacy get {id}"),
            legacy(addr, ALICE, "tasks/get", json!({"taskId": id})).await,
        ));
        out.push((
            format!("legacy result {id}"),
            legacy(addr, ALICE, "tasks/result", json!({"taskId": id})).await,
        ));
        out.push((
            format!("bob get {id}"),
            modern(&bob, "tasks/get", json!({"taskId": id})).await,
        ));
        out.push((
            format!("ui task {id}"),
            ui(addr, ALICE, "GET", &format!("/ui/api/tasks/{id}")).await,
        ));
    }
    for id in [&ids[0], &ids[ids.len() - 1]] {
        for (method, extra) in [
            ("tasks/steer", json!({"message": "more"})),
            ("tasks/pause", json!({})),
            ("tasks/resume", json!({})),
            (
                "tasks/update",
                json!({"inputResponses": {"k": {"action": "accept"}}}),
            ),
            ("tasks/cancel", json!({})),
        ] {
            let mut params = extra;
            params["taskId"] = json!(id);
            out.push((
                format!("{method} {id}"),
                modern(&alice, method, params.clone()).await,
            ));
            out.push((format!("bob {method} {id}"), modern(&bob, method, params).await));
        }
        out.push((
            format!("legacy cancel {id}"),
            legacy(addr, ALICE, "tasks/cancel", json!({"taskId": id})).await,
        ));
    }
    out.push((
        "legacy list".into(),
        legacy(addr, ALICE, "tasks/list", json!({})).await,
    ));
    out.push((
        "bob legacy list".into(),
        legacy(addr, BOB, "tasks/list", json!({})).await,
    ));
    out.push(("ui trees".into(), ui(addr, ALICE, "GET", "/ui/api/trees").await));
    out.push(("bob ui trees".into(), ui(addr, BOB, "GET", "/ui/api/trees").await));
    for root in roots {
        out.push((
            format!("ui tree {root}"),
            ui(addr, ALICE, "GET", &format!("/ui/api/trees/{root}")).await,
        ));
        out.push((
            format!("bob ui tree {root}"),
            ui(addr, BOB, "GET", &format!("/ui/api/trees/{root}")).await,
        ));
        out.push((
            format!("ui pause {root}"),
            ui(addr, ALICE, "POST", &format!("/ui/api/tasks/{root}/pause")).await,
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_trees_answer_the_same_from_memory_and_from_the_file() {
    let dir = TempDir::new("finished-serve");
    let (server, addr) = start(&dir.db()).await;
    let alice = Client::new(addr, full_caps()).with_token(ALICE);
    // A completed tree and a cancelled one.
    let done = alice
        .start_task("fanout", json!({"width": 3, "depth": 2, "steps": 0, "stepMs": 0}))
        .await;
    let slow = alice
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 100, "stepMs": 100}),
        )
        .await;
    alice.until_children(&slow, 2).await;
    alice.call("tasks/cancel", json!({"taskId": slow})).await;
    alice.until_status(&slow, "cancelled").await;
    alice.until_status(&done, "completed").await;
    let mut ids = vec![done.clone()];
    let mut next = vec![done.clone()];
    while let Some(id) = next.pop() {
        let kids = child_ids(&alice.get(&id).await);
        ids.extend(kids.iter().cloned());
        next.extend(kids);
    }
    ids.push(slow.clone());
    ids.extend(child_ids(&alice.get(&slow).await));
    assert_eq!(ids.len(), 1 + 3 + 9 + 1 + 2);
    let roots = vec![done.clone(), slow.clone()];
    let rt = server.runtime();
    let held = |id: &str| {
        rt.get(id.parse::<TaskId>().unwrap(), subtask::model::ClientView::BASE)
            .is_some()
    };

    let before = capture(addr, &roots, &ids).await;
    assert!(
        held(&done) && held(&slow),
        "the first capture outlasted the {GRACE:?} grace: it did not see the trees in memory"
    );
    let t0 = std::time::Instant::now();
    while held(&done) || held(&slow) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the finished trees stayed in memory"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for id in &ids {
        assert!(!held(id), "task {id} is still in memory");
    }
    let after = capture(addr, &roots, &ids).await;
    assert_eq!(before.len(), after.len());
    for ((label, b), (_, a)) in before.iter().zip(&after) {
        assert_eq!(
            a, b,
            "{label}: from the file it answers otherwise than from memory"
        );
    }
    // Not everything is an error: the captures carry the trees.
    let get_root = &after[0].1;
    assert_eq!(get_root["result"]["status"], "completed", "{get_root}");
    let trees = &after.iter().find(|(l, _)| l == "ui trees").unwrap().1;
    assert_eq!(
        trees["body"]["trees"].as_array().map(Vec::len),
        Some(2),
        "{trees}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_started_again_loads_no_finished_tree_and_answers_for_them() {
    let dir = TempDir::new("finished-restart");
    let bin = private_binary(&dir.0);
    let token_file = dir.0.join("tokens");
    std::fs::write(&token_file, format!("{ALICE} alice\n{BOB} bob\n")).unwrap();
    let args: Vec<String> = vec![
        "--db".into(),
        dir.db().display().to_string(),
        "--tokens".into(),
        token_file.display().to_string(),
    ];
    let log = dir.0.join("serve.log");
    let first = ServerProcess::start(&bin, &args, &log, Duration::from_secs(60))
        .await
        .unwrap();
    let alice = Client::new(first.addr(), full_caps()).with_token(ALICE);
    let root = alice
        .start_task("fanout", json!({"width": 4, "depth": 1, "steps": 0, "stepMs": 0}))
        .await;
    let shown = alice.until_status(&root, "completed").await;
    let leaf = child_ids(&shown)[3].clone();
    let leaf_shown = alice.get(&leaf).await;
    // The default grace (2 s), then the tree is only in the file.
    let t0 = std::time::Instant::now();
    while support::http::retained(first.addr(), Some(ALICE)).await != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the finished tree stayed in memory"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(alice.get(&root).await, shown);
    assert!(first.kill(), "SIGKILL");
    first.wait();
    let second = ServerProcess::start(&bin, &args, &log, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        support::http::retained(second.addr(), Some(ALICE)).await,
        0,
        "a finished tree was loaded at start"
    );
    let alice = Client::new(second.addr(), full_caps()).with_token(ALICE);
    assert_eq!(alice.get(&root).await, shown);
    assert_eq!(alice.get(&leaf).await, leaf_shown);
    let bob = Client::new(second.addr(), full_caps()).with_token(BOB);
    let (_, e) = bob.error("tasks/get", json!({"taskId": root})).await;
    assert_eq!(e["code"], -32602, "{e}");
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(!log_text.contains("ERROR"), "{log_text}");
}
