//! End-to-end rules of the architecture note, run on the real runtime with
//! paused tokio time. Nothing here depends on wall-clock speed.

#[path = "support/until.rs"]
mod until;
use std::sync::Arc;
use std::time::Duration;
use until::until;

use futures::StreamExt;
use parking_lot::Mutex;
use subtask::core::{CancelOutcome, ClientView, RootOptions};
use subtask::model::{ErrorCode, ErrorObject, InputResponses, JsonObject, TaskId, TaskPayload, TaskStatus};
use subtask::runtime::{Runtime, RuntimeConfig, SubtaskOptions, SubtaskPlan, TaskError, TaskOutcome};

const V: ClientView = ClientView::PAUSE_AWARE;

fn obj(v: serde_json::Value) -> JsonObject {
    JsonObject::from_value(v).unwrap()
}

fn text(s: &str) -> JsonObject {
    obj(serde_json::json!({"content": [{"type": "text", "text": s}], "isError": false}))
}

fn result_text(t: &subtask::model::DetailedTask) -> String {
    match t.payload() {
        TaskPayload::Completed { result } => result["content"][0]["text"].as_str().unwrap_or("").to_owned(),
        other => format!("{other:?}"),
    }
}

fn status(rt: &Runtime, id: TaskId) -> TaskStatus {
    rt.get(id, V).unwrap().status()
}

#[tokio::test(start_paused = true)]
async fn cancel_reaches_grandchildren_first() {
    let rt = Runtime::new(RuntimeConfig::default());
    let order: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let ids: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let (o, i) = (order.clone(), ids.clone());
    let root = rt.spawn(RootOptions::default(), move |ctx| async move {
        let (o2, i2) = (o.clone(), i.clone());
        let child = ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
            let o3 = o2.clone();
            let g = ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                ctx.cancelled().await;
                o3.lock().push("grandchild");
                Err(TaskError::Interrupted.into())
            })?;
            i2.lock().push(g.id());
            ctx.cancelled().await;
            o2.lock().push("child");
            Err(TaskError::Interrupted.into())
        })?;
        i.lock().push(child.id());
        ctx.cancelled().await;
        o.lock().push("root");
        Err(TaskError::Interrupted.into())
    });
    until("ids.lock().len() == 2", || ids.lock().len() == 2).await;
    let v = ids.lock().clone();
    let (child, grandchild) = (v[0], v[1]);
    let results = rt.results(root, V);
    assert_eq!(rt.cancel(root).unwrap(), CancelOutcome::Accepted);
    // The runtime delivers the cancel leaves first (the core emits the
    // handler cancellations in post-order; each handler records when it saw it).
    let terminal_order: Vec<TaskId> = results.map(|t| t.task().task_id).collect().await;
    assert_eq!(terminal_order, vec![grandchild, child, root]);
    for id in [root, child, grandchild] {
        assert_eq!(status(&rt, id), TaskStatus::Cancelled);
    }
    assert_eq!(*order.lock(), vec!["grandchild", "child", "root"]);
}

#[tokio::test(start_paused = true)]
async fn parent_that_returns_early_waits_for_its_children() {
    let rt = Runtime::new(RuntimeConfig::default());
    let child_id: Arc<Mutex<Option<TaskId>>> = Arc::default();
    let c = child_id.clone();
    let root = rt.spawn(RootOptions::default(), move |ctx| async move {
        let h = ctx.spawn_subtask(SubtaskOptions::default(), |_| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok(text("child"))
        })?;
        *c.lock() = Some(h.id());
        Ok(text("root"))
    });
    until("child_id.lock().is_some()", || child_id.lock().is_some()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let snap = rt.get(root, V).unwrap();
    assert_eq!(snap.status(), TaskStatus::Working);
    assert!(
        snap.task()
            .status_message
            .as_deref()
            .unwrap()
            .contains("waiting for 1 of 1")
    );
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    assert_eq!(result_text(&done), "root");
    assert_eq!(status(&rt, child_id.lock().unwrap()), TaskStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn steer_arrives_in_order_at_checkpoints_and_is_rejected_after_the_end() {
    let rt = Runtime::new(RuntimeConfig::default());
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let root = rt.spawn(RootOptions::default(), move |ctx| async move {
        g.notified().await;
        let steers = ctx.checkpoint().await?;
        let more = ctx.checkpoint().await?;
        assert!(more.is_empty(), "each steer is delivered once");
        Ok(text(&steers.join(",")))
    });
    tokio::task::yield_now().await;
    for m in ["one", "two", "three"] {
        rt.steer(root, m).unwrap();
    }
    gate.notify_one();
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(result_text(&done), "one,two,three");
    let err = rt.steer(root, "late").unwrap_err();
    assert_eq!(err.error_code(), ErrorCode::INVALID_PARAMS);
}

#[tokio::test(start_paused = true)]
async fn pause_of_parent_parks_the_subtree_and_resume_restores_input_required() {
    let rt = Runtime::new(RuntimeConfig::default());
    let ids: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let i = ids.clone();
    let root = rt.spawn(RootOptions::default(), move |ctx| async move {
        let asker = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
            let answer = ctx
                .request_input(
                    "confirm",
                    obj(serde_json::json!({"method": "elicitation/create"})),
                )
                .await?;
            Ok(text(answer["action"].as_str().unwrap_or("?")))
        })?;
        let worker = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
            let mut steps = 0;
            loop {
                ctx.checkpoint().await?;
                steps += 1;
                if steps == 50 {
                    return Ok(text(&steps.to_string()));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })?;
        i.lock().extend([asker.id(), worker.id()]);
        let a = asker.await;
        let w = worker.await;
        Ok(text(&format!(
            "{} {}",
            matches!(a, TaskOutcome::Completed(_)),
            matches!(w, TaskOutcome::Completed(_))
        )))
    });
    until("ids.lock().len() == 2", || ids.lock().len() == 2).await;
    let v = ids.lock().clone();
    let (asker, worker) = (v[0], v[1]);
    until("status(&rt, asker) == TaskStatus::InputRequired", || {
        status(&rt, asker) == TaskStatus::InputRequired
    })
    .await;
    let paused = rt.pause(root, V).unwrap();
    // The root is awaiting its children: parked, so paused at once.
    assert_eq!(paused.status(), TaskStatus::Paused);
    assert_eq!(status(&rt, asker), TaskStatus::Paused);
    until("status(&rt, worker) == TaskStatus::Paused", || {
        status(&rt, worker) == TaskStatus::Paused
    })
    .await;
    // Paused work does not advance; TTL-free tasks just wait.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(status(&rt, worker), TaskStatus::Paused);
    // tasks/update is refused while paused; nothing is lost.
    let mut answer = InputResponses::new();
    answer.insert("confirm".into(), obj(serde_json::json!({"action": "accept"})));
    assert!(rt.update(asker, answer.clone()).is_err());
    let resumed = rt.resume(root, V).unwrap();
    assert_eq!(resumed.status(), TaskStatus::Working);
    let asker_snap = rt.get(asker, V).unwrap();
    assert_eq!(asker_snap.status(), TaskStatus::InputRequired);
    match asker_snap.payload() {
        TaskPayload::InputRequired { input_requests } => assert!(input_requests.contains_key("confirm")),
        other => panic!("{other:?}"),
    }
    assert_eq!(rt.update(asker, answer).unwrap(), vec!["confirm".to_owned()]);
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(result_text(&done), "true true");
    assert_eq!(result_text(&rt.get(asker, V).unwrap()), "accept");
}

#[tokio::test(start_paused = true)]
async fn child_ttl_is_clamped_and_the_tree_is_deleted_whole() {
    let mut config = RuntimeConfig::default();
    config.forest.deletion_grace_ms = 1_000;
    let rt = Runtime::new(config);
    let ids: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let i = ids.clone();
    let root = rt.spawn(
        RootOptions {
            ttl_ms: Some(5_000),
            poll_interval_ms: None,
        },
        move |ctx| async move {
            let long = ctx.spawn_subtask(SubtaskOptions::default().ttl_ms(60_000), |ctx| async move {
                ctx.cancelled().await;
                Err(TaskError::Interrupted.into())
            })?;
            let short = ctx.spawn_subtask(SubtaskOptions::default().ttl_ms(1_000), |ctx| async move {
                ctx.cancelled().await;
                Err(TaskError::Interrupted.into())
            })?;
            i.lock().extend([long.id(), short.id()]);
            let _ = short.await;
            ctx.cancelled().await;
            Err(TaskError::Interrupted.into())
        },
    );
    until("ids.lock().len() == 2", || ids.lock().len() == 2).await;
    let v = ids.lock().clone();
    let (long, short) = (v[0], v[1]);
    assert_eq!(rt.get(long, V).unwrap().task().ttl_ms, Some(5_000));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // The short child expired (failed) early but stays retrievable.
    assert_eq!(status(&rt, short), TaskStatus::Failed);
    assert_eq!(status(&rt, root), TaskStatus::Working);
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    assert_eq!(status(&rt, root), TaskStatus::Failed);
    assert_eq!(status(&rt, long), TaskStatus::Failed);
    assert_eq!(rt.task_count(), 3);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    for id in [root, long, short] {
        assert!(rt.get(id, V).is_none());
    }
    assert_eq!(rt.task_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_fails_only_its_own_task() {
    let rt = Runtime::new(RuntimeConfig::default());
    let root = rt.spawn(RootOptions::default(), |ctx| async move {
        let bad = ctx.spawn_subtask(SubtaskOptions::default(), |_| async {
            if true {
                panic!("kaboom");
            }
            Ok(JsonObject::new())
        })?;
        let good = ctx.spawn_subtask(SubtaskOptions::default(), |_| async { Ok(text("fine")) })?;
        let b = bad.await;
        let g = good.await;
        match (b, g) {
            (TaskOutcome::Failed(e), TaskOutcome::Completed(_)) => Ok(text(&e.message)),
            other => Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, format!("{other:?}"))),
        }
    });
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Completed);
    assert!(result_text(&done).contains("handler panicked: kaboom"));
    // The runtime keeps running.
    let again = rt.spawn(RootOptions::default(), |_| async { Ok(text("still here")) });
    assert_eq!(result_text(&rt.wait(again, V).await.unwrap()), "still here");
}

#[tokio::test(start_paused = true)]
async fn a_body_that_panics_before_returning_its_future_fails_its_task() {
    let rt = Runtime::new(RuntimeConfig::default());
    let root = rt.spawn(RootOptions::default(), |ctx| {
        if ctx.parent_task_id().is_none() {
            panic!("too early");
        }
        async { Ok(JsonObject::new()) }
    });
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Failed);
    assert!(
        done.task()
            .status_message
            .as_deref()
            .unwrap_or("")
            .contains("handler panicked: too early")
    );
    let again = rt.spawn(RootOptions::default(), |_| async { Ok(text("still here")) });
    assert_eq!(result_text(&rt.wait(again, V).await.unwrap()), "still here");
}

#[tokio::test(start_paused = true)]
async fn a_fail_fast_child_cancels_its_siblings_and_fails_the_parent() {
    let rt = Runtime::new(RuntimeConfig::default());
    let sib: Arc<Mutex<Option<TaskId>>> = Arc::default();
    let s = sib.clone();
    let root = rt.spawn(RootOptions::default(), move |ctx| async move {
        let slow = ctx.spawn_subtask(SubtaskOptions::default(), |ctx| async move {
            ctx.cancelled().await;
            Err(TaskError::Interrupted.into())
        })?;
        *s.lock() = Some(slow.id());
        let _failing = ctx.spawn_subtask(SubtaskOptions::default().fail_fast(), |_| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err(ErrorObject::new(ErrorCode::INTERNAL_ERROR, "source unreachable"))
        })?;
        ctx.cancelled().await;
        Err(TaskError::Interrupted.into())
    });
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Failed);
    match done.payload() {
        TaskPayload::Failed { error } => {
            assert!(error.message.contains("source unreachable"), "{}", error.message)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(status(&rt, sib.lock().unwrap()), TaskStatus::Cancelled);
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_ignores_cancel_is_aborted_after_the_grace_period() {
    let config = RuntimeConfig {
        cancel_grace: Duration::from_secs(2),
        ..Default::default()
    };
    let rt = Runtime::new(config);
    let root = rt.spawn(RootOptions::default(), |_| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(text("too late"))
    });
    tokio::task::yield_now().await;
    assert_eq!(rt.cancel(root).unwrap(), CancelOutcome::Accepted);
    tokio::time::sleep(Duration::from_millis(1_900)).await;
    assert_eq!(status(&rt, root), TaskStatus::Working);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(status(&rt, root), TaskStatus::Cancelled);
    assert_eq!(rt.running_handlers(), 0);
}

#[tokio::test(start_paused = true)]
async fn results_stream_in_post_order_as_soon_as_the_order_allows() {
    let rt = Runtime::new(RuntimeConfig::default());
    // Children finish in reverse order; results must still come in order.
    let root = rt.spawn(RootOptions::default(), |ctx| async move {
        for i in 0..5u64 {
            ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                let inner = ctx.spawn_subtask(SubtaskOptions::default(), move |_| async move {
                    tokio::time::sleep(Duration::from_millis(100 * (5 - i))).await;
                    Ok(text(&format!("leaf{i}")))
                })?;
                let _ = inner.await;
                Ok(text(&format!("child{i}")))
            })?;
        }
        Ok(text("root"))
    });
    let got: Vec<String> = rt.results(root, V).map(|t| result_text(&t)).collect().await;
    let want: Vec<String> = (0..5)
        .flat_map(|i| [format!("leaf{i}"), format!("child{i}")])
        .chain(["root".to_owned()])
        .collect();
    assert_eq!(got, want);
}

#[tokio::test(start_paused = true)]
async fn after_dependencies_start_in_order_and_see_outcomes() {
    let rt = Runtime::new(RuntimeConfig::default());
    let root = rt.spawn(RootOptions::default(), |ctx| async move {
        let mut plan = SubtaskPlan::new();
        plan.step("search", &[], SubtaskOptions::default(), |_| async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(text("found"))
        });
        plan.step("read", &["search"], SubtaskOptions::default(), |ctx| async move {
            let dep = &ctx.dependencies()[0];
            Ok(text(&format!(
                "read {}",
                dep.outcome.result().unwrap()["content"][0]["text"]
            )))
        });
        let handles = plan.spawn(&ctx)?;
        let read = handles["read"].clone().await;
        Ok(read.result().cloned().unwrap_or_default())
    });
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(result_text(&done), "read \"found\"");
}

#[tokio::test(start_paused = true)]
async fn a_plan_with_a_cycle_is_rejected_before_anything_starts() {
    let rt = Runtime::new(RuntimeConfig::default());
    let root = rt.spawn(RootOptions::default(), |ctx| async move {
        let mut plan = SubtaskPlan::new();
        plan.step("a", &["b"], SubtaskOptions::default(), |_| async {
            Ok(JsonObject::new())
        });
        plan.step("b", &["a"], SubtaskOptions::default(), |_| async {
            Ok(JsonObject::new())
        });
        match plan.spawn(&ctx) {
            Err(e) => Ok(text(&e.to_string())),
            Ok(_) => Ok(text("accepted")),
        }
    });
    let done = rt.wait(root, V).await.unwrap();
    assert!(
        result_text(&done).contains("dependency cycle"),
        "{}",
        result_text(&done)
    );
    assert!(done.task().child_task_ids.is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_scheduler_limits_running_handlers_and_is_fair_across_trees() {
    let config = RuntimeConfig {
        max_running: 4,
        max_running_per_tree: 2,
        ..Default::default()
    };
    let rt = Runtime::new(config);
    let peak = Arc::new(Mutex::new((0usize, 0usize)));
    let p = peak.clone();
    // A huge fan-out.
    let big = rt.spawn(RootOptions::default(), move |ctx| async move {
        let mut hs = Vec::new();
        for _ in 0..200 {
            let p = p.clone();
            hs.push(ctx.spawn_subtask(SubtaskOptions::default(), move |_| async move {
                {
                    let mut g = p.lock();
                    g.0 += 1;
                    g.1 = g.1.max(g.0);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                p.lock().0 -= 1;
                Ok(JsonObject::new())
            })?);
        }
        for h in hs {
            let _ = h.await;
        }
        Ok(text("big"))
    });
    tokio::time::sleep(Duration::from_millis(25)).await;
    // A small caller arriving later is not starved behind the fan-out.
    let small = rt.spawn(RootOptions::default(), |_| async { Ok(text("small")) });
    let small_done = rt.wait(small, V).await.unwrap();
    assert_eq!(small_done.status(), TaskStatus::Completed);
    assert_ne!(
        status(&rt, big),
        TaskStatus::Completed,
        "the small tree finished before the fan-out"
    );
    let queued = rt.get(big, V).unwrap();
    assert!(!queued.task().child_task_ids.is_empty());
    rt.wait(big, V).await.unwrap();
    // Within the big tree at most 2 ran at once (the per-tree limit; its root is parked).
    assert!(peak.lock().1 <= 2, "peak {}", peak.lock().1);
}

#[tokio::test(start_paused = true)]
async fn queued_subtasks_say_what_they_wait_for() {
    let config = RuntimeConfig {
        max_running: 2,
        max_running_per_tree: 1,
        ..Default::default()
    };
    let rt = Runtime::new(config);
    let ids: Arc<Mutex<Vec<TaskId>>> = Arc::default();
    let i = ids.clone();
    let root = rt.spawn(RootOptions::default(), move |ctx| async move {
        let a = ctx.spawn_subtask(SubtaskOptions::default(), |_| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(JsonObject::new())
        })?;
        let b = ctx.spawn_subtask(SubtaskOptions::default().after(&[&a]), |_| async {
            Ok(JsonObject::new())
        })?;
        i.lock().extend([a.id(), b.id()]);
        let _ = b.await;
        Ok(JsonObject::new())
    });
    until("ids.lock().len() == 2", || ids.lock().len() == 2).await;
    let b = ids.lock()[1];
    let msg = rt.get(b, V).unwrap().task().status_message.clone().unwrap();
    assert!(msg.contains("waiting for 1 dependencies"), "{msg}");
    rt.wait(root, V).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn base_clients_never_see_paused() {
    let rt = Runtime::new(RuntimeConfig::default());
    let root = rt.spawn(RootOptions::default(), |ctx| async move {
        ctx.pause_self("holding the browser for follow-up").await?;
        Ok(text("resumed"))
    });
    until("status(&rt, root) == TaskStatus::Paused", || {
        status(&rt, root) == TaskStatus::Paused
    })
    .await;
    let base = rt.get(root, ClientView::BASE).unwrap();
    assert_eq!(base.status(), TaskStatus::Working);
    assert!(
        base.task()
            .status_message
            .as_deref()
            .unwrap()
            .contains("holding the browser")
    );
    rt.resume(root, V).unwrap();
    assert_eq!(result_text(&rt.wait(root, V).await.unwrap()), "resumed");
}

#[tokio::test(start_paused = true)]
async fn unknown_ids_are_rejected_without_side_effects() {
    let rt = Runtime::new(RuntimeConfig::default());
    let unknown = TaskId::random();
    assert!(rt.get(unknown, V).is_none());
    for e in [
        rt.cancel(unknown).map(|_| ()).unwrap_err(),
        rt.steer(unknown, "x").unwrap_err(),
        rt.pause(unknown, V).map(|_| ()).unwrap_err(),
        rt.resume(unknown, V).map(|_| ()).unwrap_err(),
        rt.update(unknown, InputResponses::new()).map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(e.error_code(), ErrorCode::INVALID_PARAMS);
        assert_eq!(e.to_string(), "task not found");
    }
    assert!(rt.wait(unknown, V).await.is_none());
}

/// Thousands of handlers exiting at once on two worker threads: their exits
/// are applied in batches by whichever thread drains the tree's queue
/// (more than one drainer's budget of 4,096, so a drain is handed on to a
/// fresh task). Every task settles, leaves first, and every scheduler slot
/// is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mass_cancel_settles_every_task_and_releases_every_slot() {
    const CHILDREN: usize = 6_000;
    let mut config = RuntimeConfig {
        max_running: CHILDREN + 8,
        max_running_per_tree: CHILDREN + 8,
        ..RuntimeConfig::default()
    };
    config.forest.limits.max_children = CHILDREN as u32;
    let rt = Runtime::new(config);
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let s = started.clone();
    let root = rt.spawn(RootOptions::default(), move |ctx| async move {
        for _ in 0..CHILDREN {
            let s = s.clone();
            ctx.spawn_subtask(SubtaskOptions::default(), move |ctx| async move {
                s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                ctx.cancelled().await;
                Err(TaskError::Interrupted.into())
            })?;
        }
        ctx.cancelled().await;
        Err(TaskError::Interrupted.into())
    });
    while started.load(std::sync::atomic::Ordering::SeqCst) < CHILDREN {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(rt.running_handlers(), CHILDREN + 1);
    let results = rt.results(root, V);
    assert_eq!(rt.cancel(root).unwrap(), CancelOutcome::Accepted);
    let done: Vec<_> = results.collect().await;
    assert_eq!(done.len(), CHILDREN + 1, "every task ends exactly once");
    assert!(done.iter().all(|t| t.status() == TaskStatus::Cancelled));
    assert_eq!(
        done.last().map(|t| t.task().task_id),
        Some(root),
        "the root ends last"
    );
    // Slots are released right after their tasks settle (the bound is a
    // hang guard: a leaked slot never comes back).
    tokio::time::timeout(Duration::from_secs(60), async {
        while rt.running_handlers() > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("every scheduler slot is released");
}

/// Handlers that spend their time awaiting something outside the runtime
/// (a model, a remote service) wrap the wait in `TaskContext::external`:
/// 2,000 of them, twice the default `max_running`, all wait at once holding
/// no scheduler slot, and a quick task created after them starts at once
/// (it is never queued) and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_external_waits_do_not_starve_a_new_task() {
    const WAITING: usize = 2_000;
    let config = RuntimeConfig::default();
    assert!(WAITING > config.max_running, "more waiting handlers than slots");
    let rt = Runtime::new(config);
    // The remote service's answer, sent when the test says so.
    let (answer, awaited) = tokio::sync::watch::channel(false);
    let waiting = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut long = Vec::with_capacity(WAITING);
    for _ in 0..WAITING {
        let (mut awaited, waiting) = (awaited.clone(), waiting.clone());
        long.push(rt.spawn(RootOptions::default(), move |ctx| async move {
            waiting.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            ctx.external(async { awaited.wait_for(|answered| *answered).await.is_ok() })
                .await
                .then_some(())
                .ok_or(TaskError::Interrupted)?;
            Ok(text("answered"))
        }));
    }
    // A handler counts itself just before its wait gives the slot back, so
    // both are awaited (a hang guard: with `external` not giving slots
    // back, only `max_running` handlers ever start).
    tokio::time::timeout(Duration::from_secs(60), async {
        while waiting.load(std::sync::atomic::Ordering::SeqCst) < WAITING || rt.running_handlers() > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("every long handler started and waits holding no slot");

    let quick = rt.spawn(RootOptions::default(), |_ctx| async move { Ok(text("quick")) });
    let message = rt.get(quick, V).unwrap().task().status_message.clone();
    assert!(
        !message.as_deref().unwrap_or("").starts_with("queued"),
        "the quick task is not queued: {message:?}"
    );
    let done = tokio::time::timeout(Duration::from_secs(10), rt.wait(quick, V))
        .await
        .expect("the quick task completes while the long ones wait")
        .unwrap();
    assert_eq!(result_text(&done), "quick");
    assert!(long.iter().all(|id| status(&rt, *id) == TaskStatus::Working));

    // The answer arrives: every long handler takes a slot again (at most
    // `max_running` at once) and completes.
    answer.send(true).unwrap();
    for id in long {
        let t = tokio::time::timeout(Duration::from_secs(60), rt.wait(id, V))
            .await
            .expect("every long task completes once answered")
            .unwrap();
        assert_eq!(result_text(&t), "answered");
    }
}

/// A task queued for a scheduler slot says so, with its place in the queue
/// as it joined it; once it starts, the message is gone.
#[tokio::test(start_paused = true)]
async fn a_task_queued_for_a_slot_says_its_place() {
    let rt = Runtime::new(RuntimeConfig {
        max_running: 2,
        ..RuntimeConfig::default()
    });
    let (go, gate) = tokio::sync::watch::channel(false);
    // Two handlers hold both slots: they await without `external`.
    let holders: Vec<TaskId> = (0..2)
        .map(|_| {
            let mut gate = gate.clone();
            rt.spawn(RootOptions::default(), move |_ctx| async move {
                let _ = gate.wait_for(|go| *go).await;
                Ok(text("held"))
            })
        })
        .collect();
    until("rt.running_handlers() == 2", || rt.running_handlers() == 2).await;
    let queued: Vec<TaskId> = (0..3)
        .map(|_| rt.spawn(RootOptions::default(), |_ctx| async move { Ok(text("queued")) }))
        .collect();
    for (place, id) in queued.iter().enumerate() {
        let t = rt.get(*id, V).unwrap();
        assert_eq!(t.status(), TaskStatus::Working);
        let message = t.task().status_message.clone().unwrap_or_default();
        assert!(
            message.starts_with("queued: waiting for a scheduler slot")
                && message.contains(&format!("place {} in the queue", place + 1))
                && message.contains("at most 2 handlers run at once"),
            "{message}"
        );
    }
    go.send(true).unwrap();
    for id in holders.into_iter().chain(queued) {
        let t = rt.wait(id, V).await.unwrap();
        assert_eq!(t.status(), TaskStatus::Completed);
        assert_eq!(t.task().status_message, None, "the queue message is gone");
    }
}

/// `request_input`'s hand-written future (`context/input.rs`): an answer
/// ends the wait; a wait dropped midway withdraws its request (the task is
/// `working` again) and its key stays used (I9); a cancel ends a wait with
/// `Interrupted`. Each step's outcome goes to the test over a channel.
#[tokio::test(start_paused = true)]
async fn an_input_wait_returns_its_answer_withdraws_when_dropped_and_ends_on_cancel() {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let ask = || obj(serde_json::json!({"method": "elicitation/create"}));
    let (go, go_rx) = tokio::sync::oneshot::channel::<()>();
    let (rt, root) = rt_spawn_asker(tx, go_rx, ask);
    // 1. Answered.
    until("first request", || status(&rt, root) == TaskStatus::InputRequired).await;
    let mut answer = InputResponses::new();
    answer.insert("first".into(), obj(serde_json::json!({"action": "accept"})));
    assert_eq!(rt.update(root, answer).unwrap(), vec!["first".to_owned()]);
    assert_eq!(rx.recv().await.unwrap(), "answered accept");
    // 2. Dropped by a timeout around it: withdrawn, and the task works on.
    until("second request", || {
        status(&rt, root) == TaskStatus::InputRequired
    })
    .await;
    assert_eq!(rx.recv().await.unwrap(), "timed out");
    let snap = rt.get(root, V).unwrap();
    assert_eq!(snap.status(), TaskStatus::Working, "{snap:?}");
    let mut late = InputResponses::new();
    late.insert("second".into(), obj(serde_json::json!({"action": "accept"})));
    assert!(
        rt.update(root, late).unwrap().is_empty(),
        "a withdrawn request takes no answer"
    );
    go.send(()).unwrap();
    // 3. Its key is used: asking again under it is rejected.
    assert_eq!(rx.recv().await.unwrap(), "reused key rejected");
    // 4. Cancelled while waiting.
    until("third request", || status(&rt, root) == TaskStatus::InputRequired).await;
    let _ = rt.cancel(root).unwrap();
    assert_eq!(rx.recv().await.unwrap(), "interrupted");
    let done = rt.wait(root, V).await.unwrap();
    assert_eq!(done.status(), TaskStatus::Cancelled);
}

fn rt_spawn_asker(
    tx: tokio::sync::mpsc::UnboundedSender<String>,
    go: tokio::sync::oneshot::Receiver<()>,
    ask: impl Fn() -> JsonObject + Send + 'static,
) -> (Runtime, TaskId) {
    let rt = Runtime::new(RuntimeConfig::default());
    let root = rt.spawn(RootOptions::default(), move |ctx| async move {
        let a = ctx.request_input("first", ask()).await?;
        let _ = tx.send(format!("answered {}", a["action"].as_str().unwrap_or("?")));
        let timed = tokio::time::timeout(Duration::from_secs(5), ctx.request_input("second", ask())).await;
        let _ = tx.send(if timed.is_err() {
            "timed out".into()
        } else {
            format!("{timed:?}")
        });
        let _ = ctx.external(go).await;
        let again = ctx.request_input("second", ask()).await;
        let _ = tx.send(match again {
            Err(TaskError::Rejected(_)) => "reused key rejected".into(),
            other => format!("{other:?}"),
        });
        let third = ctx.request_input("third", ask()).await;
        let _ = tx.send(match &third {
            Err(TaskError::Interrupted) => "interrupted".into(),
            other => format!("{other:?}"),
        });
        Ok(third?)
    });
    (rt, root)
}
