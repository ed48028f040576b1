//! The operator's web view at `/ui` (feature `ui`): a page compiled into
//! the binary and the small JSON and SSE API it reads.
//!
//! - `GET /ui`: the page (`ui/index.html`, `ui/app.js`, `ui/app.css`).
//! - `GET /ui/api/me`: who the caller is.
//! - `GET /ui/api/trees?status=&tool=&q=&before=&limit=`: the caller's
//!   trees, newest first, each with its tasks counted by status; `next`
//!   (for `before`) until the oldest tree.
//! - `GET /ui/api/trees/{id}`: every task of the tree holding `id`, as rows
//!   in pre-order.
//! - `GET /ui/api/trees/{id}/live`: SSE: a `rows` event with every row,
//!   then one with the rows that changed each time the tree changes
//!   (coalesced, at most every [`LIVE_INTERVAL`]), each shown only once
//!   durable; `end` once every task is terminal.
//! - `GET /ui/api/tasks/{id}`: `tasks/get` (result, error, input requests).
//! - `POST /ui/api/tasks/{id}/{steer|pause|resume|cancel}`: the MCP
//!   request of that name, as the caller.
//!
//! Every route has the MCP endpoint's guards: the Host/Origin check and,
//! with tokens, a bearer token; a principal sees and drives only its own
//! trees (another's answer 404, as unknown ones). Commands go through
//! [`Server::handle`], so they get exactly the MCP endpoint's checks,
//! durability and errors.
//!
//! Reads go through the task-access service ([`Server::tasks`]), as the
//! MCP endpoint's do: on a cluster every route answers for every tree the
//! principal may see, whichever instance holds it (the list comes from the
//! database, a tree held elsewhere from its stored rows and the cluster's
//! change notifications, commands through the cluster's inbox).

use std::collections::HashMap;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::response::sse::Event;
use axum::routing::{MethodRouter, get, post};
use futures::{StreamExt, stream};
use serde_json::{Value, json};
use tower::ServiceBuilder;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::validate_request::ValidateRequestHeaderLayer;

use super::http_base::{AppState, Caller, HostGuard, error_response, sse};
use super::reply::Reply;
use super::request::OwnRequest;
use super::{Principal, Server};
use crate::model::{ErrorCode, TaskId, TaskMethod, TaskStatus};
use crate::runtime::view::{TaskRow, TreeSummary};

/// How often a live tree view gets a batch of changed rows, at most.
pub const LIVE_INTERVAL: Duration = Duration::from_millis(150);

/// Trees per page of the list, at most.
const MAX_PAGE: usize = 200;

/// Trees looked at per page of a filtered list, at most (the page says
/// where to go on).
const MAX_SCAN: usize = 5_000;

const INDEX_HTML: &str = include_str!("ui/index.html");
const APP_JS: &str = include_str!("ui/app.js");
const APP_CSS: &str = include_str!("ui/app.css");

/// The page's Content-Security-Policy: scripts, styles and requests to
/// this server only, no framing (clickjacking), no forms, no base URL.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The routes of the web view, each behind `guard` (the Host/Origin check
/// of every route) and with the security headers on every answer of a
/// route, refusals included. A request whose method a route does not take
/// gets axum's plain 405, as before: the layers are each route's
/// `route_layer`, which leaves the 405 out (the router's `route_layer`
/// would wrap it too).
#[allow(clippy::let_and_return)]
pub(crate) fn router(guard: &HostGuard) -> Router<AppState> {
    // Outermost first: each header layer sets its header after the ones
    // inside it, so an answer's headers keep the order they always had
    // (the policy first, `Cache-Control` last, replaced in place).
    let layers = ServiceBuilder::new()
        .layer(harden(header::CACHE_CONTROL, "no-store"))
        .layer(harden(header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(harden(header::REFERRER_POLICY, "no-referrer"))
        .layer(harden(header::X_FRAME_OPTIONS, "DENY"))
        .layer(harden(header::CONTENT_SECURITY_POLICY, CSP))
        .layer(ValidateRequestHeaderLayer::custom(guard.clone()));
    let guarded = |route: MethodRouter<AppState>| route.route_layer(layers.clone());
    let router = Router::new()
        .route("/ui", guarded(asset("text/html; charset=utf-8", INDEX_HTML)))
        .route("/ui/", guarded(asset("text/html; charset=utf-8", INDEX_HTML)))
        .route(
            "/ui/app.js",
            guarded(asset("text/javascript; charset=utf-8", APP_JS)),
        )
        .route("/ui/app.css", guarded(asset("text/css; charset=utf-8", APP_CSS)))
        .route("/ui/api/me", guarded(get(me)))
        .route("/ui/api/trees", guarded(get(trees)))
        .route("/ui/api/trees/{id}", guarded(get(tree)))
        .route("/ui/api/trees/{id}/live", guarded(get(live)))
        .route("/ui/api/tasks/{id}", guarded(get(task)))
        .route("/ui/api/tasks/{id}/{action}", guarded(post(command)));
    // Sign-in through the authorization server (`docs/auth.md`).
    #[cfg(feature = "oauth")]
    let router = router
        .route("/ui/api/signin", guarded(get(super::signin::info)))
        .route("/ui/signin", guarded(get(super::signin::start)))
        .route("/ui/callback", guarded(get(super::signin::finish)));
    router
}

/// One security header of every answer (no framing, scripts and styles
/// from this server only, no referrer, no sniffing, no caching), replacing
/// any the handler set.
fn harden(name: HeaderName, value: &'static str) -> SetResponseHeaderLayer<HeaderValue> {
    SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value))
}

/// A file of the page: only the Host/Origin guard (it holds no data).
fn asset(content_type: &'static str, body: &'static str) -> MethodRouter<AppState> {
    get(move || async move {
        let mut resp = Response::new(Body::from(body));
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        resp
    })
}

fn json_answer(status: StatusCode, body: &Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn not_found() -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        ErrorCode::INVALID_PARAMS,
        crate::model::ErrorObject::TASK_NOT_FOUND_MESSAGE,
    )
}

async fn me(State(state): State<AppState>, Caller(p, _): Caller) -> Response {
    json_answer(
        StatusCode::OK,
        &json!({
            "principal": p.name(),
            "tokens": state.server.takes_tokens(),
            "server": state.server.config().name,
            "version": state.server.config().version,
        }),
    )
}

fn row_json(r: &TaskRow) -> Value {
    // The timeline as `[stage, ms after creation]` pairs, oldest first.
    let phases: Vec<Value> = r
        .timeline
        .marks()
        .map(|m| json!([m.stage().as_str(), m.at_ms()]))
        .collect();
    let elided = r.timeline.marks().last().map_or(0, |m| m.elided());
    let mut row = json!({
        "id": r.id.to_string(),
        "parent": r.parent.map(|p| p.to_string()),
        "pos": r.position,
        "status": r.status.as_str(),
        "msg": r.message,
        "created": r.created_at.as_millis(),
        "updated": r.last_updated_at.as_millis(),
        "kids": r.children,
        "done": r.children_ended,
        "inputs": r.inputs,
        "phases": phases,
    });
    if elided > 0 {
        row["elided"] = json!(elided);
    }
    row
}

fn summary_json(t: &TreeSummary) -> Value {
    let counts: serde_json::Map<String, Value> = TaskStatus::ALL
        .iter()
        .zip(t.counts)
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| (s.as_str().to_owned(), json!(n)))
        .collect();
    json!({
        "root": t.root.to_string(),
        "tool": t.tool.as_deref(),
        "status": t.status.as_str(),
        "msg": t.message,
        "created": t.created_at.as_millis(),
        "updated": t.last_updated_at.as_millis(),
        "tasks": t.tasks,
        "counts": counts,
    })
}

/// The list's query parameters, decoded by axum's [`Query`] (a later one of
/// the same name wins); 400 for a query string with a broken escape.
struct ListQuery(HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for ListQuery {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Response> {
        let broken = || bad_request("the query string has a broken escape");
        if !escapes_well_formed(parts.uri.query().unwrap_or("")) {
            return Err(broken());
        }
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri).map_err(|_| broken())?;
        Ok(ListQuery(pairs.into_iter().collect()))
    }
}

/// Whether every `%` of a raw query string starts an escape of two hex
/// digits and every run of escapes decodes to UTF-8. Form decoding (what
/// [`Query`] does) keeps a broken escape as it is and turns bytes that are
/// not UTF-8 into U+FFFD; the list refuses both instead. (Literal text
/// between escapes is UTF-8 already, and a run of escapes next to it must
/// be whole characters for the decoded text to be UTF-8.)
fn escapes_well_formed(raw: &str) -> bool {
    let hex = |c: u8| char::from(c).to_digit(16);
    let mut run = Vec::new();
    let mut rest = raw.as_bytes();
    loop {
        match rest {
            [b'%', hi, lo, tail @ ..] => {
                let (Some(hi), Some(lo)) = (hex(*hi), hex(*lo)) else {
                    return false;
                };
                run.push((hi * 16 + lo) as u8);
                rest = tail;
            }
            [b'%', ..] => return false,
            _ => {
                if std::str::from_utf8(&run).is_err() {
                    return false;
                }
                run.clear();
                match rest {
                    [] => return true,
                    [_, tail @ ..] => rest = tail,
                }
            }
        }
    }
}

fn bad_request(message: &str) -> Response {
    error_response(StatusCode::BAD_REQUEST, ErrorCode::INVALID_PARAMS, message)
}

async fn trees(
    State(state): State<AppState>,
    Caller(principal, _): Caller,
    ListQuery(q): ListQuery,
) -> Response {
    let status = match q.get("status").map(String::as_str) {
        None | Some("") | Some("all") => None,
        Some("live") => Some(None),
        Some(s) => match serde_json::from_value::<TaskStatus>(json!(s)) {
            Ok(s) => Some(Some(s)),
            Err(_) => return bad_request("status must be all, live or a task status"),
        },
    };
    let tool = q.get("tool").filter(|t| !t.is_empty()).cloned();
    let text = q
        .get("q")
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty());
    let before = match q.get("before").filter(|b| !b.is_empty()) {
        None => None,
        Some(b) => match b.parse::<u64>() {
            Ok(b) => Some(b),
            Err(_) => return bad_request("before must be a list position"),
        },
    };
    let limit = match q.get("limit").filter(|l| !l.is_empty()) {
        None => 50,
        Some(l) => match l.parse::<usize>() {
            Ok(l) if (1..=MAX_PAGE).contains(&l) => l,
            _ => return bad_request("limit must be 1 to 200"),
        },
    };
    // A cluster instance that rejoined answers from its current runtime.
    let server = &state.server.current();
    let owner = server.owner(&principal);
    let keep = move |t: &TreeSummary| {
        let status_ok = match status {
            None => true,
            Some(None) => !t.status.is_terminal(),
            Some(Some(s)) => t.status == s,
        };
        let tool_ok = tool.as_deref().is_none_or(|w| t.tool.as_deref() == Some(w));
        let text_ok = text.as_deref().is_none_or(|w| {
            t.root.to_string().contains(w)
                || t.tool.as_deref().is_some_and(|x| x.to_lowercase().contains(w))
                || t.message.as_deref().is_some_and(|m| m.to_lowercase().contains(w))
        });
        status_ok && tool_ok && text_ok
    };
    // On a cluster the list is the database's: every instance lists the
    // same trees, wherever each is held.
    let (page, next) = match server
        .tasks()
        .tree_page(&principal, before, limit, MAX_SCAN, keep)
        .await
    {
        Ok(page) => page,
        Err(e) => return unavailable(&e.message),
    };
    // The server's tools, then those workers registered (the filter's list).
    let worker_tools = server
        .inner
        .workers
        .as_ref()
        .map(|hub| hub.specs())
        .unwrap_or_default();
    let tools: Vec<&str> = server
        .inner
        .tools
        .iter()
        .map(|t| t.spec.name.as_str())
        .chain(worker_tools.iter().map(|s| s.name.as_str()))
        .collect();
    json_answer(
        StatusCode::OK,
        &json!({
            "trees": page.iter().map(summary_json).collect::<Vec<_>>(),
            "next": next.map(|n| n.to_string()),
            "live": owner.live(),
            // On a cluster `live` counts this instance's tasks only.
            "cluster": server.tasks().is_cluster(),
            "tools": tools,
            "now": crate::model::Timestamp::now().as_millis(),
        }),
    )
}

fn task_id(raw: &str) -> Option<TaskId> {
    raw.parse().ok()
}

async fn tree(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Caller(principal, _): Caller,
) -> Response {
    let server = state.server.current();
    let Some(id) = task_id(&id) else {
        return not_found();
    };
    // Held here or by another instance of a cluster, alike.
    let tree = match server.tasks().tree(id, principal.name()).await {
        Ok(Some(tree)) => tree,
        Ok(None) => return not_found(),
        Err(e) => return unavailable(&e.message),
    };
    json_answer(
        StatusCode::OK,
        &json!({
            "root": tree.root.to_string(),
            "tool": tree.tool.as_deref(),
            "rows": tree.rows.iter().map(row_json).collect::<Vec<_>>(),
            "now": crate::model::Timestamp::now().as_millis(),
        }),
    )
}

/// 503 with `message`: the tree or the list cannot be shown now (the
/// store failed, or a cluster's database cannot be read).
fn unavailable(message: &str) -> Response {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::INTERNAL_ERROR,
        message,
    )
}

async fn live(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Caller(principal, _): Caller,
) -> Response {
    let server = state.server.current();
    let Some(id) = task_id(&id) else {
        return not_found();
    };
    // Held here or by another instance of a cluster, alike.
    let changes = match server
        .tasks()
        .watch_tree(id, principal.name(), LIVE_INTERVAL)
        .await
    {
        Ok(Some(changes)) => changes,
        Ok(None) => return not_found(),
        Err(e) => return unavailable(&e.message),
    };
    let shutdown = state.shutdown.clone();
    let keep_alive = server.config().keep_alive;
    // A `rows` event per change (every row first), `end` once every task
    // is terminal.
    let events = changes.flat_map(|change| {
        let mut events = Vec::with_capacity(2);
        if change.full || !change.rows.is_empty() {
            let body = json!({
                "rows": change.rows.iter().map(row_json).collect::<Vec<_>>(),
                "full": change.full,
                "now": crate::model::Timestamp::now().as_millis(),
            });
            events.push(Event::default().event("rows").data(body.to_string()));
        }
        if change.done {
            events.push(end_event());
        }
        stream::iter(events)
    });
    // Counted with the MCP endpoint's streams (`subtask_http_open_streams`).
    let events = state.server.inner.http_stats.track_stream(events.boxed());
    sse(events, keep_alive, shutdown)
}

/// The live view's last event: every task of the tree is terminal.
fn end_event() -> Event {
    Event::default().event("end").data("{}")
}

/// Runs one MCP request as `principal` and answers its JSON-RPC reply.
async fn relay(server: &Server, principal: Principal, request: OwnRequest) -> Response {
    let reply = server.request_as(principal, &request).await;
    match reply {
        Reply::Message { status, body } => {
            let mut resp = Response::new(Body::from(body));
            *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp
        }
        Reply::Accepted | Reply::Stream(_) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::INTERNAL_ERROR,
            "unexpected reply to a task request",
        ),
    }
}

async fn task(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Caller(principal, _): Caller,
) -> Response {
    relay(&state.server, principal, OwnRequest::new(TaskMethod::Get, id)).await
}

async fn command(
    State(state): State<AppState>,
    Path((id, action)): Path<(String, String)>,
    Caller(principal, grants): Caller,
    req: Request,
) -> Response {
    if !grants.control {
        return super::http_base::control_refusal(&state.server);
    }
    // The action is the URL's last segment, not a method name.
    let method = match action.as_str() {
        "steer" => TaskMethod::Steer,
        "pause" => TaskMethod::Pause,
        "resume" => TaskMethod::Resume,
        "cancel" => TaskMethod::Cancel,
        _ => return not_found(),
    };
    let mut request = OwnRequest::new(method, id);
    if method == TaskMethod::Steer {
        let limit = state.server.config().limits.max_body_bytes;
        let Ok(body) = axum::body::to_bytes(req.into_body(), limit).await else {
            return bad_request("the body is too large");
        };
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned));
        let Some(message) = message else {
            return bad_request(r#"steer takes a JSON body {"message": "..."}"#);
        };
        request.message = Some(Value::String(message));
    }
    relay(&state.server, principal, request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn query(uri: &str) -> Result<HashMap<String, String>, u16> {
        let (mut parts, ()) = axum::http::Request::builder()
            .uri(uri)
            .body(())
            .unwrap()
            .into_parts();
        match ListQuery::from_request_parts(&mut parts, &()).await {
            Ok(ListQuery(q)) => Ok(q),
            Err(resp) => Err(resp.status().as_u16()),
        }
    }

    #[tokio::test]
    async fn query_strings_decode() {
        let q = query("/ui/api/trees?status=working&q=deep+research%2Fx&tool=&status=live")
            .await
            .unwrap();
        assert_eq!(q["status"], "live", "a later parameter wins");
        assert_eq!(q["q"], "deep research/x");
        assert_eq!(q["tool"], "");
        assert_eq!(query("/ui/api/trees?q=%C3%A9t%C3%A9").await.unwrap()["q"], "été");
        assert!(query("/ui/api/trees").await.unwrap().is_empty());
        for bad in ["q=%zz", "q=%4", "q=%C3", "q=%C3x", "q=%FF", "%zz=1"] {
            assert_eq!(query(&format!("/ui/api/trees?{bad}")).await, Err(400), "{bad}");
        }
    }
}
