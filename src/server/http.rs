//! Streamable HTTP (2026-07-28) with axum: `POST /mcp`, JSON responses, SSE
//! for `subscriptions/listen`, Origin/Host validation against DNS
//! rebinding, bearer tokens, a body size limit and graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::{StreamExt, stream};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::http_stats::RpcMethod;
use super::reply::Reply;
use super::request::{Incoming, RequestHeaders};
use super::{Principal, Server};
use crate::model::{ErrorCode, ErrorObject, JsonRpcError};

/// What every route of the router shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) server: Server,
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// The axum router serving the MCP endpoint at `/mcp`.
///
/// Streams end when `shutdown` turns `true`.
pub fn router(server: Server, shutdown: watch::Receiver<bool>) -> Router {
    let app = Router::new().route("/mcp", axum::routing::any(endpoint));
    #[cfg(feature = "ui")]
    let app = if server.config().ui {
        app.merge(super::ui::router())
    } else {
        app
    };
    #[cfg(feature = "metrics")]
    let app = if server.config().metrics {
        app.merge(super::metrics::router())
    } else {
        app
    };
    app.with_state(AppState { server, shutdown })
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

fn json_response(status: u16, body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// 405 with the methods a route takes in `Allow`.
pub(crate) fn method_not_allowed(message: &str, allow: &'static str) -> Response {
    let mut resp = error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::INVALID_REQUEST,
        message,
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

pub(crate) fn error_response(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    let body = serde_json::to_string(&JsonRpcError::new(None, ErrorObject::new(code, message)))
        .expect("error responses serialize");
    json_response(status.as_u16(), body)
}

/// Whether `host` (a `Host` header value or an Origin's host, with or
/// without a port) names this machine or an allowed host.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
    };
    let name = name.to_ascii_lowercase();
    matches!(name.as_str(), "localhost" | "127.0.0.1" | "::1")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(&name))
}

fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    if origin == "null" {
        return false;
    }
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    host_allowed(rest.split('/').next().unwrap_or(""), allowed)
}

/// A header's value as text, borrowed (`None` when absent or not visible
/// ASCII). Names are the constants below, so no lookup parses a name.
fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

static MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
static MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
static MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Answers one request to the endpoint, as [`router`] does (the rmcp
/// adapter's front uses it for the requests it routes here).
#[cfg(feature = "rmcp")]
pub(crate) async fn answer(server: Server, shutdown: watch::Receiver<bool>, req: Request) -> Response {
    endpoint(State(AppState { server, shutdown }), req).await
}

/// The guard against DNS rebinding, for every route of the server: the
/// Host and any Origin must name this machine or an allowed host.
// The refusal is the response itself, built only when refusing.
#[allow(clippy::result_large_err)]
pub(crate) fn check_host_and_origin(
    headers: &HeaderMap,
    config: &super::ServerConfig,
) -> Result<(), Response> {
    if let Some(host) = header_str(headers, &header::HOST)
        && !host_allowed(host, &config.allowed_hosts)
    {
        return Err(error_response(
            StatusCode::FORBIDDEN,
            ErrorCode::INVALID_REQUEST,
            "forbidden: Host is not allowed",
        ));
    }
    if let Some(origin) = header_str(headers, &header::ORIGIN)
        && !origin_allowed(origin, &config.allowed_hosts)
    {
        return Err(error_response(
            StatusCode::FORBIDDEN,
            ErrorCode::INVALID_REQUEST,
            "forbidden: Origin is not allowed",
        ));
    }
    Ok(())
}

/// The caller's principal: anonymous without tokens, else the one its
/// bearer token names (401 with `WWW-Authenticate: Bearer` otherwise).
#[allow(clippy::result_large_err)]
pub(crate) fn authenticate(headers: &HeaderMap, config: &super::ServerConfig) -> Result<Principal, Response> {
    match &config.tokens {
        None => Ok(Principal::anonymous()),
        Some(tokens) => {
            let bearer = header_str(headers, &header::AUTHORIZATION)
                .and_then(|v| v.strip_prefix("Bearer ").map(str::trim));
            match bearer.and_then(|t| tokens.authenticate(t)) {
                Some(p) => Ok(p.clone()),
                None => {
                    let mut resp = error_response(
                        StatusCode::UNAUTHORIZED,
                        ErrorCode::INVALID_REQUEST,
                        "unauthorized: missing or unknown bearer token",
                    );
                    resp.headers_mut()
                        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                    Err(resp)
                }
            }
        }
    }
}

/// `/mcp`: answers the request and counts it by method and status.
async fn endpoint(State(state): State<AppState>, req: Request) -> Response {
    let mut method = RpcMethod::NONE;
    let server = state.server.clone();
    let resp = endpoint_named(state, req, &mut method).await;
    server.inner.http_stats.answered(method, resp.status().as_u16());
    resp
}

/// Answers a request to `/mcp`; sets `named` once a JSON-RPC message was read.
async fn endpoint_named(state: AppState, req: Request, named: &mut RpcMethod) -> Response {
    let server = &state.server;
    let config = server.config();
    // DNS rebinding: the Host and any Origin must name this machine.
    let headers = req.headers();
    if let Err(resp) = check_host_and_origin(headers, config) {
        return resp;
    }
    if req.method() != Method::POST {
        return method_not_allowed("the MCP endpoint accepts POST only", "POST");
    }
    let principal = match authenticate(headers, config) {
        Ok(p) => p,
        Err(resp) => return resp,
    };
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
    let (reply, method) = server
        .handle_named(Incoming {
            body: &body,
            headers: Some(meta_headers),
            principal,
            connection: None,
        })
        .await;
    *named = method;
    match reply {
        Reply::Message { status, body } => json_response(status, body),
        Reply::Accepted => {
            let mut resp = Response::new(Body::empty());
            *resp.status_mut() = StatusCode::ACCEPTED;
            resp
        }
        Reply::Stream(messages) => {
            let messages = server.inner.http_stats.track_stream(messages);
            sse(messages, config.keep_alive, state.shutdown.clone())
        }
    }
}

/// An SSE response: one `message` event per message, keep-alive comments
/// in quiet periods, ended when the messages end or the server shuts down.
pub(crate) fn sse(
    messages: futures::stream::BoxStream<'static, String>,
    keep_alive: Duration,
    shutdown: watch::Receiver<bool>,
) -> Response {
    let frames = messages.map(|m| format!("event: message\ndata: {m}\n\n"));
    sse_frames(frames.boxed(), keep_alive, shutdown)
}

/// An SSE response of ready-made `frames` (each one or more whole events),
/// with keep-alive comments in quiet periods, ended when the frames end or
/// the server shuts down.
pub(crate) fn sse_frames(
    frames: futures::stream::BoxStream<'static, String>,
    keep_alive: Duration,
    shutdown: watch::Receiver<bool>,
) -> Response {
    let body = stream::unfold((frames, shutdown), move |(mut frames, mut shutdown)| async move {
        let stopping = async {
            while !*shutdown.borrow_and_update() {
                if shutdown.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let chunk = tokio::select! {
            f = frames.next() => f?,
            () = tokio::time::sleep(keep_alive) => ":\n\n".to_owned(),
            () = stopping => return None,
        };
        Some((Ok::<Bytes, Infallible>(Bytes::from(chunk)), (frames, shutdown)))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_origins_are_allowed_others_are_not() {
        let none: Vec<String> = Vec::new();
        for ok in [
            "localhost",
            "localhost:8750",
            "127.0.0.1:1",
            "[::1]:80",
            "LOCALHOST",
        ] {
            assert!(host_allowed(ok, &none), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:80",
            "127.0.0.1.evil.com",
            "10.0.0.1",
        ] {
            assert!(!host_allowed(bad, &none), "{bad}");
        }
        assert!(origin_allowed("http://127.0.0.1:8750", &none));
        assert!(!origin_allowed("http://evil.example.com", &none));
        assert!(!origin_allowed("null", &none));
        assert!(host_allowed("mcp.internal:443", &["mcp.internal".to_owned()]));
    }
}
