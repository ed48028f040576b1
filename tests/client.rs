//! `subtask::client` against the real server over HTTP on 127.0.0.1 (and
//! `subtask serve --stdio` as a child process): ordered results while
//! children finish in random order, input answered from a grandchild, steer
//! / pause / resume round trips, a client restarted mid-task resuming.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};
use subtask::client::{
    CallStart, Client, ClientBuilder, ClientError, InputRequest, PartialResult, TaskJournal, TaskOutcome,
    TaskTree,
};
use subtask::model::{ErrorCode, ErrorObject, JsonObject, TaskId, TaskStatus};
use subtask::runtime::{RuntimeConfig, SubtaskOptions};
use subtask::server::{Server, ServerConfig, TaskSupport, ToolCall, ToolOutcome, ToolSpec, text_result};
use support::seed::Rng;
use tokio::sync::watch;

/// Every test is bounded by this (a hang guard, not a timing assertion).
const GUARD: Duration = Duration::from_secs(60);

struct Harness {
    url: String,
    /// How many `gated` children may finish (child `i` waits for `> i`).
    released: watch::Sender<usize>,
    /// The paths of `shuffled` nodes in the order their handlers returned.
    finished: Arc<Mutex<Vec<String>>>,
}

fn obj(v: Value) -> JsonObject {
    JsonObject::from_value(v).expect("an object")
}

fn text(result: &JsonObject) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A server with the demo tools and three test tools, polled every 20 ms.
async fn start() -> Harness {
    let (released, _) = watch::channel(0usize);
    let finished = Arc::new(Mutex::new(Vec::new()));
    // The store from SUBTASK_TEST_STORE (memory unless scripts/test.sh
    // reruns this file on PostgreSQL).
    let runtime = support::store::runtime(RuntimeConfig {
        default_poll_interval_ms: Some(20),
        ..RuntimeConfig::default()
    });
    let rel = released.clone();
    let fin = finished.clone();
    let builder =
        Server::builder(runtime, ServerConfig::default())
            .tool(
                ToolSpec::new(
                    "echo",
                    "Echoes `text`.",
                    json!({"type": "object"}),
                    TaskSupport::Forbidden,
                ),
                |call: ToolCall| async move {
                    ToolOutcome::Complete(text_result(call.str_arg("text").unwrap_or("")))
                },
            )
            .tool(
                ToolSpec::new(
                    "shuffled",
                    "A root with children that each have two grandchildren; every node's handler returns \
                 when its turn in `order` (positions by pre-order index) comes.",
                    json!({"type": "object"}),
                    TaskSupport::Required,
                ),
                move |call: ToolCall| {
                    let fin = fin.clone();
                    async move {
                        let order: Vec<usize> = call.arguments["order"]
                            .as_array()
                            .map(|a| a.iter().filter_map(Value::as_u64).map(|n| n as usize).collect())
                            .unwrap_or_default();
                        ToolOutcome::task(move |ctx| shuffled_root(ctx, order, fin))
                    }
                },
            )
            .tool(
                ToolSpec::new(
                    "gated",
                    "A root with `width` children; child i finishes once the test released more than i; \
                 children report the steers they received.",
                    json!({"type": "object"}),
                    TaskSupport::Required,
                ),
                move |call: ToolCall| {
                    let rel = rel.clone();
                    async move {
                        let width = call.i64_arg("width").unwrap_or(2) as usize;
                        ToolOutcome::task(move |ctx| async move {
                            for i in 0..width {
                                let mut rx = rel.subscribe();
                                ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                                    let mut steers = Vec::new();
                                    loop {
                                        steers.extend(ctx.checkpoint().await?);
                                        if *rx.borrow_and_update() > i {
                                            break;
                                        }
                                        let _ = tokio::time::timeout(Duration::from_millis(20), rx.changed())
                                            .await;
                                    }
                                    steers.extend(ctx.checkpoint().await?);
                                    Ok(text_result(format!("child {i} steers=[{}]", steers.join("|"))))
                                })?;
                            }
                            let steers = ctx.checkpoint().await?;
                            Ok(text_result(format!("root steers=[{}]", steers.join("|"))))
                        })
                    }
                },
            )
            .tool(
                ToolSpec::new(
                    "fails",
                    "A task that fails.",
                    json!({"type": "object"}),
                    TaskSupport::Required,
                ),
                |_call: ToolCall| async move {
                    ToolOutcome::task(|_ctx| async move {
                        Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "boom"))
                    })
                },
            );
    let server = subtask::demo::register(builder).build();
    let addr = support::http::serve(server).await;
    Harness {
        url: format!("http://{addr}/mcp"),
        released,
        finished,
    }
}

/// Nodes in pre-order: root 0, child c at 1 + 3c, its grandchildren after it.
const CHILDREN: usize = 3;
const NODES: usize = 1 + CHILDREN * 3;

async fn shuffled_root(
    ctx: subtask::runtime::TaskContext,
    order: Vec<usize>,
    fin: Arc<Mutex<Vec<String>>>,
) -> subtask::runtime::HandlerResult {
    let (turn, _) = watch::channel(0usize);
    let turn = Arc::new(turn);
    let pos = |index: usize| order.get(index).copied().unwrap_or(index);
    let node = |path: String,
                my_turn: usize,
                turn: Arc<watch::Sender<usize>>,
                fin: Arc<Mutex<Vec<String>>>| async move {
        let mut rx = turn.subscribe();
        let _ = rx.wait_for(|t| *t == my_turn).await;
        fin.lock().push(path.clone());
        turn.send_modify(|t| *t += 1);
        Ok(text_result(path))
    };
    for c in 0..CHILDREN {
        let (t, f) = (turn.clone(), fin.clone());
        let child_pos = pos(1 + 3 * c);
        let grand: Vec<usize> = (0..2).map(|g| pos(2 + 3 * c + g)).collect();
        ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
            for (g, p) in grand.into_iter().enumerate() {
                let (t, f) = (t.clone(), f.clone());
                ctx.spawn_subtask(SubtaskOptions::default(), move |_ctx| {
                    node(format!("0.{c}.{g}"), p, t, f)
                })?;
            }
            node(format!("0.{c}"), child_pos, t, f).await
        })?;
    }
    node("0".to_owned(), pos(0), turn, fin).await
}

/// A random permutation of `0..n` from `seed` (printed on failure).
fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    Rng::new(seed).shuffle(&mut v);
    v
}

/// Calls a task tool and returns the id of the task it created.
async fn start_task(client: &Client, tool: &str, args: Value) -> TaskId {
    match client.start_tool(tool, obj(args)).await.unwrap() {
        CallStart::Task(seed) => seed.task().task_id,
        other => panic!("{tool} did not create a task: {other:?}"),
    }
}

/// Reads the tree at `root` until `pred` holds (within [`GUARD`]).
async fn until_tree(client: &Client, root: TaskId, what: &str, pred: impl Fn(&TaskTree) -> bool) -> TaskTree {
    tokio::time::timeout(GUARD, async {
        loop {
            let t = client.get_tree(root).await.unwrap();
            if pred(&t) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"))
}

async fn collect(mut stream: subtask::client::ResultStream) -> Vec<PartialResult> {
    let mut out = Vec::new();
    while let Some(r) = tokio::time::timeout(GUARD, stream.next())
        .await
        .expect("hang guard")
    {
        out.push(r.expect("no error while following"));
    }
    out
}

fn result_text(p: &PartialResult) -> String {
    match &p.outcome {
        TaskOutcome::Completed(r) => text(r),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn results_come_in_tree_order_while_tasks_finish_in_random_order() {
    let h = start().await;
    let client = Client::http(&h.url).unwrap();
    let expected = [
        "0.0.0", "0.0.1", "0.0", "0.1.0", "0.1.1", "0.1", "0.2.0", "0.2.1", "0.2", "0",
    ];
    for seed in [
        0x9e37_79b9_7f4a_7c15_u64,
        42,
        support::seed::from_env("SUBTASK_SEED"),
    ] {
        h.finished.lock().clear();
        let order = permutation(NODES, seed);
        let stream = client
            .call_tool_stream("shuffled", obj(json!({"order": order})))
            .await
            .unwrap();
        let root = stream.root_task_id().expect("a task");
        let results = collect(stream).await;
        let got: Vec<String> = results.iter().map(result_text).collect();
        assert_eq!(got, expected, "seed {seed:#x}, order {order:?}");
        // The test means something only if the server finished them otherwise.
        let finished = h.finished.lock().clone();
        assert_eq!(finished.len(), NODES);
        // Every partial result names its parent; the last one is the root.
        let last = results.last().unwrap();
        assert_eq!(last.task_id, Some(root));
        for r in &results[..results.len() - 1] {
            assert!(r.parent_task_id.is_some(), "{r:?}");
        }
        let by_line: Vec<Value> = results.iter().map(PartialResult::to_json).collect();
        assert_eq!(by_line.last().unwrap()["status"], "completed");
        if finished != expected {
            return; // a shuffled finish order was followed: done
        }
    }
    panic!("three random permutations all finished in tree order; the test proved nothing");
}

#[tokio::test]
async fn input_requested_by_a_grandchild_is_answered_once() {
    let h = start().await;
    /// (asking task, key) of each request presented.
    type Asked = Arc<Mutex<Vec<(Option<TaskId>, String)>>>;
    let asked: Asked = Arc::default();
    let a = asked.clone();
    let client = ClientBuilder::http(&h.url)
        .input_handler(move |req: InputRequest| {
            let a = a.clone();
            async move {
                a.lock().push((req.task_id, req.key.clone()));
                assert_eq!(req.request["method"], "elicitation/create");
                // A slow human: the task is polled many times meanwhile.
                tokio::time::sleep(Duration::from_millis(300)).await;
                Some(obj(json!({"action": "accept", "content": {"confirm": true}})))
            }
        })
        .build()
        .unwrap();
    let args = obj(json!({"width": 2, "depth": 2, "steps": 1, "stepMs": 5, "inputAt": "0.1.0"}));
    let stream = client.call_tool_stream("fanout", args).await.unwrap();
    let root = stream.root_task_id().unwrap();
    let results = collect(stream).await;
    assert_eq!(results.len(), 7);
    assert!(results.iter().all(|r| r.status() == TaskStatus::Completed));
    let asked = asked.lock().clone();
    assert_eq!(asked.len(), 1, "presented once: {asked:?}");
    let (task, key) = asked[0].clone();
    assert_eq!(key, "confirm-0.1.0");
    // The asking task is a grandchild of the root.
    let task = task.unwrap();
    let t = client.get(task).await.unwrap();
    let parent = t.task().parent_task_id.unwrap();
    assert_eq!(
        client.get(parent).await.unwrap().task().parent_task_id,
        Some(root)
    );
    let node = results.iter().find(|r| r.task_id == Some(task)).unwrap();
    let TaskOutcome::Completed(r) = &node.outcome else {
        unreachable!()
    };
    assert_eq!(r["structuredContent"]["input"]["action"], "accept");
}

#[tokio::test]
async fn steer_pause_and_resume_round_trip_through_the_tree() {
    let h = start().await;
    let client = Client::http(&h.url).unwrap();
    let root = start_task(&client, "gated", json!({"width": 2})).await;
    let tree = until_tree(&client, root, "children appear", |t| {
        t.get(root).unwrap().children().len() == 2
    })
    .await;
    assert_eq!(tree.len(), 3);
    let child0 = tree.get(root).unwrap().children()[0];

    client.steer(child0, "focus on failures").await.unwrap();
    let paused = client.pause(root).await.unwrap();
    assert!(
        matches!(paused.status(), TaskStatus::Paused | TaskStatus::Working),
        "{paused:?}"
    );
    // Pause reaches the children at their next checkpoint.
    until_tree(&client, root, "the whole tree pauses", |t| {
        t.depth_first()
            .iter()
            .all(|n| n.status() == Some(TaskStatus::Paused))
    })
    .await;
    // A steer to a paused task is queued for after the resume.
    client.steer(child0, "then summarize").await.unwrap();
    let resumed = client.resume(root).await.unwrap();
    assert_ne!(resumed.status(), TaskStatus::Paused);
    // Resuming twice is refused by the server.
    let again = client.resume(root).await.unwrap_err();
    assert!(
        matches!(again, ClientError::Rpc(ref e) if e.code == ErrorCode::INVALID_PARAMS),
        "{again}"
    );

    h.released.send_replace(usize::MAX);
    let results = collect(client.task_results(root)).await;
    let texts: Vec<String> = results.iter().map(result_text).collect();
    assert_eq!(
        texts,
        [
            "child 0 steers=[focus on failures|then summarize]",
            "child 1 steers=[]",
            "root steers=[]"
        ]
    );
    // Steering a finished task is refused.
    let e = client.steer(child0, "too late").await.unwrap_err();
    assert!(matches!(e, ClientError::Rpc(_)), "{e}");
}

#[tokio::test]
async fn a_client_restarted_mid_task_resumes_from_the_journal() {
    let h = start().await;
    let dir = std::env::temp_dir().join(format!("subtask-journal-{}", TaskId::random()));
    let journal = TaskJournal::new(&dir);
    let first = ClientBuilder::http(&h.url)
        .journal(journal.clone())
        .build()
        .unwrap();
    let mut stream = first
        .call_tool_stream("gated", obj(json!({"width": 3})))
        .await
        .unwrap();
    let root = stream.root_task_id().unwrap();
    h.released.send_replace(1);
    let r = tokio::time::timeout(GUARD, stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(result_text(&r), "child 0 steers=[]");
    // The first process goes away mid-task.
    drop(stream);
    drop(first);
    assert_eq!(journal.unfinished().unwrap(), [root]);

    // A new client, as a new process would, finds the task and follows it.
    let journal = TaskJournal::new(&dir);
    let second = ClientBuilder::http(&h.url)
        .journal(journal.clone())
        .build()
        .unwrap();
    let pending = journal.unfinished().unwrap();
    assert_eq!(pending, [root]);
    h.released.send_replace(usize::MAX);
    let results = collect(second.task_results(pending[0])).await;
    let texts: Vec<String> = results.iter().map(result_text).collect();
    assert_eq!(
        texts,
        [
            "child 0 steers=[]",
            "child 1 steers=[]",
            "child 2 steers=[]",
            "root steers=[]"
        ]
    );
    assert!(journal.unfinished().unwrap().is_empty());
    assert_eq!(text(&second.wait_task(root).await.unwrap()), "root steers=[]");
    let _ = std::fs::remove_file(&dir);
}

#[tokio::test]
async fn call_tool_hides_polling_and_reports_how_a_task_ended() {
    let h = start().await;
    let client = Client::http(&h.url).unwrap();
    // Synchronous answer.
    let r = client
        .call_tool("echo", obj(json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "hi");
    let mut s = client
        .call_tool_stream("echo", obj(json!({"text": "x"})))
        .await
        .unwrap();
    assert_eq!(s.root_task_id(), None);
    let only = s.next().await.unwrap().unwrap();
    assert_eq!((only.task_id, result_text(&only).as_str()), (None, "x"));
    assert!(s.next().await.is_none());
    // A task, polled transparently.
    let r = tokio::time::timeout(
        GUARD,
        client.call_tool(
            "fanout",
            obj(json!({"width": 3, "depth": 1, "steps": 1, "stepMs": 5})),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r["structuredContent"]["nodes"], 4);
    // A failed task.
    let e = client.call_tool("fails", JsonObject::new()).await.unwrap_err();
    assert!(
        matches!(e, ClientError::TaskFailed { ref error, .. } if error.message == "boom"),
        "{e}"
    );
    // A cancelled one.
    let id = start_task(&client, "gated", json!({"width": 1})).await;
    client.cancel(id).await.unwrap();
    let e = client.wait_task(id).await.unwrap_err();
    assert!(
        matches!(e, ClientError::TaskCancelled { task_id } if task_id == id),
        "{e}"
    );
    // Bad arguments and unknown ids are the server's errors, passed on.
    let e = client.call_tool("nope", JsonObject::new()).await.unwrap_err();
    assert!(matches!(e, ClientError::Rpc(_)), "{e}");
    let e = client.get(TaskId::random()).await.unwrap_err();
    assert!(e.is_task_not_found(), "{e}");
    let e = client.wait_task(TaskId::random()).await.unwrap_err();
    assert!(e.is_task_not_found(), "{e}");
}

#[tokio::test]
async fn the_client_drives_subtask_serve_over_stdio() {
    let bin = env!("CARGO_BIN_EXE_subtask");
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(["serve", "--stdio"]).stderr(std::process::Stdio::null());
    // Tasks in memory when this build of `serve` has a durable store.
    let help = std::process::Command::new(bin)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    if String::from_utf8_lossy(&help.stdout).contains("--memory") {
        cmd.arg("--memory");
    }
    let client = ClientBuilder::stdio(cmd).build().unwrap();
    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["fanout", "deep_research"]);
    let stream = client
        .call_tool_stream(
            "fanout",
            obj(json!({"width": 2, "depth": 1, "steps": 1, "stepMs": 5})),
        )
        .await
        .unwrap();
    let results = collect(stream).await;
    let paths: Vec<&str> = results
        .iter()
        .map(|r| match &r.outcome {
            TaskOutcome::Completed(r) => r["structuredContent"]["path"].as_str().unwrap_or("?"),
            _ => "?",
        })
        .collect();
    assert_eq!(paths, ["0.0", "0.1", "0"]);
}

#[tokio::test]
async fn watch_reports_changes_and_results_until_the_root_ends() {
    let h = start().await;
    let client = Client::http(&h.url).unwrap();
    let root = start_task(&client, "gated", json!({"width": 2})).await;
    let mut watch = client.watch(root);
    let mut changes = 0;
    let mut results = Vec::new();
    h.released.send_replace(usize::MAX);
    while let Some(e) = tokio::time::timeout(GUARD, watch.next()).await.unwrap() {
        match e.unwrap() {
            subtask::client::WatchEvent::Changed(_) => changes += 1,
            subtask::client::WatchEvent::Result(r) => results.push(r.task_id.unwrap()),
            _ => {}
        }
    }
    assert!(changes >= 3, "root and two children seen: {changes}");
    let tree = watch.into_tree();
    let children = tree.get(root).unwrap().children().to_vec();
    assert_eq!(results, [children[0], children[1], root]);
    assert!(tree.depth_first().iter().all(|n| n.is_terminal()));
}
