//! Wire interop with rmcp 3.11, the official Rust SDK.
//!
//! Both directions, for every message of the base tasks extension: what we
//! write parses with rmcp's `model` types and rmcp writes it back to the
//! same JSON (so it read every field), and what rmcp writes parses with ours
//! and means the same thing.
//!
//! Findings (also asserted below):
//! * rmcp rejects `"status": "paused"` (SEP-2669): its `TaskStatus` has no
//!   such variant, so a task, a `tasks/get` result or a `notifications/tasks`
//!   with a paused task fails to parse there. This is why a client that did
//!   not declare `pause` must never see `paused`.
//! * rmcp ignores and drops `parentTaskId` / `childTaskIds` (SEP-2268) and
//!   the `taskIds` filter of `subscriptions/listen`.
//! * rmcp's `CreateTaskResult` holds a plain `Task`, so it drops a terminal
//!   seed's `result` / `error` (the spec's failed and `isError` examples).
//! * rmcp reads `tasks/steer`, `tasks/pause`, `tasks/resume` as custom
//!   requests; it has no types for them.
//! * rmcp's `Task` accepts any task id string; ours takes only canonical
//!   UUIDs. rmcp's own `TaskManager` mints UUID v4 ids, so its tasks parse.

use std::collections::BTreeMap;

use rmcp::model as r;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use subtask::model as s;

const T: &str = "786512e2-9e0d-44bd-8f29-789f320fe840";
const C1: &str = "1c9a4f3e-5b2d-4e8f-9a6c-0d7e2b1f4a93";
const CREATED: &str = "2025-11-25T10:30:00Z";
const UPDATED: &str = "2025-11-25T10:40:00.125Z";

fn to_value(x: &impl Serialize) -> Value {
    serde_json::to_value(x).expect("serializes")
}

fn from_value<T: DeserializeOwned>(what: &str, v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what}: {e}\n  in {v}"))
}

fn tid() -> s::TaskId {
    T.parse().expect("canonical")
}

fn elicitation() -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Please enter your name.",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        }
    })
}

fn tool_result() -> Value {
    json!({"content": [{"type": "text", "text": "Hello, Luca!"}], "isError": false})
}

fn obj(v: Value) -> s::JsonObject {
    s::JsonObject::from_value(v).expect("an object")
}

fn our_task() -> s::Task {
    s::Task {
        task_id: tid(),
        status: s::TaskStatus::Working,
        status_message: Some("On it.".into()),
        created_at: CREATED.parse().unwrap(),
        last_updated_at: UPDATED.parse().unwrap(),
        ttl_ms: Some(60_000),
        poll_interval_ms: Some(5_000),
        parent_task_id: None,
        child_task_ids: Vec::new(),
    }
}

/// Our task in every base status (the statuses rmcp knows).
fn our_base_tasks() -> Vec<s::DetailedTask> {
    let payloads = [
        s::TaskPayload::Working,
        s::TaskPayload::InputRequired {
            input_requests: BTreeMap::from([("name".to_owned(), obj(elicitation()))]),
        },
        s::TaskPayload::Completed {
            result: obj(tool_result()),
        },
        s::TaskPayload::Failed {
            error: s::ErrorObject::new(s::ErrorCode::INTERNAL_ERROR, "API rate limit exceeded")
                .with_data(json!({"retryAfterMs": 1000})),
        },
        s::TaskPayload::Cancelled,
    ];
    let mut tasks: Vec<_> = payloads
        .into_iter()
        .map(|p| s::DetailedTask::new(our_task(), p))
        .collect();
    // And one without TTL or poll interval or message.
    let mut bare = our_task();
    bare.ttl_ms = None;
    bare.poll_interval_ms = None;
    bare.status_message = None;
    tasks.push(s::DetailedTask::new(bare, s::TaskPayload::Working));
    tasks
}

fn rmcp_task(status: r::TaskStatus) -> r::Task {
    r::Task::new(T, status, CREATED, UPDATED)
        .with_status_message("On it.")
        .with_ttl_ms(60_000)
        .with_poll_interval_ms(5_000)
}

/// rmcp's task in every status it has.
fn rmcp_tasks() -> Vec<r::DetailedTask> {
    let input: r::InputRequest =
        serde_json::from_value(elicitation()).expect("rmcp reads the spec's elicitation");
    let payloads = [
        r::TaskPayload::Working,
        r::TaskPayload::InputRequired {
            input_requests: BTreeMap::from([("name".to_owned(), input)]),
        },
        r::TaskPayload::Completed {
            result: tool_result().as_object().unwrap().clone(),
        },
        r::TaskPayload::Failed {
            error: json!({"code": -32603, "message": "API rate limit exceeded"})
                .as_object()
                .unwrap()
                .clone(),
        },
        r::TaskPayload::Cancelled,
    ];
    let mut tasks: Vec<_> = payloads
        .into_iter()
        .map(|p| r::DetailedTask::new(rmcp_task(r::TaskStatus::Working), p))
        .collect();
    tasks.push(r::DetailedTask::new(
        r::Task::new(T, r::TaskStatus::Working, CREATED, UPDATED),
        r::TaskPayload::Working,
    ));
    tasks
}

/// Ours and rmcp's task say the same thing, field by field.
fn assert_same_task(ours: &s::DetailedTask, theirs: &r::DetailedTask) {
    let (o, t) = (ours.task(), &theirs.task);
    assert_eq!(o.task_id.to_string(), t.task_id);
    assert_eq!(to_value(&o.status), to_value(&t.status));
    assert_eq!(o.status_message, t.status_message);
    assert_eq!(o.created_at.to_string(), t.created_at);
    assert_eq!(o.last_updated_at.to_string(), t.last_updated_at);
    assert_eq!(o.ttl_ms, t.ttl_ms);
    assert_eq!(o.poll_interval_ms, t.poll_interval_ms);
    match (ours.payload(), &theirs.payload) {
        (s::TaskPayload::Working, r::TaskPayload::Working)
        | (s::TaskPayload::Cancelled, r::TaskPayload::Cancelled) => {}
        (
            s::TaskPayload::InputRequired { input_requests: a },
            r::TaskPayload::InputRequired { input_requests: b },
        ) => {
            assert_eq!(to_value(a), to_value(b));
        }
        (s::TaskPayload::Completed { result: a }, r::TaskPayload::Completed { result: b }) => {
            assert_eq!(a.as_map(), b);
        }
        (s::TaskPayload::Failed { error: a }, r::TaskPayload::Failed { error: b }) => {
            assert_eq!(to_value(a), Value::Object(b.clone()));
        }
        (a, b) => panic!("payloads differ: {a:?} vs {b:?}"),
    }
}

// ---------------------------------------------------------------- ours → rmcp

#[test]
fn our_tasks_in_every_base_status_parse_with_rmcp_and_mean_the_same() {
    for ours in our_base_tasks() {
        let wire = to_value(&ours);
        let theirs: r::DetailedTask = from_value("rmcp DetailedTask", &wire);
        assert_same_task(&ours, &theirs);
        assert_eq!(to_value(&theirs), wire, "rmcp writes back what it read");

        let get = to_value(&s::GetTaskResult::new(ours.clone()));
        let theirs: r::GetTaskResult = from_value("rmcp GetTaskResult", &get);
        assert!(theirs.result_type.is_complete());
        assert_same_task(&ours, &theirs.task);
        assert_eq!(to_value(&theirs), get);

        let note = to_value(&s::TaskStatusNotificationParams::new(ours.clone()));
        let theirs: r::TaskStatusNotificationParams = from_value("rmcp TaskStatusNotificationParams", &note);
        assert_same_task(&ours, &theirs.task);
        assert_eq!(to_value(&theirs), note);
    }
}

#[test]
fn our_create_task_result_parses_with_rmcp() {
    let seed = s::DetailedTask::new(our_task(), s::TaskPayload::Working);
    let wire = to_value(&s::CreateTaskResult::new(seed.clone()));
    let theirs: r::CreateTaskResult = from_value("rmcp CreateTaskResult", &wire);
    assert!(theirs.result_type.is_task());
    assert_eq!(theirs.task.task_id, T);
    assert_eq!(to_value(&theirs), wire);

    // A terminal seed parses too, but rmcp keeps only the `Task` part.
    let failed = s::DetailedTask::new(
        our_task(),
        s::TaskPayload::Failed {
            error: s::ErrorObject::new(s::ErrorCode::INTERNAL_ERROR, "boom"),
        },
    );
    let wire = to_value(&s::CreateTaskResult::new(failed));
    let theirs: r::CreateTaskResult = from_value("rmcp CreateTaskResult", &wire);
    assert_eq!(to_value(&theirs.task.status), json!("failed"));
    assert!(
        to_value(&theirs).get("error").is_none(),
        "rmcp drops a CreateTaskResult's error"
    );
}

#[test]
fn our_ack_parses_with_rmcp() {
    let theirs: r::TaskAckResult = from_value("rmcp TaskAckResult", &to_value(&s::AckResult::new()));
    assert!(theirs.result_type.is_complete());
    let with_meta = s::AckResult {
        meta: Some(obj(json!({"io.modelcontextprotocol/subscriptionId": 1}))),
    };
    let wire = to_value(&with_meta);
    let theirs: r::TaskAckResult = from_value("rmcp TaskAckResult", &wire);
    assert_eq!(to_value(&theirs), wire);
}

#[test]
fn our_request_params_parse_with_rmcp() {
    let meta = s::RequestMeta::new(s::ClientCapabilities::with_tasks(s::TasksCapability::FULL));

    let mut get = s::GetTaskParams::new(tid());
    let wire = to_value(&get);
    let theirs: r::GetTaskParams = from_value("rmcp GetTaskParams", &wire);
    assert_eq!(theirs.task_id, T);
    get.meta = Some(meta.clone());
    let wire = to_value(&get);
    let theirs: r::GetTaskParams = from_value("rmcp GetTaskParams", &wire);
    let their_meta = theirs.meta.as_ref().expect("meta kept");
    assert!(
        their_meta
            .client_capabilities()
            .expect("caps read")
            .supports_tasks()
    );
    assert_eq!(
        their_meta.protocol_version().map(|v| v.to_string()),
        Some(s::PROTOCOL_VERSION.to_owned())
    );
    assert!(
        their_meta
            .missing_required_keys(&r::ProtocolVersion::V_2026_07_28)
            .is_empty()
    );
    assert_eq!(to_value(&theirs), wire);

    let responses = BTreeMap::from([(
        "name".to_owned(),
        obj(json!({"action": "accept", "content": {"input": "Luca"}})),
    )]);
    let update = s::UpdateTaskParams::new(tid(), responses);
    let wire = to_value(&update);
    let theirs: r::UpdateTaskParams = from_value("rmcp UpdateTaskParams", &wire);
    assert_eq!(theirs.task_id, T);
    assert_eq!(theirs.input_responses["name"]["content"]["input"], "Luca");
    assert_eq!(to_value(&theirs), wire);

    let cancel = s::CancelTaskParams {
        meta: Some(meta),
        task_id: T.into(),
    };
    let wire = to_value(&cancel);
    let theirs: r::CancelTaskParams = from_value("rmcp CancelTaskParams", &wire);
    assert_eq!(theirs.task_id, T);
    assert_eq!(to_value(&theirs), wire);
}

#[test]
fn our_request_messages_are_routed_by_rmcp_to_its_task_requests() {
    let meta = s::RequestMeta::new(s::ClientCapabilities::with_tasks(s::TasksCapability::BASE));
    let get = s::GetTaskParams {
        meta: Some(meta.clone()),
        task_id: T.into(),
    };
    let update = s::UpdateTaskParams {
        meta: Some(meta.clone()),
        task_id: T.into(),
        input_responses: BTreeMap::new(),
    };
    let cancel = s::CancelTaskParams {
        meta: Some(meta),
        task_id: T.into(),
    };
    let messages = [
        to_value(&s::JsonRpcRequest::new(3, s::TASKS_GET, get)),
        to_value(&s::JsonRpcRequest::new(4, s::TASKS_UPDATE, update)),
        to_value(&s::JsonRpcRequest::new("five", s::TASKS_CANCEL, cancel)),
    ];
    for wire in messages {
        let msg: r::ClientJsonRpcMessage = from_value("rmcp ClientJsonRpcMessage", &wire);
        let r::JsonRpcMessage::Request(req) = msg else {
            panic!("rmcp: not a request: {wire}")
        };
        assert_eq!(req.id.into_json_value(), wire["id"]);
        let task_id = match req.request {
            r::ClientRequest::GetTaskRequest(q) => q.params.task_id,
            r::ClientRequest::UpdateTaskRequest(q) => q.params.task_id,
            r::ClientRequest::CancelTaskRequest(q) => q.params.task_id,
            other => panic!("rmcp routed {wire} to {other:?}"),
        };
        assert_eq!(task_id, T);
    }

    // SEP-2669 methods have no rmcp types: they arrive as custom requests.
    for (method, params) in [
        (
            s::TASKS_STEER,
            to_value(&s::SteerTaskParams::new(tid(), "Skip the unit tests.")),
        ),
        (s::TASKS_PAUSE, to_value(&s::PauseTaskParams::new(tid()))),
        (s::TASKS_RESUME, to_value(&s::ResumeTaskParams::new(tid()))),
    ] {
        let wire = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
        let msg: r::ClientJsonRpcMessage = from_value("rmcp ClientJsonRpcMessage", &wire);
        let r::JsonRpcMessage::Request(req) = msg else {
            panic!("not a request")
        };
        assert!(
            matches!(req.request, r::ClientRequest::CustomRequest(ref c) if c.method == method),
            "{method}"
        );
    }
}

#[test]
fn our_result_and_notification_messages_are_routed_by_rmcp() {
    for task in our_base_tasks() {
        let wire = to_value(&s::JsonRpcResponse::new(3, s::GetTaskResult::new(task.clone())));
        let msg: r::ServerJsonRpcMessage = from_value("rmcp ServerJsonRpcMessage", &wire);
        let r::JsonRpcMessage::Response(resp) = msg else {
            panic!("not a response")
        };
        let r::ServerResult::GetTaskResult(get) = resp.result else {
            panic!("rmcp routed {wire} elsewhere")
        };
        assert_same_task(&task, &get.task);

        let wire = to_value(&s::JsonRpcNotification::new(
            s::NOTIFICATIONS_TASKS,
            s::TaskStatusNotificationParams::new(task.clone()),
        ));
        let msg: r::ServerJsonRpcMessage = from_value("rmcp ServerJsonRpcMessage", &wire);
        let r::JsonRpcMessage::Notification(note) = msg else {
            panic!("not a notification")
        };
        let r::ServerNotification::TaskStatusNotification(note) = note.notification else {
            panic!("rmcp routed {wire} elsewhere")
        };
        assert_same_task(&task, &note.params.task);
    }

    let seed = s::DetailedTask::new(our_task(), s::TaskPayload::Working);
    let wire = to_value(&s::JsonRpcResponse::new(1, s::CreateTaskResult::new(seed)));
    let msg: r::ServerJsonRpcMessage = from_value("rmcp ServerJsonRpcMessage", &wire);
    assert!(
        matches!(msg, r::JsonRpcMessage::Response(ref x) if matches!(x.result, r::ServerResult::CreateTaskResult(_)))
    );

    let wire = to_value(&s::JsonRpcResponse::new(6, s::AckResult::new()));
    let msg: r::ServerJsonRpcMessage = from_value("rmcp ServerJsonRpcMessage", &wire);
    assert!(
        matches!(msg, r::JsonRpcMessage::Response(ref x) if matches!(x.result, r::ServerResult::TaskAckResult(_)))
    );
}

#[test]
fn our_missing_capability_error_is_rmcps() {
    let ours = s::JsonRpcError::new(
        Some(s::RequestId::Number(1)),
        s::ErrorObject::tasks_extension_required(),
    );
    let wire = to_value(&ours);
    let theirs: r::JsonRpcError = from_value("rmcp JsonRpcError", &wire);
    let mut caps = r::ClientCapabilities::default();
    caps.extensions = Some(BTreeMap::from([(
        r::TASKS_EXTENSION_ID.to_owned(),
        r::JsonObject::new(),
    )]));
    assert_eq!(
        theirs.error,
        r::ErrorData::missing_required_client_capability(caps)
    );
    assert_eq!(to_value(&theirs), wire);
    let msg: r::ServerJsonRpcMessage = from_value("rmcp ServerJsonRpcMessage", &wire);
    assert!(matches!(msg, r::JsonRpcMessage::Error(_)));

    let not_found = to_value(&s::JsonRpcError::new(
        Some(s::RequestId::Number(70)),
        s::ErrorObject::task_not_found(),
    ));
    let theirs: r::JsonRpcError = from_value("rmcp JsonRpcError", &not_found);
    assert_eq!(theirs.error.code, r::ErrorCode::INVALID_PARAMS);

    // An error without an id (unreadable request).
    let anonymous = to_value(&s::JsonRpcError::new(
        None,
        s::ErrorObject::new(s::ErrorCode::PARSE_ERROR, "parse error: x"),
    ));
    let theirs: r::JsonRpcError = from_value("rmcp JsonRpcError", &anonymous);
    assert_eq!(theirs.id, None);
}

#[test]
fn our_capabilities_parse_with_rmcp() {
    let ours = s::ServerCapabilities {
        tools: Some(s::JsonObject::new()),
        extensions: Some(s::ExtensionCapabilities::with_tasks(s::TasksCapability::FULL)),
        ..Default::default()
    };
    let wire = to_value(&ours);
    let theirs: r::ServerCapabilities = from_value("rmcp ServerCapabilities", &wire);
    assert!(theirs.supports_tasks());
    assert_eq!(
        to_value(&theirs),
        wire,
        "rmcp keeps steer/pause as opaque settings"
    );

    let client = s::ClientCapabilities::with_tasks(s::TasksCapability {
        steer: true,
        pause: false,
    });
    let theirs: r::ClientCapabilities = from_value("rmcp ClientCapabilities", &to_value(&client));
    assert!(theirs.supports_tasks());
}

#[test]
fn extension_fields_are_ignored_by_rmcp_and_paused_is_rejected() {
    let mut task = our_task();
    task.parent_task_id = Some(C1.parse().unwrap());
    task.child_task_ids = vec![C1.parse().unwrap()];
    let ours = s::DetailedTask::new(task, s::TaskPayload::Working);
    let wire = to_value(&ours);
    let theirs: r::DetailedTask = from_value("rmcp DetailedTask", &wire);
    let mut expected = wire.clone();
    let map = expected.as_object_mut().unwrap();
    map.remove("parentTaskId");
    map.remove("childTaskIds");
    assert_eq!(to_value(&theirs), expected, "rmcp drops only the SEP-2268 links");

    let paused = s::DetailedTask::new(our_task(), s::TaskPayload::Paused);
    for (what, wire) in [
        ("DetailedTask", to_value(&paused)),
        ("GetTaskResult", to_value(&s::GetTaskResult::new(paused.clone()))),
    ] {
        let err = serde_json::from_value::<r::DetailedTask>(wire).expect_err(what);
        assert!(
            err.to_string().contains("unknown variant `paused`"),
            "{what}: {err}"
        );
    }
    let note = to_value(&s::TaskStatusNotificationParams::new(paused));
    assert!(serde_json::from_value::<r::TaskStatusNotificationParams>(note).is_err());

    let listen = s::SubscriptionsListenParams {
        meta: Some(s::RequestMeta::new(s::ClientCapabilities::with_tasks(
            s::TasksCapability::BASE,
        ))),
        notifications: s::NotificationFilter::tasks([tid()]),
    };
    let theirs: r::SubscriptionsListenRequestParams = from_value("rmcp listen params", &to_value(&listen));
    assert!(
        to_value(&theirs.notifications).get("taskIds").is_none(),
        "rmcp drops the taskIds filter"
    );
}

// ---------------------------------------------------------------- rmcp → ours

#[test]
fn rmcp_tasks_in_every_status_parse_with_ours_and_mean_the_same() {
    for theirs in rmcp_tasks() {
        let wire = to_value(&theirs);
        let ours: s::DetailedTask = from_value("our DetailedTask", &wire);
        assert_same_task(&ours, &theirs);
        assert_eq!(to_value(&ours), wire, "we write back what we read");

        let get = to_value(&r::GetTaskResult::new(theirs.clone()));
        let ours: s::GetTaskResult = from_value("our GetTaskResult", &get);
        assert_same_task(&ours.task, &theirs);
        assert_eq!(to_value(&ours), get);

        let note = to_value(&r::TaskStatusNotificationParams::new(theirs.clone()));
        let ours: s::TaskStatusNotificationParams = from_value("our TaskStatusNotificationParams", &note);
        assert_same_task(&ours.task, &theirs);
        assert_eq!(to_value(&ours), note);
    }
}

#[test]
fn rmcp_results_and_params_parse_with_ours() {
    let wire = to_value(&r::CreateTaskResult::new(rmcp_task(r::TaskStatus::Working)));
    let ours: s::CreateTaskResult = from_value("our CreateTaskResult", &wire);
    assert_eq!(ours.task.task().task_id, tid());
    assert_eq!(ours.task.status(), s::TaskStatus::Working);
    assert_eq!(to_value(&ours), wire);

    let wire = to_value(&r::TaskAckResult::new());
    let ours: s::AckResult = from_value("our AckResult", &wire);
    assert_eq!(to_value(&ours), wire);

    let wire = to_value(&r::GetTaskParams::new(T));
    let ours: s::GetTaskParams = from_value("our GetTaskParams", &wire);
    assert_eq!(ours.task_id(), Some(tid()));
    assert_eq!(to_value(&ours), wire);

    let wire = to_value(&r::CancelTaskParams::new(T));
    let ours: s::CancelTaskParams = from_value("our CancelTaskParams", &wire);
    assert_eq!(ours.task_id(), Some(tid()));

    let responses = BTreeMap::from([(
        "name".to_owned(),
        json!({"action": "accept", "content": {"input": "Luca"}}),
    )]);
    let wire = to_value(&r::UpdateTaskParams::new(T, responses));
    let ours: s::UpdateTaskParams = from_value("our UpdateTaskParams", &wire);
    assert_eq!(ours.task_id(), Some(tid()));
    assert_eq!(ours.input_responses["name"]["action"], "accept");
    assert_eq!(to_value(&ours), wire);

    // rmcp's per-request meta declaring the tasks extension.
    let mut caps = r::ClientCapabilities::default();
    caps.extensions = Some(BTreeMap::from([(
        r::TASKS_EXTENSION_ID.to_owned(),
        r::JsonObject::new(),
    )]));
    let meta = r::RequestMetaObject::with_client_context(
        r::ProtocolVersion::V_2026_07_28,
        r::Implementation::new("rmcp-client", "3.11.0"),
        caps,
    );
    let mut params = r::GetTaskParams::new(T);
    params.meta = Some(meta);
    let wire = to_value(&params);
    let ours: s::GetTaskParams = from_value("our GetTaskParams", &wire);
    let our_meta = ours.meta.as_ref().expect("meta read");
    assert_eq!(
        s::RequestParams::tasks_capability(&ours),
        Some(s::TasksCapability::BASE)
    );
    assert!(our_meta.missing_required_keys().is_empty());
    assert_eq!(our_meta.client_info.as_ref().unwrap()["name"], "rmcp-client");
    assert_eq!(to_value(&ours), wire);

    let mut server = r::ServerCapabilities::default();
    server.extensions = Some(BTreeMap::from([(
        r::TASKS_EXTENSION_ID.to_owned(),
        r::JsonObject::new(),
    )]));
    let ours: s::ServerCapabilities = from_value("our ServerCapabilities", &to_value(&server));
    assert_eq!(ours.tasks(), Some(s::TasksCapability::BASE));
}

#[test]
fn rmcp_messages_are_classified_by_ours() {
    let get = r::ClientJsonRpcMessage::request(
        r::ClientRequest::GetTaskRequest(r::GetTaskRequest::new(r::GetTaskParams::new(T))),
        r::RequestId::Number(3),
    );
    let bytes = serde_json::to_vec(&get).unwrap();
    let s::JsonRpcMessage::Request(req) = s::JsonRpcMessage::parse(&bytes).unwrap() else {
        panic!("a request")
    };
    assert_eq!(
        (req.id.clone(), req.method.as_str()),
        (s::RequestId::Number(3), s::TASKS_GET)
    );
    assert_eq!(
        req.params_as::<s::GetTaskParams>().unwrap().task_id(),
        Some(tid())
    );

    let cancel = r::ClientJsonRpcMessage::request(
        r::ClientRequest::CancelTaskRequest(r::CancelTaskRequest::new(r::CancelTaskParams::new(T))),
        r::RequestId::String("c".into()),
    );
    let bytes = serde_json::to_vec(&cancel).unwrap();
    let s::JsonRpcMessage::Request(req) = s::JsonRpcMessage::parse(&bytes).unwrap() else {
        panic!("a request")
    };
    assert_eq!(s::TaskMethod::from_name(&req.method), Some(s::TaskMethod::Cancel));
    assert_eq!(req.id, s::RequestId::from("c"));

    for task in rmcp_tasks() {
        let resp = r::ServerJsonRpcMessage::response(
            r::ServerResult::GetTaskResult(r::GetTaskResult::new(task.clone())),
            r::RequestId::Number(4),
        );
        let bytes = serde_json::to_vec(&resp).unwrap();
        let s::JsonRpcMessage::Response(resp) = s::JsonRpcMessage::parse(&bytes).unwrap() else {
            panic!("a response")
        };
        let ours: s::GetTaskResult = from_value("our GetTaskResult", &resp.result.to_value());
        assert_same_task(&ours.task, &task);

        let note = r::ServerJsonRpcMessage::notification(r::ServerNotification::TaskStatusNotification(
            r::TaskStatusNotification::new(r::TaskStatusNotificationParams::new(task.clone())),
        ));
        let bytes = serde_json::to_vec(&note).unwrap();
        let s::JsonRpcMessage::Notification(note) = s::JsonRpcMessage::parse(&bytes).unwrap() else {
            panic!("a notification")
        };
        assert_eq!(note.method, s::NOTIFICATIONS_TASKS);
        let params: s::TaskStatusNotificationParams = from_value(
            "our TaskStatusNotificationParams",
            &note.params.unwrap().to_value(),
        );
        assert_same_task(&params.task, &task);
    }

    let mut caps = r::ClientCapabilities::default();
    caps.extensions = Some(BTreeMap::from([(
        r::TASKS_EXTENSION_ID.to_owned(),
        r::JsonObject::new(),
    )]));
    let err = r::ServerJsonRpcMessage::error(
        r::ErrorData::missing_required_client_capability(caps),
        Some(r::RequestId::Number(12)),
    );
    let bytes = serde_json::to_vec(&err).unwrap();
    let s::JsonRpcMessage::Error(e) = s::JsonRpcMessage::parse(&bytes).unwrap() else {
        panic!("an error")
    };
    assert_eq!(e.id, Some(s::RequestId::Number(12)));
    assert_eq!(e.error, s::ErrorObject::tasks_extension_required());

    let anonymous = r::ServerJsonRpcMessage::error(r::ErrorData::parse_error("bad", None), None);
    let bytes = serde_json::to_vec(&anonymous).unwrap();
    let s::JsonRpcMessage::Error(e) = s::JsonRpcMessage::parse(&bytes).unwrap() else {
        panic!("an error")
    };
    assert_eq!((e.id, e.error.code), (None, s::ErrorCode::PARSE_ERROR));
}

#[test]
fn non_uuid_task_ids_from_other_peers_are_refused_by_our_task_type() {
    // rmcp's model allows any string (its manager mints UUIDs); ours does not.
    let theirs = r::DetailedTask::new(
        r::Task::new("task-1", r::TaskStatus::Working, CREATED, UPDATED),
        r::TaskPayload::Working,
    );
    let err = serde_json::from_value::<s::DetailedTask>(to_value(&theirs)).unwrap_err();
    assert!(err.to_string().contains("invalid task id \"task-1\""), "{err}");
    // As request params they parse, and read as an unknown task.
    let ours: s::GetTaskParams = from_value("our GetTaskParams", &to_value(&r::GetTaskParams::new("task-1")));
    assert_eq!(ours.task_id(), None);
}
