//! Shared helpers for the end-to-end tests.
pub mod http;
pub mod process;
