//! Lifecycle commands: what handlers and clients do to tasks.
//!
//! Every command validates first and mutates after, so a rejected command
//! leaves the forest untouched. Endings (cancel, failure) are decided once
//! and settle leaves first: a task becomes terminal only when its handler
//! has stopped and every child is terminal (I4, I6).

use std::sync::Arc;

use super::effect::Effect;
use super::error::{Limit, TransitionError};
use super::forest::{Forest, Timer};
use super::record::{Ending, HandlerOutcome, HandlerState, PauseState, Phase, Terminal};
use super::table::Slot;
use crate::model::{
    CancelOutcome, ErrorCode, ErrorObject, InputResponses, JsonObject, TaskId, TaskStatus, Timestamp,
};

/// What a handler should do at a safe point ([`Forest::reach_safe_point`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum SafePoint {
    /// Continue; these steer messages were queued since the last safe point,
    /// oldest first, each delivered exactly once (I10).
    Continue(Vec<String>),
    /// The task is paused: park until woken ([`Effect::WakeHandler`]) or
    /// cancelled, then call `reach_safe_point` again.
    Park,
    /// A cancel was accepted or a failure decided: stop.
    Stop,
}

/// What `tasks/pause` achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum PauseOutcome {
    /// The task is `paused` now (its handler was parked, awaiting input, not
    /// started, or finished and waiting for children).
    Paused,
    /// The handler is running: the task pauses at its next safe point.
    Pending,
    /// The task is winding down (cancel or failure) and will not pause.
    Unchanged,
}

/// The error a task carries when its TTL elapsed before it finished.
pub fn expired_error(ttl_ms: Option<u64>) -> ErrorObject {
    let message = match ttl_ms {
        Some(ttl) => format!("task expired: its TTL of {ttl} ms elapsed before it finished"),
        None => "task expired".to_owned(),
    };
    ErrorObject::new(ErrorCode::INTERNAL_ERROR, message)
        .with_data(serde_json::json!({ "reason": "ttl_expired" }))
}

impl Forest {
    // ----- handler side ---------------------------------------------------

    /// The driver started the task's handler (it had a scheduler slot and its
    /// dependencies were terminal).
    ///
    /// # Errors
    ///
    /// `Terminal`, `AlreadyStarted`, or `Paused` (start it after resume).
    pub fn start(&mut self, now: Timestamp, id: TaskId) -> Result<(), TransitionError> {
        let (_, a) = self.get_active(id)?;
        if a.handler != HandlerState::Queued {
            return Err(TransitionError::AlreadyStarted(id));
        }
        if matches!(a.pause(), PauseState::Paused { .. }) {
            return Err(TransitionError::Paused(id));
        }
        self.begin(now);
        if let Some(a) = self.rec_mut(id).active_mut() {
            a.handler = HandlerState::Running;
            a.awaiting_dependencies = false;
        }
        self.end();
        Ok(())
    }

    /// The driver holds back a queued task's handler until its `after`
    /// dependencies end, saying so in its status message. Its timeline
    /// shows it waiting for dependencies until [`Forest::dependencies_met`].
    ///
    /// # Errors
    ///
    /// `UnknownTask`, `Terminal`, `AlreadyStarted`.
    pub fn await_dependencies(
        &mut self,
        now: Timestamp,
        id: TaskId,
        message: Option<String>,
    ) -> Result<(), TransitionError> {
        let (_, a) = self.get_active(id)?;
        if a.handler != HandlerState::Queued {
            return Err(TransitionError::AlreadyStarted(id));
        }
        self.begin(now);
        let rec = self.rec_mut(id);
        rec.set_message(message.map(String::into_boxed_str));
        if let Some(a) = rec.active_mut() {
            a.awaiting_dependencies = true;
        }
        self.end();
        Ok(())
    }

    /// The last `after` dependency of the task in `slot` ended: it queues
    /// for a scheduler slot. Marks its timeline at the time of the latest
    /// command (the one that ended the dependency) and emits nothing: the
    /// driver calls it while it handles that command's effects.
    pub fn dependencies_met(&mut self, slot: Slot) {
        let now = self.now;
        let Some(rec) = self.tasks.at_mut(slot) else {
            return;
        };
        let Some(a) = rec.active_mut().filter(|a| a.awaiting_dependencies) else {
            return;
        };
        a.awaiting_dependencies = false;
        rec.note_stage(now);
    }

    /// Sets (or clears) the handler's status message.
    ///
    /// # Errors
    ///
    /// `UnknownTask` or `Terminal`.
    pub fn set_status_message(
        &mut self,
        now: Timestamp,
        id: TaskId,
        message: Option<String>,
    ) -> Result<(), TransitionError> {
        self.get_active(id)?;
        self.begin(now);
        self.rec_mut(id).set_message(message.map(String::into_boxed_str));
        self.end();
        Ok(())
    }

    /// The slot of `id` if its handler is running.
    fn require_running(&self, id: TaskId) -> Result<Slot, TransitionError> {
        let slot = self.slot(id)?;
        self.require_running_at(id, slot)
    }

    /// `slot` if it holds `id` and the task's handler is running.
    fn require_running_at(&self, id: TaskId, slot: Slot) -> Result<Slot, TransitionError> {
        let Some(rec) = self.tasks.at(slot).filter(|r| r.id == id) else {
            return Err(TransitionError::UnknownTask(id));
        };
        let a = match &rec.phase {
            Phase::Active(a) => a,
            Phase::Terminal(t) => {
                return Err(TransitionError::Terminal {
                    id,
                    status: t.status(),
                });
            }
        };
        match a.handler {
            HandlerState::Queued => Err(TransitionError::NotStarted(id)),
            HandlerState::Exited(_) => Err(TransitionError::HandlerFinished(id)),
            HandlerState::Running => Ok(slot),
        }
    }

    /// The handler asks the client for input under `key` (the task shows
    /// `input_required`). A pause requested while running takes effect here:
    /// awaiting input is a safe point.
    ///
    /// # Errors
    ///
    /// `DuplicateInputKey` when `key` was used before on this task (I9);
    /// `WindingDown`; `NotStarted`/`HandlerFinished`/`Terminal`.
    pub fn request_input(
        &mut self,
        now: Timestamp,
        id: TaskId,
        key: String,
        request: JsonObject,
    ) -> Result<(), TransitionError> {
        self.require_running(id)?;
        let rec = &self.tasks[&id];
        if rec.is_winding_down() {
            return Err(TransitionError::WindingDown(id));
        }
        if rec.inputs().used.contains(&key) {
            return Err(TransitionError::DuplicateInputKey { id, key });
        }
        self.begin(now);
        let rec = self.rec_mut(id);
        let book = rec.inputs_mut();
        let key = key.into_boxed_str();
        book.outstanding.insert(key.clone(), &request);
        book.used.insert(key);
        if let Some(a) = rec.active_mut()
            && let PauseState::Pending { via } = *a.pause()
        {
            a.set_pause(PauseState::Paused {
                via,
                prior: TaskStatus::InputRequired,
                reason: None,
            });
        }
        self.end();
        Ok(())
    }

    /// The handler no longer waits for `key` (the request is superseded; the
    /// key stays used, I9). Returns whether it was outstanding.
    ///
    /// # Errors
    ///
    /// `UnknownTask`.
    pub fn withdraw_input(&mut self, now: Timestamp, id: TaskId, key: &str) -> Result<bool, TransitionError> {
        let rec = self.get(id)?;
        if !rec.outstanding_inputs().contains_key(key) {
            return Ok(false);
        }
        self.begin(now);
        self.rec_mut(id).inputs_mut().outstanding.remove(key);
        self.end();
        Ok(true)
    }

    /// Takes the steer messages queued so far, oldest first (I10). Nothing is
    /// delivered while the task is paused (SEP-2669: after resume).
    ///
    /// # Errors
    ///
    /// `NotStarted`/`HandlerFinished`/`Terminal`/`UnknownTask`.
    pub fn take_steers(&mut self, now: Timestamp, id: TaskId) -> Result<Vec<String>, TransitionError> {
        self.take_steers_journaled(now, id, false)
    }

    /// [`Forest::take_steers`], journaling what it takes when `journal` is
    /// set (a durable task's stream of steers).
    ///
    /// # Errors
    ///
    /// As [`Forest::take_steers`].
    pub fn take_steers_journaled(
        &mut self,
        now: Timestamp,
        id: TaskId,
        journal: bool,
    ) -> Result<Vec<String>, TransitionError> {
        self.require_running(id)?;
        let rec = &self.tasks[&id];
        if rec.queued_steers().is_empty() || rec.status() == TaskStatus::Paused {
            return Ok(Vec::new());
        }
        self.begin(now);
        let steers: Vec<String> = self.rec_mut(id).take_steers();
        if journal {
            self.journal_steers(id, None, &steers);
        }
        self.end();
        Ok(steers)
    }

    /// The handler reached a safe point (a checkpoint).
    ///
    /// # Errors
    ///
    /// `NotStarted`/`HandlerFinished`/`Terminal`/`UnknownTask`.
    pub fn reach_safe_point(&mut self, now: Timestamp, id: TaskId) -> Result<SafePoint, TransitionError> {
        self.reach_safe_point_at(now, id, None)
    }

    /// [`Forest::reach_safe_point`] of a durable task: steers it returns
    /// are journaled under `seq` in the same command (one write).
    ///
    /// # Errors
    ///
    /// As [`Forest::reach_safe_point`].
    pub fn reach_safe_point_at(
        &mut self,
        now: Timestamp,
        id: TaskId,
        seq: Option<u32>,
    ) -> Result<SafePoint, TransitionError> {
        // The same safe point as `wait_point`, which also delivers the steers.
        match self.wait_point(now, id)? {
            SafePoint::Continue(_) => {
                if self.tasks[&id].queued_steers().is_empty() {
                    return Ok(SafePoint::Continue(Vec::new()));
                }
                self.begin(now);
                let steers: Vec<String> = self.rec_mut(id).take_steers();
                if seq.is_some() {
                    self.journal_steers(id, seq, &steers);
                }
                self.end();
                Ok(SafePoint::Continue(steers))
            }
            other => Ok(other),
        }
    }

    /// The handler starts waiting on something the runtime controls (a
    /// subtask's outcome). While it waits it counts as parked: a pending
    /// pause takes effect now and a new pause is immediate. Pair with
    /// [`Forest::leave_wait`].
    ///
    /// # Errors
    ///
    /// `NotStarted`/`HandlerFinished`/`Terminal`/`UnknownTask`.
    pub fn enter_wait(&mut self, now: Timestamp, id: TaskId) -> Result<(), TransitionError> {
        self.require_running(id)?;
        self.begin(now);
        let rec = self.rec_mut(id);
        let prior = rec.unpaused_status();
        if let Some(a) = rec.active_mut() {
            a.waits += 1;
            if let PauseState::Pending { via } = *a.pause() {
                a.set_pause(PauseState::Paused {
                    via,
                    prior,
                    reason: None,
                });
            }
        }
        self.end();
        Ok(())
    }

    /// The handler stops waiting (see [`Forest::enter_wait`]). Returns what
    /// it should do before running on: `Continue` (no steers are taken),
    /// `Park` while paused, `Stop` when winding down.
    ///
    /// # Errors
    ///
    /// `NotStarted`/`HandlerFinished`/`Terminal`/`UnknownTask`.
    pub fn leave_wait(&mut self, now: Timestamp, id: TaskId) -> Result<SafePoint, TransitionError> {
        self.require_running(id)?;
        let waits = self.tasks[&id].active().map_or(0, |a| a.waits);
        if waits > 0 {
            self.begin(now);
            if let Some(a) = self.rec_mut(id).active_mut() {
                a.waits -= 1;
            }
            self.end();
        }
        self.wait_point(now, id)
    }

    /// A safe point for pause and cancel that takes no steers: `Continue(vec![])`,
    /// `Park` (a pending pause takes effect) or `Stop`.
    ///
    /// # Errors
    ///
    /// `NotStarted`/`HandlerFinished`/`Terminal`/`UnknownTask`.
    pub fn wait_point(&mut self, now: Timestamp, id: TaskId) -> Result<SafePoint, TransitionError> {
        self.require_running(id)?;
        let rec = &self.tasks[&id];
        let Some(a) = rec.active() else {
            unreachable!("require_running checked the task is active")
        };
        if a.ending().is_some() {
            return Ok(SafePoint::Stop);
        }
        match *a.pause() {
            PauseState::Paused { .. } => Ok(SafePoint::Park),
            PauseState::Pending { via } => {
                self.begin(now);
                let rec = self.rec_mut(id);
                let prior = rec.unpaused_status();
                if let Some(a) = rec.active_mut() {
                    a.set_pause(PauseState::Paused {
                        via,
                        prior,
                        reason: None,
                    });
                }
                self.end();
                Ok(SafePoint::Park)
            }
            PauseState::Unpaused => Ok(SafePoint::Continue(Vec::new())),
        }
    }

    /// Server-initiated pause (SEP-2669): the handler parks itself now, with
    /// an optional reason, and its live descendants pause with it.
    ///
    /// # Errors
    ///
    /// `AlreadyPaused`, `WindingDown`, `NotStarted`/`HandlerFinished`/`Terminal`.
    pub fn pause_self(
        &mut self,
        now: Timestamp,
        id: TaskId,
        reason: Option<String>,
    ) -> Result<(), TransitionError> {
        let slot = self.require_running(id)?;
        let rec = &self.tasks[slot];
        let Some(a) = rec.active() else {
            unreachable!("require_running checked the task is active")
        };
        if a.ending().is_some() {
            return Err(TransitionError::WindingDown(id));
        }
        let via = match *a.pause() {
            PauseState::Paused { .. } => return Err(TransitionError::AlreadyPaused(id)),
            PauseState::Pending { via } => via,
            PauseState::Unpaused => id,
        };
        self.begin(now);
        let rec = self.rec_mut_at(slot);
        let prior = rec.unpaused_status();
        if let Some(a) = rec.active_mut() {
            a.set_pause(PauseState::Paused { via, prior, reason });
        }
        // Descendants follow, paused through the same task as this one, so
        // resuming that task resumes them too.
        self.pause_descendants_via(slot, via);
        self.end();
        Ok(())
    }

    /// The handler finished. The task completes (or fails) once every child
    /// is terminal; a handler error with live children cancels them first.
    /// After a cancel was accepted the task ends `cancelled` whatever the
    /// handler returned.
    ///
    /// # Errors
    ///
    /// `NotStarted` (a queued handler cannot finish), `HandlerFinished`
    /// (twice), `Terminal`, `UnknownTask`.
    pub fn finish(
        &mut self,
        now: Timestamp,
        id: TaskId,
        outcome: HandlerOutcome,
    ) -> Result<(), TransitionError> {
        let slot = self.require_running(id)?;
        self.begin(now);
        self.finish_validated(slot, outcome);
        self.end();
        Ok(())
    }

    /// Several handlers finished, each named by its id and slot (which must
    /// agree): [`Forest::finish`] for each, as one command (one `Changed`
    /// per task however many of its children ended in the batch). Returns
    /// each finish's result, in order; a rejected one changes nothing.
    pub fn finish_all(
        &mut self,
        now: Timestamp,
        exits: impl IntoIterator<Item = (TaskId, Slot, HandlerOutcome)>,
    ) -> Vec<Result<(), TransitionError>> {
        self.begin(now);
        let results = exits
            .into_iter()
            .map(|(id, slot, outcome)| {
                let slot = self.require_running_at(id, slot)?;
                self.finish_validated(slot, outcome);
                Ok(())
            })
            .collect();
        self.end();
        results
    }

    fn finish_validated(&mut self, slot: Slot, outcome: HandlerOutcome) {
        let rec = self.rec_mut_at(slot);
        let id = rec.id;
        // Outstanding requests are superseded: nobody waits for them any more.
        rec.clear_outstanding();
        // Undeliverable steers are dropped (I10: never delivered after the end).
        rec.clear_steers();
        let live_children = rec.live_children;
        let mut fail_children = None;
        if let Some(a) = rec.active_mut() {
            // A handler error with live children and no decided ending fails
            // the task after cancelling them.
            if a.ending().is_none() && live_children > 0 {
                fail_children = match &outcome {
                    HandlerOutcome::Returned(_) => None,
                    HandlerOutcome::Errored(e) => Some(e.clone()),
                    HandlerOutcome::Aborted => {
                        Some(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "handler aborted"))
                    }
                };
            }
            a.handler = HandlerState::Exited(Box::new(outcome));
            // A finished handler is parked for good: a pending pause takes effect.
            if let PauseState::Pending { via } = *a.pause() {
                a.set_pause(PauseState::Paused {
                    via,
                    prior: TaskStatus::Working,
                    reason: None,
                });
            }
        }
        if let Some(error) = fail_children {
            // Architecture: a parent whose handler fails cancels its children first.
            self.fail_cancelling_below(slot, error, format!("parent task {id} failed"));
        } else {
            self.try_settle(slot);
        }
    }

    // ----- client side ----------------------------------------------------

    /// `tasks/update`: delivers answers to outstanding input requests.
    /// Answers to keys that are not outstanding are ignored (I9). Returns the
    /// keys that were accepted.
    ///
    /// # Errors
    ///
    /// `UnknownTask`; `Paused` (SEP-2669: resume first).
    pub fn answer_input(
        &mut self,
        now: Timestamp,
        id: TaskId,
        responses: InputResponses,
    ) -> Result<Vec<String>, TransitionError> {
        let slot = self.slot(id)?;
        let rec = &self.tasks[slot];
        if rec.status() == TaskStatus::Paused {
            return Err(TransitionError::Paused(id));
        }
        if !responses.keys().any(|k| rec.outstanding_inputs().contains_key(k)) {
            return Ok(Vec::new());
        }
        self.begin(now);
        let mut accepted = Vec::new();
        for (key, response) in responses {
            let book = self.rec_mut_at(slot).inputs_mut();
            if book.outstanding.remove(&key) {
                book.answered.insert(key.clone(), response.clone());
                accepted.push(key.clone());
                self.emit(Effect::InputAnswered {
                    id,
                    slot,
                    key,
                    response,
                });
            }
        }
        self.end();
        Ok(accepted)
    }

    /// `tasks/steer`: queues a message for delivery at the next safe point.
    ///
    /// # Errors
    ///
    /// `Terminal` (SEP-2669); `WindingDown` and `HandlerFinished` when no
    /// handler will ever take it; `LimitExceeded` for queue length or size.
    pub fn steer(&mut self, now: Timestamp, id: TaskId, message: String) -> Result<(), TransitionError> {
        let (slot, rec, a) = self.active_slot(id)?;
        if a.ending().is_some() {
            return Err(TransitionError::WindingDown(id));
        }
        if matches!(a.handler, HandlerState::Exited(_)) {
            return Err(TransitionError::HandlerFinished(id));
        }
        let limits = self.config.limits;
        if message.len() > limits.max_steer_bytes as usize {
            return Err(TransitionError::LimitExceeded {
                id,
                limit: Limit::SteerBytes {
                    max: limits.max_steer_bytes,
                },
            });
        }
        if rec.queued_steers().len() >= limits.max_steer_queue as usize {
            return Err(TransitionError::LimitExceeded {
                id,
                limit: Limit::SteerQueue {
                    max: limits.max_steer_queue,
                },
            });
        }
        self.begin(now);
        self.rec_mut_at(slot).rare_mut().steers.push(message);
        self.emit(Effect::SteerQueued { id, slot });
        self.end();
        Ok(())
    }

    /// `tasks/pause`: pauses the task and its live descendants (pause
    /// propagates down). The task is `paused` at once when its handler is
    /// parked; otherwise the pause is pending until the next safe point.
    ///
    /// # Errors
    ///
    /// `Terminal`, `AlreadyPaused`, `UnknownTask`.
    pub fn pause(&mut self, now: Timestamp, id: TaskId) -> Result<PauseOutcome, TransitionError> {
        let (slot, _, a) = self.active_slot(id)?;
        match *a.pause() {
            PauseState::Paused { .. } => return Err(TransitionError::AlreadyPaused(id)),
            PauseState::Pending { .. } => return Ok(PauseOutcome::Pending),
            PauseState::Unpaused => {}
        }
        if a.ending().is_some() {
            return Ok(PauseOutcome::Unchanged);
        }
        self.begin(now);
        self.pause_one(slot, id);
        self.pause_descendants_via(slot, id);
        let outcome = match self.tasks[slot].active().map(|a| a.pause()) {
            Some(PauseState::Paused { .. }) => PauseOutcome::Paused,
            _ => PauseOutcome::Pending,
        };
        self.end();
        Ok(outcome)
    }

    fn pause_one(&mut self, slot: Slot, via: TaskId) {
        let rec = &self.tasks[slot];
        let Some(a) = rec.active() else { return };
        if a.ending().is_some() || *a.pause() != PauseState::Unpaused {
            return;
        }
        let parked = a.handler != HandlerState::Running || rec.has_outstanding_inputs() || a.waits > 0;
        let prior = rec.unpaused_status();
        if let Some(a) = self.rec_mut_at(slot).active_mut() {
            a.set_pause(if parked {
                PauseState::Paused {
                    via,
                    prior,
                    reason: None,
                }
            } else {
                PauseState::Pending { via }
            });
        }
    }

    fn pause_descendants_via(&mut self, slot: Slot, via: TaskId) {
        for t in self.live_subtree_post_order(slot) {
            if t != slot {
                self.pause_one(t, via);
            }
        }
    }

    /// `tasks/resume`: resumes the task and the descendants that were paused
    /// through it; a descendant paused on its own stays paused. Outstanding
    /// input requests and queued steers survive (I11).
    ///
    /// # Errors
    ///
    /// `Terminal`, `NotPaused`, `UnknownTask`.
    pub fn resume(&mut self, now: Timestamp, id: TaskId) -> Result<(), TransitionError> {
        let (slot, rec, _) = self.active_slot(id)?;
        let status = rec.status();
        if status != TaskStatus::Paused {
            return Err(TransitionError::NotPaused { id, status });
        }
        self.begin(now);
        self.unpause_one(slot);
        for t in self.live_subtree_post_order(slot) {
            if t == slot {
                continue;
            }
            let via = match self.tasks[t].active().map(|a| a.pause()) {
                Some(PauseState::Pending { via } | PauseState::Paused { via, .. }) => *via,
                _ => continue,
            };
            if via == id {
                self.unpause_one(t);
            }
        }
        self.end();
        Ok(())
    }

    fn unpause_one(&mut self, slot: Slot) {
        let mut woke = false;
        let rec = self.rec_mut_at(slot);
        let id = rec.id;
        if let Some(a) = rec.active_mut() {
            woke = matches!(a.pause(), PauseState::Paused { .. });
            a.set_pause(PauseState::Unpaused);
        }
        if woke {
            self.emit(Effect::WakeHandler { id, slot });
        }
    }

    /// `tasks/cancel`: every live descendant gets a cancel request; the task
    /// becomes `cancelled` after all of them are terminal (I6). Takes effect
    /// at once on a paused task.
    ///
    /// # Errors
    ///
    /// `UnknownTask`.
    pub fn cancel(&mut self, now: Timestamp, id: TaskId) -> Result<CancelOutcome, TransitionError> {
        let slot = self.slot(id)?;
        let rec = &self.tasks[slot];
        match rec.active() {
            None => return Ok(CancelOutcome::AlreadyTerminal),
            Some(a) if a.ending().is_some() => return Ok(CancelOutcome::AlreadyEnding),
            Some(_) => {}
        }
        self.begin(now);
        // One shared reason for the whole subtree: cancelling 100,000 tasks
        // allocates no string per task.
        let reason: Arc<str> = format!("ancestor {id} was cancelled").into();
        self.wind_down(
            slot,
            Ending::Cancelling {
                reason: "cancelled by request".into(),
            },
            &|| Ending::Cancelling {
                reason: reason.clone(),
            },
        );
        self.end();
        Ok(CancelOutcome::Accepted)
    }

    /// Changes a task's TTL (`ttlMs` MAY change). Re-clamps the task to its
    /// parent and every descendant to its own parent (I8).
    ///
    /// # Errors
    ///
    /// `UnknownTask`.
    pub fn set_ttl(
        &mut self,
        now: Timestamp,
        id: TaskId,
        ttl_ms: Option<u64>,
    ) -> Result<(), TransitionError> {
        let slot = self.slot(id)?;
        self.begin(now);
        let rec = &self.tasks[slot];
        let parent_exp = rec
            .parent()
            .and_then(|_| self.tasks[rec.parent_slot].expires_at());
        let created = rec.created_at;
        let want = ttl_ms.map(|t| created.saturating_add(t));
        let exp = match (want, parent_exp) {
            (Some(w), Some(p)) => Some(w.min(p)),
            (w, p) => w.or(p),
        };
        self.rec_mut_at(slot)
            .set_ttl_ms(exp.map(|e| e.millis_since(created)));
        self.sync_expiry_timer(slot);
        // Pre-order walk: each child is clamped to its (already updated) parent.
        let mut stack: Vec<Slot> = self.tasks[slot].child_list().iter().map(|c| c.slot).collect();
        while let Some(c) = stack.pop() {
            let rec = &self.tasks[c];
            let pexp = self.tasks[rec.parent_slot].expires_at();
            if let (Some(p), own) = (pexp, rec.expires_at())
                && own.is_none_or(|o| o > p)
            {
                let created = rec.created_at;
                self.rec_mut_at(c).set_ttl_ms(Some(p.millis_since(created)));
                self.sync_expiry_timer(c);
            }
            stack.extend(self.tasks[c].child_list().iter().map(|c| c.slot));
        }
        let root = self
            .slot(self.tasks[slot].root)
            .expect("the root of a live task exists");
        self.sync_delete_timer(root);
        self.end();
        Ok(())
    }

    // ----- time -------------------------------------------------------------

    /// Fires every timer due at `now`: TTL expiry (the task fails, children
    /// first) and whole-tree deletion.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.begin(now);
        while let Some(&std::cmp::Reverse((at, key))) = self.timers.peek() {
            if at > self.now {
                break;
            }
            let timer = Timer::from(key);
            self.timers.pop();
            if !self.timer_is_live(at, timer) {
                self.stale_timers = self.stale_timers.saturating_sub(1);
                continue;
            }
            match timer {
                Timer::Expire(_, slot) => {
                    let Some(rec) = self.tasks.at_mut(slot) else {
                        continue;
                    };
                    rec.set_expiry_timer(None);
                    let ttl = rec.ttl_ms();
                    let failing =
                        matches!(rec.active(), Some(a) if matches!(a.ending(), Some(Ending::Failing { .. })));
                    if rec.is_terminal() || failing {
                        continue;
                    }
                    let error = Arc::new(expired_error(ttl));
                    self.wind_down(slot, Ending::Failing { error: error.clone() }, &|| {
                        Ending::Failing { error: error.clone() }
                    });
                }
                Timer::Delete(root) => {
                    let Some(rec) = self.tasks.at_mut(root) else {
                        continue;
                    };
                    rec.set_delete_timer(None);
                    if rec.is_terminal() {
                        self.remove_tree(root);
                    }
                }
            }
        }
        self.end();
    }

    /// Deletes a whole terminal tree now.
    ///
    /// # Errors
    ///
    /// `UnknownTask`, `NotARoot`, `TreeNotTerminal`.
    pub fn delete_tree(&mut self, now: Timestamp, root: TaskId) -> Result<(), TransitionError> {
        let slot = self.slot(root)?;
        let rec = &self.tasks[slot];
        if rec.parent().is_some() {
            return Err(TransitionError::NotARoot(root));
        }
        if !rec.is_terminal() {
            return Err(TransitionError::TreeNotTerminal(root));
        }
        self.begin(now);
        self.remove_tree(slot);
        self.end();
        Ok(())
    }

    fn remove_tree(&mut self, root: Slot) {
        let slots = self.post_order(root, |_| true);
        let mut ids = Vec::with_capacity(slots.len());
        for slot in slots {
            // Their timers become stale and are skipped when reached.
            if let Some(rec) = self.tasks.remove(slot) {
                self.stale_timers +=
                    usize::from(rec.expiry_timer().is_some()) + usize::from(rec.delete_timer().is_some());
                ids.push(rec.id);
            }
        }
        let root = *ids.last().expect("the root is removed last");
        self.emit(Effect::TreeDeleted { root, ids });
    }

    // ----- endings ----------------------------------------------------------

    /// Decides `own` for `id` and `inherited(id)` for every live descendant
    /// without an ending, stops their handlers, then settles leaves first.
    pub(crate) fn wind_down(&mut self, top: Slot, own: Ending, inherited: &dyn Fn() -> Ending) {
        let mut order = self.live_subtree_post_order(top);
        // Tasks with a running handler settle only when it exits; the others
        // are settled below, still leaves first.
        order.retain(|&t| {
            let ending = if t == top { own.clone() } else { inherited() };
            self.decide_ending(t, ending)
        });
        for &t in &order {
            self.try_settle(t);
        }
    }

    /// Fails the task in `slot` with `error` once its live descendants,
    /// cancelled for `reason` (one string shared by all of them), are terminal.
    pub(crate) fn fail_cancelling_below(&mut self, slot: Slot, error: ErrorObject, reason: String) {
        let reason: Arc<str> = reason.into();
        self.wind_down(
            slot,
            Ending::Failing {
                error: Arc::new(error),
            },
            &|| Ending::Cancelling {
                reason: reason.clone(),
            },
        );
    }

    /// Records `ending` unless one is decided; returns whether the task may
    /// settle without its handler (none is running).
    fn decide_ending(&mut self, slot: Slot, ending: Ending) -> bool {
        let rec = self.rec_mut_at(slot);
        let id = rec.id;
        // Outstanding requests are superseded and the pause is lifted: the
        // handler must run to unwind (cancel while paused is immediate).
        let Phase::Active(a) = &mut rec.phase else {
            return false;
        };
        let running = a.handler == HandlerState::Running;
        if a.ending().is_some() {
            return !running;
        }
        a.set_ending(Some(ending));
        a.set_pause(PauseState::Unpaused);
        rec.clear_outstanding();
        rec.clear_steers();
        if running {
            self.emit(Effect::CancelHandler { id, slot });
        }
        !running
    }

    /// Makes `id` terminal if its handler stopped (or never started and an
    /// ending is decided) and every child is terminal; then looks at the parent.
    pub(crate) fn try_settle(&mut self, slot: Slot) {
        let mut next = Some(slot);
        while let Some(slot) = next.take() {
            let Some(rec) = self.tasks.at(slot) else { return };
            let Phase::Active(a) = &rec.phase else { return };
            if rec.live_children > 0 {
                return;
            }
            if matches!(
                (a.ending(), &a.handler),
                (_, HandlerState::Running) | (None, HandlerState::Queued)
            ) {
                return;
            }
            let rec = self.rec_mut_at(slot);
            let id = rec.id;
            let Some(a) = rec.active_mut() else { return };
            // Moved out, not cloned: a result or a shared reason is not copied.
            let ending = a.take_ending();
            let handler = std::mem::replace(&mut a.handler, HandlerState::Queued);
            let terminal = match (ending, handler) {
                (Some(Ending::Cancelling { reason }), _) => Terminal::Cancelled { reason },
                (Some(Ending::Failing { error }), _) => Terminal::Failed { error },
                (None, HandlerState::Exited(outcome)) => match *outcome {
                    HandlerOutcome::Returned(result) => Terminal::Completed { result },
                    HandlerOutcome::Errored(error) => Terminal::Failed {
                        error: Arc::new(error),
                    },
                    HandlerOutcome::Aborted => Terminal::Failed {
                        error: Arc::new(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "handler aborted")),
                    },
                },
                (None, HandlerState::Running | HandlerState::Queued) => {
                    unreachable!(
                        "checked above: a running or queued handler without an ending does not settle"
                    )
                }
            };
            let failed = match (&terminal, rec.fail_fast) {
                (Terminal::Failed { error }, true) => Some(error.clone()),
                _ => None,
            };
            rec.phase = Phase::Terminal(terminal);
            Forest::trim_journal(rec);
            rec.clear_outstanding();
            if let Some(book) = rec.inputs.as_mut() {
                // Kept only for a handler re-run; a terminal task has none.
                book.answered.clear();
            }
            rec.clear_steers();
            let parent = rec.parent().map(|_| rec.parent_slot);
            self.sync_expiry_timer(slot);
            let Some(parent) = parent else {
                self.sync_delete_timer(slot);
                return;
            };
            let p = self.rec_mut_at(parent);
            p.live_children -= 1;
            let parent_ending = p.active().is_some_and(|a| a.ending().is_some());
            // A parent whose handler is queued again after a restart is not
            // failed by children that failed only because of the restart.
            let parent_rerun = p.active().is_some_and(|a| a.handler == HandlerState::Queued);
            if let (Some(error), false, false) = (failed, parent_ending, parent_rerun) {
                let error = ErrorObject {
                    code: error.code,
                    message: format!("subtask {id} failed: {}", error.message),
                    data: Some(serde_json::json!({ "failedTaskId": id.to_string() })),
                };
                self.fail_cancelling_below(parent, error, format!("sibling subtask {id} failed"));
                // wind_down settled the parent if it could.
                return;
            }
            next = Some(parent);
        }
    }
}
