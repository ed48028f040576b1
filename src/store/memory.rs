//! The in-memory store: every batch applied at once, nothing survives the
//! process. The reference the durable backends are compared against.

use std::collections::HashMap;

use futures::future::BoxFuture;
use parking_lot::Mutex;

use super::{StoreError, StoredTask, StoredTree, TaskStore, Ticket, TreeMeta, WriteBatch, WriteOp};
use crate::model::TaskId;

#[derive(Default)]
struct State {
    next: u64,
    trees: HashMap<TaskId, TreeMeta>,
    tasks: HashMap<TaskId, StoredTask>,
    by_root: HashMap<TaskId, Vec<TaskId>>,
    /// Journal entries by task, in order.
    journal: HashMap<TaskId, Vec<String>>,
}

/// A [`TaskStore`] in memory: batches are applied (and "durable") when submitted.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("MemoryStore")
            .field("trees", &st.trees.len())
            .field("tasks", &st.tasks.len())
            .finish()
    }
}

impl TaskStore for MemoryStore {
    fn submit(&self, batch: WriteBatch) -> Ticket {
        let mut st = self.state.lock();
        st.next += 1;
        for op in batch.ops {
            match op {
                WriteOp::PutTree(meta) => {
                    st.trees.insert(meta.root, meta);
                }
                WriteOp::PutTask(mut task) => {
                    task.version = batch.version;
                    if let Some(old) = st.tasks.get(&task.id) {
                        // Position, root and parent are fixed at creation.
                        task.position = old.position;
                        task.root = old.root;
                        task.parent = old.parent;
                    } else {
                        st.by_root.entry(task.root).or_default().push(task.id);
                    }
                    st.tasks.insert(task.id, task);
                }
                WriteOp::DeleteTree(root) => {
                    st.trees.remove(&root);
                    for id in st.by_root.remove(&root).unwrap_or_default() {
                        st.tasks.remove(&id);
                        st.journal.remove(&id);
                    }
                }
                WriteOp::AppendJournal(row) => {
                    let entries = st.journal.entry(row.task).or_default();
                    debug_assert_eq!(
                        entries.len(),
                        row.n as usize,
                        "journal rows are appended in order"
                    );
                    entries.push(row.entry);
                }
                // No inbox in memory; finished trees stay in the runtime.
                WriteOp::Receipt { .. } | WriteOp::Release { .. } | WriteOp::Ended { .. } => {}
            }
        }
        Ticket(st.next)
    }

    fn is_durable(&self, _ticket: Ticket) -> Result<bool, StoreError> {
        Ok(true)
    }

    fn wait_durable(&self, _ticket: Ticket) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn last_ticket(&self) -> Ticket {
        Ticket(self.state.lock().next)
    }

    fn load(&self) -> Result<Vec<StoredTree>, StoreError> {
        let st = self.state.lock();
        let mut out = Vec::with_capacity(st.trees.len());
        for (root, meta) in &st.trees {
            let mut tasks: Vec<StoredTask> = st
                .by_root
                .get(root)
                .map(|ids| ids.iter().filter_map(|id| st.tasks.get(id).cloned()).collect())
                .unwrap_or_default();
            for t in &mut tasks {
                if let Some(entries) = st.journal.get(&t.id) {
                    t.state = super::with_journal(&t.state, entries)?;
                }
            }
            out.push(StoredTree {
                meta: meta.clone(),
                tasks,
            });
        }
        Ok(out)
    }

    fn get(&self, id: TaskId) -> Result<Option<StoredTask>, StoreError> {
        Ok(self.state.lock().tasks.get(&id).cloned())
    }

    fn describe(&self) -> String {
        "memory".to_owned()
    }
}
