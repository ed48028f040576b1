//! `subscriptions/listen`: an SSE stream of `notifications/tasks` for the
//! tasks a caller may see, following every subtask as it appears, each
//! snapshot shown only once durable.

use std::collections::HashSet;

use futures::stream::{BoxStream, SelectAll};
use futures::{StreamExt, stream};
use serde_json::json;

use super::Server;
use super::dispatch::RequestCtx;
use super::reply::{Reply, invalid};
use super::tasks::modern_view;
use crate::model::{
    DetailedTask, ErrorObject, JsonRpcRequest, META_SUBSCRIPTION_ID, SubscriptionsListenParams, TaskId,
};

impl Server {
    pub(crate) fn listen(&self, req: &JsonRpcRequest, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let p: SubscriptionsListenParams = req.params_as()?;
        if p.notifications.wants_tasks() && ctx.tasks.is_none() {
            return Err(ErrorObject::tasks_extension_required());
        }
        let max = self.inner.config.limits.max_subscription_tasks;
        let requested: Vec<&str> = p.notifications.task_ids().map(|(raw, _)| raw).collect();
        if requested.len() > max {
            return Err(invalid(format!(
                "subscriptions/listen names {} tasks; the limit is {max}",
                requested.len()
            )));
        }
        // Foreign and unknown ids are left out of the acknowledgement, silently.
        let mut accepted: Vec<TaskId> = Vec::new();
        for raw in requested {
            if let Ok(id) = self.visible_task(raw, &ctx.principal)
                && !accepted.contains(&id)
            {
                accepted.push(id);
            }
        }
        let sub_id = ctx.id.to_value();
        let ack = json!({
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {
                "notifications": {"taskIds": accepted.iter().map(ToString::to_string).collect::<Vec<_>>()},
                "_meta": {META_SUBSCRIPTION_ID: sub_id},
            },
        });
        let first = stream::once(async move { ack.to_string() });
        if accepted.is_empty() {
            // Nothing this server can notify about: the stream stays open
            // (keep-alives) until the client closes it.
            return Ok(Reply::Stream(first.chain(stream::pending()).boxed()));
        }
        let rt = self.inner.runtime.clone();
        let view = ctx.view();
        let mut all: SelectAll<BoxStream<'static, DetailedTask>> = SelectAll::new();
        for id in &accepted {
            all.push(rt.subscribe(&[*id], view).boxed());
        }
        let watched: HashSet<TaskId> = accepted.iter().copied().collect();
        let sid = sub_id.clone();
        let updates = stream::unfold((all, watched, rt), move |(mut all, mut watched, rt)| {
            let sid = sid.clone();
            async move {
                let task = all.next().await?;
                // A snapshot is shown only once it is durable; a store
                // failure ends the stream rather than showing it.
                rt.flushed(task.task().task_id).await.ok()?;
                // Subtasks are included: follow every child as it appears.
                for child in &task.task().child_task_ids {
                    if watched.insert(*child) {
                        all.push(rt.subscribe(&[*child], view).boxed());
                    }
                }
                let mut params = serde_json::to_value(modern_view(task)).expect("tasks serialize");
                params["_meta"] = json!({META_SUBSCRIPTION_ID: sid});
                let note = json!({"jsonrpc": "2.0", "method": "notifications/tasks", "params": params});
                Some((note.to_string(), (all, watched, rt)))
            }
        });
        let id = ctx.id.to_value();
        let end = stream::once(async move {
            json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete"}}).to_string()
        });
        Ok(Reply::Stream(first.chain(updates).chain(end).boxed()))
    }
}
