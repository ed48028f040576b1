//! The task forest and its lifecycle, sans-IO.
//!
//! Commands go in (`create_root`, `create_child`, `await_dependencies`,
//! `start`, `request_input`, `answer_input`, `steer`, `take_steers`,
//! `pause`, `pause_self`, `reach_safe_point`, `resume`, `cancel`, `finish`,
//! `set_ttl`, `handle_timeout`, `delete_tree`), each with the current time; effects come
//! out through [`Forest::poll_effect`] and the next deadline through
//! [`Forest::next_deadline`]. No tokio, no locks, no clock reads, no I/O.
//!
//! Each task also keeps its timeline (`timeline.rs`): the stages it went
//! through, marked where a command ends, at that command's time.
//!
//! The lifecycle table, the invariants I1–I12 and the decisions it enforces
//! are in `docs/lifecycle.md`.

mod config;
mod effect;
mod error;
mod forest;
mod inputs;
mod invariants;
mod journal;
mod lifecycle;
mod order;
mod persist;
mod record;
mod table;
#[cfg(test)]
mod tests;
mod timeline;

/// Re-exported from [`model`](crate::model), where the runtime's API names them.
pub use crate::model::{CancelOutcome, ClientView, RootOptions};
pub use crate::model::{IdHasher, IdMap};
pub use config::{ForestConfig, Limits};
pub use effect::Effect;
pub use error::{Limit, TransitionError};
pub use forest::{ChildOptions, Forest};
pub use inputs::{PendingInputs, UsedKeys};
pub use invariants::InvariantViolation;
pub use journal::{Entry, Journal, Recorded, SpawnMark, describe_spawn, divergence_error};
pub use lifecycle::{PauseOutcome, SafePoint, expired_error};
pub use order::ResultCursor;
pub use persist::{Recovery, RestoreError, STATE_FORMAT, decode_state, encode_state, restart_error};
pub use record::{
    Active, Ending, HandlerOutcome, HandlerState, InputBook, PauseState, Phase, TaskRecord, Terminal,
};
pub use table::Slot;
pub use timeline::{Mark, Stage, TIMELINE_MARKS, Timeline};
