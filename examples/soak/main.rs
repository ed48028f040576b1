//! The soak's load driver (run by `scripts/soak.sh`, which builds and
//! starts `subtask serve` on a SQLite file first): a few dozen concurrent
//! clients of the running server, written with the crate's client library,
//! for a given time; then every tree is checked against a model, and the
//! server's RSS and file descriptors (sampled from `/proc/<pid>`) against
//! the growth rules. Exit status 0 when nothing failed, 1 otherwise.
//!
//! The load, per client loop, one scenario after the other:
//!
//! | scenario | what it does |
//! |---|---|
//! | `fanout` | a tree (width 1-3, depth 1-2), sometimes with a failing node |
//! | `fanout+steer+pause` | steers running nodes, pauses the root, waits until every live task is paused, steers a paused one, checks nothing moves, resumes |
//! | `fanout+input` | a node asks for input; `tasks/update` answers it (then a second answer that must be ignored), or the library's input handler does while `Client::task_results` follows the tree |
//! | `fanout+cancel` | cancels the root or a random node (sometimes of a paused tree); a steer to it must then be refused |
//! | `research[+steer,+pause,+cancel]` | `deep_research`, left alone, steered ("focus on ..."), paused and resumed, or cancelled |
//!
//! 40% of the trees also get a raw `subscriptions/listen` stream; pollers
//! read random tasks of random trees all along. See `model.rs` for what is
//! checked, `sample.rs` for the memory rules and `docs/performance.md`,
//! "Soak", for the expected errors.

mod api;
mod listen;
mod load;
mod model;
mod rng;
mod sample;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;

use crate::api::{Api, json_of, now_ms};
use crate::load::{DELETION_SLACK_MS, Entry, Loop, Shared, get_checked, poller};
use crate::sample::Sampler;
use crate::stats::Problem;

/// The soak's load driver (see scripts/soak.sh).
#[derive(Debug, Parser)]
struct Opts {
    /// The server's MCP endpoint.
    #[arg(long)]
    url: String,
    /// The server's process id (for /proc/<pid>).
    #[arg(long)]
    pid: u32,
    /// Minutes of load.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Where metrics.csv and summary.txt go.
    #[arg(long)]
    out: PathBuf,
    /// Concurrent client loops running scenarios.
    #[arg(long, default_value_t = 32)]
    clients: usize,
    /// Concurrent loops reading random tasks.
    #[arg(long, default_value_t = 4)]
    pollers: usize,
    /// Seconds between samples of /proc/<pid>.
    #[arg(long, default_value_t = 5.0)]
    sample_secs: f64,
    /// The TTL the server gives tasks (`serve --task-ttl`), in seconds.
    #[arg(long)]
    ttl_secs: u64,
    /// The server's deletion grace after a root's TTL, in seconds.
    #[arg(long, default_value_t = 60)]
    grace_secs: u64,
    /// Warm-up in seconds (default: max(20% of the load, TTL + grace + 60 s)).
    #[arg(long)]
    warmup_secs: Option<f64>,
    /// Largest RSS growth after warm-up, in percent.
    #[arg(long, default_value_t = 10.0)]
    rss_limit_pct: f64,
    /// Seed of the random choices (printed; random when not given).
    #[arg(long)]
    seed: Option<u64>,
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let ok = rt.block_on(run(opts));
    rt.shutdown_timeout(Duration::from_secs(5));
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

async fn run(opts: Opts) -> bool {
    let started = Instant::now();
    let seed = opts
        .seed
        .unwrap_or_else(|| now_ms() ^ u64::from(std::process::id()) << 32);
    let load_secs = opts.minutes * 60.0;
    let grace_ms = opts.grace_secs * 1000;
    let ttl_ms = opts.ttl_secs * 1000;
    let warmup = opts
        .warmup_secs
        .unwrap_or_else(|| (0.2 * load_secs).max((opts.ttl_secs + opts.grace_secs + 60) as f64));
    std::fs::create_dir_all(&opts.out).expect("the output directory");
    println!(
        "soak: {:.1} min of load on {} (pid {}), {} client loops + {} pollers, TTL {} s, warm-up {warmup:.0} s, \
         seed {seed}",
        opts.minutes, opts.url, opts.pid, opts.clients, opts.pollers, opts.ttl_secs
    );
    let sh = Arc::new(Shared::new(opts.url.clone(), ttl_ms, grace_ms));
    sh.stats
        .log_to(std::fs::File::create(opts.out.join("problems.log")).expect("problems.log"));
    let csv = std::fs::File::create(opts.out.join("metrics.csv")).expect("metrics.csv");
    let counts = {
        let sh = sh.clone();
        Arc::new(move || (sh.registry.len() as u64, sh.stats.request_count()))
            as Arc<dyn Fn() -> (u64, u64) + Send + Sync>
    };
    let sampler = Sampler::new(opts.pid, started, csv, counts).expect("metrics.csv");

    // At rest: the server up, nobody connected yet.
    let probe = sh.api();
    if let Err(e) = probe.client.discover().await {
        eprintln!("soak: the server does not answer server/discover: {e}");
        return false;
    }
    drop(probe);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rest_before = sampler.sample().ok();

    // The load.
    sampler.phase("load");
    let load_start = started.elapsed().as_secs_f64();
    let stats = sh.stats.clone();
    let ticker = sampler.spawn(Duration::from_secs_f64(opts.sample_secs), move |m| {
        stats.problem(&Problem::stuck(m));
    });
    let mut loops = Vec::new();
    for i in 0..opts.clients {
        let lp = Loop::new(sh.clone(), seed.wrapping_add(i as u64 * 7919));
        loops.push(tokio::spawn(lp.run()));
    }
    for i in 0..opts.pollers {
        loops.push(tokio::spawn(poller(
            sh.clone(),
            seed.wrapping_add(1_000_003 + i as u64),
        )));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(load_secs);
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(left.min(Duration::from_secs(60))).await;
        progress(&sh, &sampler, started);
    }
    sh.stop.store(true, Ordering::Relaxed);
    let load_end = started.elapsed().as_secs_f64();
    sampler.phase("drain");
    println!("soak: load over; waiting for the loops to finish their trees");
    for l in loops {
        let _ = l.await;
    }

    // Every tree again: the same bytes and the model, or gone after its TTL.
    sampler.phase("final-check");
    println!("soak: final check of {} trees", sh.registry.len());
    final_check(&sh).await;
    ticker.abort();

    // At rest again: every client dropped.
    sampler.phase("rest-after");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rest_after = sampler.sample().ok();

    let verdict = sample::judge(
        &sampler.samples(),
        (load_start, load_end),
        warmup,
        opts.rss_limit_pct,
        rest_before.as_ref(),
        rest_after.as_ref(),
    );
    let mut lines = vec![format!(
        "soak summary: {:.1} min of load, {} client loops + {} pollers, TTL {} s, seed {seed}",
        (load_end - load_start) / 60.0,
        opts.clients,
        opts.pollers,
        opts.ttl_secs
    )];
    lines.extend(sh.stats.report(load_end - load_start));
    let variants = sh.canon.variants();
    lines.push(format!(
        "research: {} one-lane questions compared with their first answer; multi-lane answers per question \
         (information): {}",
        sh.canon.compared(),
        if variants.is_empty() {
            "none".to_owned()
        } else {
            variants.join("; ")
        }
    ));
    lines.extend(verdict.lines);
    let problems = sh.stats.problem_count();
    let mut failures = verdict.failures;
    if problems > 0 {
        failures.push(format!(
            "{problems} problems (unexpected errors, wrong answers, stuck)"
        ));
    }
    if failures.is_empty() {
        lines.push("verdict: PASS".to_owned());
    } else {
        lines.push(format!("verdict: FAIL: {}", failures.join("; ")));
    }
    let text = lines.join("\n");
    println!("{text}");
    let _ = std::fs::write(opts.out.join("summary.txt"), format!("{text}\n"));
    failures.is_empty()
}

fn progress(sh: &Shared, sampler: &Sampler, started: Instant) {
    let s = sampler.samples().last().cloned();
    println!(
        "[{:>5.1} min] trees={} requests={} expected errors={} problems={} | rss={} fds={}",
        started.elapsed().as_secs_f64() / 60.0,
        sh.registry.len(),
        sh.stats.request_count(),
        sh.stats.expected_count(),
        sh.stats.problem_count(),
        s.as_ref().map_or("?".to_owned(), |s| format!(
            "{:.1} MiB",
            s.rss_kib as f64 / 1024.0
        )),
        s.map_or("?".to_owned(), |s| s.fds.to_string()),
    );
}

/// Checks every tree once more: a retained tree task by task (byte-identical
/// to when it ended, and the model again); a tree past its deletion time
/// must be gone.
async fn final_check(sh: &Arc<Shared>) {
    let api = sh.api();
    let entries = sh.registry.all();
    let mut deleted = Vec::new();
    let mut retained = Vec::new();
    for e in entries {
        // Not worth racing the deletion: trees within 5 s of it are
        // checked as deleted instead.
        if now_ms() + 5_000 < e.deletion_ms(sh.grace_ms) {
            retained.push(e);
        } else {
            deleted.push(e);
        }
    }
    let late: Vec<Arc<Entry>> = futures::stream::iter(retained)
        .map(|e| {
            let (sh, api) = (sh.clone(), api.clone());
            async move { check_retained(&sh, &api, &e).await.then_some(e) }
        })
        .buffer_unordered(8)
        .filter_map(|e| async move { e })
        .collect()
        .await;
    deleted.extend(late);
    // Wait until every remaining tree is past its deletion time plus slack.
    let last = deleted
        .iter()
        .map(|e| e.deletion_ms(sh.grace_ms))
        .max()
        .unwrap_or(0);
    let wait = (last + DELETION_SLACK_MS / 2).saturating_sub(now_ms());
    if wait > 0 {
        println!(
            "soak: waiting {:.0} s for the last deletions",
            wait as f64 / 1000.0
        );
        tokio::time::sleep(Duration::from_millis(wait)).await;
    }
    futures::stream::iter(deleted)
        .for_each_concurrent(8, |e| {
            let (sh, api) = (sh.clone(), api.clone());
            async move {
                if e.deleted.load(Ordering::Relaxed) {
                    return;
                }
                match get_checked(&sh, &api, &e, e.root).await {
                    Ok(None) => {}
                    Ok(Some(t)) => sh.stats.problem(&Problem::wrong(format!(
                        "tree {} is still there after its deletion time: {}",
                        e.root,
                        json_of(&t)
                    ))),
                    Err(p) => sh.stats.problem(&p),
                }
            }
        })
        .await;
}

/// Checks one retained tree; `true` when it was deleted meanwhile (checked
/// with the deleted ones).
async fn check_retained(sh: &Shared, api: &Api, e: &Entry) -> bool {
    let done = e.done.lock().take();
    let Some((rec, jsons)) = done else {
        // Its scenario failed before the tree was checked (already a
        // problem); it must still end.
        let limit = Duration::from_millis(e.ttl_ms) + Duration::from_secs(30);
        if let Err(p) = api
            .wait_for(
                e.root,
                limit,
                "the end of a tree left by a failed scenario",
                |t| t.status().is_terminal(),
            )
            .await
        {
            sh.stats.problem(&p);
        }
        return false;
    };
    let snap = match api.walk(e.root).await {
        Ok(s) => s,
        Err(w) if w.error.is_task_not_found() && w.sent_ms + 1_000 >= e.deletion_ms(sh.grace_ms) => {
            return true;
        }
        Err(w) => {
            let what = format!("tasks/get {} (final check of tree {})", w.id, e.root);
            sh.stats.unexpected("tasks/get", &w.error, &what);
            return false;
        }
    };
    for (id, before) in &jsons {
        match snap.tasks.get(id) {
            Some(t) if json_of(t) == *before => {}
            Some(t) => sh.stats.problem(&Problem::wrong(format!(
                "task {id} of tree {} changed after it ended:\n    then {before}\n    now  {}",
                e.root,
                json_of(t)
            ))),
            None => sh.stats.problem(&Problem::wrong(format!(
                "task {id} of tree {} is gone from it",
                e.root
            ))),
        }
    }
    if snap.tasks.len() != jsons.len() {
        sh.stats.problem(&Problem::wrong(format!(
            "tree {} has {} tasks now, {} when it ended",
            e.root,
            snap.tasks.len(),
            jsons.len()
        )));
    }
    for p in model::check(&rec, &snap, &sh.canon) {
        sh.stats.problem(&Problem::wrong(p));
    }
    sh.stats
        .tasks_checked_final
        .fetch_add(snap.order.len() as u64, Ordering::Relaxed);
    sh.stats.trees_checked_final.fetch_add(1, Ordering::Relaxed);
    false
}
