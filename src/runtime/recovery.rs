//! Bringing a store's trees back after a restart.

use std::future::Future;
use std::sync::Arc;

use serde_json::Value;

use super::Runtime;
use super::context::HandlerBody;
use super::owner::Owner;
use super::tree::{Durable, Post, RtTable, StartJob, TreeCell, TreeState};
use crate::core::{Forest, TaskRecord, decode_state};
use crate::store::{StoreError, StoredTree, TreeMeta, WriteOp};

/// What a root task was started as, so it can run again after a restart.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// Whether the handler may run again after a restart (the tool declared
    /// itself resumable).
    pub resumable: bool,
    /// Whatever the caller needs to rebuild the handler (for the server:
    /// the tool call). Stored as JSON.
    pub call: Value,
}

/// What [`Runtime::recover`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Trees loaded.
    pub trees: usize,
    /// Tasks loaded.
    pub tasks: usize,
    /// Tasks that were not terminal when the process stopped.
    pub interrupted: usize,
    /// Of those, tasks that failed (or were cancelled) because their handler was lost.
    pub failed: usize,
    /// Root handlers running again (resumable tools).
    pub rerun: usize,
    /// Subtasks of those that wait for their parent's re-run to spawn them
    /// again (their finished subtasks and steps are not run again).
    pub resumed: usize,
}

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} trees, {} tasks; {} were running: {} failed, {} root handlers run again, {} subtasks resume in place",
            self.trees, self.tasks, self.interrupted, self.failed, self.rerun, self.resumed
        )
    }
}

/// Rebuilds one stored tree, or says what is wrong with it.
fn restore(
    config: &Arc<crate::core::ForestConfig>,
    tree: StoredTree,
    now: crate::model::Timestamp,
) -> Result<(TreeMeta, Forest, u64), String> {
    let root = tree.meta.root;
    let mut version = 0;
    let mut records: Vec<TaskRecord> = Vec::with_capacity(tree.tasks.len());
    for t in tree.tasks {
        version = version.max(t.version);
        let rec = decode_state(t.id, t.root, t.parent, t.position, &t.state)
            .map_err(|e| format!("tree {root}: task {}: {e}", t.id))?;
        records.push(rec);
    }
    let forest = Forest::restore(config.clone(), root, records, now).map_err(|e| e.to_string())?;
    Ok((tree.meta, forest, version))
}

impl Runtime {
    /// Loads every tree the store holds and brings it back: TTL expiry and
    /// deletion are re-armed (what expired meanwhile expires now); tasks
    /// whose handler was running or queued become `failed` with a message
    /// saying the server restarted, children first; a root whose tool is
    /// resumable runs again with its persisted state, with the handler body
    /// `rebuild` returns for its [`TreeMeta`] (`None` fails it like the
    /// others). Completed results are untouched.
    ///
    /// Every tree is checked before any is brought back: one damaged tree
    /// stops the recovery with a report naming it, and nothing is repaired.
    ///
    /// # Errors
    ///
    /// The store cannot be read, or holds a tree that breaks an invariant
    /// (`StoreError::Corrupt`, naming every such tree).
    pub async fn recover<F, Fut>(
        &self,
        owner_of: impl Fn(&str) -> Arc<Owner>,
        rebuild: F,
    ) -> Result<RecoveryReport, StoreError>
    where
        F: FnMut(&TreeMeta) -> Fut,
        Fut: Future<Output = Option<HandlerBody>>,
    {
        let Some(store) = self.inner.store.clone() else {
            return Ok(RecoveryReport::default());
        };
        let stored = tokio::task::spawn_blocking(move || store.load())
            .await
            .map_err(|e| StoreError::Io(format!("loading the store: {e}")))??;
        self.adopt(stored, owner_of, rebuild).await
    }

    /// Brings back `stored` trees as [`Runtime::recover`] does, without
    /// reading the store: for trees read elsewhere, as when a cluster
    /// instance takes over the trees of one that died. The trees must not
    /// be in this runtime already.
    ///
    /// # Errors
    ///
    /// A tree breaks an invariant (`StoreError::Corrupt`, naming every such
    /// tree); then none is brought back.
    pub async fn adopt<F, Fut>(
        &self,
        stored: Vec<StoredTree>,
        owner_of: impl Fn(&str) -> Arc<Owner>,
        mut rebuild: F,
    ) -> Result<RecoveryReport, StoreError>
    where
        F: FnMut(&TreeMeta) -> Fut,
        Fut: Future<Output = Option<HandlerBody>>,
    {
        let inner = self.inner.clone();
        let now = inner.now();
        let mut report = RecoveryReport::default();
        let mut restored = Vec::with_capacity(stored.len());
        let mut broken = Vec::new();
        for tree in stored {
            match restore(&inner.forest_config, tree, now) {
                Ok(t) => restored.push(t),
                Err(e) => broken.push(e),
            }
        }
        if !broken.is_empty() {
            let shown: Vec<&str> = broken.iter().take(10).map(String::as_str).collect();
            return Err(StoreError::Corrupt(format!(
                "{} stored tree(s) break the task invariants and were not loaded (nothing was changed): {}",
                broken.len(),
                shown.join("; ")
            )));
        }
        for (meta, forest, version) in restored {
            let root = meta.root;
            report.trees += 1;
            report.tasks += forest.len();
            let live = forest
                .ids()
                .filter(|id| forest.task(*id).is_some_and(|r| !r.is_terminal()))
                .count();
            report.interrupted += live;
            let body = if meta.resumable && meta.launch.is_some() && live > 0 {
                rebuild(&meta).await
            } else {
                None
            };
            let owner = meta.owner.as_deref().map(&owner_of);
            if let Some(o) = &owner {
                o.force_reserve(live);
            }
            let ids: Vec<_> = forest.ids().collect();
            // The label of a server's tree: the stored call's tool name.
            let label = meta
                .launch
                .as_ref()
                .and_then(|l| l.get("name"))
                .and_then(|n| n.as_str())
                .map(Arc::from);
            let tool = inner.stats.tool(label.as_ref());
            let counts = tool.as_deref().unwrap_or(&inner.stats.unlabeled);
            for id in &ids {
                if let Some(rec) = forest.task(*id) {
                    counts.restored(rec.status());
                }
            }
            let tree = Arc::new(TreeCell::new(
                root,
                TreeState {
                    forest,
                    rt: RtTable::default(),
                    owner,
                    durable: Durable {
                        version,
                        ticket: Default::default(),
                    },
                },
                tool,
                meta.resumable,
            ));
            if let Some(owner) = &tree.state.lock().owner {
                owner.enlist(&tree);
            }
            for id in ids {
                inner.index_insert(id, &tree);
            }
            let mut post = Post::default();
            let recovery = {
                let mut st = tree.state.lock();
                let rec = st.forest.recover_after_restart(now, root, body.is_some());
                // A tree that finished before the stop leaves memory as
                // one finishing now does (`driver/release.rs`), marked
                // now on a store that marks trees as they end (it ended
                // unmarked: under an older build, or with finished trees
                // kept).
                let finished = st.forest.task(root).is_some_and(|r| r.is_terminal());
                if finished && inner.marks_ended() {
                    post.extra.push(WriteOp::Ended {
                        root,
                        delete_at: st.forest.next_deadline().map(|t| t.as_millis()),
                    });
                }
                inner.absorb(inner.tool_of(&tree), &mut st, &mut post);
                post.root_finished |= finished;
                rec
            };
            report.failed += recovery.failed.len();
            report.resumed += recovery.awaiting.len();
            if let (Some(body), Some(root)) = (body, recovery.rerun) {
                report.rerun += 1;
                post.submit(
                    StartJob {
                        tree: tree.clone(),
                        id: root,
                        body: super::supervisor::boxed(body),
                        deps: Vec::new(),
                        rerun: true,
                        meta: None,
                        span: super::span::task_span(
                            &tracing::Span::current(),
                            root,
                            None,
                            root,
                            tree.label().map(|l| &**l),
                            None,
                        ),
                    },
                    false,
                );
            }
            inner.run_post(&tree, post);
        }
        Ok(report)
    }
}
