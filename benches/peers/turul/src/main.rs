//! The turul-mcp peer of `cargo bench --bench http` (benches/http/turul.rs).
//!
//! turul-mcp-server 0.4's Streamable HTTP server on the 2025-11-25 lane
//! (where `with_task_storage` serves task-augmented `tools/call`,
//! `tasks/get` and `tasks/result`), its tasks stored by
//! turul-mcp-task-storage on SQLite or PostgreSQL, with the two tools of
//! the bench's rmcp peer: `quick` (a task that completes at once) and
//! `park` (a task that waits until it is cancelled).
//!
//!     turul-peer sqlite <file> [threads]
//!     turul-peer postgres <url> [threads]
//!
//! Prints `listening on <addr>` (a free loopback port) and serves until
//! killed, on a tokio runtime of `threads` workers (2) named `srv-turul`.

use std::sync::Arc;

use turul_mcp_server::ToolBuilder;
use turul_mcp_server::prelude::*;
use turul_mcp_server::tools::{TaskSupport, ToolExecution};
use turul_mcp_task_storage::{
    PostgresTaskConfig, PostgresTaskStorage, SqliteTaskConfig, SqliteTaskStorage, TaskStorage,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kind, target) = match args.as_slice() {
        [kind, target, ..] => (kind.clone(), target.clone()),
        _ => {
            eprintln!("usage: turul-peer sqlite <file> | postgres <url> [threads]");
            std::process::exit(2);
        }
    };
    let threads = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("srv-turul")
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(e) = rt.block_on(serve(&kind, &target)) {
        eprintln!("turul-peer: {e}");
        std::process::exit(1);
    }
}

async fn serve(kind: &str, target: &str) -> Result<(), String> {
    // As the bench's subtask: no cap on stored tasks below its live
    // counts (turul's default is 10,000 stored tasks; 0 is none, and
    // skips the COUNT(*) a cap costs every create).
    let storage: Arc<dyn TaskStorage> = match kind {
        "sqlite" => Arc::new(
            SqliteTaskStorage::with_config(SqliteTaskConfig {
                database_path: target.into(),
                max_tasks: 0,
                ..SqliteTaskConfig::default()
            })
            .await
            .map_err(|e| format!("SQLite task storage at {target}: {e}"))?,
        ),
        "postgres" => Arc::new(
            PostgresTaskStorage::with_config(PostgresTaskConfig {
                database_url: target.to_owned(),
                max_tasks: 0,
                verify_tables: true,
                create_tables: true,
                ..PostgresTaskConfig::default()
            })
            .await
            .map_err(|e| format!("PostgreSQL task storage: {e}"))?,
        ),
        other => return Err(format!("unknown storage {other:?} (sqlite or postgres)")),
    };
    let required = ToolExecution {
        task_support: Some(TaskSupport::Required),
    };
    let quick = ToolBuilder::new("quick")
        .description("A task that completes at once.")
        .execution(required.clone())
        .execute(|_args| async move { Ok(serde_json::json!("ok")) })
        .build()?;
    let park = ToolBuilder::new("park")
        .description("A task that waits until it is cancelled.")
        .execution(required)
        .execute(|_args| async move {
            // The executor drops this future when the task is cancelled.
            std::future::pending::<()>().await;
            Ok(serde_json::Value::Null)
        })
        .build()?;
    // A free loopback port: turul binds its configured address itself.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port: {e}"))?;
    let server = McpServer::builder()
        .name("turul-peer")
        .version("0.0.0")
        .tool(quick)
        .tool(park)
        .with_task_storage(storage)
        .bind_address(addr)
        .build()
        .map_err(|e| format!("build: {e}"))?;
    println!("listening on {addr}");
    server.run().await.map_err(|e| format!("run: {e}"))
}
