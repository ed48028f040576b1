//! Unit tests: the full (state × command) table, plus the rules that need a
//! little tree around them.

use super::*;
use crate::model::{ErrorCode, ErrorObject, InputResponses, JsonObject, TaskId, TaskStatus, Timestamp};

const T0: Timestamp = Timestamp::from_millis(1_000_000);

fn obj(v: serde_json::Value) -> JsonObject {
    JsonObject::from_value(v).unwrap()
}

fn ok_result() -> HandlerOutcome {
    HandlerOutcome::Returned(obj(serde_json::json!({"content": [], "isError": false})))
}

fn rpc_error() -> HandlerOutcome {
    HandlerOutcome::Errored(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "boom"))
}

/// The states of the table. Each builder returns the forest and the task
/// under test (which always has a running child where the state needs one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    Running,
    Completing,
    PausePending,
    Cancelling,
    InputRequired,
    Paused,
    PausedFromInput,
    Completed,
    Failed,
    Cancelled,
}

const STATES: [State; 11] = [
    State::Queued,
    State::Running,
    State::Completing,
    State::PausePending,
    State::Cancelling,
    State::InputRequired,
    State::Paused,
    State::PausedFromInput,
    State::Completed,
    State::Failed,
    State::Cancelled,
];

fn build(state: State) -> (Forest, TaskId) {
    let mut f = Forest::default();
    let id = f
        .create_root(
            T0,
            RootOptions {
                ttl_ms: Some(60_000),
                poll_interval_ms: Some(500),
            },
        )
        .unwrap();
    let start = |f: &mut Forest| f.start(T0, id).unwrap();
    match state {
        State::Queued => {}
        State::Running => start(&mut f),
        State::Completing => {
            start(&mut f);
            let c = f.create_child(T0, id, ChildOptions::default()).unwrap();
            f.start(T0, c).unwrap();
            f.finish(T0, id, ok_result()).unwrap();
        }
        State::PausePending => {
            start(&mut f);
            assert_eq!(f.pause(T0, id).unwrap(), PauseOutcome::Pending);
        }
        State::Cancelling => {
            start(&mut f);
            assert_eq!(f.cancel(T0, id).unwrap(), CancelOutcome::Accepted);
        }
        State::InputRequired => {
            start(&mut f);
            f.request_input(
                T0,
                id,
                "k1".into(),
                obj(serde_json::json!({"method": "elicitation/create"})),
            )
            .unwrap();
        }
        State::Paused => {
            start(&mut f);
            assert_eq!(f.pause(T0, id).unwrap(), PauseOutcome::Pending);
            assert_eq!(f.reach_safe_point(T0, id).unwrap(), SafePoint::Park);
        }
        State::PausedFromInput => {
            start(&mut f);
            f.request_input(T0, id, "k1".into(), JsonObject::new()).unwrap();
            assert_eq!(f.pause(T0, id).unwrap(), PauseOutcome::Paused);
        }
        State::Completed => {
            start(&mut f);
            f.finish(T0, id, ok_result()).unwrap();
        }
        State::Failed => {
            start(&mut f);
            f.finish(T0, id, rpc_error()).unwrap();
        }
        State::Cancelled => {
            start(&mut f);
            let _ = f.cancel(T0, id).unwrap();
            f.finish(T0, id, ok_result()).unwrap();
        }
    }
    f.check_invariants().unwrap();
    while f.poll_effect().is_some() {}
    (f, id)
}

#[derive(Debug, Clone, Copy)]
enum Cmd {
    Start,
    Message,
    RequestInput,
    RequestUsedKey,
    Withdraw,
    Answer,
    Steer,
    TakeSteers,
    SafePoint,
    Pause,
    PauseSelf,
    Resume,
    Cancel,
    FinishOk,
    FinishErr,
    CreateChild,
    SetTtl,
    DeleteTree,
}

const CMDS: [Cmd; 18] = [
    Cmd::Start,
    Cmd::Message,
    Cmd::RequestInput,
    Cmd::RequestUsedKey,
    Cmd::Withdraw,
    Cmd::Answer,
    Cmd::Steer,
    Cmd::TakeSteers,
    Cmd::SafePoint,
    Cmd::Pause,
    Cmd::PauseSelf,
    Cmd::Resume,
    Cmd::Cancel,
    Cmd::FinishOk,
    Cmd::FinishErr,
    Cmd::CreateChild,
    Cmd::SetTtl,
    Cmd::DeleteTree,
];

/// Applies a command; returns a short verdict: `ok` (+ detail) or the error variant.
fn apply(f: &mut Forest, id: TaskId, cmd: Cmd) -> String {
    fn err(e: TransitionError) -> String {
        let s = format!("{e:?}");
        let name: String = s.chars().take_while(|c| c.is_alphanumeric()).collect();
        format!("E:{name}")
    }
    let t = T0.saturating_add(10);
    match cmd {
        Cmd::Start => f.start(t, id).map(|()| "ok".into()).unwrap_or_else(err),
        Cmd::Message => f
            .set_status_message(t, id, Some("m".into()))
            .map(|()| "ok".into())
            .unwrap_or_else(err),
        Cmd::RequestInput => f
            .request_input(t, id, "fresh".into(), JsonObject::new())
            .map(|()| "ok".into())
            .unwrap_or_else(err),
        Cmd::RequestUsedKey => f
            .request_input(t, id, "k1".into(), JsonObject::new())
            .map(|()| "ok".into())
            .unwrap_or_else(err),
        Cmd::Withdraw => f
            .withdraw_input(t, id, "k1")
            .map(|b| format!("ok:{b}"))
            .unwrap_or_else(err),
        Cmd::Answer => {
            let mut r = InputResponses::new();
            r.insert("k1".into(), obj(serde_json::json!({"action": "accept"})));
            r.insert("never".into(), JsonObject::new());
            f.answer_input(t, id, r)
                .map(|keys| format!("ok:{}", keys.len()))
                .unwrap_or_else(err)
        }
        Cmd::Steer => f
            .steer(t, id, "focus".into())
            .map(|()| "ok".into())
            .unwrap_or_else(err),
        Cmd::TakeSteers => f
            .take_steers(t, id)
            .map(|s| format!("ok:{}", s.len()))
            .unwrap_or_else(err),
        Cmd::SafePoint => f
            .reach_safe_point(t, id)
            .map(|s| match s {
                SafePoint::Continue(_) => "ok:continue".into(),
                SafePoint::Park => "ok:park".into(),
                SafePoint::Stop => "ok:stop".into(),
            })
            .unwrap_or_else(err),
        Cmd::Pause => f.pause(t, id).map(|o| format!("ok:{o:?}")).unwrap_or_else(err),
        Cmd::PauseSelf => f
            .pause_self(t, id, Some("hold".into()))
            .map(|()| "ok".into())
            .unwrap_or_else(err),
        Cmd::Resume => f.resume(t, id).map(|()| "ok".into()).unwrap_or_else(err),
        Cmd::Cancel => f.cancel(t, id).map(|o| format!("ok:{o:?}")).unwrap_or_else(err),
        Cmd::FinishOk => f
            .finish(t, id, ok_result())
            .map(|()| "ok".into())
            .unwrap_or_else(err),
        Cmd::FinishErr => f
            .finish(t, id, rpc_error())
            .map(|()| "ok".into())
            .unwrap_or_else(err),
        Cmd::CreateChild => f
            .create_child(t, id, ChildOptions::default())
            .map(|_| "ok".into())
            .unwrap_or_else(err),
        Cmd::SetTtl => f
            .set_ttl(t, id, Some(1_000))
            .map(|()| "ok".into())
            .unwrap_or_else(err),
        Cmd::DeleteTree => f.delete_tree(t, id).map(|()| "ok".into()).unwrap_or_else(err),
    }
}

/// The whole table: `(state, command) -> "verdict -> resulting wire status"`.
/// Rows are states, columns follow `CMDS`.
fn expected(state: State) -> [&'static str; 18] {
    use State::*;
    match state {
        Queued => [
            "ok -> working",
            "ok -> working",
            "E:NotStarted -> working",
            "E:NotStarted -> working",
            "ok:false -> working",
            "ok:0 -> working",
            "ok -> working",
            "E:NotStarted -> working",
            "E:NotStarted -> working",
            "ok:Paused -> paused",
            "E:NotStarted -> working",
            "E:NotPaused -> working",
            "ok:Accepted -> cancelled",
            "E:NotStarted -> working",
            "E:NotStarted -> working",
            "E:NotStarted -> working",
            "ok -> working",
            "E:TreeNotTerminal -> working",
        ],
        Running => [
            "E:AlreadyStarted -> working",
            "ok -> working",
            "ok -> input_required",
            "ok -> input_required",
            "ok:false -> working",
            "ok:0 -> working",
            "ok -> working",
            "ok:0 -> working",
            "ok:continue -> working",
            "ok:Pending -> working",
            "ok -> paused",
            "E:NotPaused -> working",
            "ok:Accepted -> working",
            "ok -> completed",
            "ok -> failed",
            "ok -> working",
            "ok -> working",
            "E:TreeNotTerminal -> working",
        ],
        Completing => [
            "E:AlreadyStarted -> working",
            "ok -> working",
            "E:HandlerFinished -> working",
            "E:HandlerFinished -> working",
            "ok:false -> working",
            "ok:0 -> working",
            "E:HandlerFinished -> working",
            "E:HandlerFinished -> working",
            "E:HandlerFinished -> working",
            "ok:Paused -> paused",
            "E:HandlerFinished -> working",
            "E:NotPaused -> working",
            "ok:Accepted -> working",
            "E:HandlerFinished -> working",
            "E:HandlerFinished -> working",
            "E:HandlerFinished -> working",
            "ok -> working",
            "E:TreeNotTerminal -> working",
        ],
        PausePending => [
            "E:AlreadyStarted -> working",
            "ok -> working",
            "ok -> paused",
            "ok -> paused",
            "ok:false -> working",
            "ok:0 -> working",
            "ok -> working",
            "ok:0 -> working",
            "ok:park -> paused",
            "ok:Pending -> working",
            "ok -> paused",
            "E:NotPaused -> working",
            "ok:Accepted -> working",
            "ok -> completed",
            "ok -> failed",
            "ok -> working",
            "ok -> working",
            "E:TreeNotTerminal -> working",
        ],
        Cancelling => [
            "E:AlreadyStarted -> working",
            "ok -> working",
            "E:WindingDown -> working",
            "E:WindingDown -> working",
            "ok:false -> working",
            "ok:0 -> working",
            "E:WindingDown -> working",
            "ok:0 -> working",
            "ok:stop -> working",
            "ok:Unchanged -> working",
            "E:WindingDown -> working",
            "E:NotPaused -> working",
            "ok:AlreadyEnding -> working",
            "ok -> cancelled",
            "ok -> cancelled",
            "E:WindingDown -> working",
            "ok -> working",
            "E:TreeNotTerminal -> working",
        ],
        InputRequired => [
            "E:AlreadyStarted -> input_required",
            "ok -> input_required",
            "ok -> input_required",
            "E:DuplicateInputKey -> input_required",
            "ok:true -> working",
            "ok:1 -> working",
            "ok -> input_required",
            "ok:0 -> input_required",
            "ok:continue -> input_required",
            "ok:Paused -> paused",
            "ok -> paused",
            "E:NotPaused -> input_required",
            "ok:Accepted -> working",
            "ok -> completed",
            "ok -> failed",
            "ok -> input_required",
            "ok -> input_required",
            "E:TreeNotTerminal -> input_required",
        ],
        Paused => [
            "E:AlreadyStarted -> paused",
            "ok -> paused",
            "ok -> paused",
            "ok -> paused",
            "ok:false -> paused",
            "E:Paused -> paused",
            "ok -> paused",
            "ok:0 -> paused",
            "ok:park -> paused",
            "E:AlreadyPaused -> paused",
            "E:AlreadyPaused -> paused",
            "ok -> working",
            "ok:Accepted -> working",
            "ok -> completed",
            "ok -> failed",
            "ok -> paused",
            "ok -> paused",
            "E:TreeNotTerminal -> paused",
        ],
        PausedFromInput => [
            "E:AlreadyStarted -> paused",
            "ok -> paused",
            "ok -> paused",
            "E:DuplicateInputKey -> paused",
            "ok:true -> paused",
            "E:Paused -> paused",
            "ok -> paused",
            "ok:0 -> paused",
            "ok:park -> paused",
            "E:AlreadyPaused -> paused",
            "E:AlreadyPaused -> paused",
            "ok -> input_required",
            "ok:Accepted -> working",
            "ok -> completed",
            "ok -> failed",
            "ok -> paused",
            "ok -> paused",
            "E:TreeNotTerminal -> paused",
        ],
        Completed | Failed | Cancelled => {
            let s = match state {
                Completed => "completed",
                Failed => "failed",
                _ => "cancelled",
            };
            let t = |v: &'static str| -> &'static str {
                // Leak once per test run: tiny, and keeps the table literal.
                Box::leak(format!("{v} -> {s}").into_boxed_str())
            };
            [
                t("E:Terminal"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("ok:false"),
                t("ok:0"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("ok:AlreadyTerminal"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("E:Terminal"),
                t("ok"),
                // Deleting a terminal tree removes it: shown as "gone".
                "ok -> gone",
            ]
        }
    }
}

#[test]
fn every_state_and_command_matches_the_lifecycle_table() {
    let mut mismatches = Vec::new();
    for state in STATES {
        let want = expected(state);
        for (i, cmd) in CMDS.iter().enumerate() {
            let (mut f, id) = build(state);
            let before = f.snapshot(id, ClientView::PAUSE_AWARE);
            let verdict = apply(&mut f, id, *cmd);
            if let Err(v) = f.check_invariants() {
                mismatches.push(format!("{state:?} x {cmd:?}: invariant broken: {v}"));
            }
            let status = f.task(id).map_or("gone".to_owned(), |r| r.status().to_string());
            let got = format!("{verdict} -> {status}");
            if got != want[i] {
                mismatches.push(format!(
                    "{state:?} x {cmd:?}: expected `{}`, got `{got}`",
                    want[i]
                ));
            }
            // A rejected command changes nothing and emits nothing.
            if verdict.starts_with("E:") {
                assert_eq!(
                    f.snapshot(id, ClientView::PAUSE_AWARE),
                    before,
                    "{state:?} x {cmd:?} mutated"
                );
                assert_eq!(f.poll_effect(), None, "{state:?} x {cmd:?} emitted an effect");
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

fn running_root(f: &mut Forest, ttl: Option<u64>) -> TaskId {
    let id = f
        .create_root(
            T0,
            RootOptions {
                ttl_ms: ttl,
                poll_interval_ms: None,
            },
        )
        .unwrap();
    f.start(T0, id).unwrap();
    id
}

fn running_child(f: &mut Forest, parent: TaskId, opts: ChildOptions) -> TaskId {
    let id = f.create_child(T0, parent, opts).unwrap();
    f.start(T0, id).unwrap();
    id
}

fn terminal_order(f: &mut Forest) -> Vec<TaskId> {
    let mut out = Vec::new();
    while let Some(e) = f.poll_effect() {
        if let Effect::Changed { id, to, .. } = e
            && to.is_terminal()
        {
            out.push(id);
        }
    }
    out
}

#[test]
fn cancel_of_parent_reaches_grandchildren_first() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    let child = running_child(&mut f, root, ChildOptions::default());
    let grandchild = running_child(&mut f, child, ChildOptions::default());
    while f.poll_effect().is_some() {}
    assert_eq!(f.cancel(T0, root).unwrap(), CancelOutcome::Accepted);
    let cancels: Vec<_> = f
        .drain_effects()
        .filter_map(|e| match e {
            Effect::CancelHandler { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(cancels, vec![grandchild, child, root]);
    // Handlers honour the cancel in any order; terminal order is leaves first.
    f.finish(T0, root, ok_result()).unwrap();
    f.finish(T0, child, ok_result()).unwrap();
    assert_eq!(f.task(root).unwrap().status(), TaskStatus::Working);
    f.finish(T0, grandchild, ok_result()).unwrap();
    assert_eq!(terminal_order(&mut f), vec![grandchild, child, root]);
    for id in [root, child, grandchild] {
        assert_eq!(f.task(id).unwrap().status(), TaskStatus::Cancelled);
    }
}

#[test]
fn child_ttl_is_clamped_and_expiry_fails_children_first() {
    let mut f = Forest::default();
    let root = running_root(&mut f, Some(10_000));
    let child = running_child(
        &mut f,
        root,
        ChildOptions {
            ttl_ms: Some(50_000),
            ..Default::default()
        },
    );
    let short = running_child(
        &mut f,
        root,
        ChildOptions {
            ttl_ms: Some(1_000),
            ..Default::default()
        },
    );
    assert_eq!(f.task(child).unwrap().ttl_ms(), Some(10_000));
    assert_eq!(f.next_deadline(), Some(T0.saturating_add(1_000)));
    f.handle_timeout(T0.saturating_add(1_000));
    // The short child failed early; it is still retrievable.
    assert_eq!(f.task(short).unwrap().status(), TaskStatus::Working);
    f.finish(T0.saturating_add(1_001), short, ok_result()).unwrap();
    let snap = f.snapshot(short, ClientView::BASE).unwrap();
    assert_eq!(snap.status(), TaskStatus::Failed);
    while f.poll_effect().is_some() {}
    f.handle_timeout(T0.saturating_add(10_000));
    f.finish(T0.saturating_add(10_001), root, ok_result()).unwrap();
    f.finish(T0.saturating_add(10_002), child, ok_result()).unwrap();
    assert_eq!(terminal_order(&mut f), vec![child, root]);
    assert_eq!(f.task(root).unwrap().status(), TaskStatus::Failed);
    // The tree is deleted whole after the grace.
    let delete_at = T0.saturating_add(10_000 + f.config().deletion_grace_ms);
    assert_eq!(f.next_deadline(), Some(delete_at));
    f.handle_timeout(delete_at);
    assert!(f.is_empty());
    assert!(
        matches!(f.poll_effect(), Some(Effect::TreeDeleted { ids, .. }) if ids == vec![child, short, root])
    );
}

#[test]
fn parent_that_returns_early_waits_for_its_children() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    let a = running_child(&mut f, root, ChildOptions::default());
    f.finish(T0, root, ok_result()).unwrap();
    let msg = f
        .snapshot(root, ClientView::BASE)
        .unwrap()
        .task()
        .status_message
        .clone()
        .unwrap();
    assert!(msg.contains("waiting for 1 of 1 subtasks"), "{msg}");
    f.finish(T0, a, rpc_error()).unwrap();
    // Supervise (default): a failed child does not fail the parent.
    assert_eq!(f.task(root).unwrap().status(), TaskStatus::Completed);
}

#[test]
fn fail_fast_child_cancels_siblings_and_fails_parent() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    let ff = running_child(
        &mut f,
        root,
        ChildOptions {
            fail_fast: true,
            ..Default::default()
        },
    );
    let sib = running_child(&mut f, root, ChildOptions::default());
    f.finish(T0, ff, rpc_error()).unwrap();
    assert!(f.task(sib).unwrap().is_cancel_requested());
    f.finish(T0, sib, ok_result()).unwrap();
    f.finish(T0, root, ok_result()).unwrap();
    assert_eq!(f.task(sib).unwrap().status(), TaskStatus::Cancelled);
    let snap = f.snapshot(root, ClientView::BASE).unwrap();
    let TaskPayloadRef::Failed(e) = payload(&snap) else {
        panic!("{snap:?}")
    };
    assert!(
        e.message.contains(&format!("subtask {ff} failed: boom")),
        "{}",
        e.message
    );
}

enum TaskPayloadRef<'a> {
    Failed(&'a ErrorObject),
    Other,
}

fn payload(t: &crate::model::DetailedTask) -> TaskPayloadRef<'_> {
    match t.payload() {
        crate::model::TaskPayload::Failed { error } => TaskPayloadRef::Failed(error),
        _ => TaskPayloadRef::Other,
    }
}

#[test]
fn handler_error_with_live_children_cancels_them_first() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    let c = running_child(&mut f, root, ChildOptions::default());
    f.finish(T0, root, rpc_error()).unwrap();
    assert!(f.task(c).unwrap().is_cancel_requested());
    assert_eq!(f.task(root).unwrap().status(), TaskStatus::Working);
    f.finish(T0, c, ok_result()).unwrap();
    assert_eq!(f.task(c).unwrap().status(), TaskStatus::Cancelled);
    assert_eq!(f.task(root).unwrap().status(), TaskStatus::Failed);
    assert!(
        matches!(payload(&f.snapshot(root, ClientView::BASE).unwrap()), TaskPayloadRef::Failed(e) if e.message == "boom")
    );
}

#[test]
fn pause_of_parent_parks_subtree_and_resume_restores_input_required() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    let asking = running_child(&mut f, root, ChildOptions::default());
    let busy = running_child(&mut f, root, ChildOptions::default());
    f.request_input(T0, asking, "q".into(), JsonObject::new())
        .unwrap();
    f.steer(T0, busy, "one".into()).unwrap();
    assert_eq!(f.pause(T0, root).unwrap(), PauseOutcome::Pending);
    assert_eq!(f.task(asking).unwrap().status(), TaskStatus::Paused);
    assert_eq!(f.task(busy).unwrap().status(), TaskStatus::Working);
    f.steer(T0, busy, "two".into()).unwrap();
    assert_eq!(f.reach_safe_point(T0, busy).unwrap(), SafePoint::Park);
    assert_eq!(f.reach_safe_point(T0, root).unwrap(), SafePoint::Park);
    // A paused task does not take tasks/update.
    let mut r = InputResponses::new();
    r.insert("q".into(), JsonObject::new());
    assert_eq!(
        f.answer_input(T0, asking, r.clone()),
        Err(TransitionError::Paused(asking))
    );
    // Base clients never see `paused`.
    let base = f.snapshot(busy, ClientView::BASE).unwrap();
    assert_eq!(base.status(), TaskStatus::Working);
    assert!(base.task().status_message.as_deref().unwrap().contains("paused"));
    while f.poll_effect().is_some() {}
    f.resume(T0, root).unwrap();
    let woken: Vec<_> = f
        .drain_effects()
        .filter_map(|e| match e {
            Effect::WakeHandler { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(woken.len(), 3);
    let snap = f.snapshot(asking, ClientView::PAUSE_AWARE).unwrap();
    assert_eq!(snap.status(), TaskStatus::InputRequired);
    assert!(
        matches!(snap.payload(), crate::model::TaskPayload::InputRequired { input_requests } if input_requests.contains_key("q"))
    );
    assert_eq!(
        f.reach_safe_point(T0, busy).unwrap(),
        SafePoint::Continue(vec!["one".into(), "two".into()])
    );
    assert_eq!(f.answer_input(T0, asking, r).unwrap(), vec!["q".to_owned()]);
    assert_eq!(f.task(asking).unwrap().status(), TaskStatus::Working);
}

#[test]
fn descendant_paused_on_its_own_stays_paused_after_ancestor_resumes() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    let child = running_child(&mut f, root, ChildOptions::default());
    f.request_input(T0, child, "x".into(), JsonObject::new()).unwrap();
    assert_eq!(f.pause(T0, child).unwrap(), PauseOutcome::Paused);
    f.request_input(T0, root, "y".into(), JsonObject::new()).unwrap();
    assert_eq!(f.pause(T0, root).unwrap(), PauseOutcome::Paused);
    f.resume(T0, root).unwrap();
    assert_eq!(f.task(root).unwrap().status(), TaskStatus::InputRequired);
    assert_eq!(f.task(child).unwrap().status(), TaskStatus::Paused);
    // Pausing a child alone does not pause its parent.
    assert_eq!(f.resume(T0, child), Ok(()));
}

#[test]
fn cancel_while_paused_takes_effect_immediately() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    let _ = f.pause(T0, root).unwrap();
    assert_eq!(f.reach_safe_point(T0, root).unwrap(), SafePoint::Park);
    while f.poll_effect().is_some() {}
    let _ = f.cancel(T0, root).unwrap();
    assert!(
        f.drain_effects()
            .any(|e| matches!(e, Effect::CancelHandler { id, .. } if id == root))
    );
    assert_eq!(f.reach_safe_point(T0, root).unwrap(), SafePoint::Stop);
}

#[test]
fn steers_are_delivered_in_order_once_and_rejected_after_the_end() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    for m in ["a", "b", "c"] {
        f.steer(T0, root, m.into()).unwrap();
    }
    assert_eq!(f.take_steers(T0, root).unwrap(), vec!["a", "b", "c"]);
    assert_eq!(f.reach_safe_point(T0, root).unwrap(), SafePoint::Continue(vec![]));
    f.finish(T0, root, ok_result()).unwrap();
    assert!(matches!(
        f.steer(T0, root, "late".into()),
        Err(TransitionError::Terminal { .. })
    ));
}

#[test]
fn input_keys_are_unique_over_a_tasks_lifetime() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    f.request_input(T0, root, "k".into(), JsonObject::new()).unwrap();
    let mut r = InputResponses::new();
    r.insert("k".into(), JsonObject::new());
    assert_eq!(f.answer_input(T0, root, r.clone()).unwrap(), vec!["k".to_owned()]);
    // Answered keys are ignored and can never be reissued.
    assert_eq!(f.answer_input(T0, root, r).unwrap(), Vec::<String>::new());
    assert!(matches!(
        f.request_input(T0, root, "k".into(), JsonObject::new()),
        Err(TransitionError::DuplicateInputKey { .. })
    ));
}

#[test]
fn limits_reject_without_changing_anything() {
    let config = ForestConfig {
        limits: Limits {
            max_depth: 1,
            max_children: 1,
            max_steer_queue: 1,
            max_steer_bytes: 4,
        },
        ..Default::default()
    };
    let mut f = Forest::new(config);
    let root = running_root(&mut f, None);
    let c = running_child(&mut f, root, ChildOptions::default());
    assert!(matches!(
        f.create_child(T0, root, ChildOptions::default()),
        Err(TransitionError::LimitExceeded {
            limit: Limit::Children { max: 1 },
            ..
        })
    ));
    assert!(matches!(
        f.create_child(T0, c, ChildOptions::default()),
        Err(TransitionError::LimitExceeded {
            limit: Limit::Depth { max: 1 },
            ..
        })
    ));
    assert!(matches!(
        f.steer(T0, root, "toolong".into()),
        Err(TransitionError::LimitExceeded {
            limit: Limit::SteerBytes { .. },
            ..
        })
    ));
    f.steer(T0, root, "ok".into()).unwrap();
    assert!(matches!(
        f.steer(T0, root, "no".into()),
        Err(TransitionError::LimitExceeded {
            limit: Limit::SteerQueue { .. },
            ..
        })
    ));
    assert_eq!(f.task(root).unwrap().child_ids(), vec![c]);
    f.check_invariants().unwrap();
}

#[test]
fn set_ttl_reclamps_descendants() {
    let mut f = Forest::default();
    let root = running_root(&mut f, Some(100_000));
    let c = running_child(&mut f, root, ChildOptions::default());
    let g = running_child(
        &mut f,
        c,
        ChildOptions {
            ttl_ms: Some(90_000),
            ..Default::default()
        },
    );
    f.set_ttl(T0, root, Some(5_000)).unwrap();
    assert_eq!(f.task(c).unwrap().ttl_ms(), Some(5_000));
    assert_eq!(f.task(g).unwrap().ttl_ms(), Some(5_000));
    f.check_invariants().unwrap();
}

#[test]
fn time_never_runs_backwards_inside_the_core() {
    let mut f = Forest::default();
    let root = running_root(&mut f, None);
    f.set_status_message(T0.saturating_add(500), root, None).unwrap();
    f.set_status_message(T0, root, Some("x".into())).unwrap();
    assert_eq!(f.task(root).unwrap().last_updated_at(), T0.saturating_add(500));
}

#[test]
fn snapshot_lists_children_and_parent() {
    let mut f = Forest::default();
    let root = running_root(&mut f, Some(1000));
    let a = running_child(&mut f, root, ChildOptions::default());
    let b = running_child(&mut f, root, ChildOptions::default());
    let s = f.snapshot(root, ClientView::BASE).unwrap();
    assert_eq!(s.task().child_task_ids, vec![a, b]);
    let s = f.snapshot(b, ClientView::BASE).unwrap();
    assert_eq!(s.task().parent_task_id, Some(root));
    assert_eq!(s.task().ttl_ms, Some(1000));
    let unknown = TaskId::random();
    assert!(f.snapshot(unknown, ClientView::BASE).is_none());
    assert_eq!(f.cancel(T0, unknown), Err(TransitionError::UnknownTask(unknown)));
}
