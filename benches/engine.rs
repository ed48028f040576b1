//! The engine benchmark: the subtask runtime side by side with rmcp 3.11's
//! `TaskManager`, in the same process, each on a fresh tokio multi-thread
//! runtime with 2 worker threads (the driving code itself runs in a task on
//! those workers, so both sides get exactly two threads).
//!
//! Prints one line per figure (`name: value`), with the ratio where the peer
//! exists, and context lines starting with `#`. Run with
//! `cargo bench --bench engine`.
//!
//! Memory (`bytes_per_task`) is measured in a child process (this binary
//! re-executed with `SUBTASK_BENCH_CHILD` set), so freed memory of other
//! measurements cannot hide or inflate growth.
//!
//! `SUBTASK_BENCH_ONLY=cancel` runs only the `cancel_subtree_100k` figure
//! (for quick before/after comparisons of the cancel path);
//! `SUBTASK_BENCH_ONLY=get` only `get_1m_live` and `get_flatness`;
//! `SUBTASK_BENCH_ONLY=memory` only the memory figures (`bytes_per_task`,
//! `bytes_per_parked_task`, `bytes_per_input_wait`);
//! `SUBTASK_BENCH_ONLY=parked` only `bytes_per_parked_task` and
//! `bytes_per_input_wait` (heap bytes counted by the bench's global
//! allocator, in child processes too).

/// The `subtask` binary's allocator (see `src/main.rs`), so the figures are
/// the server's; `--no-default-features` measures with the system allocator.
/// Wrapped to count heap bytes in the memory children only (one relaxed
/// load per allocation elsewhere).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: Counting<mimalloc::MiMalloc> = Counting(mimalloc::MiMalloc);
#[cfg(not(feature = "mimalloc"))]
#[global_allocator]
static GLOBAL: Counting<std::alloc::System> = Counting(std::alloc::System);

/// A global allocator that counts the bytes in use (requested sizes) while
/// [`COUNTING`] is set: the memory children set it before anything else.
struct Counting<A>(A);

static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static HEAP: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

fn count(delta: isize) {
    if COUNTING.load(Ordering::Relaxed) {
        HEAP.fetch_add(delta, Ordering::Relaxed);
        if HIST_ON.load(Ordering::Relaxed) {
            let size = delta.unsigned_abs().min(HIST.len() - 1);
            HIST[size].fetch_add(delta.signum(), Ordering::Relaxed);
        }
    }
}

/// `SUBTASK_BENCH_HIST=1`: a parked-task child also counts live
/// allocations by requested size and prints, per task, the sizes that
/// grew (where a parked task's bytes are: `docs/performance.md`).
static HIST_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
#[allow(clippy::declare_interior_mutable_const)]
const ZERO: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);
static HIST: [std::sync::atomic::AtomicIsize; 4096] = [ZERO; 4096];

fn hist_snapshot() -> Vec<isize> {
    HIST.iter().map(|a| a.load(Ordering::SeqCst)).collect()
}

/// Heap bytes in use since counting started (a memory child only).
fn heap_bytes() -> isize {
    assert!(COUNTING.load(Ordering::Relaxed), "counted in a memory child only");
    HEAP.load(Ordering::SeqCst)
}

// SAFETY: every call is forwarded to the wrapped allocator unchanged; the
// wrapper only counts sizes.
unsafe impl<A: std::alloc::GlobalAlloc> std::alloc::GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        count(-(layout.size() as isize));
        // SAFETY: the caller's contract, forwarded.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(-(layout.size() as isize));
            count(new_size as isize);
        }
        p
    }
}

#[path = "../tests/support/until.rs"]
mod until;
use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use until::until;

use futures::StreamExt;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use subtask::core::{ClientView, RootOptions};
use subtask::model::{JsonObject, TaskId, TaskStatus};
use subtask::runtime::{Runtime, RuntimeConfig, SubtaskOptions, TaskError};

/// The seeded generator the tests use too (splitmix64): random ids and
/// shuffles, from fixed seeds so every run measures the same workload.
#[path = "../tests/support/seed.rs"]
mod seed;
use seed::Rng;

const V: ClientView = ClientView::PAUSE_AWARE;
/// TTL of every root on both sides: rmcp's default (5 minutes), long enough
/// that nothing expires or is deleted during the run.
const TTL_MS: u64 = 300_000;
const CHILD_ENV: &str = "SUBTASK_BENCH_CHILD";
/// Runs only the named figure (`cancel`); unset runs them all.
const ONLY_ENV: &str = "SUBTASK_BENCH_ONLY";

// ----- helpers ---------------------------------------------------------------

/// Runs `f` as a task on a fresh 2-worker tokio runtime and drops the runtime
/// (and every task still parked on it) afterwards.
fn run<F>(f: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let out = rt.block_on(async { tokio::spawn(f).await.expect("benchmark task panicked") });
    drop(rt);
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Resident set size from `/proc/self/statm` (4 KiB pages on x86-64).
fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm rss field");
    pages * 4096
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn root_opts() -> RootOptions {
    RootOptions {
        ttl_ms: Some(TTL_MS),
        poll_interval_ms: None,
    }
}

/// The trivial tool result on the subtask side: the same content as
/// [`rmcp_result`] (one text block), built per call.
fn subtask_result() -> JsonObject {
    JsonObject::from_value(serde_json::json!({"content": [{"type": "text", "text": "ok"}], "isError": false}))
        .expect("an object")
}

fn rmcp_result() -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text("ok")])
}

fn rmcp_opts() -> TaskOptions {
    TaskOptions::new().with_ttl_ms(TTL_MS)
}

/// Waits until every task in `ids` is completed, by polling `get` (what a
/// client does with `tasks/get`); the same loop is used for rmcp.
async fn subtask_poll_completed(rt: &Runtime, ids: &[TaskId]) {
    for &id in ids {
        loop {
            let status = rt.get(id, V).expect("known task").status();
            if status.is_terminal() {
                assert_eq!(status, TaskStatus::Completed);
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

async fn rmcp_poll_completed(tm: &TaskManager, ids: &[String]) {
    for id in ids {
        loop {
            let status = tm.get_task(id).expect("known task").status();
            if status.is_terminal() {
                assert_eq!(status, rmcp::model::TaskStatus::Completed);
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// A trivial root task; its handler counts itself in `done` as it returns.
fn subtask_spawn_trivial(rt: &Runtime, done: &Arc<AtomicUsize>) -> TaskId {
    let done = done.clone();
    rt.spawn(root_opts(), move |_ctx| async move {
        let result = subtask_result();
        done.fetch_add(1, Ordering::Relaxed);
        Ok(result)
    })
}

fn rmcp_spawn_trivial(tm: &TaskManager, done: &Arc<AtomicUsize>) -> String {
    let done = done.clone();
    tm.spawn(rmcp_opts(), move |_ctx| {
        Box::pin(async move {
            let result = rmcp_result();
            done.fetch_add(1, Ordering::Relaxed);
            Ok(result)
        })
    })
    .task_id
}

/// Yields until `done` reaches `n` (handlers returned), so the `get` polls
/// that follow cost one call per task on both sides (rmcp's `get_task`
/// sweeps every task, so spinning on it would measure the spinning).
async fn all_returned(done: &AtomicUsize, n: usize) {
    while done.load(Ordering::Relaxed) < n {
        tokio::task::yield_now().await;
    }
}

// ----- create_complete_N -----------------------------------------------------

struct CreateComplete {
    subtask: f64,
    rmcp: f64,
    notes: Vec<String>,
}

/// Throughput of create + complete of `batch` trivial root tasks while
/// `retained` earlier completed tasks are retained: spawn the batch, wait
/// until every handler returned, then `get` each task until it shows
/// `completed` (normally one `get` per task).
/// subtask: `rounds` batches, each deleted (untimed) afterwards so the
/// retained count stays at `retained`..`retained + batch`. rmcp has no
/// delete, so each of its rounds uses a fresh manager pre-filled with
/// `retained` tasks (same range of retained counts).
fn create_complete(retained: usize, batch: usize, rounds: usize, rmcp_rounds: usize) -> CreateComplete {
    let mut notes = Vec::new();
    let subtask = run(async move {
        let rt = Runtime::new(RuntimeConfig::default());
        let done = Arc::new(AtomicUsize::new(0));
        let pre: Vec<TaskId> = (0..retained).map(|_| subtask_spawn_trivial(&rt, &done)).collect();
        subtask_poll_completed(&rt, &pre).await;
        let mut rates = Vec::new();
        for _ in 0..rounds {
            done.store(0, Ordering::Relaxed);
            let t0 = Instant::now();
            let ids: Vec<TaskId> = (0..batch).map(|_| subtask_spawn_trivial(&rt, &done)).collect();
            all_returned(&done, batch).await;
            subtask_poll_completed(&rt, &ids).await;
            rates.push(batch as f64 / t0.elapsed().as_secs_f64());
            for id in ids {
                rt.delete_tree(id).expect("delete a completed tree");
            }
        }
        assert_eq!(rt.task_count(), retained);
        median(rates)
    });
    let (rmcp, prefill) = run(async move {
        let mut rates = Vec::new();
        let mut prefill = Duration::ZERO;
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..rmcp_rounds {
            let tm = TaskManager::new();
            let t0 = Instant::now();
            for _ in 0..retained {
                rmcp_spawn_trivial(&tm, &done);
            }
            // One sweep per check rather than one `get_task` (a sweep) per id.
            until("the rmcp pre-fill to complete", || tm.running_task_count() == 0).await;
            prefill += t0.elapsed();
            done.store(0, Ordering::Relaxed);
            let t0 = Instant::now();
            let ids: Vec<String> = (0..batch).map(|_| rmcp_spawn_trivial(&tm, &done)).collect();
            all_returned(&done, batch).await;
            rmcp_poll_completed(&tm, &ids).await;
            rates.push(batch as f64 / t0.elapsed().as_secs_f64());
        }
        (median(rates), prefill)
    });
    notes.push(format!(
        "# create_complete_{}: batches of {batch} (subtask median of {rounds}, rmcp median of {rmcp_rounds}; \
         rmcp pre-fill took {:.1} s)",
        label(retained),
        prefill.as_secs_f64()
    ));
    CreateComplete { subtask, rmcp, notes }
}

fn label(n: usize) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}m", n / 1_000_000)
    } else if n >= 1000 && n.is_multiple_of(1000) {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

// ----- get_N_live ------------------------------------------------------------

struct GetLive {
    ns: f64,
    spawn: Duration,
    rss_growth: u64,
}

/// Median ns per `get` of a random id among `n` live (parked) root tasks,
/// over `batches` batches of `per_batch` gets.
fn subtask_get_live(n: usize, per_batch: usize, batches: usize) -> GetLive {
    run(async move {
        let config = RuntimeConfig {
            max_running: n + 1024,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::new(config);
        let started = Arc::new(AtomicUsize::new(0));
        let rss0 = rss_bytes();
        let t0 = Instant::now();
        let ids: Vec<TaskId> = (0..n)
            .map(|_| {
                let started = started.clone();
                rt.spawn(root_opts(), move |ctx| async move {
                    started.fetch_add(1, Ordering::Relaxed);
                    ctx.cancelled().await;
                    Err(TaskError::Interrupted.into())
                })
            })
            .collect();
        until("handlers to start", || started.load(Ordering::Relaxed) == n).await;
        let spawn = t0.elapsed();
        let rss_growth = rss_bytes().saturating_sub(rss0);
        assert_eq!(
            rt.running_handlers(),
            n,
            "every handler holds a slot (none queued)"
        );
        let mut rng = Rng::new(0x5eed ^ n as u64);
        // Verify what is measured: random tasks are live and working.
        for _ in 0..1000 {
            let t = rt.get(ids[rng.below(n)], V).expect("known task");
            assert_eq!(t.status(), TaskStatus::Working);
        }
        let mut per_op = Vec::with_capacity(batches);
        let mut picks = Vec::with_capacity(per_batch);
        for _ in 0..batches {
            // The ids of a batch are drawn before the clock starts (as the
            // rmcp side takes its id before timing each get): what is timed
            // is `get`, not a random read of the benchmark's own id array.
            picks.clear();
            picks.extend((0..per_batch).map(|_| ids[rng.below(n)]));
            let t0 = Instant::now();
            for &id in &picks {
                black_box(rt.get(id, V));
            }
            per_op.push(t0.elapsed().as_nanos() as f64 / per_batch as f64);
        }
        GetLive {
            ns: median(per_op),
            spawn,
            rss_growth,
        }
    })
}

/// Median ns per `get_task` of a random id among `n` live rmcp tasks, each
/// get timed on its own (they take milliseconds).
fn rmcp_get_live(n: usize, gets: usize) -> (f64, Duration) {
    run(async move {
        let tm = TaskManager::new();
        let started = Arc::new(AtomicUsize::new(0));
        let t0 = Instant::now();
        let ids: Vec<String> = (0..n)
            .map(|_| {
                let started = started.clone();
                tm.spawn(rmcp_opts(), move |ctx| {
                    Box::pin(async move {
                        started.fetch_add(1, Ordering::Relaxed);
                        ctx.cancelled().await;
                        Err(TaskExit::Cancelled)
                    })
                })
                .task_id
            })
            .collect();
        until("rmcp handlers to start", || started.load(Ordering::Relaxed) == n).await;
        let spawn = t0.elapsed();
        let mut rng = Rng::new(0xfeed ^ n as u64);
        let mut per_op = Vec::with_capacity(gets);
        for _ in 0..gets {
            let id = &ids[rng.below(n)];
            let t0 = Instant::now();
            let t = tm.get_task(id).expect("known task");
            per_op.push(t0.elapsed().as_nanos() as f64);
            assert_eq!(t.status(), rmcp::model::TaskStatus::Working);
        }
        tm.shutdown();
        (median(per_op), spawn)
    })
}

/// This machine's memory floor under `get_flatness`: ns per read in a
/// chain of dependent reads of random cache lines spread over `bytes` (a
/// random cycle, so neither caches nor prefetchers help beyond the
/// buffer's size). A `get` among a million live tasks makes a few such
/// dependent reads (index entry, tree, record, state); among a thousand,
/// none leaves the cache.
fn dependent_read_ns(bytes: usize) -> f64 {
    const LINE: usize = 8; // u64s per 64-byte line
    let lines = bytes / 64;
    let mut next = vec![0u64; lines * LINE];
    // Sattolo's algorithm: one cycle through every line.
    let mut order: Vec<usize> = (0..lines).collect();
    let mut rng = Rng::new(0x1ace);
    for i in (1..lines).rev() {
        let j = rng.below(i);
        order.swap(i, j);
    }
    for w in 0..lines {
        next[order[w] * LINE] = (order[(w + 1) % lines] * LINE) as u64;
    }
    let steps = 2_000_000.min(lines * 4);
    let mut at = 0usize;
    let t0 = Instant::now();
    for _ in 0..steps {
        at = next[at] as usize;
    }
    black_box(at);
    t0.elapsed().as_nanos() as f64 / steps as f64
}

fn print_memory_floor(g1k: &GetLive, g1m: &GetLive) {
    let small = dependent_read_ns(4 << 20);
    let large = dependent_read_ns(g1m.rss_growth.max(1 << 30) as usize);
    println!(
        "# get_flatness floor on this machine: one dependent random read costs {small:.0} ns over 4 MiB and \
         {large:.0} ns over the 1M-live heap ({:.0} MiB); get_1k_live is {:.0} ns, so a single such read at 1M \
         live already makes the ratio {:.1}",
        mib(g1m.rss_growth.max(1 << 30)),
        g1k.ns,
        (g1k.ns + large) / g1k.ns
    );
}

// ----- cancel_subtree_100k ---------------------------------------------------

struct CancelResult {
    /// From `cancel(root)` until the root is `cancelled`.
    total: Duration,
    /// The synchronous `cancel` call alone.
    call: Duration,
    build: Duration,
}

/// A tree of 1 root, `mid` children and `leaves` grandchildren under each.
/// `live`: every handler runs, parked on `ctx.cancelled()`; otherwise the
/// per-tree limit stays at its default, the middle handlers return after
/// spawning and the leaves wait queued (only the per-tree limit's worth run).
fn cancel_subtree(mid: usize, leaves: usize, live: bool) -> CancelResult {
    run(async move {
        let total_tasks = 1 + mid + mid * leaves;
        let mut config = RuntimeConfig::default();
        config.forest.limits.max_children = config.forest.limits.max_children.max(leaves.max(mid) as u32);
        if live {
            config.max_running = total_tasks + 1024;
            config.max_running_per_tree = total_tasks + 1024;
        }
        let rt = Runtime::new(config);
        let started = Arc::new(AtomicUsize::new(0));
        let spawned = Arc::new(AtomicUsize::new(0));
        let (s, sp) = (started.clone(), spawned.clone());
        let t0 = Instant::now();
        let root = rt.spawn(root_opts(), move |ctx| async move {
            for _ in 0..mid {
                let (s, sp) = (s.clone(), sp.clone());
                let _mid = ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                    for _ in 0..leaves {
                        let s = s.clone();
                        let _leaf = ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                            s.fetch_add(1, Ordering::Relaxed);
                            if live {
                                ctx.cancelled().await;
                            } else {
                                // A parked wait: the leaf gives its scheduler slot back,
                                // so the tree builds under the default per-tree limit.
                                let _ = ctx.request_input("go", JsonObject::new()).await;
                            }
                            Err(TaskError::Interrupted.into())
                        })?;
                    }
                    sp.fetch_add(1, Ordering::Relaxed);
                    if live {
                        ctx.cancelled().await;
                        return Err(TaskError::Interrupted.into());
                    }
                    Ok(JsonObject::new())
                })?;
            }
            ctx.cancelled().await;
            Err(TaskError::Interrupted.into())
        });
        until("the tree to be built", || spawned.load(Ordering::Relaxed) == mid).await;
        if live {
            until("every leaf to start", || {
                started.load(Ordering::Relaxed) == mid * leaves
            })
            .await;
        }
        assert_eq!(rt.task_count(), total_tasks);
        let build = t0.elapsed();
        let t0 = Instant::now();
        let outcome = rt.cancel(root).expect("cancel the root");
        let call = t0.elapsed();
        assert_eq!(outcome, subtask::core::CancelOutcome::Accepted);
        let done = rt.wait(root, V).await.expect("root is terminal");
        let total = t0.elapsed();
        assert_eq!(done.status(), TaskStatus::Cancelled);
        // Spot-check: the first and the last grandchild are cancelled too.
        let children = done.task().child_task_ids.clone();
        for c in [children[0], children[children.len() - 1]] {
            let c = rt.get(c, V).expect("child retained");
            assert_eq!(c.status(), TaskStatus::Cancelled);
            let g = c.task().child_task_ids.clone();
            for g in [g[0], g[g.len() - 1]] {
                assert_eq!(
                    rt.get(g, V).expect("grandchild retained").status(),
                    TaskStatus::Cancelled
                );
            }
        }
        CancelResult { total, call, build }
    })
}

// ----- ordered_results_10k ---------------------------------------------------

struct OrderedResult {
    total: Duration,
    out_of_order: usize,
}

/// A root with `n` children that complete in a shuffled order (each waits
/// for its own release signal; the root releases them in random order once
/// all have started). Times from `spawn(root)` until `results(root)` has
/// yielded all `n + 1` tasks, and checks the order.
fn ordered_results(n: usize, seed: u64) -> OrderedResult {
    run(async move {
        let config = RuntimeConfig {
            max_running: n + 1024,
            max_running_per_tree: n + 1024,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::new(config);
        let completion_seq = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        // Child index -> the position in which it completed.
        let finished_at: Arc<Vec<AtomicUsize>> =
            Arc::new((0..n).map(|_| AtomicUsize::new(usize::MAX)).collect());
        let t0 = Instant::now();
        let (seq, st, fin) = (completion_seq.clone(), started.clone(), finished_at.clone());
        let root = rt.spawn(root_opts(), move |ctx| async move {
            let mut senders = Vec::with_capacity(n);
            for i in 0..n {
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                senders.push(tx);
                let (seq, st, fin) = (seq.clone(), st.clone(), fin.clone());
                let _child = ctx.spawn_subtask(SubtaskOptions::default(), move |_ctx| async move {
                    st.fetch_add(1, Ordering::Relaxed);
                    let _ = rx.await;
                    fin[i].store(seq.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
                    Ok(subtask_result())
                })?;
            }
            while st.load(Ordering::Relaxed) < n {
                tokio::task::yield_now().await;
            }
            let mut rng = Rng::new(seed);
            rng.shuffle(&mut senders);
            for (k, tx) in senders.into_iter().enumerate() {
                let _ = tx.send(());
                if k % 64 == 63 {
                    tokio::task::yield_now().await;
                }
            }
            Ok(subtask_result())
        });
        let mut stream = Box::pin(rt.results(root, V));
        let mut got = Vec::with_capacity(n + 1);
        while let Some(t) = stream.next().await {
            got.push(t);
        }
        let total = t0.elapsed();
        assert_eq!(got.len(), n + 1, "results yielded every task");
        let last = got.last().expect("the root");
        assert_eq!(last.task().task_id, root, "the root comes last");
        let children = &last.task().child_task_ids;
        assert_eq!(children.len(), n);
        for (i, t) in got[..n].iter().enumerate() {
            assert_eq!(t.task().task_id, children[i], "result {i} is child {i}");
            assert_eq!(t.status(), TaskStatus::Completed);
        }
        assert_eq!(last.status(), TaskStatus::Completed);
        // How many children completed later than their successor: the
        // completion order really was shuffled.
        let fin: Vec<usize> = finished_at.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let out_of_order = fin.windows(2).filter(|w| w[0] > w[1]).count();
        OrderedResult { total, out_of_order }
    })
}

// ----- bytes_per_task (child process) ----------------------------------------

/// Runs in a child process: RSS growth per retained completed task, either
/// `n` single-task trees (`single`) or one tree of `n` tasks (`tree`).
fn memory_child(kind: &str, n: usize) {
    let kind = kind.to_owned();
    let per_task = run(async move {
        let rt = Runtime::new(RuntimeConfig {
            forest: subtask::core::ForestConfig {
                limits: subtask::core::Limits {
                    max_children: 100_000,
                    ..Default::default()
                },
                ..Default::default()
            },
            ..RuntimeConfig::default()
        });
        // Warm up the runtime and the allocator, then remove the warm-up tasks.
        let warm: Vec<TaskId> = (0..1000)
            .map(|_| rt.spawn(root_opts(), |_ctx| async { Ok(JsonObject::new()) }))
            .collect();
        subtask_poll_completed(&rt, &warm).await;
        for id in warm {
            rt.delete_tree(id).expect("delete warm-up");
        }
        // The id list is bench overhead: make it resident before the baseline.
        let mut ids = vec![TaskId::from_u128(1); n];
        tokio::time::sleep(Duration::from_millis(50)).await;
        let rss0 = rss_bytes();
        let tasks = match kind.as_str() {
            "single" | "single-no-ttl" | "single-await" => {
                let opts = if kind == "single-no-ttl" {
                    RootOptions::default()
                } else {
                    root_opts()
                };
                let awaits = kind == "single-await";
                for chunk in ids.chunks_mut(10_000) {
                    for slot in chunk.iter_mut() {
                        *slot = rt.spawn(opts, move |_ctx| async move {
                            if awaits {
                                tokio::task::yield_now().await;
                            }
                            Ok(JsonObject::new())
                        });
                    }
                    subtask_poll_completed(&rt, chunk).await;
                }
                rt.task_count()
            }
            "tree" => {
                // 1 root, 200 children, (n / 200 - 1) grandchildren each.
                let mid = 200;
                let leaves = n / mid - 1;
                let root = rt.spawn(root_opts(), move |ctx| async move {
                    for _ in 0..mid {
                        let _c = ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                            for _ in 0..leaves {
                                let _g = ctx.spawn_subtask(SubtaskOptions::default(), |_ctx| async {
                                    Ok(JsonObject::new())
                                })?;
                            }
                            Ok(JsonObject::new())
                        })?;
                    }
                    Ok(JsonObject::new())
                });
                let done = rt.wait(root, V).await.expect("root terminal");
                assert_eq!(done.status(), TaskStatus::Completed);
                ids[0] = root;
                rt.task_count()
            }
            other => panic!("unknown memory benchmark {other}"),
        };
        // Let finished handlers' memory be freed.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let rss1 = rss_bytes();
        black_box(&ids);
        (rss1.saturating_sub(rss0) as f64 / tasks as f64, tasks)
    });
    println!("mem: {} {}", per_task.0, per_task.1);
}

fn memory(kind: &str, n: usize) -> (f64, usize) {
    let (bytes, tasks) = run_memory_child(&format!("{kind}:{n}"));
    (bytes, tasks as usize)
}

/// Runs this binary as a memory child with `spec` in `CHILD_ENV`; the two
/// numbers of its `mem: A B` line.
fn run_memory_child(spec: &str) -> (f64, f64) {
    let out = std::process::Command::new(std::env::current_exe().expect("current exe"))
        .env(CHILD_ENV, spec)
        .output()
        .expect("run the memory child");
    assert!(
        out.status.success(),
        "memory child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("mem: "))
        .expect("memory child output");
    let mut parts = line.split_whitespace();
    let a = parts.next().and_then(|v| v.parse().ok()).expect("a first figure");
    let b = parts
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a second figure");
    (a, b)
}

// ----- bytes_per_parked_task / bytes_per_input_wait (child process) ----------

/// Parked tasks per measurement on the subtask side.
const PARKED_N: usize = 100_000;
/// Parked tasks per measurement on rmcp's side: each `TaskManager::spawn`
/// sweeps every task the manager holds, so 100,000 would take minutes; the
/// figure is per task either way.
const PARKED_N_RMCP: usize = 20_000;

/// Handlers that reached their wait, per child process (a static, so the
/// handlers capture nothing the bench adds).
static REACHED: AtomicUsize = AtomicUsize::new(0);

/// The input request both sides ask for: a small `elicitation/create` form,
/// built per task by its handler (as a handler builds its own).
fn input_request_json() -> serde_json::Value {
    serde_json::json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Approve the plan?",
            "requestedSchema": {
                "type": "object",
                "properties": {"approve": {"type": "boolean"}},
                "required": ["approve"]
            }
        }
    })
}

/// Runs in a child process: heap bytes (counted by [`GLOBAL`]) per task of
/// `n` parked root tasks. `what` is `side-wait`: side `subtask` or `rmcp`;
/// wait `external` (the handler awaits an outside future, a oneshot
/// receiver standing for a model call, through `ctx.external` on subtask's
/// side), `cancelled` (`ctx.cancelled()`) or `input` (`request_input`).
/// The receivers are made before the baseline: the outside future's own
/// allocation (the channel) is the outside world's, not the runtime's;
/// what the handler holds of it (the receiver) is in its future.
fn parked_child(what: &str, n: usize) {
    let (side, wait) = what.split_once('-').expect("side-wait");
    let (side, wait) = (side.to_owned(), wait.to_owned());
    let (bytes, rss) = run(async move {
        // Warm up with the same workload, released and removed before the
        // baseline: every structure the runtime grows once is grown.
        let warm = 1_000.min(n);
        match side.as_str() {
            "subtask" => {
                let rt = Runtime::new(RuntimeConfig {
                    max_running: if wait == "cancelled" {
                        n + 1024
                    } else {
                        RuntimeConfig::default().max_running
                    },
                    ..RuntimeConfig::default()
                });
                let (_, rt) = parked_subtask(rt, &wait, warm, false).await;
                let (out, _rt) = parked_subtask(rt, &wait, n, true).await;
                out
            }
            "rmcp" => {
                let tm = TaskManager::new();
                let (_, tm) = parked_rmcp(tm, &wait, warm, false).await;
                let (out, tm) = parked_rmcp(tm, &wait, n, true).await;
                tm.shutdown();
                out
            }
            other => panic!("unknown side {other}"),
        }
    });
    println!("mem: {bytes} {rss}");
}

/// Heap and RSS growth per task while `n` subtask roots wait as `wait`
/// says; the tasks are then released and (`measure` false: the warm-up)
/// their trees deleted.
async fn parked_subtask(rt: Runtime, wait: &str, n: usize, measure: bool) -> ((f64, f64), Runtime) {
    REACHED.store(0, Ordering::SeqCst);
    let mut senders = Vec::with_capacity(n);
    let mut receivers = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        senders.push(tx);
        receivers.push(rx);
    }
    let mut ids = Vec::with_capacity(n);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (heap0, rss0) = (heap_bytes(), rss_bytes());
    let h0 = hist_snapshot();
    for rx in receivers.drain(..) {
        let id = match wait {
            "external" => rt.spawn(root_opts(), move |ctx| async move {
                REACHED.fetch_add(1, Ordering::Relaxed);
                let _ = ctx.external(rx).await;
                Ok(subtask_result())
            }),
            "cancelled" => {
                drop(rx);
                rt.spawn(root_opts(), move |ctx| async move {
                    REACHED.fetch_add(1, Ordering::Relaxed);
                    ctx.cancelled().await;
                    Err(TaskError::Interrupted.into())
                })
            }
            "input" => {
                drop(rx);
                rt.spawn(root_opts(), move |ctx| async move {
                    REACHED.fetch_add(1, Ordering::Relaxed);
                    let request = JsonObject::from_value(input_request_json()).expect("an object");
                    let answer = ctx.request_input("approve", request).await?;
                    Ok(answer)
                })
            }
            other => panic!("unknown wait {other}"),
        };
        ids.push(id);
    }
    // A handler in `ctx.cancelled()` keeps its scheduler slot (as in
    // `get_1m_live`); the other waits give it back.
    let holding = if wait == "cancelled" { n } else { 0 };
    until("handlers to reach their wait", || {
        REACHED.load(Ordering::Relaxed) == n && rt.running_handlers() == holding
    })
    .await;
    let expect = if wait == "input" {
        TaskStatus::InputRequired
    } else {
        TaskStatus::Working
    };
    until("tasks to show their wait", || {
        ids.iter()
            .all(|&id| rt.get(id, V).expect("known task").status() == expect)
    })
    .await;
    // Let the workers go idle (their queues drained) before measuring.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let per_task = (
        (heap_bytes() - heap0) as f64 / n as f64,
        rss_bytes().saturating_sub(rss0) as f64 / n as f64,
    );
    if measure && HIST_ON.load(Ordering::Relaxed) {
        let h1 = hist_snapshot();
        for (size, (a, b)) in h0.iter().zip(&h1).enumerate() {
            let d = b - a;
            if d.unsigned_abs() >= n / 50 {
                let per = d as f64 / n as f64;
                println!("# size {size}: {per:.2} per task, {:.1} B", per * size as f64);
            }
        }
    }
    if !measure {
        match wait {
            "external" => senders.drain(..).for_each(|tx| {
                let _ = tx.send(());
            }),
            _ => {
                for &id in &ids {
                    let _ = rt.cancel(id).expect("cancel a parked task");
                }
            }
        }
        for &id in &ids {
            let done = rt.wait(id, V).await.expect("terminal");
            assert!(done.status().is_terminal());
            rt.delete_tree(id).expect("delete warm-up");
        }
    }
    black_box((&senders, &ids));
    (per_task, rt)
}

/// rmcp's side of [`parked_subtask`]; its `TaskManager` has no delete, so
/// the warm-up's tasks are cancelled and stay until the measurement ends
/// (their memory is in the baseline).
async fn parked_rmcp(tm: TaskManager, wait: &str, n: usize, measure: bool) -> ((f64, f64), TaskManager) {
    REACHED.store(0, Ordering::SeqCst);
    let mut senders = Vec::with_capacity(n);
    let mut receivers = Vec::with_capacity(n);
    for _ in 0..n {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        senders.push(tx);
        receivers.push(rx);
    }
    let mut ids = Vec::with_capacity(n);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (heap0, rss0) = (heap_bytes(), rss_bytes());
    for rx in receivers.drain(..) {
        let task = match wait {
            "external" => tm.spawn(rmcp_opts(), move |_ctx| {
                Box::pin(async move {
                    REACHED.fetch_add(1, Ordering::Relaxed);
                    let _ = rx.await;
                    Ok(rmcp_result())
                })
            }),
            "cancelled" => {
                drop(rx);
                tm.spawn(rmcp_opts(), move |ctx| {
                    Box::pin(async move {
                        REACHED.fetch_add(1, Ordering::Relaxed);
                        ctx.cancelled().await;
                        Err(TaskExit::Cancelled)
                    })
                })
            }
            "input" => {
                drop(rx);
                tm.spawn(rmcp_opts(), move |ctx| {
                    Box::pin(async move {
                        REACHED.fetch_add(1, Ordering::Relaxed);
                        let request: rmcp::model::InputRequest =
                            serde_json::from_value(input_request_json()).expect("an input request");
                        let _answer = ctx.request_input("approve", request).await?;
                        Ok(rmcp_result())
                    })
                })
            }
            other => panic!("unknown wait {other}"),
        };
        ids.push(task.task_id);
    }
    until("rmcp handlers to reach their wait", || {
        REACHED.load(Ordering::Relaxed) == n
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let expect = if wait == "input" {
        rmcp::model::TaskStatus::InputRequired
    } else {
        rmcp::model::TaskStatus::Working
    };
    // One `get_task` (it sweeps every task) checks all of them.
    let sample = tm.get_task(&ids[n - 1]).expect("known task");
    assert_eq!(sample.status(), expect);
    let per_task = (
        (heap_bytes() - heap0) as f64 / n as f64,
        rss_bytes().saturating_sub(rss0) as f64 / n as f64,
    );
    if !measure {
        for id in &ids {
            let _ = tm.cancel_task(id);
        }
        drop(senders.drain(..));
        until("rmcp warm-up to end", || {
            tm.get_task(&ids[n - 1]).is_ok_and(|t| t.status().is_terminal())
        })
        .await;
    }
    black_box((&senders, &ids));
    (per_task, tm)
}

fn parked(what: &str, n: usize) -> (f64, f64) {
    run_memory_child(&format!("parked-{what}:{n}"))
}

/// `bytes_per_parked_task` and `bytes_per_input_wait`, each side in a fresh
/// child process.
fn parked_figures() {
    let ext = parked("subtask-external", PARKED_N);
    let ext_rmcp = parked("rmcp-external", PARKED_N_RMCP);
    let can = parked("subtask-cancelled", PARKED_N);
    let can_rmcp = parked("rmcp-cancelled", PARKED_N_RMCP);
    let inp = parked("subtask-input", PARKED_N);
    let inp_rmcp = parked("rmcp-input", PARKED_N_RMCP);
    println!(
        "# bytes_per_parked_task: heap bytes (requested sizes, counted by the bench's global allocator) per root \
         task whose handler awaits an outside future (a oneshot receiver made before the baseline, standing for a \
         model call; subtask: inside ctx.external, its slot given back), with its handler's future, context and \
         everything the runtime holds for it; {PARKED_N} on subtask, {PARKED_N_RMCP} on rmcp's TaskManager (each \
         of its spawns sweeps all tasks), ttl {TTL_MS} ms, fresh child process each, after a warm-up"
    );
    println!(
        "# bytes_per_parked_task, RSS growth per task: subtask={:.0} rmcp={:.0}",
        ext.1, ext_rmcp.1
    );
    println!(
        "# bytes_per_parked_task, handler parked on ctx.cancelled() instead: subtask={:.0} rmcp={:.0} (RSS {:.0} \
         and {:.0})",
        can.0, can_rmcp.0, can.1, can_rmcp.1
    );
    println!(
        "bytes_per_parked_task: subtask={:.0} rmcp={:.0} ratio={:.2}",
        ext.0,
        ext_rmcp.0,
        ext.0 / ext_rmcp.0
    );
    println!(
        "# bytes_per_input_wait: the same, the handler in request_input (an elicitation/create form request, built \
         by the handler, {} bytes as JSON) on both sides; RSS growth per task subtask={:.0} rmcp={:.0}",
        input_request_json().to_string().len(),
        inp.1,
        inp_rmcp.1
    );
    println!(
        "bytes_per_input_wait: subtask={:.0} rmcp={:.0} ratio={:.2}",
        inp.0,
        inp_rmcp.0,
        inp.0 / inp_rmcp.0
    );
}

// ----- main ------------------------------------------------------------------

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (kind, n) = spec.split_once(':').expect("kind:n");
        let n = n.parse().expect("n");
        match kind.strip_prefix("parked-") {
            Some(what) => {
                // Before anything of the measurement allocates.
                HIST_ON.store(std::env::var_os("SUBTASK_BENCH_HIST").is_some(), Ordering::SeqCst);
                COUNTING.store(true, Ordering::SeqCst);
                parked_child(what, n);
            }
            None => memory_child(kind, n),
        }
        return;
    }
    let started = Instant::now();
    println!("# load average at start: {}", load_average());
    if std::env::var(ONLY_ENV).as_deref() == Ok("cancel") {
        cancel_figure();
        return;
    }
    if std::env::var(ONLY_ENV).as_deref() == Ok("memory") {
        let (single, _) = memory("single", 200_000);
        let (tree, _) = memory("tree", 200_000);
        println!("# bytes_per_task inside one tree: {tree:.0}");
        println!("bytes_per_task: subtask={single:.0}");
        parked_figures();
        return;
    }
    if std::env::var(ONLY_ENV).as_deref() == Ok("parked") {
        parked_figures();
        return;
    }
    if std::env::var(ONLY_ENV).as_deref() == Ok("get") {
        let g1k = subtask_get_live(1_000, 1000, 300);
        let g1m = subtask_get_live(1_000_000, 1000, 300);
        println!("get_1m_live: subtask={:.0}", g1m.ns);
        println!("# get_1k_live: subtask={:.0} ns", g1k.ns);
        print_memory_floor(&g1k, &g1m);
        println!("get_flatness: {:.2}", g1m.ns / g1k.ns);
        return;
    }
    println!(
        "# subtask runtime vs rmcp 3.11 TaskManager; tokio multi-thread, 2 workers each; roots with ttl {TTL_MS} ms \
         on both sides (rmcp's default), nothing expires during the run"
    );

    // create_complete_N
    for (retained, batch, rounds, rmcp_rounds) in [(1_000, 100, 300, 15), (30_000, 1_000, 30, 1)] {
        let r = create_complete(retained, batch, rounds, rmcp_rounds);
        for n in &r.notes {
            println!("{n}");
        }
        println!(
            "create_complete_{}: subtask={:.0} rmcp={:.0} ratio={:.1}",
            label(retained),
            r.subtask,
            r.rmcp,
            r.subtask / r.rmcp
        );
    }

    // get_N_live
    let (per_batch, batches) = (1000, 300);
    let g30k = subtask_get_live(30_000, per_batch, batches);
    let rmcp_gets = 200;
    let (r30k, rmcp_spawn) = rmcp_get_live(30_000, rmcp_gets);
    println!(
        "# get_30k_live: subtask median over {batches} batches of {per_batch} random gets; rmcp median of \
         {rmcp_gets} single gets (its live pre-fill took {:.1} s)",
        rmcp_spawn.as_secs_f64()
    );
    println!(
        "get_30k_live: subtask={:.0} rmcp={:.0} ratio={:.0}",
        g30k.ns,
        r30k,
        r30k / g30k.ns
    );
    let g1k = subtask_get_live(1_000, per_batch, batches);
    let g1m = subtask_get_live(1_000_000, per_batch, batches);
    println!(
        "# get_1m_live: 1,000,000 live root handlers parked on ctx.cancelled() (max_running raised to 1,001,024, \
         none queued); spawned and started in {:.1} s, RSS growth {:.0} MiB",
        g1m.spawn.as_secs_f64(),
        mib(g1m.rss_growth)
    );
    println!("get_1m_live: subtask={:.0}", g1m.ns);
    println!("# get_1k_live: subtask={:.0} ns", g1k.ns);
    print_memory_floor(&g1k, &g1m);
    println!("get_flatness: {:.2}", g1m.ns / g1k.ns);

    cancel_figure();

    // bytes_per_task
    let (single, single_n) = memory("single", 200_000);
    let (no_ttl, _) = memory("single-no-ttl", 200_000);
    let (awaiting, _) = memory("single-await", 200_000);
    let (tree, tree_n) = memory("tree", 200_000);
    println!(
        "# bytes_per_task: RSS growth (statm) per retained completed task, {single_n} single-task trees (ttl \
         {TTL_MS} ms), handler returns {{}} at its first poll, measured in a fresh child process"
    );
    println!("# bytes_per_task, same without a ttl: {no_ttl:.0}");
    println!(
        "# bytes_per_task, same with ttl but the handler awaits once (yield_now) before returning: {awaiting:.0}"
    );
    println!(
        "# bytes_per_task inside one tree (1 root, 200 children, 999 grandchildren each; {tree_n} tasks): {tree:.0}"
    );
    println!("bytes_per_task: subtask={single:.0}");

    // bytes_per_parked_task, bytes_per_input_wait
    parked_figures();

    // ordered_results_10k
    let runs: Vec<OrderedResult> = (0..5).map(|i| ordered_results(10_000, 0xabcd + i)).collect();
    let total = median(runs.iter().map(|r| r.total.as_secs_f64() * 1e3).collect());
    let ooo = runs.iter().map(|r| r.out_of_order).min().unwrap_or(0);
    println!(
        "# ordered_results_10k: 10,000 children released in shuffled order (>= {ooo} of 9,999 adjacent pairs \
         completed out of order), order verified; median of 5"
    );
    println!("ordered_results_10k: subtask={total:.1}");
    println!(
        "# total bench time {:.0} s; load average at end: {} (2 cores; a shared machine inflates wall times)",
        started.elapsed().as_secs_f64(),
        load_average()
    );
}

/// The `cancel_subtree_100k` figure: the median of 3 live runs, plus one
/// run with the leaves parked awaiting input.
fn cancel_figure() {
    let runs: Vec<CancelResult> = (0..3).map(|_| cancel_subtree(100, 999, true)).collect();
    let build = median(runs.iter().map(|r| r.build.as_secs_f64()).collect());
    let call = median(runs.iter().map(|r| r.call.as_secs_f64() * 1e3).collect());
    let total = median(runs.iter().map(|r| r.total.as_secs_f64() * 1e3).collect());
    let queued = cancel_subtree(100, 999, false);
    println!(
        "# cancel_subtree_100k: root -> 100 children -> 999 grandchildren each (100,001 tasks), every handler \
         live and parked on ctx.cancelled(); median of 3; build {build:.2} s; the cancel() call itself {call:.1} ms"
    );
    println!(
        "# cancel_subtree_100k with leaves parked awaiting input (default per-tree limit 64; slots released): {:.1} ms (cancel() call {:.1} ms)",
        queued.total.as_secs_f64() * 1e3,
        queued.call.as_secs_f64() * 1e3
    );
    println!("cancel_subtree_100k: subtask={total:.1}");
}
