//! What the clients of the crash test were shown, and what that promises
//! about the store across SIGKILL: every task id, snapshot and acknowledged
//! request is recorded here, and every new snapshot is checked against
//! everything seen before (the invariants of `docs/lifecycle.md` that
//! snapshots can show). No I/O: the driver and the clients feed it.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Value, json};
use subtask::model::Timestamp;

/// `error.data.reason` of a task whose handler was lost in a restart.
pub const RESTARTED: &str = "server_restarted";
pub const TERMINAL: [&str; 3] = ["completed", "failed", "cancelled"];

/// The answer the clients give to every `confirm-*` input request.
pub fn answer() -> Value {
    json!({"action": "accept", "content": {"confirm": true}})
}

// ----- what the clients were shown ---------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Fanout,
    Research,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Fanout => "fanout",
            Tool::Research => "deep_research",
        }
    }
}

#[derive(Debug)]
pub struct Tree {
    pub tool: Tool,
    pub args: Value,
    pub input_at: Option<String>,
    pub fail_at: Option<String>,
    /// A steer was sent to a `deep_research` root: its re-planning cancels
    /// sub-questions (and lifts their pauses) by itself.
    pub steered: bool,
}

/// Everything known about one task.
#[derive(Debug, Default)]
pub struct Task {
    pub root: String,
    pub parent: Option<String>,
    /// Longest `childTaskIds` seen from any source.
    pub children: Vec<String>,
    /// Longest `childTaskIds` seen by ordered reads (a tree's own client).
    pub ordered_children: Vec<String>,
    pub created_at: Option<u64>,
    /// `ttlMs` (`None` inside: unlimited).
    pub ttl_ms: Option<Option<u64>>,
    pub last_updated: u64,
    /// Status of the last ordered read, and the epoch it was made in.
    pub last_status: Option<String>,
    pub last_epoch: u32,
    /// `touched` at the last ordered read.
    pub touched_seen: u64,
    /// `tasks/update` sent to it, `tasks/cancel` sent to it or an ancestor.
    pub touched: u64,
    /// The first terminal snapshot and when it was recorded.
    pub terminal: Option<Value>,
    pub terminal_seq: u64,
    /// Steer messages sent to it, in order.
    pub steers: Vec<String>,
    /// Input keys whose answer was acknowledged while outstanding.
    pub answered: BTreeSet<String>,
    /// A pause of ours was acknowledged and no resume or cancel of it or an
    /// ancestor was sent since.
    pub paused_by_us: bool,
    /// ... and it was seen `paused` since: it stays paused until then.
    pub must_stay_paused: bool,
    pub cancel_sent: bool,
    /// A cancel was acknowledged while it was parked on unanswered input:
    /// nothing else can end it, so it must end `cancelled`.
    pub must_end_cancelled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A `CreateTaskResult`: a seed, its status is not the task's.
    Seed,
    /// A read by the tree's own (sequential) client, sent at `sent`.
    Ordered { sent: u64 },
    /// A `notifications/tasks` message (unordered with the reads).
    Sse,
}

/// The state of a task when the server was killed, for the restart rules.
#[derive(Debug)]
pub struct Before {
    pub tool: Tool,
    pub is_root: bool,
    pub terminal: bool,
    /// Last seen `input_required` and nothing sent to it since: it was
    /// parked on input, and only a cancel could have ended it.
    pub parked_on_input: bool,
    /// A fanout root with a pause of ours in effect (paused or pending).
    pub pause_held: bool,
}

#[derive(Debug, Default)]
pub struct Stats {
    pub trees: usize,
    pub acks: HashMap<&'static str, u64>,
    pub restart_failures: usize,
    pub reruns_seen: usize,
    pub sse_terminal: usize,
    /// Restart rules that had something to check.
    pub parked_across_restart: usize,
    pub pauses_across_restart: usize,
    pub answers_across_restart: usize,
    pub parked_cancels: usize,
}

#[derive(Debug, Default)]
pub struct Model {
    pub epoch: u32,
    pub seq: u64,
    pub trees: HashMap<String, Tree>,
    pub tree_order: Vec<String>,
    pub tasks: HashMap<String, Task>,
    pub violations: Vec<String>,
    pub stats: Stats,
}

pub fn status_of(snap: &Value) -> &str {
    snap["status"].as_str().unwrap_or("")
}

pub fn is_terminal(status: &str) -> bool {
    TERMINAL.contains(&status)
}

pub fn restart_failed(snap: &Value) -> bool {
    status_of(snap) == "failed" && snap["error"]["data"]["reason"] == RESTARTED
}

pub fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// A snapshot without the envelope fields (`resultType`, `_meta`).
pub fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("resultType");
        o.remove("_meta");
    }
    v
}

pub fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

impl Model {
    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    pub fn violate(&mut self, v: String) {
        eprintln!("VIOLATION: {v}");
        self.violations.push(v);
    }

    pub fn ack(&mut self, what: &'static str) {
        *self.stats.acks.entry(what).or_default() += 1;
    }

    pub fn add_tree(&mut self, root: &str, tool: Tool, args: Value) {
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

    pub fn tree_of(&self, id: &str) -> Option<&Tree> {
        self.tasks.get(id).and_then(|t| self.trees.get(&t.root))
    }

    pub fn is_terminal(&self, id: &str) -> bool {
        self.tasks.get(id).is_some_and(|t| t.terminal.is_some())
    }

    /// The roots of the trees not seen ended, in creation order.
    pub fn running_trees(&self) -> Vec<String> {
        self.tree_order
            .iter()
            .filter(|root| !self.is_terminal(root))
            .cloned()
            .collect()
    }

    /// `id` and every known descendant.
    pub fn subtree(&self, id: &str) -> Vec<String> {
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
    pub fn cancel_covers(&self, id: &str) -> bool {
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

    pub fn parked_on_input(&self, id: &str) -> bool {
        self.tasks.get(id).is_some_and(|t| {
            t.last_status.as_deref() == Some("input_required")
                && t.last_epoch == self.epoch
                && t.touched_seen == t.touched
                && t.terminal.is_none()
        })
    }

    /// Checks one snapshot against everything seen before, then records it.
    pub fn observe(&mut self, raw: &Value, source: Source) {
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
    pub fn touch(&mut self, id: &str) {
        if let Some(t) = self.tasks.get_mut(id) {
            t.touched += 1;
        }
    }

    /// A resume or cancel of `id` is about to be sent: pauses of ours in its
    /// subtree may be lifted from now on.
    pub fn release_pauses(&mut self, id: &str) {
        for t in self.subtree(id) {
            if let Some(task) = self.tasks.get_mut(&t) {
                task.paused_by_us = false;
                task.must_stay_paused = false;
            }
        }
    }

    /// The state at the kill, for the restart rules.
    pub fn before(&self) -> HashMap<String, Before> {
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
