//! # subtask
//!
//! A runtime and server for hierarchical, long-running work over the Model
//! Context Protocol Tasks extension: tasks with subtasks (SEP-2268), steering
//! and pause/resume (SEP-2669).
//!
//! * [`prelude`]: what a server author or runtime user imports.
//! * [`model`]: the wire types.
//! * [`core`]: the sans-IO task forest and its lifecycle state machine.
//! * [`runtime`]: the tokio executor that runs handlers as task trees.
//! * [`store`]: durability behind one trait (memory; SQLite with group
//!   commit with the `sqlite` feature).
//! * `server` (feature `server`): the MCP endpoint (Streamable HTTP and stdio).
//! * `demo` (feature `demo`): the demo tools of `subtask serve`.
//! * `rmcp` (feature `rmcp`): subtask's tools and tasks inside an rmcp
//!   server ([`WithSubtasks`](crate::rmcp::WithSubtasks) wraps its handler).
//! * `client` (feature `client`): the client library behind the `subtask`
//!   command line: transparent polling, ordered partial results, steering,
//!   trust checks.
//!
//! Features: `server`, `sqlite`, `client`, `demo`, and `cli` (the binary,
//! with all of them); the default is `cli` plus `mimalloc`. The model, the
//! core, the runtime and the memory store are always there: a runtime-only
//! user builds with `default-features = false`.
//!
//! # Quickstart
//!
//! ```
//! use subtask::model::{ClientView, JsonObject, RootOptions, TaskStatus};
//! use subtask::runtime::{Runtime, RuntimeConfig, SubtaskOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let rt = Runtime::new(RuntimeConfig::default());
//! let root = rt.spawn(RootOptions::default(), |ctx| async move {
//!     let search = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
//!         let _steers = ctx.checkpoint().await?; // a safe point: steers arrive, pause parks here
//!         Ok(JsonObject::new())
//!     })?;
//!     let _read = ctx.spawn_subtask(SubtaskOptions::default().after(&[&search]), |ctx| async move {
//!         let _search_outcome = &ctx.dependencies()[0];
//!         Ok(JsonObject::new())
//!     })?;
//!     Ok(JsonObject::new()) // the root completes after its children
//! });
//! let done = rt.wait(root, ClientView::PAUSE_AWARE).await.unwrap();
//! assert_eq!(done.status(), TaskStatus::Completed);
//! assert_eq!(done.task().child_task_ids.len(), 2);
//! # }
//! ```
#![deny(missing_docs)]
#![deny(clippy::await_holding_lock)]

#[cfg(feature = "client")]
pub mod client;
pub mod core;
#[cfg(feature = "demo")]
pub mod demo;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod model;
pub mod prelude;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "client"))]
mod retry;
#[cfg(feature = "rmcp")]
pub mod rmcp;
pub mod runtime;
#[cfg(feature = "server")]
pub mod server;
mod sharded;
pub mod store;
#[cfg(feature = "oauth")]
pub mod tls;
