//! The client commands of the `subtask` binary: `call`, `get`, `watch`,
//! `steer`, `pause`, `resume`, `cancel`. Each is a thin layer over
//! [`subtask::client`]; this module only parses, prints and picks the exit
//! code.
//!
//! Exit codes: 0 completed (or the command was accepted), 1 failed (the task
//! failed or the server refused the request), 2 cancelled, 3 usage or
//! connection error (also a server that broke the protocol).

pub(crate) mod otlp;
mod render;
mod watch;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use serde_json::{Value, json};
use subtask::client::{
    CallStart, Client, ClientBuilder, ClientError, DEFAULT_URL, InputRequest, PartialResult, TaskOutcome,
    TaskTree,
};
use subtask::model::{JsonObject, TaskId, TaskStatus};

/// Where the server is.
#[derive(Debug, Args)]
pub(crate) struct Conn {
    /// The server's MCP endpoint.
    #[arg(long, default_value = DEFAULT_URL)]
    url: String,
    /// Bearer token (when the server runs with `--tokens`).
    #[arg(long)]
    token: Option<String>,
}

/// `subtask call TOOL [JSON_ARGS] [--stream] [--json]`.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    /// The tool, e.g. `deep_research`.
    tool: String,
    /// The tool's arguments as a JSON object, e.g. '{"question": "..."}'.
    json_args: Option<String>,
    /// Print each partial result of the task tree as it becomes available,
    /// in result order (each child's subtree, then the parent).
    #[arg(long)]
    stream: bool,
    /// Print JSON: one object per partial result with --stream,
    /// `{"taskId", "parentTaskId", "status", "result" | "error"}`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// `subtask get TASK_ID [--tree] [--json]`.
#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    /// The task id.
    #[arg(value_parser = parse_task_id)]
    task_id: TaskId,
    /// Retrieve the whole tree below the task.
    #[arg(long)]
    tree: bool,
    /// Print JSON (with --tree: each task with its `subtasks`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// `subtask watch TASK_ID`.
#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// The task id (usually a root).
    #[arg(value_parser = parse_task_id)]
    task_id: TaskId,
    /// Print one JSON object per change instead of drawing the tree.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// `subtask steer TASK_ID MESSAGE`.
#[derive(Debug, Args)]
pub(crate) struct SteerArgs {
    /// The task id.
    #[arg(value_parser = parse_task_id)]
    task_id: TaskId,
    /// The feedback, delivered at the task's next safe point.
    message: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// `subtask pause|resume|cancel TASK_ID`.
#[derive(Debug, Args)]
pub(crate) struct TaskArgs {
    /// The task id.
    #[arg(value_parser = parse_task_id)]
    task_id: TaskId,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: Conn,
}

/// A client command.
#[derive(Debug)]
pub(crate) enum Command {
    Call(CallArgs),
    Get(GetArgs),
    Watch(WatchArgs),
    Steer(SteerArgs),
    Pause(TaskArgs),
    Resume(TaskArgs),
    Cancel(TaskArgs),
}

/// Exit code 3: usage or connection error.
pub(crate) const EXIT_USAGE: u8 = 3;

fn parse_task_id(s: &str) -> Result<TaskId, String> {
    s.trim().parse().map_err(|_| {
        format!("{s:?} is not a task id (a hyphenated UUID such as 786512e2-9e0d-44bd-8f29-789f320fe840)")
    })
}

/// The exit code of a task status.
fn exit_for(status: TaskStatus) -> u8 {
    match status {
        TaskStatus::Failed => 1,
        TaskStatus::Cancelled => 2,
        _ => 0,
    }
}

/// A command's failure: what to print, and the exit code.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }

    fn client(e: ClientError, url: &str) -> Self {
        let code = match &e {
            ClientError::TaskFailed { .. } | ClientError::Rpc(_) | ClientError::InputRequired(_) => 1,
            ClientError::TaskCancelled { .. } => 2,
            _ => EXIT_USAGE,
        };
        let mut message = e.to_string();
        if matches!(e, ClientError::Connection(_)) {
            message.push_str(&format!(
                "\nhint: is `subtask serve` running at {url}? (change it with --url)"
            ));
        }
        if matches!(&e, ClientError::Rpc(o) if o.message.contains("unauthorized")) {
            message.push_str("\nhint: pass the bearer token with --token");
        }
        Failure { code, message }
    }
}

/// Runs one client command to its exit code.
pub(crate) fn run(command: Command) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("subtask: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let outcome = rt.block_on(dispatch(command));
    // A prompt may still wait on stdin (another client answered first):
    // do not wait for it.
    rt.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("subtask: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

async fn dispatch(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Call(a) => call(a).await,
        Command::Get(a) => get(a).await,
        Command::Watch(a) => {
            let client = connect(&a.conn, false)?;
            watch::watch(&client, a.task_id, a.json)
                .await
                .map_err(|e| Failure::client(e, &a.conn.url))
        }
        Command::Steer(a) => {
            let client = connect(&a.conn, false)?;
            client
                .steer(a.task_id, &a.message)
                .await
                .map_err(|e| Failure::client(e, &a.conn.url))?;
            if a.json {
                println!("{}", json!({"taskId": a.task_id, "steered": true}));
            } else {
                println!(
                    "steer queued for task {} (it arrives at the task's next safe point)",
                    a.task_id
                );
            }
            Ok(0)
        }
        Command::Pause(a) => pause_or_resume(a, true).await,
        Command::Resume(a) => pause_or_resume(a, false).await,
        Command::Cancel(a) => {
            let client = connect(&a.conn, false)?;
            client
                .cancel(a.task_id)
                .await
                .map_err(|e| Failure::client(e, &a.conn.url))?;
            if a.json {
                println!("{}", json!({"taskId": a.task_id, "cancelRequested": true}));
            } else {
                println!(
                    "cancel requested for task {} and its subtasks (`subtask get {} --tree` shows when it took effect)",
                    a.task_id, a.task_id
                );
            }
            Ok(0)
        }
    }
}

fn connect(conn: &Conn, answer_input: bool) -> Result<Client, Failure> {
    let mut b = ClientBuilder::http(conn.url.clone());
    if let Some(t) = &conn.token {
        b = b.token(t.clone());
    }
    if answer_input {
        b = if std::io::stdin().is_terminal() {
            b.input_handler(prompt_handler())
        } else {
            b.input_handler(report_input)
        };
    }
    b.build().map_err(|e| Failure::client(e, &conn.url))
}

/// Input requests when nobody can answer (stdin is not a terminal): said
/// on stderr once each, left unanswered.
async fn report_input(req: InputRequest) -> Option<JsonObject> {
    let who = req
        .task_id
        .map_or_else(|| "the call".to_owned(), |t| format!("task {t}"));
    eprintln!(
        "subtask: {who} asks for input {:?} ({}); stdin is not a terminal, so it stays unanswered",
        req.key,
        describe_request(&req.request)
    );
    None
}

fn describe_request(request: &JsonObject) -> String {
    let method = request.get("method").and_then(Value::as_str).unwrap_or("?");
    let message = request
        .get("params")
        .and_then(|p| p.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{method}: {}", render::one_line(message))
}

/// Input requests on a terminal: each one asked on stderr, answered on
/// stdin, one at a time.
fn prompt_handler() -> impl subtask::client::InputHandler {
    let turn = Arc::new(tokio::sync::Mutex::new(()));
    move |req: InputRequest| {
        let turn = turn.clone();
        async move {
            let _one_prompt_at_a_time = turn.lock().await;
            tokio::task::spawn_blocking(move || prompt(&req))
                .await
                .ok()
                .flatten()
        }
    }
}

fn prompt(req: &InputRequest) -> Option<JsonObject> {
    let who = req
        .task_id
        .map_or_else(|| "the call".to_owned(), |t| format!("task {}", render::short(t)));
    let method = req.request.get("method").and_then(Value::as_str).unwrap_or("?");
    eprintln!("\n{who} asks ({:?}): {}", req.key, describe_request(&req.request));
    if method != "elicitation/create" {
        eprintln!("  (only elicitation requests can be answered here; left unanswered)");
        return None;
    }
    if let Some(schema) = req.request["params"].get("requestedSchema") {
        eprintln!("  fields: {schema}");
    }
    for _ in 0..3 {
        eprint!("  answer with a JSON object (the content), or an empty line to decline: ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim();
        if line.is_empty() {
            return JsonObject::from_value(json!({"action": "decline"})).ok();
        }
        match serde_json::from_str::<Value>(line) {
            Ok(content @ Value::Object(_)) => {
                return JsonObject::from_value(json!({"action": "accept", "content": content})).ok();
            }
            _ => eprintln!("  that is not a JSON object"),
        }
    }
    None
}

fn parse_arguments(raw: Option<&str>) -> Result<JsonObject, Failure> {
    let Some(raw) = raw else {
        return Ok(JsonObject::new());
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(JsonObject::from_value(v).expect("an object")),
        Ok(_) => Err(Failure::usage(format!(
            "JSON_ARGS must be a JSON object such as '{{\"question\": \"...\"}}', got {raw}"
        ))),
        Err(e) => Err(Failure::usage(format!(
            "JSON_ARGS is not valid JSON ({e}): {raw}"
        ))),
    }
}

async fn call(a: CallArgs) -> Result<u8, Failure> {
    let args = parse_arguments(a.json_args.as_deref())?;
    let client = connect(&a.conn, true)?;
    let url = a.conn.url.clone();
    let fail = |e| Failure::client(e, &url);
    let color = render::color_stdout();
    let root = match client.start_tool(&a.tool, args).await.map_err(fail)? {
        CallStart::Complete(result) => {
            let code = exit_for_result(&result);
            let p = PartialResult {
                task_id: None,
                parent_task_id: None,
                outcome: TaskOutcome::Completed(result),
            };
            print_partial(&p, None, a.json, color);
            return Ok(code);
        }
        CallStart::Task(seed) => seed.task().task_id,
    };
    eprintln!("task {root}");
    if !a.json {
        eprintln!("  follow it from another terminal: subtask watch {root}");
    }
    let mut results = client.task_results(root);
    let mut status = None;
    while let Some(p) = futures::StreamExt::next(&mut results).await {
        let p = p.map_err(fail)?;
        if a.stream || p.task_id == Some(root) {
            print_partial(&p, Some(root), a.json, color);
        }
        if p.task_id == Some(root) {
            status = Some(match &p.outcome {
                TaskOutcome::Completed(result) => exit_for_result(result),
                other => exit_for(other.status()),
            });
        }
    }
    Ok(status.unwrap_or(EXIT_USAGE))
}

/// The exit code of a tool's result: 1 when the tool reported an error
/// (`isError: true`, e.g. an argument out of range), 0 otherwise. The
/// result itself is printed either way.
fn exit_for_result(result: &JsonObject) -> u8 {
    if result.get("isError") == Some(&Value::Bool(true)) {
        eprintln!("subtask: the tool reported an error (isError: true)");
        1
    } else {
        0
    }
}

fn print_partial(p: &PartialResult, root: Option<TaskId>, json: bool, color: bool) {
    if json {
        println!("{}", p.to_json());
    } else {
        println!("{}", render::partial_line(p, root, color));
    }
}

async fn get(a: GetArgs) -> Result<u8, Failure> {
    let client = connect(&a.conn, false)?;
    let fail = |e| Failure::client(e, &a.conn.url);
    if !a.tree {
        let task = client.get(a.task_id).await.map_err(fail)?;
        if a.json {
            println!("{}", serde_json::to_value(&task).unwrap_or(Value::Null));
        } else {
            print!("{}", render::detail(&task, render::color_stdout()));
        }
        return Ok(exit_for(task.status()));
    }
    let tree = client.get_tree(a.task_id).await.map_err(fail)?;
    if a.json {
        println!("{}", nested_json(&tree, tree.root()));
    } else {
        let width = terminal_size::terminal_size().map_or(120, |(w, _)| w.0 as usize);
        let width = if std::io::stdout().is_terminal() {
            width
        } else {
            200
        };
        println!("{}", render::summary(&tree));
        for line in render::tree_lines(
            &tree,
            subtask::model::Timestamp::now(),
            0,
            width,
            render::color_stdout(),
            usize::MAX,
        ) {
            println!("{line}");
        }
    }
    let status = tree.get(tree.root()).and_then(|n| n.status());
    Ok(status.map_or(0, exit_for))
}

/// `--tree --json`: each task as `tasks/get` shows it (payload included),
/// plus `subtasks`, nested in `childTaskIds` order.
fn nested_json(tree: &TaskTree, root: TaskId) -> Value {
    // Post-order, so every child's JSON exists before its parent's.
    let order: Vec<TaskId> = tree.depth_first().iter().rev().map(|n| n.id()).collect();
    let mut done: std::collections::HashMap<TaskId, Value> = std::collections::HashMap::new();
    for id in order {
        let Some(node) = tree.get(id) else { continue };
        let mut v = match node.task() {
            Some(t) => serde_json::to_value(t).unwrap_or(Value::Null),
            None => json!({"taskId": id}),
        };
        match node.outcome() {
            Some(TaskOutcome::Completed(result)) => v["result"] = result.to_value(),
            Some(TaskOutcome::Failed(error)) => {
                v["error"] = serde_json::to_value(error).unwrap_or(Value::Null)
            }
            _ => {}
        }
        if let Some(inputs) = node.input_requests() {
            v["inputRequests"] = serde_json::to_value(inputs).unwrap_or(Value::Null);
        }
        let subtasks: Vec<Value> = node.children().iter().filter_map(|c| done.remove(c)).collect();
        v["subtasks"] = Value::Array(subtasks);
        done.insert(id, v);
    }
    done.remove(&root).unwrap_or(Value::Null)
}

async fn pause_or_resume(a: TaskArgs, pause: bool) -> Result<u8, Failure> {
    let client = connect(&a.conn, false)?;
    let r = if pause {
        client.pause(a.task_id).await
    } else {
        client.resume(a.task_id).await
    };
    let task = r.map_err(|e| Failure::client(e, &a.conn.url))?;
    if a.json {
        println!("{}", serde_json::to_value(&task).unwrap_or(Value::Null));
        return Ok(0);
    }
    let t = task.task();
    let message = t
        .status_message
        .as_deref()
        .map(render::one_line)
        .unwrap_or_default();
    match (pause, t.status) {
        (true, TaskStatus::Paused) => println!("task {} is paused (subtasks pause with it)", t.task_id),
        (true, s) => println!(
            "task {} is still {s}: {message}\n(it pauses at its next safe point; `subtask get {}` shows when)",
            t.task_id, t.task_id
        ),
        (false, s) => println!("task {} resumed: {s} {message}", t.task_id),
    }
    Ok(0)
}
