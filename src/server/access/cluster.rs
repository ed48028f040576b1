//! The trees other cluster instances hold ([`Elsewhere`] for a cluster
//! instance's [`Node`]): read from the database, commanded through its
//! inbox, listed from the database so that every instance gives the same
//! pages (`docs/scale-out.md`).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::Value;

#[cfg(feature = "ui")]
use super::TreeOfRows;
use super::{Elsewhere, Page};
use crate::model::{ClientView, DetailedTask, ErrorCode, ErrorObject, TaskId};
#[cfg(feature = "ui")]
use crate::runtime::view::TreeSummary;
use crate::server::cluster::{Node, fenced_error};
use crate::server::reply::{invalid, read_error};
use crate::server::request::{InboxCommand, TaskCommand};

impl Elsewhere for Arc<Node> {
    fn get<'a>(
        &'a self,
        id: TaskId,
        principal: &'a str,
        view: ClientView,
    ) -> BoxFuture<'a, Result<Option<DetailedTask>, ErrorObject>> {
        Box::pin(async move {
            Node::get(self, id, principal, view).await.map_err(|e| {
                ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("the task database is unavailable: {e}"),
                )
            })
        })
    }

    fn command<'a>(
        &'a self,
        id: TaskId,
        principal: &'a str,
        command: &'a TaskCommand,
        view: ClientView,
    ) -> BoxFuture<'a, Result<Value, ErrorObject>> {
        Box::pin(Node::command(
            self,
            id,
            principal,
            InboxCommand::of(command, view),
        ))
    }

    fn watch(&self, id: TaskId, principal: &str, view: ClientView) -> BoxStream<'static, DetailedTask> {
        Node::watch(self, id, principal, view)
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
            let (tasks, next) = Node::list(self, principal, after, limit, view)
                .await
                .map_err(read_error)?;
            Ok((tasks, next.map(encode_cursor)))
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
            Node::roots(self, principal, before, limit)
                .await
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
            let trees = Node::tree_rows(self, ids, principal).await.map_err(read_error)?;
            Ok(trees
                .into_iter()
                .map(|(root, tool, rows)| TreeOfRows { root, tool, rows })
                .collect())
        })
    }

    #[cfg(feature = "ui")]
    fn tree_changes(&self, root: TaskId) -> BoxStream<'static, ()> {
        Node::tree_changes(self, root)
    }

    fn fenced(&self) -> Option<BoxFuture<'static, ()>> {
        let node = self.clone();
        Some(Box::pin(async move { Node::fenced(&node).await }))
    }

    fn fenced_error(&self) -> Option<ErrorObject> {
        Node::is_fenced(self).then(fenced_error)
    }

    #[cfg(feature = "ui")]
    fn is_cluster(&self) -> bool {
        true
    }
}

/// The prefix of a cluster's `tasks/list` cursor.
const CURSOR: &str = "subtask-dblist";

fn encode_cursor(at: (i64, i64)) -> String {
    super::encode_stored_cursor(CURSOR, at)
}

fn decode_cursor(raw: &str) -> Option<(i64, i64)> {
    super::decode_stored_cursor(CURSOR, raw)
}
