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

mod config;
mod error;
mod input;
mod journal;
mod transport;
mod tree;
mod watch;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::task::{Context, Poll};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

pub use config::{ClientConfig, ClientLimits};
pub use error::{ClientError, Violation};
pub use input::{InputHandler, InputRequest};
pub use journal::TaskJournal;
pub use tree::{Outcome, PartialResult, TaskNode, TaskTree};
pub use watch::{TreeWatch, WatchEvent};

use transport::{Outgoing, Transport};
use watch::{Mode, TaskUpdates};

use crate::model::{
    AckResult, ClientCapabilities, CreateTaskResult, DetailedTask, GetTaskResult, InputResponses, JsonObject,
    JsonRpcMessage, JsonRpcRequest, NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED, NOTIFICATIONS_TASKS,
    NotificationFilter, RequestId, RequestMeta, SERVER_DISCOVER, SUBSCRIPTIONS_LISTEN,
    SubscriptionsAcknowledgedParams, TASKS_CANCEL, TASKS_GET, TASKS_PAUSE, TASKS_RESUME, TASKS_STEER,
    TASKS_UPDATE, TOOLS_CALL, TOOLS_LIST, TaskId, TaskStatusNotificationParams, TasksCapability,
};

/// The default MCP endpoint of `subtask serve`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8750/mcp";

/// How the server answered a `tools/call`.
#[derive(Debug, Clone, PartialEq)]
pub enum CallStart {
    /// The final result, at once (a `CallToolResult`).
    Complete(JsonObject),
    /// A task was created; this is its seed state.
    Task(DetailedTask),
}

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

/// Builds a [`Client`].
pub struct ClientBuilder {
    target: Target,
    token: Option<String>,
    config: ClientConfig,
    input: Option<Arc<dyn InputHandler>>,
    journal: Option<TaskJournal>,
}

enum Target {
    Http(String),
    Stdio(tokio::process::Command),
}

impl ClientBuilder {
    /// A client of the Streamable HTTP endpoint at `url`
    /// (e.g. [`DEFAULT_URL`]).
    pub fn http(url: impl Into<String>) -> Self {
        Self::with_target(Target::Http(url.into()))
    }

    /// A client of a server started as a child process speaking MCP on its
    /// stdin/stdout (e.g. `subtask serve --stdio`). stdin and stdout are
    /// taken over; stderr is left as the command sets it. The process is
    /// killed when the last clone of the client is dropped.
    pub fn stdio(command: tokio::process::Command) -> Self {
        Self::with_target(Target::Stdio(command))
    }

    fn with_target(target: Target) -> Self {
        ClientBuilder {
            target,
            token: None,
            config: ClientConfig::default(),
            input: None,
            journal: None,
        }
    }

    /// Sends `Authorization: Bearer TOKEN` (HTTP only).
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Replaces the configuration.
    #[must_use]
    pub fn config(mut self, config: ClientConfig) -> Self {
        self.config = config;
        self
    }

    /// Answers input requests (and declares the `elicitation` capability).
    #[must_use]
    pub fn input_handler(mut self, handler: impl InputHandler) -> Self {
        self.input = Some(Arc::new(handler));
        self
    }

    /// Records every task this client creates, and when it finishes, so
    /// that a later process can resume the unfinished ones.
    #[must_use]
    pub fn journal(mut self, journal: TaskJournal) -> Self {
        self.journal = Some(journal);
        self
    }

    /// The client. For stdio, starts the process (inside a tokio runtime).
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`]: a malformed or `https` URL, a bad token, a
    /// process that cannot be started.
    pub fn build(self) -> Result<Client, ClientError> {
        let transport = match self.target {
            Target::Http(url) => Transport::Http(transport::http::HttpTransport::new(
                &url,
                self.token,
                &self.config,
            )?),
            Target::Stdio(command) => {
                Transport::Stdio(transport::stdio::StdioTransport::spawn(command, &self.config)?)
            }
        };
        let mut capabilities = ClientCapabilities::with_tasks(TasksCapability::FULL);
        if self.input.is_some() {
            capabilities.elicitation = Some(JsonObject::new());
        }
        Ok(Client {
            inner: Arc::new(Inner {
                transport,
                config: self.config,
                input: self.input,
                journal: self.journal,
                capabilities,
                next_id: AtomicI64::new(1),
            }),
        })
    }
}

/// The partial results of a task tree in result order (I12), ending with
/// the root's. Ends after the first error.
pub struct ResultStream {
    root: Option<TaskId>,
    inner: BoxStream<'static, Result<PartialResult, ClientError>>,
}

impl ResultStream {
    /// The root task; `None` when the server answered without a task.
    pub fn root_task_id(&self) -> Option<TaskId> {
        self.root
    }
}

impl std::fmt::Debug for ResultStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultStream")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Stream for ResultStream {
    type Item = Result<PartialResult, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.poll_next_unpin(cx)
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

    /// Sends `tools/call` and returns how the server answered: the result,
    /// or the seed of a task. MRTR rounds (`resultType: "input_required"`)
    /// are answered by the input handler and retried.
    ///
    /// # Errors
    ///
    /// [`ClientError::Rpc`] when the server refuses the call;
    /// [`ClientError::InputRequired`] when MRTR input is needed and no
    /// handler answers it; transport and protocol errors.
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: dropping it may leave a task running on the
    /// server whose id was never seen.
    pub async fn start_tool(&self, name: &str, arguments: JsonObject) -> Result<CallStart, ClientError> {
        let mut responses: Option<Map<String, Value>> = None;
        let mut state: Option<Value> = None;
        for _ in 0..self.inner.config.limits.max_mrtr_rounds.max(1) {
            let mut params = Map::new();
            params.insert("name".to_owned(), Value::String(name.to_owned()));
            params.insert("arguments".to_owned(), arguments.to_value());
            if let Some(r) = &responses {
                params.insert("inputResponses".to_owned(), Value::Object(r.clone()));
            }
            if let Some(s) = &state {
                params.insert("requestState".to_owned(), s.clone());
            }
            let result = self.rpc(TOOLS_CALL, Some(name.to_owned()), params).await?;
            match result.get("resultType").and_then(Value::as_str) {
                None | Some("complete") => return Ok(CallStart::Complete(result)),
                Some("task") => {
                    let created: CreateTaskResult = parse(TOOLS_CALL, result)?;
                    if let Some(j) = &self.inner.journal {
                        j.created(created.task.task().task_id, name)?;
                    }
                    return Ok(CallStart::Task(created.task));
                }
                Some("input_required") => {
                    let requests = result
                        .get("inputRequests")
                        .and_then(Value::as_object)
                        .ok_or_else(|| {
                            ClientError::Protocol("an input_required answer without `inputRequests`".into())
                        })?;
                    let limit = self.inner.config.limits.max_input_requests_per_task;
                    if requests.len() > limit {
                        return Err(ClientError::Protocol(format!(
                            "{name} asks for {} inputs in one round; the limit is {limit}",
                            requests.len()
                        )));
                    }
                    let handler = self.inner.input.clone().ok_or_else(|| {
                        ClientError::InputRequired(format!(
                            "{name} asks for input ({}) and no input handler is set",
                            requests.keys().cloned().collect::<Vec<_>>().join(", ")
                        ))
                    })?;
                    let mut answers = Map::new();
                    for (key, request) in requests {
                        let Ok(request) = JsonObject::from_value(request.clone()) else {
                            continue;
                        };
                        let asked = InputRequest {
                            task_id: None,
                            key: key.clone(),
                            request,
                        };
                        if let Some(r) = handler.answer(asked).await {
                            answers.insert(key.clone(), r.to_value());
                        }
                    }
                    if answers.is_empty() {
                        return Err(ClientError::InputRequired(format!(
                            "{name} asks for input and the handler answered none of it"
                        )));
                    }
                    responses = Some(answers);
                    state = result.get("requestState").cloned();
                }
                Some(other) => {
                    return Err(ClientError::Protocol(format!(
                        "tools/call answered with unknown resultType {other:?}"
                    )));
                }
            }
        }
        Err(ClientError::InputRequired(format!(
            "{name} still asks for input after {} rounds",
            self.inner.config.limits.max_mrtr_rounds
        )))
    }

    /// Calls a tool and returns its final result (a `CallToolResult`),
    /// whether the server answers at once or with a task. A task's tree is
    /// followed (checked, input requests answered) until the root ends.
    ///
    /// # Errors
    ///
    /// [`ClientError::TaskFailed`] / [`ClientError::TaskCancelled`] when the
    /// task ends so; as [`Client::start_tool`] and [`TreeWatch::next`].
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe: dropping it stops following the task, which
    /// goes on running on the server (resume with [`Client::wait_task`]).
    pub async fn call_tool(&self, name: &str, arguments: JsonObject) -> Result<JsonObject, ClientError> {
        match self.start_tool(name, arguments).await? {
            CallStart::Complete(result) => Ok(result),
            CallStart::Task(seed) => self.wait_task(seed.task().task_id).await,
        }
    }

    /// Follows the task `id` (e.g. a root whose id was persisted by an
    /// earlier process) to its end and returns its result.
    ///
    /// # Errors
    ///
    /// As [`Client::call_tool`].
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: the task keeps running; call again to resume.
    pub async fn wait_task(&self, id: TaskId) -> Result<JsonObject, ClientError> {
        let mut results = self.task_results(id);
        let mut last = None;
        while let Some(r) = results.next().await {
            let r = r?;
            if r.task_id == Some(id) {
                last = Some(r);
            }
        }
        let Some(last) = last else {
            return Err(ClientError::Protocol(format!("task {id} ended without a result")));
        };
        match last.outcome {
            Outcome::Completed(result) => Ok(result),
            Outcome::Failed(error) => Err(ClientError::TaskFailed { task_id: id, error }),
            Outcome::Cancelled => Err(ClientError::TaskCancelled { task_id: id }),
        }
    }

    /// Calls a tool and streams the partial results of its whole tree in
    /// result order, ending with the root's. A synchronous answer is one
    /// partial result without a task id.
    ///
    /// # Errors
    ///
    /// As [`Client::start_tool`]; errors while following come as items.
    ///
    /// # Cancellation safety
    ///
    /// Not cancellation safe (see [`Client::start_tool`]); dropping the
    /// returned stream only stops following.
    pub async fn call_tool_stream(
        &self,
        name: &str,
        arguments: JsonObject,
    ) -> Result<ResultStream, ClientError> {
        match self.start_tool(name, arguments).await? {
            CallStart::Complete(result) => Ok(ResultStream {
                root: None,
                inner: futures::stream::once(async move {
                    Ok(PartialResult {
                        task_id: None,
                        parent_task_id: None,
                        outcome: Outcome::Completed(result),
                    })
                })
                .boxed(),
            }),
            CallStart::Task(seed) => Ok(self.task_results(seed.task().task_id)),
        }
    }

    /// The partial results of the tree rooted at `root`, in result order,
    /// answering input requests with the handler. Works on any task id, so
    /// a new process resumes where an old one stopped (results already seen
    /// come again: the server keeps them until the tree expires).
    pub fn task_results(&self, root: TaskId) -> ResultStream {
        let watch = TreeWatch::new(self.clone(), root, Mode::Follow, self.inner.input.clone());
        let journal = self.inner.journal.clone();
        let inner = futures::stream::unfold(Some(watch), move |watch| {
            let journal = journal.clone();
            async move {
                let mut watch = watch?;
                loop {
                    match watch.next().await? {
                        Ok(WatchEvent::Result(r)) => {
                            if r.task_id == Some(root)
                                && let Some(j) = &journal
                                && let Err(e) = j.finished(root, r.status())
                            {
                                return Some((Err(e), None));
                            }
                            return Some((Ok(r), Some(watch)));
                        }
                        Ok(_) => {}
                        Err(e) => return Some((Err(e), None)),
                    }
                }
            }
        })
        .boxed();
        ResultStream {
            root: Some(root),
            inner,
        }
    }

    /// Follows the tree rooted at `root` for display: every change and
    /// partial result as an event, without answering input requests.
    pub fn watch(&self, root: TaskId) -> TreeWatch {
        TreeWatch::new(self.clone(), root, Mode::Follow, None)
    }

    /// Retrieves every task of the tree rooted at `root` once, checked.
    ///
    /// # Errors
    ///
    /// As [`TreeWatch::next`].
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe (read-only).
    pub async fn get_tree(&self, root: TaskId) -> Result<TaskTree, ClientError> {
        let mut walk = TreeWatch::new(self.clone(), root, Mode::Snapshot, None);
        walk.run().await?;
        Ok(walk.into_tree())
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

    /// Opens `subscriptions/listen` for `ids` and yields the
    /// `notifications/tasks` of that stream as tasks.
    pub(crate) async fn subscribe_tasks(&self, ids: &[TaskId]) -> Result<TaskUpdates, ClientError> {
        let filter = NotificationFilter::tasks(ids.iter().copied());
        let mut params = Map::new();
        params.insert(
            "notifications".to_owned(),
            serde_json::to_value(&filter).unwrap_or_else(|_| json!({})),
        );
        let out = self.outgoing(SUBSCRIPTIONS_LISTEN, None, params);
        let sub_id = out.id.clone();
        let mut messages = self.inner.transport.listen(out).await?;
        let first = tokio::time::timeout(self.inner.config.request_timeout, messages.next())
            .await
            .map_err(|_| ClientError::Timeout("no acknowledgement of subscriptions/listen".into()))?;
        match first {
            Some(Ok(JsonRpcMessage::Notification(n)))
                if n.method == NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED =>
            {
                let ack: SubscriptionsAcknowledgedParams = parse(
                    NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED,
                    n.params.unwrap_or_default(),
                )?;
                let agreed: Vec<TaskId> = ack.notifications.task_ids().filter_map(|(_, id)| id).collect();
                if let Some(missing) = ids.iter().find(|id| !agreed.contains(id)) {
                    return Err(ClientError::Protocol(format!(
                        "the server did not agree to notify about task {missing}"
                    )));
                }
            }
            Some(Ok(JsonRpcMessage::Error(e))) => return Err(ClientError::Rpc(e.error)),
            Some(Ok(_)) => {
                return Err(ClientError::Protocol(
                    "subscriptions/listen did not start with an acknowledgement".into(),
                ));
            }
            Some(Err(e)) => return Err(e),
            None => return Err(ClientError::Protocol("subscriptions/listen ended at once".into())),
        }
        Ok(messages
            .filter_map(move |m| {
                let sub_id = sub_id.clone();
                async move {
                    match m {
                        Ok(JsonRpcMessage::Notification(n)) if n.method == NOTIFICATIONS_TASKS => {
                            let params: TaskStatusNotificationParams =
                                match parse(NOTIFICATIONS_TASKS, n.params.unwrap_or_default()) {
                                    Ok(p) => p,
                                    Err(e) => return Some(Err(e)),
                                };
                            let other_sub = params
                                .meta
                                .as_ref()
                                .and_then(|m| m.subscription_id.as_ref())
                                .is_some_and(|s| s != &sub_id);
                            (!other_sub).then_some(Ok(params.task))
                        }
                        Ok(JsonRpcMessage::Error(e)) => Some(Err(ClientError::Rpc(e.error))),
                        Ok(_) => None,
                        Err(e) => Some(Err(e)),
                    }
                }
            })
            .boxed())
    }
}
