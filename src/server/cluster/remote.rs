//! Reads of trees another instance holds: `tasks/get` ([`Node::get`]), a
//! stream of a task's snapshots ([`Node::watch`]) and a 2025-11-25
//! `tasks/list` page ([`Node::list`]), all built from the stored rows
//! (`crate::store::postgres::remote`) with the code the holder uses
//! ([`TaskRecord::detailed`](crate::core::TaskRecord::detailed)).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::broadcast;

use super::Node;
use crate::core::decode_state;
use crate::model::{ClientView, DetailedTask, TaskId};
use crate::store::StoreError;
use crate::store::postgres::remote::{self, RemoteTask};

impl Node {
    /// `tasks/get` of a task this instance does not hold: the stored row
    /// and its children's ids. `None` for unknown ids and for another
    /// principal's (or an unowned) tree, alike.
    pub(crate) async fn get(
        self: &Arc<Self>,
        id: TaskId,
        principal: &str,
        view: ClientView,
    ) -> Result<Option<DetailedTask>, StoreError> {
        let row = self.blocking(move |c| remote::read_task(c, id)).await?;
        let Some(row) = row else { return Ok(None) };
        if row.owner.as_deref() != Some(principal) {
            return Ok(None);
        }
        Ok(Some(detailed(row, view)?))
    }

    /// Snapshots of a task another instance holds, as
    /// [`Runtime::subscribe`](crate::runtime::Runtime::subscribe) gives
    /// them: the current one, then each change, ending after a terminal
    /// one. Re-read when a commit touches its tree (and every 2 s).
    pub(crate) fn watch(
        self: &Arc<Self>,
        id: TaskId,
        principal: &str,
        view: ClientView,
    ) -> BoxStream<'static, DetailedTask> {
        struct S {
            node: Arc<Node>,
            rx: broadcast::Receiver<Option<Arc<Vec<TaskId>>>>,
            principal: String,
            root: Option<TaskId>,
            last: Option<DetailedTask>,
            done: bool,
        }
        let s = S {
            node: self.clone(),
            rx: self.changed.subscribe(),
            principal: principal.to_owned(),
            root: None,
            last: None,
            done: false,
        };
        futures::stream::unfold(s, move |mut s| async move {
            loop {
                if s.done {
                    return None;
                }
                match s.node.get(id, &s.principal, view).await {
                    Ok(Some(snap)) => {
                        if s.last.as_ref() != Some(&snap) {
                            s.done = snap.status().is_terminal();
                            s.last = Some(snap.clone());
                            return Some((snap, s));
                        }
                    }
                    // Deleted (or never visible): nothing more to show.
                    Ok(None) => return None,
                    Err(e) => tracing::warn!(error = %e, task = %id, "re-reading a watched task failed"),
                }
                if s.root.is_none() {
                    s.root = s.node.root_of(id).await;
                }
                let tick = tokio::time::sleep(Duration::from_secs(2));
                tokio::pin!(tick);
                loop {
                    tokio::select! {
                        () = &mut tick => break,
                        m = s.rx.recv() => match m {
                            Ok(Some(roots)) if s.root.is_some_and(|r| !roots.contains(&r)) => continue,
                            Err(broadcast::error::RecvError::Closed) => return None,
                            _ => break,
                        }
                    }
                }
            }
        })
        .boxed()
    }

    /// A page of the principal's tasks from the database, for a 2025-11-25
    /// `tasks/list` on any instance: trees in creation order, each tree's
    /// tasks in creation order, after the position `after` (stored
    /// sequence numbers of a tree and a task), and where the next page
    /// starts.
    pub(crate) async fn list(
        self: &Arc<Self>,
        principal: &str,
        after: (i64, i64),
        limit: usize,
        view: ClientView,
    ) -> Result<(Vec<DetailedTask>, Option<(i64, i64)>), StoreError> {
        let principal = principal.to_owned();
        let rows = self
            .blocking(move |c| remote::list_tasks(c, &principal, after, limit))
            .await?;
        let full = rows.len() == limit;
        let mut out = Vec::with_capacity(rows.len());
        let mut last = after;
        for (at, row) in rows {
            last = at;
            out.push(detailed(row, view)?);
        }
        let next = full.then_some(last);
        Ok((out, next))
    }

    /// The root of task `id`'s tree, `None` when it is not stored or cannot
    /// be read now.
    async fn root_of(self: &Arc<Self>, id: TaskId) -> Option<TaskId> {
        self.blocking(move |c| remote::root_of(c, id))
            .await
            .ok()
            .flatten()
    }
}

/// A stored task as `view` sees it, with the code the holder uses.
fn detailed(row: RemoteTask, view: ClientView) -> Result<DetailedTask, StoreError> {
    let id = row.id;
    let rec = decode_state(id, row.root, row.parent, row.position, &row.state)
        .map_err(|e| StoreError::Corrupt(format!("task {id}: {e}")))?;
    Ok(rec.detailed(row.children, view))
}
