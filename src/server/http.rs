//! Streamable HTTP (2026-07-28) with axum: `POST /mcp`, JSON responses, SSE
//! for `subscriptions/listen`, Origin/Host validation against DNS
//! rebinding, bearer tokens, a body size limit and graceful shutdown.
//!
//! `/mcp` is a tower stack: the Host/Origin guard and the POST-only check
//! (tower-http request validators answering with the endpoint's JSON-RPC
//! errors), then the handler, whose `Caller` extractor authenticates the
//! bearer token; every answer is counted by method and status for
//! `/metrics`. Every request, on every route, runs inside a tower-http
//! `TraceLayer` span (`http`, at `DEBUG`) on which `/mcp` records the
//! JSON-RPC method and, for a `tasks/*` request, the task.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::http::{HeaderName, Method, StatusCode, header};
use axum::response::Response;
use axum::response::sse::Event;
use futures::StreamExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::{Service, ServiceBuilder};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{
    DefaultOnBodyChunk, DefaultOnEos, DefaultOnFailure, DefaultOnRequest, DefaultOnResponse, TraceLayer,
};
use tower_http::validate_request::{ValidateRequest, ValidateRequestHeaderLayer};
use tracing::field::Empty;

use super::Server;
pub(crate) use super::http_base::error_response;
use super::http_base::{AppState, Caller, HostGuard, header_str, json_response, method_not_allowed, sse};
use super::http_stats::{HttpStats, RpcMethod};
use super::reply::Reply;
use super::request::{Incoming, RequestHeaders};
use crate::model::ErrorCode;

/// The axum router serving the MCP endpoint at `/mcp`.
///
/// Streams end when `shutdown` turns `true`.
pub fn router(server: Server, shutdown: watch::Receiver<bool>) -> Router {
    let state = AppState {
        server: server.clone(),
        shutdown,
    };
    let guard = HostGuard::new(&server);
    // The other routes (and the 404 of a path no route takes) in the same
    // span, layered apart: a layer on the whole router would box `/mcp`
    // once more per request.
    let others = Router::new();
    #[cfg(feature = "ui")]
    let others = if server.config().ui {
        others.merge(super::ui::router(&guard))
    } else {
        others
    };
    #[cfg(feature = "metrics")]
    let others = if server.config().metrics {
        others.merge(super::metrics::router(&guard))
    } else {
        others
    };
    #[cfg(feature = "oauth")]
    let others = match &server.inner.oauth {
        Some(v) => others.merge(super::oauth::router(v)),
        None => others,
    };
    let others = others
        .fallback(|| async { StatusCode::NOT_FOUND })
        .layer(trace_layer());
    let mcp = ServiceBuilder::new()
        .layer(trace_layer())
        .service(mcp_service(state.clone(), &guard));
    Router::new()
        .route_service("/mcp", mcp)
        .route("/workers", axum::routing::get(super::workers::route))
        .merge(others)
        .with_state(state)
}

/// The router's `TraceLayer`, as [`trace_layer`] makes it.
type RequestTrace = TraceLayer<
    SharedClassifier<ServerErrorsAsFailures>,
    fn(&Request) -> tracing::Span,
    DefaultOnRequest,
    DefaultOnResponse,
    DefaultOnBodyChunk,
    DefaultOnEos,
    DefaultOnFailure,
>;

/// tower-http's `TraceLayer`: every request in a [`request_span`], with
/// its `DEBUG` events at the start and end (status and latency). A 5xx is
/// an answer like any other (the store's 503, a fenced instance's): logged
/// at `DEBUG` with the request, not as an error.
fn trace_layer() -> RequestTrace {
    TraceLayer::new_for_http()
        .make_span_with(request_span as fn(&Request) -> tracing::Span)
        .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG))
}

/// The span of one HTTP request, at `DEBUG` (so `subtask serve`'s default
/// `info` filter never creates it, and a task's OTLP trace, which takes the
/// `subtask` targets at `INFO`, never includes it). `/mcp` records the
/// JSON-RPC method (`mcp.method.name`, from the fixed list of the
/// `/metrics` label) and a `tasks/*` request's task (`mcp.task_id`).
fn request_span(req: &Request) -> tracing::Span {
    tracing::debug_span!(
        "http",
        http.request.method = %req.method(),
        url.path = req.uri().path(),
        mcp.method.name = Empty,
        mcp.task_id = Empty,
    )
}

/// `/mcp` as a service: the Host/Origin guard and the POST-only check
/// (their refusals counted for `/metrics` as no message read), then
/// [`endpoint`].
fn mcp_service(
    state: AppState,
    guard: &HostGuard,
) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
+ Clone
+ Send
+ Sync
+ 'static {
    let stats = &state.server.inner.http_stats;
    ServiceBuilder::new()
        .layer(ValidateRequestHeaderLayer::custom(Counted::new(
            stats,
            guard.clone(),
        )))
        .layer(ValidateRequestHeaderLayer::custom(Counted::new(
            stats,
            post_only as fn(&mut Request) -> Result<(), Response>,
        )))
        .service(endpoint.with_state(state))
}

/// The 405 of a request to `/mcp` that is not a POST.
#[allow(clippy::result_large_err)]
fn post_only(req: &mut Request) -> Result<(), Response> {
    if req.method() == Method::POST {
        Ok(())
    } else {
        Err(method_not_allowed("the MCP endpoint accepts POST only", "POST"))
    }
}

/// A request validator of `/mcp` whose refusals are counted for
/// `/metrics` (method `none`: no JSON-RPC message was read).
#[derive(Clone)]
struct Counted<V> {
    stats: Arc<HttpStats>,
    inner: V,
}

impl<V> Counted<V> {
    /// `inner`, counted in `stats`.
    fn new(stats: &Arc<HttpStats>, inner: V) -> Self {
        Counted {
            stats: stats.clone(),
            inner,
        }
    }
}

impl<B, V: ValidateRequest<B, ResponseBody = Body>> ValidateRequest<B> for Counted<V> {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response> {
        self.inner
            .validate(request)
            .inspect_err(|refusal| self.stats.answered(RpcMethod::NONE, refusal.status().as_u16()))
    }
}

/// Serves `server` on `listener` until `shutdown` resolves, then stops
/// accepting, ends open streams and waits for in-flight requests.
///
/// # Errors
///
/// I/O errors of the listener.
///
/// # Cancellation safety
///
/// Not cancellation safe: drive it to completion (it is the server's main loop).
pub async fn serve(
    server: Server,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (tx, rx) = watch::channel(false);
    let app = router(server, rx);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = tx.send(true);
        })
        .await
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM: pass it to [`serve`]
/// for a graceful shutdown.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}

static MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
static MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
static MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Answers one request to the endpoint, as [`router`] does (the rmcp
/// adapter's front uses it for the requests it routes here).
#[cfg(feature = "rmcp")]
pub(crate) async fn answer(server: Server, shutdown: watch::Receiver<bool>, req: Request) -> Response {
    let guard = HostGuard::new(&server);
    let service = mcp_service(AppState { server, shutdown }, &guard);
    match tower::ServiceExt::oneshot(service, req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// `/mcp` once the guards let a POST through: answers it as the caller (a
/// caller without a valid token gets the [`Caller`] refusal), and counts
/// the answer by method and status for `/metrics`.
async fn endpoint(State(state): State<AppState>, caller: Result<Caller, Response>, req: Request) -> Response {
    let mut method = RpcMethod::NONE;
    let resp = match caller {
        Ok(Caller(principal, grants)) => answer_post(&state, principal, grants, req, &mut method).await,
        Err(refusal) => refusal,
    };
    state
        .server
        .inner
        .http_stats
        .answered(method, resp.status().as_u16());
    resp
}

/// Records on the request's span what the 2026 wire's headers say before
/// the body is read: the method (`Mcp-Method`, when it is one the server
/// knows, by its name in the fixed list) and a `tasks/*` request's task
/// (`Mcp-Name`). The pipeline refuses a request whose headers differ from
/// its body. `false` when no method was recorded (then the parsed one is,
/// once the body is read).
fn record_headers(span: &tracing::Span, headers: &RequestHeaders) -> bool {
    let Some(method) = headers
        .method
        .as_deref()
        .and_then(crate::model::Method::from_name)
    else {
        return false;
    };
    span.record("mcp.method.name", method.as_str());
    if let (crate::model::Method::Task(_), Some(task)) = (method, &headers.name) {
        span.record("mcp.task_id", task.trim());
    }
    true
}

/// Whether `body` (one message or a batch) asks to steer, pause, resume or
/// cancel a task: by method, or by calling a control tool that does.
fn asks_control(server: &Server, body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow, default)]
        name: Option<std::borrow::Cow<'a, str>>,
    }
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow, default)]
        method: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        params: Option<Params<'a>>,
    }
    let control = |m: &Message<'_>| {
        let Some(method) = m.method.as_deref() else {
            return false;
        };
        match crate::model::Method::from_name(method) {
            Some(crate::model::Method::Task(t)) => matches!(
                t,
                crate::model::TaskMethod::Cancel
                    | crate::model::TaskMethod::Steer
                    | crate::model::TaskMethod::Pause
                    | crate::model::TaskMethod::Resume
            ),
            Some(crate::model::Method::ToolsCall) => m
                .params
                .as_ref()
                .and_then(|p| p.name.as_deref())
                .is_some_and(|n| server.is_control_tool(n)),
            _ => false,
        }
    };
    if body.trim_ascii_start().first() == Some(&b'[') {
        serde_json::from_slice::<Vec<Message<'_>>>(body).is_ok_and(|ms| ms.iter().any(control))
    } else {
        serde_json::from_slice::<Message<'_>>(body).is_ok_and(|m| control(&m))
    }
}

/// Answers a POST to `/mcp`; sets `named` once a JSON-RPC message was read.
async fn answer_post(
    state: &AppState,
    principal: super::Principal,
    grants: super::Grants,
    req: Request,
    named: &mut RpcMethod,
) -> Response {
    let server = &state.server;
    let config = server.config();
    let headers = req.headers();
    if let Some(ct) = header_str(headers, &header::CONTENT_TYPE)
        && !ct
            .get(.."application/json".len())
            .is_some_and(|p| p.eq_ignore_ascii_case("application/json"))
    {
        return error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::INVALID_REQUEST,
            "Content-Type must be application/json",
        );
    }
    let meta_headers = RequestHeaders {
        protocol_version: header_str(headers, &MCP_PROTOCOL_VERSION).map(str::to_owned),
        method: header_str(headers, &MCP_METHOD).map(str::to_owned),
        name: header_str(headers, &MCP_NAME).map(str::to_owned),
    };
    let span = tracing::Span::current();
    let named_by_header = !span.is_disabled() && record_headers(&span, &meta_headers);
    // The body limit is applied here, after the method, token and media
    // type checks, with the endpoint's JSON-RPC error (see docs/protocol.md).
    let limit = config.limits.max_body_bytes;
    let body: Bytes = match axum::body::to_bytes(req.into_body(), limit).await {
        Ok(b) => b,
        Err(_) => {
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::INVALID_REQUEST,
                &format!("request body is larger than the limit of {limit} bytes"),
            );
        }
    };
    // A caller without the control grant (an OAuth token without its
    // scope) cannot steer, pause, resume or cancel, by method or by the
    // control tools (read only then: no cost to anyone else).
    if !grants.control && asks_control(server, &body) {
        return super::http_base::control_refusal(server);
    }
    let (reply, method) = server
        .handle_named(Incoming {
            body: &body,
            headers: Some(meta_headers),
            principal,
            connection: None,
        })
        .await;
    *named = method;
    if !named_by_header && method != RpcMethod::NONE && !span.is_disabled() {
        span.record("mcp.method.name", method.name());
    }
    match reply {
        Reply::Message { status, body } => json_response(status, body),
        Reply::Accepted => {
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::ACCEPTED;
            resp
        }
        Reply::Stream(messages) => {
            let events = server
                .inner
                .http_stats
                .track_stream(messages)
                .map(|m| Event::default().event("message").data(m));
            sse(events, config.keep_alive, state.shutdown.clone())
        }
    }
}
