//! What a case of the runtime property is made of, and the strategies that
//! generate it: the script every task runs (spawn, await, checkpoint, ask
//! for input, sleep, pause itself, give up a wait; then return, fail or
//! panic), the client's actions at random virtual times, and the random
//! scheduler and core limits. Plain data; nothing here runs anything.

use proptest::prelude::*;
use proptest::strategy::Union;
use subtask::core::Limits;

/// Deepest subtask of a script (the root is depth 0).
pub const MAX_DEPTH: u32 = 4;
/// Subtasks per task in a script.
pub const MAX_FANOUT: usize = 5;
/// Subtasks (not counting roots) per case.
pub const TASK_BUDGET: usize = 40;
/// `cancel_grace` of cooperative cases.
pub const COOPERATIVE_GRACE_MS: u64 = 600_000;

// ----- scripts and client actions -------------------------------------------

#[derive(Debug, Clone)]
pub enum Step {
    /// Spawn a subtask running its own script.
    Spawn(Box<ChildSpec>),
    /// Await the i-th (mod count) subtask spawned so far, if any.
    Await(usize),
    /// `ctx.checkpoint()`: take the steers queued so far.
    Checkpoint,
    /// `ctx.request_input()` under a fresh key.
    Input,
    /// Sleep that ignores cancellation: the runtime aborts the handler after
    /// `cancel_grace` if it is cancelled meanwhile.
    Sleep(u64),
    /// Sleep that stops at once with `Interrupted` on cancellation.
    Work(u64),
    /// `ctx.set_status_message()`.
    Status,
    /// `ctx.pause_self()`.
    PauseSelf,
    /// A context call given up after some ms: its future is dropped
    /// (documented as cancellation safe).
    Timed(TimedOp, u64),
}

#[derive(Debug, Clone, Copy)]
pub enum TimedOp {
    Checkpoint,
    Input,
    Await(usize),
}

#[derive(Debug, Clone)]
pub struct ChildSpec {
    pub fail_fast: bool,
    /// `after` the i-th (mod count) earlier sibling, if any.
    pub after: Option<usize>,
    pub ttl_ms: Option<u64>,
    pub script: Script,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Return,
    Error,
    Panic,
}

#[derive(Debug, Clone)]
pub struct Script {
    pub steps: Vec<Step>,
    pub end: End,
}

impl Script {
    /// Total sleep of this script and every subscript, in ms.
    pub fn sleep_ms(&self) -> u64 {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Sleep(ms) | Step::Work(ms) => *ms,
                Step::Spawn(c) => c.script.sleep_ms(),
                _ => 0,
            })
            .sum()
    }

    /// Steps of this script and every subscript.
    pub fn step_count(&self) -> u64 {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Spawn(c) => 1 + c.script.step_count(),
                _ => 1,
            })
            .sum::<u64>()
            + 1
    }

    /// Drops spawn steps beyond the fan-out limit and the task budget.
    pub fn prune(&mut self, budget: &mut usize) {
        let mut spawns = 0;
        self.steps.retain_mut(|s| match s {
            Step::Spawn(c) => {
                if spawns >= MAX_FANOUT || *budget == 0 {
                    return false;
                }
                spawns += 1;
                *budget -= 1;
                c.script.prune(budget);
                true
            }
            _ => true,
        });
    }
}

/// Which task an action targets: any known task, or one for which the
/// action is meaningful (falls back to any if there is none).
#[derive(Debug, Clone, Copy)]
pub enum Pick {
    Any(usize),
    Relevant(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerMode {
    /// Every outstanding key.
    All,
    /// The first outstanding key.
    First,
    /// Keys that were outstanding once and are not any more.
    Stale,
    /// A key the task never used.
    Unknown,
}

#[derive(Debug, Clone, Copy)]
pub enum Act {
    Steer(Pick),
    Pause(Pick),
    Resume(Pick),
    Answer(Pick, AnswerMode),
    Cancel(Pick),
    Nothing,
}

#[derive(Debug, Clone, Copy)]
pub struct Cfg {
    pub max_running: usize,
    pub per_tree: usize,
    pub cancel_grace_ms: u64,
    pub limits: Limits,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub cfg: Cfg,
    pub roots: Vec<Script>,
    /// (virtual delay in ms before the action, action); delay 0 only yields.
    pub actions: Vec<(u64, Act)>,
}

#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub steer: u32,
    pub pause: u32,
    pub resume: u32,
    pub answer: u32,
    pub cancel: u32,
    pub nothing: u32,
}

impl Weights {
    pub const ALL: Weights = Weights {
        steer: 4,
        pause: 3,
        resume: 3,
        answer: 4,
        cancel: 1,
        nothing: 1,
    };
    /// No cancels: trees run to their natural end through many pauses.
    pub const NO_CANCEL: Weights = Weights {
        steer: 4,
        pause: 4,
        resume: 3,
        answer: 4,
        cancel: 0,
        nothing: 1,
    };
}

/// How the generated handlers behave.
#[derive(Debug, Clone, Copy)]
pub struct Handlers {
    /// Some sleeps ignore cancellation: the runtime aborts the handler after
    /// `cancel_grace`. Otherwise `cancel_grace` is beyond any wait of the
    /// scripts, so no handler is ever aborted.
    pub stubborn: bool,
    /// Some context calls are given up after a timeout (their futures are
    /// dropped; the docs call every waiting method cancellation safe).
    pub give_up: bool,
}

impl Handlers {
    pub const STUBBORN: Handlers = Handlers {
        stubborn: true,
        give_up: false,
    };
    pub const COOPERATIVE: Handlers = Handlers {
        stubborn: false,
        give_up: false,
    };
    pub const GIVING_UP: Handlers = Handlers {
        stubborn: false,
        give_up: true,
    };
}

pub fn script(depth: u32, h: Handlers) -> BoxedStrategy<Script> {
    let end = prop_oneof![6 => Just(End::Return), 2 => Just(End::Error), 1 => Just(End::Panic)];
    (prop::collection::vec(step(depth, h), 0..=7), end)
        .prop_map(|(steps, end)| Script { steps, end })
        .boxed()
}

pub fn step(depth: u32, h: Handlers) -> BoxedStrategy<Step> {
    let sleep = move |ms: u64, stubborn: bool| {
        if h.stubborn && stubborn {
            Step::Sleep(ms)
        } else {
            Step::Work(ms)
        }
    };
    let mut leaf: Vec<(u32, BoxedStrategy<Step>)> = vec![
        (3, Just(Step::Checkpoint).boxed()),
        (2, Just(Step::Input).boxed()),
        (3, (1u64..=30).prop_map(move |ms| sleep(ms, ms % 3 == 0)).boxed()),
        (
            2,
            (50u64..=300).prop_map(move |ms| sleep(ms, ms % 2 == 0)).boxed(),
        ),
        (1, Just(Step::Status).boxed()),
        (1, Just(Step::PauseSelf).boxed()),
        (2, (0..MAX_FANOUT).prop_map(Step::Await).boxed()),
    ];
    if h.give_up {
        leaf.push((
            2,
            (timed_op(), 1u64..=30)
                .prop_map(|(op, ms)| Step::Timed(op, ms))
                .boxed(),
        ));
    }
    let leaf = Union::new_weighted(leaf);
    if depth >= MAX_DEPTH {
        return leaf.boxed();
    }
    let child = (
        script(depth + 1, h),
        prop::bool::weighted(0.25),
        prop::option::weighted(0.3, 0..MAX_FANOUT),
        prop::option::weighted(0.1, 10u64..=300),
    )
        .prop_map(|(script, fail_fast, after, ttl_ms)| {
            Step::Spawn(Box::new(ChildSpec {
                fail_fast,
                after,
                ttl_ms,
                script,
            }))
        });
    let weight = [9, 6, 4, 3][depth as usize];
    prop_oneof![13 => leaf, weight => child].boxed()
}

pub fn timed_op() -> impl Strategy<Value = TimedOp> {
    prop_oneof![
        Just(TimedOp::Checkpoint),
        Just(TimedOp::Input),
        (0..MAX_FANOUT).prop_map(TimedOp::Await),
    ]
}

pub fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![1 => (0usize..64).prop_map(Pick::Any), 3 => (0usize..64).prop_map(Pick::Relevant)]
}

pub fn act(w: Weights) -> impl Strategy<Value = Act> {
    let mode = prop_oneof![
        4 => Just(AnswerMode::All),
        2 => Just(AnswerMode::First),
        2 => Just(AnswerMode::Stale),
        1 => Just(AnswerMode::Unknown),
    ];
    let options: Vec<(u32, BoxedStrategy<Act>)> = vec![
        (w.steer, pick().prop_map(Act::Steer).boxed()),
        (w.pause, pick().prop_map(Act::Pause).boxed()),
        (w.resume, pick().prop_map(Act::Resume).boxed()),
        (
            w.answer,
            (pick(), mode).prop_map(|(p, m)| Act::Answer(p, m)).boxed(),
        ),
        (w.cancel, pick().prop_map(Act::Cancel).boxed()),
        (w.nothing, Just(Act::Nothing).boxed()),
    ];
    Union::new_weighted(options.into_iter().filter(|(w, _)| *w > 0).collect())
}

pub fn cfg() -> impl Strategy<Value = Cfg> {
    (
        prop_oneof![Just(1usize), Just(2), 3usize..=6, Just(1024)],
        prop_oneof![Just(1usize), Just(2), Just(64)],
        5u64..=100,
        prop_oneof![4 => Just(16u32), 1 => 1u32..=3],
        prop_oneof![4 => Just(10_000u32), 1 => 1u32..=3],
        prop_oneof![Just(256u32), 1u32..=3],
    )
        .prop_map(
            |(max_running, per_tree, cancel_grace_ms, max_depth, max_children, max_steer_queue)| Cfg {
                max_running,
                per_tree,
                cancel_grace_ms,
                limits: Limits {
                    max_depth,
                    max_children,
                    max_steer_queue,
                    ..Limits::default()
                },
            },
        )
}

pub fn case(w: Weights, h: Handlers) -> impl Strategy<Value = Case> {
    (
        cfg(),
        prop::collection::vec(script(0, h), 1..=3),
        prop::collection::vec(
            (
                prop_oneof![2 => Just(0u64), 5 => 1u64..=5, 1 => 6u64..=30],
                act(w),
            ),
            0..=40,
        ),
    )
        .prop_map(move |(mut cfg, mut roots, actions)| {
            let mut budget = TASK_BUDGET;
            for r in &mut roots {
                r.prune(&mut budget);
            }
            if !h.stubborn {
                // Far beyond any wait of the scripts: no handler is ever
                // aborted (not even one cancelled while it waits for a
                // scheduler slot).
                cfg.cancel_grace_ms = COOPERATIVE_GRACE_MS;
            }
            Case { cfg, roots, actions }
        })
}
