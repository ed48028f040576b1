//! A whole-forest check of the structural invariants, for tests.
//!
//! This walks every task: it is for property tests and debugging, never for
//! a hot path. Temporal invariants (append-only children, absorbing terminal
//! states, steer order, ordered results) need history and are checked by the
//! property tests across steps.

use std::collections::HashSet;
use std::fmt;

use super::forest::{Forest, Timer};
use super::record::{Ending, HandlerState, PauseState, Phase};
use crate::model::TaskId;

/// A broken invariant: which one, on which task, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvariantViolation {
    /// The invariant's name in `docs/lifecycle.md` (`"I4"`, or `"timers"`...).
    pub invariant: &'static str,
    /// The task it was found on.
    pub task: TaskId,
    /// What is wrong.
    pub detail: String,
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated on {}: {}", self.invariant, self.task, self.detail)
    }
}

impl std::error::Error for InvariantViolation {}

impl Forest {
    /// Checks every structural invariant over the whole forest.
    ///
    /// # Errors
    ///
    /// The first violation found.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |invariant, task, detail: String| {
            Err(InvariantViolation {
                invariant,
                task,
                detail,
            })
        };
        for (slot, rec) in self.tasks.iter() {
            let id = rec.id;
            if self.tasks.slot_of(&id) != Some(slot) {
                return fail(
                    "index",
                    id,
                    format!("the index does not find it in its slot {slot:?}"),
                );
            }
            // I1 / I3: the parent resolves, is not the task, and lists it.
            match rec.parent() {
                Some(p) if p == id => return fail("I1", id, "task is its own parent".into()),
                Some(p) => {
                    let Some(prec) = self.tasks.get(&p) else {
                        return fail("I3", id, format!("parent {p} does not resolve"));
                    };
                    if self.tasks.slot_of(&p) != Some(rec.parent_slot) {
                        return fail("index", id, "parent slot does not name the parent".into());
                    }
                    if !prec.child_list().iter().any(|c| c.id == id && c.slot == slot) {
                        return fail("I3", id, format!("parent {p} does not list it as a child"));
                    }
                    if rec.depth != prec.depth + 1 || rec.root != prec.root {
                        return fail("I3", id, "depth or root disagrees with the parent's".into());
                    }
                    if rec.created_at < prec.created_at {
                        return fail("I3", id, "created before its parent".into());
                    }
                    // I8: never expires after the parent. A child created after its
                    // parent's deadline passed (before the timer fired) cannot
                    // expire before its own creation: it expires at creation.
                    if let Some(pexp) = prec.expires_at()
                        && rec.expires_at().is_none_or(|e| e > pexp.max(rec.created_at))
                    {
                        return fail(
                            "I8",
                            id,
                            format!("expires at {:?}, after its parent ({pexp:?})", rec.expires_at()),
                        );
                    }
                    // I6 (structural part): a cancelled/failing parent's live children wind down too.
                    if let (Some(pa), Some(a)) = (prec.active(), rec.active())
                        && matches!(pa.ending(), Some(Ending::Cancelling { .. }))
                        && a.ending().is_none()
                    {
                        return fail(
                            "I6",
                            id,
                            format!("parent {p} is cancelling but this child has no cancel"),
                        );
                    }
                    // I5: no live child under a terminal parent (follows from I4 below).
                }
                None => {
                    if rec.root != id || rec.depth != 0 {
                        return fail("I3", id, "root task with wrong root or depth".into());
                    }
                }
            }
            // I2: children are distinct, not the task, point back, in creation order.
            let mut seen = HashSet::new();
            let mut live = 0u32;
            let mut last_created = None;
            for child in rec.child_list() {
                let c = child.id;
                if self.tasks.slot_of(&c) != Some(child.slot) {
                    return fail("index", id, format!("child {c} is listed with a wrong slot"));
                }
                if c == id {
                    return fail("I2", id, "task lists itself as a child".into());
                }
                if !seen.insert(c) {
                    return fail("I2", id, format!("child {c} listed twice"));
                }
                let Some(crec) = self.tasks.get(&c) else {
                    return fail("I3", id, format!("child {c} does not resolve"));
                };
                if crec.parent() != Some(id) {
                    return fail("I3", id, format!("child {c} names another parent"));
                }
                if last_created.is_some_and(|l| crec.created_at < l) {
                    return fail("I2", id, "children are not in creation order".into());
                }
                last_created = Some(crec.created_at);
                if !crec.is_terminal() {
                    live += 1;
                }
            }
            if live != rec.live_children {
                return fail(
                    "count",
                    id,
                    format!(
                        "live_children is {} but {live} children are live",
                        rec.live_children
                    ),
                );
            }
            // I3: acyclic — walking up reaches a root within depth steps.
            let mut cur = rec.parent();
            let mut steps = 0;
            while let Some(p) = cur {
                steps += 1;
                if steps > rec.depth as usize || p == id {
                    return fail("I3", id, "parent chain has a cycle".into());
                }
                cur = self.tasks.get(&p).and_then(|r| r.parent());
            }
            // I9: outstanding keys were issued.
            for k in rec.inputs().outstanding.keys() {
                if !rec.inputs().used.contains(k) {
                    return fail("I9", id, format!("outstanding key {k:?} was never issued"));
                }
            }
            match &rec.phase {
                Phase::Terminal(_) => {
                    // I4: terminal only if every child is terminal.
                    if live != 0 {
                        return fail("I4", id, format!("terminal with {live} live children"));
                    }
                    // I10: nothing left to deliver after the end.
                    if !rec.queued_steers().is_empty() || rec.has_outstanding_inputs() {
                        return fail(
                            "I10",
                            id,
                            "terminal task still has queued steers or input requests".into(),
                        );
                    }
                    if rec.expiry_timer().is_some() {
                        return fail("timers", id, "terminal task has an expiry timer".into());
                    }
                }
                Phase::Active(a) => {
                    // A queued task has no live children, except one queued to run
                    // again after a stop (durable execution), whose live children
                    // all wait for its re-run to spawn them again.
                    if a.handler == HandlerState::Queued
                        && rec.live_children > 0
                        && rec.child_list().iter().any(|c| {
                            !self.tasks[c.slot].is_terminal()
                                && !super::journal::is_awaiting(&self.tasks[c.slot])
                        })
                    {
                        return fail(
                            "handler",
                            id,
                            "a task that is not running has live children (other than ones waiting for its \
                             re-run)"
                                .into(),
                        );
                    }
                    if rec.has_outstanding_inputs()
                        && (a.handler != HandlerState::Running || a.ending().is_some())
                    {
                        return fail(
                            "I9",
                            id,
                            "input requests outstanding without a running handler".into(),
                        );
                    }
                    if a.ending().is_some()
                        && (*a.pause() != PauseState::Unpaused || !rec.queued_steers().is_empty())
                    {
                        return fail(
                            "I6",
                            id,
                            "winding-down task is still paused or has steers queued".into(),
                        );
                    }
                    if matches!(a.handler, HandlerState::Exited(_)) && !rec.queued_steers().is_empty() {
                        return fail("I10", id, "finished handler still has steers queued".into());
                    }
                    match *a.pause() {
                        PauseState::Pending { via } | PauseState::Paused { via, .. } => {
                            if via != id && !self.is_ancestor(via, id) {
                                return fail(
                                    "pause",
                                    id,
                                    format!("paused via {via}, which is not an ancestor"),
                                );
                            }
                            if let PauseState::Pending { .. } = a.pause()
                                && (a.handler != HandlerState::Running
                                    || rec.has_outstanding_inputs()
                                    || a.waits > 0)
                            {
                                return fail(
                                    "pause",
                                    id,
                                    "pause pending although the handler is parked".into(),
                                );
                            }
                        }
                        PauseState::Unpaused => {}
                    }
                    // An expired task that is winding down (waiting for its handler
                    // or children) no longer has a timer: it fired.
                    let fired = rec.expiry_timer().is_none()
                        && a.ending().is_some()
                        && rec.expires_at().is_some_and(|e| e <= self.now);
                    if rec.expiry_timer() != rec.expires_at() && !fired {
                        return fail("timers", id, "expiry timer does not match the TTL".into());
                    }
                }
            }
            if let Some(at) = rec.expiry_timer()
                && !self
                    .timers
                    .iter()
                    .any(|e| e.0 == (at, Timer::Expire(rec.depth, slot).into()))
            {
                return fail("timers", id, "expiry timer not in the deadline structure".into());
            }
            if let Some(at) = rec.delete_timer()
                && !self
                    .timers
                    .iter()
                    .any(|e| e.0 == (at, Timer::Delete(slot).into()))
            {
                return fail(
                    "timers",
                    id,
                    "deletion timer not in the deadline structure".into(),
                );
            }
        }
        // Stale entries are allowed (lazy deletion) but never at the head.
        if let Some(&std::cmp::Reverse((at, key))) = self.timers.peek()
            && !self.timer_is_live(at, key.into())
        {
            let timer = Timer::from(key);
            let id = self.tasks.at(timer.slot()).map_or(TaskId::from_u128(0), |r| r.id);
            return fail(
                "timers",
                id,
                format!("stale timer {timer:?} at {at:?} at the head"),
            );
        }
        Ok(())
    }

    /// Whether `ancestor` is a proper ancestor of `id` (O(depth)).
    pub fn is_ancestor(&self, ancestor: TaskId, id: TaskId) -> bool {
        let mut cur = self.tasks.get(&id).and_then(|r| r.parent());
        while let Some(p) = cur {
            if p == ancestor {
                return true;
            }
            cur = self.tasks.get(&p).and_then(|r| r.parent());
        }
        false
    }
}
