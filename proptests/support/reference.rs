//! A deliberately simple reference model of the task lifecycle, written from
//! `docs/lifecycle.md` (the commands table, "Settling", "Fail-fast",
//! "Deletion" and the decisions), not from the core's code.
//!
//! Commands follow the table in the doc's "Commands" section, including
//! `enter_wait`/`leave_wait`/`wait_point` (awaiting a subtask).
//!
//! Everything is a `Vec` of plain records indexed by creation order, and every
//! question is answered by scanning: descendants are found by recursion,
//! settling is a fixpoint loop over all tasks, timers are not stored at all
//! (`handle_timeout` looks at every task's expiry). Slow and obvious on
//! purpose.
//!
//! Where the doc lists several conditions for one command without saying
//! which rejection wins when more than one fails, the model uses a fixed
//! precedence documented on the command.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use subtask::core::{
    CancelOutcome, HandlerOutcome, Limit, Limits, PauseOutcome, SafePoint, TransitionError, expired_error,
};
use subtask::model::{ErrorCode, ErrorObject, JsonObject, TaskId, TaskStatus};

/// The handler part of an active task.
#[derive(Debug, Clone, PartialEq)]
pub enum Handler {
    Queued,
    Running,
    Exited(HandlerOutcome),
}

/// The pause part of an active task. `via` is a model index.
#[derive(Debug, Clone, PartialEq)]
pub enum Pause {
    Unpaused,
    Pending { via: usize },
    Paused { via: usize },
}

/// A decided ending.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    Cancelling,
    Failing(ErrorObject),
}

/// A terminal outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed(JsonObject),
    Failed(ErrorObject),
    Cancelled,
}

impl Outcome {
    pub fn status(&self) -> TaskStatus {
        match self {
            Outcome::Completed(_) => TaskStatus::Completed,
            Outcome::Failed(_) => TaskStatus::Failed,
            Outcome::Cancelled => TaskStatus::Cancelled,
        }
    }
}

/// One task, with plain fields.
#[derive(Debug, Clone)]
pub struct MTask {
    pub id: TaskId,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    pub created: u64,
    pub ttl: Option<u64>,
    pub poll: Option<u64>,
    pub fail_fast: bool,
    pub deleted: bool,
    /// `Some` once terminal.
    pub outcome: Option<Outcome>,
    pub handler: Handler,
    pub pause: Pause,
    pub ending: Option<Ending>,
    /// Runtime-controlled waits (awaiting a subtask) the running handler is parked in.
    pub waits: u32,
    pub outstanding: BTreeMap<String, JsonObject>,
    pub used: BTreeSet<String>,
    pub steers: VecDeque<String>,
    pub message: Option<String>,
}

/// What a command returned, when accepted.
#[derive(Debug, Clone, PartialEq)]
pub enum Ret {
    /// A task was created (the id comes from the core).
    Created,
    Unit,
    Bool(bool),
    Keys(Vec<String>),
    Steers(Vec<String>),
    Safe(SafePoint),
    Pause(PauseOutcome),
    Cancel(CancelOutcome),
}

/// The effects the model expects from the last command (besides `Changed`,
/// which the harness derives from the status before and after).
#[derive(Debug, Clone, Default)]
pub struct Expect {
    pub created: Vec<usize>,
    /// (root, every task of the tree).
    pub deleted: Vec<(usize, BTreeSet<usize>)>,
    pub answered: Vec<(String, JsonObject)>,
    pub steer_queued: Vec<usize>,
    pub cancel_handler: BTreeSet<usize>,
    pub woken: BTreeSet<usize>,
}

/// The reference model.
#[derive(Debug, Clone)]
pub struct Model {
    pub tasks: Vec<MTask>,
    pub limits: Limits,
    pub grace: u64,
    pub fx: Expect,
}

type R = Result<Ret, TransitionError>;

/// `pause_self` says "descendants follow". When the task's pause was already
/// pending through an ancestor, the core makes the pending pause take effect
/// and leaves the descendants alone (they were reached by the ancestor's
/// pause, unless resumed one by one since). Reported as a disagreement; the
/// model follows the core until it is settled.
const PAUSE_SELF_WHILE_PENDING_PAUSES_DESCENDANTS: bool = true;

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Model {
    pub fn new(limits: Limits, grace: u64) -> Self {
        Model {
            tasks: Vec::new(),
            limits,
            grace,
            fx: Expect::default(),
        }
    }

    // ----- queries (all by scanning) -------------------------------------

    /// The retrievable task with this id.
    pub fn find(&self, id: TaskId) -> Option<usize> {
        self.tasks.iter().position(|t| t.id == id && !t.deleted)
    }

    pub fn exists(&self, i: usize) -> bool {
        !self.tasks[i].deleted
    }

    pub fn is_live(&self, i: usize) -> bool {
        !self.tasks[i].deleted && self.tasks[i].outcome.is_none()
    }

    /// The wire status, from the doc's table.
    pub fn status(&self, i: usize) -> TaskStatus {
        let t = &self.tasks[i];
        if let Some(o) = &t.outcome {
            return o.status();
        }
        if matches!(t.pause, Pause::Paused { .. }) {
            return TaskStatus::Paused;
        }
        if !t.outstanding.is_empty() {
            return TaskStatus::InputRequired;
        }
        TaskStatus::Working
    }

    pub fn expiry(&self, i: usize) -> Option<u64> {
        let t = &self.tasks[i];
        t.ttl.map(|ttl| t.created.saturating_add(ttl))
    }

    pub fn depth(&self, i: usize) -> u32 {
        let mut d = 0;
        let mut cur = self.tasks[i].parent;
        while let Some(p) = cur {
            d += 1;
            cur = self.tasks[p].parent;
        }
        d
    }

    /// Every descendant (not the task), in pre-order.
    pub fn descendants(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        for &c in &self.tasks[i].children {
            out.push(c);
            out.extend(self.descendants(c));
        }
        out
    }

    pub fn live_descendants(&self, i: usize) -> Vec<usize> {
        self.descendants(i)
            .into_iter()
            .filter(|&d| self.is_live(d))
            .collect()
    }

    pub fn live_children(&self, i: usize) -> usize {
        self.tasks[i]
            .children
            .iter()
            .filter(|&&c| self.is_live(c))
            .count()
    }

    /// Post-order by `childTaskIds`: each child's subtree in order, then the task.
    pub fn post_order(&self, i: usize) -> Vec<usize> {
        let mut out = Vec::new();
        for &c in &self.tasks[i].children {
            out.extend(self.post_order(c));
        }
        out.push(i);
        out
    }

    /// I12: the longest prefix of the post-order whose tasks are all terminal.
    pub fn ready_prefix(&self, root: usize) -> Vec<usize> {
        self.post_order(root)
            .into_iter()
            .take_while(|&t| self.tasks[t].outcome.is_some())
            .collect()
    }

    // ----- rejections ----------------------------------------------------

    fn known(&self, id: TaskId) -> Result<usize, TransitionError> {
        self.find(id).ok_or(TransitionError::UnknownTask(id))
    }

    fn active(&self, id: TaskId) -> Result<usize, TransitionError> {
        let i = self.known(id)?;
        match &self.tasks[i].outcome {
            Some(o) => Err(TransitionError::Terminal {
                id,
                status: o.status(),
            }),
            None => Ok(i),
        }
    }

    /// "handler `Running`": active, started, not exited.
    fn running(&self, id: TaskId) -> Result<usize, TransitionError> {
        let i = self.active(id)?;
        match self.tasks[i].handler {
            Handler::Queued => Err(TransitionError::NotStarted(id)),
            Handler::Exited(_) => Err(TransitionError::HandlerFinished(id)),
            Handler::Running => Ok(i),
        }
    }

    // ----- building blocks -----------------------------------------------

    /// Decides an ending on a live task that has none: pause lifted, inputs
    /// withdrawn, steers dropped, a running handler told to stop.
    fn decide(&mut self, i: usize, ending: Ending) {
        if !self.is_live(i) || self.tasks[i].ending.is_some() {
            return;
        }
        let t = &mut self.tasks[i];
        t.ending = Some(ending);
        t.pause = Pause::Unpaused;
        t.outstanding.clear();
        t.steers.clear();
        if t.handler == Handler::Running {
            self.fx.cancel_handler.insert(i);
        }
    }

    /// `own` on the task, `inherited` on every live descendant without an ending.
    fn wind_down(&mut self, i: usize, own: Ending, inherited: Ending) {
        self.decide(i, own);
        for d in self.live_descendants(i) {
            self.decide(d, inherited.clone());
        }
    }

    /// "Settling" and "Fail-fast", as a fixpoint over all tasks.
    fn settle(&mut self) {
        loop {
            let ready = (0..self.tasks.len()).find(|&i| {
                let t = &self.tasks[i];
                self.is_live(i)
                    && self.live_children(i) == 0
                    && match t.handler {
                        Handler::Exited(_) => true,
                        Handler::Queued => t.ending.is_some(),
                        Handler::Running => false,
                    }
            });
            let Some(i) = ready else { return };
            let t = &self.tasks[i];
            let outcome = match (&t.ending, &t.handler) {
                (Some(Ending::Cancelling), _) => Outcome::Cancelled,
                (Some(Ending::Failing(e)), _) => Outcome::Failed(e.clone()),
                (None, Handler::Exited(HandlerOutcome::Returned(r))) => Outcome::Completed(r.clone()),
                (None, Handler::Exited(HandlerOutcome::Errored(e))) => Outcome::Failed(e.clone()),
                (None, Handler::Exited(HandlerOutcome::Aborted)) => {
                    Outcome::Failed(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "handler aborted"))
                }
                _ => unreachable!("only exited or queued-and-ending tasks settle"),
            };
            let t = &mut self.tasks[i];
            t.outcome = Some(outcome.clone());
            t.outstanding.clear();
            t.steers.clear();
            // Fail-fast: the parent decides Failing, its other live descendants get Cancelling.
            if let (Outcome::Failed(e), true, Some(p)) = (&outcome, t.fail_fast, t.parent)
                && self.tasks[p].ending.is_none()
            {
                let id = self.tasks[i].id;
                let err = ErrorObject {
                    code: e.code,
                    message: format!("subtask {id} failed: {}", e.message),
                    data: Some(serde_json::json!({ "failedTaskId": id.to_string() })),
                };
                self.wind_down(p, Ending::Failing(err), Ending::Cancelling);
            }
        }
    }

    /// Pauses one live task through `via` unless it is winding down or already paused.
    fn pause_one(&mut self, i: usize, via: usize) {
        let t = &self.tasks[i];
        if !self.is_live(i) || t.ending.is_some() || t.pause != Pause::Unpaused {
            return;
        }
        let parked = t.handler != Handler::Running || !t.outstanding.is_empty() || t.waits > 0;
        self.tasks[i].pause = if parked {
            Pause::Paused { via }
        } else {
            Pause::Pending { via }
        };
    }

    // ----- commands --------------------------------------------------------

    /// `create_root`: always accepted.
    pub fn create_root(&mut self, now: u64, ttl: Option<u64>, poll: Option<u64>, id: TaskId) -> R {
        self.tasks.push(MTask {
            id,
            parent: None,
            children: Vec::new(),
            created: now,
            ttl,
            poll,
            fail_fast: false,
            deleted: false,
            outcome: None,
            handler: Handler::Queued,
            pause: Pause::Unpaused,
            ending: None,
            waits: 0,
            outstanding: BTreeMap::new(),
            used: BTreeSet::new(),
            steers: VecDeque::new(),
            message: None,
        });
        self.fx.created.push(self.tasks.len() - 1);
        Ok(Ret::Created)
    }

    /// `create_child`: parent active, handler running, no ending, then the
    /// depth and fan-out limits. The doc does not say which rejection wins for
    /// a parent whose handler exited *and* that is winding down: the model
    /// reports winding down (I5: no subtask under a cancel), as `steer` does.
    #[allow(clippy::too_many_arguments)]
    pub fn create_child(
        &mut self,
        now: u64,
        parent: TaskId,
        ttl: Option<u64>,
        poll: Option<u64>,
        fail_fast: bool,
        id: TaskId,
    ) -> R {
        let p = self.active(parent)?;
        if self.tasks[p].ending.is_some() {
            return Err(TransitionError::WindingDown(parent));
        }
        self.running(parent)?;
        if self.depth(p) + 1 > self.limits.max_depth {
            return Err(TransitionError::LimitExceeded {
                id: parent,
                limit: Limit::Depth {
                    max: self.limits.max_depth,
                },
            });
        }
        if self.tasks[p].children.len() >= self.limits.max_children as usize {
            return Err(TransitionError::LimitExceeded {
                id: parent,
                limit: Limit::Children {
                    max: self.limits.max_children,
                },
            });
        }
        let expires = min_opt(ttl.map(|t| now.saturating_add(t)), self.expiry(p));
        let pause = match self.tasks[p].pause {
            Pause::Pending { via } | Pause::Paused { via } => Pause::Paused { via },
            Pause::Unpaused => Pause::Unpaused,
        };
        let i = self.tasks.len();
        self.tasks.push(MTask {
            id,
            parent: Some(p),
            children: Vec::new(),
            created: now,
            ttl: expires.map(|e| e.saturating_sub(now)),
            poll: poll.or(self.tasks[p].poll),
            fail_fast,
            deleted: false,
            outcome: None,
            handler: Handler::Queued,
            pause,
            ending: None,
            waits: 0,
            outstanding: BTreeMap::new(),
            used: BTreeSet::new(),
            steers: VecDeque::new(),
            message: None,
        });
        self.tasks[p].children.push(i);
        self.fx.created.push(i);
        Ok(Ret::Created)
    }

    /// `start`: active, handler queued, not paused.
    pub fn start(&mut self, id: TaskId) -> R {
        let i = self.active(id)?;
        if self.tasks[i].handler != Handler::Queued {
            return Err(TransitionError::AlreadyStarted(id));
        }
        if matches!(self.tasks[i].pause, Pause::Paused { .. }) {
            return Err(TransitionError::Paused(id));
        }
        self.tasks[i].handler = Handler::Running;
        Ok(Ret::Unit)
    }

    pub fn set_status_message(&mut self, id: TaskId, msg: Option<String>) -> R {
        let i = self.active(id)?;
        self.tasks[i].message = msg;
        Ok(Ret::Unit)
    }

    /// `request_input`: handler running, no ending, key never used.
    pub fn request_input(&mut self, id: TaskId, key: &str, req: JsonObject) -> R {
        let i = self.running(id)?;
        if self.tasks[i].ending.is_some() {
            return Err(TransitionError::WindingDown(id));
        }
        if self.tasks[i].used.contains(key) {
            return Err(TransitionError::DuplicateInputKey {
                id,
                key: key.to_owned(),
            });
        }
        let t = &mut self.tasks[i];
        t.used.insert(key.to_owned());
        t.outstanding.insert(key.to_owned(), req);
        if let Pause::Pending { via } = t.pause {
            t.pause = Pause::Paused { via };
        }
        Ok(Ret::Unit)
    }

    pub fn withdraw_input(&mut self, id: TaskId, key: &str) -> R {
        let i = self.known(id)?;
        Ok(Ret::Bool(self.tasks[i].outstanding.remove(key).is_some()))
    }

    /// `answer_input`: exists and not paused; outstanding keys answered, the rest ignored.
    pub fn answer_input(&mut self, id: TaskId, responses: &BTreeMap<String, JsonObject>) -> R {
        let i = self.known(id)?;
        if self.status(i) == TaskStatus::Paused {
            return Err(TransitionError::Paused(id));
        }
        let mut keys = Vec::new();
        for (k, v) in responses {
            if self.tasks[i].outstanding.remove(k).is_some() {
                keys.push(k.clone());
                self.fx.answered.push((k.clone(), v.clone()));
            }
        }
        Ok(Ret::Keys(keys))
    }

    /// `steer`: active, no ending, handler not exited, then the queue and size
    /// limits. The doc does not say which limit wins when both are exceeded:
    /// the model checks the message size first (a message that can never fit
    /// is reported as such).
    pub fn steer(&mut self, id: TaskId, msg: &str) -> R {
        let i = self.active(id)?;
        if self.tasks[i].ending.is_some() {
            return Err(TransitionError::WindingDown(id));
        }
        if matches!(self.tasks[i].handler, Handler::Exited(_)) {
            return Err(TransitionError::HandlerFinished(id));
        }
        if msg.len() > self.limits.max_steer_bytes as usize {
            return Err(TransitionError::LimitExceeded {
                id,
                limit: Limit::SteerBytes {
                    max: self.limits.max_steer_bytes,
                },
            });
        }
        if self.tasks[i].steers.len() >= self.limits.max_steer_queue as usize {
            return Err(TransitionError::LimitExceeded {
                id,
                limit: Limit::SteerQueue {
                    max: self.limits.max_steer_queue,
                },
            });
        }
        self.tasks[i].steers.push_back(msg.to_owned());
        self.fx.steer_queued.push(i);
        Ok(Ret::Unit)
    }

    /// `take_steers`: handler running; nothing while paused.
    pub fn take_steers(&mut self, id: TaskId) -> R {
        let i = self.running(id)?;
        if self.status(i) == TaskStatus::Paused {
            return Ok(Ret::Steers(Vec::new()));
        }
        Ok(Ret::Steers(self.tasks[i].steers.drain(..).collect()))
    }

    /// `reach_safe_point`: ending → Stop; pause pending or paused → Park; else Continue.
    pub fn reach_safe_point(&mut self, id: TaskId) -> R {
        let i = self.running(id)?;
        let t = &mut self.tasks[i];
        if t.ending.is_some() {
            return Ok(Ret::Safe(SafePoint::Stop));
        }
        match t.pause {
            Pause::Paused { .. } => Ok(Ret::Safe(SafePoint::Park)),
            Pause::Pending { via } => {
                t.pause = Pause::Paused { via };
                Ok(Ret::Safe(SafePoint::Park))
            }
            Pause::Unpaused => Ok(Ret::Safe(SafePoint::Continue(t.steers.drain(..).collect()))),
        }
    }

    /// `enter_wait`: handler running; the handler counts as parked, a pending
    /// pause takes effect now.
    pub fn enter_wait(&mut self, id: TaskId) -> R {
        let i = self.running(id)?;
        let t = &mut self.tasks[i];
        t.waits += 1;
        if let Pause::Pending { via } = t.pause {
            t.pause = Pause::Paused { via };
        }
        Ok(Ret::Unit)
    }

    /// `leave_wait`: handler running; wait count -1, then as `wait_point`.
    pub fn leave_wait(&mut self, id: TaskId) -> R {
        let i = self.running(id)?;
        self.tasks[i].waits = self.tasks[i].waits.saturating_sub(1);
        self.wait_point(id)
    }

    /// `wait_point`: like `reach_safe_point` but takes no steers.
    pub fn wait_point(&mut self, id: TaskId) -> R {
        let i = self.running(id)?;
        let t = &mut self.tasks[i];
        if t.ending.is_some() {
            return Ok(Ret::Safe(SafePoint::Stop));
        }
        match t.pause {
            Pause::Paused { .. } => Ok(Ret::Safe(SafePoint::Park)),
            Pause::Pending { via } => {
                t.pause = Pause::Paused { via };
                Ok(Ret::Safe(SafePoint::Park))
            }
            Pause::Unpaused => Ok(Ret::Safe(SafePoint::Continue(Vec::new()))),
        }
    }

    /// `pause`: active, not paused; propagates down with `via = id`.
    pub fn pause(&mut self, id: TaskId) -> R {
        let i = self.active(id)?;
        match self.tasks[i].pause {
            Pause::Paused { .. } => return Err(TransitionError::AlreadyPaused(id)),
            Pause::Pending { .. } => return Ok(Ret::Pause(PauseOutcome::Pending)),
            Pause::Unpaused => {}
        }
        if self.tasks[i].ending.is_some() {
            return Ok(Ret::Pause(PauseOutcome::Unchanged));
        }
        self.pause_one(i, i);
        for d in self.live_descendants(i) {
            self.pause_one(d, i);
        }
        Ok(Ret::Pause(match self.tasks[i].pause {
            Pause::Paused { .. } => PauseOutcome::Paused,
            _ => PauseOutcome::Pending,
        }))
    }

    /// `pause_self`: handler running, no ending, not paused; paused now, descendants follow.
    pub fn pause_self(&mut self, id: TaskId, _reason: Option<String>) -> R {
        let i = self.running(id)?;
        if self.tasks[i].ending.is_some() {
            return Err(TransitionError::WindingDown(id));
        }
        let via = match self.tasks[i].pause {
            Pause::Paused { .. } => return Err(TransitionError::AlreadyPaused(id)),
            Pause::Pending { via } => via,
            Pause::Unpaused => i,
        };
        self.tasks[i].pause = Pause::Paused { via };
        if via == i || PAUSE_SELF_WHILE_PENDING_PAUSES_DESCENDANTS {
            for d in self.live_descendants(i) {
                self.pause_one(d, via);
            }
        }
        Ok(Ret::Unit)
    }

    /// `resume`: wire status `paused`; lifts the task's pause and every
    /// descendant's pause made through it.
    pub fn resume(&mut self, id: TaskId) -> R {
        let i = self.active(id)?;
        let status = self.status(i);
        if status != TaskStatus::Paused {
            return Err(TransitionError::NotPaused { id, status });
        }
        self.tasks[i].pause = Pause::Unpaused;
        self.fx.woken.insert(i);
        for d in self.live_descendants(i) {
            match self.tasks[d].pause {
                Pause::Paused { via } if via == i => {
                    self.tasks[d].pause = Pause::Unpaused;
                    self.fx.woken.insert(d);
                }
                Pause::Pending { via } if via == i => self.tasks[d].pause = Pause::Unpaused,
                _ => {}
            }
        }
        Ok(Ret::Unit)
    }

    /// `cancel`: exists; terminal or ending → no-op; else cancelling down the tree, settled.
    pub fn cancel(&mut self, id: TaskId) -> R {
        let i = self.known(id)?;
        if self.tasks[i].outcome.is_some() {
            return Ok(Ret::Cancel(CancelOutcome::AlreadyTerminal));
        }
        if self.tasks[i].ending.is_some() {
            return Ok(Ret::Cancel(CancelOutcome::AlreadyEnding));
        }
        self.wind_down(i, Ending::Cancelling, Ending::Cancelling);
        self.settle();
        Ok(Ret::Cancel(CancelOutcome::Accepted))
    }

    /// `finish`: handler running.
    pub fn finish(&mut self, id: TaskId, outcome: HandlerOutcome) -> R {
        let i = self.running(id)?;
        let error = match &outcome {
            HandlerOutcome::Returned(_) => None,
            HandlerOutcome::Errored(e) => Some(e.clone()),
            HandlerOutcome::Aborted => Some(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "handler aborted")),
        };
        let live = self.live_children(i);
        let t = &mut self.tasks[i];
        t.outstanding.clear();
        t.steers.clear();
        t.handler = Handler::Exited(outcome);
        if let Pause::Pending { via } = t.pause {
            t.pause = Pause::Paused { via };
        }
        if let (None, Some(e), true) = (&t.ending, error, live > 0) {
            self.wind_down(i, Ending::Failing(e), Ending::Cancelling);
        }
        self.settle();
        Ok(Ret::Unit)
    }

    /// `set_ttl`: exists; re-clamped to the parent, descendants re-clamped to theirs.
    pub fn set_ttl(&mut self, id: TaskId, ttl: Option<u64>) -> R {
        let i = self.known(id)?;
        let created = self.tasks[i].created;
        let parent_exp = self.tasks[i].parent.and_then(|p| self.expiry(p));
        let exp = min_opt(ttl.map(|t| created.saturating_add(t)), parent_exp);
        self.tasks[i].ttl = exp.map(|e| e.saturating_sub(created));
        // Pre-order: each parent is re-clamped before its children.
        for d in self.descendants(i) {
            let Some(pexp) = self.tasks[d].parent.and_then(|p| self.expiry(p)) else {
                continue;
            };
            if self.expiry(d).is_none_or(|e| e > pexp) {
                self.tasks[d].ttl = Some(pexp.saturating_sub(self.tasks[d].created));
            }
        }
        Ok(Ret::Unit)
    }

    /// `handle_timeout`: every expired live task fails with its live
    /// descendants (one timer after the other, by deadline, ancestors first,
    /// then in creation order, as docs/lifecycle.md decides; see
    /// `regressions::simultaneous_expiry_fails_the_parent_as_expired`), then
    /// every terminal tree whose root's TTL plus grace elapsed is deleted.
    pub fn handle_timeout(&mut self, now: u64) -> R {
        // Equal deadlines fire ancestors first (docs/lifecycle.md, Decisions).
        let depth = |mut i: usize| {
            let mut d = 0u32;
            while let Some(p) = self.tasks[i].parent {
                d += 1;
                i = p;
            }
            d
        };
        let mut due: Vec<(u64, u32, usize)> = (0..self.tasks.len())
            .filter(|&i| self.is_live(i))
            .filter_map(|i| self.expiry(i).filter(|&e| e <= now).map(|e| (e, depth(i), i)))
            .collect();
        due.sort();
        for (_, _, i) in due {
            if !self.is_live(i) || matches!(self.tasks[i].ending, Some(Ending::Failing(_))) {
                continue;
            }
            let err = expired_error(self.tasks[i].ttl);
            self.wind_down(i, Ending::Failing(err.clone()), Ending::Failing(err));
            self.settle();
        }
        for r in 0..self.tasks.len() {
            let t = &self.tasks[r];
            if t.parent.is_none()
                && !t.deleted
                && t.outcome.is_some()
                && self
                    .expiry(r)
                    .is_some_and(|e| e.saturating_add(self.grace) <= now)
            {
                self.delete(r);
            }
        }
        Ok(Ret::Unit)
    }

    fn delete(&mut self, root: usize) {
        let mut all: BTreeSet<usize> = self.descendants(root).into_iter().collect();
        all.insert(root);
        for &t in &all {
            self.tasks[t].deleted = true;
        }
        self.fx.deleted.push((root, all));
    }

    /// `delete_tree`: a root that is terminal.
    pub fn delete_tree(&mut self, id: TaskId) -> R {
        let i = self.known(id)?;
        if self.tasks[i].parent.is_some() {
            return Err(TransitionError::NotARoot(id));
        }
        if self.tasks[i].outcome.is_none() {
            return Err(TransitionError::TreeNotTerminal(id));
        }
        self.delete(i);
        Ok(Ret::Unit)
    }
}
