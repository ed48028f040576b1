//! Behaviour of the demo tools (`fanout`, `deep_research`), driven through
//! their `Tool::call` and run on a real `Runtime` with paused tokio time (no
//! HTTP).

#[path = "support/until.rs"]
mod until;
use std::time::Duration;
use until::until;

use futures::StreamExt;
use serde_json::{Value, json};
use subtask::core::{CancelOutcome, ClientView, RootOptions};
use subtask::demo::{deep_research, fanout};
use subtask::model::{
    ClientCapabilities, DetailedTask, ErrorCode, InputResponses, JsonObject, TaskId, TaskPayload, TaskStatus,
    TasksCapability,
};
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::server::{Tool, ToolCall, ToolOutcome};

const V: ClientView = ClientView::PAUSE_AWARE;

fn obj(v: Value) -> JsonObject {
    JsonObject::from_value(v).unwrap()
}

/// A `tools/call` round from a client that declared the tasks extension
/// (`tasks: false`: one that did not).
fn tool_call(name: &str, args: Value, tasks: bool) -> ToolCall {
    let caps = if tasks {
        ClientCapabilities::with_tasks(TasksCapability::FULL)
    } else {
        ClientCapabilities::default()
    };
    ToolCall {
        name: name.to_owned(),
        arguments: obj(args),
        input_responses: None,
        request_state: None,
        client_capabilities: caps,
        tasks: tasks.then_some(TasksCapability::FULL),
    }
}

/// Calls the tool and starts the task body it answers with as a root task.
async fn start(rt: &Runtime, tool: &impl Tool, name: &str, args: Value) -> TaskId {
    match tool.call(tool_call(name, args, true)).await {
        ToolOutcome::Task { body, ttl_ms } => rt.spawn(
            RootOptions {
                ttl_ms,
                ..RootOptions::default()
            },
            body,
        ),
        other => panic!("expected a task, got {other:?}"),
    }
}

fn sc(t: &DetailedTask) -> Value {
    match t.payload() {
        TaskPayload::Completed { result } => result["structuredContent"].clone(),
        other => panic!("task {} is not completed: {other:?}", t.task().task_id),
    }
}

fn text(t: &DetailedTask) -> String {
    match t.payload() {
        TaskPayload::Completed { result } => result["content"][0]["text"].as_str().unwrap().to_owned(),
        other => panic!("not completed: {other:?}"),
    }
}

fn children(rt: &Runtime, id: TaskId) -> Vec<TaskId> {
    rt.get(id, V)
        .map(|t| t.task().child_task_ids.clone())
        .unwrap_or_default()
}

fn status(rt: &Runtime, id: TaskId) -> TaskStatus {
    rt.get(id, V).unwrap().status()
}

async fn results(rt: &Runtime, root: TaskId) -> Vec<DetailedTask> {
    rt.results(root, V).collect().await
}

/// Every task of the tree, root first (depth-first, in `childTaskIds` order).
fn tree(rt: &Runtime, root: TaskId) -> Vec<DetailedTask> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        let t = rt.get(id, V).unwrap();
        stack.extend(t.task().child_task_ids.iter().rev());
        out.push(t);
    }
    out
}

// ----- fanout ---------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn fanout_builds_the_tree_and_streams_results_children_first() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"width": 2, "depth": 2, "steps": 2, "stepMs": 10});
    let root = start(&rt, &fanout::call, "fanout", args).await;
    let done = results(&rt, root).await;
    let paths: Vec<String> = done
        .iter()
        .map(|t| sc(t)["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paths, ["0.0.0", "0.0.1", "0.0", "0.1.0", "0.1.1", "0.1", "0"]);
    for t in &done {
        let s = sc(t);
        assert_eq!(s["steps"], 2);
        assert_eq!(s["steers"], json!([]));
        assert_eq!(s["failed"], json!([]));
    }
    let top = sc(done.last().unwrap());
    assert_eq!(top["nodes"], 7);
    assert_eq!(top["children"][1]["path"], "0.1");
    assert_eq!(top["children"][1]["status"], "completed");
    assert!(text(done.last().unwrap()).starts_with("fanout: 7 of 7 nodes completed."));
    assert_eq!(tree(&rt, root).len(), 7);
    // The ids in `children` are the subtasks' ids.
    assert_eq!(top["children"][0]["taskId"], json!(children(&rt, root)[0]));
}

#[tokio::test(start_paused = true)]
async fn fanout_fail_at_fails_only_that_node_and_its_parent_lists_it() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"width": 2, "depth": 2, "steps": 1, "stepMs": 5, "failAt": "0.1"});
    let root = start(&rt, &fanout::call, "fanout", args).await;
    let done = results(&rt, root).await;
    let statuses: Vec<TaskStatus> = done.iter().map(DetailedTask::status).collect();
    use TaskStatus::{Completed as C, Failed as F};
    assert_eq!(statuses, [C, C, C, C, C, F, C]);
    let TaskPayload::Failed { error } = done[5].payload() else {
        unreachable!()
    };
    assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);
    assert_eq!(error.message, "fanout node 0.1 failed as requested");
    let top = sc(&done[6]);
    assert_eq!(top["failed"], json!(["0.1"]));
    assert_eq!(top["children"][1]["status"], "failed");
    assert_eq!(
        top["children"][1]["error"]["message"],
        "fanout node 0.1 failed as requested"
    );
    // The failed node's own children completed (it waited for them).
    assert_eq!(sc(&done[3])["path"], "0.1.0");
    assert_eq!(top["nodes"], 4, "0, 0.0 and its two children report");
    assert!(text(&done[6]).contains("failed: 0.1"));
}

#[tokio::test(start_paused = true)]
async fn fanout_input_at_asks_and_continues_after_an_answer() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"width": 2, "depth": 1, "steps": 2, "stepMs": 10, "inputAt": "0.1"});
    let root = start(&rt, &fanout::call, "fanout", args).await;
    until("two children", || children(&rt, root).len() == 2).await;
    let node = children(&rt, root)[1];
    until("0.1 to ask", || status(&rt, node) == TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = rt.get(node, V).unwrap().payload().clone() else {
        unreachable!()
    };
    assert_eq!(input_requests.keys().collect::<Vec<_>>(), ["confirm-0.1"]);
    assert_eq!(input_requests["confirm-0.1"]["method"], "elicitation/create");
    // The others run on meanwhile.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(status(&rt, children(&rt, root)[0]), TaskStatus::Completed);
    assert_eq!(status(&rt, node), TaskStatus::InputRequired);
    assert_eq!(status(&rt, root), TaskStatus::Working);

    let answer = obj(json!({"action": "accept", "content": {"confirm": false}}));
    let accepted = rt
        .update(node, InputResponses::from([("confirm-0.1".to_owned(), answer)]))
        .unwrap();
    assert_eq!(accepted, ["confirm-0.1"]);
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    let s = sc(&rt.get(node, V).unwrap());
    assert_eq!(s["input"]["action"], "accept");
    assert_eq!(s["steps"], 2);
}

#[tokio::test(start_paused = true)]
async fn fanout_delivers_steers_to_the_node_steered() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"width": 2, "depth": 1, "steps": 5, "stepMs": 100});
    let root = start(&rt, &fanout::call, "fanout", args).await;
    until("two children", || children(&rt, root).len() == 2).await;
    let first = children(&rt, root)[0];
    rt.steer(first, "slow down").unwrap();
    rt.steer(first, "then speed up").unwrap();
    rt.steer(root, "hello root").unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    rt.steer(root, "again").unwrap();
    let done = results(&rt, root).await;
    assert_eq!(sc(&done[0])["steers"], json!(["slow down", "then speed up"]));
    assert_eq!(sc(&done[1])["steers"], json!([]));
    assert_eq!(sc(&done[2])["steers"], json!(["hello root", "again"]));
    assert!(text(&done[2]).contains("steer messages: hello root | again"));
}

#[tokio::test(start_paused = true)]
async fn fanout_pauses_and_resumes_as_a_tree() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"width": 3, "depth": 1, "steps": 10, "stepMs": 50});
    let root = start(&rt, &fanout::call, "fanout", args).await;
    until("three children", || children(&rt, root).len() == 3).await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    rt.pause(root, V).unwrap();
    until("the tree to park", || {
        tree(&rt, root).iter().all(|t| t.status() == TaskStatus::Paused)
    })
    .await;
    let before: Vec<Option<String>> = tree(&rt, root)
        .iter()
        .map(|t| t.task().status_message.clone())
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after: Vec<Option<String>> = tree(&rt, root)
        .iter()
        .map(|t| t.task().status_message.clone())
        .collect();
    assert_eq!(before, after, "nothing runs while paused");
    rt.resume(root, V).unwrap();
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(sc(&done)["nodes"], 4);
}

#[tokio::test(start_paused = true)]
async fn fanout_validates_arguments() {
    let bad = [
        (json!({"width": 51}), "width must be from 0 to 50"),
        (json!({"depth": "2"}), "depth must be an integer"),
        (json!({"width": 10, "depth": 4}), "at most 10000"),
        (json!({"failAt": "0.9"}), "names no node"),
        (json!({"inputAt": "1"}), "must be a node path"),
        (json!({"stepMs": -5}), "stepMs must be an integer"),
        (json!({"extra": true}), "unknown argument"),
    ];
    for (args, expected) in bad {
        let outcome = Tool::call(&fanout::call, tool_call("fanout", args.clone(), true)).await;
        let message = tool_error_text(outcome);
        assert!(message.contains(expected), "{args}: {message}");
    }
    // inputAt needs a client that takes the call as a task.
    let outcome = Tool::call(&fanout::call, tool_call("fanout", json!({"inputAt": "0"}), false)).await;
    assert!(tool_error_text(outcome).contains("tasks extension"));
    // A TTL goes with the task.
    match Tool::call(&fanout::call, tool_call("fanout", json!({"ttlMs": 5000}), true)).await {
        ToolOutcome::Task { ttl_ms, .. } => assert_eq!(ttl_ms, Some(5000)),
        other => panic!("expected a task, got {other:?}"),
    }
    let spec = fanout::spec();
    assert_eq!(spec.input_schema["properties"]["failAt"]["type"], "string");
}

// ----- deep_research ----------------------------------------------------------------

const QUESTION: &str = "How do MCP tasks handle long-running work?";

fn ids_in_tree(rt: &Runtime, root: TaskId) -> Vec<Value> {
    tree(rt, root).iter().map(|t| json!(t.task().task_id)).collect()
}

#[tokio::test(start_paused = true)]
async fn deep_research_answers_with_citations() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"question": QUESTION, "breadth": 3, "depth": 2});
    let root = start(&rt, &deep_research::call, "deep_research", args).await;
    let done = rt.wait(root, V).await.unwrap();
    let s = sc(&done);
    let answer = text(&done);
    assert_eq!(s["question"], QUESTION);
    assert_eq!(s["focus"], Value::Null);
    let ids = ids_in_tree(&rt, root);
    let subs = s["subQuestions"].as_array().unwrap();
    assert!(subs.len() >= 3, "{answer}");
    for sq in subs {
        assert!(ids.contains(&sq["taskId"]), "{sq}");
        assert!(ids.contains(&sq["steps"]["summarize"]), "{sq}");
        assert!(!sq["sources"].as_array().unwrap().is_empty());
        assert!(sq["summary"].as_str().unwrap().contains("[S"), "{sq}");
        assert!(answer.contains(sq["taskId"].as_str().unwrap()));
    }
    // Follow-ups (depth 2) hang under their parent sub-question.
    assert!(
        subs.iter()
            .any(|sq| sq["level"] == 2 && ids.contains(&sq["parentTaskId"])),
        "{answer}"
    );
    let citations = s["citations"].as_array().unwrap();
    assert!(!citations.is_empty());
    for c in citations {
        assert!(answer.contains(&format!(
            "[{}] \"{}\"",
            c["ref"].as_str().unwrap(),
            c["title"].as_str().unwrap()
        )));
        assert!(c["citedBy"].as_array().unwrap().iter().all(|id| ids.contains(id)));
    }
    assert!(ids.contains(&s["synthesisTaskId"]));
    // Every task of the tree finished: search, read, summarize per sub-question.
    let tasks = tree(&rt, root);
    assert!(
        tasks.iter().all(|t| t.status() == TaskStatus::Completed),
        "{answer}"
    );
    assert!(
        tasks.len() >= 2 + 4 * subs.len(),
        "root, synthesis, and 4 tasks per sub-question"
    );
    assert!(answer.starts_with(&format!("Question: {QUESTION}\n")), "{answer}");
    assert!(answer.contains("\nSources\n  [S1] "), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn deep_research_replans_when_steered() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"question": QUESTION, "breadth": 3, "depth": 1});
    let root = start(&rt, &deep_research::call, "deep_research", args).await;
    until("the plan", || children(&rt, root).len() == 3).await;
    let queued = children(&rt, root)[2];
    rt.steer(root, "focus on failure handling").unwrap();
    until("the re-plan", || children(&rt, root).len() == 4).await;
    let msg = rt.get(root, V).unwrap().task().status_message.clone().unwrap();
    assert!(
        msg.starts_with("re-planned for focus \"failure handling\""),
        "{msg}"
    );
    let done = rt.wait(root, V).await.unwrap();
    let s = sc(&done);
    let answer = text(&done);
    assert_eq!(s["focus"], "failure handling");
    assert_eq!(status(&rt, queued), TaskStatus::Cancelled);
    let changes: Vec<&str> = s["planChanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        changes
            .iter()
            .any(|c| c.contains("cancelled q3") && c.contains(&queued.to_string())),
        "{changes:?}"
    );
    assert!(changes.iter().any(|c| c.contains("added q4")), "{changes:?}");
    let first = &s["subQuestions"][0];
    assert_eq!(first["focused"], true);
    assert_eq!(
        first["question"],
        "How are failures, cancellation and timeouts handled?"
    );
    assert_eq!(first["label"], "q4");
    let missed = &s["notCovered"][0];
    assert_eq!(missed["taskId"], json!(queued));
    assert_eq!(missed["reason"], "cancelled when the plan changed");
    assert_eq!(s["steers"], json!(["focus on failure handling"]));
    assert!(answer.contains("Focus: failure handling"), "{answer}");
    assert!(answer.contains("[focus]"), "{answer}");
    assert!(answer.contains("Plan changes"), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn deep_research_pauses_as_a_tree_and_reports_cancelled_sub_questions() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"question": QUESTION, "breadth": 3, "depth": 1});
    let root = start(&rt, &deep_research::call, "deep_research", args).await;
    until("the plan", || children(&rt, root).len() == 3).await;
    let q2 = children(&rt, root)[1];
    until("q2 to search", || children(&rt, q2).len() == 3).await;
    // A client cancels one sub-question; the answer says it is not covered.
    assert_eq!(rt.cancel(q2).unwrap(), CancelOutcome::Accepted);
    tokio::time::sleep(Duration::from_millis(300)).await;
    rt.pause(root, V).unwrap();
    let live = |rt: &Runtime| {
        tree(rt, root)
            .into_iter()
            .filter(|t| !t.status().is_terminal())
            .collect::<Vec<_>>()
    };
    until("the tree to park", || {
        live(&rt).iter().all(|t| t.status() == TaskStatus::Paused)
    })
    .await;
    let parked = live(&rt).len();
    assert!(
        parked >= 4,
        "root, q1 (and its step), q3 and its queued steps: {parked}"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(live(&rt).len(), parked, "nothing finishes while paused");
    rt.resume(root, V).unwrap();
    let done = rt.wait(root, V).await.unwrap();
    let s = sc(&done);
    assert_eq!(status(&rt, q2), TaskStatus::Cancelled);
    let missed = s["notCovered"].as_array().unwrap();
    assert_eq!(missed.len(), 1, "{missed:?}");
    assert_eq!(missed[0]["taskId"], json!(q2));
    assert_eq!(missed[0]["reason"], "cancelled");
    assert_eq!(s["subQuestions"].as_array().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn deep_research_plans_by_topic_and_admits_ignorance() {
    let rt = Runtime::new(RuntimeConfig::default());
    let args = json!({"question": "Why do batteries degrade?", "breadth": 2, "depth": 1});
    let root = start(&rt, &deep_research::call, "deep_research", args).await;
    let s = sc(&rt.wait(root, V).await.unwrap());
    let titles: Vec<&str> = s["citations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["docId"].as_str().unwrap())
        .collect();
    assert!(titles.iter().all(|t| t.starts_with("batt-")), "{titles:?}");
    assert_eq!(
        s["subQuestions"][0]["question"],
        "How and why do batteries degrade?"
    );

    let args = json!({"question": "What is the airspeed velocity of an unladen swallow?", "depth": 3});
    let root = start(&rt, &deep_research::call, "deep_research", args).await;
    let done = rt.wait(root, V).await.unwrap();
    let s = sc(&done);
    assert_eq!(s["subQuestions"], json!([]));
    assert_eq!(s["notCovered"].as_array().unwrap().len(), 1);
    assert!(
        text(&done).contains("The built-in corpus has nothing on this."),
        "{}",
        text(&done)
    );
}

#[tokio::test(start_paused = true)]
async fn deep_research_validates_arguments() {
    let bad = [
        (json!({}), "question is required"),
        (json!({"question": "  "}), "question is required"),
        (json!({"question": 5}), "question must be a string"),
        (
            json!({"question": "x", "breadth": 0}),
            "breadth must be from 1 to 6",
        ),
        (json!({"question": "x", "depth": 4}), "depth must be from 1 to 3"),
        (json!({"question": "x", "width": 4}), "unknown argument"),
        (json!({"question": "x", "pace": 0}), "pace must be from 1 to 100"),
        (
            json!({"question": "x", "pace": 101}),
            "pace must be from 1 to 100",
        ),
    ];
    for (args, expected) in bad {
        let outcome = Tool::call(
            &deep_research::call,
            tool_call("deep_research", args.clone(), true),
        )
        .await;
        let message = tool_error_text(outcome);
        assert!(message.contains(expected), "{args}: {message}");
    }
}

/// The text of a tool execution error (`isError: true`): bad arguments are
/// results a model can act on, not JSON-RPC errors.
fn tool_error_text(outcome: ToolOutcome) -> String {
    match outcome {
        ToolOutcome::Complete(r) => {
            assert_eq!(r["isError"], true, "{r:?}");
            r["content"][0]["text"].as_str().unwrap().to_owned()
        }
        other => panic!("expected an isError result, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn deep_research_pace_slows_every_step_down() {
    // Paused time: durations are the handlers' sleeps, not the machine's speed.
    let mut took = Vec::new();
    for pace in [1, 4] {
        let rt = Runtime::new(RuntimeConfig::default());
        let args = json!({"question": QUESTION, "breadth": 2, "depth": 1, "pace": pace});
        let start_at = tokio::time::Instant::now();
        let root = start(&rt, &deep_research::call, "deep_research", args).await;
        let done = rt.wait(root, V).await.unwrap();
        assert_eq!(done.status(), TaskStatus::Completed);
        took.push(start_at.elapsed());
    }
    assert!(
        took[1] >= took[0] * 3,
        "pace 4 took {:?}, pace 1 took {:?}",
        took[1],
        took[0]
    );
}
