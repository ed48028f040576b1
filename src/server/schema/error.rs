//! What a refused call and a schema that does not compile are reported as.

use std::fmt;

/// Why arguments do not satisfy a schema: where, and what is wrong, in words
/// a model can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentError {
    /// Where in the arguments, e.g. `width` or `items[2].name`; empty for
    /// the arguments object itself.
    pub path: String,
    /// What is wrong, e.g. `999 is greater than the maximum 50`.
    pub message: String,
}

impl fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "invalid arguments: {}", self.message)
        } else {
            write!(f, "invalid argument `{}`: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ArgumentError {}

/// Why a schema cannot be used to check arguments (it does not compile).
///
/// # Examples
///
/// ```
/// use subtask::model::JsonObject;
/// use subtask::server::ArgumentSchema;
/// let schema = JsonObject::from_value(serde_json::json!({
///     "type": "object",
///     "properties": {"inner": {"$ref": "#/$defs/Inner"}}
/// })).unwrap();
/// let err = ArgumentSchema::compile(&schema).unwrap_err();
/// assert!(err.to_string().contains("/$defs/Inner"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// Where in the schema, as a JSON pointer (`/properties/n/minimum`);
    /// empty for the schema as a whole and for a `$ref` that cannot be
    /// resolved (the message names its target).
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "invalid input schema: {}", self.message)
        } else {
            write!(f, "invalid input schema at `{}`: {}", self.pointer, self.message)
        }
    }
}

impl std::error::Error for SchemaError {}
