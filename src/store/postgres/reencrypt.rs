//! Every stored value sealed again with the current key
//! ([`PostgresStore::reencrypt`]).

use std::borrow::Cow;
use std::sync::Arc;

use super::commit::json_string;
use super::schema::{check_keys, migrate};
use super::session::Conn;
use super::{PostgresConfig, PostgresStore, io, task_id};
use crate::store::StoreError;
use crate::store::seal::{Column, Keyring, Place, Reencrypted, reseal};

/// Rows read per statement.
const CHUNK: i64 = 256;

/// The value of an inbox `jsonb` column as sealed text (a sealed value is
/// stored there as a JSON string), or the clear JSON text.
fn unjson(text: &str) -> Cow<'_, str> {
    if text.starts_with("\"sealed:")
        && let Ok(s) = serde_json::from_str::<String>(text)
    {
        return Cow::Owned(s);
    }
    Cow::Borrowed(text)
}

impl PostgresStore {
    /// Seals every stored value (task states, launches, journal entries,
    /// inbox commands and answers, worker news) with `config.keys`' current
    /// key, clear values and values sealed with an older key alike, then
    /// forgets the check values of the other keys (the database no longer
    /// needs them: they may be taken out of the key file).
    ///
    /// It may run while instances serve the database, provided every one
    /// of them already runs with the same current key (restart them with
    /// the new key file first): each value is replaced only if it is still
    /// the one read (a value written meanwhile is written with the current
    /// key anyway). A value still under another key at the end (an instance
    /// sealing with an older current key) fails the run, and the older
    /// keys' check values are kept; run it again once every instance runs
    /// with the new key file. Old row versions stay in PostgreSQL's heap
    /// until vacuumed, and in its WAL, archives and backups
    /// (`docs/encryption.md`).
    ///
    /// # Errors
    ///
    /// [`StoreError::Key`] when `config.keys` is `None`, when the database
    /// holds values sealed with a key they lack, or a key differs; a value
    /// that does not open (the run stops there; what it sealed again so
    /// far stays sealed with the current key, which the database knows);
    /// `Io` for the connection, `NewerSchema`.
    pub fn reencrypt(config: &PostgresConfig) -> Result<Reencrypted, StoreError> {
        let keys: Arc<Keyring> = config
            .keys
            .clone()
            .ok_or_else(|| StoreError::Key("re-encryption needs a key file".into()))?;
        let connector = PostgresConfig {
            member: None,
            ..config.clone()
        }
        .connector()?;
        let shown = connector.shown.clone();
        // The synchronous client runs a runtime of its own: a thread of its own.
        std::thread::Builder::new()
            .name("subtask-reencrypt".into())
            .spawn(move || {
                let client = connector.client().map_err(|x| io(format!("{shown}: {x}")))?;
                let mut conn = Conn::new(client, Some(keys.clone()));
                migrate(&mut conn.client, &shown)?;
                check_keys(&mut conn, &shown)?;
                run(&mut conn.client, &keys, &shown)
            })
            .map_err(io)?
            .join()
            .map_err(|_| StoreError::Failed("the re-encryption thread panicked".into()))?
    }
}

fn run(client: &mut postgres::Client, keys: &Keyring, shown: &str) -> Result<Reencrypted, StoreError> {
    let e = |x: postgres::Error| io(format!("{shown}: {x}"));
    let mut done = Reencrypted::default();
    // What a value under the current key starts with, as text and in a
    // `jsonb` column's text.
    let current = format!("sealed:v1:{}:", keys.current());
    let current_json = format!("\"{current}");

    // Task states and launches.
    let mut after = uuid::Uuid::nil();
    loop {
        let rows = client
            .query(
                "SELECT id, root, state, launch FROM subtask_tasks
                 WHERE id > $1 AND (left(state, length($2)) <> $2
                       OR (launch IS NOT NULL AND left(launch, length($2)) <> $2))
                 ORDER BY id LIMIT $3",
                &[&after, &current, &CHUNK],
            )
            .map_err(e)?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        for r in &rows {
            let (id, root): (uuid::Uuid, uuid::Uuid) = (r.get(0), r.get(1));
            let (state, launch): (String, Option<String>) = (r.get(2), r.get(3));
            let new_state = reseal(keys, Place::new(Column::State, task_id(id).as_u128()), &state)?;
            let new_launch = match &launch {
                Some(l) => reseal(keys, Place::new(Column::Launch, task_id(root).as_u128()), l)?,
                None => None,
            };
            let n = client
                .execute(
                    "UPDATE subtask_tasks SET state = $2, launch = $3
                     WHERE id = $1 AND state = $4 AND launch IS NOT DISTINCT FROM $5",
                    &[
                        &id,
                        &new_state.as_deref().unwrap_or(&state),
                        &new_launch.as_deref().or(launch.as_deref()),
                        &state,
                        &launch,
                    ],
                )
                .map_err(e)?;
            if n == 1 {
                done.values += u64::from(new_state.is_some()) + u64::from(new_launch.is_some());
            }
        }
    }

    // Journal entries.
    let mut after: (uuid::Uuid, i32) = (uuid::Uuid::nil(), -1);
    loop {
        let rows = client
            .query(
                "SELECT task, n, entry FROM subtask_journal
                 WHERE (task, n) > ($1, $2) AND left(entry, length($3)) <> $3
                 ORDER BY task, n LIMIT $4",
                &[&after.0, &after.1, &current, &CHUNK],
            )
            .map_err(e)?;
        let Some(last) = rows.last() else { break };
        after = (last.get(0), last.get(1));
        for r in &rows {
            let (task, n, entry): (uuid::Uuid, i32, String) = (r.get(0), r.get(1), r.get(2));
            let place = Place::nth(Column::Journal, task_id(task).as_u128(), i64::from(n));
            if let Some(sealed) = reseal(keys, place, &entry)? {
                done.values += client
                    .execute(
                        "UPDATE subtask_journal SET entry = $3 WHERE task = $1 AND n = $2 AND entry = $4",
                        &[&task, &n, &sealed, &entry],
                    )
                    .map_err(e)?;
            }
        }
    }

    // Inbox commands and answers (`jsonb`: a sealed value is a JSON string).
    let mut after = 0i64;
    loop {
        let rows = client
            .query(
                "SELECT seq, root, task, command::text, answer::text FROM subtask_inbox
                 WHERE seq > $1 AND (left(command::text, length($2)) <> $2
                       OR (answer IS NOT NULL AND left(answer::text, length($2)) <> $2))
                 ORDER BY seq LIMIT $3",
                &[&after, &current_json, &CHUNK],
            )
            .map_err(e)?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        for r in &rows {
            let (seq, root, task): (i64, uuid::Uuid, uuid::Uuid) = (r.get(0), r.get(1), r.get(2));
            let (command, answer): (String, Option<String>) = (r.get(3), r.get(4));
            let place = Place::new(Column::Command, task_id(task).as_u128());
            let new_command = reseal(keys, place, &unjson(&command))?.map(|s| json_string(&s));
            let new_answer = match &answer {
                Some(a) => {
                    let place = Place::nth(Column::Answer, task_id(root).as_u128(), seq);
                    reseal(keys, place, &unjson(a))?.map(|s| json_string(&s))
                }
                None => None,
            };
            let n = client
                .execute(
                    "UPDATE subtask_inbox SET command = $2::text::jsonb, answer = $3::text::jsonb
                     WHERE seq = $1 AND command::text = $4 AND answer::text IS NOT DISTINCT FROM $5",
                    &[
                        &seq,
                        &new_command.as_deref().unwrap_or(&command),
                        &new_answer.as_deref().or(answer.as_deref()),
                        &command,
                        &answer,
                    ],
                )
                .map_err(e)?;
            if n == 1 {
                done.values += u64::from(new_command.is_some()) + u64::from(new_answer.is_some());
            }
        }
    }

    // Worker news between instances.
    let mut after = 0i64;
    loop {
        let rows = client
            .query(
                "SELECT seq, instance, body FROM subtask_worker_mail
                 WHERE seq > $1 AND left(body, length($2)) <> $2 ORDER BY seq LIMIT $3",
                &[&after, &current, &CHUNK],
            )
            .map_err(e)?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        for r in &rows {
            let (seq, instance, body): (i64, uuid::Uuid, String) = (r.get(0), r.get(1), r.get(2));
            if let Some(sealed) = reseal(keys, Place::new(Column::Mail, instance.as_u128()), &body)? {
                done.values += client
                    .execute(
                        "UPDATE subtask_worker_mail SET body = $2 WHERE seq = $1 AND body = $3",
                        &[&seq, &sealed, &body],
                    )
                    .map_err(e)?;
            }
        }
    }

    // Anything still not under the current key was written meanwhile by an
    // instance sealing with another key (or in clear).
    let left: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM subtask_tasks WHERE left(state, length($1)) <> $1
                       OR (launch IS NOT NULL AND left(launch, length($1)) <> $1))
                  + (SELECT count(*) FROM subtask_journal WHERE left(entry, length($1)) <> $1)
                  + (SELECT count(*) FROM subtask_inbox WHERE left(command::text, length($2)) <> $2
                       OR (answer IS NOT NULL AND left(answer::text, length($2)) <> $2))
                  + (SELECT count(*) FROM subtask_worker_mail WHERE left(body, length($1)) <> $1)",
            &[&current, &current_json],
        )
        .map_err(e)?
        .get(0);
    if left > 0 {
        return Err(StoreError::Key(format!(
            "{shown}: {left} values were written meanwhile under another key than {:?} (an instance still runs with an older key file?); every key is kept: restart every instance with the new key file and run this again",
            keys.current()
        )));
    }
    done.retired = client
        .query(
            "DELETE FROM subtask_keys WHERE key_id <> $1 RETURNING key_id",
            &[&keys.current()],
        )
        .map_err(e)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    done.retired.sort();
    Ok(done)
}
