//! The PostgreSQL server of a test run (`scripts/pg.sh` starts it and sets
//! `SUBTASK_TEST_PG`; `scripts/test.sh` runs every test under it).
//!
//! A test that needs PostgreSQL and finds no server fails with a message
//! saying how to start one: it never skips.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

/// The URL of the test server's maintenance database.
///
/// # Panics
///
/// When `SUBTASK_TEST_PG` is not set.
pub fn server_url() -> String {
    std::env::var("SUBTASK_TEST_PG").unwrap_or_else(|_| {
        panic!(
            "SUBTASK_TEST_PG is not set: this test needs a PostgreSQL server. \
             Run it under `scripts/pg.sh` (e.g. `scripts/pg.sh cargo test --all-features`); \
             `scripts/test.sh` does."
        )
    })
}

/// A new, empty database on the test server; its URL.
///
/// # Panics
///
/// When there is no server or it refuses.
pub fn fresh_database() -> String {
    // The synchronous client starts a runtime of its own, which cannot
    // happen on a tokio thread: do it on a thread of its own.
    std::thread::spawn(create_database)
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn create_database() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let base = server_url();
    let name = format!(
        "t_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let mut client = postgres::Client::connect(&base, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {base}: {e}"));
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    let (prefix, _) = base.rsplit_once('/').expect("a URL with a database");
    format!("{prefix}/{name}")
}
