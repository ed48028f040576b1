//! The clients of the crash test: one creates trees at random moments, and
//! every tree has its own sequential client that reads it top-down,
//! answers input, steers, pauses, resumes and cancels at random (or, in
//! the last round, only resumes and answers until the tree ends). Every
//! request and its acknowledgement is recorded in the model first. They
//! drive one server (the crash test's `Round`) or several (the scale-out
//! test's), through `driver::Calls`.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::driver::{Calls, Stop, Trigger};
use crate::model::{Source, Tool, answer, is_terminal, short, status_of};
use crate::support::process::Rpc;
use crate::support::seed::Rng;

/// TTL of every tree: long, so no tree expires or is deleted during the test.
pub const TTL_MS: u64 = 3_600_000;

// ----- the clients -------------------------------------------------------------------

pub const QUESTIONS: [&str; 4] = [
    "How do MCP tasks handle long-running work?",
    "Why do grid-scale batteries degrade?",
    "How does async Rust with Tokio schedule tasks?",
    "How does sleep affect circadian rhythms?",
];
pub const FOCUS: [&str; 4] = [
    "focus on battery storage",
    "focus on tokio",
    "focus on sleep",
    "focus on cancellation",
];

pub fn random_call(rng: &mut Rng) -> (Tool, Value) {
    if rng.chance(0.25) {
        let args = json!({
            "question": rng.pick(&QUESTIONS).unwrap(),
            "breadth": rng.range(1, 4),
            "depth": rng.range(1, 3),
        });
        return (Tool::Research, args);
    }
    let width = rng.range(1, 4);
    let depth = if width == 3 { 1 } else { rng.range(0, 3) };
    let (steps, step_ms) = if rng.chance(0.4) {
        (rng.range(10, 30), rng.range(50, 150))
    } else {
        (rng.range(1, 7), rng.range(5, 120))
    };
    let mut args =
        json!({"width": width, "depth": depth, "steps": steps, "stepMs": step_ms, "ttlMs": TTL_MS});
    let child = |rng: &mut Rng| format!("0.{}", rng.range(0, width));
    if rng.chance(0.45) {
        args["inputAt"] = json!("0");
    } else if depth > 0 && rng.chance(0.35) {
        args["inputAt"] = json!(child(rng));
    }
    if depth > 0 && rng.chance(0.2) {
        let p = child(rng);
        if args["inputAt"] != p.as_str() {
            args["failAt"] = json!(p);
        }
    }
    (Tool::Fanout, args)
}

/// Creates `count` trees at random moments, each driven by its own client.
pub async fn creator<R: Calls>(round: Arc<R>, mut rng: Rng, count: u64) {
    for _ in 0..count {
        tokio::time::sleep(Duration::from_millis(rng.range(0, 700))).await;
        if round.stopped() {
            return;
        }
        let (tool, args) = random_call(&mut rng);
        let Ok(r) = round
            .call(
                "tools/call",
                json!({"name": tool.name(), "arguments": args.clone()}),
            )
            .await
        else {
            return;
        };
        match r {
            Rpc::Ok(res) if res["resultType"] == "task" && res["taskId"].is_string() => {
                let id = res["taskId"].as_str().unwrap().to_owned();
                {
                    let mut m = round.model();
                    m.add_tree(&id, tool, args);
                    m.observe(&res, Source::Seed);
                }
                round.acked(Trigger::Create, "CreateTaskResult");
                round.spawn(drive(round.clone(), id.clone(), rng.fork(), false));
                round.spawn_listener(vec![id]);
            }
            other => round.violate(format!(
                "tools/call {} {args} did not create a task: {other:?}",
                tool.name()
            )),
        }
    }
}

pub async fn steer<R: Calls>(round: &R, id: &str, message: String) -> Result<(), Stop> {
    {
        let mut m = round.model();
        if let Some(t) = m.tasks.get_mut(id) {
            t.steers.push(message.clone());
        }
        let root = m.tasks.get(id).map(|t| t.root.clone()).unwrap_or_default();
        if let Some(tree) = m.trees.get_mut(&root)
            && tree.tool == Tool::Research
        {
            tree.steered = true;
        }
    }
    if let Rpc::Ok(_) = round
        .call("tasks/steer", json!({"taskId": id, "message": message}))
        .await?
    {
        round.acked(Trigger::Steer, "tasks/steer");
    }
    Ok(())
}

pub async fn answer_input<R: Calls>(round: &R, snap: &Value) -> Result<(), Stop> {
    let id = snap["taskId"].as_str().unwrap_or_default().to_owned();
    let keys: Vec<String> = snap["inputRequests"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    if keys.is_empty() {
        return Ok(());
    }
    // Answered right after the read that showed the keys outstanding, with
    // nothing else sent to the task in between: an ack means they were taken.
    let exact = round.model().parked_on_input(&id);
    round.model().touch(&id);
    let responses: serde_json::Map<String, Value> = keys.iter().map(|k| (k.clone(), answer())).collect();
    if let Rpc::Ok(_) = round
        .call("tasks/update", json!({"taskId": id, "inputResponses": responses}))
        .await?
    {
        if exact && let Some(t) = round.model().tasks.get_mut(&id) {
            t.answered.extend(keys);
        }
        round.acked(Trigger::Update, "tasks/update");
    }
    Ok(())
}

pub async fn pause<R: Calls>(round: &R, id: &str) -> Result<(), Stop> {
    let sent = round.model().next_seq();
    if let Rpc::Ok(snap) = round.call("tasks/pause", json!({"taskId": id})).await? {
        {
            let mut m = round.model();
            if let Some(t) = m.tasks.get_mut(id) {
                t.paused_by_us = true;
            }
            m.observe(&snap, Source::Ordered { sent });
        }
        round.acked(Trigger::Pause, "tasks/pause");
    }
    Ok(())
}

pub async fn resume<R: Calls>(round: &R, id: &str) -> Result<(), Stop> {
    round.model().release_pauses(id);
    let sent = round.model().next_seq();
    if let Rpc::Ok(snap) = round.call("tasks/resume", json!({"taskId": id})).await? {
        round.model().observe(&snap, Source::Ordered { sent });
        round.acked(Trigger::Resume, "tasks/resume");
    }
    Ok(())
}

pub async fn cancel<R: Calls>(round: &R, id: &str) -> Result<(), Stop> {
    let parked = {
        let mut m = round.model();
        let parked = m.parked_on_input(id);
        m.release_pauses(id);
        for t in m.subtree(id) {
            m.touch(&t);
        }
        if let Some(t) = m.tasks.get_mut(id) {
            t.cancel_sent = true;
        }
        parked
    };
    if let Rpc::Ok(_) = round.call("tasks/cancel", json!({"taskId": id})).await? {
        if parked {
            let mut m = round.model();
            m.stats.parked_cancels += 1;
            if let Some(t) = m.tasks.get_mut(id) {
                t.must_end_cancelled = true;
            }
        }
        round.acked(Trigger::Cancel, "tasks/cancel");
    }
    Ok(())
}

/// One client per tree: reads the tree, answers input, and (unless
/// `finish`) steers, pauses, resumes and cancels at random. With `finish`,
/// it only resumes what is paused and answers input, until the root ends.
pub async fn drive<R: Calls>(round: Arc<R>, root: String, mut rng: Rng, finish: bool) {
    let _ = drive_inner(&*round, &root, &mut rng, finish).await;
}

pub async fn drive_inner<R: Calls>(round: &R, root: &str, rng: &mut Rng, finish: bool) -> Result<(), Stop> {
    let tool = round
        .model()
        .tree_of(root)
        .map(|t| t.tool)
        .unwrap_or(Tool::Fanout);
    let mut n = 0u64;
    // Some clients leave input requests waiting for a whole round.
    let answer_p = *rng.pick(&[0.0, 0.05, 0.3]).unwrap();
    loop {
        if round.stopped() {
            return Err(Stop);
        }
        let snaps = round.walk(root, true).await?;
        let Some(root_snap) = snaps.iter().find(|s| s["taskId"] == root) else {
            return Ok(());
        };
        if is_terminal(status_of(root_snap)) {
            return Ok(());
        }
        let live: Vec<&Value> = snaps.iter().filter(|s| !is_terminal(status_of(s))).collect();
        let mut touched_now: HashSet<String> = HashSet::new();
        for s in live.iter().filter(|s| status_of(s) == "input_required") {
            if finish || rng.chance(answer_p) {
                answer_input(round, s).await?;
                touched_now.insert(s["taskId"].as_str().unwrap_or_default().to_owned());
            }
        }
        let id_of = |s: &Value| s["taskId"].as_str().unwrap_or_default().to_owned();
        let paused: Vec<String> = live
            .iter()
            .filter(|s| status_of(s) == "paused")
            .map(|s| id_of(s))
            .collect();
        if finish {
            // Resume the topmost paused tasks; their descendants follow.
            let set: HashSet<&String> = paused.iter().collect();
            for s in live.iter().filter(|s| status_of(s) == "paused") {
                let parent = s["parentTaskId"].as_str().map(str::to_owned);
                if !parent.is_some_and(|p| set.contains(&p)) {
                    resume(round, &id_of(s)).await?;
                }
            }
        } else {
            if rng.chance(0.12) {
                let target = if rng.chance(0.6) {
                    root.to_owned()
                } else {
                    id_of(rng.pick(&live).unwrap())
                };
                n += 1;
                let epoch = round.model().epoch;
                let message = match tool {
                    Tool::Research if target == root => rng.pick(&FOCUS).unwrap().to_string(),
                    _ => format!("steer {} e{epoch} #{n}", short(&target)),
                };
                steer(round, &target, message).await?;
            }
            if rng.chance(0.07) {
                let candidates: Vec<&&Value> = live.iter().filter(|s| status_of(s) != "paused").collect();
                let target = if rng.chance(0.5) && status_of(root_snap) != "paused" {
                    Some(root.to_owned())
                } else {
                    rng.pick(&candidates).map(|s| id_of(s))
                };
                if let Some(t) = target {
                    pause(round, &t).await?;
                }
            }
            for id in &paused {
                let ours = round.model().tasks.get(id).is_some_and(|t| t.paused_by_us);
                if ours && rng.chance(0.05) {
                    resume(round, id).await?;
                }
            }
            if rng.chance(0.04) {
                let parked: Vec<String> = live
                    .iter()
                    .filter(|s| status_of(s) == "input_required")
                    .map(|s| id_of(s))
                    .filter(|id| !touched_now.contains(id))
                    .collect();
                let others: Vec<String> = live.iter().map(|s| id_of(s)).filter(|id| id != root).collect();
                let target = if !parked.is_empty() && rng.chance(0.7) {
                    rng.pick(&parked).cloned()
                } else if rng.chance(0.15) {
                    Some(root.to_owned())
                } else {
                    rng.pick(&others).cloned()
                };
                if let Some(t) = target {
                    cancel(round, &t).await?;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
    }
}

/// The last phase of a fault test: every tree not ended is driven to its
/// end (answering and resuming only); a tree still running after `timeout`
/// is a hang, recorded as a violation naming `when`.
pub async fn finish_every_tree<R: Calls + Send + Sync + 'static>(
    round: &Arc<R>,
    model: &std::sync::Mutex<crate::model::Model>,
    rng: &mut Rng,
    timeout: Duration,
    when: &str,
) {
    let live = model.lock().unwrap().running_trees();
    let mut drivers: Vec<tokio::task::JoinHandle<()>> = live
        .iter()
        .map(|root| tokio::spawn(drive(round.clone(), root.clone(), rng.fork(), true)))
        .collect();
    let finished = tokio::time::timeout(timeout, futures::future::join_all(drivers.iter_mut())).await;
    for d in &drivers {
        d.abort();
    }
    if finished.is_err() {
        let mut m = model.lock().unwrap();
        let open: Vec<String> = live
            .iter()
            .filter(|r| !m.is_terminal(r))
            .map(|r| format!("{r} last {:?}", m.tasks[r].last_status))
            .collect();
        m.violate(format!(
            "hang: trees did not end within {timeout:?} {when}: {open:?}"
        ));
    }
}
