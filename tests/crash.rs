//! Crash test (issue 5): the real `subtask serve` binary on a real SQLite
//! file, killed with SIGKILL at random moments while clients drive task
//! trees over HTTP (subtasks, input requests, steer, pause/resume, cancel),
//! and restarted on the same database, round after round.
//!
//! Everything a client was shown counts as acknowledged: every task id in a
//! `CreateTaskResult`, in a `childTaskIds` list, every snapshot of
//! `tasks/get`, `tasks/pause`, `tasks/resume` and `notifications/tasks`, and
//! every acked `tasks/update`, `tasks/steer` and `tasks/cancel`. After each
//! restart every acknowledged task must still be there, the recovered trees
//! must keep the invariants of `docs/lifecycle.md` that snapshots can show,
//! and the tasks whose handler died must have ended as the restart rules
//! say. After the last round every tree must reach a terminal state.
//!
//! `CRASH_SEED=<u64>` replays the random choices (kill moments and
//! triggers, tool arguments, client actions; the interleaving with the
//! server's own timing is not reproducible); `CRASH_ROUNDS=<n>` sets the
//! number of kills (default 25); `CRASH_TRIGGER=create|steer|update|pause|
//! resume|cancel|notification` makes every kill land right after the first
//! acknowledgement of that kind. Timeouts are hang guards only.

#![cfg(unix)]

mod support;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use subtask::model::Timestamp;
use support::http::{Client, full_caps};
use support::process::{Rpc, ServerProcess, listen, rpc};
use tokio::task::JoinHandle;

/// TTL of every tree: long, so no tree expires or is deleted during the test.
const TTL_MS: u64 = 3_600_000;
/// Hang guard for one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Hang guard for a server to start (recovery included) and answer.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Hang guard for every tree to end after the last restart.
const FINISH_TIMEOUT: Duration = Duration::from_secs(240);
/// `error.data.reason` of a task whose handler was lost in a restart.
const RESTARTED: &str = "server_restarted";
const DEFAULT_ROUNDS: u32 = 25;
const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

/// The answer the clients give to every `confirm-*` input request.
fn answer() -> Value {
    json!({"action": "accept", "content": {"confirm": true}})
}

// ----- a tiny seeded RNG (splitmix64) ------------------------------------------------

#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when empty).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo)
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            Some(&items[self.range(0, items.len() as u64) as usize])
        }
    }

    fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

// ----- what the clients were shown ---------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    Fanout,
    Research,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Fanout => "fanout",
            Tool::Research => "deep_research",
        }
    }
}

#[derive(Debug)]
struct Tree {
    tool: Tool,
    args: Value,
    input_at: Option<String>,
    fail_at: Option<String>,
    /// A steer was sent to a `deep_research` root: its re-planning cancels
    /// sub-questions (and lifts their pauses) by itself.
    steered: bool,
}

/// Everything known about one task.
#[derive(Debug, Default)]
struct Task {
    root: String,
    parent: Option<String>,
    /// Longest `childTaskIds` seen from any source.
    children: Vec<String>,
    /// Longest `childTaskIds` seen by ordered reads (a tree's own client).
    ordered_children: Vec<String>,
    created_at: Option<u64>,
    /// `ttlMs` (`None` inside: unlimited).
    ttl_ms: Option<Option<u64>>,
    last_updated: u64,
    /// Status of the last ordered read, and the epoch it was made in.
    last_status: Option<String>,
    last_epoch: u32,
    /// `touched` at the last ordered read.
    touched_seen: u64,
    /// `tasks/update` sent to it, `tasks/cancel` sent to it or an ancestor.
    touched: u64,
    /// The first terminal snapshot and when it was recorded.
    terminal: Option<Value>,
    terminal_seq: u64,
    /// Steer messages sent to it, in order.
    steers: Vec<String>,
    /// Input keys whose answer was acknowledged while outstanding.
    answered: BTreeSet<String>,
    /// A pause of ours was acknowledged and no resume or cancel of it or an
    /// ancestor was sent since.
    paused_by_us: bool,
    /// ... and it was seen `paused` since: it stays paused until then.
    must_stay_paused: bool,
    cancel_sent: bool,
    /// A cancel was acknowledged while it was parked on unanswered input:
    /// nothing else can end it, so it must end `cancelled`.
    must_end_cancelled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A `CreateTaskResult`: a seed, its status is not the task's.
    Seed,
    /// A read by the tree's own (sequential) client, sent at `sent`.
    Ordered { sent: u64 },
    /// A `notifications/tasks` message (unordered with the reads).
    Sse,
}

/// The state of a task when the server was killed, for the restart rules.
#[derive(Debug)]
struct Before {
    tool: Tool,
    is_root: bool,
    terminal: bool,
    /// Last seen `input_required` and nothing sent to it since: it was
    /// parked on input, and only a cancel could have ended it.
    parked_on_input: bool,
    /// A fanout root with a pause of ours in effect (paused or pending).
    pause_held: bool,
}

#[derive(Debug, Default)]
struct Stats {
    trees: usize,
    acks: HashMap<&'static str, u64>,
    restart_failures: usize,
    reruns_seen: usize,
    sse_terminal: usize,
    /// Restart rules that had something to check.
    parked_across_restart: usize,
    pauses_across_restart: usize,
    answers_across_restart: usize,
    parked_cancels: usize,
}

#[derive(Debug, Default)]
struct Model {
    epoch: u32,
    seq: u64,
    trees: HashMap<String, Tree>,
    tree_order: Vec<String>,
    tasks: HashMap<String, Task>,
    violations: Vec<String>,
    stats: Stats,
}

fn status_of(snap: &Value) -> &str {
    snap["status"].as_str().unwrap_or("")
}

fn is_terminal(status: &str) -> bool {
    TERMINAL.contains(&status)
}

fn restart_failed(snap: &Value) -> bool {
    status_of(snap) == "failed" && snap["error"]["data"]["reason"] == RESTARTED
}

fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// A snapshot without the envelope fields (`resultType`, `_meta`).
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

impl Model {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn violate(&mut self, v: String) {
        eprintln!("VIOLATION: {v}");
        self.violations.push(v);
    }

    fn ack(&mut self, what: &'static str) {
        *self.stats.acks.entry(what).or_default() += 1;
    }

    fn add_tree(&mut self, root: &str, tool: Tool, args: Value) {
        let input_at = args["inputAt"].as_str().map(str::to_owned);
        let fail_at = args["failAt"].as_str().map(str::to_owned);
        self.trees.insert(
            root.to_owned(),
            Tree {
                tool,
                args,
                input_at,
                fail_at,
                steered: false,
            },
        );
        self.tree_order.push(root.to_owned());
        self.tasks.insert(
            root.to_owned(),
            Task {
                root: root.to_owned(),
                ..Task::default()
            },
        );
        self.stats.trees += 1;
    }

    fn tree_of(&self, id: &str) -> Option<&Tree> {
        self.tasks.get(id).and_then(|t| self.trees.get(&t.root))
    }

    fn is_terminal(&self, id: &str) -> bool {
        self.tasks.get(id).is_some_and(|t| t.terminal.is_some())
    }

    /// `id` and every known descendant.
    fn subtree(&self, id: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![id.to_owned()];
        while let Some(t) = stack.pop() {
            if let Some(task) = self.tasks.get(&t) {
                stack.extend(task.children.iter().cloned());
            }
            out.push(t);
        }
        out
    }

    /// Whether a cancel was sent to `id` or one of its ancestors.
    fn cancel_covers(&self, id: &str) -> bool {
        let mut cur = Some(id.to_owned());
        while let Some(c) = cur {
            let Some(t) = self.tasks.get(&c) else { return false };
            if t.cancel_sent {
                return true;
            }
            cur = t.parent.clone();
        }
        false
    }

    fn parked_on_input(&self, id: &str) -> bool {
        self.tasks.get(id).is_some_and(|t| {
            t.last_status.as_deref() == Some("input_required")
                && t.last_epoch == self.epoch
                && t.touched_seen == t.touched
                && t.terminal.is_none()
        })
    }

    /// Checks one snapshot against everything seen before, then records it.
    fn observe(&mut self, raw: &Value, source: Source) {
        let snap = strip(raw);
        let Some(id) = snap["taskId"].as_str().map(str::to_owned) else {
            self.violate(format!("a task snapshot without taskId: {snap}"));
            return;
        };
        let Some(mut task) = self.tasks.remove(&id) else {
            self.violate(format!(
                "task {id} was shown before any parent listed it or a CreateTaskResult named it: {snap}"
            ));
            return;
        };
        let mut v: Vec<String> = Vec::new();
        let status = status_of(&snap).to_owned();
        let terminal = is_terminal(&status);

        // I1: the parent never changes and is not the task itself.
        let parent = snap["parentTaskId"].as_str().map(str::to_owned);
        if parent != task.parent {
            v.push(format!(
                "I1: task {id} has parentTaskId {parent:?}, but it was listed under {:?}",
                task.parent
            ));
        }
        if parent.as_deref() == Some(id.as_str()) {
            v.push(format!("I1: task {id} is its own parent"));
        }

        // createdAt and ttlMs never change.
        let created = snap["createdAt"]
            .as_str()
            .and_then(|s| s.parse::<Timestamp>().ok())
            .map(Timestamp::as_millis);
        let ttl = snap.get("ttlMs").map(Value::as_u64);
        match (created, task.created_at) {
            (None, _) => v.push(format!("task {id}: no valid createdAt in {snap}")),
            (Some(c), Some(was)) if c != was => {
                v.push(format!("task {id}: createdAt changed from {was} to {c}"));
            }
            (Some(c), _) => task.created_at = Some(c),
        }
        match (ttl, task.ttl_ms) {
            (None, _) => v.push(format!("task {id}: no ttlMs in {snap}")),
            (Some(t), Some(was)) if t != was => {
                v.push(format!("task {id}: ttlMs changed from {was:?} to {t:?}"));
            }
            (Some(t), _) => task.ttl_ms = Some(t),
        }

        // I8: a child never expires after its parent (or after its own
        // creation, when the parent's expiry had passed already).
        if let (Some(p), Some(c), Some(t)) = (&task.parent, task.created_at, task.ttl_ms)
            && let Some(pt) = self.tasks.get(p)
            && let (Some(pc), Some(pttl)) = (pt.created_at, pt.ttl_ms)
            && let Some(pttl) = pttl
        {
            let bound = (pc + pttl).max(c);
            match t {
                None => v.push(format!(
                    "I8: task {id} never expires, its parent {p} does at {}",
                    pc + pttl
                )),
                Some(t) if c + t > bound => v.push(format!(
                    "I8: task {id} expires at {} after its parent {p} ({})",
                    c + t,
                    pc + pttl
                )),
                Some(_) => {}
            }
        }

        // I2: childTaskIds only ever grow, without duplicates or itself.
        let kids = ids(&snap["childTaskIds"]);
        let distinct: HashSet<&String> = kids.iter().collect();
        if distinct.len() != kids.len() {
            v.push(format!("I2: task {id} lists a child twice: {kids:?}"));
        }
        if kids.contains(&id) {
            v.push(format!("I2: task {id} lists itself as a child"));
        }
        let comparable = kids.starts_with(&task.children) || task.children.starts_with(&kids);
        if !comparable {
            v.push(format!(
                "I2: childTaskIds of {id} are not an extension of what was shown before: before {:?}, now {kids:?}",
                task.children
            ));
        }
        if let Source::Ordered { .. } = source {
            if !kids.starts_with(&task.ordered_children) {
                v.push(format!(
                    "I2: childTaskIds of {id} shrank or changed: before {:?}, now {kids:?}",
                    task.ordered_children
                ));
            }
            if kids.len() > task.ordered_children.len() {
                task.ordered_children = kids.clone();
            }
        }
        if comparable && kids.len() > task.children.len() {
            for k in &kids[task.children.len()..] {
                if *k == id {
                    continue;
                }
                match self.tasks.get(k) {
                    Some(other) if other.parent.as_deref() != Some(id.as_str()) => v.push(format!(
                        "I3: task {k} is listed under {id} but was listed under {:?} before",
                        other.parent
                    )),
                    Some(_) => {}
                    None => {
                        self.tasks.insert(
                            k.clone(),
                            Task {
                                root: task.root.clone(),
                                parent: Some(id.clone()),
                                ..Task::default()
                            },
                        );
                    }
                }
            }
            task.children = kids.clone();
        }

        if source != Source::Seed {
            // Terminal is absorbing, with the identical payload.
            let sent = match source {
                Source::Ordered { sent } => Some(sent),
                _ => None,
            };
            match &task.terminal {
                Some(first) if terminal => {
                    // The result or error, serialized, byte for byte; then
                    // everything else (status, times, links, message).
                    let mut same = true;
                    for field in ["result", "error"] {
                        let a = serde_json::to_string(&first[field]).unwrap();
                        let b = serde_json::to_string(&snap[field]).unwrap();
                        if a != b {
                            same = false;
                            v.push(format!(
                                "I4: the {field} of terminal task {id} changed:\n  first: {a}\n  now:   {b}"
                            ));
                        }
                    }
                    if same && *first != snap {
                        v.push(format!(
                            "I4: terminal task {id} changed:\n  first: {first}\n  now:   {snap}"
                        ));
                    }
                }
                // Read after the terminal snapshot was recorded (an older,
                // unordered read may still arrive late).
                Some(first) if sent.is_some_and(|s| s > task.terminal_seq) => {
                    v.push(format!(
                        "I4: task {id} was {} and is {status} again:\n  first: {first}\n  now:   {snap}",
                        status_of(first)
                    ));
                }
                Some(_) => {}
                None if terminal => {
                    task.terminal = Some(snap.clone());
                    task.terminal_seq = self.next_seq();
                    if task.must_end_cancelled && status != "cancelled" {
                        v.push(format!(
                            "cancel lost: a cancel of {id} was acknowledged while it waited for input, \
                             yet it ended {status}: {snap}"
                        ));
                    }
                    match status.as_str() {
                        "completed" if !snap["result"].is_object() => {
                            v.push(format!("completed task {id} without a result: {snap}"));
                        }
                        "failed"
                            if !(snap["error"]["code"].is_i64() && snap["error"]["message"].is_string()) =>
                        {
                            v.push(format!("failed task {id} without a JSON-RPC error: {snap}"));
                        }
                        _ => {}
                    }
                }
                None => {}
            }
            if let Some(sent) = sent {
                // I4: a parent was terminal when this read was sent, so
                // every child was terminal then, and still is.
                if !terminal
                    && let Some(p) = &task.parent
                    && let Some(pt) = self.tasks.get(p)
                    && pt.terminal.is_some()
                    && pt.terminal_seq < sent
                {
                    v.push(format!(
                        "I4: task {id} is {status} although its parent {p} was already terminal: {snap}"
                    ));
                }
                // A steered deep_research root re-plans and cancels
                // sub-questions itself (a cancel lifts pauses).
                let replans = task.parent.is_some()
                    && self
                        .trees
                        .get(&task.root)
                        .is_some_and(|t| t.tool == Tool::Research && t.steered);
                if !terminal && task.must_stay_paused && !replans && status != "paused" {
                    v.push(format!(
                        "pause lost: {id} was paused by tasks/pause and never resumed, yet it is {status}: {snap}"
                    ));
                }
                let keys: Vec<String> = snap["inputRequests"]
                    .as_object()
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                for k in &keys {
                    if task.answered.contains(k) {
                        v.push(format!(
                            "answer lost: {id} asks for {k:?} again after its answer was acknowledged: {snap}"
                        ));
                    }
                }
                let updated = snap["lastUpdatedAt"]
                    .as_str()
                    .and_then(|s| s.parse::<Timestamp>().ok())
                    .map(Timestamp::as_millis);
                match updated {
                    None => v.push(format!("task {id}: no valid lastUpdatedAt in {snap}")),
                    Some(u) if u < task.last_updated => v.push(format!(
                        "task {id}: lastUpdatedAt went back from {} to {}",
                        Timestamp::from_millis(task.last_updated),
                        Timestamp::from_millis(u)
                    )),
                    Some(u) => task.last_updated = u,
                }
                task.last_status = Some(status.clone());
                task.last_epoch = self.epoch;
                task.touched_seen = task.touched;
                if status == "paused" && task.paused_by_us {
                    task.must_stay_paused = true;
                }
            }
        }
        self.tasks.insert(id, task);
        for x in v {
            self.violate(x);
        }
    }

    /// A `tasks/update` or `tasks/cancel` is about to be sent: it may end or
    /// unblock the task.
    fn touch(&mut self, id: &str) {
        if let Some(t) = self.tasks.get_mut(id) {
            t.touched += 1;
        }
    }

    /// A resume or cancel of `id` is about to be sent: pauses of ours in its
    /// subtree may be lifted from now on.
    fn release_pauses(&mut self, id: &str) {
        for t in self.subtree(id) {
            if let Some(task) = self.tasks.get_mut(&t) {
                task.paused_by_us = false;
                task.must_stay_paused = false;
            }
        }
    }

    /// The state at the kill, for the restart rules.
    fn before(&self) -> HashMap<String, Before> {
        self.tasks
            .iter()
            .filter_map(|(id, t)| {
                let tree = self.trees.get(&t.root)?;
                let is_root = t.parent.is_none();
                Some((
                    id.clone(),
                    Before {
                        tool: tree.tool,
                        is_root,
                        terminal: t.terminal.is_some(),
                        parked_on_input: self.parked_on_input(id),
                        pause_held: is_root && tree.tool == Tool::Fanout && t.paused_by_us,
                    },
                ))
            })
            .collect()
    }
}

// ----- one server lifetime -------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Create,
    Steer,
    Update,
    Pause,
    Resume,
    Cancel,
    SseTerminal,
}

impl Trigger {
    /// `CRASH_TRIGGER=<name>` kills every round right after the first
    /// acknowledgement of that kind.
    fn parse(name: &str) -> Trigger {
        match name {
            "create" => Trigger::Create,
            "steer" => Trigger::Steer,
            "update" => Trigger::Update,
            "pause" => Trigger::Pause,
            "resume" => Trigger::Resume,
            "cancel" => Trigger::Cancel,
            "notification" => Trigger::SseTerminal,
            other => panic!(
                "CRASH_TRIGGER={other:?}: expected create, steer, update, pause, resume, cancel or notification"
            ),
        }
    }
}

/// The client side of one server lifetime.
struct Round {
    server: Arc<ServerProcess>,
    client: Client,
    model: Arc<Mutex<Model>>,
    /// Kill right after the first acknowledged `Trigger` from this instant on.
    plan: Mutex<Option<(Trigger, Instant)>>,
    fired: Mutex<Option<Trigger>>,
    kill_sent: tokio::sync::Notify,
    jobs: Mutex<Vec<JoinHandle<()>>>,
}

/// The server is gone (killed): stop driving.
struct Stop;

impl Round {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }

    fn violate(&self, v: String) {
        self.model().violate(v);
    }

    /// Counts an acknowledgement, and kills the server right away when it
    /// is the one this round waits for.
    fn acked(&self, trigger: Trigger, what: &'static str) {
        self.model().ack(what);
        let plan = *self.plan.lock().unwrap();
        if let Some((t, from)) = plan
            && t == trigger
            && Instant::now() >= from
            && self.server.kill()
        {
            *self.fired.lock().unwrap() = Some(trigger);
            self.kill_sent.notify_one();
        }
    }

    /// Sends a request. `Err(Stop)` when no whole answer came because the
    /// server was killed; the same, plus a violation, when the server was
    /// not killed (it died, dropped the connection or hung).
    async fn call(&self, method: &str, params: Value) -> Result<Rpc, Stop> {
        match rpc(&self.client, method, params.clone(), REQUEST_TIMEOUT).await {
            Ok(r) => {
                if let Rpc::Err(status, e) = &r {
                    let not_found = e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("Task not found"));
                    if *status >= 500 || e["code"] == -32603 || not_found {
                        self.violate(format!("{method} {params} answered HTTP {status}: {e}"));
                    }
                }
                Ok(r)
            }
            Err(e) => {
                if !self.server.is_killed() {
                    self.violate(format!(
                        "{method} {params}: {e}, while the server was not killed (exit: {:?})",
                        self.server.exited()
                    ));
                }
                Err(Stop)
            }
        }
    }

    /// `tasks/get` of a known task, checked and recorded.
    async fn get(&self, id: &str) -> Result<Option<Value>, Stop> {
        let sent = self.model().next_seq();
        match self.call("tasks/get", json!({"taskId": id})).await? {
            Rpc::Ok(snap) => {
                self.model().observe(&snap, Source::Ordered { sent });
                Ok(Some(snap))
            }
            Rpc::Err(..) => Ok(None),
        }
    }

    /// Reads a tree top-down (a parent before its children). With
    /// `skip_terminal`, tasks known terminal are not read again (their
    /// subtrees are terminal too).
    async fn walk(&self, root: &str, skip_terminal: bool) -> Result<Vec<Value>, Stop> {
        let mut out = Vec::new();
        let mut queue = VecDeque::from([root.to_owned()]);
        while let Some(id) = queue.pop_front() {
            if skip_terminal && id != root && self.model().is_terminal(&id) {
                continue;
            }
            if let Some(snap) = self.get(&id).await? {
                queue.extend(ids(&snap["childTaskIds"]));
                out.push(snap);
            }
        }
        Ok(out)
    }

    fn spawn(self: &Arc<Self>, f: impl Future<Output = ()> + Send + 'static) {
        let h = tokio::spawn(f);
        self.jobs.lock().unwrap().push(h);
    }

    /// Follows `notifications/tasks` of `roots` (and their subtasks).
    fn spawn_listener(self: &Arc<Self>, roots: Vec<String>) {
        if roots.is_empty() {
            return;
        }
        let me = self.clone();
        self.spawn(async move {
            let client = me.client.clone();
            let r = listen(&client, &roots, |msg| {
                if msg["method"] != "notifications/tasks" {
                    return;
                }
                let terminal = is_terminal(status_of(&msg["params"]));
                {
                    let mut m = me.model();
                    m.observe(&msg["params"], Source::Sse);
                    if terminal {
                        m.stats.sse_terminal += 1;
                    }
                }
                if terminal {
                    me.acked(Trigger::SseTerminal, "notification (terminal)");
                }
            })
            .await;
            if let Err(e) = r
                && !me.server.is_killed()
            {
                me.violate(format!("subscriptions/listen: {e}"));
            }
        });
    }
}

// ----- the clients -------------------------------------------------------------------

const QUESTIONS: [&str; 4] = [
    "How do MCP tasks handle long-running work?",
    "Why do grid-scale batteries degrade?",
    "How does async Rust with Tokio schedule tasks?",
    "How does sleep affect circadian rhythms?",
];
const FOCUS: [&str; 4] = [
    "focus on battery storage",
    "focus on tokio",
    "focus on sleep",
    "focus on cancellation",
];

fn random_call(rng: &mut Rng) -> (Tool, Value) {
    if rng.chance(0.25) {
        let args = json!({
            "question": rng.pick(&QUESTIONS).unwrap(),
            "breadth": rng.range(1, 4),
            "depth": rng.range(1, 3),
        });
        return (Tool::Research, args);
    }
    let width = rng.range(1, 4);
    let depth = if width == 3 { 1 } else { rng.range(0, 3) };
    let (steps, step_ms) = if rng.chance(0.4) {
        (rng.range(10, 30), rng.range(50, 150))
    } else {
        (rng.range(1, 7), rng.range(5, 120))
    };
    let mut args =
        json!({"width": width, "depth": depth, "steps": steps, "stepMs": step_ms, "ttlMs": TTL_MS});
    let child = |rng: &mut Rng| format!("0.{}", rng.range(0, width));
    if rng.chance(0.45) {
        args["inputAt"] = json!("0");
    } else if depth > 0 && rng.chance(0.35) {
        args["inputAt"] = json!(child(rng));
    }
    if depth > 0 && rng.chance(0.2) {
        let p = child(rng);
        if args["inputAt"] != p.as_str() {
            args["failAt"] = json!(p);
        }
    }
    (Tool::Fanout, args)
}

/// Creates `count` trees at random moments, each driven by its own client.
async fn creator(round: Arc<Round>, mut rng: Rng, count: u64) {
    for _ in 0..count {
        tokio::time::sleep(Duration::from_millis(rng.range(0, 700))).await;
        if round.server.is_killed() {
            return;
        }
        let (tool, args) = random_call(&mut rng);
        let Ok(r) = round
            .call(
                "tools/call",
                json!({"name": tool.name(), "arguments": args.clone()}),
            )
            .await
        else {
            return;
        };
        match r {
            Rpc::Ok(res) if res["resultType"] == "task" && res["taskId"].is_string() => {
                let id = res["taskId"].as_str().unwrap().to_owned();
                {
                    let mut m = round.model();
                    m.add_tree(&id, tool, args);
                    m.observe(&res, Source::Seed);
                }
                round.acked(Trigger::Create, "CreateTaskResult");
                round.spawn(drive(round.clone(), id.clone(), rng.fork(), false));
                round.spawn_listener(vec![id]);
            }
            other => round.violate(format!(
                "tools/call {} {args} did not create a task: {other:?}",
                tool.name()
            )),
        }
    }
}

async fn steer(round: &Round, id: &str, message: String) -> Result<(), Stop> {
    {
        let mut m = round.model();
        if let Some(t) = m.tasks.get_mut(id) {
            t.steers.push(message.clone());
        }
        let root = m.tasks.get(id).map(|t| t.root.clone()).unwrap_or_default();
        if let Some(tree) = m.trees.get_mut(&root)
            && tree.tool == Tool::Research
        {
            tree.steered = true;
        }
    }
    if let Rpc::Ok(_) = round
        .call("tasks/steer", json!({"taskId": id, "message": message}))
        .await?
    {
        round.acked(Trigger::Steer, "tasks/steer");
    }
    Ok(())
}

async fn answer_input(round: &Round, snap: &Value) -> Result<(), Stop> {
    let id = snap["taskId"].as_str().unwrap_or_default().to_owned();
    let keys: Vec<String> = snap["inputRequests"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    if keys.is_empty() {
        return Ok(());
    }
    // Answered right after the read that showed the keys outstanding, with
    // nothing else sent to the task in between: an ack means they were taken.
    let exact = round.model().parked_on_input(&id);
    round.model().touch(&id);
    let responses: serde_json::Map<String, Value> = keys.iter().map(|k| (k.clone(), answer())).collect();
    if let Rpc::Ok(_) = round
        .call("tasks/update", json!({"taskId": id, "inputResponses": responses}))
        .await?
    {
        if exact && let Some(t) = round.model().tasks.get_mut(&id) {
            t.answered.extend(keys);
        }
        round.acked(Trigger::Update, "tasks/update");
    }
    Ok(())
}

async fn pause(round: &Round, id: &str) -> Result<(), Stop> {
    let sent = round.model().next_seq();
    if let Rpc::Ok(snap) = round.call("tasks/pause", json!({"taskId": id})).await? {
        {
            let mut m = round.model();
            if let Some(t) = m.tasks.get_mut(id) {
                t.paused_by_us = true;
            }
            m.observe(&snap, Source::Ordered { sent });
        }
        round.acked(Trigger::Pause, "tasks/pause");
    }
    Ok(())
}

async fn resume(round: &Round, id: &str) -> Result<(), Stop> {
    round.model().release_pauses(id);
    let sent = round.model().next_seq();
    if let Rpc::Ok(snap) = round.call("tasks/resume", json!({"taskId": id})).await? {
        round.model().observe(&snap, Source::Ordered { sent });
        round.acked(Trigger::Resume, "tasks/resume");
    }
    Ok(())
}

async fn cancel(round: &Round, id: &str) -> Result<(), Stop> {
    let parked = {
        let mut m = round.model();
        let parked = m.parked_on_input(id);
        m.release_pauses(id);
        for t in m.subtree(id) {
            m.touch(&t);
        }
        if let Some(t) = m.tasks.get_mut(id) {
            t.cancel_sent = true;
        }
        parked
    };
    if let Rpc::Ok(_) = round.call("tasks/cancel", json!({"taskId": id})).await? {
        if parked {
            let mut m = round.model();
            m.stats.parked_cancels += 1;
            if let Some(t) = m.tasks.get_mut(id) {
                t.must_end_cancelled = true;
            }
        }
        round.acked(Trigger::Cancel, "tasks/cancel");
    }
    Ok(())
}

/// One client per tree: reads the tree, answers input, and (unless
/// `finish`) steers, pauses, resumes and cancels at random. With `finish`,
/// it only resumes what is paused and answers input, until the root ends.
async fn drive(round: Arc<Round>, root: String, mut rng: Rng, finish: bool) {
    let _ = drive_inner(&round, &root, &mut rng, finish).await;
}

async fn drive_inner(round: &Round, root: &str, rng: &mut Rng, finish: bool) -> Result<(), Stop> {
    let tool = round
        .model()
        .tree_of(root)
        .map(|t| t.tool)
        .unwrap_or(Tool::Fanout);
    let mut n = 0u64;
    // Some clients leave input requests waiting for a whole round.
    let answer_p = *rng.pick(&[0.0, 0.05, 0.3]).unwrap();
    loop {
        if round.server.is_killed() {
            return Err(Stop);
        }
        let snaps = round.walk(root, true).await?;
        let Some(root_snap) = snaps.iter().find(|s| s["taskId"] == root) else {
            return Ok(());
        };
        if is_terminal(status_of(root_snap)) {
            return Ok(());
        }
        let live: Vec<&Value> = snaps.iter().filter(|s| !is_terminal(status_of(s))).collect();
        let mut touched_now: HashSet<String> = HashSet::new();
        for s in live.iter().filter(|s| status_of(s) == "input_required") {
            if finish || rng.chance(answer_p) {
                answer_input(round, s).await?;
                touched_now.insert(s["taskId"].as_str().unwrap_or_default().to_owned());
            }
        }
        let id_of = |s: &Value| s["taskId"].as_str().unwrap_or_default().to_owned();
        let paused: Vec<String> = live
            .iter()
            .filter(|s| status_of(s) == "paused")
            .map(|s| id_of(s))
            .collect();
        if finish {
            // Resume the topmost paused tasks; their descendants follow.
            let set: HashSet<&String> = paused.iter().collect();
            for s in live.iter().filter(|s| status_of(s) == "paused") {
                let parent = s["parentTaskId"].as_str().map(str::to_owned);
                if !parent.is_some_and(|p| set.contains(&p)) {
                    resume(round, &id_of(s)).await?;
                }
            }
        } else {
            if rng.chance(0.12) {
                let target = if rng.chance(0.6) {
                    root.to_owned()
                } else {
                    id_of(rng.pick(&live).unwrap())
                };
                n += 1;
                let epoch = round.model().epoch;
                let message = match tool {
                    Tool::Research if target == root => rng.pick(&FOCUS).unwrap().to_string(),
                    _ => format!("steer {} e{epoch} #{n}", short(&target)),
                };
                steer(round, &target, message).await?;
            }
            if rng.chance(0.07) {
                let candidates: Vec<&&Value> = live.iter().filter(|s| status_of(s) != "paused").collect();
                let target = if rng.chance(0.5) && status_of(root_snap) != "paused" {
                    Some(root.to_owned())
                } else {
                    rng.pick(&candidates).map(|s| id_of(s))
                };
                if let Some(t) = target {
                    pause(round, &t).await?;
                }
            }
            for id in &paused {
                let ours = round.model().tasks.get(id).is_some_and(|t| t.paused_by_us);
                if ours && rng.chance(0.05) {
                    resume(round, id).await?;
                }
            }
            if rng.chance(0.04) {
                let parked: Vec<String> = live
                    .iter()
                    .filter(|s| status_of(s) == "input_required")
                    .map(|s| id_of(s))
                    .filter(|id| !touched_now.contains(id))
                    .collect();
                let others: Vec<String> = live.iter().map(|s| id_of(s)).filter(|id| id != root).collect();
                let target = if !parked.is_empty() && rng.chance(0.7) {
                    rng.pick(&parked).cloned()
                } else if rng.chance(0.15) {
                    Some(root.to_owned())
                } else {
                    rng.pick(&others).cloned()
                };
                if let Some(t) = target {
                    cancel(round, &t).await?;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.range(5, 40))).await;
    }
}

// ----- checks after a restart and at the end ---------------------------------------------

/// Reads every known tree whole (not skipping terminal tasks): every task
/// ever shown must still be answered. Returns the first snapshot of each task.
async fn read_everything(round: &Arc<Round>) -> HashMap<String, Value> {
    let roots: Vec<String> = round.model().tree_order.clone();
    let walks: Vec<Result<Vec<Value>, Stop>> = futures::stream::iter(roots)
        .map(|r| {
            let round = round.clone();
            async move { round.walk(&r, false).await }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let mut seen: HashMap<String, Value> = HashMap::new();
    for w in walks {
        match w {
            Ok(snaps) => {
                for s in snaps {
                    let id = s["taskId"].as_str().unwrap_or_default().to_owned();
                    seen.entry(id).or_insert(s);
                }
            }
            Err(Stop) => round.violate("the server went away during the check".into()),
        }
    }
    let unreached: Vec<String> = {
        let m = round.model();
        m.tasks
            .keys()
            .filter(|id| !seen.contains_key(*id))
            .cloned()
            .collect()
    };
    for id in unreached {
        round.violate(format!(
            "task {id}, shown to a client before, is not reachable from its root any more"
        ));
        if let Ok(Some(s)) = round.get(&id).await {
            seen.insert(id, s);
        }
    }
    seen
}

/// What recovery must have done to the tasks that were shown before the kill.
fn check_restart(model: &mut Model, before: &HashMap<String, Before>, seen: &HashMap<String, Value>) {
    let mut v = Vec::new();
    for (id, b) in before {
        let Some(snap) = seen.get(id) else { continue };
        let status = status_of(snap);
        let terminal = is_terminal(status);
        if (b.tool == Tool::Research || !b.is_root) && !terminal {
            v.push(format!(
                "task {id} ({}, {}) is {status} after the restart: its handler was lost, so it must have \
                 ended: {snap}",
                b.tool.name(),
                if b.is_root { "root" } else { "subtask" },
            ));
        }
        if b.parked_on_input {
            model.stats.parked_across_restart += 1;
            if b.tool == Tool::Fanout && b.is_root {
                if terminal {
                    v.push(format!(
                        "fanout root {id} waited for input and was not touched, yet it ended across the \
                         restart instead of running again: {snap}"
                    ));
                }
            } else if !restart_failed(snap) {
                v.push(format!(
                    "task {id} waited for input and was not touched; after the restart it must be failed \
                     with reason {RESTARTED}: {snap}"
                ));
            }
        }
        if b.pause_held && !b.terminal {
            model.stats.pauses_across_restart += 1;
        }
        if !b.terminal
            && b.is_root
            && b.tool == Tool::Fanout
            && model.tasks.get(id).is_some_and(|t| !t.answered.is_empty())
        {
            // The answer must come back to the handler that runs again.
            model.stats.answers_across_restart += 1;
        }
        if b.pause_held && !terminal && status != "paused" {
            v.push(format!(
                "pause lost across the restart: fanout root {id} was paused by a client and is {status}: {snap}"
            ));
        }
        if !b.terminal && restart_failed(snap) {
            model.stats.restart_failures += 1;
        }
        if !b.terminal && b.is_root && b.tool == Tool::Fanout && !terminal {
            model.stats.reruns_seen += 1;
        }
    }
    for x in v {
        model.violate(x);
    }
}

/// Whether `got` lists a subsequence of `sent`, each at most once.
fn is_subsequence(got: &[String], sent: &[String]) -> bool {
    let mut it = sent.iter();
    got.iter().all(|g| it.any(|s| s == g))
}

/// After the last round: every tree ended, and ended as its tool and the
/// clients' actions allow.
fn check_final(model: &mut Model) {
    let mut v = Vec::new();
    for (id, t) in &model.tasks {
        let Some(tree) = model.trees.get(&t.root) else {
            continue;
        };
        let Some(snap) = &t.terminal else {
            v.push(format!(
                "task {id} of {} {} did not end (last seen {:?})",
                tree.tool.name(),
                t.root,
                t.last_status
            ));
            continue;
        };
        let status = status_of(snap);
        let is_root = t.parent.is_none();
        match status {
            "failed" => {
                let expected = tree
                    .fail_at
                    .as_ref()
                    .map(|p| format!("fanout node {p} failed as requested"));
                let as_requested = expected.is_some_and(|m| snap["error"]["message"] == m.as_str());
                if !restart_failed(snap) && !as_requested {
                    v.push(format!("task {id} failed for no reason the test knows: {snap}"));
                }
            }
            "cancelled" => {
                // deep_research cancels queued sub-questions when a steer re-plans.
                let replanned = tree.tool == Tool::Research && tree.steered && !is_root;
                if !model.cancel_covers(id) && !replanned {
                    v.push(format!(
                        "task {id} was cancelled, but no client cancelled it: {snap}"
                    ));
                }
            }
            _ => {}
        }
        if is_root && tree.tool == Tool::Fanout && status != "completed" && !model.cancel_covers(id) {
            v.push(format!("fanout root {id} ({}) ended {status}: {snap}", tree.args));
        }
        if tree.tool == Tool::Fanout && status == "completed" {
            let sc = &snap["result"]["structuredContent"];
            let steers = ids(&sc["steers"]);
            if !is_subsequence(&steers, &t.steers) {
                v.push(format!(
                    "I10: fanout task {id} reports steers {steers:?}, not an in-order, at-most-once \
                     subsequence of the steers sent {:?}",
                    t.steers
                ));
            }
            let path = sc["path"].as_str().unwrap_or_default();
            if tree.input_at.as_deref() == Some(path) && sc["input"] != answer() {
                v.push(format!(
                    "fanout node {path} ({id}) completed without the answer it was given: {}",
                    sc["input"]
                ));
            }
            if is_root && path != "0" {
                v.push(format!("fanout root {id} reports path {path:?}"));
            }
            for c in sc["children"].as_array().into_iter().flatten() {
                let cid = c["taskId"].as_str().unwrap_or_default();
                if !t.children.iter().any(|k| k == cid) {
                    v.push(format!("fanout task {id} reports a child {cid} it does not list"));
                    continue;
                }
                let actual = model
                    .tasks
                    .get(cid)
                    .and_then(|k| k.terminal.as_ref())
                    .map(|s| status_of(s).to_owned());
                if actual.as_deref() != c["status"].as_str() {
                    v.push(format!(
                        "fanout task {id} reports child {cid} as {}, but the child is {actual:?}",
                        c["status"]
                    ));
                }
            }
        }
        if tree.tool == Tool::Research && is_root && status == "failed" && !restart_failed(snap) {
            v.push(format!("deep_research root {id} failed: {snap}"));
        }
    }
    for x in v {
        model.violate(x);
    }
}

// ----- the test ------------------------------------------------------------------------

/// A fresh directory, removed at the end unless the test failed (then it is
/// kept, and named, for a look at the database and the server logs).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("subtask-crash-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("crash test: kept {} (database and server logs)", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v:?}: {e}")))
}

/// Panics panics and error lines the server wrote count as failures.
fn check_log(model: &Mutex<Model>, log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let bad: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("panicked") || l.contains("ERROR"))
        .collect();
    if !bad.is_empty() {
        model.lock().unwrap().violate(format!(
            "the server logged errors ({}):\n{}",
            log.display(),
            bad.join("\n")
        ));
    }
}

fn fail_on_violations(model: &Mutex<Model>, seed: u64, when: &str) {
    let m = model.lock().unwrap();
    if m.violations.is_empty() {
        return;
    }
    let shown: Vec<&String> = m.violations.iter().take(40).collect();
    panic!(
        "crash test failed {when} (seed {seed}; replay with CRASH_SEED={seed}): {} violation(s):\n{}",
        m.violations.len(),
        shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
    );
}

/// Starts the server, reads everything, checks the restart rules.
async fn restart(
    bin: &Path,
    model: &Arc<Mutex<Model>>,
    args: &[String],
    log: &Path,
    before: &HashMap<String, Before>,
) -> Arc<Round> {
    let server = ServerProcess::start(bin, args, log, READY_TIMEOUT)
        .await
        .unwrap_or_else(|e| {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("the server did not come back: {e}\n{text}")
        });
    let round = Arc::new(Round {
        client: Client::new(server.addr(), full_caps()),
        server: Arc::new(server),
        model: model.clone(),
        plan: Mutex::new(None),
        fired: Mutex::new(None),
        kill_sent: tokio::sync::Notify::new(),
        jobs: Mutex::new(Vec::new()),
    });
    let seen = read_everything(&round).await;
    check_restart(&mut model.lock().unwrap(), before, &seen);
    round
}

/// Stops every client of the round and reaps the killed server.
async fn end_round(round: &Arc<Round>, model: &Mutex<Model>) {
    round.server.kill();
    let jobs: Vec<JoinHandle<()>> = std::mem::take(&mut *round.jobs.lock().unwrap());
    for j in &jobs {
        j.abort();
    }
    for j in jobs {
        if let Err(e) = j.await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    let status = round.server.wait();
    if status.and_then(|s| s.signal()) != Some(9) {
        model.lock().unwrap().violate(format!(
            "the server ended by itself before it was killed: {status:?}"
        ));
    }
    check_log(model, round.server.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let seed = env_u64("CRASH_SEED").unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        nanos ^ (u64::from(std::process::id()) << 32)
    });
    let rounds = env_u64("CRASH_ROUNDS").unwrap_or(u64::from(DEFAULT_ROUNDS));
    let forced_trigger = std::env::var("CRASH_TRIGGER").ok().map(|t| Trigger::parse(&t));
    println!("crash test: seed {seed} (replay with CRASH_SEED={seed}), {rounds} rounds");
    let started = Instant::now();
    let scratch = Scratch::new();
    let db = scratch.0.join("tasks.db");
    let bin = support::process::private_binary(&scratch.0);
    let mut rng = Rng(seed);
    let model = Arc::new(Mutex::new(Model::default()));
    let mut before: HashMap<String, Before> = HashMap::new();
    let mut kills: Vec<String> = Vec::new();

    for r in 0..rounds {
        let durability = if rng.chance(0.3) { "relaxed" } else { "full" };
        let args: Vec<String> = vec![
            "--db".into(),
            db.display().to_string(),
            "--durability".into(),
            durability.into(),
        ];
        let log = scratch.0.join(format!("server-{r:02}.log"));
        model.lock().unwrap().epoch += 1;

        // Some kills land during start-up and recovery, before the server answers.
        if r > 0 && rng.chance(0.1) {
            let server = ServerProcess::spawn(&bin, &args, &log);
            tokio::time::sleep(Duration::from_millis(rng.range(0, 60))).await;
            let exited_early = server.exited();
            server.kill();
            let status = server.wait();
            let port_taken = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("cannot listen on");
            if let Some(s) = exited_early {
                if !port_taken {
                    model
                        .lock()
                        .unwrap()
                        .violate(format!("the server exited during start-up: {s}"));
                }
            } else if status.and_then(|s| s.signal()) != Some(9) {
                model
                    .lock()
                    .unwrap()
                    .violate(format!("the server ended by itself: {status:?}"));
            }
            check_log(&model, &log);
            println!("round {r:2}: killed during start-up ({durability})");
            kills.push("start-up".into());
            fail_on_violations(&model, seed, &format!("in round {r}"));
            continue;
        }

        let triggers = [
            Trigger::Create,
            Trigger::Steer,
            Trigger::Update,
            Trigger::Pause,
            Trigger::Resume,
            Trigger::Cancel,
            Trigger::SseTerminal,
        ];
        let mut after_ack = rng.chance(0.5);
        let mut trigger = *rng.pick(&triggers).unwrap();
        if let Some(forced) = forced_trigger {
            (after_ack, trigger) = (true, forced);
        }
        let delay = if after_ack {
            rng.range(0, 600)
        } else if rng.chance(0.3) {
            rng.range(0, 100)
        } else {
            rng.range(100, 2500)
        };
        let plan_delay = Duration::from_millis(delay);
        let round = restart(&bin, &model, &args, &log, &before).await;
        fail_on_violations(&model, seed, &format!("after restart {r}"));
        // The plan's clock starts when the clients do, after the check.
        *round.plan.lock().unwrap() = after_ack.then(|| (trigger, Instant::now() + plan_delay));

        let live: Vec<String> = {
            let m = model.lock().unwrap();
            m.tree_order
                .iter()
                .filter(|root| !m.is_terminal(root))
                .cloned()
                .collect()
        };
        for root in &live {
            round.spawn(drive(round.clone(), root.clone(), rng.fork(), false));
        }
        round.spawn_listener(live.clone());
        let new_trees = if live.len() >= 6 {
            rng.range(0, 2)
        } else {
            rng.range(1, 4)
        };
        round.spawn(creator(round.clone(), rng.fork(), new_trees));

        let how = if after_ack {
            tokio::select! {
                () = round.kill_sent.notified() => {}
                () = tokio::time::sleep(plan_delay + Duration::from_millis(1500)) => {}
            }
            match *round.fired.lock().unwrap() {
                Some(t) => format!("right after an acknowledged {t:?}"),
                None => format!("after waiting for an acknowledged {trigger:?} in vain"),
            }
        } else {
            tokio::time::sleep(plan_delay).await;
            format!("after {delay} ms")
        };
        if let Some(s) = round.server.exited()
            && !round.server.is_killed()
        {
            model
                .lock()
                .unwrap()
                .violate(format!("the server exited by itself: {s}"));
        }
        end_round(&round, &model).await;
        {
            let m = model.lock().unwrap();
            let running = m.tree_order.iter().filter(|root| !m.is_terminal(root)).count();
            println!(
                "round {r:2}: killed {how} ({durability}); drove {} trees and created {}; {running} trees \
                 not ended at the kill, {} tasks known",
                live.len(),
                new_trees,
                m.tasks.len()
            );
        }
        kills.push(how);
        before = model.lock().unwrap().before();
        fail_on_violations(&model, seed, &format!("in round {r}"));
    }

    // The last start: nothing is killed any more; every tree must end.
    let log = scratch.0.join("server-final.log");
    model.lock().unwrap().epoch += 1;
    let args: Vec<String> = vec!["--db".into(), db.display().to_string()];
    let round = restart(&bin, &model, &args, &log, &before).await;
    fail_on_violations(&model, seed, "after the last restart");
    let live: Vec<String> = {
        let m = model.lock().unwrap();
        m.tree_order
            .iter()
            .filter(|root| !m.is_terminal(root))
            .cloned()
            .collect()
    };
    let mut drivers: Vec<JoinHandle<()>> = live
        .iter()
        .map(|root| tokio::spawn(drive(round.clone(), root.clone(), rng.fork(), true)))
        .collect();
    let finished = tokio::time::timeout(FINISH_TIMEOUT, futures::future::join_all(drivers.iter_mut())).await;
    for d in &drivers {
        d.abort();
    }
    if finished.is_err() {
        let m = model.lock().unwrap();
        let open: Vec<String> = live
            .iter()
            .filter(|r| !m.is_terminal(r))
            .map(|r| format!("{r} last {:?}", m.tasks[r].last_status))
            .collect();
        drop(m);
        model.lock().unwrap().violate(format!(
            "hang: trees did not end within {FINISH_TIMEOUT:?} after the last restart: {open:?}"
        ));
    }
    read_everything(&round).await;
    check_final(&mut model.lock().unwrap());
    end_round(&round, &model).await;
    fail_on_violations(&model, seed, "at the end");

    let m = model.lock().unwrap();
    let mut acks: Vec<(&&str, &u64)> = m.stats.acks.iter().collect();
    acks.sort();
    let st = &m.stats;
    println!(
        "crash test: seed {seed}: {} kills, {} trees, {} tasks; across restarts: {} tasks failed by the \
         restart, {} fanout roots ran again ({} with an answer to hand back, {} paused), {} tasks parked \
         on input; {} cancels of parked tasks; {} terminal notifications; acks {acks:?}; {:.1} s",
        kills.len(),
        st.trees,
        m.tasks.len(),
        st.restart_failures,
        st.reruns_seen,
        st.answers_across_restart,
        st.pauses_across_restart,
        st.parked_across_restart,
        st.parked_cancels,
        st.sse_terminal,
        started.elapsed().as_secs_f64()
    );
    // The kills must have hit running work, or the run proved little (with
    // a handful of rounds an unlucky seed may legitimately kill only idle
    // servers, so the guard needs enough rounds).
    assert!(
        rounds < 10 || m.stats.restart_failures > 0,
        "no task was failed by a restart in {rounds} rounds: the kills hit no running work"
    );
    assert!(m.stats.trees > 0);
}
