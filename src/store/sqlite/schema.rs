//! The file's pragmas, identity and schema, and its migrations.

use std::path::Path;

use rusqlite::Connection;

use super::sql;
use crate::store::StoreError;
use crate::store::seal::{Keyring, verify_keys};

/// `PRAGMA application_id` of a subtask database ("sbtk").
const APPLICATION_ID: i64 = 0x7362_746b;

/// Schema migrations; `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE tasks (
        seq       INTEGER PRIMARY KEY,
        id        BLOB NOT NULL,
        root      BLOB NOT NULL,
        parent    BLOB,
        position  INTEGER NOT NULL,
        version   INTEGER NOT NULL,
        state     TEXT NOT NULL,
        owner     TEXT,
        resumable INTEGER,
        launch    TEXT
    );
",
    "
    CREATE TABLE journal (
        root  BLOB NOT NULL,
        task  BLOB NOT NULL,
        n     INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (root, task, n)
    ) WITHOUT ROWID;
",
    "
    -- One check value per encryption key id (docs/encryption.md).
    CREATE TABLE seal_keys (
        key_id      TEXT PRIMARY KEY,
        check_value TEXT NOT NULL
    );
",
    "
    -- A finished tree the runtime let go of (WriteOp::Release), on its
    -- root's row: when the tree is deleted, in ms since the Unix epoch
    -- (9223372036854775807: never); NULL while the runtime holds it.
    ALTER TABLE tasks ADD COLUMN released INTEGER;
    -- The sweep of released trees past their deletion time (a create
    -- leaves it untouched: `released` is NULL until the tree is let go).
    -- A principal's trees and a task's children have no index: a create
    -- would write to one (docs/durability.md, Finished trees); the
    -- writer's maps find them.
    CREATE INDEX tasks_released ON tasks(released) WHERE released IS NOT NULL;
",
    "
    -- The sweep finds released trees past their deletion time in the
    -- writer's maps (filled by the scan at open): every mark wrote to this
    -- index, a page per commit (docs/durability.md, Finished trees).
    DROP INDEX IF EXISTS tasks_released;
",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Pragmas, identity and schema checks, migrations, an integrity check.
/// `fsync_in_commit` chooses `synchronous=FULL` (SQLite fsyncs in every
/// commit) or `NORMAL` (the WAL is fsynced only before checkpoints; the
/// syncer stage or nobody does the rest).
pub(super) fn prepare(
    conn: &mut Connection,
    path: &Path,
    fsync_in_commit: bool,
    max_size: Option<u64>,
) -> Result<(), StoreError> {
    let e = sql(path);
    conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(&e)?;
    if let Some(bytes) = max_size {
        // Per connection, not stored in the file: set at every open.
        let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).map_err(&e)?;
        let pages = i64::try_from(bytes / page.max(1) as u64)
            .unwrap_or(i64::MAX)
            .max(1);
        let _set: i64 = conn
            .query_row(&format!("PRAGMA max_page_count={pages}"), [], |r| r.get(0))
            .map_err(&e)?;
    }
    let app: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(&e)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(&e)?;
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(&e)?;
    if app != APPLICATION_ID && (app != 0 || tables != 0) {
        return Err(StoreError::Corrupt(format!(
            "{} is not a subtask database (application_id {app:#x}, {tables} schema objects)",
            path.display()
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(&e)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Io(format!(
            "{}: cannot switch to WAL mode (got {mode})",
            path.display()
        )));
    }
    let sync = if fsync_in_commit { "FULL" } else { "NORMAL" };
    conn.execute_batch(&format!(
        "PRAGMA synchronous={sync}; PRAGMA foreign_keys=OFF; PRAGMA temp_store=MEMORY; PRAGMA wal_autocheckpoint=8192;"
    ))
    .map_err(&e)?;
    if version > 0 {
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(&e)?;
        if check != "ok" {
            return Err(StoreError::Corrupt(format!("{}: {check}", path.display())));
        }
    }
    for (from, step) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction().map_err(&e)?;
        tx.execute_batch(step).map_err(&e)?;
        tx.execute_batch(&format!(
            "PRAGMA application_id={APPLICATION_ID}; PRAGMA user_version={};",
            from + 1
        ))
        .map_err(&e)?;
        tx.commit().map_err(&e)?;
    }
    Ok(())
}

/// Checks `keys` against the check values stored per key id (a missing or
/// wrong key is refused, and so is a sealed database opened without keys)
/// and stores the check value of every key the database does not know
/// yet, before anything is sealed with it.
pub(super) fn check_keys(conn: &Connection, path: &Path, keys: Option<&Keyring>) -> Result<(), StoreError> {
    let e = sql(path);
    let stored: Vec<(String, String)> = {
        let mut st = conn
            .prepare("SELECT key_id, check_value FROM seal_keys ORDER BY key_id")
            .map_err(&e)?;
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(&e)?
            .collect::<Result<_, _>>()
            .map_err(&e)?
    };
    let new = verify_keys(keys, &stored).map_err(|x| match x {
        StoreError::Key(m) => StoreError::Key(format!("{}: {m}", path.display())),
        other => other,
    })?;
    if let Some(keys) = keys {
        for id in new {
            let check = keys.check(&id).expect("a key of the keyring");
            conn.execute(
                "INSERT INTO seal_keys (key_id, check_value) VALUES (?1, ?2)",
                rusqlite::params![id, check],
            )
            .map_err(&e)?;
        }
    }
    Ok(())
}
