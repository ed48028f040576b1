//! One task's state inside the forest.
//!
//! State lives in enum variants that carry their data: a task is either
//! [`Phase::Active`] (its handler state, pause state and pending ending) or
//! [`Phase::Terminal`] (its outcome). The wire status is derived from that,
//! never stored twice.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::inputs::{PendingInputs, UsedKeys};
use super::table::Slot;
use super::timeline::{Stage, Timeline};
use crate::model::{
    ClientView, DetailedTask, ErrorObject, JsonObject, Task, TaskId, TaskOutcome, TaskPayload, TaskStatus,
    Timestamp,
};

/// What the handler of a task returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandlerOutcome {
    /// The handler returned a result (also for tool results with `isError: true`).
    Returned(JsonObject),
    /// The handler returned a JSON-RPC error (or panicked: `-32603`).
    Errored(ErrorObject),
    /// The runtime aborted a handler that ignored a cancel request past its grace period.
    Aborted,
}

/// Where a task's handler is in its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandlerState {
    /// Not started yet: waiting for a scheduler slot or `after` dependencies.
    Queued,
    /// Started and not yet finished (it may be parked at a safe point or awaiting input).
    Running,
    /// Finished; the task is completing once its children are terminal
    /// (boxed: an active task's state stays small while its handler runs).
    Exited(Box<HandlerOutcome>),
}

/// Pause sub-state of an active task (SEP-2669 and the "pause propagates down" decision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseState {
    /// Not paused.
    Unpaused,
    /// A pause was requested; the handler has not reached a safe point yet.
    /// The wire status is unchanged.
    Pending {
        /// The task whose pause caused this one (itself for a direct pause).
        via: TaskId,
    },
    /// Halted: the wire status is `paused`.
    Paused {
        /// The task whose pause caused this one (itself for a direct pause).
        via: TaskId,
        /// The wire status before the pause, restored by resume.
        prior: TaskStatus,
        /// Why the server paused the task, for server-initiated pauses.
        reason: Option<String>,
    },
}

impl PauseState {
    fn unpaused() -> PauseState {
        PauseState::Unpaused
    }

    fn is_unpaused(&self) -> bool {
        matches!(self, PauseState::Unpaused)
    }
}

/// A decided ending that waits only for the handler to stop and the children
/// to become terminal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// A cancel was accepted; the task ends `cancelled`.
    Cancelling {
        /// Why (shown as the status message); shared by every task a cancel reached.
        reason: Arc<str>,
    },
    /// The task ends `failed` with this error (TTL expired, handler error with
    /// live children, fail-fast child failure).
    Failing {
        /// The error the task will carry (shared by every task it reached).
        error: Arc<ErrorObject>,
    },
}

/// The state of a task that is not terminal.
///
/// 32 bytes, boxed in [`Phase::Active`]: the pause state and a decided
/// ending, which most tasks never have, are in one more box of their own
/// (read them with [`Active::pause`] and [`Active::ending`]). A parked task
/// holds this for as long as it waits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "ActiveRepr")]
pub struct Active {
    /// The handler's state.
    pub handler: HandlerState,
    /// How many runtime-controlled waits (awaiting a subtask) the running
    /// handler is parked in. While non-zero the handler counts as parked:
    /// a pause takes effect at once.
    pub waits: u32,
    /// The handler is not started because `after` dependencies are
    /// pending ([`Forest::await_dependencies`](super::Forest::await_dependencies)).
    /// Kept for the timeline only (it is [`Stage::Dependencies`] there);
    /// not stored.
    pub awaiting_dependencies: bool,
    /// Pause state and ending, when either is set.
    rare: Option<Box<ActiveRare>>,
}

/// What [`Active`] keeps out of line.
#[derive(Debug, Clone, PartialEq)]
struct ActiveRare {
    pause: PauseState,
    ending: Option<Ending>,
}

/// The pause state of a task that has none.
static UNPAUSED: PauseState = PauseState::Unpaused;

impl Active {
    /// A task whose handler is in `handler`, unpaused and without ending.
    pub fn new(handler: HandlerState) -> Active {
        Active {
            handler,
            waits: 0,
            awaiting_dependencies: false,
            rare: None,
        }
    }

    /// Pause sub-state.
    pub fn pause(&self) -> &PauseState {
        self.rare.as_ref().map_or(&UNPAUSED, |r| &r.pause)
    }

    /// A decided ending (cancel or failure), if any.
    pub fn ending(&self) -> Option<&Ending> {
        self.rare.as_ref().and_then(|r| r.ending.as_ref())
    }

    /// Sets the pause sub-state.
    pub fn set_pause(&mut self, pause: PauseState) {
        self.set(|r| r.pause = pause);
    }

    /// Sets (or clears) the decided ending.
    pub fn set_ending(&mut self, ending: Option<Ending>) {
        self.set(|r| r.ending = ending);
    }

    /// Takes the decided ending out.
    pub fn take_ending(&mut self) -> Option<Ending> {
        let ending = self.rare.as_mut().and_then(|r| r.ending.take());
        self.set(|_| {});
        ending
    }

    /// Changes the out-of-line part, dropping it when it holds nothing.
    fn set(&mut self, f: impl FnOnce(&mut ActiveRare)) {
        let rare = self.rare.get_or_insert_with(|| {
            Box::new(ActiveRare {
                pause: PauseState::Unpaused,
                ending: None,
            })
        });
        f(rare);
        if rare.pause.is_unpaused() && rare.ending.is_none() {
            self.rare = None;
        }
    }
}

/// [`Active`] as stored (the same fields as before it kept its rare part
/// out of line), read.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
struct ActiveRepr {
    handler: HandlerState,
    /// Stored only when paused or pausing.
    #[serde(default = "PauseState::unpaused")]
    pause: PauseState,
    #[serde(default)]
    ending: Option<Ending>,
    #[serde(default)]
    waits: u32,
}

/// [`Active`] as stored, written.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
struct ActiveRef<'a> {
    handler: &'a HandlerState,
    #[serde(skip_serializing_if = "PauseState::is_unpaused")]
    pause: &'a PauseState,
    #[serde(skip_serializing_if = "Option::is_none")]
    ending: Option<&'a Ending>,
    #[serde(skip_serializing_if = "is_zero")]
    waits: u32,
}

impl From<ActiveRepr> for Active {
    fn from(r: ActiveRepr) -> Active {
        let mut a = Active::new(r.handler);
        a.waits = r.waits;
        a.set_pause(r.pause);
        a.set_ending(r.ending);
        a
    }
}

impl Serialize for Active {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ActiveRef {
            handler: &self.handler,
            pause: self.pause(),
            ending: self.ending(),
            waits: self.waits,
        }
        .serialize(s)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The outcome of a terminal task. Terminal is absorbing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Terminal {
    /// `completed` with the result.
    Completed {
        /// The result.
        result: JsonObject,
    },
    /// `failed` with the JSON-RPC error.
    Failed {
        /// The error (behind a pointer: retained terminal tasks stay small;
        /// shared with the tasks an expiry or a failure reached with it).
        error: Arc<ErrorObject>,
    },
    /// `cancelled`.
    Cancelled {
        /// Why.
        reason: Arc<str>,
    },
}

impl Terminal {
    /// The wire status.
    pub fn status(&self) -> TaskStatus {
        match self {
            Terminal::Completed { .. } => TaskStatus::Completed,
            Terminal::Failed { .. } => TaskStatus::Failed,
            Terminal::Cancelled { .. } => TaskStatus::Cancelled,
        }
    }
}

/// Active or terminal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Not terminal. Held inline (32 bytes; a retained terminal task's
    /// record carries the same 8 bytes more): a task parked for minutes
    /// then holds no allocation of its own for it.
    Active(Active),
    /// Terminal (absorbing).
    Terminal(Terminal),
}

/// Input requests of one task: the outstanding ones and every key ever used
/// (I9: keys are unique over the task's lifetime).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InputBook {
    /// Each request as its JSON text (`inputs.rs`): a request may wait for
    /// minutes, and text is a fraction of a parsed map's size.
    pub(crate) outstanding: PendingInputs,
    pub(crate) used: UsedKeys,
    /// Responses delivered by `tasks/update` while the task is active, kept
    /// so a handler re-run after a restart gets the same answers.
    #[serde(default)]
    pub(crate) answered: BTreeMap<String, JsonObject>,
    /// The task's journal in a durable tree (`journal.rs`). Kept in this
    /// rarely allocated box so a record stays the same size; stored under
    /// its own key, not with the input book.
    #[serde(skip)]
    pub(crate) journal: Option<Box<super::journal::Journal>>,
}

/// The input book of a task that never asked for input.
pub(crate) static NO_INPUTS: InputBook = InputBook {
    outstanding: PendingInputs::new(),
    used: UsedKeys::new(),
    answered: BTreeMap::new(),
    journal: None,
};

impl InputBook {
    /// Outstanding requests by key (as JSON text).
    pub fn outstanding(&self) -> &PendingInputs {
        &self.outstanding
    }

    /// Whether `key` was ever issued for this task.
    pub fn was_used(&self, key: &str) -> bool {
        self.used.contains(key)
    }

    /// Responses delivered while the task is active, by key.
    pub fn answered(&self) -> &BTreeMap<String, JsonObject> {
        &self.answered
    }

    /// Whether the book holds no input request, key or answer.
    pub(crate) fn has_no_inputs(&self) -> bool {
        self.outstanding.is_empty() && self.used.is_empty() && self.answered.is_empty()
    }
}

/// A child in its parent's record: its id (for `childTaskIds`) and its slot
/// (for walks that do not hash ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Child {
    pub(crate) id: TaskId,
    pub(crate) slot: Slot,
}

/// Everything the core knows about one task.
#[derive(Debug, Clone)]
pub struct TaskRecord {
    pub(crate) id: TaskId,
    /// The parent's id, the task's own for a root (a plain id keeps the
    /// record 8 bytes smaller than an `Option`); read it with
    /// [`TaskRecord::parent`].
    pub(crate) parent_id: TaskId,
    /// The parent's slot (the task's own for a root).
    pub(crate) parent_slot: Slot,
    pub(crate) root: TaskId,
    pub(crate) depth: u32,
    /// Index of this task in its parent's `childTaskIds` (0 for a root).
    pub(crate) position: u32,
    /// Its children, status message and queued steers, boxed and created
    /// on demand: most tasks are leaves without a message, and keep 8
    /// bytes here rather than 64. Read them with [`TaskRecord::children`],
    /// [`TaskRecord::handler_message`] and [`TaskRecord::queued_steers`].
    pub(crate) rare: Option<Box<RecordRare>>,
    pub(crate) live_children: u32,
    pub(crate) created_at: Timestamp,
    pub(crate) last_updated_at: Timestamp,
    /// Which of the four optional numbers below are set ([`Present`]):
    /// four `Option<u64>`s would take 32 bytes more. Read them with
    /// [`TaskRecord::ttl_ms`], [`TaskRecord::poll_interval_ms`],
    /// [`TaskRecord::expiry_timer`] and [`TaskRecord::delete_timer`].
    pub(super) present: Present,
    pub(super) ttl_ms: u64,
    pub(super) poll_interval_ms: u64,
    /// Timers currently armed for this task.
    pub(super) expiry_timer: Timestamp,
    pub(super) delete_timer: Timestamp,
    pub(crate) fail_fast: bool,
    /// When its handler last started, in milliseconds after its creation
    /// (saturating at `u32::MAX`, 49 days): set by the runtime from its
    /// start command's clock reading, for the handler run time metric
    /// (read with [`TaskRecord::handler_started_at`]; it fits in the
    /// record's padding).
    pub(crate) started_after_ms: u32,
    /// Allocated on the first input request.
    pub(crate) inputs: Option<Box<InputBook>>,
    pub(crate) phase: Phase,
    /// When the task entered each stage (`timeline.rs`), for the web view.
    pub(crate) timeline: Timeline,
    /// Command epoch in which this record was last touched (effect bookkeeping).
    pub(crate) touch_epoch: u64,
}

/// The boxed, rarely used part of a [`TaskRecord`].
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordRare {
    pub(crate) children: Vec<Child>,
    pub(crate) message: Option<Box<str>>,
    pub(crate) steers: Vec<String>,
}

/// Presence bits of a record's optional numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Present(u8);

impl Present {
    /// None set: what a record's optional numbers start as (each then 0).
    pub(super) const NONE: Present = Present(0);
    const TTL: u8 = 1;
    const POLL: u8 = 2;
    const EXPIRY: u8 = 4;
    const DELETE: u8 = 8;

    fn get<T: Copy>(self, bit: u8, value: T) -> Option<T> {
        (self.0 & bit != 0).then_some(value)
    }

    /// Sets or clears `bit`, and `value` to what `v` holds (the default
    /// when `None`, so equal records stay equal).
    fn set<T: Copy + Default>(&mut self, bit: u8, value: &mut T, v: Option<T>) {
        match v {
            Some(v) => {
                self.0 |= bit;
                *value = v;
            }
            None => {
                self.0 &= !bit;
                *value = T::default();
            }
        }
    }
}

impl TaskRecord {
    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// The parent, `None` for a root (I1: never changes, never the task itself).
    pub fn parent(&self) -> Option<TaskId> {
        (self.parent_id != self.id).then_some(self.parent_id)
    }

    /// The root of this task's tree.
    pub fn root(&self) -> TaskId {
        self.root
    }

    /// Depth below the root (the root is 0).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Index of this task in its parent's `childTaskIds` (0 for a root).
    pub fn position(&self) -> u32 {
        self.position
    }

    /// Children in creation order (I2: append-only).
    pub fn children(&self) -> impl ExactSizeIterator<Item = TaskId> + '_ {
        self.child_list().iter().map(|c| c.id)
    }

    /// The `i`-th child (creation order).
    pub fn child(&self, i: usize) -> Option<TaskId> {
        self.child_list().get(i).map(|c| c.id)
    }

    /// Number of children.
    pub fn child_count(&self) -> usize {
        self.child_list().len()
    }

    /// Children with their slots, in creation order.
    pub(crate) fn child_list(&self) -> &[Child] {
        self.rare.as_deref().map_or(&[], |r| &r.children)
    }

    /// The rarely used part, created on demand.
    pub(crate) fn rare_mut(&mut self) -> &mut RecordRare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Sets (or clears) the handler's status message.
    pub(crate) fn set_message(&mut self, message: Option<Box<str>>) {
        match message {
            Some(m) => self.rare_mut().message = Some(m),
            None => {
                if let Some(rare) = self.rare.as_deref_mut() {
                    rare.message = None;
                }
                self.drop_rare_if_empty();
            }
        }
    }

    /// Frees the rare part once it holds nothing (a task queued for a slot
    /// had a message until it started: it keeps no empty box for good).
    fn drop_rare_if_empty(&mut self) {
        if self
            .rare
            .as_deref()
            .is_some_and(|r| r.children.is_empty() && r.message.is_none() && r.steers.is_empty())
        {
            self.rare = None;
        }
    }

    /// Takes the queued steers, oldest first.
    pub(crate) fn take_steers(&mut self) -> Vec<String> {
        let steers = self
            .rare
            .as_deref_mut()
            .map(|r| std::mem::take(&mut r.steers))
            .unwrap_or_default();
        self.drop_rare_if_empty();
        steers
    }

    /// Drops the queued steers.
    pub(crate) fn clear_steers(&mut self) {
        if let Some(r) = self.rare.as_deref_mut() {
            r.steers = Vec::new();
        }
        self.drop_rare_if_empty();
    }

    /// When its handler last started (its creation time if it never did).
    pub(crate) fn handler_started_at(&self) -> Timestamp {
        self.created_at.saturating_add(u64::from(self.started_after_ms))
    }

    /// Records that its handler starts at `now`.
    pub(crate) fn set_handler_started(&mut self, now: Timestamp) {
        self.started_after_ms = u32::try_from(now.millis_since(self.created_at)).unwrap_or(u32::MAX);
    }

    /// Sets (or clears) the TTL.
    pub(crate) fn set_ttl_ms(&mut self, ttl_ms: Option<u64>) {
        self.present.set(Present::TTL, &mut self.ttl_ms, ttl_ms);
    }

    /// Sets (or clears) the suggested polling interval.
    pub(crate) fn set_poll_interval_ms(&mut self, ms: Option<u64>) {
        self.present.set(Present::POLL, &mut self.poll_interval_ms, ms);
    }

    /// The deadline of the task's armed expiry timer.
    pub(crate) fn expiry_timer(&self) -> Option<Timestamp> {
        self.present.get(Present::EXPIRY, self.expiry_timer)
    }

    /// Arms (or disarms) the expiry timer's record.
    pub(crate) fn set_expiry_timer(&mut self, at: Option<Timestamp>) {
        self.present.set(Present::EXPIRY, &mut self.expiry_timer, at);
    }

    /// The deadline of the task's armed deletion timer.
    pub(crate) fn delete_timer(&self) -> Option<Timestamp> {
        self.present.get(Present::DELETE, self.delete_timer)
    }

    /// Arms (or disarms) the deletion timer's record.
    pub(crate) fn set_delete_timer(&mut self, at: Option<Timestamp>) {
        self.present.set(Present::DELETE, &mut self.delete_timer, at);
    }

    /// The task as `view` sees it, with `children` as its `childTaskIds`
    /// (what [`Forest::snapshot`](super::Forest::snapshot) shows; a cluster
    /// instance builds the same answer from a stored record and its
    /// children's rows).
    pub fn detailed(&self, children: Vec<TaskId>, view: ClientView) -> DetailedTask {
        let status = self.status();
        let payload = match &self.phase {
            Phase::Terminal(Terminal::Completed { result }) => TaskPayload::Completed {
                result: result.clone(),
            },
            Phase::Terminal(Terminal::Failed { error }) => TaskPayload::Failed {
                error: (**error).clone(),
            },
            Phase::Terminal(Terminal::Cancelled { .. }) => TaskPayload::Cancelled,
            Phase::Active(_) => match status {
                TaskStatus::Paused if view.show_paused => TaskPayload::Paused,
                TaskStatus::InputRequired => TaskPayload::InputRequired {
                    input_requests: self.outstanding_inputs().to_requests(),
                },
                _ => TaskPayload::Working,
            },
        };
        let task = Task {
            task_id: self.id,
            status,
            status_message: self.status_message(),
            created_at: self.created_at,
            last_updated_at: self.last_updated_at,
            ttl_ms: self.ttl_ms(),
            poll_interval_ms: self.poll_interval_ms(),
            parent_task_id: self.parent(),
            child_task_ids: children,
        };
        DetailedTask::new(task, payload)
    }

    /// `childTaskIds` as the wire shows it.
    pub fn child_ids(&self) -> Vec<TaskId> {
        self.children().collect()
    }

    /// Number of children that are not terminal.
    pub fn live_children(&self) -> u32 {
        self.live_children
    }

    /// Creation time.
    pub fn created_at(&self) -> Timestamp {
        self.created_at
    }

    /// Last observable change.
    pub fn last_updated_at(&self) -> Timestamp {
        self.last_updated_at
    }

    /// TTL in milliseconds from creation, `None` for unlimited.
    pub fn ttl_ms(&self) -> Option<u64> {
        self.present.get(Present::TTL, self.ttl_ms)
    }

    /// `created_at + ttl`, when the task expires.
    pub fn expires_at(&self) -> Option<Timestamp> {
        self.ttl_ms().map(|ttl| self.created_at.saturating_add(ttl))
    }

    /// Suggested polling interval.
    pub fn poll_interval_ms(&self) -> Option<u64> {
        self.present.get(Present::POLL, self.poll_interval_ms)
    }

    /// The status message set by the handler or the runtime.
    pub fn handler_message(&self) -> Option<&str> {
        self.rare.as_deref().and_then(|r| r.message.as_deref())
    }

    /// Whether this child's failure fails its parent (fail-fast policy).
    pub fn is_fail_fast(&self) -> bool {
        self.fail_fast
    }

    /// Steer messages queued and not yet delivered, oldest first.
    pub fn queued_steers(&self) -> &[String] {
        self.rare.as_deref().map_or(&[], |r| &r.steers)
    }

    /// The task's journal, in a durable tree (`None` when it recorded nothing).
    pub fn journal(&self) -> Option<&super::journal::Journal> {
        self.inputs.as_deref().and_then(|b| b.journal.as_deref())
    }

    /// The task's journal, created on demand.
    pub(crate) fn journal_mut(&mut self) -> &mut super::journal::Journal {
        self.inputs_mut().journal.get_or_insert_with(Box::default)
    }

    /// Drops the journal.
    pub(crate) fn clear_journal(&mut self) {
        if let Some(b) = self.inputs.as_mut() {
            b.journal = None;
        }
    }

    /// Input requests.
    pub fn inputs(&self) -> &InputBook {
        self.inputs.as_deref().unwrap_or(&NO_INPUTS)
    }

    /// Outstanding input requests (empty when none), as JSON text.
    pub fn outstanding_inputs(&self) -> &PendingInputs {
        &self.inputs().outstanding
    }

    pub(crate) fn has_outstanding_inputs(&self) -> bool {
        self.inputs.as_ref().is_some_and(|b| !b.outstanding.is_empty())
    }

    pub(crate) fn inputs_mut(&mut self) -> &mut InputBook {
        self.inputs.get_or_insert_with(Box::default)
    }

    /// Drops outstanding requests (superseded); the used keys stay (I9).
    pub(crate) fn clear_outstanding(&mut self) {
        if let Some(b) = self.inputs.as_mut() {
            b.outstanding.clear();
        }
    }

    /// When the task entered each stage of its life (the web view's timeline).
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// The stage the task is in now, derived from its state: ended once
    /// terminal; otherwise paused, else waiting for input, else what its
    /// handler does (queued or waiting for dependencies, running, awaiting
    /// a subtask or, once returned, its children).
    pub fn stage(&self) -> Stage {
        let a = match &self.phase {
            Phase::Terminal(_) => return Stage::Ended,
            Phase::Active(a) => a,
        };
        if matches!(a.pause(), PauseState::Paused { .. }) {
            return Stage::Paused;
        }
        if self.has_outstanding_inputs() {
            return Stage::Input;
        }
        match a.handler {
            HandlerState::Queued if a.awaiting_dependencies => Stage::Dependencies,
            HandlerState::Queued => Stage::Queued,
            HandlerState::Running if a.waits > 0 => Stage::Children,
            HandlerState::Running => Stage::Running,
            HandlerState::Exited(_) => Stage::Children,
        }
    }

    /// Marks the task's timeline when its stage changed, at `now` (the
    /// time of the command that changed it: no clock is read).
    pub(crate) fn note_stage(&mut self, now: Timestamp) {
        let stage = self.stage();
        if stage != self.timeline.current() {
            self.timeline.push(stage, now.millis_since(self.created_at));
        }
    }

    /// Active or terminal state.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The active state, `None` once terminal.
    pub fn active(&self) -> Option<&Active> {
        match &self.phase {
            Phase::Active(a) => Some(a),
            Phase::Terminal(_) => None,
        }
    }

    pub(crate) fn active_mut(&mut self) -> Option<&mut Active> {
        match &mut self.phase {
            Phase::Active(a) => Some(a),
            Phase::Terminal(_) => None,
        }
    }

    /// `true` once completed, failed or cancelled.
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase, Phase::Terminal(_))
    }

    /// The task's outcome once terminal, `None` while it is active.
    pub fn outcome(&self) -> Option<TaskOutcome> {
        match &self.phase {
            Phase::Active(_) => None,
            Phase::Terminal(Terminal::Completed { result }) => Some(TaskOutcome::Completed(result.clone())),
            Phase::Terminal(Terminal::Failed { error }) => Some(TaskOutcome::Failed((**error).clone())),
            Phase::Terminal(Terminal::Cancelled { .. }) => Some(TaskOutcome::Cancelled),
        }
    }

    /// The wire status (with `paused` shown as such).
    pub fn status(&self) -> TaskStatus {
        match &self.phase {
            Phase::Terminal(t) => t.status(),
            Phase::Active(a) => match *a.pause() {
                PauseState::Paused { .. } => TaskStatus::Paused,
                _ if self.has_outstanding_inputs() => TaskStatus::InputRequired,
                _ => TaskStatus::Working,
            },
        }
    }

    /// Status as it would be without the pause: what resume restores.
    pub(crate) fn unpaused_status(&self) -> TaskStatus {
        if self.has_outstanding_inputs() {
            TaskStatus::InputRequired
        } else {
            TaskStatus::Working
        }
    }

    /// `true` when a cancel was accepted or a failure decided.
    pub fn is_winding_down(&self) -> bool {
        self.active().is_some_and(|a| a.ending().is_some())
    }

    /// `true` when a cancel was accepted and the task is not yet terminal.
    pub fn is_cancel_requested(&self) -> bool {
        self.active()
            .is_some_and(|a| matches!(a.ending(), Some(Ending::Cancelling { .. })))
    }

    /// The status message clients see: the sub-state explains itself
    /// (queued, completing, pause pending, cancel requested), otherwise the
    /// handler's own message.
    pub fn status_message(&self) -> Option<String> {
        match &self.phase {
            Phase::Terminal(Terminal::Completed { .. }) => self.handler_message().map(str::to_owned),
            Phase::Terminal(Terminal::Failed { error }) => Some(error.message.clone()),
            Phase::Terminal(Terminal::Cancelled { reason }) => Some(reason.to_string()),
            Phase::Active(a) => match (a.ending(), a.pause(), &a.handler) {
                (Some(Ending::Cancelling { reason }), _, _) => Some(format!("cancelling: {reason}")),
                (Some(Ending::Failing { error }), _, _) => Some(format!("failing: {}", error.message)),
                (None, PauseState::Paused { reason: Some(r), .. }, _) => Some(format!("paused: {r}")),
                (None, PauseState::Paused { via, .. }, _) if *via != self.id => {
                    Some(format!("paused with ancestor {via}"))
                }
                (None, PauseState::Paused { .. }, _) => Some("paused".to_owned()),
                (None, PauseState::Pending { .. }, _) => {
                    Some("pause requested: pausing at the next safe point".to_owned())
                }
                (None, PauseState::Unpaused, HandlerState::Exited(_)) => Some(format!(
                    "completing: waiting for {} of {} subtasks",
                    self.live_children,
                    self.child_list().len()
                )),
                (None, PauseState::Unpaused, HandlerState::Queued) => Some(
                    self.handler_message()
                        .unwrap_or("queued: waiting to start")
                        .to_owned(),
                ),
                (None, PauseState::Unpaused, HandlerState::Running) => {
                    self.handler_message().map(str::to_owned)
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Active`] keeps its pause and ending out of line, but is stored as
    /// before: the fields of the derived format, unset ones left out.
    #[test]
    fn an_active_state_is_stored_in_the_same_format() {
        let via = TaskId::random();
        let mut a = Active::new(HandlerState::Exited(Box::new(HandlerOutcome::Aborted)));
        a.waits = 2;
        a.set_pause(PauseState::Paused {
            via,
            prior: TaskStatus::InputRequired,
            reason: Some("why".into()),
        });
        a.set_ending(Some(Ending::Cancelling {
            reason: "stop".into(),
        }));
        let stored = serde_json::json!({
            "handler": {"exited": "aborted"},
            "pause": {"paused": {"via": via, "prior": "input_required", "reason": "why"}},
            "ending": {"cancelling": {"reason": "stop"}},
            "waits": 2,
        });
        assert_eq!(serde_json::to_value(&a).unwrap(), stored);
        assert_eq!(serde_json::from_value::<Active>(stored).unwrap(), a);
        // Unset parts are left out, and the out-of-line part goes once unset.
        a.set_pause(PauseState::Unpaused);
        assert_eq!(a.take_ending().map(|_| ()), Some(()));
        assert!(a.rare.is_none());
        a.waits = 0;
        a.handler = HandlerState::Running;
        let bare = serde_json::json!({"handler": "running"});
        assert_eq!(serde_json::to_value(&a).unwrap(), bare);
        assert_eq!(serde_json::from_value::<Active>(bare).unwrap(), a);
    }
}
