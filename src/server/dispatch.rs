//! Request validation and dispatch, independent of the transport.
//!
//! The pipeline runs in the order the 2026-07-28 texts and the official
//! conformance suite agree on: parse, protocol-version header, `_meta`,
//! header/`_meta` agreement, supported version, `Mcp-Method`, known method,
//! `Mcp-Name`, tasks capability, then the method itself. Every error echoes
//! the request id and carries an HTTP status for the Streamable HTTP layer.

use std::collections::HashSet;
use std::sync::Arc;

use base64::Engine;
use futures::stream::{BoxStream, SelectAll};
use futures::{StreamExt, stream};
use serde_json::{Value, json};

use super::auth::Principal;
use super::tool::{ToolCall, ToolOutcome};
use super::{RegisteredTool, Server, TaskSupport};
use crate::core::{ClientView, RootOptions};
use crate::model::{
    ClientCapabilities, DetailedTask, ErrorCode, ErrorObject, GetTaskResult, InputResponses, JsonObject,
    JsonRpcError, JsonRpcMessage, JsonRpcRequest, META_SUBSCRIPTION_ID, PROTOCOL_VERSION, RequestId,
    RequestMeta, SteerTaskParams, SubscriptionsListenParams, TASKS_EXTENSION, TaskId, TaskIdParams,
    TaskPayload, TasksCapability,
};
use crate::runtime::{Launch, Owner, RuntimeError};
use crate::store::StoreError;

/// Protocol versions answered through the legacy `initialize` handshake
/// (base protocol only: tools, no tasks).
pub const LEGACY_VERSIONS: [&str; 2] = ["2025-11-25", "2025-06-18"];

/// The request metadata headers of Streamable HTTP.
#[derive(Debug, Clone, Default)]
pub struct RequestHeaders {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// `Mcp-Method`.
    pub method: Option<String>,
    /// `Mcp-Name`.
    pub name: Option<String>,
}

/// One incoming message with what the transport knows about it.
#[derive(Debug)]
pub struct Incoming<'a> {
    /// The raw JSON body (one message).
    pub body: &'a [u8],
    /// HTTP metadata headers; `None` on stdio, where there are none to check.
    pub headers: Option<RequestHeaders>,
    /// The authenticated caller.
    pub principal: Principal,
}

/// What to send back.
pub enum Reply {
    /// One JSON-RPC message (compact, one line) with its HTTP status.
    Message {
        /// HTTP status (200, or 400/404/500 for errors).
        status: u16,
        /// The message.
        body: String,
    },
    /// A notification was accepted: HTTP 202, no body.
    Accepted,
    /// A stream of JSON-RPC messages (`subscriptions/listen`), one per SSE
    /// event or stdio line; the last one is the response when it ends.
    Stream(BoxStream<'static, String>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Message { status, body } => write!(f, "Message({status}, {body})"),
            Reply::Accepted => f.write_str("Accepted"),
            Reply::Stream(_) => f.write_str("Stream"),
        }
    }
}

/// The HTTP status for a JSON-RPC error code.
pub fn status_for(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::METHOD_NOT_FOUND => 404,
        ErrorCode::INTERNAL_ERROR => 500,
        _ => 400,
    }
}

fn error_reply(id: Option<RequestId>, error: ErrorObject) -> Reply {
    let status = status_for(error.code);
    let body = serde_json::to_string(&JsonRpcError::new(id, error)).expect("error responses serialize");
    Reply::Message { status, body }
}

fn result_reply(id: &RequestId, result: Value) -> Reply {
    let body = serde_json::to_string(&json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result}))
        .expect("results serialize");
    Reply::Message { status: 200, body }
}

fn invalid(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INVALID_PARAMS, message)
}

fn header_mismatch(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::HEADER_MISMATCH, message)
}

/// Methods of the 2026-07-28 surface this server answers (prompts only when registered).
const TASK_METHODS: [&str; 6] = [
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/steer",
    "tasks/pause",
    "tasks/resume",
];

/// Decodes an `Mcp-Name` value: trims, and opens the `=?base64?…?=` sentinel.
fn decode_header_value(raw: &str) -> String {
    let v = raw.trim_matches(|c| c == ' ' || c == '\t');
    if let Some(inner) = v.strip_prefix("=?base64?").and_then(|s| s.strip_suffix("?="))
        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(inner)
        && let Ok(s) = String::from_utf8(bytes)
    {
        return s;
    }
    v.to_owned()
}

fn str_param<'a>(params: Option<&'a JsonObject>, key: &str) -> Option<&'a str> {
    params.and_then(|p| p.get(key)).and_then(Value::as_str)
}

impl Server {
    /// Handles one incoming message.
    pub async fn handle(&self, incoming: Incoming<'_>) -> Reply {
        let req = match JsonRpcMessage::parse(incoming.body) {
            Ok(JsonRpcMessage::Request(req)) => req,
            Ok(JsonRpcMessage::Notification(_)) => return Reply::Accepted,
            Ok(JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)) => {
                return error_reply(
                    None,
                    ErrorObject::new(ErrorCode::INVALID_REQUEST, "the server sent no request to answer"),
                );
            }
            Err(e) => return error_reply(e.id, e.error),
        };
        let id = req.id.clone();
        let method = req.method.clone();
        match self.handle_request(req, &incoming).await {
            Ok(reply) => reply,
            Err(error) => {
                tracing::debug!(%method, code = error.code.0, message = %error.message, "request rejected");
                error_reply(Some(id), error)
            }
        }
    }

    fn knows(&self, method: &str) -> bool {
        matches!(
            method,
            "server/discover" | "tools/list" | "tools/call" | "subscriptions/listen"
        ) || TASK_METHODS.contains(&method)
            || (!self.inner.prompts.is_empty() && matches!(method, "prompts/list" | "prompts/get"))
    }

    async fn handle_request(
        &self,
        req: JsonRpcRequest,
        incoming: &Incoming<'_>,
    ) -> Result<Reply, ErrorObject> {
        let params = req.params.as_ref();
        let meta = RequestMeta::from_params(params)?;
        let headers = incoming.headers.as_ref();
        let meta_version = meta.as_ref().and_then(|m| m.protocol_version.clone());
        if meta_version.is_none() {
            let header = headers.and_then(|h| h.protocol_version.as_deref()).map(str::trim);
            let legacy_header = header.is_some_and(|v| LEGACY_VERSIONS.contains(&v));
            let legacy_init = req.method == "initialize" && header.is_none();
            if legacy_header || legacy_init {
                return self.handle_legacy(req, incoming).await;
            }
        }
        if let Some(h) = headers
            && h.protocol_version.is_none()
        {
            return Err(header_mismatch("missing MCP-Protocol-Version header"));
        }
        let Some(meta) = meta else {
            return Err(invalid(
                "request params must carry `_meta` with io.modelcontextprotocol/protocolVersion and \
                 io.modelcontextprotocol/clientCapabilities",
            ));
        };
        let missing = meta.missing_required_keys();
        if !missing.is_empty() {
            return Err(invalid(format!(
                "request `_meta` is missing {}",
                missing.join(" and ")
            )));
        }
        let version = meta.protocol_version.clone().unwrap_or_default();
        if let Some(h) = headers
            && h.protocol_version.as_deref().map(str::trim) != Some(version.as_str())
        {
            return Err(header_mismatch(format!(
                "MCP-Protocol-Version header {:?} does not match _meta protocolVersion {version:?}",
                h.protocol_version.as_deref().unwrap_or("")
            )));
        }
        if version != PROTOCOL_VERSION {
            return Err(ErrorObject::new(
                ErrorCode(-32022),
                format!("unsupported protocol version {version:?}; this server speaks {PROTOCOL_VERSION}"),
            )
            .with_data(json!({"supported": [PROTOCOL_VERSION], "requested": version})));
        }
        if let Some(h) = headers {
            match h
                .method
                .as_deref()
                .map(|m| m.trim_matches(|c| c == ' ' || c == '\t'))
            {
                None => return Err(header_mismatch("missing Mcp-Method header")),
                Some(m) if m != req.method => {
                    return Err(header_mismatch(format!(
                        "Mcp-Method header {m:?} does not match the body's method {:?}",
                        req.method
                    )));
                }
                Some(_) => {}
            }
        }
        if !self.knows(&req.method) {
            return Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {:?}", req.method),
            ));
        }
        if let Some(h) = headers {
            let source = match req.method.as_str() {
                "tools/call" | "prompts/get" => Some(("params.name", str_param(params, "name"))),
                m if TASK_METHODS.contains(&m) => Some(("params.taskId", str_param(params, "taskId"))),
                _ => None,
            };
            // A missing or non-string source field is a params error, reported
            // by the method with -32602; the header is compared to strings only.
            if let Some((field, expected @ Some(_))) = source {
                let got = h.name.as_deref().map(decode_header_value);
                match (got, expected) {
                    (None, _) => {
                        return Err(header_mismatch(format!(
                            "missing Mcp-Name header (must equal {field})"
                        )));
                    }
                    (Some(g), Some(e)) if g == e => {}
                    (Some(g), _) => {
                        return Err(header_mismatch(format!(
                            "Mcp-Name header {g:?} does not match {field}"
                        )));
                    }
                }
            }
        }
        let caps = meta.client_capabilities.clone().unwrap_or_default();
        let tasks = caps.tasks();
        if TASK_METHODS.contains(&req.method.as_str()) && tasks.is_none() {
            return Err(ErrorObject::tasks_extension_required());
        }
        let ctx = RequestCtx {
            id: req.id.clone(),
            principal: incoming.principal.clone(),
            caps,
            tasks,
        };
        match req.method.as_str() {
            "server/discover" => Ok(result_reply(&ctx.id, self.discover())),
            "tools/list" => Ok(result_reply(&ctx.id, self.tools_list(true))),
            "tools/call" => self.tools_call(&req, &ctx, false).await,
            "prompts/list" => Ok(result_reply(&ctx.id, self.prompts_list())),
            "prompts/get" => self.prompts_get(&req, &ctx).await,
            "subscriptions/listen" => self.listen(&req, &ctx),
            _ => {
                let (reply, id) = self.task_method(&req, &ctx)?;
                // Nothing is acknowledged or shown before it is durable.
                self.inner.runtime.flushed(id).await.map_err(store_error)?;
                Ok(reply)
            }
        }
    }

    fn discover(&self) -> Value {
        let mut caps = json!({
            "tools": {},
            "extensions": {TASKS_EXTENSION: TasksCapability::FULL.to_settings()},
        });
        if !self.inner.prompts.is_empty() {
            caps["prompts"] = json!({});
        }
        json!({
            "resultType": "complete",
            "supportedVersions": [PROTOCOL_VERSION],
            "capabilities": caps,
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": self.server_info()},
        })
    }

    fn server_info(&self) -> Value {
        json!({"name": self.inner.config.name, "version": self.inner.config.version})
    }

    fn tools_list(&self, modern: bool) -> Value {
        let tools: Vec<Value> = self
            .inner
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.spec.name,
                    "description": t.spec.description,
                    "inputSchema": t.spec.input_schema,
                })
            })
            .collect();
        if modern {
            json!({"resultType": "complete", "tools": tools, "ttlMs": 0, "cacheScope": "private"})
        } else {
            json!({"tools": tools})
        }
    }

    fn prompts_list(&self) -> Value {
        let prompts: Vec<Value> = self
            .inner
            .prompts
            .iter()
            .map(|p| json!({"name": p.spec.name, "description": p.spec.description, "arguments": p.spec.arguments}))
            .collect();
        json!({"resultType": "complete", "prompts": prompts, "ttlMs": 0, "cacheScope": "private"})
    }

    /// Reads the MRTR parts of a call: `arguments`, `inputResponses`, `requestState`.
    fn read_call(&self, req: &JsonRpcRequest, ctx: &RequestCtx, name: &str) -> Result<ToolCall, ErrorObject> {
        let params = req.params.as_ref();
        let arguments = match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) => JsonObject::new(),
            Some(Value::Object(m)) => JsonObject::from_map(m.clone()),
            Some(_) => return Err(invalid("`arguments` must be an object")),
        };
        let input_responses = match params.map(|p| p.get("inputResponses")) {
            None | Some(None) => None,
            Some(Some(Value::Object(m))) => Some(responses_of(m)),
            Some(Some(_)) => return Err(invalid("`inputResponses` must be an object of responses")),
        };
        let request_state = match params.and_then(|p| p.get("requestState")) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(
                self.inner
                    .state_key
                    .open(name, s)
                    .map_err(|m| invalid(format!("invalid requestState: {m}")))?,
            ),
            Some(_) => return Err(invalid("`requestState` must be a string")),
        };
        Ok(ToolCall {
            name: name.to_owned(),
            arguments,
            input_responses,
            request_state,
            client_capabilities: ctx.caps.clone(),
            tasks: ctx.tasks,
        })
    }

    fn tool(&self, name: &str) -> Result<&RegisteredTool, ErrorObject> {
        self.inner
            .tools
            .iter()
            .find(|t| t.spec.name == name)
            .ok_or_else(|| invalid(format!("unknown tool {name:?}")))
    }

    async fn tools_call(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
        legacy: bool,
    ) -> Result<Reply, ErrorObject> {
        let name =
            str_param(req.params.as_ref(), "name").ok_or_else(|| invalid("`name` must be a string"))?;
        let tool = self.tool(name)?.clone();
        if tool.spec.task_support == TaskSupport::Required && ctx.tasks.is_none() {
            return Err(if legacy {
                invalid(format!(
                    "tool {name:?} runs only as a task: call it with protocol {PROTOCOL_VERSION} and the tasks extension"
                ))
            } else {
                ErrorObject::tasks_extension_required()
            });
        }
        let call = self.read_call(req, ctx, name)?;
        let call_copy = call.clone();
        let outcome = tool.tool.call(call).await;
        match outcome {
            ToolOutcome::Complete(result) => Ok(result_reply(&ctx.id, complete(result, legacy))),
            ToolOutcome::Error(e) => Err(e),
            ToolOutcome::InputRequired {
                input_requests,
                state,
            } => {
                if legacy {
                    return Err(invalid(format!(
                        "tool {name:?} needs client input, which the legacy protocol cannot carry"
                    )));
                }
                let mut result = json!({"resultType": "input_required", "inputRequests": input_requests});
                if let Some(state) = state {
                    result["requestState"] = Value::String(self.inner.state_key.seal(name, &state));
                }
                Ok(result_reply(&ctx.id, result))
            }
            ToolOutcome::Task { body, ttl_ms } => {
                let owner = self.owner(&ctx.principal);
                let opts = RootOptions {
                    ttl_ms: ttl_ms.or(self.inner.config.default_task_ttl_ms),
                    poll_interval_ms: None,
                };
                let launch = self.inner.runtime.store().map(|_| Launch {
                    resumable: tool.spec.resumable,
                    call: super::tool::launch_of(&call_copy),
                });
                let id = self
                    .inner
                    .runtime
                    .start_root_launch(Some(owner), opts, body, launch)
                    .map_err(runtime_error)?;
                if ctx.tasks.is_some() && !legacy {
                    let snap = self.inner.runtime.get(id, ctx.view()).ok_or_else(|| {
                        ErrorObject::new(
                            ErrorCode::INTERNAL_ERROR,
                            "task vanished right after it was created",
                        )
                    })?;
                    // CreateTaskResult only once the task is durable (spec
                    // MUST), with everything the snapshot shows: the handler
                    // may have created subtasks (listed in `childTaskIds`)
                    // after the task's own batch, so wait after reading it.
                    self.inner.runtime.flushed(id).await.map_err(store_error)?;
                    let mut result = serde_json::to_value(crate::model::CreateTaskResult::new(seed(snap)))
                        .expect("task results serialize");
                    result["resultType"] = json!("task");
                    return Ok(result_reply(&ctx.id, result));
                }
                self.inner.runtime.flushed(id).await.map_err(store_error)?;
                // A client without the tasks extension gets the final result;
                // if it goes away, the task is cancelled.
                let guard = CancelOnDrop {
                    server: self.clone(),
                    id,
                    armed: true,
                };
                let done = self.inner.runtime.wait(id, ClientView::BASE).await;
                let mut guard = guard;
                guard.armed = false;
                self.inner.runtime.flushed(id).await.map_err(store_error)?;
                match done.map(|t| t.into_parts().1) {
                    Some(TaskPayload::Completed { result }) => {
                        Ok(result_reply(&ctx.id, complete(result, legacy)))
                    }
                    Some(TaskPayload::Failed { error }) => Err(error),
                    _ => Err(ErrorObject::new(
                        ErrorCode::INTERNAL_ERROR,
                        "the tool's task was cancelled",
                    )),
                }
            }
        }
    }

    async fn prompts_get(&self, req: &JsonRpcRequest, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let name =
            str_param(req.params.as_ref(), "name").ok_or_else(|| invalid("`name` must be a string"))?;
        let prompt = self
            .inner
            .prompts
            .iter()
            .find(|p| p.spec.name == name)
            .ok_or_else(|| invalid(format!("unknown prompt {name:?}")))?
            .clone();
        let call = self.read_call(req, ctx, name)?;
        match prompt.prompt.call(call).await {
            ToolOutcome::Complete(result) => Ok(result_reply(&ctx.id, complete(result, false))),
            ToolOutcome::Error(e) => Err(e),
            ToolOutcome::InputRequired {
                input_requests,
                state,
            } => {
                let mut result = json!({"resultType": "input_required", "inputRequests": input_requests});
                if let Some(state) = state {
                    result["requestState"] = Value::String(self.inner.state_key.seal(name, &state));
                }
                Ok(result_reply(&ctx.id, result))
            }
            ToolOutcome::Task { .. } => Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                "a prompt cannot become a task",
            )),
        }
    }

    pub(crate) fn owner(&self, principal: &Principal) -> Arc<Owner> {
        self.inner.owners.of(principal)
    }

    /// Resolves a task id the caller may see; unknown, malformed and foreign
    /// ids are indistinguishable.
    fn visible_task(&self, raw: &str, principal: &Principal) -> Result<TaskId, ErrorObject> {
        let not_found = ErrorObject::task_not_found;
        let id: TaskId = raw.parse().map_err(|_| not_found())?;
        match self.inner.runtime.owner_of(id) {
            Some(owner) if owner.name() == principal.name() => Ok(id),
            _ => Err(not_found()),
        }
    }

    /// A `tasks/*` method; returns the reply and the task it concerns.
    fn task_method(&self, req: &JsonRpcRequest, ctx: &RequestCtx) -> Result<(Reply, TaskId), ErrorObject> {
        let rt = &self.inner.runtime;
        let view = ctx.view();
        let ack = || json!({"resultType": "complete"});
        match req.method.as_str() {
            "tasks/get" => {
                let p: TaskIdParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                let snap = rt.get(id, view).ok_or_else(ErrorObject::task_not_found)?;
                Ok((result_reply(&ctx.id, task_result(snap)), id))
            }
            "tasks/update" => {
                let p: TaskIdParams = req.params_as()?;
                let responses = match req.params.as_ref().and_then(|p| p.get("inputResponses")) {
                    Some(Value::Object(m)) => responses_of(m),
                    _ => return Err(invalid("`inputResponses` must be an object of responses")),
                };
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                rt.update(id, responses).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, ack()), id))
            }
            "tasks/cancel" => {
                let p: TaskIdParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                let _ = rt.cancel(id).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, ack()), id))
            }
            "tasks/steer" => {
                let p: SteerTaskParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                rt.steer(id, p.message).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, ack()), id))
            }
            "tasks/pause" => {
                let p: TaskIdParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                let snap = rt.pause(id, view).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, task_result(snap)), id))
            }
            "tasks/resume" => {
                let p: TaskIdParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                let snap = rt.resume(id, view).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, task_result(snap)), id))
            }
            other => Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {other:?}"),
            )),
        }
    }

    fn listen(&self, req: &JsonRpcRequest, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let p: SubscriptionsListenParams = req.params_as()?;
        if p.notifications.wants_tasks() && ctx.tasks.is_none() {
            return Err(ErrorObject::tasks_extension_required());
        }
        let max = self.inner.config.limits.max_subscription_tasks;
        let requested: Vec<&str> = p.notifications.task_ids().map(|(raw, _)| raw).collect();
        if requested.len() > max {
            return Err(invalid(format!(
                "subscriptions/listen names {} tasks; the limit is {max}",
                requested.len()
            )));
        }
        // Foreign and unknown ids are left out of the acknowledgement, silently.
        let mut accepted: Vec<TaskId> = Vec::new();
        for raw in requested {
            if let Ok(id) = self.visible_task(raw, &ctx.principal)
                && !accepted.contains(&id)
            {
                accepted.push(id);
            }
        }
        let sub_id = ctx.id.to_value();
        let ack = json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "notifications": {"taskIds": accepted.iter().map(ToString::to_string).collect::<Vec<_>>()},
                "_meta": {META_SUBSCRIPTION_ID: sub_id},
            },
        });
        let first = stream::once(async move { ack.to_string() });
        if accepted.is_empty() {
            // Nothing this server can notify about: the stream stays open
            // (keep-alives) until the client closes it.
            return Ok(Reply::Stream(first.chain(stream::pending()).boxed()));
        }
        let rt = self.inner.runtime.clone();
        let view = ctx.view();
        let mut all: SelectAll<BoxStream<'static, DetailedTask>> = SelectAll::new();
        for id in &accepted {
            all.push(rt.subscribe(&[*id], view).boxed());
        }
        let watched: HashSet<TaskId> = accepted.iter().copied().collect();
        let sid = sub_id.clone();
        let updates = stream::unfold((all, watched, rt), move |(mut all, mut watched, rt)| {
            let sid = sid.clone();
            async move {
                let task = all.next().await?;
                // A snapshot is shown only once it is durable; a store
                // failure ends the stream rather than showing it.
                rt.flushed(task.task().task_id).await.ok()?;
                // Subtasks are included: follow every child as it appears.
                for child in &task.task().child_task_ids {
                    if watched.insert(*child) {
                        all.push(rt.subscribe(&[*child], view).boxed());
                    }
                }
                let mut params = serde_json::to_value(&task).expect("tasks serialize");
                params["_meta"] = json!({META_SUBSCRIPTION_ID: sid});
                let note = json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": params});
                Some((note.to_string(), (all, watched, rt)))
            }
        });
        let id = ctx.id.to_value();
        let end = stream::once(async move {
            json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete"}}).to_string()
        });
        Ok(Reply::Stream(first.chain(updates).chain(end).boxed()))
    }

    async fn handle_legacy(
        &self,
        req: JsonRpcRequest,
        incoming: &Incoming<'_>,
    ) -> Result<Reply, ErrorObject> {
        let ctx = RequestCtx {
            id: req.id.clone(),
            principal: incoming.principal.clone(),
            caps: ClientCapabilities::default(),
            tasks: None,
        };
        match req.method.as_str() {
            "initialize" => {
                let requested =
                    str_param(req.params.as_ref(), "protocolVersion").unwrap_or(LEGACY_VERSIONS[0]);
                let version = if LEGACY_VERSIONS.contains(&requested) {
                    requested
                } else {
                    LEGACY_VERSIONS[0]
                };
                Ok(result_reply(
                    &ctx.id,
                    json!({
                        "protocolVersion": version,
                        "capabilities": {"tools": {"listChanged": false}},
                        "serverInfo": self.server_info(),
                        "instructions": "Tasks, subtasks, steering and pause need protocol 2026-07-28 with the \
                                         io.modelcontextprotocol/tasks extension.",
                    }),
                ))
            }
            "ping" => Ok(result_reply(&ctx.id, json!({}))),
            "tools/list" => Ok(result_reply(&ctx.id, self.tools_list(false))),
            "tools/call" => self.tools_call(&req, &ctx, true).await,
            other => Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "method not found: {other:?} (legacy protocol: initialize, ping, tools/list, tools/call)"
                ),
            )),
        }
    }
}

/// Per-request context after validation.
struct RequestCtx {
    id: RequestId,
    principal: Principal,
    caps: ClientCapabilities,
    tasks: Option<TasksCapability>,
}

impl RequestCtx {
    /// `paused` is shown only to clients that declared the `pause` sub-capability.
    fn view(&self) -> ClientView {
        ClientView {
            show_paused: self.tasks.is_some_and(|t| t.pause),
        }
    }
}

/// The responses of an `inputResponses` object. A value that is not an
/// object cannot answer anything: it is dropped like an unknown key, so the
/// tool asks again (or the key is ignored) rather than the request failing.
fn responses_of(m: &serde_json::Map<String, Value>) -> InputResponses {
    m.iter()
        .filter_map(|(k, v)| match v {
            Value::Object(o) => Some((k.clone(), JsonObject::from_map(o.clone()))),
            _ => None,
        })
        .collect()
}

fn complete(result: JsonObject, legacy: bool) -> Value {
    let mut v = result.to_value();
    if !legacy {
        v["resultType"] = json!("complete");
    }
    v
}

fn task_result(task: DetailedTask) -> Value {
    serde_json::to_value(GetTaskResult::new(task)).expect("task results serialize")
}

/// The seed state of a new task: as created (`working`, no payload), even if
/// the handler already moved on — the client polls for the rest.
fn seed(snap: DetailedTask) -> DetailedTask {
    let (mut task, payload) = snap.into_parts();
    if !matches!(payload, TaskPayload::Working) {
        task.status_message = None;
        task.last_updated_at = task.created_at;
    }
    DetailedTask::new(task, TaskPayload::Working)
}

fn store_error(e: StoreError) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        format!("the change could not be made durable: {e}"),
    )
}

fn runtime_error(e: RuntimeError) -> ErrorObject {
    match &e {
        RuntimeError::Transition(crate::core::TransitionError::UnknownTask(_)) => {
            ErrorObject::task_not_found()
        }
        _ => e.to_error_object(),
    }
}

/// Cancels a task run on behalf of a client without the tasks extension if
/// the request goes away before it finishes.
struct CancelOnDrop {
    server: Server,
    id: TaskId,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.server.inner.runtime.cancel(self.id);
        }
    }
}
