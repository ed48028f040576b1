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
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use super::config::ForestConfig;
use super::effect::Effect;
use super::error::{Limit, TransitionError};
use super::record::{Active, Child, HandlerState, PauseState, Phase, TaskRecord};
use super::table::{Slot, TaskTable};
use super::timeline::Timeline;
use crate::model::{ClientView, DetailedTask, RootOptions, TaskId, TaskStatus, Timestamp};

/// A timer in the ordered deadline structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// The task's TTL elapses: fail it if it is not terminal. Ordered by
    /// depth first, so at equal deadlines ancestors fire before descendants
    /// (a parent's own expiry wins over a fail-fast child expiring with it),
    /// then in creation order.
    Expire(u32, Slot),
    /// Delete the tree rooted here.
    Delete(Slot),
}

impl Timer {
    /// The task the timer is for.
    pub(crate) fn slot(self) -> Slot {
        let (Timer::Expire(_, slot) | Timer::Delete(slot)) = self;
        slot
    }

    /// The deadline of this kind of timer armed on `rec`, if any.
    fn armed_on(self, rec: &TaskRecord) -> Option<Timestamp> {
        match self {
            Timer::Expire(..) => rec.expiry_timer(),
            Timer::Delete(_) => rec.delete_timer(),
        }
    }

    /// Records `at` as this kind of timer's deadline on `rec`.
    fn arm_on(self, rec: &mut TaskRecord, at: Option<Timestamp>) {
        match self {
            Timer::Expire(..) => rec.set_expiry_timer(at),
            Timer::Delete(_) => rec.set_delete_timer(at),
        }
    }
}

/// A [`Timer`] packed in 8 bytes, ordered as the timer is, so a heap entry
/// with its deadline is 16 bytes, not 24 (a live one-task tree holds one):
/// the top bit is the variant (`Expire` first), then an expiry's depth (31
/// bits), then the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TimerKey(u64);

impl TimerKey {
    const DELETE: u64 = 1 << 63;
    /// The largest depth a key holds as is. Deeper tasks (a tree of more
    /// than two billion levels, which no memory holds) would share it and
    /// keep their creation order among themselves.
    const MAX_DEPTH: u32 = (1 << 31) - 1;
}

impl From<Timer> for TimerKey {
    fn from(timer: Timer) -> TimerKey {
        match timer {
            Timer::Expire(depth, slot) => {
                debug_assert!(depth <= TimerKey::MAX_DEPTH);
                TimerKey((u64::from(depth.min(TimerKey::MAX_DEPTH)) << 32) | u64::from(slot.0))
            }
            Timer::Delete(slot) => TimerKey(TimerKey::DELETE | u64::from(slot.0)),
        }
    }
}

impl From<TimerKey> for Timer {
    fn from(key: TimerKey) -> Timer {
        let slot = Slot(key.0 as u32);
        if key.0 & TimerKey::DELETE != 0 {
            Timer::Delete(slot)
        } else {
            Timer::Expire((key.0 >> 32) as u32, slot)
        }
    }
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
    /// Shared by the forests of one runtime (one pointer per tree).
    pub(crate) config: Arc<ForestConfig>,
    /// Records in creation order, found by id through an index (none for
    /// small trees).
    pub(crate) tasks: TaskTable,
    /// Ordered deadlines, min first. Entries whose task no longer has that
    /// timer armed are stale and skipped (lazy deletion): re-arming is O(log n)
    /// and a one-task tree holds a four-slot vector, not a B-tree node.
    pub(crate) timers: BinaryHeap<Reverse<(Timestamp, TimerKey)>>,
    /// How many entries of `timers` are stale (an upper bound). When they
    /// are the majority, the heap is rebuilt without them in O(n) instead of
    /// popping each one in O(log n) as it reaches the head: cancelling a
    /// 100,000-task tree would otherwise pop 100,000 stale expiry entries in
    /// its last settle.
    pub(crate) stale_timers: usize,
    effects: VecDeque<Effect>,
    pub(crate) now: Timestamp,
    epoch: u64,
    /// The first task the current command modified, inline (most
    /// commands modify one: a lone root's forest then holds no buffer);
    /// the others in `touched`, boxed (8 bytes here, not 24) and kept for
    /// the next command once a command touched more than one.
    touched_first: Option<(Slot, TaskStatus)>,
    #[allow(
        clippy::box_collection,
        reason = "8 bytes in every tree's forest, not 24: the vector is needed only by commands that touch more than one task"
    )]
    touched: Option<Box<Vec<(Slot, TaskStatus)>>>,
}

impl Default for Forest {
    fn default() -> Self {
        Forest::new(ForestConfig::default())
    }
}

impl Forest {
    /// An empty forest.
    pub fn new(config: impl Into<Arc<ForestConfig>>) -> Self {
        Forest {
            config: config.into(),
            tasks: TaskTable::default(),
            timers: BinaryHeap::new(),
            stale_timers: 0,
            effects: VecDeque::new(),
            now: Timestamp::EPOCH,
            epoch: 0,
            touched_first: None,
            touched: None,
        }
    }

    // ----- getters -------------------------------------------------------

    /// The configuration.
    pub fn config(&self) -> &ForestConfig {
        &self.config
    }

    /// The task with this id, in O(1).
    pub fn task(&self, id: TaskId) -> Option<&TaskRecord> {
        self.tasks.get(&id)
    }

    /// The slot of the task with this id, in O(1).
    pub fn slot_of(&self, id: TaskId) -> Option<Slot> {
        self.tasks.slot_of(&id)
    }

    /// The task in `slot`, in O(1) without hashing (`None` once its tree
    /// was deleted).
    pub fn task_at(&self, slot: Slot) -> Option<&TaskRecord> {
        self.tasks.at(slot)
    }

    /// Records that the handler of the task at `slot` starts at `now` (for
    /// the runtime's handler run time metric; no lifecycle change).
    pub(crate) fn handler_started(&mut self, slot: Slot, now: Timestamp) {
        if let Some(rec) = self.tasks.at_mut(slot) {
            rec.set_handler_started(now);
        }
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
        self.tasks.values().map(|r| r.id)
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
        self.tasks
            .at(timer.slot())
            .is_some_and(|r| timer.armed_on(r) == Some(at))
    }

    fn prune_stale_timers(&mut self) {
        if self.stale_timers > 64 && self.stale_timers * 2 > self.timers.len() {
            let mut timers = std::mem::take(&mut self.timers);
            timers.retain(|&Reverse((at, key))| self.timer_is_live(at, key.into()));
            self.timers = timers;
            self.stale_timers = 0;
        }
        while let Some(&Reverse((at, key))) = self.timers.peek() {
            if self.timer_is_live(at, key.into()) {
                break;
            }
            self.timers.pop();
            self.stale_timers = self.stale_timers.saturating_sub(1);
        }
        if self.timers.is_empty() && self.timers.capacity() > 0 {
            self.timers = BinaryHeap::new();
        }
    }

    /// The task as a client sees it, in O(1) plus the size of its payload
    /// (payloads are reference-counted; children and input keys are copied).
    pub fn snapshot(&self, id: TaskId, view: ClientView) -> Option<DetailedTask> {
        let rec = self.tasks.get(&id)?;
        Some(rec.detailed(rec.child_ids(), view))
    }

    /// Every task of the tree in result order (I12): post-order by
    /// `childTaskIds`, each child's subtree in order, then the parent.
    pub fn result_order(&self, root: TaskId) -> Vec<TaskId> {
        let Some(slot) = self.tasks.slot_of(&root) else {
            return Vec::new();
        };
        self.post_order(slot, |_| true)
            .into_iter()
            .map(|s| self.tasks[s].id)
            .collect()
    }

    /// Non-terminal tasks of the subtree of `slot` (including it), children
    /// before parents. Terminal subtrees are skipped whole: by I4 they hold
    /// no live task.
    pub(crate) fn live_subtree_post_order(&self, slot: Slot) -> Vec<Slot> {
        self.post_order(slot, |rec| !rec.is_terminal())
    }

    /// Post-order walk from `top` by `childTaskIds`, descending only into
    /// tasks that exist and satisfy `enter` (iterative: depth is bounded by
    /// the configured limit, but the stack is the heap's). Follows slots:
    /// no id is hashed.
    pub(crate) fn post_order(&self, top: Slot, enter: impl Fn(&TaskRecord) -> bool) -> Vec<Slot> {
        let mut out = Vec::new();
        let mut stack: Vec<(Slot, usize)> = vec![(top, 0)];
        while let Some((slot, i)) = stack.last().copied() {
            let Some(rec) = self.tasks.at(slot).filter(|r| enter(r)) else {
                stack.pop();
                continue;
            };
            if let Some(child) = rec.child_list().get(i) {
                if let Some(t) = stack.last_mut() {
                    t.1 += 1;
                }
                stack.push((child.slot, 0));
            } else {
                stack.pop();
                out.push(slot);
            }
        }
        out
    }

    // ----- command plumbing ---------------------------------------------

    /// The number of commands run so far: the stamp of the latest one.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Starts a command at `now` (time never goes backwards inside the core).
    pub(crate) fn begin(&mut self, now: Timestamp) {
        if now > self.now {
            self.now = now;
        }
        self.epoch += 1;
        debug_assert!(self.touched_first.is_none() && self.touched.as_ref().is_none_or(|t| t.is_empty()));
    }

    /// Ends a command: stamps `lastUpdatedAt` and emits `Changed` once for
    /// every task the command modified.
    pub(crate) fn end(&mut self) {
        let now = self.now;
        let first = self.touched_first.take();
        let mut touched = self.touched.take();
        let rest: &[(Slot, TaskStatus)] = touched.as_deref().map_or(&[], |t| t.as_slice());
        // Terminal tasks are reported deepest first, so a task's terminal
        // `Changed` always follows its children's (I6).
        let mut terminal: Vec<(u32, Slot, TaskId, TaskStatus, TaskStatus)> = Vec::new();
        self.effects.reserve(rest.len() + 1);
        for &(slot, from) in first.iter().chain(rest) {
            let Some(rec) = self.tasks.at_mut(slot) else {
                continue;
            };
            rec.last_updated_at = now;
            // The timeline, at the time just stamped: no clock read.
            rec.note_stage(now);
            let to = rec.status();
            let id = rec.id;
            if to.is_terminal() {
                terminal.push((rec.depth, slot, id, from, to));
                continue;
            }
            self.effects.push_back(Effect::Changed { id, slot, from, to });
        }
        terminal.sort_by_key(|t| std::cmp::Reverse(t.0));
        for (_, slot, id, from, to) in terminal {
            self.effects.push_back(Effect::Changed { id, slot, from, to });
        }
        // Keep the buffer for the next command.
        if let Some(t) = touched.as_mut() {
            t.clear();
        }
        self.touched = touched;
        self.prune_stale_timers();
    }

    /// Mutable access that records the task as modified by this command.
    ///
    /// # Panics
    ///
    /// If the task does not exist: callers validate first.
    pub(crate) fn rec_mut(&mut self, id: TaskId) -> &mut TaskRecord {
        let slot = self
            .tasks
            .slot_of(&id)
            .expect("command validated that the task exists");
        self.rec_mut_at(slot)
    }

    /// [`Forest::rec_mut`] by slot.
    pub(crate) fn rec_mut_at(&mut self, slot: Slot) -> &mut TaskRecord {
        let epoch = self.epoch;
        let rec = self
            .tasks
            .at_mut(slot)
            .expect("command validated that the task exists");
        if rec.touch_epoch != epoch {
            rec.touch_epoch = epoch;
            let entry = (slot, rec.status());
            if self.touched_first.is_none() {
                self.touched_first = Some(entry);
            } else {
                self.touched.get_or_insert_with(Box::default).push(entry);
            }
        }
        rec
    }

    pub(crate) fn emit(&mut self, effect: Effect) {
        self.effects.push_back(effect);
    }

    pub(crate) fn get(&self, id: TaskId) -> Result<&TaskRecord, TransitionError> {
        self.tasks.get(&id).ok_or(TransitionError::UnknownTask(id))
    }

    pub(crate) fn slot(&self, id: TaskId) -> Result<Slot, TransitionError> {
        self.tasks.slot_of(&id).ok_or(TransitionError::UnknownTask(id))
    }

    pub(crate) fn get_active(&self, id: TaskId) -> Result<(&TaskRecord, &Active), TransitionError> {
        self.active_slot(id).map(|(_, rec, a)| (rec, a))
    }

    /// [`Forest::get_active`] with the task's slot, found once.
    pub(crate) fn active_slot(&self, id: TaskId) -> Result<(Slot, &TaskRecord, &Active), TransitionError> {
        let slot = self.slot(id)?;
        let rec = &self.tasks[slot];
        match &rec.phase {
            Phase::Active(a) => Ok((slot, rec, a)),
            Phase::Terminal(t) => Err(TransitionError::Terminal {
                id,
                status: t.status(),
            }),
        }
    }

    // ----- timers --------------------------------------------------------

    fn arm(&mut self, at: Timestamp, timer: Timer) {
        let earliest = self.next_deadline();
        if self.timers.capacity() == 0 {
            // A live one-task tree arms one timer (its expiry): one
            // entry's worth, not the four a first push reserves.
            self.timers.reserve_exact(1);
        }
        self.timers.push(Reverse((at, timer.into())));
        if earliest.is_none_or(|e| at < e) {
            self.effects.push_back(Effect::ArmTimer { at });
        }
    }

    /// Re-arms the expiry timer of the task in `slot` to match its TTL (none once terminal).
    pub(crate) fn sync_expiry_timer(&mut self, slot: Slot) {
        let Some(rec) = self.tasks.at(slot) else { return };
        let want = if rec.is_terminal() { None } else { rec.expires_at() };
        self.rearm(Timer::Expire(rec.depth, slot), want);
    }

    /// Re-arms the deletion timer of a root: `expiry + grace`, once the tree is terminal.
    pub(crate) fn sync_delete_timer(&mut self, root: Slot) {
        let Some(rec) = self.tasks.at(root) else { return };
        let want = match (rec.is_terminal(), rec.expires_at()) {
            (true, Some(exp)) => Some(exp.saturating_add(self.config.deletion_grace_ms).max(self.now)),
            _ => None,
        };
        self.rearm(Timer::Delete(root), want);
    }

    /// Records `want` as the task's armed deadline for `timer` and pushes a
    /// heap entry when it changed; the old entry becomes stale (lazy deletion).
    fn rearm(&mut self, timer: Timer, want: Option<Timestamp>) {
        let Some(rec) = self.tasks.at_mut(timer.slot()) else {
            return;
        };
        let old = timer.armed_on(rec);
        if old == want {
            return;
        }
        timer.arm_on(rec, want);
        if old.is_some() {
            // The old entry stays in the heap, stale.
            self.stale_timers += 1;
        }
        if let Some(at) = want {
            self.arm(at, timer);
        }
    }

    // ----- creation ------------------------------------------------------

    #[allow(clippy::too_many_arguments)]
    fn new_record(
        id: TaskId,
        slot: Slot,
        parent: Option<(&TaskRecord, Slot)>,
        now: Timestamp,
        ttl_ms: Option<u64>,
        poll_interval_ms: Option<u64>,
        fail_fast: bool,
        pause: PauseState,
    ) -> TaskRecord {
        let mut rec = TaskRecord {
            id,
            parent_id: parent.map_or(id, |p| p.0.id),
            parent_slot: parent.map_or(slot, |p| p.1),
            root: parent.map_or(id, |p| p.0.root),
            depth: parent.map_or(0, |p| p.0.depth + 1),
            position: parent.map_or(0, |p| p.0.child_list().len() as u32),
            rare: None,
            live_children: 0,
            created_at: now,
            last_updated_at: now,
            present: super::record::Present::NONE,
            ttl_ms: 0,
            poll_interval_ms: 0,
            expiry_timer: Timestamp::EPOCH,
            delete_timer: Timestamp::EPOCH,
            fail_fast,
            started_after_ms: 0,
            inputs: None,
            phase: Phase::Active({
                let mut active = Active::new(HandlerState::Queued);
                active.set_pause(pause);
                active
            }),
            timeline: Timeline::default(),
            touch_epoch: 0,
        };
        rec.set_ttl_ms(ttl_ms);
        rec.set_poll_interval_ms(poll_interval_ms);
        rec
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
        let slot = self.tasks.next_slot();
        let rec = Self::new_record(
            id,
            slot,
            None,
            self.now,
            opts.ttl_ms,
            opts.poll_interval_ms,
            false,
            PauseState::Unpaused,
        );
        self.tasks.insert(rec);
        self.emit(Effect::Created {
            id,
            slot,
            parent: None,
        });
        self.rec_mut_at(slot);
        self.sync_expiry_timer(slot);
        self.end();
        Ok(id)
    }

    /// Checks the `after` dependencies of a subtask about to be created
    /// under `parent`: each must be an existing child of `parent`, so an
    /// earlier sibling. Such edges always point backwards in creation
    /// order, so they cannot form a cycle. O(dependencies).
    ///
    /// # Errors
    ///
    /// The first dependency that is not a child of `parent`.
    pub fn check_after(&self, parent: TaskId, after: &[TaskId]) -> Result<(), TaskId> {
        match after
            .iter()
            .find(|dep| self.task(**dep).and_then(TaskRecord::parent) != Some(parent))
        {
            Some(dep) => Err(*dep),
            None => Ok(()),
        }
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
        self.create_child_marked(now, parent, opts, None)
    }

    /// [`Forest::create_child`] in a durable tree: the child carries `mark`
    /// (its place in the parent's journal) from its first write.
    ///
    /// # Errors
    ///
    /// As [`Forest::create_child`].
    pub fn create_child_marked(
        &mut self,
        now: Timestamp,
        parent: TaskId,
        opts: ChildOptions,
        mark: Option<super::journal::SpawnMark>,
    ) -> Result<TaskId, TransitionError> {
        let (pslot, prec, pact) = self.active_slot(parent)?;
        if pact.ending().is_some() {
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
        if prec.child_list().len() >= limits.max_children as usize {
            return Err(TransitionError::LimitExceeded {
                id: parent,
                limit: Limit::Children {
                    max: limits.max_children,
                },
            });
        }
        self.begin(now);
        let now = self.now;
        let prec = &self.tasks[pslot];
        let pause = match prec.active().map(|a| a.pause()) {
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
        let poll = opts.poll_interval_ms.or(prec.poll_interval_ms());
        let id = self.fresh_id();
        let slot = self.tasks.next_slot();
        let rec = Self::new_record(
            id,
            slot,
            Some((prec, pslot)),
            now,
            ttl_ms,
            poll,
            opts.fail_fast,
            pause,
        );
        self.tasks.insert(rec);
        if let Some(mark) = mark {
            self.mark_spawned(id, mark);
        }
        let p = self.rec_mut_at(pslot);
        p.rare_mut().children.push(Child { id, slot });
        p.live_children += 1;
        self.emit(Effect::Created {
            id,
            slot,
            parent: Some(parent),
        });
        self.rec_mut_at(slot);
        self.sync_expiry_timer(slot);
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

#[cfg(test)]
mod timer_key_tests {
    use super::{Slot, Timer, TimerKey};

    #[test]
    fn a_timer_key_orders_as_its_timer_and_reads_back() {
        let mut timers = Vec::new();
        for slot in [0, 1, 2, 77, u32::MAX - 1, u32::MAX] {
            timers.push(Timer::Delete(Slot(slot)));
            for depth in [0, 1, 2, 16, 1000, TimerKey::MAX_DEPTH] {
                timers.push(Timer::Expire(depth, Slot(slot)));
            }
        }
        for a in &timers {
            assert_eq!(Timer::from(TimerKey::from(*a)), *a);
            for b in &timers {
                assert_eq!(
                    TimerKey::from(*a).cmp(&TimerKey::from(*b)),
                    a.cmp(b),
                    "{a:?} against {b:?}"
                );
            }
        }
    }
}
