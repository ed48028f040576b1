//! Shared helpers for the end-to-end tests. A test target includes them
//! with `mod support;`; each part is there when the features it needs are.
#[cfg(feature = "server")]
pub mod http;
#[cfg(feature = "postgres")]
pub mod pg;
#[cfg(feature = "postgres")]
pub mod pg_server;
#[cfg(feature = "cli")]
pub mod process;
#[allow(dead_code)]
pub mod redone;
pub mod seed;
#[cfg(feature = "cli")]
pub mod store;
#[cfg(feature = "cli")]
pub mod tempdir;
