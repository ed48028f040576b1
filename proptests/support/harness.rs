//! Runs a command sequence on the core and on the reference model in lock
//! step, and after every step checks that they agree and that the invariants
//! of `docs/lifecycle.md` hold (structural ones through
//! `Forest::check_invariants`, temporal ones by comparing with the previous
//! step).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use proptest::test_runner::TestCaseError;
use subtask::core::{
    ChildOptions, ClientView, Effect, Forest, ForestConfig, HandlerOutcome, ResultCursor, RootOptions,
    SafePoint, TransitionError,
};
use subtask::model::{
    DetailedTask, ErrorCode, ErrorObject, JsonObject, Task, TaskId, TaskPayload, TaskStatus, Timestamp,
};

use super::commands::{Cmd, FinishKind, KeyChoice, KeyPick, Pick, SteerSize, Step, Target};
use super::reference::{Ending, Expect, Handler, Model, Pause, Ret};

/// A command with its targets resolved to ids and its arguments made concrete.
#[derive(Debug, Clone)]
pub enum Op {
    CreateRoot {
        ttl: Option<u64>,
        poll: Option<u64>,
    },
    CreateChild {
        parent: TaskId,
        ttl: Option<u64>,
        poll: Option<u64>,
        fail_fast: bool,
    },
    Start(TaskId),
    SetStatusMessage(TaskId, Option<String>),
    RequestInput(TaskId, String),
    WithdrawInput(TaskId, String),
    AnswerInput(TaskId, BTreeMap<String, JsonObject>),
    Steer(TaskId, String),
    TakeSteers(TaskId),
    ReachSafePoint(TaskId),
    EnterWait(TaskId),
    LeaveWait(TaskId),
    WaitPoint(TaskId),
    Pause(TaskId),
    PauseSelf(TaskId, Option<String>),
    Resume(TaskId),
    Cancel(TaskId),
    Finish(TaskId, HandlerOutcome),
    SetTtl(TaskId, Option<u64>),
    HandleTimeout,
    DeleteTree(TaskId),
}

impl Op {
    /// The task the command names.
    pub fn target(&self) -> Option<TaskId> {
        match self {
            Op::CreateRoot { .. } | Op::HandleTimeout => None,
            Op::CreateChild { parent, .. } => Some(*parent),
            Op::Start(id)
            | Op::SetStatusMessage(id, _)
            | Op::RequestInput(id, _)
            | Op::WithdrawInput(id, _)
            | Op::AnswerInput(id, _)
            | Op::Steer(id, _)
            | Op::TakeSteers(id)
            | Op::ReachSafePoint(id)
            | Op::EnterWait(id)
            | Op::LeaveWait(id)
            | Op::WaitPoint(id)
            | Op::Pause(id)
            | Op::PauseSelf(id, _)
            | Op::Resume(id)
            | Op::Cancel(id)
            | Op::Finish(id, _)
            | Op::SetTtl(id, _)
            | Op::DeleteTree(id) => Some(*id),
        }
    }
}

impl Op {
    /// The command's name.
    pub fn name(&self) -> &'static str {
        match self {
            Op::CreateRoot { .. } => "create_root",
            Op::CreateChild { .. } => "create_child",
            Op::Start(_) => "start",
            Op::SetStatusMessage(..) => "set_status_message",
            Op::RequestInput(..) => "request_input",
            Op::WithdrawInput(..) => "withdraw_input",
            Op::AnswerInput(..) => "answer_input",
            Op::Steer(..) => "steer",
            Op::TakeSteers(_) => "take_steers",
            Op::ReachSafePoint(_) => "reach_safe_point",
            Op::EnterWait(_) => "enter_wait",
            Op::LeaveWait(_) => "leave_wait",
            Op::WaitPoint(_) => "wait_point",
            Op::Pause(_) => "pause",
            Op::PauseSelf(..) => "pause_self",
            Op::Resume(_) => "resume",
            Op::Cancel(_) => "cancel",
            Op::Finish(..) => "finish",
            Op::SetTtl(..) => "set_ttl",
            Op::HandleTimeout => "handle_timeout",
            Op::DeleteTree(_) => "delete_tree",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::CreateRoot { ttl, poll } => write!(f, "create_root(ttl={ttl:?}, poll={poll:?})"),
            Op::CreateChild {
                parent,
                ttl,
                poll,
                fail_fast,
            } => {
                write!(
                    f,
                    "create_child({parent:?}, ttl={ttl:?}, poll={poll:?}, fail_fast={fail_fast})"
                )
            }
            Op::Start(id) => write!(f, "start({id:?})"),
            Op::SetStatusMessage(id, m) => write!(f, "set_status_message({id:?}, {m:?})"),
            Op::RequestInput(id, k) => write!(f, "request_input({id:?}, {k:?})"),
            Op::WithdrawInput(id, k) => write!(f, "withdraw_input({id:?}, {k:?})"),
            Op::AnswerInput(id, r) => write!(f, "answer_input({id:?}, {:?})", r.keys().collect::<Vec<_>>()),
            Op::Steer(id, m) if m.len() > 40 => write!(f, "steer({id:?}, <{} bytes>)", m.len()),
            Op::Steer(id, m) => write!(f, "steer({id:?}, {m:?})"),
            Op::TakeSteers(id) => write!(f, "take_steers({id:?})"),
            Op::ReachSafePoint(id) => write!(f, "reach_safe_point({id:?})"),
            Op::EnterWait(id) => write!(f, "enter_wait({id:?})"),
            Op::LeaveWait(id) => write!(f, "leave_wait({id:?})"),
            Op::WaitPoint(id) => write!(f, "wait_point({id:?})"),
            Op::Pause(id) => write!(f, "pause({id:?})"),
            Op::PauseSelf(id, r) => write!(f, "pause_self({id:?}, {r:?})"),
            Op::Resume(id) => write!(f, "resume({id:?})"),
            Op::Cancel(id) => write!(f, "cancel({id:?})"),
            Op::Finish(id, o) => write!(f, "finish({id:?}, {o:?})"),
            Op::SetTtl(id, t) => write!(f, "set_ttl({id:?}, {t:?})"),
            Op::HandleTimeout => write!(f, "handle_timeout()"),
            Op::DeleteTree(id) => write!(f, "delete_tree({id:?})"),
        }
    }
}

/// What the core shows of one task: both views, the queued steers and the
/// outstanding input requests (also while `paused`, when the wire hides them).
#[derive(Debug, Clone, PartialEq)]
struct CoreTask {
    aware: DetailedTask,
    base: DetailedTask,
    steers: Vec<String>,
    outstanding: BTreeMap<String, JsonObject>,
}

impl CoreTask {
    fn status(&self) -> TaskStatus {
        self.aware.status()
    }
    fn task(&self) -> &Task {
        self.aware.task()
    }
    /// The snapshot without `lastUpdatedAt`, to tell observable changes.
    fn observable(&self) -> (Task, TaskPayload) {
        let (mut t, p) = self.aware.clone().into_parts();
        t.last_updated_at = Timestamp::EPOCH;
        (t, p)
    }
}

struct Cursor {
    root: usize,
    cursor: ResultCursor,
    emitted: Vec<TaskId>,
    expected: Vec<usize>,
}

/// The core and the model side by side.
pub struct Harness {
    pub forest: Forest,
    pub model: Model,
    now: u64,
    counter: u64,
    trace: Vec<String>,
    cursors: Vec<Cursor>,
    /// Every accepted steer message: (task, submission number). Messages are unique.
    submitted: HashMap<String, (usize, u64)>,
    /// Submission number of the last steer delivered to each task.
    last_delivered: HashMap<usize, u64>,
    /// What the run exercised.
    pub stats: Stats,
    /// What the core showed after the last command, per model task.
    state: Vec<Option<CoreTask>>,
    /// Called after every command (accepted or not) with the forest as the
    /// command left it and the command's effects, before any check: how a
    /// driver sees them (`prop_store` persists them as the runtime does).
    pub on_effects: Option<EffectHook>,
}

/// See [`Harness::on_effects`].
pub type EffectHook = Box<dyn FnMut(&Forest, &[Effect])>;

/// What a run exercised, to check that the generator reaches the interesting states.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// "command: outcome" → count (outcome is `Ok(..)` or the error variant).
    pub outcomes: BTreeMap<String, usize>,
    /// Wire statuses observed after some step.
    pub statuses: BTreeSet<&'static str>,
    /// Internal situations observed (fail-fast, completing while paused, ...).
    pub situations: BTreeMap<&'static str, usize>,
    pub max_depth: u32,
    pub max_children: usize,
    pub max_tasks: usize,
    pub steers_delivered: usize,
    pub results_emitted: usize,
}

impl Stats {
    pub fn merge(&mut self, o: &Stats) {
        for (k, v) in &o.outcomes {
            *self.outcomes.entry(k.clone()).or_default() += v;
        }
        self.statuses.extend(o.statuses.iter().copied());
        for (k, v) in &o.situations {
            *self.situations.entry(k).or_default() += v;
        }
        self.max_depth = self.max_depth.max(o.max_depth);
        self.max_children = self.max_children.max(o.max_children);
        self.max_tasks = self.max_tasks.max(o.max_tasks);
        self.steers_delivered += o.steers_delivered;
        self.results_emitted += o.results_emitted;
    }

    fn record(&mut self, op: &Op, r: &Result<Ret, TransitionError>, m: &Model) {
        let outcome = match r {
            Ok(Ret::Pause(p)) => format!("Ok({p:?})"),
            Ok(Ret::Cancel(c)) => format!("Ok({c:?})"),
            Ok(Ret::Safe(SafePoint::Continue(v))) if !v.is_empty() => "Ok(Continue(steers))".to_owned(),
            Ok(Ret::Safe(sp)) => format!("Ok({sp:?})"),
            Ok(Ret::Steers(v)) if !v.is_empty() => "Ok(steers)".to_owned(),
            Ok(Ret::Keys(v)) if !v.is_empty() => "Ok(keys)".to_owned(),
            Ok(Ret::Bool(b)) => format!("Ok({b})"),
            Ok(_) => "Ok".to_owned(),
            Err(TransitionError::LimitExceeded { limit, .. }) => format!("LimitExceeded({limit:?})"),
            Err(e) => format!("{e:?}")
                .split(['(', ' '])
                .next()
                .unwrap_or("?")
                .to_owned(),
        };
        *self
            .outcomes
            .entry(format!("{}: {outcome}", op.name()))
            .or_default() += 1;
        let mut live = 0;
        for i in 0..m.tasks.len() {
            if !m.exists(i) {
                continue;
            }
            live += 1;
            let t = &m.tasks[i];
            self.statuses.insert(m.status(i).as_str());
            self.max_depth = self.max_depth.max(m.depth(i));
            self.max_children = self.max_children.max(t.children.len());
            let mut seen = |k: &'static str| *self.situations.entry(k).or_default() += 1;
            match (&t.outcome, &t.ending, &t.pause, &t.handler) {
                (Some(super::reference::Outcome::Failed(e)), ..) if e.message.starts_with("subtask ") => {
                    seen("failed by fail-fast")
                }
                (Some(super::reference::Outcome::Failed(e)), ..) if e.message.starts_with("task expired") => {
                    seen("failed by expiry")
                }
                (None, Some(Ending::Cancelling), _, Handler::Running) => seen("cancelling, handler running"),
                (None, Some(Ending::Failing(_)), _, Handler::Running) => seen("failing, handler running"),
                (None, Some(Ending::Failing(_)), _, Handler::Exited(_)) => {
                    seen("failing, waiting for children")
                }
                (None, None, Pause::Paused { .. }, Handler::Exited(_)) => seen("completing while paused"),
                (None, None, Pause::Paused { via }, _) if *via != i => seen("paused via an ancestor"),
                (None, None, Pause::Paused { .. }, Handler::Queued) => seen("paused before start"),
                (None, None, Pause::Pending { .. }, _) => seen("pause pending"),
                (None, None, Pause::Paused { .. }, Handler::Running) if t.waits > 0 => {
                    seen("paused while awaiting a subtask")
                }
                (None, None, Pause::Paused { .. }, _) if !t.outstanding.is_empty() => {
                    seen("paused with input outstanding")
                }
                _ => {}
            }
        }
        self.max_tasks = self.max_tasks.max(live);
        if !m.fx.deleted.is_empty() && matches!(op, Op::HandleTimeout) {
            *self.situations.entry("tree deleted by timeout").or_default() += 1;
        }
    }
}

pub type Check = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

fn running(m: &Model, i: usize) -> bool {
    m.is_live(i) && m.tasks[i].handler == Handler::Running
}

impl Harness {
    pub fn new(config: ForestConfig) -> Self {
        Harness {
            forest: Forest::new(config),
            model: Model::new(config.limits, config.deletion_grace_ms),
            now: 1_000,
            counter: 0,
            trace: Vec::new(),
            cursors: Vec::new(),
            submitted: HashMap::new(),
            last_delivered: HashMap::new(),
            stats: Stats::default(),
            state: Vec::new(),
            on_effects: None,
        }
    }

    /// Runs every step, failing with the (renamed) trace on the first disagreement.
    pub fn run(config: ForestConfig, steps: &[Step]) -> Result<Harness, TestCaseError> {
        Self::run_with(config, steps, |_| Ok(()))
    }

    /// [`Harness::run`] with an extra check after every step.
    pub fn run_with(
        config: ForestConfig,
        steps: &[Step],
        mut extra: impl FnMut(&Harness) -> Check,
    ) -> Result<Harness, TestCaseError> {
        let mut h = Harness::new(config);
        h.trace.push(format!("config: {config:?}"));
        for s in steps {
            if let Err(msg) = h.step(s).and_then(|()| extra(&h)) {
                return Err(TestCaseError::fail(h.report(&msg)));
            }
        }
        Ok(h)
    }

    /// The failure message with task ids replaced by `t<index>` (creation order).
    pub fn report(&self, msg: &str) -> String {
        let mut out = format!("{msg}\n--- trace (time, command -> result) ---\n");
        for line in &self.trace {
            out.push_str(line);
            out.push('\n');
        }
        self.rename(&out)
    }

    fn rename(&self, s: &str) -> String {
        let mut s = s.to_owned();
        for (i, t) in self.model.tasks.iter().enumerate() {
            s = s.replace(&format!("{:?}", t.id), &format!("t{i}"));
            s = s.replace(&t.id.to_string(), &format!("t{i}"));
        }
        s
    }

    fn fresh(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    // ----- resolving generated commands --------------------------------------

    fn unknown_id(idx: &proptest::sample::Index) -> TaskId {
        TaskId::from_u128(0x0bad_0000_0000_4000_8000_0000_0000_0000 | idx.index(1 << 20) as u128)
    }

    fn pick(&self, t: &Target, fit: &dyn Fn(&Model, usize) -> bool) -> TaskId {
        let m = &self.model;
        let n = m.tasks.len();
        let cands: Vec<usize> = match t.pick {
            Pick::Fit | Pick::FitRecent => (0..n).filter(|&i| m.exists(i) && fit(m, i)).collect(),
            Pick::Live => (0..n).filter(|&i| m.is_live(i)).collect(),
            Pick::Recent => (n.saturating_sub(4)..n).collect(),
            Pick::Any => (0..n).collect(),
            Pick::Unknown => return Self::unknown_id(&t.idx),
        };
        // Fall back to a live task, then to any retrievable one, then to any ever created.
        let live = || (0..n).filter(|&i| m.is_live(i)).collect::<Vec<_>>();
        let existing = || (0..n).filter(|&i| m.exists(i)).collect::<Vec<_>>();
        let cands = if cands.is_empty() { live() } else { cands };
        let cands = if cands.is_empty() { existing() } else { cands };
        let cands = if cands.is_empty() { (0..n).collect() } else { cands };
        if cands.is_empty() {
            return Self::unknown_id(&t.idx);
        }
        let i = match t.pick {
            Pick::FitRecent => cands[cands.len() - 1],
            _ => cands[t.idx.index(cands.len())],
        };
        m.tasks[i].id
    }

    fn key(&mut self, target: TaskId, k: &KeyChoice) -> String {
        let task = self.model.find(target).map(|i| &self.model.tasks[i]);
        let outstanding: Vec<String> = task
            .map(|t| t.outstanding.keys().cloned().collect())
            .unwrap_or_default();
        let used: Vec<String> = task.map(|t| t.used.iter().cloned().collect()).unwrap_or_default();
        match k.pick {
            KeyPick::Pool(n) => format!("k{n}"),
            KeyPick::Unique => format!("u{}", self.fresh()),
            KeyPick::Never => format!("never{}", k.idx.index(4)),
            KeyPick::Outstanding if !outstanding.is_empty() => {
                outstanding[k.idx.index(outstanding.len())].clone()
            }
            KeyPick::Outstanding | KeyPick::Used if !used.is_empty() => used[k.idx.index(used.len())].clone(),
            KeyPick::Outstanding | KeyPick::Used => "k0".to_owned(),
        }
    }

    fn resolve(&mut self, cmd: &Cmd) -> Op {
        match cmd {
            Cmd::CreateRoot { ttl, poll, .. } => Op::CreateRoot {
                ttl: *ttl,
                poll: *poll,
            },
            Cmd::CreateChild {
                parent,
                ttl,
                poll,
                fail_fast,
                ..
            } => Op::CreateChild {
                parent: self.pick(parent, &|m, i| running(m, i) && m.tasks[i].ending.is_none()),
                ttl: *ttl,
                poll: *poll,
                fail_fast: *fail_fast,
            },
            Cmd::Start(t) => Op::Start(self.pick(t, &|m, i| {
                m.is_live(i) && m.tasks[i].handler == Handler::Queued && m.status(i) != TaskStatus::Paused
            })),
            Cmd::SetStatusMessage(t, some) => {
                let id = self.pick(t, &|m, i| m.is_live(i));
                let msg = some.then(|| format!("message {}", self.fresh()));
                Op::SetStatusMessage(id, msg)
            }
            Cmd::RequestInput(t, k) => {
                let id = self.pick(t, &|m, i| running(m, i) && m.tasks[i].ending.is_none());
                Op::RequestInput(id, self.key(id, k))
            }
            Cmd::WithdrawInput(t, k) => {
                let id = self.pick(t, &|m, i| !m.tasks[i].outstanding.is_empty());
                Op::WithdrawInput(id, self.key(id, k))
            }
            Cmd::AnswerInput(t, ks) => {
                let id = self.pick(t, &|m, i| !m.tasks[i].outstanding.is_empty());
                let mut responses = BTreeMap::new();
                for k in ks {
                    let key = self.key(id, k);
                    let n = self.fresh();
                    responses.insert(key.clone(), json(serde_json::json!({ "answer": key, "n": n })));
                }
                Op::AnswerInput(id, responses)
            }
            Cmd::Steer(t, size) => {
                // Fit includes completing tasks (handler exited): rejected, but reachable.
                let id = self.pick(t, &|m, i| m.is_live(i) && m.tasks[i].ending.is_none());
                let mut msg = format!("m{}", self.fresh());
                let len = match size {
                    SteerSize::Small => 0,
                    SteerSize::Medium => 40,
                    SteerSize::Huge => 16 * 1024 + 1,
                };
                while msg.len() < len {
                    msg.push('.');
                }
                Op::Steer(id, msg)
            }
            Cmd::TakeSteers(t) => {
                Op::TakeSteers(self.pick(t, &|m, i| running(m, i) && !m.tasks[i].steers.is_empty()))
            }
            Cmd::Spawn { .. } | Cmd::Dive { .. } => unreachable!("runs several commands"),
            Cmd::ReachSafePoint(t) => Op::ReachSafePoint(self.pick(t, &running)),
            Cmd::EnterWait(t) => Op::EnterWait(self.pick(t, &running)),
            Cmd::LeaveWait(t) => Op::LeaveWait(self.pick(t, &|m, i| running(m, i) && m.tasks[i].waits > 0)),
            Cmd::WaitPoint(t) => Op::WaitPoint(self.pick(t, &running)),
            Cmd::Pause(t) => Op::Pause(self.pick(t, &|m, i| {
                m.is_live(i) && m.status(i) != TaskStatus::Paused && m.tasks[i].ending.is_none()
            })),
            Cmd::PauseSelf(t, reason) => {
                let id = self.pick(t, &|m, i| {
                    running(m, i) && m.tasks[i].ending.is_none() && m.status(i) != TaskStatus::Paused
                });
                let reason = reason.then(|| format!("reason {}", self.fresh()));
                Op::PauseSelf(id, reason)
            }
            Cmd::Resume(t) => Op::Resume(self.pick(t, &|m, i| m.status(i) == TaskStatus::Paused)),
            Cmd::Cancel(t) => Op::Cancel(self.pick(t, &|m, i| m.is_live(i))),
            Cmd::Finish(t, kind) => {
                // Handlers usually return after their subtasks: fit = running leaves.
                let id = self.pick(t, &|m, i| running(m, i) && m.live_children(i) == 0);
                let n = self.fresh();
                let outcome = match kind {
                    FinishKind::Returned => {
                        HandlerOutcome::Returned(json(serde_json::json!({ "result": n })))
                    }
                    FinishKind::Errored { code, data } => {
                        let e = ErrorObject::new(ErrorCode(*code), format!("error {n}"));
                        HandlerOutcome::Errored(if *data {
                            e.with_data(serde_json::json!({ "n": n }))
                        } else {
                            e
                        })
                    }
                    FinishKind::Aborted => HandlerOutcome::Aborted,
                };
                Op::Finish(id, outcome)
            }
            Cmd::SetTtl(t, ttl) => Op::SetTtl(self.pick(t, &|_, _| true), *ttl),
            Cmd::HandleTimeout => Op::HandleTimeout,
            Cmd::HandleTimeoutAtDeadline => {
                if let Some(d) = self.forest.next_deadline() {
                    let d = d.as_millis();
                    if d > self.now && d - self.now <= 10_000_000 {
                        self.now = d;
                    }
                }
                Op::HandleTimeout
            }
            Cmd::DeleteTree(t) => Op::DeleteTree(self.pick(t, &|m, i| {
                m.tasks[i].parent.is_none() && m.tasks[i].outcome.is_some()
            })),
        }
    }

    // ----- running a command on both sides -------------------------------------

    fn run_core(forest: &mut Forest, now: u64, op: &Op) -> (Result<Ret, TransitionError>, Option<TaskId>) {
        let t = Timestamp::from_millis(now);
        let unit = |r: Result<(), TransitionError>| r.map(|()| Ret::Unit);
        let r = match op {
            Op::CreateRoot { ttl, poll } => {
                let r = forest.create_root(
                    t,
                    RootOptions {
                        ttl_ms: *ttl,
                        poll_interval_ms: *poll,
                    },
                );
                return (r.clone().map(|_| Ret::Created), r.ok());
            }
            Op::CreateChild {
                parent,
                ttl,
                poll,
                fail_fast,
            } => {
                let opts = ChildOptions {
                    ttl_ms: *ttl,
                    poll_interval_ms: *poll,
                    fail_fast: *fail_fast,
                };
                let r = forest.create_child(t, *parent, opts);
                return (r.clone().map(|_| Ret::Created), r.ok());
            }
            Op::Start(id) => unit(forest.start(t, *id)),
            Op::SetStatusMessage(id, m) => unit(forest.set_status_message(t, *id, m.clone())),
            Op::RequestInput(id, k) => {
                unit(forest.request_input(t, *id, k.clone(), json(serde_json::json!({ "ask": k }))))
            }
            Op::WithdrawInput(id, k) => forest.withdraw_input(t, *id, k).map(Ret::Bool),
            Op::AnswerInput(id, r) => forest.answer_input(t, *id, r.clone()).map(Ret::Keys),
            Op::Steer(id, m) => unit(forest.steer(t, *id, m.clone())),
            Op::TakeSteers(id) => forest.take_steers(t, *id).map(Ret::Steers),
            Op::ReachSafePoint(id) => forest.reach_safe_point(t, *id).map(Ret::Safe),
            Op::EnterWait(id) => unit(forest.enter_wait(t, *id)),
            Op::LeaveWait(id) => forest.leave_wait(t, *id).map(Ret::Safe),
            Op::WaitPoint(id) => forest.wait_point(t, *id).map(Ret::Safe),
            Op::Pause(id) => forest.pause(t, *id).map(Ret::Pause),
            Op::PauseSelf(id, r) => unit(forest.pause_self(t, *id, r.clone())),
            Op::Resume(id) => unit(forest.resume(t, *id)),
            Op::Cancel(id) => forest.cancel(t, *id).map(Ret::Cancel),
            Op::Finish(id, o) => unit(forest.finish(t, *id, o.clone())),
            Op::SetTtl(id, ttl) => unit(forest.set_ttl(t, *id, *ttl)),
            Op::HandleTimeout => {
                forest.handle_timeout(t);
                Ok(Ret::Unit)
            }
            Op::DeleteTree(id) => unit(forest.delete_tree(t, *id)),
        };
        (r, None)
    }

    fn run_model(model: &mut Model, now: u64, op: &Op, new_id: TaskId) -> Result<Ret, TransitionError> {
        match op {
            Op::CreateRoot { ttl, poll } => model.create_root(now, *ttl, *poll, new_id),
            Op::CreateChild {
                parent,
                ttl,
                poll,
                fail_fast,
            } => model.create_child(now, *parent, *ttl, *poll, *fail_fast, new_id),
            Op::Start(id) => model.start(*id),
            Op::SetStatusMessage(id, m) => model.set_status_message(*id, m.clone()),
            Op::RequestInput(id, k) => model.request_input(*id, k, json(serde_json::json!({ "ask": k }))),
            Op::WithdrawInput(id, k) => model.withdraw_input(*id, k),
            Op::AnswerInput(id, r) => model.answer_input(*id, r),
            Op::Steer(id, m) => model.steer(*id, m),
            Op::TakeSteers(id) => model.take_steers(*id),
            Op::ReachSafePoint(id) => model.reach_safe_point(*id),
            Op::EnterWait(id) => model.enter_wait(*id),
            Op::LeaveWait(id) => model.leave_wait(*id),
            Op::WaitPoint(id) => model.wait_point(*id),
            Op::Pause(id) => model.pause(*id),
            Op::PauseSelf(id, r) => model.pause_self(*id, r.clone()),
            Op::Resume(id) => model.resume(*id),
            Op::Cancel(id) => model.cancel(*id),
            Op::Finish(id, o) => model.finish(*id, o.clone()),
            Op::SetTtl(id, ttl) => model.set_ttl(*id, *ttl),
            Op::HandleTimeout => model.handle_timeout(now),
            Op::DeleteTree(id) => model.delete_tree(*id),
        }
    }

    /// What the core shows of every task the model ever created (`None` once deleted).
    fn core_state(&self) -> Vec<Option<CoreTask>> {
        self.model
            .tasks
            .iter()
            .map(|t| {
                let aware = self.forest.snapshot(t.id, ClientView::PAUSE_AWARE)?;
                let base = self.forest.snapshot(t.id, ClientView::BASE)?;
                let rec = self.forest.task(t.id)?;
                Some(CoreTask {
                    aware,
                    base,
                    steers: rec.queued_steers().iter().cloned().collect(),
                    outstanding: rec.inputs().outstanding().clone(),
                })
            })
            .collect()
    }

    // ----- one step --------------------------------------------------------------

    /// Runs one generated step (a create with `start` runs a second command,
    /// `start` of the new task, checked on its own).
    pub fn step(&mut self, step: &Step) -> Check {
        self.now = self.now.saturating_add(step.dt);
        if let Cmd::Spawn { parent, n, fail_fast } = &step.cmd {
            let parent = self.pick(parent, &|m, i| running(m, i) && m.tasks[i].ending.is_none());
            for _ in 0..*n {
                let opts = Op::CreateChild {
                    parent,
                    ttl: None,
                    poll: None,
                    fail_fast: *fail_fast,
                };
                if self.exec(&opts)?.is_none() {
                    break;
                }
            }
            return Ok(());
        }
        if let Cmd::Dive { parent, levels, ttl } = &step.cmd {
            let mut parent = self.pick(parent, &|m, i| running(m, i) && m.tasks[i].ending.is_none());
            for _ in 0..*levels {
                let op = Op::CreateChild {
                    parent,
                    ttl: *ttl,
                    poll: None,
                    fail_fast: false,
                };
                let Some(child) = self.exec(&op)? else { break };
                self.exec(&Op::Start(child))?;
                parent = child;
            }
            return Ok(());
        }
        let op = self.resolve(&step.cmd);
        let created = self.exec(&op)?;
        if let (Cmd::CreateRoot { start: true, .. } | Cmd::CreateChild { start: true, .. }, Some(id)) =
            (&step.cmd, created)
        {
            self.exec(&Op::Start(id))?;
        }
        Ok(())
    }

    /// Runs one command on both sides and checks everything; returns the id
    /// of a task it created.
    fn exec(&mut self, op: &Op) -> Result<Option<TaskId>, String> {
        let op = op.clone();
        let now = self.now;
        // The state after the previous command (nothing changed since).
        let before = std::mem::take(&mut self.state);
        let before_len = self.forest.len();
        let before_deadline = self.forest.next_deadline();
        let target = op.target().and_then(|id| self.model.find(id));

        let (core, new_id) = Self::run_core(&mut self.forest, now, &op);
        let mut model = self.model.clone();
        model.fx = Expect::default();
        let expected = Self::run_model(&mut model, now, &op, new_id.unwrap_or(TaskId::from_u128(1)));
        let created = match (&core, new_id) {
            (Ok(_), Some(_)) => format!(" (t{})", self.model.tasks.len()),
            _ => String::new(),
        };
        self.trace.push(format!("@{now}: {op}{created} -> {core:?}"));
        let effects: Vec<Effect> = self.forest.drain_effects().collect();
        if let Some(hook) = &mut self.on_effects {
            hook(&self.forest, &effects);
        }
        // Every effect's slot names its task (or the task is gone).
        for e in &effects {
            let named = match e {
                Effect::Created { id, slot, .. }
                | Effect::Changed { id, slot, .. }
                | Effect::SteerQueued { id, slot }
                | Effect::InputAnswered { id, slot, .. }
                | Effect::WakeHandler { id, slot }
                | Effect::CancelHandler { id, slot } => Some((*id, *slot)),
                _ => None,
            };
            if let Some((id, slot)) = named {
                let ok = match self.forest.task_at(slot) {
                    Some(r) => r.id() == id,
                    None => self.forest.task(id).is_none(),
                };
                ensure!(ok, "{e:?}: its slot names another task");
            }
        }

        match (&core, &expected) {
            (Ok(a), Ok(b)) if a == b => {}
            (Err(a), Err(b)) if a == b => {}
            _ => {
                return Err(format!(
                    "core returned {core:?}, the model (docs/lifecycle.md) expects {expected:?}"
                ));
            }
        }
        let accepted = expected.is_ok();
        if accepted {
            self.model = model;
        }
        self.stats.record(&op, &expected, &self.model);
        if let Err(v) = self.forest.check_invariants() {
            return Err(format!("check_invariants: {v}"));
        }

        if !accepted {
            // A rejected command changes nothing and says nothing.
            ensure!(
                effects.is_empty(),
                "rejected command emitted effects: {effects:?}"
            );
            ensure!(
                self.forest.len() == before_len,
                "rejected command changed the number of tasks"
            );
            ensure!(
                self.forest.next_deadline() == before_deadline,
                "rejected command changed the deadlines"
            );
            self.state = self.core_state();
            let after = &self.state;
            for (i, (b, a)) in before.iter().zip(after).enumerate() {
                ensure!(
                    b == a,
                    "rejected command changed t{i}:\nbefore {b:?}\nafter  {a:?}"
                );
            }
            self.check_state()?;
            return Ok(None);
        }

        if let (Op::CreateRoot { .. }, Some(id)) = (&op, new_id) {
            let root = self.model.tasks.len() - 1;
            self.cursors.push(Cursor {
                root,
                cursor: ResultCursor::new(id),
                emitted: Vec::new(),
                expected: Vec::new(),
            });
        }
        if let (Op::Steer(_, msg), Some(t)) = (&op, target) {
            let n = self.fresh();
            self.submitted.insert(msg.clone(), (t, n));
        }
        let after = self.core_state();
        self.check_state()?;
        self.check_effects(&op, now, &before, &after, &effects)?;
        self.check_temporal(&op, target, &before, &after)?;
        if let Ok(Ret::Steers(v) | Ret::Safe(SafePoint::Continue(v))) = &core
            && let Some(t) = target
        {
            self.check_delivery(t, v, &before)?;
        }
        self.check_cursors()?;
        self.state = after;
        Ok(new_id)
    }

    // ----- checks ------------------------------------------------------------------

    /// The core agrees with the model on every task.
    fn check_state(&self) -> Check {
        let m = &self.model;
        let id = |i: usize| m.tasks[i].id;
        let mut live = 0;
        for (i, t) in m.tasks.iter().enumerate() {
            let snap = self.forest.snapshot(t.id, ClientView::PAUSE_AWARE);
            if t.deleted {
                ensure!(snap.is_none(), "t{i} should have been deleted with its tree");
                continue;
            }
            live += 1;
            let Some(snap) = snap else {
                return Err(format!("t{i} is missing"));
            };
            let Some(rec) = self.forest.task(t.id) else {
                return Err(format!("t{i} has no record"));
            };
            let task = snap.task();
            let status = m.status(i);
            ensure!(
                snap.status() == status,
                "t{i}: status {} but the model says {status}",
                snap.status()
            );
            ensure!(task.task_id == t.id, "t{i}: wrong taskId");
            ensure!(
                task.parent_task_id == t.parent.map(id),
                "t{i}: parentTaskId differs"
            );
            let children: Vec<TaskId> = t.children.iter().map(|&c| id(c)).collect();
            ensure!(
                task.child_task_ids == children,
                "t{i}: childTaskIds {:?}, model {children:?}",
                task.child_task_ids
            );
            ensure!(
                task.created_at.as_millis() == t.created,
                "t{i}: createdAt differs"
            );
            ensure!(
                task.ttl_ms == t.ttl,
                "t{i}: ttlMs {:?}, model {:?}",
                task.ttl_ms,
                t.ttl
            );
            ensure!(task.poll_interval_ms == t.poll, "t{i}: pollIntervalMs differs");
            ensure!(
                rec.inputs().outstanding() == &t.outstanding,
                "t{i}: outstanding inputs {:?}, model {:?}",
                rec.inputs().outstanding().keys().collect::<Vec<_>>(),
                t.outstanding.keys().collect::<Vec<_>>()
            );
            for k in &t.used {
                ensure!(rec.inputs().was_used(k), "t{i}: key {k:?} should be marked used");
            }
            ensure!(
                rec.live_children() as usize == m.live_children(i),
                "t{i}: live_children differs"
            );
            ensure!(rec.depth() == m.depth(i), "t{i}: depth differs");
            ensure!(rec.is_fail_fast() == t.fail_fast, "t{i}: fail_fast differs");
            ensure!(
                rec.handler_message() == t.message.as_deref(),
                "t{i}: handler message differs"
            );
            let active = t.outcome.is_none();
            ensure!(
                rec.is_winding_down() == (active && t.ending.is_some()),
                "t{i}: winding down differs"
            );
            ensure!(
                rec.is_cancel_requested() == (active && t.ending == Some(Ending::Cancelling)),
                "t{i}: cancel requested differs"
            );
            ensure!(
                rec.queued_steers().iter().eq(t.steers.iter()),
                "t{i}: queued steers {:?}, model {:?}",
                rec.queued_steers(),
                t.steers
            );
            use super::reference::Outcome;
            let payload_ok = match (snap.payload(), &t.outcome) {
                (TaskPayload::Completed { result }, Some(Outcome::Completed(r))) => result == r,
                (TaskPayload::Failed { error }, Some(Outcome::Failed(e))) => error == e,
                (TaskPayload::Cancelled, Some(Outcome::Cancelled)) => true,
                (TaskPayload::InputRequired { input_requests }, None) => input_requests == &t.outstanding,
                (TaskPayload::Working | TaskPayload::Paused, None) => true,
                _ => false,
            };
            ensure!(
                payload_ok,
                "t{i}: payload {:?}, model outcome {:?}",
                snap.payload(),
                t.outcome
            );
            if t.outcome.is_none() {
                self.check_status_message(i, task.status_message.as_deref())?;
            }
            // A base client never sees `paused`.
            let Some(base) = self.forest.snapshot(t.id, ClientView::BASE) else {
                return Err(format!("t{i}: no BASE snapshot"));
            };
            if status == TaskStatus::Paused {
                ensure!(
                    base.status() == TaskStatus::Working,
                    "t{i}: BASE view shows {}",
                    base.status()
                );
                ensure!(
                    *base.payload() == TaskPayload::Working,
                    "t{i}: BASE payload {:?}",
                    base.payload()
                );
                ensure!(
                    base.task()
                        .status_message
                        .as_deref()
                        .is_some_and(|s| s.contains("paused")),
                    "t{i}: BASE view of a paused task has statusMessage {:?}",
                    base.task().status_message
                );
            } else {
                ensure!(
                    base == snap,
                    "t{i}: BASE and PAUSE_AWARE views differ on a task that is not paused"
                );
            }
        }
        ensure!(
            self.forest.len() == live,
            "forest holds {} tasks, model {live}",
            self.forest.len()
        );
        // Liveness of timers: a driver that calls `handle_timeout` only at
        // `next_deadline` must not miss an expiry or a deletion.
        let due = (0..m.tasks.len())
            .filter_map(|i| {
                let t = &m.tasks[i];
                if m.is_live(i) && t.ending.is_none() {
                    m.expiry(i)
                } else if m.exists(i) && t.parent.is_none() && t.outcome.is_some() {
                    m.expiry(i).map(|e| e.saturating_add(m.grace).max(self.now))
                } else {
                    None
                }
            })
            .min();
        if let Some(due) = due {
            let next = self.forest.next_deadline().map(Timestamp::as_millis);
            ensure!(
                next.is_some_and(|d| d <= due),
                "next_deadline is {next:?}, but a timer is due at {due}"
            );
        }
        Ok(())
    }

    /// "`working`, with a `statusMessage` naming the sub-state."
    fn check_status_message(&self, i: usize, msg: Option<&str>) -> Check {
        let t = &self.model.tasks[i];
        let has = |w: &str| msg.is_some_and(|m| m.to_lowercase().contains(w));
        match (&t.ending, &t.pause, &t.handler) {
            (Some(Ending::Cancelling), _, _) => {
                ensure!(has("cancel"), "t{i} cancelling: statusMessage {msg:?}")
            }
            (Some(Ending::Failing(_)), _, _) => ensure!(has("fail"), "t{i} failing: statusMessage {msg:?}"),
            (None, Pause::Pending { .. }, _) => {
                ensure!(has("pause"), "t{i} pause pending: statusMessage {msg:?}")
            }
            (None, Pause::Paused { .. }, _) => {}
            (None, Pause::Unpaused, Handler::Exited(_)) => {
                ensure!(has("complet"), "t{i} completing: statusMessage {msg:?}")
            }
            (None, Pause::Unpaused, Handler::Queued) if t.message.is_none() => {
                ensure!(has("queued"), "t{i} queued: statusMessage {msg:?}")
            }
            (None, Pause::Unpaused, Handler::Queued) => {}
            (None, Pause::Unpaused, Handler::Running) => {
                ensure!(
                    msg == t.message.as_deref(),
                    "t{i} running: statusMessage {msg:?}, set {:?}",
                    t.message
                )
            }
        }
        Ok(())
    }

    /// The effects of an accepted command match the model's expectations.
    fn check_effects(
        &self,
        op: &Op,
        now: u64,
        before: &[Option<CoreTask>],
        after: &[Option<CoreTask>],
        effects: &[Effect],
    ) -> Check {
        let m = &self.model;
        let idx = |id: TaskId| m.tasks.iter().position(|t| t.id == id);
        let fx = &m.fx;
        let mut created = Vec::new();
        let mut deleted = Vec::new();
        let mut answered = Vec::new();
        let mut steer_queued = Vec::new();
        let mut cancel = BTreeSet::new();
        let mut woken = BTreeSet::new();
        let mut changed: BTreeMap<usize, (TaskStatus, TaskStatus, usize)> = BTreeMap::new();
        for (pos, e) in effects.iter().enumerate() {
            let known = |id: TaskId| idx(id).ok_or_else(|| format!("effect {e:?} names an unknown task"));
            match e {
                Effect::Created { id, parent, .. } => {
                    let i = known(*id)?;
                    ensure!(
                        *parent == m.tasks[i].parent.map(|p| m.tasks[p].id),
                        "{e:?}: wrong parent"
                    );
                    created.push(i);
                }
                Effect::Changed { id, from, to, .. } => {
                    let i = known(*id)?;
                    ensure!(
                        changed.insert(i, (*from, *to, pos)).is_none(),
                        "two Changed effects for t{i}"
                    );
                }
                Effect::SteerQueued { id, .. } => steer_queued.push(known(*id)?),
                Effect::InputAnswered {
                    id, key, response, ..
                } => {
                    ensure!(Some(*id) == op.target(), "{e:?} for another task");
                    answered.push((key.clone(), response.clone()));
                }
                Effect::WakeHandler { id, .. } => {
                    ensure!(woken.insert(known(*id)?), "two WakeHandler for one task");
                }
                Effect::CancelHandler { id, .. } => {
                    ensure!(cancel.insert(known(*id)?), "two CancelHandler for one task");
                }
                Effect::TreeDeleted { root, ids } => {
                    let r = known(*root)?;
                    let mut set = BTreeSet::new();
                    for (k, id) in ids.iter().enumerate() {
                        let i = known(*id)?;
                        ensure!(set.insert(i), "TreeDeleted lists t{i} twice");
                        // children before parents
                        if let Some(p) = m.tasks[i].parent {
                            ensure!(
                                ids[k + 1..].contains(&m.tasks[p].id),
                                "TreeDeleted lists t{i} after its parent"
                            );
                        }
                    }
                    deleted.push((r, set));
                }
                // `ArmTimer` is checked through `next_deadline` (timer liveness, in `check_state`).
                _ => {}
            }
        }
        ensure!(
            created == fx.created,
            "Created effects for {created:?}, model expects {:?}",
            fx.created
        );
        deleted.sort();
        let mut want_deleted = fx.deleted.clone();
        want_deleted.sort();
        ensure!(
            deleted == want_deleted,
            "TreeDeleted {deleted:?}, model expects {want_deleted:?}"
        );
        ensure!(
            answered == fx.answered,
            "InputAnswered {answered:?}, model expects {:?}",
            fx.answered
        );
        ensure!(
            steer_queued == fx.steer_queued,
            "SteerQueued {steer_queued:?}, model {:?}",
            fx.steer_queued
        );
        ensure!(
            cancel == fx.cancel_handler,
            "CancelHandler for {cancel:?}, model expects {:?}",
            fx.cancel_handler
        );
        ensure!(
            woken == fx.woken,
            "WakeHandler for {woken:?}, model expects {:?}",
            fx.woken
        );

        // Changed{from, to}: once per task, from/to are the statuses around the
        // command, present for every observable change, with lastUpdatedAt stamped.
        for (&i, &(from, to, _)) in &changed {
            if let Some(Some(b)) = before.get(i) {
                ensure!(
                    from == b.status(),
                    "Changed for t{i} says from {from}, it was {}",
                    b.status()
                );
            }
            if let Some(Some(a)) = after.get(i) {
                ensure!(
                    to == a.status(),
                    "Changed for t{i} says to {to}, it is {}",
                    a.status()
                );
                ensure!(
                    a.task().last_updated_at.as_millis() == now,
                    "t{i} changed but lastUpdatedAt is {:?}",
                    a.task().last_updated_at
                );
            }
        }
        for (i, a) in after.iter().enumerate() {
            let Some(a) = a else { continue };
            let observable_change = match before.get(i) {
                Some(Some(b)) => b.observable() != a.observable(),
                _ => true, // created by this command
            };
            ensure!(
                !observable_change || changed.contains_key(&i),
                "t{i} changed observably without a Changed effect"
            );
        }

        // I6: within the command, a task's terminal Changed comes after each
        // child's (regressions::handler_error_emits_child_terminal_change_first,
        // fail_fast_emits_sibling_terminal_change_before_parent).
        for (&i, &(_, to, pos)) in &changed {
            if !to.is_terminal() {
                continue;
            }
            for &c in &m.tasks[i].children {
                if let Some(&(_, cto, cpos)) = changed.get(&c) {
                    ensure!(
                        !cto.is_terminal() || cpos < pos,
                        "I6: Changed(t{i} -> {to}) is emitted before its child's Changed(t{c} -> {cto})"
                    );
                }
            }
        }
        Ok(())
    }

    /// Step-to-step invariants.
    fn check_temporal(
        &self,
        op: &Op,
        target: Option<usize>,
        before: &[Option<CoreTask>],
        after: &[Option<CoreTask>],
    ) -> Check {
        for (i, (b, a)) in before.iter().zip(after).enumerate() {
            let (Some(b), Some(a)) = (b, a) else { continue };
            let (bt, at) = (b.task(), a.task());
            // I1
            ensure!(
                at.parent_task_id == bt.parent_task_id,
                "I1: t{i}'s parentTaskId changed"
            );
            ensure!(
                at.parent_task_id != Some(at.task_id),
                "I1: t{i} is its own parent"
            );
            // I2
            ensure!(
                at.child_task_ids.starts_with(&bt.child_task_ids),
                "I2: t{i}'s childTaskIds {:?} do not extend {:?}",
                at.child_task_ids,
                bt.child_task_ids
            );
            ensure!(!at.child_task_ids.contains(&at.task_id), "I2: t{i} lists itself");
            // I4
            if b.status().is_terminal() {
                ensure!(
                    a.status() == b.status(),
                    "I4: t{i} left {} for {}",
                    b.status(),
                    a.status()
                );
                ensure!(
                    a.aware.payload() == b.aware.payload(),
                    "I4: t{i}'s terminal payload changed"
                );
            }
            // I11
            if matches!(op, Op::Pause(_) | Op::PauseSelf(..) | Op::Resume(_)) {
                ensure!(a.steers == b.steers, "I11: {op} changed t{i}'s queued steers");
                ensure!(
                    a.outstanding == b.outstanding,
                    "I11: {op} changed t{i}'s input requests"
                );
            }
            // I7
            if matches!(op, Op::RequestInput(..) | Op::AnswerInput(..)) && Some(i) != target {
                ensure!(
                    a.status() == b.status(),
                    "I7: {op} changed t{i}'s status {} -> {}",
                    b.status(),
                    a.status()
                );
            }
        }
        // I8: trees disappear whole.
        let m = &self.model;
        for r in (0..m.tasks.len()).filter(|&r| m.tasks[r].parent.is_none()) {
            let mut tree = m.descendants(r);
            tree.push(r);
            let present: BTreeSet<bool> = tree.iter().map(|&t| after[t].is_some()).collect();
            ensure!(present.len() == 1, "I8: tree of t{r} is partly deleted");
            let was: BTreeSet<bool> = tree
                .iter()
                .filter(|&&t| t < before.len())
                .map(|&t| before[t].is_some())
                .collect();
            ensure!(was.len() <= 1, "I8: tree of t{r} was partly deleted before {op}");
        }
        Ok(())
    }

    /// I10: what a handler takes is the whole queue, oldest first, each message once, never on a terminal task.
    fn check_delivery(&mut self, t: usize, delivered: &[String], before: &[Option<CoreTask>]) -> Check {
        if delivered.is_empty() {
            return Ok(());
        }
        let Some(Some(b)) = before.get(t) else {
            return Err(format!("I10: steers delivered by unknown t{t}"));
        };
        ensure!(
            !b.status().is_terminal(),
            "I10: steers delivered to terminal t{t}"
        );
        ensure!(
            b.steers == delivered,
            "I10: t{t} delivered {delivered:?}, its queue was {:?}",
            b.steers
        );
        for msg in delivered {
            let Some(&(task, seq)) = self.submitted.get(msg) else {
                return Err(format!("I10: {msg:?} was never submitted"));
            };
            ensure!(
                task == t,
                "I10: {msg:?} was submitted to t{task}, delivered to t{t}"
            );
            let last = self.last_delivered.get(&t).copied();
            ensure!(
                last.is_none_or(|l| seq > l),
                "I10: {msg:?} delivered twice or out of order to t{t}"
            );
            self.last_delivered.insert(t, seq);
            self.stats.steers_delivered += 1;
        }
        Ok(())
    }

    /// I12: a cursor per root has emitted exactly the model's ready prefix of the post-order.
    fn check_cursors(&mut self) -> Check {
        let limit = self.model.tasks.len() + 1;
        for c in &mut self.cursors {
            let mut n = 0;
            while let Some(id) = c.cursor.next_ready(&self.forest) {
                c.emitted.push(id);
                self.stats.results_emitted += 1;
                n += 1;
                ensure!(n <= limit, "ResultCursor of t{} does not stop", c.root);
            }
            if self.model.exists(c.root) {
                c.expected = self.model.ready_prefix(c.root);
            }
            let want: Vec<TaskId> = c.expected.iter().map(|&i| self.model.tasks[i].id).collect();
            ensure!(
                c.emitted == want,
                "I12: cursor of t{} emitted {:?}, the ready prefix of the post-order is {:?}",
                c.root,
                c.emitted,
                want
            );
        }
        Ok(())
    }
}

pub fn json(v: serde_json::Value) -> JsonObject {
    JsonObject::from_value(v).expect("an object")
}
