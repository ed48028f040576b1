//! Full disk (issue 15, item 5): the real `subtask serve` binary on a
//! SQLite database that runs out of space while several clients create
//! trees, read them, steer and cancel them over HTTP.
//!
//! Two ways to run out of space, each a test:
//!
//! * `db_max_size_reached_under_load`: `--db-max-size 256KiB` (SQLite's
//!   `max_page_count`, a user option) on an ordinary disk. Space comes back
//!   by a restart with a larger limit; the server is SIGKILLed while full.
//! * `tmpfs_fills_up_under_load`: the database on a 3 MiB tmpfs that the
//!   test mounts in a user and mount namespace of its own (`unshare -Urm`,
//!   which needs no root where unprivileged user namespaces are allowed;
//!   the server runs inside it through `nsenter`), with a 1 MiB ballast
//!   file. Space comes back by deleting the ballast, without a restart;
//!   then the server is SIGKILLed and restarted on the same tmpfs.
//!
//! In both, and checked as the clients go: once the store is full, new
//! tasks and commands are refused with `-32603` and `data.reason:
//! "store_full"` (nothing else: any other error fails the test), reads are
//! answered (every task of a tree seen finished before is answered as it
//! was; a read of a tree that changed since is answered or refused with
//! the same error, never left hanging), and nothing acknowledged is lost:
//! every task a client was shown (created, listed in `childTaskIds`, read)
//! is there after the space returns and after the restart, finished tasks
//! byte for byte, `childTaskIds` only grown, and every acknowledged cancel
//! ends its tree `cancelled`. Then new work is accepted again and every
//! tree ends.
//!
//! A third test, `fsync_failure_is_sticky_and_loses_nothing_acknowledged`,
//! makes every fsync fail with `EIO` from a moment on (a shim over `fsync`
//! and `fdatasync` preloaded into the server, compiled by the test with
//! `cc`): the store stops taking writes for good, every refusal says the
//! change could not be made durable, reads of durable state go on, and
//! after a restart without the fault everything acknowledged is there.
//!
//! And `sqlite_store_holds_what_does_not_fit` checks the store's side
//! alone: at its size limit the batch that does not fit and every later
//! one report `Full` at once, earlier ones stay durable, closing while full
//! returns, and a reopen finds exactly what was acknowledged.
//!
//! Nothing is skipped: a test whose tool (`unshare`, `nsenter`, `cc`) is
//! missing or refused fails and says so. `DISK_FULL_SEED` replays the
//! clients' random choices.

#![cfg(target_os = "linux")]

mod support;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::http::{Client, full_caps};
use support::process::{Rpc, ServerProcess, private_binary, rpc};
use support::seed::{Rng, from_env};
use support::tempdir::TempDir;

/// Hang guard of one request: a full store answers at once, never later.
const RPC_TIMEOUT: Duration = Duration::from_secs(20);
/// Hang guard for the server to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Hang guard for the store to fill up under the load.
const FILL_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the load runs on after the first refusal.
const FULL_FOR: Duration = Duration::from_millis(1500);
/// Hang guard for new work to be accepted once space is back.
const RECOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// Hang guard for every tree to end at the end.
const FINISH_TIMEOUT: Duration = Duration::from_secs(120);
/// TTL of every tree: long, so nothing expires during the test.
const TTL_MS: u64 = 3_600_000;

// ----- what the clients were shown --------------------------------------------------

/// A task a client was shown. Clients read concurrently, so answers are
/// compared by when they were asked and received (one counter for all
/// requests): a read asked after a finished snapshot was received must
/// show it unchanged, and one asked after a `childTaskIds` list was
/// received must extend it.
#[derive(Debug, Default)]
struct Seen {
    root: String,
    /// Its finished snapshot (`resultType` and `_meta` removed), once
    /// shown, and when it was received.
    terminal: Option<(Value, u64)>,
    /// Its longest `childTaskIds` shown, and when it was received.
    children: (Vec<String>, u64),
}

#[derive(Debug, Default)]
struct Stats {
    created: u64,
    create_refused: u64,
    reads: u64,
    reads_refused: u64,
    steers: u64,
    cancels: u64,
    commands_refused: u64,
}

#[derive(Debug, Default)]
struct Model {
    /// Every acknowledged task by id.
    tasks: HashMap<String, Seen>,
    /// Roots in creation order; long ones are steered and cancelled.
    roots: Vec<String>,
    long_roots: Vec<String>,
    /// Roots whose `tasks/cancel` was acknowledged.
    cancelled: HashSet<String>,
    /// Roots seen terminal: a finished tree never changes again, so every
    /// task of it must be answered, unchanged, also while the store is full.
    /// (Root, when its finished snapshot was received.)
    finished: HashMap<String, u64>,
    violations: Vec<String>,
    stats: Stats,
}

fn status_of(v: &Value) -> &str {
    v["status"].as_str().unwrap_or("")
}

fn is_terminal(v: &Value) -> bool {
    matches!(status_of(v), "completed" | "failed" | "cancelled")
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("resultType");
        o.remove("_meta");
    }
    v
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// What the server logs when its store fills up.
const FULL_LOGGED: &str = "the task store is full";

/// The one error a full store answers with.
fn is_store_full(e: &Value) -> bool {
    e["code"] == -32603
        && e["data"]["reason"] == "store_full"
        && e["message"].as_str().is_some_and(|m| m.contains("full"))
}

impl Model {
    fn violate(&mut self, v: String) {
        if self.violations.len() < 20 {
            eprintln!("VIOLATION: {v}");
        }
        self.violations.push(v);
    }

    fn add_root(&mut self, id: &str, long: bool) {
        self.tasks.entry(id.to_owned()).or_insert_with(|| Seen {
            root: id.to_owned(),
            ..Seen::default()
        });
        self.roots.push(id.to_owned());
        if long {
            self.long_roots.push(id.to_owned());
        }
    }

    /// A snapshot of an acknowledged task, as `tasks/get` answered it to a
    /// request sent at `sent` and received at `received`: a finished task
    /// never changes, `childTaskIds` only grows, and every child listed is
    /// acknowledged from now on.
    fn observe(&mut self, snap: &Value, sent: u64, received: u64, when: &str) {
        let Some(id) = snap["taskId"].as_str() else {
            self.violate(format!("{when}: a snapshot without taskId: {snap}"));
            return;
        };
        let s = strip(snap);
        let children = ids(&snap["childTaskIds"]);
        let Some(seen) = self.tasks.get(id) else {
            self.violate(format!(
                "{when}: task {} was shown but never acknowledged",
                short(id)
            ));
            return;
        };
        let root = seen.root.clone();
        let mut bad = Vec::new();
        if let Some((prev, at)) = &seen.terminal
            && sent > *at
            && *prev != s
        {
            bad.push(format!(
                "{when}: finished task {} changed:\n  was {prev}\n  now {s}",
                short(id)
            ));
        }
        if sent > seen.children.1 && !children.starts_with(&seen.children.0) {
            bad.push(format!(
                "{when}: childTaskIds of {} lost entries: was {:?}, now {:?}",
                short(id),
                seen.children.0,
                children
            ));
        }
        for v in bad {
            self.violate(v);
        }
        for c in &children {
            self.tasks.entry(c.clone()).or_insert_with(|| Seen {
                root: root.clone(),
                ..Seen::default()
            });
        }
        let seen = self.tasks.get_mut(id).expect("checked above");
        if is_terminal(&s) && seen.terminal.is_none() {
            seen.terminal = Some((s, received));
        }
        if children.len() > seen.children.0.len() {
            seen.children = (children, received);
        }
    }
}

// ----- the load -----------------------------------------------------------------------

/// The clients and what they share.
struct Load {
    client: Client,
    model: Mutex<Model>,
    stop: AtomicBool,
    /// Set by the first refusal of a new task.
    full: AtomicBool,
    steer_seq: AtomicU64,
    /// Orders requests and answers (see [`Seen`]).
    clock: AtomicU64,
    /// The one error the store's trouble may be answered with.
    refusal: fn(&Value) -> bool,
    /// What the server must have logged about it.
    logged: &'static str,
}

impl Load {
    fn new(addr: std::net::SocketAddr, refusal: fn(&Value) -> bool, logged: &'static str) -> Arc<Load> {
        Arc::new(Load {
            client: Client::new(addr, full_caps()),
            model: Mutex::new(Model::default()),
            stop: AtomicBool::new(false),
            full: AtomicBool::new(false),
            steer_seq: AtomicU64::new(0),
            clock: AtomicU64::new(0),
            refusal,
            logged,
        })
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn violate(&self, v: String) {
        self.model().violate(v);
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    async fn call(&self, method: &str, params: Value) -> Option<Rpc> {
        match rpc(&self.client, method, params.clone(), RPC_TIMEOUT).await {
            Ok(r) => Some(r),
            Err(e) => {
                self.violate(format!("{method} {params}: no answer: {e}"));
                None
            }
        }
    }

    /// `tasks/get`: the snapshot, recorded; `None` when refused as full.
    async fn get(&self, id: &str, when: &str) -> Option<Value> {
        let sent = self.tick();
        match self.call("tasks/get", json!({"taskId": id})).await? {
            Rpc::Ok(snap) => {
                let received = self.tick();
                let mut m = self.model();
                m.stats.reads += 1;
                m.observe(&snap, sent, received, when);
                Some(snap)
            }
            Rpc::Err(_, e) if (self.refusal)(&e) => {
                let mut m = self.model();
                m.stats.reads_refused += 1;
                let root = m.tasks.get(id).map(|t| t.root.clone()).unwrap_or_default();
                if m.finished.get(&root).is_some_and(|at| sent > *at) {
                    m.violate(format!(
                        "{when}: task {} of a finished tree was refused: {e}",
                        short(id)
                    ));
                }
                None
            }
            Rpc::Err(status, e) => {
                self.violate(format!("{when}: tasks/get {}: HTTP {status} {e}", short(id)));
                None
            }
        }
    }

    /// `tools/call fanout`: the new root, or `None` when refused as full.
    async fn create(&self, long: bool) -> Option<String> {
        let args = if long {
            json!({"width": 1, "depth": 1, "steps": 1000, "stepMs": 40, "ttlMs": TTL_MS})
        } else {
            json!({"width": 2, "depth": 1, "steps": 2, "stepMs": 5, "ttlMs": TTL_MS})
        };
        match self
            .call("tools/call", json!({"name": "fanout", "arguments": args}))
            .await?
        {
            Rpc::Ok(r) if r["resultType"] == "task" && r["taskId"].is_string() => {
                let id = r["taskId"].as_str().unwrap().to_owned();
                let mut m = self.model();
                m.stats.created += 1;
                m.add_root(&id, long);
                Some(id)
            }
            Rpc::Err(_, e) if (self.refusal)(&e) => {
                self.model().stats.create_refused += 1;
                self.full.store(true, Ordering::SeqCst);
                None
            }
            other => {
                self.violate(format!("tools/call fanout did not create a task: {other:?}"));
                None
            }
        }
    }

    /// Creates trees and follows each quick one until it ends.
    async fn creator(self: Arc<Self>, mut rng: Rng) {
        while !self.stop.load(Ordering::SeqCst) {
            let long = rng.chance(0.12);
            let Some(root) = self.create(long).await else {
                tokio::time::sleep(Duration::from_millis(rng.range(5, 30))).await;
                continue;
            };
            if long {
                continue;
            }
            for _ in 0..200 {
                match self.get(&root, "creator").await {
                    Some(s) if is_terminal(&s) => {
                        // Every task of a finished tree is finished: read
                        // them all, so their final state is acknowledged.
                        let children = ids(&s["childTaskIds"]);
                        for c in &children {
                            self.get(c, "creator").await;
                        }
                        let at = self.tick();
                        self.model().finished.insert(root.clone(), at);
                        break;
                    }
                    Some(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                    None => break,
                }
            }
        }
    }

    /// Reads acknowledged tasks at random.
    async fn reader(self: Arc<Self>, mut rng: Rng) {
        while !self.stop.load(Ordering::SeqCst) {
            let id = {
                let m = self.model();
                let n = m.tasks.len();
                if n == 0 {
                    None
                } else {
                    m.tasks.keys().nth(rng.below(n)).cloned()
                }
            };
            match id {
                Some(id) => {
                    self.get(&id, "reader").await;
                }
                None => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    /// Steers long trees and cancels some of them.
    async fn commander(self: Arc<Self>, mut rng: Rng) {
        while !self.stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
            let root = {
                let m = self.model();
                let live: Vec<&String> = m
                    .long_roots
                    .iter()
                    .filter(|r| !m.cancelled.contains(*r))
                    .collect();
                rng.pick(&live).map(|r| (*r).clone())
            };
            let Some(root) = root else { continue };
            let cancel = rng.chance(0.3);
            let (method, params) = if cancel {
                ("tasks/cancel", json!({"taskId": root}))
            } else {
                let n = self.steer_seq.fetch_add(1, Ordering::Relaxed);
                (
                    "tasks/steer",
                    json!({"taskId": root, "message": format!("steer {n}")}),
                )
            };
            match self.call(method, params).await {
                Some(Rpc::Ok(_)) => {
                    let mut m = self.model();
                    if cancel {
                        m.stats.cancels += 1;
                        m.cancelled.insert(root);
                    } else {
                        m.stats.steers += 1;
                    }
                }
                Some(Rpc::Err(_, e)) if (self.refusal)(&e) => self.model().stats.commands_refused += 1,
                Some(Rpc::Err(status, e)) => {
                    self.violate(format!("{method} {}: HTTP {status} {e}", short(&root)))
                }
                None => {}
            }
        }
    }

    /// Starts 4 creators, 2 readers and a commander.
    fn start(self: &Arc<Self>, rng: &mut Rng) -> Vec<tokio::task::JoinHandle<()>> {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(tokio::spawn(self.clone().creator(rng.fork())));
        }
        for _ in 0..2 {
            v.push(tokio::spawn(self.clone().reader(rng.fork())));
        }
        v.push(tokio::spawn(self.clone().commander(rng.fork())));
        v
    }

    async fn stop(&self, clients: Vec<tokio::task::JoinHandle<()>>) {
        self.stop.store(true, Ordering::SeqCst);
        for c in clients {
            c.await.expect("a client panicked");
        }
    }

    fn fail_on_violations(&self, seed: u64, when: &str, log: &Path) {
        let m = self.model();
        if !m.violations.is_empty() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: String = text
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            panic!(
                "full disk test, {when}: {} violation(s) (DISK_FULL_SEED={seed}):\n{}\n--- server log (last 40 lines) ---\n{tail}",
                m.violations.len(),
                m.violations
                    .iter()
                    .take(20)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
}

// ----- the phases ---------------------------------------------------------------------

/// Runs the load until the store refuses new work, and on for
/// [`FULL_FOR`]; then checks, with the clients stopped and the store still
/// full, that every task of a tree that had finished is answered as it was.
async fn fill(load: &Arc<Load>, rng: &mut Rng, seed: u64, log: &Path) {
    let clients = load.start(rng);
    let t0 = Instant::now();
    while !load.full.load(Ordering::SeqCst) {
        assert!(
            t0.elapsed() < FILL_TIMEOUT,
            "the store did not fill within {FILL_TIMEOUT:?} ({:?})",
            load.model().stats
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "new work refused after {:?}: {:?}",
        t0.elapsed(),
        load.model().stats
    );
    tokio::time::sleep(FULL_FOR).await;
    load.stop(clients).await;
    load.fail_on_violations(seed, "while filling up", log);
    let (finished, refused_before) = {
        let m = load.model();
        let finished: Vec<String> = m
            .tasks
            .iter()
            .filter(|(_, t)| m.finished.contains_key(&t.root))
            .map(|(id, _)| id.clone())
            .collect();
        (finished, m.stats.create_refused)
    };
    assert!(refused_before > 0, "no new task was refused");
    assert!(
        !finished.is_empty(),
        "no tree finished before the store filled: the test checks nothing about reads"
    );
    // Reads of finished trees while full: answered, and as they were.
    for id in &finished {
        load.get(id, "read while full").await;
    }
    eprintln!(
        "while refusing: {} tasks of finished trees read back unchanged; {:?}",
        finished.len(),
        load.model().stats
    );
    load.fail_on_violations(seed, "reading while full", log);
}

/// Every acknowledged task, read: all must be answered (the store has
/// space again) and agree with what was shown.
async fn read_everything(load: &Load, when: &str) {
    let ids: Vec<String> = load.model().tasks.keys().cloned().collect();
    for id in &ids {
        let sent = load.tick();
        match load.call("tasks/get", json!({"taskId": id})).await {
            Some(Rpc::Ok(snap)) => {
                let received = load.tick();
                load.model().observe(&snap, sent, received, when);
            }
            Some(Rpc::Err(status, e)) => load.violate(format!(
                "{when}: acknowledged task {} is not answered: HTTP {status} {e}",
                short(id)
            )),
            None => {}
        }
    }
    eprintln!("{when}: all {} acknowledged tasks are there", ids.len());
}

/// Waits until a new task is accepted again (hang guard
/// [`RECOVER_TIMEOUT`]); refusals meanwhile must be "full".
async fn wait_accepting(load: &Load) -> Duration {
    let t0 = Instant::now();
    loop {
        if load.create(false).await.is_some() {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < RECOVER_TIMEOUT,
            "new work was not accepted within {RECOVER_TIMEOUT:?} after space was freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// After the space came back and the server restarted: everything
/// acknowledged is there; new work runs; every tree ends, and every tree
/// whose cancel was acknowledged ends `cancelled`.
async fn after_restart(load: &Arc<Load>, seed: u64, log: &Path) {
    read_everything(load, "after the restart").await;
    load.fail_on_violations(seed, "after the restart", log);
    let mut fresh = Vec::new();
    for _ in 0..8 {
        match load.create(false).await {
            Some(id) => fresh.push(id),
            None => load.violate("a new task was refused after the restart with space".into()),
        }
    }
    load.fail_on_violations(seed, "creating after the restart", log);
    // End the long trees, then wait for every tree.
    let (long, cancelled) = {
        let m = load.model();
        (m.long_roots.clone(), m.cancelled.clone())
    };
    for root in long.iter().filter(|r| !cancelled.contains(*r)) {
        match load.call("tasks/cancel", json!({"taskId": root})).await {
            Some(Rpc::Ok(_)) => {}
            other => load.violate(format!(
                "tasks/cancel {} after the restart: {other:?}",
                short(root)
            )),
        }
    }
    let roots: Vec<String> = load.model().roots.clone();
    let t0 = Instant::now();
    for root in &roots {
        loop {
            let snap = load.get(root, "finishing").await;
            match snap {
                Some(s) if is_terminal(&s) => {
                    for c in ids(&s["childTaskIds"]) {
                        load.get(&c, "finishing").await;
                    }
                    if cancelled.contains(root) && status_of(&s) != "cancelled" {
                        load.violate(format!(
                            "tree {} whose cancel was acknowledged ended {}",
                            short(root),
                            status_of(&s)
                        ));
                    }
                    if fresh.contains(root) && status_of(&s) != "completed" {
                        load.violate(format!("new tree {} ended {}", short(root), status_of(&s)));
                    }
                    break;
                }
                Some(_) => {}
                None => {
                    load.violate(format!("tree {} refused as full after the restart", short(root)));
                    break;
                }
            }
            assert!(
                t0.elapsed() < FINISH_TIMEOUT,
                "trees did not end within {FINISH_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    load.fail_on_violations(seed, "at the end", log);
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(!text.contains("panicked"), "the server panicked:\n{text}");
    assert!(
        text.contains(load.logged),
        "the server did not log {:?}",
        load.logged
    );
    let m = load.model();
    eprintln!(
        "end: {} trees, {} tasks acknowledged, {} cancels; {:?}",
        m.roots.len(),
        m.tasks.len(),
        m.cancelled.len(),
        m.stats
    );
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

// ----- the tests ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn db_max_size_reached_under_load() {
    let seed = from_env("DISK_FULL_SEED");
    let mut rng = Rng::new(seed);
    let dir = TempDir::new("disk-full-limit");
    let bin = private_binary(&dir.0);
    let db = dir.db().display().to_string();
    let log = dir.0.join("server.log");
    let args = |size: &str| strings(&["--db", &db, "--db-max-size", size]);
    let server = ServerProcess::start(&bin, &args("256KiB"), &log, START_TIMEOUT)
        .await
        .expect("start the server");
    let load = Load::new(server.addr(), is_store_full, FULL_LOGGED);
    fill(&load, &mut rng, seed, &log).await;

    // Crash while full: only what was acknowledged must come back.
    server.kill();
    server.wait();
    // The database's size, its write-ahead log included (read-only: no
    // checkpoint, the files stay as the kill left them).
    let pages: i64 =
        rusqlite::Connection::open_with_flags(dir.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| c.query_row("PRAGMA page_count", [], |r| r.get(0)))
            .expect("read the page count of the killed server's database");
    assert!(
        pages * 4096 <= 256 * 1024,
        "the database grew past --db-max-size: {pages} pages"
    );
    eprintln!("killed while full; the database has {pages} pages of 4 KiB");

    // More space: a larger limit.
    let server = ServerProcess::start(&bin, &args("64MiB"), &log, START_TIMEOUT)
        .await
        .expect("restart the server with a larger limit");
    let load = Arc::new(Load {
        client: Client::new(server.addr(), full_caps()),
        ..Arc::into_inner(load).expect("the clients have stopped")
    });
    load.stop.store(false, Ordering::SeqCst);
    after_restart(&load, seed, &log).await;
}

/// A tmpfs of its own, mounted in a user and mount namespace held by a
/// shell that lives until the test drops it (or dies: the shell reads its
/// stdin, which closes then). The server runs inside through `nsenter`;
/// the test reaches the files through `/proc/<holder>/root`.
struct Tmpfs {
    holder: Child,
    mnt: PathBuf,
}

impl Tmpfs {
    fn mount(mnt: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(mnt).expect("create the mount point");
        let mut holder = Command::new("unshare")
            .args([
                "-Urm",
                "sh",
                "-c",
                "mount -t tmpfs -o size=\"$1\" tmpfs \"$2\" && echo mounted && read _",
            ])
            .arg("holder")
            .arg(size)
            .arg(mnt)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run `unshare` (util-linux): this test mounts a tmpfs in a namespace of its own");
        let mut line = String::new();
        let _ = BufReader::new(holder.stdout.as_mut().expect("piped")).read_line(&mut line);
        if line.trim() != "mounted" {
            let _ = holder.kill();
            let out = holder.wait_with_output().expect("the holder's output");
            panic!(
                "cannot mount a {size} tmpfs in a user and mount namespace (`unshare -Urm`; unprivileged \
                 user namespaces must be allowed, or run as root): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Tmpfs {
            holder,
            mnt: mnt.to_owned(),
        }
    }

    /// `rel` inside the tmpfs, as this process reaches it.
    fn outside(&self, rel: &str) -> PathBuf {
        let mut p = PathBuf::from(format!("/proc/{}/root", self.holder.id()));
        p.push(self.mnt.strip_prefix("/").expect("an absolute mount point"));
        p.push(rel);
        p
    }

    /// A script that runs `bin` with its arguments inside the namespace.
    fn wrapper(&self, bin: &Path, dir: &Path) -> PathBuf {
        let path = dir.join("subtask-in-ns");
        let mut f = std::fs::File::create(&path).expect("create the wrapper");
        writeln!(
            f,
            "#!/bin/sh\nexec nsenter -t {} -U -m --preserve-credentials -- '{}' \"$@\"",
            self.holder.id(),
            bin.display()
        )
        .expect("write the wrapper");
        drop(f);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod the wrapper");
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        drop(self.holder.stdin.take());
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tmpfs_fills_up_under_load() {
    let seed = from_env("DISK_FULL_SEED");
    let mut rng = Rng::new(seed);
    let dir = TempDir::new("disk-full-tmpfs");
    let bin = private_binary(&dir.0);
    let fs = Tmpfs::mount(&dir.0.join("mnt"), "3m");
    std::fs::write(fs.outside("ballast"), vec![7u8; 1024 * 1024]).expect("write the ballast file");
    let wrapper = fs.wrapper(&bin, &dir.0);
    let db = dir.0.join("mnt").join("tasks.db").display().to_string();
    let log = dir.0.join("server.log");
    let args = strings(&["--db", &db]);
    let server = ServerProcess::start(&wrapper, &args, &log, START_TIMEOUT)
        .await
        .expect("start the server inside the namespace");
    assert!(
        fs.outside("tasks.db").exists(),
        "the database is not on the tmpfs"
    );
    let load = Load::new(server.addr(), is_store_full, FULL_LOGGED);
    fill(&load, &mut rng, seed, &log).await;

    // Space comes back, without a restart.
    std::fs::remove_file(fs.outside("ballast")).expect("delete the ballast file");
    let took = wait_accepting(&load).await;
    eprintln!("new work accepted {took:?} after the ballast was deleted");
    read_everything(&load, "space back, same process").await;
    load.fail_on_violations(seed, "after space came back", &log);
    assert!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("has space again"),
        "the server did not log that its store has space again"
    );

    // And a crash now loses nothing acknowledged either.
    server.kill();
    server.wait();
    let server = ServerProcess::start(&wrapper, &args, &log, START_TIMEOUT)
        .await
        .expect("restart the server inside the namespace");
    let load = Arc::new(Load {
        client: Client::new(server.addr(), full_caps()),
        ..Arc::into_inner(load).expect("the clients have stopped")
    });
    load.stop.store(false, Ordering::SeqCst);
    after_restart(&load, seed, &log).await;
}

// ----- an fsync that fails ------------------------------------------------------------

/// A shared object that, preloaded into the server, makes `fsync` and
/// `fdatasync` fail with `EIO` while the file named by
/// `SUBTASK_TEST_FSYNC_FAILS_IF` exists (and calls the real ones
/// otherwise): an I/O error where the store makes its commits durable.
const FSYNC_SHIM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *p = getenv("SUBTASK_TEST_FSYNC_FAILS_IF");
    return p != NULL && access(p, F_OK) == 0;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (failing()) { errno = EIO; return -1; }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    return real(fd);
}

int fsync(int fd) {
    static int (*real)(int);
    if (failing()) { errno = EIO; return -1; }
    if (real == NULL) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    return real(fd);
}
"#;

/// Compiles [`FSYNC_SHIM`] with `cc` into `dir`.
fn fsync_shim(dir: &Path) -> PathBuf {
    let src = dir.join("fsync_shim.c");
    let so = dir.join("fsync_shim.so");
    std::fs::write(&src, FSYNC_SHIM).expect("write the shim's source");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .output()
        .expect("run `cc`: this test compiles a preloaded fsync shim");
    assert!(
        out.status.success(),
        "cc could not compile the fsync shim: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// What the server logs when an fsync fails.
const FSYNC_LOGGED: &str = "the store cannot make commits durable";

/// The error of a store whose fsync failed: sticky, and it says so.
fn is_fsync_failure(e: &Value) -> bool {
    e["code"] == -32603
        && e["message"]
            .as_str()
            .is_some_and(|m| m.contains("could not be made durable") && m.contains("fsync"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_failure_is_sticky_and_loses_nothing_acknowledged() {
    let seed = from_env("DISK_FULL_SEED");
    let mut rng = Rng::new(seed);
    let dir = TempDir::new("disk-full-fsync");
    let bin = private_binary(&dir.0);
    let shim = fsync_shim(&dir.0);
    let trigger = dir.0.join("fail-fsync");
    let db = dir.db().display().to_string();
    let log = dir.0.join("server.log");
    let args = strings(&["--db", &db]);
    let trigger_text = trigger.display().to_string();
    let shim_text = shim.display().to_string();
    let server = ServerProcess::start_env(
        &bin,
        &args,
        &log,
        START_TIMEOUT,
        &[
            ("LD_PRELOAD", shim_text.as_str()),
            ("SUBTASK_TEST_FSYNC_FAILS_IF", trigger_text.as_str()),
        ],
    )
    .await
    .expect("start the server with the fsync shim");
    let load = Load::new(server.addr(), is_fsync_failure, FSYNC_LOGGED);
    // The clients run a while on a healthy disk, then every fsync fails.
    let fault = {
        let trigger = trigger.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            std::fs::write(&trigger, b"").expect("create the trigger file");
        })
    };
    fill(&load, &mut rng, seed, &log).await;
    fault.await.expect("the trigger task");
    // Still refused: a failed fsync is never retried into a success.
    assert!(
        load.create(false).await.is_none(),
        "a new task was accepted after an fsync failed"
    );

    // The disk is "fixed": a restart without the fault.
    server.kill();
    server.wait();
    std::fs::remove_file(&trigger).expect("remove the trigger file");
    let server = ServerProcess::start(&bin, &args, &log, START_TIMEOUT)
        .await
        .expect("restart the server without the fault");
    let load = Arc::new(Load {
        client: Client::new(server.addr(), full_caps()),
        ..Arc::into_inner(load).expect("the clients have stopped")
    });
    load.stop.store(false, Ordering::SeqCst);
    after_restart(&load, seed, &log).await;
}

// ----- the store alone ----------------------------------------------------------------

/// `SqliteStore` at its size limit, without a server: the batch that does
/// not fit and every later one report `Full` at once (never a hang), the
/// store refuses new work, every earlier batch stays durable, closing it
/// while full returns, and a reopen finds exactly the batches that were
/// acknowledged.
#[test]
fn sqlite_store_holds_what_does_not_fit() {
    use subtask::model::TaskId;
    use subtask::store::{
        SqliteConfig, SqliteStore, StoreError, StoredTask, TaskStore, TreeMeta, WriteBatch, WriteOp,
    };

    let dir = TempDir::new("disk-full-store");
    let open = |max_size| {
        SqliteStore::open(SqliteConfig {
            max_size,
            ..SqliteConfig::new(dir.db())
        })
        .expect("open the store")
    };
    let tree = |i: usize| {
        let id = TaskId::random();
        let batch = WriteBatch {
            root: id,
            version: 1,
            ops: vec![
                WriteOp::PutTree(TreeMeta {
                    root: id,
                    owner: Some("p".into()),
                    resumable: false,
                    launch: None,
                }),
                WriteOp::PutTask(StoredTask {
                    id,
                    root: id,
                    parent: None,
                    position: 0,
                    version: 0,
                    state: format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(1500)),
                }),
            ],
        };
        (id, batch)
    };
    let wait = |store: &SqliteStore, t| {
        let t0 = Instant::now();
        let r = futures::executor::block_on(store.wait_durable(t));
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "a wait took {:?}",
            t0.elapsed()
        );
        r
    };

    let store = open(Some(48 * 1024));
    let mut acked: Vec<(TaskId, subtask::store::Ticket)> = Vec::new();
    let held = loop {
        let (id, batch) = tree(acked.len());
        let t = store.submit(batch);
        match wait(&store, t) {
            Ok(()) => acked.push((id, t)),
            Err(e) => break (t, e),
        }
        assert!(acked.len() < 1000, "48 KiB never filled");
    };
    assert!(matches!(held.1, StoreError::Full(_)), "not Full: {:?}", held.1);
    assert!(!acked.is_empty(), "nothing fitted at all");
    assert!(matches!(store.writable(), Err(StoreError::Full(_))));
    // Later batches are held too, and say so at once.
    let (_, batch) = tree(9999);
    let later = store.submit(batch);
    assert!(matches!(store.is_durable(later), Err(StoreError::Full(_))));
    assert!(matches!(wait(&store, later), Err(StoreError::Full(_))));
    // What was acknowledged stays acknowledged.
    for (_, t) in &acked {
        assert_eq!(store.is_durable(*t), Ok(true));
    }
    let t0 = Instant::now();
    drop(store);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "closing a full store took {:?}",
        t0.elapsed()
    );

    let store = open(None);
    let mut found: Vec<TaskId> = store.load().expect("load").iter().map(|t| t.meta.root).collect();
    let mut want: Vec<TaskId> = acked.iter().map(|(id, _)| *id).collect();
    found.sort_by_key(|id| id.as_u128());
    want.sort_by_key(|id| id.as_u128());
    assert_eq!(
        found, want,
        "the reopened store holds other trees than those acknowledged"
    );
    assert_eq!(store.writable(), Ok(()));
    eprintln!(
        "{} trees fitted in 48 KiB; the next was held and reported Full",
        acked.len()
    );
}
