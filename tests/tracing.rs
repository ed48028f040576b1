//! Every task is a span, and a subtask's span is a child of its parent
//! task's span (a root's, of the span that started it), so a trace shows
//! the tree — also for subtasks that were queued behind `after`
//! dependencies and started later from another task's exit. A task that
//! ends before it ever started (cancelled while queued) has its span too,
//! and every span records its task's final status (what an OTLP exporter
//! needs; `tests/otlp.rs` checks the exported spans end to end).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use subtask::prelude::*;
use tracing::Subscriber;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Span id -> (name, fields recorded, parent span id).
type SpanMap = HashMap<u64, (String, HashMap<String, String>, Option<u64>)>;
type Spans = Arc<Mutex<SpanMap>>;

struct Record(Spans);

#[path = "support/span_fields.rs"]
mod span_fields;
use span_fields::Fields;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Record {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
        let name = attrs.metadata().name().to_owned();
        self.0
            .lock()
            .unwrap()
            .insert(id.into_u64(), (name, fields, parent));
    }

    fn on_record(&self, id: &Id, values: &tracing::span::Record<'_>, _: Context<'_, S>) {
        if let Some(span) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut span.1));
        }
    }
}

/// The one `task` span of `task`: (span id, parent span id, fields).
fn span_of(spans: &SpanMap, task: TaskId) -> (u64, Option<u64>, HashMap<String, String>) {
    let want = task.to_string();
    let found: Vec<_> = spans
        .iter()
        .filter(|(_, (name, f, _))| name == "task" && f.get("subtask.task_id") == Some(&want))
        .collect();
    assert_eq!(found.len(), 1, "one span for task {want}");
    (*found[0].0, found[0].1.2, found[0].1.1.clone())
}

#[test]
fn a_task_span_is_a_child_of_its_parent_task_span() {
    let spans: Spans = Arc::default();
    let subscriber = tracing_subscriber::registry().with(Record(spans.clone()));
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt_tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (root, tree) = rt_tokio.block_on(async {
        let request = tracing::info_span!("request");
        let rt = Runtime::new(RuntimeConfig::default());
        let root = {
            let _enter = request.enter();
            rt.spawn(RootOptions::default(), |ctx| async move {
                let first = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
                    let leaf =
                        ctx.spawn_subtask(SubtaskOptions::default(), |_| async { Ok(JsonObject::new()) })?;
                    leaf.await;
                    Ok(JsonObject::new())
                })?;
                // Queued behind `first`: started later, from another task's exit.
                let _second = ctx.spawn_subtask(SubtaskOptions::default().after(&[&first]), |_| async {
                    Ok(JsonObject::new())
                })?;
                Ok(JsonObject::new())
            })
        };
        let done = rt.wait(root, ClientView::BASE).await.unwrap();
        assert_eq!(done.status(), TaskStatus::Completed);
        let mut tree = vec![done.clone()];
        let mut i = 0;
        while i < tree.len() {
            for c in tree[i].task().child_task_ids.clone() {
                tree.push(rt.get(c, ClientView::BASE).unwrap());
            }
            i += 1;
        }
        (root, tree)
    });
    assert_eq!(tree.len(), 4);
    let spans = spans.lock().unwrap();
    for t in &tree {
        let (_, parent_span, fields) = span_of(&spans, t.task().task_id);
        assert_eq!(fields["subtask.status"], "completed");
        assert_eq!(fields["subtask.root_task_id"], root.to_string());
        match t.task().parent_task_id {
            Some(parent) => {
                assert_eq!(
                    parent_span,
                    Some(span_of(&spans, parent).0),
                    "task {}",
                    t.task().task_id
                );
                assert_eq!(fields["subtask.parent_task_id"], parent.to_string());
            }
            None => {
                assert_eq!(t.task().task_id, root);
                let parent = parent_span.expect("the root's span has the request as parent");
                assert_eq!(spans[&parent].0, "request");
                assert!(!fields.contains_key("subtask.parent_task_id"));
            }
        }
    }
}

#[test]
fn a_task_that_never_started_has_a_span_with_its_final_status() {
    let spans: Spans = Arc::default();
    let subscriber = tracing_subscriber::registry().with(Record(spans.clone()));
    let _guard = tracing::subscriber::set_default(subscriber);
    let rt_tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (root, first, second, failing) = rt_tokio.block_on(async {
        let rt = Runtime::new(RuntimeConfig::default());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let root = rt.spawn(RootOptions::default(), move |ctx| async move {
            let failing = ctx.spawn_subtask(SubtaskOptions::default(), |_| async {
                Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "it broke"))
            })?;
            failing.outcome().await;
            // Runs until cancelled.
            let first = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
                ctx.cancelled().await;
                Ok(JsonObject::new())
            })?;
            // Queued behind `first`: it never starts.
            let second = ctx.spawn_subtask(SubtaskOptions::default().after(&[&first]), |_| async {
                Ok(JsonObject::new())
            })?;
            let _ = tx.send((first.id(), second.id(), failing.id()));
            ctx.cancelled().await;
            Ok(JsonObject::new())
        });
        let (first, second, failing) = rx.await.unwrap();
        let _ = rt.cancel(root).unwrap();
        let done = rt.wait(root, ClientView::BASE).await.unwrap();
        assert_eq!(done.status(), TaskStatus::Cancelled);
        let second_task = rt.get(second, ClientView::BASE).unwrap();
        assert_eq!(second_task.status(), TaskStatus::Cancelled);
        (root, first, second, failing)
    });
    let spans = spans.lock().unwrap();
    let (root_span, _, root_fields) = span_of(&spans, root);
    assert_eq!(root_fields["subtask.status"], "cancelled");
    for (task, status) in [(first, "cancelled"), (second, "cancelled"), (failing, "failed")] {
        let (_, parent, fields) = span_of(&spans, task);
        assert_eq!(parent, Some(root_span), "{task} is under the root's span");
        assert_eq!(fields["subtask.status"], status, "{task}");
    }
    let (_, _, failed) = span_of(&spans, failing);
    assert_eq!(failed["otel.status_code"], "error");
    assert_eq!(failed["otel.status_description"], "it broke");
    assert!(!root_fields.contains_key("otel.status_code"));
}
