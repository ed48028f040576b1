//! The schema and its migrations.

use postgres::Client;

use super::session::Conn;
use super::{LOCK_KEY, io};
use crate::store::StoreError;
use crate::store::seal::verify_keys;

/// Schema migrations; `MIGRATIONS[i]` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE subtask_tasks (
        seq       BIGSERIAL NOT NULL,
        id        UUID PRIMARY KEY,
        root      UUID NOT NULL,
        parent    UUID,
        position  INTEGER NOT NULL,
        version   BIGINT NOT NULL,
        state     TEXT NOT NULL,
        owner     TEXT,
        resumable BOOLEAN,
        launch    TEXT
    );
    CREATE INDEX subtask_tasks_root ON subtask_tasks (root);
",
    "
    CREATE TABLE subtask_instances (
        id          UUID PRIMARY KEY,
        epoch       BIGINT NOT NULL,
        lease_until TIMESTAMPTZ NOT NULL,
        revoked     BOOLEAN NOT NULL DEFAULT false,
        started_at  TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    ALTER TABLE subtask_tasks ADD COLUMN holder UUID;
    CREATE INDEX subtask_tasks_holder ON subtask_tasks (holder) WHERE holder IS NOT NULL;
    CREATE INDEX subtask_tasks_parent ON subtask_tasks (parent, position) WHERE parent IS NOT NULL;
    CREATE INDEX subtask_tasks_owner ON subtask_tasks (owner, seq) WHERE parent IS NULL;
    CREATE TABLE subtask_live (
        instance  UUID NOT NULL,
        principal TEXT NOT NULL,
        live      BIGINT NOT NULL,
        PRIMARY KEY (instance, principal)
    );
    CREATE TABLE subtask_inbox (
        seq           BIGSERIAL PRIMARY KEY,
        root          UUID NOT NULL,
        task          UUID NOT NULL,
        principal     TEXT NOT NULL,
        command       JSONB NOT NULL,
        from_instance UUID NOT NULL,
        created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
        answer        JSONB
    );
    CREATE INDEX subtask_inbox_open ON subtask_inbox (root, seq) WHERE answer IS NULL;
    -- Trees written before clustering (or by a single-writer store) are
    -- held by the nil instance, revoked from the start: the first cluster
    -- instance takes them over.
    INSERT INTO subtask_instances (id, epoch, lease_until, revoked)
        VALUES ('00000000-0000-0000-0000-000000000000', 0, 'epoch', true);
    UPDATE subtask_tasks SET holder = '00000000-0000-0000-0000-000000000000' WHERE parent IS NULL;
",
    "
    CREATE TABLE subtask_journal (
        root  UUID NOT NULL,
        task  UUID NOT NULL,
        n     INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (task, n)
    );
    CREATE INDEX subtask_journal_root ON subtask_journal (root);
",
    "
    -- The worker tools each instance's connected workers serve now, with
    -- their declarations (docs/workers.md: Workers in a cluster).
    CREATE TABLE subtask_worker_tools (
        instance UUID NOT NULL,
        tool     TEXT NOT NULL,
        decl     TEXT NOT NULL,
        PRIMARY KEY (instance, tool)
    );
    -- Worker protocol news passed between instances (a task held by one,
    -- run by a worker connected to another), taken in seq order.
    CREATE TABLE subtask_worker_mail (
        seq      BIGSERIAL PRIMARY KEY,
        instance UUID NOT NULL,
        body     TEXT NOT NULL
    );
    CREATE INDEX subtask_worker_mail_to ON subtask_worker_mail (instance, seq);
",
    "
    -- One check value per encryption key id (docs/encryption.md).
    CREATE TABLE subtask_keys (
        key_id      TEXT PRIMARY KEY,
        check_value TEXT NOT NULL
    );
",
    "
    -- The finished trees their holders let go of from memory
    -- (WriteOp::Release), by root, with when each is deleted (ms since the
    -- Unix epoch; the largest BIGINT for never): read from their rows until
    -- then, swept after (docs/scale-out.md, Finished trees). A table of its
    -- own: a mark on the root's row rewrote that wide row and every index
    -- of the tasks table, and cost a quarter of call-complete throughput.
    CREATE TABLE subtask_released (
        root      UUID PRIMARY KEY,
        delete_at BIGINT NOT NULL
    );
    CREATE INDEX subtask_released_at ON subtask_released (delete_at);
",
];

/// The schema version this build writes.
pub const PG_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Creates or upgrades the schema in one transaction, under a transaction
/// advisory lock so that two starting processes do not both migrate.
pub(super) fn migrate(client: &mut Client, shown: &str) -> Result<(), StoreError> {
    let e = |x: postgres::Error| io(format!("{shown}: {x}"));
    let mut tx = client.transaction().map_err(e)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&(LOCK_KEY + 1)])
        .map_err(e)?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS subtask_schema (version BIGINT NOT NULL)")
        .map_err(e)?;
    let found: Option<i64> = tx
        .query_opt("SELECT max(version) FROM subtask_schema", &[])
        .map_err(e)?
        .and_then(|r| r.get(0));
    let found = found.unwrap_or(0);
    if found > PG_SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found,
            supported: PG_SCHEMA_VERSION,
        });
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.batch_execute(step).map_err(e)?;
        let version = i as i64 + 1;
        tx.execute("DELETE FROM subtask_schema", &[]).map_err(e)?;
        tx.execute("INSERT INTO subtask_schema (version) VALUES ($1)", &[&version])
            .map_err(e)?;
    }
    tx.commit().map_err(e)
}

/// Checks the connection's keys against the check values stored per key
/// id (a missing or wrong key is refused, and so is a sealed database
/// opened without keys) and stores the current key's check value if the
/// database does not have it yet, before anything is sealed with it.
pub(super) fn check_keys(conn: &mut Conn, shown: &str) -> Result<(), StoreError> {
    let e = |x: postgres::Error| io(format!("{shown}: {x}"));
    let keys = conn.keys.clone();
    let stored: Vec<(String, String)> = conn
        .client
        .query(
            "SELECT key_id, check_value FROM subtask_keys ORDER BY key_id",
            &[],
        )
        .map_err(e)?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let refused = |x: StoreError| match x {
        StoreError::Key(m) => StoreError::Key(format!("{shown}: {m}")),
        other => other,
    };
    let new = verify_keys(keys.as_deref(), &stored).map_err(refused)?;
    if let Some(keys) = keys.as_deref() {
        for id in new {
            let check = keys.check(&id).expect("a key of the keyring");
            conn.client
                .execute(
                    "INSERT INTO subtask_keys (key_id, check_value) VALUES ($1, $2) ON CONFLICT (key_id) DO NOTHING",
                    &[&id, &check],
                )
                .map_err(e)?;
            // Another instance may have stored it first, with its key.
            let stored: String = conn
                .client
                .query_one("SELECT check_value FROM subtask_keys WHERE key_id = $1", &[&id])
                .map_err(e)?
                .get(0);
            keys.verify(&id, &stored).map_err(refused)?;
        }
    }
    Ok(())
}
