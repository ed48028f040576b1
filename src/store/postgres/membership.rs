//! A cluster member: its registration (instance id, epoch, lease) and how
//! its store is fenced when it loses its lease.

use std::sync::Arc;
use std::time::Duration;

use postgres::Client;

use super::io;
use crate::store::queue::WriteQueue;
use crate::store::{LeaseGate, StoreError, Ticket};

/// This instance's identity in a cluster (see [`PostgresConfig::member`](super::PostgresConfig::member)).
#[derive(Debug, Clone)]
pub struct Membership {
    /// The instance id; the same id after a restart takes its trees back
    /// at once.
    pub instance: uuid::Uuid,
    /// How long a lease lasts; renewed every third of it
    /// (`subtask::cluster`).
    pub lease: Duration,
}

/// What [`PostgresStore::open`](super::PostgresStore::open) registered for a cluster member.
#[derive(Clone)]
pub struct Registration {
    /// The instance id.
    pub instance: uuid::Uuid,
    /// The epoch of this registration under that id: greater than every
    /// epoch the id had before, even one whose row was deleted since.
    pub epoch: i64,
    /// The lease: valid until the registration's start plus the lease, by
    /// this process's monotonic clock; revoked when a commit finds the
    /// instance fenced.
    pub gate: Arc<LeaseGate>,
    /// The store's queue, for [`Registration::fence`].
    writes: std::sync::Weak<WriteQueue<Client>>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("instance", &self.instance)
            .field("epoch", &self.epoch)
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// Fences this registration's store, for an instance that lost its
    /// lease: the lease gate is revoked (no handler is polled again), every
    /// write not yet durable fails with `why` at once (its waiters are
    /// woken), new work and later writes are refused with it, and the
    /// writer commits nothing more (a commit already under way may still
    /// land: it proves the instance's row in its transaction, as every
    /// commit does) and stops. The store cannot be used again; a rejoining
    /// instance opens a new one (a new epoch).
    pub fn fence(&self, why: &str) {
        self.gate.revoke();
        if let Some(q) = self.writes.upgrade() {
            q.mark.fail(
                Ticket(0),
                StoreError::Failed(format!(
                    "instance {} (epoch {}) is fenced: {why}",
                    self.instance, self.epoch
                )),
            );
            q.close();
        }
    }
}

/// Whether the store of `queue` was fenced ([`Registration::fence`]) or
/// failed: it writes nothing more.
pub(super) fn fenced(queue: &WriteQueue<Client>) -> bool {
    queue.mark.writable().is_err()
}

/// The `application_name` of every session of cluster instance `id`.
pub fn instance_application_name(id: uuid::Uuid) -> String {
    format!("subtask {id}")
}

/// Ends every session of instance `instance` but the caller's own (found
/// by their `application_name`): a process stopped in the middle of a
/// commit holds its row's share lock until it runs again, and ending its
/// sessions rolls that transaction back (nothing of it was acknowledged).
/// Needs the same role or `pg_signal_backend`.
pub(crate) fn end_sessions(client: &mut Client, instance: uuid::Uuid) -> Result<(), postgres::Error> {
    client.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1 AND pid <> pg_backend_pid()",
        &[&instance_application_name(instance)],
    )?;
    Ok(())
}

/// Registers this process as instance `m.instance`: a new row, or the
/// next epoch of an existing one (fencing an older process with the same
/// id), with a lease from now. The lease gate's deadline is taken before
/// the statement is sent, so by this process's clock it ends no later than
/// the database's `lease_until`.
///
/// An epoch is never given twice to one id, even after the id's row was
/// deleted (a revoked instance that holds nothing is cleaned up): a new row
/// starts at the database clock's milliseconds, and a registration takes
/// the greater of that and the row's epoch plus one. So a process of this
/// id that was fenced and registers again (or a stalled older one) can
/// never find its old epoch valid again.
pub(super) fn register(
    client: &mut Client,
    m: &Membership,
    shown: &str,
    writes: std::sync::Weak<WriteQueue<Client>>,
) -> Result<Registration, StoreError> {
    // An older process with this id may be stopped in a commit that holds
    // the row's lock: its sessions end first (nothing of that transaction
    // was acknowledged), so the registration does not wait for it.
    // Best effort: without the right to end them, the registration waits
    // for the older process instead.
    if let Err(e) = end_sessions(client, m.instance) {
        tracing::warn!(instance = %m.instance, error = %e, "{shown}: cannot end an older process's sessions");
    }
    let sent = std::time::Instant::now();
    let lease_s = m.lease.as_secs_f64();
    let epoch: i64 = client
        .query_one(
            "INSERT INTO subtask_instances (id, epoch, lease_until, revoked)
             VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
                     now() + make_interval(secs => $2), false)
             ON CONFLICT (id) DO UPDATE
                 SET epoch = GREATEST(subtask_instances.epoch + 1, EXCLUDED.epoch),
                     lease_until = EXCLUDED.lease_until, revoked = false
             RETURNING epoch",
            &[&m.instance, &lease_s],
        )
        .map_err(|e| io(format!("{shown}: registering instance {}: {e}", m.instance)))?
        .get(0);
    Ok(Registration {
        instance: m.instance,
        epoch,
        gate: Arc::new(LeaseGate::new(sent + m.lease)),
        writes,
    })
}
