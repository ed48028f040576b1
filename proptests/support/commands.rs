//! Random command sequences over random forests.
//!
//! Commands name tasks through a [`Target`]: a way to pick (among the tasks
//! the command fits, recent ones, live ones, every task ever created including
//! terminal and deleted ones, or an unknown id) and an [`Index`] into that
//! choice. Targets are resolved against the reference model when the step
//! runs, so sequences stay meaningful while proptest shrinks them.

use proptest::prelude::*;
use proptest::sample::Index;
use subtask::core::{ForestConfig, Limits};

/// How a command picks its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// A task the command's precondition fits (falls back to any task).
    Fit,
    /// The most recently created task that fits.
    FitRecent,
    /// A live (non-terminal) task.
    Live,
    /// One of the last few tasks created.
    Recent,
    /// Any task ever created, also terminal and deleted ones.
    Any,
    /// An id no task ever had.
    Unknown,
}

/// A task reference, resolved when the step runs.
#[derive(Debug, Clone)]
pub struct Target {
    pub pick: Pick,
    pub idx: Index,
}

/// How an input key is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPick {
    /// `k0`..`k7`: fresh at first, duplicates later.
    Pool(u8),
    /// A key never seen anywhere.
    Unique,
    /// One of the target's outstanding keys.
    Outstanding,
    /// One of the target's used keys (answered, withdrawn or outstanding).
    Used,
    /// A key never issued on any task.
    Never,
}

#[derive(Debug, Clone)]
pub struct KeyChoice {
    pub pick: KeyPick,
    pub idx: Index,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerSize {
    Small,
    Medium,
    Huge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishKind {
    Returned,
    Errored { code: i32, data: bool },
    Aborted,
}

/// A command before its targets are resolved.
#[derive(Debug, Clone)]
pub enum Cmd {
    /// `start`: also start the new task right after (a second command).
    CreateRoot {
        ttl: Option<u64>,
        poll: Option<u64>,
        start: bool,
    },
    CreateChild {
        parent: Target,
        ttl: Option<u64>,
        poll: Option<u64>,
        fail_fast: bool,
        start: bool,
    },
    /// `n` `create_child` commands on one parent (wide fan-out), each checked on its own.
    Spawn {
        parent: Target,
        n: u8,
        fail_fast: bool,
    },
    /// `create_child` then `start` of the new child, `levels` times down (deep
    /// trees), each checked on its own.
    Dive {
        parent: Target,
        levels: u8,
        ttl: Option<u64>,
    },
    Start(Target),
    SetStatusMessage(Target, bool),
    RequestInput(Target, KeyChoice),
    WithdrawInput(Target, KeyChoice),
    AnswerInput(Target, Vec<KeyChoice>),
    Steer(Target, SteerSize),
    TakeSteers(Target),
    ReachSafePoint(Target),
    EnterWait(Target),
    LeaveWait(Target),
    WaitPoint(Target),
    Pause(Target),
    PauseSelf(Target, bool),
    Resume(Target),
    Cancel(Target),
    Finish(Target, FinishKind),
    SetTtl(Target, Option<u64>),
    HandleTimeout,
    /// `handle_timeout` exactly at the forest's next deadline (if later than now).
    HandleTimeoutAtDeadline,
    DeleteTree(Target),
}

/// One step: advance the clock by `dt` ms, then run `cmd`.
#[derive(Debug, Clone)]
pub struct Step {
    pub dt: u64,
    pub cmd: Cmd,
}

/// Relative frequency of each command.
#[derive(Debug, Clone, Copy)]
pub struct Weights {
    pub create_root: u32,
    pub create_child: u32,
    pub spawn: u32,
    pub dive: u32,
    pub start: u32,
    pub set_status_message: u32,
    pub request_input: u32,
    pub withdraw_input: u32,
    pub answer_input: u32,
    pub steer: u32,
    pub take_steers: u32,
    pub reach_safe_point: u32,
    pub enter_wait: u32,
    pub leave_wait: u32,
    pub wait_point: u32,
    pub pause: u32,
    pub pause_self: u32,
    pub resume: u32,
    pub cancel: u32,
    pub finish: u32,
    pub set_ttl: u32,
    pub handle_timeout: u32,
    pub delete_tree: u32,
}

impl Weights {
    /// Every command, biased towards growing trees and finishing them.
    pub const ALL: Weights = Weights {
        create_root: 6,
        create_child: 14,
        spawn: 2,
        dive: 2,
        start: 10,
        set_status_message: 2,
        request_input: 7,
        withdraw_input: 3,
        answer_input: 6,
        steer: 6,
        take_steers: 3,
        reach_safe_point: 5,
        enter_wait: 3,
        leave_wait: 3,
        wait_point: 2,
        pause: 5,
        pause_self: 3,
        resume: 5,
        cancel: 4,
        finish: 12,
        set_ttl: 3,
        handle_timeout: 5,
        delete_tree: 2,
    };

    /// Trees that grow and complete: results stream in post-order.
    pub const RESULTS: Weights = Weights {
        create_root: 3,
        create_child: 20,
        spawn: 3,
        dive: 3,
        start: 14,
        set_status_message: 1,
        request_input: 1,
        withdraw_input: 1,
        answer_input: 1,
        steer: 1,
        take_steers: 1,
        reach_safe_point: 1,
        enter_wait: 1,
        leave_wait: 1,
        wait_point: 1,
        pause: 1,
        pause_self: 1,
        resume: 1,
        cancel: 2,
        finish: 18,
        set_ttl: 1,
        handle_timeout: 2,
        delete_tree: 1,
    };

    /// Pause, resume and what happens while paused.
    pub const PAUSE: Weights = Weights {
        create_root: 3,
        create_child: 12,
        spawn: 1,
        dive: 1,
        start: 10,
        set_status_message: 2,
        request_input: 6,
        withdraw_input: 2,
        answer_input: 5,
        steer: 4,
        take_steers: 2,
        reach_safe_point: 8,
        enter_wait: 4,
        leave_wait: 4,
        wait_point: 3,
        pause: 12,
        pause_self: 8,
        resume: 10,
        cancel: 2,
        finish: 6,
        set_ttl: 1,
        handle_timeout: 2,
        delete_tree: 1,
    };
}

fn index() -> impl Strategy<Value = Index> {
    any::<Index>()
}

pub fn target() -> impl Strategy<Value = Target> {
    let pick = prop_oneof![
        12 => Just(Pick::Fit),
        6 => Just(Pick::FitRecent),
        3 => Just(Pick::Live),
        2 => Just(Pick::Recent),
        2 => Just(Pick::Any),
        1 => Just(Pick::Unknown),
    ];
    (pick, index()).prop_map(|(pick, idx)| Target { pick, idx })
}

fn key() -> impl Strategy<Value = KeyChoice> {
    let pick = prop_oneof![
        6 => (0u8..8).prop_map(KeyPick::Pool),
        2 => Just(KeyPick::Unique),
        4 => Just(KeyPick::Outstanding),
        2 => Just(KeyPick::Used),
        1 => Just(KeyPick::Never),
    ];
    (pick, index()).prop_map(|(pick, idx)| KeyChoice { pick, idx })
}

/// Keys of `tasks/update` responses: mostly outstanding ones.
fn answer_key() -> impl Strategy<Value = KeyChoice> {
    let pick = prop_oneof![
        2 => (0u8..8).prop_map(KeyPick::Pool),
        1 => Just(KeyPick::Unique),
        8 => Just(KeyPick::Outstanding),
        2 => Just(KeyPick::Used),
        1 => Just(KeyPick::Never),
    ];
    (pick, index()).prop_map(|(pick, idx)| KeyChoice { pick, idx })
}

/// TTLs: none, tiny, ordinary, long, and the saturating extreme.
pub fn ttl() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        12 => Just(None),
        1 => (0u64..=50).prop_map(Some),
        4 => (50u64..=3_000).prop_map(Some),
        3 => (3_000u64..=100_000).prop_map(Some),
        1 => Just(Some(u64::MAX)),
    ]
}

fn poll() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![3 => Just(None), 1 => (1u64..=5_000).prop_map(Some)]
}

/// Clock advances: mostly none or small, sometimes past TTLs and the deletion grace.
fn dt() -> impl Strategy<Value = u64> {
    prop_oneof![
        48 => Just(0u64),
        20 => 1u64..=20,
        8 => 20u64..=500,
        3 => 500u64..=5_000,
        1 => 5_000u64..=200_000,
    ]
}

fn finish_kind() -> impl Strategy<Value = FinishKind> {
    prop_oneof![
        6 => Just(FinishKind::Returned),
        3 => (prop_oneof![Just(-32603), Just(-32000), Just(1)], any::<bool>())
            .prop_map(|(code, data)| FinishKind::Errored { code, data }),
        1 => Just(FinishKind::Aborted),
    ]
}

fn steer_size() -> impl Strategy<Value = SteerSize> {
    prop_oneof![8 => Just(SteerSize::Small), 2 => Just(SteerSize::Medium), 1 => Just(SteerSize::Huge)]
}

pub fn cmd(w: Weights) -> impl Strategy<Value = Cmd> {
    prop_oneof![
        w.create_root => (ttl(), poll(), any::<bool>())
            .prop_map(|(ttl, poll, start)| Cmd::CreateRoot { ttl, poll, start }),
        w.create_child => (target(), ttl(), poll(), prop::bool::weighted(0.3), any::<bool>()).prop_map(
            |(parent, ttl, poll, fail_fast, start)| Cmd::CreateChild { parent, ttl, poll, fail_fast, start }
        ),
        w.spawn => (target(), 2u8..=20, prop::bool::weighted(0.2))
            .prop_map(|(parent, n, fail_fast)| Cmd::Spawn { parent, n, fail_fast }),
        w.dive => (target(), 2u8..=7, ttl()).prop_map(|(parent, levels, ttl)| Cmd::Dive { parent, levels, ttl }),
        w.start => target().prop_map(Cmd::Start),
        w.set_status_message => (target(), any::<bool>()).prop_map(|(t, m)| Cmd::SetStatusMessage(t, m)),
        w.request_input => (target(), key()).prop_map(|(t, k)| Cmd::RequestInput(t, k)),
        w.withdraw_input => (target(), key()).prop_map(|(t, k)| Cmd::WithdrawInput(t, k)),
        w.answer_input => (target(), prop::collection::vec(answer_key(), 0..4))
            .prop_map(|(t, ks)| Cmd::AnswerInput(t, ks)),
        w.steer => (target(), steer_size()).prop_map(|(t, s)| Cmd::Steer(t, s)),
        w.take_steers => target().prop_map(Cmd::TakeSteers),
        w.reach_safe_point => target().prop_map(Cmd::ReachSafePoint),
        w.enter_wait => target().prop_map(Cmd::EnterWait),
        w.leave_wait => target().prop_map(Cmd::LeaveWait),
        w.wait_point => target().prop_map(Cmd::WaitPoint),
        w.pause => target().prop_map(Cmd::Pause),
        w.pause_self => (target(), any::<bool>()).prop_map(|(t, r)| Cmd::PauseSelf(t, r)),
        w.resume => target().prop_map(Cmd::Resume),
        w.cancel => target().prop_map(Cmd::Cancel),
        w.finish => (target(), finish_kind()).prop_map(|(t, k)| Cmd::Finish(t, k)),
        w.set_ttl => (target(), ttl()).prop_map(|(t, ttl)| Cmd::SetTtl(t, ttl)),
        w.handle_timeout => prop_oneof![Just(Cmd::HandleTimeout), Just(Cmd::HandleTimeoutAtDeadline)],
        w.delete_tree => target().prop_map(Cmd::DeleteTree),
    ]
}

/// A sequence that starts with a root (so early commands hit real tasks).
pub fn steps(w: Weights, max_len: usize) -> impl Strategy<Value = Vec<Step>> {
    let first = (ttl(), poll()).prop_map(|(ttl, poll)| Step {
        dt: 0,
        cmd: Cmd::CreateRoot {
            ttl,
            poll,
            start: true,
        },
    });
    let rest = prop::collection::vec((dt(), cmd(w)).prop_map(|(dt, cmd)| Step { dt, cmd }), 0..max_len);
    (first, rest).prop_map(|(first, mut rest)| {
        rest.insert(0, first);
        rest
    })
}

/// Default limits, small limits (so limit errors happen), or a wide fan-out.
pub fn config() -> impl Strategy<Value = ForestConfig> {
    let grace = prop_oneof![Just(0u64), 1u64..=100, 1_000u64..=10_000, Just(60_000)];
    let limits = prop_oneof![
        2 => Just(Limits::default()),
        3 => (2u32..=6, 1u32..=4, 1u32..=3, 8u32..=32).prop_map(|(d, c, q, b)| Limits {
            max_depth: d,
            max_children: c,
            max_steer_queue: q,
            max_steer_bytes: b,
        }),
        2 => Just(Limits { max_depth: 6, max_children: 20, max_steer_queue: 2, max_steer_bytes: 64 }),
    ];
    (limits, grace).prop_map(|(limits, deletion_grace_ms)| ForestConfig {
        limits,
        deletion_grace_ms,
    })
}
