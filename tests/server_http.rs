//! End-to-end tests of the MCP server over real HTTP on 127.0.0.1: every
//! method, every error code, subtasks, steer / pause / resume across a tree,
//! isolation between principals, limits and malformed input.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use subtask::core::{ForestConfig, Limits};
use subtask::model::{ErrorCode, ErrorObject, JsonObject};
use subtask::runtime::{Runtime, RuntimeConfig, SubtaskOptions, TaskError};
use subtask::server::{
    Server, ServerConfig, ServerLimits, TaskSupport, TokenTable, ToolCall, ToolOutcome, ToolSpec,
    elicitation, text_result,
};
use support::http::{Client, base_task_caps, full_caps, is_terminal, raw, text};
use tokio::sync::Notify;

struct Harness {
    addr: SocketAddr,
    release: Arc<Notify>,
}

fn obj(v: Value) -> JsonObject {
    JsonObject::from_value(v).unwrap()
}

/// A server with test tools on a free loopback port.
async fn start(config: ServerConfig, runtime_config: RuntimeConfig) -> Harness {
    let release = Arc::new(Notify::new());
    let runtime = support::store::runtime(runtime_config);
    let r = release.clone();
    let server = Server::builder(runtime, config)
        .tool(
            ToolSpec::new(
                "echo",
                "Echoes its text argument.",
                json!({"type": "object"}),
                TaskSupport::Forbidden,
            ),
            |call: ToolCall| async move {
                ToolOutcome::Complete(text_result(call.str_arg("text").unwrap_or("").to_owned()))
            },
        )
        .tool(
            ToolSpec::new(
                "tree",
                "A root with `width` children that each wait for a release, then report their steers.",
                json!({"type": "object"}),
                TaskSupport::Required,
            ),
            move |call: ToolCall| {
                let release = r.clone();
                async move {
                    let width = call.i64_arg("width").unwrap_or(2) as usize;
                    let grand = call.i64_arg("grandchildren").unwrap_or(0) as usize;
                    ToolOutcome::task(move |ctx| async move {
                        let mut hs = Vec::new();
                        for i in 0..width {
                            let release = release.clone();
                            hs.push(
                                ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                                    for _ in 0..grand {
                                        ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
                                            ctx.checkpoint().await?;
                                            Ok(text_result("grandchild"))
                                        })?;
                                    }
                                    let mut steers = Vec::new();
                                    loop {
                                        steers.extend(ctx.checkpoint().await?);
                                        tokio::select! {
                                            () = release.notified() => break,
                                            () = tokio::time::sleep(Duration::from_millis(20)) => {}
                                        }
                                    }
                                    steers.extend(ctx.checkpoint().await?);
                                    Ok(text_result(format!("child {i} steers={}", steers.join("|"))))
                                })?,
                            );
                        }
                        for h in hs {
                            let _ = h.await;
                        }
                        Ok(text_result("root done"))
                    })
                }
            },
        )
        .tool(
            ToolSpec::new(
                "ask",
                "Asks two questions as a task.",
                json!({"type": "object"}),
                TaskSupport::Required,
            ),
            |_call: ToolCall| async move {
                ToolOutcome::task(|ctx| async move {
                    let q = |m: &str| elicitation(m, json!({"ok": {"type": "boolean"}}), &["ok"]);
                    let (a, b) = tokio::join!(
                        ctx.request_input("first", q("First?")),
                        ctx.request_input("second", q("Second?"))
                    );
                    let (a, b) = (a?, b?);
                    Ok(text_result(format!("{} {}", a["action"], b["action"])))
                })
            },
        )
        .tool(
            ToolSpec::new(
                "fails",
                "Ends failed.",
                json!({"type": "object"}),
                TaskSupport::Optional,
            ),
            |_call: ToolCall| async move {
                ToolOutcome::task(
                    |_ctx| async move { Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "boom")) },
                )
            },
        )
        .tool(
            ToolSpec::new(
                "mrtr",
                "Asks for a name before creating a task.",
                json!({"type": "object"}),
                TaskSupport::Optional,
            ),
            |call: ToolCall| async move {
                match call
                    .response("name")
                    .and_then(|r| r.get("content"))
                    .and_then(|c| c.get("name"))
                    .and_then(Value::as_str)
                {
                    Some(name) if call.request_state == Some(json!({"round": 1})) => {
                        let name = name.to_owned();
                        ToolOutcome::task(move |_| async move { Ok(text_result(format!("Hello, {name}"))) })
                    }
                    _ => ToolOutcome::InputRequired {
                        input_requests: [(
                            "name".to_owned(),
                            elicitation("Name?", json!({"name": {"type": "string"}}), &["name"]),
                        )]
                        .into(),
                        state: Some(json!({"round": 1})),
                    },
                }
            },
        )
        .build();
    let addr = support::http::serve(server).await;
    Harness { addr, release }
}

async fn default_server() -> Harness {
    start(ServerConfig::default(), RuntimeConfig::default()).await
}

/// Keeps releasing the `tree` tool's waiting children until every task in
/// `ids` is terminal (20 s at most), then returns their final snapshots.
async fn release_until_done(h: &Harness, c: &Client, ids: &[&str]) -> Vec<Value> {
    for _ in 0..1000 {
        h.release.notify_waiters();
        let mut all = Vec::new();
        for id in ids {
            all.push(c.get(id).await);
        }
        if all.iter().all(is_terminal) {
            return all;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("tasks {ids:?} never finished");
}

#[tokio::test]
async fn discover_shows_steer_and_pause_only_to_clients_that_declare_them() {
    let h = default_server().await;
    let tasks_settings = |caps: Value| {
        let c = Client::new(h.addr, caps);
        async move {
            let r = c.call("server/discover", json!({})).await;
            r["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].clone()
        }
    };
    // A client that knows only the final extension (or none) sees exactly `{}`.
    assert_eq!(tasks_settings(json!({})).await, json!({}));
    assert_eq!(tasks_settings(base_task_caps()).await, json!({}));
    // SEP-2669 sub-capabilities are discovered by declaring them.
    assert_eq!(
        tasks_settings(full_caps()).await,
        json!({"steer": true, "pause": true})
    );
    let pause_only = json!({"extensions": {"io.modelcontextprotocol/tasks": {"pause": true}}});
    assert_eq!(tasks_settings(pause_only).await, json!({"pause": true}));
    let c = Client::new(h.addr, json!({}));
    let r = c.call("server/discover", json!({})).await;
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["supportedVersions"], json!(["2026-07-28"]));
    assert!(r["capabilities"].get("tasks").is_none());
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "subtask"
    );
}

#[tokio::test]
async fn tools_list_and_a_synchronous_call() {
    let h = default_server().await;
    let c = Client::new(h.addr, json!({}));
    let r = c.call("tools/list", json!({})).await;
    let names: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "tree", "ask", "fails", "mrtr"]);
    assert_eq!(r["cacheScope"], "private");
    let r = c
        .call("tools/call", json!({"name": "echo", "arguments": {"text": "hi"}}))
        .await;
    assert_eq!(
        (r["resultType"].as_str(), text(&r).as_str()),
        (Some("complete"), "hi")
    );
}

#[tokio::test]
async fn a_task_tool_returns_a_flat_create_task_result_and_subtasks_appear_while_polling() {
    let h = default_server().await;
    let c = Client::new(h.addr, full_caps());
    let r = c
        .call("tools/call", json!({"name": "tree", "arguments": {"width": 3}}))
        .await;
    assert_eq!(r["resultType"], "task");
    assert_eq!(r["status"], "working");
    for absent in ["task", "result", "error", "inputRequests", "requestState"] {
        assert!(r.get(absent).is_none(), "{absent} in {r}");
    }
    let root = r["taskId"].as_str().unwrap().to_owned();
    let children = c.until_children(&root, 3).await;
    for child in &children {
        let ct = c.get(child).await;
        assert_eq!(ct["parentTaskId"], root.as_str());
        assert_eq!(ct["resultType"], "complete");
    }
    h.release.notify_waiters();
    let t = release_until_done(&h, &c, &[&root]).await.remove(0);
    assert_eq!(t["status"], "completed");
    assert_eq!(text(&t["result"]), "root done");
    // The inlined result is a complete 2026-07-28 CallToolResult.
    assert_eq!(t["result"]["resultType"], "complete");
    for (i, child) in children.iter().enumerate() {
        let ct = c.get(child).await;
        assert_eq!(ct["status"], "completed");
        assert_eq!(text(&ct["result"]), format!("child {i} steers="));
        assert_eq!(ct["result"]["resultType"], "complete");
    }
}

#[tokio::test]
async fn input_requests_take_partial_answers_and_ignore_unknown_keys() {
    let h = default_server().await;
    let c = Client::new(h.addr, base_task_caps());
    let id = c.start_task("ask", json!({})).await;
    let t = c
        .until(&id, |t| {
            t["inputRequests"].as_object().is_some_and(|m| m.len() == 2)
        })
        .await;
    assert_eq!(t["status"], "input_required");
    assert_eq!(t["inputRequests"]["first"]["method"], "elicitation/create");
    let ack = c.call("tasks/update", json!({"taskId": id, "inputResponses": {"first": {"action": "accept", "content": {"ok": true}}, "unknown-key": {"ignored": true}}})).await;
    assert_eq!(ack, json!({"resultType": "complete"}));
    let t = c.get(&id).await;
    assert_eq!(t["status"], "input_required");
    assert_eq!(
        t["inputRequests"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["second"]
    );
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"second": {"action": "decline"}}}),
    )
    .await;
    let t = c.until_status(&id, "completed").await;
    assert_eq!(text(&t["result"]), "\"accept\" \"decline\"");
}

#[tokio::test]
async fn a_failing_task_carries_the_json_rpc_error_and_base_clients_get_it_synchronously() {
    let h = default_server().await;
    let c = Client::new(h.addr, base_task_caps());
    let id = c.start_task("fails", json!({})).await;
    let t = c.until_status(&id, "failed").await;
    assert_eq!(t["error"], json!({"code": -32603, "message": "boom"}));
    assert!(t.get("result").is_none());
    // Without the tasks extension an optional task tool answers
    // synchronously, and its failure is a tool result a model can act on
    // (server-tools.md, Error Handling), with HTTP 200.
    let plain = Client::new(h.addr, json!({}));
    let r = plain.send("tools/call", json!({"name": "fails"})).await;
    assert_eq!(r.status, 200);
    let result = &r.json()["result"];
    assert_eq!(
        (result["isError"].as_bool(), result["resultType"].as_str()),
        (Some(true), Some("complete"))
    );
    assert!(
        text(result).contains("boom") && text(result).contains("-32603"),
        "{result}"
    );
}

#[tokio::test]
async fn mrtr_rounds_come_before_the_task_and_tampered_state_is_rejected() {
    let h = default_server().await;
    let c = Client::new(h.addr, full_caps());
    let r = c.call("tools/call", json!({"name": "mrtr"})).await;
    assert_eq!(r["resultType"], "input_required");
    assert!(r.get("taskId").is_none());
    let state = r["requestState"].as_str().unwrap().to_owned();
    let answer = json!({"name": {"action": "accept", "content": {"name": "Alice"}}});
    let (status, e) = c
        .error(
            "tools/call",
            json!({"name": "mrtr", "inputResponses": answer, "requestState": format!("{state}-TAMPERED")}),
        )
        .await;
    assert_eq!((status, e["code"].as_i64()), (200, Some(-32602)));
    let (_, e) = c
        .error(
            "tools/call",
            json!({"name": "mrtr", "inputResponses": null, "requestState": state}),
        )
        .await;
    assert_eq!(e["code"], -32602);
    let r = c
        .call(
            "tools/call",
            json!({"name": "mrtr", "inputResponses": answer, "requestState": state}),
        )
        .await;
    assert_eq!(r["resultType"], "task");
    assert!(r.get("requestState").is_none() && r.get("inputRequests").is_none());
    let t = c.until_status(r["taskId"].as_str().unwrap(), "completed").await;
    assert_eq!(text(&t["result"]), "Hello, Alice");
}

#[tokio::test]
async fn task_methods_without_the_tasks_extension_are_32021() {
    let h = default_server().await;
    let c = Client::new(h.addr, json!({}));
    let (status, e) = c.error("tools/call", json!({"name": "tree"})).await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(-32021)));
    assert_eq!(
        e["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
        json!({})
    );
    for m in [
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "tasks/steer",
        "tasks/pause",
        "tasks/resume",
    ] {
        let (status, e) = c
            .error(
                m,
                json!({"taskId": "gate-test", "inputResponses": {}, "message": "x"}),
            )
            .await;
        assert_eq!((status, e["code"].as_i64()), (400, Some(-32021)), "{m}");
    }
    let (_, e) = c
        .error("subscriptions/listen", json!({"notifications": {"taskIds": []}}))
        .await;
    assert_eq!(e["code"], -32021);
}

#[tokio::test]
async fn unknown_methods_are_404_and_tasks_result_and_list_do_not_exist() {
    let h = default_server().await;
    let c = Client::new(h.addr, full_caps());
    for m in [
        "tasks/result",
        "tasks/list",
        "initialize",
        "ping",
        "unknown/method",
        "prompts/list",
    ] {
        let (status, e) = c.error(m, json!({"taskId": "x"})).await;
        assert_eq!((status, e["code"].as_i64()), (404, Some(-32601)), "{m}");
    }
}

#[tokio::test]
async fn header_and_meta_validation_follow_the_2026_pipeline() {
    let h = default_server().await;
    let c = Client::new(h.addr, full_caps());
    let (mut headers, body) = c.envelope("tools/list", json!({}));
    // Missing protocol version header.
    let without: Vec<_> = headers
        .iter()
        .filter(|(k, _)| *k != "MCP-Protocol-Version")
        .cloned()
        .collect();
    let r = raw(h.addr, "POST", &without, &body).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    // Mismatched Mcp-Method.
    for (k, v) in headers.iter_mut() {
        if *k == "Mcp-Method" {
            *v = "prompts/list".into();
        }
    }
    let r = raw(h.addr, "POST", &headers, &body).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    // Mcp-Name must equal the task id on task methods.
    let (mut headers, body) = c.envelope(
        "tasks/get",
        json!({"taskId": "786512e2-9e0d-44bd-8f29-789f320fe840"}),
    );
    for (k, v) in headers.iter_mut() {
        if *k == "Mcp-Name" {
            *v = "someone-else".into();
        }
    }
    let r = raw(h.addr, "POST", &headers, &body).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    // Missing _meta.
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{}}"#;
    let hs = vec![
        ("MCP-Protocol-Version", "2026-07-28".to_owned()),
        ("Mcp-Method", "server/discover".to_owned()),
    ];
    let r = raw(h.addr, "POST", &hs, body).await;
    assert_eq!(
        (
            r.status,
            r.json()["error"]["code"].as_i64(),
            r.json()["id"].as_i64()
        ),
        (400, Some(-32602), Some(7))
    );
    // Unsupported version.
    let body = br#"{"jsonrpc":"2.0","id":8,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let hs = vec![
        ("MCP-Protocol-Version", "v999.0.0".to_owned()),
        ("Mcp-Method", "server/discover".to_owned()),
    ];
    let r = raw(h.addr, "POST", &hs, body).await;
    let e = &r.json()["error"];
    assert_eq!((r.status, e["code"].as_i64()), (400, Some(-32022)));
    assert_eq!(
        e["data"],
        json!({"supported": ["2026-07-28"], "requested": "v999.0.0"})
    );
}

#[tokio::test]
async fn malformed_input_gets_the_right_error_and_the_server_keeps_serving() {
    let h = start(
        ServerConfig {
            limits: ServerLimits {
                max_body_bytes: 4096,
                ..Default::default()
            },
            ..Default::default()
        },
        RuntimeConfig::default(),
    )
    .await;
    let c = Client::new(h.addr, full_caps());
    let hs = vec![
        ("Content-Type", "application/json".to_owned()),
        ("MCP-Protocol-Version", "2026-07-28".to_owned()),
    ];
    let r = raw(h.addr, "POST", &hs, b"{not json").await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32700))
    );
    assert!(r.json().get("id").is_none());
    let r = raw(
        h.addr,
        "POST",
        &hs,
        br#"{"jsonrpc":"1.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32600))
    );
    let r = raw(
        h.addr,
        "POST",
        &hs,
        br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32600);
    let huge = vec![b' '; 10_000];
    let r = raw(h.addr, "POST", &hs, &huge).await;
    assert_eq!(r.status, 413);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("4096"));
    // An ordinary JSON-RPC error is a normal response (HTTP 200): only the
    // cases the transport texts list have a 4xx status.
    let (status, e) = c.error("tasks/get", json!({"taskId": 42})).await;
    assert_eq!((status, e["code"].as_i64()), (200, Some(-32602)));
    let (_, e) = c
        .error(
            "tools/call",
            json!({"name": "echo", "arguments": "not an object"}),
        )
        .await;
    assert_eq!(e["code"], -32602);
    let (_, e) = c.error("tools/call", json!({"name": "no_such_tool"})).await;
    assert_eq!(e["code"], -32602);
    let r = raw(h.addr, "GET", &[], b"").await;
    assert_eq!(r.status, 405);
    let r = raw(
        h.addr,
        "POST",
        &[("Content-Type", "text/plain".to_owned())],
        b"hi",
    )
    .await;
    assert_eq!(r.status, 415);
    // Still serving.
    assert_eq!(
        text(
            &c.call(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "alive"}})
            )
            .await
        ),
        "alive"
    );
}

#[tokio::test]
async fn foreign_origins_and_hosts_are_refused() {
    let h = default_server().await;
    let c = Client::new(h.addr, json!({}));
    let (mut headers, body) = c.envelope("server/discover", json!({}));
    headers.push(("Origin", "http://evil.example.com".into()));
    let r = raw(h.addr, "POST", &headers, &body).await;
    assert_eq!(r.status, 403);
    let (mut headers, body) = c.envelope("server/discover", json!({}));
    headers.push(("Host", "evil.example.com".into()));
    assert_eq!(raw(h.addr, "POST", &headers, &body).await.status, 403);
    let (mut headers, body) = c.envelope("server/discover", json!({}));
    headers.push(("Origin", format!("http://{}", h.addr)));
    assert_eq!(raw(h.addr, "POST", &headers, &body).await.status, 200);
}

#[tokio::test]
async fn principals_are_isolated_and_unknown_and_foreign_ids_look_the_same() {
    let mut tokens = TokenTable::default();
    tokens.insert("alice-secret", "alice");
    tokens.insert("bob-secret", "bob");
    let h = start(
        ServerConfig {
            tokens: Some(tokens),
            ..Default::default()
        },
        RuntimeConfig::default(),
    )
    .await;
    let alice = Client::new(h.addr, full_caps()).with_token("alice-secret");
    let bob = Client::new(h.addr, full_caps()).with_token("bob-secret");
    let id = alice.start_task("tree", json!({"width": 1})).await;
    alice.get(&id).await;
    let unknown = "786512e2-9e0d-44bd-8f29-789f320fe840";
    for m in [
        "tasks/get",
        "tasks/cancel",
        "tasks/steer",
        "tasks/pause",
        "tasks/resume",
    ] {
        let (s1, foreign) = bob.error(m, json!({"taskId": id, "message": "x"})).await;
        let (s2, missing) = bob.error(m, json!({"taskId": unknown, "message": "x"})).await;
        assert_eq!((s1, &foreign), (s2, &missing), "{m} leaks existence");
        assert_eq!(foreign["code"], -32602);
    }
    let (_, e) = bob.error("tasks/get", json!({"taskId": "not-a-uuid"})).await;
    assert_eq!(e["message"], ErrorObject::task_not_found().message);
    // Bob's subscription does not include Alice's task.
    let mut rx = bob.listen(&[&id]).await;
    let ack = rx.recv().await.unwrap();
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([]));
    // No token, or a wrong one: 401.
    let anon = Client::new(h.addr, full_caps());
    assert_eq!(anon.send("tools/list", json!({})).await.status, 401);
    assert_eq!(
        Client::new(h.addr, json!({}))
            .with_token("nope")
            .send("tools/list", json!({}))
            .await
            .status,
        401
    );
    alice.call("tasks/cancel", json!({"taskId": id})).await;
    alice.until_status(&id, "cancelled").await;
}

#[tokio::test]
async fn steer_pause_and_resume_work_across_a_tree() {
    let h = default_server().await;
    let c = Client::new(h.addr, full_caps());
    let root = c.start_task("tree", json!({"width": 2})).await;
    let kids = c.until_children(&root, 2).await;
    for m in ["one", "two"] {
        assert_eq!(
            c.call("tasks/steer", json!({"taskId": kids[0], "message": m}))
                .await,
            json!({"resultType": "complete"})
        );
    }
    // The root is awaiting its children: it pauses at once; the children at their next checkpoint.
    let p = c.call("tasks/pause", json!({"taskId": root})).await;
    assert_eq!(
        (p["resultType"].as_str(), p["status"].as_str()),
        (Some("complete"), Some("paused"))
    );
    for k in &kids {
        c.until_status(k, "paused").await;
    }
    let (_, e) = c.error("tasks/pause", json!({"taskId": root})).await;
    assert_eq!(e["code"], -32602);
    // A base client never sees `paused`.
    let base = Client::new(h.addr, base_task_caps());
    let b = base.get(&kids[1]).await;
    assert_eq!(b["status"], "working");
    assert!(b["statusMessage"].as_str().unwrap().contains("paused"));
    // Steers queued while paused are delivered after resume.
    c.call("tasks/steer", json!({"taskId": kids[0], "message": "three"}))
        .await;
    let r = c.call("tasks/resume", json!({"taskId": root})).await;
    assert_eq!(r["status"], "working");
    let (_, e) = c.error("tasks/resume", json!({"taskId": root})).await;
    assert_eq!(e["code"], -32602);
    assert_eq!(
        release_until_done(&h, &c, &[&root]).await[0]["status"],
        "completed"
    );
    assert_eq!(
        text(&c.get(&kids[0]).await["result"]),
        "child 0 steers=one|two|three"
    );
    let (_, e) = c
        .error("tasks/steer", json!({"taskId": kids[0], "message": "late"}))
        .await;
    assert_eq!(e["code"], -32602);
}

#[tokio::test]
async fn cancel_reaches_the_whole_tree_and_acks_on_finished_tasks() {
    let h = default_server().await;
    let c = Client::new(h.addr, full_caps());
    let root = c
        .start_task("tree", json!({"width": 2, "grandchildren": 2}))
        .await;
    let kids = c.until_children(&root, 2).await;
    assert_eq!(
        c.call("tasks/cancel", json!({"taskId": root})).await,
        json!({"resultType": "complete"})
    );
    c.until_status(&root, "cancelled").await;
    for k in &kids {
        let status = c.get(k).await["status"].clone();
        assert!(status == "cancelled" || status == "completed", "{status}");
    }
    assert_eq!(
        c.call("tasks/cancel", json!({"taskId": root})).await,
        json!({"resultType": "complete"})
    );
}

#[tokio::test]
async fn subscriptions_stream_every_task_of_the_tree_then_end() {
    let h = default_server().await;
    let c = Client::new(h.addr, full_caps());
    let root = c.start_task("tree", json!({"width": 2})).await;
    let mut rx = c.listen(&[&root]).await;
    let ack = rx.recv().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([root]));
    let sub_id = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone();
    assert!(!sub_id.is_null());
    let mut seen = std::collections::HashSet::new();
    let mut terminal = std::collections::HashSet::new();
    let releaser = {
        let r = h.release.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                r.notify_waiters();
            }
        })
    };
    while let Some(m) = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .unwrap()
    {
        if m.get("result").is_some() {
            assert_eq!(m["result"]["resultType"], "complete");
            break;
        }
        assert_eq!(m["method"], "notifications/tasks");
        assert_eq!(
            m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            sub_id
        );
        let id = m["params"]["taskId"].as_str().unwrap().to_owned();
        if m["params"]["status"] == "completed" {
            assert_eq!(m["params"]["result"]["resultType"], "complete", "{m}");
        }
        if ["completed", "failed", "cancelled"].contains(&m["params"]["status"].as_str().unwrap()) {
            terminal.insert(id.clone());
        }
        seen.insert(id);
    }
    releaser.abort();
    assert_eq!(seen.len(), 3, "root and both subtasks are streamed");
    assert_eq!(terminal.len(), 3);
}

#[tokio::test]
async fn every_limit_rejects_with_a_clear_error_and_loses_nothing() {
    let runtime_config = RuntimeConfig {
        forest: ForestConfig {
            limits: Limits {
                max_depth: 1,
                max_children: 2,
                max_steer_queue: 1,
                max_steer_bytes: 8,
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let config = ServerConfig {
        limits: ServerLimits {
            max_live_tasks_per_principal: 4,
            ..Default::default()
        },
        ..Default::default()
    };
    let h = start(config, runtime_config).await;
    let c = Client::new(h.addr, full_caps());
    // Children per task: width 3 with a limit of 2 fails the root's handler (the third spawn is refused).
    let root = c.start_task("tree", json!({"width": 3})).await;
    let t = c.until_status(&root, "failed").await;
    assert!(
        t["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit of 2 subtasks"),
        "{t}"
    );
    // Depth: a grandchild is one level too deep.
    let deep = c
        .start_task("tree", json!({"width": 1, "grandchildren": 1}))
        .await;
    let kid = c.until_children(&deep, 1).await.remove(0);
    let k = c.until_status(&kid, "failed").await;
    assert!(
        k["error"]["message"].as_str().unwrap().contains("depth limit"),
        "{k}"
    );
    // Steer size and queue length: the root awaits its child, so steers to it queue up.
    let one = c.start_task("tree", json!({"width": 1})).await;
    c.until_children(&one, 1).await;
    let (_, e) = c
        .error(
            "tasks/steer",
            json!({"taskId": one, "message": "far too long a message"}),
        )
        .await;
    assert!(
        e["message"].as_str().unwrap().contains("larger than 8 bytes"),
        "{e}"
    );
    c.call("tasks/steer", json!({"taskId": one, "message": "a"}))
        .await;
    let (_, e) = c
        .error("tasks/steer", json!({"taskId": one, "message": "b"}))
        .await;
    assert!(
        e["message"].as_str().unwrap().contains("steer queue is full"),
        "{e}"
    );
    // Live tasks per principal: `one` holds 2 of 4; another tree takes the rest; a third is refused.
    let two = c.start_task("tree", json!({"width": 1})).await;
    c.until_children(&two, 1).await;
    let (status, e) = c
        .error("tools/call", json!({"name": "tree", "arguments": {"width": 1}}))
        .await;
    assert_eq!(status, 200);
    assert!(
        e["message"].as_str().unwrap().contains("limit of 4 live tasks"),
        "{e}"
    );
    // Nothing accepted was lost: both trees finish once released.
    release_until_done(&h, &c, &[&one, &two]).await;
    assert_eq!(c.get(&one).await["status"], "completed");
    assert_eq!(c.get(&two).await["status"], "completed");
    // The slots are free again.
    let three = c
        .call("tools/call", json!({"name": "tree", "arguments": {"width": 1}}))
        .await;
    assert_eq!(three["resultType"], "task");
}

#[tokio::test]
async fn legacy_clients_get_the_base_protocol_through_initialize() {
    let h = default_server().await;
    let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}"#;
    let hs = vec![("Content-Type", "application/json".to_owned())];
    let r = raw(h.addr, "POST", &hs, init).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-06-18");
    let hs = vec![
        ("Content-Type", "application/json".to_owned()),
        ("MCP-Protocol-Version", "2025-06-18".to_owned()),
    ];
    let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(raw(h.addr, "POST", &hs, note).await.status, 202);
    let call = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"old"}}}"#;
    let r = raw(h.addr, "POST", &hs, call).await;
    assert_eq!(text(&r.json()["result"]), "old");
    // A task-only tool called without `params.task`: -32601 (2025-11-25,
    // tool-level negotiation), as a normal response.
    let call = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"tree"}}"#;
    let r = raw(h.addr, "POST", &hs, call).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (200, Some(-32601))
    );
    let unknown = br#"{"jsonrpc":"2.0","id":5,"method":"resources/list"}"#;
    let r = raw(h.addr, "POST", &hs, unknown).await;
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (200, Some(-32601))
    );
    let ping = br#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#;
    assert_eq!(raw(h.addr, "POST", &hs, ping).await.json()["result"], json!({}));
}

#[tokio::test]
async fn stdio_serves_the_same_surface_line_by_line() {
    let runtime = Runtime::new(RuntimeConfig::default());
    let server = Server::builder(runtime, ServerConfig::default())
        .tool(
            ToolSpec::new(
                "echo",
                "Echoes.",
                json!({"type": "object"}),
                TaskSupport::Optional,
            ),
            |call: ToolCall| async move {
                let t = call.str_arg("text").unwrap_or("").to_owned();
                ToolOutcome::task(move |_| async move { Ok(text_result(t)) })
            },
        )
        .build();
    let (client, server_io) = tokio::io::duplex(1 << 16);
    let (server_read, server_write) = tokio::io::split(server_io);
    tokio::spawn(subtask::server::stdio::serve_lines(
        server,
        server_read,
        server_write,
    ));
    let (read, mut write) = tokio::io::split(client);
    let mut lines = tokio::io::BufReader::new(read).lines();
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": full_caps()});
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "via stdio"}, "_meta": meta}});
    write
        .write_all(format!("{call}\nnot json\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(serde_json::from_str::<Value>(&lines.next_line().await.unwrap().unwrap()).unwrap());
    }
    let created = got.iter().find(|v| v["id"] == 1).expect("the call's answer");
    assert_eq!(created["result"]["resultType"], "task");
    assert!(got.iter().any(|v| v["error"]["code"] == -32700));
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    loop {
        let get = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": id, "_meta": meta}});
        write.write_all(format!("{get}\n").as_bytes()).await.unwrap();
        let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
        if v["result"]["status"] == "completed" {
            assert_eq!(text(&v["result"]["result"]), "via stdio");
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_panicking_tool_does_not_take_the_server_down() {
    let h = default_server().await;
    let c = Client::new(h.addr, full_caps());
    // An interrupted handler (cancel) and a failing one; then the server still answers.
    let id = c.start_task("tree", json!({"width": 1})).await;
    c.call("tasks/cancel", json!({"taskId": id})).await;
    c.until_status(&id, "cancelled").await;
    let _ = TaskError::Interrupted;
    assert_eq!(
        text(
            &c.call("tools/call", json!({"name": "echo", "arguments": {"text": "ok"}}))
                .await
        ),
        "ok"
    );
    let _ = obj(json!({}));
}

/// The arguments of `plan` (a typed tool): schemars puts `Search` and `Mode`
/// under `$defs` and refers to them with `$ref` (issue 24).
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Plan {
    /// What to plan.
    goal: String,
    /// How to search.
    search: Search,
    /// A second search, if any.
    extra: Option<Search>,
    /// Further searches.
    #[serde(default)]
    stages: Vec<Search>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Search {
    /// 1 to 5.
    #[schemars(range(min = 1, max = 5))]
    depth: u32,
    /// Broad or narrow.
    mode: Mode,
    /// A short label.
    #[schemars(length(max = 8))]
    label: Option<String>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Broad,
    Narrow,
}

#[tokio::test]
async fn a_typed_tool_refuses_bad_nested_arguments_before_it_runs() {
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = ran.clone();
    let server = Server::builder(
        support::store::runtime(RuntimeConfig::default()),
        ServerConfig::default(),
    )
    .tool(
        ToolSpec::typed::<Plan>("plan", "Plans searches.", TaskSupport::Forbidden),
        move |call: ToolCall| {
            let ran = counted.clone();
            async move {
                ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let plan: Plan = match call.args() {
                    Ok(plan) => plan,
                    Err(e) => return e,
                };
                let searches: Vec<String> = std::iter::once(plan.search)
                    .chain(plan.extra)
                    .chain(plan.stages)
                    .map(|s| {
                        let mode = match s.mode {
                            Mode::Broad => "broad",
                            Mode::Narrow => "narrow",
                        };
                        format!(
                            "{mode} {}{}",
                            s.depth,
                            s.label.map(|l| format!(" {l}")).unwrap_or_default()
                        )
                    })
                    .collect();
                ToolOutcome::Complete(text_result(format!("{}: {}", plan.goal, searches.join(", "))))
            }
        },
    )
    .build();
    let c = Client::new(support::http::serve(server).await, json!({}));
    let call = |arguments: Value| c.call("tools/call", json!({"name": "plan", "arguments": arguments}));
    let good = call(json!({"goal": "g", "search": {"depth": 2, "mode": "broad"}, "stages": [{"depth": 3, "mode": "narrow", "label": "x"}]})).await;
    assert_eq!(
        (good["isError"].as_bool(), text(&good).as_str()),
        (Some(false), "g: broad 2, narrow 3 x"),
        "{good}"
    );
    let search = json!({"depth": 1, "mode": "narrow"});
    for (arguments, expected) in [
        (
            json!({"goal": "g", "search": {"depth": 9, "mode": "broad"}}),
            "invalid argument `search.depth`: 9 is greater than the maximum 5",
        ),
        (
            json!({"goal": "g", "search": {"depth": 2, "mode": "deep"}}),
            "invalid argument `search.mode`: \"deep\" is not one of \"broad\", \"narrow\"",
        ),
        (
            json!({"goal": "g", "search": {"depth": 2}}),
            "invalid argument `search.mode`: is required",
        ),
        (
            json!({"goal": "g", "search": {"depth": 2, "mode": "broad", "speed": 3}}),
            "invalid argument `search.speed`: is not a known argument (known arguments: depth, label, mode)",
        ),
        (
            json!({"goal": "g", "search": search, "extra": {"depth": 0, "mode": "broad"}}),
            "invalid argument `extra.depth`: 0 is less than the minimum 1",
        ),
        (
            json!({"goal": "g", "search": search, "stages": [search, {"depth": 3, "mode": "narrow", "label": "far too long"}]}),
            "invalid argument `stages[1].label`: is 12 characters long; at most 8 are allowed",
        ),
        (json!({"search": search}), "invalid argument `goal`: is required"),
    ] {
        let r = call(arguments.clone()).await;
        assert_eq!(r["isError"], true, "{arguments}: {r}");
        assert_eq!(r["resultType"], "complete", "{r}");
        assert_eq!(text(&r), expected, "{arguments}");
    }
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the tool ran only for the good arguments"
    );
}
