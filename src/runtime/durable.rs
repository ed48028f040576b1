//! Durable execution on the handler's side: the journal cursor of a
//! running handler, steps, patch markers, and how a re-run matches what
//! its handler does against what the first run recorded
//! (`core/journal.rs` keeps and stores the journal).
//!
//! Every act of a handler in a durable tree (a spawn, a step, a checkpoint
//! that took steers, a patch marker) takes the next sequence number when it
//! begins. On a re-run the act at a sequence number that was recorded is
//! replayed (a finished step returns its output, a spawn gets the stored
//! child) after checking it is the same act; an act past the recorded ones
//! runs live and is recorded. A number left without a record (a step that
//! was still running at the stop) is run live again when a step asks for
//! it; anything else there is a divergence.
//!
//! Lock order: the cursor is taken alone or under the tree lock, never the
//! tree lock under the cursor.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::context::{TaskContext, TaskError};
use super::error::RuntimeError;
use crate::core::{Entry, Recorded, divergence_error};

/// The log target of durable execution's debug lines: a handler starts
/// (`rerun` when it runs again after a stop), a step runs, is recorded
/// (durably) or is replayed. `RUST_LOG=info,subtask::journal=debug` shows
/// them; the crash tests count them.
pub const JOURNAL_TARGET: &str = "subtask::journal";

/// Where a running handler of a durable tree is in its journal.
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    /// The sequence number the next act takes.
    pub(crate) next: u32,
    /// Recorded acts not replayed yet, by sequence number.
    pub(crate) recorded: BTreeMap<u32, Recorded>,
    /// The highest recorded sequence number: below it the handler replays.
    last: Option<u32>,
    /// Steers the stream of steers had taken, handed out again first.
    pub(crate) streamed: VecDeque<String>,
}

/// A handler's cursor, shared by the clones of its context.
pub(crate) type JournalCursor = Arc<Mutex<Cursor>>;

impl Cursor {
    /// The cursor of a re-run over the merged journal of its task.
    pub(crate) fn replay((recorded, streamed): (BTreeMap<u32, Recorded>, Vec<String>)) -> Cursor {
        Cursor {
            next: 0,
            last: recorded.keys().next_back().copied(),
            recorded,
            streamed: streamed.into(),
        }
    }

    /// Whether the next act is among the recorded ones.
    pub(crate) fn replaying(&self) -> bool {
        self.last.is_some_and(|last| self.next <= last)
    }
}

/// What a spawn is checked against: the name and the digest of the
/// arguments a handler gave it.
pub(crate) fn spawn_identity(name: Option<&str>, args: Option<&str>) -> String {
    match (name, args) {
        (None, None) => String::new(),
        (Some(n), None) => n.to_owned(),
        (None, Some(a)) => a.to_owned(),
        (Some(n), Some(a)) => format!("{n} {a}"),
    }
}

/// A stable digest of a JSON value (64-bit FNV-1a over its text), for
/// telling arguments apart in a journal without storing them.
pub(crate) fn digest(value: &serde_json::Value) -> String {
    let text = value.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("args#{h:016x}")
}

impl TaskContext {
    /// Runs `work`, a piece of side-effecting work (a model call, a web
    /// request), as a durable **step** named `name`, and returns its output.
    ///
    /// In a durable tree (a resumable tool, or [`Runtime::spawn_resumable`](super::Runtime::spawn_resumable))
    /// the output is stored in the task's journal, durably, before this
    /// returns. When the handler runs again after a stop (a restart, a
    /// takeover, a drain), a step that had finished returns its stored
    /// output at once without running `work`; a step that was still
    /// running at the stop runs again (at least once for the step, exactly
    /// once as the tree sees it). Elsewhere it just runs `work`.
    ///
    /// Steps are matched by order: the re-run must call the same steps (by
    /// name) and spawn the same subtasks in the same order as the first
    /// run, or the task fails with a divergence error. A failure to keep is
    /// returned inside `T` (a `Result` serializes too) and replayed alike.
    ///
    /// ```no_run
    /// # async fn search(_: &str) -> Vec<String> { Vec::new() }
    /// # async fn handler(ctx: subtask::runtime::TaskContext) -> Result<(), subtask::runtime::TaskError> {
    /// let hits: Vec<String> = ctx.step("search", || ctx.external(search("rust mcp"))).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Diverged` when the recorded act at this place is another one (the
    /// task is failing); `Rejected` when the output cannot be stored (not
    /// JSON, or the store failed); `Interrupted` when the task ended.
    pub async fn step<T, F, Fut>(&self, name: &str, work: F) -> Result<T, TaskError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let Some(journal) = self.journal().cloned() else {
            return Ok(work().await);
        };
        // Before a step nothing is in flight: a drain stops the handler here.
        self.safe_point().await;
        let (seq, recorded) = {
            let mut c = journal.lock();
            let seq = c.next;
            c.next += 1;
            (seq, c.recorded.remove(&seq))
        };
        match recorded {
            Some(Recorded::Step { name: was, output }) if was == name => {
                tracing::debug!(target: JOURNAL_TARGET, task = %self.cell.id, seq, step = name, "step replayed");
                return serde_json::from_value(output).map_err(|e| {
                    self.diverge(
                        seq,
                        &format!("step {was:?}"),
                        &format!("step {name:?} whose stored output no longer reads as its type ({e})"),
                    )
                });
            }
            Some(other) => return Err(self.diverge(seq, &other.describe(), &format!("step {name:?}"))),
            None => {}
        }
        tracing::debug!(target: JOURNAL_TARGET, task = %self.cell.id, seq, step = name, "step runs");
        let value = work().await;
        let output = serde_json::to_value(&value)
            .map_err(|e| TaskError::Rejected(RuntimeError::Journal(e.to_string())))?;
        let entry = Entry::Step {
            seq,
            name: name.to_owned(),
            output,
        };
        self.inner.with_tree(&self.tree, |st, now, _| {
            st.forest.record_entry(now, self.cell.id, entry)
        })?;
        self.journal_durable().await?;
        tracing::debug!(target: JOURNAL_TARGET, task = %self.cell.id, seq, step = name, "step recorded");
        Ok(value)
    }

    /// Whether the handler takes the path of patch `id`: a way to change a
    /// resumable tool's code while trees of the old code still run
    /// (`docs/durability.md`, "Changing a tool's code").
    ///
    /// `true` in a first run (which records the marker) and in a re-run
    /// whose first run passed here with the new code; `false` in a re-run
    /// of a first run made by the old code, which did something else here:
    /// keep the old code on that branch until no such tree is left. Always
    /// `true` outside a durable tree.
    pub fn patched(&self, id: &str) -> bool {
        let Some(journal) = self.journal() else {
            return true;
        };
        let seq = {
            let mut c = journal.lock();
            let seq = c.next;
            match c.recorded.get(&seq) {
                Some(Recorded::Patch(p)) if p == id => {
                    c.recorded.remove(&seq);
                    c.next += 1;
                    return true;
                }
                Some(_) => return false,
                None if c.replaying() => return false,
                None => {
                    c.next += 1;
                    seq
                }
            }
        };
        let entry = Entry::Patch {
            seq,
            id: id.to_owned(),
        };
        // Lands before anything the handler records after it: no wait.
        let _ = self.inner.with_tree(&self.tree, |st, now, _| {
            st.forest.record_entry(now, self.cell.id, entry)
        });
        true
    }

    /// Fails the task with the divergence error of act `seq` and returns
    /// the error for the handler.
    pub(crate) fn diverge(&self, seq: u32, recorded: &str, now: &str) -> TaskError {
        let error = divergence_error(seq, recorded, now);
        tracing::error!(task = %self.cell.id, position = seq, recorded, rerun = now, "a re-run diverged from its journal");
        let _ = self.inner.with_tree(&self.tree, |st, now, _| {
            st.forest.fail_diverged(now, self.cell.id, error.clone())
        });
        TaskError::Diverged(error)
    }

    /// Resolves once everything the tree recorded so far is durable.
    async fn journal_durable(&self) -> Result<(), TaskError> {
        let Some(store) = &self.inner.store else {
            return Ok(());
        };
        let ticket = self.tree.state.lock().durable.ticket;
        let stored = match store.is_durable(ticket) {
            Ok(true) => Ok(()),
            Ok(false) => store.wait_durable(ticket).await,
            Err(e) => Err(e),
        };
        stored.map_err(|e| TaskError::Rejected(RuntimeError::Journal(e.to_string())))
    }
}
