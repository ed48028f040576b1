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
    /// This thread's spare case database ([`case_database`]), emptied and
    /// waiting for the next case; dropped from the server when the thread
    /// ends.
    static SPARE: RefCell<Option<Database>> = const { RefCell::new(None) };
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

/// A database for one case of a property test, empty (no table, as a new
/// one), dropped from the server when this thread ends. When the value
/// drops, the database is emptied (its other client connections ended, as
/// `DROP DATABASE … WITH (FORCE)` would, then `DROP SCHEMA public CASCADE`
/// and a new `public`) and kept for the thread's next case: a deep run
/// (`PROPTEST_CASES=20000`) makes one database per thread instead of one
/// per case, and pays about 50 ms per case to empty it instead of about
/// 200 ms to make and drop one. If it cannot be emptied it is dropped, and
/// the next case makes another.
///
/// # Panics
///
/// When there is no server or it refuses.
pub fn case_database() -> CaseDatabase {
    let db = SPARE.with(|s| s.borrow_mut().take()).unwrap_or_else(database);
    CaseDatabase(Some(db))
}

/// A database of [`case_database`], emptied and kept for the thread's
/// next case when it drops.
pub struct CaseDatabase(Option<Database>);

impl CaseDatabase {
    /// Its URL.
    pub fn url(&self) -> &str {
        self.0.as_ref().expect("held until dropped").url()
    }
}

impl Drop for CaseDatabase {
    /// Empties the database and keeps it as the thread's spare; a failure
    /// drops it instead (the [`Database`] drop) and panics, unless the
    /// thread is already panicking (then it is printed).
    fn drop(&mut self) {
        let db = self.0.take().expect("held until dropped");
        let (name, url) = (db.name.clone(), db.url.clone());
        let emptied = std::thread::spawn(move || empty_database(&name, &url))
            .join()
            .unwrap_or_else(|_| Err("the thread emptying it panicked".into()));
        match emptied {
            Ok(()) => SPARE.with(|s| *s.borrow_mut() = Some(db)),
            Err(e) => {
                let url = db.url.clone();
                drop(db);
                if std::thread::panicking() {
                    eprintln!("emptying the test database {url}: {e}");
                } else {
                    panic!("emptying the test database {url}: {e}");
                }
            }
        }
    }
}

/// Ends every other client connection to database `name` (at `url`) and
/// drops everything in it: what is left is what `CREATE DATABASE` makes.
/// Only clients: an autovacuum worker in the database is left to finish.
/// Ending those too (as a first version did) meant the catalogs were never
/// vacuumed, and every case's tables left their dead rows in
/// `pg_attribute`, `pg_depend` and `pg_class`: 370 MB after 17 minutes of
/// a deep run, growing.
fn empty_database(name: &str, url: &str) -> Result<(), String> {
    let mut client = postgres::Client::connect(url, postgres::NoTls)
        .map_err(|e| format!("cannot reach the test database {url}: {e}"))?;
    client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            &[&name],
        )
        .map_err(|e| format!("ending the connections to {name}: {e}"))?;
    client
        .batch_execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        .map_err(|e| format!("emptying {name}: {e}"))
}

/// Whether database `url` holds no table (besides the catalogs).
pub fn is_empty(url: &str) -> bool {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&url, postgres::NoTls)
            .unwrap_or_else(|e| panic!("cannot reach the test database {url}: {e}"));
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
                 AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'",
                &[],
            )
            .unwrap_or_else(|e| panic!("listing the tables of {url}: {e}"))
            .get(0);
        n == 0
    })
    .join()
    .unwrap_or_else(|p| std::panic::resume_unwind(p))
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
