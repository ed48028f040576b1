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
//! On the same PostgreSQL, two cluster instances (as `subtask serve --db
//! postgres://…` runs them): `pg_get_nonowner_p99`, the latency of
//! `tasks/get` answered by an instance that does not hold the tree (from
//! the stored rows), with 100,000 tasks in the database, two instances in
//! this process; and `takeover_ms`, from SIGKILL of the real binary holding
//! a running tree to the first `tasks/get` the other instance answers with
//! its recovery of that tree, with the default lease.
//!
//! `durable_create_grouped_encrypted`: the grouped creates with task state
//! sealed at rest, against the same in clear, alternating rounds
//! (`SUBTASK_BENCH_ONLY=encrypted` runs only these).
//!
//! `retained_terminal_bytes`, `get_terminal_1m_p99_us` and `restart_1m_ms`:
//! finished trees kept by the real binary on a SQLite file, 1,000,000
//! tasks (`support/terminal.rs`; `SUBTASK_BENCH_ONLY=terminal` runs only
//! these).
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

#[path = "support/durable.rs"]
mod durable;
/// The tests' HTTP client (hyper), for `takeover_ms`'s requests.
#[cfg(feature = "cli")]
#[path = "../tests/support/http.rs"]
mod http;
#[cfg(feature = "postgres")]
#[path = "../tests/support/pg.rs"]
mod pg;
#[cfg(feature = "postgres")]
#[path = "../tests/support/pg_server.rs"]
mod pg_server;
/// The seeded generator of the tests (fixed seeds here: every run gets
/// the same ids).
#[cfg(all(feature = "postgres", feature = "demo"))]
#[path = "../tests/support/seed.rs"]
mod seed;
/// `subtask serve` as a child process.
#[cfg(feature = "cli")]
#[path = "support/serve.rs"]
mod serve;
/// `retained_terminal_bytes`, `restart_1m_ms`, `get_terminal_1m_p99_us`.
#[cfg(feature = "cli")]
#[path = "support/terminal.rs"]
mod terminal;

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
    run_keyed(name, max_batches_per_commit, per_creator, None)
}

/// [`run`], with task state sealed at rest by `keys` when given
/// (`docs/encryption.md`).
fn run_keyed(
    name: &str,
    max_batches_per_commit: usize,
    per_creator: usize,
    keys: Option<Arc<subtask::store::Keyring>>,
) -> Run {
    let path = fresh_db(name);
    let store = SqliteStore::open(SqliteConfig {
        durability: Durability::Full,
        max_batches_per_commit,
        keys,
        ..SqliteConfig::new(&path)
    })
    .expect("open store");
    run_on(Arc::new(store), per_creator)
}

/// `durable_create_grouped_encrypted`: the grouped creates with task state
/// sealed (XChaCha20-Poly1305, `docs/encryption.md`) against the same
/// without, alternating rounds; the cost is the median of the per-round
/// drops in creates per second.
fn encryption_figures(scale: usize) {
    let keys = Arc::new(
        subtask::store::Keyring::parse("bench AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n")
            .expect("the bench's key"),
    );
    let mut plain = Vec::new();
    let mut sealed = Vec::new();
    for i in 0..ENCRYPTION_ROUNDS {
        plain.push(run(&format!("plain-{i}.db"), usize::MAX, 1_000 * scale));
        sealed.push(run_keyed(
            &format!("sealed-{i}.db"),
            usize::MAX,
            1_000 * scale,
            Some(keys.clone()),
        ));
    }
    for (i, (p, s)) in plain.iter().zip(&sealed).enumerate() {
        println!(
            "# encryption round {i}: clear {:.0}/s, sealed {:.0}/s",
            rate(p),
            rate(s)
        );
    }
    let cost = median(
        plain
            .iter()
            .zip(&sealed)
            .map(|(p, s)| (1.0 - rate(s) / rate(p)) * 100.0)
            .collect(),
    );
    println!(
        "durable_create_grouped_encrypted: subtask={:.0} clear={:.0} cost_pct={cost:.1}",
        median(sealed.iter().map(rate).collect()),
        median(plain.iter().map(rate).collect())
    );
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

/// The finished-tree figures (`support/terminal.rs`), with the real binary.
fn terminal_figures() {
    #[cfg(feature = "cli")]
    terminal::figures(&fresh_db("terminal.db"), &bench_dir());
    #[cfg(not(feature = "cli"))]
    println!(
        "# retained_terminal_bytes, get_terminal_1m_p99_us, restart_1m_ms: not run (they need the `cli` feature's binary)"
    );
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
/// Rounds of (clear, sealed): the cost sought (about a tenth) is smaller
/// than one round's swing on a shared machine (±20% seen), so more pairs
/// than the other figures take go into its median.
const ENCRYPTION_ROUNDS: usize = 15;

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
    if std::env::var("SUBTASK_BENCH_ONLY").is_ok_and(|v| v == "terminal") {
        terminal_figures();
        return;
    }
    if std::env::var("SUBTASK_BENCH_ONLY").is_ok_and(|v| v == "encrypted") {
        encryption_figures(scale);
        return;
    }
    if std::env::var("SUBTASK_BENCH_ONLY").is_ok_and(|v| v == "durable") {
        // Only the durable execution figures (on SQLite).
        durable_figures(scale);
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
    encryption_figures(scale);
    durable_figures(scale);
    terminal_figures();
    #[cfg(feature = "postgres")]
    postgres_figures(scale);
}

/// Durable execution (`benches/support/durable.rs`): steps against bare
/// subtasks of the same work in alternating rounds, then resume and drain.
fn durable_figures(scale: usize) {
    let per = std::env::var("SUBTASK_BENCH_DURABLE_PER")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100 * scale);
    println!(
        "# durable execution: {} resumable roots x {per} acts, SQLite synchronous=FULL with group commit",
        64
    );
    let open = |name: &str| -> Arc<dyn TaskStore> {
        Arc::new(
            SqliteStore::open(SqliteConfig {
                durability: Durability::Full,
                ..SqliteConfig::new(fresh_db(name))
            })
            .expect("open store"),
        )
    };
    let _ = durable::acts_per_s(open("steps-warmup.db"), per, false);
    let (mut steps, mut spawns) = (Vec::new(), Vec::new());
    for i in 0..3 {
        steps.push(durable::acts_per_s(open(&format!("steps-{i}.db")), per, false));
        spawns.push(durable::acts_per_s(open(&format!("spawns-{i}.db")), per, true));
        println!(
            "# durable round {i}: {:.0} steps/s, {:.0} spawned and awaited subtasks/s",
            steps[i], spawns[i]
        );
    }
    let ratio = median(steps.iter().zip(&spawns).map(|(st, sp)| sp / st).collect());
    println!("durable_step: subtask={:.0}", median(steps));
    println!("# a step's time over a bare spawn_subtask's of the same work, same run");
    println!("step_overhead_ratio: {ratio:.2}");
    let resume: Vec<f64> = (0..3)
        .map(|i| durable::resume_10k_ms(&fresh_db(&format!("resume-{i}.db"))))
        .collect();
    println!(
        "# resume: 10,001 tasks, 5,101 unfinished, from opening the store to every unfinished handler running"
    );
    println!("resume_10k_ms: subtask={:.0}", median(resume));
    let drain: Vec<f64> = (0..3)
        .map(|i| durable::drain_ms(&fresh_db(&format!("drain-{i}.db"))))
        .collect();
    println!("# drain: 1,000 resumable handlers at a safe point every 10 ms, until all stopped and durable");
    println!("drain_ms: subtask={:.0}", median(drain));
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
    use subtask::store::{Membership, PostgresConfig, PostgresStore};
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
        // As `subtask serve` opens it: a cluster member, every commit
        // fenced by its instance row and notifying its trees.
        Arc::new(
            PostgresStore::open(PostgresConfig {
                max_batches_per_commit: max,
                member: Some(Membership {
                    instance: uuid::Uuid::new_v4(),
                    lease: std::time::Duration::from_secs(60),
                }),
                ..PostgresConfig::new(url)
            })
            .unwrap_or_else(|e| panic!("open {name}: {e}")),
        )
    };
    println!(
        "# postgres: {} on this machine, synchronous_commit=on, the same {CREATORS} creators; \
         the store as a cluster member (fenced commits), as `subtask serve` runs it",
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
    let steps: Vec<f64> = (0..3)
        .map(|i| {
            durable::acts_per_s(
                open(&format!("bench_pg_steps_{i}"), usize::MAX),
                100 * scale,
                false,
            )
        })
        .collect();
    println!("durable_step_pg: subtask={:.0}", median(steps));
    #[cfg(feature = "demo")]
    nonowner::figure(&pg);
    #[cfg(not(feature = "demo"))]
    println!("# pg_get_nonowner_p99 skipped: it needs the demo tools (feature `demo`)");
    #[cfg(feature = "cli")]
    takeover::figure(&pg);
    #[cfg(not(feature = "cli"))]
    println!("# takeover_ms skipped: it needs the subtask binary (feature `cli`)");
}

/// A request body as a 2026-07-28 client with the tasks extension (steer
/// and pause) sends it.
#[cfg(all(feature = "postgres", feature = "demo"))]
fn request_body(id: u64, method: &str, mut params: serde_json::Value) -> Vec<u8> {
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":
            {"extensions": {"io.modelcontextprotocol/tasks": {"steer": true, "pause": true}}},
        "io.modelcontextprotocol/clientInfo": {"name": "subtask-bench", "version": "0"},
    });
    serde_json::to_vec(&serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .expect("a request serializes")
}

/// `pg_get_nonowner_p99`: `tasks/get` answered by an instance that does
/// not hold the tree (it reads the stored row and its children's ids),
/// with 100,000 tasks in the database; and the same gets answered by the
/// holder from memory, for comparison.
#[cfg(all(feature = "postgres", feature = "demo"))]
mod nonowner {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};
    use subtask::model::{ClientView, TaskId, TaskStatus};
    use subtask::runtime::{Runtime, RuntimeConfig};
    use subtask::server::{
        Cluster, ClusterConfig, Incoming, Principal, Reply, RequestHeaders, Server, ServerConfig,
    };
    use subtask::store::{Membership, PostgresConfig, PostgresStore};

    use super::seed::Rng;
    use super::{Pg, percentile, request_body};

    /// Tasks the database holds at least while the gets are measured.
    const STORED: usize = 100_000;
    /// Each tree: `fanout` with 21 children per node, 3 levels deep
    /// (1 + 21 + 441 + 9,261 = 9,724 tasks, under the tool's 10,000 and the
    /// principal's 10,000 live tasks), no steps: it completes at once.
    const WIDTH: u64 = 21;
    const DEPTH: u64 = 3;
    const LOOPS: usize = 4;
    const WARMUP: Duration = Duration::from_secs(1);
    const MEASURE: Duration = Duration::from_secs(3);
    /// The default lease of `subtask serve`.
    const LEASE: Duration = Duration::from_secs(5);

    /// One in-process cluster instance, as `subtask serve --db postgres://…` builds it.
    struct Instance {
        server: Server,
        runtime: Runtime,
        cluster: Cluster,
    }

    async fn instance(url: &str) -> Instance {
        let config = PostgresConfig {
            member: Some(Membership {
                instance: uuid::Uuid::new_v4(),
                lease: LEASE,
            }),
            ..PostgresConfig::new(url)
        };
        let store = tokio::task::spawn_blocking(move || PostgresStore::open(config))
            .await
            .expect("open the store")
            .unwrap_or_else(|e| panic!("open the PostgreSQL store: {e}"));
        let registration = store
            .registration()
            .cloned()
            .expect("a cluster member is registered");
        let runtime = Runtime::with_store(RuntimeConfig::default(), Arc::new(store));
        runtime.set_lease(registration.gate.clone());
        let server =
            subtask::demo::register(Server::builder(runtime.clone(), ServerConfig::default())).build();
        server.recover().await.expect("recover");
        let cluster = server
            .join_cluster(&registration, ClusterConfig::new(url, LEASE))
            .expect("join the cluster");
        Instance {
            server,
            runtime,
            cluster,
        }
    }

    static NEXT_ID: AtomicU64 = AtomicU64::new(1);

    /// A request as the HTTP layer hands it over: body, headers, principal.
    fn incoming<'a>(body: &'a [u8], method: &str, name: &str) -> Incoming<'a> {
        Incoming {
            body,
            headers: Some(RequestHeaders {
                protocol_version: Some("2026-07-28".to_owned()),
                method: Some(method.to_owned()),
                name: Some(name.to_owned()),
            }),
            principal: Principal::anonymous(),
            connection: None,
        }
    }

    /// The `result` of a request, or the whole answer when it is not one.
    async fn call(server: &Server, method: &str, name: &str, params: Value) -> Result<Value, String> {
        let body = request_body(NEXT_ID.fetch_add(1, Ordering::Relaxed), method, params);
        match server.handle(incoming(&body, method, name)).await {
            Reply::Message { status: 200, body } => {
                let mut v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
                match v.get_mut("result") {
                    Some(r) => Ok(r.take()),
                    None => Err(body),
                }
            }
            other => Err(format!("{other:?}")),
        }
    }

    /// Fills the database through A's `tools/call fanout`, one tree at a
    /// time (each ends before the next starts: the principal's live-task
    /// limit); returns the number of trees.
    async fn populate(a: &Instance) -> usize {
        let per_tree = subtask::demo::fanout::node_count(WIDTH, DEPTH) as usize;
        let trees = STORED.div_ceil(per_tree);
        for _ in 0..trees {
            let r = call(
                &a.server,
                "tools/call",
                "fanout",
                json!({"name": "fanout", "arguments":
                    {"width": WIDTH, "depth": DEPTH, "steps": 0, "stepMs": 0, "ttlMs": 86_400_000}}),
            )
            .await
            .unwrap_or_else(|e| panic!("tools/call fanout on A: {e}"));
            assert_eq!(r["resultType"], "task", "fanout did not create a task: {r}");
            let root: TaskId = r["taskId"]
                .as_str()
                .expect("a taskId")
                .parse()
                .expect("a task id");
            let done = a
                .runtime
                .wait(root, ClientView::PAUSE_AWARE)
                .await
                .expect("the tree's root");
            assert_eq!(
                done.status(),
                TaskStatus::Completed,
                "the fanout tree ended {done:?}"
            );
            a.runtime.flushed(root).await.expect("the tree is durable");
        }
        trees
    }

    /// Every stored task id, and how many trees another instance than
    /// `holder` holds (must be none).
    fn stored_ids(url: &str, holder: uuid::Uuid) -> (Vec<String>, i64) {
        let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect to the bench database");
        let ids = c
            .query("SELECT id FROM subtask_tasks", &[])
            .expect("list the stored tasks")
            .iter()
            .map(|r| TaskId::from_u128(r.get::<_, uuid::Uuid>(0).as_u128()).to_string())
            .collect();
        let foreign: i64 = c
            .query_one(
                "SELECT count(*) FROM subtask_tasks WHERE parent IS NULL AND holder IS DISTINCT FROM $1",
                &[&holder],
            )
            .expect("count the trees")
            .get(0);
        (ids, foreign)
    }

    /// `tasks/get` of random stored ids through `server`, by 4 loops, for
    /// `run`; the latencies in µs. Every answer must be the task.
    async fn gets(
        server: &Server,
        who: &'static str,
        ids: Arc<Vec<String>>,
        seed: u64,
        run: Duration,
    ) -> Vec<f64> {
        let until = Instant::now() + run;
        let mut loops = Vec::new();
        for l in 0..LOOPS {
            let server = server.clone();
            let ids = ids.clone();
            loops.push(tokio::spawn(async move {
                let mut rng = Rng::new(seed.wrapping_add(l as u64));
                let mut lat = Vec::new();
                while Instant::now() < until {
                    let id = &ids[rng.below(ids.len())];
                    let body = request_body(
                        NEXT_ID.fetch_add(1, Ordering::Relaxed),
                        "tasks/get",
                        json!({"taskId": id}),
                    );
                    let t0 = Instant::now();
                    let reply = server.handle(incoming(&body, "tasks/get", id)).await;
                    lat.push(t0.elapsed().as_secs_f64() * 1e6);
                    let Reply::Message { status: 200, body } = &reply else {
                        panic!("{who}: tasks/get {id} answered {reply:?}");
                    };
                    let v: Value = serde_json::from_str(body).expect("a JSON answer");
                    let task = &v["result"];
                    assert!(
                        task["status"].is_string() && task["taskId"] == id.as_str(),
                        "{who}: tasks/get of the stored task {id} did not answer the task: {body}"
                    );
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for l in loops {
            all.extend(l.await.expect("a get loop"));
        }
        all
    }

    pub(super) fn figure(pg: &Pg) {
        let url = pg
            .database("bench_pg_nonowner")
            .unwrap_or_else(|e| panic!("create database bench_pg_nonowner: {e}"));
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        tokio.block_on(async {
            let a = instance(&url).await;
            let started = Instant::now();
            let trees = populate(&a).await;
            let populated = started.elapsed();
            let held = a.runtime.task_count();
            let (u, a_id) = (url.clone(), a.cluster.instance());
            let (ids, foreign) = tokio::task::spawn_blocking(move || stored_ids(&u, a_id))
                .await
                .expect("list the stored tasks");
            assert_eq!(foreign, 0, "every tree is held by A");
            assert_eq!(ids.len(), held, "A holds every stored task");
            assert!(ids.len() >= STORED, "{} tasks stored", ids.len());
            // B starts on the filled database: it holds none of it.
            let b = instance(&url).await;
            assert_eq!(b.runtime.task_count(), 0, "B holds no stored tree");
            println!(
                "# pg non-owner get: {} tasks stored ({trees} fanout trees of {} tasks, width {WIDTH} depth {DEPTH}, \
                 created through A's tools/call) in {:.1} s; tasks/get of random ids through Server::handle, \
                 {LOOPS} loops, {} s each after a {} s warm-up",
                ids.len(),
                subtask::demo::fanout::node_count(WIDTH, DEPTH),
                populated.as_secs_f64(),
                MEASURE.as_secs(),
                WARMUP.as_secs(),
            );
            let ids = Arc::new(ids);
            let _ = gets(&b.server, "B", ids.clone(), 1, WARMUP).await;
            let _ = gets(&a.server, "A", ids.clone(), 2, WARMUP).await;
            let mut nonowner = gets(&b.server, "B", ids.clone(), 3, MEASURE).await;
            let mut owner = gets(&a.server, "A", ids.clone(), 3, MEASURE).await;
            for (label, lat) in [
                ("B, the non-owner (stored row + children's ids)", &mut nonowner),
                ("A, the holder (from memory)", &mut owner),
            ] {
                println!(
                    "# {label}: {} gets ({:.0}/s), p50 {:.0} µs, p99 {:.0} µs",
                    lat.len(),
                    lat.len() as f64 / MEASURE.as_secs_f64(),
                    percentile(lat, 0.50),
                    percentile(lat, 0.99),
                );
            }
            println!("pg_get_nonowner_p99: subtask={:.0}", percentile(&mut nonowner, 0.99));
            // B first: it holds nothing, and is gone before A's trees are free.
            b.cluster.leave().await;
            a.cluster.leave().await;
        });
        drop(tokio);
    }
}

/// `takeover_ms`: the real binary twice on one database with the default
/// lease; the holder of a running `fanout` is SIGKILLed, and the other
/// instance is asked for a child every 5 ms until it answers with its own
/// recovery (the child resumed there: its `lastUpdatedAt` past the kill,
/// which only the instance that took the tree over writes).
#[cfg(feature = "cli")]
mod takeover {
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};

    use super::serve::Serve;
    use super::{Pg, bench_dir, median};

    const ROUNDS: usize = 3;
    const POLL: Duration = Duration::from_millis(5);
    /// `subtask serve`'s default lease (the instances run with it).
    const LEASE_MS: f64 = 5000.0;
    /// How often an instance looks for expired leases with the default
    /// lease (`src/server/cluster.rs`: a tenth of the lease).
    const SCAN: Duration = Duration::from_millis(500);

    /// Round `i`'s delay between B's start and A's: the middles of
    /// `ROUNDS` equal slices of B's scan period.
    fn offset(i: usize) -> Duration {
        SCAN * (2 * i as u32 + 1) / (2 * ROUNDS as u32)
    }

    fn children(t: &Value) -> Vec<String> {
        t["childTaskIds"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    }

    /// How long `instance`'s lease still runs by the database's clock, in ms.
    fn lease_left_ms(db: &str, instance: uuid::Uuid) -> f64 {
        let mut c = postgres::Client::connect(db, postgres::NoTls).expect("connect to the bench database");
        c.query_one(
            "SELECT (extract(epoch FROM lease_until - clock_timestamp()) * 1000)::float8
             FROM subtask_instances WHERE id = $1",
            &[&instance],
        )
        .expect("A's lease")
        .get(0)
    }

    struct Round {
        ms: f64,
        lease_left_ms: f64,
        polls: usize,
        errors: usize,
    }

    /// Milliseconds since the epoch, now.
    fn chrono_now_ms() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }

    /// A task's `lastUpdatedAt`, in milliseconds since the epoch.
    fn updated_ms(t: &serde_json::Value) -> i64 {
        t["lastUpdatedAt"]
            .as_str()
            .and_then(|s| s.parse::<subtask::model::Timestamp>().ok())
            .map_or(0, |ts| ts.as_millis() as i64)
    }

    fn round(pg: &Pg, i: usize) -> Round {
        let db = pg
            .database(&format!("bench_pg_takeover_{i}"))
            .unwrap_or_else(|e| panic!("create database bench_pg_takeover_{i}: {e}"));
        let (a_id, b_id) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let dir = bench_dir();
        let (a_arg, b_arg) = (a_id.to_string(), b_id.to_string());
        let b = Serve::start(
            &["--db", &db, "--instance-id", &b_arg],
            &dir.join(format!("takeover-{i}-b.log")),
        );
        // A's lease expires about its start plus the lease (it is killed
        // before its first renewal after that); B looks for expired leases
        // every SCAN from its own start. Starting A `offset` after B puts
        // the expiry at a different point of B's scan period in each round.
        std::thread::sleep(offset(i));
        let mut a = Serve::start(
            &["--db", &db, "--instance-id", &a_arg],
            &dir.join(format!("takeover-{i}-a.log")),
        );
        let r = a
            .call(
                "tools/call",
                "fanout",
                json!({"name": "fanout", "arguments": {"width": 2, "depth": 1, "steps": 1000, "stepMs": 10}}),
            )
            .unwrap_or_else(|e| panic!("tools/call fanout on A: {e}"));
        assert_eq!(r["resultType"], "task", "fanout did not create a task: {r}");
        let root = r["taskId"].as_str().expect("a taskId").to_owned();
        let kids = children(&a.until(&root, "A lists the children", |t| children(t).len() == 2));
        let child = &kids[0];
        // B reads it from the database before the kill: running, held by A.
        b.until(child, "B sees A's child", |t| t["status"] == "working");
        let lease_left_ms = lease_left_ms(&db, a_id);
        let killed = Instant::now();
        a.child.kill().expect("SIGKILL A");
        // Wall time of the kill: the child's `lastUpdatedAt` passes it only
        // once B holds the tree (it resumes there in place); until then B
        // answers from the rows A wrote.
        let killed_at = chrono_now_ms();
        let (mut polls, mut errors) = (0, 0);
        let ms = loop {
            let got = b.call("tasks/get", child, json!({"taskId": child}));
            polls += 1;
            match got {
                Ok(t) if updated_ms(&t) > killed_at => {
                    assert!(t["status"] == "working", "B resumed A's child: {t}");
                    break killed.elapsed().as_secs_f64() * 1000.0;
                }
                Ok(t) => assert!(
                    t["status"] == "working",
                    "B answered an unexpected state for A's child after the kill: {t}"
                ),
                Err(_) => errors += 1,
            }
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "B did not take the tree over within 30 s of the kill (log {})",
                b.log.display()
            );
            std::thread::sleep(POLL);
        };
        let _ = a.child.wait();
        drop(b);
        Round {
            ms,
            lease_left_ms,
            polls,
            errors,
        }
    }

    pub(super) fn figure(pg: &Pg) {
        println!(
            "# takeover: two `subtask serve --db postgres://…` (default lease {LEASE_MS:.0} ms), fanout \
             {{width 2, depth 1, steps 1000, stepMs 10}} on A, SIGKILL A as soon as B reads the running \
             child (A's lease nearly whole: the longest wait for it), tasks/get of that child on B every \
             {} ms until B answers it resumed there (its lastUpdatedAt past the kill); a fresh database \
             per round, A started \
             {} ms after B so that its lease expires at a different point of B's {} ms scan period",
            POLL.as_millis(),
            (0..ROUNDS)
                .map(|i| offset(i).as_millis().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            SCAN.as_millis(),
        );
        let mut ms = Vec::new();
        for i in 0..ROUNDS {
            let r = round(pg, i);
            println!(
                "# takeover round {i}: {:.0} ms (A's lease had {:.0} ms left at the kill: {:.0} ms after it \
                 expired); {} gets, {} failed",
                r.ms,
                r.lease_left_ms,
                r.ms - r.lease_left_ms,
                r.polls,
                r.errors
            );
            ms.push(r.ms);
        }
        println!("takeover_ms: subtask={:.0}", median(ms));
    }
}
