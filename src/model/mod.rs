//! Wire types of MCP 2026-07-28, the tasks extension, SEP-2268 (subtasks) and
//! SEP-2669 (steer, pause, resume), and of the 2025-11-25 tasks wire.
//!
//! Pure data: serde types with precise deserialization errors, no logic and
//! no I/O. Timestamps are integers ([`Timestamp`]) until serialized; task ids
//! are `Copy` ([`TaskId`]).

mod capabilities;
mod error;
mod id;
mod json;
mod jsonrpc;
mod legacy;
mod listing;
mod meta;
mod methods;
mod notifications;
mod options;
mod outcome;
mod requests;
mod results;
mod status;
mod task;
mod time;

pub use capabilities::{ClientCapabilities, ExtensionCapabilities, ServerCapabilities, TasksCapability};
pub use error::{ErrorCode, ErrorObject};
pub use id::{IdHasher, IdMap, ParseTaskIdError, TaskId};
pub use json::JsonObject;
#[cfg(feature = "demo")]
pub(crate) use json::kind as json_kind;
#[cfg(feature = "server")]
pub(crate) use jsonrpc::read_params;
pub use jsonrpc::{
    JsonRpcError, JsonRpcMessage, JsonRpcNotification, JsonRpcRequest, JsonRpcResponse, JsonRpcVersion,
    RequestId,
};
pub use legacy::{LegacyCreateTaskResult, LegacyTask, ListTasksResult, META_RELATED_TASK, RelatedTask};
pub use listing::{
    CacheScope, DiscoverResult, Implementation, InputRequiredResult, ListPromptsResult, ListToolsResult,
    PromptDescription, ToolDescription,
};
pub use meta::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION, META_SERVER_INFO,
    META_SUBSCRIPTION_ID, NotificationMeta, PROTOCOL_VERSION, RequestMeta,
};
pub use methods::{
    ELICITATION_CREATE, INITIALIZE, Method, NOTIFICATIONS_CANCELLED,
    NOTIFICATIONS_SUBSCRIPTIONS_ACKNOWLEDGED, NOTIFICATIONS_TASKS, NOTIFICATIONS_TASKS_STATUS, PING,
    PROMPTS_GET, PROMPTS_LIST, ROOTS_LIST, SAMPLING_CREATE_MESSAGE, SERVER_DISCOVER, SUBSCRIPTIONS_LISTEN,
    TASKS_CANCEL, TASKS_GET, TASKS_LIST, TASKS_PAUSE, TASKS_RESULT, TASKS_RESUME, TASKS_STEER, TASKS_UPDATE,
    TOOLS_CALL, TOOLS_LIST, TaskMethod,
};
pub use notifications::{SubscriptionsAcknowledgedParams, TaskStatusNotificationParams};
pub use options::{CancelOutcome, ClientView, RootOptions};
pub use outcome::{TaskOutcome, complete_result};
pub use requests::{
    CancelTaskParams, GetTaskParams, NotificationFilter, PauseTaskParams, RequestParams, ResumeTaskParams,
    SteerTaskParams, SubscriptionsListenParams, TaskIdParams, UpdateTaskParams,
};
pub use results::{AckResult, CancelTaskResult, SteerTaskResult, UpdateTaskResult};
pub use status::TaskStatus;
pub use task::{
    CreateTaskResult, DetailedTask, GetTaskResult, InputRequests, InputResponses, PauseTaskResult,
    ResultType, ResumeTaskResult, Task, TaskPayload,
};
pub use time::{ParseTimestampError, Timestamp};

/// The extension identifier of the tasks extension.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
