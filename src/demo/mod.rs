//! The demo tools `subtask serve` registers, for trying and testing the
//! runtime from any MCP client.
//!
//! * [`fanout`]: a synthetic tree of subtasks (`width` children per node,
//!   `depth` levels) whose nodes run steps with checkpoints, record the steer
//!   messages they receive, and can be told to fail or to ask for input.
//! * [`deep_research`]: a (simulated) research agent over a small built-in
//!   corpus: it plans sub-questions, runs `search -> read -> summarize`
//!   subtasks for each, follows up one level deeper, re-plans when steered
//!   with "focus on ...", and writes an answer citing subtasks and sources.
//!
//! Both tools are offline and deterministic (apart from scheduling), and
//! both support tasks optionally: clients that declared the tasks extension
//! get a task; others get the final result synchronously.

mod corpus;
pub mod deep_research;
pub mod fanout;

use serde_json::Value;

use crate::model::{ErrorCode, ErrorObject, JsonObject};
use crate::server::ServerBuilder;

/// Registers the demo tools (`fanout`, then `deep_research`).
#[must_use]
pub fn register(builder: ServerBuilder) -> ServerBuilder {
    builder
        .tool(fanout::spec(), fanout::call)
        .tool(deep_research::spec(), deep_research::call)
}

/// A `-32602` error with `message`.
pub(crate) fn invalid_params(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(ErrorCode::INVALID_PARAMS, message)
}

/// Reads and validates tool arguments, with `-32602` messages that name the
/// argument and what it must be. `null` counts as absent.
pub(crate) struct Args<'a> {
    tool: &'static str,
    args: &'a JsonObject,
}

impl<'a> Args<'a> {
    /// Arguments of `tool`; rejects names not in `known`.
    pub(crate) fn new(tool: &'static str, args: &'a JsonObject, known: &[&str]) -> Result<Self, ErrorObject> {
        if let Some(unknown) = args.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(invalid_params(format!(
                "{tool}: unknown argument {unknown:?} (expected {})",
                known.join(", ")
            )));
        }
        Ok(Args { tool, args })
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.args.get(key).filter(|v| !v.is_null())
    }

    /// An integer in `min..=max`, `default` when absent.
    pub(crate) fn int(
        &self,
        key: &str,
        default: Option<u64>,
        min: u64,
        max: u64,
    ) -> Result<Option<u64>, ErrorObject> {
        let Some(v) = self.get(key) else {
            return Ok(default);
        };
        let tool = self.tool;
        let n = match v {
            Value::Number(n) => n
                .as_u64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= 9.0e15)
                        .map(|f| f as u64)
                })
                .ok_or_else(|| {
                    invalid_params(format!(
                        "{tool}: {key} must be an integer from {min} to {max}, got {n}"
                    ))
                })?,
            other => {
                return Err(invalid_params(format!(
                    "{tool}: {key} must be an integer from {min} to {max}, got {}",
                    crate::model::json_kind(other)
                )));
            }
        };
        if n < min || n > max {
            return Err(invalid_params(format!(
                "{tool}: {key} must be from {min} to {max}, got {n}"
            )));
        }
        Ok(Some(n))
    }

    /// A string, `None` when absent.
    pub(crate) fn string(&self, key: &str) -> Result<Option<&'a str>, ErrorObject> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(invalid_params(format!(
                "{}: {key} must be a string, got {}",
                self.tool,
                crate::model::json_kind(other)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> JsonObject {
        JsonObject::from_value(v).unwrap()
    }

    #[test]
    fn args_reject_unknown_names_and_bad_types() {
        let a = obj(json!({"width": 2, "oops": 1}));
        let e = Args::new("t", &a, &["width"]).err().unwrap();
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("unknown argument \"oops\""), "{}", e.message);

        let a = obj(json!({"width": "2", "depth": 2.5, "steps": -1, "n": null, "s": 3}));
        let args = Args::new("t", &a, &["width", "depth", "steps", "n", "s"]).unwrap();
        let e = args.int("width", Some(1), 1, 5).unwrap_err();
        assert!(
            e.message
                .contains("width must be an integer from 1 to 5, got a string"),
            "{}",
            e.message
        );
        assert!(args.int("depth", Some(1), 0, 5).is_err());
        assert!(args.int("steps", Some(1), 0, 5).is_err());
        assert_eq!(args.int("n", Some(7), 0, 9).unwrap(), Some(7));
        assert_eq!(args.int("absent", None, 0, 9).unwrap(), None);
        assert!(args.string("s").is_err());
        assert_eq!(args.string("n").unwrap(), None);
    }

    #[test]
    fn args_check_ranges_and_accept_integral_floats() {
        let a = obj(json!({"w": 51, "x": 3.0}));
        let args = Args::new("t", &a, &["w", "x"]).unwrap();
        let e = args.int("w", None, 1, 50).unwrap_err();
        assert_eq!(e.message, "t: w must be from 1 to 50, got 51");
        assert_eq!(args.int("x", None, 0, 5).unwrap(), Some(3));
    }
}
