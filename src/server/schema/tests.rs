//! The messages a model reads, and what compiles.

use serde_json::{Value, json};

use super::*;
use crate::model::JsonObject;

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
    let s =
        json!({"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}});
    assert!(run(s.clone(), json!({"v": "x"})).is_ok());
    assert!(run(s.clone(), json!({"v": 1})).is_ok());
    assert!(run(s, json!({"v": true})).is_err());
    let s = json!({"type": "object", "properties": {"v": {"oneOf": [{"minimum": 0}, {"maximum": 10}]}}});
    assert!(run(s.clone(), json!({"v": 20})).is_ok());
    assert!(run(s, json!({"v": 5})).is_err(), "matches both");
    let s =
        json!({"type": "object", "x-unknown": 1, "properties": {"v": {"format": "email", "$ref": "#/x"}}});
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
    let own = compile(json!({"type": "object", "properties": {"next": {"$ref": "#"}}, "maxProperties": 1}))
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
    let err = compile(json!({"type": "object", "properties": {"v": {"$ref": "https://example.com/s.json"}}}))
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
    let args = JsonObject::from_value(json!({"name": "x", "inner": {"depth": 9, "mode": "fast"}})).unwrap();
    assert_eq!(compiled.check(&args).unwrap_err().path, "inner.depth");
}
