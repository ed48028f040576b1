//! rmcp 3.11's client, a client nobody here wrote, drives the subtask server
//! over Streamable HTTP on 127.0.0.1 through a task's whole life: discovery,
//! `tools/list`, a `tools/call` that becomes a task, `tasks/get` polling,
//! input requested by the task and answered with `tasks/update`, the final
//! result, and `tasks/cancel`. The legacy path (`initialize`, rmcp's
//! default) is driven too.

mod support;

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, ProtocolVersion, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use subtask::model::{ErrorCode, ErrorObject};
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::server::{
    Server, ServerConfig, TaskSupport, ToolCall, ToolOutcome, ToolSpec, elicitation, text_result,
};

/// A hang guard, never a timing assertion.
const GUARD: Duration = Duration::from_secs(30);

/// Our server with the demo tools and `greet_task` (asks for a name inside
/// the task, then greets), polled every 20 ms.
async fn start() -> String {
    let runtime = Runtime::new(RuntimeConfig {
        default_poll_interval_ms: Some(20),
        ..RuntimeConfig::default()
    });
    let builder = Server::builder(runtime, ServerConfig::default()).tool(
        ToolSpec::new(
            "greet_task",
            "Asks for a name (as a task), then greets.",
            json!({"type": "object"}),
            TaskSupport::Required,
        ),
        |_call: ToolCall| async move {
            ToolOutcome::task(|ctx| async move {
                let answer = ctx
                    .request_input(
                        "name",
                        elicitation("Your name?", json!({"name": {"type": "string"}}), &["name"]),
                    )
                    .await?;
                let name = answer["content"]["name"]
                    .as_str()
                    .unwrap_or("stranger")
                    .to_owned();
                if name == "fail" {
                    return Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "asked to fail"));
                }
                Ok(text_result(format!("Hello, {name}!")))
            })
        },
    );
    let server = subtask::demo::register(builder).build();
    let addr = support::http::serve(server).await;
    format!("http://{addr}/mcp")
}

/// rmcp's client in the 2026-07-28 lifecycle (`server/discover`, metadata
/// on every request), declaring the tasks extension.
async fn modern_client(url: &str) -> RunningService<RoleClient, ClientConfig> {
    let capabilities = ClientCapabilities::builder().enable_tasks().build();
    let info = ClientConfig::new(capabilities, Implementation::new("rmcp-interop-test", "0"));
    // With `oauth` on, reqwest's rustls needs a provider before any client
    // (rmcp's transport's included) is built (`subtask::tls`).
    #[cfg(feature = "oauth")]
    subtask::tls::install_provider();
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    info.serve_with_lifecycle(
        transport,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("rmcp connects with server/discover")
}

fn args(v: Value) -> rmcp::model::JsonObject {
    v.as_object().cloned().expect("an object")
}

/// Polls `tasks/get` through rmcp until `pred` holds.
async fn poll_until(
    client: &RunningService<RoleClient, ClientConfig>,
    id: &str,
    pred: impl Fn(&rmcp::model::DetailedTask) -> bool,
) -> rmcp::model::DetailedTask {
    tokio::time::timeout(GUARD, async {
        loop {
            let got = client.get_task(GetTaskParams::new(id)).await.expect("tasks/get");
            if pred(&got.task) {
                return got.task;
            }
            let wait = got.task.task.poll_interval_ms.unwrap_or(20).min(100);
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
    })
    .await
    .expect("the task reaches the state")
}

#[tokio::test]
async fn rmcp_drives_a_task_from_creation_to_its_result() {
    let url = start().await;
    let client = modern_client(&url).await;
    let peer = client.peer_info().expect("discovered");
    assert_eq!(peer.protocol_version, ProtocolVersion::V_2026_07_28);
    assert!(peer.capabilities.supports_tasks(), "{:?}", peer.capabilities);

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["greet_task", "fanout", "deep_research"]);

    // A tool call that becomes a task tree.
    let call = CallToolRequestParams::new("fanout")
        .with_arguments(args(json!({"width": 2, "depth": 1, "steps": 1, "stepMs": 5})));
    let CallToolResponse::Task(created) = client.call_tool_once(call).await.expect("tools/call") else {
        panic!("fanout becomes a task for a client that declared the tasks extension");
    };
    assert_eq!(created.task.status, TaskStatus::Working);
    let id = created.task.task_id.clone();
    let done = poll_until(&client, &id, |t| t.status() == TaskStatus::Completed).await;
    let TaskPayload::Completed { result } = &done.payload else {
        panic!("completed without a result: {done:?}");
    };
    assert_eq!(result["structuredContent"]["nodes"], 3);
    assert_eq!(result["isError"], false);
    // The result is a CallToolResult rmcp can read.
    let typed: rmcp::model::CallToolResult = serde_json::from_value(Value::Object(result.clone())).unwrap();
    assert!(
        typed.content[0]
            .as_text()
            .unwrap()
            .text
            .contains("3 of 3 nodes completed")
    );

    // Input requested by a task, answered with tasks/update.
    let call = CallToolRequestParams::new("greet_task");
    let CallToolResponse::Task(created) = client.call_tool_once(call).await.expect("tools/call") else {
        panic!("greet_task is a task");
    };
    let id = created.task.task_id.clone();
    let waiting = poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    let TaskPayload::InputRequired { input_requests } = &waiting.payload else {
        panic!("{waiting:?}");
    };
    assert!(input_requests.contains_key("name"), "{input_requests:?}");
    let responses = [(
        "name".to_owned(),
        json!({"action": "accept", "content": {"name": "Ada"}}),
    )]
    .into();
    client
        .update_task(UpdateTaskParams::new(id.clone(), responses))
        .await
        .expect("tasks/update");
    let done = poll_until(&client, &id, |t| t.status().is_terminal()).await;
    let TaskPayload::Completed { result } = &done.payload else {
        panic!("{done:?}");
    };
    assert_eq!(result["content"][0]["text"], "Hello, Ada!");

    // A task that fails carries its JSON-RPC error.
    let CallToolResponse::Task(created) = client
        .call_tool_once(CallToolRequestParams::new("greet_task"))
        .await
        .unwrap()
    else {
        panic!("a task");
    };
    let id = created.task.task_id.clone();
    poll_until(&client, &id, |t| t.status() == TaskStatus::InputRequired).await;
    let responses = [(
        "name".to_owned(),
        json!({"action": "accept", "content": {"name": "fail"}}),
    )]
    .into();
    client
        .update_task(UpdateTaskParams::new(id.clone(), responses))
        .await
        .unwrap();
    let done = poll_until(&client, &id, |t| t.status().is_terminal()).await;
    let TaskPayload::Failed { error } = &done.payload else {
        panic!("{done:?}");
    };
    assert_eq!(error["message"], "asked to fail");

    // And one cancelled while it waits.
    let CallToolResponse::Task(created) = client
        .call_tool_once(CallToolRequestParams::new("greet_task"))
        .await
        .unwrap()
    else {
        panic!("a task");
    };
    let id = created.task.task_id.clone();
    client
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .expect("tasks/cancel");
    let done = poll_until(&client, &id, |t| t.status().is_terminal()).await;
    assert_eq!(done.status(), TaskStatus::Cancelled);

    client.cancel().await.expect("rmcp closes cleanly");
}

#[tokio::test]
async fn rmcps_default_legacy_lifecycle_gets_results_synchronously() {
    let url = start().await;
    // With `oauth` on, reqwest's rustls needs a provider before any client
    // (rmcp's transport's included) is built (`subtask::tls`).
    #[cfg(feature = "oauth")]
    subtask::tls::install_provider();
    let transport = StreamableHttpClientTransport::from_uri(url);
    let client = ().serve(transport).await.expect("initialize on the legacy path");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "fanout"));
    let result = tokio::time::timeout(
        GUARD,
        client.call_tool(
            CallToolRequestParams::new("fanout")
                .with_arguments(args(json!({"width": 2, "depth": 1, "steps": 1, "stepMs": 5}))),
        ),
    )
    .await
    .unwrap()
    .expect("a legacy client gets the final result of an optional task tool");
    assert_eq!(
        result.structured_content.as_ref().unwrap()["nodes"],
        3,
        "{result:?}"
    );
    // A task-only tool cannot run without the tasks extension: a clear error.
    let e = client
        .call_tool(CallToolRequestParams::new("greet_task"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("runs only as a task"), "{e}");
    client.cancel().await.unwrap();
}
