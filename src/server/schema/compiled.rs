//! A schema compiled once, and the calls checked with it.

use std::fmt;
use std::sync::Arc;

use jsonschema::Validator;
use jsonschema::error::ValidationErrorKind as Kind;
use serde_json::Value;

use super::{ArgumentError, SchemaError};
use crate::model::JsonObject;

/// An argument schema compiled once, to check any number of calls. Cheap to
/// clone (shared).
///
/// `ToolSpec` holds one for its `input_schema`, compiled when the spec is
/// built; the server checks every `tools/call` with it.
///
/// # Examples
///
/// ```
/// use subtask::model::JsonObject;
/// use subtask::server::ArgumentSchema;
/// let schema = ArgumentSchema::compile(&JsonObject::from_value(serde_json::json!({
///     "type": "object",
///     "properties": {"inner": {"$ref": "#/$defs/Inner"}},
///     "$defs": {"Inner": {"type": "object", "properties": {"depth": {"type": "integer", "maximum": 5}}}}
/// })).unwrap()).unwrap();
/// let err = schema.check_value(&serde_json::json!({"inner": {"depth": 9}})).unwrap_err();
/// assert_eq!(err.to_string(), "invalid argument `inner.depth`: 9 is greater than the maximum 5");
/// ```
#[derive(Clone)]
pub struct ArgumentSchema(Arc<Compiled>);

pub(super) struct Compiled {
    /// The schema as given: [`ArgumentSchema::is_compiled_from`] compares
    /// by identity (a `JsonObject` is immutable and shared).
    source: JsonObject,
    /// The same as a value, to read keywords for messages (a `type` list in
    /// its author's order, the members an object knows).
    pub(super) root: Value,
    validator: Validator,
}

impl fmt::Debug for ArgumentSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The schema is `schema()` (a `ToolSpec` shows it as `input_schema`).
        f.debug_struct("ArgumentSchema").finish_non_exhaustive()
    }
}

impl ArgumentSchema {
    /// Compiles `schema`, resolving its local `$ref`s (see the module
    /// documentation for the draft, formats and patterns).
    ///
    /// # Errors
    ///
    /// Where and why the schema does not compile: a `$ref` that points
    /// nowhere or outside the schema, a keyword whose value the draft does
    /// not allow (`"minimum": "5"`), a pattern that is no regular expression.
    pub fn compile(schema: &JsonObject) -> Result<Self, SchemaError> {
        let root = Value::Object(schema.as_map().clone());
        let validator = jsonschema::options()
            // No remote `$ref` is ever fetched, whatever features another
            // crate turns on for `jsonschema`.
            .offline()
            .should_validate_formats(false)
            .build(&root)
            .map_err(|e| SchemaError {
                pointer: e.instance_path().as_str().to_owned(),
                message: match e.kind() {
                    Kind::Referencing(r) => format!("a `$ref` cannot be resolved: {r}"),
                    _ => e.to_string(),
                },
            })?;
        Ok(ArgumentSchema(Arc::new(Compiled {
            source: schema.clone(),
            root,
            validator,
        })))
    }

    /// The schema this was compiled from.
    pub fn schema(&self) -> &JsonObject {
        &self.0.source
    }

    /// Whether this was compiled from `schema` itself (the same shared
    /// object, not merely an equal one): a pointer comparison.
    pub fn is_compiled_from(&self, schema: &JsonObject) -> bool {
        std::ptr::eq(self.0.source.as_map(), schema.as_map())
    }

    /// Checks call arguments. Copies them into a `serde_json::Value` first:
    /// [`ArgumentSchema::check_value`] checks a value in place.
    ///
    /// # Errors
    ///
    /// The first violation, with its path.
    pub fn check(&self, arguments: &JsonObject) -> Result<(), ArgumentError> {
        self.check_value(&Value::Object(arguments.as_map().clone()))
    }

    /// Checks call arguments held as a value (normally an object; anything
    /// else is checked against the schema's `type` like any value).
    ///
    /// # Errors
    ///
    /// The first violation, with its path.
    pub fn check_value(&self, arguments: &Value) -> Result<(), ArgumentError> {
        let c = &*self.0;
        // `is_valid` builds no error: the usual, valid call pays for nothing
        // else. Only a refused call is validated again for its first error.
        if c.validator.is_valid(arguments) {
            return Ok(());
        }
        match c.validator.validate(arguments) {
            Ok(()) => Ok(()),
            Err(e) => Err(c.explain(&e, arguments)),
        }
    }
}

/// Checks `arguments` against `schema` (a tool's `inputSchema`), compiling
/// the schema for this one check: to check many calls against one schema,
/// compile an [`ArgumentSchema`] once.
///
/// A schema that does not compile checks nothing (the arguments pass, and a
/// warning is logged): the caller is not to blame for it. `ToolSpec`s
/// refuse such schemas when they are built.
///
/// # Errors
///
/// The first violation found, with its path.
///
/// # Examples
///
/// ```
/// use subtask::model::JsonObject;
/// use subtask::server::check_arguments;
/// let schema = JsonObject::from_value(serde_json::json!({
///     "type": "object",
///     "properties": {"width": {"type": "integer", "maximum": 50}},
///     "additionalProperties": false
/// })).unwrap();
/// let args = |v| JsonObject::from_value(v).unwrap();
/// assert!(check_arguments(&schema, &args(serde_json::json!({"width": 3}))).is_ok());
/// let err = check_arguments(&schema, &args(serde_json::json!({"width": 999}))).unwrap_err();
/// assert_eq!(err.to_string(), "invalid argument `width`: 999 is greater than the maximum 50");
/// ```
pub fn check_arguments(schema: &JsonObject, arguments: &JsonObject) -> Result<(), ArgumentError> {
    match ArgumentSchema::compile(schema) {
        Ok(compiled) => compiled.check(arguments),
        Err(e) => {
            tracing::warn!(error = %e, "arguments not checked: their schema does not compile");
            Ok(())
        }
    }
}
