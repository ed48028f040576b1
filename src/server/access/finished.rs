//! The finished trees the runtime let go of ([`Elsewhere`] for a single
//! instance on a store that answers for them, the SQLite file;
//! `docs/durability.md`, "Finished trees"): read from the store with the
//! code that shows a cluster's stored rows (`server/stored.rs`), their
//! commands answered by the lifecycle code on the tree rebuilt from its
//! rows. Lists come from the store too, live trees included (their rows
//! hold what was shown of them: nothing is shown before it is durable),
//! so a list pages through a server's history as one list.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};
use serde_json::Value;

#[cfg(feature = "ui")]
use super::TreeOfRows;
use super::{Answer, Elsewhere, Page};
use crate::core::ForestConfig;
use crate::model::{AckResult, ClientView, DetailedTask, ErrorCode, ErrorObject, TaskId};
use crate::runtime::Applied;
#[cfg(feature = "ui")]
use crate::runtime::view::TreeSummary;
use crate::server::reply::{invalid, read_error, runtime_error, store_error, task_result};
use crate::server::request::TaskCommand;
use crate::server::stored::{command_on_rows, detailed};
#[cfg(feature = "ui")]
use crate::server::stored::{record, summary, trees_of};
use crate::store::{FinishedTrees, StoreError, TaskStore};

/// The finished trees a single instance's runtime let go of, in its store.
pub(crate) struct Finished {
    store: Arc<dyn TaskStore>,
    forest: Arc<ForestConfig>,
}

impl Finished {
    /// Over `store`, whose [`TaskStore::finished`] is `Some`; `forest` is
    /// the runtime's (for commands on a rebuilt tree).
    pub(crate) fn new(store: Arc<dyn TaskStore>, forest: Arc<ForestConfig>) -> Finished {
        debug_assert!(store.finished().is_some());
        Finished { store, forest }
    }

    /// `f` on the store's reads, on a blocking thread.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn FinishedTrees) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ErrorObject> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let reads = store.finished().expect("a store that answers for finished trees");
            f(reads)
        })
        .await
        .map_err(|e| {
            ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                format!("a read of the task store failed: {e}"),
            )
        })?
        .map_err(read_error)
    }

    /// Waits until everything submitted so far is durable: rows read from
    /// the store are committed, and a live tree's rows may not be durable
    /// yet (a finished tree let go of is: it was before it was let go).
    async fn durable(&self) -> Result<(), ErrorObject> {
        let last = self.store.last_ticket();
        if self.store.is_durable(last).map_err(store_error)? {
            return Ok(());
        }
        self.store.wait_durable(last).await.map_err(store_error)
    }
}

impl Elsewhere for Finished {
    fn get<'a>(
        &'a self,
        id: TaskId,
        principal: &'a str,
        view: ClientView,
    ) -> BoxFuture<'a, Result<Option<DetailedTask>, ErrorObject>> {
        Box::pin(async move {
            // A point read (two rowid lookups and the children's ids by
            // rowid, tens of µs from the page cache) runs on the request's
            // thread: a hop to the blocking pool and back cost more than
            // the read (`docs/durability.md`, "Finished trees").
            let reads = self
                .store
                .finished()
                .expect("a store that answers for finished trees");
            let Some(row) = reads.read_task(id).map_err(read_error)? else {
                return Ok(None);
            };
            if row.owner.as_deref() != Some(principal) {
                return Ok(None);
            }
            let task = detailed(row, view).map_err(read_error)?;
            // A live task is the runtime's to show; one read here (a tree
            // created a moment ago) is shown once durable.
            if !task.status().is_terminal() {
                self.durable().await?;
            }
            Ok(Some(task))
        })
    }

    fn command<'a>(
        &'a self,
        id: TaskId,
        principal: &'a str,
        command: &'a TaskCommand,
        _view: ClientView,
    ) -> BoxFuture<'a, Result<Value, ErrorObject>> {
        Box::pin(async move {
            let rows = self.read(move |r| r.read_trees(&[id])).await?;
            let outcome = command_on_rows(&self.forest, &rows, principal, id, command.command.clone())
                .map_err(read_error)?
                .ok_or_else(ErrorObject::task_not_found)?;
            let answer = match outcome.map_err(runtime_error)? {
                Applied::Ack => Answer::Ack(AckResult::new()),
                Applied::Task(snap) => Answer::Task(Box::new(task_result(*snap))),
            };
            serde_json::to_value(answer)
                .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, e.to_string()))
        })
    }

    fn watch(&self, id: TaskId, principal: &str, view: ClientView) -> BoxStream<'static, DetailedTask> {
        // A finished task does not change: its one snapshot, then the end.
        let this = Finished {
            store: self.store.clone(),
            forest: self.forest.clone(),
        };
        let principal = principal.to_owned();
        futures::stream::once(async move { this.get(id, &principal, view).await.ok().flatten() })
            .filter_map(std::future::ready)
            .boxed()
    }

    fn list<'a>(
        &'a self,
        principal: &'a str,
        cursor: Option<&'a str>,
        limit: usize,
        view: ClientView,
    ) -> Option<BoxFuture<'a, Result<Page, ErrorObject>>> {
        Some(Box::pin(async move {
            let after = match cursor {
                None => (0, 0),
                Some(c) => decode_cursor(c).ok_or_else(|| invalid("invalid cursor for tasks/list"))?,
            };
            let owner = principal.to_owned();
            let rows = self.read(move |r| r.list_tasks(&owner, after, limit)).await?;
            self.durable().await?;
            let full = rows.len() == limit;
            let mut out = Vec::with_capacity(rows.len());
            let mut last = after;
            for (at, row) in rows {
                last = at;
                out.push(detailed(row, view).map_err(read_error)?);
            }
            Ok((out, full.then(|| encode_cursor(last))))
        }))
    }

    #[cfg(feature = "ui")]
    fn roots<'a>(
        &'a self,
        principal: &'a str,
        before: Option<u64>,
        limit: usize,
    ) -> Option<BoxFuture<'a, Result<Vec<TreeSummary>, ErrorObject>>> {
        Some(Box::pin(async move {
            let owner = principal.to_owned();
            let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
            let roots = self.read(move |r| r.list_roots(&owner, before, limit)).await?;
            self.durable().await?;
            roots
                .into_iter()
                .map(summary)
                .collect::<Result<_, _>>()
                .map_err(read_error)
        }))
    }

    #[cfg(feature = "ui")]
    fn tree_rows<'a>(
        &'a self,
        ids: Vec<TaskId>,
        principal: &'a str,
    ) -> BoxFuture<'a, Result<Vec<TreeOfRows>, ErrorObject>> {
        Box::pin(async move {
            let tasks = self.read(move |r| r.read_trees(&ids)).await?;
            // A live tree's rows are shown once durable (a finished one's are).
            if tasks
                .iter()
                .any(|(t, _)| record(t).map_or(true, |r| !r.is_terminal()))
            {
                self.durable().await?;
            }
            Ok(trees_of(tasks, principal)
                .map_err(read_error)?
                .into_iter()
                .map(|(root, tool, rows)| TreeOfRows { root, tool, rows })
                .collect())
        })
    }
    // `tree_changes`, `fenced`, `fenced_error`: the defaults (a finished
    // tree does not change; a single instance is never fenced).
}

/// The prefix of a `tasks/list` cursor read from the SQLite file.
const CURSOR: &str = "subtask-filelist";

fn encode_cursor(at: (i64, i64)) -> String {
    super::encode_stored_cursor(CURSOR, at)
}

fn decode_cursor(raw: &str) -> Option<(i64, i64)> {
    super::decode_stored_cursor(CURSOR, raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    #[test]
    fn list_cursors_round_trip_and_garbage_is_refused() {
        let p = (42, 7);
        assert_eq!(decode_cursor(&encode_cursor(p)), Some(p));
        for bad in [
            "",
            "x",
            &URL_SAFE_NO_PAD.encode("subtask-filelist:1"),
            &URL_SAFE_NO_PAD.encode("subtask-dblist:1:2"),
        ] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }
}
