//! What a server author registers: tools (and prompts), each answering a call
//! with a result, an MRTR input round, a task, or an error.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::schema::{ArgumentError, ArgumentSchema, SchemaError};
use crate::model::{
    ClientCapabilities, ErrorObject, InputRequests, InputResponses, JsonObject, TasksCapability,
};
use crate::runtime::{HandlerResult, TaskContext};

/// Whether a tool runs as a task (a server-side rule; the wire has no field for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    /// Never a task: always answered synchronously.
    Forbidden,
    /// A task for clients that declared the tasks extension; run to completion
    /// and answered synchronously for the others.
    Optional,
    /// Only as a task: clients without the tasks extension get `-32021`
    /// before the tool runs.
    Required,
}

impl TaskSupport {
    /// The 2025-11-25 `execution.taskSupport` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

/// How a tool is listed in `tools/list`.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// Unique name (`^[A-Za-z0-9_.-]{1,128}$`).
    pub name: String,
    /// Human-readable description (non-empty).
    pub description: String,
    /// JSON Schema of the arguments (`type: "object"`).
    pub input_schema: JsonObject,
    /// Task support.
    pub task_support: TaskSupport,
    /// Whether the tool's task may run again from the start after a server
    /// restart (with its queued steers and the input answers it had
    /// received). Its handler must then be safe to repeat: side effects it
    /// made before the restart happen again. Non-resumable tasks that were
    /// running when the server stopped fail with a restart error.
    pub resumable: bool,
    /// Whether a call from a client that asked for no task is answered at
    /// once with the task's id while the task runs on, for a model to
    /// follow with the control tools (`ServerConfig::background` does it
    /// for every task tool; docs/agents.md).
    pub background: bool,
    /// [`ToolSpec::input_schema`] compiled when the spec was built, so a
    /// call's check compiles nothing. Should the field be given another
    /// schema afterwards, [`ToolSpec::check_arguments`] sees it (compiling
    /// the new schema for each check) and `ServerBuilder::tool` compiles it
    /// once again.
    compiled: ArgumentSchema,
}

impl ToolSpec {
    /// A spec with an object schema built from `schema` (a JSON object
    /// value), compiled here once for the checks of every call.
    ///
    /// # Panics
    ///
    /// If `schema` is not a JSON object or does not compile (a `$ref` that
    /// points nowhere, `"minimum": "5"`, ...): a programming error in the
    /// tool table, found when the table is built rather than at the first
    /// call. [`ToolSpec::try_new`] returns the error instead.
    pub fn new(name: &str, description: &str, schema: Value, task_support: TaskSupport) -> Self {
        match ToolSpec::try_new(name, description, schema, task_support) {
            Ok(spec) => spec,
            Err(e) => panic!("tool {name:?}: {e}"),
        }
    }

    /// [`ToolSpec::new`] for a schema that may be wrong (read from a file,
    /// relayed from another server).
    ///
    /// # Errors
    ///
    /// If `schema` is not a JSON object, or where and why it does not compile.
    ///
    /// # Examples
    ///
    /// ```
    /// use subtask::server::{TaskSupport, ToolSpec};
    /// let schema = serde_json::json!({"type": "object", "properties": {"v": {"$ref": "#/$defs/V"}}});
    /// let err = ToolSpec::try_new("t", "d", schema, TaskSupport::Optional).unwrap_err();
    /// assert!(err.to_string().contains("/$defs/V"), "{err}");
    /// ```
    pub fn try_new(
        name: &str,
        description: &str,
        schema: Value,
        task_support: TaskSupport,
    ) -> Result<Self, SchemaError> {
        let input_schema = JsonObject::from_value(schema).map_err(|other| SchemaError {
            pointer: String::new(),
            message: format!(
                "a tool's input schema is a JSON object, not {}",
                super::schema::type_name(&other)
            ),
        })?;
        let compiled = ArgumentSchema::compile(&input_schema)?;
        Ok(ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema,
            task_support,
            resumable: false,
            background: false,
            compiled,
        })
    }

    /// A spec whose input schema is derived from the arguments type `A`
    /// (`#[derive(serde::Deserialize, schemars::JsonSchema)]`), so the
    /// schema clients see, the server's argument check and the tool's
    /// [`ToolCall::args`] agree by construction.
    ///
    /// Nested types (schemars puts them under `$defs`) are checked like the
    /// top level: their bounds, enums and required members.
    ///
    /// # Panics
    ///
    /// If `A`'s schema is not an object schema (a programming error).
    ///
    /// # Examples
    ///
    /// ```
    /// use subtask::server::{TaskSupport, ToolSpec};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Greet {
    ///     /// Who to greet.
    ///     names: Vec<String>,
    /// }
    /// let spec = ToolSpec::typed::<Greet>("greet_all", "Greets each name.", TaskSupport::Optional);
    /// assert_eq!(spec.input_schema["type"], "object");
    /// assert_eq!(spec.input_schema["required"], serde_json::json!(["names"]));
    /// ```
    pub fn typed<A: schemars::JsonSchema>(name: &str, description: &str, task_support: TaskSupport) -> Self {
        let mut schema = serde_json::to_value(schemars::schema_for!(A)).expect("a JSON Schema serializes");
        if let Value::Object(map) = &mut schema {
            // Tool schemas name no meta-schema and no Rust type.
            map.remove("$schema");
            map.remove("title");
        }
        assert_eq!(
            schema["type"], "object",
            "a tool's arguments type must be a struct (an object schema)"
        );
        ToolSpec::new(name, description, schema, task_support)
    }

    /// Checks call arguments against [`ToolSpec::input_schema`]. The server
    /// does this before every call and answers a violation with an
    /// `isError` result naming the argument, so the tool itself sees only
    /// arguments its schema allows.
    ///
    /// # Errors
    ///
    /// The first violation (see [`ArgumentSchema::check`]).
    pub fn check_arguments(&self, arguments: &JsonObject) -> Result<(), ArgumentError> {
        if self.compiled.is_compiled_from(&self.input_schema) {
            self.compiled.check(arguments)
        } else {
            super::check_arguments(&self.input_schema, arguments)
        }
    }

    /// [`ToolSpec::check_arguments`] for the `arguments` value of a
    /// request, checked in place.
    pub(crate) fn check_argument_value(&self, arguments: &Value) -> Result<(), ArgumentError> {
        if self.compiled.is_compiled_from(&self.input_schema) {
            return self.compiled.check_value(arguments);
        }
        match ArgumentSchema::compile(&self.input_schema) {
            Ok(compiled) => compiled.check_value(arguments),
            Err(e) => {
                tracing::warn!(tool = %self.name, error = %e, "arguments not checked: the tool's schema does not compile");
                Ok(())
            }
        }
    }

    /// The spec with [`ToolSpec::input_schema`] compiled, if it was
    /// replaced after the spec was built (a spec being registered).
    ///
    /// # Panics
    ///
    /// If the replacement does not compile, as [`ToolSpec::new`] would.
    pub(crate) fn compiled(mut self) -> Self {
        if !self.compiled.is_compiled_from(&self.input_schema) {
            self.compiled = ArgumentSchema::compile(&self.input_schema)
                .unwrap_or_else(|e| panic!("tool {:?}: {e}", self.name));
        }
        self
    }

    /// Declares the tool resumable (see [`ToolSpec::resumable`]).
    #[must_use]
    pub fn resumable(mut self) -> Self {
        self.resumable = true;
        self
    }

    /// Answers a call from a client that asked for no task at once with
    /// the task's id (see [`ToolSpec::background`]).
    #[must_use]
    pub fn background(mut self) -> Self {
        self.background = true;
        self
    }
}

/// One `tools/call` (or `prompts/get`) round as the tool sees it.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The tool (or prompt) name.
    pub name: String,
    /// `arguments` (empty when absent).
    pub arguments: JsonObject,
    /// MRTR answers to the input requests of the previous round.
    pub input_responses: Option<InputResponses>,
    /// The state this tool returned with the previous round, verified by the
    /// server (clients cannot forge or alter it).
    pub request_state: Option<Value>,
    /// The capabilities the client declared on this request.
    pub client_capabilities: ClientCapabilities,
    /// The request's tasks extension capability, if declared.
    pub tasks: Option<TasksCapability>,
}

impl ToolCall {
    /// A string argument.
    pub fn str_arg(&self, key: &str) -> Option<&str> {
        self.arguments.get(key).and_then(Value::as_str)
    }

    /// An integer argument.
    pub fn i64_arg(&self, key: &str) -> Option<i64> {
        self.arguments.get(key).and_then(Value::as_i64)
    }

    /// A number argument (integers included).
    pub fn f64_arg(&self, key: &str) -> Option<f64> {
        self.arguments.get(key).and_then(Value::as_f64)
    }

    /// The arguments as `A` (the type a [`ToolSpec::typed`] spec was
    /// derived from; the server has already checked them against its schema).
    ///
    /// # Errors
    ///
    /// A tool error (`isError` result) saying what did not fit, ready to
    /// return: `let args: Greet = match call.args() { Ok(a) => a, Err(e) => return e };`.
    pub fn args<A: serde::de::DeserializeOwned>(&self) -> Result<A, ToolOutcome> {
        serde_json::from_value(Value::Object(self.arguments.as_map().clone()))
            .map_err(|e| ToolOutcome::tool_error(format!("invalid arguments: {e}")))
    }

    /// The answer to input request `key` from the previous round.
    pub fn response(&self, key: &str) -> Option<&JsonObject> {
        self.input_responses.as_ref().and_then(|r| r.get(key))
    }

    /// Whether the client declared the tasks extension on this request.
    pub fn tasks_declared(&self) -> bool {
        self.tasks.is_some()
    }
}

/// What is stored with a task so its tool can be called again after a
/// restart: the whole call (its `requestState` already verified).
pub(crate) fn launch_of(call: &ToolCall) -> Value {
    serde_json::json!({
        "name": call.name,
        "arguments": call.arguments,
        "inputResponses": call.input_responses,
        "requestState": call.request_state,
        "capabilities": call.client_capabilities,
        "tasks": call.tasks,
    })
}

/// The call stored by [`launch_of`], `None` when it does not read back.
pub(crate) fn call_of_launch(launch: &Value) -> Option<ToolCall> {
    Some(ToolCall {
        name: launch.get("name")?.as_str()?.to_owned(),
        arguments: serde_json::from_value(launch.get("arguments")?.clone()).ok()?,
        input_responses: serde_json::from_value(launch.get("inputResponses")?.clone()).ok()?,
        request_state: launch.get("requestState").filter(|v| !v.is_null()).cloned(),
        client_capabilities: serde_json::from_value(launch.get("capabilities")?.clone()).ok()?,
        tasks: serde_json::from_value(launch.get("tasks")?.clone()).ok()?,
    })
}

/// The body of a task: runs in the runtime with a [`TaskContext`].
pub type TaskBody = Box<dyn FnOnce(TaskContext) -> BoxFuture<'static, HandlerResult> + Send>;

/// How a tool answers a call.
pub enum ToolOutcome {
    /// The final result, at once (`resultType: "complete"`).
    Complete(JsonObject),
    /// MRTR: the client must answer these requests and call again
    /// (`InputRequiredResult`). `state` comes back verified in the next round.
    InputRequired {
        /// Requests by key (elicitation, sampling, roots).
        input_requests: InputRequests,
        /// Opaque state for the next round.
        state: Option<Value>,
    },
    /// Run as a task.
    Task {
        /// The work.
        body: TaskBody,
        /// TTL of the task (the server's default when `None`).
        ttl_ms: Option<u64>,
    },
    /// A JSON-RPC (protocol) error for this request: for requests that are
    /// malformed, not for problems a model could fix by calling again. Bad
    /// argument values and failures of the tool's work are tool results
    /// with `isError: true` ([`ToolOutcome::tool_error`]).
    Error(ErrorObject),
}

impl std::fmt::Debug for ToolOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolOutcome::Complete(r) => f.debug_tuple("Complete").field(r).finish(),
            ToolOutcome::InputRequired {
                input_requests,
                state,
            } => f
                .debug_struct("InputRequired")
                .field("input_requests", input_requests)
                .field("state", state)
                .finish(),
            ToolOutcome::Task { ttl_ms, .. } => f.debug_struct("Task").field("ttl_ms", ttl_ms).finish(),
            ToolOutcome::Error(e) => f.debug_tuple("Error").field(e).finish(),
        }
    }
}

impl ToolOutcome {
    /// A tool execution error: a `CallToolResult` with `isError: true` and
    /// `message` as its text, which the client hands to the model so it can
    /// correct itself (an argument out of range, a failed lookup, ...).
    pub fn tool_error(message: impl Into<String>) -> Self {
        ToolOutcome::Complete(error_result(message))
    }

    /// A task running `f`.
    pub fn task<F, Fut>(f: F) -> Self
    where
        F: FnOnce(TaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        ToolOutcome::Task {
            body: Box::new(move |ctx| Box::pin(f(ctx))),
            ttl_ms: None,
        }
    }

    /// A task running `f` with a TTL.
    pub fn task_with_ttl<F, Fut>(ttl_ms: u64, f: F) -> Self
    where
        F: FnOnce(TaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        ToolOutcome::Task {
            body: Box::new(move |ctx| Box::pin(f(ctx))),
            ttl_ms: Some(ttl_ms),
        }
    }
}

/// A tool (or prompt) implementation.
pub trait Tool: Send + Sync + 'static {
    /// Answers one call round.
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome>;
}

impl<F, Fut> Tool for F
where
    F: Fn(ToolCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ToolOutcome> + Send + 'static,
{
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        Box::pin(self(call))
    }
}

/// A registered tool.
#[derive(Clone)]
pub struct RegisteredTool {
    pub(crate) spec: ToolSpec,
    pub(crate) tool: Arc<dyn Tool>,
    /// The name as the label of its trees (shared, not copied per tree).
    pub(crate) label: Arc<str>,
}

/// How a prompt is listed in `prompts/list`.
#[derive(Debug, Clone)]
pub struct PromptSpec {
    /// Unique name.
    pub name: String,
    /// Description.
    pub description: String,
    /// `arguments` entries as listed (`[{name, description, required}]`).
    pub arguments: Vec<JsonObject>,
}

/// A registered prompt. Its [`Tool`] answers `prompts/get` rounds with
/// `Complete(GetPromptResult)`, `InputRequired` or `Error` (never a task).
#[derive(Clone)]
pub struct RegisteredPrompt {
    pub(crate) spec: PromptSpec,
    pub(crate) prompt: Arc<dyn Tool>,
}

/// A `CallToolResult` with one text item.
pub fn text_result(text: impl Into<String>) -> JsonObject {
    JsonObject::from_value(serde_json::json!({
        "content": [{"type": "text", "text": text.into()}],
        "isError": false,
    }))
    .expect("a literal object")
}

/// A `CallToolResult` with one text item and typed `structuredContent`
/// (what a tool with an `outputSchema` returns).
///
/// # Panics
///
/// If `structured` does not serialize to a JSON object (a map with
/// non-string keys, a number): `structuredContent` must be one.
///
/// # Examples
///
/// ```
/// #[derive(serde::Serialize)]
/// struct Count { nodes: u32 }
/// let r = subtask::server::structured_result("3 nodes", Count { nodes: 3 });
/// assert_eq!(r["structuredContent"]["nodes"], 3);
/// ```
pub fn structured_result(text: impl Into<String>, structured: impl serde::Serialize) -> JsonObject {
    let structured = serde_json::to_value(structured).expect("structured content serializes");
    assert!(structured.is_object(), "structuredContent must be a JSON object");
    JsonObject::from_value(serde_json::json!({
        "content": [{"type": "text", "text": text.into()}],
        "structuredContent": structured,
        "isError": false,
    }))
    .expect("a literal object")
}

/// A `CallToolResult` with one text item and `isError: true`.
pub fn error_result(text: impl Into<String>) -> JsonObject {
    JsonObject::from_value(serde_json::json!({
        "content": [{"type": "text", "text": text.into()}],
        "isError": true,
    }))
    .expect("a literal object")
}

/// An `elicitation/create` input request (form mode) with a flat schema.
pub fn elicitation(message: &str, properties: Value, required: &[&str]) -> JsonObject {
    JsonObject::from_value(serde_json::json!({
        "method": crate::model::ELICITATION_CREATE,
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": properties, "required": required},
        },
    }))
    .expect("a literal object")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, serde::Deserialize, schemars::JsonSchema, PartialEq)]
    struct Args {
        /// Names.
        names: Vec<String>,
        /// At most 10 times.
        #[schemars(range(max = 10))]
        times: Option<u32>,
    }

    fn call(args: Value) -> ToolCall {
        ToolCall {
            name: "t".into(),
            arguments: JsonObject::from_value(args).unwrap(),
            input_responses: None,
            request_state: None,
            client_capabilities: ClientCapabilities::default(),
            tasks: None,
        }
    }

    #[test]
    fn a_typed_spec_checks_what_args_reads() {
        let spec = ToolSpec::typed::<Args>("t", "d", TaskSupport::Optional);
        assert!(spec.input_schema.get("$schema").is_none());
        let good = call(json!({"names": ["a"], "times": 2}));
        assert!(spec.check_arguments(&good.arguments).is_ok());
        assert_eq!(
            good.args::<Args>().unwrap(),
            Args {
                names: vec!["a".into()],
                times: Some(2)
            }
        );
        // The schema refuses what the type cannot read, before the tool runs.
        for bad in [
            json!({"names": "a"}),
            json!({"names": [], "times": 11}),
            json!({"times": 1}),
        ] {
            assert!(
                spec.check_arguments(&call(bad.clone()).arguments).is_err(),
                "{bad}"
            );
        }
        // args() alone also answers a tool error when the type does not fit.
        match call(json!({"names": 3})).args::<Args>() {
            Err(ToolOutcome::Complete(r)) => assert_eq!(r["isError"], true),
            other => panic!("{other:?}"),
        }
    }

    #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
    struct Outer {
        /// A nested struct: schemars refers to it with `$ref`.
        inner: Inner,
        /// Several.
        #[serde(default)]
        many: Vec<Inner>,
    }

    #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
    struct Inner {
        #[schemars(range(max = 5))]
        depth: u8,
        kind: Kind,
    }

    #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
    enum Kind {
        A,
        B,
    }

    #[test]
    fn a_typed_spec_checks_nested_types() {
        let spec = ToolSpec::typed::<Outer>("t", "d", TaskSupport::Optional);
        assert!(
            spec.input_schema["properties"]["inner"].get("$ref").is_some(),
            "schemars refers to the nested type: {:?}",
            spec.input_schema
        );
        let check = |v: Value| {
            spec.check_arguments(&call(v).arguments)
                .map_err(|e| e.to_string())
        };
        let good = call(json!({"inner": {"depth": 5, "kind": "A"}}));
        assert!(spec.check_arguments(&good.arguments).is_ok());
        let outer = good.args::<Outer>().unwrap();
        assert!(outer.inner.depth == 5 && matches!(outer.inner.kind, Kind::A) && outer.many.is_empty());
        let inner = check(json!({"inner": {"depth": 6, "kind": "A"}})).unwrap_err();
        assert_eq!(
            inner,
            "invalid argument `inner.depth`: 6 is greater than the maximum 5"
        );
        let kind = check(json!({"inner": {"depth": 1, "kind": "C"}})).unwrap_err();
        assert_eq!(
            kind,
            "invalid argument `inner.kind`: \"C\" is not one of \"A\", \"B\""
        );
        let many = check(
            json!({"inner": {"depth": 1, "kind": "A"}, "many": [{"depth": 1, "kind": "B"}, {"depth": 1}]}),
        );
        assert_eq!(many.unwrap_err(), "invalid argument `many[1].kind`: is required");
    }

    #[test]
    fn a_schema_that_does_not_compile_is_refused_when_the_spec_is_built() {
        let dangling = json!({"type": "object", "properties": {"v": {"$ref": "#/$defs/V"}}});
        let err = ToolSpec::try_new("t", "d", dangling.clone(), TaskSupport::Optional).unwrap_err();
        assert!(err.to_string().contains("/$defs/V"), "{err}");
        let panic = std::panic::catch_unwind(|| ToolSpec::new("t", "d", dangling, TaskSupport::Optional));
        let message = *panic.unwrap_err().downcast::<String>().unwrap();
        assert!(
            message.starts_with("tool \"t\": invalid input schema"),
            "{message}"
        );
        let err = ToolSpec::try_new("t", "d", json!([1]), TaskSupport::Optional).unwrap_err();
        assert_eq!(
            err.message,
            "a tool's input schema is a JSON object, not an array"
        );
    }

    #[test]
    fn a_schema_replaced_after_the_spec_was_built_is_the_one_checked() {
        let mut spec = ToolSpec::new("t", "d", json!({"type": "object"}), TaskSupport::Optional);
        let args = call(json!({"n": 9})).arguments;
        assert!(spec.check_arguments(&args).is_ok());
        spec.input_schema =
            JsonObject::from_value(json!({"type": "object", "properties": {"n": {"maximum": 5}}})).unwrap();
        assert_eq!(spec.check_arguments(&args).unwrap_err().path, "n");
        assert!(spec.check_argument_value(&json!({"n": 9})).is_err());
        let spec = spec.compiled();
        assert!(spec.compiled.is_compiled_from(&spec.input_schema));
        assert!(spec.check_argument_value(&json!({"n": 9})).is_err());
    }
}
