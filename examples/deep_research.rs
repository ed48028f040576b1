//! The `deep_research` tool run in process (no server), with `main` acting
//! as its client. The tool is the demo's own implementation
//! (`subtask::demo::deep_research`, the one `subtask serve` registers):
//!
//! * the root plans sub-questions and fans out one subtask each, in two
//!   lanes (`after` dependencies keep later ones queued);
//! * every sub-question runs `search -> read -> summarize` as chained
//!   subtasks, then a `synthesize` subtask fans in and writes the answer.
//!
//! Meanwhile `main` steers the root ("focus on cancellation": queued
//! sub-questions that do not match are cancelled, matching ones added),
//! pauses the whole tree, shows it parked, resumes it, and prints the
//! ordered partial results as they arrive (`Runtime::results`).
//!
//! ```text
//! cargo run --example deep_research
//! ```

use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use subtask::demo::deep_research;
use subtask::prelude::*;
use subtask::server::Tool;

const QUESTION: &str = "How do MCP tasks handle failures?";
const STEER: &str = "focus on cancellation";
const VIEW: ClientView = ClientView::PAUSE_AWARE;

/// The first line of a task's result or error, for one line per result.
fn line(t: &DetailedTask) -> String {
    let text = match t.payload() {
        subtask::model::TaskPayload::Completed { result } => {
            result["content"][0]["text"].as_str().unwrap_or("").to_owned()
        }
        subtask::model::TaskPayload::Failed { error } => format!("failed: {}", error.message),
        _ => t.status().as_str().to_owned(),
    };
    let first = text.lines().next().unwrap_or("");
    let depth = if t.task().parent_task_id.is_some() {
        "  "
    } else {
        ""
    };
    format!(
        "{depth}{} {:>9}  {}",
        &t.task().task_id.to_string()[..8],
        t.status().as_str(),
        first.chars().take(90).collect::<String>()
    )
}

/// Every task of the tree, parents before children.
fn tree(rt: &Runtime, root: TaskId) -> Vec<DetailedTask> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if let Some(t) = rt.get(id, VIEW) {
            stack.extend(t.task().child_task_ids.iter().rev());
            out.push(t);
        }
    }
    out
}

async fn until(what: &str, f: impl Fn() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what} did not happen within 5 s");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let rt = Runtime::new(RuntimeConfig::default());
    // The tool answers a call with a task body; the runtime runs it as a tree.
    let call = ToolCall {
        name: deep_research::NAME.to_owned(),
        arguments: JsonObject::from_value(json!({"question": QUESTION, "breadth": 3, "depth": 1, "pace": 2}))
            .expect("an object"),
        input_responses: None,
        request_state: None,
        client_capabilities: Default::default(),
        tasks: Some(Default::default()),
    };
    let ToolOutcome::Task { body, .. } = Tool::call(&deep_research::call, call).await else {
        panic!("deep_research answers with a task");
    };
    let root = rt.spawn(RootOptions::default(), body);
    println!("client> task {root}: {QUESTION:?}");

    let printer = {
        let rt = rt.clone();
        tokio::spawn(async move {
            let mut results = Box::pin(rt.results(root, VIEW));
            let mut last = None;
            while let Some(t) = results.next().await {
                println!("result  {}", line(&t));
                last = Some(t);
            }
            last
        })
    };

    let children = |rt: &Runtime| rt.get(root, VIEW).map_or(0, |t| t.task().child_task_ids.len());
    until("the plan", || children(&rt) >= 2).await;
    println!("client> tasks/steer {root}: {STEER:?}");
    rt.steer(root, STEER).expect("the root accepts steers");

    tokio::time::sleep(Duration::from_millis(300)).await;
    let snap = rt.pause(root, VIEW).expect("the root can be paused");
    println!(
        "client> tasks/pause -> {} ({})",
        snap.status(),
        snap.task().status_message.as_deref().unwrap_or("")
    );
    until("the whole tree to park", || {
        tree(&rt, root)
            .iter()
            .all(|t| t.status().is_terminal() || t.status() == TaskStatus::Paused)
    })
    .await;
    println!("client> the tree is parked:");
    for t in tree(&rt, root) {
        println!("        {}", line(&t));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let snap = rt.resume(root, VIEW).expect("the root is paused");
    println!("client> tasks/resume -> {}", snap.status());

    let done = printer
        .await
        .expect("the printer ran")
        .expect("the root's result arrives last");
    println!("\nclient> task {root} {}", done.status());
    if let subtask::model::TaskPayload::Completed { result } = done.payload() {
        println!("{}", result["content"][0]["text"].as_str().unwrap_or(""));
        println!("Plan changes: {}", result["structuredContent"]["planChanges"]);
    }
}
