//! Server configuration and limits.

use std::time::Duration;

/// Limits, each with a safe default and a clear error when hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest accepted request body in bytes (HTTP 413 / -32600 beyond).
    pub max_body_bytes: usize,
    /// Non-terminal tasks one principal may own at once.
    pub max_live_tasks_per_principal: usize,
    /// Task ids in one `subscriptions/listen` filter.
    pub max_subscription_tasks: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_body_bytes: 1 << 20,
            max_live_tasks_per_principal: 10_000,
            max_subscription_tasks: 1_000,
        }
    }
}

/// Configuration of a [`Server`](super::Server).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Name in `serverInfo`.
    pub name: String,
    /// Version in `serverInfo`.
    pub version: String,
    /// Limits (tree depth, children per task and steer limits are the
    /// runtime's `ForestConfig`).
    pub limits: ServerLimits,
    /// TTL of a task created by `tools/call` when the tool sets none.
    pub default_task_ttl_ms: Option<u64>,
    /// Largest TTL a 2025-11-25 client may ask for with `params.task.ttl`
    /// (a larger one is clamped to it).
    pub max_task_ttl_ms: u64,
    /// Hosts accepted in `Origin` and `Host` headers (besides loopback names).
    pub allowed_hosts: Vec<String>,
    /// Bearer tokens; `None` runs as one anonymous principal.
    pub tokens: Option<super::TokenTable>,
    /// Keep-alive comment interval on `subscriptions/listen` streams.
    pub keep_alive: Duration,
    /// Serve the operator's web view at `/ui` (feature `ui`;
    /// docs/operations.md).
    pub ui: bool,
    /// Serve `/metrics` in the Prometheus text format (feature `metrics`;
    /// docs/operations.md, "Metrics").
    pub metrics: bool,
    /// List and answer the control tools a model in a host can call:
    /// `task_status`, `task_wait`, `task_steer`, `task_pause`,
    /// `task_resume`, `task_cancel` (docs/agents.md). Off by default.
    pub agent_tools: bool,
    /// Answer a call of any task tool from a client that asked for no task
    /// (no tasks extension, no `params.task`) at once with the task's id,
    /// instead of when the tree ends; the task runs on and the control
    /// tools follow it (turned on with this). Per tool:
    /// [`ToolSpec::background`](super::ToolSpec::background). Off by default.
    pub background: bool,
    /// Accept workers at `/workers` (tool handlers in other processes and
    /// languages, `docs/workers.md`); `None` serves no `/workers`.
    pub workers: Option<super::WorkerConfig>,
    /// Take OAuth access tokens (JWTs) from these authorization servers
    /// (feature `oauth`, `docs/auth.md`); with [`ServerConfig::tokens`]
    /// too, a static token is tried first.
    #[cfg(feature = "oauth")]
    pub oauth: Option<super::OAuthConfig>,
}

impl ServerConfig {
    /// Whether the control tools are served: asked for, or needed to follow
    /// background answers.
    pub fn agent_tools(&self) -> bool {
        self.agent_tools || self.background
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            name: "subtask".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            limits: ServerLimits::default(),
            default_task_ttl_ms: Some(60 * 60 * 1000),
            max_task_ttl_ms: 24 * 60 * 60 * 1000,
            allowed_hosts: Vec::new(),
            tokens: None,
            keep_alive: Duration::from_secs(15),
            ui: true,
            metrics: true,
            agent_tools: false,
            background: false,
            workers: None,
            #[cfg(feature = "oauth")]
            oauth: None,
        }
    }
}
