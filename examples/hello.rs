//! A complete MCP server with one tool that fans out into subtasks.
//!
//! `cargo run --example hello`, then call `greet_all` with any MCP client
//! (e.g. `subtask call greet_all '{"names": ["Ada", "Alan"]}' --stream`):
//! each name is greeted by its own subtask, and the root answers last.
//!
//! With `-- --db hello.db` its tasks are kept in a SQLite file, and the
//! tool is resumable: stop the server mid-way and start it again, and the
//! tree resumes where it stopped; greetings already made are not made
//! again (each is a durable step).
use std::sync::Arc;

use subtask::prelude::*;

/// The arguments of `greet_all`; its input schema is derived from them.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct GreetAll {
    /// Who to greet, one subtask each.
    names: Vec<String>,
}

fn server(runtime: Runtime) -> Server {
    let spec = ToolSpec::typed::<GreetAll>(
        "greet_all",
        "Greets each name in a subtask.",
        TaskSupport::Optional,
    )
    .resumable();
    Server::builder(runtime, ServerConfig::default())
        .tool(spec, |call: ToolCall| async move {
            let GreetAll { names } = match call.args() {
                Ok(args) => args,
                Err(tool_error) => return tool_error,
            };
            ToolOutcome::task(move |ctx| async move {
                let mut greetings = Vec::new();
                for name in names {
                    // Named: a re-run after a restart checks it spawns the same.
                    let opts = SubtaskOptions::default().named("greet").args(&name);
                    greetings.push(ctx.spawn_subtask(opts, move |ctx| async move {
                        ctx.checkpoint().await?; // steer and pause take effect here
                        // The work (a model call, say) as a durable step: done
                        // once, however often the server stops.
                        let greeting = ctx.step("greet", || async { format!("Hello, {name}!") }).await?;
                        Ok(text_result(greeting))
                    })?);
                }
                for greeting in &greetings {
                    greeting.clone().await;
                }
                Ok(text_result(format!("greeted {} names", greetings.len())))
            })
        })
        .build()
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
    let server = server(runtime);
    let report = server.recover().await?; // resumes the trees of --db
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8750").await?;
    println!(
        "recovered {} trees; serving MCP at http://127.0.0.1:8750/mcp",
        report.trees
    );
    subtask::server::http::serve(server, listener, subtask::server::http::shutdown_signal()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use serde_json::json;

    use super::*;

    /// The example, as a user runs it: a real socket, our client library,
    /// the greetings in tree order and the root's answer last.
    #[tokio::test]
    async fn greet_all_fans_out_into_one_subtask_per_name() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(subtask::server::http::serve(
            server(Runtime::new(RuntimeConfig::default())),
            listener,
            std::future::pending(),
        ));
        let client = Client::http(&url).unwrap();
        let args = JsonObject::from_value(json!({"names": ["Ada", "Alan", "Grace"]})).unwrap();
        let parts: Vec<_> = client
            .call_tool_stream("greet_all", args)
            .await
            .unwrap()
            .collect()
            .await;
        let texts: Vec<String> = parts
            .into_iter()
            .map(|p| match p.unwrap().outcome {
                TaskOutcome::Completed(r) => r["content"][0]["text"].as_str().unwrap().to_owned(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            texts,
            ["Hello, Ada!", "Hello, Alan!", "Hello, Grace!", "greeted 3 names"]
        );
        // A bad argument is a tool error the model can act on.
        let bad = JsonObject::from_value(json!({"names": "Ada"})).unwrap();
        let r = client.call_tool("greet_all", bad).await.unwrap();
        assert_eq!(r["isError"], true);
    }
}
