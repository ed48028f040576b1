//! The `tasks/*` methods of the 2026-07-28 wire: `get`, `update`, `cancel`,
//! and SEP-2669's `steer`, `pause`, `resume`, through the task-access
//! service (`access/`), and the checks every new task or command passes
//! (the caller's owner record, a store that can take the change).

use std::sync::Arc;

use super::Server;
use super::access::TaskAccess;
use super::auth::Principal;
use super::reply::{Reply, result_reply, store_error, task_result};
use super::request::{RequestCtx, TaskCommand, TaskIdOnly};
use crate::model::ErrorObject;
use crate::runtime::Owner;

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

    /// `tasks/get`: the task once durable, wherever its tree is held.
    pub(crate) async fn get_task(&self, p: TaskIdOnly, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let id = TaskAccess::parse(&p.task_id)?;
        let snap = self
            .tasks()
            .get(id, ctx.principal.name(), ctx.view())
            .await?
            .ok_or_else(ErrorObject::task_not_found)?;
        Ok(result_reply(&ctx.id, task_result(snap)))
    }

    /// A `tasks/*` method other than `tasks/get`, answered once durable,
    /// wherever the task's tree is held.
    pub(crate) async fn task_command(
        &self,
        command: TaskCommand,
        ctx: &RequestCtx,
    ) -> Result<Reply, ErrorObject> {
        let id = TaskAccess::parse(&command.task_id)?;
        let answer = self
            .tasks()
            .command(id, ctx.principal.name(), &command, ctx.view())
            .await?;
        Ok(result_reply(&ctx.id, answer))
    }
}
