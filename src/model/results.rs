//! The empty acknowledgement result (`{"resultType": "complete"}`) of
//! `tasks/update`, `tasks/cancel` and `tasks/steer`, and of a
//! `subscriptions/listen` stream that the server closes gracefully.
//!
//! The task-shaped results are [`GetTaskResult`](super::GetTaskResult) and
//! [`CreateTaskResult`](super::CreateTaskResult).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{JsonObject, ResultType};

/// An empty result: `{"resultType": "complete"}` plus an optional `_meta`.
///
/// Reading accepts an absent `resultType` (results of earlier protocol
/// revisions) and ignores other members; any `resultType` other than
/// `"complete"` is an error.
///
/// # Examples
///
/// ```
/// use subtask::model::AckResult;
/// assert_eq!(serde_json::to_string(&AckResult::new()).unwrap(), r#"{"resultType":"complete"}"#);
/// let err = serde_json::from_str::<AckResult>(r#"{"resultType":"task"}"#).unwrap_err();
/// assert!(err.to_string().contains("found \"task\""));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AckResult {
    /// Optional `_meta` (e.g. the subscription id when a stream closes).
    pub meta: Option<JsonObject>,
}

impl AckResult {
    /// An ack without `_meta`.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Result of `tasks/update`.
pub type UpdateTaskResult = AckResult;
/// Result of `tasks/cancel`.
pub type CancelTaskResult = AckResult;
/// Result of `tasks/steer` (SEP-2669).
pub type SteerTaskResult = AckResult;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AckWire {
    #[serde(default)]
    result_type: Option<ResultType>,
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    meta: Option<JsonObject>,
}

impl Serialize for AckResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        AckWire {
            result_type: Some(ResultType::Complete),
            meta: self.meta.clone(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AckResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = AckWire::deserialize(deserializer)?;
        match wire.result_type {
            None | Some(ResultType::Complete) => Ok(AckResult { meta: wire.meta }),
            Some(other) => Err(serde::de::Error::custom(format_args!(
                "an acknowledgement must have resultType \"complete\", found {:?}",
                other.as_str()
            ))),
        }
    }
}
