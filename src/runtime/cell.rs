//! A live task's cell: what waits on the task, its cancel flag, and whether
//! its handler holds a scheduler slot ([`SlotState`]).
//!
//! The slot state is a small state machine behind the cell's own mutex.
//! Every transition returns what the caller must do next (give a slot back
//! to the scheduler, take one over the limit, hand a grant back) as a
//! `#[must_use]` value, as tokio's task `state.rs` does: the driver
//! (`driver/slots.rs`) acts on it after the mutex is released. Nothing here
//! knows the scheduler or the runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// A live task's shared runtime state: its wake-up channel (for everything
/// that waits on the task: its handler, a parent awaiting it, subscribers),
/// its cancel flag, and, while its handler runs, whether that handler holds
/// a scheduler slot. One allocation per task that is waited on or running.
pub(crate) struct TaskCell {
    /// Woken on every change of the task (status, steer, input, resume, cancel).
    pub(crate) notify: Notify,
    /// Set under the tree lock once the task winds down (a cancel or a
    /// failure was decided) or ends, before its waiters are woken: the
    /// handler's `cancelled()` reads it without taking the tree lock.
    ending: AtomicBool,
    /// The forest epoch of the last command that queued this cell for a
    /// wake-up, so one command wakes it once however many effects it had.
    stamp: AtomicU64,
    /// The handler's task, woken when the cancel flag is set so its grace
    /// timer starts even if the handler itself waits on something else.
    pub(crate) grace: AtomicWaker,
    /// Whether the handler holds a scheduler slot: a [`SlotState`],
    /// packed (read and changed with [`TaskCell::slot`]).
    slot: Mutex<u32>,
    /// The task's span, from its handler's start (`Inner::start_job`): the
    /// parent of its subtasks' spans, and where its final status is
    /// recorded as it turns terminal. Kept only when a subscriber enabled
    /// it, in a box (8 bytes here; a `OnceLock<Span>` is 48, which every
    /// untraced task would carry). Read it with [`TaskCell::span`].
    span: once_cell::race::OnceBox<tracing::Span>,
    /// The task's parent, the task's own id for a root (a plain id is 8
    /// bytes smaller than an `Option`, as in `TaskRecord`): kept here, once
    /// per task, rather than in every copy of its handler's context. Read
    /// it with [`TaskCell::parent_of`].
    parent: crate::model::TaskId,
    /// The task's id and its slot in its forest (a handler's context reads
    /// them here: it keeps only pointers).
    pub(crate) id: crate::model::TaskId,
    pub(crate) place: crate::core::Slot,
}

impl TaskCell {
    /// A cell for a live task (`parent`: its parent, the task's own id for
    /// a root); `ending` when it already winds down.
    pub(crate) fn new(
        ending: bool,
        parent: crate::model::TaskId,
        id: crate::model::TaskId,
        place: crate::core::Slot,
    ) -> Arc<TaskCell> {
        Arc::new(TaskCell {
            notify: Notify::new(),
            ending: AtomicBool::new(ending),
            stamp: AtomicU64::new(u64::MAX),
            grace: AtomicWaker::new(),
            slot: Mutex::new(SlotState::Unslotted.pack()),
            span: once_cell::race::OnceBox::new(),
            parent,
            id,
            place,
        })
    }

    /// The task's span once its handler started, `None` before, or when
    /// no subscriber enabled it (the span was disabled: entering it or
    /// recording on it would do nothing).
    pub(crate) fn span(&self) -> Option<&tracing::Span> {
        self.span.get()
    }

    /// The span its subtasks' spans are children of: the task's own, or a
    /// disabled one when no subscriber enabled it (a disabled parent
    /// makes a span a root, as when it was kept). A handler's context
    /// only asks once the handler started, when the span was set.
    pub(crate) fn parent_span(&self) -> &tracing::Span {
        static DISABLED: std::sync::LazyLock<tracing::Span> = std::sync::LazyLock::new(tracing::Span::none);
        self.span().unwrap_or(&DISABLED)
    }

    /// Keeps the task's span (its handler starts), unless it is disabled.
    pub(crate) fn set_span(&self, span: tracing::Span) {
        if !span.is_disabled() {
            let _ = self.span.set(Box::new(span));
        }
    }

    /// The parent of `id`, this cell's task (`None` for a root).
    pub(crate) fn parent_of(&self, id: crate::model::TaskId) -> Option<crate::model::TaskId> {
        (self.parent != id).then_some(self.parent)
    }

    /// Whether the task winds down or ended.
    pub(crate) fn is_ending(&self) -> bool {
        self.ending.load(Ordering::Acquire)
    }

    /// The task winds down or ended (under the tree lock, before its
    /// waiters are woken).
    pub(crate) fn set_ending(&self) {
        self.ending.store(true, Ordering::Release);
    }

    /// Notes a wake-up queued by the command of forest epoch `stamp`:
    /// `false` when that command queued one already.
    #[must_use]
    pub(crate) fn first_wake_of(&self, stamp: u64) -> bool {
        self.stamp.swap(stamp, Ordering::Relaxed) != stamp
    }

    /// Runs one transition of the slot state under the cell's mutex.
    pub(crate) fn slot<R>(&self, f: impl FnOnce(&mut SlotState) -> R) -> R {
        let mut packed = self.slot.lock();
        let mut state = SlotState::unpack(*packed);
        let out = f(&mut state);
        *packed = state.pack();
        out
    }
}

impl SlotState {
    /// The state in 4 bytes, so the cell's mutex is 8 (with the enum's
    /// 8, 12: the cell would round up to 136 bytes, not 120). 0 is
    /// `Unslotted`, 1 `Holding`, `2 + ((waits - 1) << 1 | slot)` `Parked`.
    fn pack(self) -> u32 {
        match self {
            SlotState::Unslotted => 0,
            SlotState::Holding => 1,
            SlotState::Parked { waits, slot } => {
                // Nested waits are nested futures: never near 2^31.
                debug_assert!((1..1 << 31).contains(&waits));
                let waits = waits.clamp(1, (1 << 31) - 1);
                2 + (((waits - 1) << 1) | u32::from(slot))
            }
        }
    }

    fn unpack(packed: u32) -> SlotState {
        match packed {
            0 => SlotState::Unslotted,
            1 => SlotState::Holding,
            p => SlotState::Parked {
                waits: ((p - 2) >> 1) + 1,
                slot: (p - 2) & 1 == 1,
            },
        }
    }
}

/// Whether a handler holds one of the scheduler's slots, and whether it is
/// inside parked waits (paused, awaiting input, a subtask or something
/// outside the runtime), during which it gives its slot back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// Holds no slot and is in no parked wait: it takes a slot before its
    /// body is polled again.
    Unslotted,
    /// Holds a slot and runs.
    Holding,
    /// Inside `waits` (at least one) parked waits. `slot`: a slot was taken
    /// back on the way out of the last one, before it ended.
    Parked {
        /// Parked waits the handler is inside (nested when a wait runs
        /// inside another, as `select!` may do).
        waits: u32,
        /// Whether it holds a slot meanwhile.
        slot: bool,
    },
}

/// What entering a parked wait asks of the caller.
#[must_use = "a slot given up must be released to the scheduler"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Park {
    /// The handler gave up its slot: release it to the scheduler.
    ReleaseSlot,
    /// Nothing to do (it held none, or it is already parked).
    Nothing,
}

/// What leaving a parked wait asks of the caller.
#[must_use = "a handler leaving its last wait without a slot must take one"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unpark {
    /// The handler left its last wait without a slot (the wait was dropped
    /// midway): it runs on at once, so count a slot for it over the limit.
    ForceSlot,
    /// Nothing to do.
    Nothing,
}

/// What a slot granted by the scheduler became.
#[must_use = "a surplus grant must be given back to the scheduler"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// The handler holds it now.
    Taken,
    /// The handler already held one: give this one back.
    Surplus,
}

impl SlotState {
    /// The handler starts in the slot its job was given.
    pub(crate) fn start(&mut self) {
        debug_assert_eq!(*self, SlotState::Unslotted, "a handler starts once");
        *self = SlotState::Holding;
    }

    /// Enters a parked wait: the first one gives the slot back.
    pub(crate) fn park(&mut self) -> Park {
        match *self {
            SlotState::Holding => {
                *self = SlotState::Parked {
                    waits: 1,
                    slot: false,
                };
                Park::ReleaseSlot
            }
            SlotState::Unslotted => {
                *self = SlotState::Parked {
                    waits: 1,
                    slot: false,
                };
                Park::Nothing
            }
            SlotState::Parked { waits, slot } => {
                *self = SlotState::Parked {
                    waits: waits + 1,
                    slot,
                };
                Park::Nothing
            }
        }
    }

    /// Whether the last parked wait is ending without a slot: it must take
    /// one before the handler runs on (it stays parked meanwhile).
    #[must_use]
    pub(crate) fn leaving_without_slot(&self) -> bool {
        *self
            == SlotState::Parked {
                waits: 1,
                slot: false,
            }
    }

    /// Whether the handler may run only after taking a slot: it holds none
    /// and is not inside a parked wait (which takes one on the way out).
    #[must_use]
    pub(crate) fn needs_slot(&self) -> bool {
        *self == SlotState::Unslotted
    }

    /// The scheduler granted a slot (marked held as it is granted, so a
    /// slot granted to a handler dropped before it runs again is still
    /// released on exit).
    pub(crate) fn grant(&mut self) -> Grant {
        match *self {
            SlotState::Unslotted => {
                *self = SlotState::Holding;
                Grant::Taken
            }
            SlotState::Parked { waits, slot: false } => {
                *self = SlotState::Parked { waits, slot: true };
                Grant::Taken
            }
            SlotState::Holding | SlotState::Parked { slot: true, .. } => Grant::Surplus,
        }
    }

    /// Takes back a grant whose receiver was gone: whether a slot was held
    /// (which the caller then gives back).
    #[must_use]
    pub(crate) fn ungrant(&mut self) -> bool {
        match *self {
            SlotState::Holding => {
                *self = SlotState::Unslotted;
                true
            }
            SlotState::Parked { waits, slot: true } => {
                *self = SlotState::Parked { waits, slot: false };
                true
            }
            _ => false,
        }
    }

    /// Leaves a parked wait, also one dropped midway.
    pub(crate) fn unpark(&mut self) -> Unpark {
        match *self {
            SlotState::Parked { waits: 1, slot } => {
                *self = SlotState::Holding;
                if slot { Unpark::Nothing } else { Unpark::ForceSlot }
            }
            SlotState::Parked { waits, slot } => {
                *self = SlotState::Parked {
                    waits: waits - 1,
                    slot,
                };
                Unpark::Nothing
            }
            SlotState::Holding | SlotState::Unslotted => Unpark::Nothing,
        }
    }

    /// The handler exited: whether it held a slot (which the caller gives
    /// back once the task has settled).
    #[must_use]
    pub(crate) fn exit(&mut self) -> bool {
        let held = matches!(self, SlotState::Holding | SlotState::Parked { slot: true, .. });
        *self = SlotState::Unslotted;
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_state_packs_and_unpacks_to_itself() {
        let mut states = vec![SlotState::Unslotted, SlotState::Holding];
        for waits in [1, 2, 3, 1000, (1 << 31) - 1] {
            for slot in [false, true] {
                states.push(SlotState::Parked { waits, slot });
            }
        }
        let mut packed: Vec<u32> = states.iter().map(|s| s.pack()).collect();
        for (s, &p) in states.iter().zip(&packed) {
            assert_eq!(SlotState::unpack(p), *s, "{s:?} as {p}");
        }
        packed.sort_unstable();
        packed.dedup();
        assert_eq!(packed.len(), states.len(), "two states share a packing");
    }

    #[test]
    fn a_parked_wait_gives_the_slot_back_and_takes_one_on_the_way_out() {
        let mut s = SlotState::Unslotted;
        s.start();
        assert_eq!(s.park(), Park::ReleaseSlot);
        assert!(s.leaving_without_slot());
        assert_eq!(s.grant(), Grant::Taken);
        assert!(!s.leaving_without_slot());
        assert_eq!(s.unpark(), Unpark::Nothing);
        assert_eq!(s, SlotState::Holding);
        assert!(s.exit());
        assert_eq!(s, SlotState::Unslotted);
    }

    #[test]
    fn a_wait_dropped_midway_forces_a_slot_and_a_nested_one_does_not() {
        let mut s = SlotState::Holding;
        assert_eq!(s.park(), Park::ReleaseSlot);
        assert_eq!(s.park(), Park::Nothing);
        assert!(!s.leaving_without_slot());
        assert_eq!(s.unpark(), Unpark::Nothing);
        assert_eq!(s.unpark(), Unpark::ForceSlot);
        assert_eq!(s, SlotState::Holding);
    }

    #[test]
    fn a_second_grant_is_surplus_and_an_ungrant_says_what_was_held() {
        let mut s = SlotState::Unslotted;
        assert!(s.needs_slot());
        assert_eq!(s.grant(), Grant::Taken);
        assert_eq!(s.grant(), Grant::Surplus);
        assert!(s.ungrant());
        assert!(!s.ungrant());
        assert!(!s.exit());
    }
}
