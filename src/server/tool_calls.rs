//! `tools/list`, `tools/call` and the prompts: the arguments checked
//! against the tool's schema, then a result, an MRTR round, a task or a
//! protocol error; on the legacy path with or without task augmentation.

use serde_json::Value;

use super::auth::Principal;
use super::reply::{Reply, invalid, result_reply, runtime_error, store_error};
use super::request::{CallMode, RequestCtx, responses_of, str_param};
use super::session::LegacyVersion;
use super::tool::{ToolCall, ToolOutcome};
use super::{RegisteredTool, Server, TaskSupport};
use crate::core::{ClientView, RootOptions};
use crate::model::{
    DetailedTask, ErrorCode, ErrorObject, InputRequiredResult, JsonObject, JsonRpcRequest, ListPromptsResult,
    ListToolsResult, PromptDescription, TaskId, TaskPayload, ToolDescription,
};
use crate::runtime::Launch;

impl Server {
    /// `tools/list` on the 2026 wire (`legacy` is `None`) or a legacy
    /// version's (`execution.taskSupport` from 2025-11-25 on).
    pub(crate) fn tools_list(&self, legacy: Option<LegacyVersion>) -> ListToolsResult {
        let modern = legacy.is_none();
        let execution = legacy.is_some_and(LegacyVersion::has_tasks);
        let describe = |spec: &super::ToolSpec| ToolDescription {
            name: spec.name.clone(),
            description: Some(spec.description.clone()),
            input_schema: spec.input_schema.clone(),
            // 2025-11-25 tool-level negotiation; the 2026 extension
            // leaves the choice to the server and has no such field.
            execution: execution.then(|| {
                let mut execution = serde_json::Map::new();
                execution.insert("taskSupport".to_owned(), spec.task_support.as_str().into());
                JsonObject::from_map(execution)
            }),
        };
        let mut tools: Vec<ToolDescription> = self.inner.tools.iter().map(|t| describe(&t.spec)).collect();
        if let Some(hub) = &self.inner.workers {
            tools.extend(hub.specs().iter().map(describe));
        }
        if self.inner.config.agent_tools() {
            tools.extend(super::agent::specs().iter().map(describe));
        }
        if modern {
            ListToolsResult::modern(tools)
        } else {
            ListToolsResult::legacy(tools)
        }
    }

    pub(crate) fn prompts_list(&self) -> ListPromptsResult {
        ListPromptsResult::new(
            self.inner
                .prompts
                .iter()
                .map(|p| PromptDescription {
                    name: p.spec.name.clone(),
                    description: Some(p.spec.description.clone()),
                    arguments: p.spec.arguments.clone(),
                })
                .collect(),
        )
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

    /// Whether a tool named `name` is registered.
    #[cfg(feature = "rmcp")]
    pub(crate) fn has_tool(&self, name: &str) -> bool {
        self.tool(name).is_ok()
    }

    fn tool(&self, name: &str) -> Result<RegisteredTool, ErrorObject> {
        self.registered_tool(name)
            .ok_or_else(|| invalid(format!("unknown tool {name:?}")))
    }

    /// The tool named `name`: the server's own, or one a worker registered.
    pub(crate) fn registered_tool(&self, name: &str) -> Option<RegisteredTool> {
        if let Some(t) = self.inner.tools.iter().find(|t| t.spec.name == name) {
            return Some(t.clone());
        }
        self.inner.workers.as_ref()?.tool(name)
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
        self.tools_call_created(req, ctx, mode)
            .await
            .map(|(reply, _)| reply)
    }

    /// [`Server::tools_call`], also naming the task it answered with, when
    /// the answer is a task (a stdio session follows it).
    pub(crate) async fn tools_call_created(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
        mode: CallMode,
    ) -> Result<(Reply, Option<TaskId>), ErrorObject> {
        let legacy = mode != CallMode::Modern;
        let name =
            str_param(req.params.as_ref(), "name").ok_or_else(|| invalid("`name` must be a string"))?;
        if self.is_agent_tool(name) {
            if matches!(mode, CallMode::LegacyTask { .. }) {
                return Err(ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "tool {name:?} does not support task-augmented calls (execution.taskSupport is \"forbidden\")"
                    ),
                ));
            }
            let call = self.read_call(req, ctx, name)?;
            // Boxed: the control tools' futures stay out of every call's state.
            let result = Box::pin(self.agent_call(name, &call.arguments, &ctx.principal)).await;
            return Ok((result_reply(&ctx.id, complete(result, ctx.legacy)), None));
        }
        let tool = self.tool(name)?;
        // A client that asked for no task, answered at once with the task's id.
        let background = match mode {
            CallMode::Modern => ctx.tasks.is_none() && self.answers_in_background(&tool),
            CallMode::LegacySync => self.answers_in_background(&tool),
            CallMode::LegacyTask { .. } => false,
        };
        match (tool.spec.task_support, mode) {
            (TaskSupport::Required, CallMode::Modern) if ctx.tasks.is_none() && !background => {
                return Err(ErrorObject::tasks_extension_required());
            }
            // 2025-11-25, tool-level negotiation: -32601 for a required task
            // tool called without `params.task`, and for a task-augmented
            // call of a tool that forbids it.
            (TaskSupport::Required, CallMode::LegacySync) if !background => {
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
        // A copy of the call for the task's stored launch, only when a
        // store keeps one; the tool gets the call itself.
        let kept = self.inner.runtime.store().map(|_| call.clone());
        let outcome = match tool.spec.check_argument_value(arguments_value(req)) {
            Err(e) => ToolOutcome::Complete(super::tool::error_result(format!("{e}"))),
            Ok(()) => tool.tool.call(call).await,
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
            } => return Ok((self.input_required_reply(ctx, name, input_requests, state), None)),
            // A task-augmented legacy call must be answered with a task: a
            // result the tool gave at once becomes a task that completes with it.
            ToolOutcome::Complete(result) if matches!(mode, CallMode::LegacyTask { .. }) => {
                let body: super::TaskBody = Box::new(move |_ctx| Box::pin(async move { Ok(result) }));
                (body, None)
            }
            ToolOutcome::Complete(result) => {
                return Ok((result_reply(&ctx.id, complete(result, ctx.legacy)), None));
            }
            ToolOutcome::Task { body, ttl_ms } => (body, ttl_ms),
        };
        let ttl_ms = match mode {
            CallMode::LegacyTask { ttl_ms: Some(asked) } => {
                Some(asked.clamp(1, self.inner.config.max_task_ttl_ms))
            }
            _ => ttl_ms.or(self.inner.config.default_task_ttl_ms),
        };
        // A draining server (SIGTERM) takes no new task; a store that
        // cannot keep one refuses it before it starts.
        if self.inner.runtime.is_draining() {
            return Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                "the server is shutting down and takes no new tasks: retry on another instance or after its restart",
            )
            .with_data(serde_json::json!({ "reason": "draining" })));
        }
        self.writable()?;
        // W3C trace context in `_meta` (basic-index.md, "OpenTelemetry
        // trace context"): the root task's span becomes its child.
        let trace_parent = req
            .params
            .as_ref()
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("traceparent"))
            .and_then(Value::as_str);
        let id = self.start_task(&ctx.principal, &tool, kept.as_ref(), body, ttl_ms, trace_parent)?;
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
            self.created_durably(id).await?;
            // Serialized straight into the reply (no `Value` in between).
            let reply = if legacy {
                result_reply(
                    &ctx.id,
                    crate::model::LegacyCreateTaskResult {
                        task: super::legacy::legacy_task(&seed(snap)),
                        meta: None,
                    },
                )
            } else {
                result_reply(&ctx.id, crate::model::CreateTaskResult::new(seed(snap)))
            };
            return Ok((reply, Some(id)));
        }
        self.created_durably(id).await?;
        if background {
            let answer = self.background_answer(name, id);
            return Ok((result_reply(&ctx.id, complete(answer, ctx.legacy)), None));
        }
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
        Ok((result_reply(&ctx.id, complete(result, ctx.legacy)), None))
    }

    /// Waits until the new task `id` is durable. When the store cannot
    /// make it so (it filled up, or failed, after the task was admitted)
    /// the caller is refused, and the task, which nobody was told about,
    /// is cancelled so that its handler does not run on: if the store is
    /// only full, it lands later as a cancelled task that expires with its
    /// TTL.
    async fn created_durably(&self, id: TaskId) -> Result<(), ErrorObject> {
        let rt = &self.inner.runtime;
        if let Err(e) = rt.flushed(id).await {
            let _ = rt.cancel(id);
            return Err(store_error(e));
        }
        Ok(())
    }

    /// An MRTR round (`InputRequiredResult`) of tool or prompt `name`, its
    /// state sealed to that name.
    fn input_required_reply(
        &self,
        ctx: &RequestCtx,
        name: &str,
        input_requests: crate::model::InputRequests,
        state: Option<Value>,
    ) -> Reply {
        let state = state.map(|state| self.inner.state_key.seal(name, &state));
        result_reply(&ctx.id, InputRequiredResult::new(input_requests, state))
    }

    /// Starts the root task of a `tools/call`, owned by the caller, with
    /// what a durable store needs to run it again (`call`, present when
    /// the runtime has a store).
    fn start_task(
        &self,
        principal: &Principal,
        tool: &RegisteredTool,
        call: Option<&ToolCall>,
        body: super::TaskBody,
        ttl_ms: Option<u64>,
        trace_parent: Option<&str>,
    ) -> Result<TaskId, ErrorObject> {
        let opts = RootOptions {
            ttl_ms,
            poll_interval_ms: None,
        };
        let launch = call.map(|call| Launch {
            resumable: tool.spec.resumable,
            call: super::tool::launch_of(call),
        });
        self.inner
            .runtime
            .start_root_launch(
                Some(self.owner(principal)),
                opts,
                body,
                launch,
                Some(tool.label.clone()),
                trace_parent,
            )
            .map_err(runtime_error)
    }

    pub(crate) async fn prompts_get(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
    ) -> Result<Reply, ErrorObject> {
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
            ToolOutcome::Complete(result) => Ok(result_reply(&ctx.id, complete(result, None))),
            ToolOutcome::Error(e) => Err(e),
            ToolOutcome::InputRequired {
                input_requests,
                state,
            } => Ok(self.input_required_reply(ctx, name, input_requests, state)),
            ToolOutcome::Task { .. } => Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                "a prompt cannot become a task",
            )),
        }
    }
}

/// A tool's result as the request's protocol shows it: with `resultType`
/// on the 2026 wire (`legacy` is `None`), as the tool made it on the
/// legacy wire, without `structuredContent` before 2025-06-18 (its text
/// content stays: the tool's words for the same result).
pub(crate) fn complete(result: JsonObject, legacy: Option<LegacyVersion>) -> Value {
    match legacy {
        None => crate::model::complete_result(result).to_value(),
        Some(v) if v.has_structured_content() => result.to_value(),
        Some(_) => {
            let mut value = result.to_value();
            if let Some(map) = value.as_object_mut()
                && let Some(structured) = map.remove("structuredContent")
            {
                let empty = map
                    .get("content")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty);
                if empty {
                    // What the 2025-06-18 text asks of such a tool anyway:
                    // the structured result serialized as text.
                    map.insert(
                        "content".to_owned(),
                        serde_json::json!([{"type": "text", "text": structured.to_string()}]),
                    );
                }
            }
            value
        }
    }
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

/// The request's `arguments` as it holds them (an empty object when
/// absent), checked against the tool's schema without a copy; `read_call`
/// has refused any other kind of value.
fn arguments_value(req: &JsonRpcRequest) -> &Value {
    static EMPTY: std::sync::LazyLock<Value> =
        std::sync::LazyLock::new(|| Value::Object(serde_json::Map::new()));
    match req.params.as_ref().and_then(|p| p.get("arguments")) {
        Some(v @ Value::Object(_)) => v,
        _ => &EMPTY,
    }
}
