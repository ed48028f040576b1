//! The request, shared by every handler: what the transport hands over
//! ([`Incoming`], [`RequestHeaders`]), the request context after
//! validation ([`RequestCtx`]), how a `tools/call` arrived ([`CallMode`]),
//! the typed params of the `tasks/*` methods ([`TaskIdOnly`],
//! [`TaskCommand`]), and the typed requests the server sends itself
//! ([`OwnRequest`]: the web view's and the control tools' commands) or
//! passes to another cluster instance ([`InboxCommand`]).
//!
//! The method itself is parsed once, by `dispatch.rs`, into a
//! [`Method`](crate::model::Method) (its wire names live in `src/model/`).
//! This module imports no handler module: the handlers (`dispatch.rs`,
//! `access/`, `tasks.rs`, `tool_calls.rs`, `legacy.rs`, `subscriptions.rs`,
//! `cluster/`, `agent/`, `ui.rs`) import it instead of each other.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::Principal;
use super::reply::invalid;
use super::session::{Connection, LegacyVersion};
use crate::core::ClientView;
use crate::model::{
    ClientCapabilities, ErrorCode, ErrorObject, InputResponses, JsonObject, RequestId, RequestMeta,
    SteerTaskParams, TaskMethod, TasksCapability, read_params,
};
use crate::runtime::Command;

/// The request metadata headers of Streamable HTTP.
#[derive(Debug, Clone, Default)]
pub struct RequestHeaders {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// `Mcp-Method`.
    pub method: Option<String>,
    /// `Mcp-Name`.
    pub name: Option<String>,
}

/// One incoming message with what the transport knows about it.
#[derive(Debug)]
pub struct Incoming<'a> {
    /// The raw JSON body (one message).
    pub body: &'a [u8],
    /// HTTP metadata headers; `None` on stdio, where there are none to check.
    pub headers: Option<RequestHeaders>,
    /// The authenticated caller.
    pub principal: Principal,
    /// The stdio connection the message came on, which keeps the era its
    /// first request chose; `None` on HTTP and in process, where each
    /// request says its version itself.
    pub connection: Option<&'a Connection>,
}

/// Per-request context after validation.
pub(crate) struct RequestCtx {
    pub(crate) id: RequestId,
    pub(crate) principal: Principal,
    pub(crate) caps: ClientCapabilities,
    pub(crate) tasks: Option<TasksCapability>,
    /// The legacy version the request is served in; `None` on the 2026 wire.
    pub(crate) legacy: Option<LegacyVersion>,
}

impl RequestCtx {
    /// `paused` is shown only to clients that declared the `pause` sub-capability.
    pub(crate) fn view(&self) -> ClientView {
        ClientView {
            show_paused: self.tasks.is_some_and(|t| t.pause),
        }
    }
}

/// The string param `key`, if `params` has one.
pub(crate) fn str_param<'a>(params: Option<&'a JsonObject>, key: &str) -> Option<&'a str> {
    params.and_then(|p| p.get(key)).and_then(Value::as_str)
}

/// How a `tools/call` arrived, which decides whether it may become a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallMode {
    /// 2026-07-28: a task when the tool makes one and the request declared
    /// the tasks extension.
    Modern,
    /// Legacy without `params.task`: answered with the final result.
    LegacySync,
    /// Legacy with `params.task` (2025-11-25 task augmentation): answered
    /// with a `CreateTaskResult`, with the requested TTL if any.
    LegacyTask {
        /// `params.task.ttl`.
        ttl_ms: Option<u64>,
    },
}

/// The params of the `tasks/*` methods that name only a task, as the
/// server reads them: the wire's [`TaskIdParams`](crate::model::TaskIdParams)
/// without its `_meta`, which the pipeline has already read and checked
/// with the same reader (`dispatch.rs`; for a cluster inbox command, the
/// pipeline of the instance that took the request), so it is not read
/// again. The same errors for `taskId`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TaskIdOnly {
    pub(crate) task_id: String,
}

/// A `tasks/*` request other than `tasks/get`, its params read: the task
/// id as sent and the runtime's command.
#[derive(Debug)]
pub(crate) struct TaskCommand {
    /// The method it came as (what a cluster's inbox stores).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) method: TaskMethod,
    /// `taskId` as sent (resolved against the caller's tasks later).
    pub(crate) task_id: String,
    /// What to do to the task.
    pub(crate) command: Command,
}

impl TaskCommand {
    /// Reads the params of `method` (any task method but `tasks/get`),
    /// with the errors of [`JsonRpcRequest::params_as`](crate::model::JsonRpcRequest::params_as);
    /// `view` is the requester's (pause and resume answer with the task).
    pub(crate) fn parse(
        method: TaskMethod,
        params: Option<&JsonObject>,
        view: ClientView,
    ) -> Result<TaskCommand, ErrorObject> {
        let name = method.as_str();
        let task_id = || read_params::<TaskIdOnly>(name, params).map(|p| p.task_id);
        let (task_id, command) = match method {
            TaskMethod::Update => {
                let task_id = task_id()?;
                let responses = match params.and_then(|p| p.get("inputResponses")) {
                    Some(Value::Object(m)) => responses_of(m),
                    _ => return Err(invalid("`inputResponses` must be an object of responses")),
                };
                (task_id, Command::Update(responses))
            }
            TaskMethod::Cancel => (task_id()?, Command::Cancel),
            TaskMethod::Steer => {
                let p: SteerTaskParams = read_params(name, params)?;
                (p.task_id, Command::Steer(p.message))
            }
            TaskMethod::Pause => (task_id()?, Command::Pause(view)),
            TaskMethod::Resume => (task_id()?, Command::Resume(view)),
            TaskMethod::Get => {
                return Err(ErrorObject::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("method not found: {name:?}"),
                ));
            }
        };
        Ok(TaskCommand {
            method,
            task_id,
            command,
        })
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

/// A command as the cluster inbox carries it, from the instance that took
/// the request to the one holding the task's tree.
///
/// Its column keeps the layout databases written before the typed method
/// already hold (`{"method": "tasks/…", "params": {…}, "show_paused": …}`):
/// the method is stored as its wire name and parsed with
/// [`TaskMethod`]'s reader when the row is read; the params are read again
/// by [`TaskCommand::parse`], the reader of the request path.
#[cfg(feature = "postgres")]
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct InboxCommand {
    /// `tasks/update`, `tasks/cancel`, `tasks/steer`, `tasks/pause` or `tasks/resume`.
    pub(crate) method: TaskMethod,
    /// The command's params (the task id, the message, the responses).
    pub(crate) params: Value,
    /// Whether the requester's client understands `paused`.
    pub(crate) show_paused: bool,
}

#[cfg(feature = "postgres")]
impl InboxCommand {
    /// The inbox form of `command` for a requester that sees `view`.
    pub(crate) fn of(command: &TaskCommand, view: ClientView) -> InboxCommand {
        let mut params = serde_json::Map::new();
        params.insert("taskId".to_owned(), Value::String(command.task_id.clone()));
        match &command.command {
            Command::Update(responses) => {
                params.insert(
                    "inputResponses".to_owned(),
                    serde_json::to_value(responses).expect("responses serialize"),
                );
            }
            Command::Steer(message) => {
                params.insert("message".to_owned(), Value::String(message.clone()));
            }
            Command::Cancel | Command::Pause(_) | Command::Resume(_) => {}
        }
        InboxCommand {
            method: command.method,
            params: Value::Object(params),
            show_paused: view.show_paused,
        }
    }

    /// The command, its params read as the request path reads them.
    pub(crate) fn into_command(self) -> Result<TaskCommand, ErrorObject> {
        let view = ClientView {
            show_paused: self.show_paused,
        };
        let params = match self.params {
            Value::Object(m) => JsonObject::from_map(m),
            _ => JsonObject::default(),
        };
        TaskCommand::parse(self.method, Some(&params), view)
    }
}

/// A 2026-07-28 `tasks/*` request the server sends itself, as a client
/// with the tasks extension (steer and pause included) would: the web
/// view's reads and commands and the control tools' commands
/// ([`Server::request_as`](super::Server::request_as)).
#[derive(Debug)]
pub(crate) struct OwnRequest {
    /// The method.
    pub(crate) method: TaskMethod,
    /// `taskId`, as the caller gave it (checked like a client's).
    pub(crate) task_id: String,
    /// `message` (`tasks/steer`), as the caller gave it (checked like a
    /// client's); ignored by the other methods.
    pub(crate) message: Option<Value>,
}

impl OwnRequest {
    /// `method` on task `task_id`, without a message.
    pub(crate) fn new(method: TaskMethod, task_id: impl Into<String>) -> OwnRequest {
        OwnRequest {
            method,
            task_id: task_id.into(),
            message: None,
        }
    }

    /// The request as a JSON-RPC message (id 1) with its `_meta`.
    pub(crate) fn to_body(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            jsonrpc: &'static str,
            id: u8,
            method: TaskMethod,
            params: Params<'a>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Params<'a> {
            task_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<&'a Value>,
            #[serde(rename = "_meta")]
            meta: RequestMeta,
        }
        serde_json::to_vec(&Body {
            jsonrpc: "2.0",
            id: 1,
            method: self.method,
            params: Params {
                task_id: &self.task_id,
                message: self.message.as_ref(),
                meta: RequestMeta::new(ClientCapabilities::with_tasks(TasksCapability::FULL)),
            },
        })
        .expect("requests serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JsonRpcMessage, Method};

    #[test]
    fn an_own_request_is_a_2026_request_with_the_full_tasks_extension() {
        let mut r = OwnRequest::new(TaskMethod::Steer, "t-1");
        r.message = Some(Value::from("faster"));
        let JsonRpcMessage::Request(req) = JsonRpcMessage::parse(&r.to_body()).unwrap() else {
            panic!("not a request");
        };
        assert_eq!(
            Method::from_name(&req.method),
            Some(Method::Task(TaskMethod::Steer))
        );
        let meta = RequestMeta::from_params(req.params.as_ref()).unwrap().unwrap();
        assert!(meta.missing_required_keys().is_empty());
        assert_eq!(meta.tasks_capability(), Some(TasksCapability::FULL));
        let p: SteerTaskParams = req.params_as().unwrap();
        assert_eq!((p.task_id.as_str(), p.message.as_str()), ("t-1", "faster"));
    }

    #[test]
    fn commands_read_their_params_with_the_request_path_errors() {
        let params = |v: Value| JsonObject::from_value(v).unwrap();
        let c = TaskCommand::parse(
            TaskMethod::Pause,
            Some(&params(serde_json::json!({"taskId": "x"}))),
            ClientView::PAUSE_AWARE,
        )
        .unwrap();
        assert_eq!(c.task_id, "x");
        assert!(matches!(c.command, Command::Pause(v) if v.show_paused));
        let e = TaskCommand::parse(TaskMethod::Cancel, None, ClientView::BASE).unwrap_err();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(
            e.message
                .starts_with("invalid params for tasks/cancel: missing field `taskId`")
        );
        let e = TaskCommand::parse(
            TaskMethod::Update,
            Some(&params(serde_json::json!({"taskId": "x", "inputResponses": 3}))),
            ClientView::BASE,
        )
        .unwrap_err();
        assert_eq!(e.message, "`inputResponses` must be an object of responses");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn inbox_commands_keep_their_stored_layout_and_read_back() {
        let params = |v: Value| JsonObject::from_value(v).unwrap();
        let steer = TaskCommand::parse(
            TaskMethod::Steer,
            Some(&params(serde_json::json!({"taskId": "t", "message": "m"}))),
            ClientView::BASE,
        )
        .unwrap();
        let stored = serde_json::to_value(InboxCommand::of(&steer, ClientView::PAUSE_AWARE)).unwrap();
        assert_eq!(
            stored,
            serde_json::json!({"method": "tasks/steer", "params": {"taskId": "t", "message": "m"}, "show_paused": true})
        );
        // A row as databases written before the typed method hold it.
        let old = r#"{"method":"tasks/update","params":{"taskId":"t","inputResponses":{"k":{"a":1},"x":2},
            "_meta":{}},"show_paused":false}"#;
        let c: InboxCommand = serde_json::from_str(old).unwrap();
        let c = c.into_command().unwrap();
        assert_eq!((c.method, c.task_id.as_str()), (TaskMethod::Update, "t"));
        assert!(matches!(&c.command, Command::Update(r) if r.len() == 1 && r.contains_key("k")));
        assert!(
            serde_json::from_str::<InboxCommand>(r#"{"method":"tasks/get","params":{},"show_paused":false}"#)
                .unwrap()
                .into_command()
                .is_err()
        );
        assert!(
            serde_json::from_str::<InboxCommand>(r#"{"method":"tasks/x","params":{},"show_paused":false}"#)
                .is_err()
        );
    }
}
