//! Commands on trees another instance holds, both sides of the inbox
//! (`subtask_inbox`, through `crate::store::postgres::inbox`): the
//! receiving instance stores the command and waits for its answer
//! ([`Node::command`]); the holder applies the unanswered commands of its
//! trees in order ([`drain_inbox`]), each with its answer as a
//! [`WriteOp::Receipt`] in the batch of its effects, so a command is
//! applied once, even across a takeover.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

use super::Node;
use crate::model::{ErrorCode, ErrorObject, TaskId};
use crate::runtime::{Applied, RuntimeError};
use crate::server::Server;
use crate::server::reply::store_error;
use crate::server::request::InboxCommand;
use crate::server::stored::command_on_rows;
use crate::store::postgres::inbox::{self, Inserted, Taken};
use crate::store::postgres::remote;
use crate::store::{StoreError, WriteOp};

/// A command's answer as the inbox stores it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum InboxAnswer {
    /// The JSON-RPC result the direct path would send.
    Result(Value),
    /// The JSON-RPC error the direct path would send.
    Error(ErrorObject),
}

/// At most this many inbox commands are read at a time.
const DRAIN_BATCH: usize = 256;

impl Node {
    /// Passes a command on to the holder of the task's tree and waits for
    /// its answer. `Err` with "task not found" for unknown and foreign ids.
    pub(crate) async fn command(
        self: &Arc<Self>,
        id: TaskId,
        principal: &str,
        command: InboxCommand,
    ) -> Result<Value, ErrorObject> {
        let sender = principal.to_owned();
        let me = self.instance;
        let text = serde_json::to_string(&command).expect("commands serialize");
        let inserted = self
            .blocking(move |c| inbox::insert_command(c, id, &sender, &text, me))
            .await
            .map_err(unavailable)?;
        let posted = match inserted {
            Inserted::Posted(posted) => posted,
            Inserted::NotFound => return Err(ErrorObject::task_not_found()),
            Inserted::Released(root) => {
                return match self.command_on_released(root, id, principal, command).await? {
                    InboxAnswer::Result(v) => Ok(v),
                    InboxAnswer::Error(e) => Err(e),
                };
            }
        };
        let seq = posted.seq;
        let woken = Arc::new(Notify::new());
        self.answers.lock().insert(seq, woken.clone());
        let answer = self.await_answer(seq, posted.root, &woken).await;
        self.answers.lock().remove(&seq);
        match answer? {
            InboxAnswer::Result(v) => Ok(v),
            InboxAnswer::Error(e) => Err(e),
        }
    }

    /// The answer to `principal`'s `command` on task `id` of the finished
    /// tree `root`, which its holder let go of from memory: the lifecycle
    /// code's answer on the tree rebuilt from its rows (`task is already
    /// completed`, or an acknowledged cancel of a terminal task), as the
    /// holder would have given it; "task not found" for another
    /// principal's tree or one gone meanwhile. The tree is finished, so
    /// nothing is written.
    async fn command_on_released(
        self: &Arc<Self>,
        root: TaskId,
        id: TaskId,
        principal: &str,
        command: InboxCommand,
    ) -> Result<InboxAnswer, ErrorObject> {
        let command = match command.into_command() {
            Ok(c) => c.command,
            Err(e) => return Ok(InboxAnswer::Error(e)),
        };
        let rows = self
            .blocking(move |c| remote::read_trees(c, &[root]))
            .await
            .map_err(unavailable)?;
        Ok(
            match command_on_rows(&self.forest, &rows, principal, id, command).map_err(store_error)? {
                Some(outcome) => answer_of(&outcome),
                None => InboxAnswer::Error(ErrorObject::task_not_found()),
            },
        )
    }

    /// Waits for the answer to command `seq` on tree `root` (woken by its
    /// notification, polling as a fallback) for up to the configured
    /// answer timeout.
    async fn await_answer(
        self: &Arc<Self>,
        seq: i64,
        root: TaskId,
        woken: &Notify,
    ) -> Result<InboxAnswer, ErrorObject> {
        let deadline = tokio::time::Instant::now() + self.config.answer_timeout;
        loop {
            // The notification is a hint; the row is the truth (a missed
            // notification costs one poll interval).
            let _ = tokio::time::timeout(Duration::from_millis(200), woken.notified()).await;
            match self.blocking(move |c| inbox::answer(c, seq, root)).await {
                // The tree was deleted meanwhile: nobody will answer.
                Ok(Taken::Gone) => return Err(ErrorObject::task_not_found()),
                Ok(Taken::Answer(text)) => {
                    // Read, then deleted (`inbox::answer` says why); a row
                    // left over is answered, and cleaned up later.
                    if let Err(e) = self.blocking(move |c| inbox::forget(c, seq)).await {
                        tracing::debug!(error = %e, seq, "deleting an answered command failed; the cleanup will");
                    }
                    return serde_json::from_str(&text).map_err(|e| {
                        ErrorObject::new(
                            ErrorCode::INTERNAL_ERROR,
                            format!("an unreadable answer in the inbox: {e}"),
                        )
                    });
                }
                Ok(Taken::Pending) => {}
                Err(e) => tracing::warn!(error = %e, seq, "reading a command's answer failed; retrying"),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!(
                        "the instance holding this task did not answer within {:?}; the command is queued and may \
                         still be applied",
                        self.config.answer_timeout
                    ),
                ));
            }
        }
    }
}

/// Applies the unanswered commands for trees this instance holds, in
/// inbox order, each with its receipt in the batch of its effects, and
/// waits until they are durable.
pub(super) async fn drain_inbox(node: &Arc<Node>, server: &Server) -> Result<(), StoreError> {
    let me = node.instance;
    loop {
        let rows = node
            .blocking(move |c| inbox::unanswered(c, me, DRAIN_BATCH))
            .await?;
        let full = rows.len() == DRAIN_BATCH;
        let mut touched: Vec<TaskId> = Vec::new();
        let mut answered = false;
        for row in rows {
            if row.released.is_some() {
                // Stored before this instance let the finished tree go.
                answer_released(node, row).await?;
                answered = true;
            } else if server.apply_inbox(row.seq, row.task, &row.principal, &row.command) {
                touched.push(row.task);
            }
        }
        if touched.is_empty() {
            if answered && full {
                continue;
            }
            return Ok(());
        }
        for id in touched {
            // The tree may have been deleted meanwhile: its receipt was
            // written with the deletion or the requester sees it gone.
            let _ = server.inner.runtime.flushed(id).await;
        }
        if !full {
            return Ok(());
        }
    }
}

/// Answers `row`, a command on a tree this instance let go of from memory
/// after it was stored, as [`Node::command_on_released`] does, and stores
/// the answer for its requester.
async fn answer_released(node: &Arc<Node>, row: inbox::Unanswered) -> Result<(), StoreError> {
    let Some(root) = row.released else { return Ok(()) };
    let answer = match serde_json::from_str::<InboxCommand>(&row.command) {
        // A read that failed is tried again at the next drain, not stored
        // as the answer.
        Ok(command) => node
            .command_on_released(root, row.task, &row.principal, command)
            .await
            .map_err(|e| StoreError::Io(e.message))?,
        Err(e) => InboxAnswer::Error(ErrorObject::new(
            ErrorCode::INTERNAL_ERROR,
            format!("an unreadable command in the inbox: {e}"),
        )),
    };
    let text = serde_json::to_string(&answer).expect("answers serialize");
    let seq = row.seq;
    node.blocking(move |c| inbox::answer_released(c, seq, root, &text))
        .await
}

/// The error of a command that could not be passed on.
fn unavailable(e: StoreError) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INTERNAL_ERROR,
        format!("the task database is unavailable: {e}"),
    )
    .with_data(serde_json::json!({"reason": "store_unavailable"}))
}

/// The inbox answer of a command's outcome: the result the direct path
/// would send, or its error.
pub(crate) fn answer_of(outcome: &Result<Applied, RuntimeError>) -> InboxAnswer {
    match outcome {
        Ok(Applied::Ack) => {
            InboxAnswer::Result(serde_json::to_value(crate::model::AckResult::new()).expect("serializes"))
        }
        Ok(Applied::Task(snap)) => InboxAnswer::Result(
            serde_json::to_value(crate::server::reply::task_result((**snap).clone())).expect("serializes"),
        ),
        Err(e) => InboxAnswer::Error(crate::server::reply::runtime_error(e.clone())),
    }
}

impl Server {
    /// Applies one inbox command to a tree this instance holds; `false`
    /// when the task is not in the runtime (the tree is being taken over
    /// or deleted: left for later).
    fn apply_inbox(&self, seq: i64, id: TaskId, principal: &str, text: &str) -> bool {
        let rt = &self.inner.runtime;
        let Some(owner) = rt.owner_of(id) else {
            return false;
        };
        let root = rt.root_of_task(id).unwrap_or(id);
        let receipt = |answer: InboxAnswer| WriteOp::Receipt {
            root,
            seq,
            answer: serde_json::to_string(&answer).expect("answers serialize"),
        };
        // The stored method is its wire name, read as a typed method (rows
        // written before the typed method have the same layout).
        let parsed = serde_json::from_str::<InboxCommand>(text)
            .map_err(|e| {
                ErrorObject::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("an unreadable command in the inbox: {e}"),
                )
            })
            .and_then(InboxCommand::into_command);
        let command = match parsed {
            Ok(c) if owner.name() == principal => c.command,
            Ok(_) => {
                rt.write_receipt(root, receipt(InboxAnswer::Error(ErrorObject::task_not_found())));
                return true;
            }
            Err(e) => {
                rt.write_receipt(root, receipt(InboxAnswer::Error(e)));
                return true;
            }
        };
        rt.apply_with_receipt(id, command, |outcome| Some(receipt(answer_of(outcome))))
            .is_some()
    }
}
