//! The PostgreSQL store against a real server (`scripts/pg.sh` starts it;
//! without `SUBTASK_TEST_PG` these tests fail, they never skip): the
//! database's writer lock, a newer schema refused, an unreachable server
//! named without its password, and the real `subtask serve --db postgres://`
//! killed with SIGKILL and restarted on the same database.
//!
//! That the store holds exactly what the memory and SQLite stores hold,
//! across reopens and under concurrent writers, is `prop_store`'s.

mod support;

use std::time::Duration;

use serde_json::json;
use subtask::store::{PG_SCHEMA_VERSION, PostgresConfig, PostgresStore, StoreError, TaskStore};
use support::http::{Client, child_ids, is_terminal, text};
use support::pg::fresh_database;
use support::process::{ServerProcess, private_binary};
use support::tempdir::TempDir;

const GUARD: Duration = Duration::from_secs(60);

#[test]
fn a_second_process_on_one_database_is_refused() {
    let url = fresh_database();
    let first = PostgresStore::open(PostgresConfig::new(&url)).expect("opens");
    let second = PostgresStore::open(PostgresConfig {
        lock_wait: Duration::from_millis(300),
        ..PostgresConfig::new(&url)
    })
    .expect_err("refused");
    assert!(matches!(second, StoreError::Locked(_)), "{second}");
    assert!(
        second.to_string().contains("used by another subtask process"),
        "{second}"
    );
    drop(first);
    // The lock goes with the connection.
    PostgresStore::open(PostgresConfig::new(&url)).expect("opens once the first is closed");
}

#[test]
fn a_newer_schema_is_refused_and_nothing_is_written() {
    let url = fresh_database();
    drop(PostgresStore::open(PostgresConfig::new(&url)).expect("creates the schema"));
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .execute(
            "UPDATE subtask_schema SET version = $1",
            &[&(PG_SCHEMA_VERSION + 5)],
        )
        .unwrap();
    let e = PostgresStore::open(PostgresConfig::new(&url)).expect_err("refused");
    assert_eq!(
        e,
        StoreError::NewerSchema {
            found: PG_SCHEMA_VERSION + 5,
            supported: PG_SCHEMA_VERSION
        }
    );
    assert!(e.to_string().contains("upgrade subtask"), "{e}");
    let version: i64 = client
        .query_one("SELECT version FROM subtask_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, PG_SCHEMA_VERSION + 5, "the refusal changed nothing");
}

#[test]
fn an_unreachable_server_is_a_clear_error_without_the_password() {
    let port = support::process::free_port();
    let e = PostgresStore::open(PostgresConfig {
        connect_timeout: Duration::from_secs(2),
        ..PostgresConfig::new(format!("postgres://ann:hunter2@127.0.0.1:{port}/db"))
    })
    .expect_err("nothing listens there");
    let shown = e.to_string();
    assert!(matches!(e, StoreError::Io(_)), "{shown}");
    assert!(
        shown.contains(&format!("postgres://ann@127.0.0.1:{port}/db")),
        "{shown}"
    );
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn the_store_describes_itself_and_reads_back_what_it_wrote() {
    let url = fresh_database();
    let store = PostgresStore::open(PostgresConfig::new(&url)).unwrap();
    assert!(
        store.describe().starts_with("postgres://postgres@"),
        "{}",
        store.describe()
    );
    assert_eq!(store.load().unwrap(), Vec::new());
    assert_eq!(store.get(subtask::model::TaskId::random()).unwrap(), None);
}

/// The real binary on PostgreSQL: a tree is created, the server is
/// SIGKILLed while the tree runs, a new server on the same database (a new
/// cluster instance) takes it over once the dead one's lease expires (the
/// resumable `fanout` resumes in place) and the tree ends; a second server on the
/// database then answers for it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subtask_serve_on_postgres_survives_sigkill() {
    let dir = TempDir::new("pg-serve");
    let bin = private_binary(dir.0.as_path());
    // The synchronous client runs a runtime of its own: not on this one's threads.
    let url = tokio::task::spawn_blocking(fresh_database).await.unwrap();
    let args = vec!["--db".to_owned(), url.clone()];
    let log = dir.0.join("server.log");
    let server = ServerProcess::start(&bin, &args, &log, GUARD)
        .await
        .expect("starts on PostgreSQL");
    let client = Client::new(server.addr(), support::http::full_caps());
    let root = client
        .start_task(
            "fanout",
            json!({"width": 3, "depth": 1, "steps": 400, "stepMs": 5}),
        )
        .await;
    let children = client.until_children(&root, 3).await;
    assert!(server.kill());
    server.wait();
    let server = ServerProcess::start(&bin, &args, &log, GUARD)
        .await
        .expect("restarts");
    let client = Client::new(server.addr(), support::http::full_caps());
    let done = tokio::time::timeout(GUARD, client.until(&root, is_terminal))
        .await
        .expect("the recovered tree ends");
    assert_eq!(done["status"], "completed", "{done}");
    // The tree resumed in place: the same subtasks, run again where they
    // were and completed, nothing appended.
    assert_eq!(child_ids(&done), children, "resumed in place: {done}");
    for old in &children {
        let t = client.get(old).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    assert!(!text(&done["result"]).is_empty(), "{done}");
    // A second server on the same database joins the cluster (no writer
    // lock any more) and answers for the tree the first one holds, from
    // the stored rows.
    let second_log = dir.0.join("second.log");
    let second = ServerProcess::start(&bin, &args, &second_log, GUARD)
        .await
        .expect("a second instance joins");
    let other = Client::new(second.addr(), support::http::full_caps());
    assert_eq!(other.get(&root).await, client.get(&root).await);
    second.kill();
    server.kill();
}

fn tree_batch(root: subtask::model::TaskId, version: u64) -> subtask::store::WriteBatch {
    use subtask::store::{StoredTask, TreeMeta, WriteBatch, WriteOp};
    WriteBatch {
        root,
        version,
        ops: vec![
            WriteOp::PutTree(TreeMeta {
                root,
                owner: Some("ann".into()),
                resumable: false,
                launch: None,
            }),
            WriteOp::PutTask(StoredTask {
                id: root,
                root,
                parent: None,
                position: 0,
                version: 0,
                state: format!("state of {root}"),
            }),
        ],
    }
}

/// The server restarts under the store: a batch submitted while it is down
/// is not reported durable, the writer reconnects, and once the server is
/// back the batch is written and everything before it is still there.
#[test]
fn a_postgres_restart_is_waited_out_and_nothing_is_lost() {
    let server = support::pg_server::PgServer::start().expect("a PostgreSQL server of the test's own");
    let url = server.create_database("restart").unwrap();
    let store = PostgresStore::open(PostgresConfig::new(&url)).unwrap();
    let (a, b) = (subtask::model::TaskId::random(), subtask::model::TaskId::random());
    store.submit(tree_batch(a, 1));
    store.flush().expect("durable while the server is up");
    server.stop().expect("stop the server");
    let t = store.submit(tree_batch(b, 1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        store.is_durable(t),
        Ok(false),
        "not durable while the server is down"
    );
    server.restart().expect("start the server again");
    store.flush().expect("written once the server is back");
    let roots: Vec<_> = store.load().unwrap().iter().map(|t| t.meta.root).collect();
    assert!(roots.contains(&a) && roots.contains(&b), "{roots:?}");
    assert_eq!(store.get(b).unwrap().unwrap().version, 1);
}

/// The real binary on a PostgreSQL that restarts: the server goes on
/// without a restart of its own; tasks from before are there, new ones are
/// created and durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subtask_serve_goes_on_after_a_postgres_restart() {
    let pg = tokio::task::spawn_blocking(|| {
        let server = support::pg_server::PgServer::start().expect("a PostgreSQL server of the test's own");
        let url = server.create_database("serve_restart").unwrap();
        (server, url)
    })
    .await
    .unwrap();
    let (pg, url) = (std::sync::Arc::new(pg.0), pg.1);
    let dir = TempDir::new("pg-restart");
    let bin = private_binary(dir.0.as_path());
    let args = vec!["--db".to_owned(), url];
    let server = ServerProcess::start(&bin, &args, &dir.0.join("server.log"), GUARD)
        .await
        .expect("starts on PostgreSQL");
    let client = Client::new(server.addr(), support::http::full_caps());
    let before = client
        .start_task("fanout", json!({"width": 2, "depth": 1, "steps": 1, "stepMs": 1}))
        .await;
    let done = tokio::time::timeout(GUARD, client.until(&before, is_terminal))
        .await
        .unwrap();
    assert_eq!(done["status"], "completed");
    let p = pg.clone();
    tokio::task::spawn_blocking(move || {
        p.stop().expect("stop PostgreSQL");
        p.restart().expect("start PostgreSQL again");
    })
    .await
    .unwrap();
    // The first writes after the restart find the broken connection; the
    // store reconnects and the task is acknowledged once durable.
    let after = client
        .start_task("fanout", json!({"width": 2, "depth": 1, "steps": 1, "stepMs": 1}))
        .await;
    let done = tokio::time::timeout(GUARD, client.until(&after, is_terminal))
        .await
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(client.get(&before).await["status"], "completed");
    assert!(server.exited().is_none(), "the server went on");
    // And it is all in the database: a new server on it sees both trees.
    assert!(server.kill());
    server.wait();
    let server = ServerProcess::start(&bin, &args, &dir.0.join("server.log"), GUARD)
        .await
        .expect("restarts on PostgreSQL");
    let client = Client::new(server.addr(), support::http::full_caps());
    for id in [&before, &after] {
        assert_eq!(client.get(id).await["status"], "completed", "{id}");
    }
    server.kill();
}
