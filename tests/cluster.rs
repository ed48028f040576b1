//! Several `subtask serve` processes on one PostgreSQL database (a cluster,
//! `docs/scale-out.md`): each promise shown on its own with the real binary.
//! The fault test with every kind of request and fault at random moments is
//! `tests/scale_out.rs`.
//!
//! Needs `SUBTASK_TEST_PG` (`scripts/pg.sh cargo test --test cluster`); fails
//! without it.

#![cfg(unix)]

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use support::http::{Client, child_ids, full_caps, is_terminal};
use support::process::{ServerProcess, private_binary};
use support::tempdir::TempDir;

const GUARD: Duration = Duration::from_secs(60);

struct Cluster {
    dir: TempDir,
    bin: PathBuf,
    url: String,
}

impl Cluster {
    async fn new(tag: &str) -> Cluster {
        let dir = TempDir::new(tag);
        let bin = private_binary(dir.0.as_path());
        let url = tokio::task::spawn_blocking(support::pg::fresh_database)
            .await
            .unwrap();
        Cluster { dir, bin, url }
    }

    fn tokens(&self) -> PathBuf {
        let path = self.dir.0.join("tokens");
        std::fs::write(&path, "ann-token ann\nbob-token bob\n").unwrap();
        path
    }

    /// An instance with `extra` arguments (`--lease`, `--instance-id`, `--tokens`).
    async fn start(&self, name: &str, extra: &[&str]) -> ServerProcess {
        // With the journal's debug lines: what handlers ran (`support::redone`).
        self.start_logging(name, extra, support::redone::RUST_LOG).await
    }

    /// [`Cluster::start`] with the log filter `rust_log`.
    async fn start_logging(&self, name: &str, extra: &[&str], rust_log: &str) -> ServerProcess {
        self.start_with(&self.url, name, extra, rust_log).await
    }

    /// [`Cluster::start`] reaching the database at `db` (through a relay).
    async fn start_on(&self, db: &str, name: &str, extra: &[&str]) -> ServerProcess {
        self.start_with(db, name, extra, support::redone::RUST_LOG).await
    }

    async fn start_with(&self, db: &str, name: &str, extra: &[&str], rust_log: &str) -> ServerProcess {
        let mut args = vec!["--db".to_owned(), db.to_owned()];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let log = self.log(name);
        let env = [("RUST_LOG", rust_log)];
        ServerProcess::start_env(&self.bin, &args, &log, GUARD, &env)
            .await
            .unwrap_or_else(|e| {
                let text = read(&log);
                panic!(
                    "instance {name} starts: {e}; its log ends:\n{}",
                    tail(&text, 4000)
                )
            })
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.0.join(format!("{name}.log"))
    }
}

fn signal(server: &ServerProcess, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(server.pid().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// Polls `client` until `pred` holds for task `id` (a hang guard of `GUARD`).
async fn until(client: &Client, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let t = client.get(id).await;
        if pred(&t) {
            return t;
        }
        assert!(start.elapsed() < GUARD, "task {id} never got there: {t}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Any instance answers for a tree another one holds: the same `tasks/get`,
/// commands applied once by the holder (steer delivered exactly once,
/// pause and resume of the whole tree), a `subscriptions/listen` stream
/// that follows the tree to its end, a 2025-11-25 `tasks/list` that shows
/// the same pages on both instances; and a principal never sees another's
/// tree on either instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_instance_answers_for_any_tree_and_principals_stay_apart() {
    let c = Cluster::new("cluster-any").await;
    let tokens = c.tokens();
    let tokens = tokens.to_str().unwrap();
    let a = c.start("a", &["--tokens", tokens]).await;
    let b = c.start("b", &["--tokens", tokens]).await;
    let ann_a = Client::new(a.addr(), full_caps()).with_token("ann-token");
    let ann_b = Client::new(b.addr(), full_caps()).with_token("ann-token");
    let bob_b = Client::new(b.addr(), full_caps()).with_token("bob-token");
    let bob_a = Client::new(a.addr(), full_caps()).with_token("bob-token");

    let root = ann_a
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 60, "stepMs": 25}),
        )
        .await;
    let children = ann_a.until_children(&root, 2).await;
    // The listen stream is opened on the instance that does not hold the tree.
    let mut notes = ann_b.listen(&[&root]).await;

    // Reads through B match A's (the fields that do not move between two reads).
    let via_b = ann_b.get(&root).await;
    assert_eq!(via_b["taskId"], root.as_str());
    assert_eq!(child_ids(&via_b), children);
    for child in &children {
        let t = ann_b.get(child).await;
        assert_eq!(t["parentTaskId"], root.as_str(), "{t}");
    }

    // Another principal: unknown on both instances, for reads and commands.
    for (client, what) in [(&bob_b, "B"), (&bob_a, "A")] {
        let (_, e) = client.error("tasks/get", json!({"taskId": root})).await;
        assert_eq!(
            e["message"], "Failed to retrieve task: Task not found",
            "{what}: {e}"
        );
        let (_, e) = client
            .error("tasks/steer", json!({"taskId": root, "message": "not yours"}))
            .await;
        assert_eq!(
            e["message"], "Failed to retrieve task: Task not found",
            "{what}: {e}"
        );
    }

    // A steer through B is applied by A once.
    ann_b
        .call("tasks/steer", json!({"taskId": root, "message": "via B"}))
        .await;
    // Pause through B: the whole tree turns paused (seen through A).
    let paused = ann_b.call("tasks/pause", json!({"taskId": root})).await;
    assert_eq!(paused["taskId"], root.as_str(), "{paused}");
    for id in std::iter::once(&root).chain(&children) {
        until(&ann_a, id, |t| t["status"] == "paused").await;
    }
    let resumed = ann_b.call("tasks/resume", json!({"taskId": root})).await;
    assert_ne!(resumed["status"], "paused", "{resumed}");
    // A bad command through B gets the holder's error.
    let (_, e) = ann_b.error("tasks/resume", json!({"taskId": root})).await;
    assert_eq!(e["code"], -32602, "resuming a running task: {e}");

    let done = until(&ann_b, &root, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["steers"],
        json!(["via B"]),
        "the steer passed on through B was delivered exactly once: {done}"
    );
    // Once terminal, both instances give the same answer, byte for byte.
    assert_eq!(ann_a.get(&root).await, ann_b.get(&root).await);
    for child in &children {
        assert_eq!(ann_a.get(child).await, ann_b.get(child).await);
    }

    // The stream on B saw the whole tree end (every task terminal).
    let mut terminal = std::collections::HashSet::new();
    let deadline = Instant::now() + GUARD;
    while terminal.len() < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        let note = tokio::time::timeout(left, notes.recv())
            .await
            .expect("notifications on B")
            .expect("the stream stays open until the tree ends");
        let task = &note["params"];
        if is_terminal(task) {
            terminal.insert(task["taskId"].as_str().unwrap().to_owned());
        }
    }
    assert!(terminal.contains(&root), "{terminal:?}");

    a.kill();
    b.kill();
}

/// A TCP relay to PostgreSQL that, once armed with some bytes, cuts the
/// connection instead of passing on a reply that carries them (the first,
/// or the first after `skip` of them have passed): the
/// server ran (and, for an autocommit statement, committed: its reply
/// leaves the server after the commit) the statement that read them, and
/// the client never hears of it, as when the server restarts or the
/// network fails at that moment.
struct LossyRelay {
    addr: std::net::SocketAddr,
    needle: std::sync::Arc<parking_lot::Mutex<Option<Needle>>>,
    cuts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// What a [`LossyRelay`] looks for.
struct Needle {
    bytes: Vec<u8>,
    /// Replies carrying `bytes` to pass on before the one cut.
    skip: usize,
}

impl LossyRelay {
    async fn start(upstream: std::net::SocketAddr) -> LossyRelay {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let needle: Arc<parking_lot::Mutex<Option<Needle>>> = Arc::default();
        let cuts = Arc::new(AtomicUsize::new(0));
        let (a, n) = (needle.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let (needle, cuts) = (a.clone(), n.clone());
                tokio::spawn(async move {
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    let up = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    // The last bytes of the previous read: a needle split
                    // between two reads is still seen.
                    let mut tail: Vec<u8> = Vec::new();
                    while let Ok(read) = from_server.read(&mut buf).await {
                        if read == 0 {
                            break;
                        }
                        let mut window = std::mem::take(&mut tail);
                        window.extend_from_slice(&buf[..read]);
                        let keep = {
                            let mut armed = needle.lock();
                            if let Some(n) = armed.as_mut()
                                && window.windows(n.bytes.len()).any(|w| w == n.bytes)
                            {
                                if n.skip == 0 {
                                    *armed = None;
                                    cuts.fetch_add(1, Ordering::AcqRel);
                                    break;
                                }
                                n.skip -= 1;
                            }
                            armed.as_ref().map_or(0, |n| n.bytes.len() - 1)
                        };
                        tail = window[window.len().saturating_sub(keep)..].to_vec();
                        if to_client.write_all(&buf[..read]).await.is_err() {
                            break;
                        }
                    }
                    up.abort();
                });
            }
        });
        LossyRelay { addr, needle, cuts }
    }

    /// Cuts the reply after the next `skip` replies that carry `bytes`.
    fn arm(&self, bytes: Vec<u8>, skip: usize) {
        *self.needle.lock() = Some(Needle { bytes, skip });
    }

    fn cuts(&self) -> usize {
        self.cuts.load(std::sync::atomic::Ordering::Acquire)
    }

    /// `url` (`postgres://user@host:port/db`) through this relay.
    fn url(&self, url: &str) -> String {
        let (scheme_user, rest) = url.split_once('@').unwrap();
        let (_, db) = rest.split_once('/').unwrap();
        format!("{scheme_user}@{}/{db}", self.addr)
    }
}

/// The address in `url` (`postgres://user@host:port/db`).
fn pg_addr(url: &str) -> std::net::SocketAddr {
    let (_, rest) = url.split_once('@').unwrap();
    let (host, _) = rest.split_once('/').unwrap();
    host.parse().unwrap()
}

/// A command passed on through another instance keeps its answer when the
/// connection breaks just as the answer is taken: the holder answered, the
/// requester's statement that took the answer committed on the server,
/// and its reply was lost (B reaches PostgreSQL through a relay that cuts
/// the connection instead of passing that reply on). The requester asks
/// again on a new connection and still gets the holder's answer, instead
/// of waiting for one that was already taken (a steer lost that way in a
/// `scale_out` round, with PostgreSQL stopping at that moment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_survives_a_connection_lost_as_it_is_taken() {
    let c = Cluster::new("cluster-lost-reply").await;
    let tokens = c.tokens();
    let tokens = tokens.to_str().unwrap();
    let relay = LossyRelay::start(pg_addr(&c.url)).await;
    let a = c.start("a", &["--tokens", tokens]).await;
    let b = c.start_on(&relay.url(&c.url), "b", &["--tokens", tokens]).await;
    let ann_a = Client::new(a.addr(), full_caps()).with_token("ann-token");
    let ann_b = Client::new(b.addr(), full_caps()).with_token("ann-token");
    let root = ann_a
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 200, "stepMs": 25}),
        )
        .await;
    ann_a.until_children(&root, 2).await;
    until(&ann_b, &root, |t| t["status"] == "working").await;

    // The holder's answer as B reads it from the inbox (jsonb's text).
    relay.arm(format!("\"taskId\": \"{root}\"").into_bytes(), 0);
    let asked = Instant::now();
    // B gives up after 30 s, its client after 20 s: 15 s is plenty.
    let paused = tokio::time::timeout(
        Duration::from_secs(15),
        ann_b.call("tasks/pause", json!({"taskId": root})),
    )
    .await;
    let Ok(paused) = paused else {
        let text = read(&c.log("b"));
        panic!(
            "the pause through B was not answered within 15 s ({} cuts); B's log ends:\n{}",
            relay.cuts(),
            tail(&text, 3000)
        );
    };
    assert_eq!(paused["taskId"], root.as_str(), "{paused}");
    assert_eq!(
        relay.cuts(),
        1,
        "the relay cut B's connection as a command's answer was taken"
    );
    // Well within the 30 s B waits for an answer before giving up.
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the answer took {:?}",
        asked.elapsed()
    );
    until(&ann_a, &root, |t| t["status"] == "paused").await;
    let resumed = ann_b.call("tasks/resume", json!({"taskId": root})).await;
    assert_ne!(resumed["status"], "paused", "{resumed}");
    let done = until(&ann_b, &root, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    a.kill();
    b.kill();
}

/// Trees a takeover claimed are run even when loading them failed: B
/// claims the trees of A (killed), and the connection breaks as B reads
/// what it claimed (the relay cuts that reply). The claim is committed, so
/// B holds trees it did not load, and no later claim takes a tree from a
/// live holder: before the fix nobody ran them again and commands to them
/// waited in the inbox for ever. B's next look loads the trees it holds and
/// does not run, and the tree ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_claimed_by_an_interrupted_takeover_still_run() {
    let c = Cluster::new("cluster-claim-cut").await;
    let relay = LossyRelay::start(pg_addr(&c.url)).await;
    let a = c.start("a", &["--lease", "2"]).await;
    let b = c.start_on(&relay.url(&c.url), "b", &["--lease", "2"]).await;
    let on_a = Client::new(a.addr(), full_caps());
    let on_b = Client::new(b.addr(), full_caps());
    let root = on_a
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 100, "stepMs": 20}),
        )
        .await;
    on_a.until_children(&root, 2).await;
    until(&on_b, &root, |t| t["status"] == "working").await;
    // The root's id as PostgreSQL sends a uuid column (binary): B's claim
    // returns it, then B's read of the claimed trees carries it; that
    // second reply is cut. Nothing else reads the tree through B meanwhile.
    let id = uuid::Uuid::parse_str(&root).unwrap();
    relay.arm(id.as_bytes().to_vec(), 1);
    a.kill();
    let deadline = Instant::now() + GUARD;
    while relay.cuts() == 0 {
        assert!(
            Instant::now() < deadline,
            "B never read the trees it claimed; its log ends:\n{}",
            tail(&read(&c.log("b")), 3000)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let start = Instant::now();
    let done = loop {
        let t = on_b.get(&root).await;
        if is_terminal(&t) {
            break t;
        }
        assert!(
            start.elapsed() < GUARD,
            "the claimed tree never ran again: {t}; B's log ends:\n{}",
            tail(&read(&c.log("b")), 3000)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert!(
        read(&c.log("b")).contains("loaded trees an interrupted takeover had claimed"),
        "B loaded the tree by the way this test is about"
    );
    b.kill();
}

fn tail(text: &str, n: usize) -> &str {
    let mut at = text.len().saturating_sub(n);
    while !text.is_char_boundary(at) {
        at += 1;
    }
    &text[at..]
}

/// `f` on a connection of its own to the test's database, off the async
/// threads.
async fn db<T: Send + 'static>(url: &str, f: impl FnOnce(&mut postgres::Client) -> T + Send + 'static) -> T {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || f(&mut postgres::Client::connect(&url, postgres::NoTls).unwrap()))
        .await
        .unwrap()
}

/// Finished trees leave their holder's memory (`--keep-finished`) on a
/// cluster too, and every instance answers for them from the database as
/// the holder did from memory: the same snapshots, the same answers to
/// commands, nothing for another principal. A restart does not load them.
/// From their deletion time on they read as absent everywhere, and the
/// sweep deletes their rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_trees_leave_memory_and_every_instance_answers_for_them() {
    let c = Cluster::new("cluster-finished").await;
    let tokens = c.tokens();
    let tokens = tokens.to_str().unwrap();
    let id = uuid::Uuid::new_v4().to_string();
    let a_args = ["--tokens", tokens, "--instance-id", &id, "--keep-finished", "3"];
    let a = c.start("a", &a_args).await;
    let b = c.start("b", &["--tokens", tokens]).await;
    let ann_a = Client::new(a.addr(), full_caps()).with_token("ann-token");
    let ann_b = Client::new(b.addr(), full_caps()).with_token("ann-token");
    let root = ann_a
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 2, "stepMs": 10}),
        )
        .await;
    let children = ann_a.until_children(&root, 2).await;
    let ids: Vec<&str> = std::iter::once(root.as_str())
        .chain(children.iter().map(String::as_str))
        .collect();

    // From A's memory: the snapshots, and what commands get.
    until(&ann_a, &root, is_terminal).await;
    let mut shown = Vec::new();
    for id in &ids {
        shown.push(ann_a.get(id).await);
    }
    let steered = ann_a
        .error("tasks/steer", json!({"taskId": root, "message": "late"}))
        .await;
    let cancelled = ann_a.call("tasks/cancel", json!({"taskId": children[0]})).await;
    assert_eq!(
        support::http::retained(a.addr(), Some("ann-token")).await,
        3,
        "the answers above came from A's memory"
    );

    // Let go: out of A's memory, marked in its root's row.
    let deadline = Instant::now() + GUARD;
    while support::http::retained(a.addr(), Some("ann-token")).await > 0 {
        assert!(Instant::now() < deadline, "A never let the finished tree go");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let task = uuid::Uuid::parse_str(&root).unwrap();
    let marked = db(&c.url, move |c| {
        c.query("SELECT delete_at FROM subtask_released WHERE root = $1", &[&task])
            .unwrap()
            .len()
    })
    .await;
    assert_eq!(marked, 1, "the tree is marked released");

    // The same answers from the database, on the holder and on B.
    let check = |client: Client, what: &'static str| {
        let (ids, shown, steered, cancelled, root, child) = (
            ids.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(),
            shown.clone(),
            steered.clone(),
            cancelled.clone(),
            root.clone(),
            children[0].clone(),
        );
        async move {
            for (id, before) in ids.iter().zip(&shown) {
                assert_eq!(&client.get(id).await, before, "{what}: task {id}");
            }
            let again = client
                .error("tasks/steer", json!({"taskId": root, "message": "late"}))
                .await;
            assert_eq!(again, steered, "{what}: a steer of a finished task");
            let again = client.call("tasks/cancel", json!({"taskId": child})).await;
            assert_eq!(again, cancelled, "{what}: a cancel of a finished task");
        }
    };
    check(ann_a.clone(), "A, released").await;
    check(ann_b.clone(), "B").await;
    for addr in [a.addr(), b.addr()] {
        let bob = Client::new(addr, full_caps()).with_token("bob-token");
        let (_, e) = bob.error("tasks/get", json!({"taskId": root})).await;
        assert_eq!(e["message"], "Failed to retrieve task: Task not found", "{e}");
        let (_, e) = bob.error("tasks/cancel", json!({"taskId": root})).await;
        assert_eq!(e["message"], "Failed to retrieve task: Task not found", "{e}");
    }

    // A restart with the same id loads nothing of it, and answers the same.
    a.kill();
    let a = c.start("a-again", &a_args).await;
    let ann_a = Client::new(a.addr(), full_caps()).with_token("ann-token");
    assert_eq!(support::http::retained(a.addr(), Some("ann-token")).await, 0);
    assert!(
        !read(&c.log("a-again")).contains("recovered stored tasks"),
        "the restart loaded a finished tree"
    );
    check(ann_a.clone(), "A, restarted").await;

    // A command stored for A before it let the tree go (written here as B
    // writes one): A answers it from the rows, as B would have.
    let holder = uuid::Uuid::parse_str(&id).unwrap();
    let seq: i64 = db(&c.url, move |c| {
        let command =
            json!({"method": "tasks/steer", "params": {"taskId": task.to_string(), "message": "late"},
                             "show_paused": true})
            .to_string();
        let seq: i64 = c
            .query_one(
                "INSERT INTO subtask_inbox (root, task, principal, command, from_instance)
                 VALUES ($1, $1, 'ann', $2::text::jsonb, $3) RETURNING seq",
                &[&task, &command, &uuid::Uuid::nil()],
            )
            .unwrap()
            .get(0);
        c.execute("SELECT pg_notify('subtask_inbox', $1)", &[&holder.to_string()])
            .unwrap();
        seq
    })
    .await;
    let deadline = Instant::now() + GUARD;
    let answer = loop {
        let answer: Option<String> = db(&c.url, move |c| {
            c.query_one("SELECT answer::text FROM subtask_inbox WHERE seq = $1", &[&seq])
                .unwrap()
                .get(0)
        })
        .await;
        if let Some(a) = answer {
            break serde_json::from_str::<Value>(&a).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "A never answered a command on its released tree"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(answer["error"], steered.1, "{answer} against {steered:?}");

    // Its deletion time, brought forward as time passing would: absent at
    // once everywhere, then swept.
    db(&c.url, move |c| {
        c.execute(
            "UPDATE subtask_released SET delete_at = 0 WHERE root = $1",
            &[&task],
        )
        .unwrap()
    })
    .await;
    for client in [&ann_a, &ann_b] {
        let (_, e) = client.error("tasks/get", json!({"taskId": root})).await;
        assert_eq!(e["message"], "Failed to retrieve task: Task not found", "{e}");
        let (_, e) = client
            .error("tasks/steer", json!({"taskId": root, "message": "gone"}))
            .await;
        assert_eq!(e["message"], "Failed to retrieve task: Task not found", "{e}");
    }
    let deadline = Instant::now() + GUARD;
    loop {
        let left: i64 = db(&c.url, move |c| {
            c.query_one("SELECT count(*) FROM subtask_tasks WHERE root = $1", &[&task])
                .unwrap()
                .get(0)
        })
        .await;
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sweep never deleted the tree's rows"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.kill();
    b.kill();
}

/// An instance stopped past its lease (a zombie) loses its trees to a
/// survivor, which resumes them in place; once it runs again it
/// fences itself (it answers nothing from its memory and runs no handler
/// of the tree it lost) and rejoins the cluster with a new epoch, without
/// exiting: then it serves again, new trees included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_instance_loses_its_trees_then_fences_itself_and_rejoins() {
    let c = Cluster::new("cluster-zombie").await;
    // Short leases, but not so short that a busy test machine starves a
    // renewal.
    // A logs its handlers' starts and ends.
    let handlers = "info,subtask::handler=debug,subtask::journal=debug";
    let a = c.start_logging("a", &["--lease", "2"], handlers).await;
    let b = c.start("b", &["--lease", "2"]).await;
    let via_a = Client::new(a.addr(), full_caps());
    let via_b = Client::new(b.addr(), full_caps());
    let root = via_a
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 200, "stepMs": 10}),
        )
        .await;
    let children = via_a.until_children(&root, 2).await;

    signal(&a, "STOP");
    let stopped = Instant::now();
    // B takes the tree over and resumes it in place.
    let took = loop {
        if read(b.log()).contains("took over trees") {
            break stopped.elapsed();
        }
        assert!(
            stopped.elapsed() < GUARD,
            "B never took the tree over: {}",
            read(b.log())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        took < Duration::from_millis(2000 + 1500),
        "taken over {took:?} after the stop (lease 2 s): {}",
        read(b.log())
    );
    let before = read(a.log()).len();
    signal(&a, "CONT");
    let woke = Instant::now();
    // It fences itself, then rejoins; it never exits.
    loop {
        assert!(a.exited().is_none(), "the zombie exited: {}", read(a.log()));
        let log = read(a.log());
        let since = &log[before.min(log.len())..];
        if since.contains("rejoined the cluster") {
            assert!(since.contains("lost its lease"), "{log}");
            assert!(since.contains("fenced"), "{log}");
            break;
        }
        assert!(
            woke.elapsed() < Duration::from_secs(15),
            "the zombie did not rejoin: {log}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rejoined = woke.elapsed();
    // It serves again: a read of the tree B holds, and a tree of its own.
    let seen = via_a.get(&root).await;
    assert_eq!(seen["taskId"], root.as_str(), "{seen}");
    let mine = via_a
        .start_task("fanout", json!({"width": 1, "depth": 1, "steps": 2, "stepMs": 5}))
        .await;
    let done_mine = until(&via_a, &mine, is_terminal).await;
    assert_eq!(done_mine["status"], "completed", "{done_mine}");
    let done = until(&via_b, &root, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(child_ids(&done), children, "resumed in place: nothing appended");
    for c in &children {
        let t = via_b.get(c).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    // The tree it lost never ran on it again: no handler of it started or
    // returned there since SIGCONT (its frozen handlers were dropped).
    let log = read(a.log());
    let since = &log[before.min(log.len())..];
    for id in std::iter::once(&root).chain(&children) {
        let ran = since
            .lines()
            .find(|l| l.contains("subtask::handler") && l.contains(&format!("task={id}")));
        assert!(
            ran.is_none(),
            "task {id} of the lost tree ran on the zombie: {ran:?}\n{log}"
        );
    }
    assert!(
        since.contains(&format!("task={mine}")),
        "the new tree ran on the rejoined instance: {log}"
    );
    assert_eq!(via_b.get(&root).await, via_a.get(&root).await);
    assert!(a.exited().is_none(), "{log}");
    println!("the zombie rejoined {rejoined:?} after SIGCONT");
    a.kill();
    b.kill();
}

/// Two processes started with one `--instance-id`: the newer registers a
/// new epoch, and the older one, superseded, stops and exits 75 (it does
/// not rejoin, which would fence the newer one in turn).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_the_same_id_ends_the_first() {
    let c = Cluster::new("cluster-twice").await;
    let id = "6d2f6a8e-2c1b-4c55-9a55-0f0d8a1d0c02";
    let a = c.start("a", &["--instance-id", id, "--lease", "2"]).await;
    let a2 = c.start("a2", &["--instance-id", id, "--lease", "2"]).await;
    let started = Instant::now();
    let status = loop {
        if let Some(s) = a.exited() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the older process kept running: {}",
            read(a.log())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(75), "{}", read(a.log()));
    assert!(
        read(a.log()).contains("another process registered with this instance id"),
        "{}",
        read(a.log())
    );
    let via_a2 = Client::new(a2.addr(), full_caps());
    let root = via_a2
        .start_task("fanout", json!({"width": 1, "depth": 1, "steps": 2, "stepMs": 5}))
        .await;
    let done = until(&via_a2, &root, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(a2.exited().is_none(), "{}", read(a2.log()));
    a2.kill();
}

/// A restart with the same `--instance-id` takes that id's trees back at
/// once, without waiting for the old lease to expire; the previous process
/// with that id is fenced (its epoch is superseded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_the_same_id_takes_its_trees_back_at_once() {
    let c = Cluster::new("cluster-same-id").await;
    let id = "6d2f6a8e-2c1b-4c55-9a55-0f0d8a1d0c01";
    // A long lease: only the same id can take the trees back in time.
    let a = c.start("a", &["--instance-id", id, "--lease", "30"]).await;
    let via_a = Client::new(a.addr(), full_caps());
    let root = via_a
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 100, "stepMs": 10}),
        )
        .await;
    let children = via_a.until_children(&root, 2).await;
    assert!(a.kill());
    a.wait();
    let started = Instant::now();
    let a2 = c.start("a2", &["--instance-id", id, "--lease", "30"]).await;
    let via_a2 = Client::new(a2.addr(), full_caps());
    // The tree resumes on the new process at once (another instance would
    // have to wait out the 30 s lease): its subtasks run again in place.
    let child = until(&via_a2, &children[0], is_terminal).await;
    assert_eq!(child["status"], "completed", "{child}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}: {child}",
        started.elapsed()
    );
    let done = until(&via_a2, &root, is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(child_ids(&done), children, "resumed in place: nothing appended");
    a2.kill();
}

/// A 2025-11-25 request (no `_meta`, the version header) to `addr`; the
/// JSON-RPC answer (the last message of an SSE stream).
async fn legacy(addr: std::net::SocketAddr, method: &str, params: Value) -> Value {
    let headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("Accept", "application/json, text/event-stream".to_owned()),
        ("MCP-Protocol-Version", "2025-11-25".to_owned()),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let r = support::http::raw(addr, "POST", &headers, body.to_string().as_bytes()).await;
    assert_eq!(r.status, 200, "{method}: {}", r.body);
    if r.header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream"))
    {
        return r
            .body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .next_back()
            .expect("a message on the stream");
    }
    r.json()
}

/// The 2025-11-25 wire reaches trees another instance holds: `tasks/get`,
/// `tasks/result` (waits for the end there), `tasks/list` (the same pages
/// on every instance) and `tasks/cancel` (the subtree cancelled by the
/// holder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2025_wire_reaches_trees_held_elsewhere() {
    let c = Cluster::new("cluster-legacy").await;
    let a = c.start("a", &[]).await;
    let b = c.start("b", &[]).await;
    let via_a = Client::new(a.addr(), full_caps());
    let quick = via_a
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 20, "stepMs": 10}),
        )
        .await;
    // tasks/result through B waits for the tree held by A to end.
    let answer = legacy(b.addr(), "tasks/result", json!({"taskId": quick})).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let got_b = legacy(b.addr(), "tasks/get", json!({"taskId": quick})).await;
    let got_a = legacy(a.addr(), "tasks/get", json!({"taskId": quick})).await;
    assert_eq!(got_a, got_b);
    assert_eq!(got_b["result"]["status"], "completed", "{got_b}");

    let slow = via_a
        .start_task(
            "fanout",
            json!({"width": 2, "depth": 1, "steps": 500, "stepMs": 10}),
        )
        .await;
    let children = via_a.until_children(&slow, 2).await;
    let list_a = legacy(a.addr(), "tasks/list", json!({})).await;
    let list_b = legacy(b.addr(), "tasks/list", json!({})).await;
    let ids = |l: &Value| -> Vec<String> {
        l["result"]["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["taskId"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&list_a), ids(&list_b));
    for id in std::iter::once(&quick).chain([&slow]).chain(&children) {
        assert!(ids(&list_b).contains(id), "{id} not listed: {list_b}");
    }

    let cancelled = legacy(b.addr(), "tasks/cancel", json!({"taskId": slow})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    for child in &children {
        let t = until(&via_a, child, is_terminal).await;
        assert_eq!(t["status"], "cancelled", "{t}");
    }
    a.kill();
    b.kill();
}

/// The control tools reach trees another instance holds: `task_status`
/// (the tree read from the database, partial results in order),
/// `task_steer`, `task_pause` / `task_resume` and `task_cancel` (commands
/// through the holder), and a second principal sees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_tools_reach_trees_held_elsewhere() {
    let c = Cluster::new("cluster-agents").await;
    let tokens = c.tokens();
    let tokens = tokens.to_str().unwrap();
    let a = c.start("a", &["--tokens", tokens, "--background"]).await;
    let b = c.start("b", &["--tokens", tokens, "--agent-tools"]).await;
    // A model's host on A, without the tasks extension: a background answer.
    let on_a = Client::new(a.addr(), json!({})).with_token("ann-token");
    let r = on_a
        .call(
            "tools/call",
            json!({"name": "fanout", "arguments": {"width": 2, "depth": 1, "steps": 400, "stepMs": 10}}),
        )
        .await;
    let id = r["structuredContent"]["taskId"].as_str().unwrap().to_owned();
    let on_b = Client::new(b.addr(), json!({})).with_token("ann-token");
    let tool = |c: &Client, name: &'static str, args: Value| {
        let c = c.clone();
        async move {
            c.call("tools/call", json!({"name": name, "arguments": args}))
                .await
        }
    };
    // Through B: the tree of three, once A has made its children durable.
    let deadline = Instant::now() + GUARD;
    let status = loop {
        let r = tool(&on_b, "task_status", json!({"taskId": id})).await;
        if r["structuredContent"]["total"] == 3 {
            break r;
        }
        assert!(Instant::now() < deadline, "B never saw the tree: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let order: Vec<&str> = status["structuredContent"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(order.last(), Some(&id.as_str()), "the root comes last: {status}");
    let r = tool(
        &on_b,
        "task_steer",
        json!({"taskId": id, "message": "hello from B"}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    let r = tool(&on_b, "task_pause", json!({"taskId": id})).await;
    assert_eq!(r["isError"], false, "{r}");
    let deadline = Instant::now() + GUARD;
    loop {
        let r = tool(&on_b, "task_status", json!({"taskId": id})).await;
        if r["structuredContent"]["counts"]["paused"] == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "the tree never paused: {r}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = tool(&on_b, "task_resume", json!({"taskId": id})).await;
    assert_eq!(r["isError"], false, "{r}");
    // Bob sees nothing, on either instance.
    for addr in [a.addr(), b.addr()] {
        let bob = Client::new(addr, json!({})).with_token("bob-token");
        let r = tool(&bob, "task_status", json!({"taskId": id})).await;
        assert_eq!(r["isError"], true, "{r}");
    }
    let r = tool(&on_b, "task_cancel", json!({"taskId": id})).await;
    assert_eq!(r["isError"], false, "{r}");
    let r = tool(&on_b, "task_wait", json!({"taskId": id, "seconds": 30})).await;
    assert_eq!(r["structuredContent"]["status"], "cancelled", "{r}");
    a.kill();
    b.kill();
}

/// An in-process instance on `url` with a live-task limit per principal.
async fn instance(url: &str, max_live: usize) -> (std::net::SocketAddr, subtask::server::Cluster) {
    use subtask::runtime::{Runtime, RuntimeConfig};
    use subtask::server::{ClusterConfig, Server, ServerConfig};
    use subtask::store::{Membership, PostgresConfig, PostgresStore};
    let lease = Duration::from_secs(2);
    let cfg = PostgresConfig {
        member: Some(Membership {
            instance: uuid::Uuid::new_v4(),
            lease,
        }),
        ..PostgresConfig::new(url)
    };
    let store = tokio::task::spawn_blocking(move || PostgresStore::open(cfg).unwrap())
        .await
        .unwrap();
    let registration = store.registration().unwrap().clone();
    let runtime = Runtime::with_store(RuntimeConfig::default(), std::sync::Arc::new(store));
    let mut config = ServerConfig::default();
    config.limits.max_live_tasks_per_principal = max_live;
    let server = subtask::demo::register(Server::builder(runtime, config)).build();
    server.recover().await.unwrap();
    let cluster = server
        .join_cluster(&registration, ClusterConfig::new(url, lease))
        .unwrap();
    (support::http::serve(server).await, cluster)
}

/// A principal's limit on live tasks holds across instances: the tasks it
/// runs on one instance count on the other (once published, a third of a
/// lease later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principals_live_task_limit_counts_every_instance() {
    let url = tokio::task::spawn_blocking(support::pg::fresh_database)
        .await
        .unwrap();
    let (a, _ca) = instance(&url, 3).await;
    let (b, _cb) = instance(&url, 3).await;
    let via_a = Client::new(a, full_caps());
    let via_b = Client::new(b, full_caps());
    let long = json!({"width": 1, "depth": 0, "steps": 1000, "stepMs": 30});
    via_a.start_task("fanout", long.clone()).await;
    via_a.start_task("fanout", long.clone()).await;
    // B learns of A's two within a third of a lease (plus a look).
    tokio::time::sleep(Duration::from_millis(1800)).await;
    via_b.start_task("fanout", long.clone()).await;
    let (_, e) = via_b
        .error("tools/call", json!({"name": "fanout", "arguments": long}))
        .await;
    assert!(
        e["message"].as_str().unwrap_or("").contains("live tasks"),
        "a fourth live task across the two instances: {e}"
    );
}

/// The README's "Several instances" walkthrough, as pasted: its two
/// `subtask serve` lines (on this test's database instead of
/// `postgres://postgres@127.0.0.1:5432/postgres`, ports 8750 and 8751), then
/// its curl lines with "On the wire"'s `call` and `META` (the taskId the
/// first answer carries in place of `<taskId>`); the second instance's
/// answers are the tree the first created, and its steer is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walkthrough_of_two_instances_works_as_pasted() {
    let c = Cluster::new("cluster-readme").await;
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```sh\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    let wire = blocks.iter().find(|b| b.contains("META=")).expect("On the wire");
    let servers = blocks
        .iter()
        .find(|b| b.contains("--listen 127.0.0.1:8751"))
        .expect("the two serve lines");
    let walk = blocks
        .iter()
        .find(|b| b.contains("hello from the other instance"))
        .expect("the walkthrough");
    let dir = c.bin.parent().unwrap().display().to_string();
    let mut started = Vec::new();
    for line in servers.lines().filter(|l| l.starts_with("subtask serve")) {
        let line = line.replace("postgres://postgres@127.0.0.1:5432/postgres", &c.url);
        let log = std::fs::File::create(c.log(&format!("readme-{}", started.len()))).unwrap();
        let child = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("exec {line}"))
            .env(
                "PATH",
                format!("{dir}:{}", std::env::var("PATH").unwrap_or_default()),
            )
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        started.push(child);
    }
    assert_eq!(started.len(), 2, "{servers}");
    struct Kill(Vec<std::process::Child>);
    impl Drop for Kill {
        fn drop(&mut self) {
            for c in &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let _servers = Kill(started);
    for port in [8750, 8751] {
        let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let probe = Client::new(addr, full_caps());
        let t0 = Instant::now();
        while support::process::rpc(&probe, "server/discover", json!({}), Duration::from_secs(2))
            .await
            .is_err()
        {
            assert!(
                t0.elapsed() < GUARD,
                "the README's instance on port {port} never answered"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // "On the wire"'s definitions, then the walkthrough with the id filled in.
    let defs: Vec<&str> = wire
        .lines()
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("call tools/call"))
        .collect();
    let mut script = defs.join("\n");
    script.push('\n');
    for line in walk.lines() {
        if line.starts_with("T=<taskId>") {
            script.push_str("T=$(printf '%s' \"$CREATED\" | grep -o '\"taskId\":\"[^\"]*\"' | head -1 | cut -d'\"' -f4)\necho \"T=$T\"\n");
        } else if line.starts_with("call tools/call") {
            script.push_str(&format!("CREATED=$({line})\necho \"$CREATED\"\n"));
        } else {
            script.push_str(line);
            script.push('\n');
        }
    }
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg("-c")
            .arg(script)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(answers.len(), 3, "create, get, steer: {stdout}");
    let id = answers[0]["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    assert_eq!(answers[1]["result"]["taskId"], id.as_str(), "{stdout}");
    // The second instance answers from the rows the first made durable:
    // the root's children appear there once the root's handler spawned
    // them and their rows were committed, which on a loaded machine may
    // come after the script's `tasks/get`. It must show both soon after.
    let seen = child_ids(&answers[1]["result"]).len();
    assert!(seen <= 2, "{stdout}");
    if seen < 2 {
        let second: std::net::SocketAddr = "127.0.0.1:8751".parse().unwrap();
        let kids = Client::new(second, full_caps()).until_children(&id, 2).await;
        assert_eq!(kids.len(), 2, "the second instance's children of {id}: {kids:?}");
    }
    assert!(answers[2].get("result").is_some(), "the steer: {stdout}");
}

/// A rolling restart (a deploy) of three instances under load: each is
/// sent SIGTERM in turn, drains (its handlers stop at their next safe
/// point), leaves the cluster, and is started again with its id; the
/// others take its trees over at once and resume them. Every tree
/// completes, nothing appended, and every step ran exactly once across
/// all the processes (a drain leaves nothing in flight to redo).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_completes_every_tree_and_redoes_nothing() {
    let c = Cluster::new("cluster-rolling").await;
    let ids = [
        "a0000000-0000-4000-8000-00000000000a",
        "b0000000-0000-4000-8000-00000000000b",
        "c0000000-0000-4000-8000-00000000000c",
    ];
    let names = ["a", "b", "c"];
    let mut procs = Vec::new();
    for (n, id) in names.iter().zip(ids) {
        procs.push(c.start(n, &["--lease", "2", "--instance-id", id]).await);
    }
    // Two trees started through each instance: 1 + 3 nodes of 40 steps of 50 ms.
    let mut roots = Vec::new();
    for p in &procs {
        let client = Client::new(p.addr(), full_caps());
        for _ in 0..2 {
            let root = client
                .start_task(
                    "fanout",
                    json!({"width": 3, "depth": 1, "steps": 40, "stepMs": 50}),
                )
                .await;
            roots.push(root);
        }
    }
    let started = Instant::now();
    let mut logs = vec![c.log("a"), c.log("b"), c.log("c")];
    for i in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let old = procs.remove(i);
        signal(&old, "TERM");
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = old.exited() {
                break s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{} did not drain: {}",
                names[i],
                read(old.log())
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            status.success(),
            "{} exits 0 after a drain: {status}\n{}",
            names[i],
            read(old.log())
        );
        assert!(read(old.log()).contains("drained:"), "{}", read(old.log()));
        let again = format!("{}-again", names[i]);
        procs.insert(
            i,
            c.start(&again, &["--lease", "2", "--instance-id", ids[i]]).await,
        );
        logs.push(c.log(&again));
        println!(
            "rolling restart: {} drained and exited in {:?}",
            names[i],
            t0.elapsed()
        );
    }
    let client = Client::new(procs[0].addr(), full_caps());
    for root in &roots {
        let done = until(&client, root, is_terminal).await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(child_ids(&done).len(), 3, "nothing appended: {done}");
    }
    // Every process's journal lines, in time order.
    let mut redone = support::redone::Redone::default();
    redone.feed_merged(&logs, "the cluster");
    assert!(redone.steps_redone.is_empty(), "{:?}", redone.steps_redone);
    assert_eq!(redone.steps_recorded, 6 * 4 * 40, "{}", redone.summary());
    assert_eq!(
        redone.steps_run,
        redone.steps_recorded,
        "a step ran twice although every stop was a drain: {}",
        redone.summary()
    );
    assert!(redone.reruns > 0, "no tree moved: {}", redone.summary());
    println!("rolling restart: {:?}; {}", started.elapsed(), redone.summary());
    for p in procs {
        p.kill();
    }
}
