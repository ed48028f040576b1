//! Walking a task tree: polls `tasks/get` for every live task at the
//! interval it suggests, takes `notifications/tasks` from a subscription
//! when the server offers one, discovers children, feeds every snapshot
//! through the [`TaskTree`] checks, presents input requests to the
//! [`InputHandler`] and hands out partial results in result order.
//!
//! One owner drives everything from [`TreeWatch::next`]: the polls, the
//! subscription and the input jobs are futures it holds, so dropping a
//! `next()` future loses nothing, and no lock exists to be held.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered};
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::input::Answer;
use super::tree::{Observed, PartialResult, TaskTree};
use super::{Client, ClientError, InputHandler, InputRequest, Violation};
use crate::model::{DetailedTask, ErrorCode, InputResponses, JsonObject, TaskId, TaskStatus};

/// `notifications/tasks` of one subscription, as detailed tasks.
pub(crate) type TaskUpdates = BoxStream<'static, Result<DetailedTask, ClientError>>;

/// Sends of one input answer tried before it is given up on.
const MAX_ANSWER_ATTEMPTS: u32 = 5;

/// Something that happened in a watched tree.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WatchEvent {
    /// A task was retrieved for the first time or changed (status, status
    /// message, children, input requests); read it from [`TreeWatch::tree`].
    Changed(TaskId),
    /// The next partial result in result order (I12).
    Result(PartialResult),
}

/// How far a walk goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Until the root's result is out, polling live tasks again and again.
    Follow,
    /// Retrieve every task of the tree once, then stop.
    Snapshot,
}

enum Job {
    Answered {
        task: TaskId,
        key: String,
        response: Option<JsonObject>,
    },
    Sent {
        task: TaskId,
        key: String,
        result: Result<(), ClientError>,
    },
}

enum Wake {
    Polled(TaskId, Result<DetailedTask, ClientError>),
    Opened(Result<TaskUpdates, ClientError>),
    Update(Option<Result<DetailedTask, ClientError>>),
    Job(Job),
    Timer,
    Stalled,
}

/// A live walk over one task tree.
///
/// Get one from [`Client::watch`](super::Client::watch) (observe only) or
/// through [`Client::task_results`](super::Client::task_results) and
/// [`Client::call_tool_stream`](super::Client::call_tool_stream), which
/// also answer input requests.
pub struct TreeWatch {
    client: Client,
    tree: TaskTree,
    mode: Mode,
    schedule: BinaryHeap<Reverse<(Instant, TaskId)>>,
    due: HashMap<TaskId, Instant>,
    polls: FuturesUnordered<BoxFuture<'static, (TaskId, Result<DetailedTask, ClientError>)>>,
    polling: HashSet<TaskId>,
    opening: Option<BoxFuture<'static, Result<TaskUpdates, ClientError>>>,
    updates: Option<TaskUpdates>,
    input: Option<Arc<dyn InputHandler>>,
    answers: HashMap<(TaskId, String), Answer>,
    jobs: FuturesUnordered<BoxFuture<'static, Job>>,
    events: VecDeque<WatchEvent>,
    failures: u32,
    done: bool,
}

impl std::fmt::Debug for TreeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeWatch")
            .field("root", &self.tree.root())
            .field("tasks", &self.tree.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl TreeWatch {
    pub(crate) fn new(
        client: Client,
        root: TaskId,
        mode: Mode,
        input: Option<Arc<dyn InputHandler>>,
    ) -> Self {
        let limits = client.config().limits;
        let subscribe = mode == Mode::Follow && client.config().use_subscriptions;
        let mut w = TreeWatch {
            tree: TaskTree::new(root, limits),
            mode,
            schedule: BinaryHeap::new(),
            due: HashMap::new(),
            polls: FuturesUnordered::new(),
            polling: HashSet::new(),
            opening: None,
            updates: None,
            input,
            answers: HashMap::new(),
            jobs: FuturesUnordered::new(),
            events: VecDeque::new(),
            failures: 0,
            done: false,
            client,
        };
        if subscribe {
            let c = w.client.clone();
            w.opening = Some(async move { c.subscribe_tasks(&[root]).await }.boxed());
        }
        w.schedule(root, Instant::now());
        w
    }

    /// The tree as known so far.
    pub fn tree(&self) -> &TaskTree {
        &self.tree
    }

    /// The tree, once the walk is over (or at any point).
    pub fn into_tree(self) -> TaskTree {
        self.tree
    }

    /// The root of the walk.
    pub fn root(&self) -> TaskId {
        self.tree.root()
    }

    /// The next event; `None` once the root's result was handed out (or,
    /// for a snapshot, every task was retrieved once) or after an error.
    ///
    /// # Errors
    ///
    /// The first error ends the walk: a [`Violation`] the server committed,
    /// the root not found, a JSON-RPC error, or transport failures beyond
    /// [`ClientConfig::max_retries`](super::ClientConfig::max_retries).
    ///
    /// # Cancellation safety
    ///
    /// Cancellation safe: in-flight requests belong to the watch, not to
    /// the returned future, so dropping it loses no event.
    pub async fn next(&mut self) -> Option<Result<WatchEvent, ClientError>> {
        loop {
            if let Some(e) = self.events.pop_front() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.step().await {
                self.done = true;
                return Some(Err(e));
            }
        }
    }

    /// Runs the walk to its end, discarding events.
    ///
    /// # Errors
    ///
    /// As [`TreeWatch::next`].
    pub async fn run(&mut self) -> Result<(), ClientError> {
        while let Some(e) = self.next().await {
            e?;
        }
        Ok(())
    }

    fn schedule(&mut self, id: TaskId, at: Instant) {
        self.due.insert(id, at);
        self.schedule.push(Reverse((at, id)));
    }

    /// The earliest valid scheduled time, dropping stale heap entries.
    fn next_due(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, id))) = self.schedule.peek() {
            if self.due.get(&id) == Some(&at) {
                return Some(at);
            }
            self.schedule.pop();
        }
        None
    }

    fn start_due_polls(&mut self) {
        let now = Instant::now();
        let max = self.client.config().max_concurrent_polls.max(1);
        while self.polls.len() < max {
            let Some(at) = self.next_due() else { break };
            if at > now {
                break;
            }
            let Some(Reverse((_, id))) = self.schedule.pop() else {
                break;
            };
            self.due.remove(&id);
            if !self.polling.insert(id) {
                continue; // in flight: its completion schedules the next one
            }
            let client = self.client.clone();
            self.polls.push(async move { (id, client.get(id).await) }.boxed());
        }
    }

    async fn step(&mut self) -> Result<(), ClientError> {
        self.start_due_polls();
        // With every poll slot taken, a due task waits for a poll to end,
        // not for its time: a timer at a past instant would fire at once,
        // again and again, and spin until the poll ends (found by the
        // client_answers fuzz target: with a paused clock the spin never
        // let the in-flight poll's timeout come).
        let full = self.polls.len() >= self.client.config().max_concurrent_polls.max(1);
        let wake_at = if full { None } else { self.next_due() };
        if self.mode == Mode::Snapshot && self.polls.is_empty() && wake_at.is_none() {
            self.done = true;
            return Ok(());
        }
        let wake = {
            let TreeWatch {
                polls,
                opening,
                updates,
                jobs,
                ..
            } = self;
            tokio::select! {
                Some((id, r)) = polls.next(), if !polls.is_empty() => Wake::Polled(id, r),
                r = async { opening.as_mut().expect("guarded").await }, if opening.is_some() => Wake::Opened(r),
                u = async { updates.as_mut().expect("guarded").next().await }, if updates.is_some() => Wake::Update(u),
                Some(j) = jobs.next(), if !jobs.is_empty() => Wake::Job(j),
                () = tokio::time::sleep_until(wake_at.unwrap_or_else(Instant::now)), if wake_at.is_some() => Wake::Timer,
                else => Wake::Stalled,
            }
        };
        match wake {
            Wake::Polled(id, r) => self.polled(id, r),
            Wake::Opened(r) => {
                self.opening = None;
                match r {
                    Ok(updates) => self.updates = Some(updates),
                    Err(e) => tracing::debug!(error = %e, "no task notifications; polling only"),
                }
                Ok(())
            }
            Wake::Update(Some(Ok(task))) => self.apply(task),
            Wake::Update(other) => {
                if let Some(Err(e)) = other {
                    tracing::debug!(error = %e, "task notifications ended; polling only");
                }
                self.updates = None;
                Ok(())
            }
            Wake::Job(job) => self.job_done(job),
            Wake::Timer => Ok(()),
            Wake::Stalled => Err(ClientError::Protocol(
                "internal: the walk has nothing left to wait for".to_owned(),
            )),
        }
    }

    /// The wait before retry `n` (from 1): 100 ms doubling to 5 s, with
    /// jitter (`crate::retry`).
    fn backoff(n: u32) -> Duration {
        crate::retry::nth(Duration::from_millis(100), Duration::from_secs(5), n)
    }

    fn polled(&mut self, id: TaskId, r: Result<DetailedTask, ClientError>) -> Result<(), ClientError> {
        self.polling.remove(&id);
        match r {
            Ok(task) => {
                self.failures = 0;
                let got = task.task().task_id;
                if got != id {
                    return Err(Violation::WrongTask { asked: id, got }.into());
                }
                self.apply(task)
            }
            // tasks/get has no parameter but the id: -32602 means "not found".
            Err(ClientError::Rpc(e)) if e.code == ErrorCode::INVALID_PARAMS && id != self.tree.root() => {
                let limit = self.client.config().limits.dangling_attempts.max(1);
                let root = self.tree.root();
                let Some(node) = self.tree.get_mut(id) else {
                    return Ok(());
                };
                node.not_found += 1;
                let attempts = node.not_found;
                if attempts >= limit {
                    return Err(Violation::Dangling {
                        id,
                        named_by: node.named_by().unwrap_or(root),
                        attempts,
                    }
                    .into());
                }
                self.schedule(id, Instant::now() + Self::backoff(attempts));
                Ok(())
            }
            Err(e) if e.is_transient() => {
                self.failures += 1;
                if self.failures > self.client.config().max_retries {
                    return Err(e);
                }
                tracing::debug!(error = %e, attempt = self.failures, "retrying tasks/get");
                self.schedule(id, Instant::now() + Self::backoff(self.failures));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Takes one snapshot (from a poll or a notification) into the tree.
    fn apply(&mut self, task: DetailedTask) -> Result<(), ClientError> {
        let id = task.task().task_id;
        let now = Instant::now();
        match self.tree.observe(task)? {
            Observed::Unknown => return Ok(()),
            Observed::Stale | Observed::Unchanged => {}
            Observed::Changed { new_children } => {
                self.events.push_back(WatchEvent::Changed(id));
                for c in new_children {
                    self.schedule(c, now);
                }
            }
        }
        let Some(node) = self.tree.get(id) else {
            return Ok(());
        };
        if node.is_terminal() {
            self.due.remove(&id);
        } else if self.mode == Mode::Follow {
            let every = self
                .client
                .config()
                .poll_interval(node.task().and_then(|t| t.poll_interval_ms));
            self.schedule(id, now + every);
        }
        if self.mode == Mode::Follow {
            self.present_inputs(id)?;
            while let Some(r) = self.tree.next_result() {
                self.events.push_back(WatchEvent::Result(r));
            }
            if self.tree.is_finished() {
                self.done = true;
            }
        }
        Ok(())
    }

    /// Presents new input requests of `id` and sends answers still owed.
    fn present_inputs(&mut self, id: TaskId) -> Result<(), ClientError> {
        let Some(handler) = self.input.clone() else {
            return Ok(());
        };
        let Some(node) = self.tree.get(id) else {
            return Ok(());
        };
        if node.status() != Some(TaskStatus::InputRequired) {
            return Ok(());
        }
        let Some(requests) = node.input_requests().cloned() else {
            return Ok(());
        };
        let limit = self.client.config().limits.max_input_requests_per_task;
        for (key, request) in requests {
            let slot = (id, key.clone());
            match self.answers.get(&slot) {
                None => {
                    let node = self.tree.get_mut(id).expect("looked up above");
                    if node.inputs_presented >= limit {
                        return Err(Violation::TooManyInputRequests { task: id, limit }.into());
                    }
                    node.inputs_presented += 1;
                    self.answers.insert(slot, Answer::Asked);
                    let ask = handler.answer(InputRequest {
                        task_id: Some(id),
                        key: key.clone(),
                        request,
                    });
                    self.jobs.push(
                        async move {
                            let response = ask.await;
                            Job::Answered {
                                task: id,
                                key,
                                response,
                            }
                        }
                        .boxed(),
                    );
                }
                Some(Answer::Ready { response, attempts }) => {
                    let (response, attempts) = (response.clone(), *attempts);
                    self.send(id, key, response, attempts + 1);
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn send(&mut self, task: TaskId, key: String, response: JsonObject, attempts: u32) {
        self.answers.insert(
            (task, key.clone()),
            Answer::Sending {
                response: response.clone(),
                attempts,
            },
        );
        let client = self.client.clone();
        self.jobs.push(
            async move {
                let responses: InputResponses = [(key.clone(), response)].into();
                let result = client.update(task, responses).await;
                Job::Sent { task, key, result }
            }
            .boxed(),
        );
    }

    fn is_outstanding(&self, task: TaskId, key: &str) -> bool {
        self.tree.get(task).is_some_and(|n| {
            n.status() == Some(TaskStatus::InputRequired)
                && n.input_requests().is_some_and(|r| r.contains_key(key))
        })
    }

    fn job_done(&mut self, job: Job) -> Result<(), ClientError> {
        match job {
            Job::Answered {
                task,
                key,
                response: None,
            } => {
                self.answers.insert((task, key), Answer::Settled);
            }
            Job::Answered {
                task,
                key,
                response: Some(response),
            } => {
                if self.is_outstanding(task, &key) {
                    self.send(task, key, response, 1);
                } else {
                    // Sent when a snapshot shows the key outstanding again
                    // (e.g. after a resume).
                    self.answers.insert(
                        (task, key),
                        Answer::Ready {
                            response,
                            attempts: 0,
                        },
                    );
                }
            }
            Job::Sent {
                task,
                key,
                result: Ok(()),
            } => {
                self.answers.insert((task, key), Answer::Settled);
            }
            Job::Sent {
                task,
                key,
                result: Err(e),
            } => {
                let slot = (task, key);
                let next = match self.answers.remove(&slot) {
                    Some(Answer::Sending { response, attempts }) if attempts < MAX_ANSWER_ATTEMPTS => {
                        tracing::debug!(error = %e, %task, "tasks/update failed; sending again later");
                        Answer::Ready { response, attempts }
                    }
                    _ => {
                        tracing::debug!(error = %e, %task, "giving up on an input answer");
                        Answer::Settled
                    }
                };
                self.answers.insert(slot, next);
            }
        }
        Ok(())
    }
}
