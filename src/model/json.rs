//! Opaque JSON payloads: tool results, JSON-RPC error data, input requests.
//!
//! The core stores these without looking inside; cloning is a reference-count
//! bump, so a task snapshot costs O(1) in the size of its payload until it is
//! serialized.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A JSON object shared cheaply between the core, snapshots and the wire.
///
/// Deserializing anything but an object fails with a precise message.
///
/// # Examples
///
/// ```
/// use subtask::model::JsonObject;
/// let obj: JsonObject = serde_json::from_str(r#"{"content": [], "isError": false}"#).unwrap();
/// assert_eq!(obj["isError"], false);
/// assert!(serde_json::from_str::<JsonObject>("[1]").is_err());
/// ```
#[derive(Clone, PartialEq, Default)]
pub struct JsonObject(Arc<Map<String, Value>>);

impl JsonObject {
    /// An empty object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wraps a map.
    pub fn from_map(map: Map<String, Value>) -> Self {
        JsonObject(Arc::new(map))
    }

    /// Converts a value, returning it back if it is not an object.
    ///
    /// # Errors
    ///
    /// Returns the value unchanged when it is not a JSON object.
    pub fn from_value(value: Value) -> Result<Self, Value> {
        match value {
            Value::Object(map) => Ok(Self::from_map(map)),
            other => Err(other),
        }
    }

    /// The object as a `serde_json::Value` (copies the map).
    pub fn to_value(&self) -> Value {
        Value::Object((*self.0).clone())
    }

    /// The underlying map.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.0
    }

    /// Approximate heap bytes held by this payload, for limits and accounting.
    pub fn approx_size(&self) -> usize {
        serde_json::to_string(&*self.0).map_or(0, |s| s.len())
    }
}

impl Deref for JsonObject {
    type Target = Map<String, Value>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl fmt::Debug for JsonObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Value::Object((*self.0).clone()))
    }
}

impl From<Map<String, Value>> for JsonObject {
    fn from(map: Map<String, Value>) -> Self {
        Self::from_map(map)
    }
}

impl Serialize for JsonObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JsonObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        match value {
            Value::Object(map) => Ok(Self::from_map(map)),
            other => Err(serde::de::Error::custom(format_args!(
                "expected a JSON object, found {}",
                kind(&other)
            ))),
        }
    }
}

/// A short name for the JSON type of `v`, for error messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
