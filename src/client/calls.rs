//! Calling tools and following what they start: [`CallStart`],
//! [`ResultStream`] and the `Client` methods that hide polling.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use serde_json::{Map, Value, json};

use super::watch::{Mode, TaskUpdates};
use super::{
    Client, ClientError, InputRequest, PartialResult, TaskOutcome, TaskTree, TreeWatch, WatchEvent, parse,
};
use crate::model::{
    CreateTaskResult, DetailedTask, JsonObject, JsonRpcMessage, NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED,
    NOTIFICATIONS_TASKS, NotificationFilter, SUBSCRIPTIONS_LISTEN, SubscriptionsAcknowledgedParams,
    TOOLS_CALL, TaskId, TaskStatusNotificationParams,
};

/// How the server answered a `tools/call`.
#[derive(Debug, Clone, PartialEq)]
pub enum CallStart {
    /// The final result, at once (a `CallToolResult`).
    Complete(JsonObject),
    /// A task was created; this is its seed state.
    Task(DetailedTask),
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

impl Client {
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
            TaskOutcome::Completed(result) => Ok(result),
            TaskOutcome::Failed(error) => Err(ClientError::TaskFailed { task_id: id, error }),
            TaskOutcome::Cancelled => Err(ClientError::TaskCancelled { task_id: id }),
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
                        outcome: TaskOutcome::Completed(result),
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
