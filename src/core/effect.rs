//! What the core asks its driver to do, drained with `Forest::poll_effect`.

use super::table::Slot;
use crate::model::{JsonObject, TaskId, TaskStatus, Timestamp};

/// An effect of a command, in the order it happened.
///
/// The core changes its own state synchronously; effects tell the driver
/// (the runtime) what to wake, cancel, persist, notify or schedule.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Effect {
    /// A task was created (a root, or a subtask under `parent`).
    Created {
        /// The new task.
        id: TaskId,
        /// Its slot in the forest ([`Forest::task_at`](super::Forest::task_at)).
        slot: Slot,
        /// Its parent, if a subtask.
        parent: Option<TaskId>,
    },
    /// The task's record changed during the last command (emitted once per
    /// command and task): wake what waits on it and, with a store, write the
    /// record as it is now. `from == to` means a non-status change: status
    /// message, children, input requests, TTL.
    Changed {
        /// The task.
        id: TaskId,
        /// Its slot in the forest ([`Forest::task_at`](super::Forest::task_at)).
        slot: Slot,
        /// Wire status before the command.
        from: TaskStatus,
        /// Wire status after the command.
        to: TaskStatus,
    },
    /// A steer message was queued; a handler waiting for steers may take it.
    SteerQueued {
        /// The task.
        id: TaskId,
        /// Its slot in the forest ([`Forest::task_at`](super::Forest::task_at)).
        slot: Slot,
    },
    /// A client answered an outstanding input request: deliver it to the handler.
    InputAnswered {
        /// The task.
        id: TaskId,
        /// Its slot in the forest ([`Forest::task_at`](super::Forest::task_at)).
        slot: Slot,
        /// The request key.
        key: String,
        /// The client's response.
        response: JsonObject,
    },
    /// A parked or queued handler may continue (the task was resumed).
    WakeHandler {
        /// The task.
        id: TaskId,
        /// Its slot in the forest ([`Forest::task_at`](super::Forest::task_at)).
        slot: Slot,
    },
    /// The handler should stop: a cancel was accepted or a failure decided.
    CancelHandler {
        /// The task.
        id: TaskId,
        /// Its slot in the forest ([`Forest::task_at`](super::Forest::task_at)).
        slot: Slot,
    },
    /// A timer was armed earlier than any other armed timer: call
    /// `Forest::handle_timeout` at `at`.
    ArmTimer {
        /// When.
        at: Timestamp,
    },
    /// A durable task's handler did something its journal keeps (a step's
    /// output, steers it took, a patch marker): append it to the task's
    /// journal in the store. The record itself is not written for it.
    Journaled {
        /// The task.
        id: TaskId,
        /// Its slot in the forest ([`Forest::task_at`](super::Forest::task_at)).
        slot: Slot,
        /// The entry's place in the task's journal (0, 1, 2...).
        n: u32,
        /// The entry.
        entry: super::journal::Entry,
    },
    /// A whole tree was deleted (after its TTL and grace, or on request).
    TreeDeleted {
        /// The root.
        root: TaskId,
        /// Every task of the tree, children before parents.
        ids: Vec<TaskId>,
    },
}
