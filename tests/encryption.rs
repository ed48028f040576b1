//! Task state sealed at rest (`docs/encryption.md`), with the real
//! `subtask` binary on real SQLite files and the test PostgreSQL server: a
//! secret in a task's arguments and result is never in the database's
//! bytes; it reads back after a restart with the key; a wrong key and a
//! missing key are refused at start; a rotated key and `subtask
//! reencrypt` leave no value under the old key, and everything reads back
//! with the new key alone.
//!
//! The PostgreSQL tests need `SUBTASK_TEST_PG` (`scripts/pg.sh cargo test
//! --test encryption`) and fail without it.

#![cfg(all(unix, feature = "cli"))]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::http::{Client, full_caps, is_terminal};
use support::process::{ServerProcess, private_binary};
use support::tempdir::TempDir;

const GUARD: Duration = Duration::from_secs(60);

/// Three 32-byte keys, in base64: `k1`, another key under the id `k1`, `k2`.
const K1: &str = "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const K1_WRONG: &str = "k1 HwECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const K2: &str = "k2 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";

/// A secret no other test writes, so that finding it means it leaked.
fn secret(tag: &str) -> String {
    let n: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    format!("S3CRET-{tag}-{n:x}")
}

struct Env {
    dir: TempDir,
    bin: PathBuf,
    runs: std::cell::Cell<u32>,
}

impl Env {
    fn new(tag: &str) -> Env {
        let dir = TempDir::new(tag);
        let bin = private_binary(dir.0.as_path());
        Env {
            dir,
            bin,
            runs: std::cell::Cell::new(0),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.0.join(name)
    }

    /// A key file with `lines`.
    fn keys(&self, name: &str, lines: &[&str]) -> PathBuf {
        let p = self.path(name);
        let mut text = String::from("# test keys\n");
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(&p, text).unwrap();
        p
    }

    fn args(db: &str, keys: Option<&Path>, extra: &[&str]) -> Vec<String> {
        let mut a = vec!["--db".to_owned(), db.to_owned()];
        if let Some(k) = keys {
            a.push("--encryption-keys".into());
            a.push(k.display().to_string());
        }
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    }

    fn log(&self) -> PathBuf {
        self.runs.set(self.runs.get() + 1);
        self.path(&format!("serve-{}.log", self.runs.get()))
    }

    /// `subtask serve` on `db`, ready.
    async fn start(&self, db: &str, keys: Option<&Path>, extra: &[&str]) -> ServerProcess {
        let log = self.log();
        ServerProcess::start(&self.bin, &Self::args(db, keys, extra), &log, GUARD)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the server did not start: {e}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })
    }

    /// `subtask serve` on `db` must exit non-zero before it serves; its log.
    async fn refused(&self, db: &str, keys: Option<&Path>, extra: &[&str]) -> String {
        let log = self.log();
        let server = ServerProcess::spawn(&self.bin, &Self::args(db, keys, extra), &log);
        let deadline = Instant::now() + GUARD;
        let status = loop {
            if let Some(s) = server.exited() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!status.success(), "the server was not refused: {status}\n{text}");
        text
    }

    /// `subtask reencrypt --db DB --encryption-keys KEYS`: (success, stdout + stderr).
    fn reencrypt(&self, db: &str, keys: &Path) -> (bool, String) {
        let out = std::process::Command::new(&self.bin)
            .args(["reencrypt", "--db", db, "--encryption-keys"])
            .arg(keys)
            .output()
            .expect("run subtask reencrypt");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

/// Runs `deep_research` on a question carrying `secret` to its end; its
/// task id. Its result echoes the question.
async fn research(server: &ServerProcess, secret: &str) -> String {
    let c = Client::new(server.addr(), full_caps());
    let id = c
        .start_task(
            "deep_research",
            json!({"question": format!("what is {secret}?"), "breadth": 1, "depth": 1}),
        )
        .await;
    let deadline = Instant::now() + GUARD;
    loop {
        let t = c.get(&id).await;
        if is_terminal(&t) {
            assert_eq!(t["status"], "completed", "{t}");
            assert!(
                t.to_string().contains(secret),
                "the result echoes the secret: {t}"
            );
            return id;
        }
        assert!(Instant::now() < deadline, "task {id} did not end: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts a research paced to run for about 40 s (`"pace": 20`) whose
/// question carries `secret`; its task id, once it is working.
async fn slow_research(server: &ServerProcess, secret: &str) -> String {
    let c = Client::new(server.addr(), full_caps());
    let id = c
        .start_task(
            "deep_research",
            json!({"question": format!("what is {secret}?"), "breadth": 1, "depth": 1, "pace": 20}),
        )
        .await;
    let t = c.get(&id).await;
    assert!(!is_terminal(&t), "the paced research ended at once: {t}");
    id
}

/// `tasks/get` of `id`: completed, with `secret` in its result.
async fn reads_back(server: &ServerProcess, id: &str, secret: &str) {
    let c = Client::new(server.addr(), full_caps());
    let t: Value = c.get(id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        t["result"].to_string().contains(secret),
        "task {id} reads back with its secret: {t}"
    );
}

/// Stops a server the way an operator would (SIGTERM), and waits.
fn stop(server: ServerProcess) {
    // SIGTERM drains; a kill afterwards (the drop) is a no-op once it exited.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status();
    let deadline = Instant::now() + GUARD;
    while server.exited().is_none() {
        assert!(Instant::now() < deadline, "the server did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every file of the SQLite database at `db` (the file, its `-wal`, `-shm`
/// and lock file): (name, bytes).
fn database_files(db: &Path) -> Vec<(String, Vec<u8>)> {
    let dir = db.parent().unwrap();
    let name = db.file_name().unwrap().to_str().unwrap();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let n = entry.file_name().to_string_lossy().into_owned();
        if n.starts_with(name) {
            files.push((n, std::fs::read(entry.path()).unwrap()));
        }
    }
    assert!(!files.is_empty());
    files
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The database files of `db` that hold `needle`.
fn files_with(db: &Path, needle: &str) -> Vec<String> {
    database_files(db)
        .into_iter()
        .filter(|(_, bytes)| contains(bytes, needle))
        .map(|(n, _)| n)
        .collect()
}

/// Rows of the SQLite database whose stored values are sealed with key
/// `id`, per table.
fn sqlite_rows_under(db: &Path, id: &str) -> (i64, i64) {
    let c = rusqlite::Connection::open(db).unwrap();
    let pattern = format!("sealed:v1:{id}:%");
    let tasks: i64 = c
        .query_row(
            "SELECT count(*) FROM tasks WHERE state LIKE ?1 OR launch LIKE ?1",
            [&pattern],
            |r| r.get(0),
        )
        .unwrap();
    let journal: i64 = c
        .query_row(
            "SELECT count(*) FROM journal WHERE entry LIKE ?1",
            [&pattern],
            |r| r.get(0),
        )
        .unwrap();
    (tasks, journal)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_sealed_database_keeps_no_secret_refuses_wrong_keys_and_rotates() {
    let env = Env::new("enc-sqlite");
    let db_path = env.path("tasks.db");
    let db = db_path.to_str().unwrap().to_owned();
    let k1 = env.keys("k1.keys", &[K1]);

    // A task whose arguments and result carry a secret.
    let first = secret("sqlite-1");
    let server = env.start(&db, Some(&k1), &[]).await;
    let id1 = research(&server, &first).await;
    // While it runs, and after it stopped: in no byte of the database.
    assert_eq!(files_with(&db_path, &first), Vec::<String>::new());
    server.kill();
    server.wait();
    let files = database_files(&db_path);
    assert!(
        files.iter().any(|(n, b)| n.ends_with("-wal") && !b.is_empty()),
        "the log is there to be searched: {:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert_eq!(files_with(&db_path, &first), Vec::<String>::new());
    assert!(sqlite_rows_under(&db_path, "k1").0 > 0);

    // Restart with the key: it reads back.
    let server = env.start(&db, Some(&k1), &[]).await;
    reads_back(&server, &id1, &first).await;
    stop(server);

    // The same id with other bytes, and no key at all: refused, naming k1.
    let wrong = env.keys("wrong.keys", &[K1_WRONG]);
    let log = env.refused(&db, Some(&wrong), &[]).await;
    assert!(log.contains("encryption key") && log.contains("\"k1\""), "{log}");
    let log = env.refused(&db, None, &[]).await;
    assert!(
        log.contains("\"k1\"") && log.contains("--encryption-keys"),
        "{log}"
    );
    // A key file without k1 (k2 only): refused too.
    let only2 = env.keys("k2.keys", &[K2]);
    let log = env.refused(&db, Some(&only2), &[]).await;
    assert!(log.contains("\"k1\""), "{log}");

    // Rotation: k2 first, k1 kept for reading.
    let rotated = env.keys("rotated.keys", &[K2, K1]);
    let server = env.start(&db, Some(&rotated), &[]).await;
    reads_back(&server, &id1, &first).await;
    let second = secret("sqlite-2");
    let id2 = research(&server, &second).await;
    // A finished tree's journal is deleted as it ends: a research still
    // running at the stop keeps one, sealed with k2.
    let third = secret("sqlite-3");
    let live = slow_research(&server, &third).await;
    let deadline = Instant::now() + GUARD;
    while sqlite_rows_under(&db_path, "k2").1 == 0 {
        assert!(
            Instant::now() < deadline,
            "no journal row under k2 while {live} runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The running server holds the database: reencrypt is refused.
    let (ok, out) = env.reencrypt(&db, &rotated);
    assert!(!ok && out.contains("in use"), "{out}");
    stop(server);
    assert!(sqlite_rows_under(&db_path, "k1").0 > 0, "rows under k1");
    assert!(sqlite_rows_under(&db_path, "k2").0 > 0, "rows under k2");
    assert!(sqlite_rows_under(&db_path, "k2").1 > 0, "journal rows under k2");

    // Re-encryption: nothing under k1 afterwards, not even in a free page.
    let (ok, out) = env.reencrypt(&db, &rotated);
    assert!(ok, "{out}");
    assert!(out.contains("no longer needed: k1"), "{out}");
    assert_eq!(sqlite_rows_under(&db_path, "k1"), (0, 0));
    assert_eq!(files_with(&db_path, "sealed:v1:k1:"), Vec::<String>::new());
    for s in [&first, &second, &third] {
        assert_eq!(files_with(&db_path, s), Vec::<String>::new());
    }

    // Everything reads back with k2 alone.
    let server = env.start(&db, Some(&only2), &[]).await;
    reads_back(&server, &id1, &first).await;
    reads_back(&server, &id2, &second).await;
    stop(server);
    // And the old key file is refused now (k2 is missing from it).
    let log = env.refused(&db, Some(&k1), &[]).await;
    assert!(log.contains("\"k2\""), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_clear_database_opened_with_a_key_is_sealed_by_reencrypt() {
    let env = Env::new("enc-clear");
    let db_path = env.path("tasks.db");
    let db = db_path.to_str().unwrap().to_owned();
    let clear = secret("clear");

    // Without a key the secret is on disk: the search would find a leak.
    let server = env.start(&db, None, &[]).await;
    let id1 = research(&server, &clear).await;
    stop(server);
    assert!(
        !files_with(&db_path, &clear).is_empty(),
        "the control: written in clear"
    );

    // With a key: the clear rows read, new ones are sealed.
    let k1 = env.keys("k1.keys", &[K1]);
    let server = env.start(&db, Some(&k1), &[]).await;
    reads_back(&server, &id1, &clear).await;
    let sealed = secret("sealed");
    let id2 = research(&server, &sealed).await;
    stop(server);
    assert_eq!(files_with(&db_path, &sealed), Vec::<String>::new());

    // reencrypt seals the clear rows, and leaves no page of them behind.
    let (ok, out) = env.reencrypt(&db, &k1);
    assert!(ok, "{out}");
    assert_eq!(files_with(&db_path, &clear), Vec::<String>::new());
    let server = env.start(&db, Some(&k1), &[]).await;
    reads_back(&server, &id1, &clear).await;
    reads_back(&server, &id2, &sealed).await;
    stop(server);
    // Sealed now: refused without the key.
    let log = env.refused(&db, None, &[]).await;
    assert!(log.contains("\"k1\""), "{log}");
}

/// Every row of every `subtask_*` table of the database at `url`, as text.
fn pg_dump(url: &str) -> String {
    let url = url.to_owned();
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        let tables: Vec<String> = c
            .query(
                "SELECT table_name::text FROM information_schema.tables
                 WHERE table_schema = current_schema() AND table_name LIKE 'subtask\\_%'
                 ORDER BY table_name",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(tables.iter().any(|t| t == "subtask_tasks"), "{tables:?}");
        let mut out = String::new();
        for t in tables {
            for r in c.query(&format!("SELECT x::text FROM {t} x"), &[]).unwrap() {
                out.push_str(&t);
                out.push(' ');
                out.push_str(r.get::<_, &str>(0));
                out.push('\n');
            }
        }
        out
    })
    .join()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_sealed_database_keeps_no_secret_refuses_wrong_keys_and_rotates() {
    let env = Env::new("enc-pg");
    let url = tokio::task::spawn_blocking(support::pg::fresh_database)
        .await
        .unwrap();
    let instance = uuid::Uuid::new_v4().to_string();
    let member = ["--instance-id", instance.as_str()];
    let k1 = env.keys("k1.keys", &[K1]);

    let first = secret("pg-1");
    let server = env.start(&url, Some(&k1), &member).await;
    let id1 = research(&server, &first).await;
    let dump = pg_dump(&url);
    assert!(!dump.contains(&first), "the secret is stored in clear:\n{dump}");
    assert!(dump.contains("sealed:v1:k1:"), "{dump}");
    assert!(
        dump.contains("subtask_journal"),
        "journal rows are searched too:\n{dump}"
    );
    stop(server);
    assert!(!pg_dump(&url).contains(&first));

    // Restart with the key (the same instance id takes its trees back).
    let server = env.start(&url, Some(&k1), &member).await;
    reads_back(&server, &id1, &first).await;
    stop(server);

    let wrong = env.keys("wrong.keys", &[K1_WRONG]);
    let log = env.refused(&url, Some(&wrong), &member).await;
    assert!(log.contains("encryption key") && log.contains("\"k1\""), "{log}");
    let log = env.refused(&url, None, &member).await;
    assert!(
        log.contains("\"k1\"") && log.contains("--encryption-keys"),
        "{log}"
    );

    // Rotation, and re-encryption while the instance (with the new key
    // file) serves.
    let rotated = env.keys("rotated.keys", &[K2, K1]);
    let server = env.start(&url, Some(&rotated), &member).await;
    reads_back(&server, &id1, &first).await;
    let second = secret("pg-2");
    let id2 = research(&server, &second).await;
    let dump = pg_dump(&url);
    assert!(
        dump.contains("sealed:v1:k1:") && dump.contains("sealed:v1:k2:"),
        "{dump}"
    );
    let (ok, out) = env.reencrypt(&url, &rotated);
    assert!(ok, "{out}");
    assert!(out.contains("no longer needed: k1"), "{out}");
    let dump = pg_dump(&url);
    assert!(
        !dump.contains("sealed:v1:k1:"),
        "a value under k1 is left:\n{dump}"
    );
    assert!(!dump.contains(&first) && !dump.contains(&second), "{dump}");
    reads_back(&server, &id1, &first).await;
    stop(server);

    let only2 = env.keys("k2.keys", &[K2]);
    let server = env.start(&url, Some(&only2), &member).await;
    reads_back(&server, &id1, &first).await;
    reads_back(&server, &id2, &second).await;
    stop(server);
    let log = env.refused(&url, Some(&k1), &member).await;
    assert!(log.contains("\"k2\""), "{log}");
}

/// Two instances with one key file: a steer passed from B to the holder A
/// through the inbox is sealed there (seen while A is stopped, so that the
/// row waits), opens on A, and the result read through B (a non-holder's
/// read) carries it; no row of the database holds it in clear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_commands_between_instances_are_sealed_in_the_inbox() {
    let env = Env::new("enc-inbox");
    let url = tokio::task::spawn_blocking(support::pg::fresh_database)
        .await
        .unwrap();
    let keys = env.keys("k1.keys", &[K1]);
    let tokens = env.path("tokens");
    std::fs::write(&tokens, "ann-token ann\n").unwrap();
    let tokens = tokens.to_str().unwrap().to_owned();
    let a = env.start(&url, Some(&keys), &["--tokens", &tokens]).await;
    let b = env.start(&url, Some(&keys), &["--tokens", &tokens]).await;
    let ann_a = Client::new(a.addr(), full_caps()).with_token("ann-token");
    let ann_b = Client::new(b.addr(), full_caps()).with_token("ann-token");
    let root = ann_a
        .start_task(
            "fanout",
            json!({"width": 0, "depth": 0, "steps": 80, "stepMs": 25}),
        )
        .await;
    assert_eq!(ann_b.get(&root).await["status"], "working");

    let steer = secret("steer");
    // A stops (for less than its lease): B's command waits in the inbox.
    let kill = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(a.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    };
    kill("STOP");
    let sent = {
        let (c, root, steer) = (ann_b.clone(), root.clone(), steer.clone());
        tokio::spawn(async move {
            c.call("tasks/steer", json!({"taskId": root, "message": steer}))
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    let dump = loop {
        let dump = pg_dump(&url);
        if dump.lines().any(|l| l.starts_with("subtask_inbox ")) {
            break dump;
        }
        if Instant::now() > deadline {
            kill("CONT");
            panic!("the command never reached the inbox:\n{dump}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    kill("CONT");
    let inbox: Vec<&str> = dump.lines().filter(|l| l.starts_with("subtask_inbox ")).collect();
    assert!(
        inbox.iter().all(|l| l.contains("sealed:v1:k1:")),
        "the inbox row is sealed: {inbox:?}"
    );
    assert!(!dump.contains(&steer), "the steer is stored in clear:\n{dump}");
    sent.await.unwrap();

    // The holder applied it; the result read through B carries it.
    let deadline = Instant::now() + GUARD;
    let done = loop {
        let t = ann_b.get(&root).await;
        if is_terminal(&t) {
            break t;
        }
        assert!(Instant::now() < deadline, "the task did not end: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["steers"],
        json!([steer]),
        "{done}"
    );
    let dump = pg_dump(&url);
    assert!(!dump.contains(&steer), "the steer is stored in clear:\n{dump}");
    stop(b);
    stop(a);
}

/// A sealed value moved to another task's row (by someone with write
/// access to the file) does not open there, and one task's state is never
/// served as another's: a finished tree, which the file answers for, is
/// refused when it is read, naming the key (the others still read); a
/// tree the server loads at start (one still running at the stop) makes
/// the start refused, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_sealed_value_moved_to_another_row_is_refused() {
    let env = Env::new("enc-moved");
    let db_path = env.path("tasks.db");
    let db = db_path.to_str().unwrap().to_owned();
    let k1 = env.keys("k1.keys", &[K1]);
    let server = env.start(&db, Some(&k1), &[]).await;
    let one = secret("moved-1");
    let first = research(&server, &one).await;
    let second = research(&server, &secret("moved-2")).await;
    let live = slow_research(&server, &secret("moved-3")).await;
    stop(server);
    let move_state = |from: &str, to: &str| {
        let c = rusqlite::Connection::open(&db_path).unwrap();
        let id = |s: &str| uuid::Uuid::parse_str(s).unwrap().as_bytes().to_vec();
        let state: String = c
            .query_row("SELECT state FROM tasks WHERE id = ?1", [id(from)], |r| r.get(0))
            .unwrap();
        assert!(state.starts_with("sealed:v1:k1:"), "{state}");
        let n = c
            .execute(
                "UPDATE tasks SET state = ?1 WHERE id = ?2",
                rusqlite::params![state, id(to)],
            )
            .unwrap();
        assert_eq!(n, 1);
    };
    // Into a finished tree's row: refused as it is read.
    move_state(&first, &second);
    let server = env.start(&db, Some(&k1), &[]).await;
    let c = Client::new(server.addr(), full_caps());
    let (_, error) = c.error("tasks/get", json!({"taskId": second})).await;
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("the task store could not be read")
            && message.contains("does not open with key \"k1\""),
        "{error}"
    );
    reads_back(&server, &first, &one).await;
    stop(server);
    // Into the root row of the tree still running: the start is refused.
    move_state(&first, &live);
    let log = env.refused(&db, Some(&k1), &[]).await;
    assert!(log.contains("does not open with key \"k1\""), "{log}");
}
