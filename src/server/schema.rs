//! Argument validation against a tool's `inputSchema`.
//!
//! `server-tools.md` (Error Handling) makes an invalid or out-of-range
//! argument a *tool execution error*: a `CallToolResult` with `isError:
//! true` whose text a model can act on, not a JSON-RPC error. The server
//! checks every `tools/call` against the tool's declared schema before the
//! tool runs, so a tool author gets this for free by declaring the schema;
//! [`ArgumentSchema`] and [`check_arguments`] are public for tools that
//! check values themselves.
//!
//! # Why the `jsonschema` crate, and what is ours
//!
//! The validating is done by the `jsonschema` crate, a maintained
//! implementation of every JSON Schema draft, not by hand. The hand-written
//! checker this replaced skipped `$ref` (issue 24), and `ToolSpec::typed`
//! schemas (schemars 1) put every nested type under `$defs` behind a
//! `$ref`: a typed tool whose arguments nest a struct had none of the
//! nested bounds, enums or required members checked. Adding `$ref` to the
//! hand-written checker (pointers, `$defs`/`definitions`, recursive types,
//! cycles) would have been a second JSON Schema implementation to keep
//! right; the crate resolves local references when the schema is compiled
//! and covers the keywords the old checker did not (`prefixItems`,
//! `patternProperties`, `dependentRequired`, `if`/`then`/`else`, ...).
//!
//! It costs nothing on the hot path: a tool's schema is compiled once, when
//! its `ToolSpec` is built, and checking a call with the compiled schema
//! takes a fraction of what the old checker's walk over the schema's JSON
//! did (figures and the command in `docs/architecture.md`, "Argument
//! validation"); the server checks the request's own `arguments` value,
//! without copying it. Compiling takes tens of microseconds, once per tool.
//!
//! What stays written here is what makes the answer useful to a model: the
//! crate's error kinds are put in this module's words, with a path in the
//! arguments (`inner.depth`, `items[2].name`) and the bound that was broken
//! (`9 is greater than the maximum 5`); when an `anyOf`/`oneOf` (an
//! `Option` of a struct, an enum with data) refuses a value, the one form
//! the value was meant for is found and its error reported, rather than
//! "matches none of the allowed forms".
//!
//! # How schemas are read
//!
//! - Draft: the schema's `$schema`, else 2020-12 (the MCP default). In
//!   drafts 6 and later `integer` accepts integral floats such as `3.0`.
//! - `$ref`: local references only (`#/$defs/...`, `#/definitions/...`,
//!   any JSON pointer, `$anchor`s, recursion). Nothing is ever fetched: a
//!   remote `$ref` is a compile error (the crate is built without its
//!   network and file resolvers, and compiling is offline besides).
//! - `format` is an annotation and is not checked (as before; schemars
//!   writes `uint32`, `double`, ... into it), `contentEncoding` and
//!   `contentMediaType` only where the draft makes them assertions.
//! - `pattern`: ECMA-262 regular expressions (the crate's `fancy-regex`
//!   engine; patterns without look-around or back-references run in linear
//!   time). A match that gives up (its backtracking limit) refuses the
//!   value, saying so.
//! - Unknown keywords (`x-...`, annotations) never fail a value.
//! - A schema that does not compile (a `$ref` that points nowhere, `"minimum":
//!   "5"`, a pattern that is no regular expression): [`ArgumentSchema::compile`]
//!   says where and why. `ToolSpec::new` and `ToolSpec::typed` panic with that
//!   (a programming error in the tool table, found at start-up rather than at
//!   the first call), `ToolSpec::try_new` returns it. [`check_arguments`],
//!   given such a schema, checks nothing and logs a warning: it must not
//!   blame the caller for what the schema's author got wrong.

use std::fmt;
use std::sync::Arc;

use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
use jsonschema::{ValidationError, Validator};
use serde_json::Value;

use crate::model::JsonObject;

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

struct Compiled {
    /// The schema as given: [`ArgumentSchema::is_compiled_from`] compares
    /// by identity (a `JsonObject` is immutable and shared).
    source: JsonObject,
    /// The same as a value, to read keywords for messages (a `type` list in
    /// its author's order, the members an object knows).
    root: Value,
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

impl Compiled {
    /// The schema's value at `pointer` (a keyword location the crate gave).
    fn keyword(&self, pointer: &str) -> Option<&Value> {
        self.root.pointer(pointer)
    }

    /// The schema object holding the keyword at `pointer`.
    fn holder(&self, pointer: &str) -> Option<&serde_json::Map<String, Value>> {
        let parent = &pointer[..pointer.rfind('/')?];
        self.root.pointer(parent)?.as_object()
    }

    /// The members the object schema holding the keyword at `pointer` names.
    fn known_members(&self, pointer: &str) -> Vec<&str> {
        self.holder(pointer)
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// What a member the object schema (keyword at `pointer`, object at
    /// `at`) does not allow is told.
    fn unknown_member(&self, pointer: &str, at: &str) -> String {
        let known = self.known_members(pointer);
        let hint = if !known.is_empty() {
            format!("known arguments: {}", known.join(", "))
        } else if at.is_empty() {
            "this tool takes no arguments".to_owned()
        } else {
            "this object takes no members".to_owned()
        };
        format!("is not a known argument ({hint})")
    }

    /// `e` in our words, its path rendered against `arguments`.
    fn explain(&self, e: &ValidationError<'_>, arguments: &Value) -> ArgumentError {
        let at = e.instance_path().as_str();
        let path = render_path(arguments, at);
        let v: &Value = e.instance();
        let shown = show(v);
        let keyword = e.schema_path().as_str();
        let (path, message) = match e.kind() {
            Kind::Type { kind } => {
                let wanted = self.keyword(keyword);
                if at.is_empty() && v.is_object() {
                    let ty = wanted.map_or_else(|| type_list(kind), show);
                    (
                        path,
                        format!("the arguments are an object; the tool's schema wants {ty}"),
                    )
                } else {
                    let want = match wanted {
                        Some(Value::String(t)) => t.clone(),
                        Some(Value::Array(ts)) => ts
                            .iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" or "),
                        _ => type_list(kind),
                    };
                    (path, format!("expected {want}, got {} {shown}", type_name(v)))
                }
            }
            Kind::Enum { options } => {
                let list: Vec<String> = match &**options {
                    Value::Array(options) => options.iter().map(show).collect(),
                    other => vec![show(other)],
                };
                (path, format!("{shown} is not one of {}", list.join(", ")))
            }
            Kind::Constant { expected_value } => {
                (path, format!("must be {}, got {shown}", show(expected_value)))
            }
            Kind::Minimum { limit } => (path, format!("{shown} is less than the minimum {}", show(limit))),
            Kind::Maximum { limit } => (
                path,
                format!("{shown} is greater than the maximum {}", show(limit)),
            ),
            Kind::ExclusiveMinimum { limit } => {
                (path, format!("{shown} must be greater than {}", show(limit)))
            }
            Kind::ExclusiveMaximum { limit } => (path, format!("{shown} must be less than {}", show(limit))),
            Kind::MultipleOf { .. } => {
                let m = self
                    .keyword(keyword)
                    .map_or_else(|| "the schema's `multipleOf`".to_owned(), show);
                (path, format!("{shown} is not a multiple of {m}"))
            }
            Kind::MinLength { limit } => (
                path,
                format!("is {} characters long; at least {limit} are needed", chars(v)),
            ),
            Kind::MaxLength { limit } => (
                path,
                format!("is {} characters long; at most {limit} are allowed", chars(v)),
            ),
            Kind::Pattern { pattern } => (path, format!("{shown} does not match the pattern {pattern}")),
            Kind::BacktrackLimitExceeded { .. } | Kind::RegexEngineFailure { .. } => {
                let pattern = self
                    .keyword(keyword)
                    .and_then(Value::as_str)
                    .unwrap_or("of the schema");
                (
                    path,
                    format!(
                        "{shown} could not be checked against the pattern {pattern} (the match gave up): send a shorter or simpler value"
                    ),
                )
            }
            Kind::MinItems { limit } => (
                path,
                format!("has {} items; at least {limit} are needed", items(v)),
            ),
            Kind::MaxItems { limit } => (
                path,
                format!("has {} items; at most {limit} are allowed", items(v)),
            ),
            Kind::AdditionalItems { limit } => (
                path,
                format!("has {} items; at most {limit} are allowed", items(v)),
            ),
            Kind::UnevaluatedItems { .. } => {
                (path, format!("has {} items; the schema allows fewer", items(v)))
            }
            Kind::UniqueItems => {
                let repeat = v.as_array().and_then(|a| {
                    a.iter()
                        .enumerate()
                        .find(|(i, x)| a[..*i].contains(x))
                        .map(|(i, x)| format!("item {i} repeats {}", show(x)))
                });
                (
                    path,
                    repeat.unwrap_or_else(|| "has repeated items; each must be different".to_owned()),
                )
            }
            Kind::Contains => (
                path,
                "has no item of the kind the schema requires (`contains`)".to_owned(),
            ),
            Kind::Required { property } => {
                let key = property
                    .as_str()
                    .map_or_else(|| property.to_string(), str::to_owned);
                (child(&path, &key), "is required".to_owned())
            }
            Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected } => {
                match unexpected.first() {
                    Some(key) => (child(&path, key), self.unknown_member(keyword, at)),
                    None => (path, "has members the schema does not allow".to_owned()),
                }
            }
            // `additionalProperties: false` beside no `properties` is
            // reported as the `false` schema refusing the member's value,
            // at the object's path: the member is the one holding it.
            Kind::FalseSchema if keyword.ends_with("/additionalProperties") => {
                let known = self.known_members(keyword);
                let key = arguments
                    .pointer(at)
                    .and_then(Value::as_object)
                    .and_then(|object| {
                        object
                            .iter()
                            .find(|(k, x)| *x == v && !known.contains(&k.as_str()))
                            .map(|(k, _)| k.clone())
                    });
                let path = match key {
                    Some(k) => child(&path, &k),
                    None => path,
                };
                (path, self.unknown_member(keyword, at))
            }
            Kind::MinProperties { limit } => (
                path,
                format!("has {} members; at least {limit} are needed", members(v)),
            ),
            Kind::MaxProperties { limit } => (
                path,
                format!("has {} members; at most {limit} are allowed", members(v)),
            ),
            Kind::PropertyNames { error } => {
                let inner = self.explain(error, error.instance());
                (
                    path,
                    format!("member name {}: {}", show(error.instance()), inner.message),
                )
            }
            Kind::AnyOf { context } => match the_meant_form(at, context) {
                Some(inner) => return self.explain(inner, arguments),
                None => (path, format!("{shown} matches none of the allowed forms")),
            },
            Kind::OneOfNotValid { context } => match the_meant_form(at, context) {
                Some(inner) => return self.explain(inner, arguments),
                None => (
                    path,
                    format!("{shown} must match exactly one of the allowed forms (matches 0)"),
                ),
            },
            Kind::OneOfMultipleValid { context } => {
                let matching = context.iter().filter(|errors| errors.is_empty()).count();
                let matching = if matching >= 2 {
                    matching.to_string()
                } else {
                    "more than one".to_owned()
                };
                (
                    path,
                    format!("{shown} must match exactly one of the allowed forms (matches {matching})"),
                )
            }
            Kind::Not { .. } | Kind::FalseSchema => (path, format!("{shown} is not allowed here")),
            Kind::Format { format } => (path, format!("{shown} is not a valid {format}")),
            Kind::ContentEncoding { content_encoding } => {
                (path, format!("{shown} is not valid {content_encoding}"))
            }
            Kind::FromUtf8 { .. } => (path, "is not valid UTF-8 once decoded".to_owned()),
            Kind::ContentMediaType { content_media_type } => {
                (path, format!("{shown} is not valid {content_media_type}"))
            }
            Kind::Custom { message, .. } => (path, message.clone()),
            // Resolved when the schema compiled; kept for completeness.
            Kind::Referencing(r) => (
                path,
                format!(
                    "could not be checked: the tool's schema has a reference that cannot be resolved ({r})"
                ),
            ),
        };
        ArgumentError { path, message }
    }
}

/// Of the forms an `anyOf`/`oneOf` offers (`context`: each form's errors),
/// the one the value at `at` was meant for, when exactly one is: the forms
/// that refused the value for its type (`null` for an `Option`'s `Some`) or
/// for a `const` (another variant's tag) were meant for other values.
fn the_meant_form<'c>(
    at: &str,
    context: &'c [Vec<ValidationError<'static>>],
) -> Option<&'c ValidationError<'static>> {
    let another_form = |errors: &[ValidationError<'static>]| {
        errors.iter().any(|e| {
            matches!(e.kind(), Kind::Constant { .. })
                || (matches!(e.kind(), Kind::Type { .. }) && e.instance_path().as_str() == at)
        })
    };
    let mut meant = context.iter().filter(|errors| !another_form(errors));
    let form = meant.next()?;
    if meant.next().is_some() {
        return None;
    }
    form.first()
}

/// A JSON pointer into the arguments (`/items/2/name`) as a model reads
/// it (`items[2].name`): an index into an array in brackets, a member after
/// a dot. The arguments decide which a segment is (a member may be named
/// `2`).
fn render_path(arguments: &Value, pointer: &str) -> String {
    let mut out = String::new();
    let mut node = Some(arguments);
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        match node {
            Some(Value::Array(list)) => {
                out.push('[');
                out.push_str(&segment);
                out.push(']');
                node = segment.parse::<usize>().ok().and_then(|i| list.get(i));
            }
            _ => {
                node = node.and_then(|n| n.get(&segment));
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&segment);
            }
        }
    }
    out
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn type_list(kind: &TypeKind) -> String {
    match kind {
        TypeKind::Single(t) => t.to_string(),
        TypeKind::Multiple(ts) => ts.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" or "),
    }
}

/// The JSON type of `v` with its article (`an integer`, `a string`, `null`).
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn chars(v: &Value) -> usize {
    v.as_str().map_or(0, |s| s.chars().count())
}

fn items(v: &Value) -> usize {
    v.as_array().map_or(0, Vec::len)
}

fn members(v: &Value) -> usize {
    v.as_object().map_or(0, serde_json::Map::len)
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(57).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(schema: Value, args: Value) -> Result<(), String> {
        check_arguments(
            &JsonObject::from_value(schema).unwrap(),
            &JsonObject::from_value(args).unwrap(),
        )
        .map_err(|e| e.to_string())
    }

    fn compile(schema: Value) -> Result<ArgumentSchema, SchemaError> {
        ArgumentSchema::compile(&JsonObject::from_value(schema).unwrap())
    }

    #[test]
    fn numbers_strings_and_types_are_checked_with_paths() {
        let s = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 0, "maximum": 5},
                "s": {"type": "string", "pattern": "^0(\\.[0-9]+)*$", "maxLength": 8},
                "e": {"enum": ["a", "b"]},
                "list": {"type": "array", "items": {"type": "object", "required": ["k"]}, "maxItems": 2}
            },
            "required": ["n"],
            "additionalProperties": false
        });
        assert!(
            run(
                s.clone(),
                json!({"n": 3, "s": "0.1", "e": "a", "list": [{"k": 1}]})
            )
            .is_ok()
        );
        assert!(
            run(s.clone(), json!({"n": 3.0})).is_ok(),
            "an integral float is an integer"
        );
        assert_eq!(
            run(s.clone(), json!({"n": 6})).unwrap_err(),
            "invalid argument `n`: 6 is greater than the maximum 5"
        );
        assert_eq!(
            run(s.clone(), json!({"n": "2"})).unwrap_err(),
            "invalid argument `n`: expected integer, got a string \"2\""
        );
        assert_eq!(
            run(s.clone(), json!({})).unwrap_err(),
            "invalid argument `n`: is required"
        );
        assert!(
            run(s.clone(), json!({"n": 1, "s": "1.2"}))
                .unwrap_err()
                .contains("pattern")
        );
        assert!(
            run(s.clone(), json!({"n": 1, "e": "c"}))
                .unwrap_err()
                .contains("is not one of")
        );
        assert!(
            run(s.clone(), json!({"n": 1, "x": 1}))
                .unwrap_err()
                .contains("known arguments: ")
        );
        assert_eq!(
            run(s.clone(), json!({"n": 1, "list": [{"k": 1}, {}]})).unwrap_err(),
            "invalid argument `list[1].k`: is required"
        );
        assert!(run(s, json!({"n": 1, "list": [{"k": 1}, {"k": 2}, {"k": 3}]})).is_err());
    }

    #[test]
    fn combinators_and_unknown_keywords() {
        let s = json!({"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}});
        assert!(run(s.clone(), json!({"v": "x"})).is_ok());
        assert!(run(s.clone(), json!({"v": 1})).is_ok());
        assert!(run(s, json!({"v": true})).is_err());
        let s = json!({"type": "object", "properties": {"v": {"oneOf": [{"minimum": 0}, {"maximum": 10}]}}});
        assert!(run(s.clone(), json!({"v": 20})).is_ok());
        assert!(run(s, json!({"v": 5})).is_err(), "matches both");
        let s = json!({"type": "object", "x-unknown": 1, "properties": {"v": {"format": "email", "$ref": "#/x"}}});
        assert!(run(s, json!({"v": "anything"})).is_ok());
        let s = json!({"type": "object", "x-unknown": 1, "properties": {"v": {"format": "email", "x-ui": {"width": 3}}}});
        assert!(compile(s.clone()).is_ok(), "unknown keywords compile");
        assert!(run(s, json!({"v": "anything"})).is_ok());
        let s = json!({"type": "object", "properties": {"v": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}}});
        assert!(run(s.clone(), json!({"v": 1.5})).is_ok());
        assert!(run(s.clone(), json!({"v": 0})).is_err());
        assert!(run(s, json!({"v": 1.2})).is_err());
    }

    /// What schemars 1 derives for arguments with a nested struct: the
    /// struct under `$defs`, referred to with `$ref` (issue 24).
    fn nested() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "inner": {"$ref": "#/$defs/Inner"},
                "maybe": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]},
                "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}}
            },
            "required": ["name", "inner"],
            "$defs": {
                "Inner": {
                    "type": "object",
                    "properties": {
                        "depth": {"type": "integer", "format": "uint32", "minimum": 0, "maximum": 5},
                        "mode": {"$ref": "#/$defs/Mode"}
                    },
                    "required": ["depth", "mode"],
                    "additionalProperties": false
                },
                "Mode": {"type": "string", "enum": ["fast", "slow"]}
            },
            "definitions": {"Item": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 3}}}}
        })
    }

    #[test]
    fn a_ref_into_defs_is_followed() {
        let s = nested();
        let ok = json!({"name": "x", "inner": {"depth": 5, "mode": "slow"}, "maybe": null, "items": [{"label": "abc"}]});
        assert!(run(s.clone(), ok).is_ok());
        for (args, expected) in [
            (
                json!({"name": "x", "inner": {"depth": 9, "mode": "fast"}}),
                "invalid argument `inner.depth`: 9 is greater than the maximum 5",
            ),
            (
                json!({"name": "x", "inner": {"depth": 1, "mode": "warp"}}),
                "invalid argument `inner.mode`: \"warp\" is not one of \"fast\", \"slow\"",
            ),
            (
                json!({"name": "x", "inner": {"depth": 1}}),
                "invalid argument `inner.mode`: is required",
            ),
            (
                json!({"name": "x", "inner": {"depth": 1, "mode": "fast", "speed": 2}}),
                "invalid argument `inner.speed`: is not a known argument (known arguments: depth, mode)",
            ),
            (
                json!({"name": "x", "inner": {"depth": "1", "mode": "fast"}}),
                "invalid argument `inner.depth`: expected integer, got a string \"1\"",
            ),
            // An `Option` of a struct: the error inside the struct, not
            // "matches none of the allowed forms".
            (
                json!({"name": "x", "inner": {"depth": 1, "mode": "fast"}, "maybe": {"depth": 6, "mode": "fast"}}),
                "invalid argument `maybe.depth`: 6 is greater than the maximum 5",
            ),
            // `#/definitions/...` (older drafts' spelling) is a JSON pointer too.
            (
                json!({"name": "x", "inner": {"depth": 1, "mode": "fast"}, "items": [{"label": "a"}, {"label": "abcd"}]}),
                "invalid argument `items[1].label`: is 4 characters long; at most 3 are allowed",
            ),
        ] {
            assert_eq!(run(s.clone(), args.clone()).unwrap_err(), expected, "{args}");
        }
        assert_eq!(
            run(
                s,
                json!({"name": "x", "inner": {"depth": 1, "mode": "fast"}, "maybe": 3})
            )
            .unwrap_err(),
            "invalid argument `maybe`: 3 matches none of the allowed forms"
        );
    }

    #[test]
    fn a_recursive_schema_checks_every_level() {
        let tree = json!({
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Tree"}},
            "$defs": {"Tree": {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "maxLength": 3},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}
                },
                "required": ["label"]
            }}
        });
        let deep = |leaf: Value| {
            let mut t = json!({"label": "l", "children": [leaf]});
            for _ in 0..50 {
                t = json!({"label": "n", "children": [{"label": "s"}, t]});
            }
            json!({"root": t})
        };
        assert!(run(tree.clone(), deep(json!({"label": "ok"}))).is_ok());
        let err = check_arguments(
            &JsonObject::from_value(tree.clone()).unwrap(),
            &JsonObject::from_value(deep(json!({"label": "toolong"}))).unwrap(),
        )
        .unwrap_err();
        assert_eq!(err.message, "is 7 characters long; at most 3 are allowed");
        let expected = format!("root{}.children[0].label", ".children[1]".repeat(50));
        assert_eq!(err.path, expected);
        assert_eq!(
            run(
                tree,
                json!({"root": {"label": "a", "children": [{"children": []}]}})
            )
            .unwrap_err(),
            "invalid argument `root.children[0].label`: is required"
        );
        // A schema that is its own subschema, and a cycle of references
        // that never reaches a keyword, compile and check without looping.
        let own =
            compile(json!({"type": "object", "properties": {"next": {"$ref": "#"}}, "maxProperties": 1}))
                .unwrap();
        assert!(own.check_value(&json!({"next": {"next": {}}})).is_ok());
        assert_eq!(
            own.check_value(&json!({"next": {"next": {"a": 1, "b": 2}}}))
                .unwrap_err()
                .to_string(),
            "invalid argument `next.next`: has 2 members; at most 1 are allowed"
        );
        let cycle = compile(
            json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/A"}},
            "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}}),
        );
        if let Ok(cycle) = cycle {
            let _ = cycle.check_value(&json!({"x": 1}));
        }
    }

    #[test]
    fn a_ref_that_points_nowhere_does_not_compile() {
        for (schema, target) in [
            (
                json!({"type": "object", "properties": {"v": {"$ref": "#/$defs/Missing"}}}),
                "/$defs/Missing",
            ),
            (
                json!({"type": "object", "properties": {"v": {"$ref": "#/x"}}}),
                "/x",
            ),
        ] {
            let err = compile(schema).unwrap_err();
            assert!(err.message.starts_with("a `$ref` cannot be resolved"), "{err}");
            assert!(err.message.contains(target), "{err}");
        }
        // Nothing is fetched: a remote reference does not compile either.
        let err =
            compile(json!({"type": "object", "properties": {"v": {"$ref": "https://example.com/s.json"}}}))
                .unwrap_err();
        assert!(err.message.contains("https://example.com/s.json"), "{err}");
        // A keyword of the wrong kind, and where it is.
        let err = compile(json!({"type": "object", "properties": {"n": {"minimum": "5"}}})).unwrap_err();
        assert_eq!(err.pointer, "/properties/n/minimum", "{err}");
        // The free function does not blame the arguments for it.
        assert!(
            run(
                json!({"properties": {"v": {"$ref": "#/nowhere"}}}),
                json!({"v": 1})
            )
            .is_ok()
        );
    }

    #[test]
    fn messages_keep_their_wording() {
        let s = json!({"type": "object", "properties": {
            "t": {"type": ["integer", "null"]},
            "c": {"const": "x"},
            "lo": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "m": {"multipleOf": 0.5},
            "s": {"type": "string", "minLength": 2},
            "a": {"type": "array", "minItems": 1, "uniqueItems": true},
            "o": {"type": "object", "maxProperties": 1},
            "none": {"type": "object", "additionalProperties": false},
            "one": {"oneOf": [{"type": "integer"}, {"minimum": 0}]}
        }});
        for (args, expected) in [
            (
                json!({"t": "x"}),
                "`t`: expected integer or null, got a string \"x\"",
            ),
            (json!({"c": "y"}), "`c`: must be \"x\", got \"y\""),
            (json!({"lo": 0}), "`lo`: 0 must be greater than 0"),
            (json!({"lo": 1}), "`lo`: 1 must be less than 1"),
            (json!({"m": 1.2}), "`m`: 1.2 is not a multiple of 0.5"),
            (
                json!({"s": "é"}),
                "`s`: is 1 characters long; at least 2 are needed",
            ),
            (json!({"a": []}), "`a`: has 0 items; at least 1 are needed"),
            (json!({"a": [1, 2, 1]}), "`a`: item 2 repeats 1"),
            (
                json!({"o": {"a": 1, "b": 2}}),
                "`o`: has 2 members; at most 1 are allowed",
            ),
            (
                json!({"none": {"k": 1}}),
                "`none.k`: is not a known argument (this object takes no members)",
            ),
            (
                json!({"one": 3}),
                "`one`: 3 must match exactly one of the allowed forms (matches 2)",
            ),
        ] {
            let err = run(s.clone(), args.clone()).unwrap_err();
            assert_eq!(err, format!("invalid argument {expected}"), "{args}");
        }
        // The arguments object itself.
        assert_eq!(
            run(json!({"type": "string"}), json!({})).unwrap_err(),
            "invalid arguments: the arguments are an object; the tool's schema wants \"string\""
        );
        assert_eq!(
            run(
                json!({"type": "object", "additionalProperties": false}),
                json!({"x": 1})
            )
            .unwrap_err(),
            "invalid argument `x`: is not a known argument (this tool takes no arguments)"
        );
        // A member named like an index is a member.
        assert_eq!(
            run(
                json!({"type": "object", "properties": {"2": {"type": "string"}}}),
                json!({"2": 1})
            )
            .unwrap_err(),
            "invalid argument `2`: expected string, got an integer 1"
        );
    }

    #[test]
    fn a_compiled_schema_knows_its_source() {
        let source = JsonObject::from_value(nested()).unwrap();
        let compiled = ArgumentSchema::compile(&source).unwrap();
        assert!(compiled.is_compiled_from(&source));
        assert!(
            compiled.is_compiled_from(&source.clone()),
            "a clone shares the object"
        );
        assert!(!compiled.is_compiled_from(&JsonObject::from_value(nested()).unwrap()));
        assert_eq!(compiled.schema(), &source);
        let args =
            JsonObject::from_value(json!({"name": "x", "inner": {"depth": 9, "mode": "fast"}})).unwrap();
        assert_eq!(compiled.check(&args).unwrap_err().path, "inner.depth");
    }
}
