//! The store benchmark: durable task creation through the runtime into a
//! SQLite file on this machine's disk, with group commit and forced to one
//! transaction (one fsync) per create.
//!
//! 64 concurrent creators each start a root task and wait until it is
//! durable (`Runtime::flushed`), exactly what the server does before it
//! answers `CreateTaskResult`. A create is one store batch (the tree row and
//! the root's record, created and started in one step). Both modes use
//! `Durability::Full` (fsync per commit) on a fresh file under `target/`.
//!
//! With the `postgres` feature (in the default `cli`), the same creators
//! write to PostgreSQL on this machine, grouped and one commit per create:
//! the server of `SUBTASK_TEST_PG` when set (`scripts/pg.sh cargo bench
//! --bench store`), else one the bench starts itself from Debian's
//! binaries; without binaries those figures are skipped, with the reason
//! printed.
//!
//! Prints one line per figure; context lines start with `#`. Run with
//! `cargo bench --bench store`.

/// The `subtask` binary's allocator (see `src/main.rs`), so the figures are
/// the server's; `--no-default-features` measures with the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use subtask::core::RootOptions;
use subtask::model::JsonObject;
use subtask::runtime::{Runtime, RuntimeConfig};
use subtask::store::{Durability, MemoryStore, SqliteConfig, SqliteStore, TaskStore};

const CREATORS: usize = 64;

#[cfg(feature = "postgres")]
#[path = "../tests/support/pg.rs"]
mod pg;
#[cfg(feature = "postgres")]
#[path = "../tests/support/pg_server.rs"]
mod pg_server;

fn bench_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-store");
    std::fs::create_dir_all(&dir).expect("bench dir");
    dir
}

fn fresh_db(name: &str) -> PathBuf {
    let path = bench_dir().join(name);
    for suffix in ["", "-wal", "-shm", ".lock"] {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    path
}

struct Run {
    creates: usize,
    elapsed: Duration,
    latencies_us: Vec<f64>,
}

/// `per_creator` creates by each of 64 creators, every one durable before
/// the creator moves on.
fn run(name: &str, max_batches_per_commit: usize, per_creator: usize) -> Run {
    let path = fresh_db(name);
    let store = SqliteStore::open(SqliteConfig {
        durability: Durability::Full,
        max_batches_per_commit,
        ..SqliteConfig::new(&path)
    })
    .expect("open store");
    run_on(Arc::new(store), per_creator)
}

/// The same creators against any store.
fn run_on(store: Arc<dyn TaskStore>, per_creator: usize) -> Run {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let out = tokio.block_on(async move {
        let config = RuntimeConfig {
            // Every handler parks until cancelled: nothing queues for a slot.
            max_running: usize::MAX,
            max_running_per_tree: usize::MAX,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::with_store(config, store);
        let start = Instant::now();
        let mut creators = Vec::new();
        for _ in 0..CREATORS {
            let rt = rt.clone();
            creators.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_creator);
                for _ in 0..per_creator {
                    let t0 = Instant::now();
                    let id = rt.spawn(
                        RootOptions {
                            ttl_ms: Some(3_600_000),
                            poll_interval_ms: None,
                        },
                        |ctx| async move {
                            ctx.cancelled().await;
                            Ok(JsonObject::new())
                        },
                    );
                    rt.flushed(id).await.expect("durable");
                    lat.push(t0.elapsed().as_secs_f64() * 1e6);
                }
                lat
            }));
        }
        let mut latencies_us = Vec::with_capacity(CREATORS * per_creator);
        for c in creators {
            latencies_us.extend(c.await.expect("creator"));
        }
        let elapsed = start.elapsed();
        assert_eq!(rt.task_count(), CREATORS * per_creator);
        Run {
            creates: CREATORS * per_creator,
            elapsed,
            latencies_us,
        }
    });
    if std::env::var_os("SUBTASK_BENCH_PROFILE").is_some() {
        // Profiling aid: leave before the teardown is sampled too.
        println!("# grouped only: {:.0} creates/s", rate(&out));
        std::process::exit(0);
    }
    // Dropping the runtime drops the handlers; the store drains and closes.
    drop(tokio);
    out
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rate(r: &Run) -> f64 {
    r.creates as f64 / r.elapsed.as_secs_f64()
}

/// Rounds of (grouped, fsync_each), so both modes see the same disk.
const ROUNDS: usize = 5;

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let scale: usize = std::env::var("SUBTASK_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    println!("# store: SQLite WAL, synchronous=FULL, {CREATORS} concurrent creators, 2 tokio workers");
    println!("# database files under {}", bench_dir().display());
    if std::env::var("SUBTASK_BENCH_PROFILE").is_ok_and(|v| v == "grouped") {
        // Profiling aid: one grouped run alone, no warm-up, and the process
        // exits before its teardown (see `run_on`).
        let _ = run("grouped.db", usize::MAX, 3_000 * scale);
        return;
    }
    // Warm-up, as large as a measured grouped round: the allocator's memory
    // for 64,000 live tasks is faulted in once here (first-touch page faults
    // cost this VM more than the commits do), then reused by every round.
    let _ = run("warmup.db", usize::MAX, 1_000 * scale);
    // The disk's fsync latency drifts over seconds on a shared machine, so
    // the two modes alternate and the ratio is taken per round.
    let mut grouped = Vec::new();
    let mut each = Vec::new();
    for i in 0..ROUNDS {
        grouped.push(run(&format!("grouped-{i}.db"), usize::MAX, 1_000 * scale));
        each.push(run(&format!("fsync_each-{i}.db"), 1, 50 * scale));
    }
    let memory = run_on(Arc::new(MemoryStore::new()), 1_000 * scale);
    println!(
        "# the same creators with the in-memory store (no I/O; the runtime side's ceiling): {:.0} creates/s",
        rate(&memory)
    );
    report(
        "round",
        "fsync_each",
        &grouped,
        &each,
        [
            "durable_create_grouped",
            "durable_create_fsync_each",
            "group_commit_ratio",
        ],
    );
    let mut latencies: Vec<f64> = grouped
        .iter()
        .flat_map(|g| g.latencies_us.iter().copied())
        .collect();
    println!(
        "create_latency_p50: subtask={:.0}",
        percentile(&mut latencies, 0.50)
    );
    println!(
        "create_latency_p99: subtask={:.0}",
        percentile(&mut latencies, 0.99)
    );
    #[cfg(feature = "postgres")]
    postgres_figures(scale);
}

/// Prints each round as a `#` line, then the medians of the grouped and
/// one-commit-per-create rates and of the per-round ratios, as `names`.
fn report(round: &str, each_label: &str, grouped: &[Run], each: &[Run], names: [&str; 3]) {
    for (i, (g, e)) in grouped.iter().zip(each).enumerate() {
        println!(
            "# {round} {i}: grouped {} creates in {:.2} s ({:.0}/s); {each_label} {} creates in {:.2} s ({:.0}/s); ratio {:.1}",
            g.creates,
            g.elapsed.as_secs_f64(),
            rate(g),
            e.creates,
            e.elapsed.as_secs_f64(),
            rate(e),
            rate(g) / rate(e)
        );
    }
    println!(
        "# figures: medians of {} rounds (the ratio: median of the per-round ratios)",
        grouped.len()
    );
    println!(
        "{}: subtask={:.0}",
        names[0],
        median(grouped.iter().map(rate).collect())
    );
    println!(
        "{}: subtask={:.0}",
        names[1],
        median(each.iter().map(rate).collect())
    );
    println!(
        "{}: {:.1}",
        names[2],
        median(grouped.iter().zip(each).map(|(g, e)| rate(g) / rate(e)).collect())
    );
}

/// The PostgreSQL server to measure: `SUBTASK_TEST_PG`'s, or one started here.
#[cfg(feature = "postgres")]
enum Pg {
    External,
    Own(pg_server::PgServer),
}

#[cfg(feature = "postgres")]
impl Pg {
    fn database(&self, name: &str) -> Result<String, String> {
        match self {
            Pg::Own(server) => server.create_database(name),
            // A fresh database on the test run's server.
            Pg::External => Ok(pg::fresh_database()),
        }
    }
}

/// Grouped and one-commit-per-create rounds on PostgreSQL, alternating.
#[cfg(feature = "postgres")]
fn postgres_figures(scale: usize) {
    use subtask::store::{PostgresConfig, PostgresStore};
    let pg = match std::env::var("SUBTASK_TEST_PG") {
        Ok(_) => Pg::External,
        Err(_) => match pg_server::PgServer::start() {
            Ok(server) => Pg::Own(server),
            Err(why) => {
                println!("# postgres figures skipped: {why}");
                return;
            }
        },
    };
    let open = |name: &str, max: usize| -> Arc<dyn TaskStore> {
        let url = pg
            .database(name)
            .unwrap_or_else(|e| panic!("create database {name}: {e}"));
        Arc::new(
            PostgresStore::open(PostgresConfig {
                max_batches_per_commit: max,
                ..PostgresConfig::new(url)
            })
            .unwrap_or_else(|e| panic!("open {name}: {e}")),
        )
    };
    println!(
        "# postgres: {} on this machine, synchronous_commit=on, the same {CREATORS} creators",
        match &pg {
            Pg::Own(_) => "a server the bench started",
            Pg::External => "SUBTASK_TEST_PG's server",
        }
    );
    let _ = run_on(open("bench_pg_warmup", usize::MAX), 200 * scale);
    let mut grouped = Vec::new();
    let mut each = Vec::new();
    for i in 0..ROUNDS {
        grouped.push(run_on(
            open(&format!("bench_pg_grouped_{i}"), usize::MAX),
            500 * scale,
        ));
        each.push(run_on(open(&format!("bench_pg_each_{i}"), 1), 30 * scale));
    }
    report(
        "pg round",
        "each",
        &grouped,
        &each,
        [
            "pg_durable_create_grouped",
            "pg_durable_create_each",
            "pg_group_commit_ratio",
        ],
    );
    println!(
        "# not yet measured (the multi-instance part of the scale-out): pg_get_nonowner_p99, takeover_ms"
    );
}
