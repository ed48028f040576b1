//! Scale-out fault test: three real `subtask serve` processes on one
//! PostgreSQL database, while clients spread every kind of request across
//! them (creates, reads, input answers, steer, pause, resume, cancel, and
//! `subscriptions/listen` streams on an instance other than the tree's
//! creator), and one fault per round at a random moment: SIGKILL of an
//! instance (restarted later with the same `--instance-id` or a fresh one,
//! sometimes right away), SIGSTOP of an instance past its lease and SIGCONT
//! (the zombie must fence itself and rejoin the cluster with a new epoch by
//! itself, without exiting, and serve again), or a PostgreSQL restart
//! (`pg_ctl stop -m immediate` and start: every instance rides it out
//! without exiting; one that lost its lease in it fences itself and
//! rejoins). Once per run (the middle round), PostgreSQL stays down for
//! twice the lease under load: every instance fences itself, none exits,
//! and every one rejoins once PostgreSQL is back.
//!
//! Checks, the crash test's wherever they apply (`crash/model.rs`,
//! `crash/checks.rs`):
//!
//! 1. every acknowledged task is there (read through any instance) after
//!    every round and, once seen terminal, never changes; every snapshot
//!    keeps the invariants the crash model checks;
//! 2. the trees a killed or stopped instance owned are taken over like a
//!    restart, within the lease and a little more: non-resumable tasks that
//!    were running end (`server_restarted` when they were parked on input),
//!    `fanout` roots run again, pauses hold (`check_restart` on those trees);
//!    so are the trees of every instance that fenced itself in a database
//!    fault; in a last phase without faults every tree ends (`check_final`);
//! 3. never two live handlers for one task, from the handler events of every
//!    process's log (`scale_out/logs.rs`), each incarnation of a process
//!    (from its start or its rejoining to its next fence) counting as a
//!    process of its own: a handler starts while another incarnation's is
//!    open only when that one was killed, stopped past its lease or fenced,
//!    no incarnation logs a handler event for a task after another started
//!    one, a process stopped past its lease runs no handler after SIGCONT
//!    until it rejoined, and no handler runs while an instance is fenced;
//! 4. every steer is delivered at most once and in order, and every steer
//!    acknowledged to a completed `fanout` node while its completing run was
//!    under way on one instance is reported by it;
//! 5. no instance exits by itself, and the logs hold no panic and no ERROR
//!    line but a zombie's writes refused for its lost lease; an instance
//!    fences itself only when it was stopped past its lease or PostgreSQL
//!    was away for more than two thirds of it.
//!
//! While PostgreSQL restarts, a request that needs it may be answered "the
//! task database is unavailable" (the shared design's clear error for the
//! requests in flight), and a fenced instance answers "lost its cluster
//! lease" (`data.reason` `"fenced"`) until it rejoined: a read is sent
//! again, anything else counts as not acknowledged. The test's PostgreSQL
//! runs with its default settings (fsync on): its start after an immediate
//! stop then syncs the data directory, which may outlast the lease.
//!
//! `SCALE_SEED=<u64>` replays the random choices (the interleaving with the
//! processes' own timing is not reproducible), `SCALE_ROUNDS=<n>` sets the
//! number of rounds (one fault each; default 30), `SCALE_FAULT=kill|stop|
//! postgres|outage` makes every fault of that kind. The test runs its own
//! PostgreSQL server (`tests/support/pg_server.rs`, Debian's binaries, which
//! `scripts/pg.sh` installs), because it restarts it; without the binaries
//! it fails, naming the fix. A failed run keeps its scratch directory (every
//! instance's log) and names it.

#![cfg(unix)]

mod support;

#[allow(dead_code)]
#[path = "crash/checks.rs"]
mod checks;
#[allow(dead_code)]
#[path = "crash/clients.rs"]
mod clients;
#[path = "scale_out/cluster.rs"]
mod cluster;
#[allow(dead_code)]
#[path = "crash/driver.rs"]
mod driver;
#[path = "scale_out/logs.rs"]
mod logs;
#[allow(dead_code)]
#[path = "crash/model.rs"]
mod model;
#[path = "scale_out/round.rs"]
mod round;
#[path = "crash/scratch.rs"]
mod scratch;

use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use checks::{check_final, check_restart};
use clients::{drive, finish_every_tree};
use cluster::{Cluster, Proc, instance_id};
use driver::{Calls, REQUEST_TIMEOUT, Trigger, read_everything};
use logs::{ProcFacts, REJOINED, bad_lines, check_handlers, check_steers, first_line, incarnations, tail};
use model::{Before, Model, is_terminal, status_of};
use round::{Fault, FaultKind, MultiRound, Plan, Shared, creator};
use scratch::Scratch;
use support::process::{Rpc, rpc};
use support::seed::{Rng, env_u64};

const DEFAULT_ROUNDS: u64 = 30;
const SLOTS: usize = 3;
/// `--lease` of every instance, in seconds.
const LEASE_S: f64 = 3.0;
/// The promise: a survivor takes a dead instance's trees over within the
/// lease and about a second; flagged beyond the lease and this much.
const TAKEOVER_SLACK: Duration = Duration::from_millis(2500);
/// Hang guard for a takeover, beyond the lease.
const SETTLE_GUARD: Duration = Duration::from_secs(15);
/// Hang guard for a fenced instance to rejoin (after SIGCONT, or once
/// PostgreSQL is back).
const REJOIN_GUARD: Duration = Duration::from_secs(15);
/// The long outage lasts this many leases.
const OUTAGE_LEASES: u32 = 2;
/// Hang guard for every tree to end in the last phase.
const FINISH_TIMEOUT: Duration = Duration::from_secs(240);

fn fail_on_violations(model: &Mutex<Model>, seed: u64, when: &str) {
    scratch::fail_on_violations(model, "scale-out test", "SCALE_SEED", seed, when);
}

fn parse_fault(name: &str) -> FaultKind {
    match name {
        "kill" => FaultKind::Kill,
        "stop" => FaultKind::Stop,
        "postgres" => FaultKind::Postgres,
        "outage" => FaultKind::Outage,
        other => panic!("SCALE_FAULT={other:?}: expected kill, stop, postgres or outage"),
    }
}

/// Reports every instance that exits without the test having killed or
/// stopped it, and starts it again (same id), so that the round ends and
/// its checks run before the test fails.
async fn monitor(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for p in shared.cluster.all() {
            if p.faulted() || p.exit_seen.load(Ordering::SeqCst) {
                continue;
            }
            if let Some(status) = p.server.exited() {
                p.exit_seen.store(true, Ordering::SeqCst);
                // A lost lease (a stall, a database outage of any length)
                // is ridden out: no exit is expected.
                shared.violate(format!(
                    "instance {} ({}) exited by itself: {status}; its log ends:\n{}",
                    p.name,
                    p.instance_id,
                    tail(p.server.log(), 15)
                ));
                let current = shared.cluster.current(p.slot).is_some_and(|c| c.name == p.name);
                if current {
                    // Again until it comes up (PostgreSQL may be down).
                    while let Err(e) = shared.cluster.try_start(p.slot, &p.instance_id).await {
                        println!("note: restarting {} failed: {e}", p.name);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        }
    }
}

/// The sessions of the test database that are in a transaction and idle,
/// or waiting for a lock: what a slow takeover may be waiting for.
fn db_sessions(url: String) -> String {
    // The synchronous client runs a runtime of its own: a thread of its own.
    std::thread::spawn(move || {
        let mut c = match postgres::Client::connect(&url, postgres::NoTls) {
            Ok(c) => c,
            Err(e) => return format!("(cannot ask PostgreSQL: {e})"),
        };
        let rows = c.query(
            "SELECT pid, state, coalesce(wait_event_type, ''), coalesce(wait_event, ''),
                    coalesce(extract(epoch FROM now() - xact_start)::float8, 0),
                    regexp_replace(left(query, 70), '\\s+', ' ', 'g')
             FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND (state LIKE 'idle in transaction%' OR wait_event_type = 'Lock')",
            &[],
        );
        match rows {
            Ok(rows) if rows.is_empty() => "no session idle in a transaction or waiting for a lock".into(),
            Ok(rows) => rows
                .iter()
                .map(|r| {
                    format!(
                        "pid {} {} {}/{} for {:.1} s: {}",
                        r.get::<_, i32>(0),
                        r.get::<_, String>(1),
                        r.get::<_, String>(2),
                        r.get::<_, String>(3),
                        r.get::<_, f64>(4),
                        r.get::<_, String>(5)
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => format!("(pg_stat_activity: {e})"),
        }
    })
    .join()
    .unwrap_or_else(|_| "(the query panicked)".into())
}

/// A takeover: the milliseconds from the fault to the last tree taken over
/// (`None` when the instance owned none, or the hang guard passed: a
/// violation), and what PostgreSQL's sessions were doing when it was late.
struct Settled {
    ms: Option<u64>,
    late: Option<String>,
}

/// Waits until the trees `proc` owned at the fault are taken over: each
/// root runs again on another process (its log says so) or reads terminal.
async fn settle(
    shared: Arc<Shared>,
    proc: Arc<Proc>,
    at: i64,
    since: Instant,
    owned: Vec<String>,
) -> Settled {
    let mut late = None;
    if owned.is_empty() {
        return Settled { ms: None, late };
    }
    let lease = shared.cluster.lease();
    let deadline = since + lease + SETTLE_GUARD;
    let mut pending = owned;
    let mut last_ms = 0u64;
    loop {
        if late.is_none() && since.elapsed() > lease + Duration::from_millis(1500) {
            let url = shared.cluster.db.clone();
            late = Some(
                tokio::task::spawn_blocking(move || db_sessions(url))
                    .await
                    .unwrap(),
            );
        }
        let others: Vec<Arc<Proc>> = shared
            .cluster
            .all()
            .into_iter()
            .filter(|p| p.name != proc.name)
            .collect();
        for p in &others {
            p.refresh_log();
        }
        // A zombie that rejoined may take trees of its own id back (those
        // not claimed yet): its runs after SIGCONT are its new incarnation's.
        proc.refresh_log();
        // (This fault's SIGCONT: one of an earlier stop does not count.)
        let continued = proc.continued_at.lock().unwrap().filter(|&c| c > at);
        let mut still = Vec::new();
        for root in pending {
            let rerun = others
                .iter()
                .find_map(|p| p.log.lock().unwrap().started_after(&root, at))
                .or_else(|| continued.and_then(|c| proc.log.lock().unwrap().started_after(&root, c)));
            if let Some(t) = rerun {
                last_ms = last_ms.max(((t - at).max(0) / 1000) as u64);
                continue;
            }
            if let Some(p) = shared.pick()
                && let Ok(Rpc::Ok(snap)) = rpc(
                    &p.client,
                    "tasks/get",
                    json!({"taskId": root}),
                    Duration::from_secs(5),
                )
                .await
            {
                if is_terminal(status_of(&snap)) {
                    last_ms = last_ms.max(since.elapsed().as_millis() as u64);
                    continue;
                }
                // A root a client had paused does not run again until it is
                // resumed (its pause holds across the takeover, as
                // `check_restart` checks), so no handler start shows the
                // takeover: the survivor's log line does.
                if status_of(&snap) == "paused"
                    && let Some(t) = adopted_at(&others, &proc, at)
                {
                    last_ms = last_ms.max(((t - at).max(0) / 1000) as u64);
                    continue;
                }
            }
            still.push(root);
        }
        pending = still;
        if pending.is_empty() {
            return Settled {
                ms: Some(last_ms),
                late,
            };
        }
        if Instant::now() > deadline {
            shared.violate(format!(
                "the trees of {} ({}) were not taken over within {:?} of its {}: {pending:?}",
                proc.name,
                proc.instance_id,
                shared.cluster.lease() + SETTLE_GUARD,
                if proc.was_stopped() { "stop" } else { "kill" }
            ));
            return Settled { ms: None, late };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// When a survivor took the trees of `dead` over after `at` (by its log:
/// the lease of `dead` expired, then "took over trees"), or a process
/// started again with `dead`'s id brought them back (its "recovered stored
/// tasks": a restart with the same id takes its trees back at once, with
/// no takeover line anywhere).
fn adopted_at(survivors: &[Arc<Proc>], dead: &Proc, at: i64) -> Option<i64> {
    let expired = format!("instance={}", dead.instance_id);
    survivors.iter().find_map(|q| {
        let log = q.server.log();
        if q.instance_id == dead.instance_id {
            return first_line(log, &["recovered stored tasks"], at);
        }
        let e = first_line(log, &["lease expired", &expired], at)?;
        first_line(log, &["took over trees"], e - 1)
    })
}

/// The restart rules of the crash test, on the trees the faulted instance
/// owned, with what clients did since the fault taken into account (an
/// input answered or a cancel sent since, a pause lifted since).
fn restart_rules(model: &mut Model, fault: Fault, seen: &HashMap<String, Value>) {
    let owned: HashSet<&String> = fault.owned.iter().collect();
    let before: HashMap<String, Before> = fault
        .before
        .into_iter()
        .filter_map(|(id, b)| {
            let t = model.tasks.get(&id)?;
            if !owned.contains(&t.root) {
                return None;
            }
            let untouched = fault.touched.get(&id).copied() == Some(t.touched);
            let paused = t.paused_by_us;
            Some((
                id,
                Before {
                    parked_on_input: b.parked_on_input && untouched,
                    pause_held: b.pause_held && paused,
                    ..b
                },
            ))
        })
        .collect();
    check_restart(model, &before, seen);
}

/// A database fault: PostgreSQL stopped at once (`-m immediate`), kept
/// down for `down`, started again (with fsync on, its crash recovery syncs
/// the data directory), while the clients go on. An instance whose lease
/// lapsed meanwhile fences itself and must rejoin by itself, without
/// exiting; one that fenced itself in an outage shorter than two thirds of
/// the lease (a lease is renewed every third of it) is a violation, and in
/// a [`FaultKind::Outage`] every instance must fence itself. The trees of
/// the instances that fenced themselves become the fault's `owned` (the
/// restart rules apply to them).
async fn database_fault(
    shared: &Arc<Shared>,
    pg: &Arc<support::pg_server::PgServer>,
    fault: &mut round::Fault,
    down: Duration,
) -> String {
    let lease = shared.cluster.lease();
    let up = shared.cluster.usable();
    let p = pg.clone();
    let t0 = Instant::now();
    let outage_no = shared.outage_begins();
    let (stop, start) = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        p.stop().expect("stop PostgreSQL");
        let stop = t.elapsed();
        std::thread::sleep(down);
        let t = Instant::now();
        p.restart().expect("start PostgreSQL again");
        (stop, t.elapsed())
    })
    .await
    .unwrap();
    shared.outage_ends(outage_no);
    let back = Instant::now();
    let back_us = logs::now_us();
    let outage = t0.elapsed();
    shared.stats().pg_outage_ms.push(outage.as_millis() as u64);
    if fault.kind == FaultKind::Outage {
        shared.stats().outage_ms.push(outage.as_millis() as u64);
    } else if outage * 2 > lease {
        println!(
            "note: the PostgreSQL restart took {outage:?} (stop {stop:?}, down {down:?}, start {start:?}), \
             more than half the lease ({lease:?}); its log ends:\n{}",
            tail(&pg.log_path(), 12)
        );
    }
    // Long enough for a lease that lapsed in the outage to show: a lease
    // lapses at most a lease after its last renewal, which was before the
    // outage began (and is seen within 0.1 s).
    tokio::time::sleep_until((t0 + lease + Duration::from_secs(1)).into()).await;
    let ridden = outage * 3 <= lease * 2;
    let mut fenced = Vec::new();
    for p in &up {
        p.refresh_log();
        let fenced_at = p
            .log
            .lock()
            .unwrap()
            .fences
            .iter()
            .copied()
            .find(|&f| f > fault.at);
        match fenced_at {
            Some(f) => fenced.push((p.clone(), f)),
            None if fault.kind == FaultKind::Outage && p.server.exited().is_none() => shared.violate(format!(
                "instance {} kept its lease through a PostgreSQL outage of {outage:?} (lease {lease:?}): it \
                 should have fenced itself; its log ends:\n{}",
                p.name,
                tail(p.server.log(), 15)
            )),
            None => {}
        }
    }
    let mut rejoin_max = 0u64;
    for (p, f) in &fenced {
        if ridden {
            shared.violate(format!(
                "instance {} fenced itself in a PostgreSQL outage of {outage:?}, shorter than two thirds of the \
                 lease ({lease:?}); its log ends:\n{}",
                p.name,
                tail(p.server.log(), 15)
            ));
        }
        shared.fenced_in_outage.lock().unwrap().insert(p.name.clone());
        // It rejoins by itself once PostgreSQL is back, and never exits.
        let rejoined = loop {
            if p.server.exited().is_some() {
                break None;
            }
            if let Some(t) = first_line(p.server.log(), &[REJOINED], *f) {
                break Some(t);
            }
            if back.elapsed() > REJOIN_GUARD {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        match rejoined {
            Some(t) => {
                let ms = ((t - back_us).max(0) / 1000) as u64;
                rejoin_max = rejoin_max.max(ms);
                let mut st = shared.stats();
                st.rejoin_ms.push(ms);
                st.outage_fences += 1;
            }
            // An exit is the monitor's to report.
            None if p.server.exited().is_some() => {}
            None => shared.violate(format!(
                "instance {} fenced itself in a PostgreSQL outage of {outage:?} and did not rejoin within \
                 {REJOIN_GUARD:?} of PostgreSQL being back; its log ends:\n{}",
                p.name,
                tail(p.server.log(), 15)
            )),
        }
    }
    let mut owned: Vec<String> = fenced
        .iter()
        .flat_map(|(p, _)| shared.owned_roots(p, fault.at))
        .collect();
    owned.sort();
    owned.dedup();
    let n = owned.len();
    fault.owned = owned;
    format!(
        "{} PostgreSQL {} (down {} ms){}",
        if fault.kind == FaultKind::Outage {
            "kept down"
        } else {
            "restarted"
        },
        fault.how,
        outage.as_millis(),
        if fenced.is_empty() {
            String::new()
        } else {
            format!(
                "; {} instances fenced themselves and rejoined (at most {rejoin_max} ms after PostgreSQL was \
                 back), {n} of their trees brought back",
                fenced.len()
            )
        }
    )
}

/// Reaps a killed process; it must have died of the SIGKILL.
async fn reap_killed(shared: &Shared, proc: Arc<Proc>) {
    let p = proc.clone();
    let status = tokio::task::spawn_blocking(move || p.server.wait())
        .await
        .unwrap();
    proc.exit_seen.store(true, Ordering::SeqCst);
    if status.and_then(|s| s.signal()) != Some(9) {
        shared.violate(format!(
            "instance {} ended by itself before it was killed: {status:?}; its log ends:\n{}",
            proc.name,
            tail(proc.server.log(), 15)
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_postgres_survive_kills_zombies_and_database_restarts() {
    let rounds = env_u64("SCALE_ROUNDS").unwrap_or(DEFAULT_ROUNDS);
    let seed = support::seed::from_env("SCALE_SEED");
    let forced = std::env::var("SCALE_FAULT").ok().map(|f| parse_fault(&f));
    println!("scale-out test: {SLOTS} instances, lease {LEASE_S} s, {rounds} rounds");
    let started = Instant::now();
    let scratch = Scratch::new("scale", "scale-out test");
    let bin = support::process::private_binary(&scratch.0);
    // A server of the test's own, with PostgreSQL's default settings
    // (fsync on): it is restarted under the instances.
    let (pg, url) = tokio::task::spawn_blocking(|| {
        let server = support::pg_server::PgServer::start().unwrap_or_else(|e| {
            panic!(
                "the scale-out test restarts PostgreSQL, so it starts a server of its own from Debian's \
                 binaries (scripts/pg.sh installs them; apt-get install postgresql): {e}"
            )
        });
        let url = server
            .create_database("scale_out")
            .unwrap_or_else(|e| panic!("create the test database: {e}"));
        (server, url)
    })
    .await
    .unwrap();
    let pg = Arc::new(pg);
    let mut rng = Rng::new(seed);
    let model = Arc::new(Mutex::new(Model::default()));
    let cluster = Arc::new(Cluster::new(bin, scratch.0.clone(), url, LEASE_S, SLOTS));
    for slot in 0..SLOTS {
        let id = instance_id(&mut rng);
        cluster.start(slot, &id).await;
    }
    let shared = Arc::new(Shared::new(cluster.clone(), model.clone(), rng.fork()));
    let watcher = tokio::spawn(monitor(shared.clone()));
    let lease = cluster.lease();

    for r in 0..rounds {
        model.lock().unwrap().epoch += 1;
        let round = MultiRound::new(shared.clone());
        // The random choice is made every round, so that a seed replays
        // the same faults whatever the middle round is.
        let drawn = {
            let x = rng.range(0, 100);
            if x < 40 {
                FaultKind::Kill
            } else if x < 75 {
                FaultKind::Stop
            } else {
                FaultKind::Postgres
            }
        };
        // The middle round: PostgreSQL away for twice the lease.
        let kind = forced.unwrap_or(if r == rounds / 2 { FaultKind::Outage } else { drawn });
        let slot = rng.below(SLOTS);
        let triggers = [
            Trigger::Create,
            Trigger::Steer,
            Trigger::Update,
            Trigger::Pause,
            Trigger::Resume,
            Trigger::Cancel,
            Trigger::SseTerminal,
        ];
        let after_ack = rng.chance(0.5);
        let trigger = *rng.pick(&triggers).unwrap();
        let delay = if after_ack {
            rng.range(0, 600)
        } else if rng.chance(0.3) {
            rng.range(0, 100)
        } else {
            rng.range(100, 2500)
        };
        let plan_delay = Duration::from_millis(delay);

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
        // The long outage comes under load: trees running on the instances.
        let new_trees = if kind == FaultKind::Outage {
            new_trees.max(3)
        } else {
            new_trees
        };
        round.spawn(creator(round.clone(), rng.fork(), new_trees));
        if kind == FaultKind::Outage {
            let loaded = Instant::now();
            while model.lock().unwrap().running_trees().len() < 3 && loaded.elapsed() < Duration::from_secs(5)
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        *round.plan.lock().unwrap() = (after_ack && kind != FaultKind::Outage).then(|| Plan {
            trigger,
            from: Instant::now() + plan_delay,
            kind,
            slot,
        });

        // The fault: right after an acknowledgement, or after a delay.
        // Mostly an instance with running trees: a fault of an idle one
        // proves less.
        let prefer_busy = rng.chance(0.85);
        let fire = |how: String| {
            let proc = match kind {
                FaultKind::Postgres | FaultKind::Outage => None,
                _ => prefer_busy
                    .then(|| shared.busy_instance())
                    .flatten()
                    .or_else(|| cluster.current(slot).filter(|p| p.usable()))
                    .or_else(|| cluster.usable().into_iter().next()),
            };
            shared.begin_fault(kind, proc, how)
        };
        let mut fault = if kind == FaultKind::Outage {
            // At once, under the load just made.
            fire("with trees running".to_owned())
        } else if after_ack {
            tokio::select! {
                () = round.fired_notify.notified() => {}
                () = tokio::time::sleep(plan_delay + Duration::from_millis(1500)) => {}
            }
            // Fired (the notification may have been taken by the select or
            // still be on its way), or not: then it is sent now.
            let unfired = round.plan.lock().unwrap().take();
            match unfired {
                Some(_) => fire(format!("after waiting for an acknowledged {trigger:?} in vain")),
                None => loop {
                    if let Some(f) = round.fired.lock().unwrap().take() {
                        break f;
                    }
                    round.fired_notify.notified().await;
                },
            }
        } else {
            tokio::time::sleep(plan_delay).await;
            fire(format!("after {delay} ms"))
        };

        let what = match fault.kind {
            FaultKind::Kill => {
                let proc = fault.proc.clone().expect("a killed instance");
                shared.stats().kills += 1;
                reap_killed(&shared, proc.clone()).await;
                let same = rng.chance(0.5);
                let quick = rng.chance(0.3);
                let id = if same {
                    proc.instance_id.clone()
                } else {
                    instance_id(&mut rng)
                };
                {
                    let mut st = shared.stats();
                    if same {
                        st.restarts_same_id += 1;
                    } else {
                        st.restarts_new_id += 1;
                    }
                    if quick {
                        st.quick_restarts += 1;
                    }
                }
                if quick {
                    tokio::time::sleep(Duration::from_millis(rng.range(0, 300))).await;
                    cluster.start(proc.slot, &id).await;
                }
                let took = settle(
                    shared.clone(),
                    proc.clone(),
                    fault.at,
                    fault.instant,
                    fault.owned.clone(),
                )
                .await;
                if !quick {
                    cluster.start(proc.slot, &id).await;
                }
                format!(
                    "killed {} {}; {}; restarted {}{}",
                    proc.name,
                    fault.how,
                    taken(&shared, &fault, took, lease),
                    if same { "with the same id" } else { "with a new id" },
                    if quick { " right away" } else { "" }
                )
            }
            FaultKind::Stop => {
                let proc = fault.proc.clone().expect("a stopped instance");
                shared.stats().zombies += 1;
                // Past the lease and the takeover (at most the lease and a
                // scan after the fault): the zombie wakes to find its trees
                // taken over.
                let hold = lease + Duration::from_millis(1000 + rng.range(0, 1000));
                let settling = tokio::spawn(settle(
                    shared.clone(),
                    proc.clone(),
                    fault.at,
                    fault.instant,
                    fault.owned.clone(),
                ));
                tokio::time::sleep_until((fault.instant + hold).into()).await;
                proc.cont();
                let cont = Instant::now();
                let continued = proc.continued_at.lock().unwrap().unwrap_or(0);
                // It fences itself and rejoins the cluster by itself, and
                // does not exit.
                let rejoined = loop {
                    if let Some(s) = proc.server.exited() {
                        break Err(format!("exited with {s}"));
                    }
                    if let Some(t) = first_line(proc.server.log(), &[REJOINED], continued) {
                        break Ok(t);
                    }
                    if cont.elapsed() > REJOIN_GUARD {
                        break Err(format!("did not rejoin within {REJOIN_GUARD:?} of SIGCONT"));
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                };
                let said = match rejoined {
                    Ok(t) => {
                        let rejoin_ms = ((t - continued).max(0) / 1000) as u64;
                        if first_line(proc.server.log(), &[logs::FENCED], continued).is_none() {
                            shared.violate(format!(
                                "zombie {} ({}) rejoined without saying it lost its lease; its log ends:\n{}",
                                proc.name,
                                proc.instance_id,
                                tail(proc.server.log(), 15)
                            ));
                        }
                        proc.set_rejoined();
                        // It serves again.
                        match rpc(&proc.client, "tools/list", json!({}), Duration::from_secs(10)).await {
                            Ok(Rpc::Ok(_)) => {}
                            other => shared.violate(format!(
                                "zombie {} ({}) rejoined but does not serve: tools/list answered {other:?}",
                                proc.name, proc.instance_id
                            )),
                        }
                        {
                            let mut st = shared.stats();
                            st.zombies_rejoined += 1;
                            st.rejoin_ms.push(rejoin_ms);
                        }
                        format!("fenced itself and rejoined {rejoin_ms} ms after SIGCONT")
                    }
                    Err(e) => {
                        proc.exit_seen.store(true, Ordering::SeqCst);
                        shared.violate(format!(
                            "zombie {} ({}) was stopped for {hold:?} (lease {lease:?}) and {e}; its log ends:\n{}",
                            proc.name,
                            proc.instance_id,
                            tail(proc.server.log(), 15)
                        ));
                        if proc.server.exited().is_none() {
                            proc.kill();
                        }
                        let p = proc.clone();
                        tokio::task::spawn_blocking(move || p.server.wait())
                            .await
                            .unwrap();
                        // The run goes on (its checks run before it fails).
                        cluster.start(proc.slot, &proc.instance_id).await;
                        e
                    }
                };
                let took = settling.await.unwrap();
                format!(
                    "stopped {} {} for {} ms, {said}; {}",
                    proc.name,
                    fault.how,
                    hold.as_millis(),
                    taken(&shared, &fault, took, lease),
                )
            }
            FaultKind::Postgres => {
                shared.stats().pg_restarts += 1;
                let down = Duration::from_millis(rng.range(0, 400));
                database_fault(&shared, &pg, &mut fault, down).await
            }
            FaultKind::Outage => {
                shared.stats().outages += 1;
                database_fault(&shared, &pg, &mut fault, lease * OUTAGE_LEASES).await
            }
        };
        shared.close_window(&fault);
        // Trees created after the fault run into the next round's.
        let later_trees = rng.range(0, 3);
        round.spawn(creator(round.clone(), rng.fork(), later_trees));

        // Some more traffic on the restarted instance, then the check.
        tokio::time::sleep(Duration::from_millis(rng.range(300, 1200))).await;
        round.end(REQUEST_TIMEOUT + Duration::from_secs(5)).await;
        let seen = read_everything(&round).await;
        restart_rules(&mut model.lock().unwrap(), fault, &seen);
        {
            let m = model.lock().unwrap();
            let running = m.running_trees().len();
            println!(
                "round {r:2}: {what}; drove {} trees and created {}; {running} trees running, {} \
                 tasks known ({:.0} s)",
                live.len(),
                new_trees + later_trees,
                m.tasks.len(),
                started.elapsed().as_secs_f64()
            );
        }
        fail_on_violations(&model, seed, &format!("in round {r}"));
    }

    // The last phase: no faults; every tree must end.
    for slot in 0..SLOTS {
        if cluster.current(slot).is_none_or(|p| !p.usable()) {
            let id = instance_id(&mut rng);
            cluster.start(slot, &id).await;
        }
    }
    model.lock().unwrap().epoch += 1;
    let round = MultiRound::new(shared.clone());
    finish_every_tree(&round, &model, &mut rng, FINISH_TIMEOUT, "in the last phase").await;
    read_everything(&round).await;
    check_final(&mut model.lock().unwrap());
    round.end(REQUEST_TIMEOUT).await;
    watcher.abort();
    let _ = watcher.await;
    // Every instance still up (the monitor said so otherwise); stop them all.
    for p in cluster.all() {
        if !p.faulted() && p.server.exited().is_none() {
            p.kill();
        }
        let q = p.clone();
        let status = tokio::task::spawn_blocking(move || q.server.wait())
            .await
            .unwrap();
        if !p.faulted() && !p.exit_seen.load(Ordering::SeqCst) && status.and_then(|s| s.signal()) != Some(9) {
            model
                .lock()
                .unwrap()
                .violate(format!("instance {} exited by itself: {status:?}", p.name));
        }
    }

    // The logs: handlers, steers, error lines.
    let all = cluster.all();
    for p in &all {
        p.refresh_log();
    }
    let (handler_stats, steers_checked) = {
        let guards: Vec<_> = all.iter().map(|p| p.log.lock().unwrap()).collect();
        // Each incarnation of a process (from its start, or from its
        // registering again after a fence, to its next fence) is a process
        // of its own for the handler checks; a fenced one is gone from its
        // fence on, and a handler event while fenced is a violation.
        let mut fence_violations = Vec::new();
        let mut parts = Vec::new();
        for (p, g) in all.iter().zip(&guards) {
            let (incs, v) = incarnations(&p.name, g);
            fence_violations.extend(v);
            let killed_at = *p.killed_at.lock().unwrap();
            let stops = p.stops.lock().unwrap().clone();
            let mut start = i64::MIN;
            let n = incs.len();
            for (k, inc) in incs.into_iter().enumerate() {
                let last = k + 1 == n;
                let end = inc.fenced_at.unwrap_or(i64::MAX);
                // The stop that made it fence: a SIGSTOP within this
                // incarnation (its SIGCONT comes before the fence).
                let stop = stops.iter().find(|(s, _)| *s >= start && *s <= end);
                let exited_by_itself = last && inc.fenced_at.is_none() && killed_at.is_none();
                parts.push((
                    inc.name,
                    inc.events,
                    if last { killed_at } else { None },
                    stop.map(|s| s.0),
                    stop.and_then(|s| s.1),
                    match inc.fenced_at {
                        Some(f) => Some(f),
                        None if exited_by_itself && p.exit_seen.load(Ordering::SeqCst) => g.last_at,
                        None => None,
                    },
                ));
                start = inc.next_at.unwrap_or(i64::MAX);
            }
        }
        let facts: Vec<ProcFacts<'_>> = parts
            .iter()
            .map(
                |(name, events, killed_at, stopped_at, continued_at, exited_at)| ProcFacts {
                    name,
                    events,
                    killed_at: *killed_at,
                    stopped_at: *stopped_at,
                    continued_at: *continued_at,
                    exited_at: *exited_at,
                },
            )
            .collect();
        let (violations, stats) = check_handlers(&facts);
        let logs: Vec<(&str, &[logs::Event])> = all
            .iter()
            .zip(&guards)
            .map(|(p, g)| (p.name.as_str(), g.events.as_slice()))
            .collect();
        let steers = shared.steers.lock().unwrap().clone();
        let (steer_violations, checked) = check_steers(&model.lock().unwrap(), &logs, &steers);
        let mut m = model.lock().unwrap();
        for v in violations
            .into_iter()
            .chain(steer_violations)
            .chain(fence_violations)
        {
            m.violate(v);
        }
        (stats, checked)
    };
    for p in &all {
        // A zombie's (or a fenced instance's) writes refused for its lost
        // lease; the fence itself is a warning.
        let lost_lease = p.was_stopped() || shared.fenced_in_outage.lock().unwrap().contains(&p.name);
        let allowed: &[&str] = if lost_lease { &["lost its lease"] } else { &[] };
        let bad = bad_lines(p.server.log(), allowed);
        if !bad.is_empty() {
            model.lock().unwrap().violate(format!(
                "instance {} logged errors ({}):\n{}",
                p.name,
                p.server.log().display(),
                bad.join("\n")
            ));
        }
    }
    // Every process's journal lines, in time order (one machine, one
    // clock): no step recorded by any process ran again in any process,
    // across every kill, takeover, zombie and database restart.
    let logs: Vec<std::path::PathBuf> = std::fs::read_dir(&scratch.0)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p: &std::path::PathBuf| p.extension().is_some_and(|x| x == "log"))
        .collect();
    let mut redone = support::redone::Redone::default();
    redone.feed_merged(&logs, "the cluster");
    for v in &redone.steps_redone {
        model
            .lock()
            .unwrap()
            .violate(format!("finished work ran again: {v}"));
    }
    println!("scale-out test: journal: {}", redone.summary());
    fail_on_violations(&model, seed, "at the end");

    let m = model.lock().unwrap();
    let st = shared.stats();
    let mut acks: Vec<(&&str, &u64)> = m.stats.acks.iter().collect();
    acks.sort();
    let mut takeovers = st.takeover_ms.clone();
    takeovers.sort_unstable();
    let median = takeovers.get(takeovers.len() / 2).copied().unwrap_or(0);
    let max = takeovers.last().copied().unwrap_or(0);
    let outage_max = st.pg_outage_ms.iter().max().copied().unwrap_or(0);
    let mut rejoins = st.rejoin_ms.clone();
    rejoins.sort_unstable();
    let rejoin_median = rejoins.get(rejoins.len() / 2).copied().unwrap_or(0);
    let rejoin_max = rejoins.last().copied().unwrap_or(0);
    println!(
        "scale-out test: seed {seed}: {rounds} rounds: {} kills, {} zombies ({} fenced themselves and rejoined), \
         {} PostgreSQL restarts (down at most {outage_max} ms), {} outages of {OUTAGE_LEASES} leases (down {:?} \
         ms); {} fences in PostgreSQL outages; rejoins median {rejoin_median} ms, max {rejoin_max} ms; \
         restarts {} with the same id, {} with a new one ({} right away); {} trees taken over \
         in {} takeovers (median {median} ms, max {max} ms, lease {} ms); {} processes, {} handler runs, {} tasks \
         ran on more than one process; {} trees, {} tasks; {} tasks failed by a takeover, {} fanout roots ran \
         again; {} steers checked for delivery; {} answers lost with an instance, {} reads sent again, {} acks \
         during a takeover not counted, {} \"database unavailable\" answers during PostgreSQL restarts; \
         {} listen streams ({} reopened, {} ended by a fence), {} notifications ({} terminal); acks {acks:?}; \
         {:.1} s",
        st.kills,
        st.zombies,
        st.zombies_rejoined,
        st.pg_restarts,
        st.outages,
        st.outage_ms,
        st.outage_fences,
        st.restarts_same_id,
        st.restarts_new_id,
        st.quick_restarts,
        st.trees_taken_over,
        st.takeover_ms.len(),
        lease.as_millis(),
        all.len(),
        handler_stats.runs,
        handler_stats.moved,
        m.stats.trees,
        m.tasks.len(),
        m.stats.restart_failures,
        m.stats.reruns_seen,
        steers_checked,
        st.lost_answers,
        st.retried_reads,
        st.discounted_acks,
        st.db_unavailable,
        st.listens,
        st.listens_reopened,
        st.listens_fenced,
        st.sse_messages,
        m.stats.sse_terminal,
        started.elapsed().as_secs_f64()
    );
    // The faults must have hit running work, or the run proved little.
    assert!(
        rounds < 8 || forced.is_some_and(FaultKind::of_database) || st.trees_taken_over > 0,
        "no killed or stopped instance owned a running tree in {rounds} rounds"
    );
    assert!(m.stats.trees > 0);
}

/// Records a takeover's time and describes it; a takeover slower than the
/// promise is a violation.
fn taken(shared: &Shared, fault: &Fault, settled: Settled, lease: Duration) -> String {
    let n = fault.owned.len();
    let late = settled
        .late
        .map(|l| format!("; PostgreSQL at the lease and 1.5 s: {l}"))
        .unwrap_or_default();
    match settled.ms {
        None if n == 0 => "it owned no running tree".to_owned(),
        None => format!("{n} trees not all taken over{late}"),
        Some(ms) => {
            {
                let mut st = shared.stats();
                st.takeover_ms.push(ms);
                st.trees_taken_over += n;
            }
            let limit = lease + TAKEOVER_SLACK;
            if Duration::from_millis(ms) > limit {
                shared.violate(format!(
                    "the {n} trees of {} were taken over {ms} ms after its fault ({}), beyond the lease and \
                     {TAKEOVER_SLACK:?}{late}",
                    fault.proc.as_ref().map_or("?", |p| p.name.as_str()),
                    fault.how
                ));
            }
            let mut said = format!("{n} trees taken over in {ms} ms");
            if Duration::from_millis(ms) > lease + Duration::from_secs(1)
                && let Some(p) = &fault.proc
            {
                // Where the time went, by the survivors' logs.
                let expired = format!("instance={}", p.instance_id);
                let seen: Vec<String> = shared
                    .cluster
                    .all()
                    .iter()
                    .filter(|q| q.name != p.name)
                    .filter_map(|q| {
                        let log = q.server.log();
                        let e = first_line(log, &["lease expired", &expired], fault.at)?;
                        let t = first_line(log, &["took over trees"], e - 1);
                        Some(format!(
                            "{} saw the lease expired at +{} ms{}",
                            q.name,
                            (e - fault.at) / 1000,
                            t.map(|t| format!(", took trees over at +{} ms", (t - fault.at) / 1000))
                                .unwrap_or_default()
                        ))
                    })
                    .collect();
                said.push_str(&format!(" ({})", seen.join("; ")));
            }
            said.push_str(&late);
            said
        }
    }
}
