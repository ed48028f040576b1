//! The invariants of `docs/lifecycle.md` (I1–I12) checked on what the
//! driver observes: every atomic snapshot against the previous one
//! ([`Driver::observe`]), and at the end every task, handler log,
//! subscription and results stream against the final state
//! ([`Driver::finish`]). Also the small queries on snapshots the other
//! parts share. Reads the runtime; never acts on it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use subtask::core::ClientView;
use subtask::model::{DetailedTask, TaskId, TaskPayload, TaskStatus};
use subtask::runtime::TaskOutcome;

use crate::V;
use crate::driver::Driver;

// ----- observation helpers ----------------------------------------------------

pub type Snap = HashMap<TaskId, DetailedTask>;
pub type R<T = ()> = Result<T, String>;

pub fn msg(t: &DetailedTask) -> &str {
    t.task().status_message.as_deref().unwrap_or("")
}

pub fn terminal(t: &DetailedTask) -> bool {
    t.status().is_terminal()
}

/// A cancel was accepted or a failure decided (the core names the sub-state).
pub fn winding(t: &DetailedTask) -> bool {
    !terminal(t) && (msg(t).starts_with("cancelling: ") || msg(t).starts_with("failing: "))
}

pub fn pause_pending(t: &DetailedTask) -> bool {
    !terminal(t) && msg(t).starts_with("pause requested")
}

pub fn keys_of(t: &DetailedTask) -> BTreeSet<String> {
    match t.payload() {
        TaskPayload::InputRequired { input_requests } => input_requests.keys().cloned().collect(),
        _ => BTreeSet::new(),
    }
}

pub fn describe(t: &DetailedTask) -> String {
    format!("{} ({:?})", t.status(), msg(t))
}

/// Post-order by `childTaskIds` of the tree at `root`.
pub fn post_order(root: TaskId, snap: &Snap) -> Vec<TaskId> {
    let mut out = Vec::new();
    let mut stack = vec![(root, 0usize)];
    while let Some((id, i)) = stack.last().copied() {
        let kids = &snap[&id].task().child_task_ids;
        if i < kids.len() {
            if let Some(top) = stack.last_mut() {
                top.1 += 1;
            }
            stack.push((kids[i], 0));
        } else {
            stack.pop();
            out.push(id);
        }
    }
    out
}

/// The longest prefix of the post-order whose tasks are terminal: what the
/// results stream may have emitted (and must have, once it caught up).
pub fn ready_prefix(root: TaskId, snap: &Snap) -> Vec<TaskId> {
    post_order(root, snap)
        .into_iter()
        .take_while(|id| terminal(&snap[id]))
        .collect()
}

pub fn descendants(id: TaskId, snap: &Snap) -> Vec<TaskId> {
    let mut out = Vec::new();
    let mut stack = snap[&id].task().child_task_ids.clone();
    while let Some(c) = stack.pop() {
        out.push(c);
        stack.extend(snap[&c].task().child_task_ids.iter().copied());
    }
    out
}

pub fn outcome_matches(o: &TaskOutcome, t: &DetailedTask) -> bool {
    match (o, t.payload()) {
        (TaskOutcome::Completed(r), TaskPayload::Completed { result }) => r == result,
        (TaskOutcome::Failed(e), TaskPayload::Failed { error }) => e == error,
        (TaskOutcome::Cancelled, TaskPayload::Cancelled) => true,
        _ => false,
    }
}

#[derive(Default)]
pub struct SubLog {
    pub snaps: Vec<DetailedTask>,
    pub done: bool,
}

#[derive(Default)]
pub struct ResLog {
    pub items: Vec<DetailedTask>,
    pub done: bool,
}

/// What a run exercised (for the coverage test).
pub type Stats = BTreeMap<&'static str, u64>;

impl Driver {
    /// An atomic snapshot of every known task (discovering new children),
    /// checked against the previous one.
    pub fn observe(&mut self) -> R<Snap> {
        for &r in &self.roots.clone() {
            if self.known_set.insert(r) {
                self.known.push(r);
                self.subscribe(r);
            }
        }
        let mut snap = Snap::new();
        let mut i = 0;
        let mut new_ids = Vec::new();
        while i < self.known.len() {
            let id = self.known[i];
            let Some(t) = self.rt.get(id, V) else {
                return Err(format!(
                    "I3: {} (named by its parent) does not resolve",
                    self.name(id)
                ));
            };
            for &c in &t.task().child_task_ids {
                if self.known_set.insert(c) {
                    self.known.push(c);
                    new_ids.push(c);
                }
            }
            snap.insert(id, t);
            i += 1;
        }
        for (&id, t) in &snap {
            if t.status() == TaskStatus::Paused {
                let base = self.rt.get(id, ClientView::BASE).ok_or("BASE get failed")?;
                ensure!(
                    base.status() == TaskStatus::Working && msg(&base).contains("paused"),
                    "a BASE client sees paused {} as {}",
                    self.name(id),
                    describe(&base)
                );
            }
        }
        for c in new_ids {
            self.subscribe(c);
        }
        self.check(&snap)?;
        let v = self.sh.violations.lock().clone();
        ensure!(v.is_empty(), "handler-side check failed:\n  {}", v.join("\n  "));
        self.last = snap.clone();
        Ok(snap)
    }

    pub fn check(&mut self, snap: &Snap) -> R {
        let logs = self.sh.logs.lock();
        for &id in &self.known {
            let t = &snap[&id];
            let task = t.task();
            let n = self.sh.name(id);
            let prev = self.last.get(&id);
            // I1, I3
            ensure!(task.parent_task_id != Some(id), "I1: {n} is its own parent");
            ensure!(
                self.roots.contains(&id) == task.parent_task_id.is_none(),
                "I1: {n} has parentTaskId {:?}",
                task.parent_task_id
            );
            if let Some(p) = task.parent_task_id {
                let ps = snap
                    .get(&p)
                    .ok_or_else(|| format!("I3: the parent of {n} does not resolve"))?;
                ensure!(
                    ps.task().child_task_ids.contains(&id),
                    "I3: the parent of {n} does not list it"
                );
                // I8
                let expiry = |t: &subtask::model::Task| t.ttl_ms.map(|ttl| t.created_at.saturating_add(ttl));
                if let Some(pe) = expiry(ps.task()) {
                    ensure!(
                        expiry(task).is_some_and(|e| e <= pe),
                        "I8: {n} expires at {:?}, after its parent ({pe:?})",
                        expiry(task)
                    );
                }
            }
            // I2
            let kids = &task.child_task_ids;
            ensure!(!kids.contains(&id), "I2: {n} lists itself as a child");
            ensure!(
                kids.iter().collect::<HashSet<_>>().len() == kids.len(),
                "I2: {n} lists a child twice"
            );
            for c in kids {
                ensure!(
                    snap[c].task().parent_task_id == Some(id),
                    "I1: child {} of {n} names another parent",
                    self.sh.name(*c)
                );
            }
            if let Some(prev) = prev {
                ensure!(
                    prev.task().parent_task_id == task.parent_task_id,
                    "I1: the parent of {n} changed"
                );
                ensure!(
                    kids.starts_with(&prev.task().child_task_ids),
                    "I2: childTaskIds of {n} went from {:?} to {kids:?}",
                    prev.task().child_task_ids
                );
                if terminal(prev) {
                    ensure!(
                        prev == t,
                        "I4: {n} was terminal as {prev:?} and then became {t:?}"
                    );
                }
            }
            // I4
            let log = logs.get(&id);
            if terminal(t) {
                for c in kids {
                    ensure!(
                        terminal(&snap[c]),
                        "I4/I6: {n} is {} while its child {} is {}",
                        t.status(),
                        self.sh.name(*c),
                        describe(&snap[c])
                    );
                }
                ensure!(
                    log.is_none_or(|l| l.exited),
                    "I4: {n} is {} while its handler is still running",
                    t.status()
                );
            } else if log.is_some_and(|l| l.exited) && kids.iter().all(|c| terminal(&snap[c])) {
                return Err(format!(
                    "I4: the handler of {n} finished and all {} children are terminal, but it is {}",
                    kids.len(),
                    describe(t)
                ));
            }
            // I5
            if let Some(&len) = self.frozen.get(&id) {
                ensure!(
                    kids.len() == len,
                    "I5: {n} got a subtask after it was seen winding down or terminal"
                );
            }
            if terminal(t) || winding(t) {
                self.frozen.entry(id).or_insert(kids.len());
            }
            // I7, I9, I11 (a paused payload hides the keys)
            if t.status() == TaskStatus::Paused {
                self.paused_since.insert(id);
                continue;
            }
            let keys = keys_of(t);
            for k in &keys {
                ensure!(
                    log.is_some_and(|l| l.requested.contains(k)),
                    "I7/I9: {n} shows the input request {k:?}, which its own handler never made"
                );
                ensure!(
                    !self.gone_keys.get(&id).is_some_and(|g| g.contains(k)),
                    "I9: the input key {k:?} of {n} is outstanding again"
                );
            }
            let was_paused = self.paused_since.remove(&id);
            if let Some(before) = self.last_keys.get(&id) {
                let gone: Vec<String> = before.difference(&keys).cloned().collect();
                // Only the handler itself can drop a request while paused:
                // by giving up on it, or by finishing.
                let lost: Vec<&String> = gone
                    .iter()
                    .filter(|k| log.is_none_or(|l| !l.withdrawn.contains(k)))
                    .collect();
                if was_paused && !terminal(t) && !winding(t) && !log.is_some_and(|l| l.exited) {
                    ensure!(
                        lost.is_empty(),
                        "I11: {n} had the input requests {before:?} before it was paused and {keys:?} after"
                    );
                }
                self.gone_keys.entry(id).or_default().extend(gone);
            }
            self.last_keys.insert(id, keys);
        }
        drop(logs);
        // I12: only the ready prefix is ever emitted.
        for &root in &self.roots {
            let ready = ready_prefix(root, snap);
            let emitted: Vec<TaskId> = self.results[&root]
                .lock()
                .items
                .iter()
                .map(|t| t.task().task_id)
                .collect();
            ensure!(
                ready.starts_with(&emitted),
                "I12: results of {} emitted {:?}, but the ready prefix of the post-order is {:?}",
                self.name(root),
                emitted.iter().map(|i| self.name(*i)).collect::<Vec<_>>(),
                ready.iter().map(|i| self.name(*i)).collect::<Vec<_>>()
            );
        }
        Ok(())
    }

    pub async fn finish(&mut self) -> R {
        // Let the streams deliver their last items.
        for _ in 0..3 {
            self.tick(1, true).await?;
        }
        let fin = self.observe()?;
        ensure!(
            self.rt.running_handlers() == 0,
            "{} scheduler slots are still held after every task ended",
            self.rt.running_handlers()
        );
        ensure!(
            self.rt.task_count() == self.known.len(),
            "task_count is {}, but {} tasks were created",
            self.rt.task_count(),
            self.known.len()
        );
        let mut finals: Vec<&'static str> = Vec::new();
        let logs = self.sh.logs.lock();
        let accepted = self.sh.accepted.lock();
        for &id in &self.known {
            let t = &fin[&id];
            let n = self.sh.name(id);
            ensure!(terminal(t), "{n} is {} at the end", describe(t));
            if let Some(want) = self.must_end.get(&id) {
                ensure!(
                    t.status() == *want,
                    "I6: {n} ended {} after an accepted cancel; expected {want}",
                    describe(t)
                );
            }
            let log = logs.get(&id);
            let ancestors = {
                let mut v = Vec::new();
                let mut p = t.task().parent_task_id;
                while let Some(a) = p {
                    v.push(a);
                    p = fin[&a].task().parent_task_id;
                }
                v
            };
            match t.payload() {
                TaskPayload::Completed { result } => {
                    let returned = log.and_then(|l| l.returned.clone());
                    ensure!(
                        returned == Some(Ok(result.clone())),
                        "{n} completed with {result:?}, but its handler returned {returned:?}"
                    );
                }
                TaskPayload::Cancelled => {
                    let by_client = std::iter::once(id)
                        .chain(ancestors.iter().copied())
                        .any(|a| self.cancelled_by_client.contains(&a));
                    let failed_ancestor = ancestors.iter().any(|a| fin[a].status() == TaskStatus::Failed);
                    ensure!(
                        by_client || failed_ancestor,
                        "{n} was cancelled, but no cancel of it or an ancestor was accepted and no ancestor failed"
                    );
                    finals.push("end: cancelled");
                }
                TaskPayload::Failed { error } => {
                    if error
                        .data
                        .as_ref()
                        .is_some_and(|d| d.get("reason").is_some_and(|r| r == "ttl_expired"))
                    {
                        finals.push("end: failed, TTL expired");
                    } else if error.message.contains("handler panicked") {
                        finals.push("end: failed, panicked");
                    } else if error.message == "handler aborted" {
                        finals.push("end: failed, aborted");
                    } else if error
                        .data
                        .as_ref()
                        .is_some_and(|d| d.get("failedTaskId").is_some())
                    {
                        finals.push("end: failed, fail-fast subtask");
                    } else {
                        finals.push("end: failed, other");
                    }
                }
                _ => {}
            }
            if let Some(l) = log {
                let acc = accepted.get(&id).cloned().unwrap_or_default();
                ensure!(
                    acc.starts_with(&l.delivered),
                    "I10: {n} received the steers {:?}; the accepted ones were {acc:?}",
                    l.delivered
                );
                for (k, v) in &l.answers {
                    let sent = self.sent_answers.get(&(id, k.clone()));
                    ensure!(
                        sent == Some(v),
                        "I9: {n} received {v:?} for {k:?}; the accepted answer was {sent:?}"
                    );
                }
                for (c, o) in &l.awaited {
                    ensure!(
                        outcome_matches(o, &fin[c]),
                        "{n} awaited {} and got {o:?}, but it ended {:?}",
                        self.sh.name(*c),
                        fin[c]
                    );
                }
                ensure!(
                    l.parent == t.task().parent_task_id,
                    "I1: the handler of {n} saw another parent"
                );
                let spawned: Vec<TaskId> = l.spawned.iter().map(|s| s.0).collect();
                ensure!(
                    spawned == t.task().child_task_ids,
                    "I2: {n} spawned {} subtasks, childTaskIds has {}",
                    spawned.len(),
                    t.task().child_task_ids.len()
                );
                for (c, after) in &l.spawned {
                    let Some(cl) = logs.get(c) else { continue };
                    let seen: Vec<TaskId> = cl.deps_seen.iter().map(|d| d.0).collect();
                    ensure!(
                        seen == *after,
                        "{} started with dependencies {seen:?}, declared {after:?}",
                        cl.label
                    );
                    for (d, o) in &cl.deps_seen {
                        ensure!(
                            outcome_matches(o, &fin[d]),
                            "{} saw dependency outcome {o:?}, but it ended {:?}",
                            cl.label,
                            fin[d]
                        );
                    }
                }
            }
            // Subscriptions: end with the final snapshot; never change
            // parent, never shrink children, nothing after terminal, a key
            // never comes back.
            let sub = self.subs[&id].lock();
            ensure!(sub.done, "the subscription to {n} did not end");
            ensure!(
                sub.snaps.last() == Some(t),
                "the subscription to {n} ended with {:?}",
                sub.snaps.last()
            );
            let mut gone = BTreeSet::new();
            let mut last_keys = BTreeSet::new();
            for w in sub.snaps.windows(2) {
                ensure!(w[0] != w[1], "the subscription to {n} repeated a snapshot");
                ensure!(
                    !terminal(&w[0]),
                    "the subscription to {n} went on after a terminal snapshot"
                );
                ensure!(
                    w[0].task().parent_task_id == w[1].task().parent_task_id,
                    "I1 (subscription of {n})"
                );
                ensure!(
                    w[1].task()
                        .child_task_ids
                        .starts_with(&w[0].task().child_task_ids),
                    "I2 (subscription of {n})"
                );
            }
            for s in sub.snaps.iter().filter(|s| s.status() != TaskStatus::Paused) {
                let keys = keys_of(s);
                ensure!(
                    keys.is_disjoint(&gone),
                    "I9: a key of {n} came back (subscription)"
                );
                gone.extend(last_keys.difference(&keys).cloned());
                last_keys = keys;
            }
        }
        drop(accepted);
        drop(logs);
        for k in finals {
            self.count(k);
        }
        for &root in &self.roots {
            let res = self.results[&root].lock();
            ensure!(res.done, "the results stream of {} did not end", self.name(root));
            let ids: Vec<TaskId> = res.items.iter().map(|t| t.task().task_id).collect();
            let order = post_order(root, &fin);
            ensure!(
                ids == order,
                "I12: results of {} came as {:?}; the post-order is {:?}",
                self.name(root),
                ids.iter().map(|i| self.name(*i)).collect::<Vec<_>>(),
                order.iter().map(|i| self.name(*i)).collect::<Vec<_>>()
            );
            for item in &res.items {
                ensure!(
                    *item == fin[&item.task().task_id],
                    "I12: a result differs from the final snapshot"
                );
            }
        }
        for l in self.sh.logs.lock().values() {
            let k = match (l.exited, &l.returned, l.panicked) {
                (_, Some(Ok(_)), _) => "handler: returned a result",
                (_, Some(Err(_)), _) => "handler: returned an error",
                (_, None, true) => "handler: panicked",
                (true, None, false) => "handler: stopped early (interrupted or aborted)",
                (false, None, false) => "handler: never exited",
            };
            *self.stats.entry(k).or_default() += 1;
            *self.stats.entry("steers delivered").or_default() += l.delivered.len() as u64;
            *self.stats.entry("answers received").or_default() += l.answers.len() as u64;
            *self.stats.entry("subtasks awaited").or_default() += l.awaited.len() as u64;
            *self.stats.entry("context calls given up").or_default() += l.gave_up;
        }
        *self.stats.entry("tasks").or_default() += self.known.len() as u64;
        Ok(())
    }
}
