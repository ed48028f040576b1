//! The web view's HTTP side over a real socket: the page and its guards,
//! the tree list (filters, pages, principals), a tree's rows and the live
//! stream. The page itself runs in a real browser in `scripts/ui.sh`.

mod support;

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::server::{Server, ServerConfig, TokenTable};
use support::http::{Client, full_caps, serve};

const ALICE: &str = "token-alice";
const BOB: &str = "token-bob";

async fn start(ui: bool) -> (std::net::SocketAddr, String) {
    let mut tokens = TokenTable::default();
    tokens.insert(ALICE, "alice");
    tokens.insert(BOB, "bob");
    let config = ServerConfig {
        tokens: Some(tokens),
        ui,
        ..ServerConfig::default()
    };
    let server =
        subtask::demo::register(Server::builder(Runtime::new(RuntimeConfig::default()), config)).build();
    let addr = serve(server).await;
    (addr, format!("http://{addr}"))
}

fn http() -> reqwest::Client {
    // reqwest's rustls needs a provider (`subtask::tls`).
    subtask::tls::install_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn get(base: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut req = http().get(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn roots(list: &Value) -> Vec<String> {
    list["trees"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["root"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_page_has_the_endpoints_guards_and_is_off_with_a_flag() {
    let (_, base) = start(true).await;
    let page = http().get(format!("{base}/ui")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(page.text().await.unwrap().contains("/ui/app.js"));
    for asset in ["/ui/app.js", "/ui/app.css"] {
        assert_eq!(get(&base, asset, None).await.0, 200, "{asset}");
    }
    // DNS rebinding: a foreign Origin or Host is refused on every route.
    for path in ["/ui", "/ui/api/me", "/ui/api/trees"] {
        let r = http()
            .get(format!("{base}{path}"))
            .header("Origin", "http://evil.example")
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
        let r = http()
            .get(format!("{base}{path}"))
            .header("Host", "evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{path}");
    }
    // The API asks for a token; the page itself holds no data.
    let (status, body) = get(&base, "/ui/api/trees", None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(get(&base, "/ui/api/me", Some("wrong")).await.0, 401);
    let (status, me) = get(&base, "/ui/api/me", Some(ALICE)).await;
    assert_eq!((status, me["principal"].as_str()), (200, Some("alice")));

    let (_, off) = start(false).await;
    for path in ["/ui", "/ui/app.js", "/ui/api/me"] {
        assert_eq!(get(&off, path, Some(ALICE)).await.0, 404, "{path} with ui off");
    }
}

#[tokio::test]
async fn the_list_filters_pages_and_shows_a_principal_only_its_trees() {
    let (addr, base) = start(true).await;
    let alice = Client::new(addr, full_caps()).with_token(ALICE);
    let bob = Client::new(addr, full_caps()).with_token(BOB);
    let quick = alice
        .start_task("fanout", json!({"width": 2, "depth": 1, "steps": 0}))
        .await;
    alice.until_status(&quick, "completed").await;
    let long = alice
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 1000, "stepMs": 100}),
        )
        .await;
    let bobs = bob
        .start_task(
            "fanout",
            json!({"width": 1, "depth": 0, "steps": 1000, "stepMs": 100}),
        )
        .await;

    let (status, all) = get(&base, "/ui/api/trees", Some(ALICE)).await;
    assert_eq!(status, 200, "{all}");
    // Newest first, only alice's.
    assert_eq!(roots(&all), vec![long.clone(), quick.clone()]);
    let first = &all["trees"][1];
    assert_eq!(first["tool"], "fanout");
    assert_eq!(first["status"], "completed");
    assert_eq!(first["tasks"], 3);
    assert_eq!(first["counts"], json!({"completed": 3}));
    assert!(all["tools"].as_array().unwrap().contains(&json!("fanout")));

    let (_, live) = get(&base, "/ui/api/trees?status=live", Some(ALICE)).await;
    assert_eq!(roots(&live), vec![long.clone()]);
    let (_, done) = get(&base, "/ui/api/trees?status=completed", Some(ALICE)).await;
    assert_eq!(roots(&done), vec![quick.clone()]);
    let (_, by_tool) = get(&base, "/ui/api/trees?tool=deep_research", Some(ALICE)).await;
    assert_eq!(roots(&by_tool), Vec::<String>::new());
    let (_, by_text) = get(&base, &format!("/ui/api/trees?q={}", &quick[..8]), Some(ALICE)).await;
    assert_eq!(roots(&by_text), vec![quick.clone()]);
    // Pages: one tree, then the next from where the first stopped.
    let (_, page1) = get(&base, "/ui/api/trees?limit=1", Some(ALICE)).await;
    assert_eq!(roots(&page1), vec![long.clone()]);
    let next = page1["next"].as_str().unwrap().to_owned();
    let (_, page2) = get(
        &base,
        &format!("/ui/api/trees?limit=1&before={next}"),
        Some(ALICE),
    )
    .await;
    assert_eq!(roots(&page2), vec![quick.clone()]);

    let (_, theirs) = get(&base, "/ui/api/trees", Some(BOB)).await;
    assert_eq!(roots(&theirs), vec![bobs.clone()]);
    // Another principal's tree is not found, the same as an unknown one.
    for path in [
        format!("/ui/api/trees/{long}"),
        format!("/ui/api/trees/{long}/live"),
    ] {
        let (status, _) = get(&base, &path, Some(BOB)).await;
        assert_eq!(status, 404, "{path}");
    }
    // A relayed request answers as `/mcp` would: the JSON-RPC error.
    let (_, answer) = get(&base, &format!("/ui/api/tasks/{long}"), Some(BOB)).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let (_, answer) = get(&base, &format!("/ui/api/tasks/{long}"), Some(ALICE)).await;
    assert_eq!(answer["result"]["taskId"], long.as_str(), "{answer}");
    let r = http()
        .post(format!("{base}/ui/api/tasks/{long}/cancel"))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert_eq!(alice.get(&long).await["status"], "working");

    for bad in ["status=done", "limit=0", "limit=500", "before=x", "q=%zz"] {
        let (status, body) = get(&base, &format!("/ui/api/trees?{bad}"), Some(ALICE)).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    alice.call("tasks/cancel", json!({"taskId": long})).await;
    bob.call("tasks/cancel", json!({"taskId": bobs})).await;
}

/// Every tree of `query`'s list, page by page (`limit` per page) from the
/// newest to the oldest, and the number of pages read. Every page but the
/// last is full and says where the next starts; the last says none.
async fn page_through(base: &str, query: &str, limit: usize) -> (Vec<String>, usize) {
    let mut seen = Vec::new();
    let mut before: Option<String> = None;
    for pages in 1..1000 {
        let mut path = format!("/ui/api/trees?limit={limit}{query}");
        if let Some(b) = &before {
            path.push_str(&format!("&before={b}"));
        }
        let (status, page) = get(base, &path, Some(ALICE)).await;
        assert_eq!(status, 200, "{path}: {page}");
        let got = roots(&page);
        assert!(got.len() <= limit, "{path}: {} trees", got.len());
        seen.extend(got.iter().cloned());
        match page["next"].as_str() {
            None => {
                assert_eq!(page["next"], Value::Null, "{path}");
                return (seen, pages);
            }
            Some(next) => {
                assert_eq!(got.len(), limit, "{path}: a page before the last is full");
                before = Some(next.to_owned());
            }
        }
    }
    panic!("the list of {query} does not end");
}

#[tokio::test]
async fn the_list_pages_to_the_oldest_tree_with_and_without_a_filter() {
    let (addr, base) = start(true).await;
    let alice = Client::new(addr, full_caps()).with_token(ALICE);
    let bob = Client::new(addr, full_caps()).with_token(BOB);
    // 230 trees, more than the largest page (200); every third one stays
    // live, the others complete. Bob's trees in between are never listed.
    let mut made = Vec::new();
    let mut live = Vec::new();
    let mut bobs = Vec::new();
    for i in 0..230 {
        let id = if i % 3 == 0 {
            let id = alice
                .start_task(
                    "fanout",
                    json!({"width": 1, "depth": 0, "steps": 1000, "stepMs": 100}),
                )
                .await;
            live.push(id.clone());
            id
        } else {
            alice
                .start_task("fanout", json!({"width": 1, "depth": 0, "steps": 0}))
                .await
        };
        made.push(id);
        if i % 50 == 0 {
            bobs.push(
                bob.start_task("fanout", json!({"width": 1, "depth": 0, "steps": 0}))
                    .await,
            );
        }
    }
    for id in &made {
        if !live.contains(id) {
            alice.until_status(id, "completed").await;
        }
    }
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    let unique = |seen: &[String]| seen.iter().collect::<std::collections::HashSet<_>>().len();

    // Every tree once, newest first, whatever the page size; the last page
    // says there is no older tree (also when it is exactly full).
    for (limit, pages) in [(50, 5), (200, 2), (7, 33), (23, 10), (1, 230)] {
        let (seen, read) = page_through(&base, "", limit).await;
        assert_eq!(unique(&seen), seen.len(), "limit {limit}: a tree listed twice");
        assert_eq!(seen, newest_first, "limit {limit}");
        assert_eq!(read, pages, "limit {limit}");
    }

    // With a filter, the filter holds on every page, to the oldest tree.
    let live_first: Vec<String> = live.iter().rev().cloned().collect();
    let done_first: Vec<String> = newest_first
        .iter()
        .filter(|id| !live.contains(id))
        .cloned()
        .collect();
    for limit in [10, 50, 200] {
        let (seen, _) = page_through(&base, "&status=live", limit).await;
        assert_eq!(seen, live_first, "live, limit {limit}");
        let (seen, _) = page_through(&base, "&status=completed&tool=fanout", limit).await;
        assert_eq!(unique(&seen), seen.len());
        assert_eq!(seen, done_first, "completed, limit {limit}");
    }
    // A page that starts in the middle goes on from there.
    let (_, first) = get(&base, "/ui/api/trees?limit=100", Some(ALICE)).await;
    let next = first["next"].as_str().unwrap();
    let (_, rest) = get(
        &base,
        &format!("/ui/api/trees?limit=200&before={next}"),
        Some(ALICE),
    )
    .await;
    assert_eq!(roots(&rest), newest_first[100..].to_vec());
    assert_eq!(rest["next"], Value::Null);

    for id in live.iter().chain(&bobs) {
        let client = if bobs.contains(id) { &bob } else { &alice };
        client.call("tasks/cancel", json!({"taskId": id})).await;
    }
}

#[tokio::test]
async fn a_tree_reads_in_pre_order_and_its_live_stream_ends_with_the_tree() {
    let (addr, base) = start(true).await;
    let alice = Client::new(addr, full_caps()).with_token(ALICE);
    let root = alice
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 2, "steps": 10, "stepMs": 50}),
        )
        .await;
    let children = alice.until_children(&root, 2).await;

    // Each node spawns its children first: wait for the grandchildren.
    let mut tree = Value::Null;
    for _ in 0..200 {
        let (status, t) = get(&base, &format!("/ui/api/trees/{}", children[1]), Some(ALICE)).await;
        assert_eq!(status, 200, "{t}");
        tree = t;
        if tree["rows"].as_array().unwrap().len() == 7 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Any task of the tree opens the whole tree.
    assert_eq!(tree["root"], root);
    assert_eq!(tree["tool"], "fanout");
    let rows = tree["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    assert_eq!(rows[0]["id"], root);
    assert_eq!(rows[0]["parent"], Value::Null);
    // Pre-order: each child's subtree follows it, in childTaskIds order.
    assert_eq!(rows[1]["id"], children[0].as_str());
    assert_eq!(rows[4]["id"], children[1].as_str());
    for (i, r) in rows.iter().enumerate().skip(1) {
        let parent = r["parent"].as_str().unwrap();
        let at = rows.iter().position(|p| p["id"] == parent).unwrap();
        assert!(at < i, "a parent comes before its children");
    }

    // The live stream: every row first, then only changes, `end` once
    // every task is terminal; what it ends with is what tasks/get says.
    let resp = http()
        .get(format!("{base}/ui/api/trees/{root}/live"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let got = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            if text.contains("event: end") {
                return true;
            }
        }
        false
    })
    .await
    .expect("the stream ends within 30 s");
    assert!(got, "the stream ended without `end`: {text}");
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("event: rows\ndata: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(events.len() >= 2, "a first snapshot and changes: {text}");
    assert_eq!(events[0]["full"], true);
    assert_eq!(events[0]["rows"].as_array().unwrap().len(), 7);
    let mut last = std::collections::HashMap::new();
    for e in &events {
        for r in e["rows"].as_array().unwrap() {
            last.insert(r["id"].as_str().unwrap().to_owned(), r.clone());
        }
    }
    assert_eq!(last.len(), 7);
    for (id, r) in &last {
        let task = alice.get(id).await;
        assert_eq!(r["status"], task["status"], "{id}");
        assert_eq!(r["status"], "completed", "{id}");
    }
    for e in &events[1..] {
        assert_eq!(e["full"], false);
        assert!(
            !e["rows"].as_array().unwrap().is_empty(),
            "no empty change events"
        );
    }
}

/// A row's timeline: its stages in order and when each began, in
/// milliseconds since the epoch.
fn stages(row: &Value) -> Vec<(String, u64)> {
    let created = row["created"].as_u64().unwrap();
    row["phases"]
        .as_array()
        .unwrap_or_else(|| panic!("a row carries its phases: {row}"))
        .iter()
        .map(|p| {
            (
                p[0].as_str().unwrap().to_owned(),
                created + p[1].as_u64().unwrap(),
            )
        })
        .collect()
}

fn names(stages: &[(String, u64)]) -> Vec<&str> {
    stages.iter().map(|(s, _)| s.as_str()).collect()
}

/// The stage `stages` says the task was in at `at` ("queued" before the first mark).
fn stage_at(stages: &[(String, u64)], at: u64) -> &str {
    stages
        .iter()
        .rev()
        .find(|(_, t)| *t <= at)
        .map_or("queued", |(s, _)| s.as_str())
}

#[tokio::test]
async fn a_trees_rows_carry_each_tasks_stages_in_the_order_they_happened() {
    let (addr, base) = start(true).await;
    let alice = Client::new(addr, full_caps()).with_token(ALICE);
    // The root spawns two leaves, runs 5 steps of 100 ms, then awaits its
    // children in order; leaf 0.1 first asks for input.
    let root = alice
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 5, "stepMs": 100, "inputAt": "0.1"}),
        )
        .await;
    let kids = alice.until_children(&root, 2).await;
    let (c0, c1) = (&kids[0], &kids[1]);
    // Leaf 0.0 is paused for a while in the middle of its steps.
    alice.call("tasks/pause", json!({"taskId": c0})).await;
    alice.until_status(c0, "paused").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    alice.call("tasks/resume", json!({"taskId": c0})).await;
    alice.until_status(c1, "input_required").await;
    // Wait until the root awaits its children (leaf 0.1, which waits for input).
    let rows_of = |t: &Value| -> Vec<Value> { t["rows"].as_array().unwrap().clone() };
    let mut awaiting = false;
    for _ in 0..500 {
        let (_, t) = get(&base, &format!("/ui/api/trees/{root}"), Some(ALICE)).await;
        let rows = rows_of(&t);
        if names(&stages(&rows[0])).last() == Some(&"children") {
            awaiting = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(awaiting, "the root's timeline reaches 'children'");
    tokio::time::sleep(Duration::from_millis(100)).await;
    alice
        .call(
            "tasks/update",
            json!({"taskId": c1, "inputResponses": {"confirm-0.1": {"action": "accept", "content": {}}}}),
        )
        .await;
    alice.until_status(&root, "completed").await;

    let (status, tree) = get(&base, &format!("/ui/api/trees/{root}"), Some(ALICE)).await;
    assert_eq!(status, 200, "{tree}");
    let rows = rows_of(&tree);
    let row = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap().clone();
    let (r_root, r0, r1) = (row(&root), row(c0), row(c1));
    for r in [&r_root, &r0, &r1] {
        let s = stages(r);
        assert!(s.windows(2).all(|w| w[0].1 <= w[1].1), "marks in time order: {r}");
        // A terminal task's bar ends when it ended: its last update.
        assert_eq!(
            s.last().map(|(n, t)| (n.as_str(), *t)),
            Some(("ended", r["updated"].as_u64().unwrap())),
            "{r}"
        );
        assert!(r.get("elided").is_none(), "{r}");
    }
    let s0 = stages(&r0);
    assert_eq!(names(&s0), ["running", "paused", "running", "ended"], "{r0}");
    assert!(s0[2].1 - s0[1].1 >= 200, "paused for 200 ms at least: {r0}");
    let s1 = stages(&r1);
    assert_eq!(names(&s1), ["running", "input", "running", "ended"], "{r1}");
    let sr = stages(&r_root);
    assert_eq!(sr.first().map(|(n, _)| n.as_str()), Some("running"), "{r_root}");
    // The root awaited its children while leaf 0.1 waited for input, and
    // ran again (its last checkpoint) only once that leaf had ended.
    let answered = s1[2].1;
    assert_eq!(stage_at(&sr, answered - 1), "children", "{r_root} / {r1}");
    let leaf_ended = s1[3].1;
    assert_eq!(stage_at(&sr, leaf_ended - 1), "children", "{r_root} / {r1}");
    assert!(
        sr.last().unwrap().1 >= leaf_ended,
        "the root ends after its children"
    );
}

#[tokio::test]
async fn a_task_started_after_its_dependencies_shows_it_waited_for_them_until_the_last_ended() {
    let (addr, base) = start(true).await;
    let alice = Client::new(addr, full_caps()).with_token(ALICE);
    // deep_research chains each sub-question's steps with `after`, and
    // starts sub-question n after sub-question n - 2.
    let root = alice
        .start_task(
            "deep_research",
            json!({"question": "How do MCP tasks handle failures?"}),
        )
        .await;
    alice.until_status(&root, "completed").await;
    let (status, tree) = get(&base, &format!("/ui/api/trees/{root}"), Some(ALICE)).await;
    assert_eq!(status, 200, "{tree}");
    let rows = tree["rows"].as_array().unwrap();
    let ended = |r: &Value| stages(r).last().filter(|(s, _)| s == "ended").map(|(_, t)| *t);
    let mut waited = 0;
    for r in rows {
        let s = stages(r);
        if s.first().map(|(n, _)| n.as_str()) != Some("dependencies") {
            assert!(!names(&s).contains(&"dependencies"), "{r}");
            continue;
        }
        waited += 1;
        assert_eq!(
            s[0].1,
            r["created"].as_u64().unwrap(),
            "waits from its creation: {r}"
        );
        let left = s[1].1;
        // Then queued for a slot (if only for a moment), then running.
        assert_eq!(names(&s)[1..3], ["queued", "running"], "{r}");
        // It left the stage at the time its last dependency, an earlier
        // sibling, ended (the same command).
        let by_sibling = rows.iter().any(|o| {
            o["parent"] == r["parent"] && o["pos"].as_u64() < r["pos"].as_u64() && ended(o) == Some(left)
        });
        assert!(by_sibling, "no earlier sibling ended at {left}: {r}");
    }
    assert!(waited >= 3, "{waited} tasks waited for dependencies");
}
