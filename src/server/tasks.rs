//! The `tasks/*` methods of the 2026-07-28 wire: `get`, `update`, `cancel`,
//! and SEP-2669's `steer`, `pause`, `resume`; what the caller may see, and
//! how a task is shown on this wire.

use std::sync::Arc;

use serde_json::Value;

use super::Server;
use super::auth::Principal;
use super::reply::{Reply, result_reply, runtime_error, store_error, task_result};
use super::request::{RequestCtx, TaskCommand, TaskIdOnly};
use crate::model::{AckResult, ClientView, DetailedTask, ErrorObject, TaskId};
use crate::runtime::{Applied, Owner};

impl Server {
    pub(crate) fn owner(&self, principal: &Principal) -> Arc<Owner> {
        self.inner.owners.of(principal)
    }

    /// `Ok` when the store can take new work: a new task or a client's
    /// command is refused before it changes anything while the store is
    /// full (or failed).
    pub(crate) fn writable(&self) -> Result<(), ErrorObject> {
        match self.inner.runtime.store() {
            Some(store) => store.writable().map_err(store_error),
            None => Ok(()),
        }
    }

    /// Resolves a task id the caller may see; unknown, malformed and foreign
    /// ids are indistinguishable.
    pub(crate) fn visible_task(&self, raw: &str, principal: &Principal) -> Result<TaskId, ErrorObject> {
        let not_found = ErrorObject::task_not_found;
        let id: TaskId = raw.parse().map_err(|_| not_found())?;
        match self.inner.runtime.owner_of(id) {
            Some(owner) if owner.name() == principal.name() => Ok(id),
            _ => Err(not_found()),
        }
    }

    /// `tasks/get`: the owner check, the snapshot and the durability ticket
    /// under one lookup of the tree, then the wait for that ticket.
    pub(crate) async fn get_task(&self, p: TaskIdOnly, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let id: TaskId = p.task_id.parse().map_err(|_| ErrorObject::task_not_found())?;
        let rt = &self.inner.runtime;
        let Some((snap, ticket)) = rt.get_owned(id, ctx.principal.name(), ctx.view()) else {
            let snap = self
                .remote_get(id, ctx.principal.name(), ctx.view())
                .await?
                .ok_or_else(ErrorObject::task_not_found)?;
            return Ok(result_reply(&ctx.id, task_result(snap)));
        };
        rt.durable(ticket).await.map_err(store_error)?;
        Ok(result_reply(&ctx.id, task_result(snap)))
    }

    /// A task this instance does not hold, read from the cluster's
    /// database (`None` without a cluster, for unknown and foreign ids).
    pub(crate) async fn remote_get(
        &self,
        id: TaskId,
        principal: &str,
        view: ClientView,
    ) -> Result<Option<DetailedTask>, ErrorObject> {
        #[cfg(feature = "postgres")]
        if let Some(node) = self.cluster() {
            return node.get(id, principal, view).await.map_err(|e| {
                ErrorObject::new(
                    crate::model::ErrorCode::INTERNAL_ERROR,
                    format!("the task database is unavailable: {e}"),
                )
            });
        }
        let _ = (id, principal, view);
        Ok(None)
    }

    /// Passes `command` on to the cluster instance holding task `id` and
    /// returns its answer's `result` ("task not found" without a cluster,
    /// for unknown and foreign ids); `view` is the requester's.
    pub(crate) async fn remote_command(
        &self,
        id: TaskId,
        principal: &str,
        command: &TaskCommand,
        view: ClientView,
    ) -> Result<Value, ErrorObject> {
        #[cfg(feature = "postgres")]
        if let Some(node) = self.cluster() {
            let command = super::request::InboxCommand::of(command, view);
            return node.command(id, principal, command).await;
        }
        let _ = (id, principal, command, view);
        Err(ErrorObject::task_not_found())
    }

    /// A `tasks/*` method other than `tasks/get`: applied to a task this
    /// instance holds, answered once durable; a task it does not hold is
    /// passed on to the cluster instance that may hold it.
    pub(crate) async fn task_command(
        &self,
        command: TaskCommand,
        ctx: &RequestCtx,
    ) -> Result<Reply, ErrorObject> {
        let Ok(id) = self.visible_task(&command.task_id, &ctx.principal) else {
            // Not held here: another cluster instance may hold it.
            let id: TaskId = command
                .task_id
                .parse()
                .map_err(|_| ErrorObject::task_not_found())?;
            let result = self
                .remote_command(id, ctx.principal.name(), &command, ctx.view())
                .await?;
            return Ok(result_reply(&ctx.id, result));
        };
        // Nothing is changed that the store cannot keep now.
        self.writable()?;
        let rt = &self.inner.runtime;
        let applied = rt
            .apply_with_receipt(id, command.command, |_| None)
            .ok_or_else(ErrorObject::task_not_found)?
            .map_err(runtime_error)?;
        let reply = match applied {
            Applied::Ack => result_reply(&ctx.id, AckResult::new()),
            Applied::Task(snap) => result_reply(&ctx.id, task_result(*snap)),
        };
        // Nothing is acknowledged or shown before it is durable.
        rt.flushed(id).await.map_err(store_error)?;
        Ok(reply)
    }
}
