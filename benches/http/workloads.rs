//! The workloads: pools of connections, the measurement loop, the loops it runs.

#[allow(unused_imports)]
use super::*;

/// Connections of the load generator to one server.
pub(crate) struct Pool {
    pub(crate) conns: Vec<Conn>,
}

impl Pool {
    pub(crate) fn open(lg: &tokio::runtime::Runtime, addr: SocketAddr, n: usize) -> Pool {
        let conns = lg.block_on(async move {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(Conn::open(addr).await);
            }
            v
        });
        Pool { conns }
    }
}

#[derive(Default)]
pub(crate) struct LoopStats {
    pub(crate) ops: u64,
    pub(crate) latencies_us: Vec<u32>,
}

pub(crate) struct Window {
    pub(crate) ops: u64,
    pub(crate) requests: u64,
    pub(crate) elapsed: Duration,
    pub(crate) cpu: Duration,
    pub(crate) client_cpu: Duration,
    pub(crate) ticks: (u64, u64),
    pub(crate) latencies_us: Vec<u32>,
}

pub(crate) type LoopFuture = std::pin::Pin<Box<dyn std::future::Future<Output = (Conn, LoopStats)> + Send>>;

/// Runs one loop per connection of `pool` (`loops` of them) on the load
/// generator until `length` has passed, and measures: operations, requests,
/// the time until the last loop finished its last operation, and the
/// server's CPU over that time.
pub(crate) fn measure(
    lg: &tokio::runtime::Runtime,
    host: &Host,
    pool: &mut Pool,
    loops: usize,
    length: Duration,
    body: impl Fn(usize, Conn, Instant) -> LoopFuture,
) -> Window {
    assert!(pool.conns.len() >= loops);
    let conns: Vec<Conn> = pool.conns.drain(..loops).collect();
    let requests0: u64 = conns.iter().map(|c| c.requests).sum();
    let cpu0 = host.cpu();
    let ticks0 = host.ticks();
    let client0 = threads_cpu(&[LOADGEN_THREADS]);
    let t0 = Instant::now();
    let deadline = t0 + length;
    let futures: Vec<LoopFuture> = conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| body(i, c, deadline))
        .collect();
    let results = lg.block_on(async move {
        let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.await.expect("a client loop panicked"));
        }
        out
    });
    let elapsed = t0.elapsed();
    let cpu = host.cpu().saturating_sub(cpu0);
    let client_cpu = threads_cpu(&[LOADGEN_THREADS]).saturating_sub(client0);
    let ticks1 = host.ticks();
    let ticks = (
        ticks1.0.saturating_sub(ticks0.0),
        ticks1.1.saturating_sub(ticks0.1),
    );
    let mut w = Window {
        ops: 0,
        requests: 0,
        elapsed,
        cpu,
        client_cpu,
        ticks,
        latencies_us: Vec::new(),
    };
    for (conn, stats) in results {
        w.ops += stats.ops;
        w.latencies_us.extend(stats.latencies_us);
        w.requests += conn.requests;
        pool.conns.push(conn);
    }
    w.requests -= requests0;
    w
}

/// `tools/call` of `quick`, then `tasks/get` until it shows `completed`.
pub(crate) fn call_complete_loop(gets: Arc<AtomicUsize>) -> impl Fn(usize, Conn, Instant) -> LoopFuture {
    call_complete_loop_of("quick", gets)
}

/// [`call_complete_loop`] of tool `tool`.
pub(crate) fn call_complete_loop_of(
    tool: &'static str,
    gets: Arc<AtomicUsize>,
) -> impl Fn(usize, Conn, Instant) -> LoopFuture {
    move |_, mut conn, deadline| {
        let gets = gets.clone();
        Box::pin(async move {
            let mut stats = LoopStats::default();
            let call = call_params(tool);
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let seed = conn.task("tools/call", tool, &call).await;
                assert_eq!(seed.status, "working", "a new task's seed state");
                let id = seed.task_id.into_owned();
                let get = get_params(&id);
                loop {
                    gets.fetch_add(1, Ordering::Relaxed);
                    let task = conn.task("tasks/get", &id, &get).await;
                    assert_eq!(task.task_id, id.as_str());
                    match task.status.as_ref() {
                        "completed" => break,
                        "working" => {}
                        other => panic!("task {id} is {other}"),
                    }
                }
                stats.latencies_us.push(t0.elapsed().as_micros() as u32);
                stats.ops += 1;
            }
            (conn, stats)
        })
    }
}

/// What a [`get_loop`] expects of every answer.
#[derive(Clone)]
pub(crate) enum Expect {
    /// The live task asked for, `working` (read by the scan of
    /// [`Conn::task`]).
    Live,
    /// Exactly these bytes: the bare handler's fixed answer.
    Bytes(Bytes),
}

/// `tasks/get` on random tasks of `ids`, every answer checked against
/// `expect`: the same requests to subtask, the peer and the bare handler.
pub(crate) fn get_loop(
    ids: Arc<Vec<String>>,
    expect: Expect,
    seed: u64,
) -> impl Fn(usize, Conn, Instant) -> LoopFuture {
    move |i, mut conn, deadline| {
        let ids = ids.clone();
        let expect = expect.clone();
        let mut rng = Rng::new(seed ^ ((i as u64) << 32));
        Box::pin(async move {
            let mut stats = LoopStats::default();
            while Instant::now() < deadline {
                let id = &ids[rng.below(ids.len())];
                let get = get_params(id);
                let t0 = Instant::now();
                match &expect {
                    Expect::Live => {
                        let task = conn.task("tasks/get", id, &get).await;
                        stats.latencies_us.push(t0.elapsed().as_micros() as u32);
                        assert_eq!(task.task_id, id.as_str());
                        assert_eq!(task.status, "working", "a live task");
                    }
                    Expect::Bytes(expected) => {
                        let body = conn.call("tasks/get", id, &get).await;
                        stats.latencies_us.push(t0.elapsed().as_micros() as u32);
                        assert_eq!(body, &expected[..]);
                    }
                }
                stats.ops += 1;
            }
            (conn, stats)
        })
    }
}

/// Creates `n` live tasks (`park`) through the server with 64 loops;
/// returns their ids and how long it took.
pub(crate) fn prefill(lg: &tokio::runtime::Runtime, pool: &mut Pool, n: usize) -> (Vec<String>, Duration) {
    let t0 = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let conns: Vec<Conn> = pool.conns.drain(..).collect();
    let results = lg.block_on(async move {
        let handles: Vec<_> = conns
            .into_iter()
            .map(|mut conn| {
                let next = next.clone();
                tokio::spawn(async move {
                    let call = call_params("park");
                    let mut ids = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        let seed = conn.task("tools/call", "park", &call).await;
                        assert_eq!(seed.status, "working");
                        ids.push(seed.task_id.into_owned());
                    }
                    (conn, ids)
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("a prefill loop panicked"));
        }
        out
    });
    let mut ids = Vec::with_capacity(n);
    for (conn, mut v) in results {
        ids.append(&mut v);
        pool.conns.push(conn);
    }
    assert_eq!(ids.len(), n);
    (ids, t0.elapsed())
}

/// A `tasks/get` answer of `host` for `id`, as bytes.
pub(crate) fn get_answer(lg: &tokio::runtime::Runtime, pool: &mut Pool, id: &str) -> Bytes {
    let conn = &mut pool.conns[0];
    lg.block_on(async { Bytes::copy_from_slice(conn.call("tasks/get", id, &get_params(id)).await) })
}
