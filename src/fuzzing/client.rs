//! The client against a hostile server: scripted answers through the
//! client's HTTP decoding, into its tree checks.
//!
//! # Input
//!
//! Text. The first line names what the client does, with optional flags:
//! `call` (`call_tool_stream`), `wait` (`call_tool`), `watch`, `tree`
//! (`get_tree`), `get`, `pause`, `resume`, `cancel`, `steer`, `update`,
//! `tools` or `discover`; flag `nosub` turns subscriptions off and `input`
//! sets an input handler that accepts every request. Then the server's
//! answers (at most [`MAX_ANSWERS`]), each after a line
//! `=== TAG [STATUS] [KIND] [open] [chunk=N]`:
//!
//! * `TAG` is the method it answers (`tools/call`, `tasks/get`,
//!   `subscriptions/listen`, ... or the short forms `call`, `get`, `listen`,
//!   `update`, `cancel`, `steer`, `pause`, `resume`) or `*` for any; a
//!   request takes the first unused answer whose tag matches;
//! * `STATUS` is the HTTP status (200); `KIND` is `json` (the default),
//!   `sse` (the body is an SSE stream), `text`, `broken` (the connection
//!   fails) or `silent` (no answer); `open` keeps the body open after it;
//!   `chunk=N` delivers the body in chunks of `N` bytes.
//!
//! In a body, `$ID` is the request's JSON-RPC id, `$ASKED` the task id it
//! asks about, and `#N` the task id `N` (decimal; `#1` is the root of
//! `watch`, `tree` and the single calls). A request with no answer left
//! finds the connection broken, so every walk ends.
//!
//! # Properties
//!
//! No panic, no hang (a walk ends within a virtual day: every wait of the
//! client is bounded), and whatever the server says:
//!
//! * the tree the client believes stays within its limits, acyclic, each
//!   node named by its parent one level up;
//! * partial results come out at most once per task, only for terminal
//!   tasks, children before their parent (I12), and a walk that ends
//!   without an error has handed out every task of the tree.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::text::sections;
use crate::client::scripted::{Responder, ScriptedAnswer, ScriptedRequest};
use crate::client::{
    ClientBuilder, ClientConfig, ClientLimits, InputRequest, PartialResult, TaskTree, WatchEvent,
};
use crate::model::{JsonObject, TaskId};

/// Answers per input; the rest is ignored.
pub const MAX_ANSWERS: usize = 48;
/// A walk that runs longer than this (virtual time) hangs.
const HANG: Duration = Duration::from_secs(24 * 3600);

fn limits() -> ClientLimits {
    ClientLimits {
        max_tasks: 64,
        max_depth: 8,
        max_children: 16,
        max_response_bytes: 64 * 1024,
        max_input_requests_per_task: 4,
        dangling_attempts: 3,
        max_mrtr_rounds: 3,
    }
}

/// One scripted answer.
#[derive(Debug)]
struct Answer {
    tag: String,
    status: u16,
    kind: String,
    open: bool,
    chunk: usize,
    body: String,
    used: bool,
}

fn parse_answer(head: &str, body: &str) -> Answer {
    let mut a = Answer {
        tag: "*".to_owned(),
        status: 200,
        kind: "json".to_owned(),
        open: false,
        chunk: 0,
        body: body.to_owned(),
        used: false,
    };
    for (i, word) in head.split_whitespace().enumerate() {
        if let Ok(status) = word.parse::<u16>() {
            a.status = status;
        } else if let Some(n) = word.strip_prefix("chunk=") {
            a.chunk = n.parse().unwrap_or(0);
        } else if word == "open" {
            a.open = true;
        } else if matches!(word, "json" | "sse" | "text" | "broken" | "silent") {
            a.kind = word.to_owned();
        } else if i == 0 {
            a.tag = word.to_owned();
        }
    }
    a
}

fn tag_matches(tag: &str, method: &str) -> bool {
    tag == "*"
        || tag == method
        || method
            .rsplit('/')
            .next()
            .is_some_and(|short| short == tag && !tag.is_empty())
}

/// `#N` as task id `N`, `$ID` and `$ASKED` as the request's.
fn render(body: &str, req: &ScriptedRequest) -> String {
    let asked = serde_json::from_slice::<Value>(&req.body)
        .ok()
        .and_then(|v| v["params"]["taskId"].as_str().map(str::to_owned))
        .unwrap_or_else(|| TaskId::from_u128(1).to_string());
    let body = body
        .replace("$ID", &req.id.to_value().to_string())
        .replace("$ASKED", &asked);
    let mut out = String::with_capacity(body.len());
    let mut rest = body.as_str();
    while let Some(i) = rest.find('#') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count().min(30);
        match tail[..digits].parse::<u128>() {
            Ok(n) if digits > 0 => out.push_str(&TaskId::from_u128(n).to_string()),
            _ => out.push('#'),
        }
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

fn responder(answers: Vec<Answer>) -> Responder {
    let script = Mutex::new(answers);
    Arc::new(move |req: ScriptedRequest| {
        check_request(&req);
        let mut script = script.lock();
        let Some(a) = script
            .iter_mut()
            .find(|a| !a.used && tag_matches(&a.tag, &req.method))
        else {
            return ScriptedAnswer::Broken("the scripted server has no more answers".to_owned());
        };
        a.used = true;
        match a.kind.as_str() {
            "broken" => return ScriptedAnswer::Broken("the scripted connection broke".to_owned()),
            "silent" => return ScriptedAnswer::Silent,
            _ => {}
        }
        let content_type = match a.kind.as_str() {
            "sse" => "text/event-stream",
            "text" => "text/plain",
            _ => "application/json",
        };
        let body = render(&a.body, &req).into_bytes();
        let chunks = if a.chunk == 0 {
            vec![body]
        } else {
            body.chunks(a.chunk).map(<[u8]>::to_vec).collect()
        };
        ScriptedAnswer::Http {
            status: a.status,
            content_type: content_type.to_owned(),
            chunks,
            open: a.open,
        }
    })
}

/// What the client sends is well-formed whatever it was told: a JSON-RPC
/// request with the 2026-07-28 `_meta`, its `Mcp-Name` the tool name or
/// task id of its params.
fn check_request(req: &ScriptedRequest) {
    let v: Value = serde_json::from_slice(&req.body).expect("the client sends JSON");
    assert_eq!(
        v["method"],
        req.method.as_str(),
        "Mcp-Method is the body's method"
    );
    assert_eq!(v["id"], req.id.to_value(), "the id is the request's");
    let meta = &v["params"]["_meta"];
    assert_eq!(
        meta["io.modelcontextprotocol/protocolVersion"],
        crate::model::PROTOCOL_VERSION,
        "every request carries the protocol version"
    );
    let source = if req.method == "tools/call" {
        "name"
    } else {
        "taskId"
    };
    match &req.name {
        Some(name) => assert_eq!(v["params"][source], name.as_str(), "Mcp-Name is params.{source}"),
        None => assert!(
            !req.method.starts_with("tasks/") && req.method != "tools/call",
            "{} carries Mcp-Name",
            req.method
        ),
    }
}

/// Runs one input (see the module docs).
pub fn client_answers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (preamble, secs) = sections(&text);
    let mut words = preamble.split_whitespace();
    let op = words.next().unwrap_or("call").to_owned();
    let flags: HashSet<&str> = words.collect();
    let answers: Vec<Answer> = secs
        .iter()
        .take(MAX_ANSWERS)
        .map(|s| parse_answer(s.head, s.body))
        .collect();
    let config = ClientConfig {
        limits: limits(),
        request_timeout: Duration::from_secs(5),
        max_concurrent_polls: 1,
        max_retries: 2,
        use_subscriptions: !flags.contains("nosub"),
        ..ClientConfig::default()
    };
    let mut builder = ClientBuilder::scripted(responder(answers)).config(config);
    if flags.contains("input") {
        builder = builder.input_handler(|_req: InputRequest| async move {
            JsonObject::from_value(json!({"action": "accept", "content": {"ok": true}})).ok()
        });
    }
    let client = builder.build().expect("a scripted client builds");
    let root = TaskId::from_u128(1);
    super::paused_runtime().block_on(async move {
        let walk = async {
            match op.as_str() {
                "wait" => drop(client.call_tool("t", JsonObject::new()).await),
                "watch" => watch(client.watch(root)).await,
                "tree" => {
                    if let Ok(tree) = client.get_tree(root).await {
                        check_tree(&tree);
                    }
                }
                "get" => drop(client.get(root).await),
                "pause" => drop(client.pause(root).await),
                "resume" => drop(client.resume(root).await),
                "cancel" => drop(client.cancel(root).await),
                "steer" => drop(client.steer(root, "focus").await),
                "update" => {
                    let answer = JsonObject::from_value(json!({"action": "accept"})).expect("an object");
                    drop(client.update(root, [("k".to_owned(), answer)].into()).await);
                }
                "tools" => drop(client.list_tools().await),
                "discover" => drop(client.discover().await),
                _ => call(&client).await,
            }
        };
        if tokio::time::timeout(HANG, walk).await.is_err() {
            panic!("the client did not finish within a virtual day");
        }
    });
}

/// `call_tool_stream`: results at most once each, the root's last.
async fn call(client: &crate::client::Client) {
    let Ok(mut stream) = client.call_tool_stream("t", JsonObject::new()).await else {
        return;
    };
    let root = stream.root_task_id();
    let mut seen: HashSet<Option<TaskId>> = HashSet::new();
    let mut last: Option<PartialResult> = None;
    while let Some(r) = stream.next().await {
        let Ok(r) = r else {
            return;
        };
        assert!(seen.insert(r.task_id), "{:?} was handed out twice", r.task_id);
        assert!(
            last.as_ref().is_none_or(|l| l.task_id != root || root.is_none()),
            "nothing follows the root's result"
        );
        assert!(
            seen.len() <= limits().max_tasks + 1,
            "more results than tasks allowed"
        );
        last = Some(r);
    }
    if let Some(last) = last {
        assert_eq!(
            last.task_id, root,
            "a stream that ends without an error ends with the root"
        );
    }
}

/// `watch`: every event is checked against the tree as it is then.
async fn watch(mut w: crate::client::TreeWatch) {
    let mut emitted: HashSet<TaskId> = HashSet::new();
    let mut ok = false;
    loop {
        match w.next().await {
            None => {
                ok = true;
                break;
            }
            Some(Err(_)) => break,
            Some(Ok(WatchEvent::Changed(id))) => {
                assert!(w.tree().get(id).is_some(), "a changed task {id} is in the tree");
            }
            Some(Ok(WatchEvent::Result(r))) => {
                let id = r.task_id.expect("a walk's results name their task");
                assert!(emitted.insert(id), "{id} was handed out twice");
                let node = w.tree().get(id).expect("a result's task is in the tree");
                assert!(node.is_terminal(), "{id} was handed out before it ended");
                for c in node.children() {
                    assert!(emitted.contains(c), "{id} was handed out before its child {c}");
                }
            }
        }
        check_tree(w.tree());
    }
    let tree = w.tree();
    check_tree(tree);
    if ok {
        assert!(
            emitted.contains(&tree.root()),
            "a finished walk handed out the root"
        );
        for n in tree.pre_order() {
            assert!(emitted.contains(&n.id()), "a finished walk handed out {}", n.id());
        }
    }
}

/// The believed tree: within the limits, acyclic, each node named by its
/// parent one level up.
fn check_tree(tree: &TaskTree) {
    let l = limits();
    assert!(tree.len() <= l.max_tasks, "{} tasks believed", tree.len());
    let mut visited: HashSet<TaskId> = HashSet::new();
    for node in tree.pre_order() {
        assert!(
            visited.insert(node.id()),
            "{} is reached twice (a cycle)",
            node.id()
        );
        assert!(visited.len() <= tree.len(), "the walk leaves the tree");
        assert!(node.depth() <= l.max_depth, "{} is too deep", node.id());
        assert!(
            node.children().len() <= l.max_children,
            "{} has too many children",
            node.id()
        );
        for c in node.children() {
            if let Some(child) = tree.get(*c) {
                assert_eq!(child.named_by(), Some(node.id()), "{c} is named by its parent");
                assert_eq!(
                    child.depth(),
                    node.depth() + 1,
                    "{c} is one level below its parent"
                );
            }
        }
    }
    assert_eq!(
        visited.len(),
        tree.len(),
        "every believed task is reachable from the root"
    );
}
