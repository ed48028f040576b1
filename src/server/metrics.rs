//! `GET /metrics`: the runtime's, the store's and the HTTP endpoint's
//! counters in the Prometheus text format (0.0.4), encoded by
//! `prometheus-client`.
//!
//! Nothing is counted here: the runtime, the store writers and the
//! endpoint keep relaxed atomics (`runtime/stats.rs`, `http_stats.rs`), and
//! a scrape reads them through a custom collector. A scrape takes the
//! scheduler's lock once and the tool table's read lock once; it never
//! walks tasks or trees. Access: the Host/Origin guard of `/mcp`, and with
//! tokens a valid bearer token of any principal (docs/operations.md,
//! "Metrics"). No label carries a principal's name.

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::any;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tower::ServiceBuilder;
use tower_http::validate_request::ValidateRequestHeaderLayer;

use super::Server;
use super::http_base::{AppState, Caller, HostGuard, error_response, method_not_allowed};
use crate::model::ErrorCode;
use crate::runtime::stats::{HistogramSnapshot, LIVE_STATUSES, TERMINAL_STATUSES};

/// The `/metrics` route: `guard` (Host/Origin) first, then GET or HEAD
/// only (405), then a bearer token of any principal ([`Caller`]). The
/// checks are request validators around an `any` route, so no refusal
/// gets an `Allow` header of axum's.
pub(crate) fn router(guard: &HostGuard) -> Router<AppState> {
    Router::new().route(
        "/metrics",
        any(scrape).layer(
            ServiceBuilder::new()
                .layer(ValidateRequestHeaderLayer::custom(guard.clone()))
                .layer(ValidateRequestHeaderLayer::custom(get_only)),
        ),
    )
}

/// The 405 of a request to `/metrics` that is not a GET or HEAD.
#[allow(clippy::result_large_err)]
fn get_only(req: &mut Request) -> Result<(), Response> {
    if req.method() == Method::GET || req.method() == Method::HEAD {
        Ok(())
    } else {
        Err(method_not_allowed("/metrics accepts GET only", "GET, HEAD"))
    }
}

/// `GET /metrics` of a caller with a valid token (any principal).
async fn scrape(State(state): State<AppState>, _: Caller) -> Response {
    // A cluster instance that rejoined: its current incarnation's runtime.
    let server = &state.server.current();
    let text = match render(server) {
        Ok(text) => text,
        Err(e) => {
            tracing::error!(error = %e, "encoding /metrics failed");
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::INTERNAL_ERROR,
                "encoding the metrics failed",
            );
        }
    };
    let mut resp = Response::new(Body::from(text));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(prometheus_client::encoding::prometheus_text::CONTENT_TYPE),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The metrics of `server` now, in the Prometheus text format.
fn render(server: &Server) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(server.clone())));
    let mut text = String::with_capacity(8 * 1024);
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    Ok(text)
}

/// Reads every counter at scrape time.
struct Scrape(Server);

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape")
    }
}

/// The `tool` label of trees without one (started through the library).
const NO_TOOL: &str = "";

/// A histogram's buckets as `prometheus-client` takes them: per bucket,
/// not cumulative (it adds them up and writes `+Inf` from the count).
fn per_bucket(h: &HistogramSnapshot) -> Vec<(f64, u64)> {
    let mut below = 0;
    h.buckets
        .iter()
        .map(|(le, cumulative)| {
            let n = cumulative - below;
            below = *cumulative;
            (*le, n)
        })
        .collect()
}

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let server = &self.0;
        let runtime = server.runtime();
        let stats = runtime.stats();
        let tools = stats.tools();
        let label = |t: &Option<std::sync::Arc<str>>| t.as_deref().unwrap_or(NO_TOOL).to_owned();

        {
            let mut m = enc.encode_descriptor(
                "subtask_tasks_created",
                "Tasks created by this process (roots and subtasks), by the tool their tree runs.",
                None,
                MetricType::Counter,
            )?;
            for (tool, t) in &tools {
                let tool = label(tool);
                m.encode_family(&[("tool", tool.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(&t.created, None)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "subtask_tasks_ended",
                "Tasks that reached a terminal status in this process, by tool and status (completed, failed, cancelled).",
                None,
                MetricType::Counter,
            )?;
            for (tool, t) in &tools {
                let tool = label(tool);
                for (status, n) in TERMINAL_STATUSES.iter().zip(t.ended) {
                    m.encode_family(&[("tool", tool.as_str()), ("status", status.as_str())])?
                        .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "subtask_tasks",
                "Live (non-terminal) tasks held now, by tool and status (working, input_required, paused).",
                None,
                MetricType::Gauge,
            )?;
            for (tool, t) in &tools {
                let tool = label(tool);
                for (status, n) in LIVE_STATUSES.iter().zip(t.live) {
                    m.encode_family(&[("tool", tool.as_str()), ("status", status.as_str())])?
                        .encode_gauge(&n)?;
                }
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "subtask_tasks_retained",
                "Terminal tasks still held in memory (until their tree is deleted, or let go to the store: serve --keep-finished), by tool.",
                None,
                MetricType::Gauge,
            )?;
            for (tool, t) in &tools {
                let tool = label(tool);
                m.encode_family(&[("tool", tool.as_str())])?
                    .encode_gauge(&t.retained)?;
            }
        }
        {
            let mut m = enc.encode_descriptor(
                "subtask_handler_duration_seconds",
                "Wall time of a handler from its start to its return (parked waits included), by tool.",
                None,
                MetricType::Histogram,
            )?;
            for (tool, t) in &tools {
                let tool = label(tool);
                let h = &t.handler;
                m.encode_family(&[("tool", tool.as_str())])?
                    .encode_histogram::<NoLabelSet>(h.sum, h.count, &per_bucket(h), None)?;
            }
        }
        enc.encode_descriptor(
            "subtask_handlers",
            "Handlers started and not yet returned (holding a slot or parked).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(stats.handlers() as u64))?;
        enc.encode_descriptor(
            "subtask_handlers_external",
            "Handlers inside ctx.external now (waiting on outside work, slot given back).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(stats.external() as u64))?;

        let (running, queued, max_running) = runtime.scheduler_load();
        enc.encode_descriptor(
            "subtask_scheduler_running",
            "Scheduler slots in use: handlers running now.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(running as u64))?;
        enc.encode_descriptor(
            "subtask_scheduler_queued",
            "Jobs waiting for a scheduler slot (queued tasks and parked handlers that want to continue).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(queued as u64))?;
        enc.encode_descriptor(
            "subtask_scheduler_max_running",
            "The most handlers allowed to run at once (--max-running).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(max_running as u64))?;

        if let Some(store) = runtime.store() {
            enc.encode_descriptor(
                "subtask_store_writable",
                "1 when the task store accepts new work; 0 when it is full (writes held) or failed.",
                None,
                MetricType::Gauge,
            )?
            .encode_gauge(&u64::from(store.writable().is_ok()))?;
            if let Some(c) = store.commit_stats() {
                let d = c.duration();
                enc.encode_descriptor(
                    "subtask_store_commit_duration_seconds",
                    "Time of one group commit of the store's writer (the transaction; PostgreSQL's includes the WAL flush, SQLite's a flush only without a stage of its own).",
                    None,
                    MetricType::Histogram,
                )?
                .encode_histogram::<NoLabelSet>(d.sum, d.count, &per_bucket(&d), None)?;
                let g = c.group_size();
                enc.encode_descriptor(
                    "subtask_store_commit_group_size",
                    "Batches (one per runtime command) in one group commit.",
                    None,
                    MetricType::Histogram,
                )?
                .encode_histogram::<NoLabelSet>(g.sum, g.count, &per_bucket(&g), None)?;
                let s = c.sync_duration();
                enc.encode_descriptor(
                    "subtask_store_sync_duration_seconds",
                    "Time of one fsync of the write-ahead log in a stage of its own (SQLite with full durability and group commit; it makes every commit since the last one durable). No observations with another store or setting.",
                    None,
                    MetricType::Histogram,
                )?
                .encode_histogram::<NoLabelSet>(s.sum, s.count, &per_bucket(&s), None)?;
            }
        }

        let http = &server.inner.http_stats;
        {
            let mut m = enc.encode_descriptor(
                "subtask_http_requests",
                "Requests to /mcp answered, by JSON-RPC method (a fixed list; other, notification, response, or none when no message was read) and HTTP status code.",
                None,
                MetricType::Counter,
            )?;
            for (method, code, n) in http.requests() {
                let code = code.to_string();
                m.encode_family(&[("method", method), ("code", code.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
            }
        }
        enc.encode_descriptor(
            "subtask_http_open_streams",
            "SSE streams open now (subscriptions/listen, legacy tasks/result, the web view's live trees).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(http.open_streams() as u64))?;
        if let Some(hub) = &server.inner.workers {
            use std::sync::atomic::Ordering::Relaxed;
            let (connected, running, waiting) = hub.load();
            let gauges = [
                (
                    "subtask_workers_connected",
                    "Workers connected at /workers now.",
                    connected,
                ),
                (
                    "subtask_worker_tasks_running",
                    "Tasks assigned to a connected worker now.",
                    running,
                ),
                (
                    "subtask_worker_tasks_waiting",
                    "Worker-tool tasks waiting for a worker with a free slot.",
                    waiting,
                ),
            ];
            for (name, help, n) in gauges {
                enc.encode_descriptor(name, help, None, MetricType::Gauge)?
                    .encode_gauge(&(n as u64))?;
            }
            let counters = [
                (
                    "subtask_worker_assignments",
                    "Assignments of tasks to workers (a task assigned again after a worker's loss counts again).",
                    &hub.stats.assignments,
                ),
                (
                    "subtask_worker_lease_losses",
                    "Workers that went silent past their lease (their tasks assigned again).",
                    &hub.stats.lease_losses,
                ),
                (
                    "subtask_worker_refused_reports",
                    "Reports of an attempt that was no longer current, refused.",
                    &hub.stats.refused_reports,
                ),
            ];
            for (name, help, n) in counters {
                enc.encode_descriptor(name, help, None, MetricType::Counter)?
                    .encode_counter::<NoLabelSet, _, u64>(&n.load(Relaxed), None)?;
            }
        }
        enc.encode_descriptor(
            "subtask_build_info",
            "Always 1; the version label is the running subtask's.",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?
        .encode_gauge(&1u64)?;
        Ok(())
    }
}
