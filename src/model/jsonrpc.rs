//! The JSON-RPC 2.0 envelope as MCP 2026-07-28 uses it.
//!
//! [`JsonRpcMessage::parse`] classifies one incoming message (request,
//! notification, result response or error response) and, when the bytes are
//! not a well-formed message, returns the [`JsonRpcError`] to answer with:
//! `-32700` for text that is not JSON, `-32600` for JSON that is not a
//! message, with a message naming the offending member and the request id
//! whenever it could be read. It never panics, whatever the input.
//!
//! MCP narrows JSON-RPC in three ways that the parser enforces: ids are
//! strings or integers and never `null`; `params` and `result` are objects;
//! batches (top-level arrays) do not exist.
//!
//! This module only shapes and classifies messages. Which method means what,
//! and how an unknown method is answered, is for the server.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::json::kind;
use super::{ErrorCode, ErrorObject, JsonObject};

/// The `"jsonrpc": "2.0"` member: serializes as `"2.0"` and accepts nothing
/// else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct JsonRpcVersion;

impl JsonRpcVersion {
    /// The only version: `"2.0"`.
    pub const STR: &'static str = "2.0";
}

impl Serialize for JsonRpcVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(Self::STR)
    }
}

impl<'de> Deserialize<'de> for JsonRpcVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        match value {
            Value::String(s) if s == Self::STR => Ok(JsonRpcVersion),
            other => Err(serde::de::Error::custom(format_args!(
                "`jsonrpc` must be \"2.0\", found {}",
                describe(&other)
            ))),
        }
    }
}

/// A request id: a string or an integer, never `null` (MCP forbids null ids).
///
/// Integers written in float form (`1.0`, `1e3`) are read as the integer
/// they denote, as long as an `f64` holds it exactly; `1.5` is rejected.
///
/// # Examples
///
/// ```
/// use subtask::model::RequestId;
/// let id: RequestId = serde_json::from_str("7").unwrap();
/// assert_eq!(id, RequestId::Number(7));
/// assert_eq!(serde_json::to_string(&RequestId::from("a")).unwrap(), "\"a\"");
/// assert!(serde_json::from_str::<RequestId>("null").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl RequestId {
    /// Reads an id from a JSON value, with a reason when it is not one.
    ///
    /// # Errors
    ///
    /// Returns a lowercase description when `value` is not a string or an
    /// integer that fits in an `i64`.
    pub fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::String(s) => Ok(RequestId::String(s.clone())),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Ok(RequestId::Number(i))
                } else if n.is_u64() {
                    Err(format!("`id` {n} is out of range for a 64-bit signed integer"))
                } else {
                    // 2^53: above it an f64 no longer says which integer was sent.
                    const MAX_EXACT: f64 = 9_007_199_254_740_992.0;
                    match n.as_f64() {
                        Some(f) if f.fract() == 0.0 && f.abs() < MAX_EXACT => Ok(RequestId::Number(f as i64)),
                        _ => Err(format!(
                            "`id` must be a string or an integer, found the number {n}"
                        )),
                    }
                }
            }
            other => Err(format!(
                "`id` must be a string or an integer, found {}",
                kind(other)
            )),
        }
    }

    /// The id as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => Value::from(*n),
            RequestId::String(s) => Value::from(s.as_str()),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        RequestId::Number(n)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::String(s.to_owned())
    }
}

impl From<String> for RequestId {
    fn from(s: String) -> Self {
        RequestId::String(s)
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequestId::Number(n) => serializer.serialize_i64(*n),
            RequestId::String(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        RequestId::from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// A request: `{"jsonrpc": "2.0", "id", "method", "params"?}`.
///
/// `P` is the params type; the default keeps them as an opaque object, and
/// [`JsonRpcRequest::params_as`] reads them as a typed struct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcRequest<P = JsonObject> {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The id the response must echo.
    pub id: RequestId,
    /// The method name, e.g. `"tasks/get"`.
    pub method: String,
    /// The parameters, if any.
    // No `default`: it would demand `P: Default`; a missing `Option` is `None` anyway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<P>,
}

impl<P> JsonRpcRequest<P> {
    /// A request with parameters.
    pub fn new(id: impl Into<RequestId>, method: impl Into<String>, params: P) -> Self {
        JsonRpcRequest {
            jsonrpc: JsonRpcVersion,
            id: id.into(),
            method: method.into(),
            params: Some(params),
        }
    }
}

impl JsonRpcRequest {
    /// Reads the parameters as `T`; absent parameters read as `{}`, so a
    /// missing required field is reported by name.
    ///
    /// # Errors
    ///
    /// `-32602` (invalid params) naming the method and what is wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// use subtask::model::{GetTaskParams, JsonRpcMessage};
    /// let msg = JsonRpcMessage::parse(br#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}"#).unwrap();
    /// let JsonRpcMessage::Request(req) = msg else { unreachable!() };
    /// let err = req.params_as::<GetTaskParams>().unwrap_err();
    /// assert_eq!(err.code.0, -32602);
    /// assert!(err.message.contains("missing field `taskId`"), "{}", err.message);
    /// ```
    pub fn params_as<T: DeserializeOwned>(&self) -> Result<T, ErrorObject> {
        read_params(&self.method, self.params.as_ref())
    }
}

/// Reads the params `params` of a request of method `method` as `T`, as
/// [`JsonRpcRequest::params_as`] does (the same errors): for params held
/// apart from their request (a cluster's inbox).
pub(crate) fn read_params<T: DeserializeOwned>(
    method: &str,
    params: Option<&JsonObject>,
) -> Result<T, ErrorObject> {
    // Read in place: the params are not copied.
    let read = match params {
        Some(p) => T::deserialize(p.as_map()),
        None => T::deserialize(Value::Object(serde_json::Map::new())),
    };
    read.map_err(|e| {
        ErrorObject::new(
            ErrorCode::INVALID_PARAMS,
            format!("invalid params for {method}: {e}"),
        )
    })
}

/// A notification: `{"jsonrpc": "2.0", "method", "params"?}`, no id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcNotification<P = JsonObject> {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The method name, e.g. `"notifications/tasks"`.
    pub method: String,
    /// The parameters, if any.
    // No `default`: it would demand `P: Default`; a missing `Option` is `None` anyway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<P>,
}

impl<P> JsonRpcNotification<P> {
    /// A notification with parameters.
    pub fn new(method: impl Into<String>, params: P) -> Self {
        JsonRpcNotification {
            jsonrpc: JsonRpcVersion,
            method: method.into(),
            params: Some(params),
        }
    }
}

/// A successful response: `{"jsonrpc": "2.0", "id", "result"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcResponse<R = JsonObject> {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The id of the request answered.
    pub id: RequestId,
    /// The result.
    pub result: R,
}

impl<R> JsonRpcResponse<R> {
    /// A response to request `id`.
    pub fn new(id: impl Into<RequestId>, result: R) -> Self {
        JsonRpcResponse {
            jsonrpc: JsonRpcVersion,
            id: id.into(),
            result,
        }
    }
}

/// An error response: `{"jsonrpc": "2.0", "id"?, "error"}`.
///
/// The id is absent when it could not be read from the request (MCP
/// 2026-07-28 omits it; a JSON-RPC `null` id is read as absent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonRpcError {
    /// Always `"2.0"`.
    pub jsonrpc: JsonRpcVersion,
    /// The id of the request answered, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<RequestId>,
    /// The error.
    pub error: ErrorObject,
}

impl JsonRpcError {
    /// An error response.
    pub fn new(id: Option<RequestId>, error: ErrorObject) -> Self {
        JsonRpcError {
            jsonrpc: JsonRpcVersion,
            id,
            error,
        }
    }
}

impl fmt::Display for JsonRpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.id {
            Some(id) => write!(f, "{} (request {id})", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

impl std::error::Error for JsonRpcError {}

/// Any one JSON-RPC message, classified by shape.
///
/// Serializes as the message itself (no tag). Deserializing goes through the
/// same classification as [`JsonRpcMessage::parse`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum JsonRpcMessage {
    /// Has `method` and `id`.
    Request(JsonRpcRequest),
    /// Has `method` and no `id`.
    Notification(JsonRpcNotification),
    /// Has `result`.
    Response(JsonRpcResponse),
    /// Has `error`.
    Error(JsonRpcError),
}

impl JsonRpcMessage {
    /// Parses and classifies one message from raw bytes.
    ///
    /// # Errors
    ///
    /// The error response to send back: `-32700` when the bytes are not JSON
    /// (or not UTF-8), `-32600` when the JSON is not a JSON-RPC message. The
    /// message names the offending member; the id is set when it was read.
    ///
    /// # Examples
    ///
    /// ```
    /// use subtask::model::{JsonRpcMessage, RequestId};
    /// let msg = JsonRpcMessage::parse(br#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"x"}}"#);
    /// assert!(matches!(msg, Ok(JsonRpcMessage::Request(_))));
    ///
    /// let err = JsonRpcMessage::parse(br#"{"jsonrpc":"1.0","id":3,"method":"tasks/get"}"#).unwrap_err();
    /// assert_eq!(err.error.code.0, -32600);
    /// assert_eq!(err.id, Some(RequestId::Number(3)));
    /// assert!(err.error.message.contains("`jsonrpc` must be \"2.0\""));
    ///
    /// let err = JsonRpcMessage::parse(b"{\"jsonrpc\":").unwrap_err();
    /// assert_eq!((err.error.code.0, err.id), (-32700, None));
    /// ```
    pub fn parse(bytes: &[u8]) -> Result<Self, JsonRpcError> {
        // Read straight into the members the classification looks at (no
        // map for the top level); every value is still read as a `Value`,
        // so what is malformed JSON is exactly what `Value` refuses.
        let parsed: Parsed = serde_json::from_slice(bytes).map_err(|e| {
            JsonRpcError::new(
                None,
                ErrorObject::new(ErrorCode::PARSE_ERROR, format!("parse error: {e}")),
            )
        })?;
        match parsed {
            Parsed::Object(members) => Self::classify(members),
            Parsed::Other(value) => Self::from_value(value),
        }
    }

    /// Classifies an already parsed JSON value.
    ///
    /// # Errors
    ///
    /// As [`JsonRpcMessage::parse`], always with code `-32600`.
    pub fn from_value(value: Value) -> Result<Self, JsonRpcError> {
        let obj = match value {
            Value::Object(obj) => obj,
            Value::Array(_) => {
                return Err(invalid(
                    None,
                    "expected a JSON-RPC message object, found an array (batches are not supported)",
                ));
            }
            other => {
                return Err(invalid(
                    None,
                    format!("expected a JSON-RPC message object, found {}", kind(&other)),
                ));
            }
        };
        let mut members = Members::default();
        for (key, value) in obj {
            if let Some(slot) = members.slot(&key) {
                *slot = Some(value);
            }
        }
        Self::classify(members)
    }

    /// Classifies a message object from the members that decide its shape.
    fn classify(members: Members) -> Result<Self, JsonRpcError> {
        let Members {
            id,
            jsonrpc,
            method,
            params,
            result,
            error,
        } = members;
        let is_error = error.is_some();
        // The id first, so every later error can carry it. A `null` id is
        // only legal on an error response (the request's id was unreadable).
        let id = match id {
            None => None,
            Some(Value::Null) if is_error => None,
            Some(Value::Null) => {
                return Err(invalid(
                    None,
                    "`id` must be a string or an integer, found null (MCP forbids null ids)",
                ));
            }
            Some(v) => Some(RequestId::from_value(&v).map_err(|m| invalid(None, m))?),
        };

        match &jsonrpc {
            None => return Err(invalid(id, "missing `jsonrpc` member (expected \"2.0\")")),
            Some(Value::String(s)) if s == JsonRpcVersion::STR => {}
            Some(other) => {
                return Err(invalid(
                    id,
                    format!("`jsonrpc` must be \"2.0\", found {}", describe(other)),
                ));
            }
        }

        match (method, result, error) {
            (Some(_), result, _) if result.is_some() || is_error => Err(invalid(
                id,
                format!(
                    "a message cannot have both `method` and `{}`",
                    if result.is_some() { "result" } else { "error" }
                ),
            )),
            (Some(method), _, _) => {
                let Value::String(method) = method else {
                    return Err(invalid(
                        id,
                        format!("`method` must be a string, found {}", kind(&method)),
                    ));
                };
                let params = match params {
                    None | Some(Value::Null) => None,
                    Some(Value::Object(map)) => Some(JsonObject::from_map(map)),
                    Some(other) => {
                        return Err(invalid(
                            id,
                            format!("`params` of {method:?} must be an object, found {}", kind(&other)),
                        ));
                    }
                };
                Ok(match id {
                    Some(id) => JsonRpcMessage::Request(JsonRpcRequest {
                        jsonrpc: JsonRpcVersion,
                        id,
                        method,
                        params,
                    }),
                    None => JsonRpcMessage::Notification(JsonRpcNotification {
                        jsonrpc: JsonRpcVersion,
                        method,
                        params,
                    }),
                })
            }
            (None, Some(_), Some(_)) => Err(invalid(id, "a response cannot have both `result` and `error`")),
            (None, Some(result), None) => {
                let Some(id) = id else {
                    return Err(invalid(
                        None,
                        "a result response must have a string or integer `id`",
                    ));
                };
                match result {
                    Value::Object(map) => Ok(JsonRpcMessage::Response(JsonRpcResponse {
                        jsonrpc: JsonRpcVersion,
                        id,
                        result: JsonObject::from_map(map),
                    })),
                    other => Err(invalid(
                        Some(id),
                        format!("`result` must be an object, found {}", kind(&other)),
                    )),
                }
            }
            (None, None, Some(raw)) => {
                if !raw.is_object() {
                    return Err(invalid(
                        id,
                        format!("`error` must be an object, found {}", kind(&raw)),
                    ));
                }
                match ErrorObject::deserialize(raw) {
                    Ok(error) => Ok(JsonRpcMessage::Error(JsonRpcError {
                        jsonrpc: JsonRpcVersion,
                        id,
                        error,
                    })),
                    Err(e) => Err(invalid(
                        id,
                        format!("`error` is not a JSON-RPC error object: {e}"),
                    )),
                }
            }
            (None, None, None) => Err(invalid(
                id,
                "a JSON-RPC message needs `method` (request or notification), `result` or `error`",
            )),
        }
    }

    /// The id of a request or response; `None` for notifications and for
    /// error responses without an id.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            JsonRpcMessage::Request(r) => Some(&r.id),
            JsonRpcMessage::Response(r) => Some(&r.id),
            JsonRpcMessage::Error(e) => e.id.as_ref(),
            JsonRpcMessage::Notification(_) => None,
        }
    }

    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            JsonRpcMessage::Request(r) => Some(&r.method),
            JsonRpcMessage::Notification(n) => Some(&n.method),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for JsonRpcMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        JsonRpcMessage::from_value(value).map_err(|e| serde::de::Error::custom(e.error.message))
    }
}

impl From<JsonRpcRequest> for JsonRpcMessage {
    fn from(r: JsonRpcRequest) -> Self {
        JsonRpcMessage::Request(r)
    }
}

impl From<JsonRpcNotification> for JsonRpcMessage {
    fn from(n: JsonRpcNotification) -> Self {
        JsonRpcMessage::Notification(n)
    }
}

impl From<JsonRpcResponse> for JsonRpcMessage {
    fn from(r: JsonRpcResponse) -> Self {
        JsonRpcMessage::Response(r)
    }
}

impl From<JsonRpcError> for JsonRpcMessage {
    fn from(e: JsonRpcError) -> Self {
        JsonRpcMessage::Error(e)
    }
}

/// The members of a message object that decide what it is; the others
/// are read (so malformed JSON anywhere is still a parse error) and dropped.
#[derive(Default)]
struct Members {
    id: Option<Value>,
    jsonrpc: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    result: Option<Value>,
    error: Option<Value>,
}

impl Members {
    /// Where the value of member `key` goes (`None`: not one of ours). A
    /// repeated member keeps its last value, as a JSON object read into a
    /// map does.
    fn slot(&mut self, key: &str) -> Option<&mut Option<Value>> {
        Some(match key {
            "id" => &mut self.id,
            "jsonrpc" => &mut self.jsonrpc,
            "method" => &mut self.method,
            "params" => &mut self.params,
            "result" => &mut self.result,
            "error" => &mut self.error,
            _ => return None,
        })
    }
}

/// One message as read by [`JsonRpcMessage::parse`]: an object's members,
/// or any other JSON value (which is not a message).
enum Parsed {
    Object(Members),
    Other(Value),
}

impl<'de> Deserialize<'de> for Parsed {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ParsedVisitor)
    }
}

/// Reads what `Value` reads, the same way, but keeps an object as its members.
struct ParsedVisitor;

impl<'de> serde::de::Visitor<'de> for ParsedVisitor {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Parsed, E> {
        Ok(Parsed::Other(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Parsed, E> {
        Ok(Parsed::Other(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Parsed, E> {
        Ok(Parsed::Other(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Parsed, E> {
        Ok(Parsed::Other(
            serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }

    fn visit_str<E>(self, v: &str) -> Result<Parsed, E> {
        Ok(Parsed::Other(Value::String(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Parsed, E> {
        Ok(Parsed::Other(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<Parsed, E> {
        Ok(Parsed::Other(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Parsed, E> {
        Ok(Parsed::Other(Value::Null))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Parsed, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Parsed::Other(Value::Array(items)))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let mut members = Members::default();
        while let Some(key) = map.next_key::<MemberKey>()? {
            let value: Value = map.next_value()?;
            if let Some(slot) = members.slot(&key.0) {
                *slot = Some(value);
            }
        }
        Ok(Parsed::Object(members))
    }
}

/// An object member's name, borrowed from the input when it has no escapes.
struct MemberKey<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for MemberKey<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> serde::de::Visitor<'de> for KeyVisitor {
            type Value = MemberKey<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<MemberKey<'de>, E> {
                Ok(MemberKey(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<MemberKey<'de>, E> {
                Ok(MemberKey(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<MemberKey<'de>, E> {
                Ok(MemberKey(std::borrow::Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

fn invalid(id: Option<RequestId>, detail: impl fmt::Display) -> JsonRpcError {
    JsonRpcError::new(
        id,
        ErrorObject::new(ErrorCode::INVALID_REQUEST, format!("invalid request: {detail}")),
    )
}

/// A short rendering of a scalar for messages (`"1.0"`, `2`, `null`), or the
/// kind of a compound value.
fn describe(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() <= 16 => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => kind(other).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(input: &str) -> JsonRpcError {
        JsonRpcMessage::parse(input.as_bytes()).unwrap_err()
    }

    #[test]
    fn classifies_the_four_shapes() {
        let m = JsonRpcMessage::parse(
            br#"{"jsonrpc":"2.0","id":"a","method":"tasks/get","params":{"taskId":"t"}}"#,
        );
        assert!(matches!(m, Ok(JsonRpcMessage::Request(ref r)) if r.id == RequestId::from("a")));
        let m = JsonRpcMessage::parse(br#"{"jsonrpc":"2.0","method":"notifications/tasks"}"#);
        assert!(matches!(m, Ok(JsonRpcMessage::Notification(_))));
        let m = JsonRpcMessage::parse(br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#);
        assert!(matches!(m, Ok(JsonRpcMessage::Response(_))));
        let m =
            JsonRpcMessage::parse(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#);
        assert!(matches!(m, Ok(JsonRpcMessage::Error(ref e)) if e.id.is_none()));
    }

    #[test]
    fn ids_in_float_form_are_integers_when_exact() {
        assert_eq!(
            RequestId::from_value(&serde_json::json!(1.0)),
            Ok(RequestId::Number(1))
        );
        assert!(
            RequestId::from_value(&serde_json::json!(1.5))
                .unwrap_err()
                .contains("1.5")
        );
        assert!(
            RequestId::from_value(&serde_json::json!(u64::MAX))
                .unwrap_err()
                .contains("out of range")
        );
    }

    #[test]
    fn the_id_survives_into_errors_found_after_it() {
        let e = err(r#"{"jsonrpc":"2.0","id":9,"method":5}"#);
        assert_eq!(e.id, Some(RequestId::Number(9)));
        assert!(
            e.error
                .message
                .contains("`method` must be a string, found a number"),
            "{e}"
        );
    }

    /// `parse` reads the members directly; it must answer exactly what
    /// reading a `Value` and classifying it answers.
    #[test]
    fn parse_answers_what_classifying_a_value_answers() {
        let via_value = |input: &str| -> Result<JsonRpcMessage, JsonRpcError> {
            let value: Value = serde_json::from_str(input).map_err(|e| {
                JsonRpcError::new(
                    None,
                    ErrorObject::new(ErrorCode::PARSE_ERROR, format!("parse error: {e}")),
                )
            })?;
            JsonRpcMessage::from_value(value)
        };
        for input in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t","_meta":{"a":[1,2.5,null]}}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"m"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/tasks","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":[]}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":5}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.0,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"m"}"#,
            r#"{"jsonrpc":"1.0","id":3,"method":"m"}"#,
            r#"{"jsonrpc":2,"id":3,"method":"m"}"#,
            r#"{"id":3,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":5}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"m","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"m","params":"p"}"#,
            // Repeated members: the last one counts.
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"a","method":"b"}"#,
            r#"{"jsonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","error":null}"#,
            // Escaped member names are the names they spell.
            r#"{"jsonrpc":"2.0","\u0069d":7,"m\u0065thod":"m"}"#,
            // Other members are read and dropped.
            r#"{"jsonrpc":"2.0","id":1,"method":"m","extra":{"deep":[{"x":1e300}]}}"#,
            // Not messages, and not JSON.
            "[]",
            r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#,
            "[1e400]",
            "null",
            "true",
            "12",
            "-1.5",
            r#""text""#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","extra":1e400}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m"} trailing"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","x":"\ud800"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m",}"#,
            "{",
            "",
            "\u{feff}{}",
        ] {
            assert_eq!(
                JsonRpcMessage::parse(input.as_bytes()),
                via_value(input),
                "{input}"
            );
        }
        // Not UTF-8.
        let bytes = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}";
        let direct = JsonRpcMessage::parse(bytes).unwrap_err();
        let value = serde_json::from_slice::<Value>(bytes).unwrap_err();
        assert_eq!(direct.error.message, format!("parse error: {value}"));
    }

    #[test]
    fn serialization_omits_a_missing_error_id() {
        let e = JsonRpcError::new(None, ErrorObject::new(ErrorCode::PARSE_ERROR, "parse error"));
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({"jsonrpc":"2.0","error":{"code":-32700,"message":"parse error"}})
        );
    }
}
