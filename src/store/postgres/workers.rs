//! Workers in a cluster (`docs/workers.md`, "Workers in a cluster"): the
//! worker tools each instance's workers serve (`subtask_worker_tools`,
//! notified on `subtask_workers`), and the worker protocol's news passed
//! between the instance that holds a task and the one its worker is
//! connected to (`subtask_worker_mail`, notified on `subtask_mail` with
//! the receiving instance's id). Bodies are JSON text, opaque here (the
//! hub's, `crate::server::workers`).

use std::collections::HashSet;

use super::open_logged;
use super::session::Conn;
use crate::store::seal::{Column, Place};

/// Publishes the tools instance `me`'s workers serve now (name and
/// declaration, side by side) in place of what it published before, and
/// notifies `subtask_workers`.
pub(crate) fn publish(
    conn: &mut Conn,
    me: uuid::Uuid,
    names: &[String],
    decls: &[String],
) -> Result<(), postgres::Error> {
    let mut tx = conn.transaction()?;
    tx.execute("DELETE FROM subtask_worker_tools WHERE instance = $1", &[&me])?;
    tx.execute(
        "INSERT INTO subtask_worker_tools (instance, tool, decl)
         SELECT $1, n, d FROM unnest($2::text[], $3::text[]) AS u(n, d)",
        &[&me, &names, &decls],
    )?;
    tx.execute("SELECT pg_notify('subtask_workers', $1)", &[&me.to_string()])?;
    tx.commit()
}

/// What the other live instances' workers serve: (instance, tool,
/// declaration) rows, and the ids of every live instance (this one
/// included).
pub(crate) type Served = (Vec<(uuid::Uuid, String, String)>, HashSet<uuid::Uuid>);

/// The tools other live instances' workers serve, and the live instances.
pub(crate) fn served(conn: &mut Conn, me: uuid::Uuid) -> Result<Served, postgres::Error> {
    let live: HashSet<uuid::Uuid> = conn
        .query(
            "SELECT id FROM subtask_instances WHERE NOT revoked AND lease_until > now()",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let tools = conn
        .query(
            "SELECT instance, tool, decl FROM subtask_worker_tools WHERE instance <> $1 ORDER BY instance, tool",
            &[&me],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .filter(|(i, _, _)| live.contains(i))
        .collect();
    Ok((tools, live))
}

/// Stores `bodies` for the instances `to` (side by side), in order, and
/// notifies `subtask_mail` once per receiving instance, in one
/// transaction.
pub(crate) fn send(conn: &mut Conn, to: &[uuid::Uuid], bodies: &[String]) -> Result<(), postgres::Error> {
    // Sealed for the receiving instance (the news carries task arguments
    // and results).
    let sealed: Option<Vec<String>> = conn.keys.as_deref().map(|k| {
        to.iter()
            .zip(bodies)
            .map(|(i, b)| k.seal(Place::new(Column::Mail, i.as_u128()), b))
            .collect()
    });
    let bodies = sealed.as_deref().unwrap_or(bodies);
    let mut tx = conn.transaction()?;
    tx.execute(
        "INSERT INTO subtask_worker_mail (instance, body)
         SELECT i, b FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS u(i, b, n) ORDER BY n",
        &[&to, &bodies],
    )?;
    let mut told = HashSet::new();
    for i in to {
        if told.insert(*i) {
            tx.execute("SELECT pg_notify('subtask_mail', $1)", &[&i.to_string()])?;
        }
    }
    tx.commit()
}

/// Takes (deletes and returns, in the order they were sent) the news
/// waiting for instance `me`.
pub(crate) fn take(conn: &mut Conn, me: uuid::Uuid) -> Result<Vec<String>, postgres::Error> {
    let mut rows: Vec<(i64, String)> = conn
        .query(
            "DELETE FROM subtask_worker_mail WHERE instance = $1 RETURNING seq, body",
            &[&me],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    rows.sort_unstable_by_key(|(seq, _)| *seq);
    let keys = conn.keys.clone();
    let place = Place::new(Column::Mail, me.as_u128());
    Ok(rows
        .into_iter()
        .map(|(_, b)| open_logged(keys.as_deref(), place, b, false))
        .collect())
}
