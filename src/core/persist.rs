//! Records in and out of a store, and the recovery of a tree after a restart.
//!
//! A task is stored as its structural position (id, root, parent, index in
//! the parent's `childTaskIds`) plus a JSON *state*: everything else the core
//! knows about it. Derived fields (depth, children, live-children counts,
//! armed timers) are never stored; [`Forest::restore`] rebuilds them and
//! refuses a tree that breaks an invariant rather than repairing it into a
//! different tree.

use serde::{Deserialize, Serialize};

use super::config::ForestConfig;
use super::forest::Forest;
use super::journal::Journal;
use super::record::{
    Child, Ending, HandlerOutcome, HandlerState, InputBook, PauseState, Phase, RecordRare, TaskRecord,
};
use super::table::{Slot, TaskTable};
use crate::model::IdMap;
use crate::model::{ErrorCode, ErrorObject, TaskId, Timestamp};

/// Version of the state encoding written by [`encode_state`].
pub const STATE_FORMAT: u32 = 1;

#[derive(Serialize)]
struct StateRef<'a> {
    v: u32,
    created_at: u64,
    /// Absent when equal to `created_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_updated_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    poll_interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    fail_fast: bool,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    steers: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    inputs: Option<&'a InputBook>,
    #[serde(skip_serializing_if = "Option::is_none")]
    journal: Option<&'a Journal>,
    phase: &'a Phase,
    /// A terminal task's timeline (`timeline.rs`); a live one's is not stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    timeline: Option<Vec<Vec<u32>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateOwned {
    v: u32,
    created_at: u64,
    #[serde(default)]
    last_updated_at: Option<u64>,
    #[serde(default)]
    ttl_ms: Option<u64>,
    #[serde(default)]
    poll_interval_ms: Option<u64>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    fail_fast: bool,
    #[serde(default)]
    steers: Vec<String>,
    #[serde(default)]
    inputs: Option<InputBook>,
    #[serde(default)]
    journal: Option<Journal>,
    phase: Phase,
    #[serde(default)]
    timeline: Option<Vec<Vec<u32>>>,
}

/// The JSON state of a record (everything but its structural position).
pub fn encode_state(rec: &TaskRecord) -> String {
    let state = StateRef {
        v: STATE_FORMAT,
        created_at: rec.created_at.as_millis(),
        last_updated_at: Some(rec.last_updated_at.as_millis()).filter(|&t| t != rec.created_at.as_millis()),
        ttl_ms: rec.ttl_ms(),
        poll_interval_ms: rec.poll_interval_ms(),
        message: rec.handler_message(),
        fail_fast: rec.fail_fast,
        steers: rec.queued_steers(),
        inputs: rec.inputs.as_deref().filter(|b| !b.has_no_inputs()),
        journal: rec.journal(),
        phase: &rec.phase,
        timeline: matches!(rec.phase, Phase::Terminal(_)).then(|| rec.timeline.to_stored()),
    };
    serde_json::to_string(&state).expect("task state serializes")
}

/// A record from its position and the JSON written by [`encode_state`].
/// Derived fields are filled in by [`Forest::restore`].
///
/// # Errors
///
/// A description of what is wrong with `state`.
pub fn decode_state(
    id: TaskId,
    root: TaskId,
    parent: Option<TaskId>,
    position: u32,
    state: &str,
) -> Result<TaskRecord, String> {
    if parent == Some(id) {
        // Caught here: a record keeps a root's own id as its parent.
        return Err("the task is its own parent".to_owned());
    }
    let s: StateOwned = serde_json::from_str(state).map_err(|e| format!("unreadable task state: {e}"))?;
    if s.v != STATE_FORMAT {
        return Err(format!(
            "task state format {} is not the supported format {STATE_FORMAT}",
            s.v
        ));
    }
    let mut rec = TaskRecord {
        id,
        parent_id: parent.unwrap_or(id),
        // Set by `Forest::restore`.
        parent_slot: Slot(0),
        root,
        depth: 0,
        position,
        rare: (s.message.is_some() || !s.steers.is_empty()).then(|| {
            Box::new(RecordRare {
                children: Vec::new(),
                message: s.message.map(String::into_boxed_str),
                steers: s.steers,
            })
        }),
        live_children: 0,
        created_at: Timestamp::from_millis(s.created_at),
        last_updated_at: Timestamp::from_millis(s.last_updated_at.unwrap_or(s.created_at)),
        present: super::record::Present::NONE,
        ttl_ms: 0,
        poll_interval_ms: 0,
        expiry_timer: Timestamp::EPOCH,
        delete_timer: Timestamp::EPOCH,
        fail_fast: s.fail_fast,
        started_after_ms: 0,
        inputs: match (s.inputs, s.journal) {
            (None, None) => None,
            (inputs, mut journal) => {
                if let Some(j) = journal.as_mut() {
                    // Entries come from the store's journal rows: the next
                    // one appended takes the next place. A terminal task
                    // never runs again: its entries are not kept.
                    j.appended = j.entries.len() as u32;
                    if matches!(s.phase, Phase::Terminal(_)) {
                        j.entries = Vec::new();
                    }
                }
                Some(Box::new(InputBook {
                    journal: journal.map(Box::new),
                    ..inputs.unwrap_or_default()
                }))
            }
        },
        phase: s.phase,
        // A finished task's timeline is stored; a live one's is not: what
        // happened before is unknown here.
        timeline: match &s.timeline {
            Some(marks) => super::timeline::Timeline::from_stored(marks)?,
            None => super::timeline::Timeline::unrecorded(),
        },
        touch_epoch: 0,
    };
    rec.set_ttl_ms(s.ttl_ms);
    rec.set_poll_interval_ms(s.poll_interval_ms);
    Ok(rec)
}

/// Why a stored tree cannot be restored. Nothing is repaired: the operator
/// sees which tree and task are wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreError {
    /// The tree.
    pub root: TaskId,
    /// The task the problem was found on, when it is one task's.
    pub task: Option<TaskId>,
    /// What is wrong.
    pub detail: String,
}

impl std::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.task {
            Some(t) => write!(f, "tree {}: task {t}: {}", self.root, self.detail),
            None => write!(f, "tree {}: {}", self.root, self.detail),
        }
    }
}

impl std::error::Error for RestoreError {}

/// What [`Forest::recover_after_restart`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Tasks whose handler was lost and which now fail (or are cancelled,
    /// when a cancel was already under way), children first.
    pub failed: Vec<TaskId>,
    /// The root, when its handler is to run again (a resumable tool).
    pub rerun: Option<TaskId>,
    /// Interrupted tasks below it that wait for their parent's re-run to
    /// spawn them again (parents first).
    pub awaiting: Vec<TaskId>,
}

/// The error of a task whose handler was running when the server stopped.
pub fn restart_error() -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        "the server restarted while this task was running; its work was lost",
    )
    .with_data(serde_json::json!({ "reason": "server_restarted" }))
}

impl Forest {
    /// Rebuilds one tree from its stored records: children in their stored
    /// order, depths, live-children counts and armed timers; then checks
    /// every structural invariant.
    ///
    /// # Errors
    ///
    /// A missing or duplicated root, a task of another tree, a parent that
    /// does not resolve, a gap or clash in a parent's child positions, a
    /// task not reachable from the root (a cycle), or any violated invariant.
    pub fn restore(
        config: impl Into<std::sync::Arc<ForestConfig>>,
        root: TaskId,
        records: Vec<TaskRecord>,
        now: Timestamp,
    ) -> Result<Forest, RestoreError> {
        let err = |task: Option<TaskId>, detail: String| RestoreError { root, task, detail };
        let mut forest = Forest::new(config);
        forest.now = now;
        let mut tasks: IdMap<TaskRecord> = IdMap::default();
        let mut latest = Timestamp::EPOCH;
        for rec in records {
            if rec.root != root {
                return Err(err(Some(rec.id), format!("belongs to tree {}", rec.root)));
            }
            match rec.parent() {
                None if rec.id != root => return Err(err(Some(rec.id), "a second root".into())),
                Some(_) if rec.id == root => return Err(err(Some(rec.id), "the root has a parent".into())),
                Some(p) if p == rec.id => return Err(err(Some(rec.id), "task is its own parent".into())),
                _ => {}
            }
            latest = latest.max(rec.last_updated_at);
            let id = rec.id;
            if tasks.insert(id, rec).is_some() {
                return Err(err(Some(id), "stored twice".into()));
            }
        }
        if !tasks.contains_key(&root) {
            return Err(err(None, "the root task is missing".into()));
        }
        // Children by parent, in stored position order; positions must be 0..n.
        let mut children: IdMap<Vec<(u32, TaskId)>> = IdMap::default();
        for rec in tasks.values() {
            if let Some(p) = rec.parent() {
                if !tasks.contains_key(&p) {
                    return Err(err(Some(rec.id), format!("parent {p} does not exist")));
                }
                children.entry(p).or_default().push((rec.position, rec.id));
            }
        }
        for (parent, kids) in &mut children {
            kids.sort_unstable();
            for (i, (pos, id)) in kids.iter().enumerate() {
                if *pos as usize != i {
                    return Err(err(
                        Some(*id),
                        format!("position {pos} under {parent} leaves a gap or clashes (expected {i})"),
                    ));
                }
            }
        }
        // Slots in breadth-first order from the root (parents before their
        // children, siblings in creation order); every task must be reached
        // exactly once.
        let mut order: Vec<TaskId> = vec![root];
        let mut slot_of: IdMap<Slot> = IdMap::default();
        slot_of.insert(root, Slot(0));
        let mut next = 0;
        while next < order.len() && order.len() <= tasks.len() {
            let id = order[next];
            next += 1;
            for &(_, c) in children.get(&id).into_iter().flatten() {
                if slot_of.insert(c, Slot(order.len() as u32)).is_some() {
                    // Reached twice: a cycle; reported below.
                    continue;
                }
                order.push(c);
            }
        }
        if order.len() != tasks.len() {
            // Name the stray tasks (a cycle or a detached subtree).
            let mut stray: Vec<TaskId> = tasks
                .keys()
                .filter(|id| !slot_of.contains_key(id))
                .copied()
                .collect();
            stray.sort_unstable();
            let shown: Vec<String> = stray.iter().take(10).map(ToString::to_string).collect();
            return Err(err(
                stray.first().copied(),
                format!(
                    "{} of {} tasks are not reachable from the root (a cycle): {}{}",
                    stray.len(),
                    tasks.len(),
                    shown.join(", "),
                    if stray.len() > shown.len() { ", ..." } else { "" }
                ),
            ));
        }
        let mut table = TaskTable::default();
        for id in &order {
            let mut rec = tasks.remove(id).expect("ordered ids exist");
            let (depth, parent_slot) = match rec.parent() {
                Some(p) => {
                    let ps = slot_of[&p];
                    (table[ps].depth + 1, ps)
                }
                None => (0, slot_of[id]),
            };
            rec.depth = depth;
            rec.parent_slot = parent_slot;
            let kids: Vec<Child> = children
                .get(id)
                .into_iter()
                .flatten()
                .map(|&(_, c)| Child {
                    id: c,
                    slot: slot_of[&c],
                })
                .collect();
            if !kids.is_empty() {
                rec.rare_mut().children = kids;
            }
            rec.live_children = 0;
            let slot = table.insert(rec);
            debug_assert_eq!(slot, slot_of[id]);
        }
        // Live children, counted once every record is in place.
        for i in 0..order.len() {
            let slot = Slot(i as u32);
            let live = table[slot]
                .child_list()
                .iter()
                .filter(|c| !table[c.slot].is_terminal())
                .count() as u32;
            table[slot].live_children = live;
        }
        forest.tasks = table;
        forest.now = forest.now.max(latest);
        for i in 0..order.len() {
            forest.sync_expiry_timer(Slot(i as u32));
        }
        forest.sync_delete_timer(Slot(0));
        forest
            .check_invariants()
            .map_err(|v| err(Some(v.task), v.to_string()))?;
        Ok(forest)
    }

    /// After a restart, no handler of this tree is running any more. Every
    /// task whose handler was running or queued becomes `failed` with
    /// [`restart_error`] (or `cancelled` when a cancel was under way),
    /// children first, through the ordinary settling rules; tasks whose
    /// handler had already returned complete once their children are
    /// terminal. When `rerun_root` is set (the tool declared itself
    /// resumable) and the root's handler had not finished, the root is
    /// queued again with its persisted state (pause, queued steers, input
    /// requests and answers) instead; its old subtasks still fail, and
    /// because they failed only by the restart, their fail-fast policy does
    /// not fail the re-running root.
    pub fn recover_after_restart(&mut self, now: Timestamp, root: TaskId, rerun_root: bool) -> Recovery {
        let mut out = Recovery::default();
        let Some(rec) = self.tasks.get(&root) else {
            return out;
        };
        if rec.is_terminal() {
            return out;
        }
        let rerun = rerun_root
            && rec
                .active()
                .is_some_and(|a| a.ending().is_none() && !matches!(a.handler, HandlerState::Exited(_)));
        let root_slot = self.tasks.slot_of(&root).expect("found above");
        self.begin(now);
        let order = self.live_subtree_post_order(root_slot);
        // Which tasks run again: the root of a resumable tool, and (parents
        // first: the reverse of the post-order) every interrupted task
        // spawned in the journal of a task that runs again. Its parent's
        // re-run spawns it again at its position (`Forest::claim`).
        let mut again = vec![false; self.tasks.next_slot().index()];
        if rerun {
            again[root_slot.index()] = true;
            for &t in order.iter().rev() {
                let rec = &self.tasks[t];
                if t == root_slot || !again[rec.parent_slot.index()] {
                    continue;
                }
                let marked = rec.journal().is_some_and(|j| j.spawned.is_some());
                again[t.index()] = marked
                    && rec.active().is_some_and(|a| {
                        a.ending().is_none() && !matches!(a.handler, HandlerState::Exited(_))
                    });
            }
            out.rerun = Some(root);
        }
        for &t in order.iter().rev() {
            if !again[t.index()] {
                continue;
            }
            let rec = self.rec_mut_at(t);
            rec.set_message(Some(if t == root_slot {
                "the server restarted: the handler runs again".into()
            } else {
                "the server restarted: waiting for its parent's handler to spawn it again".into()
            }));
            if t != root_slot {
                rec.journal_mut().awaiting = true;
                out.awaiting.push(rec.id);
            }
            // Unanswered requests are withdrawn and every key without an
            // answer is freed (one the first run withdrew too): the re-run
            // asks again when it gets there. Answers stay, and are handed
            // back when it asks their keys.
            if let Some(book) = rec.inputs.as_mut() {
                book.outstanding.clear();
                let answered = &book.answered;
                book.used.retain(|k| answered.contains_key(k));
            }
            if let Some(a) = rec.active_mut() {
                a.handler = HandlerState::Queued;
                a.waits = 0;
                match a.pause().clone() {
                    PauseState::Pending { via } => {
                        a.set_pause(PauseState::Paused {
                            via,
                            prior: crate::model::TaskStatus::Working,
                            reason: None,
                        });
                    }
                    PauseState::Paused { via, reason, .. } => a.set_pause(PauseState::Paused {
                        via,
                        prior: crate::model::TaskStatus::Working,
                        reason,
                    }),
                    PauseState::Unpaused => {}
                }
            }
        }
        let error = std::sync::Arc::new(restart_error());
        for &t in &order {
            if again[t.index()] {
                continue;
            }
            let rec = self.rec_mut_at(t);
            let id = rec.id;
            let Some(a) = rec.active_mut() else { continue };
            if matches!(a.handler, HandlerState::Exited(_)) {
                continue;
            }
            a.handler = HandlerState::Exited(Box::new(HandlerOutcome::Aborted));
            a.waits = 0;
            a.set_pause(PauseState::Unpaused);
            if a.ending().is_none() {
                a.set_ending(Some(Ending::Failing { error: error.clone() }));
            }
            rec.clear_outstanding();
            rec.clear_steers();
            out.failed.push(id);
        }
        for &t in &order {
            self.try_settle(t);
        }
        self.end();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{ChildOptions, ClientView, RootOptions};
    use crate::model::{JsonObject, TaskStatus};

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(1_000_000 + ms)
    }

    fn roundtrip(forest: &Forest, root: TaskId) -> Result<Forest, RestoreError> {
        let records = forest
            .result_order(root)
            .into_iter()
            .map(|id| {
                let r = forest.task(id).unwrap();
                decode_state(r.id, r.root, r.parent(), r.position, &encode_state(r)).unwrap()
            })
            .collect();
        Forest::restore(*forest.config(), root, records, forest.now())
    }

    fn tree() -> (Forest, TaskId, TaskId, TaskId) {
        let mut f = Forest::default();
        let root = f
            .create_root(
                t(0),
                RootOptions {
                    ttl_ms: Some(60_000),
                    poll_interval_ms: Some(500),
                },
            )
            .unwrap();
        f.start(t(0), root).unwrap();
        let a = f.create_child(t(1), root, ChildOptions::default()).unwrap();
        f.start(t(1), a).unwrap();
        let b = f
            .create_child(
                t(2),
                root,
                ChildOptions {
                    fail_fast: true,
                    ..ChildOptions::default()
                },
            )
            .unwrap();
        f.start(t(2), b).unwrap();
        f.request_input(t(3), a, "q".into(), JsonObject::new()).unwrap();
        f.steer(t(4), b, "focus".into()).unwrap();
        (f, root, a, b)
    }

    #[test]
    fn a_tree_round_trips_with_every_snapshot_equal() {
        let (mut f, root, a, b) = tree();
        f.finish(t(5), b, HandlerOutcome::Returned(JsonObject::new()))
            .unwrap();
        let g = roundtrip(&f, root).unwrap();
        for id in [root, a, b] {
            assert_eq!(
                g.snapshot(id, ClientView::PAUSE_AWARE),
                f.snapshot(id, ClientView::PAUSE_AWARE)
            );
            assert_eq!(g.task(id).unwrap().phase(), f.task(id).unwrap().phase());
            assert_eq!(
                g.task(id).unwrap().queued_steers(),
                f.task(id).unwrap().queued_steers()
            );
        }
        assert_eq!(g.next_deadline(), f.next_deadline());
        g.check_invariants().unwrap();
    }

    #[test]
    fn restart_fails_running_tasks_children_first() {
        let (f, root, a, b) = tree();
        let mut g = roundtrip(&f, root).unwrap();
        let rec = g.recover_after_restart(t(10), root, false);
        assert_eq!(rec.rerun, None);
        assert_eq!(rec.failed, vec![a, b, root]);
        for id in [a, b, root] {
            assert_eq!(g.task(id).unwrap().status(), TaskStatus::Failed);
        }
        let changed: Vec<TaskId> = g
            .drain_effects()
            .filter_map(|e| match e {
                crate::core::Effect::Changed { id, to, .. } if to.is_terminal() => Some(id),
                _ => None,
            })
            .collect();
        assert_eq!(changed.last(), Some(&root), "the root settles last (I6)");
        g.check_invariants().unwrap();
    }

    #[test]
    fn a_resumable_root_is_queued_again_and_not_failed_by_its_fail_fast_child() {
        let (f, root, a, b) = tree();
        let mut g = roundtrip(&f, root).unwrap();
        let rec = g.recover_after_restart(t(10), root, true);
        assert_eq!(rec.rerun, Some(root));
        assert_eq!(rec.failed, vec![a, b]);
        let r = g.task(root).unwrap();
        assert_eq!(r.status(), TaskStatus::Working);
        assert_eq!(r.active().unwrap().handler, HandlerState::Queued);
        assert!(r.active().unwrap().ending().is_none());
        g.check_invariants().unwrap();
        g.start(t(11), root).unwrap();
        g.finish(t(12), root, HandlerOutcome::Returned(JsonObject::new()))
            .unwrap();
        assert_eq!(g.task(root).unwrap().status(), TaskStatus::Completed);
    }

    #[test]
    fn a_parent_whose_handler_returned_completes_after_recovery() {
        let (mut f, root, a, b) = tree();
        f.finish(t(5), root, HandlerOutcome::Returned(JsonObject::new()))
            .unwrap();
        let mut g = roundtrip(&f, root).unwrap();
        let rec = g.recover_after_restart(t(10), root, true);
        assert_eq!(rec.rerun, None, "a finished handler is not run again");
        assert_eq!(g.task(a).unwrap().status(), TaskStatus::Failed);
        assert_eq!(g.task(b).unwrap().status(), TaskStatus::Failed);
        // b was fail-fast: its failure fails the parent, as it would have.
        assert_eq!(g.task(root).unwrap().status(), TaskStatus::Failed);
        g.check_invariants().unwrap();
    }

    #[test]
    fn broken_trees_are_refused_not_repaired() {
        let (f, root, a, b) = tree();
        let rec = |id: TaskId| {
            let r = f.task(id).unwrap();
            decode_state(r.id, r.root, r.parent(), r.position, &encode_state(r)).unwrap()
        };
        let now = f.now();
        let cfg = *f.config();
        // Missing root.
        let e = Forest::restore(cfg, root, vec![rec(a), rec(b)], now).unwrap_err();
        assert!(e.detail.contains("root"), "{e}");
        // A gap in positions.
        let mut gap = rec(b);
        gap.position = 5;
        let e = Forest::restore(cfg, root, vec![rec(root), rec(a), gap], now).unwrap_err();
        assert!(e.detail.contains("gap"), "{e}");
        // A cycle: a is its own grandparent through b.
        let mut ca = rec(a);
        ca.parent_id = b;
        let mut cb = rec(b);
        cb.parent_id = a;
        cb.position = 0;
        let e = Forest::restore(cfg, root, vec![rec(root), ca, cb], now).unwrap_err();
        assert!(e.detail.contains("not reachable"), "{e}");
        // A terminal parent with a live child (I4).
        let mut done = rec(root);
        done.phase = Phase::Terminal(crate::core::Terminal::Cancelled { reason: "x".into() });
        let e = Forest::restore(cfg, root, vec![done, rec(a), rec(b)], now).unwrap_err();
        assert!(e.detail.contains("I4") || e.detail.contains("I6"), "{e}");
        // Unknown fields (a newer format) are not guessed at.
        let r = f.task(a).unwrap();
        let newer = encode_state(r).replacen('{', "{\"future\":1,", 1);
        assert!(decode_state(a, root, Some(root), 0, &newer).is_err());
    }
}

#[cfg(test)]
mod size {
    #[test]
    fn a_record_stays_within_288_bytes() {
        // The child position lives in padding: persistence costs no memory
        // per task (the engine benchmark's bytes_per_task depends on it).
        // The timeline (`timeline.rs`) is 16 of these bytes: active and
        // terminal tasks alike keep it, so it is not in the boxed `Active`.
        assert!(std::mem::size_of::<crate::core::TaskRecord>() <= 288);
    }
}
