//! `/metrics` of the real `subtask serve` binary on a real socket with a
//! SQLite database: the test runs trees to completion, to a failure and to
//! a cancel, holds a `subscriptions/listen` stream open, sends requests
//! that fail, then scrapes `/metrics` over HTTP, parses the Prometheus text
//! format and checks every number against what it did (tasks counted by
//! walking `childTaskIds`, requests counted as they were sent). Also: the
//! Host guard, `--no-metrics` (404) and `--tokens` (401 without a token).

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::http::{Client, HttpResponse, child_ids, fetch, full_caps, is_terminal, raw};
use support::process::{ServerProcess, private_binary};
use support::tempdir::TempDir;

// ---------------------------------------------------------------------------
// The Prometheus text format, parsed strictly enough to catch a bad line.
// ---------------------------------------------------------------------------

/// One scrape: every sample by name and sorted labels, and every `# TYPE`.
#[derive(Debug)]
struct Scrape {
    samples: BTreeMap<(String, Vec<(String, String)>), f64>,
    types: BTreeMap<String, String>,
    text: String,
}

/// Parses `name{a="x",b="y"} value` (labels may be absent; values may
/// hold escaped quotes).
fn parse_sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let name_end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("no value: {line}"));
    let name = line[..name_end].to_owned();
    assert!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "bad metric name in {line}"
    );
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        let end = loop {
            let Some((i, c)) = chars.next() else {
                panic!("unclosed labels: {line}")
            };
            if c == '}' {
                break i;
            }
            if c == ',' {
                continue;
            }
            let key_start = i;
            let mut key_end = i;
            for (j, c) in chars.by_ref() {
                if c == '=' {
                    key_end = j;
                    break;
                }
            }
            let key = body[key_start..key_end].to_owned();
            assert_eq!(
                chars.next().map(|(_, c)| c),
                Some('"'),
                "unquoted label value: {line}"
            );
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c)) => value.push(c),
                        None => panic!("bad escape: {line}"),
                    },
                    Some((_, '"')) => break,
                    Some((_, c)) => value.push(c),
                    None => panic!("unclosed label value: {line}"),
                }
            }
            labels.push((key, value));
        };
        rest = &body[end + 1..];
    }
    let value: f64 = match rest.trim() {
        "+Inf" => f64::INFINITY,
        v => v.parse().unwrap_or_else(|e| panic!("bad value ({e}): {line}")),
    };
    labels.sort();
    (name, labels, value)
}

fn parse(text: &str) -> Scrape {
    let mut samples = BTreeMap::new();
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(t) = line.strip_prefix("# TYPE ") {
            let (name, kind) = t.split_once(' ').expect("# TYPE name kind");
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "{name} typed twice"
            );
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        assert!(!line.starts_with('#'), "unexpected comment: {line}");
        let (name, labels, value) = parse_sample(line);
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            })
            .unwrap_or(&name);
        assert!(types.contains_key(family), "sample before its # TYPE: {line}");
        assert!(
            samples.insert((name.clone(), labels), value).is_none(),
            "duplicate sample: {line}"
        );
    }
    Scrape {
        samples,
        types,
        text: text.to_owned(),
    }
}

impl Scrape {
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        self.samples.get(&(name.to_owned(), labels)).copied()
    }

    /// A sample that must be there.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no sample {name}{labels:?} in\n{}", self.text))
    }

    /// Every sample of `name` whose labels include `with`.
    fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|((n, l), _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, v)| *v)
            .sum()
    }

    /// `subtask_http_requests_total` by (method, code).
    fn requests(&self) -> BTreeMap<(String, u16), f64> {
        self.samples
            .iter()
            .filter(|((n, _), _)| n == "subtask_http_requests_total")
            .map(|((_, l), v)| {
                let get = |k: &str| l.iter().find(|(lk, _)| lk == k).map(|(_, v)| v.clone()).unwrap();
                ((get("method"), get("code").parse().unwrap()), *v)
            })
            .collect()
    }

    /// Checks a histogram's shape: cumulative buckets ending in `+Inf` = count.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> (f64, f64) {
        assert_eq!(
            self.types.get(name).map(String::as_str),
            Some("histogram"),
            "{name}"
        );
        let mut buckets: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|((n, l), _)| {
                n == &format!("{name}_bucket")
                    && labels
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|((_, l), v)| {
                let le = &l.iter().find(|(k, _)| k == "le").expect("le label").1;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                (le, *v)
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(buckets.len() > 2, "{name}{labels:?} has no buckets");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{name}{labels:?} buckets are not cumulative: {buckets:?}"
        );
        let count = self.value(&format!("{name}_count"), labels);
        assert_eq!(
            buckets.last().unwrap(),
            &(f64::INFINITY, count),
            "{name}{labels:?}"
        );
        (count, self.value(&format!("{name}_sum"), labels))
    }
}

// ---------------------------------------------------------------------------
// HTTP: scrapes, and every /mcp request counted as it is answered.
// ---------------------------------------------------------------------------

/// `GET path` with `headers`; the whole response: status, the head's
/// header lines (lowercase), body.
async fn get(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let headers: Vec<(&str, String)> = headers.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    let r = tokio::time::timeout(Duration::from_secs(20), fetch(addr, method, path, &headers, b""))
        .await
        .expect("an answer within 20 s")
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let head: String = r.headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    (r.status, head.to_ascii_lowercase(), r.body)
}

async fn scrape(addr: SocketAddr) -> Scrape {
    let (status, head, body) = get(addr, "GET", "/metrics", &[]).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        head.contains("content-type: text/plain; version=0.0.4"),
        "not the Prometheus text format: {head}"
    );
    parse(&body)
}

/// A client that counts what it sent, by JSON-RPC method and HTTP status.
struct Counted {
    client: Client,
    sent: BTreeMap<(String, u16), f64>,
}

impl Counted {
    fn count(&mut self, method: &str, status: u16) {
        *self.sent.entry((method.to_owned(), status)).or_default() += 1.0;
    }

    async fn send(&mut self, method: &str, params: Value) -> HttpResponse {
        let resp = self.client.send(method, params).await;
        self.count(method, resp.status);
        resp
    }

    async fn call(&mut self, method: &str, params: Value) -> Value {
        let resp = self.send(method, params).await;
        let v = resp.json();
        assert!(v.get("error").is_none(), "{method} failed: {}", resp.body);
        v["result"].clone()
    }

    /// `tools/call` of `tool` (counted); the task's id.
    async fn start_task(&mut self, tool: &str, arguments: Value) -> String {
        let r = self
            .call("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        r["taskId"].as_str().expect("a task").to_owned()
    }

    async fn task(&mut self, id: &str) -> Value {
        self.call("tasks/get", json!({"taskId": id})).await
    }

    async fn until(&mut self, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
        for _ in 0..3000 {
            let t = self.task(id).await;
            if pred(&t) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {id} never reached the expected state");
    }

    /// Every task of the tree under `root`, by walking `childTaskIds`: (id, status).
    async fn walk(&mut self, root: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut todo = vec![root.to_owned()];
        while let Some(id) = todo.pop() {
            let t = self.task(&id).await;
            todo.extend(child_ids(&t));
            out.push((id, t["status"].as_str().unwrap().to_owned()));
        }
        out
    }
}

fn count_status(tasks: &[(String, String)], status: &str) -> f64 {
    tasks.iter().filter(|(_, s)| s == status).count() as f64
}

/// Polls scrapes until `pred` holds (10 s at most): gauges settle after
/// the answer that caused their change.
async fn scrape_until(addr: SocketAddr, what: &str, pred: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = scrape(addr).await;
        if pred(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never: {what}\n{}", s.text);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start(dir: &TempDir, extra: &[&str]) -> ServerProcess {
    let bin = private_binary(&dir.0);
    let mut args = vec!["--db".to_owned(), dir.db().display().to_string()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    ServerProcess::start(&bin, &args, &dir.0.join("server.log"), Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("subtask serve did not start: {e}"))
}

// ---------------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_the_server_did() {
    let dir = TempDir::new("metrics");
    let server = start(&dir, &["--max-running", "64"]).await;
    let addr = server.addr();
    let mut c = Counted {
        client: Client::new(addr, full_caps()),
        sent: BTreeMap::new(),
    };

    let before = scrape(addr).await;
    for (name, kind) in [
        ("subtask_tasks_created_total", "counter"),
        ("subtask_tasks_ended_total", "counter"),
        ("subtask_tasks", "gauge"),
        ("subtask_tasks_retained", "gauge"),
        ("subtask_handler_duration_seconds", "histogram"),
        ("subtask_handlers", "gauge"),
        ("subtask_handlers_external", "gauge"),
        ("subtask_scheduler_running", "gauge"),
        ("subtask_scheduler_queued", "gauge"),
        ("subtask_scheduler_max_running", "gauge"),
        ("subtask_store_writable", "gauge"),
        ("subtask_store_commit_duration_seconds", "histogram"),
        ("subtask_store_commit_group_size", "histogram"),
        ("subtask_store_sync_duration_seconds", "histogram"),
        ("subtask_http_requests_total", "counter"),
        ("subtask_http_open_streams", "gauge"),
        ("subtask_build_info", "gauge"),
    ] {
        assert_eq!(before.types.get(name).map(String::as_str), Some(kind), "{name}");
    }
    // Every tool's series exist before its first task.
    for tool in ["fanout", "deep_research"] {
        assert_eq!(
            before.value("subtask_tasks_created_total", &[("tool", tool)]),
            0.0
        );
        assert_eq!(
            before.value(
                "subtask_tasks_ended_total",
                &[("tool", tool), ("status", "failed")]
            ),
            0.0
        );
        assert_eq!(
            before.value("subtask_tasks", &[("tool", tool), ("status", "working")]),
            0.0
        );
    }
    assert_eq!(before.value("subtask_scheduler_max_running", &[]), 64.0);
    assert_eq!(before.value("subtask_store_writable", &[]), 1.0);
    assert_eq!(before.value("subtask_http_open_streams", &[]), 0.0);

    // Tree A: 1 + 3 + 9 tasks; node 0.1 fails (after its own children
    // complete), the rest complete.
    let a = c
        .start_task(
            "fanout",
            json!({"width": 3, "depth": 2, "steps": 2, "stepMs": 5, "failAt": "0.1"}),
        )
        .await;
    c.until(&a, is_terminal).await;
    let tree_a = c.walk(&a).await;
    assert_eq!(tree_a.len(), 13);
    assert_eq!(count_status(&tree_a, "failed"), 1.0, "{tree_a:?}");

    // Tree B: long steps, watched by a listen stream, then cancelled.
    let b = c
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 1000, "stepMs": 50}),
        )
        .await;
    c.until(&b, |t| child_ids(t).len() == 2).await;
    let mut listen = c
        .client
        .stream("subscriptions/listen", json!({"notifications": {"taskIds": [b]}}))
        .await;
    let listen_status = listen.status;
    assert_eq!(listen_status, 200, "{:?}", listen.headers);
    c.count("subscriptions/listen", listen_status);

    // Every handler of B sleeps its steps in ctx.external (fanout.rs),
    // leaving it only for a checkpoint between steps.
    let live = scrape_until(addr, "one open stream and tree B live, in ctx.external", |s| {
        s.value("subtask_http_open_streams", &[]) == 1.0
            && s.value("subtask_tasks", &[("tool", "fanout"), ("status", "working")]) == 3.0
            && s.value("subtask_handlers_external", &[]) == 3.0
    })
    .await;
    assert_eq!(
        live.sum("subtask_tasks", &[("tool", "fanout")]),
        3.0,
        "{}",
        live.text
    );
    assert_eq!(live.value("subtask_handlers", &[]), 3.0);
    // A handler in ctx.external gives its slot back.
    let running = live.value("subtask_scheduler_running", &[]);
    assert!(running <= 3.0, "{running} slots in use");

    let cancel = c.send("tasks/cancel", json!({"taskId": b})).await;
    assert_eq!(cancel.status, 200, "{}", cancel.body);
    // The stream ends once every task it follows has ended.
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(event) = listen.next_event().await {
            rest.push_str(&event.unwrap().data.unwrap_or_default());
        }
    })
    .await
    .expect("the listen stream ends after the cancel");
    assert!(rest.contains("cancelled"), "{rest}");
    c.until(&b, is_terminal).await;
    let tree_b = c.walk(&b).await;
    assert_eq!(tree_b.len(), 3);
    assert_eq!(count_status(&tree_b, "cancelled"), 3.0, "{tree_b:?}");

    // Requests that fail: an unknown task (a JSON-RPC error), an
    // Mcp-Method header that contradicts the body (400), an unknown
    // method, a GET, a body that is not JSON, a foreign Host.
    let unknown = c
        .send(
            "tasks/get",
            json!({"taskId": "00000000-0000-4000-8000-000000000000"}),
        )
        .await;
    assert!(unknown.json().get("error").is_some(), "{}", unknown.body);
    let (mut headers, body) = c.client.envelope("tasks/get", json!({"taskId": b}));
    for (k, v) in &mut headers {
        if *k == "Mcp-Method" {
            *v = "tools/list".to_owned();
        }
    }
    let mismatch = raw(addr, "POST", &headers, &body).await;
    assert_eq!(mismatch.status, 400, "{}", mismatch.body);
    c.count("tasks/get", mismatch.status);
    c.send("bogus/method", json!({})).await;
    let (status, _, _) = get(addr, "GET", "/mcp", &[]).await;
    assert_eq!(status, 405);
    c.count("none", status);
    let junk = raw(
        addr,
        "POST",
        &[("Content-Type", "application/json".to_owned())],
        b"{not json",
    )
    .await;
    assert_eq!(junk.status, 400);
    c.count("none", junk.status);
    let foreign = raw(addr, "POST", &[("Host", "evil.example.com".to_owned())], b"{}").await;
    assert_eq!(foreign.status, 403);
    c.count("none", foreign.status);

    // Handlers have returned and the stream is closed (gauges settle
    // after the answers that changed them).
    let after = scrape_until(addr, "no handler, no stream", |s| {
        s.value("subtask_handlers", &[]) == 0.0 && s.value("subtask_http_open_streams", &[]) == 0.0
    })
    .await;

    let created = (tree_a.len() + tree_b.len()) as f64;
    assert_eq!(
        after.value("subtask_tasks_created_total", &[("tool", "fanout")]),
        created
    );
    assert_eq!(
        after.value("subtask_tasks_created_total", &[("tool", "deep_research")]),
        0.0
    );
    for status in ["completed", "failed", "cancelled"] {
        let done = count_status(&tree_a, status) + count_status(&tree_b, status);
        assert_eq!(
            after.value(
                "subtask_tasks_ended_total",
                &[("tool", "fanout"), ("status", status)]
            ),
            done,
            "ended {status}"
        );
    }
    assert_eq!(
        after.sum("subtask_tasks", &[("tool", "fanout")]),
        0.0,
        "{}",
        after.text
    );
    assert_eq!(
        after.value("subtask_tasks_retained", &[("tool", "fanout")]),
        created
    );
    let (handlers, handler_seconds) =
        after.histogram("subtask_handler_duration_seconds", &[("tool", "fanout")]);
    assert_eq!(handlers, created, "every task's handler ran once");
    assert!(handler_seconds > 0.0);
    assert_eq!(after.value("subtask_handlers_external", &[]), 0.0);
    assert_eq!(after.value("subtask_scheduler_running", &[]), 0.0);
    assert_eq!(after.value("subtask_scheduler_queued", &[]), 0.0);

    let (commits, commit_seconds) = after.histogram("subtask_store_commit_duration_seconds", &[]);
    let (groups, batches) = after.histogram("subtask_store_commit_group_size", &[]);
    assert!(commits > 0.0 && commit_seconds > 0.0, "{}", after.text);
    assert_eq!(groups, commits, "one group size per commit");
    assert!(batches >= commits, "a commit carries at least one batch");
    let (syncs, _) = after.histogram("subtask_store_sync_duration_seconds", &[]);
    assert!(syncs > 0.0, "full durability fsyncs in a stage of its own");

    // Requests, by method and code: exactly what this test sent.
    let (b0, b1) = (before.requests(), after.requests());
    let delta: BTreeMap<(String, u16), f64> = b1
        .iter()
        .map(|(k, v)| (k.clone(), v - b0.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect();
    // Methods outside the fixed list are counted as `other`.
    let mut expected: BTreeMap<(String, u16), f64> = BTreeMap::new();
    for ((method, code), n) in &c.sent {
        let method = if method == "bogus/method" {
            "other"
        } else {
            method.as_str()
        };
        *expected.entry((method.to_owned(), *code)).or_default() += n;
    }
    assert_eq!(delta, expected, "requests by method and code");
    assert!(
        expected
            .keys()
            .any(|(m, code)| m == "tasks/get" && (400..500).contains(code)),
        "a 4xx of a known method was counted"
    );
    assert_eq!(
        after.value("subtask_build_info", &[("version", env!("CARGO_PKG_VERSION"))]),
        1.0
    );

    // The Host guard of /mcp, and GET only.
    let (status, _, _) = get(addr, "GET", "/metrics", &[("Host", "evil.example.com")]).await;
    assert_eq!(status, 403);
    let (status, _, _) = get(addr, "POST", "/metrics", &[("Content-Length", "0")]).await;
    assert_eq!(status, 405);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_metrics_turns_the_route_off() {
    let dir = TempDir::new("metrics-off");
    let server = start(&dir, &["--no-metrics"]).await;
    let (status, _, _) = get(server.addr(), "GET", "/metrics", &[]).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_metrics_need_a_valid_bearer_token() {
    let dir = TempDir::new("metrics-tokens");
    let tokens = dir.0.join("tokens");
    std::fs::write(&tokens, "s3cret-ops ops\ns3cret-alice alice\n").unwrap();
    let server = start(&dir, &["--tokens", tokens.to_str().unwrap()]).await;
    let addr = server.addr();
    let (status, head, _) = get(addr, "GET", "/metrics", &[]).await;
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    let (status, _, _) = get(addr, "GET", "/metrics", &[("Authorization", "Bearer wrong")]).await;
    assert_eq!(status, 401);
    for token in ["s3cret-ops", "s3cret-alice"] {
        let bearer = format!("Bearer {token}");
        let (status, _, body) = get(addr, "GET", "/metrics", &[("Authorization", bearer.as_str())]).await;
        assert_eq!(status, 200, "{body}");
        let s = parse(&body);
        assert!(s.types.contains_key("subtask_tasks_created_total"));
        // No principal's name in any label.
        assert!(!body.contains("alice") && !body.contains("\"ops\""), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_restored_tasks_count_in_the_gauges_not_as_created() {
    let dir = TempDir::new("metrics-restart");
    let server = start(&dir, &[]).await;
    let mut c = Counted {
        client: Client::new(server.addr(), full_caps()),
        sent: BTreeMap::new(),
    };
    let a = c
        .start_task("fanout", json!({"width": 2, "depth": 2, "steps": 1, "stepMs": 1}))
        .await;
    c.until(&a, is_terminal).await;
    let tree_a = c.walk(&a).await;
    assert_eq!(tree_a.len(), 7);
    let b = c
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 1000, "stepMs": 50}),
        )
        .await;
    c.until(&b, |t| child_ids(t).len() == 2).await;
    assert!(server.kill());
    server.wait();

    // The same database: tree B comes back live (its root runs again or
    // fails; what ran under it fails); tree A, marked as it ended, is not
    // loaded again: the file answers for it.
    let server = start(&dir, &[]).await;
    let addr = server.addr();
    c.client = Client::new(addr, full_caps());
    let cancel = c.send("tasks/cancel", json!({"taskId": b})).await;
    assert_eq!(cancel.status, 200, "{}", cancel.body);
    c.until(&b, is_terminal).await;
    let tree_b = c.walk(&b).await;
    assert!(tree_b.len() >= 3, "{tree_b:?}");
    let after = scrape_until(addr, "no handler", |s| s.value("subtask_handlers", &[]) == 0.0).await;

    // Created here: B's tasks beyond the three it had before the restart.
    assert_eq!(
        after.value("subtask_tasks_created_total", &[("tool", "fanout")]),
        (tree_b.len() - 3) as f64
    );
    // Ended here: every task of B (A had ended before the restart).
    for status in ["completed", "failed", "cancelled"] {
        assert_eq!(
            after.value(
                "subtask_tasks_ended_total",
                &[("tool", "fanout"), ("status", status)]
            ),
            count_status(&tree_b, status),
            "ended {status}: {tree_b:?}"
        );
    }
    assert_eq!(
        after.sum("subtask_tasks", &[("tool", "fanout")]),
        0.0,
        "{}",
        after.text
    );
    assert_eq!(
        after.value("subtask_tasks_retained", &[("tool", "fanout")]),
        tree_b.len() as f64
    );
    let again = c.walk(&a).await;
    assert_eq!(again, tree_a);
}
