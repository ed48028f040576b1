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
//!
//! # Where it lives
//!
//! - `error.rs`: [`ArgumentError`] and [`SchemaError`], what callers see.
//! - `compiled.rs`: [`ArgumentSchema`] (compiling once, checking calls)
//!   and [`check_arguments`].
//! - `explain.rs`: the crate's error kinds in this module's words, and the
//!   form of an `anyOf`/`oneOf` a value was meant for.
//! - `words.rs`: paths (`items[2].name`), type names and values as a
//!   message shows them.

mod compiled;
mod error;
mod explain;
mod words;

#[cfg(test)]
mod tests;

pub use compiled::{ArgumentSchema, check_arguments};
pub use error::{ArgumentError, SchemaError};
pub(crate) use words::type_name;
