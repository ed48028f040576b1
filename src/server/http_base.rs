//! What the HTTP routes share (`/mcp` in `http.rs`, the web view in
//! `ui.rs`, `/metrics` in `metrics.rs`): the router's state, JSON-RPC error
//! answers, the guard against DNS rebinding (a tower-http request
//! validator), the [`Caller`] extractor that authenticates a bearer token,
//! and SSE responses (axum's [`Sse`] with [`KeepAlive`] comments, ended at
//! shutdown).
//!
//! A leaf: it imports none of the route modules, so they import it and
//! `http.rs` imports the others, one way.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use tokio::sync::watch;
use tower_http::validate_request::ValidateRequest;

use super::{Grants, Principal, Server, ServerConfig};
use crate::model::{ErrorCode, ErrorObject, JsonRpcError};

/// What every route of the router shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) server: Server,
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// A JSON answer with `status` (500 for a status that is not one).
pub(crate) fn json_response(status: u16, body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// A JSON-RPC error without an id, as a JSON answer with `status`.
pub(crate) fn error_response(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    let body = serde_json::to_string(&JsonRpcError::new(None, ErrorObject::new(code, message)))
        .expect("error responses serialize");
    json_response(status.as_u16(), body)
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

/// A header's value as text, borrowed (`None` when absent or not visible
/// ASCII).
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
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

/// Whether an `Origin` value names this machine or an allowed host
/// (`null` never does).
fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    if origin == "null" {
        return false;
    }
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    host_allowed(rest.split('/').next().unwrap_or(""), allowed)
}

/// The guard against DNS rebinding: the Host and any Origin must name this
/// machine or an allowed host (403 otherwise).
// The refusal is the response itself, built only when refusing.
#[allow(clippy::result_large_err)]
pub(crate) fn check_host_and_origin(headers: &HeaderMap, config: &ServerConfig) -> Result<(), Response> {
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

/// [`check_host_and_origin`] as a request validator, for tower-http's
/// `ValidateRequestHeaderLayer::custom` in front of every route: a refused
/// request never reaches the route's handler or its extractors.
#[derive(Clone)]
pub(crate) struct HostGuard(Server);

impl HostGuard {
    /// The guard of `server`'s routes (its `allowed_hosts`).
    pub(crate) fn new(server: &Server) -> Self {
        HostGuard(server.clone())
    }
}

impl<B> ValidateRequest<B> for HostGuard {
    type ResponseBody = Body;

    fn validate(&mut self, request: &mut Request<B>) -> Result<(), Response> {
        check_host_and_origin(request.headers(), self.0.config())
    }
}

/// What a route needs of its caller's grants (an OAuth token's scopes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Call tools and read its own tasks (`/mcp`).
    Tasks,
    /// Steer, pause, resume or cancel (checked per request).
    Control,
    /// The web view and `/metrics`.
    Observe,
}

impl Need {
    #[cfg_attr(not(feature = "oauth"), allow(dead_code))]
    pub(crate) fn granted(self, g: Grants) -> bool {
        match self {
            Need::Tasks => g.tasks,
            Need::Control => g.control,
            Need::Observe => g.observe,
        }
    }
}

/// The caller's principal and grants: anonymous without tokens, else the
/// one its bearer token names: a static token (every grant), or with OAuth
/// an access token that verifies (its scopes' grants, which must include
/// `need`). Refused with 401 and `WWW-Authenticate: Bearer` (with OAuth:
/// the resource metadata's URL and the scope needed, and `invalid_token`
/// for a token that does not verify), or 403 `insufficient_scope`.
#[allow(clippy::result_large_err)]
pub(crate) async fn authenticate(
    headers: &HeaderMap,
    server: &Server,
    need: Need,
) -> Result<Caller, Response> {
    #[cfg(not(feature = "oauth"))]
    let _ = need;
    let config = server.config();
    let bearer =
        header_str(headers, &header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer ").map(str::trim));
    if let (Some(tokens), Some(token)) = (&config.tokens, bearer)
        && let Some(p) = tokens.authenticate(token)
    {
        return Ok(Caller(p.clone(), Grants::ALL));
    }
    #[cfg(feature = "oauth")]
    if let Some(verifier) = &server.inner.oauth {
        let Some(token) = bearer else {
            return Err(oauth_refusal(verifier, need, None));
        };
        return match verifier.verify(token).await {
            Ok(v) if need.granted(v.grants) => Ok(Caller(v.principal, v.grants)),
            Ok(_) => Err(insufficient_scope(Some(verifier), need)),
            Err(refusal) => Err(oauth_refusal(verifier, need, Some(&refusal.0))),
        };
    }
    if config.tokens.is_none() {
        return Ok(Caller(Principal::anonymous(), Grants::ALL));
    }
    let mut resp = error_response(
        StatusCode::UNAUTHORIZED,
        ErrorCode::INVALID_REQUEST,
        "unauthorized: missing or unknown bearer token",
    );
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    Err(resp)
}

/// A `WWW-Authenticate` parameter value: quotes and backslashes dropped,
/// control characters too (RFC 6750's `error_description` is a quoted
/// string of visible ASCII).
#[cfg(feature = "oauth")]
fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\')
        .collect()
}

/// The scope name `need` asks for.
#[cfg(feature = "oauth")]
fn scope_of(verifier: &super::oauth::Verifier, need: Need) -> &str {
    let n = &verifier.config().scopes;
    match need {
        Need::Tasks => &n.tasks,
        Need::Control => &n.control,
        Need::Observe => &n.observe,
    }
}

/// 401 for a request without a token (`description` `None`) or with one
/// that does not verify (`invalid_token`), naming the resource metadata
/// (RFC 9728 §5.1) and the scope needed.
#[cfg(feature = "oauth")]
fn oauth_refusal(verifier: &super::oauth::Verifier, need: Need, description: Option<&str>) -> Response {
    let mut challenge = format!(
        "Bearer resource_metadata=\"{}\", scope=\"{}\"",
        verifier.metadata_url,
        scope_of(verifier, need)
    );
    let message = match description {
        Some(d) => {
            challenge.push_str(&format!(
                ", error=\"invalid_token\", error_description=\"{}\"",
                quoted(d)
            ));
            format!("unauthorized: invalid access token: {d}")
        }
        None => "unauthorized: an access token is required (see the WWW-Authenticate header)".to_owned(),
    };
    let mut resp = error_response(StatusCode::UNAUTHORIZED, ErrorCode::INVALID_REQUEST, &message);
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// 403 `insufficient_scope` for a caller whose grants lack `need` (a
/// static token has every grant, so this is OAuth's refusal).
#[allow(unused_variables)]
pub(crate) fn insufficient_scope(
    #[cfg(feature = "oauth")] verifier: Option<&super::oauth::Verifier>,
    #[cfg(not(feature = "oauth"))] verifier: Option<&()>,
    need: Need,
) -> Response {
    #[cfg(feature = "oauth")]
    let (scope, challenge) = match verifier {
        Some(v) => {
            let scope = scope_of(v, need).to_owned();
            let c = format!(
                "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{}\", \
                 error_description=\"the access token lacks scope {scope}\"",
                v.metadata_url
            );
            (scope, Some(c))
        }
        None => (format!("{need:?}"), None),
    };
    #[cfg(not(feature = "oauth"))]
    let (scope, challenge): (String, Option<String>) = (format!("{need:?}"), None);
    let _ = verifier;
    let mut resp = error_response(
        StatusCode::FORBIDDEN,
        ErrorCode::INVALID_REQUEST,
        &format!("forbidden: the access token lacks scope {scope}"),
    );
    if let Some(v) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// 403 for a caller without the control grant asking to steer, pause,
/// resume or cancel.
pub(crate) fn control_refusal(server: &Server) -> Response {
    #[cfg(feature = "oauth")]
    return insufficient_scope(server.inner.oauth.as_deref(), Need::Control);
    #[cfg(not(feature = "oauth"))]
    {
        let _ = server;
        insufficient_scope(None, Need::Control)
    }
}

/// The caller's principal and grants as an extractor ([`authenticate`],
/// needing [`Need::Tasks`], or [`Need::Observe`] under `/ui` and at
/// `/metrics`): a handler that takes it runs only for a caller the server
/// knows; anyone else is refused.
#[derive(Debug, Clone)]
pub(crate) struct Caller(pub(crate) Principal, pub(crate) Grants);

impl FromRequestParts<AppState> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let path = parts.uri.path();
        let need = if path.starts_with("/ui") || path.starts_with("/metrics") {
            Need::Observe
        } else {
            Need::Tasks
        };
        authenticate(&parts.headers, &state.server, need).await
    }
}

/// Resolves once `shutdown` turns `true` (never, if its sender is gone).
async fn stopping(mut shutdown: watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// An SSE response of `events` (axum's [`Sse`]): a keep-alive comment
/// (`:`) after every `keep_alive` without an event, ended when the events
/// end or the server shuts down. Proxies are told not to buffer it
/// (`X-Accel-Buffering: no`).
pub(crate) fn sse<S>(events: S, keep_alive: Duration, shutdown: watch::Receiver<bool>) -> Response
where
    S: Stream<Item = Event> + Send + 'static,
{
    let events = events.take_until(stopping(shutdown)).map(Ok::<_, Infallible>);
    let mut resp = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response();
    resp.headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
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

    /// The bytes of the hand-written framing this replaced: one
    /// `event: message` per message, `:` comments in quiet periods, and the
    /// end at shutdown.
    #[tokio::test(start_paused = true)]
    async fn sse_frames_events_and_keep_alive_comments_and_ends_at_shutdown() {
        let (stop, shutdown) = watch::channel(false);
        let (messages, rx) = futures::channel::mpsc::unbounded::<String>();
        let events = rx.map(|m| Event::default().event("message").data(m));
        let resp = sse(events, Duration::from_secs(5), shutdown);
        let h = resp.headers();
        assert_eq!(h[header::CONTENT_TYPE], "text/event-stream");
        assert_eq!(h[header::CACHE_CONTROL], "no-cache");
        assert_eq!(h["x-accel-buffering"], "no");
        let mut body = resp.into_body().into_data_stream();
        messages
            .unbounded_send(r#"{"jsonrpc":"2.0","a":"x\ny"}"#.to_owned())
            .unwrap();
        let frame = body.next().await.unwrap().unwrap();
        assert_eq!(
            frame,
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"a\":\"x\\ny\"}\n\n"
        );
        let start = tokio::time::Instant::now();
        assert_eq!(body.next().await.unwrap().unwrap(), ":\n\n");
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        messages.unbounded_send("{}".to_owned()).unwrap();
        assert_eq!(
            body.next().await.unwrap().unwrap(),
            "event: message\ndata: {}\n\n"
        );
        stop.send(true).unwrap();
        assert!(body.next().await.is_none());
    }
}
