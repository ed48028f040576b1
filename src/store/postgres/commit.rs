//! A group of batches folded into what the database must end up with,
//! committed in one transaction, and the writer thread that does it.

use postgres::Client;

use super::membership::{Registration, fenced};
use super::session::{Conn, Session, commit_retrying};
use super::{io, task_id, uuid};
use crate::model::IdMap;
use crate::store::queue::{Next, WriteQueue};
use crate::store::seal::{Column, Keyring, Place};
use crate::store::{CommitStats, StoreError, StoredTask, Ticket, TreeMeta, WriteBatch, WriteOp};

/// A group folded into what the database must end up with.
#[derive(Default)]
struct Folded {
    deleted: Vec<uuid::Uuid>,
    /// The last record of each task, in first-write order.
    tasks: Vec<(StoredTask, Option<TreeMeta>)>,
    /// Inbox receipts: (seq, answer).
    receipts: Vec<(i64, String)>,
    /// Journal rows to append: (root, task, n, entry).
    journal: Vec<(uuid::Uuid, uuid::Uuid, i32, String)>,
    /// Trees let go of from memory, with their deletion times (ms).
    released: Vec<(uuid::Uuid, i64)>,
    /// Every tree the group wrote, once (for a cluster's change
    /// notifications).
    roots: Vec<uuid::Uuid>,
}

/// A sealed value as a JSON string, for a `jsonb` column (the inbox's).
pub(super) fn json_string(sealed: &str) -> String {
    serde_json::Value::String(sealed.to_owned()).to_string()
}

/// `group` folded; with `keys`, its receipts' answers and its journal
/// entries sealed (the task states are sealed once folded, in [`commit`]:
/// only the last record of each task is written).
fn fold(group: &[(u64, WriteBatch)], keys: Option<&Keyring>) -> Folded {
    let mut out = Folded::default();
    let mut at: IdMap<usize> = IdMap::default();
    let mut metas: IdMap<TreeMeta> = IdMap::default();
    let mut gone: IdMap<()> = IdMap::default();
    let mut roots: IdMap<()> = IdMap::default();
    for (_, batch) in group {
        if roots.insert(batch.root, ()).is_none() {
            out.roots.push(uuid(batch.root));
        }
        for op in &batch.ops {
            match op {
                WriteOp::PutTree(meta) => {
                    metas.insert(meta.root, meta.clone());
                }
                WriteOp::PutTask(task) => {
                    let mut task = task.clone();
                    task.version = batch.version;
                    let meta = if task.parent.is_none() {
                        metas.remove(&task.id)
                    } else {
                        None
                    };
                    match at.get(&task.id) {
                        Some(&i) => {
                            let slot = &mut out.tasks[i];
                            slot.1 = meta.or(slot.1.take());
                            slot.0 = task;
                        }
                        None => {
                            at.insert(task.id, out.tasks.len());
                            out.tasks.push((task, meta));
                        }
                    }
                }
                WriteOp::DeleteTree(root) => {
                    gone.insert(*root, ());
                    out.deleted.push(uuid(*root));
                }
                WriteOp::Receipt { root, seq, answer } => {
                    let answer = match keys {
                        None => answer.clone(),
                        Some(k) => {
                            json_string(&k.seal(Place::nth(Column::Answer, root.as_u128(), *seq), answer))
                        }
                    };
                    out.receipts.push((*seq, answer));
                }
                WriteOp::Release { root, delete_at } => {
                    let at = delete_at.map_or(i64::MAX, |t| i64::try_from(t).unwrap_or(i64::MAX));
                    out.released.push((uuid(*root), at));
                }
                // Not asked for (`TaskStore::marks_ended`): the release
                // is written as the tree leaves memory.
                WriteOp::Ended { .. } => {}
                WriteOp::AppendJournal(row) => {
                    let entry = match keys {
                        None => row.entry.clone(),
                        Some(k) => k.seal(
                            Place::nth(Column::Journal, row.task.as_u128(), i64::from(row.n)),
                            &row.entry,
                        ),
                    };
                    out.journal
                        .push((uuid(row.root), uuid(row.task), row.n as i32, entry));
                }
            }
        }
    }
    // A tree deleted in this group writes nothing more (its ids never come back).
    out.tasks.retain(|(t, _)| !gone.contains_key(&t.root));
    out.journal
        .retain(|(root, ..)| !gone.contains_key(&task_id(*root)));
    out.released
        .retain(|(root, _)| !gone.contains_key(&task_id(*root)));
    out
}

/// Why a commit failed.
pub(super) enum CommitError {
    Pg(postgres::Error),
    /// This cluster member's row is revoked or of a newer epoch: another
    /// instance took its trees (or a newer process took its id).
    Fenced,
}

impl From<postgres::Error> for CommitError {
    fn from(e: postgres::Error) -> Self {
        CommitError::Pg(e)
    }
}

impl CommitError {
    pub(super) fn into_store(self, fence: Option<&Registration>) -> StoreError {
        match self {
            // The server's own words (a "db error" alone says nothing).
            CommitError::Pg(e) => match e.as_db_error() {
                Some(db) => io(format!("{e}: {} (SQLSTATE {})", db.message(), db.code().code())),
                None => io(e),
            },
            CommitError::Fenced => {
                let fence = fence.expect("only a cluster member is fenced");
                // Nothing of this instance runs from here on.
                fence.gate.revoke();
                StoreError::Failed(format!(
                    "instance {} (epoch {}) lost its lease: its trees belong to another instance now",
                    fence.instance, fence.epoch
                ))
            }
        }
    }
}

/// Payloads of `NOTIFY`, at most this many items each (the payload limit
/// is 8000 bytes).
const NOTIFY_CHUNK: usize = 150;

/// `NOTIFY` payloads: ids joined by commas.
fn payloads<T: ToString>(items: &[T]) -> Vec<String> {
    items
        .chunks(NOTIFY_CHUNK)
        .map(|c| c.iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
        .collect()
}

pub(super) fn commit(
    conn: &mut Conn,
    group: &[(u64, WriteBatch)],
    fence: Option<&Registration>,
) -> Result<(), CommitError> {
    // The writer's statements are prepared once per connection (each is
    // then one round trip instead of two, and planned once).
    let Conn {
        client,
        statements,
        keys,
    } = conn;
    let keys = keys.as_deref();
    let mut f = fold(group, keys);
    if let Some(k) = keys {
        for (t, _) in &mut f.tasks {
            t.state = k.seal(Place::new(Column::State, t.id.as_u128()), &t.state);
        }
    }
    let mut tx = client.transaction()?;
    // Instances following these trees for their subscribers re-read them
    // (notifications are delivered at commit, with the change).
    let mut changed = if fence.is_some() {
        payloads(&f.roots)
    } else {
        Vec::new()
    };
    if let Some(fence) = fence {
        // Fencing: a share lock on this instance's row, held to the commit.
        // A takeover revokes the row first (its update waits for this
        // transaction), so a fenced write lands before the takeover reads
        // the tree, or not at all. The first change notification rides on
        // the same statement.
        let st = statements.get(
            &mut tx,
            "SELECT pg_notify('subtask_changed', $3) FROM subtask_instances
             WHERE id = $1 AND epoch = $2 AND NOT revoked FOR SHARE",
        )?;
        let first = if changed.is_empty() {
            String::new()
        } else {
            changed.remove(0)
        };
        let alive = tx.query_opt(&st, &[&fence.instance, &fence.epoch, &first])?;
        if alive.is_none() {
            return Err(CommitError::Fenced);
        }
    }
    // A single-writer store's trees are held by the nil instance (taken
    // over by the first cluster instance on this database).
    let holder = fence.map_or(uuid::Uuid::nil(), |f| f.instance);
    if !f.deleted.is_empty() {
        let st = statements.get(&mut tx, "DELETE FROM subtask_tasks WHERE root = ANY($1)")?;
        tx.execute(&st, &[&f.deleted])?;
        let st = statements.get(&mut tx, "DELETE FROM subtask_journal WHERE root = ANY($1)")?;
        tx.execute(&st, &[&f.deleted])?;
    }
    if !f.journal.is_empty() {
        let n = f.journal.len();
        let (mut root, mut task, mut at, mut entry) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (r, t, i, e) in &f.journal {
            root.push(*r);
            task.push(*t);
            at.push(*i);
            entry.push(e.as_str());
        }
        let st = statements.get(
            &mut tx,
            // Idempotent like the rest of the group: a group whose commit
            // landed but whose acknowledgement was lost with the connection
            // (a PostgreSQL restart) is committed again.
            "INSERT INTO subtask_journal (root, task, n, entry)
             SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[])
             ON CONFLICT (task, n) DO NOTHING",
        )?;
        tx.execute(&st, &[&root, &task, &at, &entry])?;
    }
    if !f.tasks.is_empty() {
        let n = f.tasks.len();
        let (mut id, mut root, mut parent) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut position, mut version, mut state) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut owner, mut resumable, mut launch) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (t, meta) in &f.tasks {
            id.push(uuid(t.id));
            root.push(uuid(t.root));
            parent.push(t.parent.map(uuid));
            position.push(i32::try_from(t.position).unwrap_or(i32::MAX));
            version.push(i64::try_from(t.version).unwrap_or(i64::MAX));
            state.push(t.state.as_str());
            owner.push(meta.as_ref().and_then(|m| m.owner.clone()));
            resumable.push(meta.as_ref().map(|m| m.resumable));
            launch.push(meta.as_ref().and_then(|m| {
                m.launch.as_ref().map(|l| {
                    let l = l.to_string();
                    match keys {
                        None => l,
                        Some(k) => k.seal(Place::new(Column::Launch, m.root.as_u128()), &l),
                    }
                })
            }));
        }
        // Position, root and parent never change after the first write (I1,
        // I2); the metadata comes with the root's first record (`resumable`
        // is set exactly when a record carries it).
        // A cluster member records itself as the holder of the trees it
        // writes (on root rows; it only ever writes trees it holds).
        let st = statements.get(
            &mut tx,
            "INSERT INTO subtask_tasks (id, root, parent, position, version, state, owner, resumable, launch, holder)
             SELECT id, root, parent, position, version, state, owner, resumable, launch,
                    CASE WHEN parent IS NULL THEN $10::uuid END
             FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int[], $5::bigint[], $6::text[],
                         $7::text[], $8::bool[], $9::text[])
                  AS u(id, root, parent, position, version, state, owner, resumable, launch)
             ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, state = EXCLUDED.state,
                 owner = CASE WHEN EXCLUDED.resumable IS NULL THEN subtask_tasks.owner ELSE EXCLUDED.owner END,
                 resumable = COALESCE(EXCLUDED.resumable, subtask_tasks.resumable),
                 launch = CASE WHEN EXCLUDED.resumable IS NULL THEN subtask_tasks.launch ELSE EXCLUDED.launch END,
                 holder = CASE WHEN subtask_tasks.parent IS NULL THEN EXCLUDED.holder END",
        )?;
        tx.execute(
            &st,
            &[
                &id, &root, &parent, &position, &version, &state, &owner, &resumable, &launch, &holder,
            ],
        )?;
    }
    if !f.released.is_empty() {
        let (ids, at): (Vec<uuid::Uuid>, Vec<i64>) = f.released.iter().copied().unzip();
        let st = statements.get(
            &mut tx,
            // Idempotent, for a group committed again.
            "INSERT INTO subtask_released (root, delete_at) SELECT * FROM unnest($1::uuid[], $2::bigint[])
             ON CONFLICT (root) DO UPDATE SET delete_at = EXCLUDED.delete_at",
        )?;
        tx.execute(&st, &[&ids, &at])?;
        // A finished tree never runs again: its journal is of no further use.
        let st = statements.get(&mut tx, "DELETE FROM subtask_journal WHERE root = ANY($1)")?;
        tx.execute(&st, &[&ids])?;
    }
    let notify = "SELECT pg_notify($1, $2)";
    if !f.receipts.is_empty() {
        let (seqs, answers): (Vec<i64>, Vec<&str>) = f.receipts.iter().map(|(q, a)| (*q, a.as_str())).unzip();
        let st = statements.get(
            &mut tx,
            "UPDATE subtask_inbox i SET answer = u.answer::jsonb
             FROM unnest($1::bigint[], $2::text[]) AS u(seq, answer) WHERE i.seq = u.seq",
        )?;
        tx.execute(&st, &[&seqs, &answers])?;
        let st = statements.get(&mut tx, notify)?;
        for payload in payloads(&seqs) {
            tx.execute(&st, &[&"subtask_answer", &payload])?;
        }
    }
    if !changed.is_empty() {
        let st = statements.get(&mut tx, notify)?;
        for payload in changed {
            tx.execute(&st, &[&"subtask_changed", &payload])?;
        }
    }
    tx.commit()?;
    Ok(())
}

pub(super) fn writer_loop(
    mut conn: Conn,
    session: &Session,
    shared: &WriteQueue<Client>,
    stats: &CommitStats,
    max: usize,
) {
    let mut group: Vec<(u64, WriteBatch)> = Vec::new();
    let mut failed = false;
    loop {
        let read = match shared.next(&mut group, max) {
            Next::Stop => return,
            Next::Read(read) => Some(read),
            Next::Commit => None,
        };
        if let Some(read) = read {
            // A connection that broke while idle is replaced before a read
            // (a failed attempt leaves the read to report the error).
            if conn.is_closed()
                && let Ok(fresh) = session.connect()
            {
                conn = fresh;
            }
            read(&mut conn.client);
            continue;
        }
        let (Some(first), Some(last)) = (group.first().map(|g| g.0), group.last().map(|g| g.0)) else {
            continue;
        };
        // A fenced store (`Registration::fence`) writes nothing more.
        if failed || fenced(shared) {
            group.clear();
            continue;
        }
        let t0 = std::time::Instant::now();
        match commit_retrying(&mut conn, session, shared, &group) {
            Ok(()) => {
                stats.committed(t0.elapsed(), group.len());
                shared.mark.advance(Ticket(last));
            }
            Err(e) if fenced(shared) => {
                // The instance fenced itself meanwhile: the group's
                // waiters already have that error.
                tracing::debug!(error = %e, "a fenced instance's commit was not made");
                failed = true;
            }
            Err(e) => {
                tracing::error!(error = %e, "a PostgreSQL commit failed; no further writes are accepted");
                failed = true;
                shared.mark.fail(Ticket(first), e);
            }
        }
        group.clear();
    }
}
