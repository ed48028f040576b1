//! The control tools a model in a host calls (`task_status`, `task_wait`,
//! `task_steer`, `task_pause`, `task_resume`, `task_cancel`) and background
//! answers, over real HTTP on 127.0.0.1, called the way a host calls any
//! tool: plain `tools/call`s from a client that declared no tasks
//! extension. A 10,000-task tree pages within the bound to its end; a
//! second principal sees nothing through the tools; the demo's
//! `deep_research` is steered, paused, resumed and waited for; a client
//! with the extension still gets tasks. Released clients do the same
//! through their ordinary tool APIs in the interop suite (`agents_*`).

mod support;

use serde_json::{Value, json};
use subtask::prelude::*;
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::server::{Server, ServerConfig, TokenTable};
use support::http::{Client, full_caps, serve, text};

/// The tree the size test walks: 1 root, 99 children, 100 grandchildren
/// each, 10,000 tasks; every grandchild finishes with a 300-character text.
const WIDE: &str = "wide";

fn wide_spec() -> ToolSpec {
    ToolSpec::new(
        WIDE,
        "A 10,000-task tree.",
        json!({"type": "object"}),
        TaskSupport::Optional,
    )
}

async fn wide(_call: ToolCall) -> ToolOutcome {
    ToolOutcome::task(|ctx| async move {
        let mut children = Vec::new();
        for i in 0..99 {
            children.push(
                ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                    let mut leaves = Vec::new();
                    for j in 0..100 {
                        leaves.push(ctx.spawn_subtask(SubtaskOptions::default(), move |_| async move {
                            Ok(text_result(format!("leaf {i}.{j}: {}", "x".repeat(290))))
                        })?);
                    }
                    for l in leaves {
                        l.await;
                    }
                    Ok(text_result(format!("child {i} done")))
                })?,
            );
        }
        for c in children {
            c.await;
        }
        Ok(text_result("all done"))
    })
}

async fn start(config: ServerConfig) -> std::net::SocketAddr {
    let runtime = Runtime::new(RuntimeConfig {
        default_poll_interval_ms: Some(20),
        ..RuntimeConfig::default()
    });
    let builder = Server::builder(runtime, config).tool(wide_spec(), wide);
    serve(subtask::demo::register(builder).build()).await
}

fn agent_config() -> ServerConfig {
    ServerConfig {
        agent_tools: true,
        tokens: Some(TokenTable::parse("alice-token alice\nbob-token bob").unwrap()),
        ..ServerConfig::default()
    }
}

/// A client that declared no tasks extension: what most hosts are.
fn plain(addr: std::net::SocketAddr, token: &str) -> Client {
    Client::new(addr, json!({})).with_token(token)
}

/// A plain `tools/call`; the `CallToolResult`.
async fn tool(c: &Client, name: &str, arguments: Value) -> Value {
    c.call("tools/call", json!({"name": name, "arguments": arguments}))
        .await
}

#[tokio::test]
async fn the_tools_are_listed_only_when_turned_on() {
    let addr = start(ServerConfig::default()).await;
    let names = |r: Value| -> Vec<String> {
        r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let off = names(Client::new(addr, json!({})).call("tools/list", json!({})).await);
    assert!(!off.iter().any(|n| n.starts_with("task_")), "{off:?}");
    let r = Client::new(addr, json!({}))
        .send(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": "x"}}),
        )
        .await;
    assert!(r.body.contains("unknown tool"), "{}", r.body);

    let addr = start(agent_config()).await;
    let on = names(plain(addr, "alice-token").call("tools/list", json!({})).await);
    for n in [
        "task_status",
        "task_wait",
        "task_steer",
        "task_pause",
        "task_resume",
        "task_cancel",
    ] {
        assert!(on.iter().any(|x| x == n), "{n} in {on:?}");
    }
    // Bad arguments are an isError result naming the argument.
    let r = tool(
        &plain(addr, "alice-token"),
        "task_wait",
        json!({"taskId": "x", "seconds": 600}),
    )
    .await;
    assert_eq!(r["isError"], true, "{r}");
    assert!(text(&r).contains("seconds"), "{r}");
}

#[tokio::test]
async fn a_10000_task_tree_pages_within_the_bound_to_its_end() {
    let addr = start(agent_config()).await;
    let alice = Client::new(addr, full_caps()).with_token("alice-token");
    let root = alice.start_task(WIDE, json!({})).await;
    alice.until_status(&root, "completed").await;
    let model = plain(addr, "alice-token");
    let mut cursor: Option<String> = None;
    let mut seen: Vec<Value> = Vec::new();
    let mut pages = 0;
    loop {
        let mut args = json!({"taskId": root});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let r = tool(&model, "task_status", args).await;
        assert_eq!(r["isError"], false, "{r}");
        let size = r.to_string().len();
        assert!(size <= 24 * 1024, "page {pages} is {size} bytes");
        assert!(
            text(&r).len() <= 8 * 1024,
            "page {pages}'s text is {} bytes",
            text(&r).len()
        );
        let s = &r["structuredContent"];
        assert_eq!(s["total"], 10_000);
        assert_eq!(s["counts"]["completed"], 10_000);
        let tasks = s["tasks"].as_array().unwrap();
        assert!(!tasks.is_empty() && tasks.len() <= 25, "{}", tasks.len());
        seen.extend(tasks.iter().cloned());
        pages += 1;
        match s["nextCursor"].as_str() {
            Some(c) => {
                assert!(text(&r).contains(c), "the text tells the model the cursor");
                cursor = Some(c.to_owned());
            }
            None => break,
        }
        assert!(pages <= 10_000, "the cursor never reached the end");
    }
    assert_eq!(seen.len(), 10_000, "every task once");
    let mut ids: Vec<&str> = seen.iter().map(|t| t["taskId"].as_str().unwrap()).collect();
    // SEP-2268 result order: the first leaf first, the root last, each
    // child right after its 100 leaves.
    assert_eq!(ids[10_000 - 1], root);
    assert_eq!(seen[0]["depth"], 2);
    assert!(seen[0]["result"].as_str().unwrap().starts_with("leaf 0.0: "));
    assert_eq!(seen[100]["depth"], 1);
    assert_eq!(seen[100]["result"], "child 0 done");
    assert_eq!(seen[101]["result"].as_str().unwrap()[..10], *"leaf 1.0: ");
    // A long result is cut, saying how much was left out.
    assert!(seen[0]["result"].as_str().unwrap().len() < 600);
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 10_000, "no task twice");
    // A cursor of another task is refused, as is garbage.
    let other = alice
        .start_task("fanout", json!({"width": 0, "steps": 1, "stepMs": 1}))
        .await;
    let r = tool(
        &model,
        "task_status",
        json!({"taskId": other, "cursor": cursor.unwrap()}),
    )
    .await;
    assert_eq!(r["isError"], true, "{r}");
    let r = tool(
        &model,
        "task_status",
        json!({"taskId": root, "cursor": "garbage"}),
    )
    .await;
    assert_eq!(r["isError"], true, "{r}");
}

#[tokio::test]
async fn another_principal_sees_no_task_through_the_tools() {
    let addr = start(agent_config()).await;
    let alice = plain(addr, "alice-token");
    let bob = plain(addr, "bob-token");
    let owner = Client::new(addr, full_caps()).with_token("alice-token");
    let id = owner
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 200, "stepMs": 20}),
        )
        .await;
    let unknown = tool(
        &bob,
        "task_status",
        json!({"taskId": "0b8e5f4e-0000-4000-8000-000000000000"}),
    )
    .await;
    for (name, args) in [
        ("task_status", json!({"taskId": id})),
        ("task_wait", json!({"taskId": id, "seconds": 1})),
        ("task_steer", json!({"taskId": id, "message": "stop"})),
        ("task_pause", json!({"taskId": id})),
        ("task_resume", json!({"taskId": id})),
        ("task_cancel", json!({"taskId": id})),
    ] {
        let r = tool(&bob, name, args).await;
        assert_eq!(r["isError"], true, "{name}: {r}");
        // Exactly what an id that exists nowhere gets, but for the id itself.
        assert_eq!(
            text(&r).replace(&id, "ID"),
            text(&unknown).replace("0b8e5f4e-0000-4000-8000-000000000000", "ID"),
            "{name}"
        );
    }
    // Alice's task went on untouched.
    let t = owner.get(&id).await;
    assert_eq!(t["status"], "working", "{t}");
    let r = tool(&alice, "task_cancel", json!({"taskId": id})).await;
    assert_eq!(r["structuredContent"]["status"], "cancelled", "{r}");
    assert!(text(&r).contains("cancelled"), "{r}");
    let r = tool(&alice, "task_cancel", json!({"taskId": id})).await;
    assert!(text(&r).contains("already ended"), "{r}");
}

#[tokio::test]
async fn a_model_steers_pauses_resumes_and_waits_for_deep_research() {
    let addr = start(ServerConfig {
        background: true,
        ..agent_config()
    })
    .await;
    let model = plain(addr, "alice-token");
    // Background: the answer comes at once, naming the task.
    let r = tool(
        &model,
        "deep_research",
        json!({"question": "How do MCP tasks handle failures?", "pace": 10}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    let id = r["structuredContent"]["taskId"].as_str().unwrap().to_owned();
    assert!(text(&r).contains(&id) && text(&r).contains("task_status"), "{r}");
    // Partial progress: the plan, then the first sub-question's subtasks.
    let status = |r: &Value| r["structuredContent"].clone();
    let mut planned = Value::Null;
    for _ in 0..500 {
        let r = tool(&model, "task_status", json!({"taskId": id})).await;
        if status(&r)["total"].as_u64().unwrap_or(0) >= 4 {
            planned = r;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(text(&planned).contains("planned"), "{planned}");
    // Steer: the next status shows the re-plan.
    let r = tool(
        &model,
        "task_steer",
        json!({"taskId": id, "message": "focus on cancellation"}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    let mut replanned = false;
    for _ in 0..500 {
        let r = tool(&model, "task_status", json!({"taskId": id})).await;
        // The sub-question off the focus is cancelled (the root's message
        // says "re-planned for focus …" only until it moves on).
        if status(&r)["counts"]["cancelled"].as_u64().unwrap_or(0) > 0 {
            replanned = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(replanned, "the steer changed the plan");
    // Pause until every live task is paused.
    let r = tool(&model, "task_pause", json!({"taskId": id})).await;
    assert_eq!(r["isError"], false, "{r}");
    let mut all_paused = Value::Null;
    for _ in 0..500 {
        let r = tool(&model, "task_status", json!({"taskId": id})).await;
        let s = status(&r);
        let counts = s["counts"].as_object().unwrap();
        let live: u64 = counts
            .iter()
            .filter(|(k, _)| !["completed", "failed", "cancelled"].contains(&k.as_str()))
            .map(|(_, v)| v.as_u64().unwrap())
            .sum();
        if s["status"] == "paused" && counts.get("paused").and_then(Value::as_u64) == Some(live) {
            all_paused = r;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(text(&all_paused).contains("task_resume"), "{all_paused}");
    let r = tool(&model, "task_wait", json!({"taskId": id, "seconds": 1})).await;
    assert_eq!(r["structuredContent"]["status"], "paused", "{r}");
    let r = tool(&model, "task_resume", json!({"taskId": id})).await;
    assert_eq!(r["isError"], false, "{r}");
    let mut done = Value::Null;
    for _ in 0..10 {
        done = tool(&model, "task_wait", json!({"taskId": id, "seconds": 30})).await;
        if done["structuredContent"]["status"] == "completed" {
            break;
        }
    }
    assert_eq!(done["structuredContent"]["status"], "completed", "{done}");
    assert!(
        text(&done).contains("Focus: cancellation") && text(&done).contains("Plan changes"),
        "{done}"
    );
    // A client with the tasks extension still gets a task.
    let with = Client::new(addr, full_caps()).with_token("alice-token");
    let r = with
        .call(
            "tools/call",
            json!({"name": "fanout", "arguments": {"width": 0, "steps": 1, "stepMs": 1}}),
        )
        .await;
    assert_eq!(r["resultType"], "task", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listed_task_agrees_with_itself_while_the_tree_runs() {
    // A task that finished between two reads must not show its old status
    // beside its new result: each answer is one reading of the tree.
    let addr = start(agent_config()).await;
    let owner = Client::new(addr, full_caps()).with_token("alice-token");
    let model = plain(addr, "alice-token");
    let mut answers = 0;
    for _ in 0..40 {
        let id = owner
            .start_task(
                "fanout",
                json!({"width": 8, "depth": 1, "steps": 3, "stepMs": 30}),
            )
            .await;
        loop {
            let r = tool(&model, "task_status", json!({"taskId": id})).await;
            answers += 1;
            let s = &r["structuredContent"];
            let mut by_status = std::collections::HashMap::<String, u64>::new();
            for t in s["tasks"].as_array().unwrap() {
                let status = t["status"].as_str().unwrap();
                *by_status.entry(status.to_owned()).or_default() += 1;
                assert_eq!(
                    t["result"].is_string(),
                    status == "completed",
                    "a result exactly on a completed task: {t} in {s}"
                );
                assert_eq!(t["error"].is_string(), status == "failed", "{t}");
            }
            // One page holds the whole tree of 9: the counts are the entries'.
            let counts: std::collections::HashMap<String, u64> =
                serde_json::from_value(s["counts"].clone()).unwrap();
            assert_eq!(counts, by_status, "{s}");
            if s["status"] == "completed" {
                break;
            }
        }
    }
    assert!(answers >= 40);
}
