//! A command with its targets resolved to ids: `Op`, and how the harness resolves one.

use std::collections::BTreeMap;
use std::fmt;

use subtask::core::HandlerOutcome;
use subtask::model::{ErrorCode, ErrorObject, JsonObject, TaskId, TaskStatus};

use super::super::commands::{Cmd, FinishKind, KeyChoice, KeyPick, Pick, SteerSize, Target};
use super::super::reference::{Handler, Model};

use super::{Harness, json, running};

/// A command with its targets resolved to ids and its arguments made concrete.
#[derive(Debug, Clone)]
pub enum Op {
    CreateRoot {
        ttl: Option<u64>,
        poll: Option<u64>,
    },
    CreateChild {
        parent: TaskId,
        ttl: Option<u64>,
        poll: Option<u64>,
        fail_fast: bool,
    },
    Start(TaskId),
    SetStatusMessage(TaskId, Option<String>),
    RequestInput(TaskId, String),
    WithdrawInput(TaskId, String),
    AnswerInput(TaskId, BTreeMap<String, JsonObject>),
    Steer(TaskId, String),
    TakeSteers(TaskId),
    ReachSafePoint(TaskId),
    EnterWait(TaskId),
    LeaveWait(TaskId),
    WaitPoint(TaskId),
    Pause(TaskId),
    PauseSelf(TaskId, Option<String>),
    Resume(TaskId),
    Cancel(TaskId),
    Finish(TaskId, HandlerOutcome),
    SetTtl(TaskId, Option<u64>),
    HandleTimeout,
    DeleteTree(TaskId),
}

impl Op {
    /// The task the command names.
    pub fn target(&self) -> Option<TaskId> {
        match self {
            Op::CreateRoot { .. } | Op::HandleTimeout => None,
            Op::CreateChild { parent, .. } => Some(*parent),
            Op::Start(id)
            | Op::SetStatusMessage(id, _)
            | Op::RequestInput(id, _)
            | Op::WithdrawInput(id, _)
            | Op::AnswerInput(id, _)
            | Op::Steer(id, _)
            | Op::TakeSteers(id)
            | Op::ReachSafePoint(id)
            | Op::EnterWait(id)
            | Op::LeaveWait(id)
            | Op::WaitPoint(id)
            | Op::Pause(id)
            | Op::PauseSelf(id, _)
            | Op::Resume(id)
            | Op::Cancel(id)
            | Op::Finish(id, _)
            | Op::SetTtl(id, _)
            | Op::DeleteTree(id) => Some(*id),
        }
    }
}

impl Op {
    /// The command's name.
    pub fn name(&self) -> &'static str {
        match self {
            Op::CreateRoot { .. } => "create_root",
            Op::CreateChild { .. } => "create_child",
            Op::Start(_) => "start",
            Op::SetStatusMessage(..) => "set_status_message",
            Op::RequestInput(..) => "request_input",
            Op::WithdrawInput(..) => "withdraw_input",
            Op::AnswerInput(..) => "answer_input",
            Op::Steer(..) => "steer",
            Op::TakeSteers(_) => "take_steers",
            Op::ReachSafePoint(_) => "reach_safe_point",
            Op::EnterWait(_) => "enter_wait",
            Op::LeaveWait(_) => "leave_wait",
            Op::WaitPoint(_) => "wait_point",
            Op::Pause(_) => "pause",
            Op::PauseSelf(..) => "pause_self",
            Op::Resume(_) => "resume",
            Op::Cancel(_) => "cancel",
            Op::Finish(..) => "finish",
            Op::SetTtl(..) => "set_ttl",
            Op::HandleTimeout => "handle_timeout",
            Op::DeleteTree(_) => "delete_tree",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::CreateRoot { ttl, poll } => write!(f, "create_root(ttl={ttl:?}, poll={poll:?})"),
            Op::CreateChild {
                parent,
                ttl,
                poll,
                fail_fast,
            } => {
                write!(
                    f,
                    "create_child({parent:?}, ttl={ttl:?}, poll={poll:?}, fail_fast={fail_fast})"
                )
            }
            Op::Start(id) => write!(f, "start({id:?})"),
            Op::SetStatusMessage(id, m) => write!(f, "set_status_message({id:?}, {m:?})"),
            Op::RequestInput(id, k) => write!(f, "request_input({id:?}, {k:?})"),
            Op::WithdrawInput(id, k) => write!(f, "withdraw_input({id:?}, {k:?})"),
            Op::AnswerInput(id, r) => write!(f, "answer_input({id:?}, {:?})", r.keys().collect::<Vec<_>>()),
            Op::Steer(id, m) if m.len() > 40 => write!(f, "steer({id:?}, <{} bytes>)", m.len()),
            Op::Steer(id, m) => write!(f, "steer({id:?}, {m:?})"),
            Op::TakeSteers(id) => write!(f, "take_steers({id:?})"),
            Op::ReachSafePoint(id) => write!(f, "reach_safe_point({id:?})"),
            Op::EnterWait(id) => write!(f, "enter_wait({id:?})"),
            Op::LeaveWait(id) => write!(f, "leave_wait({id:?})"),
            Op::WaitPoint(id) => write!(f, "wait_point({id:?})"),
            Op::Pause(id) => write!(f, "pause({id:?})"),
            Op::PauseSelf(id, r) => write!(f, "pause_self({id:?}, {r:?})"),
            Op::Resume(id) => write!(f, "resume({id:?})"),
            Op::Cancel(id) => write!(f, "cancel({id:?})"),
            Op::Finish(id, o) => write!(f, "finish({id:?}, {o:?})"),
            Op::SetTtl(id, t) => write!(f, "set_ttl({id:?}, {t:?})"),
            Op::HandleTimeout => write!(f, "handle_timeout()"),
            Op::DeleteTree(id) => write!(f, "delete_tree({id:?})"),
        }
    }
}

impl Harness {
    pub(super) fn unknown_id(idx: &proptest::sample::Index) -> TaskId {
        TaskId::from_u128(0x0bad_0000_0000_4000_8000_0000_0000_0000 | idx.index(1 << 20) as u128)
    }

    pub(super) fn pick(&self, t: &Target, fit: &dyn Fn(&Model, usize) -> bool) -> TaskId {
        let m = &self.model;
        let n = m.tasks.len();
        let cands: Vec<usize> = match t.pick {
            Pick::Fit | Pick::FitRecent => (0..n).filter(|&i| m.exists(i) && fit(m, i)).collect(),
            Pick::Live => (0..n).filter(|&i| m.is_live(i)).collect(),
            Pick::Recent => (n.saturating_sub(4)..n).collect(),
            Pick::Any => (0..n).collect(),
            Pick::Unknown => return Self::unknown_id(&t.idx),
        };
        // Fall back to a live task, then to any retrievable one, then to any ever created.
        let live = || (0..n).filter(|&i| m.is_live(i)).collect::<Vec<_>>();
        let existing = || (0..n).filter(|&i| m.exists(i)).collect::<Vec<_>>();
        let cands = if cands.is_empty() { live() } else { cands };
        let cands = if cands.is_empty() { existing() } else { cands };
        let cands = if cands.is_empty() { (0..n).collect() } else { cands };
        if cands.is_empty() {
            return Self::unknown_id(&t.idx);
        }
        let i = match t.pick {
            Pick::FitRecent => cands[cands.len() - 1],
            _ => cands[t.idx.index(cands.len())],
        };
        m.tasks[i].id
    }

    pub(super) fn key(&mut self, target: TaskId, k: &KeyChoice) -> String {
        let task = self.model.find(target).map(|i| &self.model.tasks[i]);
        let outstanding: Vec<String> = task
            .map(|t| t.outstanding.keys().cloned().collect())
            .unwrap_or_default();
        let used: Vec<String> = task.map(|t| t.used.iter().cloned().collect()).unwrap_or_default();
        match k.pick {
            KeyPick::Pool(n) => format!("k{n}"),
            KeyPick::Unique => format!("u{}", self.fresh()),
            KeyPick::Never => format!("never{}", k.idx.index(4)),
            KeyPick::Outstanding if !outstanding.is_empty() => {
                outstanding[k.idx.index(outstanding.len())].clone()
            }
            KeyPick::Outstanding | KeyPick::Used if !used.is_empty() => used[k.idx.index(used.len())].clone(),
            KeyPick::Outstanding | KeyPick::Used => "k0".to_owned(),
        }
    }

    pub(super) fn resolve(&mut self, cmd: &Cmd) -> Op {
        match cmd {
            Cmd::CreateRoot { ttl, poll, .. } => Op::CreateRoot {
                ttl: *ttl,
                poll: *poll,
            },
            Cmd::CreateChild {
                parent,
                ttl,
                poll,
                fail_fast,
                ..
            } => Op::CreateChild {
                parent: self.pick(parent, &|m, i| running(m, i) && m.tasks[i].ending.is_none()),
                ttl: *ttl,
                poll: *poll,
                fail_fast: *fail_fast,
            },
            Cmd::Start(t) => Op::Start(self.pick(t, &|m, i| {
                m.is_live(i) && m.tasks[i].handler == Handler::Queued && m.status(i) != TaskStatus::Paused
            })),
            Cmd::SetStatusMessage(t, some) => {
                let id = self.pick(t, &|m, i| m.is_live(i));
                let msg = some.then(|| format!("message {}", self.fresh()));
                Op::SetStatusMessage(id, msg)
            }
            Cmd::RequestInput(t, k) => {
                let id = self.pick(t, &|m, i| running(m, i) && m.tasks[i].ending.is_none());
                Op::RequestInput(id, self.key(id, k))
            }
            Cmd::WithdrawInput(t, k) => {
                let id = self.pick(t, &|m, i| !m.tasks[i].outstanding.is_empty());
                Op::WithdrawInput(id, self.key(id, k))
            }
            Cmd::AnswerInput(t, ks) => {
                let id = self.pick(t, &|m, i| !m.tasks[i].outstanding.is_empty());
                let mut responses = BTreeMap::new();
                for k in ks {
                    let key = self.key(id, k);
                    let n = self.fresh();
                    responses.insert(key.clone(), json(serde_json::json!({ "answer": key, "n": n })));
                }
                Op::AnswerInput(id, responses)
            }
            Cmd::Steer(t, size) => {
                // Fit includes completing tasks (handler exited): rejected, but reachable.
                let id = self.pick(t, &|m, i| m.is_live(i) && m.tasks[i].ending.is_none());
                let mut msg = format!("m{}", self.fresh());
                let len = match size {
                    SteerSize::Small => 0,
                    SteerSize::Medium => 40,
                    SteerSize::Huge => 16 * 1024 + 1,
                };
                while msg.len() < len {
                    msg.push('.');
                }
                Op::Steer(id, msg)
            }
            Cmd::TakeSteers(t) => {
                Op::TakeSteers(self.pick(t, &|m, i| running(m, i) && !m.tasks[i].steers.is_empty()))
            }
            Cmd::Spawn { .. } | Cmd::Dive { .. } => unreachable!("runs several commands"),
            Cmd::ReachSafePoint(t) => Op::ReachSafePoint(self.pick(t, &running)),
            Cmd::EnterWait(t) => Op::EnterWait(self.pick(t, &running)),
            Cmd::LeaveWait(t) => Op::LeaveWait(self.pick(t, &|m, i| running(m, i) && m.tasks[i].waits > 0)),
            Cmd::WaitPoint(t) => Op::WaitPoint(self.pick(t, &running)),
            Cmd::Pause(t) => Op::Pause(self.pick(t, &|m, i| {
                m.is_live(i) && m.status(i) != TaskStatus::Paused && m.tasks[i].ending.is_none()
            })),
            Cmd::PauseSelf(t, reason) => {
                let id = self.pick(t, &|m, i| {
                    running(m, i) && m.tasks[i].ending.is_none() && m.status(i) != TaskStatus::Paused
                });
                let reason = reason.then(|| format!("reason {}", self.fresh()));
                Op::PauseSelf(id, reason)
            }
            Cmd::Resume(t) => Op::Resume(self.pick(t, &|m, i| m.status(i) == TaskStatus::Paused)),
            Cmd::Cancel(t) => Op::Cancel(self.pick(t, &|m, i| m.is_live(i))),
            Cmd::Finish(t, kind) => {
                // Handlers usually return after their subtasks: fit = running leaves.
                let id = self.pick(t, &|m, i| running(m, i) && m.live_children(i) == 0);
                let n = self.fresh();
                let outcome = match kind {
                    FinishKind::Returned => {
                        HandlerOutcome::Returned(json(serde_json::json!({ "result": n })))
                    }
                    FinishKind::Errored { code, data } => {
                        let e = ErrorObject::new(ErrorCode(*code), format!("error {n}"));
                        HandlerOutcome::Errored(if *data {
                            e.with_data(serde_json::json!({ "n": n }))
                        } else {
                            e
                        })
                    }
                    FinishKind::Aborted => HandlerOutcome::Aborted,
                };
                Op::Finish(id, outcome)
            }
            Cmd::SetTtl(t, ttl) => Op::SetTtl(self.pick(t, &|_, _| true), *ttl),
            Cmd::HandleTimeout => Op::HandleTimeout,
            Cmd::HandleTimeoutAtDeadline => {
                if let Some(d) = self.forest.next_deadline() {
                    let d = d.as_millis();
                    if d > self.now && d - self.now <= 10_000_000 {
                        self.now = d;
                    }
                }
                Op::HandleTimeout
            }
            Cmd::DeleteTree(t) => Op::DeleteTree(self.pick(t, &|m, i| {
                m.tasks[i].parent.is_none() && m.tasks[i].outcome.is_some()
            })),
        }
    }

    // ----- running a command on both sides -------------------------------------
}
