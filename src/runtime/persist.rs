//! The effect→write mapping: what one command's effects on a tree ask the
//! store to write. The runtime owns it; the store stores what it is handed
//! and knows nothing of the core's records or effects.

use crate::core::{Effect, Forest, TaskRecord, encode_state};
use crate::store::{JournalRow, StoredTask, WriteOp};

/// The stored form of a task record as it is now (version 0: the store sets
/// the batch's version).
pub fn stored_task(rec: &TaskRecord) -> StoredTask {
    StoredTask {
        id: rec.id(),
        root: rec.root(),
        parent: rec.parent(),
        position: rec.position(),
        version: 0,
        state: encode_state(rec),
    }
}

/// The write an effect of `forest` asks for: `Changed` writes the record as
/// it is now (nothing when it is gone: its tree was deleted later in the
/// same command), `TreeDeleted` deletes the tree, `Journaled` appends a
/// journal row; other effects write nothing. (`PutTree` carries what only the caller knows: who started the
/// tree and how.)
pub fn write_for_effect(forest: &Forest, effect: &Effect) -> Option<WriteOp> {
    match effect {
        Effect::Changed { slot, .. } => forest.task_at(*slot).map(|r| WriteOp::PutTask(stored_task(r))),
        Effect::TreeDeleted { root, .. } => Some(WriteOp::DeleteTree(*root)),
        Effect::Journaled { id, n, entry, .. } => Some(WriteOp::AppendJournal(JournalRow {
            root: forest.task(*id).map_or(*id, TaskRecord::root),
            task: *id,
            n: *n,
            entry: serde_json::to_string(entry).expect("a journal entry serializes"),
        })),
        _ => None,
    }
}
