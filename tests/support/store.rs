//! The store the in-process server tests run on, chosen by
//! `SUBTASK_TEST_STORE`: `memory` (unset: the default), `sqlite` (a file in
//! a fresh temporary directory) or `postgres` (a fresh database on the test
//! run's server, `scripts/pg.sh`). `scripts/test.sh` runs the server tests
//! once more with `postgres`, so every request path also waits for a real
//! database's acknowledgement.

#![allow(dead_code)]

use std::sync::Arc;

use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::store::TaskStore;

/// A runtime with `config` on the chosen store.
///
/// # Panics
///
/// An unknown `SUBTASK_TEST_STORE`, or a store that cannot be opened.
pub fn runtime(config: RuntimeConfig) -> Runtime {
    let kind = std::env::var("SUBTASK_TEST_STORE").unwrap_or_else(|_| "memory".to_owned());
    let store: Arc<dyn TaskStore> = match kind.as_str() {
        "memory" => return Runtime::new(config),
        "sqlite" => {
            let dir = super::tempdir::TempDir::new("server-store");
            let path = dir.db();
            // The directory outlives the test process's use of it.
            std::mem::forget(dir);
            Arc::new(
                subtask::store::SqliteStore::open(subtask::store::SqliteConfig::new(path))
                    .expect("open SQLite"),
            )
        }
        "postgres" => {
            let url = super::pg::fresh_database();
            Arc::new(
                subtask::store::PostgresStore::open(subtask::store::PostgresConfig::new(url))
                    .expect("open PostgreSQL"),
            )
        }
        other => panic!("SUBTASK_TEST_STORE={other:?}: expected memory, sqlite or postgres"),
    };
    Runtime::with_store(config, store)
}
