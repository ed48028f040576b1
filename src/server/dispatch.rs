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
/// (2025-11-25 with its tasks wire, see `legacy.rs`; 2025-06-18 tools only).
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
        /// HTTP status: 200 for results and for every JSON-RPC error the
        /// transport texts do not give a status of its own (see [`status_for`]).
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

/// The HTTP status of a JSON-RPC error on the 2026-07-28 path.
///
/// The transport texts give a status only to these: header mismatch
/// (`-32020`), a missing required client capability (`-32021`) and an
/// unsupported protocol version (`-32022`) are `400 Bad Request`; an unknown
/// method (`-32601`) is `404 Not Found`. A request whose `_meta` lacks a
/// required key is also `400` (the pipeline says so itself, since its code,
/// `-32602`, is shared with ordinary parameter errors). Every other error
/// is a normal JSON-RPC response: `200`, so that clients see its code
/// instead of a transport failure. On the legacy path every JSON-RPC error
/// is `200`.
pub fn status_for(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::METHOD_NOT_FOUND => 404,
        ErrorCode::HEADER_MISMATCH | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY => 400,
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => 400,
        _ => 200,
    }
}

/// A request the server answers with an error, and the HTTP status to send it with.
#[derive(Debug)]
pub(crate) struct Rejected {
    pub(crate) status: u16,
    pub(crate) error: ErrorObject,
}

impl Rejected {
    /// An error sent with an explicit HTTP status.
    pub(crate) fn with_status(status: u16, error: ErrorObject) -> Self {
        Rejected { status, error }
    }

    /// An error on the 2026-07-28 path, with the status [`status_for`] gives it.
    pub(crate) fn modern(error: ErrorObject) -> Self {
        Rejected {
            status: status_for(error.code),
            error,
        }
    }

    /// An error on the legacy path: always a normal response (200).
    pub(crate) fn legacy(error: ErrorObject) -> Self {
        Rejected { status: 200, error }
    }
}

impl From<ErrorObject> for Rejected {
    fn from(error: ErrorObject) -> Self {
        Rejected::modern(error)
    }
}

pub(crate) fn error_reply(status: u16, id: Option<RequestId>, error: ErrorObject) -> Reply {
    let body = serde_json::to_string(&JsonRpcError::new(id, error)).expect("error responses serialize");
    Reply::Message { status, body }
}

pub(crate) fn result_reply(id: &RequestId, result: Value) -> Reply {
    let body = serde_json::to_string(&json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result}))
        .expect("results serialize");
    Reply::Message { status: 200, body }
}

pub(crate) fn invalid(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INVALID_PARAMS, message)
}

fn header_mismatch(message: impl Into<String>) -> Rejected {
    Rejected::modern(ErrorObject::new(ErrorCode::HEADER_MISMATCH, message))
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

pub(crate) fn str_param<'a>(params: Option<&'a JsonObject>, key: &str) -> Option<&'a str> {
    params.and_then(|p| p.get(key)).and_then(Value::as_str)
}

impl Server {
    /// Handles one incoming message.
    pub async fn handle(&self, incoming: Incoming<'_>) -> Reply {
        let req = match JsonRpcMessage::parse(incoming.body) {
            Ok(JsonRpcMessage::Request(req)) => req,
            Ok(JsonRpcMessage::Notification(_)) => return Reply::Accepted,
            // Answers to the input requests a legacy `tasks/result` stream sent.
            Ok(JsonRpcMessage::Response(resp)) => {
                return self.legacy_input_answer(resp, &incoming.principal).await;
            }
            Ok(JsonRpcMessage::Error(err)) => return self.legacy_input_refusal(&err),
            // Not a JSON-RPC request at all: the HTTP layer's 400.
            Err(e) => return error_reply(400, e.id, e.error),
        };
        let id = req.id.clone();
        let method = req.method.clone();
        match self.handle_request(req, &incoming).await {
            Ok(reply) => reply,
            Err(Rejected { status, error }) => {
                tracing::debug!(%method, code = error.code.0, message = %error.message, "request rejected");
                error_reply(status, Some(id), error)
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

    async fn handle_request(&self, req: JsonRpcRequest, incoming: &Incoming<'_>) -> Result<Reply, Rejected> {
        let params = req.params.as_ref();
        let meta = RequestMeta::from_params(params).map_err(|e| Rejected::with_status(400, e))?;
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
        // A request without the required `_meta` keys is malformed: -32602
        // with HTTP 400 (basic-index.md, per-request protocol fields).
        let Some(meta) = meta else {
            return Err(Rejected::with_status(
                400,
                invalid(
                    "request params must carry `_meta` with io.modelcontextprotocol/protocolVersion and \
                     io.modelcontextprotocol/clientCapabilities",
                ),
            ));
        };
        let missing = meta.missing_required_keys();
        if !missing.is_empty() {
            return Err(Rejected::with_status(
                400,
                invalid(format!("request `_meta` is missing {}", missing.join(" and "))),
            ));
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
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                format!("unsupported protocol version {version:?}; this server speaks {PROTOCOL_VERSION}"),
            )
            .with_data(json!({"supported": [PROTOCOL_VERSION], "requested": version}))
            .into());
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
            )
            .into());
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
            return Err(ErrorObject::tasks_extension_required().into());
        }
        let ctx = RequestCtx {
            id: req.id.clone(),
            principal: incoming.principal.clone(),
            caps,
            tasks,
        };
        match req.method.as_str() {
            "server/discover" => Ok(result_reply(&ctx.id, self.discover(&ctx))),
            "tools/list" => Ok(result_reply(&ctx.id, self.tools_list(true))),
            "tools/call" => Ok(self.tools_call(&req, &ctx, CallMode::Modern).await?),
            "prompts/list" => Ok(result_reply(&ctx.id, self.prompts_list())),
            "prompts/get" => Ok(self.prompts_get(&req, &ctx).await?),
            "subscriptions/listen" => Ok(self.listen(&req, &ctx)?),
            _ => {
                let (reply, id) = self.task_method(&req, &ctx)?;
                // Nothing is acknowledged or shown before it is durable.
                self.inner.runtime.flushed(id).await.map_err(store_error)?;
                Ok(reply)
            }
        }
    }

    /// `server/discover`. The tasks extension's settings are `{}` (the final
    /// extension defines none, and released clients accept exactly that),
    /// plus the SEP-2669 sub-capabilities (`steer`, `pause`) that this
    /// request's client capabilities declared: a client learns of them only
    /// by asking, and a client that knows only the final extension sees the
    /// settings it expects (docs/protocol.md, "Capabilities").
    fn discover(&self, ctx: &RequestCtx) -> Value {
        let offered = TasksCapability::FULL.intersect(ctx.tasks.unwrap_or(TasksCapability::BASE));
        let mut caps = json!({
            "tools": {},
            "extensions": {TASKS_EXTENSION: offered.to_settings()},
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

    pub(crate) fn server_info(&self) -> Value {
        json!({"name": self.inner.config.name, "version": self.inner.config.version})
    }

    pub(crate) fn tools_list(&self, modern: bool) -> Value {
        let tools: Vec<Value> = self
            .inner
            .tools
            .iter()
            .map(|t| {
                let mut tool = json!({
                    "name": t.spec.name,
                    "description": t.spec.description,
                    "inputSchema": t.spec.input_schema,
                });
                if !modern {
                    // 2025-11-25 tool-level negotiation; the 2026 extension
                    // leaves the choice to the server and has no such field.
                    tool["execution"] = json!({"taskSupport": t.spec.task_support.as_str()});
                }
                tool
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

    /// `tools/call` on either wire: the arguments are checked against the
    /// tool's schema (a violation is an `isError` result the model can act
    /// on), then the tool answers with a result, an MRTR round, a task or a
    /// protocol error.
    pub(crate) async fn tools_call(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
        mode: CallMode,
    ) -> Result<Reply, ErrorObject> {
        let legacy = mode != CallMode::Modern;
        let name =
            str_param(req.params.as_ref(), "name").ok_or_else(|| invalid("`name` must be a string"))?;
        let tool = self.tool(name)?.clone();
        match (tool.spec.task_support, mode) {
            (TaskSupport::Required, CallMode::Modern) if ctx.tasks.is_none() => {
                return Err(ErrorObject::tasks_extension_required());
            }
            // 2025-11-25, tool-level negotiation: -32601 for a required task
            // tool called without `params.task`, and for a task-augmented
            // call of a tool that forbids it.
            (TaskSupport::Required, CallMode::LegacySync) => {
                return Err(ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "tool {name:?} runs only as a task: call it with `params.task` (task augmentation required)"
                    ),
                ));
            }
            (TaskSupport::Forbidden, CallMode::LegacyTask { .. }) => {
                return Err(ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "tool {name:?} does not support task-augmented calls (execution.taskSupport is \"forbidden\")"
                    ),
                ));
            }
            _ => {}
        }
        let call = self.read_call(req, ctx, name)?;
        let outcome = match tool.spec.check_arguments(&call.arguments) {
            Err(e) => ToolOutcome::Complete(super::tool::error_result(format!("{e}"))),
            Ok(()) => tool.tool.call(call.clone()).await,
        };
        let (body, ttl_ms) = match outcome {
            ToolOutcome::Error(e) => return Err(e),
            ToolOutcome::InputRequired { .. } if legacy => {
                return Err(invalid(format!(
                    "tool {name:?} needs client input before it starts, which the legacy protocol cannot carry"
                )));
            }
            ToolOutcome::InputRequired {
                input_requests,
                state,
            } => {
                let mut result = json!({"resultType": "input_required", "inputRequests": input_requests});
                if let Some(state) = state {
                    result["requestState"] = Value::String(self.inner.state_key.seal(name, &state));
                }
                return Ok(result_reply(&ctx.id, result));
            }
            // A task-augmented legacy call must be answered with a task: a
            // result the tool gave at once becomes a task that completes with it.
            ToolOutcome::Complete(result) if matches!(mode, CallMode::LegacyTask { .. }) => {
                let body: super::TaskBody = Box::new(move |_ctx| Box::pin(async move { Ok(result) }));
                (body, None)
            }
            ToolOutcome::Complete(result) => return Ok(result_reply(&ctx.id, complete(result, legacy))),
            ToolOutcome::Task { body, ttl_ms } => (body, ttl_ms),
        };
        let ttl_ms = match mode {
            CallMode::LegacyTask { ttl_ms: Some(asked) } => {
                Some(asked.clamp(1, self.inner.config.max_task_ttl_ms))
            }
            _ => ttl_ms.or(self.inner.config.default_task_ttl_ms),
        };
        let id = self.start_task(&ctx.principal, &tool, &call, body, ttl_ms)?;
        let returns_task = match mode {
            CallMode::Modern => ctx.tasks.is_some(),
            CallMode::LegacyTask { .. } => true,
            CallMode::LegacySync => false,
        };
        if returns_task {
            let view = if legacy { ClientView::BASE } else { ctx.view() };
            let snap = self.inner.runtime.get(id, view).ok_or_else(|| {
                ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    "task vanished right after it was created",
                )
            })?;
            // CreateTaskResult only once the task is durable (spec MUST),
            // with everything the snapshot shows: the handler may have
            // created subtasks (listed in `childTaskIds`) after the task's
            // own batch, so wait after reading it.
            self.inner.runtime.flushed(id).await.map_err(store_error)?;
            let result = if legacy {
                serde_json::to_value(crate::model::LegacyCreateTaskResult {
                    task: super::legacy::legacy_task(&seed(snap)),
                    meta: None,
                })
                .expect("task results serialize")
            } else {
                serde_json::to_value(crate::model::CreateTaskResult::new(seed(snap)))
                    .expect("task results serialize")
            };
            return Ok(result_reply(&ctx.id, result));
        }
        self.inner.runtime.flushed(id).await.map_err(store_error)?;
        // A client that did not ask for a task gets the final result; if it
        // goes away, the task is cancelled.
        let guard = CancelOnDrop {
            server: self.clone(),
            id,
            armed: true,
        };
        let done = self.inner.runtime.wait(id, ClientView::BASE).await;
        let mut guard = guard;
        guard.armed = false;
        self.inner.runtime.flushed(id).await.map_err(store_error)?;
        // An execution failure of a synchronous call is a tool result with
        // `isError: true`, so the model can act on it (server-tools.md, Error
        // Handling); the task itself stays `failed` with its error.
        let result = match done.map(|t| t.into_parts().1) {
            Some(TaskPayload::Completed { result }) => result,
            Some(TaskPayload::Failed { error }) => {
                super::tool::error_result(format!("{name} failed: {} (error {})", error.message, error.code))
            }
            _ => super::tool::error_result(format!("{name} was cancelled before it finished")),
        };
        Ok(result_reply(&ctx.id, complete(result, legacy)))
    }

    /// Starts the root task of a `tools/call`, owned by the caller, with
    /// what a durable store needs to run it again.
    fn start_task(
        &self,
        principal: &Principal,
        tool: &RegisteredTool,
        call: &ToolCall,
        body: super::TaskBody,
        ttl_ms: Option<u64>,
    ) -> Result<TaskId, ErrorObject> {
        let opts = RootOptions {
            ttl_ms,
            poll_interval_ms: None,
        };
        let launch = self.inner.runtime.store().map(|_| Launch {
            resumable: tool.spec.resumable,
            call: super::tool::launch_of(call),
        });
        self.inner
            .runtime
            .start_root_launch(Some(self.owner(principal)), opts, body, launch)
            .map_err(runtime_error)
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
    pub(crate) fn visible_task(&self, raw: &str, principal: &Principal) -> Result<TaskId, ErrorObject> {
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
                let mut params = serde_json::to_value(modern_view(task)).expect("tasks serialize");
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
}

/// How a `tools/call` arrived, which decides whether it may become a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallMode {
    /// 2026-07-28: a task when the tool makes one and the request declared
    /// the tasks extension.
    Modern,
    /// Legacy without `params.task`: answered with the final result.
    LegacySync,
    /// Legacy with `params.task` (2025-11-25 task augmentation): answered
    /// with a `CreateTaskResult`, with the requested TTL if any.
    LegacyTask {
        /// `params.task.ttl`.
        ttl_ms: Option<u64>,
    },
}

/// Per-request context after validation.
pub(crate) struct RequestCtx {
    pub(crate) id: RequestId,
    pub(crate) principal: Principal,
    pub(crate) caps: ClientCapabilities,
    pub(crate) tasks: Option<TasksCapability>,
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

pub(crate) fn complete(result: JsonObject, legacy: bool) -> Value {
    let mut v = result.to_value();
    if !legacy {
        v["resultType"] = json!("complete");
    }
    v
}

fn task_result(task: DetailedTask) -> Value {
    serde_json::to_value(GetTaskResult::new(modern_view(task))).expect("task results serialize")
}

/// A task as the 2026-07-28 wire shows it: a completed task's `result` is a
/// complete `CallToolResult` of that revision, so it carries `resultType:
/// "complete"` (tool handlers, subtasks included, return the bare result).
pub(crate) fn modern_view(task: DetailedTask) -> DetailedTask {
    let (task, payload) = task.into_parts();
    let payload = match payload {
        TaskPayload::Completed { result } if !result.as_map().contains_key("resultType") => {
            let mut map = result.as_map().clone();
            map.insert("resultType".to_owned(), json!("complete"));
            TaskPayload::Completed {
                result: JsonObject::from_map(map),
            }
        }
        other => other,
    };
    DetailedTask::new(task, payload)
}

/// The seed state of a new task: as created (`working`, no payload), even if
/// the handler already moved on — the client polls for the rest.
pub(crate) fn seed(snap: DetailedTask) -> DetailedTask {
    let (mut task, payload) = snap.into_parts();
    if !matches!(payload, TaskPayload::Working) {
        task.status_message = None;
        task.last_updated_at = task.created_at;
    }
    DetailedTask::new(task, TaskPayload::Working)
}

pub(crate) fn store_error(e: StoreError) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        format!("the change could not be made durable: {e}"),
    )
}

pub(crate) fn runtime_error(e: RuntimeError) -> ErrorObject {
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
