//! The forest: every task, the ordered deadline structure and the effect queue.
//!
//! Shaped like quinn-proto's `Connection`: getters, `handle_*`/command
//! methods that take `now`, and `poll_effect` / `next_deadline` for the
//! driver. No clock reads, no I/O, no locks.
//!
//! # Invariants
//!
//! The forest upholds I1–I12 of `docs/lifecycle.md` after every command;
//! [`Forest::check_invariants`] verifies the structural ones. Commands
//! validate before they mutate, so a rejected command changes nothing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use super::config::ForestConfig;
use super::effect::Effect;
use super::error::{Limit, TransitionError};
use super::record::{Active, HandlerState, PauseState, Phase, TaskRecord, Terminal};
use crate::model::{DetailedTask, Task, TaskId, TaskPayload, TaskStatus, Timestamp};

/// Hasher for [`TaskId`] keys. Ids are random, so mixing two words with a
/// multiply is enough; attackers cannot choose ids that exist.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = self.0.rotate_left(29) ^ n;
    }
}

/// A `HashMap` keyed by task id with [`IdHasher`].
pub type IdMap<V> = HashMap<TaskId, V, BuildHasherDefault<IdHasher>>;

/// A timer in the ordered deadline structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// The task's TTL elapses: fail it if it is not terminal. Ordered by
    /// depth first, so at equal deadlines ancestors fire before descendants
    /// (a parent's own expiry wins over a fail-fast child expiring with it).
    Expire(u32, TaskId),
    /// Delete the tree rooted here.
    Delete(TaskId),
}

/// How a client sees tasks: whether it declared SEP-2669's `pause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClientView {
    /// `true` when the client understands the `paused` status. Otherwise a
    /// paused task is shown as `working` with a status message saying it is
    /// paused.
    pub show_paused: bool,
}

impl ClientView {
    /// A client that declared the `pause` sub-capability.
    pub const PAUSE_AWARE: ClientView = ClientView { show_paused: true };
    /// A base-extension client.
    pub const BASE: ClientView = ClientView { show_paused: false };
}

/// Options of a new root task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RootOptions {
    /// TTL in milliseconds from creation; `None` is unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: Option<u64>,
}

/// Options of a new subtask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildOptions {
    /// Requested TTL; clamped so the child never expires after its parent
    /// (I8). `None` inherits the parent's expiry.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval; `None` inherits the parent's.
    pub poll_interval_ms: Option<u64>,
    /// Fail-fast: if this child fails, its siblings are cancelled and its
    /// parent fails. Otherwise the parent supervises (sees the outcome).
    pub fail_fast: bool,
}

/// The task forest and its lifecycle state machine.
///
/// # Examples
///
/// ```
/// use subtask::core::{Forest, RootOptions, ChildOptions, HandlerOutcome, ClientView};
/// use subtask::model::{JsonObject, TaskStatus, Timestamp};
///
/// let mut forest = Forest::default();
/// let t0 = Timestamp::from_millis(1_000);
/// let root = forest.create_root(t0, RootOptions::default()).unwrap();
/// forest.start(t0, root).unwrap();
/// let child = forest.create_child(t0, root, ChildOptions::default()).unwrap();
/// forest.start(t0, child).unwrap();
/// // The root's handler returns first: it waits for its child (structured concurrency).
/// forest.finish(t0, root, HandlerOutcome::Returned(JsonObject::new())).unwrap();
/// assert_eq!(forest.task(root).unwrap().status(), TaskStatus::Working);
/// forest.finish(t0, child, HandlerOutcome::Returned(JsonObject::new())).unwrap();
/// assert_eq!(forest.task(root).unwrap().status(), TaskStatus::Completed);
/// assert_eq!(forest.result_order(root), vec![child, root]);
/// let snap = forest.snapshot(root, ClientView::PAUSE_AWARE).unwrap();
/// assert_eq!(snap.task().child_task_ids, vec![child]);
/// ```
#[derive(Debug, Clone)]
pub struct Forest {
    pub(crate) config: ForestConfig,
    /// Records are boxed so an almost empty map (a one-task tree) stays small.
    pub(crate) tasks: IdMap<Box<TaskRecord>>,
    /// Ordered deadlines, min first. Entries whose task no longer has that
    /// timer armed are stale and skipped (lazy deletion): re-arming is O(log n)
    /// and a one-task tree holds a four-slot vector, not a B-tree node.
    pub(crate) timers: BinaryHeap<Reverse<(Timestamp, Timer)>>,
    effects: VecDeque<Effect>,
    pub(crate) now: Timestamp,
    epoch: u64,
    touched: Vec<(TaskId, TaskStatus)>,
}

impl Default for Forest {
    fn default() -> Self {
        Forest::new(ForestConfig::default())
    }
}

impl Forest {
    /// An empty forest.
    pub fn new(config: ForestConfig) -> Self {
        Forest {
            config,
            tasks: IdMap::default(),
            timers: BinaryHeap::new(),
            effects: VecDeque::new(),
            now: Timestamp::EPOCH,
            epoch: 0,
            touched: Vec::new(),
        }
    }

    // ----- getters -------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &ForestConfig {
        &self.config
    }

    /// The task with this id, in O(1).
    pub fn task(&self, id: TaskId) -> Option<&TaskRecord> {
        self.tasks.get(&id).map(|r| &**r)
    }

    /// Whether the task exists (is retrievable).
    pub fn contains(&self, id: TaskId) -> bool {
        self.tasks.contains_key(&id)
    }

    /// Number of retrievable tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// `true` when the forest holds no task.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Every task id, in no particular order. For tests and recovery only:
    /// no hot path iterates the forest.
    pub fn ids(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.tasks.keys().copied()
    }

    /// The latest time the forest has seen.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The earliest armed deadline: call [`Forest::handle_timeout`] then.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        // Commands prune stale heads in `end`, so the head is live.
        self.timers.peek().map(|Reverse((at, _))| *at)
    }

    /// Takes the next effect, oldest first.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        let effect = self.effects.pop_front();
        if self.effects.is_empty() && self.effects.capacity() > 0 {
            // Idle trees hold no effect buffer.
            self.effects = VecDeque::new();
        }
        effect
    }

    /// Takes every pending effect, oldest first.
    pub fn take_effects(&mut self) -> VecDeque<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Takes every pending effect (an iterator over [`Forest::take_effects`]).
    pub fn drain_effects(&mut self) -> std::collections::vec_deque::IntoIter<Effect> {
        self.take_effects().into_iter()
    }

    /// Whether `(at, timer)` is still armed on its task.
    pub(crate) fn timer_is_live(&self, at: Timestamp, timer: Timer) -> bool {
        match timer {
            Timer::Expire(_, id) => self.tasks.get(&id).is_some_and(|r| r.expiry_timer == Some(at)),
            Timer::Delete(id) => self.tasks.get(&id).is_some_and(|r| r.delete_timer == Some(at)),
        }
    }

    fn prune_stale_timers(&mut self) {
        while let Some(&Reverse((at, timer))) = self.timers.peek() {
            if self.timer_is_live(at, timer) {
                break;
            }
            self.timers.pop();
        }
        if self.timers.is_empty() && self.timers.capacity() > 0 {
            self.timers = BinaryHeap::new();
        }
    }

    /// The task as a client sees it, in O(1) plus the size of its payload
    /// (payloads are reference-counted; children and input keys are copied).
    pub fn snapshot(&self, id: TaskId, view: ClientView) -> Option<DetailedTask> {
        let rec = self.tasks.get(&id)?;
        let status = rec.status();
        let payload = match &rec.phase {
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
                    input_requests: rec.outstanding_inputs().clone(),
                },
                _ => TaskPayload::Working,
            },
        };
        let task = Task {
            task_id: rec.id,
            status,
            status_message: rec.status_message(),
            created_at: rec.created_at,
            last_updated_at: rec.last_updated_at,
            ttl_ms: rec.ttl_ms,
            poll_interval_ms: rec.poll_interval_ms,
            parent_task_id: rec.parent,
            child_task_ids: rec.children.clone(),
        };
        Some(DetailedTask::new(task, payload))
    }

    /// Every task of the tree in result order (I12): post-order by
    /// `childTaskIds`, each child's subtree in order, then the parent.
    pub fn result_order(&self, root: TaskId) -> Vec<TaskId> {
        self.post_order(root, |_| true)
    }

    /// Non-terminal tasks of the subtree of `id` (including `id`), children
    /// before parents. Terminal subtrees are skipped whole: by I4 they hold
    /// no live task.
    pub(crate) fn live_subtree_post_order(&self, id: TaskId) -> Vec<TaskId> {
        self.post_order(id, |rec| !rec.is_terminal())
    }

    /// Post-order walk from `top` by `childTaskIds`, descending only into
    /// tasks that exist and satisfy `enter` (iterative: depth is bounded by
    /// the configured limit, but the stack is the heap's).
    fn post_order(&self, top: TaskId, enter: impl Fn(&TaskRecord) -> bool) -> Vec<TaskId> {
        let mut out = Vec::new();
        let mut stack: Vec<(TaskId, usize)> = vec![(top, 0)];
        while let Some((id, i)) = stack.last().copied() {
            let Some(rec) = self.tasks.get(&id).filter(|r| enter(r)) else {
                stack.pop();
                continue;
            };
            if let Some(&child) = rec.children.get(i) {
                if let Some(t) = stack.last_mut() {
                    t.1 += 1;
                }
                stack.push((child, 0));
            } else {
                stack.pop();
                out.push(id);
            }
        }
        out
    }

    // ----- command plumbing ---------------------------------------------

    /// Starts a command at `now` (time never goes backwards inside the core).
    pub(crate) fn begin(&mut self, now: Timestamp) {
        if now > self.now {
            self.now = now;
        }
        self.epoch += 1;
        debug_assert!(self.touched.is_empty());
    }

    /// Ends a command: stamps `lastUpdatedAt` and emits `Changed` and
    /// `Persist` once for every task the command modified.
    pub(crate) fn end(&mut self) {
        let now = self.now;
        let touched = std::mem::take(&mut self.touched);
        // Terminal tasks are reported deepest first, so a task's terminal
        // `Changed` always follows its children's (I6).
        let mut terminal: Vec<(u32, TaskId, TaskStatus, TaskStatus)> = Vec::new();
        for (id, from) in touched {
            let Some(rec) = self.tasks.get_mut(&id) else {
                continue;
            };
            rec.last_updated_at = now;
            let to = rec.status();
            if to.is_terminal() {
                terminal.push((rec.depth, id, from, to));
                continue;
            }
            self.effects.push_back(Effect::Changed { id, from, to });
            self.effects.push_back(Effect::Persist { id });
        }
        terminal.sort_by_key(|t| std::cmp::Reverse(t.0));
        for (_, id, from, to) in terminal {
            self.effects.push_back(Effect::Changed { id, from, to });
            self.effects.push_back(Effect::Persist { id });
        }
        self.prune_stale_timers();
    }

    /// Mutable access that records the task as modified by this command.
    ///
    /// # Panics
    ///
    /// If the task does not exist: callers validate first.
    pub(crate) fn rec_mut(&mut self, id: TaskId) -> &mut TaskRecord {
        let epoch = self.epoch;
        let rec = self
            .tasks
            .get_mut(&id)
            .expect("command validated that the task exists");
        if rec.touch_epoch != epoch {
            rec.touch_epoch = epoch;
            self.touched.push((id, rec.status()));
        }
        rec
    }

    pub(crate) fn emit(&mut self, effect: Effect) {
        self.effects.push_back(effect);
    }

    pub(crate) fn get(&self, id: TaskId) -> Result<&TaskRecord, TransitionError> {
        self.tasks
            .get(&id)
            .map(|r| &**r)
            .ok_or(TransitionError::UnknownTask(id))
    }

    pub(crate) fn get_active(&self, id: TaskId) -> Result<(&TaskRecord, &Active), TransitionError> {
        let rec = self.get(id)?;
        match &rec.phase {
            Phase::Active(a) => Ok((rec, &**a)),
            Phase::Terminal(t) => Err(TransitionError::Terminal {
                id,
                status: t.status(),
            }),
        }
    }

    // ----- timers --------------------------------------------------------

    fn arm(&mut self, at: Timestamp, timer: Timer) {
        let earliest = self.next_deadline();
        self.timers.push(Reverse((at, timer)));
        if earliest.is_none_or(|e| at < e) {
            self.effects.push_back(Effect::ArmTimer { at });
        }
    }

    /// Re-arms the expiry timer of `id` to match its TTL (none once terminal).
    pub(crate) fn sync_expiry_timer(&mut self, id: TaskId) {
        let Some(rec) = self.tasks.get(&id) else { return };
        let want = if rec.is_terminal() { None } else { rec.expires_at() };
        self.rearm(Timer::Expire(rec.depth, id), want);
    }

    /// Re-arms the deletion timer of a root: `expiry + grace`, once the tree is terminal.
    pub(crate) fn sync_delete_timer(&mut self, root: TaskId) {
        let Some(rec) = self.tasks.get(&root) else { return };
        let want = match (rec.is_terminal(), rec.expires_at()) {
            (true, Some(exp)) => Some(exp.saturating_add(self.config.deletion_grace_ms).max(self.now)),
            _ => None,
        };
        self.rearm(Timer::Delete(root), want);
    }

    /// Records `want` as the task's armed deadline for `timer` and pushes a
    /// heap entry when it changed; the old entry becomes stale (lazy deletion).
    fn rearm(&mut self, timer: Timer, want: Option<Timestamp>) {
        let (Timer::Expire(_, id) | Timer::Delete(id)) = timer;
        let Some(rec) = self.tasks.get_mut(&id) else {
            return;
        };
        let field = match timer {
            Timer::Expire(..) => &mut rec.expiry_timer,
            Timer::Delete(_) => &mut rec.delete_timer,
        };
        if *field == want {
            return;
        }
        *field = want;
        if let Some(at) = want {
            self.arm(at, timer);
        }
    }

    // ----- creation ------------------------------------------------------

    fn new_record(
        id: TaskId,
        parent: Option<&TaskRecord>,
        now: Timestamp,
        ttl_ms: Option<u64>,
        poll_interval_ms: Option<u64>,
        fail_fast: bool,
        pause: PauseState,
    ) -> TaskRecord {
        TaskRecord {
            id,
            parent: parent.map(|p| p.id),
            root: parent.map_or(id, |p| p.root),
            depth: parent.map_or(0, |p| p.depth + 1),
            position: parent.map_or(0, |p| p.children.len() as u32),
            children: Vec::new(),
            live_children: 0,
            created_at: now,
            last_updated_at: now,
            ttl_ms,
            poll_interval_ms,
            message: None,
            fail_fast,
            steers: VecDeque::new(),
            inputs: None,
            phase: Phase::Active(Box::new(Active {
                handler: HandlerState::Queued,
                pause,
                ending: None,
                waits: 0,
            })),
            touch_epoch: 0,
            expiry_timer: None,
            delete_timer: None,
        }
    }

    /// Creates a root task (a tool call that became a task). It starts
    /// queued; the driver calls [`Forest::start`] when its handler runs.
    ///
    /// # Errors
    ///
    /// None today; the `Result` leaves room for forest-wide limits.
    pub fn create_root(&mut self, now: Timestamp, opts: RootOptions) -> Result<TaskId, TransitionError> {
        self.begin(now);
        let id = self.fresh_id();
        let rec = Self::new_record(
            id,
            None,
            self.now,
            opts.ttl_ms,
            opts.poll_interval_ms,
            false,
            PauseState::Unpaused,
        );
        self.tasks.insert(id, Box::new(rec));
        self.emit(Effect::Created { id, parent: None });
        self.rec_mut(id);
        self.sync_expiry_timer(id);
        self.end();
        Ok(id)
    }

    /// Creates a subtask under `parent`, appended to its `childTaskIds`.
    ///
    /// The child's TTL is clamped to the parent's expiry (I8); a child of a
    /// paused or pause-pending parent starts paused with it.
    ///
    /// # Errors
    ///
    /// `UnknownTask`; `Terminal` or `WindingDown` for a parent that cannot
    /// take children (I5); `NotStarted`/`HandlerFinished` when the parent's
    /// handler is not running (only a running handler spawns subtasks);
    /// `LimitExceeded` for depth or fan-out.
    pub fn create_child(
        &mut self,
        now: Timestamp,
        parent: TaskId,
        opts: ChildOptions,
    ) -> Result<TaskId, TransitionError> {
        let (prec, pact) = self.get_active(parent)?;
        if pact.ending.is_some() {
            return Err(TransitionError::WindingDown(parent));
        }
        match pact.handler {
            HandlerState::Queued => return Err(TransitionError::NotStarted(parent)),
            HandlerState::Exited(_) => return Err(TransitionError::HandlerFinished(parent)),
            HandlerState::Running => {}
        }
        let limits = self.config.limits;
        if prec.depth + 1 > limits.max_depth {
            return Err(TransitionError::LimitExceeded {
                id: parent,
                limit: Limit::Depth {
                    max: limits.max_depth,
                },
            });
        }
        if prec.children.len() >= limits.max_children as usize {
            return Err(TransitionError::LimitExceeded {
                id: parent,
                limit: Limit::Children {
                    max: limits.max_children,
                },
            });
        }
        self.begin(now);
        let now = self.now;
        let prec = &self.tasks[&parent];
        let pause = match prec.active().map(|a| &a.pause) {
            Some(PauseState::Pending { via } | PauseState::Paused { via, .. }) => PauseState::Paused {
                via: *via,
                prior: TaskStatus::Working,
                reason: None,
            },
            _ => PauseState::Unpaused,
        };
        // I8: never expire after the parent.
        let requested = opts.ttl_ms.map(|ttl| now.saturating_add(ttl));
        let expires = match (requested, prec.expires_at()) {
            (Some(r), Some(p)) => Some(r.min(p)),
            (r, p) => r.or(p),
        };
        let ttl_ms = expires.map(|e| e.millis_since(now));
        let poll = opts.poll_interval_ms.or(prec.poll_interval_ms);
        let id = self.fresh_id();
        let rec = Self::new_record(id, Some(prec), now, ttl_ms, poll, opts.fail_fast, pause);
        self.tasks.insert(id, Box::new(rec));
        let p = self.rec_mut(parent);
        p.children.push(id);
        p.live_children += 1;
        self.emit(Effect::Created {
            id,
            parent: Some(parent),
        });
        self.rec_mut(id);
        self.sync_expiry_timer(id);
        self.end();
        Ok(id)
    }

    fn fresh_id(&self) -> TaskId {
        loop {
            let id = TaskId::random();
            if !self.tasks.contains_key(&id) {
                return id;
            }
        }
    }
}
