//! Every HTTP request runs in a span of its own (`http`, at `DEBUG`, made by
//! tower-http's `TraceLayer`): its method and path, and on `/mcp` the
//! JSON-RPC method (from the 2026 wire's `Mcp-Method` header, or from the
//! body of an older client's request) and, for a `tasks/*` request, the
//! task (`docs/operations.md`).

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::server::{Server, ServerConfig, TaskSupport, ToolCall, ToolOutcome, ToolSpec, text_result};
use support::http::{Client, fetch, full_caps, raw};
use tracing::Subscriber;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// The fields of every `http` span, in the order the spans were made.
type Spans = Arc<Mutex<Vec<(u64, HashMap<String, String>)>>>;

struct Record(Spans);

#[path = "support/span_fields.rs"]
mod span_fields;
use span_fields::Fields;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Record {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "http" {
            assert_eq!(*attrs.metadata().level(), tracing::Level::DEBUG);
            let mut fields = HashMap::new();
            attrs.record(&mut Fields(&mut fields));
            self.0.lock().unwrap().push((id.into_u64(), fields));
        }
    }

    fn on_record(&self, id: &Id, values: &tracing::span::Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, fields)) = spans.iter_mut().rev().find(|(i, _)| *i == id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
}

/// The fields of the last `http` span made, emptied from `spans`.
fn last(spans: &Spans) -> HashMap<String, String> {
    let mut spans = spans.lock().unwrap();
    let last = spans.pop().expect("an http span").1;
    spans.clear();
    last
}

// Current-thread runtime: the server's connections run on this thread, under
// the subscriber set here.
#[tokio::test]
async fn every_request_has_a_span_naming_its_method_and_task() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(Record(spans.clone())));
    let server = Server::builder(Runtime::new(RuntimeConfig::default()), ServerConfig::default())
        .tool(
            ToolSpec::new(
                "job",
                "A task that completes.",
                json!({"type": "object"}),
                TaskSupport::Required,
            ),
            |_: ToolCall| async move { ToolOutcome::task(|_| async move { Ok(text_result("done")) }) },
        )
        .build();
    let addr = support::http::serve(server).await;
    let client = Client::new(addr, full_caps());

    // The 2026 wire: the method from `Mcp-Method`, the task from `Mcp-Name`.
    let task = client.start_task("job", json!({})).await;
    let call = last(&spans);
    assert_eq!(call["http.request.method"], "POST");
    assert_eq!(call["url.path"], "/mcp");
    assert_eq!(call["mcp.method.name"], "tools/call");
    assert!(!call.contains_key("mcp.task_id"), "{call:?}");
    client.get(&task).await;
    let get = last(&spans);
    assert_eq!(get["mcp.method.name"], "tasks/get");
    assert_eq!(get["mcp.task_id"], task);

    // An older client sends no `Mcp-Method`: the method comes from the body.
    let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}"#;
    let r = raw(
        addr,
        "POST",
        &[("Content-Type", "application/json".to_owned())],
        init,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(last(&spans)["mcp.method.name"], "initialize");

    // A request no route takes, and one the guard refuses, have theirs too.
    let r = fetch(addr, "GET", "/nowhere", &[], b"").await.unwrap();
    assert_eq!(r.status, 404);
    let nowhere = last(&spans);
    assert_eq!(
        (
            nowhere["http.request.method"].as_str(),
            nowhere["url.path"].as_str()
        ),
        ("GET", "/nowhere")
    );
    let r = raw(addr, "POST", &[("Host", "evil.example.com".to_owned())], b"{}").await;
    assert_eq!(r.status, 403);
    let refused = last(&spans);
    assert_eq!(refused["url.path"], "/mcp");
    assert!(!refused.contains_key("mcp.method.name"), "{refused:?}");
}
