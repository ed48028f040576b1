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

use base64::Engine;
use serde_json::{Value, json};

use super::Server;
use super::auth::Principal;
use super::http_stats::RpcMethod;
use super::reply::{Rejected, Reply, error_reply, invalid, result_reply, store_error};
use super::tool_calls::CallMode;
use crate::core::ClientView;
use crate::model::{
    ClientCapabilities, DiscoverResult, ErrorCode, ErrorObject, ExtensionCapabilities, Implementation,
    JsonObject, JsonRpcMessage, JsonRpcRequest, META_SERVER_INFO, PROTOCOL_VERSION, RequestId, RequestMeta,
    ServerCapabilities, TASKS_EXTENSION, TasksCapability,
};

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
        self.handle_named(incoming).await.0
    }

    /// [`Server::handle`], also naming the message's method from a fixed
    /// list (the `method` label of `/metrics`).
    pub(crate) async fn handle_named(&self, incoming: Incoming<'_>) -> (Reply, RpcMethod) {
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
        let named = RpcMethod::of(&req.method);
        let id = req.id.clone();
        let method = req.method.clone();
        #[cfg(feature = "postgres")]
        if let Some(node) = self.cluster()
            && !node.serving()
        {
            // A cluster instance past its lease answers nothing from its
            // memory: another instance may hold its trees now.
            let reply = error_reply(
                503,
                Some(id),
                ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    "this instance lost its cluster lease and is shutting down; retry on another instance",
                ),
            );
            return (reply, named);
        }
        let reply = match self.handle_request(req, &incoming).await {
            Ok(reply) => reply,
            Err(Rejected { status, error }) => {
                tracing::debug!(%method, code = error.code.0, message = %error.message, "request rejected");
                error_reply(status, Some(id), error)
            }
        };
        (reply, named)
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
        let caps = meta.client_capabilities.unwrap_or_default();
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
            "subscriptions/listen" => Ok(self.listen(&req, &ctx).await?),
            "tasks/get" => Ok(self.get_task(&req, &ctx).await?),
            _ => match self.task_method(&req, &ctx)? {
                Some((reply, id)) => {
                    // Nothing is acknowledged or shown before it is durable.
                    self.inner.runtime.flushed(id).await.map_err(store_error)?;
                    Ok(reply)
                }
                // Not held here: another cluster instance may hold it.
                None => Ok(self.remote_task_method(&req, &ctx).await?),
            },
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

/// Per-request context after validation.
pub(crate) struct RequestCtx {
    pub(crate) id: RequestId,
    pub(crate) principal: Principal,
    pub(crate) caps: ClientCapabilities,
    pub(crate) tasks: Option<TasksCapability>,
}

impl RequestCtx {
    /// `paused` is shown only to clients that declared the `pause` sub-capability.
    pub(crate) fn view(&self) -> ClientView {
        ClientView {
            show_paused: self.tasks.is_some_and(|t| t.pause),
        }
    }
}
