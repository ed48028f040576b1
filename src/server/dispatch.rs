//! Request validation and dispatch, independent of the transport.
//!
//! The pipeline runs in the order the 2026-07-28 texts and the official
//! conformance suite agree on: parse, protocol-version header, `_meta`,
//! header/`_meta` agreement, supported version, `Mcp-Method`, known method,
//! `Mcp-Name`, tasks capability, then the method itself, which lives with
//! its concern: `tool_calls.rs` (tools and prompts), `tasks.rs` (`tasks/*`),
//! `subscriptions.rs` (`subscriptions/listen`), `legacy.rs` (the
//! `initialize` path). Every error echoes the request id and carries an HTTP
//! status for the Streamable HTTP layer (`reply.rs`).
//!
//! The method is parsed once, into a [`Method`] (`None`: a name this server
//! does not know), right after the message; every later step matches on it.
//! What the handlers share of a request (its context, the call mode, typed
//! params) lives in `request.rs`.

use base64::Engine;
use serde_json::{Value, json};

use super::Server;
use super::auth::Principal;
use super::http_stats::RpcMethod;
use super::reply::{Rejected, Reply, error_reply, invalid, result_reply};
use super::request::{
    CallMode, Incoming, OwnRequest, RequestCtx, RequestHeaders, TaskCommand, TaskIdOnly, str_param,
};
use super::session::{Connection, Era, LegacyVersion, mixed_eras};
use crate::model::{
    DiscoverResult, ErrorCode, ErrorObject, ExtensionCapabilities, Implementation, JsonObject,
    JsonRpcMessage, JsonRpcRequest, META_SERVER_INFO, Method, PROTOCOL_VERSION, RequestMeta,
    ServerCapabilities, TASKS_EXTENSION, TaskMethod, TasksCapability,
};

/// Protocol versions answered through the legacy `initialize` handshake,
/// newest first: 2025-11-25 with its tasks wire (see `legacy.rs`), and
/// 2025-06-18, 2025-03-26 and 2024-11-05 with tools only (the table is in
/// `docs/protocol.md`, "Versions").
pub const LEGACY_VERSIONS: [&str; 4] = {
    let mut names = [""; 4];
    let mut i = 0;
    while i < names.len() {
        names[i] = LegacyVersion::ALL[i].as_str();
        i += 1;
    }
    names
};

fn header_mismatch(message: impl Into<String>) -> Rejected {
    Rejected::modern(ErrorObject::new(ErrorCode::HEADER_MISMATCH, message))
}

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

impl Server {
    /// Handles one incoming message.
    pub async fn handle(&self, incoming: Incoming<'_>) -> Reply {
        self.handle_named(incoming).await.0
    }

    /// [`Server::handle`], also naming the message's method from a fixed
    /// list (the `method` label of `/metrics`).
    pub(crate) async fn handle_named(&self, incoming: Incoming<'_>) -> (Reply, RpcMethod) {
        // A cluster instance that lost its lease and rejoined answers as
        // its new incarnation (`Server::current`).
        #[cfg(feature = "postgres")]
        {
            let current = self.current();
            if !std::sync::Arc::ptr_eq(&current.inner, &self.inner) {
                return Box::pin(current.handle_named(incoming)).await;
            }
        }
        if incoming.body.trim_ascii_start().first() == Some(&b'[') {
            // Boxed: a batch's state stays out of every request's future.
            return (Box::pin(self.handle_batch(&incoming)).await, RpcMethod::NONE);
        }
        let req = match JsonRpcMessage::parse(incoming.body) {
            Ok(JsonRpcMessage::Request(req)) => req,
            Ok(JsonRpcMessage::Notification(_)) => return (Reply::Accepted, RpcMethod::NOTIFICATION),
            // Answers to the input requests a legacy `tasks/result` stream sent.
            Ok(JsonRpcMessage::Response(resp)) => {
                let reply = self.legacy_input_answer(resp, &incoming.principal).await;
                return (reply, RpcMethod::RESPONSE);
            }
            Ok(JsonRpcMessage::Error(err)) => return (self.legacy_input_refusal(&err), RpcMethod::RESPONSE),
            // Not a JSON-RPC request at all: the HTTP layer's 400.
            Err(e) => return (error_reply(400, e.id, e.error), RpcMethod::NONE),
        };
        // The method, parsed once: every later step matches on it.
        let method = Method::from_name(&req.method);
        let named = RpcMethod::of_method(method);
        #[cfg(feature = "postgres")]
        if let Some(node) = self.cluster()
            && !node.serving()
        {
            // A cluster instance past its lease answers nothing from its
            // memory: another instance may hold its trees now. It is fenced
            // until it has rejoined the cluster.
            return (
                error_reply(503, Some(req.id), super::cluster::fenced_error()),
                named,
            );
        }
        let reply = match self.handle_request(&req, method, &incoming).await {
            Ok(reply) => reply,
            Err(Rejected { status, error }) => {
                tracing::debug!(method = %req.method, code = error.code.0, message = %error.message, "request rejected");
                error_reply(status, Some(req.id), error)
            }
        };
        (reply, named)
    }

    /// A JSON-RPC batch: taken in a 2025-03-26 session only (a stdio
    /// connection of that version, or an HTTP request without a version
    /// header), each message answered as if it came alone, the answers in
    /// one array (none: 202); refused everywhere else.
    async fn handle_batch(&self, incoming: &Incoming<'_>) -> Reply {
        let version = match (incoming.connection, &incoming.headers) {
            (Some(c), _) => match c.era() {
                Some(Era::Legacy(v)) => Some(v),
                _ => None,
            },
            (None, Some(h)) => header_version(h),
            (None, None) => None,
        };
        if !version.is_some_and(LegacyVersion::has_batches) {
            let this = version.map_or(crate::model::PROTOCOL_VERSION, LegacyVersion::as_str);
            return error_reply(
                400,
                None,
                ErrorObject::new(
                    ErrorCode::INVALID_REQUEST,
                    format!(
                        "JSON-RPC batches are not supported in protocol {this}: send one message at a time \
                         (only 2025-03-26 sessions take batches)"
                    ),
                ),
            );
        }
        let messages: Vec<Value> = match serde_json::from_slice(incoming.body) {
            Ok(m) => m,
            Err(e) => {
                return error_reply(
                    400,
                    None,
                    ErrorObject::new(ErrorCode::PARSE_ERROR, format!("parse error: {e}")),
                );
            }
        };
        if messages.is_empty() {
            return error_reply(
                400,
                None,
                ErrorObject::new(
                    ErrorCode::INVALID_REQUEST,
                    "an empty batch is not a valid request",
                ),
            );
        }
        let mut answers: Vec<String> = Vec::new();
        for message in messages {
            if message.get("method").and_then(Value::as_str) == Some(Method::Initialize.as_str()) {
                // 2025-03-26 lifecycle: "The initialization request MUST NOT be part of a JSON-RPC batch".
                let id = message
                    .get("id")
                    .and_then(|i| serde_json::from_value(i.clone()).ok());
                let e = crate::model::JsonRpcError::new(
                    id,
                    ErrorObject::new(
                        ErrorCode::INVALID_REQUEST,
                        format!("{} must not be part of a batch", Method::Initialize),
                    ),
                );
                answers.push(serde_json::to_string(&e).expect("errors serialize"));
                continue;
            }
            let body = serde_json::to_vec(&message).expect("values serialize");
            let one = Incoming {
                body: &body,
                headers: incoming.headers.clone(),
                principal: incoming.principal.clone(),
                connection: incoming.connection,
            };
            // A batch inside a batch is refused by the parse ("found an array").
            let reply = match JsonRpcMessage::parse(&body) {
                Err(e) => error_reply(400, e.id, e.error),
                Ok(_) => Box::pin(self.handle_named(one)).await.0,
            };
            match reply {
                Reply::Message { body, .. } => answers.push(body),
                Reply::Accepted => {}
                Reply::Stream(mut s) => {
                    while let Some(m) = futures::StreamExt::next(&mut s).await {
                        answers.push(m);
                    }
                }
            }
        }
        if answers.is_empty() {
            return Reply::Accepted;
        }
        Reply::Message {
            status: 200,
            body: format!("[{}]", answers.join(",")),
        }
    }

    /// Runs one 2026-07-28 request as `principal`, the way a client with
    /// the tasks extension (steer and pause included) would send it: for
    /// the server's own callers (the web view's commands, the control
    /// tools), which get the wire's checks, errors, durability and cluster
    /// routing. The request's `_meta` is added.
    pub(crate) async fn request_as(&self, principal: Principal, request: &OwnRequest) -> Reply {
        let body = request.to_body();
        Box::pin(self.handle(Incoming {
            body: &body,
            headers: None,
            principal,
            connection: None,
        }))
        .await
    }

    /// `method` if the 2026-07-28 surface answers it (prompts only when registered).
    fn knows(&self, method: Option<Method>) -> Option<Method> {
        method.filter(|m| match m {
            Method::ServerDiscover
            | Method::ToolsList
            | Method::ToolsCall
            | Method::SubscriptionsListen
            | Method::Task(_) => true,
            Method::PromptsList | Method::PromptsGet => !self.inner.prompts.is_empty(),
            Method::Initialize | Method::Ping | Method::TasksResult | Method::TasksList => false,
        })
    }

    async fn handle_request(
        &self,
        req: &JsonRpcRequest,
        method: Option<Method>,
        incoming: &Incoming<'_>,
    ) -> Result<Reply, Rejected> {
        let params = req.params.as_ref();
        let meta = RequestMeta::from_params(params).map_err(|e| Rejected::with_status(400, e))?;
        let headers = incoming.headers.as_ref();
        let meta_version = meta.as_ref().and_then(|m| m.protocol_version.clone());
        let connection = incoming.connection;
        if meta_version.is_none() {
            if let Some(version) = legacy_version(req, method, incoming)? {
                return self.handle_legacy(req, method, incoming, version).await;
            }
        } else if let Some(era @ Era::Legacy(_)) = connection.and_then(Connection::era) {
            return Err(Rejected::with_status(
                400,
                mixed_eras(era, "a request with 2026-07-28 `_meta`"),
            ));
        }
        if let Some(h) = headers
            && h.protocol_version.is_none()
        {
            return Err(header_mismatch("missing MCP-Protocol-Version header"));
        }
        // A request without the required `_meta` keys is malformed: -32602
        // with HTTP 400 (basic-index.md, per-request protocol fields).
        let Some(meta) = meta else {
            // On a stdio connection that chose no era yet, the other way in
            // is a legacy session.
            let hint = if connection.is_some_and(|c| c.era().is_none()) {
                " (or open a session of an earlier protocol with `initialize`)"
            } else {
                ""
            };
            return Err(Rejected::with_status(
                400,
                invalid(format!(
                    "request params must carry `_meta` with io.modelcontextprotocol/protocolVersion and \
                     io.modelcontextprotocol/clientCapabilities{hint}"
                )),
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
        let Some(method) = self.knows(method) else {
            return Err(method_not_found(req).into());
        };
        if let Some(h) = headers {
            let source = match method {
                Method::ToolsCall | Method::PromptsGet => Some(("params.name", str_param(params, "name"))),
                Method::Task(_) => Some(("params.taskId", str_param(params, "taskId"))),
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
        let caps = meta.client_capabilities.unwrap_or_default();
        let tasks = caps.tasks();
        if matches!(method, Method::Task(_)) && tasks.is_none() {
            return Err(ErrorObject::tasks_extension_required().into());
        }
        // A valid 2026 request makes a stdio connection modern for good.
        if let Some(era) = connection.map(|c| c.settle(Era::Modern))
            && era != Era::Modern
        {
            return Err(Rejected::with_status(
                400,
                mixed_eras(era, "a request with 2026-07-28 `_meta`"),
            ));
        }
        let ctx = RequestCtx {
            id: req.id.clone(),
            principal: incoming.principal.clone(),
            caps,
            tasks,
            legacy: None,
        };
        match method {
            Method::ServerDiscover => Ok(result_reply(&ctx.id, self.discover(&ctx))),
            Method::ToolsList => Ok(result_reply(&ctx.id, self.tools_list(None))),
            Method::ToolsCall => Ok(self.tools_call(req, &ctx, CallMode::Modern).await?),
            Method::PromptsList => Ok(result_reply(&ctx.id, self.prompts_list())),
            Method::PromptsGet => Ok(self.prompts_get(req, &ctx).await?),
            Method::SubscriptionsListen => Ok(self.listen(req, &ctx).await?),
            Method::Task(TaskMethod::Get) => Ok(self.get_task(req.params_as::<TaskIdOnly>()?, &ctx).await?),
            Method::Task(m) => {
                let command = TaskCommand::parse(m, params, ctx.view())?;
                Ok(self.task_command(command, &ctx).await?)
            }
            // Not on this wire (`knows` has refused them already).
            Method::Initialize | Method::Ping | Method::TasksResult | Method::TasksList => {
                Err(method_not_found(req).into())
            }
        }
    }

    /// `server/discover`. The tasks extension's settings are `{}` (the final
    /// extension defines none, and released clients accept exactly that),
    /// plus the SEP-2669 sub-capabilities (`steer`, `pause`) that this
    /// request's client capabilities declared: a client learns of them only
    /// by asking, and a client that knows only the final extension sees the
    /// settings it expects (docs/protocol.md, "Capabilities").
    fn discover(&self, ctx: &RequestCtx) -> DiscoverResult {
        let offered = TasksCapability::FULL.intersect(ctx.tasks.unwrap_or(TasksCapability::BASE));
        let mut extensions = ExtensionCapabilities::default();
        extensions.insert(TASKS_EXTENSION, offered.to_settings());
        let capabilities = ServerCapabilities {
            tools: Some(JsonObject::new()),
            prompts: (!self.inner.prompts.is_empty()).then(JsonObject::new),
            extensions: Some(extensions),
            ..ServerCapabilities::default()
        };
        let mut meta = serde_json::Map::new();
        meta.insert(
            META_SERVER_INFO.to_owned(),
            serde_json::to_value(self.server_info()).expect("serializes"),
        );
        DiscoverResult {
            meta: Some(JsonObject::from_map(meta)),
            ..DiscoverResult::new(vec![PROTOCOL_VERSION.to_owned()], capabilities)
        }
    }

    pub(crate) fn server_info(&self) -> Implementation {
        Implementation {
            name: self.inner.config.name.clone(),
            version: self.inner.config.version.clone(),
        }
    }
}

/// The 2026-07-28 wire's answer to a method it does not know.
fn method_not_found(req: &JsonRpcRequest) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("method not found: {:?}", req.method),
    )
}

/// The legacy version a request without 2026 `_meta` is served in, if any.
///
/// - stdio: `initialize` opens a session of the version it negotiates
///   (once: the connection keeps it, and a connection that already spoke
///   2026-07-28 refuses it); later requests are served in that version.
/// - HTTP: a legacy `MCP-Protocol-Version` header names it; without the
///   header, `initialize` negotiates one and any other request is
///   2025-03-26, whose clients send no header (2025-06-18, "Protocol
///   Version Header": "the server SHOULD assume protocol version
///   2025-03-26").
/// - In process (no headers, no connection): `initialize` only.
///
/// `None` sends the request down the 2026 pipeline, which refuses it for
/// its missing `_meta`.
fn legacy_version(
    req: &JsonRpcRequest,
    method: Option<Method>,
    incoming: &Incoming<'_>,
) -> Result<Option<LegacyVersion>, Rejected> {
    let initialize = method == Some(Method::Initialize);
    let negotiated = || LegacyVersion::negotiate(str_param(req.params.as_ref(), "protocolVersion"));
    if let Some(conn) = incoming.connection {
        if !initialize {
            return Ok(match conn.era() {
                Some(Era::Legacy(v)) => Some(v),
                _ => None,
            });
        }
        return match conn.era() {
            None => match conn.settle(Era::Legacy(negotiated())) {
                Era::Legacy(v) => Ok(Some(v)),
                era => Err(Rejected::legacy(mixed_eras(era, Method::Initialize.as_str()))),
            },
            Some(Era::Legacy(v)) => Err(Rejected::legacy(ErrorObject::new(
                ErrorCode::INVALID_REQUEST,
                format!("this connection is already initialized (protocol {})", v.as_str()),
            ))),
            Some(era) => Err(Rejected::legacy(mixed_eras(era, Method::Initialize.as_str()))),
        };
    }
    let Some(headers) = incoming.headers.as_ref() else {
        return Ok(initialize.then(negotiated));
    };
    // `initialize` negotiates from its params, whatever legacy header it
    // carries (a 2026 header sends it down the 2026 pipeline).
    Ok(header_version(headers).map(|v| if initialize { negotiated() } else { v }))
}

/// The legacy version an HTTP request's headers name: its legacy
/// `MCP-Protocol-Version`, or 2025-03-26 when it has none (that version's
/// clients send no such header); `None` for any other header value.
fn header_version(headers: &RequestHeaders) -> Option<LegacyVersion> {
    match headers.protocol_version.as_deref().map(str::trim) {
        None => Some(LegacyVersion::V2025_03_26),
        Some(v) => LegacyVersion::parse(v),
    }
}
