//! The queue between a store's callers and its one writer thread, shared
//! by the SQLite and PostgreSQL stores: `submit` hands out tickets in
//! order without I/O, reads run on the writer's connection after every
//! batch submitted before them, and the writer takes whole groups of
//! batches to commit together. Also the assembly of loaded rows into trees.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::{StoreError, StoredTask, StoredTree, Ticket, TreeMeta, Watermark, WriteBatch};
use crate::model::{IdMap, TaskId};

/// Work for the writer that reads its connection `C`.
pub(crate) type ReadJob<C> = Box<dyn FnOnce(&mut C) + Send>;

enum Job<C> {
    Write(u64, WriteBatch),
    Read(ReadJob<C>),
}

struct Queue<C> {
    next: u64,
    pending: VecDeque<Job<C>>,
    closing: bool,
}

/// What the writer does next.
pub(crate) enum Next<C> {
    /// Commit the group it was handed.
    Commit,
    /// Run a read.
    Read(ReadJob<C>),
    /// The store closed and everything queued is done.
    Stop,
}

/// The queue, its wake-up and the durable watermark.
pub(crate) struct WriteQueue<C> {
    queue: Mutex<Queue<C>>,
    wake: Condvar,
    /// Tickets up to it are durable.
    pub(crate) mark: Arc<Watermark>,
}

impl<C: 'static> WriteQueue<C> {
    pub(crate) fn new() -> Self {
        WriteQueue {
            queue: Mutex::new(Queue {
                next: 0,
                pending: VecDeque::new(),
                closing: false,
            }),
            wake: Condvar::new(),
            mark: Watermark::new(),
        }
    }

    /// Queues `batch`; its ticket, at once.
    pub(crate) fn submit(&self, batch: WriteBatch) -> Ticket {
        let t = {
            let mut q = self.queue.lock();
            q.next += 1;
            let t = q.next;
            q.pending.push_back(Job::Write(t, batch));
            t
        };
        self.wake.notify_one();
        Ticket(t)
    }

    /// The latest ticket handed out.
    pub(crate) fn last_ticket(&self) -> Ticket {
        Ticket(self.queue.lock().next)
    }

    /// Runs `f` on the writer's connection after every batch submitted
    /// before, and waits for its answer (blocking).
    pub(crate) fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut C) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        {
            let mut q = self.queue.lock();
            if q.closing {
                // A writer that died left its failure on the watermark.
                return Err(self
                    .mark
                    .writable()
                    .err()
                    .unwrap_or_else(|| StoreError::Failed("the store is closed".into())));
            }
            q.pending.push_back(Job::Read(Box::new(move |c| {
                let _ = tx.send(f(c));
            })));
        }
        self.wake.notify_one();
        rx.recv()
            .map_err(|_| StoreError::Failed("the store's writer thread stopped".into()))?
    }

    /// Waits `d` (the writer, before writing a batch again that did not
    /// fit); `false`, at once, when the store is closing. Only SQLite's
    /// writer waits so.
    #[cfg(feature = "sqlite")]
    pub(crate) fn pause_unless_closing(&self, d: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + d;
        let mut q = self.queue.lock();
        while !q.closing {
            if self.wake.wait_until(&mut q, until).timed_out() {
                return !q.closing;
            }
        }
        false
    }

    /// A guard for the writer thread to hold for its whole life: if the
    /// thread unwinds (a panic in the writer or in the database client),
    /// [`WriteQueue::writer_died`] runs, so nobody waits for it forever.
    pub(crate) fn writer_guard(&self) -> WriterGuard<'_, C> {
        WriterGuard(self)
    }

    /// The writer thread is gone before the store closed: every ticket not
    /// yet durable fails (the ones in the group it held, everything queued
    /// and everything submitted later), queued reads are dropped, so their
    /// callers get an error instead of an answer, and later reads are
    /// refused. What was committed before stays committed; the store is
    /// failed, as after a failed commit.
    pub(crate) fn writer_died(&self) {
        let e =
            StoreError::Failed("the store's writer thread stopped (it panicked); restart the process".into());
        let queued = {
            let mut q = self.queue.lock();
            q.closing = true;
            std::mem::take(&mut q.pending)
        };
        self.mark.fail(Ticket(self.mark.durable().0 + 1), e);
        // Dropping a read drops its answer's sender: its caller wakes.
        drop(queued);
        self.wake.notify_all();
    }

    /// Asks the writer to stop once everything queued is done.
    pub(crate) fn close(&self) {
        self.queue.lock().closing = true;
        self.wake.notify_all();
    }

    /// The writer's next step, waiting for work: up to `max` queued batches
    /// moved into `group` (empty on entry), or a read queued before any of
    /// them, or the end.
    pub(crate) fn next(&self, group: &mut Vec<(u64, WriteBatch)>, max: usize) -> Next<C> {
        let mut q = self.queue.lock();
        while q.pending.is_empty() && !q.closing {
            self.wake.wait(&mut q);
        }
        if q.pending.is_empty() {
            return Next::Stop;
        }
        while group.len() < max {
            match q.pending.pop_front() {
                Some(Job::Write(t, b)) => group.push((t, b)),
                Some(Job::Read(r)) if group.is_empty() => return Next::Read(r),
                Some(job @ Job::Read(_)) => {
                    q.pending.push_front(job);
                    break;
                }
                None => break,
            }
        }
        Next::Commit
    }
}

/// Held by a store's writer thread ([`WriteQueue::writer_guard`]): fails
/// the store if the thread unwinds.
pub(crate) struct WriterGuard<'a, C: 'static>(&'a WriteQueue<C>);

impl<C: 'static> Drop for WriterGuard<'_, C> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.writer_died();
        }
    }
}

/// Loaded task rows into trees, in the order of each tree's first row: a
/// root row carries its tree's metadata. A tree without its root row gets
/// empty metadata here and is reported by the restore, which names what is
/// missing.
pub(crate) fn assemble(
    rows: impl IntoIterator<Item = Result<(StoredTask, Option<TreeMeta>), StoreError>>,
) -> Result<Vec<StoredTree>, StoreError> {
    let mut order: Vec<TaskId> = Vec::new();
    let mut trees: IdMap<(Option<TreeMeta>, Vec<StoredTask>)> = IdMap::default();
    for row in rows {
        let (task, meta) = row?;
        let entry = trees.entry(task.root).or_insert_with(|| {
            order.push(task.root);
            (None, Vec::new())
        });
        if meta.is_some() {
            entry.0 = meta;
        }
        entry.1.push(task);
    }
    Ok(order
        .into_iter()
        .map(|root| {
            let (meta, tasks) = trees.remove(&root).expect("listed");
            let meta = meta.unwrap_or(TreeMeta {
                root,
                owner: None,
                resumable: false,
                launch: None,
            });
            StoredTree { meta, tasks }
        })
        .collect())
}
