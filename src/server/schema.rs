//! Argument validation against a tool's `inputSchema`.
//!
//! `server-tools.md` (Error Handling) makes an invalid or out-of-range
//! argument a *tool execution error*: a `CallToolResult` with `isError:
//! true` whose text a model can act on, not a JSON-RPC error. The server
//! checks every `tools/call` against the tool's declared schema before the
//! tool runs, so a tool author gets this for free by declaring the schema;
//! [`check_arguments`] is public for tools that check values themselves.
//!
//! The checker covers the JSON Schema keywords tool schemas use: `type`
//! (one or a list; `integer` accepts integral floats such as `3.0`),
//! `enum`, `const`, `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum`, `multipleOf`, `minLength`, `maxLength`, `pattern`,
//! `items`, `minItems`, `maxItems`, `uniqueItems`, `properties`, `required`,
//! `additionalProperties`, `minProperties`, `maxProperties`, `allOf`,
//! `anyOf`, `oneOf` and `not`. Other keywords (annotations such as
//! `description` and `default`, and `$ref`) are not checked. It must not
//! reject what the schema allows: an unknown keyword never fails a value.

use std::fmt;

use serde_json::{Map, Value};

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

/// Checks `arguments` against `schema` (a tool's `inputSchema`).
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
    let schema = schema.as_map();
    // The arguments are an object: the usual top-level schema (`type`,
    // `properties`, `required`, ...) is checked on the map itself; only the
    // rare top-level keywords that need the whole value make a copy of it.
    const WHOLE: [&str; 6] = ["enum", "const", "allOf", "anyOf", "oneOf", "not"];
    if WHOLE.iter().any(|k| schema.contains_key(*k)) {
        let args = Value::Object(arguments.as_map().clone());
        return check(schema, &args, "");
    }
    if let Some(ty) = schema.get("type") {
        let ok = match ty {
            Value::String(t) => t == "object",
            Value::Array(ts) => ts.iter().any(|t| t == "object"),
            _ => true,
        };
        if !ok {
            return fail(
                "",
                format!("the arguments are an object; the tool's schema wants {ty}"),
            );
        }
    }
    check_object(schema, arguments.as_map(), "")
}

fn fail(path: &str, message: String) -> Result<(), ArgumentError> {
    Err(ArgumentError {
        path: path.to_owned(),
        message,
    })
}

fn type_name(v: &Value) -> &'static str {
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

fn is_type(v: &Value, ty: &str) -> bool {
    match ty {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => match v {
            Value::Number(n) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
            _ => false,
        },
        // An unknown type name allows nothing but cannot be blamed on the
        // caller: accept.
        _ => true,
    }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(57).collect::<String>())
    } else {
        s
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn schema_of(v: &Value) -> Option<&Map<String, Value>> {
    v.as_object()
}

fn check(schema: &Map<String, Value>, v: &Value, path: &str) -> Result<(), ArgumentError> {
    let here = path;
    if let Some(ty) = schema.get("type") {
        let ok = match ty {
            Value::String(t) => is_type(v, t),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| is_type(v, t)),
            _ => true,
        };
        if !ok {
            let want = match ty {
                Value::String(t) => t.clone(),
                Value::Array(ts) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" or "),
                _ => String::new(),
            };
            return fail(here, format!("expected {want}, got {} {}", type_name(v), show(v)));
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.iter().any(|o| o == v)
    {
        let list: Vec<String> = options.iter().map(show).collect();
        return fail(here, format!("{} is not one of {}", show(v), list.join(", ")));
    }
    if let Some(c) = schema.get("const")
        && c != v
    {
        return fail(here, format!("must be {}, got {}", show(c), show(v)));
    }
    match v {
        Value::Number(n) => check_number(schema, n.as_f64().unwrap_or(f64::NAN), v, here)?,
        Value::String(s) => check_string(schema, s, here)?,
        Value::Array(items) => check_array(schema, items, path)?,
        Value::Object(map) => check_object(schema, map, path)?,
        _ => {}
    }
    if let Some(Value::Array(all)) = schema.get("allOf") {
        for s in all.iter().filter_map(schema_of) {
            check(s, v, path)?;
        }
    }
    if let Some(Value::Array(any)) = schema.get("anyOf") {
        let schemas: Vec<_> = any.iter().filter_map(schema_of).collect();
        if !schemas.is_empty() && !schemas.iter().any(|s| check(s, v, here).is_ok()) {
            return fail(here, format!("{} matches none of the allowed forms", show(v)));
        }
    }
    if let Some(Value::Array(one)) = schema.get("oneOf") {
        let schemas: Vec<_> = one.iter().filter_map(schema_of).collect();
        let matching = schemas.iter().filter(|s| check(s, v, here).is_ok()).count();
        if !schemas.is_empty() && matching != 1 {
            return fail(
                here,
                format!(
                    "{} must match exactly one of the allowed forms (matches {matching})",
                    show(v)
                ),
            );
        }
    }
    if let Some(not) = schema.get("not").and_then(schema_of)
        && check(not, v, here).is_ok()
    {
        return fail(here, format!("{} is not allowed here", show(v)));
    }
    Ok(())
}

fn check_number(schema: &Map<String, Value>, x: f64, v: &Value, path: &str) -> Result<(), ArgumentError> {
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    let shown = show(v);
    if let Some(min) = num("minimum")
        && x < min
    {
        return fail(
            path,
            format!("{shown} is less than the minimum {}", show(&schema["minimum"])),
        );
    }
    if let Some(max) = num("maximum")
        && x > max
    {
        return fail(
            path,
            format!("{shown} is greater than the maximum {}", show(&schema["maximum"])),
        );
    }
    if let Some(min) = num("exclusiveMinimum")
        && x <= min
    {
        return fail(
            path,
            format!(
                "{shown} must be greater than {}",
                show(&schema["exclusiveMinimum"])
            ),
        );
    }
    if let Some(max) = num("exclusiveMaximum")
        && x >= max
    {
        return fail(
            path,
            format!("{shown} must be less than {}", show(&schema["exclusiveMaximum"])),
        );
    }
    if let Some(m) = num("multipleOf")
        && m > 0.0
        && ((x / m).round() * m - x).abs() > 1e-9 * x.abs().max(1.0)
    {
        return fail(
            path,
            format!("{shown} is not a multiple of {}", show(&schema["multipleOf"])),
        );
    }
    Ok(())
}

fn check_string(schema: &Map<String, Value>, s: &str, path: &str) -> Result<(), ArgumentError> {
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        return fail(
            path,
            format!("is {len} characters long; at least {min} are needed"),
        );
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        return fail(
            path,
            format!("is {len} characters long; at most {max} are allowed"),
        );
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        // A pattern this checker cannot compile is the schema's problem,
        // not the caller's: it does not fail the value.
        if let Ok(re) = regex_lite::Regex::new(pattern)
            && !re.is_match(s)
        {
            return fail(
                path,
                format!("{} does not match the pattern {pattern}", show(&Value::from(s))),
            );
        }
    }
    Ok(())
}

fn check_array(schema: &Map<String, Value>, items: &[Value], path: &str) -> Result<(), ArgumentError> {
    let here = path;
    let n = items.len() as u64;
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && n < min
    {
        return fail(here, format!("has {n} items; at least {min} are needed"));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && n > max
    {
        return fail(here, format!("has {n} items; at most {max} are allowed"));
    }
    if schema.get("uniqueItems") == Some(&Value::Bool(true)) {
        for (i, a) in items.iter().enumerate() {
            if items[..i].contains(a) {
                return fail(here, format!("item {} repeats {}", i, show(a)));
            }
        }
    }
    if let Some(item_schema) = schema.get("items").and_then(schema_of) {
        for (i, item) in items.iter().enumerate() {
            let p = format!("{here}[{i}]");
            check(item_schema, item, &p)?;
        }
    }
    Ok(())
}

fn check_object(
    schema: &Map<String, Value>,
    map: &Map<String, Value>,
    path: &str,
) -> Result<(), ArgumentError> {
    let here = path;
    if let Some(Value::Array(required)) = schema.get("required") {
        for key in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(key) {
                return fail(&child(here, key), "is required".to_owned());
            }
        }
    }
    let n = map.len() as u64;
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && n < min
    {
        return fail(here, format!("has {n} members; at least {min} are needed"));
    }
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && n > max
    {
        return fail(here, format!("has {n} members; at most {max} are allowed"));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    for (key, value) in map {
        let p = child(here, key);
        match properties.and_then(|p| p.get(key)).and_then(schema_of) {
            Some(s) => check(s, value, &p)?,
            None => match additional {
                Some(Value::Bool(false)) => {
                    let known: Vec<&str> = properties
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    let hint = if known.is_empty() {
                        "this tool takes no arguments".to_owned()
                    } else {
                        format!("known arguments: {}", known.join(", "))
                    };
                    return fail(&p, format!("is not a known argument ({hint})"));
                }
                Some(Value::Object(s)) => check(s, value, &p)?,
                _ => {}
            },
        }
    }
    Ok(())
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
        let s = json!({"type": "object", "properties": {"v": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}}});
        assert!(run(s.clone(), json!({"v": 1.5})).is_ok());
        assert!(run(s.clone(), json!({"v": 0})).is_err());
        assert!(run(s, json!({"v": 1.2})).is_err());
    }
}
