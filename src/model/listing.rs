//! The results of discovery and listing on the 2026-07-28 wire
//! (`server/discover`, `tools/list`, `prompts/list`) and of an MRTR round
//! (`InputRequiredResult`), as the server writes them. The 2025-11-25
//! `tools/list` shape is the same list without the caching members.

use serde::{Deserialize, Serialize};

use super::{InputRequests, JsonObject, ResultType, ServerCapabilities};

/// An implementation's name and version (`serverInfo`, `clientInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
}

/// Who may share a cached result (`cacheScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheScope {
    /// Only the authorization context that asked.
    Private,
    /// Any client.
    Public,
}

/// Result of `server/discover`.
///
/// # Examples
///
/// ```
/// use subtask::model::{CacheScope, DiscoverResult, ServerCapabilities};
/// let r = DiscoverResult::new(vec!["2026-07-28".into()], ServerCapabilities::default());
/// let v = serde_json::to_value(&r).unwrap();
/// assert_eq!(v["resultType"], "complete");
/// assert_eq!(v["cacheScope"], "private");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    /// Always `complete`.
    pub result_type: ResultType,
    /// Protocol versions the server speaks.
    pub supported_versions: Vec<String>,
    /// What the server offers.
    pub capabilities: ServerCapabilities,
    /// Guidance for using the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// How long the answer may be cached, in milliseconds.
    pub ttl_ms: u64,
    /// Who may share the cached answer.
    pub cache_scope: CacheScope,
    /// `_meta` (e.g. `io.modelcontextprotocol/serverInfo`).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
}

impl DiscoverResult {
    /// A result not to be cached (`ttlMs: 0`, private), without `_meta`.
    pub fn new(supported_versions: Vec<String>, capabilities: ServerCapabilities) -> Self {
        DiscoverResult {
            result_type: ResultType::Complete,
            supported_versions,
            capabilities,
            instructions: None,
            ttl_ms: 0,
            cache_scope: CacheScope::Private,
            meta: None,
        }
    }
}

/// One tool as `tools/list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDescription {
    /// Unique name.
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: JsonObject,
    /// 2025-11-25 only: `{"taskSupport": "forbidden" | "optional" | "required"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<JsonObject>,
}

/// Result of `tools/list`. The 2025 wires carry only `tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult {
    /// `complete` on the 2026-07-28 wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_type: Option<ResultType>,
    /// The tools, in registration order.
    pub tools: Vec<ToolDescription>,
    /// How long the list may be cached (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Who may share the cached list (2026-07-28).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<CacheScope>,
}

impl ListToolsResult {
    /// The 2026-07-28 form: `complete`, not to be cached.
    pub fn modern(tools: Vec<ToolDescription>) -> Self {
        ListToolsResult {
            result_type: Some(ResultType::Complete),
            tools,
            ttl_ms: Some(0),
            cache_scope: Some(CacheScope::Private),
        }
    }

    /// The 2025 form: the list alone.
    pub fn legacy(tools: Vec<ToolDescription>) -> Self {
        ListToolsResult {
            result_type: None,
            tools,
            ttl_ms: None,
            cache_scope: None,
        }
    }
}

/// One prompt as `prompts/list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptDescription {
    /// Unique name.
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `[{name, description, required}]`.
    #[serde(default)]
    pub arguments: Vec<JsonObject>,
}

/// Result of `prompts/list` (2026-07-28).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPromptsResult {
    /// Always `complete`.
    pub result_type: ResultType,
    /// The prompts, in registration order.
    pub prompts: Vec<PromptDescription>,
    /// How long the list may be cached.
    pub ttl_ms: u64,
    /// Who may share the cached list.
    pub cache_scope: CacheScope,
}

impl ListPromptsResult {
    /// Not to be cached.
    pub fn new(prompts: Vec<PromptDescription>) -> Self {
        ListPromptsResult {
            result_type: ResultType::Complete,
            prompts,
            ttl_ms: 0,
            cache_scope: CacheScope::Private,
        }
    }
}

/// An MRTR round: the request needs the client's answers before it can
/// complete (`resultType: "input_required"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InputRequiredResult {
    /// Always `input_required`.
    pub result_type: ResultType,
    /// What the server asks, by key.
    pub input_requests: InputRequests,
    /// Opaque state the client sends back with its answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_state: Option<String>,
}

impl InputRequiredResult {
    /// A round asking `input_requests`.
    pub fn new(input_requests: InputRequests, request_state: Option<String>) -> Self {
        InputRequiredResult {
            result_type: ResultType::InputRequired,
            input_requests,
            request_state,
        }
    }
}
