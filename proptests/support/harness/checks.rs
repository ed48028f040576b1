//! The checks after every step: the core agrees with the model, the
//! invariants hold, effects and deliveries are as the model says.

use std::collections::{BTreeMap, BTreeSet};

use subtask::core::{ClientView, Effect};
use subtask::model::{TaskId, TaskPayload, TaskStatus, Timestamp};

use super::super::reference::{Ending, Handler, Pause};

use super::{Check, CoreTask, Harness, Op};

impl Harness {
    /// The core agrees with the model on every task.
    pub(super) fn check_state(&self) -> Check {
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
            use super::super::reference::Outcome;
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
    pub(super) fn check_status_message(&self, i: usize, msg: Option<&str>) -> Check {
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
    pub(super) fn check_effects(
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
    pub(super) fn check_temporal(
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
    pub(super) fn check_delivery(
        &mut self,
        t: usize,
        delivered: &[String],
        before: &[Option<CoreTask>],
    ) -> Check {
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
    pub(super) fn check_cursors(&mut self) -> Check {
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
