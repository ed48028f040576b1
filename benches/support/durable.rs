//! Durable execution's figures (part of `cargo bench --bench store`):
//!
//! - `durable_step`: steps per second, 64 resumable roots each running
//!   steps one after another, every step's output made durable (group
//!   commit) before its handler goes on;
//! - `step_overhead_ratio`: the time per step over the time per bare
//!   `spawn_subtask` of the same work (spawned and awaited), same store,
//!   same run;
//! - `resume_10k_ms`: from opening the store of a stopped 10,001-task
//!   resumable tree (half its tasks finished) to every unfinished task's
//!   handler running again;
//! - `drain_ms`: `Runtime::drain` with 1,000 resumable handlers, each at a
//!   safe point every 10 ms, until every one stopped and the store is
//!   durable.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use subtask::core::{ClientView, RootOptions};
use subtask::model::JsonObject;
use subtask::runtime::{HandlerBody, Owner, Runtime, RuntimeConfig, SubtaskOptions, TaskContext};
use subtask::store::{Durability, SqliteConfig, SqliteStore, TaskStore};

const HANDLERS: usize = 64;

fn config() -> RuntimeConfig {
    RuntimeConfig {
        max_running: usize::MAX,
        max_running_per_tree: usize::MAX,
        ..RuntimeConfig::default()
    }
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `HANDLERS` resumable roots each doing `per` acts of trivial work, as
/// steps or as subtasks spawned and awaited; returns acts per second.
pub fn acts_per_s(store: Arc<dyn TaskStore>, per: usize, as_subtasks: bool) -> f64 {
    let tokio = tokio();
    let rate = tokio.block_on(async move {
        let rt = Runtime::with_store(config(), store);
        let start = Instant::now();
        let roots: Vec<_> = (0..HANDLERS)
            .map(|i| {
                rt.spawn_resumable(RootOptions::default(), json!({ "i": i }), move |ctx| async move {
                    for n in 0..per as u64 {
                        if as_subtasks {
                            let h = ctx.spawn_subtask(SubtaskOptions::default(), move |_| async move {
                                Ok(JsonObject::from_value(json!({ "n": n })).unwrap())
                            })?;
                            h.await;
                        } else {
                            let _: u64 = ctx.step("work", || async move { n }).await?;
                        }
                    }
                    Ok(JsonObject::new())
                })
            })
            .collect();
        for r in roots {
            rt.wait(r, ClientView::PAUSE_AWARE).await.expect("the root ends");
            rt.flushed(r).await.expect("durable");
        }
        (HANDLERS * per) as f64 / start.elapsed().as_secs_f64()
    });
    drop(tokio);
    rate
}

fn sqlite(path: &Path) -> Arc<dyn TaskStore> {
    Arc::new(
        SqliteStore::open(SqliteConfig {
            durability: Durability::Full,
            ..SqliteConfig::new(path)
        })
        .expect("open store"),
    )
}

/// The 10,001-task tree: a root with 100 children of 99 grandchildren
/// each; odd grandchildren complete at once, even ones run until cancelled.
/// `running` counts handlers as they start.
fn tree_body(running: Arc<AtomicUsize>) -> HandlerBody {
    Box::new(move |ctx: TaskContext| {
        Box::pin(async move {
            running.fetch_add(1, Ordering::Relaxed);
            let mut kids = Vec::new();
            for c in 0..100 {
                let running = running.clone();
                let opts = SubtaskOptions::default().named(format!("c{c}"));
                kids.push(ctx.spawn_subtask(opts, move |ctx| async move {
                    running.fetch_add(1, Ordering::Relaxed);
                    let mut grand = Vec::new();
                    for g in 0..99u32 {
                        let running = running.clone();
                        let opts = SubtaskOptions::default().named(format!("g{g}"));
                        grand.push(ctx.spawn_subtask(opts, move |ctx| async move {
                            running.fetch_add(1, Ordering::Relaxed);
                            if g % 2 == 0 {
                                ctx.cancelled().await;
                            }
                            Ok(JsonObject::new())
                        })?);
                    }
                    for h in grand {
                        h.await;
                    }
                    Ok(JsonObject::new())
                })?);
            }
            for h in kids {
                h.await;
            }
            Ok(JsonObject::new())
        })
    })
}

/// See the module documentation; returns milliseconds.
pub fn resume_10k_ms(path: &Path) -> f64 {
    const UNFINISHED: usize = 1 + 100 + 100 * 50;
    // The first life, stopped once every handler ran and the finished
    // half is durable.
    let first = tokio();
    let store = sqlite(path);
    first.block_on(async {
        let rt = Runtime::with_store(config(), store.clone());
        let running = Arc::new(AtomicUsize::new(0));
        let root = rt.spawn_resumable(RootOptions::default(), json!({}), tree_body(running.clone()));
        while running.load(Ordering::Relaxed) < 10_001 || rt.task_count() < 10_001 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        rt.flushed(root).await.expect("durable");
    });
    first.shutdown_timeout(Duration::from_secs(10));
    while Arc::strong_count(&store) > 1 {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(store);
    // The second life, timed from opening the store.
    let second = tokio();
    let ms = second.block_on(async {
        let t0 = Instant::now();
        let store = sqlite(path);
        let rt = Runtime::with_store(config(), store);
        let running = Arc::new(AtomicUsize::new(0));
        let r = running.clone();
        let report = rt
            .recover(
                |name| Owner::new(name, usize::MAX),
                move |_| {
                    let body = tree_body(r.clone());
                    async move { Some(body) }
                },
            )
            .await
            .expect("recover");
        assert_eq!(report.tasks, 10_001, "{report}");
        while running.load(Ordering::Relaxed) < UNFINISHED {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        assert_eq!(
            running.load(Ordering::Relaxed),
            UNFINISHED,
            "a finished task ran again"
        );
        ms
    });
    second.shutdown_timeout(Duration::from_secs(10));
    ms
}

/// See the module documentation; returns milliseconds.
pub fn drain_ms(path: &Path) -> f64 {
    let tokio = tokio();
    let store = sqlite(path);
    let ms = tokio.block_on(async move {
        let rt = Runtime::with_store(config(), store);
        for i in 0..1000 {
            rt.spawn_resumable(RootOptions::default(), json!({ "i": i }), |ctx| async move {
                loop {
                    ctx.checkpoint().await?;
                    ctx.step("tick", || {
                        ctx.external(tokio::time::sleep(Duration::from_millis(10)))
                    })
                    .await?;
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let report = rt.drain(Duration::from_secs(10)).await;
        assert_eq!(report.busy, 0, "every handler reached a safe point");
        assert!(report.durable);
        report.elapsed.as_secs_f64() * 1e3
    });
    tokio.shutdown_timeout(Duration::from_secs(10));
    ms
}
