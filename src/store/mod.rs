//! Durability behind one trait: [`TaskStore`].
//!
//! The runtime writes every change of a tree as one [`WriteBatch`] (the
//! records one command touched, plus tree creation and deletion), under that
//! tree's lock and without waiting; [`TaskStore::submit`] hands back a
//! [`Ticket`]. Whoever must not answer before the change is durable (the
//! server before `CreateTaskResult`, before any snapshot it shows a client)
//! waits for the ticket with [`TaskStore::wait_durable`]. Backends batch
//! concurrent writers' records into one transaction and one fsync (group
//! commit).
//!
//! Backends: [`MemoryStore`] (nothing survives the process; the reference
//! for the property tests), `SqliteStore` (the embedded default, feature
//! `sqlite`) and `PostgresStore` (feature `postgres`).
//!
//! # Contract
//!
//! * **Order.** Batches are applied in the order of their tickets. Tickets
//!   are totally ordered: once a ticket is durable, every earlier ticket is
//!   durable too.
//! * **Atomicity.** A batch is applied whole or not at all, and never after
//!   a later batch of the same tree. A crash leaves every tree exactly as
//!   some prefix of its batches left it; since each batch is what one
//!   lifecycle command changed, every invariant of the tree holds on disk.
//! * **Durability.** When `wait_durable(t)` resolves `Ok`, batch `t` and
//!   every earlier batch survive a crash of the process, and, with
//!   [`Durability::Full`], a crash of the machine.
//! * **Failure.** A batch that cannot be written fails its ticket and every
//!   later one: the store stops accepting state it cannot keep, and
//!   `wait_durable` reports the error from then on.
//! * **Full.** A batch that cannot be written *for lack of space* is the
//!   exception: it is kept and written again (in order, with every later
//!   batch behind it) until space returns. Meanwhile the store reports
//!   [`StoreError::Full`]: from [`TaskStore::writable`], so that new work
//!   is refused before it starts, and from `is_durable` / `wait_durable` for
//!   the held tickets, at once instead of waiting. Nothing is dropped: once
//!   a write succeeds again the held tickets become durable as usual.
//! * **Non-blocking submit.** `submit` never waits for I/O: it is called
//!   under a tree lock.
//! * **Versions.** Every stored task carries the version of the batch that
//!   last wrote it; versions of a tree increase with each batch. A
//!   multi-instance backend uses them to refuse a stale writer.

mod lease;
mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod queue;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod seal;
#[cfg(feature = "sqlite")]
mod sqlite;
mod stats;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::Value;
use std::task::{Poll, Waker};

pub use lease::LeaseGate;
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{
    Membership, PG_SCHEMA_VERSION, PostgresConfig, PostgresStore, Registration, instance_application_name,
};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use seal::{Keyring, KeyringError, Reencrypted};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteConfig, SqliteStore};
/// The SQLite store's row decoding, for the fuzz harness (`subtask::fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) use sqlite::{read_back, scratch_database};
pub use stats::{COMMIT_SECONDS_BUCKETS, CommitStats, GROUP_SIZE_BUCKETS};

use crate::model::TaskId;

/// A position in a store's write order (see the module's contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ticket(pub u64);

/// How hard a backend works to keep a committed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every group commit is fsynced before its writers are released: a
    /// batch acknowledged as durable survives a process crash, a kernel
    /// panic and a power cut. The default.
    #[default]
    Full,
    /// Commits reach the operating system but are fsynced only at
    /// checkpoints: nothing acknowledged is lost when the *process* dies
    /// (the written data is in the kernel's page cache), but a power cut or
    /// kernel crash can lose the last acknowledged commits (the tree is then
    /// as an earlier batch left it, never torn). Several times faster on
    /// disks with slow fsync.
    Relaxed,
}

/// One task as stored: its position in the tree and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTask {
    /// The task.
    pub id: TaskId,
    /// The root of its tree.
    pub root: TaskId,
    /// Its parent; `None` for the root.
    pub parent: Option<TaskId>,
    /// Its index in the parent's `childTaskIds` (0 for the root).
    pub position: u32,
    /// The version of the tree's batch that wrote this record last (set
    /// by the store from [`WriteBatch::version`] when it writes the record).
    pub version: u64,
    /// Everything else, as the runtime encoded it (`core::encode_state`;
    /// opaque to the store).
    pub state: String,
}

/// What a tree was started as, written once when its root is created.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeMeta {
    /// The root task.
    pub root: TaskId,
    /// The principal that owns the tree (`None` when unowned).
    pub owner: Option<String>,
    /// Whether the root's handler may run again after a restart.
    pub resumable: bool,
    /// How to start the handler again (for the server: the tool call). A
    /// string `name` in it is the tree's label after a restart (the tool
    /// the web view shows and metrics count under).
    pub launch: Option<Value>,
}

/// A stored tree: its metadata and every task.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTree {
    /// Metadata.
    pub meta: TreeMeta,
    /// Every task of the tree, in no particular order.
    pub tasks: Vec<StoredTask>,
}

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Creates a tree (its root's record follows in the same batch).
    PutTree(TreeMeta),
    /// Inserts or replaces a task's record. Position, root and parent never
    /// change after the first write (I1, I2).
    PutTask(StoredTask),
    /// Deletes a whole tree.
    DeleteTree(TaskId),
    /// Records that a cluster's inbox command `seq` was applied, with its
    /// `answer` (a JSON-RPC `result` or `error` object as JSON), in the
    /// same transaction as the command's effects: so a command is applied
    /// once, even across a takeover. Only a cluster's store writes it;
    /// the others ignore it.
    Receipt {
        /// The tree the command was applied to.
        root: TaskId,
        /// The inbox row.
        seq: i64,
        /// The answer, as JSON text.
        answer: String,
    },
    /// Appends an entry to a task's journal (durable execution): a row of
    /// its own, deleted with the tree, handed back by `load` inside the
    /// task's state (see [`with_journal`]).
    AppendJournal(JournalRow),
    /// The runtime let go of a finished tree (its root is terminal and
    /// every change of it was durable before): a store that answers for
    /// such trees ([`TaskStore::finished`]) marks it so, no longer hands
    /// it out from `load`, drops its journal (a finished tree never runs
    /// again) and deletes it itself once `delete_at` passes. Other stores
    /// ignore it (the runtime only lets go of trees such a store holds).
    Release {
        /// The tree.
        root: TaskId,
        /// When the tree is deleted (ms since the Unix epoch); `None`:
        /// never.
        delete_at: Option<u64>,
    },
    /// A tree's root just became terminal, on a store that marks finished
    /// trees as they end ([`TaskStore::marks_ended`]): written in the batch
    /// of the root's terminal state, just before it. The store marks the
    /// tree as a [`WriteOp::Release`] would (on the row that write changes
    /// anyway), while the runtime keeps the tree in memory for its grace;
    /// when the tree then leaves memory nothing more is written. Until
    /// then a later write of the tree (its deletion) may still follow.
    /// Other stores ignore it (the runtime only writes it to a store that
    /// asked for it).
    Ended {
        /// The tree.
        root: TaskId,
        /// When the tree is deleted (ms since the Unix epoch); `None`:
        /// never.
        delete_at: Option<u64>,
    },
}

/// One entry of a task's journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRow {
    /// The tree.
    pub root: TaskId,
    /// The task.
    pub task: TaskId,
    /// The entry's place in the task's journal (0, 1, 2...).
    pub n: u32,
    /// The entry, as JSON text.
    pub entry: String,
}

/// A task's stored state with its journal rows (JSON texts, in order)
/// put back in, as `load` hands it out: the state's `journal.entries`.
///
/// # Errors
///
/// The state or an entry is not JSON (the store is damaged).
pub fn with_journal(state: &str, entries: &[String]) -> Result<String, StoreError> {
    if entries.is_empty() {
        return Ok(state.to_owned());
    }
    let corrupt = |e: serde_json::Error| StoreError::Corrupt(format!("a task's journal: {e}"));
    let mut v: Value = serde_json::from_str(state).map_err(corrupt)?;
    let rows: Vec<Value> = entries
        .iter()
        .map(|e| serde_json::from_str(e))
        .collect::<Result<_, _>>()
        .map_err(corrupt)?;
    let Some(obj) = v.as_object_mut() else {
        return Err(StoreError::Corrupt("a task's state is not a JSON object".into()));
    };
    let journal = obj
        .entry("journal")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Some(j) = journal.as_object_mut() {
        j.insert("entries".into(), Value::Array(rows));
    }
    Ok(v.to_string())
}

impl WriteOp {
    /// The tree this write belongs to.
    pub fn root(&self) -> TaskId {
        match self {
            WriteOp::PutTree(m) => m.root,
            WriteOp::PutTask(t) => t.root,
            WriteOp::DeleteTree(r) => *r,
            WriteOp::Receipt { root, .. } => *root,
            WriteOp::AppendJournal(row) => row.root,
            WriteOp::Release { root, .. } | WriteOp::Ended { root, .. } => *root,
        }
    }
}

/// What one command changed in one tree: applied atomically.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteBatch {
    /// The tree.
    pub root: TaskId,
    /// The tree's version after this batch.
    pub version: u64,
    /// The writes, in order.
    pub ops: Vec<WriteOp>,
}

/// A store failure. Cloneable: every waiter of a failed batch gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The database cannot be opened, read or written.
    Io(String),
    /// The database is damaged or holds data that breaks an invariant. It
    /// is reported, never repaired into a different tree.
    Corrupt(String),
    /// The database was written by a newer `subtask` with a schema this
    /// build does not know.
    NewerSchema {
        /// The schema version in the file.
        found: i64,
        /// The newest this build supports.
        supported: i64,
    },
    /// Another process holds the database.
    Locked(String),
    /// The store failed earlier and accepts no more writes.
    Failed(String),
    /// The database has no space left (the disk is full, or its size
    /// limit is reached). Not sticky: the writes are kept and land once
    /// space returns.
    Full(String),
    /// The encryption keys do not fit the database (`docs/encryption.md`):
    /// it holds values sealed with a key the key file lacks, a key has the
    /// right id but other bytes, or the database is sealed and no key was
    /// given. The message names the key id.
    Key(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io(m) => write!(f, "store I/O error: {m}"),
            StoreError::Corrupt(m) => write!(f, "the database is damaged: {m}"),
            StoreError::NewerSchema { found, supported } => write!(
                f,
                "the database has schema version {found}, newer than the {supported} this subtask supports; upgrade subtask"
            ),
            StoreError::Locked(m) => write!(f, "the database is in use: {m}"),
            StoreError::Failed(m) => write!(f, "the store failed earlier and is read-only: {m}"),
            StoreError::Full(m) => write!(f, "the task store is full: {m}"),
            StoreError::Key(m) => write!(f, "encryption key: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The one boundary for persistence (see the module's contract).
pub trait TaskStore: Send + Sync + 'static {
    /// Queues a batch and returns its ticket at once, without I/O.
    fn submit(&self, batch: WriteBatch) -> Ticket;

    /// `Ok(true)` when `ticket` is durable now (the fast path of a reader).
    ///
    /// # Errors
    ///
    /// The store failed at or before `ticket`.
    fn is_durable(&self, ticket: Ticket) -> Result<bool, StoreError>;

    /// Resolves once `ticket` (and so every earlier one) is durable.
    fn wait_durable(&self, ticket: Ticket) -> BoxFuture<'static, Result<(), StoreError>>;

    /// The latest ticket handed out.
    fn last_ticket(&self) -> Ticket;

    /// `Ok` when new work may start: the store is neither failed nor
    /// full. A caller refuses a new task (or a client's command) with this
    /// error rather than creating state the store cannot keep now. The
    /// default (a store that never fills) is always `Ok`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Full`] while writes are held for lack of space; the
    /// sticky failure of a failed store.
    fn writable(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Every tree that is not deleted (blocking; for start-up). Waits for
    /// batches submitted before the call.
    ///
    /// # Errors
    ///
    /// I/O errors, damaged data.
    fn load(&self) -> Result<Vec<StoredTree>, StoreError>;

    /// One task by id (blocking). Waits for batches submitted before the call.
    ///
    /// # Errors
    ///
    /// I/O errors.
    fn get(&self, id: TaskId) -> Result<Option<StoredTask>, StoreError>;

    /// A short description for logs (`sqlite:./subtask.db (full)`).
    fn describe(&self) -> String;

    /// The writer's group commit counters (duration, batches per commit),
    /// for `/metrics`; `None` for a store without a writer (the default).
    fn commit_stats(&self) -> Option<&CommitStats> {
        None
    }

    /// Reads of the trees the runtime let go of ([`WriteOp::Release`]),
    /// when this store answers for them; `None` (the default) when it does
    /// not, and the runtime then keeps finished trees in memory.
    fn finished(&self) -> Option<&dyn FinishedTrees> {
        None
    }

    /// Whether the runtime may let finished trees go from memory
    /// ([`WriteOp::Release`]) on this store: someone answers for them from
    /// its rows. By default, when the store itself does
    /// ([`TaskStore::finished`]); a cluster member's PostgreSQL store says
    /// yes without it, since its cluster reads every tree its instance does
    /// not hold from the database (`docs/scale-out.md`).
    fn lets_finished_go(&self) -> bool {
        self.finished().is_some()
    }

    /// Whether this store marks a tree let go as its root ends
    /// ([`WriteOp::Ended`], with the root's terminal state) rather than
    /// when the tree leaves memory ([`WriteOp::Release`], a grace later).
    /// `false` by default. The SQLite store says yes: the mark then costs
    /// one more column on a row its commit writes anyway, where a
    /// release a grace later rewrites a page written seconds before.
    fn marks_ended(&self) -> bool {
        false
    }
}

/// A stored task as a reader outside the runtime shows it: its place in
/// its tree, its state (the runtime's encoding), its tree's owner and its
/// children's ids in position order.
#[derive(Debug, Clone)]
pub struct ReadTask {
    /// The task.
    pub id: TaskId,
    /// Its tree's root.
    pub root: TaskId,
    /// Its parent (`None` for a root).
    pub parent: Option<TaskId>,
    /// Its position among its siblings.
    pub position: u32,
    /// The stored state (opened when it was sealed).
    pub state: String,
    /// The principal owning its tree (`None`: an unowned tree).
    pub owner: Option<String>,
    /// Its children, in position order (empty where a reader says it
    /// does not read them).
    pub children: Vec<TaskId>,
}

/// A tree's root as a list of trees shows it: its list position (larger
/// for newer trees), its row (children not read) and its stored launch,
/// opened.
#[derive(Debug)]
pub struct ListedRoot {
    /// The list position: newer trees have larger ones.
    pub seq: i64,
    /// The root's row (its `children` are not read: empty).
    pub task: ReadTask,
    /// The stored launch, opened (`None` when the tree has none).
    pub launch: Option<String>,
}

/// Where a listed task is in a store's list: its tree's and its own
/// positions (the stored sequence numbers).
pub type ListPosition = (i64, i64);

/// Now, in ms since the Unix epoch: the unit of a released tree's deletion
/// time in the stores' rows ([`WriteOp::Release`]).
#[cfg_attr(
    not(any(feature = "sqlite", all(feature = "postgres", feature = "server"))),
    allow(dead_code)
)]
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Reads, from a store, of the trees it holds: for the trees the runtime
/// let go of once finished ([`WriteOp::Release`]), which the store then
/// answers for until their deletion time. Blocking: call them off the
/// async threads. A tree past its deletion time reads as absent, deleted
/// or not yet.
pub trait FinishedTrees: Send + Sync {
    /// Task `id` with its children's ids; `None` when it is not stored.
    fn read_task(&self, id: TaskId) -> Result<Option<ReadTask>, StoreError>;

    /// Up to `limit` tasks of `owner`'s trees, trees in creation order and
    /// each tree's tasks in creation order, after the list position
    /// `after` (a tree's and a task's positions), each with its position.
    fn list_tasks(
        &self,
        owner: &str,
        after: (i64, i64),
        limit: usize,
    ) -> Result<Vec<(ListPosition, ReadTask)>, StoreError>;

    /// Up to `limit` of `owner`'s trees, newest first, with list
    /// positions below `before`.
    fn list_roots(&self, owner: &str, before: i64, limit: usize) -> Result<Vec<ListedRoot>, StoreError>;

    /// Every task of the trees holding the tasks `ids`, each tree's in
    /// creation order (children not read), with each root's opened launch.
    fn read_trees(&self, ids: &[TaskId]) -> Result<Vec<(ReadTask, Option<String>)>, StoreError>;
}

/// The durable watermark shared by a backend and its waiters: tickets up to
/// it are durable; a failure is sticky; a hold (the store is full) is not.
#[derive(Debug, Default)]
pub struct Watermark {
    durable: AtomicU64,
    failed: Mutex<Option<(u64, StoreError)>>,
    /// Tickets from this one on are held back for lack of space: they
    /// report the error until the hold is lifted (see [`Watermark::hold`]).
    held: Mutex<Option<(u64, StoreError)>>,
    /// Wakers by the ticket they wait for: an advance wakes only the
    /// waiters it satisfies.
    waiters: Mutex<std::collections::BTreeMap<u64, Vec<Waker>>>,
}

impl Watermark {
    /// A watermark at ticket 0.
    pub fn new() -> Arc<Watermark> {
        Arc::new(Watermark::default())
    }

    /// Tickets up to `t` are durable.
    pub fn advance(&self, t: Ticket) {
        self.durable.fetch_max(t.0, Ordering::AcqRel);
        let ready = {
            let mut w = self.waiters.lock();
            let later = w.split_off(&(t.0 + 1));
            std::mem::replace(&mut *w, later)
        };
        for waker in ready.into_values().flatten() {
            waker.wake();
        }
    }

    /// The latest durable ticket.
    pub fn durable(&self) -> Ticket {
        Ticket(self.durable.load(Ordering::Acquire))
    }

    /// Ticket `t` and every later one failed with `e`.
    pub fn fail(&self, t: Ticket, e: StoreError) {
        let mut f = self.failed.lock();
        if f.is_none() {
            *f = Some((t.0, e));
        }
        drop(f);
        let all = std::mem::take(&mut *self.waiters.lock());
        for waker in all.into_values().flatten() {
            waker.wake();
        }
    }

    /// Ticket `t` and every later one are held back with `e` (the store
    /// is full; they are kept and retried): until [`Watermark::lift`],
    /// they report `e` instead of waiting, and waiters are woken to see
    /// it. Called again, it moves the hold (the held tickets before the
    /// new `t` were written meanwhile).
    pub fn hold(&self, t: Ticket, e: StoreError) {
        *self.held.lock() = Some((t.0, e));
        let all = std::mem::take(&mut *self.waiters.lock());
        for waker in all.into_values().flatten() {
            waker.wake();
        }
    }

    /// Ends a hold: the held tickets were written and become durable as
    /// usual.
    pub fn lift(&self) {
        *self.held.lock() = None;
    }

    /// `Ok` when new work may start.
    ///
    /// # Errors
    ///
    /// The sticky failure, or the error of the current hold.
    pub fn writable(&self) -> Result<(), StoreError> {
        if let Some((_, e)) = &*self.failed.lock() {
            return Err(e.clone());
        }
        match &*self.held.lock() {
            Some((_, e)) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// `Ok(true)` when `t` is durable.
    ///
    /// # Errors
    ///
    /// The store failed at or before `t`, or `t` is held back (full).
    pub fn check(&self, t: Ticket) -> Result<bool, StoreError> {
        if self.durable.load(Ordering::Acquire) >= t.0 {
            return Ok(true);
        }
        if let Some((at, e)) = &*self.failed.lock()
            && *at <= t.0
        {
            return Err(e.clone());
        }
        match &*self.held.lock() {
            Some((at, e)) if *at <= t.0 => Err(e.clone()),
            _ => Ok(false),
        }
    }

    /// Waits until `t` is durable.
    ///
    /// # Errors
    ///
    /// The store failed at or before `t`.
    pub async fn wait(self: Arc<Self>, t: Ticket) -> Result<(), StoreError> {
        std::future::poll_fn(|cx| {
            if self.check(t)? {
                return Poll::Ready(Ok(()));
            }
            let mut w = self.waiters.lock();
            // Checked again under the lock: an advance in between has
            // already taken the waiters it satisfies.
            if self.check(t)? {
                return Poll::Ready(Ok(()));
            }
            let list = w.entry(t.0).or_default();
            if !list.iter().any(|x| x.will_wake(cx.waker())) {
                list.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }

    /// Blocks the calling thread until `t` is durable (for start-up and tests).
    ///
    /// # Errors
    ///
    /// The store failed at or before `t`.
    pub fn wait_blocking(&self, t: Ticket) -> Result<(), StoreError> {
        while !self.check(t)? {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        Ok(())
    }
}
