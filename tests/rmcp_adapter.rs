//! `subtask::rmcp::WithSubtasks` on rmcp's own Streamable HTTP service,
//! without subtask's front (`subtask::rmcp::router`): what rmcp's typed path
//! carries and what it cannot, principals with bearer tokens, and sessions
//! that began with `initialize`. The example `rmcp_server` covers the front.

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ClientRequest, CustomRequest,
    GetTaskParams, Implementation, ProtocolVersion, ServerCapabilities, ServerConfig as RmcpInfo,
    TaskPayload, TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServiceExt, tool, tool_router};
use serde_json::{Value, json};
use subtask::prelude::*;
use subtask::rmcp::WithSubtasks;
use subtask::server::TokenTable;

/// A hang guard, never a timing assertion.
const GUARD: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Plain;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    text: String,
}

#[tool_router]
impl Plain {
    #[tool(description = "Echoes.")]
    fn echo(
        &self,
        rmcp::handler::server::wrapper::Parameters(Echo { text }): rmcp::handler::server::wrapper::Parameters<
            Echo,
        >,
    ) -> String {
        text
    }
}

#[rmcp::tool_handler]
impl ServerHandler for Plain {
    fn get_info(&self) -> RmcpInfo {
        RmcpInfo::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// `pair`: a task whose root has two subtasks, each answering its index.
fn subtasks(config: subtask::server::ServerConfig) -> Server {
    let runtime = Runtime::new(RuntimeConfig {
        default_poll_interval_ms: Some(20),
        ..RuntimeConfig::default()
    });
    Server::builder(runtime, config)
        .tool(
            ToolSpec::new(
                "pair",
                "Two subtasks.",
                json!({"type": "object"}),
                TaskSupport::Required,
            ),
            |_call: ToolCall| async {
                ToolOutcome::task(|ctx| async move {
                    for i in 0..2 {
                        ctx.spawn_subtask(SubtaskOptions::default(), move |_| async move {
                            Ok(text_result(format!("child {i}")))
                        })?;
                    }
                    Ok(text_result("pair done"))
                })
            },
        )
        .build()
}

/// rmcp's service over `WithSubtasks`, and nothing in front of it.
async fn start(server: Server) -> String {
    // With `oauth` on, reqwest's rustls needs a provider before any client
    // (rmcp's transport's included) is built (`subtask::tls`).
    #[cfg(feature = "oauth")]
    subtask::tls::install_provider();
    let service = StreamableHttpService::new(
        move || Ok(WithSubtasks::new(Plain, server.clone())),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn modern(url: &str, token: Option<&str>) -> RunningService<RoleClient, ClientConfig> {
    let capabilities = ClientCapabilities::builder().enable_tasks().build();
    let info = ClientConfig::new(capabilities, Implementation::new("rmcp-adapter-test", "0"));
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    config.auth_header = token.map(str::to_owned);
    info.serve_with_lifecycle(
        StreamableHttpClientTransport::from_config(config),
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("rmcp connects with server/discover")
}

async fn call_pair(client: &RunningService<RoleClient, ClientConfig>) -> String {
    let CallToolResponse::Task(created) = client
        .call_tool_once(CallToolRequestParams::new("pair"))
        .await
        .expect("tools/call")
    else {
        panic!("pair is a task");
    };
    created.task.task_id
}

async fn until_terminal(
    client: &RunningService<RoleClient, ClientConfig>,
    id: &str,
) -> rmcp::model::DetailedTask {
    tokio::time::timeout(GUARD, async {
        loop {
            let got = client.get_task(GetTaskParams::new(id)).await.expect("tasks/get");
            if got.task.status().is_terminal() {
                return got.task;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the task ends")
}

/// Through rmcp's typed path: the handler's tool and subtask's, a task
/// polled to its result, a steer (rmcp's transport does not ask for
/// `Mcp-Name` on custom requests). The tree's links are the one loss: rmcp's
/// `GetTaskResult` has no `childTaskIds`, which is why the example puts
/// `subtask::rmcp::router` in front.
#[tokio::test]
async fn rmcps_typed_path_runs_subtask_tasks_but_cannot_carry_the_tree() {
    let server = subtasks(subtask::server::ServerConfig::default());
    let url = start(server.clone()).await;
    let client = modern(&url, None).await;
    assert!(client.peer_info().unwrap().capabilities.supports_tasks());
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["echo", "pair"]);

    let id = call_pair(&client).await;
    let done = until_terminal(&client, &id).await;
    let TaskPayload::Completed { result } = &done.payload else {
        panic!("{done:?}");
    };
    assert_eq!(result["content"][0]["text"], "pair done");
    // The runtime holds the tree; rmcp's typed answer drops the links.
    let root: TaskId = id.parse().unwrap();
    let ours = server.runtime().get(root, ClientView::PAUSE_AWARE).unwrap();
    assert_eq!(ours.task().child_task_ids.len(), 2);
    let raw = reqwest_get(&url, &id).await;
    assert_eq!(raw["result"]["status"], "completed", "{raw}");
    assert!(
        raw["result"].get("childTaskIds").is_none(),
        "rmcp 3.11 learned childTaskIds: {raw}"
    );

    // A steer reaches the runtime (the task has ended: a clear -32602).
    let steer = CustomRequest::new("tasks/steer", Some(json!({"taskId": id, "message": "late"})));
    let refused = client
        .send_request(ClientRequest::CustomRequest(steer))
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "Mcp error: -32602: task is already completed"
    );
    // Params that are not an object are a params error, not a crash
    // (rmcp's transport hands them on as an object carrying only `_meta`).
    let odd = CustomRequest::new("tasks/steer", Some(json!(5)));
    let refused = client
        .send_request(ClientRequest::CustomRequest(odd))
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "Mcp error: -32602: invalid params for tasks/steer: missing field `taskId`"
    );
    client.cancel().await.unwrap();
}

/// `tasks/get` as a raw 2026-07-28 POST (what any client sees on the wire).
async fn reqwest_get(url: &str, id: &str) -> Value {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tasks/get",
        "params": {"taskId": id, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
        }}
    });
    let response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tasks/get")
        .header("mcp-name", id)
        .json(&body)
        .send()
        .await
        .unwrap();
    let text = response.text().await.unwrap();
    // rmcp answers with SSE: the message is on a `data:` line.
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(text.as_str())
        .to_owned();
    serde_json::from_str(&data).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// With bearer tokens in subtask's `ServerConfig`, the adapter reads the
/// token rmcp's transport received: tasks belong to their principal, and a
/// request without a known token is refused.
#[tokio::test]
async fn tasks_belong_to_the_principal_of_the_bearer_token() {
    let mut tokens = TokenTable::default();
    tokens.insert("alice-token", "alice");
    tokens.insert("bob-token", "bob");
    let server = subtasks(subtask::server::ServerConfig {
        tokens: Some(tokens),
        ..Default::default()
    });
    let url = start(server).await;
    let alice = modern(&url, Some("alice-token")).await;
    let bob = modern(&url, Some("bob-token")).await;
    let id = call_pair(&alice).await;
    assert_eq!(until_terminal(&alice, &id).await.status(), TaskStatus::Completed);
    let hidden = bob.get_task(GetTaskParams::new(id.as_str())).await.unwrap_err();
    // Another principal's task is as unknown as a task that never was.
    assert_eq!(
        hidden.to_string(),
        "Mcp error: -32602: Failed to retrieve task: Task not found"
    );
    let nobody = modern(&url, None).await;
    let refused = nobody
        .call_tool_once(CallToolRequestParams::new("pair"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("unauthorized"), "{refused}");
    // The handler's own tools stay the handler's business.
    let echoed = nobody
        .call_tool_once(
            CallToolRequestParams::new("echo")
                .with_arguments(json!({"text": "hi"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert!(matches!(echoed, CallToolResponse::Complete(_)));
}

/// A session that began with `initialize` (rmcp's default) is the
/// handler's alone: subtask's tools are not listed, the handler's work.
#[tokio::test]
async fn an_initialize_session_sees_only_the_handler() {
    let url = start(subtasks(subtask::server::ServerConfig::default())).await;
    let client = ().serve(StreamableHttpClientTransport::from_uri(url)).await.unwrap();
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["echo"]);
    let r = client
        .call_tool(
            CallToolRequestParams::new("echo")
                .with_arguments(json!({"text": "hi"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(r.content[0].as_text().unwrap().text, "hi");
    let e = client
        .call_tool(CallToolRequestParams::new("pair"))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Mcp error: -32602: tool not found",
        "the handler answers it"
    );
    client.cancel().await.unwrap();
}
