//! Subtasks inside an [rmcp](https://docs.rs/rmcp) server (feature `rmcp`).
//!
//! An author with an rmcp 3.11 [`ServerHandler`] keeps it, and wraps it in
//! [`WithSubtasks`] together with a subtask [`Server`] holding the tools that
//! run as task trees. The wrapper is itself a `ServerHandler`, served by any
//! rmcp transport exactly like the handler alone. On the 2026-07-28 wire it
//!
//! * answers `tools/call` of subtask's tools, `tasks/get`, `tasks/update`,
//!   `tasks/cancel`, `tasks/steer`, `tasks/pause` and `tasks/resume` from
//!   subtask's runtime (subtasks, ordered results, steer, pause, and
//!   durability when the runtime has a store);
//! * adds subtask's tools to the handler's `tools/list` (on its last page)
//!   and the tasks extension, with the `steer`/`pause` sub-capabilities the
//!   request declared, to the handler's `server/discover`;
//! * hands every other request and every notification to the handler.
//!
//! The delegated requests go through the same pipeline as subtask's own
//! server (`_meta` checks, principal isolation, limits, "nothing shown before
//! it is durable"), so the two answer alike. Requests of a session that began
//! with `initialize` (the 2025 protocols) go to the handler untouched: the
//! 2025-11-25 tasks wire is served by subtask's own server only.
//!
//! rmcp's typed `tasks/get` result has no room for `parentTaskId` and
//! `childTaskIds` (SEP-2268), so through the handler alone a client sees
//! each task but not the tree. Over Streamable HTTP, [`router`] puts
//! subtask's endpoint in front of rmcp's service for the tasks requests and
//! subtask's tool calls, and the tree is on the wire as subtask's own server
//! writes it (docs/rmcp.md).
//!
//! # Examples
//!
//! ```
//! use rmcp::ServerHandler;
//! use subtask::prelude::*;
//! use subtask::rmcp::WithSubtasks;
//!
//! /// The author's rmcp server, unchanged.
//! #[derive(Clone)]
//! struct Mine;
//! impl ServerHandler for Mine {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let tasks = Server::builder(Runtime::new(RuntimeConfig::default()), ServerConfig::default())
//!     .tool(
//!         ToolSpec::new("work", "Works in subtasks.", serde_json::json!({"type": "object"}), TaskSupport::Required),
//!         |_call: ToolCall| async { ToolOutcome::task(|_ctx| async { Ok(text_result("done")) }) },
//!     )
//!     .build();
//! let handler = WithSubtasks::new(Mine, tasks.clone());
//! // Over Streamable HTTP, with the tree on the wire:
//! let service = rmcp::transport::StreamableHttpService::new(
//!     move || Ok(handler.clone()),
//!     std::sync::Arc::new(rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default()),
//!     Default::default(),
//! );
//! let app: axum::Router = subtask::rmcp::router(tasks, service);
//! # let _ = app;
//! # }
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use ::rmcp::ServerHandler;
use ::rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CancelledNotificationParam,
    CompleteRequestParams, CompleteResult, CreateTaskResult, CustomNotification, CustomRequest, CustomResult,
    DiscoverResult, ErrorCode, ErrorData, GetPromptRequestParams, GetPromptResponse, GetSkillRequestParams,
    GetSkillResult, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListSkillsResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion,
    ReadResourceDirectoryRequestParams, ReadResourceDirectoryResult, ReadResourceRequestParams,
    ReadResourceResponse, SubscribeRequestParams, SubscriptionFilter, TASKS_EXTENSION_ID, Tool,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use ::rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use ::rmcp::transport::StreamableHttpService;
use ::rmcp::transport::streamable_http_server::session::SessionManager;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::model::{JsonRpcMessage, PROTOCOL_VERSION, TASKS_EXTENSION};
use crate::server::{Incoming, Principal, Reply, Server};

/// The largest body the HTTP front reads before deciding where it goes.
const FRONT_BODY_CEILING: usize = 16 << 20;

/// `tasks/*` methods rmcp reads as custom requests (SEP-2669).
const CUSTOM_TASK_METHODS: [&str; 3] = ["tasks/steer", "tasks/pause", "tasks/resume"];

type PrincipalFn = dyn Fn(&RequestContext<RoleServer>) -> Result<Principal, ErrorData> + Send + Sync;

/// An rmcp [`ServerHandler`] with subtask's task trees: see the
/// [module](self) documentation. Cheap to clone when the handler is.
pub struct WithSubtasks<H> {
    handler: H,
    server: Server,
    principal: Arc<PrincipalFn>,
}

impl<H: Clone> Clone for WithSubtasks<H> {
    fn clone(&self) -> Self {
        WithSubtasks {
            handler: self.handler.clone(),
            server: self.server.clone(),
            principal: self.principal.clone(),
        }
    }
}

impl<H> std::fmt::Debug for WithSubtasks<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithSubtasks")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

fn internal(e: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(e.to_string(), None)
}

impl<H: ServerHandler> WithSubtasks<H> {
    /// `handler` answers everything but subtask's tools and tasks, which
    /// `server` answers.
    ///
    /// The principal a task belongs to is, by default, the one the bearer
    /// token of the HTTP request names in `server`'s
    /// [`ServerConfig::tokens`](crate::server::ServerConfig::tokens) (a
    /// missing or unknown token is refused), or the anonymous principal
    /// when `server` has no tokens. [`with_principal`](Self::with_principal)
    /// replaces this with the author's own authentication.
    pub fn new(handler: H, server: Server) -> Self {
        let principal: Arc<PrincipalFn> = match server.config().tokens.clone() {
            None => Arc::new(|_: &RequestContext<RoleServer>| Ok(Principal::anonymous())),
            Some(tokens) => Arc::new(move |context: &RequestContext<RoleServer>| {
                bearer(context)
                    .and_then(|token| tokens.authenticate(token).cloned())
                    .ok_or_else(|| {
                        ErrorData::invalid_request("unauthorized: missing or unknown bearer token", None)
                    })
            }),
        };
        WithSubtasks {
            handler,
            server,
            principal,
        }
    }

    /// Decides the principal of each delegated request: tasks are visible
    /// only to the principal that created them. An error refuses the request.
    #[must_use]
    pub fn with_principal(
        mut self,
        principal: impl Fn(&RequestContext<RoleServer>) -> Result<Principal, ErrorData> + Send + Sync + 'static,
    ) -> Self {
        self.principal = Arc::new(principal);
        self
    }

    /// The wrapped rmcp handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The subtask server answering tools and tasks.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Runs `method` with `params` through subtask's pipeline as a message
    /// without transport headers (the rmcp transport checked those): the
    /// request's `_meta` is put back, the principal decided, and the
    /// answer's result or error returned.
    async fn delegate(
        &self,
        method: &str,
        params: impl Serialize,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let principal = (self.principal)(context)?;
        self.delegate_as(principal, method, params, context).await
    }

    /// [`delegate`](Self::delegate) as `principal`.
    async fn delegate_as(
        &self,
        principal: Principal,
        method: &str,
        params: impl Serialize,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let mut params = match serde_json::to_value(params).map_err(internal)? {
            Value::Null => serde_json::Map::new(),
            Value::Object(map) => map,
            // A custom request's params can be anything on the wire.
            _ => {
                return Err(ErrorData::invalid_params(
                    format!("{method}: params must be an object"),
                    None,
                ));
            }
        };
        params.insert(
            "_meta".to_owned(),
            serde_json::to_value(&context.meta).map_err(internal)?,
        );
        let message =
            serde_json::json!({"jsonrpc": "2.0", "id": context.id, "method": method, "params": params});
        let body = serde_json::to_vec(&message).map_err(internal)?;
        let Reply::Message { body, .. } = self
            .server
            .handle(Incoming {
                body: &body,
                headers: None,
                principal,
                connection: None,
            })
            .await
        else {
            return Err(internal(format_args!("{method} did not answer with one message")));
        };
        match JsonRpcMessage::parse(body.as_bytes()) {
            Ok(JsonRpcMessage::Response(response)) => Ok(response.result.to_value()),
            Ok(JsonRpcMessage::Error(error)) => Err(ErrorData {
                code: ErrorCode(error.error.code.0),
                message: Cow::Owned(error.error.message),
                data: error.error.data,
            }),
            _ => Err(internal(format_args!(
                "{method} answered something other than a response"
            ))),
        }
    }

    /// [`delegate`](Self::delegate), the result read as rmcp's `T`.
    async fn delegate_typed<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
        context: &RequestContext<RoleServer>,
    ) -> Result<T, ErrorData> {
        let result = self.delegate(method, params, context).await?;
        serde_json::from_value(result)
            .map_err(|e| internal(format_args!("rmcp cannot read subtask's {method} result: {e}")))
    }
}

/// The bearer token of the HTTP request an rmcp Streamable HTTP transport
/// received (it puts the request's parts in the context's extensions).
fn bearer(context: &RequestContext<RoleServer>) -> Option<&str> {
    let parts = context.extensions.get::<axum::http::request::Parts>()?;
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    Some(value.strip_prefix("Bearer ")?.trim())
}

/// Whether the request uses the 2026-07-28 lifecycle (its own `_meta` names
/// the version), where the tasks extension lives.
fn is_modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

impl<H: ServerHandler> ServerHandler for WithSubtasks<H> {
    async fn discover(&self, context: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        // Discovery needs no principal: the handler's tools stay reachable
        // without a token when the handler allows it.
        let ours = self
            .delegate_as(Principal::anonymous(), "server/discover", Value::Null, &context)
            .await?;
        let mut result = self.handler.discover(context).await?;
        let settings = ours["capabilities"]["extensions"][TASKS_EXTENSION]
            .as_object()
            .cloned()
            .unwrap_or_default();
        result
            .capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), settings);
        Ok(result)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let modern = is_modern(&context);
        let mut result = self.handler.list_tools(request, context).await?;
        if modern && result.next_cursor.is_none() {
            let ours = serde_json::to_value(self.server.tools_list(None).tools).map_err(internal)?;
            let tools: Vec<Tool> = serde_json::from_value(ours)
                .map_err(|e| internal(format_args!("a subtask tool is not an rmcp tool: {e}")))?;
            result.tools.extend(tools);
        }
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.handler.get_tool(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !is_modern(&context) || !self.server.has_tool(&request.name) {
            return self.handler.call_tool(request, context).await;
        }
        let result = self.delegate("tools/call", &request, &context).await?;
        let read = |e: serde_json::Error| {
            internal(format_args!("rmcp cannot read subtask's tools/call result: {e}"))
        };
        Ok(match result.get("resultType").and_then(Value::as_str) {
            Some("task") => {
                CallToolResponse::Task(serde_json::from_value::<CreateTaskResult>(result).map_err(read)?)
            }
            Some("input_required") => CallToolResponse::InputRequired(
                serde_json::from_value::<InputRequiredResult>(result).map_err(read)?,
            ),
            _ => CallToolResponse::Complete(serde_json::from_value::<CallToolResult>(result).map_err(read)?),
        })
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.delegate_typed("tasks/get", &request, &context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.delegate("tasks/update", &request, &context).await.map(drop)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.delegate("tasks/cancel", &request, &context).await.map(drop)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if !CUSTOM_TASK_METHODS.contains(&request.method.as_str()) {
            return self.handler.on_custom_request(request, context).await;
        }
        let result = self.delegate(&request.method, &request.params, &context).await?;
        Ok(CustomResult(result))
    }

    /// The handler's information, with the tasks extension declared.
    fn get_info(&self) -> ::rmcp::model::ServerConfig {
        let mut info = self.handler.get_info();
        info.capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .entry(TASKS_EXTENSION_ID.to_owned())
            .or_default();
        info
    }

    // Everything else is the handler's.

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        self.handler.ping(context).await
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.handler.initialize(request, context).await
    }

    fn negotiate_initialize(&self, request: &InitializeRequestParams) -> Result<InitializeResult, ErrorData> {
        self.handler.negotiate_initialize(request)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.handler.supported_protocol_versions()
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.handler.complete(request, context).await
    }

    // The handler keeps the legacy methods it answered before (deprecated in rmcp).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: ::rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.handler.set_level(request, context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.handler.get_prompt(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.handler.list_prompts(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.handler.list_resources(request, context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.handler.list_resource_templates(request, context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.handler.read_resource(request, context).await
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        self.handler.accepted_subscription_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.handler.listen(context).await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.handler.subscribe(request, context).await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.handler.unsubscribe(request, context).await
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        self.handler.on_cancelled(notification, context).await;
    }

    async fn on_progress(
        &self,
        notification: ProgressNotificationParam,
        context: NotificationContext<RoleServer>,
    ) {
        self.handler.on_progress(notification, context).await;
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.handler.on_initialized(context).await;
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.handler.on_roots_list_changed(context).await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) {
        self.handler.on_custom_notification(notification, context).await;
    }

    async fn list_skills(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListSkillsResult, ErrorData> {
        self.handler.list_skills(request, context).await
    }

    async fn get_skill(
        &self,
        request: GetSkillRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetSkillResult, ErrorData> {
        self.handler.get_skill(request, context).await
    }

    async fn read_resource_directory(
        &self,
        request: ReadResourceDirectoryRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceDirectoryResult, ErrorData> {
        self.handler.read_resource_directory(request, context).await
    }
}

/// State of the [`router`].
struct Front<S, M> {
    server: Server,
    rmcp: StreamableHttpService<S, M>,
    /// subtask's endpoint ends its streams when this turns; none of the
    /// methods routed to it streams, so it never does (it is kept, not
    /// leaked, so that its receivers stay open).
    stop: Arc<tokio::sync::watch::Sender<bool>>,
}

impl<S, M> Clone for Front<S, M> {
    fn clone(&self) -> Self {
        Front {
            server: self.server.clone(),
            rmcp: self.rmcp.clone(),
            stop: self.stop.clone(),
        }
    }
}

/// The Streamable HTTP endpoint `/mcp` of an rmcp server with subtask's
/// tasks: a 2026-07-28 `tasks/*` request, or a `tools/call` of one of
/// `server`'s tools, is answered by subtask's own endpoint (its Origin/Host
/// guard, bearer tokens, HTTP statuses, and the task tree on the wire);
/// every other request goes to `rmcp` (whose handler should be a
/// [`WithSubtasks`] over the same `server`, so that `tools/list` and
/// `server/discover` show subtask's tools and the tasks extension).
pub fn router<S, M>(server: Server, rmcp: StreamableHttpService<S, M>) -> axum::Router
where
    S: ServerHandler + Send + 'static,
    M: SessionManager,
{
    let (stop, _) = tokio::sync::watch::channel(false);
    axum::Router::new()
        .route("/mcp", axum::routing::any(front::<S, M>))
        .with_state(Front {
            server,
            rmcp,
            stop: Arc::new(stop),
        })
}

/// Whether subtask answers this request: the 2026-07-28 wire (named by
/// the `MCP-Protocol-Version` header) and a method of the tasks extension
/// or one of subtask's tools.
fn routed_to_subtask(server: &Server, headers: &HeaderMap, body: &[u8]) -> bool {
    if headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        != Some(PROTOCOL_VERSION)
    {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Peek {
        method: Option<String>,
        params: Option<PeekParams>,
    }
    #[derive(serde::Deserialize)]
    struct PeekParams {
        name: Option<Value>,
    }
    let Ok(peek) = serde_json::from_slice::<Peek>(body) else {
        return false;
    };
    match peek.method.as_deref() {
        Some(
            "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/steer" | "tasks/pause" | "tasks/resume",
        ) => true,
        Some("tools/call") => peek
            .params
            .and_then(|p| p.name)
            .and_then(|n| n.as_str().map(|name| server.has_tool(name)))
            .unwrap_or(false),
        _ => false,
    }
}

async fn front<S, M>(State(front): State<Front<S, M>>, request: Request) -> Response
where
    S: ServerHandler + Send + 'static,
    M: SessionManager,
{
    let (parts, body) = request.into_parts();
    // The front reads a body whole to see where it goes; each side then
    // applies its own limit (subtask's endpoint its `max_body_bytes`, rmcp
    // its `max_request_body_bytes`), so the front's is only a ceiling.
    let limit = front
        .server
        .config()
        .limits
        .max_body_bytes
        .max(FRONT_BODY_CEILING);
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return crate::server::http::error_response(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            crate::model::ErrorCode::INVALID_REQUEST,
            &format!("request body is larger than the limit of {limit} bytes"),
        );
    };
    let request = Request::from_parts(parts, Body::from(bytes.clone()));
    if request.method() == axum::http::Method::POST
        && routed_to_subtask(&front.server, request.headers(), &bytes)
    {
        crate::server::http::answer(front.server.clone(), front.stop.subscribe(), request).await
    } else {
        front.rmcp.handle(request).await.map(Body::new)
    }
}
