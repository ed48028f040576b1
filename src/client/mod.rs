//! The client side: call tools, follow task trees, steer them.
//!
//! [`Client`] speaks MCP 2026-07-28 with the tasks extension (steer and
//! pause declared on every request) over Streamable HTTP or the stdio of a
//! child process, and hides polling:
//!
//! * [`Client::call_tool`] returns the final result whether the server
//!   answers at once or with a task;
//! * [`Client::call_tool_stream`] yields the partial results of the whole
//!   tree in result order (I12) as they become available;
//! * [`Client::task_results`] and [`Client::wait_task`] pick up a task by id,
//!   e.g. in a new process after a restart (see also [`TaskJournal`]);
//! * [`Client::watch`] follows a tree for display;
//! * `get`, `update`, `cancel`, `steer`, `pause` and `resume` are one request each.
//!
//! Input requests from any task in a followed tree reach one
//! [`InputHandler`]; a `(task, key)` is presented at most once.
//!
//! The client does not trust the server: every snapshot is checked (cycles,
//! duplicate and dangling ids, `parentTaskId`, append-only `childTaskIds`,
//! absorbing terminal states) and everything is bounded ([`ClientLimits`]);
//! a breach is a [`Violation`], never a hang or an unbounded buffer. See
//! `docs/client.md`.
//!
//! This module must not contain lifecycle logic of its own beyond these
//! checks: the server decides, the client observes.
//!
//! # Examples
//!
//! ```no_run
//! use futures::StreamExt;
//! use serde_json::json;
//! use subtask::client::Client;
//! use subtask::model::JsonObject;
//!
//! # async fn run() -> Result<(), subtask::client::ClientError> {
//! let client = Client::http("http://127.0.0.1:8750/mcp")?;
//! let args = JsonObject::from_value(json!({"question": "How do MCP tasks handle failures?"})).unwrap();
//! let mut results = client.call_tool_stream("deep_research", args).await?;
//! while let Some(partial) = results.next().await {
//!     let partial = partial?;
//!     println!("{} {:?}", partial.status(), partial.task_id);
//! }
//! # Ok(()) }
//! ```

mod builder;
mod calls;
mod config;
mod error;
mod input;
mod journal;
mod transport;
mod tree;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// How a followed task ended (the one outcome type, defined in [`model`](crate::model)).
pub use crate::model::TaskOutcome;
pub use builder::ClientBuilder;
pub use calls::{CallStart, ResultStream};
pub use config::{ClientConfig, ClientLimits};
pub use error::{ClientError, Violation};
pub use input::{InputHandler, InputRequest};
pub use journal::TaskJournal;
pub use tree::{PartialResult, TaskNode, TaskTree};
pub use watch::{TreeWatch, WatchEvent};

#[cfg(feature = "fuzzing")]
pub(crate) use transport::scripted;
use transport::{Outgoing, Transport};

use crate::model::{
    AckResult, ClientCapabilities, DetailedTask, GetTaskResult, InputResponses, JsonObject, JsonRpcRequest,
    RequestId, RequestMeta, SERVER_DISCOVER, TASKS_CANCEL, TASKS_GET, TASKS_PAUSE, TASKS_RESUME, TASKS_STEER,
    TASKS_UPDATE, TOOLS_LIST, TaskId,
};

/// The default MCP endpoint of `subtask serve`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8750/mcp";

/// A client of one MCP server. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Transport,
    config: ClientConfig,
    input: Option<Arc<dyn InputHandler>>,
    journal: Option<TaskJournal>,
    capabilities: ClientCapabilities,
    next_id: AtomicI64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("transport", &self.inner.transport)
            .finish_non_exhaustive()
    }
}

fn parse<T: DeserializeOwned>(method: &str, result: JsonObject) -> Result<T, ClientError> {
    serde_json::from_value(Value::Object(result.as_map().clone()))
        .map_err(|e| ClientError::Protocol(format!("the answer to {method} is malformed: {e}")))
}

impl Client {
    /// A client of the Streamable HTTP endpoint at `url` with the default
    /// configuration.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::build`].
    pub fn http(url: &str) -> Result<Client, ClientError> {
        ClientBuilder::http(url).build()
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    fn meta(&self) -> Value {
        let mut meta = RequestMeta::new(self.inner.capabilities.clone());
        meta.client_info = JsonObject::from_value(json!({
            "name": "subtask-client",
            "version": env!("CARGO_PKG_VERSION"),
        }))
        .ok();
        serde_json::to_value(&meta).unwrap_or_else(|_| json!({}))
    }

    fn outgoing(&self, method: &str, name: Option<String>, mut params: Map<String, Value>) -> Outgoing {
        params.insert("_meta".to_owned(), self.meta());
        let id = RequestId::Number(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let request = JsonRpcRequest::new(id.clone(), method, JsonObject::from_map(params));
        let body = serde_json::to_vec(&request).expect("requests serialize");
        Outgoing {
            id,
            method: method.to_owned(),
            name,
            body,
        }
    }

    async fn rpc(
        &self,
        method: &str,
        name: Option<String>,
        params: Map<String, Value>,
    ) -> Result<JsonObject, ClientError> {
        let out = self.outgoing(method, name, params);
        self.inner.transport.request(out).await
    }

    async fn task_rpc(&self, method: &str, id: TaskId, extra: Value) -> Result<JsonObject, ClientError> {
        let mut params = Map::new();
        params.insert("taskId".to_owned(), Value::String(id.to_string()));
        if let Value::Object(extra) = extra {
            params.extend(extra);
        }
        self.rpc(method, Some(id.to_string()), params).await
    }

    /// `server/discover`: the server's versions, capabilities and info.
    ///
    /// # Errors
    ///
    /// Transport, JSON-RPC and protocol errors.
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe (one request; dropping it abandons the answer).
    pub async fn discover(&self) -> Result<JsonObject, ClientError> {
        self.rpc(SERVER_DISCOVER, None, Map::new()).await
    }

    /// `tools/list`: the tools, as the server describes them.
    ///
    /// # Errors
    ///
    /// Transport, JSON-RPC and protocol errors.
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe.
    pub async fn list_tools(&self) -> Result<Vec<JsonObject>, ClientError> {
        let r = self.rpc(TOOLS_LIST, None, Map::new()).await?;
        let tools = r
            .get("tools")
            .and_then(Value::as_array)
            .ok_or_else(|| ClientError::Protocol("tools/list answered without a `tools` array".into()))?;
        Ok(tools
            .iter()
            .filter_map(|t| JsonObject::from_value(t.clone()).ok())
            .collect())
    }

    /// `tasks/get`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Rpc`] with `-32602` for an unknown task
    /// ([`ClientError::is_task_not_found`]); transport and protocol errors.
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe.
    pub async fn get(&self, id: TaskId) -> Result<DetailedTask, ClientError> {
        let r = self.task_rpc(TASKS_GET, id, Value::Null).await?;
        Ok(parse::<GetTaskResult>(TASKS_GET, r)?.task)
    }

    /// `tasks/update`: answers input requests of task `id` by key.
    ///
    /// # Errors
    ///
    /// As [`Client::get`] (a paused task refuses with `-32602`).
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: the answer may or may not have arrived.
    pub async fn update(&self, id: TaskId, responses: InputResponses) -> Result<(), ClientError> {
        let responses = serde_json::to_value(&responses).unwrap_or_else(|_| json!({}));
        let r = self
            .task_rpc(TASKS_UPDATE, id, json!({"inputResponses": responses}))
            .await?;
        parse::<AckResult>(TASKS_UPDATE, r).map(|_| ())
    }

    /// `tasks/cancel`: asks the server to cancel `id` and its subtree.
    ///
    /// # Errors
    ///
    /// As [`Client::get`].
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: the request may or may not have arrived.
    pub async fn cancel(&self, id: TaskId) -> Result<(), ClientError> {
        let r = self.task_rpc(TASKS_CANCEL, id, Value::Null).await?;
        parse::<AckResult>(TASKS_CANCEL, r).map(|_| ())
    }

    /// `tasks/steer`: queues `message` for task `id`'s next safe point.
    ///
    /// # Errors
    ///
    /// As [`Client::get`]; `-32602` for a terminal task.
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: the steer may or may not have been queued.
    pub async fn steer(&self, id: TaskId, message: &str) -> Result<(), ClientError> {
        let r = self
            .task_rpc(TASKS_STEER, id, json!({"message": message}))
            .await?;
        parse::<AckResult>(TASKS_STEER, r).map(|_| ())
    }

    /// `tasks/pause`: returns the task as it is after the request (`paused`,
    /// or unchanged with a status message while the pause is pending).
    ///
    /// # Errors
    ///
    /// As [`Client::get`]; `-32602` when the task cannot be paused.
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe.
    pub async fn pause(&self, id: TaskId) -> Result<DetailedTask, ClientError> {
        let r = self.task_rpc(TASKS_PAUSE, id, Value::Null).await?;
        Ok(parse::<GetTaskResult>(TASKS_PAUSE, r)?.task)
    }

    /// `tasks/resume`: returns the task after resuming.
    ///
    /// # Errors
    ///
    /// As [`Client::get`]; `-32602` when the task is not paused.
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe.
    pub async fn resume(&self, id: TaskId) -> Result<DetailedTask, ClientError> {
        let r = self.task_rpc(TASKS_RESUME, id, Value::Null).await?;
        Ok(parse::<GetTaskResult>(TASKS_RESUME, r)?.task)
    }
}
