//! Control tools for a model in a host: follow, wait for, steer, pause,
//! resume and cancel task trees through ordinary `tools/call`s, and
//! background answers for clients that did not declare the tasks extension
//! (`ServerConfig::agent_tools`, `ServerConfig::background`,
//! `ToolSpec::background`; docs/agents.md).
//!
//! Hosts expose only tools to their model, and most declare no tasks
//! extension at all, so the wire's `tasks/*` methods are out of a model's
//! reach. These tools are the same operations as ordinary tools: every
//! command goes through the dispatcher as the caller (same checks, errors,
//! durability, cluster routing), and a task another principal owns looks
//! unknown. Their answers are written for a model: what happened, what it
//! means, what to call next, with the same facts as `structuredContent`.

mod status;

use status::{decode_cursor, excerpt, result_text, status_page};

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::model::{
    ClientView, DetailedTask, ErrorObject, JsonObject, TaskId, TaskMethod, TaskPayload, TaskStatus,
};
use crate::server::auth::Principal;
use crate::server::reply::Reply;
use crate::server::request::OwnRequest;
use crate::server::{RegisteredTool, Server, TaskSupport, ToolSpec};

/// `task_status`: a tree's progress and its partial results.
pub(crate) const STATUS: &str = "task_status";
/// `task_wait`: the result, waited for up to a bound.
pub(crate) const WAIT: &str = "task_wait";
/// `task_steer`.
pub(crate) const STEER: &str = "task_steer";
/// `task_pause`.
pub(crate) const PAUSE: &str = "task_pause";
/// `task_resume`.
pub(crate) const RESUME: &str = "task_resume";
/// `task_cancel`.
pub(crate) const CANCEL: &str = "task_cancel";

/// The control tools, in the order `tools/list` shows them.
pub(crate) const NAMES: [&str; 6] = [STATUS, WAIT, STEER, PAUSE, RESUME, CANCEL];

/// Tasks listed in one `task_status` answer at most.
pub(crate) const PAGE_TASKS: usize = 25;
/// Characters of listed tasks in one `task_status` answer at most (the
/// summary and the cursor come on top): a page fits a model's context.
pub(crate) const PAGE_CHARS: usize = 6_000;
/// Characters of one task's result or message shown in a listing.
const EXCERPT_CHARS: usize = 400;
/// Characters of a final result `task_wait` shows as text (the whole
/// result is in `structuredContent`).
const RESULT_CHARS: usize = 8_000;
/// The longest `task_wait` (a host's own timeout is often a minute).
const MAX_WAIT_SECS: u64 = 60;
/// `task_wait`'s default.
const DEFAULT_WAIT_SECS: u64 = 30;
/// How long `task_cancel` waits for the subtree to wind down before it
/// answers with the state it has.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The control tools' specs, built once.
pub(crate) fn specs() -> &'static [ToolSpec] {
    static SPECS: std::sync::OnceLock<Vec<ToolSpec>> = std::sync::OnceLock::new();
    SPECS.get_or_init(build_specs)
}

fn build_specs() -> Vec<ToolSpec> {
    let task_id = json!({"type": "string", "description": "The task's id (`taskId`), as the tool that started it or task_status gave it."});
    vec![
        ToolSpec::new(
            STATUS,
            "Shows how a background task is doing: its status, every subtask's status and message, and the \
             results of the subtasks that have finished so far, listed in the order the final answer puts them \
             together. Use it to check on long work, to read partial results before the end, or to find a \
             subtask's id. Large trees come in pages: pass `cursor` from the previous answer to read on.",
            json!({"type": "object", "properties": {
                "taskId": task_id,
                "cursor": {"type": "string", "description": "From the previous task_status answer, to read the next page."}
            }, "required": ["taskId"], "additionalProperties": false}),
            TaskSupport::Forbidden,
        ),
        ToolSpec::new(
            WAIT,
            "Waits until a background task has finished, for at most `seconds` (1-60, default 30), and returns \
             its final result. If it is still running when the time is up, says how far it got: call task_wait \
             again to keep waiting, or task_status for partial results.",
            json!({"type": "object", "properties": {
                "taskId": task_id,
                "seconds": {"type": "integer", "minimum": 1, "maximum": MAX_WAIT_SECS, "description": "How long to wait at most (default 30)."}
            }, "required": ["taskId"], "additionalProperties": false}),
            TaskSupport::Forbidden,
        ),
        ToolSpec::new(
            STEER,
            "Sends guidance to a running task, such as \"focus on cancellation\" or \"skip the history\". The \
             task reads it at its next safe point and may change its plan (cancel work that no longer fits, add \
             new work); call task_status afterwards to see what it did. A finished task cannot be steered.",
            json!({"type": "object", "properties": {
                "taskId": task_id,
                "message": {"type": "string", "minLength": 1, "description": "The guidance, in plain words."}
            }, "required": ["taskId", "message"], "additionalProperties": false}),
            TaskSupport::Forbidden,
        ),
        ToolSpec::new(
            PAUSE,
            "Pauses a task and all its subtasks at their next safe points, keeping everything they have done. \
             Nothing is lost: task_resume continues from where they stopped. The answer says whether the task \
             is paused already or will pause shortly (task_status shows `paused` once it has).",
            json!({"type": "object", "properties": {"taskId": task_id}, "required": ["taskId"], "additionalProperties": false}),
            TaskSupport::Forbidden,
        ),
        ToolSpec::new(
            RESUME,
            "Resumes a paused task and its subtasks from where they stopped. Only a task that is paused (as \
             task_status shows) can be resumed.",
            json!({"type": "object", "properties": {"taskId": task_id}, "required": ["taskId"], "additionalProperties": false}),
            TaskSupport::Forbidden,
        ),
        ToolSpec::new(
            CANCEL,
            "Cancels a task and all its subtasks for good. The results of subtasks that had finished stay \
             readable with task_status. Use task_pause instead to stop for a while.",
            json!({"type": "object", "properties": {"taskId": task_id}, "required": ["taskId"], "additionalProperties": false}),
            TaskSupport::Forbidden,
        ),
    ]
}

/// A tool result with `text` and `structured` content.
fn answer(text: String, structured: Value) -> JsonObject {
    JsonObject::from_value(json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": false,
    }))
    .expect("a literal object")
}

/// A tool result with `isError: true`: the model reads `text` and can act.
fn refusal(text: String) -> JsonObject {
    super::tool::error_result(text)
}

impl Server {
    /// Whether `name` is a control tool this server serves.
    pub(crate) fn is_agent_tool(&self, name: &str) -> bool {
        self.inner.config.agent_tools() && NAMES.contains(&name)
    }

    /// Whether `name` is a control tool that steers, pauses, resumes or
    /// cancels (an OAuth caller needs the control scope for it).
    pub(crate) fn is_control_tool(&self, name: &str) -> bool {
        self.is_agent_tool(name) && [STEER, PAUSE, RESUME, CANCEL].contains(&name)
    }

    /// Whether a call of `tool` from a client that asked for no task is
    /// answered at once with the task's id (the task runs on).
    pub(crate) fn answers_in_background(&self, tool: &RegisteredTool) -> bool {
        tool.spec.task_support != TaskSupport::Forbidden
            && (self.inner.config.background || tool.spec.background)
    }

    /// A control tool's answer for `principal` (arguments already checked
    /// against its schema).
    pub(crate) async fn agent_call(
        &self,
        name: &str,
        arguments: &JsonObject,
        principal: &Principal,
    ) -> JsonObject {
        let spec = specs().iter().find(|s| s.name == name).expect("a control tool");
        if let Err(e) = spec.check_arguments(arguments) {
            return refusal(format!("{e}"));
        }
        let task = arguments
            .get("taskId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Ok(id) = task.parse::<TaskId>() else {
            return unknown(task);
        };
        match name {
            STATUS => {
                let cursor = arguments.get("cursor").and_then(Value::as_str);
                self.agent_status(id, cursor, principal).await
            }
            WAIT => {
                let secs = arguments
                    .get("seconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(DEFAULT_WAIT_SECS)
                    .clamp(1, MAX_WAIT_SECS);
                self.agent_wait(id, Duration::from_secs(secs), principal).await
            }
            _ => self.agent_command(name, id, arguments, principal).await,
        }
    }

    /// The snapshot of task `id` as `principal` may see it, once durable,
    /// wherever its tree is held. `None` for unknown and foreign ids alike.
    async fn agent_snapshot(
        &self,
        id: TaskId,
        principal: &Principal,
    ) -> Result<Option<DetailedTask>, ErrorObject> {
        self.tasks()
            .get(id, principal.name(), ClientView::PAUSE_AWARE)
            .await
    }

    async fn agent_status(&self, id: TaskId, cursor: Option<&str>, principal: &Principal) -> JsonObject {
        let offset = match cursor.map(decode_cursor) {
            None => 0,
            Some(Some((task, offset))) if task == id => offset,
            Some(_) => {
                return refusal(format!(
                    "This cursor does not belong to task {id}: pass the cursor from the last task_status answer \
                     about this task, or leave it out to start from the beginning."
                ));
            }
        };
        // The rows and the listed tasks' results from one reading, so
        // that they agree; shown once durable.
        let page = self
            .tasks()
            .read_subtree(
                id,
                principal.name(),
                ClientView::PAUSE_AWARE,
                |nodes, snapshot| status_page(nodes, id, offset, snapshot),
            )
            .await;
        let (text, structured) = match page {
            Ok(Some(Some(page))) => page,
            Ok(_) => return unknown(&id.to_string()),
            Err(e) => return unavailable(&e),
        };
        answer(text, structured)
    }

    /// Task `id` once it has ended, or as it is after `limit`; durable.
    async fn agent_settled(
        &self,
        id: TaskId,
        principal: &Principal,
        limit: Duration,
    ) -> Result<Option<DetailedTask>, ErrorObject> {
        let Some(mut last) = self.agent_snapshot(id, principal).await? else {
            return Ok(None);
        };
        if !last.status().is_terminal() {
            let mut updates = self.tasks().follow(id, principal.name(), ClientView::PAUSE_AWARE);
            let _ = tokio::time::timeout(limit, async {
                while let Some(s) = updates.next().await {
                    let done = s.status().is_terminal();
                    last = s;
                    if done {
                        break;
                    }
                }
            })
            .await;
            // What is shown is durable.
            self.inner
                .runtime
                .flushed(id)
                .await
                .map_err(super::reply::store_error)?;
        }
        Ok(Some(last))
    }

    async fn agent_wait(&self, id: TaskId, limit: Duration, principal: &Principal) -> JsonObject {
        let last = match self.agent_settled(id, principal, limit).await {
            Ok(Some(s)) => s,
            Ok(None) => return unknown(&id.to_string()),
            Err(e) => return unavailable(&e),
        };
        let status = last.status();
        let task = last.task();
        let message = task.status_message.clone();
        match last.payload() {
            TaskPayload::Completed { result } => {
                let body = result_text(result);
                let text = format!(
                    "Task {id} completed{}. Its result:\n{}",
                    if result.get("isError") == Some(&Value::Bool(true)) {
                        " (the tool reported an error)"
                    } else {
                        ""
                    },
                    excerpt(&body, RESULT_CHARS)
                );
                answer(
                    text,
                    json!({"taskId": id, "status": "completed", "result": result.to_value()}),
                )
            }
            TaskPayload::Failed { error } => answer(
                format!("Task {id} failed: {} (error {}).", error.message, error.code),
                json!({"taskId": id, "status": "failed", "error": error}),
            ),
            TaskPayload::Cancelled => answer(
                format!(
                    "Task {id} was cancelled. The results of subtasks that had finished are listed by task_status."
                ),
                json!({"taskId": id, "status": "cancelled"}),
            ),
            _ => {
                let said = message
                    .as_ref()
                    .filter(|m| m.as_str() != status.as_str())
                    .map(|m| format!(" ({})", excerpt(m, EXCERPT_CHARS)))
                    .unwrap_or_default();
                let secs = limit.as_secs();
                let text = match status {
                    TaskStatus::Paused => format!(
                        "Task {id} is paused{said}: it makes no progress until task_resume continues it."
                    ),
                    TaskStatus::InputRequired => format!(
                        "Task {id} is waiting for input{said} that only a client with the tasks extension can give."
                    ),
                    _ => format!(
                        "Task {id} is still {} after {secs} s{said}. Call task_wait again to keep waiting, or \
                         task_status for the partial results.",
                        status.as_str()
                    ),
                };
                answer(
                    text,
                    json!({"taskId": id, "status": status.as_str(), "statusMessage": message}),
                )
            }
        }
    }

    /// steer, pause, resume or cancel, as the MCP method of that name sent
    /// by `principal` (same checks, durability and cluster routing).
    async fn agent_command(
        &self,
        name: &str,
        id: TaskId,
        arguments: &JsonObject,
        principal: &Principal,
    ) -> JsonObject {
        if name == CANCEL {
            match self.agent_snapshot(id, principal).await {
                Ok(Some(snap)) if snap.status().is_terminal() => {
                    let status = snap.status().as_str();
                    return answer(
                        format!("Task {id} had already ended ({status}); there is nothing to cancel."),
                        json!({"taskId": id, "status": status, "statusMessage": snap.task().status_message}),
                    );
                }
                Ok(_) => {}
                Err(e) => return unavailable(&e),
            }
        }
        let method = match name {
            STEER => TaskMethod::Steer,
            PAUSE => TaskMethod::Pause,
            RESUME => TaskMethod::Resume,
            _ => TaskMethod::Cancel,
        };
        let request = OwnRequest {
            message: arguments.get("message").cloned(),
            ..OwnRequest::new(method, id.to_string())
        };
        let reply = self.request_as(principal.clone(), &request).await;
        let Reply::Message { body, .. } = reply else {
            return refusal(format!(
                "{name}: the server gave no answer for task {id}; try again"
            ));
        };
        let message: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        if let Some(e) = message.get("error") {
            if e == &serde_json::to_value(ErrorObject::task_not_found()).unwrap_or_default() {
                return unknown(&id.to_string());
            }
            let text = e.get("message").and_then(Value::as_str).unwrap_or("refused");
            return refusal(format!("{name} was refused for task {id}: {text}"));
        }
        // steer and cancel answer with an ack, pause and resume with the
        // task: what is shown is the task as it is now (after a cancel,
        // once its subtree wound down, within a bound).
        let task = &message["result"];
        let mut status = task["status"].as_str().map(str::to_owned);
        let mut note = task["statusMessage"].as_str().map(str::to_owned);
        if status.is_none() {
            let now = if name == CANCEL {
                self.agent_settled(id, principal, CANCEL_WAIT).await
            } else {
                self.agent_snapshot(id, principal).await
            };
            if let Ok(Some(snap)) = now {
                status = Some(snap.status().as_str().to_owned());
                note = snap.task().status_message.clone();
            }
        }
        let status = status.as_deref().unwrap_or("unknown");
        let note = note.as_deref();
        let text = match name {
            STEER => format!(
                "Your message was delivered to task {id} (now {status}). The task reads it at its next safe \
                 point; call task_status to see what it changed."
            ),
            PAUSE if status == "paused" => format!(
                "Task {id} is paused with its subtasks; nothing they did is lost. task_resume continues it."
            ),
            PAUSE => format!(
                "Task {id} will pause at its next safe point ({}); its subtasks too. task_status shows `paused` \
                 once they have; task_resume continues it.",
                note.unwrap_or(status)
            ),
            RESUME => format!("Task {id} resumed ({status}); its subtasks too."),
            _ if status == "cancelled" => format!(
                "Task {id} is cancelled with its subtasks. Results of subtasks that had finished stay readable \
                 with task_status."
            ),
            _ => format!(
                "Task {id} is being cancelled ({status}); its subtasks end first. task_status shows `cancelled` \
                 once it has."
            ),
        };
        answer(
            text,
            json!({"taskId": id, "status": status, "statusMessage": note}),
        )
    }

    /// The answer to a call started in the background for a client that
    /// asked for no task: the task's id and how to follow it.
    pub(crate) fn background_answer(&self, tool: &str, id: TaskId) -> JsonObject {
        answer(
            format!(
                "Started {tool} as background task {id}; it keeps running after this answer. Call task_status \
                 with taskId \"{id}\" to see its progress and partial results, task_wait to get its result when \
                 it is done (up to 60 s per call), task_steer to redirect it, task_pause / task_resume to hold \
                 it, or task_cancel to stop it."
            ),
            json!({"taskId": id, "status": "working", "tool": tool, "followWith": NAMES}),
        )
    }
}

fn unknown(task: &str) -> JsonObject {
    refusal(format!(
        "There is no task {task:?} that you can see. Use the taskId that the tool which started the task \
         returned (or one listed by task_status)."
    ))
}

fn unavailable(e: &ErrorObject) -> JsonObject {
    refusal(format!(
        "The task could not be read just now: {}. Try again shortly.",
        e.message
    ))
}
