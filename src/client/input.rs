//! Input requests: one callback answers every `inputRequests` entry of every
//! task in a walked tree, and the MRTR rounds of `tools/call`.

use std::future::Future;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::model::{JsonObject, TaskId};

/// One request for input, as the server sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequest {
    /// The task asking; `None` for an MRTR round of `tools/call` (before any
    /// task exists).
    pub task_id: Option<TaskId>,
    /// The key the answer goes under (unique over the task's life).
    pub key: String,
    /// The request, e.g. `{"method": "elicitation/create", "params": {...}}`.
    /// It comes from the server: apply the same trust as to any elicitation.
    pub request: JsonObject,
}

/// Answers input requests. Each `(task, key)` is presented at most once per
/// walk; returning `None` leaves it unanswered (it is not presented again).
///
/// Closures `Fn(InputRequest) -> impl Future<Output = Option<JsonObject>>`
/// implement it.
///
/// # Examples
///
/// ```
/// use serde_json::json;
/// use subtask::client::{InputHandler, InputRequest};
/// use subtask::model::JsonObject;
///
/// let accept_all = |_req: InputRequest| async move {
///     JsonObject::from_value(json!({"action": "accept", "content": {}})).ok()
/// };
/// fn takes(_: impl InputHandler) {}
/// takes(accept_all);
/// ```
pub trait InputHandler: Send + Sync + 'static {
    /// The response to `request`, or `None` to leave it unanswered.
    fn answer(&self, request: InputRequest) -> BoxFuture<'static, Option<JsonObject>>;
}

impl<F, Fut> InputHandler for F
where
    F: Fn(InputRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<JsonObject>> + Send + 'static,
{
    fn answer(&self, request: InputRequest) -> BoxFuture<'static, Option<JsonObject>> {
        self(request).boxed()
    }
}

/// Where the answer to one `(task, key)` is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// The handler is working on it.
    Asked,
    /// Answered; to be sent while the key is outstanding.
    Ready {
        /// The response.
        response: JsonObject,
        /// Sends tried so far.
        attempts: u32,
    },
    /// A `tasks/update` carrying it is in flight.
    Sending {
        /// The response.
        response: JsonObject,
        /// Sends tried so far, this one included.
        attempts: u32,
    },
    /// Delivered, declined by the handler, or given up on.
    Settled,
}
