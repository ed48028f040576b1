//! The journal of a durable task: what its handler did, in order, so that
//! a re-run after a stop replays it instead of doing it again.
//!
//! A task's handler runs code the runtime cannot save (a future). What it
//! can save is what the handler *did* through its context, each act under
//! a sequence number taken when the act begins:
//!
//! - a **spawn** is the child itself (its position among the parent's
//!   children), marked on the child's record with the sequence number and
//!   what was spawned ([`SpawnMark`]): no write beyond the child's creation;
//! - a **step** ([`Entry::Step`]): a named piece of side-effecting work and
//!   its JSON output, on the task's own record once the work finished;
//! - **steers consumed at a checkpoint** ([`Entry::Steers`]);
//! - a **patch marker** ([`Entry::Patch`]): the code took a new path here
//!   (see `docs/durability.md`, "Changing a tool's code").
//!
//! Steers taken from the stream of steers are kept apart, in order
//! ([`Entry::Streamed`]): a stream runs beside the handler's code, not in
//! its order. Input answers need no entry: they are kept by key in the
//! input book.
//!
//! Entries are *appended*: each is one row of the store's journal
//! ([`Effect::Journaled`](super::Effect::Journaled)), written with the
//! command's other writes, and the task's record is not rewritten for it,
//! so a step costs the same however many came before. The record keeps
//! only the spawn mark, the waiting flag and how many entries were
//! appended; a tree loaded from a store gets its entries back from the
//! rows (they are not part of the record's state).
//!
//! A re-run reads the merged journal (the task's entries and its children's
//! marks, by sequence number) and matches each act against it; the core
//! only keeps and stores it. Entries are dropped once the task is terminal
//! (nothing re-runs a terminal task); a child's mark stays, since its
//! parent's re-run checks it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::TransitionError;
use super::forest::Forest;
use super::record::{HandlerOutcome, HandlerState, Phase, TaskRecord};
use crate::model::{ErrorCode, ErrorObject, TaskId, Timestamp};

/// What a child was spawned as, on the child's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnMark {
    /// The act's sequence number in the parent's journal.
    pub seq: u32,
    /// What was spawned: the name the handler gave it (`SubtaskOptions::named`),
    /// with the digest of its arguments when it gave them; empty when unnamed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub what: String,
}

/// One recorded act of a task's handler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Entry {
    /// A step that finished, with its output.
    Step {
        /// The act's sequence number.
        seq: u32,
        /// The step's name.
        name: String,
        /// What it returned.
        output: Value,
    },
    /// Steer messages a checkpoint returned.
    Steers {
        /// The act's sequence number.
        seq: u32,
        /// The messages, oldest first.
        messages: Vec<String>,
    },
    /// The code took the patched path here.
    Patch {
        /// The act's sequence number.
        seq: u32,
        /// The patch's name.
        id: String,
    },
    /// Steer messages the stream of steers took (no act: in stream order).
    Streamed {
        /// The messages, oldest first.
        messages: Vec<String>,
    },
}

impl Entry {
    /// The act's sequence number (`None` for streamed steers).
    pub fn seq(&self) -> Option<u32> {
        match self {
            Entry::Step { seq, .. } | Entry::Steers { seq, .. } | Entry::Patch { seq, .. } => Some(*seq),
            Entry::Streamed { .. } => None,
        }
    }
}

/// A task's journal (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// How the parent spawned this task (set on creation in a durable tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned: Option<SpawnMark>,
    /// The entries loaded from the store (for a re-run), in the order they
    /// were appended. Not part of the record's state: they are the store's
    /// journal rows (see the module documentation).
    #[serde(default, skip_serializing)]
    pub entries: Vec<Entry>,
    /// How many entries the task appended so far (the next one's place).
    #[serde(default, skip_serializing)]
    pub appended: u32,
    /// The task's handler was interrupted by a stop and waits for its
    /// parent's re-run to spawn it again ([`Forest::claim`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting: bool,
}

impl Journal {
    fn is_empty(&self) -> bool {
        self.spawned.is_none() && self.entries.is_empty() && !self.awaiting
    }
}

/// One act of a re-run's merged journal.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// A child spawned at `position`, as `what`.
    Spawn {
        /// The child's position among the task's children.
        position: u32,
        /// The child.
        id: TaskId,
        /// What it was spawned as.
        what: String,
    },
    /// See [`Entry::Step`].
    Step {
        /// The step's name.
        name: String,
        /// Its output.
        output: Value,
    },
    /// See [`Entry::Steers`].
    Steers(Vec<String>),
    /// See [`Entry::Patch`].
    Patch(String),
}

impl Recorded {
    /// How the act reads in a divergence error.
    pub fn describe(&self) -> String {
        match self {
            Recorded::Spawn { what, .. } => describe_spawn(what),
            Recorded::Step { name, .. } => format!("step {name:?}"),
            Recorded::Steers(m) => format!("a checkpoint that took {} steer message(s)", m.len()),
            Recorded::Patch(id) => format!("patch marker {id:?}"),
        }
    }
}

/// How a spawn spawned as `what` reads in a divergence error.
pub fn describe_spawn(what: &str) -> String {
    if what.is_empty() {
        "a spawn (unnamed)".to_owned()
    } else {
        format!("a spawn of {what:?}")
    }
}

/// The error of a task whose re-run did not do what its journal recorded.
pub fn divergence_error(seq: u32, recorded: &str, now: &str) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        format!(
            "the re-run of this task diverged from its journal at position {seq}: \
             the first run did {recorded}, the re-run does {now}; \
             the tool's code changed under a running tree (see \"Changing a tool's code\" in docs/durability.md)"
        ),
    )
    .with_data(serde_json::json!({
        "reason": "divergence",
        "position": seq,
        "recorded": recorded,
        "rerun": now,
    }))
}

impl Forest {
    /// The merged journal of `id` for a re-run: its entries and its
    /// children's spawn marks by sequence number, and the steers its
    /// stream had taken. Empty for a task that recorded nothing.
    pub fn replay_of(&self, id: TaskId) -> (BTreeMap<u32, Recorded>, Vec<String>) {
        let mut acts = BTreeMap::new();
        let Some(rec) = self.task(id) else {
            return (acts, Vec::new());
        };
        let mut streamed = Vec::new();
        if let Some(j) = rec.journal() {
            for e in &j.entries {
                let (seq, act) = match e {
                    Entry::Step { seq, name, output } => (
                        *seq,
                        Recorded::Step {
                            name: name.clone(),
                            output: output.clone(),
                        },
                    ),
                    Entry::Steers { seq, messages } => (*seq, Recorded::Steers(messages.clone())),
                    Entry::Patch { seq, id } => (*seq, Recorded::Patch(id.clone())),
                    Entry::Streamed { messages } => {
                        streamed.extend(messages.iter().cloned());
                        continue;
                    }
                };
                acts.insert(seq, act);
            }
        }
        for (position, child) in rec.child_list().iter().enumerate() {
            let Some(mark) = self.tasks[child.slot].journal().and_then(|j| j.spawned.as_ref()) else {
                continue;
            };
            acts.insert(
                mark.seq,
                Recorded::Spawn {
                    position: position as u32,
                    id: child.id,
                    what: mark.what.clone(),
                },
            );
        }
        (acts, streamed)
    }

    /// Records an act of the running handler of `id` (a step's output, a
    /// patch marker): appended to its journal in the store
    /// ([`Effect::Journaled`](super::Effect::Journaled)); the record is not
    /// written for it.
    ///
    /// # Errors
    ///
    /// `NotStarted`/`HandlerFinished`/`Terminal`/`UnknownTask`.
    pub fn record_entry(&mut self, now: Timestamp, id: TaskId, entry: Entry) -> Result<(), TransitionError> {
        let (slot, _, a) = self.active_slot(id)?;
        if a.handler != HandlerState::Running {
            return Err(match a.handler {
                HandlerState::Queued => TransitionError::NotStarted(id),
                _ => TransitionError::HandlerFinished(id),
            });
        }
        let _ = now;
        self.append(slot, entry);
        Ok(())
    }

    /// Appends `entry` to the journal of the task in `slot` (an effect; no
    /// record write).
    fn append(&mut self, slot: super::table::Slot, entry: Entry) {
        let Some(rec) = self.tasks.at_mut(slot) else {
            return;
        };
        let id = rec.id;
        let j = rec.journal_mut();
        let n = j.appended;
        j.appended += 1;
        self.emit(super::Effect::Journaled { id, slot, n, entry });
    }

    /// Sets the spawn mark of a child just created (in the same command
    /// round as its creation, so both land in one write).
    pub(crate) fn mark_spawned(&mut self, id: TaskId, mark: SpawnMark) {
        if let Some(slot) = self.tasks.slot_of(&id) {
            let rec = self.tasks.at_mut(slot).expect("found above");
            rec.journal_mut().spawned = Some(mark);
        }
    }

    /// Records steers the handler of `id` took: at a checkpoint under
    /// `seq`, or from its stream (`seq` is `None`). Part of the command
    /// that took them.
    pub(crate) fn journal_steers(&mut self, id: TaskId, seq: Option<u32>, messages: &[String]) {
        if messages.is_empty() {
            return;
        }
        let Some(slot) = self.tasks.slot_of(&id) else {
            return;
        };
        let messages = messages.to_vec();
        let entry = match seq {
            Some(seq) => Entry::Steers { seq, messages },
            None => Entry::Streamed { messages },
        };
        self.append(slot, entry);
    }

    /// The re-run handler of `id` finished: every child still waiting to
    /// be run again (the re-run no longer spawns it) fails with a
    /// divergence error, its subtree cancelled. Returns how many failed.
    pub fn fail_unclaimed(&mut self, now: Timestamp, id: TaskId) -> usize {
        let Some(rec) = self.task(id) else { return 0 };
        let orphans: Vec<(usize, super::table::Slot)> = rec
            .child_list()
            .iter()
            .enumerate()
            .filter(|(_, c)| is_awaiting(&self.tasks[c.slot]))
            .map(|(i, c)| (i, c.slot))
            .collect();
        if orphans.is_empty() {
            return 0;
        }
        self.begin(now);
        for &(position, slot) in &orphans {
            let seq = self.tasks[slot]
                .journal()
                .and_then(|j| j.spawned.as_ref())
                .map_or(position as u32, |m| m.seq);
            let what = self.tasks[slot]
                .journal()
                .and_then(|j| j.spawned.as_ref())
                .map(|m| Recorded::Spawn {
                    position: position as u32,
                    id: self.tasks[slot].id,
                    what: m.what.clone(),
                })
                .map_or_else(|| "a spawn".to_owned(), |r| r.describe());
            let error = divergence_error(seq, &what, "no such act (its handler returned first)");
            if let Some(a) = self.rec_mut_at(slot).active_mut() {
                a.handler = HandlerState::Exited(Box::new(HandlerOutcome::Aborted));
            }
            self.fail_cancelling_below(slot, error, "its parent's re-run no longer spawns it".to_owned());
        }
        self.end();
        orphans.len()
    }

    /// Fails the task `id` with `error` (a re-run that diverged from its
    /// journal), its live descendants cancelled first.
    ///
    /// # Errors
    ///
    /// `UnknownTask` or `Terminal`.
    pub fn fail_diverged(
        &mut self,
        now: Timestamp,
        id: TaskId,
        error: ErrorObject,
    ) -> Result<(), TransitionError> {
        let (slot, _, a) = self.active_slot(id)?;
        if a.ending().is_some() {
            return Ok(());
        }
        self.begin(now);
        self.fail_cancelling_below(
            slot,
            error,
            "its parent's re-run diverged from its journal".to_owned(),
        );
        self.end();
        Ok(())
    }

    /// Drops a terminal task's entries (nothing re-runs it); keeps its
    /// spawn mark, which its parent's re-run checks.
    pub(crate) fn trim_journal(rec: &mut super::record::TaskRecord) {
        if let Some(j) = rec.inputs.as_mut().and_then(|b| b.journal.as_deref_mut()) {
            j.entries = Vec::new();
        }
        if rec.journal().is_some_and(Journal::is_empty) {
            rec.clear_journal();
        }
    }
}

/// Whether the task waits for its parent's re-run to spawn it again.
pub(crate) fn is_awaiting(rec: &TaskRecord) -> bool {
    rec.journal().is_some_and(|j| j.awaiting)
        && matches!(&rec.phase, Phase::Active(a) if a.ending().is_none() && a.handler == HandlerState::Queued)
}

impl Forest {
    /// The re-run of `id`'s parent spawned it again: it no longer waits
    /// (its handler is queued to run with the body the parent passed).
    /// Returns whether it was waiting.
    pub fn claim(&mut self, now: Timestamp, id: TaskId) -> bool {
        if !self.task(id).is_some_and(is_awaiting) {
            return false;
        }
        self.begin(now);
        let rec = self.rec_mut(id);
        if let Some(j) = rec.inputs.as_mut().and_then(|b| b.journal.as_deref_mut()) {
            j.awaiting = false;
        }
        rec.set_message(None);
        self.end();
        true
    }
}
