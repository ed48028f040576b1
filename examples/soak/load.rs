//! The mixed load: client loops running scenarios (create a tree, act on
//! it, check it when it ends), pollers reading random tasks, and the
//! registry of every tree created, which the final check walks.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use subtask::client::{ClientBuilder, ClientError, InputRequest};
use subtask::model::{DetailedTask, JsonObject, TaskId, TaskStatus};

use crate::api::{
    Api, Seen, Snapshot, accept, is_handler_finished, is_winding_down, json_of, now_ms, terminal_claim,
};
use crate::listen::{ListenLog, listen};
use crate::model::{self, Canon, Claim, FanoutSpec, ResearchSpec, Spec, TreeRec};
use crate::rng::Rng;
use crate::stats::{Problem, Stats};

/// Questions for `deep_research` (the last one is off the corpus).
const QUESTIONS: &[&str] = &[
    "How do MCP tasks handle long-running work?",
    "How do MCP tasks handle failures?",
    "Why do batteries degrade?",
    "How does Tokio schedule async tasks?",
    "How does sleep affect circadian rhythms?",
    "What is the airspeed velocity of an unladen swallow?",
];

/// Steers for `deep_research` roots ("focus on ..." re-plans).
const RESEARCH_STEERS: &[&str] = &[
    "focus on failure handling",
    "focus on cancellation",
    "focus on scheduling",
    "focus on battery chemistry",
    "please keep it short",
];

/// The answer the library follow's input handler gives.
fn library_answer() -> Value {
    accept(true)
}

/// Settings every loop shares.
pub struct Shared {
    /// The server's MCP endpoint.
    pub url: String,
    /// The TTL the server gives every task (`serve --task-ttl`).
    pub ttl_ms: u64,
    /// The server's deletion grace after a root's TTL.
    pub grace_ms: u64,
    /// Counters.
    pub stats: Arc<Stats>,
    /// Snapshots seen.
    pub seen: Arc<Seen>,
    /// Research answers.
    pub canon: Canon,
    /// Every tree created.
    pub registry: Registry,
    /// Set when the load phase is over.
    pub stop: AtomicBool,
    next_seq: AtomicU64,
    next_listen_id: AtomicI64,
}

impl Shared {
    /// Shared state for a run against `url`.
    pub fn new(url: String, ttl_ms: u64, grace_ms: u64) -> Self {
        Shared {
            url,
            ttl_ms,
            grace_ms,
            stats: Arc::new(Stats::new()),
            seen: Arc::new(Seen::default()),
            canon: Canon::default(),
            registry: Registry::default(),
            stop: AtomicBool::new(false),
            next_seq: AtomicU64::new(1),
            next_listen_id: AtomicI64::new(1_000_000_000),
        }
    }

    /// A client of the server (its own connection pool).
    pub fn api(&self) -> Api {
        Api {
            client: ClientBuilder::http(self.url.clone())
                .build()
                .expect("the URL is valid"),
            stats: self.stats.clone(),
            seen: self.seen.clone(),
        }
    }
}

/// One tree in the registry.
pub struct Entry {
    /// The root.
    pub root: TaskId,
    /// The root's `createdAt`.
    pub created_ms: u64,
    /// Its TTL.
    pub ttl_ms: u64,
    /// Task ids known so far (the root first).
    pub ids: Mutex<Vec<TaskId>>,
    /// The model and the tree's terminal snapshots (JSON), once checked.
    pub done: Mutex<Option<(TreeRec, HashMap<TaskId, String>)>>,
    /// Verified deleted.
    pub deleted: AtomicBool,
}

impl Entry {
    /// When the server deletes the tree: `createdAt + ttl + grace`.
    pub fn deletion_ms(&self, grace_ms: u64) -> u64 {
        self.created_ms + self.ttl_ms + grace_ms
    }
}

/// Every tree created, in creation order.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<Vec<Arc<Entry>>>,
}

impl Registry {
    fn add(&self, e: Arc<Entry>) {
        self.entries.lock().push(e);
    }

    /// All entries.
    pub fn all(&self) -> Vec<Arc<Entry>> {
        self.entries.lock().clone()
    }

    /// Trees created.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// A random entry, most often a recent one.
    fn random(&self, rng: &mut Rng) -> Option<Arc<Entry>> {
        let entries = self.entries.lock();
        let n = entries.len() as u64;
        if n == 0 {
            return None;
        }
        let i = if rng.chance(0.7) {
            n - 1 - rng.below(n.min(200))
        } else {
            rng.below(n)
        };
        Some(entries[i as usize].clone())
    }
}

/// One client loop: its clients and its random choices.
pub struct Loop {
    sh: Arc<Shared>,
    api: Api,
    /// A client whose input handler answers every request (library follows).
    answering: subtask::client::Client,
    http: reqwest::Client,
    rng: Rng,
}

impl Loop {
    /// Loop `index` with its own clients.
    pub fn new(sh: Arc<Shared>, seed: u64) -> Self {
        let answering = ClientBuilder::http(sh.url.clone())
            .input_handler(|_req: InputRequest| async move {
                Some(JsonObject::from_value(library_answer()).expect("an object"))
            })
            .build()
            .expect("the URL is valid");
        Loop {
            api: sh.api(),
            answering,
            http: {
                // reqwest's rustls needs a provider (`subtask::tls`).
                subtask::tls::install_provider();
                reqwest::Client::new()
            },
            rng: Rng::new(seed),
            sh,
        }
    }

    /// Runs scenarios until the load phase is over.
    pub async fn run(mut self) {
        while !self.sh.stop.load(Ordering::Relaxed) {
            let r = match self.rng.below(100) {
                0..20 => self.fanout_basic().await,
                20..38 => self.fanout_steer_pause().await,
                38..52 => self.fanout_input().await,
                52..67 => self.fanout_cancel().await,
                _ => self.research().await,
            };
            if let Err(p) = r {
                self.sh.stats.problem(&p);
            }
            tokio::time::sleep(self.rng.ms(0, 200)).await;
        }
    }

    fn stats(&self) -> &Stats {
        &self.sh.stats
    }

    /// Creates a tree; opens a raw subscription on it 40% of the time.
    async fn start(
        &mut self,
        scenario: &'static str,
        spec: Spec,
    ) -> Result<(TreeRec, Arc<Entry>, Option<tokio::task::JoinHandle<ListenLog>>), Problem> {
        let (tool, args) = match &spec {
            Spec::Fanout(f) => ("fanout", f.args()),
            Spec::Research(r) => (
                "deep_research",
                json!({"question": r.question, "breadth": r.breadth, "depth": r.depth}),
            ),
        };
        let seed = self.api.call(tool, args).await?;
        let seq = self.sh.next_seq.fetch_add(1, Ordering::Relaxed);
        let rec = TreeRec::new(seq, scenario, spec, &seed);
        if rec.ttl_ms != self.sh.ttl_ms {
            self.stats().problem(&Problem::wrong(format!(
                "tree {} was created with TTL {} ms, not the server's default {} ms",
                rec.root, rec.ttl_ms, self.sh.ttl_ms
            )));
        }
        let entry = Arc::new(Entry {
            root: rec.root,
            created_ms: rec.created_ms,
            ttl_ms: rec.ttl_ms,
            ids: Mutex::new(vec![rec.root]),
            done: Mutex::new(None),
            deleted: AtomicBool::new(false),
        });
        self.sh.registry.add(entry.clone());
        let listener = self.rng.chance(0.4).then(|| {
            let id = self.sh.next_listen_id.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(listen(
                self.http.clone(),
                self.sh.url.clone(),
                rec.root,
                id,
                self.sh.stats.clone(),
                self.sh.seen.clone(),
            ))
        });
        Ok((rec, entry, listener))
    }

    /// Walks the tree and remembers its ids for the pollers.
    async fn walk(&self, entry: &Entry) -> Result<Snapshot, Problem> {
        let snap = self.api.walk_ok(entry.root).await?;
        let mut ids = entry.ids.lock();
        for id in &snap.order {
            if !ids.contains(id) {
                ids.push(*id);
            }
        }
        Ok(snap)
    }

    /// Waits for the root to end, retrieves the tree, checks it against
    /// the model and files it for the final check.
    async fn finish(
        &mut self,
        mut rec: TreeRec,
        entry: Arc<Entry>,
        listener: Option<tokio::task::JoinHandle<ListenLog>>,
    ) -> Result<(), Problem> {
        let limit = Duration::from_millis(rec.ttl_ms) + Duration::from_secs(30);
        let root = self
            .api
            .wait_for(rec.root, limit, "the tree's end", |t| t.status().is_terminal())
            .await?;
        let snap = self.walk(&entry).await?;
        if let Some(h) = listener {
            match tokio::time::timeout(Duration::from_secs(30), h).await {
                Ok(Ok(log)) => rec.listen = Some(log),
                Ok(Err(e)) => return Err(Problem::wrong(format!("the listener task failed: {e}"))),
                Err(_) => {
                    return Err(Problem::stuck(format!(
                        "the subscription on tree {} did not end within 30 s of the tree's end",
                        rec.root
                    )));
                }
            }
        }
        let problems = model::check(&rec, &snap, &self.sh.canon);
        for p in &problems {
            self.stats().problem(&Problem::wrong(p.clone()));
        }
        self.stats()
            .tasks_checked_live
            .fetch_add(snap.order.len() as u64, Ordering::Relaxed);
        self.stats().trees_checked_live.fetch_add(1, Ordering::Relaxed);
        self.stats().tree(rec.scenario, root.status().as_str());
        let jsons = snap.tasks.iter().map(|(id, t)| (*id, json_of(t))).collect();
        // Only the final check reads these again: no need to keep the
        // stream's log or the follow's results.
        rec.listen = None;
        rec.follow = None;
        *entry.done.lock() = Some((rec, jsons));
        Ok(())
    }

    /// A steer; an expected refusal is recorded as a claim.
    async fn steer(
        &mut self,
        rec: &mut TreeRec,
        id: TaskId,
        msg: &str,
        while_paused: bool,
    ) -> Result<(), Problem> {
        match self.api.steer(id, msg).await {
            Ok(()) => {
                rec.steered(id, msg, while_paused);
                Ok(())
            }
            Err(e) => self.refused("tasks/steer", rec, id, &e),
        }
    }

    /// Classifies a refused steer or pause: expected ones are counted and
    /// become claims the model checks; the rest are problems.
    fn refused(
        &self,
        method: &'static str,
        rec: &mut TreeRec,
        id: TaskId,
        e: &ClientError,
    ) -> Result<(), Problem> {
        if let Some(status) = terminal_claim(e) {
            self.stats().expected(if method == "tasks/steer" {
                "steer: task already terminal"
            } else {
                "pause: task already terminal"
            });
            rec.claims.push(Claim::Terminal(id, status));
            return Ok(());
        }
        if method == "tasks/steer" && is_handler_finished(e) {
            self.stats().expected("steer: handler finished");
            return Ok(());
        }
        if method == "tasks/steer" && is_winding_down(e) {
            self.stats().expected("steer: winding down");
            rec.claims.push(Claim::WindingDown(id));
            return Ok(());
        }
        let what = format!("{method} {id} (tree {})", rec.root);
        self.stats().unexpected(method, e, &what);
        Err(Problem::unexpected(&what, e))
    }

    /// A random fanout node path of a tree `width` × `depth`.
    fn node_path(&mut self, width: u32, depth: u32) -> String {
        let mut p = "0".to_owned();
        if width > 0 {
            for _ in 0..self.rng.range(0, depth.into()) {
                p.push_str(&format!(".{}", self.rng.below(width.into())));
            }
        }
        p
    }

    // ----- scenarios ----------------------------------------------------------------

    /// A fanout tree, sometimes with a failing node, left to finish.
    async fn fanout_basic(&mut self) -> Result<(), Problem> {
        let (width, depth) = (self.rng.range(1, 3) as u32, self.rng.range(1, 2) as u32);
        let fail_at = self.rng.chance(0.3).then(|| self.node_path(width, depth));
        let spec = FanoutSpec {
            width,
            depth,
            steps: self.rng.range(1, 4) as u32,
            step_ms: self.rng.range(20, 150),
            fail_at,
            input_at: None,
        };
        let (rec, entry, listener) = self.start("fanout", Spec::Fanout(spec)).await?;
        self.finish(rec, entry, listener).await
    }

    /// Steers while it runs, pauses the whole tree, checks that nothing
    /// moves while paused, steers a paused node, resumes.
    async fn fanout_steer_pause(&mut self) -> Result<(), Problem> {
        let (width, depth) = (self.rng.range(2, 3) as u32, self.rng.range(1, 2) as u32);
        let fail_at = self.rng.chance(0.15).then(|| self.node_path(width, depth));
        let spec = FanoutSpec {
            width,
            depth,
            steps: self.rng.range(6, 12) as u32,
            step_ms: self.rng.range(80, 150),
            fail_at,
            input_at: None,
        };
        let (mut rec, entry, listener) = self.start("fanout+steer+pause", Spec::Fanout(spec)).await?;
        for k in 0..self.rng.range(1, 2) {
            tokio::time::sleep(self.rng.ms(100, 600)).await;
            let snap = self.walk(&entry).await?;
            let live = snap.live();
            if live.is_empty() {
                break;
            }
            let target = *self.rng.pick(&live);
            let msg = format!("s{}.{k}", rec.seq);
            self.steer(&mut rec, target, &msg, false).await?;
        }
        tokio::time::sleep(self.rng.ms(100, 500)).await;
        if self.pause_tree(&mut rec, &entry).await? {
            self.resume_root(&rec).await?;
            if self.rng.chance(0.5) {
                let msg = format!("r{}", rec.seq);
                let root = rec.root;
                self.steer(&mut rec, root, &msg, false).await?;
            }
        }
        self.finish(rec, entry, listener).await
    }

    /// Pauses the root, waits until every live task of the tree is paused,
    /// steers one paused task, holds, and checks nothing moved. `false`
    /// when the tree had ended before the pause.
    async fn pause_tree(&mut self, rec: &mut TreeRec, entry: &Entry) -> Result<bool, Problem> {
        let root = rec.root;
        if let Err(e) = self.api.pause(root).await {
            self.refused("tasks/pause", rec, root, &e)?;
            return Ok(false);
        }
        let t = self
            .api
            .wait_for(root, Duration::from_secs(20), "the pause", |t| {
                t.status() == TaskStatus::Paused || t.status().is_terminal()
            })
            .await?;
        if t.status().is_terminal() {
            return Err(Problem::wrong(format!(
                "tree {root} ended {} after a pause was accepted (a pending pause must hold it)",
                t.status()
            )));
        }
        // Every live task parks at its next safe point.
        let start = Instant::now();
        let before = loop {
            let snap = self.walk(entry).await?;
            let live = snap.live();
            if live
                .iter()
                .all(|id| snap.tasks[id].status() == TaskStatus::Paused)
            {
                break snap;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let moving: Vec<String> = live
                    .iter()
                    .filter(|id| snap.tasks[*id].status() != TaskStatus::Paused)
                    .map(|id| format!("{id} {}", snap.tasks[id].status()))
                    .collect();
                return Err(Problem::stuck(format!(
                    "tree {root} paused, but these tasks did not park within 20 s: {moving:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let live = before.live();
        if let Some(&target) = (!live.is_empty()).then(|| self.rng.pick(&live)) {
            let msg = format!("p{}", rec.seq);
            self.steer(rec, target, &msg, true).await?;
        }
        tokio::time::sleep(self.rng.ms(300, 1500)).await;
        let after = self.walk(entry).await?;
        for id in &before.order {
            let (b, a) = (&before.tasks[id], after.tasks.get(id));
            let same = match a {
                None => false,
                Some(a) if b.status().is_terminal() => json_of(a) == json_of(b),
                Some(a) => {
                    a.status() == TaskStatus::Paused && a.task().child_task_ids == b.task().child_task_ids
                }
            };
            if !same {
                return Err(Problem::wrong(format!(
                    "tree {root} changed while paused: task {id} was {} and is {}",
                    json_of(b),
                    a.map_or("gone".to_owned(), json_of)
                )));
            }
        }
        if after.order.len() != before.order.len() {
            return Err(Problem::wrong(format!(
                "tree {root} grew from {} to {} tasks while paused",
                before.order.len(),
                after.order.len()
            )));
        }
        Ok(true)
    }

    async fn resume_root(&self, rec: &TreeRec) -> Result<(), Problem> {
        match self.api.resume(rec.root).await {
            Ok(t) if t.status() == TaskStatus::Paused => Err(Problem::wrong(format!(
                "tasks/resume {} answered a task that is still paused",
                rec.root
            ))),
            Ok(_) => Ok(()),
            Err(e) => {
                let what = format!("tasks/resume {}", rec.root);
                self.stats().unexpected("tasks/resume", &e, &what);
                Err(Problem::unexpected(&what, &e))
            }
        }
    }

    /// A node asks for input; answered with `tasks/update` (then a second,
    /// different answer that must be ignored), or by the client library's
    /// input handler while it follows the tree.
    async fn fanout_input(&mut self) -> Result<(), Problem> {
        let (width, depth) = (self.rng.range(1, 3) as u32, self.rng.range(0, 2) as u32);
        let input_at = self.node_path(width, depth);
        let spec = FanoutSpec {
            width,
            depth,
            steps: self.rng.range(1, 3) as u32,
            step_ms: self.rng.range(20, 80),
            fail_at: None,
            input_at: Some(input_at.clone()),
        };
        if self.rng.chance(0.5) {
            let (mut rec, entry, listener) = self.start("fanout+input", Spec::Fanout(spec)).await?;
            let key = format!("confirm-{input_at}");
            let start = Instant::now();
            let node = loop {
                let snap = self.walk(&entry).await?;
                if let Some(id) = snap.at(&input_at) {
                    break id;
                }
                if start.elapsed() > Duration::from_secs(20) {
                    return Err(Problem::stuck(format!(
                        "tree {}: node {input_at} did not appear within 20 s",
                        rec.root
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let k = key.clone();
            let t = self
                .api
                .wait_for(node, Duration::from_secs(30), "the input request", move |t| {
                    t.status() == TaskStatus::InputRequired || t.status().is_terminal()
                })
                .await?;
            let asked = serde_json::to_value(&t).unwrap_or_default();
            if asked["inputRequests"][&k]["method"] != "elicitation/create" {
                return Err(Problem::wrong(format!(
                    "node {input_at} ({node}) should ask for {k} with an elicitation: {asked}"
                )));
            }
            tokio::time::sleep(self.rng.ms(0, 300)).await;
            let answer = accept(self.rng.chance(0.5));
            if let Err(e) = self.api.update(node, &key, &answer).await {
                let what = format!("tasks/update {node}");
                self.stats().unexpected("tasks/update", &e, &what);
                return Err(Problem::unexpected(&what, &e));
            }
            rec.answers.insert(input_at.clone(), answer);
            if self.rng.chance(0.5) {
                // Answered already: ignored (I9).
                let other = json!({"action": "accept", "content": {"confirm": "second answer"}});
                if let Err(e) = self.api.update(node, &key, &other).await {
                    let what = format!("tasks/update {node} (a second answer)");
                    self.stats().unexpected("tasks/update", &e, &what);
                    return Err(Problem::unexpected(&what, &e));
                }
            }
            self.finish(rec, entry, listener).await
        } else {
            let (mut rec, entry, listener) = self.start("fanout+input (library)", Spec::Fanout(spec)).await?;
            rec.answers.insert(input_at, library_answer());
            self.stats().library_follows.fetch_add(1, Ordering::Relaxed);
            let mut results = self.answering.task_results(rec.root);
            let mut partials = Vec::new();
            let limit = Duration::from_millis(rec.ttl_ms) + Duration::from_secs(30);
            let followed = tokio::time::timeout(limit, async {
                use futures::StreamExt;
                while let Some(p) = results.next().await {
                    partials.push(p?);
                }
                Ok::<(), ClientError>(())
            })
            .await;
            match followed {
                Err(_) => {
                    return Err(Problem::stuck(format!(
                        "the library did not follow tree {} to its end",
                        rec.root
                    )));
                }
                Ok(Err(e)) => {
                    let what = format!("following tree {} with Client::task_results", rec.root);
                    self.stats().unexpected("library follow", &e, &what);
                    return Err(Problem::unexpected(&what, &e));
                }
                Ok(Ok(())) => rec.follow = Some(partials),
            }
            self.finish(rec, entry, listener).await
        }
    }

    /// Cancels the root or a random node (sometimes a paused tree), then
    /// checks that a steer to it is refused.
    async fn fanout_cancel(&mut self) -> Result<(), Problem> {
        let (width, depth) = (self.rng.range(2, 3) as u32, self.rng.range(1, 2) as u32);
        let fail_at = self.rng.chance(0.15).then(|| self.node_path(width, depth));
        let spec = FanoutSpec {
            width,
            depth,
            steps: self.rng.range(4, 10) as u32,
            step_ms: self.rng.range(50, 150),
            fail_at,
            input_at: None,
        };
        let (mut rec, entry, listener) = self.start("fanout+cancel", Spec::Fanout(spec)).await?;
        tokio::time::sleep(self.rng.ms(0, 2000)).await;
        let paused = self.rng.chance(0.25) && self.pause_tree(&mut rec, &entry).await?;
        let target = if paused || self.rng.chance(0.5) {
            rec.root
        } else {
            let snap = self.walk(&entry).await?;
            *self.rng.pick(&snap.order)
        };
        self.cancel(&mut rec, target).await?;
        let msg = format!("after cancel {}", rec.seq);
        match self.api.steer(target, &msg).await {
            Ok(()) => {
                return Err(Problem::wrong(format!(
                    "a steer to task {target} was accepted after its cancel was"
                )));
            }
            Err(e) if terminal_claim(&e).is_some() || is_winding_down(&e) => {
                self.refused("tasks/steer", &mut rec, target, &e)?;
            }
            Err(e) => {
                let what = format!("tasks/steer {target} after its cancel");
                self.stats().unexpected("tasks/steer", &e, &what);
                return Err(Problem::unexpected(&what, &e));
            }
        }
        self.finish(rec, entry, listener).await
    }

    async fn cancel(&self, rec: &mut TreeRec, target: TaskId) -> Result<(), Problem> {
        match self.api.cancel(target).await {
            Ok(()) => {
                rec.cancels.push((target, now_ms()));
                Ok(())
            }
            Err(e) => {
                let what = format!("tasks/cancel {target}");
                self.stats().unexpected("tasks/cancel", &e, &what);
                Err(Problem::unexpected(&what, &e))
            }
        }
    }

    /// A research tree: left alone, steered, paused and resumed, or cancelled.
    async fn research(&mut self) -> Result<(), Problem> {
        let spec = ResearchSpec {
            question: (*self.rng.pick(QUESTIONS)).to_owned(),
            breadth: self.rng.range(1, 3) as u32,
            depth: self.rng.range(1, 2) as u32,
        };
        let variant = self.rng.below(100);
        let scenario = match variant {
            0..40 => "research",
            40..70 => "research+steer",
            70..85 => "research+pause",
            _ => "research+cancel",
        };
        let (mut rec, entry, listener) = self.start(scenario, Spec::Research(spec)).await?;
        let root = rec.root;
        match variant {
            0..40 => {}
            40..70 => {
                tokio::time::sleep(self.rng.ms(200, 2500)).await;
                let msg = *self.rng.pick(RESEARCH_STEERS);
                self.steer(&mut rec, root, msg, false).await?;
            }
            70..85 => {
                tokio::time::sleep(self.rng.ms(300, 2500)).await;
                if let Err(e) = self.api.pause(root).await {
                    self.refused("tasks/pause", &mut rec, root, &e)?;
                } else {
                    let t = self
                        .api
                        .wait_for(root, Duration::from_secs(20), "the pause", |t| {
                            t.status() == TaskStatus::Paused || t.status().is_terminal()
                        })
                        .await?;
                    if t.status().is_terminal() {
                        return Err(Problem::wrong(format!(
                            "tree {root} ended {} after a pause was accepted",
                            t.status()
                        )));
                    }
                    if self.rng.chance(0.5) {
                        let msg = format!("note {}", rec.seq);
                        self.steer(&mut rec, root, &msg, true).await?;
                    }
                    tokio::time::sleep(self.rng.ms(300, 1200)).await;
                    self.resume_root(&rec).await?;
                }
            }
            _ => {
                tokio::time::sleep(self.rng.ms(300, 3000)).await;
                self.cancel(&mut rec, root).await?;
            }
        }
        self.finish(rec, entry, listener).await
    }
}

/// Reads random tasks of random trees (recent ones more often) until the
/// load phase is over; every answer goes through the `Seen` checks, and a
/// tree past its deletion time must be gone.
pub async fn poller(sh: Arc<Shared>, seed: u64) {
    let api = sh.api();
    let mut rng = Rng::new(seed);
    while !sh.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(rng.ms(10, 40)).await;
        let Some(entry) = sh.registry.random(&mut rng) else {
            continue;
        };
        let id = {
            let ids = entry.ids.lock();
            *rng.pick(&ids)
        };
        if let Err(p) = get_checked(&sh, &api, &entry, id).await {
            sh.stats.problem(&p);
        }
    }
}

/// `tasks/get` of a task of `entry` with the deletion rule: "not found"
/// only after the tree's deletion time, found only until shortly after it.
pub async fn get_checked(
    sh: &Shared,
    api: &Api,
    entry: &Entry,
    id: TaskId,
) -> Result<Option<DetailedTask>, Problem> {
    let deletion = entry.deletion_ms(sh.grace_ms);
    let sent = now_ms();
    match api.get(id).await {
        Ok(t) => {
            if sent > deletion + DELETION_SLACK_MS {
                return Err(Problem::wrong(format!(
                    "task {id} of tree {} is still there {} s after its deletion time",
                    entry.root,
                    (sent - deletion) / 1000
                )));
            }
            Ok(Some(t))
        }
        Err(e) if e.is_task_not_found() && sent + CLOCK_SLACK_MS >= deletion => {
            sh.stats.expected("get: tree deleted after its TTL");
            if !entry.deleted.swap(true, Ordering::Relaxed) {
                sh.stats.trees_verified_deleted.fetch_add(1, Ordering::Relaxed);
                sh.seen.forget(&entry.ids.lock());
            }
            Ok(None)
        }
        Err(e) if e.is_task_not_found() => Err(Problem::wrong(format!(
            "task {id} of tree {} was not found {} ms before its tree's deletion time",
            entry.root,
            deletion - sent
        ))),
        Err(e) => {
            let what = format!("tasks/get {id}");
            sh.stats.unexpected("tasks/get", &e, &what);
            Err(Problem::unexpected(&what, &e))
        }
    }
}

/// How late a deletion may be: the server's timer fires at the deadline;
/// a loaded machine may run it a little later.
pub const DELETION_SLACK_MS: u64 = 10_000;
/// How early "not found" may come, for clock differences.
const CLOCK_SLACK_MS: u64 = 1_000;
