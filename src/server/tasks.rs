//! The `tasks/*` methods of the 2026-07-28 wire: `get`, `update`, `cancel`,
//! and SEP-2669's `steer`, `pause`, `resume`; what the caller may see, and
//! how a task is shown on this wire.

use std::sync::Arc;

use serde_json::Value;

use super::Server;
use super::auth::Principal;
use super::dispatch::RequestCtx;
use super::reply::{Reply, invalid, result_reply, runtime_error, store_error};
use crate::model::{
    AckResult, ClientView, DetailedTask, ErrorCode, ErrorObject, GetTaskResult, InputResponses, JsonObject,
    JsonRpcRequest, SteerTaskParams, TaskId, TaskPayload, complete_result,
};
use crate::runtime::{Applied, Command, Owner};

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
    pub(crate) async fn get_task(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
    ) -> Result<Reply, ErrorObject> {
        let p: TaskIdOnly = req.params_as()?;
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
                    ErrorCode::INTERNAL_ERROR,
                    format!("the task database is unavailable: {e}"),
                )
            });
        }
        let _ = (id, principal, view);
        Ok(None)
    }

    /// A `tasks/*` command on a task this instance does not hold: passed
    /// on to the cluster instance holding it, which answers.
    pub(crate) async fn remote_task_method(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
    ) -> Result<Reply, ErrorObject> {
        let (raw, _) = parse_command(req, ctx.view())?;
        let id: TaskId = raw.parse().map_err(|_| ErrorObject::task_not_found())?;
        let params = req
            .params
            .as_ref()
            .map_or(Value::Null, |p| Value::Object(p.as_map().clone()));
        let result = self
            .remote_command(id, ctx.principal.name(), &req.method, params, ctx.view())
            .await?;
        Ok(result_reply(&ctx.id, result))
    }

    /// Passes the command `method` with `params` on to the cluster instance
    /// holding task `id` and returns its answer's `result` ("task not
    /// found" without a cluster, for unknown and foreign ids).
    pub(crate) async fn remote_command(
        &self,
        id: TaskId,
        principal: &str,
        method: &str,
        params: Value,
        view: ClientView,
    ) -> Result<Value, ErrorObject> {
        #[cfg(feature = "postgres")]
        if let Some(node) = self.cluster() {
            let command = super::cluster::InboxCommand {
                method: method.to_owned(),
                params,
                show_paused: view.show_paused,
            };
            return node.command(id, principal, command).await;
        }
        let _ = (id, principal, method, params, view);
        Err(ErrorObject::task_not_found())
    }

    /// A `tasks/*` method other than `tasks/get`, on a task this instance
    /// holds; returns the reply and the task it concerns (the caller waits
    /// for it to be durable). `Ok(None)` when the runtime does not hold
    /// the task (another cluster instance may).
    pub(crate) fn task_method(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
    ) -> Result<Option<(Reply, TaskId)>, ErrorObject> {
        let (raw, command) = parse_command(req, ctx.view())?;
        let Ok(id) = self.visible_task(&raw, &ctx.principal) else {
            return Ok(None);
        };
        // Nothing is changed that the store cannot keep now.
        self.writable()?;
        let applied = self
            .inner
            .runtime
            .apply_with_receipt(id, command, |_| None)
            .ok_or_else(ErrorObject::task_not_found)?
            .map_err(runtime_error)?;
        let reply = match applied {
            Applied::Ack => result_reply(&ctx.id, AckResult::new()),
            Applied::Task(snap) => result_reply(&ctx.id, task_result(*snap)),
        };
        Ok(Some((reply, id)))
    }
}

/// The params of the `tasks/*` methods that name only a task, as the
/// server reads them: the wire's [`TaskIdParams`](crate::model::TaskIdParams)
/// without its `_meta`, which the pipeline has already read and checked
/// with the same reader (`dispatch.rs`; for a cluster inbox command, the
/// pipeline of the instance that took the request), so it is not read
/// again. The same errors for `taskId`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskIdOnly {
    pub(crate) task_id: String,
}

/// The task id and the command of a `tasks/*` request other than
/// `tasks/get`, its params checked.
pub(crate) fn parse_command(
    req: &JsonRpcRequest,
    view: ClientView,
) -> Result<(String, Command), ErrorObject> {
    match req.method.as_str() {
        "tasks/update" => {
            let p: TaskIdOnly = req.params_as()?;
            let responses = match req.params.as_ref().and_then(|p| p.get("inputResponses")) {
                Some(Value::Object(m)) => responses_of(m),
                _ => return Err(invalid("`inputResponses` must be an object of responses")),
            };
            Ok((p.task_id, Command::Update(responses)))
        }
        "tasks/cancel" => Ok((req.params_as::<TaskIdOnly>()?.task_id, Command::Cancel)),
        "tasks/steer" => {
            let p: SteerTaskParams = req.params_as()?;
            Ok((p.task_id, Command::Steer(p.message)))
        }
        "tasks/pause" => Ok((req.params_as::<TaskIdOnly>()?.task_id, Command::Pause(view))),
        "tasks/resume" => Ok((req.params_as::<TaskIdOnly>()?.task_id, Command::Resume(view))),
        other => Err(ErrorObject::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {other:?}"),
        )),
    }
}

/// The responses of an `inputResponses` object. A value that is not an
/// object cannot answer anything: it is dropped like an unknown key, so the
/// tool asks again (or the key is ignored) rather than the request failing.
pub(crate) fn responses_of(m: &serde_json::Map<String, Value>) -> InputResponses {
    m.iter()
        .filter_map(|(k, v)| match v {
            Value::Object(o) => Some((k.clone(), JsonObject::from_map(o.clone()))),
            _ => None,
        })
        .collect()
}

pub(crate) fn task_result(task: DetailedTask) -> GetTaskResult {
    GetTaskResult::new(modern_view(task))
}

/// A task as the 2026-07-28 wire shows it: a completed task's `result` is a
/// complete `CallToolResult` of that revision, so it carries `resultType:
/// "complete"` (tool handlers, subtasks included, return the bare result).
pub(crate) fn modern_view(task: DetailedTask) -> DetailedTask {
    let (task, payload) = task.into_parts();
    let payload = match payload {
        TaskPayload::Completed { result } => TaskPayload::Completed {
            result: complete_result(result),
        },
        other => other,
    };
    DetailedTask::new(task, payload)
}
