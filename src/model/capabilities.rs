//! Capabilities: the `extensions` map, the tasks extension's settings with
//! SEP-2669's `steer` and `pause` sub-capabilities, the client and server
//! capability objects, and the `-32021` error that names a missing one.
//!
//! Clients declare capabilities per request (in `_meta`, see
//! [`RequestMeta`](super::RequestMeta)); servers in `server/discover`. This
//! module reads and writes them; deciding what a missing one means is the
//! server's job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{ErrorCode, ErrorObject, JsonObject, TASKS_EXTENSION};

/// Settings of the tasks extension (`io.modelcontextprotocol/tasks`), the
/// same shape on the client and the server side.
///
/// `{}` declares the base extension; SEP-2669 adds `"steer": true` and
/// `"pause": true` (pause implies resume). `false` sub-capabilities are not
/// written, so the base extension serializes as `{}`.
///
/// # Examples
///
/// ```
/// use subtask::model::TasksCapability;
/// let full = TasksCapability::FULL;
/// assert_eq!(serde_json::to_string(&full).unwrap(), r#"{"steer":true,"pause":true}"#);
/// assert_eq!(serde_json::to_string(&TasksCapability::BASE).unwrap(), "{}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct TasksCapability {
    /// `tasks/steer` is supported (SEP-2669).
    #[serde(default, skip_serializing_if = "is_false")]
    pub steer: bool,
    /// `tasks/pause` and `tasks/resume`, and the `paused` status, are
    /// supported (SEP-2669).
    #[serde(default, skip_serializing_if = "is_false")]
    pub pause: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl TasksCapability {
    /// The base extension only: `{}`.
    pub const BASE: TasksCapability = TasksCapability {
        steer: false,
        pause: false,
    };
    /// The base extension with steer and pause: `{"steer": true, "pause": true}`.
    pub const FULL: TasksCapability = TasksCapability {
        steer: true,
        pause: true,
    };

    /// Reads settings leniently: a sub-capability counts only when its value
    /// is exactly `true`; anything else (absent, `false`, a non-boolean) is
    /// not declared. Unknown settings are ignored.
    pub fn from_settings(settings: &JsonObject) -> Self {
        let flag = |key: &str| settings.get(key) == Some(&Value::Bool(true));
        TasksCapability {
            steer: flag("steer"),
            pause: flag("pause"),
        }
    }

    /// The settings object, as stored in an extensions map.
    pub fn to_settings(self) -> JsonObject {
        let mut map = serde_json::Map::new();
        if self.steer {
            map.insert("steer".into(), Value::Bool(true));
        }
        if self.pause {
            map.insert("pause".into(), Value::Bool(true));
        }
        JsonObject::from_map(map)
    }

    /// Sub-capabilities both sides declared (for a server: what it offers
    /// intersected with what the request declared).
    #[must_use]
    pub fn intersect(self, other: TasksCapability) -> TasksCapability {
        TasksCapability {
            steer: self.steer && other.steer,
            pause: self.pause && other.pause,
        }
    }
}

/// The `extensions` member of a capabilities object: extension identifier
/// to settings object (`{}` when an extension has no settings).
///
/// # Examples
///
/// ```
/// use subtask::model::{ExtensionCapabilities, TasksCapability};
/// let ext: ExtensionCapabilities =
///     serde_json::from_str(r#"{"io.modelcontextprotocol/tasks": {"pause": true}}"#).unwrap();
/// assert_eq!(ext.tasks(), Some(TasksCapability { steer: false, pause: true }));
/// assert_eq!(ExtensionCapabilities::new().tasks(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExtensionCapabilities(BTreeMap<String, JsonObject>);

impl ExtensionCapabilities {
    /// No extensions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only the tasks extension with `settings`.
    pub fn with_tasks(settings: TasksCapability) -> Self {
        let mut ext = Self::new();
        ext.insert(TASKS_EXTENSION, settings.to_settings());
        ext
    }

    /// The settings of extension `id`, if declared.
    pub fn get(&self, id: &str) -> Option<&JsonObject> {
        self.0.get(id)
    }

    /// Whether extension `id` is declared.
    pub fn contains(&self, id: &str) -> bool {
        self.0.contains_key(id)
    }

    /// Declares extension `id` with `settings`, replacing earlier settings.
    pub fn insert(&mut self, id: impl Into<String>, settings: JsonObject) {
        self.0.insert(id.into(), settings);
    }

    /// The tasks extension's settings, if the extension is declared.
    pub fn tasks(&self) -> Option<TasksCapability> {
        self.get(TASKS_EXTENSION).map(TasksCapability::from_settings)
    }

    /// Whether no extension is declared.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every declared extension with its settings, by identifier.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &JsonObject)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// Client capabilities (`io.modelcontextprotocol/clientCapabilities` in a
/// request's `_meta`). Members other than those listed are dropped.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    /// Extensions the client supports, by identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<ExtensionCapabilities>,
    /// Elicitation support (opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<JsonObject>,
    /// Sampling support (opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<JsonObject>,
    /// Roots support (opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<JsonObject>,
    /// Experimental, non-standard capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<JsonObject>,
}

impl ClientCapabilities {
    /// Capabilities declaring only the tasks extension with `settings`.
    pub fn with_tasks(settings: TasksCapability) -> Self {
        ClientCapabilities {
            extensions: Some(ExtensionCapabilities::with_tasks(settings)),
            ..Self::default()
        }
    }

    /// The tasks extension's settings, if the client declared it.
    pub fn tasks(&self) -> Option<TasksCapability> {
        self.extensions.as_ref().and_then(ExtensionCapabilities::tasks)
    }
}

/// Server capabilities (the `capabilities` of a `server/discover` result).
/// Members other than those listed are dropped.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    /// Tool support, e.g. `{"listChanged": true}` (opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<JsonObject>,
    /// Resource support (opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<JsonObject>,
    /// Prompt support (opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<JsonObject>,
    /// Logging support (opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<JsonObject>,
    /// Argument completion support (opaque here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<JsonObject>,
    /// Extensions the server supports, by identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<ExtensionCapabilities>,
    /// Experimental, non-standard capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<JsonObject>,
}

impl ServerCapabilities {
    /// The tasks extension's settings, if the server declares it.
    pub fn tasks(&self) -> Option<TasksCapability> {
        self.extensions.as_ref().and_then(ExtensionCapabilities::tasks)
    }
}

impl ErrorObject {
    /// `-32021` (missing required client capability) whose
    /// `data.requiredCapabilities` lists what the request lacked.
    pub fn missing_required_client_capability(required: &ClientCapabilities) -> Self {
        let required = serde_json::to_value(required).unwrap_or_else(|_| json!({}));
        ErrorObject::new(
            ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Missing required client capability",
        )
        .with_data(json!({ "requiredCapabilities": required }))
    }

    /// `-32021` for a request that needs the tasks extension, exactly as the
    /// extension's text shows it:
    /// `{"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}`.
    ///
    /// # Examples
    ///
    /// ```
    /// use subtask::model::ErrorObject;
    /// let e = ErrorObject::tasks_extension_required();
    /// assert_eq!(e.code.0, -32021);
    /// assert!(e.data.unwrap()["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object());
    /// ```
    pub fn tasks_extension_required() -> Self {
        Self::missing_required_client_capability(&ClientCapabilities::with_tasks(TasksCapability::BASE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_capabilities_count_only_when_exactly_true() {
        let settings: JsonObject =
            serde_json::from_str(r#"{"steer": "yes", "pause": true, "x": 1}"#).unwrap();
        assert_eq!(
            TasksCapability::from_settings(&settings),
            TasksCapability {
                steer: false,
                pause: true
            }
        );
    }

    #[test]
    fn tasks_extension_required_matches_the_spec_text() {
        let e = ErrorObject::tasks_extension_required();
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({
                "code": -32021,
                "message": "Missing required client capability",
                "data": {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
            })
        );
    }

    #[test]
    fn intersect_keeps_what_both_declare() {
        let client = TasksCapability {
            steer: true,
            pause: false,
        };
        assert_eq!(TasksCapability::FULL.intersect(client), client);
    }
}
