//! The 2025-11-25 tasks wire on the legacy (`initialize`) path, over real
//! HTTP on 127.0.0.1: capabilities, task-augmented `tools/call`,
//! `tasks/get`, `tasks/result` (waiting, status notifications, input
//! requests answered by a POSTed response), `tasks/list` (paginated, per
//! principal), `tasks/cancel`, SEP-2268 subtasks, and how a task looks
//! from the other wire.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use subtask::runtime::RuntimeConfig;
use subtask::server::{
    Server, ServerConfig, TaskSupport, TokenTable, ToolCall, ToolOutcome, ToolSpec, text_result,
};
use support::http::{Client, child_ids, full_caps, raw, stream};

const V: &str = "2025-11-25";

async fn start(config: ServerConfig) -> SocketAddr {
    let runtime = support::store::runtime(RuntimeConfig::default());
    let server = subtask::demo::register(Server::builder(runtime, config))
        .tool(
            ToolSpec::new(
                "only_task",
                "Runs only as a task.",
                json!({"type": "object"}),
                TaskSupport::Required,
            ),
            |_call: ToolCall| async move { ToolOutcome::task(|_| async move { Ok(text_result("done")) }) },
        )
        .tool(
            ToolSpec::new(
                "never_task",
                "Never a task.",
                json!({"type": "object"}),
                TaskSupport::Forbidden,
            ),
            |_call: ToolCall| async move { ToolOutcome::Complete(text_result("now")) },
        )
        .build();
    support::http::serve(server).await
}

/// A 2025-11-25 client: no `_meta`, the version header, an optional token.
#[derive(Clone)]
struct Legacy {
    addr: SocketAddr,
    token: Option<String>,
}

impl Legacy {
    fn new(addr: SocketAddr) -> Self {
        Legacy { addr, token: None }
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            ("Content-Type", "application/json".to_owned()),
            ("Accept", "application/json, text/event-stream".to_owned()),
            ("MCP-Protocol-Version", V.to_owned()),
        ];
        if let Some(t) = &self.token {
            h.push(("Authorization", format!("Bearer {t}")));
        }
        h
    }

    /// The whole JSON-RPC answer (status 200 asserted).
    async fn send(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r = raw(self.addr, "POST", &self.headers(), body.to_string().as_bytes()).await;
        assert_eq!(r.status, 200, "{method}: {}", r.body);
        if r.header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"))
        {
            return sse_messages(&r.body).pop().expect("a response on the stream");
        }
        r.json()
    }

    async fn ok(&self, method: &str, params: Value) -> Value {
        let v = self.send(method, params).await;
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    async fn err(&self, method: &str, params: Value) -> Value {
        let v = self.send(method, params).await;
        v.get("error")
            .unwrap_or_else(|| panic!("{method} succeeded: {v}"))
            .clone()
    }

    async fn get(&self, id: &str) -> Value {
        self.ok("tasks/get", json!({"taskId": id})).await
    }

    async fn until_status(&self, id: &str, status: &str) -> Value {
        for _ in 0..1000 {
            let t = self.get(id).await;
            if t["status"] == status {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {id} never reached {status}");
    }

    async fn start_task(&self, tool: &str, args: Value) -> String {
        let r = self
            .ok(
                "tools/call",
                json!({"name": tool, "arguments": args, "task": {"ttl": 60000}}),
            )
            .await;
        r["task"]["taskId"]
            .as_str()
            .expect("a CreateTaskResult")
            .to_owned()
    }
}

fn sse_messages(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn initialize_declares_tasks_and_tools_their_task_support() {
    let addr = start(ServerConfig::default()).await;
    let c = Legacy::new(addr);
    let init = c
        .ok(
            "initialize",
            json!({"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
    assert_eq!(init["protocolVersion"], V);
    assert_eq!(
        init["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
    );
    // Tasks do not exist in 2025-06-18.
    let old = c
        .ok("initialize", json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
        .await;
    assert!(old["capabilities"].get("tasks").is_none());
    let tools = c.ok("tools/list", json!({})).await;
    let support: Vec<(String, String)> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["execution"]["taskSupport"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(support.contains(&("fanout".into(), "optional".into())));
    assert!(support.contains(&("only_task".into(), "required".into())));
    assert!(support.contains(&("never_task".into(), "forbidden".into())));
    // Tool-level negotiation: -32601 both ways.
    let e = c.err("tools/call", json!({"name": "only_task"})).await;
    assert_eq!(e["code"], -32601);
    let e = c
        .err("tools/call", json!({"name": "never_task", "task": {}}))
        .await;
    assert_eq!(e["code"], -32601);
    let e = c
        .err("tools/call", json!({"name": "fanout", "task": {"ttl": "soon"}}))
        .await;
    assert_eq!(e["code"], -32602);
}

#[tokio::test]
async fn a_task_augmented_call_completes_with_subtasks_and_related_task_metadata() {
    let addr = start(ServerConfig::default()).await;
    let c = Legacy::new(addr);
    let created = c
        .ok("tools/call", json!({"name": "fanout", "arguments": {"width": 2, "depth": 1, "steps": 1, "stepMs": 5}, "task": {"ttl": 60000}}))
        .await;
    let task = &created["task"];
    assert_eq!(task["status"], "working");
    assert_eq!(task["ttl"], 60000);
    assert!(task["pollInterval"].is_u64());
    assert!(
        created.get("resultType").is_none() && task.get("ttlMs").is_none(),
        "{created}"
    );
    let root = task["taskId"].as_str().unwrap().to_owned();
    let done = c.until_status(&root, "completed").await;
    let children = child_ids(&done);
    assert_eq!(children.len(), 2);
    assert!(done.get("result").is_none(), "no inlined result on this wire");
    let result = c.ok("tasks/result", json!({"taskId": root})).await;
    assert_eq!(result["structuredContent"]["nodes"], 3);
    assert!(result.get("resultType").is_none());
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"],
        json!({"taskId": root})
    );
    for child in &children {
        let t = c.get(child).await;
        assert_eq!(t["parentTaskId"], root.as_str());
        assert_eq!(t["status"], "completed");
        let r = c.ok("tasks/result", json!({"taskId": child})).await;
        assert_eq!(
            r["_meta"]["io.modelcontextprotocol/related-task"],
            json!({"taskId": child, "parentTaskId": root}),
            "SEP-2268: related-task carries parentTaskId"
        );
    }
}

#[tokio::test]
async fn tasks_result_waits_with_status_notifications_and_failures_are_failed() {
    let addr = start(ServerConfig::default()).await;
    let c = Legacy::new(addr);
    let id = c
        .start_task(
            "fanout",
            json!({"width": 1, "depth": 1, "steps": 3, "stepMs": 20}),
        )
        .await;
    // Called while the task runs: an SSE stream of status notifications, then the result.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/result", "params": {"taskId": id}});
    let r = raw(addr, "POST", &c.headers(), body.to_string().as_bytes()).await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/event-stream"));
    let messages = sse_messages(&r.body);
    let (last, notes) = messages.split_last().unwrap();
    assert_eq!(last["id"], 9);
    assert_eq!(last["result"]["structuredContent"]["nodes"], 2);
    assert!(!notes.is_empty());
    for n in notes {
        assert_eq!(n["method"], "notifications/tasks/status");
        assert_eq!(n["params"]["taskId"], id.as_str());
    }
    assert_eq!(notes.last().unwrap()["params"]["status"], "completed");

    // A JSON-RPC failure: `failed`, and tasks/result answers that same error.
    let id = c
        .start_task(
            "fanout",
            json!({"width": 0, "depth": 0, "steps": 0, "failAt": "0"}),
        )
        .await;
    let t = c.until_status(&id, "failed").await;
    assert!(
        t["statusMessage"]
            .as_str()
            .unwrap()
            .contains("failed as requested"),
        "{t}"
    );
    let e = c.err("tasks/result", json!({"taskId": id})).await;
    assert_eq!(e["code"], -32603);
    // A tool result with isError is `failed` on this wire; tasks/result is that result.
    let id = c.start_task("fanout", json!({"width": 999})).await;
    let t = c.until_status(&id, "failed").await;
    assert!(t["statusMessage"].as_str().unwrap().contains("width"), "{t}");
    let r = c.ok("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r["isError"], true);
    // Unknown ids.
    let e = c.err("tasks/result", json!({"taskId": "not-a-task"})).await;
    assert_eq!(e["code"], -32602);
}

#[tokio::test]
async fn tasks_cancel_answers_cancelled_and_refuses_a_terminal_task() {
    let addr = start(ServerConfig::default()).await;
    let c = Legacy::new(addr);
    let id = c
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 500, "stepMs": 20}),
        )
        .await;
    let t = c.until_status(&id, "working").await;
    let children = t["childTaskIds"].clone();
    let cancelled = c.ok("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    for child in children.as_array().unwrap() {
        assert_eq!(c.get(child.as_str().unwrap()).await["status"], "cancelled");
    }
    let e = c.err("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(e["code"], -32602);
    assert_eq!(
        e["message"],
        "Cannot cancel task: already in terminal status 'cancelled'"
    );
    let e = c.err("tasks/result", json!({"taskId": id})).await;
    assert_eq!(e["code"], -32603);
}

#[tokio::test]
async fn tasks_list_pages_through_every_task_of_the_caller_only() {
    let tokens = TokenTable::parse("alice-token alice\nbob-token bob\n").unwrap();
    let addr = start(ServerConfig {
        tokens: Some(tokens),
        ..ServerConfig::default()
    })
    .await;
    let alice = Legacy {
        addr,
        token: Some("alice-token".into()),
    };
    let bob = Legacy {
        addr,
        token: Some("bob-token".into()),
    };
    let mut expected = Vec::new();
    for _ in 0..3 {
        let root = alice
            .start_task("fanout", json!({"width": 45, "depth": 1, "steps": 0}))
            .await;
        let done = alice.until_status(&root, "completed").await;
        expected.push(root);
        expected.extend(child_ids(&done));
    }
    let bobs = bob
        .start_task("fanout", json!({"width": 0, "depth": 0, "steps": 0}))
        .await;
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = alice.ok("tasks/list", params).await;
        pages += 1;
        for t in page["tasks"].as_array().unwrap() {
            assert!(t["taskId"].is_string() && t["status"].is_string() && t.get("result").is_none());
            seen.push(t["taskId"].as_str().unwrap().to_owned());
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(
        seen, expected,
        "every task once, trees in creation order, parents first"
    );
    assert!(pages >= 2, "138 tasks take more than one page");
    assert!(!seen.contains(&bobs));
    let bob_page = bob.ok("tasks/list", json!({})).await;
    assert_eq!(bob_page["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(bob_page["tasks"][0]["taskId"], bobs.as_str());
    // Another principal's task does not exist for bob, and cursors are checked.
    let e = bob.err("tasks/get", json!({"taskId": expected[0]})).await;
    assert_eq!(e["code"], -32602);
    let e = alice.err("tasks/list", json!({"cursor": "garbage"})).await;
    assert_eq!(e["code"], -32602);
}

#[tokio::test]
async fn input_requests_reach_the_client_on_the_result_stream_and_its_answer_continues_the_task() {
    let addr = start(ServerConfig::default()).await;
    let c = Legacy::new(addr);
    let id = c
        .start_task(
            "fanout",
            json!({"width": 0, "depth": 0, "steps": 1, "stepMs": 1, "inputAt": "0"}),
        )
        .await;
    c.until_status(&id, "input_required").await;
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/result", "params": {"taskId": id}});
    let mut resp = stream(addr, "POST", "/mcp", &c.headers(), body.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(resp.status, 200);
    let mut answered = false;
    let last = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let event = resp.next_event().await.expect("the stream ends with the response").unwrap();
            let Some(data) = event.data else { continue };
            let m: Value = serde_json::from_str(&data).unwrap();
            if m["method"] == "elicitation/create" {
                assert!(!answered, "each input request is sent once");
                assert_eq!(m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id.as_str());
                assert_eq!(m["params"]["mode"], "form");
                let answer = json!({"jsonrpc": "2.0", "id": m["id"], "result": {"action": "accept", "content": {"confirm": true}}});
                let r = raw(addr, "POST", &c.headers(), answer.to_string().as_bytes()).await;
                assert_eq!(r.status, 202, "{}", r.body);
                answered = true;
            } else if m.get("id") == Some(&json!(5)) {
                return m;
            }
        }
    })
    .await
    .expect("tasks/result answered within 20 s");
    assert!(answered);
    assert_eq!(last["result"]["structuredContent"]["nodes"], 1, "{last}");
    // A response to nothing this server asked is refused.
    let stray = json!({"jsonrpc": "2.0", "id": "subtask-input:nope:confirm-0", "result": {}});
    assert_eq!(
        raw(addr, "POST", &c.headers(), stray.to_string().as_bytes())
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn a_task_looks_right_from_either_wire() {
    let addr = start(ServerConfig::default()).await;
    let legacy = Legacy::new(addr);
    let modern = Client::new(addr, full_caps());
    // Created on the 2026 wire, paused: the legacy wire has no `paused`.
    let id = modern
        .start_task(
            "fanout",
            json!({"width": 1, "depth": 1, "steps": 500, "stepMs": 20}),
        )
        .await;
    modern.call("tasks/pause", json!({"taskId": id})).await;
    modern.until_status(&id, "paused").await;
    let t = legacy.get(&id).await;
    assert_eq!(t["status"], "working");
    assert!(t["statusMessage"].as_str().unwrap().contains("paused"), "{t}");
    let listed = legacy.ok("tasks/list", json!({})).await;
    assert!(
        listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["taskId"] == id.as_str())
    );
    legacy.ok("tasks/cancel", json!({"taskId": id})).await;
    // Created on the legacy wire: the 2026 wire shows its result inline.
    let id = legacy
        .start_task("fanout", json!({"width": 0, "depth": 0, "steps": 0}))
        .await;
    let t = modern.until_status(&id, "completed").await;
    assert_eq!(t["result"]["resultType"], "complete");
    assert_eq!(t["result"]["structuredContent"]["nodes"], 1);
}
