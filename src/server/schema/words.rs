//! Paths, type names and values as a message shows them.

use jsonschema::error::TypeKind;
use serde_json::Value;

/// A JSON pointer into the arguments (`/items/2/name`) as a model reads
/// it (`items[2].name`): an index into an array in brackets, a member after
/// a dot. The arguments decide which a segment is (a member may be named
/// `2`).
pub(super) fn render_path(arguments: &Value, pointer: &str) -> String {
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

pub(super) fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn type_list(kind: &TypeKind) -> String {
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

pub(super) fn chars(v: &Value) -> usize {
    v.as_str().map_or(0, |s| s.chars().count())
}

pub(super) fn items(v: &Value) -> usize {
    v.as_array().map_or(0, Vec::len)
}

pub(super) fn members(v: &Value) -> usize {
    v.as_object().map_or(0, serde_json::Map::len)
}

pub(super) fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(57).collect::<String>())
    } else {
        s
    }
}
