//! Every task's tracing span: one span named `task` per task, created with
//! the task (so a task cancelled while still queued has one too), whose
//! parent is its parent task's span (a root's: the span current where it
//! was started), so a trace shows the tree.
//!
//! The span's fields use the names an OpenTelemetry backend shows as
//! attributes (`subtask.task_id`, `subtask.parent_task_id`,
//! `subtask.root_task_id`). What only an exporter needs (the tool, the
//! `task <tool>` span name, the final status, a remote parent's W3C
//! `traceparent`) is recorded only when the target [`STATUS_TARGET`] is
//! enabled at `TRACE` level, so a plain log subscriber pays one cached
//! interest check per task for it and nothing more. This module must not
//! depend on an OpenTelemetry crate: the `subtask` binary's `otlp` layer
//! turns these spans into OTLP spans.

use tracing::Span;
use tracing::field::Empty;

use crate::core::{Phase, TaskRecord, Terminal};
use crate::model::{TaskId, TaskStatus};

/// The tracing target that, enabled at `TRACE` level, makes the runtime
/// record on each task's span what an exporter needs beyond the ids:
/// `subtask.tool`, `otel.name` (`task <tool>`), `traceparent` (a root
/// started by a request that carried W3C trace context), and once the task
/// is terminal `subtask.status` (`completed`, `failed`, `cancelled`) with
/// `otel.status_code = "error"` and `otel.status_description` (the error's
/// message) for a failed task. The `subtask` binary's OTLP layer enables
/// it; a `tracing-opentelemetry` layer of your own gets the same by
/// enabling this target.
pub const STATUS_TARGET: &str = "subtask::otel";

/// Whether anyone wants the exporter's fields (see [`STATUS_TARGET`]): a
/// cached callsite interest, a few instructions when no one does.
pub(crate) fn exporting() -> bool {
    tracing::enabled!(target: "subtask::otel", tracing::Level::TRACE)
}

/// A new task's span, a child of `parent` (its parent task's span, or for a
/// root the span that started it).
pub(crate) fn task_span(
    parent: &Span,
    id: TaskId,
    parent_id: Option<TaskId>,
    root: TaskId,
    tool: Option<&str>,
    traceparent: Option<&str>,
) -> Span {
    let span = tracing::info_span!(
        parent: parent,
        "task",
        subtask.task_id = %id,
        subtask.parent_task_id = parent_id.map(tracing::field::display),
        subtask.root_task_id = %root,
        subtask.tool = Empty,
        subtask.status = Empty,
        otel.name = Empty,
        otel.status_code = Empty,
        otel.status_description = Empty,
        traceparent = Empty,
    );
    if !span.is_disabled() && exporting() {
        if let Some(tool) = tool {
            span.record("subtask.tool", tool);
            span.record("otel.name", format!("task {tool}"));
        }
        if let Some(traceparent) = traceparent {
            span.record("traceparent", traceparent);
        }
    }
    span
}

/// Records how the task of `span` ended (`rec` is terminal), when an
/// exporter wants it ([`STATUS_TARGET`]). Called once per task, as it turns
/// terminal.
pub(crate) fn record_end(span: &Span, rec: &TaskRecord) {
    if span.is_disabled() || !exporting() {
        return;
    }
    let status = match rec.phase() {
        Phase::Active(_) => return,
        Phase::Terminal(Terminal::Completed { .. }) => TaskStatus::Completed,
        Phase::Terminal(Terminal::Cancelled { .. }) => TaskStatus::Cancelled,
        Phase::Terminal(Terminal::Failed { error }) => {
            span.record("otel.status_code", "error");
            span.record("otel.status_description", error.message.as_str());
            TaskStatus::Failed
        }
    };
    span.record("subtask.status", status.as_str());
}
