//! The figures: each side measured and printed, memory and scale runs, the profile.

#[allow(unused_imports)]
use super::*;

/// One server under test at one scale: its host, connections and live tasks.
pub(crate) struct Side {
    pub(crate) host: Host,
    pub(crate) pool: Pool,
    pub(crate) ids: Arc<Vec<String>>,
    pub(crate) call_complete: Tally,
    /// Tasks completed by call-complete windows, warm-ups included.
    pub(crate) completed: u64,
    pub(crate) call_gets: Arc<AtomicUsize>,
    pub(crate) get_live: Tally,
    pub(crate) light: Tally,
}

impl Side {
    pub(crate) fn new(lg: &tokio::runtime::Runtime, name: &'static str, host: Host, live: usize) -> Side {
        let mut pool = Pool::open(lg, host.addr, LOOPS);
        let (ids, took) = prefill(lg, &mut pool, live);
        println!(
            "# {name}: {live} live tasks created through the server in {:.1} s ({:.0} calls/s)",
            took.as_secs_f64(),
            live as f64 / took.as_secs_f64()
        );
        Side {
            host,
            pool,
            ids: Arc::new(ids),
            call_complete: Tally::default(),
            completed: 0,
            call_gets: Arc::new(AtomicUsize::new(0)),
            get_live: Tally::default(),
            light: Tally::default(),
        }
    }

    pub(crate) fn call_complete(&mut self, lg: &tokio::runtime::Runtime, length: Duration, record: bool) {
        let gets = if record {
            self.call_gets.clone()
        } else {
            Arc::new(AtomicUsize::new(0))
        };
        let w = measure(
            lg,
            &self.host,
            &mut self.pool,
            LOOPS,
            length,
            call_complete_loop(gets),
        );
        self.completed += w.ops;
        if record {
            self.call_complete.add(w);
        }
    }

    pub(crate) fn get_live(
        &mut self,
        lg: &tokio::runtime::Runtime,
        length: Duration,
        loops: usize,
        record: bool,
    ) {
        let seed =
            0x5eed ^ self.ids.len() as u64 ^ ((self.get_live.rounds.len() + self.light.rounds.len()) as u64);
        let w = measure(
            lg,
            &self.host,
            &mut self.pool,
            loops,
            length,
            get_loop(self.ids.clone(), Expect::Live, seed),
        );
        if record {
            if loops == LOOPS {
                self.get_live.add(w);
            } else {
                self.light.add(w);
            }
        }
    }

    pub(crate) fn gets_per_task(&self) -> f64 {
        self.call_gets.load(Ordering::Relaxed) as f64 / self.call_complete.ops as f64
    }
}

pub(crate) fn warm_up() -> Duration {
    (window() / 6).max(Duration::from_millis(200))
}

pub(crate) fn print_call_complete(name: &str, s: &mut Side, peer: Option<&mut Side>) {
    let (p50, p99) = (s.call_complete.p(0.50), s.call_complete.p(0.99));
    let mut line = format!("{name}: subtask={:.0}", s.call_complete.rate());
    if let Some(peer) = peer {
        line += &format!(
            " rmcp={:.0} ratio={:.1}",
            peer.call_complete.rate(),
            s.call_complete.rate() / peer.call_complete.rate()
        );
        println!(
            "# {name}: rmcp rounds {} tasks/s, p50_us={} p99_us={}, {:.2} gets per task, server CPU {:.1} ms \
             per 1k requests ({:.0}% in the kernel)",
            peer.call_complete.rounds(),
            peer.call_complete.p(0.50),
            peer.call_complete.p(0.99),
            peer.gets_per_task(),
            peer.call_complete.cpu_per_1k_ms(),
            peer.call_complete.kernel_percent()
        );
    }
    println!(
        "# {name}: subtask rounds {} tasks/s, {:.2} gets per task, server CPU {:.1} ms per 1k requests \
         ({:.0}% in the kernel), load generator CPU {:.1} ms per 1k requests",
        s.call_complete.rounds(),
        s.gets_per_task(),
        s.call_complete.cpu_per_1k_ms(),
        s.call_complete.kernel_percent(),
        s.call_complete.client_cpu_per_1k_ms()
    );
    println!("{line} p50_us={p50} p99_us={p99}");
}

pub(crate) fn print_get_live(name: &str, s: &mut Side, peer: Option<&mut Side>) {
    let (p50, p99) = (s.get_live.p(0.50), s.get_live.p(0.99));
    let mut line = format!(
        "{name}: subtask={:.0} p50_us={p50} p99_us={p99}",
        s.get_live.rate()
    );
    if let Some(peer) = peer {
        line += &format!(
            " rmcp={:.0} ratio={:.1}",
            peer.get_live.rate(),
            s.get_live.rate() / peer.get_live.rate()
        );
        println!(
            "# {name}: rmcp rounds {} gets/s, p50_us={} p99_us={}, server CPU {:.1} ms per 1k requests \
             ({:.0}% in the kernel)",
            peer.get_live.rounds(),
            peer.get_live.p(0.50),
            peer.get_live.p(0.99),
            peer.get_live.cpu_per_1k_ms(),
            peer.get_live.kernel_percent()
        );
    }
    println!(
        "# {name}: subtask rounds {} gets/s, server CPU {:.1} ms per 1k requests ({:.0}% in the kernel), \
         load generator CPU {:.1} ms per 1k requests",
        s.get_live.rounds(),
        s.get_live.cpu_per_1k_ms(),
        s.get_live.kernel_percent(),
        s.get_live.client_cpu_per_1k_ms()
    );
    println!("{line}");
}

/// The figures at one scale with the in-memory store, subtask against
/// rmcp (when `with_peer`) in alternating rounds; at 1k also the CPU
/// figures and the bare handler.
pub(crate) fn memory_scale(lg: &tokio::runtime::Runtime, live: usize, with_peer: bool, label: &str) {
    let length = window();
    let mut sub = Side::new(lg, "subtask", start_subtask(&Store::Memory), live);
    let mut peer = with_peer.then(|| Side::new(lg, "rmcp", start_rmcp(), live));
    let is_1k = live == 1000;
    let mut bare = if is_1k {
        let sample = get_answer(lg, &mut sub.pool, &sub.ids[0]);
        println!(
            "# bare axum handler: answers a fixed {} byte body (a real tasks/get answer of subtask's)",
            sample.len()
        );
        let host = start_axum(sample.clone());
        let pool = Pool::open(lg, host.addr, LOOPS);
        Some((host, pool, sample, Tally::default()))
    } else {
        None
    };
    // The tasks/get rounds first, while each server holds its live tasks
    // only; then the call-complete rounds, whose completed tasks each
    // server keeps for their TTL. Each part starts with an unrecorded
    // warm-up of every server; who goes first alternates by round.
    sub.get_live(lg, warm_up(), LOOPS, false);
    if let Some(p) = peer.as_mut() {
        p.get_live(lg, warm_up(), LOOPS, false);
    }
    if let Some((host, pool, sample, _)) = bare.as_mut() {
        measure(
            lg,
            host,
            pool,
            LOOPS,
            warm_up(),
            get_loop(sub.ids.clone(), Expect::Bytes(sample.clone()), 1),
        );
    }
    let orders: [[bool; 2]; 2] = [[true, false], [false, true]];
    for round in 0..ROUNDS {
        for first_is_sub in orders[round % 2] {
            if first_is_sub {
                sub.get_live(lg, length, LOOPS, true);
                if let Some((host, pool, sample, tally)) = bare.as_mut() {
                    let seed = 0xba5e ^ round as u64;
                    tally.add(measure(
                        lg,
                        host,
                        pool,
                        LOOPS,
                        length,
                        get_loop(sub.ids.clone(), Expect::Bytes(sample.clone()), seed),
                    ));
                }
            } else if let Some(p) = peer.as_mut() {
                p.get_live(lg, length, LOOPS, true);
            }
        }
    }
    sub.call_complete(lg, warm_up(), false);
    if let Some(p) = peer.as_mut() {
        p.call_complete(lg, warm_up(), false);
    }
    for round in 0..ROUNDS {
        for first_is_sub in orders[round % 2] {
            if first_is_sub {
                sub.call_complete(lg, length, true);
            } else if let Some(p) = peer.as_mut() {
                p.call_complete(lg, length, true);
            }
        }
    }
    println!(
        "# http_call_complete_{label}: completed tasks are kept for their TTL on both sides: at the end \
         subtask held {live} live and {} completed tasks{}",
        sub.completed,
        peer.as_ref()
            .map(|p| format!(", rmcp {live} live and {} completed", p.completed))
            .unwrap_or_default()
    );
    print_call_complete(&format!("http_call_complete_{label}"), &mut sub, peer.as_mut());
    print_get_live(&format!("http_get_live_{label}"), &mut sub, peer.as_mut());
    if let Some((_, _, _, mut tally)) = bare {
        let sub_get = sub.get_live.cpu_per_1k_ms();
        let sub_call = sub.call_complete.cpu_per_1k_ms();
        let axum = tally.cpu_per_1k_ms();
        println!(
            "# bare axum handler: rounds {} requests/s, p50_us={} p99_us={}, server CPU {:.2} ms per 1k \
             requests ({:.0}% in the kernel), load generator CPU {:.1} ms per 1k requests",
            tally.rounds(),
            tally.p(0.50),
            tally.p(0.99),
            tally.cpu_per_1k_ms(),
            tally.kernel_percent(),
            tally.client_cpu_per_1k_ms()
        );
        println!(
            "# http_cpu_per_1k: server CPU (ms) per 1,000 requests at 1k live: tasks/get \
             (get_ms) and the call-complete mix (call_ms: tools/call and tasks/get)"
        );
        let mut line = format!("http_cpu_per_1k: subtask_get_ms={sub_get:.2} subtask_call_ms={sub_call:.2}");
        if let Some(p) = peer.as_ref() {
            line += &format!(
                " rmcp_get_ms={:.2} rmcp_call_ms={:.2}",
                p.get_live.cpu_per_1k_ms(),
                p.call_complete.cpu_per_1k_ms()
            );
        }
        println!("{line} axum_ms={axum:.2}");
        println!("http_overhead_ratio: {:.2}", sub_get / axum);
    }
}

/// `http_get_live_100k` (64 loops) and `http_get_latency_100k` (4 loops),
/// subtask only: rmcp's `TaskManager` sweeps every task on every call,
/// so filling it with 100,000 tasks through its server would take longer
/// than this whole bench.
pub(crate) fn scale_100k(lg: &tokio::runtime::Runtime, store: &Store, suffix: &str) {
    let length = window();
    let name = match store {
        Store::Memory => "subtask",
        Store::Sqlite(_) => "subtask (SQLite)",
        Store::Postgres(_) => "subtask (PostgreSQL)",
    };
    let mut sub = Side::new(lg, name, start_subtask(store), 100_000);
    sub.get_live(lg, warm_up(), LOOPS, false);
    for _ in 0..ROUNDS {
        sub.get_live(lg, length, LOOPS, true);
        sub.get_live(lg, length, LIGHT_LOOPS, true);
    }
    print_get_live(&format!("http_get_live_100k{suffix}"), &mut sub, None);
    println!(
        "# http_get_latency_100k{suffix}: {LIGHT_LOOPS} loops, rounds {} gets/s, server CPU {:.1} ms per 1k requests",
        sub.light.rounds(),
        sub.light.cpu_per_1k_ms()
    );
    println!(
        "http_get_latency_100k{suffix}: p50_us={} p99_us={}",
        sub.light.p(0.50),
        sub.light.p(0.99)
    );
}

/// The 1k and 30k figures with the durable SQLite store, subtask only.
pub(crate) fn sqlite_scale(lg: &tokio::runtime::Runtime, live: usize, label: &str) {
    let length = window();
    let dir = tempdir::TempDir::new("bench-http");
    let mut sub = Side::new(
        lg,
        "subtask (SQLite)",
        start_subtask(&Store::Sqlite(dir.db())),
        live,
    );
    // As at the in-memory scales: the tasks/get rounds first, then the
    // call-complete rounds.
    sub.get_live(lg, warm_up(), LOOPS, false);
    for _ in 0..ROUNDS {
        sub.get_live(lg, length, LOOPS, true);
    }
    sub.call_complete(lg, warm_up(), false);
    for _ in 0..ROUNDS {
        sub.call_complete(lg, length, true);
    }
    print_call_complete(&format!("http_call_complete_{label}_sqlite"), &mut sub, None);
    print_get_live(&format!("http_get_live_{label}_sqlite"), &mut sub, None);
    if live == 1000 {
        println!(
            "http_cpu_per_1k_sqlite: subtask_get_ms={:.2} subtask_call_ms={:.2}",
            sub.get_live.cpu_per_1k_ms(),
            sub.call_complete.cpu_per_1k_ms()
        );
    }
    drop(sub);
}

/// `SUBTASK_HTTP_ONLY=profile`: a fixed amount of work for an instruction
/// profiler (`valgrind --tool=callgrind --separate-threads=yes`, then the
/// server's threads' files): subtask's server (in memory) with 1,000 live
/// tasks, then 20,000 `tasks/get` of live tasks and 5,000 call-completes
/// from 4 loops (`SUBTASK_HTTP_PROFILE_LIVE`, `SUBTASK_HTTP_PROFILE_GETS`,
/// `SUBTASK_HTTP_PROFILE_CALLS`); `SUBTASK_HTTP_PROFILE_STORE=sqlite` runs
/// the server on the SQLite store.
pub(crate) fn profile(lg: &tokio::runtime::Runtime) {
    let count = |var: &str, default: usize| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let gets = count("SUBTASK_HTTP_PROFILE_GETS", 20_000);
    let calls = count("SUBTASK_HTTP_PROFILE_CALLS", 5_000);
    let live = count("SUBTASK_HTTP_PROFILE_LIVE", 1000);
    // `SUBTASK_HTTP_PROFILE_STORE=sqlite`: the server on the SQLite store
    // (its writer and syncer threads are the server's too), held a little
    // after the last request so finished trees are let go inside the run.
    let dir = tempdir::TempDir::new("bench-http-profile");
    let sqlite = std::env::var("SUBTASK_HTTP_PROFILE_STORE").as_deref() == Ok("sqlite");
    let store = if sqlite {
        Store::Sqlite(dir.db())
    } else {
        Store::Memory
    };
    let mut sub = Side::new(lg, "subtask", start_subtask(&store), live);
    // `SUBTASK_HTTP_PROFILE_TARGET=axum`: the same gets against the bare
    // handler instead (its answer: a real tasks/get answer of subtask's).
    if std::env::var("SUBTASK_HTTP_PROFILE_TARGET").as_deref() == Ok("axum") {
        let sample = get_answer(lg, &mut sub.pool, &sub.ids[0]);
        let host = start_axum(sample.clone());
        let mut pool = Pool::open(lg, host.addr, LIGHT_LOOPS);
        let per_loop = gets / LIGHT_LOOPS;
        let ids = sub.ids.clone();
        let cpu0 = host.cpu();
        let conns: Vec<Conn> = pool.conns.drain(..).collect();
        let requests: u64 = lg.block_on(async move {
            let mut handles = Vec::new();
            for (i, mut conn) in conns.into_iter().enumerate() {
                let ids = ids.clone();
                let sample = sample.clone();
                handles.push(tokio::spawn(async move {
                    let mut rng = Rng::new(0x9f0f ^ i as u64);
                    for _ in 0..per_loop {
                        let id = &ids[rng.below(ids.len())];
                        assert_eq!(conn.call("tasks/get", id, &get_params(id)).await, &sample[..]);
                    }
                    conn.requests
                }));
            }
            let mut n = 0;
            for h in handles {
                n += h.await.expect("a profile loop panicked");
            }
            n
        });
        println!(
            "# profile (bare axum): {requests} requests, server CPU {:.1} ms",
            host.cpu().saturating_sub(cpu0).as_secs_f64() * 1e3
        );
        return;
    }
    let cpu0 = sub.host.cpu();
    let t0 = Instant::now();
    let conns: Vec<Conn> = sub.pool.conns.drain(..LIGHT_LOOPS).collect();
    let ids = sub.ids.clone();
    let conns = lg.block_on(async move {
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut conn)| {
                let ids = ids.clone();
                tokio::spawn(async move {
                    let mut rng = Rng::new(0x9f0f ^ i as u64);
                    for _ in 0..gets / LIGHT_LOOPS {
                        let id = &ids[rng.below(ids.len())];
                        let task = conn.task("tasks/get", id, &get_params(id)).await;
                        assert_eq!(task.status, "working");
                    }
                    let call = call_params("quick");
                    for _ in 0..calls / LIGHT_LOOPS {
                        let id = conn.task("tools/call", "quick", &call).await.task_id.into_owned();
                        while conn.task("tasks/get", &id, &get_params(&id)).await.status != "completed" {}
                    }
                    conn
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("a profile loop panicked"));
        }
        out
    });
    let requests: u64 = conns.iter().map(|c| c.requests).sum();
    if sqlite {
        // Past the 2 s grace of the last finished tree.
        std::thread::sleep(Duration::from_secs(4));
    }
    println!(
        "# profile: {requests} requests ({gets} gets, {calls} call-completes) in {:.1} s, server CPU {:.1} ms",
        t0.elapsed().as_secs_f64(),
        sub.host.cpu().saturating_sub(cpu0).as_secs_f64() * 1e3
    );
}
