//! The `jsonschema` crate's error kinds in this module's words: a path in
//! the arguments, the bound that was broken, and for an `anyOf`/`oneOf` the
//! error of the one form the value was meant for.

use jsonschema::ValidationError;
use jsonschema::error::ValidationErrorKind as Kind;
use serde_json::Value;

use super::ArgumentError;
use super::compiled::Compiled;
use super::words::{chars, child, items, members, render_path, show, type_list, type_name};

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
    pub(super) fn explain(&self, e: &ValidationError<'_>, arguments: &Value) -> ArgumentError {
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
