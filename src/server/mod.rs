//! The MCP endpoint: 2026-07-28 stateless requests over Streamable HTTP
//! (axum) and stdio, the tasks extension with subtasks, steer and pause.
//!
//! This layer validates and dispatches requests, authenticates principals
//! and enforces limits; it holds no lifecycle logic (that is the core's).

mod access;
mod agent;
mod auth;
#[cfg(feature = "postgres")]
mod cluster;
mod config;
mod dispatch;
pub mod http;
pub(crate) mod http_base;
mod http_stats;
mod input;
mod legacy;
#[cfg(feature = "metrics")]
mod metrics;
mod mrtr;
#[cfg(feature = "oauth")]
mod oauth;
mod reply;
mod request;
mod schema;
mod session;
#[cfg(all(feature = "oauth", feature = "ui"))]
mod signin;
pub mod stdio;
mod stored;
mod subscriptions;
mod tasks;
mod tool;
mod tool_calls;
#[cfg(feature = "ui")]
mod ui;
mod workers;

use std::sync::Arc;

pub use auth::{Grants, Principal, TokenTable};
#[cfg(feature = "postgres")]
pub use cluster::{Cluster, ClusterConfig};
pub use config::{ServerConfig, ServerLimits};
pub use dispatch::LEGACY_VERSIONS;
pub use input::{ElicitAnswer, list_roots, sampling};
#[cfg(feature = "oauth")]
pub use oauth::{OAuthConfig, REFETCH_EVERY, ScopeNames};
pub use reply::{Reply, status_for};
pub use request::{Incoming, RequestHeaders};
pub use schema::{ArgumentError, ArgumentSchema, SchemaError, check_arguments};
/// The `schemars` this crate derives tool schemas with ([`ToolSpec::typed`]),
/// for `#[derive(JsonSchema)]` without a dependency of your own: add
/// `#[schemars(crate = "subtask::server::schemars")]` to the type.
pub use schemars;
pub use session::Connection;
pub use tool::{
    PromptSpec, RegisteredPrompt, RegisteredTool, TaskBody, TaskSupport, Tool, ToolCall, ToolOutcome,
    ToolSpec, elicitation, error_result, structured_result, text_result,
};
pub use workers::WorkerConfig;

use crate::runtime::{RecoveryReport, Runtime};
use crate::store::StoreError;

/// An MCP server over a [`Runtime`]. Cheap to clone.
#[derive(Clone)]
pub struct Server {
    pub(crate) inner: Arc<ServerInner>,
}

pub(crate) struct ServerInner {
    pub(crate) runtime: Runtime,
    pub(crate) config: ServerConfig,
    pub(crate) tools: Vec<RegisteredTool>,
    pub(crate) prompts: Vec<RegisteredPrompt>,
    pub(crate) state_key: mrtr::StateKey,
    pub(crate) owners: auth::Owners,
    /// What the HTTP endpoint counts (`/metrics`); shared by a cluster
    /// instance's incarnations ([`Server::current`]).
    pub(crate) http_stats: Arc<http_stats::HttpStats>,
    /// The workers' hub, when the server takes workers (`docs/workers.md`).
    pub(crate) workers: Option<Arc<workers::Hub>>,
    /// Checks OAuth access tokens, when configured (`docs/auth.md`).
    #[cfg(feature = "oauth")]
    pub(crate) oauth: Option<Arc<oauth::Verifier>>,
    /// Set once this instance joins a cluster ([`Server::join_cluster`]).
    #[cfg(feature = "postgres")]
    pub(crate) cluster: std::sync::OnceLock<Arc<cluster::Node>>,
    /// The finished trees the runtime let go of, answered from its store
    /// (`RuntimeConfig::release_finished_after`); `None` when it keeps them.
    pub(crate) finished: Option<access::Finished>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field(
                "tools",
                &self.inner.tools.iter().map(|t| &t.spec.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Builds a [`Server`]: register tools and prompts, then `build`.
pub struct ServerBuilder {
    runtime: Runtime,
    config: ServerConfig,
    tools: Vec<RegisteredTool>,
    prompts: Vec<RegisteredPrompt>,
}

impl ServerBuilder {
    /// Registers a tool; `tools/list` lists tools in registration order.
    ///
    /// # Panics
    ///
    /// If a tool with the same name is already registered, or if the
    /// spec's `input_schema` was replaced after it was built with a schema
    /// that does not compile (see [`ToolSpec::new`]).
    #[must_use]
    pub fn tool(mut self, spec: ToolSpec, tool: impl Tool) -> Self {
        let spec = spec.compiled();
        assert!(
            self.tools.iter().all(|t| t.spec.name != spec.name),
            "tool {:?} registered twice",
            spec.name
        );
        self.tools.push(RegisteredTool {
            label: Arc::from(spec.name.as_str()),
            spec,
            tool: Arc::new(tool),
        });
        self
    }

    /// Registers a prompt (answers `prompts/get`; enables the `prompts` capability).
    #[must_use]
    pub fn prompt(mut self, spec: PromptSpec, prompt: impl Tool) -> Self {
        self.prompts.push(RegisteredPrompt {
            spec,
            prompt: Arc::new(prompt),
        });
        self
    }

    /// The server.
    ///
    /// # Panics
    ///
    /// If the control tools are on (`ServerConfig::agent_tools`) and a
    /// registered tool has one of their names.
    pub fn build(self) -> Server {
        if self.config.agent_tools() {
            for t in &self.tools {
                assert!(
                    !agent::NAMES.contains(&t.spec.name.as_str()),
                    "tool {:?} has the name of a control tool (ServerConfig::agent_tools)",
                    t.spec.name
                );
            }
        }
        let owners = auth::Owners::new(self.config.limits.max_live_tasks_per_principal);
        // Every tool's series exist from the start (at zero), so a rate
        // over the first tasks is right.
        for tool in &self.tools {
            let _ = self.runtime.stats().tool(Some(&tool.label));
        }
        let workers = self.config.workers.clone().map(workers::Hub::new);
        let finished = self.runtime.finished_store();
        #[cfg(feature = "oauth")]
        let oauth_verifier = self
            .config
            .oauth
            .clone()
            .map(|c| Arc::new(oauth::Verifier::new(c)));
        let inner = Arc::new(ServerInner {
            runtime: self.runtime,
            state_key: mrtr::StateKey::random(),
            owners,
            http_stats: Arc::new(http_stats::HttpStats::default()),
            config: self.config,
            tools: self.tools,
            prompts: self.prompts,
            workers,
            #[cfg(feature = "oauth")]
            oauth: oauth_verifier,
            #[cfg(feature = "postgres")]
            cluster: std::sync::OnceLock::new(),
            finished: finished.map(|(store, forest)| access::Finished::new(store, forest)),
        });
        if let Some(hub) = &inner.workers {
            hub.attach(&inner);
        }
        Server { inner }
    }
}

impl Server {
    /// A builder over `runtime`.
    pub fn builder(runtime: Runtime, config: ServerConfig) -> ServerBuilder {
        ServerBuilder {
            runtime,
            config,
            tools: Vec::new(),
            prompts: Vec::new(),
        }
    }

    /// The server that answers in this one's place: for a cluster
    /// instance that lost its lease and rejoined the cluster, the
    /// incarnation it rejoined as (a new runtime on a new store; see
    /// `docs/scale-out.md`, "Fencing and rejoining"); otherwise this one.
    /// Every entry point (the HTTP and stdio transports, the web view,
    /// `/metrics`) asks for it at each request; so should whoever acts on
    /// the server's runtime later on (a drain at shutdown).
    pub fn current(&self) -> Server {
        #[cfg(feature = "postgres")]
        if let Some(next) = self.cluster().and_then(|node| node.current_server())
            && !Arc::ptr_eq(&next.inner, &self.inner)
        {
            return next;
        }
        self.clone()
    }

    /// A server like this one (tools, prompts, configuration, request-state
    /// key, HTTP counters) over `runtime`, with principals of its own (their
    /// live tasks are counted anew by the runtime's trees): a cluster
    /// instance's next incarnation.
    #[cfg(feature = "postgres")]
    pub(crate) fn successor(&self, runtime: Runtime) -> Server {
        let old = &self.inner;
        let next = Server {
            inner: Arc::new(ServerInner {
                runtime,
                config: old.config.clone(),
                tools: old.tools.clone(),
                prompts: old.prompts.clone(),
                state_key: old.state_key.clone(),
                owners: auth::Owners::new(old.config.limits.max_live_tasks_per_principal),
                http_stats: old.http_stats.clone(),
                workers: old.workers.clone(),
                #[cfg(feature = "oauth")]
                oauth: old.oauth.clone(),
                cluster: std::sync::OnceLock::new(),
                // A cluster reads the finished trees its runtime let go of
                // from the database, as the trees others hold.
                finished: None,
            }),
        };
        if let Some(hub) = &next.inner.workers {
            hub.attach(&next.inner);
        }
        next
    }

    /// Whether callers present bearer tokens (static ones, or OAuth
    /// access tokens): the web view then asks for one.
    #[cfg(feature = "ui")]
    pub(crate) fn takes_tokens(&self) -> bool {
        #[cfg(feature = "oauth")]
        if self.inner.oauth.is_some() {
            return true;
        }
        self.inner.config.tokens.is_some()
    }

    /// Gives the OAuth verifier issuer `issuer`'s keys (a JWKS document)
    /// as if just fetched: the fuzz harness checks tokens without a network.
    #[cfg(all(feature = "fuzzing", feature = "oauth"))]
    pub(crate) fn seed_oauth_keys(&self, issuer: &str, jwks_key: &str) {
        if let Some(v) = &self.inner.oauth {
            v.seed(issuer, jwks_key);
        }
    }

    /// The runtime the server drives.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.runtime
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// Brings back the trees of the runtime's store after a restart (see
    /// [`Runtime::recover`]): each tree keeps its principal, and the task of
    /// a resumable tool runs again by calling the tool with the stored call.
    /// Call it once, before serving.
    ///
    /// # Errors
    ///
    /// The store cannot be read or holds a damaged tree.
    pub async fn recover(&self) -> Result<RecoveryReport, StoreError> {
        let inner = self.inner.clone();
        let owners = self.inner.clone();
        self.inner
            .runtime
            .recover(
                move |name| owners.owners.of_name(name),
                move |meta| rebuild(inner.clone(), meta.launch.clone()),
            )
            .await
    }
}

/// The handler of a stored tree's root after a restart or a takeover: the
/// tool called again with the stored call, if it is resumable.
async fn rebuild(
    inner: Arc<ServerInner>,
    launch: Option<serde_json::Value>,
) -> Option<crate::runtime::HandlerBody> {
    let call = tool::call_of_launch(launch.as_ref()?)?;
    let Some(tool) = inner.tools.iter().find(|t| t.spec.name == call.name) else {
        // A worker tool's tree (the runtime resumes only resumable ones):
        // its proxy waits for a worker serving the tool to register.
        let hub = inner.workers.clone()?;
        return Some(workers::resumed(hub, call));
    };
    if !tool.spec.resumable {
        return None;
    }
    match tool.tool.call(call).await {
        ToolOutcome::Task { body, .. } => Some(body),
        other => {
            tracing::warn!(outcome = ?other, "a resumable tool did not return a task when called again");
            None
        }
    }
}
