//! The rules the crash test checks on the model after each restart (what
//! recovery must have done to the tasks shown before the kill) and after
//! the last round (how every tree must have ended). Pure functions of the
//! model and the snapshots read; no I/O.

use std::collections::HashMap;

use serde_json::Value;

use crate::model::{Before, Model, Tool, answer, ids, is_terminal, restart_failed, status_of};

// ----- checks after a restart and at the end ---------------------------------------------

/// What recovery must have done to the tasks that were shown before the kill.
pub fn check_restart(model: &mut Model, before: &HashMap<String, Before>, seen: &HashMap<String, Value>) {
    let mut v = Vec::new();
    for (id, b) in before {
        let Some(snap) = seen.get(id) else { continue };
        let status = status_of(snap);
        let terminal = is_terminal(status);
        // Both tools are resumable: a task that was running resumes in
        // place (its parent's re-run spawns it again), it is not failed.
        if !b.terminal && restart_failed(snap) {
            model.stats.restart_failures += 1;
            v.push(format!(
                "task {id} ({}, {}) of a resumable tool was failed by the restart instead of resuming in \
                 place: {snap}",
                b.tool.name(),
                if b.is_root { "root" } else { "subtask" },
            ));
        }
        if b.parked_on_input {
            model.stats.parked_across_restart += 1;
            if terminal {
                v.push(format!(
                    "task {id} ({}) waited for input and was not touched, yet it ended across the restart \
                     instead of running again: {snap}",
                    b.tool.name()
                ));
            }
        }
        if b.pause_held && !b.terminal {
            model.stats.pauses_across_restart += 1;
        }
        if !b.terminal && model.tasks.get(id).is_some_and(|t| !t.answered.is_empty()) {
            // The answer must come back to the handler that runs again.
            model.stats.answers_across_restart += 1;
        }
        if b.pause_held && !terminal && status != "paused" {
            v.push(format!(
                "pause lost across the restart: fanout root {id} was paused by a client and is {status}: {snap}"
            ));
        }
        if !b.terminal && !terminal {
            model.stats.reruns_seen += 1;
        }
    }
    for x in v {
        model.violate(x);
    }
}

/// Whether `got` lists a subsequence of `sent`, each at most once.
pub fn is_subsequence(got: &[String], sent: &[String]) -> bool {
    let mut it = sent.iter();
    got.iter().all(|g| it.any(|s| s == g))
}

/// After the last round: every tree ended, and ended as its tool and the
/// clients' actions allow.
pub fn check_final(model: &mut Model) {
    let mut v = Vec::new();
    for (id, t) in &model.tasks {
        let Some(tree) = model.trees.get(&t.root) else {
            continue;
        };
        let Some(snap) = &t.terminal else {
            v.push(format!(
                "task {id} of {} {} did not end (last seen {:?})",
                tree.tool.name(),
                t.root,
                t.last_status
            ));
            continue;
        };
        let status = status_of(snap);
        let is_root = t.parent.is_none();
        match status {
            "failed" => {
                let expected = tree
                    .fail_at
                    .as_ref()
                    .map(|p| format!("fanout node {p} failed as requested"));
                let as_requested = expected.is_some_and(|m| snap["error"]["message"] == m.as_str());
                if !restart_failed(snap) && !as_requested {
                    v.push(format!("task {id} failed for no reason the test knows: {snap}"));
                }
            }
            "cancelled" => {
                // deep_research cancels queued sub-questions when a steer re-plans.
                let replanned = tree.tool == Tool::Research && tree.steered && !is_root;
                if !model.cancel_covers(id) && !replanned {
                    v.push(format!(
                        "task {id} was cancelled, but no client cancelled it: {snap}"
                    ));
                }
            }
            _ => {}
        }
        if is_root && tree.tool == Tool::Fanout && status != "completed" && !model.cancel_covers(id) {
            v.push(format!("fanout root {id} ({}) ended {status}: {snap}", tree.args));
        }
        if tree.tool == Tool::Fanout && status == "completed" {
            let sc = &snap["result"]["structuredContent"];
            let steers = ids(&sc["steers"]);
            if !is_subsequence(&steers, &t.steers) {
                v.push(format!(
                    "I10: fanout task {id} reports steers {steers:?}, not an in-order, at-most-once \
                     subsequence of the steers sent {:?}",
                    t.steers
                ));
            }
            let path = sc["path"].as_str().unwrap_or_default();
            if tree.input_at.as_deref() == Some(path) && sc["input"] != answer() {
                v.push(format!(
                    "fanout node {path} ({id}) completed without the answer it was given: {}",
                    sc["input"]
                ));
            }
            if is_root && path != "0" {
                v.push(format!("fanout root {id} reports path {path:?}"));
            }
            for c in sc["children"].as_array().into_iter().flatten() {
                let cid = c["taskId"].as_str().unwrap_or_default();
                if !t.children.iter().any(|k| k == cid) {
                    v.push(format!("fanout task {id} reports a child {cid} it does not list"));
                    continue;
                }
                let actual = model
                    .tasks
                    .get(cid)
                    .and_then(|k| k.terminal.as_ref())
                    .map(|s| status_of(s).to_owned());
                if actual.as_deref() != c["status"].as_str() {
                    v.push(format!(
                        "fanout task {id} reports child {cid} as {}, but the child is {actual:?}",
                        c["status"]
                    ));
                }
            }
        }
        if tree.tool == Tool::Research && is_root && status == "failed" && !restart_failed(snap) {
            v.push(format!("deep_research root {id} failed: {snap}"));
        }
    }
    for x in v {
        model.violate(x);
    }
}
