//! The model: what every tree the soak creates must end as, given what the
//! soak did to it, and the checks that compare a retrieved tree with it.
//!
//! * `fanout` is fully determined by its arguments and the soak's actions:
//!   every node's status, its error, and its whole result (text and
//!   `structuredContent`) are computed here and compared for equality.
//! * `deep_research` plans by keyword scoring and follows up in an order
//!   that depends on scheduling when several sub-questions run at once, so
//!   its result is checked for consistency with the tree (every cited task
//!   is in the tree, steps are the sub-question's first three children, the
//!   synthesis is the root's last child, ...), for the steers it got, and,
//!   with `breadth` 1 (one lane: no race), for equality with the first run
//!   of the same question (task ids replaced by tree paths).
//!
//! Rules shared by both:
//!
//! * A task the soak cancelled (or one below it) ends `cancelled`, or ends
//!   as it would have otherwise no later than the cancel was answered
//!   (`lastUpdatedAt` ≤ the answer's arrival, plus [`CLOCK_SLACK_MS`]).
//! * Steers: the messages a task reports are a prefix of those the server
//!   accepted for it, in order, and include every one accepted while the
//!   task was confirmed `paused` (it is parked at a safe point, so it takes
//!   them when resumed).
//! * A command refused with "task is already <status>" names the status the
//!   task ends with; "being cancelled or failed" only for a task that ends
//!   `cancelled` or `failed`.

use std::collections::{HashMap, HashSet};

use parking_lot::Mutex;
use serde_json::{Value, json};
use subtask::client::{PartialResult, TaskOutcome};
use subtask::model::{DetailedTask, ErrorCode, TaskId, TaskPayload, TaskStatus};

use crate::api::{Snapshot, json_of};
use crate::listen::ListenLog;

/// Clock tolerance between the server's timestamps and the soak's clock
/// (same machine, same wall clock; the server's is tokio's monotonic clock
/// offset to wall time once, so they may drift apart by a few ms).
pub const CLOCK_SLACK_MS: u64 = 50;

/// A `fanout` call.
#[derive(Debug, Clone)]
pub struct FanoutSpec {
    /// Children per node.
    pub width: u32,
    /// Levels below the root.
    pub depth: u32,
    /// Steps per node.
    pub steps: u32,
    /// Milliseconds per step.
    pub step_ms: u64,
    /// The node that fails.
    pub fail_at: Option<String>,
    /// The node that asks for input.
    pub input_at: Option<String>,
}

impl FanoutSpec {
    /// The call's arguments.
    pub fn args(&self) -> Value {
        let mut a = json!({
            "width": self.width, "depth": self.depth, "steps": self.steps, "stepMs": self.step_ms,
        });
        if let Some(p) = &self.fail_at {
            a["failAt"] = json!(p);
        }
        if let Some(p) = &self.input_at {
            a["inputAt"] = json!(p);
        }
        a
    }
}

/// A `deep_research` call.
#[derive(Debug, Clone)]
pub struct ResearchSpec {
    /// The question.
    pub question: String,
    /// Top-level sub-questions.
    pub breadth: u32,
    /// Levels of sub-questions.
    pub depth: u32,
}

/// What was called.
#[derive(Debug, Clone)]
pub enum Spec {
    /// `fanout`.
    Fanout(FanoutSpec),
    /// `deep_research`.
    Research(ResearchSpec),
}

/// A command refused in a way the model checks later.
#[derive(Debug, Clone)]
pub enum Claim {
    /// "task is already <status>".
    Terminal(TaskId, TaskStatus),
    /// "task is being cancelled or failed".
    WindingDown(TaskId),
}

/// One steer the server accepted.
#[derive(Debug, Clone)]
pub struct Steer {
    /// The message.
    pub message: String,
    /// Sent while the task was confirmed paused.
    pub while_paused: bool,
}

/// Everything the soak did to one tree.
#[derive(Debug)]
pub struct TreeRec {
    /// Creation order.
    pub seq: u64,
    /// The scenario.
    pub scenario: &'static str,
    /// What was called.
    pub spec: Spec,
    /// The root.
    pub root: TaskId,
    /// The root's `createdAt` (server clock, ms).
    pub created_ms: u64,
    /// The root's TTL.
    pub ttl_ms: u64,
    /// Accepted cancels: (task, when the answer arrived).
    pub cancels: Vec<(TaskId, u64)>,
    /// Accepted steers per task, in order.
    pub steers: HashMap<TaskId, Vec<Steer>>,
    /// Refusals to check against the final state.
    pub claims: Vec<Claim>,
    /// Input answers by fanout node path (the first one sent).
    pub answers: HashMap<String, Value>,
    /// The partial results of a library follow, in arrival order.
    pub follow: Option<Vec<PartialResult>>,
    /// The raw subscription on the root, if one was opened.
    pub listen: Option<ListenLog>,
}

impl TreeRec {
    /// A tree just created.
    pub fn new(seq: u64, scenario: &'static str, spec: Spec, seed: &DetailedTask) -> Self {
        let t = seed.task();
        TreeRec {
            seq,
            scenario,
            spec,
            root: t.task_id,
            created_ms: t.created_at.as_millis(),
            ttl_ms: t.ttl_ms.unwrap_or(0),
            cancels: Vec::new(),
            steers: HashMap::new(),
            claims: Vec::new(),
            answers: HashMap::new(),
            follow: None,
            listen: None,
        }
    }

    /// Records an accepted steer.
    pub fn steered(&mut self, id: TaskId, message: &str, while_paused: bool) {
        self.steers.entry(id).or_default().push(Steer {
            message: message.to_owned(),
            while_paused,
        });
    }

    fn label(&self) -> String {
        format!("tree #{} ({}, root {})", self.seq, self.scenario, self.root)
    }
}

/// The first canonical result of each unsteered one-lane `deep_research`
/// question, and how many distinct results other runs produced.
#[derive(Default)]
pub struct Canon {
    first: Mutex<HashMap<String, String>>,
    variants: Mutex<HashMap<String, HashSet<String>>>,
}

impl Canon {
    /// Distinct canonical results of multi-lane runs (information only).
    pub fn variants(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .variants
            .lock()
            .iter()
            .map(|(k, s)| format!("{k}: {}", s.len()))
            .collect();
        v.sort();
        v
    }

    /// Questions whose one-lane result was compared.
    pub fn compared(&self) -> usize {
        self.first.lock().len()
    }
}

fn payload_json(t: &DetailedTask) -> Value {
    match t.payload() {
        TaskPayload::Completed { result } => result.to_value(),
        TaskPayload::Failed { error } => serde_json::to_value(error).unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

fn result_of(t: &DetailedTask) -> Option<&subtask::model::JsonObject> {
    match t.payload() {
        TaskPayload::Completed { result } => Some(result),
        _ => None,
    }
}

/// Compares a retrieved tree with the model; every mismatch is one message.
pub fn check(rec: &TreeRec, snap: &Snapshot, canon: &Canon) -> Vec<String> {
    let mut c = Checker {
        rec,
        snap,
        out: Vec::new(),
    };
    c.generic();
    match &rec.spec {
        Spec::Fanout(spec) => c.fanout(spec),
        Spec::Research(spec) => c.research(spec, canon),
    }
    c.claims();
    if let Some(follow) = &rec.follow {
        c.follow(follow);
    }
    if let Some(log) = &rec.listen {
        c.listen(log);
    }
    let label = rec.label();
    c.out.into_iter().map(|m| format!("{label}: {m}")).collect()
}

struct Checker<'a> {
    rec: &'a TreeRec,
    snap: &'a Snapshot,
    out: Vec<String>,
}

impl<'a> Checker<'a> {
    fn task(&self, id: TaskId) -> &'a DetailedTask {
        &self.snap.tasks[&id]
    }

    fn path(&self, id: TaskId) -> &'a str {
        self.snap.paths.get(&id).map_or("?", String::as_str)
    }

    /// The tree's structure: parents, terminal states, times, TTLs.
    fn generic(&mut self) {
        let root = self.task(self.rec.root);
        if root.task().parent_task_id.is_some() {
            self.out
                .push(format!("the root has a parent: {:?}", root.task().parent_task_id));
        }
        if root.task().ttl_ms != Some(self.rec.ttl_ms) {
            self.out
                .push(format!("the root's TTL changed to {:?}", root.task().ttl_ms));
        }
        for id in &self.snap.order {
            let t = self.task(*id).task();
            if !t.status.is_terminal() {
                self.out.push(format!(
                    "task {id} ({}) is {} after its root ended",
                    self.path(*id),
                    t.status
                ));
            }
            let mut seen = HashSet::new();
            for c in &t.child_task_ids {
                if !seen.insert(*c) {
                    self.out.push(format!("task {id} lists child {c} twice"));
                }
                let child = self.task(*c).task();
                if child.parent_task_id != Some(*id) {
                    self.out.push(format!(
                        "task {c} is listed by {id} but names parent {:?}",
                        child.parent_task_id
                    ));
                }
                if child.created_at < t.created_at {
                    self.out
                        .push(format!("task {c} was created before its parent {id}"));
                }
                if child.last_updated_at > t.last_updated_at && t.status.is_terminal() {
                    self.out.push(format!(
                        "task {c} ({}) was last updated after its parent {id} ended",
                        self.path(*c)
                    ));
                }
                let expiry = |x: &subtask::model::Task| x.ttl_ms.map(|ttl| x.created_at.as_millis() + ttl);
                if let (Some(ce), Some(pe)) = (expiry(child), expiry(t))
                    && ce > pe
                {
                    self.out
                        .push(format!("task {c} expires after its parent {id} (I8)"));
                }
            }
        }
    }

    /// When the earliest accepted cancel reaching `id` (itself or an
    /// ancestor) was answered.
    fn cancelled_at(&self, id: TaskId) -> Option<u64> {
        let path = self.path(id);
        self.rec
            .cancels
            .iter()
            .filter(|(target, _)| {
                let p = self.path(*target);
                p == path || path.starts_with(&format!("{p}."))
            })
            .map(|(_, at)| *at)
            .min()
    }

    /// Checks a task's status against what it would be without a cancel;
    /// returns whether it may be treated as having ended naturally.
    fn status_rule(&mut self, id: TaskId, natural: TaskStatus) -> bool {
        let dt = self.task(id);
        let t = dt.task();
        let what = format!("task {id} ({})", self.path(id));
        match self.cancelled_at(id) {
            Some(at) => {
                if t.status == TaskStatus::Cancelled {
                    return false;
                }
                if t.status != natural {
                    self.out
                        .push(format!("{what} is {}; expected cancelled or {natural}", t.status));
                    return false;
                }
                if t.last_updated_at.as_millis() > at + CLOCK_SLACK_MS {
                    self.out.push(format!(
                        "{what} ended {natural} at {} although a cancel was accepted at {at}",
                        t.last_updated_at.as_millis()
                    ));
                }
                true
            }
            None => {
                if t.status != natural {
                    let detail = match dt.payload() {
                        TaskPayload::Failed { error }
                            if error.data.as_ref().is_some_and(|d| d["reason"] == "ttl_expired") =>
                        {
                            " (its TTL expired before it finished: the machine was too slow for the \
                             soak's TTL)"
                                .to_owned()
                        }
                        _ => String::new(),
                    };
                    self.out.push(format!(
                        "{what} is {}; expected {natural}{detail}: {}",
                        t.status,
                        payload_json(self.task(id))
                    ));
                    return false;
                }
                true
            }
        }
    }

    /// The steers a task reported: a prefix of those accepted, including
    /// every one accepted while it was paused.
    fn steers_rule(&mut self, id: TaskId, reported: &Value) {
        let reported: Vec<String> = match reported.as_array() {
            Some(a) => a
                .iter()
                .map(|v| v.as_str().unwrap_or("<not a string>").to_owned())
                .collect(),
            None => {
                self.out
                    .push(format!("task {id}: steers is not an array: {reported}"));
                return;
            }
        };
        let accepted = self.rec.steers.get(&id).cloned().unwrap_or_default();
        let messages: Vec<&str> = accepted.iter().map(|s| s.message.as_str()).collect();
        let must = accepted.iter().rposition(|s| s.while_paused).map_or(0, |i| i + 1);
        if reported.len() > messages.len() || reported.iter().zip(&messages).any(|(a, b)| a != b) {
            self.out.push(format!(
                "task {id} ({}) reports steers {reported:?}, not a prefix of those accepted {messages:?}",
                self.path(id)
            ));
        } else if reported.len() < must {
            self.out.push(format!(
                "task {id} ({}) reports steers {reported:?}; {messages:?} were accepted, the first {must} \
                 of them while it was paused, so it must have taken them",
                self.path(id)
            ));
        }
    }

    fn claims(&mut self) {
        for claim in &self.rec.claims {
            match claim {
                Claim::Terminal(id, status) => {
                    let Some(t) = self.snap.tasks.get(id) else {
                        self.out
                            .push(format!("task {id}, refused as {status}, is not in the tree"));
                        continue;
                    };
                    if t.status() != *status {
                        self.out.push(format!(
                            "a command on task {id} was refused as \"task is already {status}\", but it \
                             ended {}",
                            t.status()
                        ));
                    }
                }
                Claim::WindingDown(id) => {
                    let Some(t) = self.snap.tasks.get(id) else {
                        continue;
                    };
                    if !matches!(t.status(), TaskStatus::Cancelled | TaskStatus::Failed) {
                        self.out.push(format!(
                            "a command on task {id} was refused as being cancelled or failed, but it \
                             ended {}",
                            t.status()
                        ));
                    }
                }
            }
        }
    }

    // ----- fanout -------------------------------------------------------------------

    fn fanout(&mut self, spec: &FanoutSpec) {
        self.fanout_node(spec, self.rec.root, "0", 0);
    }

    /// Checks one node and its subtree; returns its status and, when
    /// completed, its `structuredContent` (what its parent folds in).
    fn fanout_node(&mut self, spec: &FanoutSpec, id: TaskId, path: &str, level: u32) -> (TaskStatus, Value) {
        let t = self.task(id).clone();
        let status = t.status();
        let kids = t.task().child_task_ids.clone();
        let want_kids = if level < spec.depth {
            spec.width as usize
        } else {
            0
        };
        let natural = if spec.fail_at.as_deref() == Some(path) {
            TaskStatus::Failed
        } else {
            TaskStatus::Completed
        };
        let ok = self.status_rule(id, natural);
        if status == TaskStatus::Cancelled {
            if kids.len() > want_kids {
                self.out.push(format!(
                    "node {path} ({id}) has {} children; at most {want_kids}",
                    kids.len()
                ));
            }
        } else if kids.len() != want_kids {
            self.out.push(format!(
                "node {path} ({id}) has {} children; expected {want_kids}",
                kids.len()
            ));
        }
        // The children, in order: their statuses and what the parent folds.
        let mut children = Vec::new();
        let (mut failed, mut cancelled) = (Vec::<Value>::new(), Vec::<Value>::new());
        let mut nodes: u64 = 1;
        let mut completed = 0;
        for (i, c) in kids.iter().enumerate() {
            let cp = format!("{path}.{i}");
            if self.path(*c) != cp {
                self.out
                    .push(format!("task {c} is at {} not {cp}", self.path(*c)));
            }
            let (cs, sc) = self.fanout_node(spec, *c, &cp, level + 1);
            let mut entry = json!({"path": cp, "taskId": c, "status": cs.as_str()});
            match cs {
                TaskStatus::Completed => {
                    completed += 1;
                    failed.extend(sc["failed"].as_array().cloned().unwrap_or_default());
                    cancelled.extend(sc["cancelled"].as_array().cloned().unwrap_or_default());
                    nodes += sc["nodes"].as_u64().unwrap_or(0);
                }
                TaskStatus::Failed => {
                    entry["error"] = payload_json(self.task(*c));
                    failed.push(json!(cp));
                }
                _ => cancelled.push(json!(cp)),
            }
            children.push(entry);
        }
        if !ok {
            return (status, Value::Null);
        }
        match status {
            TaskStatus::Failed => {
                let want = json!({"code": ErrorCode::INTERNAL_ERROR.0,
                                  "message": format!("fanout node {path} failed as requested")});
                if payload_json(&t) != want {
                    self.out.push(format!(
                        "node {path} ({id}) failed with {}; expected {want}",
                        payload_json(&t)
                    ));
                }
                (status, Value::Null)
            }
            TaskStatus::Completed => {
                let Some(result) = result_of(&t) else {
                    return (status, Value::Null);
                };
                let got = result.to_value();
                let steers = got["structuredContent"]["steers"].clone();
                self.steers_rule(id, &steers);
                let steer_list: Vec<String> = steers
                    .as_array()
                    .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default();
                let mut sc = json!({
                    "path": path, "steps": spec.steps, "steers": steers, "children": children,
                    "failed": failed, "cancelled": cancelled, "nodes": nodes,
                });
                if spec.input_at.as_deref() == Some(path) {
                    match self.rec.answers.get(path) {
                        Some(a) => sc["input"] = a.clone(),
                        None => self
                            .out
                            .push(format!("node {path} ({id}) completed without an input answer")),
                    }
                }
                let str_list = |v: &Vec<Value>| -> Vec<String> {
                    v.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()
                };
                let mut text = if level == 0 {
                    format!(
                        "fanout: {nodes} of {} nodes completed. ",
                        node_count(spec.width.into(), spec.depth.into())
                    )
                } else {
                    String::new()
                };
                let s = if spec.steps == 1 { "" } else { "s" };
                text.push_str(&format!(
                    "node {path}: ran {} step{s}; {completed}/{} children completed",
                    spec.steps,
                    kids.len()
                ));
                if !failed.is_empty() {
                    text.push_str(&format!("; failed: {}", str_list(&failed).join(", ")));
                }
                if !cancelled.is_empty() {
                    text.push_str(&format!("; cancelled: {}", str_list(&cancelled).join(", ")));
                }
                if steer_list.is_empty() {
                    text.push_str("; no steer messages");
                } else {
                    text.push_str(&format!("; steer messages: {}", steer_list.join(" | ")));
                }
                let want = json!({
                    "content": [{"type": "text", "text": text}],
                    "structuredContent": sc,
                    "isError": false,
                    "resultType": "complete",
                });
                if got != want {
                    self.out.push(format!(
                        "node {path} ({id}) completed with the wrong result:\n    got      {got}\n    expected {want}"
                    ));
                }
                (status, sc)
            }
            _ => (status, Value::Null),
        }
    }

    // ----- deep_research ------------------------------------------------------------

    fn research(&mut self, spec: &ResearchSpec, canon: &Canon) {
        let root_id = self.rec.root;
        if !self.status_rule(root_id, TaskStatus::Completed) {
            // Cancelled: every task ended cancelled, or completed before the cancel.
            let at = self.cancelled_at(root_id).unwrap_or(0);
            for id in self.snap.order.clone() {
                let t = self.task(id).task();
                let before = t.last_updated_at.as_millis() <= at + CLOCK_SLACK_MS;
                if !(t.status == TaskStatus::Cancelled || (t.status == TaskStatus::Completed && before)) {
                    self.out.push(format!(
                        "task {id} ({}) of a cancelled research tree is {} (at {}, cancel at {at})",
                        self.path(id),
                        t.status,
                        t.last_updated_at.as_millis()
                    ));
                }
            }
            return;
        }
        let root = self.task(root_id).clone();
        let Some(result) = result_of(&root) else { return };
        let r = result.to_value();
        let sc = &r["structuredContent"];
        if r["isError"] != json!(false) || r["resultType"] != "complete" {
            self.out.push(format!("the research result is an error: {r}"));
            return;
        }
        for (k, want) in [
            ("question", json!(spec.question.trim())),
            ("breadth", json!(spec.breadth)),
            ("depth", json!(spec.depth)),
        ] {
            if sc[k] != want {
                self.out
                    .push(format!("research {k} is {}; expected {want}", sc[k]));
            }
        }
        self.steers_rule(root_id, &sc["steers"]);
        let delivered = sc["steers"].as_array().map_or(0, Vec::len);
        let kids = root.task().child_task_ids.clone();
        let Some(synth) = kids.last().copied() else {
            self.out.push("the research root has no children".to_owned());
            return;
        };
        if sc["synthesisTaskId"] != json!(synth) {
            self.out.push(format!(
                "synthesisTaskId {} is not the root's last child {synth}",
                sc["synthesisTaskId"]
            ));
        }
        let changes = sc["planChanges"].to_string();
        if delivered == 0 && (sc["planChanges"] != json!([]) || sc["focus"] != Value::Null) {
            self.out.push(format!(
                "no steer was delivered but the plan changed: focus {}, changes {changes}",
                sc["focus"]
            ));
        }
        // Cancelled tasks: only top-level sub-questions dropped by a re-plan
        // (and what ran below them).
        for id in self.snap.order.clone() {
            let t = self.task(id).task().clone();
            match t.status {
                TaskStatus::Completed => {}
                TaskStatus::Cancelled => {
                    let top = t.parent_task_id == Some(root_id);
                    let under_cancelled = t
                        .parent_task_id
                        .is_some_and(|p| self.task(p).status() == TaskStatus::Cancelled);
                    if top && !changes.contains(&format!("(task {id}, not started)")) {
                        self.out.push(format!(
                            "sub-question {id} was cancelled but planChanges does not say so: {changes}"
                        ));
                    } else if !top && !under_cancelled {
                        self.out
                            .push(format!("task {id} ({}) was cancelled", self.path(id)));
                    }
                }
                other => self.out.push(format!("task {id} ({}) is {other}", self.path(id))),
            }
        }
        let in_tree = |v: &Value| v.as_str().and_then(|s| s.parse::<TaskId>().ok());
        let empty = Vec::new();
        let subs = sc["subQuestions"].as_array().unwrap_or(&empty);
        let sub_ids: HashSet<TaskId> = subs.iter().filter_map(|s| in_tree(&s["taskId"])).collect();
        for s in subs {
            let Some(id) = in_tree(&s["taskId"]).filter(|id| self.snap.tasks.contains_key(id)) else {
                self.out
                    .push(format!("sub-question {} is not in the tree", s["taskId"]));
                continue;
            };
            let t = self.task(id).task().clone();
            if t.status != TaskStatus::Completed {
                self.out.push(format!("cited sub-question {id} is {}", t.status));
            }
            let steps: Vec<Value> = ["search", "read", "summarize"]
                .iter()
                .map(|k| s["steps"][*k].clone())
                .collect();
            let first3: Vec<Value> = t.child_task_ids.iter().take(3).map(|c| json!(c)).collect();
            if steps != first3 {
                self.out.push(format!(
                    "sub-question {id}'s steps {steps:?} are not its first three children {first3:?}"
                ));
            }
            let level = s["level"].as_u64().unwrap_or(0);
            let want_parent = if level == 1 {
                Some(root_id)
            } else {
                in_tree(&s["parentTaskId"])
            };
            if t.parent_task_id != want_parent || (level == 1) != (s["parentTaskId"] == Value::Null) {
                self.out.push(format!(
                    "sub-question {id} (level {level}) has parent {:?}; the answer says {}",
                    t.parent_task_id, s["parentTaskId"]
                ));
            }
            if level == 0 || level > u64::from(spec.depth) {
                self.out.push(format!(
                    "sub-question {id} has level {level} with depth {}",
                    spec.depth
                ));
            }
        }
        for m in sc["notCovered"].as_array().unwrap_or(&empty) {
            if !in_tree(&m["taskId"]).is_some_and(|id| self.snap.tasks.contains_key(&id)) {
                self.out
                    .push(format!("a not-covered sub-question is not in the tree: {m}"));
            }
        }
        for cit in sc["citations"].as_array().unwrap_or(&empty) {
            for by in cit["citedBy"].as_array().unwrap_or(&empty) {
                if !in_tree(by).is_some_and(|id| sub_ids.contains(&id)) {
                    self.out.push(format!(
                        "citation {} is cited by {by}, not a sub-question",
                        cit["ref"]
                    ));
                }
            }
        }
        let text = r["content"][0]["text"].as_str().unwrap_or_default();
        if !text.starts_with(&format!("Question: {}\n", spec.question.trim())) {
            self.out
                .push(format!("the answer does not start with the question: {text:?}"));
        }
        // One lane, no steer, no cancel: the same answer as the first such run.
        let steered = self.rec.steers.contains_key(&root_id);
        if !steered && self.rec.cancels.is_empty() {
            let mut canonical = r.to_string();
            let mut ids: Vec<(&TaskId, &String)> = self.snap.paths.iter().collect();
            ids.sort_by_key(|(_, p)| std::cmp::Reverse(p.len()));
            for (id, p) in ids {
                canonical = canonical.replace(&id.to_string(), &format!("<{p}>"));
            }
            let key = format!(
                "{:?} breadth {} depth {}",
                spec.question, spec.breadth, spec.depth
            );
            if spec.breadth == 1 {
                let mut first = canon.first.lock();
                let want = first.entry(key.clone()).or_insert_with(|| canonical.clone());
                if *want != canonical {
                    self.out.push(format!(
                        "one-lane research {key} answered differently from its first run:\n    got   {canonical}\n    first {want}"
                    ));
                }
            } else {
                canon.variants.lock().entry(key).or_default().insert(canonical);
            }
        }
    }

    // ----- the library follow and the raw subscription -----------------------------------

    fn follow(&mut self, partials: &[PartialResult]) {
        let order = self.snap.post_order();
        let got: Vec<Option<TaskId>> = partials.iter().map(|p| p.task_id).collect();
        let want: Vec<Option<TaskId>> = order.iter().map(|id| Some(*id)).collect();
        if got != want {
            self.out.push(format!(
                "the library's partial results came in the order {got:?}, not the result order {want:?}"
            ));
            return;
        }
        for p in partials {
            let Some(id) = p.task_id else { continue };
            let t = self.task(id);
            let same = match (&p.outcome, t.payload()) {
                (TaskOutcome::Completed(a), TaskPayload::Completed { result }) => a == result,
                (TaskOutcome::Failed(a), TaskPayload::Failed { error }) => a == error,
                (TaskOutcome::Cancelled, TaskPayload::Cancelled) => true,
                _ => false,
            };
            if !same {
                self.out.push(format!(
                    "the library handed out {:?} for task {id}; tasks/get says {}",
                    p.outcome,
                    json_of(t)
                ));
            }
        }
    }

    fn listen(&mut self, log: &ListenLog) {
        if let Some(e) = &log.error {
            self.out.push(format!("the subscription failed: {e}"));
            return;
        }
        if !log.ended {
            self.out
                .push("the subscription did not end with its response".to_owned());
        }
        let mut last: HashMap<TaskId, &DetailedTask> = HashMap::new();
        for n in &log.notes {
            let id = n.task().task_id;
            if !self.snap.tasks.contains_key(&id) {
                self.out.push(format!(
                    "the subscription notified about task {id}, not in the tree"
                ));
                continue;
            }
            if let Some(prev) = last.get(&id) {
                let (a, b) = (prev.task(), n.task());
                if b.last_updated_at < a.last_updated_at
                    || (a.status.is_terminal() && json_of(prev) != json_of(n))
                {
                    self.out.push(format!(
                        "the subscription went backwards on task {id}: {} then {}",
                        json_of(prev),
                        json_of(n)
                    ));
                }
            }
            last.insert(id, n);
        }
        for id in &self.snap.order {
            match last.get(id) {
                None => self.out.push(format!(
                    "the subscription never notified about task {id} ({})",
                    self.path(*id)
                )),
                Some(n) if json_of(n) != json_of(self.task(*id)) => self.out.push(format!(
                    "the subscription's last notification about task {id} is not its final state:\n    \
                     notified {}\n    tasks/get {}",
                    json_of(n),
                    json_of(self.task(*id))
                )),
                Some(_) => {}
            }
        }
    }
}

/// Nodes of a fanout tree (`1 + width + ... + width^depth`).
pub fn node_count(width: u64, depth: u64) -> u64 {
    (0..=depth).map(|l| width.pow(l as u32)).sum()
}
