//! Golden wire tests: every JSON example of the spec texts that concerns
//! tasks (see `tests/fixtures/README.md`) parses with its type and
//! re-serializes to the same JSON value; malformed messages are refused with
//! precise errors; no input makes a parser panic.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use subtask::model::*;

const T: &str = "786512e2-9e0d-44bd-8f29-789f320fe840";
const C1: &str = "1c9a4f3e-5b2d-4e8f-9a6c-0d7e2b1f4a93";
const C2: &str = "b7e2d8c1-3a4f-4b6e-8d9c-5f1a2e3b4c5d";

/// What `JsonRpcMessage::parse` must classify a fixture as; `Fragment` for
/// fixtures that are a part of a message (a `_meta`, a capabilities object).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Request,
    Notification,
    Response,
    Error,
    Fragment,
}

struct Case {
    file: &'static str,
    kind: Kind,
    /// Parses with the fixture's type and serializes back.
    roundtrip: fn(&Value) -> Result<Value, String>,
    /// Parses raw bytes with the fixture's type; only for "never panics".
    parse: fn(&[u8]) -> bool,
}

fn roundtrip<T: Serialize + DeserializeOwned>(v: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|e| format!("parse: {e}"))?;
    serde_json::to_value(&typed).map_err(|e| format!("serialize: {e}"))
}

fn parses<T: DeserializeOwned>(bytes: &[u8]) -> bool {
    serde_json::from_slice::<T>(bytes).is_ok()
}

macro_rules! case {
    ($file:literal, $kind:ident, $ty:ty) => {
        Case {
            file: $file,
            kind: Kind::$kind,
            roundtrip: roundtrip::<$ty>,
            parse: parses::<$ty>,
        }
    };
}

type Req<P> = JsonRpcRequest<P>;
type Res<R> = JsonRpcResponse<R>;
type Note<P> = JsonRpcNotification<P>;

/// Every fixture and the type that reads it.
#[rustfmt::skip]
const CASES: &[Case] = &[
    // tasks-extension.md, verbatim.
    case!("te-client-meta-tasks.json", Fragment, RequestMeta),
    case!("te-server-capabilities-tasks.json", Fragment, ServerCapabilities),
    case!("te-error-missing-capability.json", Error, JsonRpcError),
    case!("te-tools-call-get-weather.json", Request, Req<JsonObject>),
    case!("te-create-task-result-get-weather.json", Response, Res<CreateTaskResult>),
    case!("te-flow-02-tools-call-hello-world.json", Request, Req<JsonObject>),
    case!("te-flow-02-create-task-result.json", Response, Res<CreateTaskResult>),
    case!("te-flow-03-tasks-get.json", Request, Req<GetTaskParams>),
    case!("te-flow-03-working.json", Response, Res<GetTaskResult>),
    case!("te-flow-04-tasks-get.json", Request, Req<GetTaskParams>),
    case!("te-flow-04-input-required.json", Response, Res<GetTaskResult>),
    case!("te-flow-05-tasks-get.json", Request, Req<GetTaskParams>),
    case!("te-flow-05-input-required.json", Response, Res<GetTaskResult>),
    case!("te-flow-06-tasks-update.json", Request, Req<UpdateTaskParams>),
    case!("te-flow-06-ack.json", Response, Res<UpdateTaskResult>),
    case!("te-flow-07-tasks-get.json", Request, Req<GetTaskParams>),
    case!("te-flow-07-working.json", Response, Res<GetTaskResult>),
    case!("te-flow-08-tasks-get.json", Request, Req<GetTaskParams>),
    case!("te-flow-08-completed.json", Response, Res<GetTaskResult>),
    case!("te-error-task-not-found.json", Error, JsonRpcError),
    case!("te-error-task-expired.json", Error, JsonRpcError),
    case!("te-failed-task.json", Response, Res<CreateTaskResult>),
    case!("te-completed-is-error.json", Response, Res<CreateTaskResult>),
    case!("te-error-listen-missing-capability.json", Error, JsonRpcError),
    case!("te-notification-tasks-completed.json", Notification, Note<TaskStatusNotificationParams>),
    // tasks-extension.md, constructed.
    case!("te-x-tasks-cancel.json", Request, Req<CancelTaskParams>),
    case!("te-x-cancel-ack.json", Response, Res<CancelTaskResult>),
    case!("te-x-tasks-get-cancelled.json", Response, Res<GetTaskResult>),
    case!("te-x-tasks-get-failed.json", Response, Res<GetTaskResult>),
    case!("te-x-tasks-get-ttl-unlimited.json", Response, Res<GetTaskResult>),
    case!("te-x-tasks-get-completed-result-type.json", Response, Res<GetTaskResult>),
    case!("te-x-subscriptions-listen-tasks.json", Request, Req<SubscriptionsListenParams>),
    case!("te-x-subscriptions-acknowledged-tasks.json", Notification, Note<SubscriptionsAcknowledgedParams>),
    case!("te-x-notification-tasks-on-stream.json", Notification, Note<TaskStatusNotificationParams>),
    // SEP-2669.
    case!("sep2669-server-capabilities.json", Fragment, ServerCapabilities),
    case!("sep2669-x-client-meta.json", Fragment, RequestMeta),
    case!("sep2669-x-tasks-steer.json", Request, Req<SteerTaskParams>),
    case!("sep2669-x-steer-ack.json", Response, Res<SteerTaskResult>),
    case!("sep2669-x-tasks-pause.json", Request, Req<PauseTaskParams>),
    case!("sep2669-x-pause-result-paused.json", Response, Res<PauseTaskResult>),
    case!("sep2669-x-pause-result-pending.json", Response, Res<PauseTaskResult>),
    case!("sep2669-x-tasks-resume.json", Request, Req<ResumeTaskParams>),
    case!("sep2669-x-resume-result-input-required.json", Response, Res<ResumeTaskResult>),
    case!("sep2669-x-notification-tasks-paused.json", Notification, Note<TaskStatusNotificationParams>),
    case!("sep2669-x-error-not-paused.json", Error, JsonRpcError),
    case!("sep2669-x-error-method-not-found.json", Error, JsonRpcError),
    // SEP-2268, constructed.
    case!("sep2268-x-parent-working-with-children.json", Response, Res<GetTaskResult>),
    case!("sep2268-x-child-completed.json", Response, Res<GetTaskResult>),
    case!("sep2268-x-child-input-required-notification.json", Notification, Note<TaskStatusNotificationParams>),
    case!("sep2268-x-parent-completed.json", Response, Res<GetTaskResult>),
    case!("sep2268-x-child-paused-with-parent.json", Response, Res<GetTaskResult>),
    // tasks-2025-11-25-legacy.md (the 2025-11-25 tasks wire), verbatim.
    case!("legacy-tools-call-task.json", Request, Req<JsonObject>),
    case!("legacy-create-task-result.json", Response, Res<LegacyCreateTaskResult>),
    case!("legacy-tasks-get.json", Request, Req<GetTaskParams>),
    case!("legacy-tasks-get-working.json", Response, Res<LegacyTask>),
    case!("legacy-tasks-result.json", Request, Req<GetTaskParams>),
    case!("legacy-tasks-result-call-tool-result.json", Response, Res<JsonObject>),
    case!("legacy-notification-tasks-status.json", Notification, Note<LegacyTask>),
    case!("legacy-tasks-list.json", Request, Req<JsonObject>),
    case!("legacy-tasks-list-result.json", Response, Res<ListTasksResult>),
    case!("legacy-tasks-cancel-result.json", Response, Res<LegacyTask>),
    case!("legacy-tasks-get-failed.json", Response, Res<LegacyTask>),
    case!("legacy-error-cancel-terminal.json", Error, JsonRpcError),
    // basic-patterns-subscriptions.md, verbatim.
    case!("sub-listen.json", Request, Req<SubscriptionsListenParams>),
    case!("sub-acknowledged.json", Notification, Note<SubscriptionsAcknowledgedParams>),
    case!("sub-graceful-closure.json", Response, Res<AckResult>),
];

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(file: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn value(file: &str) -> Value {
    serde_json::from_slice(&read(file)).unwrap_or_else(|e| panic!("{file} is not JSON: {e}"))
}

fn typed<T: DeserializeOwned>(file: &str) -> T {
    serde_json::from_slice(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn id(s: &str) -> TaskId {
    s.parse().expect("test ids are canonical")
}

#[test]
fn the_table_names_every_fixture_exactly_once() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures dir")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    let in_table: Vec<&str> = CASES.iter().map(|c| c.file).collect();
    let unique: BTreeSet<String> = in_table.iter().map(|s| s.to_string()).collect();
    assert_eq!(unique.len(), in_table.len(), "a fixture is listed twice");
    assert_eq!(on_disk, unique, "fixtures on disk and in the table differ");
}

#[test]
fn every_fixture_round_trips_through_its_type() {
    let mut failures = Vec::new();
    for case in CASES {
        let original = value(case.file);
        match (case.roundtrip)(&original) {
            Ok(back) if back == original => {}
            Ok(back) => failures.push(format!(
                "{}: re-serialized differs\n  want {original}\n  got  {back}",
                case.file
            )),
            Err(e) => failures.push(format!("{}: {e}", case.file)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_message_fixture_is_classified_as_its_kind_and_round_trips_untyped() {
    for case in CASES.iter().filter(|c| c.kind != Kind::Fragment) {
        let bytes = read(case.file);
        let msg = JsonRpcMessage::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", case.file));
        let kind = match &msg {
            JsonRpcMessage::Request(_) => Kind::Request,
            JsonRpcMessage::Notification(_) => Kind::Notification,
            JsonRpcMessage::Response(_) => Kind::Response,
            JsonRpcMessage::Error(_) => Kind::Error,
        };
        assert_eq!(kind, case.kind, "{}", case.file);
        assert_eq!(
            serde_json::to_value(&msg).unwrap(),
            value(case.file),
            "{}",
            case.file
        );
        // The serde entry point classifies the same way.
        let via_serde: JsonRpcMessage = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(via_serde, msg, "{}", case.file);
    }
}

#[test]
fn typed_params_read_from_a_classified_request_equal_the_typed_parse() {
    let JsonRpcMessage::Request(req) = JsonRpcMessage::parse(&read("te-flow-06-tasks-update.json")).unwrap()
    else {
        panic!("tasks/update is a request")
    };
    assert_eq!(req.method, TASKS_UPDATE);
    let params: UpdateTaskParams = req.params_as().unwrap();
    let whole: Req<UpdateTaskParams> = typed("te-flow-06-tasks-update.json");
    assert_eq!(Some(params), whole.params);
}

#[test]
fn spec_requests_mean_what_the_text_says() {
    let get: Req<GetTaskParams> = typed("te-flow-03-tasks-get.json");
    assert_eq!(TaskMethod::from_name(&get.method), Some(TaskMethod::Get));
    assert_eq!(get.params.unwrap().task_id(), Some(id(T)));

    let update: Req<UpdateTaskParams> = typed("te-flow-06-tasks-update.json");
    let update = update.params.unwrap();
    assert_eq!(update.task_id(), Some(id(T)));
    assert_eq!(update.input_responses["name"]["content"]["input"], "Luca");

    // The hello_world call declares the tasks extension; get_weather does not.
    let hello: Req<JsonObject> = typed("te-flow-02-tools-call-hello-world.json");
    let meta = RequestMeta::from_params(hello.params.as_ref()).unwrap().unwrap();
    assert_eq!(meta.tasks_capability(), Some(TasksCapability::BASE));
    assert_eq!(meta.missing_required_keys(), [META_PROTOCOL_VERSION]);
    let weather: Req<JsonObject> = typed("te-tools-call-get-weather.json");
    assert_eq!(RequestMeta::from_params(weather.params.as_ref()).unwrap(), None);

    let steer: Req<SteerTaskParams> = typed("sep2669-x-tasks-steer.json");
    let steer = steer.params.unwrap();
    assert_eq!(
        steer.tasks_capability(),
        Some(TasksCapability {
            steer: true,
            pause: false
        })
    );
    assert_eq!(steer.message, "Focus on academic sources.");

    let listen: Req<SubscriptionsListenParams> = typed("te-x-subscriptions-listen-tasks.json");
    let listen = listen.params.unwrap();
    assert!(listen.notifications.wants_tasks());
    let ids: Vec<_> = listen.notifications.task_ids().map(|(_, id)| id).collect();
    assert_eq!(ids, [Some(id(T)), Some(id(C1))]);
    let plain: Req<SubscriptionsListenParams> = typed("sub-listen.json");
    let plain = plain.params.unwrap();
    assert!(!plain.notifications.wants_tasks());
    assert_eq!(plain.tasks_capability(), None);
}

#[test]
fn spec_results_mean_what_the_text_says() {
    let created: Res<CreateTaskResult> = typed("te-create-task-result-get-weather.json");
    let task = created.result.task;
    assert_eq!(task.status(), TaskStatus::Working);
    assert_eq!(task.task().task_id, id(T));
    assert_eq!(task.task().ttl_ms, Some(60_000));
    assert_eq!(task.task().poll_interval_ms, Some(5_000));
    assert_eq!(task.task().created_at.to_string(), "2025-11-25T10:30:00Z");

    let input: Res<GetTaskResult> = typed("te-flow-04-input-required.json");
    let TaskPayload::InputRequired { input_requests } = input.result.task.payload() else {
        panic!("input_required payload expected")
    };
    assert_eq!(input_requests["name"]["method"], "elicitation/create");

    let done: Res<GetTaskResult> = typed("te-flow-08-completed.json");
    assert!(
        matches!(done.result.task.payload(), TaskPayload::Completed { result } if result["isError"] == false)
    );

    let failed: Res<CreateTaskResult> = typed("te-failed-task.json");
    let TaskPayload::Failed { error } = failed.result.task.payload() else {
        panic!("failed payload expected")
    };
    assert_eq!(error.code, ErrorCode::INTERNAL_ERROR);

    let tool_error: Res<CreateTaskResult> = typed("te-completed-is-error.json");
    assert_eq!(tool_error.result.task.status(), TaskStatus::Completed);

    let unlimited: Res<GetTaskResult> = typed("te-x-tasks-get-ttl-unlimited.json");
    assert_eq!(unlimited.result.task.task().ttl_ms, None);
    assert_eq!(
        unlimited.result.task.task().last_updated_at.as_millis() % 1000,
        250
    );

    let paused: Res<PauseTaskResult> = typed("sep2669-x-pause-result-paused.json");
    assert_eq!(paused.result.task.status(), TaskStatus::Paused);
    let pending: Res<PauseTaskResult> = typed("sep2669-x-pause-result-pending.json");
    assert_eq!(pending.result.task.status(), TaskStatus::Working);

    let closure: Res<AckResult> = typed("sub-graceful-closure.json");
    let meta = NotificationMeta::from_object(closure.result.meta.as_ref().unwrap()).unwrap();
    assert_eq!(meta.subscription_id, Some(RequestId::Number(1)));
}

#[test]
fn subtask_links_are_read_both_ways() {
    let parent: Res<GetTaskResult> = typed("sep2268-x-parent-working-with-children.json");
    assert_eq!(parent.result.task.task().child_task_ids, [id(C1), id(C2)]);
    assert_eq!(parent.result.task.task().parent_task_id, None);

    let child: Res<GetTaskResult> = typed("sep2268-x-child-completed.json");
    assert_eq!(child.result.task.task().parent_task_id, Some(id(T)));
    assert!(child.result.task.task().child_task_ids.is_empty());

    let note: Note<TaskStatusNotificationParams> = typed("sep2268-x-child-input-required-notification.json");
    assert_eq!(note.method, NOTIFICATIONS_TASKS);
    let params = note.params.unwrap();
    assert_eq!(params.task.task().parent_task_id, Some(id(T)));
    assert_eq!(params.meta.unwrap().subscription_id, Some(RequestId::Number(14)));

    let paused_child: Res<GetTaskResult> = typed("sep2268-x-child-paused-with-parent.json");
    assert_eq!(paused_child.result.task.status(), TaskStatus::Paused);
}

#[test]
fn spec_errors_are_what_the_constructors_build() {
    for file in [
        "te-error-missing-capability.json",
        "te-error-listen-missing-capability.json",
    ] {
        let e: JsonRpcError = typed(file);
        assert_eq!(e.error, ErrorObject::tasks_extension_required(), "{file}");
    }
    let e: JsonRpcError = typed("te-error-task-not-found.json");
    assert_eq!(e.error, ErrorObject::task_not_found());
    assert_eq!(e.id, Some(RequestId::Number(70)));
}

#[test]
fn capability_fixtures_declare_what_they_say() {
    let base: ServerCapabilities = typed("te-server-capabilities-tasks.json");
    assert_eq!(base.tasks(), Some(TasksCapability::BASE));
    let full: ServerCapabilities = typed("sep2669-server-capabilities.json");
    assert_eq!(full.tasks(), Some(TasksCapability::FULL));
    assert!(
        TaskMethod::ALL
            .iter()
            .all(|m| m.is_offered_by(TasksCapability::FULL))
    );
    let client: RequestMeta = typed("sep2669-x-client-meta.json");
    assert_eq!(client.tasks_capability(), Some(TasksCapability::FULL));
    let client: RequestMeta = typed("te-client-meta-tasks.json");
    assert_eq!(client.tasks_capability(), Some(TasksCapability::BASE));
}

#[test]
fn a_malformed_task_id_reads_like_an_unknown_one() {
    for raw in [
        "nope",
        "786512e2-9e0d-44bd-8f29-789f320fe84",
        "786512E2-9E0D-44BD-8F29-789F320FE840 ",
    ] {
        let p: GetTaskParams = serde_json::from_value(json!({ "taskId": raw })).unwrap();
        assert_eq!(p.task_id(), None, "{raw}");
    }
}

/// (input, code, id, substring of the message)
#[rustfmt::skip]
const MALFORMED: &[(&str, i32, Option<i64>, &str)] = &[
    ("", -32700, None, "parse error: EOF while parsing"),
    (r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get""#, -32700, None, "parse error: EOF while parsing an object"),
    ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\u{1}\"}", -32700, None, "control character"),
    ("[]", -32600, None, "found an array (batches are not supported)"),
    (r#""tasks/get""#, -32600, None, "expected a JSON-RPC message object, found a string"),
    ("null", -32600, None, "found null"),
    (r#"{"id":1,"method":"tasks/get"}"#, -32600, Some(1), "missing `jsonrpc` member"),
    (r#"{"jsonrpc":"1.0","id":1,"method":"tasks/get"}"#, -32600, Some(1), r#"`jsonrpc` must be "2.0", found "1.0""#),
    (r#"{"jsonrpc":2.0,"id":1,"method":"tasks/get"}"#, -32600, Some(1), r#"`jsonrpc` must be "2.0", found 2.0"#),
    (r#"{"jsonrpc":"2.0","id":null,"method":"tasks/get"}"#, -32600, None, "found null (MCP forbids null ids)"),
    (r#"{"jsonrpc":"2.0","id":{},"method":"tasks/get"}"#, -32600, None, "`id` must be a string or an integer, found an object"),
    (r#"{"jsonrpc":"2.0","id":true,"method":"tasks/get"}"#, -32600, None, "found a boolean"),
    (r#"{"jsonrpc":"2.0","id":1.5,"method":"tasks/get"}"#, -32600, None, "found the number 1.5"),
    (r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#, -32600, None, "out of range"),
    (r#"{"jsonrpc":"2.0","id":3,"method":42}"#, -32600, Some(3), "`method` must be a string, found a number"),
    (r#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":[1]}"#, -32600, Some(3), r#"`params` of "tasks/get" must be an object, found an array"#),
    (r#"{"jsonrpc":"2.0","method":"notifications/tasks","params":"x"}"#, -32600, None, "must be an object, found a string"),
    (r#"{"jsonrpc":"2.0","id":3,"method":"x","result":{}}"#, -32600, Some(3), "both `method` and `result`"),
    (r#"{"jsonrpc":"2.0","id":3,"method":"x","error":{"code":1,"message":"m"}}"#, -32600, Some(3), "both `method` and `error`"),
    (r#"{"jsonrpc":"2.0","id":3,"result":{},"error":{"code":1,"message":"m"}}"#, -32600, Some(3), "both `result` and `error`"),
    (r#"{"jsonrpc":"2.0","result":{}}"#, -32600, None, "a result response must have a string or integer `id`"),
    (r#"{"jsonrpc":"2.0","id":3,"result":[]}"#, -32600, Some(3), "`result` must be an object, found an array"),
    (r#"{"jsonrpc":"2.0","id":3,"error":"boom"}"#, -32600, Some(3), "`error` must be an object, found a string"),
    (r#"{"jsonrpc":"2.0","id":3,"error":{"code":"x","message":"m"}}"#, -32600, Some(3), "`error` is not a JSON-RPC error object: invalid type: string"),
    (r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1}}"#, -32600, Some(3), "missing field `message`"),
    (r#"{"jsonrpc":"2.0","id":3,"error":{"code":1.5,"message":"m"}}"#, -32600, Some(3), "`error` is not a JSON-RPC error object"),
    (r#"{"jsonrpc":"2.0","id":3}"#, -32600, Some(3), "needs `method` (request or notification), `result` or `error`"),
];

#[test]
fn malformed_messages_get_the_right_code_id_and_a_precise_message() {
    for &(input, code, want_id, needle) in MALFORMED {
        let err = JsonRpcMessage::parse(input.as_bytes()).expect_err(input);
        assert_eq!(err.error.code.0, code, "{input}: {err}");
        assert_eq!(err.id, want_id.map(RequestId::Number), "{input}: {err}");
        assert!(
            err.error.message.contains(needle),
            "{input}:\n  want …{needle}…\n  got  {}",
            err.error.message
        );
    }
    // A string id is recovered too.
    let err = JsonRpcMessage::parse(br#"{"jsonrpc":"2.0","id":"abc","nope":1}"#).unwrap_err();
    assert_eq!(err.id, Some(RequestId::from("abc")));
    // Invalid UTF-8 and pathological nesting are parse errors, not panics.
    let err = JsonRpcMessage::parse(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}").unwrap_err();
    assert_eq!(err.error.code, ErrorCode::PARSE_ERROR);
    let deep = "[".repeat(100_000);
    let err = JsonRpcMessage::parse(deep.as_bytes()).unwrap_err();
    assert!(err.error.message.contains("recursion limit exceeded"), "{err}");
}

#[test]
fn malformed_params_are_invalid_params_naming_the_method_and_field() {
    #[rustfmt::skip]
    let cases: &[(&str, &str)] = &[
        (r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get"}"#, "invalid params for tasks/get: missing field `taskId`"),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":7}}"#, "invalid type: integer `7`, expected a string"),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tasks/steer","params":{"taskId":"t"}}"#, "invalid params for tasks/steer: missing field `message`"),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tasks/update","params":{"taskId":"t","inputResponses":[]}}"#, "invalid type: sequence, expected a map"),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t","_meta":{"io.modelcontextprotocol/protocolVersion":1}}}"#, "`_meta.io.modelcontextprotocol/protocolVersion` must be a string, found a number"),
        (r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t","_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":true}}}}}"#, "expected a JSON object, found a boolean"),
        (r#"{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"taskIds":"all"}}}"#, "invalid type: string \"all\", expected a sequence"),
    ];
    for &(input, needle) in cases {
        let JsonRpcMessage::Request(req) = JsonRpcMessage::parse(input.as_bytes()).unwrap() else {
            panic!("{input} is a request")
        };
        let err = match TaskMethod::from_name(&req.method) {
            Some(TaskMethod::Steer) => req.params_as::<SteerTaskParams>().map(drop),
            Some(TaskMethod::Update) => req.params_as::<UpdateTaskParams>().map(drop),
            Some(_) => req.params_as::<TaskIdParams>().map(drop),
            None => req.params_as::<SubscriptionsListenParams>().map(drop),
        }
        .expect_err(input);
        assert_eq!(err.code, ErrorCode::INVALID_PARAMS, "{input}");
        assert!(
            err.message.contains(needle),
            "{input}:\n  want …{needle}…\n  got  {}",
            err.message
        );
    }
}

#[test]
fn malformed_tasks_and_results_are_refused_with_the_reason() {
    let base = || {
        json!({"resultType": "complete", "taskId": T, "status": "working",
               "createdAt": "2025-11-25T10:30:00Z", "lastUpdatedAt": "2025-11-25T10:30:00Z", "ttlMs": null})
    };
    let with = |key: &str, v: Value| {
        let mut b = base();
        b[key] = v;
        b
    };
    let without = |key: &str| {
        let mut b = base();
        b.as_object_mut().unwrap().remove(key);
        b
    };
    let get = |v: Value| {
        serde_json::from_value::<GetTaskResult>(v)
            .unwrap_err()
            .to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        (
            get(with("status", json!("completed"))),
            r#"task with status "completed" is missing `result`"#,
        ),
        (
            get(with("status", json!("failed"))),
            r#"task with status "failed" is missing `error`"#,
        ),
        (
            get(with("status", json!("input_required"))),
            "missing `inputRequests`",
        ),
        (get(with("status", json!("done"))), "unknown variant `done`"),
        (
            get(with("taskId", json!("task-1"))),
            r#"invalid task id "task-1""#,
        ),
        (
            get(with("createdAt", json!("yesterday"))),
            "invalid ISO 8601 timestamp",
        ),
        (get(with("ttlMs", json!(-1))), "invalid value: integer `-1`"),
        (
            get(with("resultType", json!("task"))),
            r#"must have resultType "complete", found "task""#,
        ),
        (get(with("childTaskIds", json!(["x"]))), r#"invalid task id "x""#),
        (get(without("ttlMs")), "missing field `ttlMs`"),
        (get(without("taskId")), "missing field `taskId`"),
        (
            serde_json::from_value::<CreateTaskResult>(base())
                .unwrap_err()
                .to_string(),
            r#"CreateTaskResult requires resultType "task", found "complete""#,
        ),
        (
            serde_json::from_value::<AckResult>(json!({"resultType": "input_required"}))
                .unwrap_err()
                .to_string(),
            r#"resultType "complete", found "input_required""#,
        ),
        (
            serde_json::from_value::<TaskStatusNotificationParams>(with(
                "_meta",
                json!({"io.modelcontextprotocol/subscriptionId": {}}),
            ))
            .unwrap_err()
            .to_string(),
            "subscriptionId`: `id` must be a string or an integer, found an object",
        ),
        (
            serde_json::from_value::<ServerCapabilities>(json!({"extensions": []}))
                .unwrap_err()
                .to_string(),
            "invalid type: sequence, expected a map",
        ),
    ];
    for (got, needle) in cases {
        assert!(got.contains(needle), "want …{needle}…\n got  {got}");
    }
}

/// Truncations and single-byte substitutions of every fixture go through the
/// message classifier and the fixture's own type without a panic.
#[test]
fn no_truncation_or_byte_flip_of_any_fixture_panics() {
    const SUBSTITUTES: &[u8] = &[b'"', b'}', b'[', b'0', b'-', b'\\', 0xff, 0x00];
    let mut inputs = 0usize;
    for case in CASES {
        // Compact form: every byte matters, and the loop stays quick.
        let bytes = serde_json::to_vec(&value(case.file)).unwrap();
        let check = |input: &[u8]| {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let _ = JsonRpcMessage::parse(input);
                let _ = (case.parse)(input);
            }));
            assert!(
                outcome.is_ok(),
                "{}: panicked on {:?}",
                case.file,
                String::from_utf8_lossy(input)
            );
        };
        for len in 0..bytes.len() {
            check(&bytes[..len]);
            inputs += 1;
        }
        let mut flipped = bytes.clone();
        for i in 0..bytes.len() {
            for &b in SUBSTITUTES.iter().chain(std::iter::once(&(bytes[i] ^ 0x20))) {
                flipped[i] = b;
                check(&flipped);
                inputs += 1;
            }
            flipped[i] = bytes[i];
        }
    }
    assert!(inputs > 10_000, "only {inputs} inputs were tried");
}
