//! The PostgreSQL server of a test run (`scripts/pg.sh` starts it and sets
//! `SUBTASK_TEST_PG`; `scripts/test.sh` runs every test under it).
//!
//! A test that needs PostgreSQL and finds no server fails with a message
//! saying how to start one: it never skips.

#![allow(dead_code)]

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    /// The names of the databases made on this thread, in order.
    static MADE: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// The names of the databases made on this thread so far.
pub fn made_on_this_thread() -> Vec<String> {
    MADE.with(|m| m.borrow().clone())
}

/// Those of `names` the test server still has.
pub fn still_there(names: &[String]) -> Vec<String> {
    let names = names.to_vec();
    std::thread::spawn(move || {
        let mut client = connect();
        let rows = client
            .query(
                "SELECT datname FROM pg_database WHERE datname = ANY($1)",
                &[&names],
            )
            .unwrap_or_else(|e| panic!("listing the databases: {e}"));
        rows.iter().map(|r| r.get(0)).collect()
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

fn connect() -> postgres::Client {
    let base = server_url();
    postgres::Client::connect(&base, postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {base}: {e}"))
}

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

/// A database of the test server that is dropped with this value, also
/// when the test fails or panics (unwinding drops it). A test that makes
/// databases by the thousand (the property tests) uses this: each one costs
/// the server several MB of disk until it is dropped.
pub struct Database {
    name: String,
    url: String,
}

impl Database {
    /// Its URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Database {
    /// `DROP DATABASE … WITH (FORCE)`: connections still open (a store not
    /// closed by a failing test) are ended, not waited for. A failure
    /// panics, unless the thread is already panicking (it is then printed:
    /// a second panic would abort the test binary).
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        let dropped = std::thread::spawn(move || drop_database(&name))
            .join()
            .unwrap_or_else(|_| Err("the thread dropping it panicked".into()));
        if let Err(e) = dropped {
            if std::thread::panicking() {
                eprintln!("dropping the test database {}: {e}", self.url);
            } else {
                panic!("dropping the test database {}: {e}", self.url);
            }
        }
    }
}

fn drop_database(name: &str) -> Result<(), String> {
    let base = server_url();
    let mut client = postgres::Client::connect(&base, postgres::NoTls)
        .map_err(|e| format!("cannot reach the test PostgreSQL at {base}: {e}"))?;
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .map_err(|e| format!("DROP DATABASE {name}: {e}"))
}

/// A new, empty database on the test server, dropped with the value.
///
/// # Panics
///
/// When there is no server or it refuses.
pub fn database() -> Database {
    let (name, url) = make_database();
    Database { name, url }
}

/// A new, empty database on the test server; its URL. It stays until the
/// server is stopped (`scripts/pg.sh` removes its directory): for tests
/// that make a few; [`database`] drops it when done.
///
/// # Panics
///
/// When there is no server or it refuses.
pub fn fresh_database() -> String {
    make_database().1
}

/// The name and URL of a new database; noted for [`made_on_this_thread`].
fn make_database() -> (String, String) {
    // The synchronous client starts a runtime of its own, which cannot
    // happen on a tokio thread: do it on a thread of its own.
    let (name, url) = std::thread::spawn(create_database)
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
    MADE.with(|m| m.borrow_mut().push(name.clone()));
    (name, url)
}

fn create_database() -> (String, String) {
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
    connect()
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    let (prefix, _) = base.rsplit_once('/').expect("a URL with a database");
    let url = format!("{prefix}/{name}");
    (name, url)
}
