//! Finished trees leave memory (`RuntimeConfig::release_finished_after`;
//! `docs/durability.md`, "Finished trees"), on a real SQLite file: the
//! runtime lets a finished, durable tree go after its grace; the store
//! answers for it, no longer loads it at start, and deletes it once its
//! deletion time passes. A live tree is never let go.

#[path = "support/tempdir.rs"]
mod tempdir;
#[path = "support/until.rs"]
mod until;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use subtask::core::{ClientView, RootOptions};
use subtask::model::{JsonObject, TaskId, TaskStatus};
use subtask::runtime::{Runtime, RuntimeConfig, SubtaskOptions, TaskContext};
use subtask::store::{SqliteConfig, SqliteStore, StoredTask, TaskStore, TreeMeta, WriteBatch, WriteOp};
use tempdir::TempDir;
use until::until;

fn open(dir: &TempDir) -> Arc<SqliteStore> {
    Arc::new(SqliteStore::open(SqliteConfig::new(dir.db())).expect("open the store"))
}

fn config(after: Duration) -> RuntimeConfig {
    RuntimeConfig {
        release_finished_after: Some(after),
        ..RuntimeConfig::default()
    }
}

fn text(s: &str) -> JsonObject {
    json!({"content": [{"type": "text", "text": s}]})
        .as_object()
        .unwrap()
        .clone()
        .into()
}

/// A root with three children that complete at once.
fn tree(rt: &Runtime) -> TaskId {
    rt.spawn(RootOptions::default(), |ctx: TaskContext| async move {
        let mut kids = Vec::new();
        for i in 0..3 {
            kids.push(
                ctx.spawn_subtask(SubtaskOptions::default(), move |_| async move {
                    Ok(text(&format!("leaf {i}")))
                })
                .expect("spawn"),
            );
        }
        for k in kids {
            k.outcome().await;
        }
        Ok(text("root"))
    })
}

fn children(rt: &Runtime, id: TaskId) -> Vec<TaskId> {
    rt.get(id, ClientView::BASE)
        .map(|t| t.task().child_task_ids.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_tree_leaves_memory_after_its_grace_and_the_file_answers_for_it() {
    let dir = TempDir::new("finished-release");
    let store = open(&dir);
    let rt = Runtime::with_store(config(Duration::from_millis(300)), store.clone());
    // A live tree that must stay: its root waits until told to end.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let live = rt.spawn(RootOptions::default(), |_ctx: TaskContext| async move {
        let _ = rx.await;
        Ok(text("late"))
    });
    let root = tree(&rt);
    until("the tree to complete", || {
        rt.get(root, ClientView::BASE).map(|t| t.status()) == Some(TaskStatus::Completed)
    })
    .await;
    let kids = children(&rt, root);
    assert_eq!(kids.len(), 3);
    let before: Vec<_> = std::iter::once(root)
        .chain(kids.iter().copied())
        .map(|id| rt.get(id, ClientView::BASE).expect("held"))
        .collect();
    let ended_at = std::time::Instant::now();
    until("the finished tree to leave memory", || {
        rt.get(root, ClientView::BASE).is_none()
    })
    .await;
    assert!(
        ended_at.elapsed() >= Duration::from_millis(250),
        "let go before its grace: {:?}",
        ended_at.elapsed()
    );
    for k in &kids {
        assert!(
            rt.get(*k, ClientView::BASE).is_none(),
            "a subtask stayed in memory"
        );
    }
    assert!(rt.get(live, ClientView::BASE).is_some(), "a live tree was let go");
    // The file answers with what the runtime showed.
    let reads = store.finished().expect("SQLite answers for finished trees");
    for shown in &before {
        let id = shown.task().task_id;
        let row = reads.read_task(id).unwrap().expect("stored");
        let rec = subtask::core::decode_state(id, row.root, row.parent, row.position, &row.state).unwrap();
        assert_eq!(
            &rec.detailed(row.children.clone(), ClientView::BASE),
            shown,
            "task {id}"
        );
    }
    // Held until told to end, then let go too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rt.get(live, ClientView::BASE).is_some(), "a live tree was let go");
    tx.send(()).unwrap();
    until("the second tree to leave memory", || {
        rt.get(live, ClientView::BASE).is_none()
    })
    .await;
    assert!(reads.read_task(live).unwrap().is_some());
}

/// Waits until the runtime's clones of `store` are gone, then drops it.
fn close(store: Arc<SqliteStore>) {
    for _ in 0..1000 {
        if Arc::strong_count(&store) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(store);
}

/// `(released, journal rows)` of `root`'s tree as the file holds them.
fn on_file(dir: &TempDir, root: TaskId) -> (Option<i64>, i64) {
    let conn = rusqlite::Connection::open(dir.db()).unwrap();
    let blob = root.as_u128().to_be_bytes().to_vec();
    let released = conn
        .query_row("SELECT released FROM tasks WHERE id = ?1", [&blob], |r| r.get(0))
        .unwrap();
    let journal = conn
        .query_row("SELECT count(*) FROM journal WHERE root = ?1", [&blob], |r| {
            r.get(0)
        })
        .unwrap();
    (released, journal)
}

/// The SQLite store marks a tree as let go as its root ends
/// (`WriteOp::Ended`, with the root's terminal state), carrying the
/// core's deletion time, while the runtime still holds the tree for its
/// grace; the finished tree's journal goes with it, a live tree's stays.
/// A restart inside the grace loads only the live tree, and the file
/// answers for the finished one as the runtime showed it.
#[test]
fn a_tree_is_marked_as_it_ends_and_a_restart_inside_its_grace_does_not_load_it() {
    let dir = TempDir::new("finished-mark");
    let (root, live, shown) = {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let store = open(&dir);
        let out = tokio.block_on(async {
            let rt = Runtime::with_store(config(Duration::from_secs(600)), store.clone());
            let options = || RootOptions {
                ttl_ms: Some(300_000),
                ..RootOptions::default()
            };
            // Both journal a step (durable execution); one ends.
            let root = rt.spawn_resumable(options(), json!({}), |ctx: TaskContext| async move {
                let n: u32 = ctx.step("count", || async { 7 }).await?;
                Ok(text(&format!("counted {n}")))
            });
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let live = rt.spawn_resumable(options(), json!({}), |ctx: TaskContext| async move {
                let _: u32 = ctx.step("count", || async { 8 }).await?;
                let _ = rx.await;
                Ok(text("late"))
            });
            until("the root to complete", || {
                rt.get(root, ClientView::BASE).map(|t| t.status()) == Some(TaskStatus::Completed)
            })
            .await;
            rt.flushed(root).await.unwrap();
            until("the live tree's step to be stored", || on_file(&dir, live).1 == 1).await;
            let shown = rt.get(root, ClientView::BASE).expect("held through its grace");
            std::mem::forget(tx);
            (root, live, shown)
        });
        tokio.shutdown_timeout(Duration::from_secs(5));
        close(store);
        out
    };
    let (released, journal) = on_file(&dir, root);
    let released = released.expect("marked as it ended");
    // The core's deletion time: the root's expiry (creation + TTL) and
    // the deletion grace.
    let t = shown.task();
    let expected = t.created_at.as_millis()
        + t.ttl_ms.expect("a TTL")
        + subtask::core::ForestConfig::default().deletion_grace_ms;
    assert_eq!(released, i64::try_from(expected).unwrap(), "the deletion time");
    assert_eq!(journal, 0, "a finished tree's journal was kept");
    assert_eq!(
        on_file(&dir, live),
        (None, 1),
        "the live tree's row or journal changed"
    );
    let store = open(&dir);
    let loaded: Vec<TaskId> = store.load().unwrap().iter().map(|t| t.meta.root).collect();
    assert_eq!(loaded, vec![live], "only the live tree is loaded");
    let row = store
        .finished()
        .unwrap()
        .read_task(root)
        .unwrap()
        .expect("the file answers for it");
    let rec = subtask::core::decode_state(root, row.root, row.parent, row.position, &row.state).unwrap();
    assert_eq!(rec.detailed(row.children.clone(), ClientView::BASE), shown);
    // The reopened store knows which trees have a journal: deleting the
    // live one deletes its journal too.
    store.submit(WriteBatch {
        root: live,
        version: 99,
        ops: vec![WriteOp::DeleteTree(live)],
    });
    store.flush().unwrap();
    let journal: i64 = rusqlite::Connection::open(dir.db())
        .unwrap()
        .query_row("SELECT count(*) FROM journal", [], |r| r.get(0))
        .unwrap();
    assert_eq!(journal, 0, "a deleted tree's journal was kept after a restart");
}

/// A tree that ended unmarked (finished trees were kept when it ended) is
/// marked as a restart that lets finished trees go loads it, and leaves
/// memory after its grace; the file answers for it then.
#[test]
fn a_tree_that_ended_unmarked_is_marked_at_recovery_and_let_go_after_its_grace() {
    let dir = TempDir::new("finished-unmarked");
    let root = {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let store = open(&dir);
        let root = tokio.block_on(async {
            let kept = RuntimeConfig {
                release_finished_after: None,
                ..RuntimeConfig::default()
            };
            let rt = Runtime::with_store(kept, store.clone());
            let root = tree(&rt);
            until("the tree to complete", || {
                rt.get(root, ClientView::BASE).map(|t| t.status()) == Some(TaskStatus::Completed)
            })
            .await;
            rt.flushed(root).await.unwrap();
            root
        });
        tokio.shutdown_timeout(Duration::from_secs(5));
        close(store);
        root
    };
    assert_eq!(
        on_file(&dir, root).0,
        None,
        "marked while finished trees were kept"
    );
    let store = open(&dir);
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let rt = Runtime::with_store(config(Duration::from_millis(300)), store.clone());
        let report = rt
            .recover(
                |name| subtask::runtime::Owner::new(name, usize::MAX),
                |_meta| async { None },
            )
            .await
            .unwrap();
        assert_eq!(report.trees, 1, "{report}");
        assert!(rt.get(root, ClientView::BASE).is_some(), "not loaded");
        rt.flushed(root).await.unwrap();
        let released = on_file(&dir, root).0.expect("marked as it was loaded");
        assert!(released > 0);
        until("the tree to leave memory", || {
            rt.get(root, ClientView::BASE).is_none()
        })
        .await;
        let row = store
            .finished()
            .unwrap()
            .read_task(root)
            .unwrap()
            .expect("stored");
        assert_eq!(row.children.len(), 3);
        assert_eq!(on_file(&dir, root).0, Some(released), "the mark changed");
    });
}

/// A tree marked as it ended and deleted by its TTL inside its grace
/// (before the store's sweep) leaves the file and the store's maps: its
/// rows are gone, the file no longer answers for it, and a restart
/// loads nothing.
#[test]
fn a_tree_marked_as_it_ended_and_deleted_inside_its_grace_leaves_the_file() {
    let dir = TempDir::new("finished-ttl");
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let store = open(&dir);
    let root = tokio.block_on(async {
        let mut cfg = config(Duration::from_secs(600));
        cfg.forest.deletion_grace_ms = 0;
        let rt = Runtime::with_store(cfg, store.clone());
        let root = rt.spawn(
            RootOptions {
                ttl_ms: Some(1_000),
                ..RootOptions::default()
            },
            |ctx: TaskContext| async move {
                let kid = ctx
                    .spawn_subtask(SubtaskOptions::default(), |_| async { Ok(text("leaf")) })
                    .expect("spawn");
                kid.outcome().await;
                Ok(text("root"))
            },
        );
        until("the tree to complete", || {
            rt.get(root, ClientView::BASE).map(|t| t.status()) == Some(TaskStatus::Completed)
        })
        .await;
        rt.flushed(root).await.unwrap();
        assert!(on_file(&dir, root).0.is_some(), "not marked as it ended");
        until("the TTL to delete the tree", || {
            rt.get(root, ClientView::BASE).is_none()
        })
        .await;
        root
    });
    tokio.shutdown_timeout(Duration::from_secs(5));
    store.flush().unwrap();
    let rows = || {
        rusqlite::Connection::open(dir.db())
            .unwrap()
            .query_row("SELECT count(*) FROM tasks", [], |r| r.get::<_, i64>(0))
            .unwrap()
    };
    assert_eq!(rows(), 0, "rows of a deleted tree stayed");
    assert!(store.finished().unwrap().read_task(root).unwrap().is_none());
    close(store);
    let store = open(&dir);
    assert!(store.load().unwrap().is_empty());
}

#[test]
fn a_let_go_tree_is_not_loaded_at_start_and_live_ones_are() {
    let dir = TempDir::new("finished-restart");
    let (finished, live) = {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let store = open(&dir);
        let ids = tokio.block_on(async {
            let rt = Runtime::with_store(config(Duration::ZERO), store.clone());
            let finished = tree(&rt);
            until("the finished tree to leave memory", || {
                rt.get(finished, ClientView::BASE).is_none()
            })
            .await;
            let live = rt.spawn(RootOptions::default(), |_ctx: TaskContext| std::future::pending());
            rt.flushed(live).await.unwrap();
            // The release's own write is durable too.
            store.flush().unwrap();
            (finished, live)
        });
        tokio.shutdown_timeout(Duration::from_secs(5));
        close(store);
        ids
    };
    let store = open(&dir);
    let loaded = store.load().unwrap();
    let roots: Vec<TaskId> = loaded.iter().map(|t| t.meta.root).collect();
    assert_eq!(roots, vec![live], "only the live tree is loaded");
    let row = store
        .finished()
        .unwrap()
        .read_task(finished)
        .unwrap()
        .expect("still stored");
    assert_eq!(row.children.len(), 3);
}

/// A released tree past its deletion time reads as absent at once, and the
/// sweeper deletes its rows.
#[test]
fn the_store_deletes_a_let_go_tree_once_its_deletion_time_passes() {
    let dir = TempDir::new("finished-sweep");
    let store = open(&dir);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let task = |id: u128, parent: Option<u128>, position: u32| StoredTask {
        id: TaskId::from_u128(id),
        root: TaskId::from_u128(1),
        parent: parent.map(TaskId::from_u128),
        position,
        version: 0,
        state: "{}".into(),
    };
    let kept = |id: u128| StoredTask {
        id: TaskId::from_u128(id),
        root: TaskId::from_u128(id),
        parent: None,
        position: 0,
        version: 0,
        state: "{}".into(),
    };
    let meta = |root: u128| TreeMeta {
        root: TaskId::from_u128(root),
        owner: Some("alice".into()),
        resumable: false,
        launch: None,
    };
    store.submit(WriteBatch {
        root: TaskId::from_u128(1),
        version: 1,
        ops: vec![
            WriteOp::PutTree(meta(1)),
            WriteOp::PutTask(task(1, None, 0)),
            WriteOp::PutTask(task(2, Some(1), 0)),
            WriteOp::PutTask(task(3, Some(1), 1)),
        ],
    });
    store.submit(WriteBatch {
        root: TaskId::from_u128(9),
        version: 1,
        ops: vec![WriteOp::PutTree(meta(9)), WriteOp::PutTask(kept(9))],
    });
    store.submit(WriteBatch {
        root: TaskId::from_u128(9),
        version: 2,
        ops: vec![WriteOp::Release {
            root: TaskId::from_u128(9),
            delete_at: Some(now + 3_600_000),
        }],
    });
    store.submit(WriteBatch {
        root: TaskId::from_u128(1),
        version: 2,
        ops: vec![WriteOp::Release {
            root: TaskId::from_u128(1),
            delete_at: Some(now.saturating_sub(1)),
        }],
    });
    store.flush().unwrap();
    let reads = store.finished().unwrap();
    for id in [1, 2, 3] {
        assert!(
            reads.read_task(TaskId::from_u128(id)).unwrap().is_none(),
            "task {id} past its deletion time"
        );
    }
    let count = || {
        rusqlite::Connection::open(dir.db())
            .unwrap()
            .query_row("SELECT count(*) FROM tasks", [], |r| r.get::<_, i64>(0))
            .unwrap()
    };
    let t0 = std::time::Instant::now();
    while count() != 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the sweep did not delete the tree"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        reads.read_task(TaskId::from_u128(9)).unwrap().is_some(),
        "a tree not yet due was deleted"
    );
    assert!(store.load().unwrap().is_empty(), "a released tree was loaded");
}

/// The sweep finds due trees in the writer's maps, which a restart
/// rebuilds from the file: a tree released before the stop, due after
/// it, is deleted by the reopened store's sweep, and one not due stays.
#[test]
fn a_tree_released_before_a_restart_is_swept_once_due_after_it() {
    let dir = TempDir::new("finished-sweep-restart");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let root = |id: u128| StoredTask {
        id: TaskId::from_u128(id),
        root: TaskId::from_u128(id),
        parent: None,
        position: 0,
        version: 0,
        state: "{}".into(),
    };
    let store = open(&dir);
    for (id, delete_at) in [(1u128, now + 1_500), (2, now + 3_600_000)] {
        store.submit(WriteBatch {
            root: TaskId::from_u128(id),
            version: 1,
            ops: vec![
                WriteOp::PutTask(root(id)),
                WriteOp::Release {
                    root: TaskId::from_u128(id),
                    delete_at: Some(delete_at),
                },
            ],
        });
    }
    store.flush().unwrap();
    close(store);
    let store = open(&dir);
    let ids = || {
        let conn = rusqlite::Connection::open(dir.db()).unwrap();
        let mut st = conn.prepare("SELECT id FROM tasks ORDER BY seq").unwrap();
        st.query_map([], |r| r.get::<_, Vec<u8>>(0))
            .unwrap()
            .map(|b| TaskId::from_u128(u128::from_be_bytes(b.unwrap().try_into().unwrap())))
            .collect::<Vec<_>>()
    };
    assert_eq!(ids().len(), 2);
    let t0 = std::time::Instant::now();
    while ids() != vec![TaskId::from_u128(2)] {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the reopened store did not sweep the due tree: {:?}",
            ids()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        store
            .finished()
            .unwrap()
            .read_task(TaskId::from_u128(2))
            .unwrap()
            .is_some()
    );
}

/// A principal's trees and a task's children are found through the
/// writer's maps, not an index on the file: `list_roots` pages a
/// principal's trees newest first down to the oldest, `list_tasks` every
/// task of them in creation order with its children, each principal only
/// its own; a deleted tree, one past its deletion time and one whose owner
/// changed leave the list; and the same is read after a restart, the maps
/// rebuilt from the file.
#[test]
fn a_principals_trees_and_their_children_page_from_the_file_and_after_a_restart() {
    const TREES: u128 = 30;
    let dir = TempDir::new("finished-lists");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let owner_of = |i: u128| match i % 3 {
        0 => Some("alice"),
        1 => Some("bob"),
        _ => None,
    };
    // Tree `i`: root `1000 i`, children `+1` and `+2`, and `+3` under `+1`.
    let id = |i: u128, k: u128| TaskId::from_u128(1000 * (i + 1) + k);
    let task = |i: u128, k: u128, parent: Option<u128>, position: u32| StoredTask {
        id: id(i, k),
        root: id(i, 0),
        parent: parent.map(|p| id(i, p)),
        position,
        version: 0,
        state: format!("{{\"tree\":{i},\"task\":{k}}}"),
    };
    let batch = |i: u128, ops: Vec<WriteOp>| WriteBatch {
        root: id(i, 0),
        version: 1,
        ops,
    };
    let alice: Vec<u128> = (0..TREES)
        .filter(|i| owner_of(*i) == Some("alice") && ![3, 9, 12].contains(i))
        .collect();
    let bob: Vec<u128> = (0..TREES)
        .filter(|i| owner_of(*i) == Some("bob") || *i == 12)
        .collect();
    let check = |store: &SqliteStore, when: &str| {
        let reads = store.finished().unwrap();
        for (who, trees) in [("alice", &alice), ("bob", &bob)] {
            // Newest first, three at a time, down to the oldest.
            let mut listed = Vec::new();
            let mut before = i64::MAX;
            loop {
                let page = reads.list_roots(who, before, 3).unwrap();
                for r in &page {
                    assert_eq!(r.task.owner.as_deref(), Some(who), "{when}");
                    assert!(r.task.parent.is_none(), "{when}");
                    listed.push(r.task.id);
                }
                match page.last() {
                    Some(last) if page.len() == 3 => before = last.seq,
                    _ => break,
                }
            }
            let newest_first: Vec<TaskId> = trees.iter().rev().map(|i| id(*i, 0)).collect();
            assert_eq!(listed, newest_first, "{when}: {who}'s trees");
            // Every task of them, five at a time, with its children.
            let mut tasks = Vec::new();
            let mut after = (0, 0);
            loop {
                let page = reads.list_tasks(who, after, 5).unwrap();
                for (at, t) in &page {
                    assert!(*at > after, "{when}: the list goes forward");
                    tasks.push((t.id, t.children.clone()));
                }
                match page.last() {
                    Some((at, _)) if page.len() == 5 => after = *at,
                    _ => break,
                }
            }
            let expected: Vec<(TaskId, Vec<TaskId>)> = trees
                .iter()
                .flat_map(|i| {
                    [
                        (id(*i, 0), vec![id(*i, 1), id(*i, 2)]),
                        (id(*i, 1), vec![id(*i, 3)]),
                        (id(*i, 2), vec![]),
                        (id(*i, 3), vec![]),
                    ]
                })
                .collect();
            assert_eq!(tasks, expected, "{when}: {who}'s tasks");
        }
        assert!(reads.list_roots("carol", i64::MAX, 10).unwrap().is_empty());
        assert!(reads.list_tasks("carol", (0, 0), 10).unwrap().is_empty());
        // A point read names the children too, released or not, owned or not.
        for i in [1, 2, 4, 5] {
            let root = reads.read_task(id(i, 0)).unwrap().expect("stored");
            assert_eq!(root.children, vec![id(i, 1), id(i, 2)], "{when}: tree {i}");
            assert_eq!(root.owner.as_deref(), owner_of(i), "{when}: tree {i}");
            let child = reads.read_task(id(i, 1)).unwrap().expect("stored");
            assert_eq!(child.children, vec![id(i, 3)], "{when}: tree {i}");
            assert_eq!(child.state, format!("{{\"tree\":{i},\"task\":1}}"));
        }
        assert!(
            reads.read_task(id(3, 1)).unwrap().is_none(),
            "{when}: a deleted tree"
        );
        assert!(
            reads.read_task(id(9, 1)).unwrap().is_none(),
            "{when}: a tree past its deletion time"
        );
    };
    {
        let store = open(&dir);
        // The trees' rows interleave: every root, then every first
        // generation, then the grandchildren.
        for i in 0..TREES {
            store.submit(batch(
                i,
                vec![
                    WriteOp::PutTree(TreeMeta {
                        root: id(i, 0),
                        owner: owner_of(i).map(str::to_owned),
                        resumable: false,
                        launch: Some(json!({"name": format!("tree {i}")})),
                    }),
                    WriteOp::PutTask(task(i, 0, None, 0)),
                ],
            ));
        }
        for i in 0..TREES {
            store.submit(batch(
                i,
                vec![
                    WriteOp::PutTask(task(i, 1, Some(0), 0)),
                    WriteOp::PutTask(task(i, 2, Some(0), 1)),
                ],
            ));
        }
        for i in 0..TREES {
            store.submit(batch(i, vec![WriteOp::PutTask(task(i, 3, Some(1), 0))]));
        }
        // Half the trees let go of; alice's tree 9 past its deletion time;
        // her tree 3 deleted, her tree 12 given to bob.
        for i in (0..TREES).filter(|i| i % 2 == 0 || *i == 9) {
            let delete_at = if i == 9 { now - 1 } else { now + 3_600_000 };
            store.submit(batch(
                i,
                vec![WriteOp::Release {
                    root: id(i, 0),
                    delete_at: Some(delete_at),
                }],
            ));
        }
        store.submit(batch(3, vec![WriteOp::DeleteTree(id(3, 0))]));
        store.submit(batch(
            12,
            vec![WriteOp::PutTree(TreeMeta {
                root: id(12, 0),
                owner: Some("bob".into()),
                resumable: false,
                launch: None,
            })],
        ));
        store.flush().unwrap();
        check(&store, "as written");
    }
    // Started again on the file, after the sweep deleted tree 9, and again.
    let count = || {
        rusqlite::Connection::open(dir.db())
            .unwrap()
            .query_row("SELECT count(*) FROM tasks", [], |r| r.get::<_, i64>(0))
            .unwrap()
    };
    {
        let store = open(&dir);
        let t0 = std::time::Instant::now();
        while count() != 4 * (TREES as i64 - 2) {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the sweep did not delete tree 9"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        check(&store, "after the sweep");
    }
    let store = open(&dir);
    check(&store, "after a restart");
}
