//! `subscriptions/listen`: an SSE stream of `notifications/tasks` for the
//! tasks a caller may see, following every subtask as it appears, each
//! snapshot shown only once durable.

use std::collections::HashSet;

use futures::stream::{BoxStream, SelectAll};
use futures::{StreamExt, stream};

use super::Server;
use super::reply::{Reply, invalid, modern_view};
use super::request::RequestCtx;
use crate::model::{
    AckResult, DetailedTask, ErrorObject, JsonRpcNotification, JsonRpcRequest, JsonRpcResponse, Method,
    NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED, NOTIFICATIONS_TASKS, NotificationFilter, NotificationMeta,
    SubscriptionsAcknowledgedParams, SubscriptionsListenParams, TaskId, TaskStatusNotificationParams,
};

impl Server {
    pub(crate) async fn listen(&self, req: &JsonRpcRequest, ctx: &RequestCtx) -> Result<Reply, ErrorObject> {
        let p: SubscriptionsListenParams = req.params_as()?;
        if p.notifications.wants_tasks() && ctx.tasks.is_none() {
            return Err(ErrorObject::tasks_extension_required());
        }
        let max = self.inner.config.limits.max_subscription_tasks;
        let requested: Vec<&str> = p.notifications.task_ids().map(|(raw, _)| raw).collect();
        if requested.len() > max {
            return Err(invalid(format!(
                "{} names {} tasks; the limit is {max}",
                Method::SubscriptionsListen,
                requested.len()
            )));
        }
        // Foreign and unknown ids are left out of the acknowledgement, silently.
        let mut accepted: Vec<TaskId> = Vec::new();
        let access = self.tasks();
        for raw in requested {
            let Some(id) = access.visible(raw, ctx.principal.name(), ctx.view()).await? else {
                continue;
            };
            if !accepted.contains(&id) {
                accepted.push(id);
            }
        }
        let sub_id = ctx.id.clone();
        let ack = JsonRpcNotification::new(
            NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED,
            SubscriptionsAcknowledgedParams {
                meta: Some(NotificationMeta::for_subscription(sub_id.clone())),
                notifications: NotificationFilter::tasks(accepted.iter().copied()),
            },
        );
        let ack = serde_json::to_string(&ack).expect("notifications serialize");
        let first = stream::once(async move { ack });
        if accepted.is_empty() {
            // Nothing this server can notify about: the stream stays open
            // (keep-alives) until the client closes it.
            return Ok(Reply::Stream(first.chain(stream::pending()).boxed()));
        }
        let rt = self.inner.runtime.clone();
        let view = ctx.view();
        let mut all: SelectAll<BoxStream<'static, DetailedTask>> = SelectAll::new();
        for id in &accepted {
            all.push(access.follow(*id, ctx.principal.name(), view));
        }
        let watched: HashSet<TaskId> = accepted.iter().copied().collect();
        let sid = sub_id.clone();
        let server = self.clone();
        let principal = ctx.principal.name().to_owned();
        let updates = stream::unfold((all, watched, rt), move |(mut all, mut watched, rt)| {
            let sid = sid.clone();
            let server = server.clone();
            let principal = principal.clone();
            async move {
                let task = all.next().await?;
                // A snapshot is shown only once it is durable; a store
                // failure ends the stream rather than showing it.
                rt.flushed(task.task().task_id).await.ok()?;
                // Subtasks are included: follow every child as it appears.
                for child in &task.task().child_task_ids {
                    if watched.insert(*child) {
                        all.push(server.tasks().follow(*child, &principal, view));
                    }
                }
                let params = TaskStatusNotificationParams {
                    task: modern_view(task),
                    meta: Some(NotificationMeta::for_subscription(sid)),
                };
                let note = JsonRpcNotification::new(NOTIFICATIONS_TASKS, params);
                Some((
                    serde_json::to_string(&note).expect("notifications serialize"),
                    (all, watched, rt),
                ))
            }
        });
        // A fenced cluster instance's streams end at once, saying so: its
        // trees are dropped, and the client listens again elsewhere (or
        // here once it has rejoined).
        let updates = match access.fenced() {
            Some(fenced) => updates.take_until(fenced).boxed(),
            None => updates.boxed(),
        };
        let end_id = ctx.id.clone();
        let server = self.clone();
        let end = stream::once(async move {
            if let Some(error) = server.tasks().fenced_error() {
                let error = crate::model::JsonRpcError::new(Some(end_id), error);
                return serde_json::to_string(&error).expect("errors serialize");
            }
            serde_json::to_string(&JsonRpcResponse::new(end_id, AckResult::new()))
                .expect("responses serialize")
        });
        Ok(Reply::Stream(first.chain(updates).chain(end).boxed()))
    }
}
