//! The client's actions on a running tree (steer, pause, resume, answer
//! input, cancel), each with what the runtime must answer given the state
//! just observed, and what must hold right after it (I5, I6, I9, I10, I11).

use std::collections::BTreeSet;

use serde_json::json;
use subtask::core::CancelOutcome;
use subtask::model::{ErrorCode, InputResponses, TaskId, TaskStatus};

use crate::V;
use crate::checks::{R, Snap, descendants, describe, keys_of, msg, pause_pending, terminal, winding};
use crate::driver::Driver;
use crate::interpreter::obj;
use crate::script::AnswerMode;

impl Driver {
    pub fn steer(&mut self, pre: &Snap, id: TaskId) -> R<Snap> {
        self.seq += 1;
        let message = format!("m{}", self.seq);
        let t = &pre[&id];
        let n = self.name(id);
        let (exited, delivered) = self
            .sh
            .logs
            .lock()
            .get(&id)
            .map_or((false, 0), |l| (l.exited, l.delivered.len()));
        let queued = self
            .sh
            .accepted
            .lock()
            .get(&id)
            .map_or(0, Vec::len)
            .saturating_sub(delivered);
        let expect_ok =
            !terminal(t) && !winding(t) && !exited && queued < self.cfg.limits.max_steer_queue as usize;
        let r = self.rt.steer(id, message.clone());
        if r.is_ok() {
            self.sh
                .accepted
                .lock()
                .entry(id)
                .or_default()
                .push(message.clone());
        }
        self.note(format!("steer {n} {message:?}: {r:?}"));
        match &r {
            Ok(()) => {
                ensure!(
                    expect_ok,
                    "I10: steer of {n} ({}, handler finished {exited}, {queued} queued) was accepted",
                    describe(t)
                );
                self.count("steer accepted");
            }
            Err(e) => {
                ensure!(
                    !expect_ok,
                    "I10: steer of {n} ({}, handler finished {exited}, {queued} queued) was rejected: {e}",
                    describe(t)
                );
                ensure!(
                    e.error_code() == ErrorCode::INVALID_PARAMS,
                    "steer rejected with {}",
                    e.error_code()
                );
                self.count(if terminal(t) {
                    "steer rejected: terminal"
                } else {
                    "steer rejected: live"
                });
            }
        }
        self.observe()
    }

    pub fn pause(&mut self, pre: &Snap, id: TaskId) -> R<Snap> {
        let t = &pre[&id];
        let n = self.name(id);
        let r = self.rt.pause(id, V);
        self.note(format!("pause {n}: {:?}", r.as_ref().map(describe)));
        let post = self.observe()?;
        match r {
            Ok(s) => {
                ensure!(
                    !terminal(t) && t.status() != TaskStatus::Paused,
                    "pause of {n} ({}) was accepted",
                    describe(t)
                );
                // The answer is the state right after the command; effects run
                // after it (a resumed queued task may start) may have changed the
                // status message since, not the status.
                ensure!(
                    s.payload() == post[&id].payload(),
                    "pause of {n} returned {s:?}, but tasks/get says {:?}",
                    post[&id]
                );
                if winding(t) {
                    ensure!(
                        s.status() == t.status(),
                        "pause of winding-down {n} changed it to {}",
                        describe(&s)
                    );
                    self.count("pause: unchanged");
                } else if s.status() == TaskStatus::Paused {
                    self.count("pause: paused at once");
                } else {
                    ensure!(
                        t.status() != TaskStatus::InputRequired,
                        "I11: pause of {n}, which awaits input, did not pause it at once: {}",
                        describe(&s)
                    );
                    ensure!(
                        !self.exited(id),
                        "pause of {n}, whose handler finished, did not pause it at once: {}",
                        describe(&s)
                    );
                    ensure!(pause_pending(&s), "pause of {n} answered {}", describe(&s));
                    self.count("pause: pending");
                }
                if !winding(t) && !pause_pending(t) {
                    // Pause propagates down: parked descendants are paused at once.
                    for d in descendants(id, pre) {
                        let dt = &pre[&d];
                        if terminal(dt)
                            || winding(dt)
                            || dt.status() == TaskStatus::Paused
                            || pause_pending(dt)
                        {
                            continue;
                        }
                        if dt.status() == TaskStatus::InputRequired || self.exited(d) {
                            ensure!(
                                post[&d].status() == TaskStatus::Paused,
                                "pause of {n}: its parked descendant {} ({}) is now {}",
                                self.name(d),
                                describe(dt),
                                describe(&post[&d])
                            );
                        }
                    }
                }
            }
            Err(e) => {
                ensure!(
                    terminal(t) || t.status() == TaskStatus::Paused,
                    "pause of {n} ({}) was rejected: {e}",
                    describe(t)
                );
                ensure!(
                    e.error_code() == ErrorCode::INVALID_PARAMS,
                    "pause rejected with {}",
                    e.error_code()
                );
                self.count("pause: rejected");
            }
        }
        Ok(post)
    }

    pub fn resume(&mut self, pre: &Snap, id: TaskId) -> R<Snap> {
        let t = &pre[&id];
        let n = self.name(id);
        let r = self.rt.resume(id, V);
        self.note(format!("resume {n}: {:?}", r.as_ref().map(describe)));
        let post = self.observe()?;
        match r {
            Ok(s) => {
                ensure!(
                    t.status() == TaskStatus::Paused,
                    "resume of {n} ({}) was accepted",
                    describe(t)
                );
                ensure!(
                    s.status() != TaskStatus::Paused,
                    "resume of {n} answered {}",
                    describe(&s)
                );
                ensure!(
                    s.payload() == post[&id].payload(),
                    "resume of {n} returned {s:?}, but tasks/get says {:?}",
                    post[&id]
                );
                let through_me = format!("paused with ancestor {id}");
                for d in descendants(id, pre) {
                    let dt = &pre[&d];
                    if dt.status() != TaskStatus::Paused {
                        continue;
                    }
                    let m = msg(dt);
                    if m == through_me {
                        ensure!(
                            post[&d].status() != TaskStatus::Paused,
                            "resume of {n} left {}, paused through it, {}",
                            self.name(d),
                            describe(&post[&d])
                        );
                    } else if m == "paused" || m.starts_with("paused with ancestor ") {
                        ensure!(
                            post[&d].status() == TaskStatus::Paused,
                            "resume of {n} also resumed {} ({m:?}), which was not paused through it",
                            self.name(d)
                        );
                    }
                }
                self.count("resume: accepted");
            }
            Err(e) => {
                ensure!(
                    t.status() != TaskStatus::Paused,
                    "resume of paused {n} was rejected: {e}"
                );
                ensure!(
                    e.error_code() == ErrorCode::INVALID_PARAMS,
                    "resume rejected with {}",
                    e.error_code()
                );
                self.count("resume: rejected");
            }
        }
        Ok(post)
    }

    pub fn answer(&mut self, pre: &Snap, id: TaskId, mode: AnswerMode) -> R<Snap> {
        let t = &pre[&id];
        let n = self.name(id);
        let outstanding = keys_of(t);
        let keys: Vec<String> = match mode {
            AnswerMode::All => outstanding.iter().cloned().collect(),
            AnswerMode::First => outstanding.iter().take(1).cloned().collect(),
            AnswerMode::Stale => self
                .gone_keys
                .get(&id)
                .map(|g| g.iter().cloned().collect())
                .unwrap_or_default(),
            AnswerMode::Unknown => vec![format!("unknown-{}", self.seq)],
        };
        let mut responses = InputResponses::new();
        for k in &keys {
            self.seq += 1;
            responses.insert(k.clone(), obj(json!({"action": "accept", "answer": self.seq})));
        }
        let parent_before = t.task().parent_task_id.map(|p| pre[&p].status());
        let r = self.rt.update(id, responses.clone());
        if let Ok(accepted) = &r {
            for k in accepted {
                if let Some(v) = responses.get(k) {
                    self.sent_answers.insert((id, k.clone()), v.clone());
                }
            }
        }
        self.note(format!("update {n} {keys:?} ({mode:?}): {r:?}"));
        let post = self.observe()?;
        match r {
            Ok(accepted) => {
                ensure!(
                    t.status() != TaskStatus::Paused,
                    "tasks/update of paused {n} was accepted"
                );
                let got: BTreeSet<String> = accepted.iter().cloned().collect();
                ensure!(
                    got.len() == accepted.len(),
                    "tasks/update of {n} accepted a key twice: {accepted:?}"
                );
                let want: BTreeSet<String> = keys
                    .iter()
                    .filter(|k| outstanding.contains(*k))
                    .cloned()
                    .collect();
                ensure!(
                    got == want,
                    "I9: tasks/update of {n} with {keys:?} accepted {accepted:?}; outstanding were {outstanding:?}"
                );
                if !terminal(&post[&id]) {
                    let left = keys_of(&post[&id]);
                    let expect: BTreeSet<String> = outstanding.difference(&got).cloned().collect();
                    ensure!(
                        left == expect,
                        "tasks/update of {n}: {left:?} outstanding after, expected {expect:?}"
                    );
                }
                self.count(if got.is_empty() {
                    "update: ignored"
                } else {
                    "update: accepted"
                });
            }
            Err(e) => {
                ensure!(
                    t.status() == TaskStatus::Paused,
                    "tasks/update of {n} ({}) was rejected: {e}",
                    describe(t)
                );
                ensure!(
                    e.error_code() == ErrorCode::INVALID_PARAMS,
                    "update rejected with {}",
                    e.error_code()
                );
                self.count("update: rejected while paused");
            }
        }
        if let (Some(p), Some(before)) = (t.task().parent_task_id, parent_before) {
            ensure!(
                post[&p].status() == before,
                "I7: answering {n} changed its parent's status from {before} to {}",
                post[&p].status()
            );
        }
        Ok(post)
    }

    pub fn cancel(&mut self, pre: &Snap, id: TaskId) -> R<Snap> {
        let t = &pre[&id];
        let n = self.name(id);
        let r = self.rt.cancel(id);
        self.note(format!("cancel {n}: {r:?}"));
        let post = self.observe()?;
        let expect = if terminal(t) {
            CancelOutcome::AlreadyTerminal
        } else if winding(t) {
            CancelOutcome::AlreadyEnding
        } else {
            CancelOutcome::Accepted
        };
        match r {
            Ok(o) => ensure!(
                o == expect,
                "cancel of {n} ({}) answered {o:?}, expected {expect:?}",
                describe(t)
            ),
            Err(e) => return Err(format!("cancel of {n} ({}) was rejected: {e}", describe(t))),
        }
        if expect == CancelOutcome::Accepted {
            self.cancelled_by_client.insert(id);
            for d in std::iter::once(id).chain(descendants(id, pre)) {
                let dt = &pre[&d];
                if terminal(dt) {
                    continue;
                }
                let want = if msg(dt).starts_with("failing: ") {
                    TaskStatus::Failed
                } else {
                    TaskStatus::Cancelled
                };
                self.must_end.entry(d).or_insert(want);
                let pt = &post[&d];
                ensure!(
                    terminal(pt) || winding(pt),
                    "I6: right after the cancel of {n}, {} is {}",
                    self.name(d),
                    describe(pt)
                );
            }
            self.count("cancel: accepted");
        } else {
            self.count("cancel: no-op");
        }
        Ok(post)
    }
}
