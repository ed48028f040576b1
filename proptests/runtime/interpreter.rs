//! Runs a script as a task handler on the real runtime, and records what
//! the handler saw and did in [`Shared`] (steers at each checkpoint,
//! answers, awaited outcomes, dependency outcomes, spawns). Checks what
//! only a handler can see at the moment it sees it (the steers delivered,
//! the scheduler limits while it works) and reports violations through
//! [`Shared::violation`]; it never fails the case itself.

use std::collections::HashMap;
use std::sync::{Arc, Once};
use std::task::Poll;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::json;
use subtask::core::{Limits, TransitionError};
use subtask::model::{ErrorCode, ErrorObject, JsonObject, TaskId, TaskStatus};
use subtask::runtime::{
    HandlerResult, Runtime, RuntimeError, SubtaskHandle, SubtaskOptions, TaskContext, TaskError, TaskOutcome,
};

use crate::V;
use crate::checks::keys_of;
use crate::script::{ChildSpec, End, Script, Step, TimedOp};

pub const SCRIPT_PANIC: &str = "script panic";

// ----- handlers ----------------------------------------------------------------

/// What a handler saw and did.
#[derive(Default)]
pub struct HandlerLog {
    pub label: String,
    pub started: bool,
    /// The handler's future is gone (returned, panicked or aborted).
    pub exited: bool,
    pub parent: Option<TaskId>,
    pub deps_seen: Vec<(TaskId, TaskOutcome)>,
    /// Successful spawns in order, with their `after` list.
    pub spawned: Vec<(TaskId, Vec<TaskId>)>,
    pub awaited: Vec<(TaskId, TaskOutcome)>,
    pub delivered: Vec<String>,
    pub requested: Vec<String>,
    pub answers: Vec<(String, JsonObject)>,
    pub returned: Option<HandlerResult>,
    pub panicked: bool,
    /// Context calls given up (`Step::Timed`).
    pub gave_up: u64,
    /// Input keys whose `request_input` future the handler dropped.
    pub withdrawn: Vec<String>,
}

/// State shared by the handlers and the driver.
pub struct Shared {
    pub limits: Limits,
    pub max_running: usize,
    pub per_tree: usize,
    /// Handlers in a `Sleep` or `Work` step (so holding a scheduler slot):
    /// in all, and per tree.
    pub busy: Mutex<(usize, HashMap<TaskId, usize>)>,
    /// The runtime, for handler-side observations (cleared at the end to
    /// break the reference cycle through queued handler bodies).
    pub rt: Mutex<Option<Runtime>>,
    pub logs: Mutex<HashMap<TaskId, HandlerLog>>,
    pub names: Mutex<HashMap<TaskId, String>>,
    /// Steers accepted by `Runtime::steer`, per task, in order.
    pub accepted: Mutex<HashMap<TaskId, Vec<String>>>,
    pub violations: Mutex<Vec<String>>,
}

impl Shared {
    pub fn log<R>(&self, id: TaskId, f: impl FnOnce(&mut HandlerLog) -> R) -> R {
        f(self.logs.lock().entry(id).or_default())
    }

    pub fn violation(&self, msg: String) {
        self.violations.lock().push(msg);
    }

    pub fn name(&self, id: TaskId) -> String {
        self.names
            .lock()
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("?{}", &id.to_string()[..8]))
    }

    pub fn status_of(&self, id: TaskId) -> Option<TaskStatus> {
        let rt = self.rt.lock().clone()?;
        rt.get(id, V).map(|t| t.status())
    }

    /// Records steers a handler received; at that moment the task's queue
    /// was drained, so it has received exactly the accepted steers.
    pub fn delivered(&self, id: TaskId, steers: Vec<String>, at: &str) {
        let accepted = self.accepted.lock().get(&id).cloned().unwrap_or_default();
        let (label, delivered) = self.log(id, |l| {
            l.delivered.extend(steers);
            (l.label.clone(), l.delivered.clone())
        });
        if delivered != accepted {
            self.violation(format!(
                "I10/I11: {label} returned from {at} having received the steers {delivered:?}, \
                 but the accepted steers are {accepted:?}"
            ));
        }
    }
}

/// A handler doing work holds a scheduler slot: counts it and checks the
/// global and per-tree limits.
pub struct Busy(Arc<Shared>, TaskId);

impl Busy {
    pub fn enter(sh: &Arc<Shared>, root: TaskId, label: &str) -> Busy {
        let (all, tree) = {
            let mut b = sh.busy.lock();
            b.0 += 1;
            let t = b.1.entry(root).or_default();
            *t += 1;
            let tree = *t;
            (b.0, tree)
        };
        // A handler that abandoned a parked wait (a timeout around a context
        // call) reclaims a slot at once, above the limits if none is free
        // (docs/architecture.md, "Scheduler"): the limits stretch by at most
        // the number of such live handlers.
        let extra = sh
            .logs
            .lock()
            .values()
            .filter(|l| l.gave_up > 0 && l.returned.is_none() && !l.panicked)
            .count();
        if all > sh.max_running + extra || tree > sh.per_tree + extra {
            sh.violation(format!(
                "scheduler limits: {label} runs while {all} handlers run ({tree} in its tree), limits {} and {}",
                sh.max_running, sh.per_tree
            ));
        }
        Busy(sh.clone(), root)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut b = self.0.busy.lock();
        b.0 -= 1;
        if let Some(t) = b.1.get_mut(&self.1) {
            *t -= 1;
        }
    }
}

/// Marks the handler as exited when its future is dropped (return, panic or abort).
pub struct ExitGuard(Arc<Shared>, TaskId);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.0.log(self.1, |l| l.exited = true);
    }
}

pub fn obj(v: serde_json::Value) -> JsonObject {
    JsonObject::from_value(v).expect("an object")
}

pub fn body(
    sh: Arc<Shared>,
    label: String,
    depth: u32,
    script: Script,
) -> impl FnOnce(TaskContext) -> BoxFuture<'static, HandlerResult> + Send + 'static {
    move |ctx| Box::pin(run_script(ctx, sh, label, depth, script))
}

pub fn interrupted() -> HandlerResult {
    Err(TaskError::Interrupted.into())
}

/// Handles the result of `checkpoint` / `pause_self`: `Some` to return it.
pub fn on_steers(
    sh: &Shared,
    id: TaskId,
    at: &str,
    r: Result<Vec<String>, TaskError>,
) -> Option<HandlerResult> {
    match r {
        Ok(steers) => {
            sh.delivered(id, steers, at);
            None
        }
        Err(TaskError::Interrupted) => Some(interrupted()),
        Err(TaskError::Diverged(e)) => {
            sh.violation(format!(
                "{at} of {} diverged outside a durable tree: {}",
                sh.name(id),
                e.message
            ));
            Some(Err(e))
        }
        Err(TaskError::Rejected(e)) => {
            // A handler that gave up a parked wait runs on while its task
            // stays paused (documented for `pause_self`): then, and only
            // then, `pause_self` finds the task already paused.
            let gave_up = sh.log(id, |l| l.gave_up > 0);
            let already_paused = matches!(&e, RuntimeError::Transition(TransitionError::AlreadyPaused(_)));
            if !(at == "pause_self" && already_paused && gave_up) {
                sh.violation(format!("{at} of {} rejected: {e}", sh.name(id)));
            }
            Some(Err(e.into()))
        }
    }
}

/// Handles the result of `request_input`: `Some` to return it.
pub fn on_answer(
    sh: &Shared,
    id: TaskId,
    key: String,
    r: Result<JsonObject, TaskError>,
) -> Option<HandlerResult> {
    match r {
        Ok(answer) => {
            sh.log(id, |l| l.answers.push((key, answer)));
            None
        }
        Err(TaskError::Interrupted) => Some(interrupted()),
        Err(TaskError::Diverged(e)) => {
            sh.violation(format!(
                "request_input of {} diverged outside a durable tree: {}",
                sh.name(id),
                e.message
            ));
            Some(Err(e))
        }
        Err(TaskError::Rejected(e)) => {
            sh.violation(format!(
                "I9: request_input of {} with the fresh key {key:?} rejected: {e}",
                sh.name(id)
            ));
            Some(Err(e.into()))
        }
    }
}

pub async fn run_script(
    ctx: TaskContext,
    sh: Arc<Shared>,
    label: String,
    depth: u32,
    script: Script,
) -> HandlerResult {
    let id = ctx.task_id();
    let parent = ctx.parent_task_id();
    let root = ctx.root_task_id();
    sh.log(id, |l| {
        l.label = label.clone();
        l.started = true;
        l.parent = parent;
        l.deps_seen = ctx
            .dependencies()
            .iter()
            .map(|d| (d.id, d.outcome.clone()))
            .collect();
    });
    let _exit = ExitGuard(sh.clone(), id);
    let mut handles: Vec<SubtaskHandle> = Vec::new();
    let mut keys = 0usize;
    for (i, step) in script.steps.into_iter().enumerate() {
        match step {
            Step::Spawn(spec) => {
                let ChildSpec {
                    fail_fast,
                    after,
                    ttl_ms,
                    script,
                } = *spec;
                let after: Vec<TaskId> = match after {
                    Some(j) if !handles.is_empty() => vec![handles[j % handles.len()].id()],
                    _ => Vec::new(),
                };
                let opts = SubtaskOptions {
                    ttl_ms,
                    poll_interval_ms: None,
                    fail_fast,
                    after: after.clone(),
                    ..SubtaskOptions::default()
                };
                let child_label = format!("{label}.{i}");
                let winding = ctx.is_cancelled();
                let over_limit =
                    depth + 1 > sh.limits.max_depth || handles.len() >= sh.limits.max_children as usize;
                match ctx.spawn_subtask(opts, body(sh.clone(), child_label.clone(), depth + 1, script)) {
                    Ok(h) => {
                        if winding || over_limit {
                            sh.violation(format!(
                                "I5: {label} spawned {child_label} although it was winding down ({winding}) \
                                 or over a limit ({over_limit})"
                            ));
                        }
                        sh.names.lock().insert(h.id(), child_label);
                        sh.log(id, |l| l.spawned.push((h.id(), after)));
                        handles.push(h);
                    }
                    Err(TaskError::Interrupted) => {
                        if !winding {
                            sh.violation(format!(
                                "spawn_subtask in {label} was interrupted while not winding down"
                            ));
                        }
                        return interrupted();
                    }
                    Err(TaskError::Diverged(e)) => {
                        sh.violation(format!(
                            "spawn_subtask in {label} diverged outside a durable tree: {}",
                            e.message
                        ));
                        return Err(e);
                    }
                    Err(TaskError::Rejected(e)) => {
                        if winding || !over_limit {
                            sh.violation(format!(
                                "spawn_subtask in {label} rejected ({e}), winding down {winding}, over a limit \
                                 {over_limit}"
                            ));
                        }
                    }
                }
            }
            Step::Await(j) => {
                if handles.is_empty() {
                    continue;
                }
                let h = handles[j % handles.len()].clone();
                let child = h.id();
                let outcome = h.await;
                sh.log(id, |l| l.awaited.push((child, outcome)));
            }
            Step::Checkpoint => {
                if let Some(r) = on_steers(&sh, id, "a checkpoint", ctx.checkpoint().await) {
                    return r;
                }
            }
            Step::Input => {
                let key = format!("{label}#{keys}");
                keys += 1;
                sh.log(id, |l| l.requested.push(key.clone()));
                let fut = ctx.request_input(
                    key.clone(),
                    obj(json!({"method": "elicitation/create", "key": key})),
                );
                tokio::pin!(fut);
                // The first poll makes the request; nothing else runs meanwhile.
                let before = parent.and_then(|p| sh.status_of(p));
                let first = futures::poll!(fut.as_mut());
                let after = parent.and_then(|p| sh.status_of(p));
                if before != after {
                    sh.violation(format!(
                        "I7: {label} requesting input changed its parent's status from {before:?} to {after:?}"
                    ));
                }
                let r = match first {
                    Poll::Ready(r) => r,
                    Poll::Pending => fut.await,
                };
                if let Some(r) = on_answer(&sh, id, key, r) {
                    return r;
                }
            }
            Step::Sleep(ms) => {
                let _busy = Busy::enter(&sh, root, &label);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Step::Work(ms) => {
                let _busy = Busy::enter(&sh, root, &label);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    () = ctx.cancelled() => return interrupted(),
                }
            }
            Step::Status => ctx.set_status_message(format!("{label} at step {i}")),
            Step::PauseSelf => {
                if let Some(r) = on_steers(&sh, id, "pause_self", ctx.pause_self("script pause").await) {
                    return r;
                }
            }
            Step::Timed(op, ms) => {
                let give_up = tokio::time::sleep(Duration::from_millis(ms));
                tokio::pin!(give_up);
                match op {
                    TimedOp::Checkpoint => {
                        tokio::select! {
                            biased;
                            r = ctx.checkpoint() => {
                                if let Some(r) = on_steers(&sh, id, "a timed checkpoint", r) {
                                    return r;
                                }
                            }
                            () = &mut give_up => sh.log(id, |l| l.gave_up += 1),
                        }
                    }
                    TimedOp::Input => {
                        let key = format!("{label}#{keys}");
                        keys += 1;
                        sh.log(id, |l| l.requested.push(key.clone()));
                        let request = obj(json!({"method": "elicitation/create", "key": key}));
                        tokio::select! {
                            biased;
                            r = ctx.request_input(key.clone(), request) => {
                                if let Some(r) = on_answer(&sh, id, key, r) {
                                    return r;
                                }
                            }
                            () = &mut give_up => {
                                // Dropping the future withdrew the request.
                                let rt = sh.rt.lock().clone();
                                if let Some(t) = rt.and_then(|rt| rt.get(id, V))
                                    && keys_of(&t).contains(&key)
                                {
                                    sh.violation(format!(
                                        "{label} dropped its request_input future, but {key:?} is still outstanding"
                                    ));
                                }
                                sh.log(id, |l| {
                                    l.gave_up += 1;
                                    l.withdrawn.push(key);
                                });
                            }
                        }
                    }
                    TimedOp::Await(j) => {
                        if handles.is_empty() {
                            continue;
                        }
                        let h = handles[j % handles.len()].clone();
                        let child = h.id();
                        tokio::select! {
                            biased;
                            outcome = h.into_future() => sh.log(id, |l| l.awaited.push((child, outcome))),
                            () = &mut give_up => sh.log(id, |l| l.gave_up += 1),
                        }
                    }
                }
            }
        }
    }
    match script.end {
        End::Return => {
            let r = obj(json!({"label": label}));
            sh.log(id, |l| l.returned = Some(Ok(r.clone())));
            Ok(r)
        }
        End::Error => {
            let e = ErrorObject::new(ErrorCode(-32001), format!("script error in {label}"));
            sh.log(id, |l| l.returned = Some(Err(e.clone())));
            Err(e)
        }
        End::Panic => {
            sh.log(id, |l| l.panicked = true);
            std::panic::panic_any(SCRIPT_PANIC)
        }
    }
}

/// Keeps the intended handler panics out of the test output.
pub fn quiet_script_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() == Some(&SCRIPT_PANIC) {
                return;
            }
            prev(info);
        }));
    });
}
