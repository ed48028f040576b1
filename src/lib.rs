//! # subtask
//!
//! A runtime and server for hierarchical, long-running work over the Model
//! Context Protocol Tasks extension: tasks with subtasks (SEP-2268), steering
//! and pause/resume (SEP-2669).
//!
//! * [`model`]: the wire types.
//! * [`core`]: the sans-IO task forest and its lifecycle state machine.
#![deny(missing_docs)]
#![deny(clippy::await_holding_lock)]

pub mod core;
pub mod model;
pub mod server;
pub mod runtime;
