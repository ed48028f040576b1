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
    AckResult, DetailedTask, ErrorCode, ErrorObject, GetTaskResult, InputResponses, JsonObject,
    JsonRpcRequest, SteerTaskParams, TaskId, TaskIdParams, TaskPayload, complete_result,
};
use crate::runtime::Owner;

impl Server {
    pub(crate) fn owner(&self, principal: &Principal) -> Arc<Owner> {
        self.inner.owners.of(principal)
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
        let p: TaskIdParams = req.params_as()?;
        let id: TaskId = p.task_id.parse().map_err(|_| ErrorObject::task_not_found())?;
        let rt = &self.inner.runtime;
        let (snap, ticket) = rt
            .get_owned(id, ctx.principal.name(), ctx.view())
            .ok_or_else(ErrorObject::task_not_found)?;
        rt.durable(ticket).await.map_err(store_error)?;
        Ok(result_reply(&ctx.id, task_result(snap)))
    }

    /// A `tasks/*` method other than `tasks/get`; returns the reply and the
    /// task it concerns (the caller waits for it to be durable).
    pub(crate) fn task_method(
        &self,
        req: &JsonRpcRequest,
        ctx: &RequestCtx,
    ) -> Result<(Reply, TaskId), ErrorObject> {
        let rt = &self.inner.runtime;
        let view = ctx.view();
        let ack = AckResult::new;
        match req.method.as_str() {
            "tasks/update" => {
                let p: TaskIdParams = req.params_as()?;
                let responses = match req.params.as_ref().and_then(|p| p.get("inputResponses")) {
                    Some(Value::Object(m)) => responses_of(m),
                    _ => return Err(invalid("`inputResponses` must be an object of responses")),
                };
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                rt.update(id, responses).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, ack()), id))
            }
            "tasks/cancel" => {
                let p: TaskIdParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                let _ = rt.cancel(id).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, ack()), id))
            }
            "tasks/steer" => {
                let p: SteerTaskParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                rt.steer(id, p.message).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, ack()), id))
            }
            "tasks/pause" => {
                let p: TaskIdParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                let snap = rt.pause(id, view).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, task_result(snap)), id))
            }
            "tasks/resume" => {
                let p: TaskIdParams = req.params_as()?;
                let id = self.visible_task(&p.task_id, &ctx.principal)?;
                let snap = rt.resume(id, view).map_err(runtime_error)?;
                Ok((result_reply(&ctx.id, task_result(snap)), id))
            }
            other => Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {other:?}"),
            )),
        }
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

fn task_result(task: DetailedTask) -> GetTaskResult {
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
