//! One `Op` on the core and on the reference model.

use subtask::core::{ChildOptions, Forest, RootOptions, TransitionError};
use subtask::model::{TaskId, Timestamp};

use super::super::reference::{Model, Ret};

use super::{Harness, Op, json};

impl Harness {
    pub(super) fn run_core(
        forest: &mut Forest,
        now: u64,
        op: &Op,
    ) -> (Result<Ret, TransitionError>, Option<TaskId>) {
        let t = Timestamp::from_millis(now);
        let unit = |r: Result<(), TransitionError>| r.map(|()| Ret::Unit);
        let r = match op {
            Op::CreateRoot { ttl, poll } => {
                let r = forest.create_root(
                    t,
                    RootOptions {
                        ttl_ms: *ttl,
                        poll_interval_ms: *poll,
                    },
                );
                return (r.clone().map(|_| Ret::Created), r.ok());
            }
            Op::CreateChild {
                parent,
                ttl,
                poll,
                fail_fast,
            } => {
                let opts = ChildOptions {
                    ttl_ms: *ttl,
                    poll_interval_ms: *poll,
                    fail_fast: *fail_fast,
                };
                let r = forest.create_child(t, *parent, opts);
                return (r.clone().map(|_| Ret::Created), r.ok());
            }
            Op::Start(id) => unit(forest.start(t, *id)),
            Op::SetStatusMessage(id, m) => unit(forest.set_status_message(t, *id, m.clone())),
            Op::RequestInput(id, k) => {
                unit(forest.request_input(t, *id, k.clone(), json(serde_json::json!({ "ask": k }))))
            }
            Op::WithdrawInput(id, k) => forest.withdraw_input(t, *id, k).map(Ret::Bool),
            Op::AnswerInput(id, r) => forest.answer_input(t, *id, r.clone()).map(Ret::Keys),
            Op::Steer(id, m) => unit(forest.steer(t, *id, m.clone())),
            Op::TakeSteers(id) => forest.take_steers(t, *id).map(Ret::Steers),
            Op::ReachSafePoint(id) => forest.reach_safe_point(t, *id).map(Ret::Safe),
            Op::EnterWait(id) => unit(forest.enter_wait(t, *id)),
            Op::LeaveWait(id) => forest.leave_wait(t, *id).map(Ret::Safe),
            Op::WaitPoint(id) => forest.wait_point(t, *id).map(Ret::Safe),
            Op::Pause(id) => forest.pause(t, *id).map(Ret::Pause),
            Op::PauseSelf(id, r) => unit(forest.pause_self(t, *id, r.clone())),
            Op::Resume(id) => unit(forest.resume(t, *id)),
            Op::Cancel(id) => forest.cancel(t, *id).map(Ret::Cancel),
            Op::Finish(id, o) => unit(forest.finish(t, *id, o.clone())),
            Op::SetTtl(id, ttl) => unit(forest.set_ttl(t, *id, *ttl)),
            Op::HandleTimeout => {
                forest.handle_timeout(t);
                Ok(Ret::Unit)
            }
            Op::DeleteTree(id) => unit(forest.delete_tree(t, *id)),
        };
        (r, None)
    }

    pub(super) fn run_model(
        model: &mut Model,
        now: u64,
        op: &Op,
        new_id: TaskId,
    ) -> Result<Ret, TransitionError> {
        match op {
            Op::CreateRoot { ttl, poll } => model.create_root(now, *ttl, *poll, new_id),
            Op::CreateChild {
                parent,
                ttl,
                poll,
                fail_fast,
            } => model.create_child(now, *parent, *ttl, *poll, *fail_fast, new_id),
            Op::Start(id) => model.start(*id),
            Op::SetStatusMessage(id, m) => model.set_status_message(*id, m.clone()),
            Op::RequestInput(id, k) => model.request_input(*id, k, json(serde_json::json!({ "ask": k }))),
            Op::WithdrawInput(id, k) => model.withdraw_input(*id, k),
            Op::AnswerInput(id, r) => model.answer_input(*id, r),
            Op::Steer(id, m) => model.steer(*id, m),
            Op::TakeSteers(id) => model.take_steers(*id),
            Op::ReachSafePoint(id) => model.reach_safe_point(*id),
            Op::EnterWait(id) => model.enter_wait(*id),
            Op::LeaveWait(id) => model.leave_wait(*id),
            Op::WaitPoint(id) => model.wait_point(*id),
            Op::Pause(id) => model.pause(*id),
            Op::PauseSelf(id, r) => model.pause_self(*id, r.clone()),
            Op::Resume(id) => model.resume(*id),
            Op::Cancel(id) => model.cancel(*id),
            Op::Finish(id, o) => model.finish(*id, o.clone()),
            Op::SetTtl(id, ttl) => model.set_ttl(*id, *ttl),
            Op::HandleTimeout => model.handle_timeout(now),
            Op::DeleteTree(id) => model.delete_tree(*id),
        }
    }
}
