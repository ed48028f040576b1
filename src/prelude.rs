//! What a server author or a runtime user imports: `use subtask::prelude::*;`.
//!
//! The runtime (always), and with their features the server's tool
//! registration (`server`) and the client (`client`). Nothing here is
//! anything but a re-export.
//!
//! # Examples
//!
//! ```
//! use subtask::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let rt = Runtime::new(RuntimeConfig::default());
//! let root = rt.spawn(RootOptions::default(), |ctx| async move {
//!     let child = ctx.spawn_subtask(SubtaskOptions::default(), |_| async { Ok(JsonObject::new()) })?;
//!     let _outcome = child.await;
//!     Ok(JsonObject::new())
//! });
//! assert_eq!(rt.wait(root, ClientView::PAUSE_AWARE).await.unwrap().status(), TaskStatus::Completed);
//! # }
//! ```

pub use crate::model::{
    ClientView, DetailedTask, ErrorCode, ErrorObject, JsonObject, RootOptions, TaskId, TaskStatus,
};
pub use crate::runtime::{
    HandlerResult, Runtime, RuntimeConfig, SubtaskHandle, SubtaskOptions, SubtaskPlan, TaskContext,
    TaskError, TaskOutcome,
};

#[cfg(feature = "server")]
pub use crate::server::{
    Server, ServerConfig, TaskSupport, ToolCall, ToolOutcome, ToolSpec, check_arguments, error_result,
    structured_result, text_result,
};

#[cfg(feature = "client")]
pub use crate::client::{Client, ClientError};
