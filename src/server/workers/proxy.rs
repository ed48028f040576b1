//! The handler of a worker tool's task: waits for an assignment, then
//! performs each act the worker reports on the task's context, and keeps
//! the acts in order so that a later attempt (after a worker's death or
//! lease loss) replays them instead of doing them again
//! (`docs/workers.md`, "Replay").

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::wire::{self, FromWorker, WireError};
use super::{Hub, Link, Outbox, Slot, ToProxy};
use crate::model::{ErrorCode, ErrorObject, JsonObject, TaskId};
use crate::runtime::{HandlerResult, SubtaskHandle, SubtaskOptions, TaskContext, TaskError};
use crate::server::tool::{ToolCall, ToolOutcome};

/// The body of a task of worker tool `tool` called with `arguments`.
pub(super) fn body(hub: Arc<Hub>, tool: String, arguments: JsonObject) -> crate::server::TaskBody {
    Box::new(move |ctx| Box::pin(run(hub, Arc::from(tool), arguments, ctx)))
}

/// Where a reply goes: a request of an attempt. A reply for an attempt
/// that is no longer current is dropped.
#[derive(Clone)]
struct Target {
    attempt: u32,
    reference: Option<u64>,
    out: Outbox,
    current: Arc<AtomicU32>,
}

impl Target {
    fn send(&self, answer: Result<Value, WireError>) {
        if self.current.load(Ordering::Acquire) != self.attempt {
            return;
        }
        if let Some(r) = self.reference {
            self.out.send(wire::reply(r, &answer));
        }
    }
}

type SharedAnswer = Shared<BoxFuture<'static, Result<Value, WireError>>>;

/// An act of the handler, in order.
struct Act {
    /// What it was, to check a replay against.
    identity: String,
    kind: ActKind,
}

enum ActKind {
    /// Answered at once (a spawn, a patch marker).
    Ready(Result<Value, WireError>),
    /// Answered when the context call returns (checkpoint, pause, input).
    Waiting(SharedAnswer),
    /// A step.
    Step(Arc<StepCell>),
}

struct StepCell {
    act: usize,
    inner: Mutex<StepInner>,
}

struct StepInner {
    phase: StepPhase,
    /// The `step` request to answer `run` (or `done`).
    notify: Option<Target>,
    /// The `stepped` request to answer once the output is durable.
    stepped: Option<Target>,
    output_tx: Option<oneshot::Sender<Value>>,
    output_rx: Option<oneshot::Receiver<Value>>,
}

enum StepPhase {
    /// Not begun by the context (a safe point, or before its turn).
    Waiting,
    /// The work runs on the worker.
    Running,
    Done(Result<Value, WireError>),
}

/// Ends the hub's slot for the task when the proxy ends, however it ends.
struct Registration {
    hub: Arc<Hub>,
    task: TaskId,
    owner: u64,
    cancel: bool,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.hub.finish(self.task, self.owner, self.cancel);
    }
}

struct Proxy {
    ctx: TaskContext,
    hub: Arc<Hub>,
    acts: Vec<Act>,
    /// Acts of the current attempt so far.
    cursor: usize,
    attempt: u32,
    current: Arc<AtomicU32>,
    out: Option<Outbox>,
    children: HashMap<TaskId, SubtaskHandle>,
    pending: FuturesUnordered<BoxFuture<'static, ()>>,
    /// The current attempt's span.
    span: tracing::Span,
    task: TaskId,
    /// Waits open now ([`Proxy::wait_on`]).
    waits: Arc<AtomicUsize>,
}

enum Event {
    Cancelled,
    Hub(Option<ToProxy>),
    Progress,
}

async fn run(hub: Arc<Hub>, tool: Arc<str>, arguments: JsonObject, ctx: TaskContext) -> HandlerResult {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = ctx.task_id();
    let (owner, waiting) = hub.enqueue(
        task,
        Slot {
            tool,
            root: ctx.root_task_id(),
            parent: ctx.parent_task_id(),
            arguments,
            attempt: 0,
            replay: ctx.is_rerun(),
            worker: None,
            parked: false,
            dependencies: wire::dependencies(ctx.dependencies()),
            owner: 0,
            to_proxy: Link::Local(tx),
            remote: None,
        },
    );
    let mut registration = Registration {
        hub: hub.clone(),
        task,
        owner,
        cancel: false,
    };
    // Whether the task shows the proxy's waiting message (cleared once a
    // worker has it: no write when the assignment came at once).
    let mut shown = waiting.is_some();
    if let Some(message) = waiting {
        ctx.set_status_message(message);
    }
    let mut p = Proxy {
        ctx: ctx.clone(),
        hub,
        acts: Vec::new(),
        cursor: 0,
        attempt: 0,
        current: Arc::new(AtomicU32::new(0)),
        out: None,
        children: HashMap::new(),
        pending: FuturesUnordered::new(),
        span: tracing::Span::none(),
        task,
        waits: Arc::new(AtomicUsize::new(0)),
    };
    loop {
        // The worker does the work: the handler's scheduler slot is given
        // back while it waits for it.
        let event = ctx
            .external(async {
                tokio::select! {
                    biased;
                    () = ctx.cancelled() => Event::Cancelled,
                    msg = rx.recv() => Event::Hub(msg),
                    Some(()) = p.pending.next(), if !p.pending.is_empty() => Event::Progress,
                }
            })
            .await;
        match event {
            Event::Progress => {}
            Event::Cancelled => {
                registration.cancel = true;
                return Err(TaskError::Interrupted.into());
            }
            Event::Hub(None) => {
                return Err(ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    "the worker hub let go of this task",
                ));
            }
            Event::Hub(Some(ToProxy::Assigned { attempt, worker, out })) => {
                // A span per attempt, inside the task's: which worker ran
                // it, and for how long (closed when the attempt ends).
                p.span = tracing::info_span!(
                    "worker attempt",
                    subtask.worker = %worker,
                    subtask.attempt = attempt,
                    otel.name = %format_args!("worker attempt {attempt}"),
                );
                p.attempt = attempt;
                p.cursor = 0;
                p.waits = Arc::new(AtomicUsize::new(0));
                p.current.store(attempt, Ordering::Release);
                p.out = Some(out);
                if std::mem::take(&mut shown) {
                    ctx.clear_status_message();
                }
            }
            Event::Hub(Some(ToProxy::Lost { why })) => {
                tracing::info!(parent: &p.span, reason = %why, "worker attempt lost");
                p.span = tracing::Span::none();
                p.current.store(0, Ordering::Release);
                p.out = None;
                shown = true;
                ctx.set_status_message(format!(
                    "{why}: waiting for a worker to run it again (attempt {})",
                    p.attempt + 1
                ));
            }
            Event::Hub(Some(ToProxy::Frame(frame))) => {
                if let Some(end) = p.frame(frame).await {
                    if end.is_err() {
                        // A divergence or a failure: the worker stops.
                        registration.cancel = true;
                    }
                    return end;
                }
            }
        }
    }
}

impl Proxy {
    fn target(&self, reference: Option<u64>) -> Option<Target> {
        Some(Target {
            attempt: self.attempt,
            reference,
            out: self.out.clone()?,
            current: self.current.clone(),
        })
    }

    /// Takes one frame of the current attempt; `Some` ends the handler.
    async fn frame(&mut self, frame: FromWorker) -> Option<HandlerResult> {
        let reference = frame.reference();
        let target = self.target(reference)?;
        match frame {
            FromWorker::Heartbeat => None,
            FromWorker::Result(end) => Some(Ok(end.args.result)),
            FromWorker::Fail(end) => Some(Err(end.args.error)),
            FromWorker::Status(r) => {
                let a = r.args;
                match (a.message, a.progress) {
                    (None, None) => self.ctx.clear_status_message(),
                    (m, None) => self.ctx.set_status_message(m.unwrap_or_default()),
                    (m, Some(p)) => {
                        let of = a.total.map(|t| format!("/{t}")).unwrap_or_default();
                        let m = m.unwrap_or_default();
                        self.ctx
                            .set_status_message(format!("{m} ({p}{of})").trim_start().to_owned());
                    }
                }
                target.send(Ok(json!({})));
                None
            }
            FromWorker::Outcome(r) => {
                match self.children.get(&r.args.child) {
                    Some(handle) => {
                        let handle = handle.clone();
                        self.wait_on(Box::pin(async move {
                            let o = handle.outcome().await;
                            target.send(Ok(wire::outcome(&o)));
                        }));
                    }
                    None => target.send(Err(WireError::new(
                        "unknown_child",
                        format!("{} is not a subtask this task spawned", r.args.child),
                    ))),
                }
                None
            }
            FromWorker::Cancel(r) => {
                // Not an act: a re-run cancels again, which changes nothing.
                let answer = match self.children.get(&r.args.child) {
                    Some(handle) => handle
                        .cancel()
                        .map(|_| json!({}))
                        .map_err(|e| WireError::new("rejected", e.to_string())),
                    None => Err(WireError::new(
                        "unknown_child",
                        format!("{} is not a subtask this task spawned", r.args.child),
                    )),
                };
                target.send(answer);
                None
            }
            FromWorker::Stepped(r) => {
                let cell = match self.acts.get(r.args.act).map(|a| &a.kind) {
                    Some(ActKind::Step(cell)) => cell.clone(),
                    _ => {
                        target.send(Err(WireError::new(
                            "bad_frame",
                            format!("act {} is not a step", r.args.act),
                        )));
                        return None;
                    }
                };
                let mut s = cell.inner.lock();
                match s.output_tx.take() {
                    Some(tx) if matches!(s.phase, StepPhase::Running) => {
                        s.stepped = Some(target);
                        let _ = tx.send(r.args.output);
                    }
                    other => {
                        s.output_tx = other;
                        drop(s);
                        target.send(Err(WireError::new(
                            "bad_frame",
                            format!(
                                "step {} is not running (its output was recorded already)",
                                r.args.act
                            ),
                        )));
                    }
                }
                None
            }
            FromWorker::Spawn(r) => {
                let a = r.args;
                let arguments = a.arguments.unwrap_or_default();
                let opts = SubtaskOptions {
                    after: a.after,
                    fail_fast: a.fail_fast,
                    ttl_ms: a.ttl_ms,
                    ..SubtaskOptions::default()
                }
                .named(a.tool.clone())
                .args(&arguments);
                let identity = format!("spawn {:?} args#{}", a.tool, opts.args.as_deref().unwrap_or(""));
                if let Some(end) = self.replayed(&identity, &target) {
                    return end;
                }
                let answer = self.spawn(a.tool, arguments, opts).await;
                target.send(answer.clone());
                self.record(identity, ActKind::Ready(answer));
                None
            }
            FromWorker::Patched(r) => {
                let identity = format!("patched {:?}", r.args.id);
                if let Some(end) = self.replayed(&identity, &target) {
                    return end;
                }
                let answer = Ok(json!({"patched": self.ctx.patched(&r.args.id)}));
                target.send(answer.clone());
                self.record(identity, ActKind::Ready(answer));
                None
            }
            FromWorker::Checkpoint(_) => {
                let ctx = self.ctx.clone();
                self.waiting_act("checkpoint".to_owned(), target, async move {
                    ctx.checkpoint().await.map(|steers| json!({"steers": steers}))
                })
            }
            FromWorker::Pause(r) => {
                let ctx = self.ctx.clone();
                let reason = r
                    .args
                    .reason
                    .unwrap_or_else(|| "paused by its handler".to_owned());
                self.waiting_act("pause".to_owned(), target, async move {
                    ctx.pause_self(reason)
                        .await
                        .map(|steers| json!({"steers": steers}))
                })
            }
            FromWorker::Input(r) => {
                let ctx = self.ctx.clone();
                let key = r.args.key;
                let identity = format!("input {key:?}");
                let request = r.args.request;
                self.waiting_act(identity, target, async move {
                    ctx.request_input(key, request)
                        .await
                        .map(|response| json!({"response": response}))
                })
            }
            FromWorker::Step(r) => {
                let name = r.args.name;
                let identity = format!("step {name:?}");
                if let Some(end) = self.replayed(&identity, &target) {
                    return end;
                }
                let (output_tx, output_rx) = oneshot::channel();
                let cell = Arc::new(StepCell {
                    act: self.acts.len(),
                    inner: Mutex::new(StepInner {
                        phase: StepPhase::Waiting,
                        notify: Some(target),
                        stepped: None,
                        output_tx: Some(output_tx),
                        output_rx: Some(output_rx),
                    }),
                });
                let ctx = self.ctx.clone();
                let c = cell.clone();
                self.pending.push(Box::pin(async move {
                    let work = {
                        let c = c.clone();
                        move || async move {
                            let rx = {
                                let mut s = c.inner.lock();
                                s.phase = StepPhase::Running;
                                if let Some(t) = &s.notify {
                                    t.send(Ok(json!({"run": true, "act": c.act})));
                                }
                                s.notify = None;
                                s.output_rx.take()
                            };
                            match rx {
                                Some(rx) => rx.await.unwrap_or(Value::Null),
                                None => Value::Null,
                            }
                        }
                    };
                    let done: Result<Value, WireError> = ctx
                        .step(&name, work)
                        .await
                        .map_err(|e| WireError::of_task_error(&e));
                    let mut s = c.inner.lock();
                    let ran = matches!(s.phase, StepPhase::Running);
                    s.phase = StepPhase::Done(done.clone());
                    if ran && let Some(t) = s.stepped.take() {
                        t.send(done.clone().map(|_| json!({})));
                    }
                    if let Some(t) = s.notify.take() {
                        t.send(done.map(|output| json!({"done": true, "output": output})));
                    }
                }));
                self.record(identity, ActKind::Step(cell));
                None
            }
        }
    }

    /// At a place an earlier attempt recorded: answers from the record
    /// (`Some(None)`), or fails the task on a divergence (`Some(Some(err))`).
    /// `None` past the record: the act is new.
    #[allow(clippy::option_option)]
    fn replayed(&mut self, identity: &str, target: &Target) -> Option<Option<HandlerResult>> {
        let place = self.cursor;
        let act = self.acts.get(place)?;
        self.cursor += 1;
        if act.identity != identity {
            let message = format!(
                "the worker's re-run of this task diverged from its first attempt at act {place}: the first attempt did {}, the re-run does {identity}",
                act.identity
            );
            target.send(Err(WireError::new("divergence", message.clone())));
            return Some(Some(Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, message).with_data(
                json!({"reason": "divergence", "position": place, "recorded": act.identity, "rerun": identity}),
            ))));
        }
        match &act.kind {
            ActKind::Ready(answer) => target.send(answer.clone()),
            ActKind::Waiting(shared) => {
                let shared = shared.clone();
                let target = target.clone();
                self.wait_on(Box::pin(async move { target.send(shared.await) }));
            }
            ActKind::Step(cell) => {
                let mut s = cell.inner.lock();
                match &s.phase {
                    StepPhase::Done(done) => {
                        target.send(done.clone().map(|output| json!({"done": true, "output": output})));
                    }
                    StepPhase::Running if s.output_tx.is_some() => {
                        target.send(Ok(json!({"run": true, "act": cell.act})));
                    }
                    // Its output is being recorded, or it waits for its turn.
                    _ => s.notify = Some(target.clone()),
                }
            }
        }
        Some(None)
    }

    fn record(&mut self, identity: String, kind: ActKind) {
        self.acts.push(Act { identity, kind });
        self.cursor += 1;
    }

    /// An act answered when `call` returns.
    fn waiting_act(
        &mut self,
        identity: String,
        target: Target,
        call: impl Future<Output = Result<Value, TaskError>> + Send + 'static,
    ) -> Option<HandlerResult> {
        if let Some(end) = self.replayed(&identity, &target) {
            return end;
        }
        let shared = call
            .map(|r| r.map_err(|e| WireError::of_task_error(&e)))
            .boxed()
            .shared();
        let s = shared.clone();
        self.wait_on(Box::pin(async move { target.send(s.await) }));
        self.record(identity, ActKind::Waiting(shared));
        None
    }

    /// Runs `reply` (a wait that ends with a reply): at once when it is
    /// ready (a checkpoint of a task that is not paused, the outcome of a
    /// finished subtask), else beside the loop, with the task parked at the
    /// hub while any such wait is open (its worker's handler is waiting, so
    /// it does not count against the worker's capacity).
    fn wait_on(&mut self, mut reply: BoxFuture<'static, ()>) {
        if (&mut reply).now_or_never().is_some() {
            return;
        }
        if self.waits.fetch_add(1, Ordering::AcqRel) == 0 {
            self.hub.park(self.task, self.attempt, true);
        }
        // The attempt's own count: a wait of an earlier attempt that ends
        // later unparks nothing of this one (the hub checks the attempt).
        let (waits, hub, task, attempt) = (self.waits.clone(), self.hub.clone(), self.task, self.attempt);
        self.pending.push(Box::pin(async move {
            reply.await;
            if waits.fetch_sub(1, Ordering::AcqRel) == 1 {
                hub.park(task, attempt, false);
            }
        }));
    }

    /// Spawns a subtask calling `tool` (a worker tool or the server's own).
    async fn spawn(
        &mut self,
        tool: String,
        arguments: JsonObject,
        opts: SubtaskOptions,
    ) -> Result<Value, WireError> {
        let server = self
            .hub
            .server()
            .ok_or_else(|| WireError::new("rejected", "the server is shutting down"))?;
        let registered = server
            .registered_tool(&tool)
            .ok_or_else(|| WireError::new("unknown_tool", format!("unknown tool {tool:?}")))?;
        let value = Value::Object(arguments.as_map().clone());
        if let Err(e) = registered.spec.check_argument_value(&value) {
            return Err(WireError::new("bad_arguments", format!("{tool}: {e}")));
        }
        let call = ToolCall {
            name: tool.clone(),
            arguments,
            input_responses: None,
            request_state: None,
            client_capabilities: Default::default(),
            tasks: None,
        };
        let body: crate::server::TaskBody = match registered.tool.call(call).await {
            ToolOutcome::Task { body, .. } => body,
            ToolOutcome::Complete(result) => Box::new(move |_| Box::pin(async move { Ok(result) })),
            ToolOutcome::InputRequired { .. } => {
                return Err(WireError::new(
                    "rejected",
                    format!(
                        "tool {tool:?} asks for client input before it starts, which a subtask cannot give"
                    ),
                ));
            }
            ToolOutcome::Error(e) => return Err(WireError::new("rejected", e.message)),
        };
        let handle = self
            .ctx
            .spawn_body(opts, body)
            .map_err(|e| WireError::of_task_error(&e))?;
        let id = handle.id();
        self.children.insert(id, handle);
        Ok(json!({"taskId": id}))
    }
}
