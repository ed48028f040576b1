//! The frames of the worker protocol, version 1 (`docs/workers.md`): one
//! JSON object per WebSocket text frame, tagged by `"type"`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{ErrorObject, JsonObject, TaskId, TaskOutcome};

/// The protocol version this server speaks.
pub(crate) const PROTOCOL: u32 = 1;

/// A tool as a worker registers it in `hello`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolDecl {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
    pub(crate) input_schema: Value,
    #[serde(default)]
    pub(crate) task_support: Option<String>,
    #[serde(default)]
    pub(crate) resumable: Option<bool>,
}

/// The worker's first frame.
#[derive(Debug, Deserialize)]
pub(crate) struct Hello {
    pub(crate) protocol: u32,
    pub(crate) token: String,
    #[serde(default)]
    pub(crate) name: Option<String>,
    pub(crate) capacity: u32,
    pub(crate) tools: Vec<ToolDecl>,
}

/// A frame from a worker after `hello`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum FromWorker {
    /// Renews the lease and says nothing else.
    Heartbeat,
    /// An act or a request of a handler.
    Spawn(Request<Spawn>),
    Outcome(Request<OutcomeOf>),
    Cancel(Request<OutcomeOf>),
    Checkpoint(Request<Empty>),
    Pause(Request<PauseArgs>),
    Input(Request<InputArgs>),
    Step(Request<StepArgs>),
    Stepped(Request<SteppedArgs>),
    Patched(Request<PatchedArgs>),
    Status(Request<StatusArgs>),
    /// The handler returned a `CallToolResult`.
    Result(End<ResultArgs>),
    /// The handler failed with a JSON-RPC error.
    Fail(End<FailArgs>),
}

impl FromWorker {
    /// The task and attempt a task frame is about.
    pub(crate) fn task(&self) -> Option<(TaskId, u32)> {
        match self {
            FromWorker::Heartbeat => None,
            FromWorker::Spawn(r) => Some((r.task, r.attempt)),
            FromWorker::Outcome(r) => Some((r.task, r.attempt)),
            FromWorker::Cancel(r) => Some((r.task, r.attempt)),
            FromWorker::Checkpoint(r) => Some((r.task, r.attempt)),
            FromWorker::Pause(r) => Some((r.task, r.attempt)),
            FromWorker::Input(r) => Some((r.task, r.attempt)),
            FromWorker::Step(r) => Some((r.task, r.attempt)),
            FromWorker::Stepped(r) => Some((r.task, r.attempt)),
            FromWorker::Patched(r) => Some((r.task, r.attempt)),
            FromWorker::Status(r) => Some((r.task, r.attempt)),
            FromWorker::Result(e) => Some((e.task, e.attempt)),
            FromWorker::Fail(e) => Some((e.task, e.attempt)),
        }
    }

    /// The `ref` of a request frame (`None` for the ends and heartbeats).
    pub(crate) fn reference(&self) -> Option<u64> {
        match self {
            FromWorker::Heartbeat | FromWorker::Result(_) | FromWorker::Fail(_) => None,
            FromWorker::Spawn(r) => r.reference,
            FromWorker::Outcome(r) => r.reference,
            FromWorker::Cancel(r) => r.reference,
            FromWorker::Checkpoint(r) => r.reference,
            FromWorker::Pause(r) => r.reference,
            FromWorker::Input(r) => r.reference,
            FromWorker::Step(r) => r.reference,
            FromWorker::Stepped(r) => r.reference,
            FromWorker::Patched(r) => r.reference,
            FromWorker::Status(r) => r.reference,
        }
    }
}

/// A request frame: the task, its attempt, the worker's `ref`, the act.
#[derive(Debug, Deserialize)]
pub(crate) struct Request<A> {
    pub(crate) task: TaskId,
    pub(crate) attempt: u32,
    #[serde(rename = "ref", default)]
    pub(crate) reference: Option<u64>,
    #[serde(flatten)]
    pub(crate) args: A,
}

/// An ending frame.
#[derive(Debug, Deserialize)]
pub(crate) struct End<A> {
    pub(crate) task: TaskId,
    pub(crate) attempt: u32,
    #[serde(flatten)]
    pub(crate) args: A,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Empty {}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Spawn {
    pub(crate) tool: String,
    #[serde(default)]
    pub(crate) arguments: Option<JsonObject>,
    #[serde(default)]
    pub(crate) after: Vec<TaskId>,
    #[serde(default)]
    pub(crate) fail_fast: bool,
    #[serde(default)]
    pub(crate) ttl_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct OutcomeOf {
    pub(crate) child: TaskId,
}

#[derive(Debug, Deserialize)]
pub(crate) struct PauseArgs {
    #[serde(default)]
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InputArgs {
    pub(crate) key: String,
    pub(crate) request: JsonObject,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StepArgs {
    pub(crate) name: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SteppedArgs {
    pub(crate) act: usize,
    #[serde(default)]
    pub(crate) output: Value,
}

#[derive(Debug, Deserialize)]
pub(crate) struct PatchedArgs {
    pub(crate) id: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct StatusArgs {
    pub(crate) message: Option<String>,
    #[serde(default)]
    pub(crate) progress: Option<f64>,
    #[serde(default)]
    pub(crate) total: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResultArgs {
    pub(crate) result: JsonObject,
}

#[derive(Debug, Deserialize)]
pub(crate) struct FailArgs {
    pub(crate) error: ErrorObject,
}

/// A protocol error: a code from `docs/workers.md`'s table and a message.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub(crate) struct WireError {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl WireError {
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Self {
        WireError {
            code,
            message: message.into(),
        }
    }

    /// A runtime refusal of an act, by its kind.
    pub(crate) fn of_task_error(e: &crate::runtime::TaskError) -> Self {
        use crate::runtime::TaskError;
        match e {
            TaskError::Interrupted => WireError::new("interrupted", "the task is being cancelled"),
            TaskError::Rejected(e) => WireError::new("rejected", e.to_string()),
            TaskError::Diverged(e) => WireError::new("divergence", e.message.clone()),
        }
    }
}

/// The `reply` frame to request `reference`.
pub(crate) fn reply(reference: u64, answer: &Result<Value, WireError>) -> String {
    let frame = match answer {
        Ok(ok) => serde_json::json!({"type": "reply", "ref": reference, "ok": ok}),
        Err(e) => serde_json::json!({"type": "reply", "ref": reference, "error": e}),
    };
    frame.to_string()
}

/// An `error` frame.
pub(crate) fn error(e: &WireError) -> String {
    serde_json::json!({"type": "error", "code": e.code, "message": e.message}).to_string()
}

/// An `error` frame about a `result` or `fail` of `task`'s `attempt`.
pub(crate) fn error_about(e: &WireError, task: TaskId, attempt: u32) -> String {
    serde_json::json!({"type": "error", "code": e.code, "message": e.message, "task": task, "attempt": attempt})
        .to_string()
}

/// The dependencies of an `assign`: each `after` entry's id and outcome.
pub(crate) fn dependencies(deps: &[crate::runtime::DependencyOutcome]) -> Value {
    Value::Array(
        deps.iter()
            .map(|d| {
                let mut o = outcome(&d.outcome);
                o["taskId"] = serde_json::json!(d.id);
                o
            })
            .collect(),
    )
}

/// The `outcome` request's answer.
pub(crate) fn outcome(o: &TaskOutcome) -> Value {
    match o {
        TaskOutcome::Completed(r) => serde_json::json!({"status": "completed", "result": r}),
        TaskOutcome::Failed(e) => serde_json::json!({"status": "failed", "error": e}),
        TaskOutcome::Cancelled => serde_json::json!({"status": "cancelled"}),
    }
}
