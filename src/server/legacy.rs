//! The legacy path: protocol 2025-11-25 (and 2025-06-18) through the
//! `initialize` handshake, with the 2025-11-25 tasks wire (SEP-1686,
//! `tasks-2025-11-25-legacy.md`) and SEP-2268 subtasks on it, served from
//! the same runtime and store as the 2026-07-28 wire.
//!
//! What differs from the 2026 wire, and how this module maps it:
//!
//! - a client asks for a task with `params.task` (`{ttl}`) and gets
//!   `{task: Task}`; a tool's `execution.taskSupport` is listed;
//! - a `Task` has `ttl` and `pollInterval` (not `ttlMs` / `pollIntervalMs`)
//!   and no inlined result, error or input requests;
//! - `tasks/result` waits for the end and answers the tool's own result
//!   (or its JSON-RPC error) with the related-task metadata; while it
//!   waits, its SSE stream carries `notifications/tasks/status` and the
//!   task's input requests as server-to-client requests, whose answers the
//!   client POSTs back ([`Server::legacy_input_answer`]);
//! - `tasks/list` lists the caller's tasks, `tasks/cancel` answers the
//!   task once it is `cancelled` and refuses a terminal one;
//! - `paused` does not exist (a paused task shows as `working` with a
//!   `statusMessage`), and a tool result with `isError: true` makes the task
//!   `failed` (the 2026 wire shows it `completed`).
//!
//! This module must not hold lifecycle logic: it only reshapes what the
//! runtime says.

use std::collections::HashSet;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use serde_json::{Value, json};

use super::Server;
use super::access::{CommandError, TaskAccess};
use super::auth::Principal;
use super::reply::{Rejected, Reply, error_reply, invalid, result_reply, store_error};
use super::request::{CallMode, Incoming, RequestCtx, TaskCommand, str_param};
use super::session::{Connection, LegacyVersion};
use crate::core::ClientView;
use crate::model::{
    ClientCapabilities, DetailedTask, ELICITATION_CREATE, ErrorCode, ErrorObject, InputResponses, JsonObject,
    JsonRpcError, JsonRpcRequest, JsonRpcResponse, LegacyTask, ListTasksResult, META_RELATED_TASK, Method,
    NOTIFICATIONS_TASKS_STATUS, RelatedTask, RequestId, TaskId, TaskMethod, TaskPayload, TaskStatus,
    TasksCapability,
};
use crate::runtime::Command;

/// Prefix of the ids of the input requests a `tasks/result` stream sends:
/// `subtask-input:<taskId>:<key>`. The id names the task and the key, so
/// an answer needs no server-side state to find them.
const INPUT_ID_PREFIX: &str = "subtask-input:";

/// Tasks per `tasks/list` page.
const LIST_PAGE: usize = 100;

/// The methods of a legacy session without the tasks wire, in the order
/// an unknown method's error lists them.
const METHODS: [Method; 4] = [
    Method::Initialize,
    Method::Ping,
    Method::ToolsList,
    Method::ToolsCall,
];

/// The methods of a legacy session with the 2025-11-25 tasks wire, in the
/// order an unknown method's error lists them.
const TASK_WIRE_METHODS: [Method; 8] = [
    Method::Initialize,
    Method::Ping,
    Method::ToolsList,
    Method::ToolsCall,
    Method::Task(TaskMethod::Get),
    Method::TasksResult,
    Method::TasksList,
    Method::Task(TaskMethod::Cancel),
];

/// How long `tasks/cancel` waits for the task to reach a terminal status
/// before it answers with the state it has (the runtime aborts a handler
/// that ignores its cancel after `RuntimeConfig::cancel_grace`).
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// The 2025-11-25 `Task` of a snapshot (taken with [`ClientView::BASE`],
/// so `paused` already reads as `working`), with the SEP-2268 links.
pub(crate) fn legacy_task(t: &DetailedTask) -> LegacyTask {
    let task = t.task();
    let (status, status_message) = status_of(t);
    LegacyTask {
        task_id: task.task_id,
        status,
        status_message,
        created_at: task.created_at,
        last_updated_at: task.last_updated_at,
        ttl: task.ttl_ms,
        poll_interval: task.poll_interval_ms,
        parent_task_id: task.parent_task_id,
        child_task_ids: task.child_task_ids.clone(),
    }
}

/// [`legacy_task`] as JSON.
pub(crate) fn task_object(t: &DetailedTask) -> Value {
    serde_json::to_value(legacy_task(t)).expect("tasks serialize")
}

/// The 2025-11-25 status and status message: a completed tool call whose
/// result has `isError: true` is `failed` there; a failed task without a
/// message shows its error's message.
fn status_of(t: &DetailedTask) -> (TaskStatus, Option<String>) {
    let message = t.task().status_message.clone();
    match t.payload() {
        TaskPayload::Completed { result } if result.get("isError") == Some(&Value::Bool(true)) => {
            let text = first_text(result).unwrap_or("the tool reported an error");
            (TaskStatus::Failed, Some(text.to_owned()))
        }
        TaskPayload::Failed { error } => (
            TaskStatus::Failed,
            message.or_else(|| Some(error.message.clone())),
        ),
        _ => (t.status(), message),
    }
}

fn first_text(result: &JsonObject) -> Option<&str> {
    result
        .get("content")?
        .as_array()?
        .iter()
        .find_map(|c| c.get("text").and_then(Value::as_str))
}

/// Adds a task's related-task metadata (SEP-2268 adds `parentTaskId`) to
/// the `_meta` of `object` (a result or request params), keeping the rest.
fn with_related_task(object: &mut serde_json::Map<String, Value>, t: &DetailedTask) {
    let related = RelatedTask {
        task_id: t.task().task_id,
        parent_task_id: t.task().parent_task_id,
    };
    let mut meta = match object.remove("_meta") {
        Some(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    meta.insert(META_RELATED_TASK.to_owned(), json!(related));
    object.insert("_meta".to_owned(), Value::Object(meta));
}

/// The answer of `tasks/result` for a terminal task: the tool's result with
/// the related-task metadata, or the JSON-RPC error it failed with.
fn final_message(id: &RequestId, t: &DetailedTask) -> String {
    let message = match t.payload() {
        TaskPayload::Completed { result } => {
            let mut map = result.as_map().clone();
            map.remove("resultType");
            with_related_task(&mut map, t);
            json!({"jsonrpc": "2.0", "id": id.to_value(), "result": map})
        }
        TaskPayload::Failed { error } => {
            serde_json::to_value(JsonRpcError::new(Some(id.clone()), error.clone()))
                .expect("errors serialize")
        }
        _ => {
            let error = ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                "the task was cancelled before it finished",
            )
            .with_data(json!({"taskId": t.task().task_id, "status": "cancelled"}));
            serde_json::to_value(JsonRpcError::new(Some(id.clone()), error)).expect("errors serialize")
        }
    };
    message.to_string()
}

/// The `taskId` a legacy task method names; a malformed id is "task not
/// found", like an unknown or foreign one.
fn task_id_param(req: &JsonRpcRequest) -> Result<TaskId, ErrorObject> {
    let raw = str_param(req.params.as_ref(), "taskId").ok_or_else(|| invalid("`taskId` must be a string"))?;
    TaskAccess::parse(raw)
}

impl Server {
    /// A request on the legacy path, in protocol `version`. Every JSON-RPC
    /// error is sent with HTTP 200 (the legacy transports give errors no
    /// status of their own).
    pub(crate) async fn handle_legacy(
        &self,
        req: &JsonRpcRequest,
        method: Option<Method>,
        incoming: &Incoming<'_>,
        version: LegacyVersion,
    ) -> Result<Reply, Rejected> {
        let ctx = RequestCtx {
            id: req.id.clone(),
            principal: incoming.principal.clone(),
            caps: ClientCapabilities::default(),
            tasks: None,
            legacy: Some(version),
        };
        let params = req.params.as_ref();
        let tasks = version.has_tasks();
        let reply = match method {
            Some(Method::Initialize) => Ok(result_reply(&ctx.id, self.initialize(version))),
            Some(Method::Ping) => Ok(result_reply(&ctx.id, json!({}))),
            Some(Method::ToolsList) => Ok(result_reply(&ctx.id, self.tools_list(Some(version)))),
            // Before 2025-11-25 `params.task` means nothing: a plain call.
            Some(Method::ToolsCall) => match if tasks {
                call_mode(params)
            } else {
                Ok(CallMode::LegacySync)
            } {
                Ok(mode) => {
                    // A task-augmented call speaks a tasks wire: the tool
                    // sees the base tasks capability.
                    let ctx = RequestCtx {
                        tasks: matches!(mode, CallMode::LegacyTask { .. }).then_some(TasksCapability::BASE),
                        ..ctx
                    };
                    match self.tools_call_created(req, &ctx, mode).await {
                        Ok((reply, created)) => {
                            // A stdio session writes the new task's status changes as they happen.
                            if let (Some(id), Some(conn)) = (created, incoming.connection) {
                                conn.follow(id, || self.status_notes(id, &ctx.principal));
                            }
                            Ok(reply)
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            },
            Some(Method::Task(TaskMethod::Get)) if tasks => self.legacy_get(req, &ctx).await,
            Some(Method::TasksResult) if tasks => self.legacy_result(req, &ctx, incoming.connection).await,
            Some(Method::TasksList) if tasks => self.legacy_list(req, &ctx).await,
            Some(Method::Task(TaskMethod::Cancel)) if tasks => self.legacy_cancel(req, &ctx).await,
            _ => {
                let known: &[Method] = if tasks { &TASK_WIRE_METHODS } else { &METHODS };
                let known: Vec<&str> = known.iter().map(|m| m.as_str()).collect();
                Err(ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "method not found: {:?} (protocol {}: {})",
                        req.method,
                        version.as_str(),
                        known.join(", ")
                    ),
                ))
            }
        };
        reply.map_err(Rejected::legacy)
    }

    fn initialize(&self, version: LegacyVersion) -> Value {
        let mut capabilities = json!({"tools": {"listChanged": false}});
        let instructions = if version.has_tasks() {
            capabilities["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
            "Tools with execution.taskSupport run as tasks when called with `params.task`; \
             subtasks appear in childTaskIds. Steer, pause and resume need protocol \
             2026-07-28 with the io.modelcontextprotocol/tasks extension."
        } else {
            "Tools are answered when they finish. Tasks (polling, cancel, subtasks) need protocol \
             2025-11-25; steer, pause and resume need 2026-07-28 with the \
             io.modelcontextprotocol/tasks extension."
        };
        json!({
            "protocolVersion": version.as_str(),
            "capabilities": capabilities,
            "serverInfo": self.server_info(),
            "instructions": instructions,
        })
    }

    async fn legacy_get(&self, req: &JsonRpcRequest, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let id = task_id_param(req)?;
        let snap = self
            .tasks()
            .get(id, ctx.principal.name(), ClientView::BASE)
            .await?
            .ok_or_else(ErrorObject::task_not_found)?;
        Ok(result_reply(&ctx.id, task_object(&snap)))
    }

    /// `tasks/result`: the answer at once for a terminal task; otherwise an
    /// SSE stream of status notifications and input requests that ends with
    /// the answer.
    ///
    /// On a stdio connection the status notifications come from the
    /// connection's follower of the task (one for every request that
    /// waits on it), so the stream carries the input requests and the answer.
    async fn legacy_result(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
        connection: Option<&Connection>,
    ) -> Result<Reply, ErrorObject> {
        let id = task_id_param(req)?;
        let snap = self
            .tasks()
            .peek(id, ctx.principal.name(), ClientView::BASE)
            .await?
            .ok_or_else(ErrorObject::task_not_found)?;
        let notes = connection.is_none();
        if let Some(conn) = connection
            && !snap.status().is_terminal()
        {
            conn.follow(id, || self.status_notes(id, &ctx.principal));
        }
        let rt = self.inner.runtime.clone();
        if snap.status().is_terminal() {
            rt.flushed(id).await.map_err(store_error)?;
            return Ok(Reply::Message {
                status: 200,
                body: final_message(&ctx.id, &snap),
            });
        }
        struct State {
            updates: BoxStream<'static, DetailedTask>,
            rt: crate::runtime::Runtime,
            request: RequestId,
            asked: HashSet<String>,
            ready: std::collections::VecDeque<String>,
            done: bool,
        }
        let state = State {
            updates: self.tasks().follow(id, ctx.principal.name(), ClientView::BASE),
            rt,
            request: ctx.id.clone(),
            asked: HashSet::new(),
            ready: std::collections::VecDeque::new(),
            done: false,
        };
        let stream = futures::stream::unfold(state, move |mut st| async move {
            loop {
                if let Some(m) = st.ready.pop_front() {
                    return Some((m, st));
                }
                if st.done {
                    return None;
                }
                st.done = true;
                let Some(snap) = st.updates.next().await else {
                    // The tree was deleted while the client waited.
                    let e = JsonRpcError::new(Some(st.request.clone()), ErrorObject::task_not_found());
                    st.ready
                        .push_back(serde_json::to_string(&e).expect("errors serialize"));
                    continue;
                };
                // Shown only once durable; a store failure ends the wait with an error.
                if let Err(e) = st.rt.flushed(id).await {
                    let e = JsonRpcError::new(Some(st.request.clone()), store_error(e));
                    st.ready
                        .push_back(serde_json::to_string(&e).expect("errors serialize"));
                    continue;
                }
                st.done = false;
                if notes {
                    st.ready.push_back(status_note(&snap));
                }
                if let TaskPayload::InputRequired { input_requests } = snap.payload() {
                    for (key, request) in input_requests {
                        if st.asked.insert(key.clone()) {
                            st.ready.push_back(input_request(&snap, key, request));
                        }
                    }
                }
                if snap.status().is_terminal() {
                    st.ready.push_back(final_message(&st.request, &snap));
                    st.done = true;
                }
            }
        });
        Ok(Reply::Stream(stream.boxed()))
    }

    /// Task `id`'s `notifications/tasks/status`, each once durable, with
    /// whether it is the last (the task ended); a store failure ends them.
    fn status_notes(&self, id: TaskId, principal: &Principal) -> BoxStream<'static, (String, bool)> {
        let rt = self.inner.runtime.clone();
        self.tasks()
            .follow(id, principal.name(), ClientView::BASE)
            .then(move |snap| {
                let rt = rt.clone();
                async move {
                    rt.flushed(id)
                        .await
                        .ok()
                        .map(|()| (status_note(&snap), snap.status().is_terminal()))
                }
            })
            .take_while(|n| std::future::ready(n.is_some()))
            .filter_map(std::future::ready)
            .boxed()
    }

    async fn legacy_list(&self, req: &JsonRpcRequest, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let cursor = match req.params.as_ref().and_then(|p| p.get("cursor")) {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.as_str()),
            Some(_) => return Err(invalid("`cursor` must be a string")),
        };
        let (tasks, next_cursor) = self
            .tasks()
            .list(&ctx.principal, cursor, LIST_PAGE, ClientView::BASE)
            .await?;
        let result = ListTasksResult {
            tasks: tasks.iter().map(legacy_task).collect(),
            next_cursor,
        };
        Ok(result_reply(
            &ctx.id,
            serde_json::to_value(result).expect("results serialize"),
        ))
    }

    async fn legacy_cancel(&self, req: &JsonRpcRequest, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let id = task_id_param(req)?;
        let access = self.tasks();
        let name = ctx.principal.name();
        let snap = access
            .peek(id, name, ClientView::BASE)
            .await?
            .ok_or_else(ErrorObject::task_not_found)?;
        if snap.status().is_terminal() {
            return Err(invalid(format!(
                "Cannot cancel task: already in terminal status '{}'",
                status_of(&snap).0.as_str()
            )));
        }
        // The text wants the task `cancelled` before the answer: wait for
        // the subtree to wind down (leaves first), within a bound.
        let snap = access
            .cancel_and_wait(id, name, ClientView::BASE, CANCEL_WAIT)
            .await?;
        Ok(result_reply(&ctx.id, task_object(&snap)))
    }

    /// A client's answer to an input request sent on a `tasks/result`
    /// stream: delivered to the task like a 2026 `tasks/update`.
    pub(crate) async fn legacy_input_answer(&self, resp: JsonRpcResponse, principal: &Principal) -> Reply {
        let not_ours = || {
            error_reply(
                400,
                None,
                ErrorObject::new(
                    ErrorCode::INVALID_REQUEST,
                    "no request with this id awaits an answer",
                ),
            )
        };
        let RequestId::String(raw) = &resp.id else {
            return not_ours();
        };
        let Some((task, key)) = raw.strip_prefix(INPUT_ID_PREFIX).and_then(|r| r.split_once(':')) else {
            return not_ours();
        };
        let Ok(id) = task.parse::<TaskId>() else {
            return not_ours();
        };
        // Keys no longer outstanding are ignored (I9), like a repeated update.
        let update = TaskCommand {
            method: TaskMethod::Update,
            task_id: id.to_string(),
            command: Command::Update(InputResponses::from([(key.to_owned(), resp.result)])),
        };
        match self
            .tasks()
            .command(id, principal.name(), &update, ClientView::BASE)
            .await
        {
            Ok(_) => Reply::Accepted,
            Err(CommandError::NotFound) => not_ours(),
            Err(CommandError::Unavailable(e)) => error_reply(500, None, e),
            Err(CommandError::Refused(e)) => error_reply(400, None, e),
        }
    }

    /// A client's error answer to an input request (it cannot or will not
    /// answer): the request stays outstanding, visible on the 2026 wire.
    pub(crate) fn legacy_input_refusal(&self, err: &JsonRpcError) -> Reply {
        match &err.id {
            Some(RequestId::String(raw)) if raw.starts_with(INPUT_ID_PREFIX) => {
                tracing::debug!(id = %raw, code = err.error.code.0, message = %err.error.message, "input request refused by the client");
                Reply::Accepted
            }
            _ => error_reply(
                400,
                None,
                ErrorObject::new(
                    ErrorCode::INVALID_REQUEST,
                    "no request with this id awaits an answer",
                ),
            ),
        }
    }
}

/// `notifications/tasks/status` with the task's state.
fn status_note(t: &DetailedTask) -> String {
    json!({"jsonrpc": "2.0", "method": NOTIFICATIONS_TASKS_STATUS, "params": task_object(t)}).to_string()
}

/// An input request of a task as a server-to-client JSON-RPC request with
/// the related-task metadata.
fn input_request(t: &DetailedTask, key: &str, request: &JsonObject) -> String {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or(ELICITATION_CREATE);
    let mut params = match request.get("params") {
        Some(Value::Object(p)) => p.clone(),
        _ => serde_json::Map::new(),
    };
    with_related_task(&mut params, t);
    json!({
        "jsonrpc": "2.0",
        "id": format!("{INPUT_ID_PREFIX}{}:{key}", t.task().task_id),
        "method": method,
        "params": params,
    })
    .to_string()
}

/// `params.task` of a legacy `tools/call`: absent (synchronous), or an
/// object with an optional `ttl` in milliseconds.
fn call_mode(params: Option<&JsonObject>) -> Result<CallMode, ErrorObject> {
    match params.and_then(|p| p.get("task")) {
        None | Some(Value::Null) => Ok(CallMode::LegacySync),
        Some(Value::Object(task)) => match task.get("ttl") {
            None | Some(Value::Null) => Ok(CallMode::LegacyTask { ttl_ms: None }),
            Some(v) => match v
                .as_u64()
                .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            {
                Some(ttl) => Ok(CallMode::LegacyTask { ttl_ms: Some(ttl) }),
                None => Err(invalid(
                    "`task.ttl` must be a non-negative number of milliseconds",
                )),
            },
        },
        Some(_) => Err(invalid("`task` must be an object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Task;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn snapshot(
        id: &str,
        message: Option<&str>,
        ttl: u64,
        poll: Option<u64>,
        payload: TaskPayload,
    ) -> DetailedTask {
        let task = Task {
            task_id: id.parse().unwrap(),
            status: payload.status(),
            status_message: message.map(str::to_owned),
            created_at: "2025-11-25T10:30:00Z".parse().unwrap(),
            last_updated_at: "2025-11-25T10:40:00Z".parse().unwrap(),
            ttl_ms: Some(ttl),
            poll_interval_ms: poll,
            parent_task_id: None,
            child_task_ids: Vec::new(),
        };
        DetailedTask::new(task, payload)
    }

    const T: &str = "786512e2-9e0d-44bd-8f29-789f320fe840";

    #[test]
    fn tasks_are_written_as_the_2025_11_25_text_shows_them() {
        let working = snapshot(
            T,
            Some("The operation is now in progress."),
            30000,
            Some(5000),
            TaskPayload::Working,
        );
        assert_eq!(
            task_object(&working),
            fixture("legacy-tasks-get-working.json")["result"]
        );
        // A JSON-RPC failure shows its message as the status message.
        let failed = snapshot(
            "786512e2-9e0d-44bd-8f29-789f820fe840",
            None,
            30000,
            None,
            TaskPayload::Failed {
                error: ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    "Tool execution failed: API rate limit exceeded",
                ),
            },
        );
        assert_eq!(
            task_object(&failed),
            fixture("legacy-tasks-get-failed.json")["result"]
        );
        // paused has no place on this wire; a BASE snapshot already reads working.
        let paused = snapshot(T, None, 30000, None, TaskPayload::Paused);
        assert_eq!(
            task_object(&paused)["status"],
            "paused",
            "callers pass BASE snapshots"
        );
    }

    #[test]
    fn tasks_result_answers_the_result_with_related_task_metadata() {
        let expected = fixture("legacy-tasks-result-call-tool-result.json");
        let mut result = JsonObject::from_value(expected["result"].clone()).unwrap();
        let mut map = result.as_map().clone();
        map.remove("_meta");
        // A 2026 result carries resultType; this wire's does not.
        map.insert("resultType".into(), json!("complete"));
        result = JsonObject::from_map(map);
        let done = snapshot(T, None, 30000, None, TaskPayload::Completed { result });
        let message: Value = serde_json::from_str(&final_message(&RequestId::Number(4), &done)).unwrap();
        assert_eq!(message, expected);
        // A tool error (isError) is `failed` here, with the result's text.
        let tool_error = snapshot(
            T,
            Some("node 0: done"),
            30000,
            None,
            TaskPayload::Completed {
                result: super::super::tool::error_result("width is out of range"),
            },
        );
        let t = task_object(&tool_error);
        assert_eq!(
            (t["status"].as_str(), t["statusMessage"].as_str()),
            (Some("failed"), Some("width is out of range"))
        );
    }

    #[test]
    fn task_params_read_ttl_or_refuse() {
        let p = |v: Value| JsonObject::from_value(v).unwrap();
        assert_eq!(call_mode(None).unwrap(), CallMode::LegacySync);
        assert_eq!(
            call_mode(Some(&p(json!({"task": {"ttl": 60000}})))).unwrap(),
            CallMode::LegacyTask { ttl_ms: Some(60000) }
        );
        assert_eq!(
            call_mode(Some(&p(json!({"task": {}})))).unwrap(),
            CallMode::LegacyTask { ttl_ms: None }
        );
        assert!(call_mode(Some(&p(json!({"task": 5})))).is_err());
        assert!(call_mode(Some(&p(json!({"task": {"ttl": "1s"}})))).is_err());
    }
}
