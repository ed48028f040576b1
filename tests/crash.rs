//! Crash test (issue 5): the real `subtask serve` binary on a real SQLite
//! file, killed with SIGKILL at random moments while clients drive task
//! trees over HTTP (subtasks, input requests, steer, pause/resume, cancel),
//! and restarted on the same database, round after round.
//!
//! Everything a client was shown counts as acknowledged: every task id in a
//! `CreateTaskResult`, in a `childTaskIds` list, every snapshot of
//! `tasks/get`, `tasks/pause`, `tasks/resume` and `notifications/tasks`, and
//! every acked `tasks/update`, `tasks/steer` and `tasks/cancel`. After each
//! restart every acknowledged task must still be there, the recovered trees
//! must keep the invariants of `docs/lifecycle.md` that snapshots can show,
//! and the tasks whose handler died must have ended as the restart rules
//! say. After the last round every tree must reach a terminal state.
//!
//! `CRASH_SEED=<u64>` replays the random choices (kill moments and
//! triggers, tool arguments, client actions; the interleaving with the
//! server's own timing is not reproducible); `CRASH_ROUNDS=<n>` sets the
//! number of kills (default 25); `CRASH_TRIGGER=create|steer|update|pause|
//! resume|cancel|notification` makes every kill land right after the first
//! acknowledgement of that kind. Timeouts are hang guards only.
//!
//! The parts: `crash/model.rs` records what the clients were shown and
//! checks every snapshot against it, `crash/checks.rs` holds the rules after
//! a restart and at the end, `crash/driver.rs` starts, kills and restarts
//! the binary, and `crash/clients.rs` drives the trees over HTTP. This file
//! holds the test: the rounds, the kill plans and the report. The seed and
//! its generator are `tests/support/seed.rs`.

#![cfg(unix)]

mod support;

#[path = "crash/checks.rs"]
mod checks;
#[path = "crash/clients.rs"]
mod clients;
#[path = "crash/driver.rs"]
mod driver;
#[path = "crash/model.rs"]
mod model;
#[path = "crash/scratch.rs"]
mod scratch;

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use checks::check_final;
use clients::{creator, drive, finish_every_tree};
use driver::{Trigger, check_log, end_round, read_everything, restart};
use model::{Before, Model};
use scratch::Scratch;
use support::process::ServerProcess;
use support::redone::Redone;
use support::seed::{Rng, env_u64};

/// Hang guard for every tree to end after the last restart.
const FINISH_TIMEOUT: Duration = Duration::from_secs(240);
const DEFAULT_ROUNDS: u32 = 25;

// ----- the test ------------------------------------------------------------------------

fn fail_on_violations(model: &Mutex<Model>, seed: u64, when: &str) {
    scratch::fail_on_violations(model, "crash test", "CRASH_SEED", seed, when);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let rounds = env_u64("CRASH_ROUNDS").unwrap_or(u64::from(DEFAULT_ROUNDS));
    crash_test(None, rounds).await;
}

/// The same on PostgreSQL (a database of its own on the test run's server,
/// `scripts/pg.sh`): `CRASH_PG_ROUNDS` kills (default 12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_nothing_acknowledged_on_postgres() {
    let rounds = env_u64("CRASH_PG_ROUNDS").unwrap_or(12);
    let url = tokio::task::spawn_blocking(support::pg::fresh_database)
        .await
        .unwrap();
    crash_test(Some(url), rounds).await;
}

/// The tasks a client has seen completed so far.
fn completed_tasks(model: &Mutex<Model>) -> std::collections::HashSet<String> {
    let m = model.lock().unwrap();
    m.tasks
        .iter()
        .filter(|(_, t)| {
            t.terminal
                .as_ref()
                .is_some_and(|s| model::status_of(s) == "completed")
        })
        .map(|(id, _)| id.clone())
        .collect()
}

/// Reads one process's log into `redone` and reports finished work it ran again.
fn check_redone(
    model: &Mutex<Model>,
    redone: &mut Redone,
    log: &std::path::Path,
    completed: &std::collections::HashSet<String>,
) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let (steps, tasks) = (redone.steps_redone.len(), redone.tasks_redone.len());
    redone.feed(&text, completed, &log.display().to_string());
    let mut m = model.lock().unwrap();
    for v in redone.steps_redone[steps..]
        .iter()
        .chain(&redone.tasks_redone[tasks..])
    {
        m.violate(format!("finished work ran again: {v}"));
    }
}

/// `rounds` kills on the SQLite file of a scratch directory, or on the
/// PostgreSQL database `pg`.
async fn crash_test(pg: Option<String>, rounds: u64) {
    let seed = support::seed::from_env("CRASH_SEED");
    let forced_trigger = std::env::var("CRASH_TRIGGER").ok().map(|t| Trigger::parse(&t));
    let store = if pg.is_some() { "PostgreSQL" } else { "SQLite" };
    println!("crash test on {store}: {rounds} rounds");
    let started = Instant::now();
    let scratch = Scratch::new("crash", "crash test");
    // On PostgreSQL every start is the same cluster instance: a restart
    // takes its trees back at once, as a restart on SQLite does (with a new
    // id they would come back only after the old lease expired; that
    // takeover is tests/scale_out.rs's).
    let same_instance: Vec<String> = if pg.is_some() {
        vec![
            "--instance-id".into(),
            "5c7a1e00-0000-4000-8000-00000000c4a5".into(),
        ]
    } else {
        Vec::new()
    };
    let db = pg.unwrap_or_else(|| scratch.0.join("tasks.db").display().to_string());
    let bin = support::process::private_binary(&scratch.0);
    let mut rng = Rng::new(seed);
    let model = Arc::new(Mutex::new(Model::default()));
    let mut before: HashMap<String, Before> = HashMap::new();
    let mut kills: Vec<String> = Vec::new();
    // What each server process's handlers ran, from its log: nothing a
    // client had seen completed, and no step that had been recorded, may
    // run again in a later process.
    let mut redone = Redone::default();

    for r in 0..rounds {
        let durability = if rng.chance(0.3) { "relaxed" } else { "full" };
        let mut args: Vec<String> = vec![
            "--db".into(),
            db.clone(),
            "--durability".into(),
            durability.into(),
        ];
        args.extend(same_instance.iter().cloned());
        let log = scratch.0.join(format!("server-{r:02}.log"));
        model.lock().unwrap().epoch += 1;
        let completed = completed_tasks(&model);

        // Some kills land during start-up and recovery, before the server answers.
        if r > 0 && rng.chance(0.1) {
            let env = [("RUST_LOG", support::redone::RUST_LOG)];
            let server = ServerProcess::spawn_env(&bin, &args, &log, &env);
            tokio::time::sleep(Duration::from_millis(rng.range(0, 60))).await;
            let exited_early = server.exited();
            server.kill();
            let status = server.wait();
            let port_taken = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("cannot listen on");
            if let Some(s) = exited_early {
                if !port_taken {
                    model
                        .lock()
                        .unwrap()
                        .violate(format!("the server exited during start-up: {s}"));
                }
            } else if status.and_then(|s| s.signal()) != Some(9) {
                model
                    .lock()
                    .unwrap()
                    .violate(format!("the server ended by itself: {status:?}"));
            }
            check_log(&model, &log);
            check_redone(&model, &mut redone, &log, &completed);
            println!("round {r:2}: killed during start-up ({durability})");
            kills.push("start-up".into());
            fail_on_violations(&model, seed, &format!("in round {r}"));
            continue;
        }

        let triggers = [
            Trigger::Create,
            Trigger::Steer,
            Trigger::Update,
            Trigger::Pause,
            Trigger::Resume,
            Trigger::Cancel,
            Trigger::SseTerminal,
        ];
        let mut after_ack = rng.chance(0.5);
        let mut trigger = *rng.pick(&triggers).unwrap();
        if let Some(forced) = forced_trigger {
            (after_ack, trigger) = (true, forced);
        }
        let delay = if after_ack {
            rng.range(0, 600)
        } else if rng.chance(0.3) {
            rng.range(0, 100)
        } else {
            rng.range(100, 2500)
        };
        let plan_delay = Duration::from_millis(delay);
        let round = restart(&bin, &model, &args, &log, &before).await;
        fail_on_violations(&model, seed, &format!("after restart {r}"));
        // The plan's clock starts when the clients do, after the check.
        *round.plan.lock().unwrap() = after_ack.then(|| (trigger, Instant::now() + plan_delay));

        let live: Vec<String> = model.lock().unwrap().running_trees();
        for root in &live {
            round.spawn(drive(round.clone(), root.clone(), rng.fork(), false));
        }
        round.spawn_listener(live.clone());
        let new_trees = if live.len() >= 6 {
            rng.range(0, 2)
        } else {
            rng.range(1, 4)
        };
        round.spawn(creator(round.clone(), rng.fork(), new_trees));

        let how = if after_ack {
            tokio::select! {
                () = round.kill_sent.notified() => {}
                () = tokio::time::sleep(plan_delay + Duration::from_millis(1500)) => {}
            }
            match *round.fired.lock().unwrap() {
                Some(t) => format!("right after an acknowledged {t:?}"),
                None => format!("after waiting for an acknowledged {trigger:?} in vain"),
            }
        } else {
            tokio::time::sleep(plan_delay).await;
            format!("after {delay} ms")
        };
        if let Some(s) = round.server.exited()
            && !round.server.is_killed()
        {
            model
                .lock()
                .unwrap()
                .violate(format!("the server exited by itself: {s}"));
        }
        end_round(&round, &model).await;
        check_redone(&model, &mut redone, &log, &completed);
        {
            let m = model.lock().unwrap();
            let running = m.running_trees().len();
            println!(
                "round {r:2}: killed {how} ({durability}); drove {} trees and created {}; {running} trees \
                 not ended at the kill, {} tasks known",
                live.len(),
                new_trees,
                m.tasks.len()
            );
        }
        kills.push(how);
        before = model.lock().unwrap().before();
        fail_on_violations(&model, seed, &format!("in round {r}"));
    }

    // The last start: nothing is killed any more; every tree must end.
    let log = scratch.0.join("server-final.log");
    model.lock().unwrap().epoch += 1;
    let completed = completed_tasks(&model);
    let mut args: Vec<String> = vec!["--db".into(), db.clone()];
    args.extend(same_instance.iter().cloned());
    let round = restart(&bin, &model, &args, &log, &before).await;
    fail_on_violations(&model, seed, "after the last restart");
    finish_every_tree(&round, &model, &mut rng, FINISH_TIMEOUT, "after the last restart").await;
    read_everything(&round).await;
    check_final(&mut model.lock().unwrap());
    end_round(&round, &model).await;
    check_redone(&model, &mut redone, &log, &completed);
    fail_on_violations(&model, seed, "at the end");

    let m = model.lock().unwrap();
    let mut acks: Vec<(&&str, &u64)> = m.stats.acks.iter().collect();
    acks.sort();
    let st = &m.stats;
    println!(
        "crash test: seed {seed}: {} kills, {} trees, {} tasks; across restarts: {} tasks resumed in place \
         ({} with an answer to hand back, {} paused), {} failed by the restart, {} tasks parked on input; \
         {} cancels of parked tasks; {} terminal notifications; acks {acks:?}; journal: {}; {:.1} s",
        kills.len(),
        st.trees,
        m.tasks.len(),
        st.reruns_seen,
        st.answers_across_restart,
        st.pauses_across_restart,
        st.restart_failures,
        st.parked_across_restart,
        st.parked_cancels,
        st.sse_terminal,
        redone.summary(),
        started.elapsed().as_secs_f64()
    );
    // The kills must have hit running work, or the run proved little (with
    // a handful of rounds an unlucky seed may legitimately kill only idle
    // servers, so the guard needs enough rounds).
    assert!(
        rounds < 10 || (m.stats.reruns_seen > 0 && redone.reruns > 0 && redone.steps_replayed > 0),
        "no task resumed in place and no step was replayed in {rounds} rounds: the kills hit no running work \
         ({})",
        redone.summary()
    );
    assert!(m.stats.trees > 0);
}
