//! Property tests of the sans-IO lifecycle core (`subtask::core`) against a
//! simple reference model written from `docs/lifecycle.md`.
//!
//! Random command sequences over random forests (many roots, depth up to 6,
//! fan-out up to 20, clock jumps past TTLs and the deletion grace, small
//! limits) run on the core and on the model in lock step. After every step the
//! core must pass `Forest::check_invariants`, agree with the model on every
//! task (accept/reject and the error, wire status, children, input requests,
//! steer queues, delivered steers, existence, effects), and keep the temporal
//! invariants I1, I2, I4, I6, I7, I8, I10, I11 and I12.
//!
//! Cases: `PROPTEST_CASES` if set, else a default sized for a debug build.
//! The `regressions` module keeps a minimal repro of each core bug these
//! properties found (all fixed); `PROP_LIFECYCLE_STATS=1` prints what
//! `generated_sequences_cover_the_lifecycle` exercised.

#[path = "support/cases.rs"]
mod cases;
use cases::proptest_config;
#[path = "support/commands.rs"]
mod commands;
#[macro_use]
#[path = "support/harness/mod.rs"]
mod harness;
#[path = "support/reference.rs"]
mod reference;

use proptest::prelude::*;
use subtask::core::{ClientView, ResultCursor};
use subtask::model::{TaskId, TaskPayload, TaskStatus};

use commands::{Weights, config, steps};
use harness::Harness;

/// Default number of cases per property, for `cargo test` in debug.
const DEFAULT_CASES: u32 = 256;
/// Default number of cases of the focused properties.
const FOCUSED_CASES: u32 = 48;

proptest! {
    #![proptest_config(proptest_config(DEFAULT_CASES, 4096))]

    /// The main property: every command of the lifecycle, every check.
    #[test]
    fn core_matches_reference_and_keeps_invariants(cfg in config(), steps in steps(Weights::ALL, 200)) {
        Harness::run(cfg, &steps)?;
    }
}

proptest! {
    #![proptest_config(proptest_config(FOCUSED_CASES, 4096))]

    /// I12 on trees that grow and complete: `Forest::result_order` is the
    /// model's post-order by `childTaskIds`, and a cursor started at any step
    /// catches up at once with exactly the ready prefix (on top of the
    /// per-root cursors the harness advances after every step).
    #[test]
    fn result_cursor_matches_post_order(cfg in config(), steps in steps(Weights::RESULTS, 200)) {
        Harness::run_with(cfg, &steps, |h| {
            let m = &h.model;
            for r in (0..m.tasks.len()).filter(|&r| m.tasks[r].parent.is_none() && m.exists(r)) {
                let ids = |v: Vec<usize>| v.into_iter().map(|i| m.tasks[i].id).collect::<Vec<TaskId>>();
                let order = ids(m.post_order(r));
                let ready = ids(m.ready_prefix(r));
                ensure!(h.forest.result_order(m.tasks[r].id) == order, "result_order of t{r} is not the post-order");
                let mut cursor = ResultCursor::new(m.tasks[r].id);
                let mut got = Vec::new();
                while let Some(id) = cursor.next_ready(&h.forest) {
                    got.push(id);
                    ensure!(got.len() <= order.len(), "a fresh cursor of t{r} does not stop");
                }
                ensure!(got == ready, "a fresh cursor of t{r} emitted {got:?}, ready prefix {ready:?}");
                ensure!(
                    cursor.is_finished() == (ready.len() == order.len()),
                    "cursor of t{r}: is_finished is {} with {} of {} emitted",
                    cursor.is_finished(),
                    ready.len(),
                    order.len()
                );
            }
            Ok(())
        })?;
    }

    /// A client without the `pause` sub-capability never sees `paused`: a
    /// paused task shows as `working` with a status message saying it is paused.
    #[test]
    fn base_view_never_shows_paused(cfg in config(), steps in steps(Weights::PAUSE, 200)) {
        Harness::run_with(cfg, &steps, |h| {
            for id in h.forest.ids() {
                let (Some(aware), Some(base)) =
                    (h.forest.snapshot(id, ClientView::PAUSE_AWARE), h.forest.snapshot(id, ClientView::BASE))
                else {
                    return Err(format!("no snapshot of {id}"));
                };
                ensure!(base.status() != TaskStatus::Paused, "BASE view of {id} shows paused");
                ensure!(*base.payload() != TaskPayload::Paused, "BASE payload of {id} is Paused");
                if aware.status() == TaskStatus::Paused {
                    ensure!(base.status() == TaskStatus::Working, "BASE view of paused {id} is {}", base.status());
                    let msg = base.task().status_message.clone().unwrap_or_default();
                    ensure!(msg.contains("paused"), "BASE view of paused {id} has statusMessage {msg:?}");
                }
            }
            Ok(())
        })?;
    }
}

/// Runs `n` sequences from a fixed seed and returns what they exercised.
fn coverage(weights: Weights, n: usize) -> harness::Stats {
    use proptest::strategy::ValueTree;
    let mut runner = cases::fixed_seed_runner();
    let strategy = (config(), steps(weights, 200));
    let mut total = harness::Stats::default();
    for _ in 0..n {
        let (cfg, steps) = strategy.new_tree(&mut runner).expect("a value").current();
        match Harness::run(cfg, &steps) {
            Ok(h) => total.merge(&h.stats),
            Err(e) => panic!("{e}"),
        }
    }
    if std::env::var_os("PROP_LIFECYCLE_STATS").is_some() {
        eprintln!("{total:#?}");
    }
    total
}

/// The generator is not vacuous: over a fixed set of sequences every command
/// is accepted and rejected in the interesting ways, and the states the
/// lifecycle rules talk about are reached.
#[test]
fn generated_sequences_cover_the_lifecycle() {
    let s = coverage(Weights::ALL, 100);
    let commands = [
        "create_root",
        "create_child",
        "start",
        "set_status_message",
        "request_input",
        "withdraw_input",
        "answer_input",
        "steer",
        "take_steers",
        "reach_safe_point",
        "enter_wait",
        "leave_wait",
        "wait_point",
        "pause",
        "pause_self",
        "resume",
        "cancel",
        "finish",
        "set_ttl",
        "handle_timeout",
        "delete_tree",
    ];
    let seen = |prefix: &str| s.outcomes.keys().any(|k| k.starts_with(prefix));
    for c in commands {
        assert!(seen(&format!("{c}: Ok")), "{c} never accepted");
    }
    let outcomes = [
        "create_child: UnknownTask",
        "create_child: Terminal",
        "create_child: NotStarted",
        "create_child: HandlerFinished",
        "create_child: WindingDown",
        "create_child: LimitExceeded(Depth",
        "create_child: LimitExceeded(Children",
        "start: AlreadyStarted",
        "start: Paused",
        "request_input: DuplicateInputKey",
        "request_input: WindingDown",
        "withdraw_input: Ok(true)",
        "withdraw_input: Ok(false)",
        "answer_input: Ok(keys)",
        "answer_input: Paused",
        "steer: WindingDown",
        "steer: HandlerFinished",
        "steer: LimitExceeded(SteerQueue",
        "steer: LimitExceeded(SteerBytes",
        "take_steers: Ok(steers)",
        "reach_safe_point: Ok(Continue(steers))",
        "reach_safe_point: Ok(Park)",
        "reach_safe_point: Ok(Stop)",
        "leave_wait: Ok(Park)",
        "leave_wait: Ok(Continue([]))",
        "wait_point: Ok(Park)",
        "wait_point: Ok(Stop)",
        "pause: Ok(Paused)",
        "pause: Ok(Pending)",
        "pause: Ok(Unchanged)",
        "pause: AlreadyPaused",
        "pause_self: AlreadyPaused",
        "pause_self: WindingDown",
        "resume: NotPaused",
        "cancel: Ok(Accepted)",
        "cancel: Ok(AlreadyEnding)",
        "cancel: Ok(AlreadyTerminal)",
        "delete_tree: NotARoot",
        "delete_tree: TreeNotTerminal",
    ];
    for o in outcomes {
        assert!(seen(o), "never saw {o}");
    }
    assert_eq!(
        s.statuses.len(),
        TaskStatus::ALL.len(),
        "statuses seen: {:?}",
        s.statuses
    );
    for situation in [
        "cancelling, handler running",
        "completing while paused",
        "failed by expiry",
        "failed by fail-fast",
        "failing, handler running",
        "failing, waiting for children",
        "pause pending",
        "paused before start",
        "paused via an ancestor",
        "paused with input outstanding",
        "paused while awaiting a subtask",
        "tree deleted by timeout",
    ] {
        assert!(s.situations.contains_key(situation), "never reached: {situation}");
    }
    assert!(s.max_depth >= 6, "deepest task at depth {}", s.max_depth);
    assert!(s.max_children >= 20, "widest fan-out {}", s.max_children);
    assert!(s.steers_delivered > 20, "{} steers delivered", s.steers_delivered);
    assert!(s.results_emitted > 100, "{} results emitted", s.results_emitted);
}

/// Minimal repros of core bugs found by the properties above.
mod regressions {
    use subtask::core::{ChildOptions, Effect, Forest, HandlerOutcome, RootOptions};
    use subtask::model::{ErrorCode, ErrorObject, JsonObject, TaskId, TaskStatus, Timestamp};

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// Terminal `Changed` effects of one command, in emission order.
    fn terminal_changes(f: &mut Forest) -> Vec<TaskId> {
        f.drain_effects()
            .filter_map(|e| match e {
                Effect::Changed { id, to, .. } if to.is_terminal() => Some(id),
                _ => None,
            })
            .collect()
    }

    /// A running task whose TTL elapses is failing until its handler stops;
    /// the forest must still pass its own invariant check meanwhile.
    #[test]

    fn expiry_of_a_running_task_keeps_the_timer_invariant() {
        let mut f = Forest::default();
        let root = f
            .create_root(
                at(1_000),
                RootOptions {
                    ttl_ms: Some(0),
                    poll_interval_ms: None,
                },
            )
            .unwrap();
        f.start(at(1_000), root).unwrap();
        f.handle_timeout(at(1_000));
        assert_eq!(f.task(root).unwrap().status(), TaskStatus::Working);
        assert_eq!(f.check_invariants(), Ok(()));
    }

    /// I8: a subtask created after its parent's expiry, before the timer was
    /// handled, must not expire after the parent.
    #[test]

    fn child_of_an_expired_parent_does_not_outlive_it() {
        let mut f = Forest::default();
        let root = f
            .create_root(
                at(1_000),
                RootOptions {
                    ttl_ms: Some(0),
                    poll_interval_ms: None,
                },
            )
            .unwrap();
        f.start(at(1_000), root).unwrap();
        let _child = f.create_child(at(1_001), root, ChildOptions::default()).unwrap();
        assert_eq!(f.check_invariants(), Ok(()));
    }

    /// I8: shortening a parent's TTL below the creation time of a child must
    /// not leave the child expiring after the parent.
    #[test]

    fn set_ttl_below_a_childs_creation_keeps_nesting() {
        let mut f = Forest::default();
        let root = f.create_root(at(1_000), RootOptions::default()).unwrap();
        f.start(at(1_000), root).unwrap();
        let _child = f.create_child(at(2_000), root, ChildOptions::default()).unwrap();
        f.set_ttl(at(2_000), root, Some(500)).unwrap();
        assert_eq!(f.check_invariants(), Ok(()));
    }

    /// A parent and its fail-fast child that expire at the same instant: the
    /// parent's own TTL elapsed, so it fails with `data.reason =
    /// "ttl_expired"` (docs: TTL decision). The core fires equal deadlines in
    /// task-id order, which is random: about half the time the child fires
    /// first and the parent fails fail-fast instead.
    #[test]

    fn simultaneous_expiry_fails_the_parent_as_expired() {
        let mut reasons = std::collections::BTreeSet::new();
        for _ in 0..32 {
            let mut f = Forest::default();
            let root = f
                .create_root(
                    at(1_000),
                    RootOptions {
                        ttl_ms: Some(100),
                        poll_interval_ms: None,
                    },
                )
                .unwrap();
            f.start(at(1_000), root).unwrap();
            let child = f
                .create_child(
                    at(1_000),
                    root,
                    ChildOptions {
                        fail_fast: true,
                        ..ChildOptions::default()
                    },
                )
                .unwrap();
            assert_eq!(f.task(child).unwrap().expires_at(), Some(at(1_100)));
            f.handle_timeout(at(1_100));
            f.finish(at(1_100), root, HandlerOutcome::Returned(JsonObject::new()))
                .unwrap();
            let snap = f.snapshot(root, subtask::core::ClientView::PAUSE_AWARE).unwrap();
            let subtask::model::TaskPayload::Failed { error } = snap.payload() else {
                panic!("root is {}", snap.status())
            };
            let data = error.data.clone().unwrap_or_default();
            reasons.insert(if data.get("failedTaskId").is_some() {
                "fail-fast".to_owned()
            } else {
                data.get("reason").map(ToString::to_string).unwrap_or_default()
            });
        }
        assert_eq!(reasons.len(), 1, "outcomes depend on random ids: {reasons:?}");
        assert!(reasons.iter().all(|r| r.contains("ttl_expired")), "{reasons:?}");
    }

    /// I6: a handler error with a queued child: the child is cancelled and the
    /// parent fails in the same command; the child's terminal `Changed` must
    /// come first.
    #[test]

    fn handler_error_emits_child_terminal_change_first() {
        let mut f = Forest::default();
        let t = at(1_000);
        let root = f.create_root(t, RootOptions::default()).unwrap();
        f.start(t, root).unwrap();
        let child = f.create_child(t, root, ChildOptions::default()).unwrap();
        f.drain_effects().for_each(drop);
        let err = ErrorObject::new(ErrorCode::INTERNAL_ERROR, "boom");
        f.finish(t, root, HandlerOutcome::Errored(err)).unwrap();
        assert_eq!(f.task(root).unwrap().status(), TaskStatus::Failed);
        assert_eq!(terminal_changes(&mut f), vec![child, root]);
    }

    /// I6: fail-fast: the failing child's sibling is cancelled and the
    /// (completing) parent fails in the same command; the sibling's terminal
    /// `Changed` must come before the parent's.
    #[test]

    fn fail_fast_emits_sibling_terminal_change_before_parent() {
        let mut f = Forest::default();
        let t = at(1_000);
        let root = f.create_root(t, RootOptions::default()).unwrap();
        f.start(t, root).unwrap();
        let a = f
            .create_child(
                t,
                root,
                ChildOptions {
                    fail_fast: true,
                    ..ChildOptions::default()
                },
            )
            .unwrap();
        let b = f.create_child(t, root, ChildOptions::default()).unwrap();
        f.start(t, a).unwrap();
        f.finish(t, root, HandlerOutcome::Returned(JsonObject::new()))
            .unwrap();
        f.drain_effects().for_each(drop);
        let err = ErrorObject::new(ErrorCode::INTERNAL_ERROR, "boom");
        f.finish(t, a, HandlerOutcome::Errored(err)).unwrap();
        assert_eq!(f.task(root).unwrap().status(), TaskStatus::Failed);
        assert_eq!(terminal_changes(&mut f), vec![a, b, root]);
    }
}
