//! Runs a command sequence on the core and on the reference model in lock
//! step, and after every step checks that they agree and that the invariants
//! of `docs/lifecycle.md` hold (structural ones through
//! `Forest::check_invariants`, temporal ones by comparing with the previous
//! step).
//!
//! Files: `op.rs` (a command resolved against the model: `Op`), `run.rs`
//! (one `Op` on the core and on the model), `stats.rs` (what a run
//! exercised), `checks.rs` (the checks after every step); this file the
//! harness itself and its step.

use std::collections::{BTreeMap, HashMap};

use proptest::test_runner::TestCaseError;
use subtask::core::{ClientView, Effect, Forest, ForestConfig, ResultCursor, SafePoint};
use subtask::model::{DetailedTask, JsonObject, Task, TaskId, TaskPayload, TaskStatus, Timestamp};

use super::commands::{Cmd, Step};
use super::reference::{Expect, Handler, Model, Ret};

pub type Check = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

mod checks;
mod op;
mod run;
mod stats;

pub use op::Op;
pub use stats::Stats;

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
                    steers: rec.queued_steers().to_vec(),
                    outstanding: rec.inputs().outstanding().to_requests(),
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
}

pub fn json(v: serde_json::Value) -> JsonObject {
    JsonObject::from_value(v).expect("an object")
}
