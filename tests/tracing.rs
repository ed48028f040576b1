//! Every task is a span, and a subtask's span is a child of its parent
//! task's span (a root's, of the span that started it), so a trace shows
//! the tree — also for subtasks that were queued behind `after`
//! dependencies and started later from another task's exit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use subtask::prelude::*;
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Span id -> (name, task_id field, parent span id).
type Spans = Arc<Mutex<HashMap<u64, (String, Option<String>, Option<u64>)>>>;

struct Record(Spans);

struct TaskIdField(Option<String>);

impl Visit for TaskIdField {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "task_id" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Record {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut field = TaskIdField(None);
        attrs.record(&mut field);
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
        let name = attrs.metadata().name().to_owned();
        self.0
            .lock()
            .unwrap()
            .insert(id.into_u64(), (name, field.0, parent));
    }
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
    let span_of = |task: TaskId| {
        let want = task.to_string();
        let found: Vec<_> = spans
            .iter()
            .filter(|(_, (name, t, _))| name == "task" && t.as_deref() == Some(want.as_str()))
            .collect();
        assert_eq!(found.len(), 1, "one span for task {want}");
        (*found[0].0, found[0].1.2)
    };
    for t in &tree {
        let (_, parent_span) = span_of(t.task().task_id);
        match t.task().parent_task_id {
            Some(parent) => assert_eq!(parent_span, Some(span_of(parent).0), "task {}", t.task().task_id),
            None => {
                assert_eq!(t.task().task_id, root);
                let parent = parent_span.expect("the root's span has the request as parent");
                assert_eq!(spans[&parent].0, "request");
            }
        }
    }
}
