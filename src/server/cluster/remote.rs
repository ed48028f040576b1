//! Reads of trees another instance holds: `tasks/get` ([`Node::get`]), a
//! stream of a task's snapshots ([`Node::watch`]) and a 2025-11-25
//! `tasks/list` page ([`Node::list`]), all built from the stored rows
//! (`crate::store::postgres::remote`) with the code the holder uses
//! ([`TaskRecord::detailed`](crate::core::TaskRecord::detailed)); and, for
//! the web view (feature `ui`), a principal's trees newest first
//! ([`Node::roots`]), whole trees as rows ([`Node::tree_rows`]) and the
//! changes of a tree ([`Node::tree_changes`]), from the same rows and
//! notifications.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::broadcast;

use super::Node;
use crate::model::{ClientView, DetailedTask, TaskId};
#[cfg(feature = "ui")]
use crate::runtime::view::TreeSummary;
use crate::server::stored::detailed;
#[cfg(feature = "ui")]
use crate::server::stored::{TreeRead, summary, trees_of};
use crate::store::StoreError;
use crate::store::postgres::remote;

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

    /// Up to `limit` of `principal`'s trees, newest first, created before
    /// the list position `before` (a root row's stored sequence number;
    /// all when `None`): each root as a summary whose `tasks` and `counts`
    /// are not filled in (zero; see [`Node::tree_rows`]), its tool the
    /// stored launch's name.
    #[cfg(feature = "ui")]
    pub(crate) async fn roots(
        self: &Arc<Self>,
        principal: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<TreeSummary>, StoreError> {
        let principal = principal.to_owned();
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let roots = self
            .blocking(move |c| remote::list_roots(c, &principal, before, limit))
            .await?;
        roots.into_iter().map(summary).collect()
    }

    /// Every task of each tree in `roots` as stored, as the web view's rows
    /// in pre-order (as [`Runtime::tree_rows`](crate::runtime::Runtime)
    /// gives them for a tree held here), with its tool; only the trees
    /// `principal` owns (another's and unknown ones are left out alike).
    /// `roots` may name any task of a tree: its tree is read.
    #[cfg(feature = "ui")]
    pub(crate) async fn tree_rows(
        self: &Arc<Self>,
        roots: Vec<TaskId>,
        principal: &str,
    ) -> Result<Vec<TreeRead>, StoreError> {
        let tasks = self.blocking(move |c| remote::read_trees(c, &roots)).await?;
        trees_of(tasks, principal)
    }

    /// A tick each time a commit touches tree `root` (or, after a
    /// reconnect, anything may have changed), and every 2 s without one;
    /// subscribed now, so a change after this call and before the next
    /// read is not missed. Ends when this incarnation stops.
    #[cfg(feature = "ui")]
    pub(crate) fn tree_changes(self: &Arc<Self>, root: TaskId) -> BoxStream<'static, ()> {
        let rx = self.changed.subscribe();
        futures::stream::unfold(rx, move |mut rx| async move {
            let tick = tokio::time::sleep(Duration::from_secs(2));
            tokio::pin!(tick);
            loop {
                tokio::select! {
                    () = &mut tick => return Some(((), rx)),
                    m = rx.recv() => match m {
                        Ok(Some(roots)) if !roots.contains(&root) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                        _ => return Some(((), rx)),
                    }
                }
            }
        })
        .boxed()
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
