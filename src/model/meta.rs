//! `_meta`: the per-request protocol fields of MCP 2026-07-28 and the
//! per-notification subscription id.
//!
//! MCP is stateless: every request carries its protocol version and the
//! client's capabilities in `params._meta`. [`RequestMeta`] reads those keys
//! with precise errors and keeps every other key verbatim; it answers "did
//! this request declare the tasks extension, and with which
//! sub-capabilities?" ([`RequestMeta::tasks_capability`]). Whether a missing
//! required key is an error is for the server to decide
//! ([`RequestMeta::missing_required_keys`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::json::kind;
use super::{ClientCapabilities, ErrorCode, ErrorObject, JsonObject, RequestId, TasksCapability};

/// The protocol revision this crate speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// `_meta` key: protocol version of a request (required).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: client capabilities relevant to a request (required).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: client name and version (optional).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: minimum log level for a request (optional).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key: the subscription a notification belongs to.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// `_meta` key: server name and version, on results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The `_meta` of a request.
///
/// The protocol keys are typed; everything else (`progressToken`,
/// `traceparent`, the log level, vendor keys) is kept in `other` and written
/// back unchanged.
///
/// # Examples
///
/// ```
/// use subtask::model::{RequestMeta, TasksCapability};
/// let meta: RequestMeta = serde_json::from_str(r#"{
///     "io.modelcontextprotocol/protocolVersion": "2026-07-28",
///     "io.modelcontextprotocol/clientCapabilities": {
///         "extensions": {"io.modelcontextprotocol/tasks": {"pause": true}}
///     }
/// }"#).unwrap();
/// assert_eq!(meta.tasks_capability(), Some(TasksCapability { steer: false, pause: true }));
/// assert!(meta.missing_required_keys().is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestMeta {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub protocol_version: Option<String>,
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub client_capabilities: Option<ClientCapabilities>,
    /// `io.modelcontextprotocol/clientInfo` (self-reported; display only).
    pub client_info: Option<JsonObject>,
    /// Every other key, verbatim.
    pub other: Map<String, Value>,
}

impl RequestMeta {
    /// Meta for a 2026-07-28 request with the given capabilities.
    pub fn new(client_capabilities: ClientCapabilities) -> Self {
        RequestMeta {
            protocol_version: Some(PROTOCOL_VERSION.to_owned()),
            client_capabilities: Some(client_capabilities),
            ..Self::default()
        }
    }

    /// The tasks extension's settings if this request declared the
    /// extension, `None` if it did not.
    pub fn tasks_capability(&self) -> Option<TasksCapability> {
        self.client_capabilities
            .as_ref()
            .and_then(ClientCapabilities::tasks)
    }

    /// The keys 2026-07-28 requires on every request that are absent here
    /// (the server answers such a request with `-32602`).
    pub fn missing_required_keys(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if self.protocol_version.is_none() {
            missing.push(META_PROTOCOL_VERSION);
        }
        if self.client_capabilities.is_none() {
            missing.push(META_CLIENT_CAPABILITIES);
        }
        missing
    }

    /// Reads the `_meta` of any request's params (absent params or `_meta`
    /// give `None`).
    ///
    /// # Errors
    ///
    /// `-32602` (invalid params) naming the malformed key.
    pub fn from_params(params: Option<&JsonObject>) -> Result<Option<Self>, ErrorObject> {
        match params.and_then(|p| p.get("_meta")) {
            None => Ok(None),
            Some(value) => Self::from_value(value)
                .map(Some)
                .map_err(|m| ErrorObject::new(ErrorCode::INVALID_PARAMS, format!("invalid params: {m}"))),
        }
    }

    fn from_value(value: &Value) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err(format!("`_meta` must be an object, found {}", kind(value)));
        };
        let mut meta = RequestMeta::default();
        for (key, value) in map {
            match key.as_str() {
                META_PROTOCOL_VERSION => match value {
                    Value::String(s) => meta.protocol_version = Some(s.clone()),
                    other => return Err(format!("`_meta.{key}` must be a string, found {}", kind(other))),
                },
                META_CLIENT_CAPABILITIES => {
                    if !value.is_object() {
                        return Err(format!("`_meta.{key}` must be an object, found {}", kind(value)));
                    }
                    let caps =
                        ClientCapabilities::deserialize(value).map_err(|e| format!("`_meta.{key}`: {e}"))?;
                    meta.client_capabilities = Some(caps);
                }
                META_CLIENT_INFO => match value {
                    Value::Object(info) => meta.client_info = Some(JsonObject::from_map(info.clone())),
                    other => return Err(format!("`_meta.{key}` must be an object, found {}", kind(other))),
                },
                _ => {
                    meta.other.insert(key.clone(), value.clone());
                }
            }
        }
        Ok(meta)
    }

    fn to_map(&self) -> Map<String, Value> {
        let mut map = self.other.clone();
        if let Some(v) = &self.protocol_version {
            map.insert(META_PROTOCOL_VERSION.into(), Value::String(v.clone()));
        }
        if let Some(caps) = &self.client_capabilities {
            let caps = serde_json::to_value(caps).unwrap_or_else(|_| Value::Object(Map::new()));
            map.insert(META_CLIENT_CAPABILITIES.into(), caps);
        }
        if let Some(info) = &self.client_info {
            map.insert(META_CLIENT_INFO.into(), info.to_value());
        }
        map
    }
}

impl Serialize for RequestMeta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_map().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RequestMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        RequestMeta::from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// The `_meta` of a notification or of a subscription's closing result.
///
/// # Examples
///
/// ```
/// use subtask::model::{NotificationMeta, RequestId};
/// let meta = NotificationMeta::for_subscription(RequestId::Number(1));
/// assert_eq!(
///     serde_json::to_string(&meta).unwrap(),
///     r#"{"io.modelcontextprotocol/subscriptionId":1}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NotificationMeta {
    /// `io.modelcontextprotocol/subscriptionId`: the JSON-RPC id of the
    /// `subscriptions/listen` request whose stream carries this message.
    pub subscription_id: Option<RequestId>,
    /// Every other key, verbatim.
    pub other: Map<String, Value>,
}

impl NotificationMeta {
    /// Meta naming the subscription `id`.
    pub fn for_subscription(id: RequestId) -> Self {
        NotificationMeta {
            subscription_id: Some(id),
            other: Map::new(),
        }
    }

    /// The meta as a JSON object.
    pub fn to_object(&self) -> JsonObject {
        let mut map = self.other.clone();
        if let Some(id) = &self.subscription_id {
            map.insert(META_SUBSCRIPTION_ID.into(), id.to_value());
        }
        JsonObject::from_map(map)
    }

    /// Reads the meta from a JSON object.
    ///
    /// # Errors
    ///
    /// A description naming the subscription id when it is not a string or
    /// an integer.
    pub fn from_object(obj: &JsonObject) -> Result<Self, String> {
        let mut meta = NotificationMeta::default();
        for (key, value) in obj.iter() {
            if key == META_SUBSCRIPTION_ID {
                let id = RequestId::from_value(value).map_err(|m| format!("`_meta.{key}`: {m}"))?;
                meta.subscription_id = Some(id);
            } else {
                meta.other.insert(key.clone(), value.clone());
            }
        }
        Ok(meta)
    }
}

impl Serialize for NotificationMeta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_object().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for NotificationMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let obj = JsonObject::deserialize(deserializer)?;
        NotificationMeta::from_object(&obj).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_keys_survive_a_round_trip() {
        let v = json!({
            "progressToken": 5,
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"}
        });
        let meta: RequestMeta = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(meta.tasks_capability(), None);
        assert_eq!(serde_json::to_value(&meta).unwrap(), v);
    }

    #[test]
    fn malformed_protocol_keys_are_named() {
        let e = serde_json::from_value::<RequestMeta>(json!({META_PROTOCOL_VERSION: 2026})).unwrap_err();
        assert!(
            e.to_string()
                .contains("protocolVersion` must be a string, found a number"),
            "{e}"
        );
        let e = serde_json::from_value::<RequestMeta>(json!({META_CLIENT_CAPABILITIES: {"extensions": 1}}))
            .unwrap_err();
        assert!(e.to_string().contains("clientCapabilities`"), "{e}");
        let params: JsonObject = serde_json::from_value(json!({"_meta": []})).unwrap();
        let e = RequestMeta::from_params(Some(&params)).unwrap_err();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(
            e.message.contains("`_meta` must be an object, found an array"),
            "{}",
            e.message
        );
    }

    #[test]
    fn missing_required_keys_are_listed() {
        assert_eq!(
            RequestMeta::default().missing_required_keys(),
            [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES]
        );
        assert!(
            RequestMeta::new(ClientCapabilities::default())
                .missing_required_keys()
                .is_empty()
        );
    }
}
