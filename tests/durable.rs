//! Durable execution on the runtime: a tree stopped mid-way (its runtime
//! and tokio runtime gone, the store kept) resumes where it stopped on a
//! new runtime over the same SQLite file; finished subtasks and steps are
//! not run again; a re-run that does something else fails with a clear
//! error; `patched` changes code under a running tree.

#[path = "support/until.rs"]
mod until;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use until::until;

use parking_lot::Mutex;
use subtask::core::{ClientView, RootOptions};
use subtask::model::{InputResponses, JsonObject, TaskId, TaskPayload, TaskStatus};
use subtask::runtime::{HandlerBody, Owner, Runtime, RuntimeConfig, SubtaskOptions, TaskContext};
use subtask::store::{SqliteConfig, SqliteStore};

const V: ClientView = ClientView::PAUSE_AWARE;

fn obj(v: serde_json::Value) -> JsonObject {
    JsonObject::from_value(v).unwrap()
}

/// How many times each named piece of code ran, across runtimes.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<String, u32>>>);

impl Runs {
    fn hit(&self, what: impl Into<String>) {
        *self.0.lock().entry(what.into()).or_default() += 1;
    }
    fn of(&self, what: &str) -> u32 {
        self.0.lock().get(what).copied().unwrap_or(0)
    }
}

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("subtask-durable-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    fn db(&self) -> PathBuf {
        self.0.join("tasks.db")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn open(dir: &Dir) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(SqliteConfig::new(dir.db())).expect("open the store"))
}

/// One generation of the code: the root plans with a step, spawns three
/// named children (each with a step; the last asks for input) and returns
/// their values.
fn root_body(runs: Runs, version: u32) -> HandlerBody {
    Box::new(move |ctx: TaskContext| {
        Box::pin(async move {
            runs.hit("root");
            let r = runs.clone();
            let n: u32 = ctx
                .step("plan", || async move {
                    r.hit("root/plan");
                    3
                })
                .await?;
            let mut handles = Vec::new();
            for i in 0..n {
                let runs = runs.clone();
                // Version 2 changed the code under running trees (a
                // divergence); version 3 changed it with a patch.
                let changed = match version {
                    2 => i == 1,
                    3 => i == 1 && ctx.patched("rename child1"),
                    _ => false,
                };
                let name = if changed {
                    "other".to_owned()
                } else {
                    format!("child{i}")
                };
                handles.push(
                    ctx.spawn_subtask(
                        SubtaskOptions::default()
                            .named(name)
                            .args(&serde_json::json!({ "i": i })),
                        move |ctx| child(ctx, runs, i),
                    )?,
                );
            }
            let mut values = Vec::new();
            for h in handles {
                match h.outcome().await {
                    subtask::model::TaskOutcome::Completed(r) => values.push(r["v"].clone()),
                    other => values.push(serde_json::json!(format!("{other:?}"))),
                }
            }
            Ok(obj(serde_json::json!({ "values": values })))
        })
    })
}

async fn child(ctx: TaskContext, runs: Runs, i: u32) -> subtask::runtime::HandlerResult {
    runs.hit(format!("child{i}"));
    let r = runs.clone();
    let v: u32 = ctx
        .step("work", || async move {
            r.hit(format!("child{i}/work"));
            i * 10
        })
        .await?;
    let mut v = v;
    if i == 2 {
        let answer = ctx
            .request_input("more", obj(serde_json::json!({"ask": "more?"})))
            .await?;
        v += answer["add"].as_u64().unwrap_or(0) as u32;
    }
    let steers = ctx.checkpoint().await?;
    Ok(obj(serde_json::json!({ "v": v, "steers": steers })))
}

fn status(rt: &Runtime, id: TaskId) -> Option<TaskStatus> {
    rt.get(id, V).map(|t| t.status())
}

fn children(rt: &Runtime, id: TaskId) -> Vec<TaskId> {
    rt.get(id, V)
        .map(|t| t.task().child_task_ids.clone())
        .unwrap_or_default()
}

/// Runs the first generation on its own tokio runtime until child 2 asks
/// for input (children 0 and 1 completed), then stops it the hard way: the
/// tokio runtime is shut down with every handler in it. Returns the root.
fn first_run(dir: &Dir, runs: &Runs) -> TaskId {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = open(dir);
    let runs = runs.clone();
    let root = tokio.block_on(async {
        let rt = Runtime::with_store(RuntimeConfig::default(), store.clone());
        let body = root_body(runs, 1);
        let root = rt.spawn_resumable(RootOptions::default(), serde_json::json!({"tool": "t"}), body);
        until("child 2 to ask for input", || {
            let kids = children(&rt, root);
            kids.len() == 3
                && status(&rt, kids[0]) == Some(TaskStatus::Completed)
                && status(&rt, kids[1]) == Some(TaskStatus::Completed)
                && status(&rt, kids[2]) == Some(TaskStatus::InputRequired)
        })
        .await;
        rt.flushed(root).await.unwrap();
        root
    });
    tokio.shutdown_timeout(Duration::from_secs(10));
    store.flush().unwrap();
    // The runtime held the store: wait until every clone is gone, so the
    // file's lock is free for the next generation.
    for _ in 0..1000 {
        if Arc::strong_count(&store) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        Arc::strong_count(&store),
        1,
        "the stopped runtime still holds the store"
    );
    drop(store);
    root
}

fn owner_of(name: &str) -> Arc<Owner> {
    Owner::new(name, usize::MAX)
}

#[test]
fn a_stopped_tree_resumes_in_place_and_redoes_nothing_finished() {
    let dir = Dir::new("resume");
    let runs = Runs::default();
    let root = first_run(&dir, &runs);
    assert_eq!(runs.of("root"), 1);
    assert_eq!(runs.of("child2/work"), 1);

    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let store = open(&dir);
        let rt = Runtime::with_store(RuntimeConfig::default(), store.clone());
        let r = runs.clone();
        let report = rt
            .recover(owner_of, move |_meta| {
                let r = r.clone();
                async move { Some(root_body(r, 1)) }
            })
            .await
            .unwrap();
        assert_eq!(
            (report.rerun, report.resumed, report.failed),
            (1, 1, 0),
            "{report}"
        );
        let kids = children(&rt, root);
        until("child 2 to ask for input again", || {
            status(&rt, kids[2]) == Some(TaskStatus::InputRequired)
        })
        .await;
        rt.steer(kids[2], "hurry").unwrap();
        let mut answer = InputResponses::new();
        answer.insert("more".into(), obj(serde_json::json!({"add": 5})));
        rt.update(kids[2], answer).unwrap();
        let done = rt.wait(root, V).await.unwrap();
        let TaskPayload::Completed { result } = done.payload() else {
            panic!("the root did not complete: {done:?}");
        };
        assert_eq!(result["values"], serde_json::json!([0, 10, 25]));
        assert_eq!(children(&rt, root), kids, "one generation of subtasks");
        drop(rt);
        store.flush().unwrap();
    });
    // The root and the interrupted child ran again; nothing finished did.
    assert_eq!(runs.of("root"), 2);
    assert_eq!(runs.of("root/plan"), 1, "a finished step is not run again");
    for i in 0..2 {
        assert_eq!(runs.of(&format!("child{i}")), 1, "completed child {i} ran again");
        assert_eq!(runs.of(&format!("child{i}/work")), 1);
    }
    assert_eq!(runs.of("child2"), 2, "the interrupted child runs again in place");
    assert_eq!(runs.of("child2/work"), 1, "its finished step is not run again");
}

#[test]
fn a_rerun_that_spawns_something_else_fails_with_the_position_and_both_acts() {
    let dir = Dir::new("diverge");
    let runs = Runs::default();
    let root = first_run(&dir, &runs);
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let store = open(&dir);
        let rt = Runtime::with_store(RuntimeConfig::default(), store.clone());
        let r = runs.clone();
        rt.recover(owner_of, move |_meta| {
            let r = r.clone();
            async move { Some(root_body(r, 2)) }
        })
        .await
        .unwrap();
        let done = rt.wait(root, V).await.unwrap();
        let TaskPayload::Failed { error } = done.payload() else {
            panic!("the diverged root did not fail: {done:?}");
        };
        let data = error.data.clone().unwrap();
        assert_eq!(data["reason"], "divergence", "{error:?}");
        assert_eq!(
            data["position"], 2,
            "plan is act 0, child0 act 1, child1 act 2: {error:?}"
        );
        assert!(
            error.message.contains("child1") && error.message.contains("other"),
            "{}",
            error.message
        );
        let kids = children(&rt, root);
        assert_eq!(kids.len(), 3, "nothing appended");
        assert_eq!(status(&rt, kids[0]), Some(TaskStatus::Completed));
        assert_eq!(status(&rt, kids[1]), Some(TaskStatus::Completed));
        assert!(
            matches!(
                status(&rt, kids[2]),
                Some(TaskStatus::Cancelled | TaskStatus::Failed)
            ),
            "the waiting child ends with its parent"
        );
        drop(rt);
        store.flush().unwrap();
    });
}

#[test]
fn a_patched_change_runs_the_old_path_for_old_trees_and_the_new_for_new_ones() {
    let dir = Dir::new("patch");
    let runs = Runs::default();
    let root = first_run(&dir, &runs);
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let store = open(&dir);
        let rt = Runtime::with_store(RuntimeConfig::default(), store.clone());
        let r = runs.clone();
        rt.recover(owner_of, move |_meta| {
            let r = r.clone();
            async move { Some(root_body(r, 3)) }
        })
        .await
        .unwrap();
        let kids = children(&rt, root);
        until("child 2 to ask for input again", || {
            status(&rt, kids[2]) == Some(TaskStatus::InputRequired)
        })
        .await;
        let mut answer = InputResponses::new();
        answer.insert("more".into(), obj(serde_json::json!({"add": 1})));
        rt.update(kids[2], answer).unwrap();
        let done = rt.wait(root, V).await.unwrap();
        let TaskPayload::Completed { result } = done.payload() else {
            panic!("the old tree did not complete on the patched code: {done:?}");
        };
        assert_eq!(result["values"], serde_json::json!([0, 10, 21]));
        assert_eq!(children(&rt, root), kids, "the old path: the same subtasks");

        // A tree started by the patched code takes the new path, and a
        // stop of it replays the marker.
        let fresh = rt.spawn_resumable(
            RootOptions::default(),
            serde_json::json!({}),
            root_body(runs.clone(), 3),
        );
        let kids = loop {
            let kids = children(&rt, fresh);
            if kids.len() == 3 && status(&rt, kids[2]) == Some(TaskStatus::InputRequired) {
                break kids;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let mut answer = InputResponses::new();
        answer.insert("more".into(), obj(serde_json::json!({"add": 2})));
        rt.update(kids[2], answer).unwrap();
        let done = rt.wait(fresh, V).await.unwrap();
        assert!(
            matches!(done.payload(), TaskPayload::Completed { .. }),
            "{done:?}"
        );
        drop(rt);
        store.flush().unwrap();
    });
    assert_eq!(
        runs.of("root/plan"),
        2,
        "one plan step per tree: the old one was replayed"
    );
}
