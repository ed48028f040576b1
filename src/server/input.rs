//! Helpers for tools that ask the client for input in `input_required`
//! rounds (MRTR, SEP-2322): the requests to send (elicitation, sampling,
//! roots) and the checked answers that come back in the next round's
//! `inputResponses`.
//!
//! A malformed answer under a key the tool asked for is `-32602` with
//! `data.inputKey` (the client broke the protocol); a missing one means
//! "ask again". Unknown keys are never looked at.

use serde_json::{Map, Value, json};

use super::tool::{ToolCall, ToolOutcome};
use crate::model::{ErrorCode, ErrorObject, InputRequests, JsonObject, ROOTS_LIST, SAMPLING_CREATE_MESSAGE};

/// A `sampling/createMessage` input request with one user text message.
pub fn sampling(text: &str, max_tokens: u32) -> JsonObject {
    JsonObject::from_value(json!({
        "method": SAMPLING_CREATE_MESSAGE,
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
            "maxTokens": max_tokens,
        },
    }))
    .expect("a literal object")
}

/// A `roots/list` input request.
pub fn list_roots() -> JsonObject {
    JsonObject::from_value(json!({"method": ROOTS_LIST, "params": {}})).expect("a literal object")
}

impl ToolOutcome {
    /// An `input_required` round asking `requests` (key, request), with an
    /// optional state the server seals and hands back in the next round.
    pub fn input_required<'a>(
        requests: impl IntoIterator<Item = (&'a str, JsonObject)>,
        state: Option<Value>,
    ) -> Self {
        let input_requests: InputRequests = requests.into_iter().map(|(k, r)| (k.to_owned(), r)).collect();
        ToolOutcome::InputRequired {
            input_requests,
            state,
        }
    }
}

/// How the client answered an elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitAnswer {
    /// Not answered in this round: ask (again).
    Missing,
    /// `accept`, with content that fits the requested schema.
    Accepted(Map<String, Value>),
    /// `decline` or `cancel` (the action).
    Refused(String),
}

impl ToolCall {
    /// The answer under `key` to the elicitation `request` this tool sent.
    ///
    /// # Errors
    ///
    /// `-32602` (with `data.inputKey`) for an answer that is not an
    /// `ElicitResult`, or whose accepted content does not fit the request's
    /// `requestedSchema`.
    pub fn elicited(&self, key: &str, request: &JsonObject) -> Result<ElicitAnswer, ErrorObject> {
        match self.response(key) {
            None => Ok(ElicitAnswer::Missing),
            Some(answer) => ElicitAnswer::parse(key, answer, request),
        }
    }

    /// The text of the `CreateMessageResult` under `key` (`content` a text
    /// block or an array holding one); `None` when not answered.
    ///
    /// # Errors
    ///
    /// `-32602` when the answer has no text content.
    pub fn sampled_text(&self, key: &str) -> Result<Option<String>, ErrorObject> {
        let Some(answer) = self.response(key) else {
            return Ok(None);
        };
        let text = match answer.get("content") {
            Some(Value::Array(blocks)) => blocks.iter().find_map(text_of),
            Some(block) => text_of(block),
            None => None,
        };
        text.map(|t| Some(t.to_owned()))
            .ok_or_else(|| invalid_answer(key, "a sampling result needs a text `content` block"))
    }

    /// The root URIs of the `ListRootsResult` under `key`; `None` when not
    /// answered.
    ///
    /// # Errors
    ///
    /// `-32602` when the answer has no `roots` array or a root has no
    /// string `uri`.
    pub fn listed_roots(&self, key: &str) -> Result<Option<Vec<String>>, ErrorObject> {
        let Some(answer) = self.response(key) else {
            return Ok(None);
        };
        let roots = answer
            .get("roots")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid_answer(key, "a roots/list result needs a `roots` array"))?;
        roots
            .iter()
            .map(|r| {
                r.get("uri")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| invalid_answer(key, "every root needs a string `uri`"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

impl ElicitAnswer {
    /// An `ElicitResult` (e.g. one a task received from
    /// `TaskContext::request_input`) checked against the elicitation
    /// `request` it answers, asked under `key`.
    ///
    /// # Errors
    ///
    /// `-32602` (with `data.inputKey`) as for [`ToolCall::elicited`].
    pub fn parse(key: &str, answer: &JsonObject, request: &JsonObject) -> Result<ElicitAnswer, ErrorObject> {
        match answer.get("action").and_then(Value::as_str) {
            Some("accept") => {
                let content = answer
                    .get("content")
                    .and_then(Value::as_object)
                    .ok_or_else(|| invalid_answer(key, "an accepted elicitation needs a `content` object"))?;
                if let Some(schema) = request
                    .get("params")
                    .and_then(|p| p.get("requestedSchema"))
                    .and_then(Value::as_object)
                {
                    let schema = JsonObject::from_map(schema.clone());
                    let content_obj = JsonObject::from_map(content.clone());
                    super::check_arguments(&schema, &content_obj).map_err(|e| {
                        let field = if e.path.is_empty() {
                            "content".to_owned()
                        } else {
                            format!("content.{}", e.path)
                        };
                        invalid_answer(key, &format!("`{field}` {}", e.message))
                    })?;
                }
                Ok(ElicitAnswer::Accepted(content.clone()))
            }
            Some(action @ ("decline" | "cancel")) => Ok(ElicitAnswer::Refused(action.to_owned())),
            _ => Err(invalid_answer(
                key,
                "`action` must be \"accept\", \"decline\" or \"cancel\"",
            )),
        }
    }
}

/// The text of a `{type: "text", text}` content block.
fn text_of(block: &Value) -> Option<&str> {
    if block.get("type").and_then(Value::as_str) != Some("text") {
        return None;
    }
    block.get("text").and_then(Value::as_str)
}

/// `-32602` for a malformed answer under a key the tool asked for.
fn invalid_answer(key: &str, why: &str) -> ErrorObject {
    ErrorObject::new(
        ErrorCode::INVALID_PARAMS,
        format!("invalid inputResponses[\"{key}\"]: {why}"),
    )
    .with_data(json!({"inputKey": key}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::elicitation;

    fn call_with(responses: Value) -> ToolCall {
        ToolCall {
            name: "t".into(),
            arguments: JsonObject::new(),
            input_responses: serde_json::from_value(responses).ok(),
            request_state: None,
            client_capabilities: Default::default(),
            tasks: None,
        }
    }

    #[test]
    fn answers_are_checked_against_what_was_asked() {
        let ask = elicitation("Name?", json!({"name": {"type": "string"}}), &["name"]);
        let call = call_with(json!({
            "ok": {"action": "accept", "content": {"name": "Ada"}},
            "wrong_type": {"action": "accept", "content": {"name": 3}},
            "missing_field": {"action": "accept", "content": {}},
            "declined": {"action": "decline"},
            "garbage": {"action": "maybe"},
            "sampled": {"role": "assistant", "content": {"type": "text", "text": "Paris"}},
            "roots": {"roots": [{"uri": "file:///a"}]},
        }));
        assert!(matches!(call.elicited("ok", &ask), Ok(ElicitAnswer::Accepted(c)) if c["name"] == "Ada"));
        assert_eq!(call.elicited("absent", &ask), Ok(ElicitAnswer::Missing));
        assert_eq!(
            call.elicited("declined", &ask),
            Ok(ElicitAnswer::Refused("decline".into()))
        );
        for bad in ["wrong_type", "missing_field", "garbage"] {
            let e = call.elicited(bad, &ask).unwrap_err();
            assert_eq!(
                (e.code, e.data.unwrap()["inputKey"].clone()),
                (ErrorCode::INVALID_PARAMS, json!(bad))
            );
        }
        assert_eq!(call.sampled_text("sampled"), Ok(Some("Paris".into())));
        assert_eq!(call.sampled_text("absent"), Ok(None));
        assert!(call.sampled_text("roots").is_err());
        assert_eq!(call.listed_roots("roots"), Ok(Some(vec!["file:///a".into()])));
        assert!(call.listed_roots("sampled").is_err());
    }
}
