//! What cluster instances do to their rows in `subtask_instances` and to
//! each other's: renewing a lease, leaving, finding a newer registration
//! of one's id, revoking expired instances and claiming their trees
//! (takeover), publishing live-task counts (`subtask_live`), and cleaning
//! up. A member's registration, and the fence check in every commit, are
//! `membership.rs` and `commit.rs`.

use std::collections::HashMap;
use std::time::Duration;

use postgres::Client;

pub(crate) use super::held_roots;
pub(crate) use super::membership::end_sessions;

/// Extends the lease of instance `id` at `epoch` to `lease` from the
/// database's now; the number of rows renewed: `0` when the row was
/// revoked or taken by a newer process with the same id.
pub(crate) fn renew_lease(
    client: &mut Client,
    id: uuid::Uuid,
    epoch: i64,
    lease: Duration,
) -> Result<u64, postgres::Error> {
    client.execute(
        "UPDATE subtask_instances SET lease_until = now() + make_interval(secs => $3)
         WHERE id = $1 AND epoch = $2 AND NOT revoked",
        &[&id, &epoch, &lease.as_secs_f64()],
    )
}

/// Revokes instance `id` at `epoch` with its lease ended now (a clean
/// leave: the others take its trees at their next look).
pub(crate) fn leave(client: &mut Client, id: uuid::Uuid, epoch: i64) -> Result<u64, postgres::Error> {
    client.execute(
        "UPDATE subtask_instances SET revoked = true, lease_until = now() WHERE id = $1 AND epoch = $2",
        &[&id, &epoch],
    )
}

/// The epoch instance `id` is registered with now (`None`: no row).
pub(crate) fn registered_epoch(client: &mut Client, id: uuid::Uuid) -> Result<Option<i64>, postgres::Error> {
    client
        .query_opt("SELECT epoch FROM subtask_instances WHERE id = $1", &[&id])
        .map(|r| r.map(|r| r.get(0)))
}

/// The instances other than `me` whose lease expired and that are not
/// revoked yet.
pub(crate) fn expired_instances(
    client: &mut Client,
    me: uuid::Uuid,
) -> Result<Vec<uuid::Uuid>, postgres::Error> {
    client
        .query(
            "SELECT id FROM subtask_instances WHERE lease_until < now() AND NOT revoked AND id <> $1",
            &[&me],
        )
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
}

/// Revokes instance `dead` if its lease is still expired and it is not
/// revoked yet; the number of rows revoked. The revoke waits for a commit
/// of `dead` in flight (its share lock on the row), at most 2 s: a commit
/// that is finishing lands first, or the caller tries again later.
pub(crate) fn revoke_expired(client: &mut Client, dead: uuid::Uuid) -> Result<u64, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.batch_execute("SET LOCAL lock_timeout = '2s'")?;
    let n = tx.execute(
        "UPDATE subtask_instances SET revoked = true
         WHERE id = $1 AND lease_until < now() AND NOT revoked",
        &[&dead],
    )?;
    tx.commit()?;
    Ok(n)
}

/// Claims for instance `me` at `epoch` up to 64 trees of revoked instances
/// (`FOR UPDATE SKIP LOCKED`, so several survivors share them), returning
/// their roots. `None` when `me` is itself revoked or superseded: the claim
/// is fenced like a commit, and nothing is claimed.
pub(crate) fn claim_trees(
    client: &mut Client,
    me: uuid::Uuid,
    epoch: i64,
) -> Result<Option<Vec<uuid::Uuid>>, postgres::Error> {
    let mut tx = client.transaction()?;
    if tx
        .query_opt(
            "SELECT 1 FROM subtask_instances WHERE id = $1 AND epoch = $2 AND NOT revoked FOR SHARE",
            &[&me, &epoch],
        )?
        .is_none()
    {
        return Ok(None);
    }
    // The share locks keep a revoked id from being revived (a restart
    // with the same id) while its trees are claimed.
    let dead: Vec<uuid::Uuid> = tx
        .query("SELECT id FROM subtask_instances WHERE revoked FOR SHARE", &[])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if dead.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let rows = tx.query(
        "UPDATE subtask_tasks SET holder = $1 WHERE id IN (
             SELECT id FROM subtask_tasks WHERE holder = ANY($2) AND parent IS NULL
               AND NOT EXISTS (SELECT 1 FROM subtask_released x WHERE x.root = subtask_tasks.id)
             LIMIT 64 FOR UPDATE SKIP LOCKED)
         RETURNING id",
        &[&me, &dead],
    )?;
    tx.commit()?;
    Ok(Some(rows.iter().map(|r| r.get(0)).collect()))
}

/// Publishes instance `me`'s live tasks per principal (`principals` and
/// `counts` side by side; zero counts are left out) in place of what it
/// published before, and returns the others' sums per principal, live
/// instances only.
pub(crate) fn share_live_counts(
    client: &mut Client,
    me: uuid::Uuid,
    principals: &[String],
    counts: &[i64],
) -> Result<HashMap<String, usize>, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("DELETE FROM subtask_live WHERE instance = $1", &[&me])?;
    tx.execute(
        "INSERT INTO subtask_live (instance, principal, live)
         SELECT $1, p, n FROM unnest($2::text[], $3::bigint[]) AS u(p, n) WHERE n > 0",
        &[&me, &principals, &counts],
    )?;
    let rows = tx.query(
        "SELECT l.principal, sum(l.live)::bigint FROM subtask_live l
         JOIN subtask_instances i ON i.id = l.instance
         WHERE l.instance <> $1 AND NOT i.revoked
         GROUP BY l.principal",
        &[&me],
    )?;
    tx.commit()?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                r.get::<_, String>(0),
                usize::try_from(r.get::<_, i64>(1)).unwrap_or(0),
            )
        })
        .collect())
}

/// Deletes up to `batch` trees let go of once finished whose deletion time
/// is `now_ms` or earlier (their rows, and the commands waiting on them),
/// in one transaction; returns how many. Any instance may: such a tree is
/// finished and no runtime holds it. It reads as absent from its deletion
/// time on, swept or not.
pub(crate) fn sweep_released(client: &mut Client, now_ms: i64, batch: i64) -> Result<usize, postgres::Error> {
    let mut tx = client.transaction()?;
    let roots: Vec<uuid::Uuid> = tx
        .query(
            "SELECT root FROM subtask_released WHERE delete_at <= $1 ORDER BY delete_at LIMIT $2
             FOR UPDATE SKIP LOCKED",
            &[&now_ms, &batch],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if roots.is_empty() {
        return Ok(0);
    }
    tx.execute("DELETE FROM subtask_tasks WHERE root = ANY($1)", &[&roots])?;
    tx.execute("DELETE FROM subtask_journal WHERE root = ANY($1)", &[&roots])?;
    tx.execute(
        "DELETE FROM subtask_inbox WHERE root = ANY($1) AND answer IS NULL",
        &[&roots],
    )?;
    tx.execute("DELETE FROM subtask_released WHERE root = ANY($1)", &[&roots])?;
    tx.commit()?;
    Ok(roots.len())
}

/// Deletes what nobody needs any more: answers nobody collected (the
/// requester died) after 10 minutes, the live counts, worker tools and
/// worker news of revoked instances, and revoked instances that hold
/// nothing.
pub(crate) fn collect_garbage(client: &mut Client) -> Result<(), postgres::Error> {
    client.execute(
        "DELETE FROM subtask_inbox WHERE answer IS NOT NULL AND created_at < now() - interval '10 minutes'",
        &[],
    )?;
    client.execute(
        "DELETE FROM subtask_live l USING subtask_instances i WHERE i.id = l.instance AND i.revoked",
        &[],
    )?;
    // What revoked instances' workers served, and news nobody will take.
    client.execute(
        "DELETE FROM subtask_worker_tools w USING subtask_instances i WHERE i.id = w.instance AND i.revoked",
        &[],
    )?;
    client.execute(
        "DELETE FROM subtask_worker_mail m USING subtask_instances i WHERE i.id = m.instance AND i.revoked",
        &[],
    )?;
    client.execute(
        "DELETE FROM subtask_instances i WHERE revoked AND epoch > 0
           AND NOT EXISTS (SELECT 1 FROM subtask_tasks t WHERE t.holder = i.id)",
        &[],
    )?;
    Ok(())
}
