//! What a run exercised.

use std::collections::{BTreeMap, BTreeSet};

use subtask::core::{SafePoint, TransitionError};

use super::super::reference::{Ending, Handler, Model, Pause, Ret};
use super::Op;

/// What a run exercised, to check that the generator reaches the interesting states.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// "command: outcome" → count (outcome is `Ok(..)` or the error variant).
    pub outcomes: BTreeMap<String, usize>,
    /// Wire statuses observed after some step.
    pub statuses: BTreeSet<&'static str>,
    /// Internal situations observed (fail-fast, completing while paused, ...).
    pub situations: BTreeMap<&'static str, usize>,
    pub max_depth: u32,
    pub max_children: usize,
    pub max_tasks: usize,
    pub steers_delivered: usize,
    pub results_emitted: usize,
}

impl Stats {
    pub fn merge(&mut self, o: &Stats) {
        for (k, v) in &o.outcomes {
            *self.outcomes.entry(k.clone()).or_default() += v;
        }
        self.statuses.extend(o.statuses.iter().copied());
        for (k, v) in &o.situations {
            *self.situations.entry(k).or_default() += v;
        }
        self.max_depth = self.max_depth.max(o.max_depth);
        self.max_children = self.max_children.max(o.max_children);
        self.max_tasks = self.max_tasks.max(o.max_tasks);
        self.steers_delivered += o.steers_delivered;
        self.results_emitted += o.results_emitted;
    }

    pub(super) fn record(&mut self, op: &Op, r: &Result<Ret, TransitionError>, m: &Model) {
        let outcome = match r {
            Ok(Ret::Pause(p)) => format!("Ok({p:?})"),
            Ok(Ret::Cancel(c)) => format!("Ok({c:?})"),
            Ok(Ret::Safe(SafePoint::Continue(v))) if !v.is_empty() => "Ok(Continue(steers))".to_owned(),
            Ok(Ret::Safe(sp)) => format!("Ok({sp:?})"),
            Ok(Ret::Steers(v)) if !v.is_empty() => "Ok(steers)".to_owned(),
            Ok(Ret::Keys(v)) if !v.is_empty() => "Ok(keys)".to_owned(),
            Ok(Ret::Bool(b)) => format!("Ok({b})"),
            Ok(_) => "Ok".to_owned(),
            Err(TransitionError::LimitExceeded { limit, .. }) => format!("LimitExceeded({limit:?})"),
            Err(e) => format!("{e:?}")
                .split(['(', ' '])
                .next()
                .unwrap_or("?")
                .to_owned(),
        };
        *self
            .outcomes
            .entry(format!("{}: {outcome}", op.name()))
            .or_default() += 1;
        let mut live = 0;
        for i in 0..m.tasks.len() {
            if !m.exists(i) {
                continue;
            }
            live += 1;
            let t = &m.tasks[i];
            self.statuses.insert(m.status(i).as_str());
            self.max_depth = self.max_depth.max(m.depth(i));
            self.max_children = self.max_children.max(t.children.len());
            let mut seen = |k: &'static str| *self.situations.entry(k).or_default() += 1;
            match (&t.outcome, &t.ending, &t.pause, &t.handler) {
                (Some(super::super::reference::Outcome::Failed(e)), ..)
                    if e.message.starts_with("subtask ") =>
                {
                    seen("failed by fail-fast")
                }
                (Some(super::super::reference::Outcome::Failed(e)), ..)
                    if e.message.starts_with("task expired") =>
                {
                    seen("failed by expiry")
                }
                (None, Some(Ending::Cancelling), _, Handler::Running) => seen("cancelling, handler running"),
                (None, Some(Ending::Failing(_)), _, Handler::Running) => seen("failing, handler running"),
                (None, Some(Ending::Failing(_)), _, Handler::Exited(_)) => {
                    seen("failing, waiting for children")
                }
                (None, None, Pause::Paused { .. }, Handler::Exited(_)) => seen("completing while paused"),
                (None, None, Pause::Paused { via }, _) if *via != i => seen("paused via an ancestor"),
                (None, None, Pause::Paused { .. }, Handler::Queued) => seen("paused before start"),
                (None, None, Pause::Pending { .. }, _) => seen("pause pending"),
                (None, None, Pause::Paused { .. }, Handler::Running) if t.waits > 0 => {
                    seen("paused while awaiting a subtask")
                }
                (None, None, Pause::Paused { .. }, _) if !t.outstanding.is_empty() => {
                    seen("paused with input outstanding")
                }
                _ => {}
            }
        }
        self.max_tasks = self.max_tasks.max(live);
        if !m.fx.deleted.is_empty() && matches!(op, Op::HandleTimeout) {
            *self.situations.entry("tree deleted by timeout").or_default() += 1;
        }
    }
}
