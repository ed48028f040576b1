//! The command inbox (`subtask_inbox`): a command on a tree another
//! instance holds is inserted with its principal and waits for the holder;
//! the holder reads the unanswered commands of its trees in order and
//! writes each answer in the transaction of the command's effects (a
//! [`WriteOp::Receipt`](crate::store::WriteOp::Receipt), committed by the
//! writer); the requester reads the answer, then deletes the row.
//!
//! A command and its answer are stored as JSON text, opaque here (the
//! server's `InboxCommand` and `InboxAnswer`).

use super::commit::json_string;
use super::session::Conn;
use super::{open_logged, task_id, uuid};
use crate::model::TaskId;
use crate::store::now_ms;
use crate::store::seal::{Column, Place};

/// A command stored in the inbox.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Posted {
    /// Its place in the inbox (the order commands are applied in).
    pub(crate) seq: i64,
    /// The root of the task's tree.
    pub(crate) root: TaskId,
}

/// What [`insert_command`] did.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Inserted {
    /// Stored for the holder.
    Posted(Posted),
    /// Nothing stored: no such task is stored, its tree is not the
    /// principal's (a foreign id is answered as an unknown one), or it was
    /// let go of and is past its deletion time.
    NotFound,
    /// Nothing stored: the task's tree is finished and its holder let it go
    /// from memory; nobody holds it to apply a command, which is answered
    /// on the tree rebuilt from its rows.
    Released(TaskId),
}

/// Stores `command` (JSON) on task `id` for its tree's holder, sent by
/// `principal` from instance `from`, and notifies `subtask_inbox` with the
/// holder's id, in one transaction.
pub(crate) fn insert_command(
    conn: &mut Conn,
    id: TaskId,
    principal: &str,
    command: &str,
    from: uuid::Uuid,
) -> Result<Inserted, postgres::Error> {
    let lookup = conn.statement(
        "SELECT t.root, r.owner, r.holder, x.delete_at
         FROM subtask_tasks t JOIN subtask_tasks r ON r.id = t.root
         LEFT JOIN subtask_released x ON x.root = t.root
         WHERE t.id = $1",
    )?;
    let insert = conn.statement(
        "INSERT INTO subtask_inbox (root, task, principal, command, from_instance)
         VALUES ($1, $2, $3, $4::text::jsonb, $5) RETURNING seq",
    )?;
    let notify = conn.statement("SELECT pg_notify('subtask_inbox', $1)")?;
    let sealed = conn
        .keys
        .as_deref()
        .map(|k| json_string(&k.seal(Place::new(Column::Command, id.as_u128()), command)));
    let command = sealed.as_deref().unwrap_or(command);
    let mut tx = conn.transaction()?;
    let Some(row) = tx.query_opt(&lookup, &[&uuid(id)])? else {
        return Ok(Inserted::NotFound);
    };
    let root: uuid::Uuid = row.get(0);
    let owner: Option<String> = row.get(1);
    let holder: Option<uuid::Uuid> = row.get(2);
    let released: Option<i64> = row.get(3);
    if owner.as_deref() != Some(principal) {
        return Ok(Inserted::NotFound);
    }
    match released {
        Some(at) if at <= now_ms() => return Ok(Inserted::NotFound),
        Some(_) => return Ok(Inserted::Released(task_id(root))),
        None => {}
    }
    let seq: i64 = tx
        .query_one(&insert, &[&root, &uuid(id), &principal, &command, &from])?
        .get(0);
    let holder = holder.map(|h| h.to_string()).unwrap_or_default();
    tx.execute(&notify, &[&holder])?;
    tx.commit()?;
    Ok(Inserted::Posted(Posted {
        seq,
        root: task_id(root),
    }))
}

/// What [`answer`] found for a command.
#[derive(Debug)]
pub(crate) enum Taken {
    /// The holder's answer (JSON); the row stays until [`forget`].
    Answer(String),
    /// Not answered yet.
    Pending,
    /// The command's tree was deleted meanwhile: nobody will answer; the
    /// row is deleted.
    Gone,
}

/// Reads the answer to command `seq` on a task of tree `root`, or deletes
/// the command when its tree is gone.
///
/// Reading leaves the row: a read whose reply is lost (the connection
/// breaks as the server sends it) is simply made again. Deleting the row
/// with the read (`DELETE … RETURNING`) lost the answer that way: the
/// delete committed, its reply never came, and the requester waited for
/// an answer no longer there. The requester deletes the row once it has
/// the answer ([`forget`]); a row it could not delete is answered, so the
/// cleanup removes it after ten minutes.
pub(crate) fn answer(conn: &mut Conn, seq: i64, root: TaskId) -> Result<Taken, postgres::Error> {
    let st =
        conn.statement("SELECT answer::text FROM subtask_inbox WHERE seq = $1 AND answer IS NOT NULL")?;
    if let Some(row) = conn.query_opt(&st, &[&seq])? {
        let place = Place::nth(Column::Answer, root.as_u128(), seq);
        return Ok(Taken::Answer(open_logged(
            conn.keys.as_deref(),
            place,
            row.get(0),
            true,
        )));
    }
    let gone = conn
        .query_opt("SELECT 1 FROM subtask_tasks WHERE id = $1", &[&uuid(root)])?
        .is_none();
    if gone {
        // Idempotent too: asked again, the row is gone and so is the tree.
        conn.execute(
            "DELETE FROM subtask_inbox WHERE seq = $1 AND answer IS NULL",
            &[&seq],
        )?;
        return Ok(Taken::Gone);
    }
    Ok(Taken::Pending)
}

/// Deletes command `seq`, whose answer its requester has.
pub(crate) fn forget(conn: &mut Conn, seq: i64) -> Result<(), postgres::Error> {
    let st = conn.statement("DELETE FROM subtask_inbox WHERE seq = $1")?;
    conn.execute(&st, &[&seq])?;
    Ok(())
}

/// An unanswered command for a tree this instance holds.
#[derive(Debug)]
pub(crate) struct Unanswered {
    /// Its place in the inbox (its receipt names it).
    pub(crate) seq: i64,
    /// The task it is for.
    pub(crate) task: TaskId,
    /// The task's root, when this instance let the finished tree go from
    /// memory after the command was stored.
    pub(crate) released: Option<TaskId>,
    /// The principal that sent it.
    pub(crate) principal: String,
    /// The command (JSON).
    pub(crate) command: String,
}

/// At most `limit` unanswered commands for the trees `holder` holds, in
/// inbox order.
pub(crate) fn unanswered(
    conn: &mut Conn,
    holder: uuid::Uuid,
    limit: usize,
) -> Result<Vec<Unanswered>, postgres::Error> {
    let keys = conn.keys.clone();
    Ok(conn
        .query(
            "SELECT i.seq, i.task, i.principal, i.command::text, r.id, x.root IS NOT NULL
             FROM subtask_inbox i JOIN subtask_tasks r ON r.id = i.root
             LEFT JOIN subtask_released x ON x.root = r.id
             WHERE i.answer IS NULL AND r.holder = $1
             ORDER BY i.seq LIMIT $2",
            &[&holder, &(limit as i64)],
        )?
        .iter()
        .map(|r| {
            let task = task_id(r.get(1));
            let place = Place::new(Column::Command, task.as_u128());
            let released: bool = r.get(5);
            Unanswered {
                seq: r.get(0),
                task,
                released: released.then(|| task_id(r.get(4))),
                principal: r.get(2),
                command: open_logged(keys.as_deref(), place, r.get(3), true),
            }
        })
        .collect())
}

/// Stores `answer` (JSON) to command `seq` on a task of tree `root`, unless
/// it has one, and notifies its requester: for a tree no runtime holds (let
/// go of once finished), whose answer rides on no batch of the tree.
pub(crate) fn answer_released(
    conn: &mut Conn,
    seq: i64,
    root: TaskId,
    answer: &str,
) -> Result<(), postgres::Error> {
    let sealed = conn
        .keys
        .as_deref()
        .map(|k| json_string(&k.seal(Place::nth(Column::Answer, root.as_u128(), seq), answer)));
    let answer = sealed.as_deref().unwrap_or(answer);
    let mut tx = conn.transaction()?;
    tx.execute(
        "UPDATE subtask_inbox SET answer = $2::text::jsonb WHERE seq = $1 AND answer IS NULL",
        &[&seq, &answer],
    )?;
    tx.execute("SELECT pg_notify('subtask_answer', $1)", &[&seq.to_string()])?;
    tx.commit()
}
