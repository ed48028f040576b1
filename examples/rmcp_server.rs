//! An rmcp server that keeps its own tools and gains subtask's: a tool that
//! fans out into subtasks, with ordered results, steer, pause and (with
//! `--db PATH`) durability across restarts.
//!
//! `cargo run --features rmcp,sqlite,client --example rmcp_server -- [--db PATH]`,
//! then `subtask call research '{"topics": ["tides", "lichens"]}' --stream --url http://127.0.0.1:8752/mcp`,
//! or any 2026-07-28 client at `http://127.0.0.1:8752/mcp`.
use std::sync::Arc;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_router};
use subtask::prelude::*;
use subtask::rmcp::WithSubtasks;

/// The author's rmcp server, as it was: one quick tool.
#[derive(Clone)]
pub struct Notes;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Shout {
    text: String,
}

#[tool_router(server_handler)]
impl Notes {
    #[tool(description = "Repeats the text in capitals.")]
    fn shout(&self, Parameters(Shout { text }): Parameters<Shout>) -> String {
        text.to_uppercase()
    }
}

/// The arguments of `research`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Research {
    /// One subtask per topic, results in this order.
    topics: Vec<String>,
    /// Steps of work per topic, a safe point before each.
    #[serde(default = "three")]
    steps: u32,
    /// Milliseconds per step.
    #[serde(default = "hundred")]
    step_ms: u64,
}

fn three() -> u32 {
    3
}

fn hundred() -> u64 {
    100
}

/// subtask's side: `research`, one subtask per topic. Each subtask stops at
/// a safe point, where a steer message is read and a pause parks it.
pub fn subtasks(runtime: Runtime) -> Server {
    let spec = ToolSpec::typed::<Research>(
        "research",
        "Researches each topic in a subtask.",
        TaskSupport::Required,
    )
    .resumable();
    Server::builder(runtime, ServerConfig::default())
        .tool(spec, |call: ToolCall| async move {
            let Research {
                topics,
                steps,
                step_ms,
            } = match call.args() {
                Ok(args) => args,
                Err(tool_error) => return tool_error,
            };
            ToolOutcome::task(move |ctx| async move {
                let mut notes = Vec::new();
                for topic in topics {
                    let opts = SubtaskOptions::default().named("research").args(&topic);
                    notes.push(ctx.spawn_subtask(opts, move |ctx| async move {
                        let mut steers = Vec::new();
                        for step in 0..steps {
                            steers.extend(ctx.checkpoint().await?);
                            // A durable step: after a restart (with --db)
                            // a finished one is not run again.
                            let wait = std::time::Duration::from_millis(step_ms);
                            ctx.step(&format!("step {step}"), || ctx.external(tokio::time::sleep(wait)))
                                .await?;
                        }
                        Ok(text_result(match steers.is_empty() {
                            true => format!("notes on {topic}"),
                            false => format!("notes on {topic}, steered: {}", steers.join("; ")),
                        }))
                    })?);
                }
                // The root runs until its notes are in: after a restart
                // (with --db) it resumes where it stopped; finished topics
                // and steps are not researched again.
                let (n, mut done) = (notes.len(), 0);
                for note in notes {
                    if let TaskOutcome::Completed(_) = note.await {
                        done += 1;
                    }
                }
                Ok(text_result(format!("research done ({done}/{n})")))
            })
        })
        .build()
}

/// The `/mcp` endpoint: subtask's in front for the tasks requests and
/// subtask's tools (the tree on the wire), rmcp's service behind.
pub fn app(server: Server) -> axum::Router {
    subtask::rmcp::router(server.clone(), service(server))
}

/// The rmcp Streamable HTTP service: the author's handler wrapped.
pub fn service(server: Server) -> StreamableHttpService<WithSubtasks<Notes>, LocalSessionManager> {
    StreamableHttpService::new(
        move || Ok(WithSubtasks::new(Notes, server.clone())),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = match args.iter().position(|a| a == "--db") {
        Some(i) => {
            let path = args.get(i + 1).ok_or("--db needs a path")?;
            let store = subtask::store::SqliteStore::open(subtask::store::SqliteConfig::new(path))?;
            Runtime::with_store(RuntimeConfig::default(), Arc::new(store))
        }
        None => Runtime::new(RuntimeConfig::default()),
    };
    let server = subtasks(runtime);
    let report = server.recover().await?; // brings back the trees of --db
    println!(
        "recovered {} trees; serving MCP at http://127.0.0.1:8752/mcp",
        report.trees
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8752").await?;
    axum::serve(listener, app(server)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
        ClientRequest, CustomRequest, GetTaskParams, Implementation, ProtocolVersion, TaskPayload,
    };
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
    use rmcp::transport::StreamableHttpClientTransport;
    use serde_json::{Value, json};
    use subtask::client::CallStart;

    use super::*;

    /// A hang guard, never a timing assertion.
    const GUARD: Duration = Duration::from_secs(30);

    /// The example as `main` serves it (memory store), on a free port.
    async fn start() -> String {
        let server = subtasks(Runtime::new(RuntimeConfig {
            default_poll_interval_ms: Some(20),
            ..RuntimeConfig::default()
        }));
        let app = app(server);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url
    }

    fn args(v: Value) -> JsonObject {
        JsonObject::from_value(v).unwrap()
    }

    fn text(result: &JsonObject) -> &str {
        result["content"][0]["text"].as_str().unwrap_or_default()
    }

    async fn until(client: &Client, id: TaskId, pred: impl Fn(&DetailedTask) -> bool) -> DetailedTask {
        tokio::time::timeout(GUARD, async {
            loop {
                let task = client.get(id).await.unwrap();
                if pred(&task) {
                    return task;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the task reaches the state")
    }

    /// Our client through the rmcp server: the author's tool answers, and
    /// subtask's tool is a tree whose results arrive in order.
    #[tokio::test]
    async fn our_client_walks_subtask_trees_of_the_rmcp_server() {
        let client = Client::http(&start().await).unwrap();
        let tools: Vec<String> = client
            .list_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            tools,
            ["shout", "research"],
            "the handler's tools, then subtask's"
        );
        let discovered = client.discover().await.unwrap();
        assert_eq!(
            discovered["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"],
            json!({"steer": true, "pause": true}),
            "{discovered:?}"
        );

        let shout = client
            .call_tool("shout", args(json!({"text": "hi"})))
            .await
            .unwrap();
        assert_eq!(text(&shout), "HI");

        let parts = client
            .call_tool_stream(
                "research",
                args(json!({"topics": ["tides", "lichens", "moss"], "steps": 1, "step_ms": 1})),
            )
            .await
            .unwrap();
        let root = parts.root_task_id().expect("research is a task");
        let texts: Vec<String> = parts
            .map(|p| match p.unwrap().outcome {
                TaskOutcome::Completed(r) => text(&r).to_owned(),
                other => panic!("{other:?}"),
            })
            .collect()
            .await;
        assert_eq!(
            texts,
            [
                "notes on tides",
                "notes on lichens",
                "notes on moss",
                "research done (3/3)"
            ]
        );
        let tree = client.get_tree(root).await.unwrap();
        assert_eq!(tree.len(), 4, "{tree:?}");
        let root_task = client.get(root).await.unwrap();
        for child in &root_task.task().child_task_ids {
            assert_eq!(
                client.get(*child).await.unwrap().task().parent_task_id,
                Some(root)
            );
        }

        // Bad arguments are a tool error, from subtask's schema check.
        let bad = client
            .call_tool("research", args(json!({"topics": "tides"})))
            .await
            .unwrap();
        assert_eq!(bad["isError"], true, "{bad:?}");
    }

    /// Steer a subtask, pause the tree, resume it, cancel another, all
    /// through the rmcp server with our client.
    #[tokio::test]
    async fn steer_pause_resume_and_cancel_through_the_rmcp_server() {
        let client = Client::http(&start().await).unwrap();
        let slow = || args(json!({"topics": ["tides", "lichens"], "steps": 100, "step_ms": 10}));
        let CallStart::Task(seed) = client.start_tool("research", slow()).await.unwrap() else {
            panic!("research is a task");
        };
        let root = seed.task().task_id;
        let children = until(&client, root, |t| t.task().child_task_ids.len() == 2)
            .await
            .task()
            .child_task_ids
            .clone();
        client.steer(children[0], "look at estuaries").await.unwrap();
        client.pause(root).await.unwrap();
        for id in [root, children[0], children[1]] {
            until(&client, id, |t| t.status() == TaskStatus::Paused).await;
        }
        client.resume(root).await.unwrap();
        let done = client.wait_task(root).await.unwrap();
        assert_eq!(text(&done), "research done (2/2)");
        let first = client.get(children[0]).await.unwrap();
        let subtask::model::TaskPayload::Completed { result } = first.payload() else {
            panic!("{first:?}");
        };
        assert_eq!(text(result), "notes on tides, steered: look at estuaries");

        let CallStart::Task(seed) = client.start_tool("research", slow()).await.unwrap() else {
            panic!("research is a task");
        };
        let other = seed.task().task_id;
        let children = until(&client, other, |t| t.task().child_task_ids.len() == 2)
            .await
            .task()
            .child_task_ids
            .clone();
        client.cancel(other).await.unwrap();
        for id in [other, children[0], children[1]] {
            until(&client, id, |t| t.status() == TaskStatus::Cancelled).await;
        }
    }

    async fn rmcp_client(url: &str) -> RunningService<RoleClient, ClientConfig> {
        let capabilities = ClientCapabilities::builder().enable_tasks().build();
        let info = ClientConfig::new(capabilities, Implementation::new("rmcp-example-test", "0"));
        // With `oauth` on, reqwest's rustls needs a provider (`subtask::tls`).
        #[cfg(feature = "oauth")]
        subtask::tls::install_provider();
        info.serve_with_lifecycle(
            StreamableHttpClientTransport::from_uri(url.to_owned()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("rmcp connects with server/discover")
    }

    async fn poll(client: &RunningService<RoleClient, ClientConfig>, id: &str) -> rmcp::model::DetailedTask {
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

    /// rmcp's own client: both kinds of tools, a task polled to its result,
    /// and a steer sent as the custom request rmcp knows it as.
    #[tokio::test]
    async fn rmcp_client_drives_the_example() {
        let client = rmcp_client(&start().await).await;
        assert!(client.peer_info().unwrap().capabilities.supports_tasks());
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["shout", "research"]);

        let call =
            CallToolRequestParams::new("shout").with_arguments(args(json!({"text": "hey"})).as_map().clone());
        let CallToolResponse::Complete(r) = client.call_tool_once(call).await.unwrap() else {
            panic!("shout answers at once");
        };
        assert_eq!(r.content[0].as_text().unwrap().text, "HEY");

        let research = |steps: u32| {
            CallToolRequestParams::new("research").with_arguments(
                args(json!({"topics": ["tides"], "steps": steps, "step_ms": 10}))
                    .as_map()
                    .clone(),
            )
        };
        let CallToolResponse::Task(created) = client.call_tool_once(research(1)).await.unwrap() else {
            panic!("research becomes a task");
        };
        let done = poll(&client, &created.task.task_id).await;
        let TaskPayload::Completed { result } = &done.payload else {
            panic!("{done:?}");
        };
        assert_eq!(result["content"][0]["text"], "research done (1/1)");

        let CallToolResponse::Task(created) = client.call_tool_once(research(1000)).await.unwrap() else {
            panic!("research becomes a task");
        };
        let id = created.task.task_id.clone();
        // rmcp sends tasks/steer as a custom request without the `Mcp-Name`
        // header SEP-2669 requires, and subtask's endpoint says so.
        let steer = CustomRequest::new("tasks/steer", Some(json!({"taskId": id, "message": "faster"})));
        let refused = client
            .send_request(ClientRequest::CustomRequest(steer))
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("missing Mcp-Name header"),
            "{refused}"
        );
        client
            .cancel_task(CancelTaskParams::new(id.clone()))
            .await
            .expect("tasks/cancel");
        assert_eq!(
            poll(&client, &id).await.status(),
            rmcp::model::TaskStatus::Cancelled
        );
        client.cancel().await.unwrap();
    }
}

#[cfg(test)]
mod durability {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use subtask::client::CallStart;
    use subtask::store::{SqliteConfig, SqliteStore};

    use super::*;

    fn tokio() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// `main` with `--db`: the server on a SQLite file, its `/mcp` on a free port.
    async fn serve_on(db: &std::path::Path) -> (String, subtask::runtime::RecoveryReport) {
        let store = SqliteStore::open(SqliteConfig::new(db)).expect("open the database");
        let runtime = Runtime::with_store(
            RuntimeConfig {
                default_poll_interval_ms: Some(20),
                ..RuntimeConfig::default()
            },
            Arc::new(store),
        );
        let server = subtasks(runtime);
        let report = server.recover().await.expect("recover");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app(server)).await });
        (url, report)
    }

    /// With a database, research under way when the server stops (its tokio
    /// runtime dropped, with every handler, as at a process exit) is brought
    /// back by the next server: the resumable root runs again and its
    /// subtasks resume in place (same ids, their finished steps not run
    /// again), and the root ends.
    #[test]
    fn with_a_database_research_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("subtask-rmcp-example-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("research.db");
        let (root, before) = tokio().block_on(async {
            let (url, report) = serve_on(&db).await;
            assert_eq!(report.trees, 0);
            let client = Client::http(&url).unwrap();
            let args =
                JsonObject::from_value(json!({"topics": ["tides", "lichens"], "steps": 100, "step_ms": 20}))
                    .unwrap();
            let CallStart::Task(seed) = client.start_tool("research", args).await.unwrap() else {
                panic!("research is a task");
            };
            let root = seed.task().task_id;
            let children = tokio::time::timeout(Duration::from_secs(30), async {
                loop {
                    let t = client.get(root).await.unwrap();
                    if t.task().child_task_ids.len() == 2 {
                        return t.task().child_task_ids.clone();
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("two subtasks");
            (root, children)
        });
        // The restart.
        tokio().block_on(async {
            let (url, report) = serve_on(&db).await;
            assert_eq!(report.trees, 1, "{report:?}");
            assert_eq!(
                (report.rerun, report.resumed, report.failed),
                (1, 2, 0),
                "{report:?}"
            );
            let client = Client::http(&url).unwrap();
            let done = tokio::time::timeout(Duration::from_secs(60), client.wait_task(root))
                .await
                .expect("the research ends")
                .unwrap();
            assert_eq!(done["content"][0]["text"], "research done (2/2)", "{done:?}");
            let tree = client.get(root).await.unwrap();
            let ids = tree.task().child_task_ids.clone();
            assert_eq!(
                ids, before,
                "the same subtasks, resumed in place: nothing appended"
            );
            for id in &ids {
                assert_eq!(client.get(*id).await.unwrap().status(), TaskStatus::Completed);
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
