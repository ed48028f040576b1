//! The soak's requests: the crate's `Client`, counted, with every task
//! snapshot it returns checked against what was seen before (`Seen`), and
//! the helpers the scenarios share (walk a tree, wait for a status).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use subtask::client::{CallStart, Client, ClientError};
use subtask::model::{DetailedTask, ErrorCode, InputResponses, JsonObject, TaskId, TaskStatus, Timestamp};

use crate::stats::{Problem, Stats};

/// Wall-clock milliseconds (the server stamps tasks with the same clock).
pub fn now_ms() -> u64 {
    Timestamp::now().as_millis()
}

/// A snapshot as JSON text, for byte comparisons.
pub fn json_of(t: &DetailedTask) -> String {
    serde_json::to_string(t).expect("tasks serialize")
}

/// What was seen of one task so far.
struct SeenTask {
    parent: Option<TaskId>,
    created: u64,
    children: Vec<TaskId>,
    /// The newest `lastUpdatedAt` among the answers received.
    newest: u64,
    /// The terminal snapshot, once one was seen.
    terminal: Option<String>,
    /// Its `lastUpdatedAt`.
    terminal_updated: u64,
}

/// What was received for a task before a request was sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Floor {
    /// The newest `lastUpdatedAt` received.
    pub newest: u64,
    /// Whether a terminal snapshot was received.
    pub terminal: bool,
}

/// Every task snapshot the soak receives (answers to `tasks/get`,
/// `tasks/pause`, `tasks/resume`, notifications) goes through [`Seen::observe`]:
///
/// * a request sent after an answer was received never shows an older state
///   (`lastUpdatedAt` at least the newest received before it was sent);
/// * `parentTaskId` and `createdAt` never change;
/// * `childTaskIds` only grow (of two snapshots, the shorter list is a
///   prefix of the longer);
/// * a terminal snapshot never changes: every later one is byte-identical.
#[derive(Default)]
pub struct Seen {
    map: Mutex<HashMap<TaskId, SeenTask>>,
}

impl Seen {
    /// What was received for `id` before a request sent now: the floor
    /// for its answer.
    pub fn floor(&self, id: TaskId) -> Floor {
        self.map.lock().get(&id).map_or(Floor::default(), |s| Floor {
            newest: s.newest,
            terminal: s.terminal.is_some(),
        })
    }

    /// Forgets the tasks of a deleted tree.
    pub fn forget(&self, ids: &[TaskId]) {
        let mut map = self.map.lock();
        for id in ids {
            map.remove(id);
        }
    }

    /// Checks a snapshot of a request sent when the floor was `floor`.
    pub fn observe(&self, t: &DetailedTask, floor: Floor, source: &str) -> Result<(), Problem> {
        let task = t.task();
        let id = task.task_id;
        let updated = task.last_updated_at.as_millis();
        let wrong = |what: String| Err(Problem::wrong(format!("{source} of task {id}: {what}")));
        if updated < floor.newest {
            return wrong(format!(
                "a stale answer: lastUpdatedAt {updated} is older than {}, which an answer received \
                 before this request was sent showed",
                floor.newest
            ));
        }
        if floor.terminal && !task.status.is_terminal() {
            return wrong(format!(
                "status {} after the task was seen terminal (before this request was sent)",
                task.status
            ));
        }
        let terminal = task.status.is_terminal().then(|| json_of(t));
        let mut map = self.map.lock();
        let Some(s) = map.get_mut(&id) else {
            map.insert(
                id,
                SeenTask {
                    parent: task.parent_task_id,
                    created: task.created_at.as_millis(),
                    children: task.child_task_ids.clone(),
                    newest: updated,
                    terminal_updated: updated,
                    terminal,
                },
            );
            return Ok(());
        };
        if s.parent != task.parent_task_id {
            return wrong(format!(
                "parentTaskId changed from {:?} to {:?}",
                s.parent, task.parent_task_id
            ));
        }
        if s.created != task.created_at.as_millis() {
            return wrong(format!(
                "createdAt changed from {} to {}",
                s.created,
                task.created_at.as_millis()
            ));
        }
        let (short, long) = if s.children.len() <= task.child_task_ids.len() {
            (&s.children, &task.child_task_ids)
        } else {
            (&task.child_task_ids, &s.children)
        };
        if long[..short.len()] != short[..] {
            return wrong(format!(
                "childTaskIds are not append-only: {:?} and {:?}",
                s.children, task.child_task_ids
            ));
        }
        match (&s.terminal, &terminal) {
            (Some(before), Some(now)) if before != now => {
                return wrong(format!(
                    "a terminal task changed:\n  before {before}\n  now    {now}"
                ));
            }
            (Some(before), None) if updated > s.terminal_updated => {
                return wrong(format!(
                    "a terminal task is live again (status {}); it was {before}",
                    task.status
                ));
            }
            _ => {}
        }
        if s.children.len() < task.child_task_ids.len() {
            s.children = task.child_task_ids.clone();
        }
        s.newest = s.newest.max(updated);
        if s.terminal.is_none() && terminal.is_some() {
            s.terminal = terminal;
            s.terminal_updated = updated;
        }
        Ok(())
    }
}

/// A `-32602` error's message, if `e` is one.
pub fn invalid_params(e: &ClientError) -> Option<&str> {
    match e {
        ClientError::Rpc(o) if o.code == ErrorCode::INVALID_PARAMS => Some(o.message.as_str()),
        _ => None,
    }
}

/// The status named by "task is already <status>" (a command on a
/// terminal task).
pub fn terminal_claim(e: &ClientError) -> Option<TaskStatus> {
    let rest = invalid_params(e)?.strip_prefix("task is already ")?;
    [TaskStatus::Completed, TaskStatus::Failed, TaskStatus::Cancelled]
        .into_iter()
        .find(|s| s.as_str() == rest)
}

/// "task's handler has finished and can no longer be steered".
pub fn is_handler_finished(e: &ClientError) -> bool {
    invalid_params(e).is_some_and(|m| m.starts_with("task's handler has finished"))
}

/// "task is being cancelled or failed and accepts no further work".
pub fn is_winding_down(e: &ClientError) -> bool {
    invalid_params(e).is_some_and(|m| m.starts_with("task is being cancelled or failed"))
}

/// One tree as retrieved task by task with `tasks/get`, breadth first.
pub struct Snapshot {
    /// The root.
    pub root: TaskId,
    /// Every task.
    pub tasks: HashMap<TaskId, DetailedTask>,
    /// Breadth-first order.
    pub order: Vec<TaskId>,
    /// Each task's path: the root is `0`, its children `0.0`, `0.1`, ...
    pub paths: HashMap<TaskId, String>,
}

impl Snapshot {
    /// The task at `path`.
    pub fn at(&self, path: &str) -> Option<TaskId> {
        self.paths
            .iter()
            .find(|(_, p)| p.as_str() == path)
            .map(|(id, _)| *id)
    }

    /// Tasks not terminal.
    pub fn live(&self) -> Vec<TaskId> {
        self.order
            .iter()
            .copied()
            .filter(|id| !self.tasks[id].status().is_terminal())
            .collect()
    }

    /// Tasks in result order (I12): each child's subtree in
    /// `childTaskIds` order, then the task.
    pub fn post_order(&self) -> Vec<TaskId> {
        fn go(s: &Snapshot, id: TaskId, out: &mut Vec<TaskId>) {
            if let Some(t) = s.tasks.get(&id) {
                for c in &t.task().child_task_ids {
                    go(s, *c, out);
                }
            }
            out.push(id);
        }
        let mut out = Vec::new();
        go(self, self.root, &mut out);
        out
    }
}

/// A tree larger than this is a wrong answer (the soak's trees have at most
/// a few dozen tasks).
const MAX_WALK: usize = 2_000;

/// A failed `tasks/get` inside a walk.
pub struct WalkError {
    /// The task.
    pub id: TaskId,
    /// When the request was sent.
    pub sent_ms: u64,
    /// The error.
    pub error: ClientError,
}

/// The soak's client: each request counted and its answer observed.
#[derive(Clone)]
pub struct Api {
    /// The crate's client (one per loop: its own connection pool).
    pub client: Client,
    /// The counters.
    pub stats: Arc<Stats>,
    /// What was seen.
    pub seen: Arc<Seen>,
}

impl Api {
    fn observe(&self, t: &DetailedTask, floor: Floor, source: &str) {
        if let Err(p) = self.seen.observe(t, floor, source) {
            self.stats.problem(&p);
        }
    }

    /// `tools/call` that must create a task: its seed.
    pub async fn call(&self, tool: &str, args: Value) -> Result<DetailedTask, Problem> {
        self.stats.request("tools/call");
        let args = JsonObject::from_value(args).expect("arguments are objects");
        match self.client.start_tool(tool, args).await {
            Ok(CallStart::Task(seed)) => {
                self.observe(&seed, Floor::default(), "tools/call");
                Ok(seed)
            }
            Ok(CallStart::Complete(r)) => Err(Problem::wrong(format!(
                "tools/call {tool} answered at once instead of creating a task: {}",
                r.to_value()
            ))),
            Err(e) => {
                self.stats
                    .unexpected("tools/call", &e, &format!("tools/call {tool}"));
                Err(Problem::unexpected(&format!("tools/call {tool}"), &e))
            }
        }
    }

    /// `tasks/get`; the error is the caller's to classify.
    pub async fn get(&self, id: TaskId) -> Result<DetailedTask, ClientError> {
        self.stats.request("tasks/get");
        let floor = self.seen.floor(id);
        let t = self.client.get(id).await?;
        if t.task().task_id != id {
            self.stats.problem(&Problem::wrong(format!(
                "tasks/get {id} answered task {}",
                t.task().task_id
            )));
        }
        self.observe(&t, floor, "tasks/get");
        Ok(t)
    }

    /// `tasks/get` where every error is unexpected.
    pub async fn get_ok(&self, id: TaskId) -> Result<DetailedTask, Problem> {
        self.get(id).await.map_err(|e| {
            self.stats.unexpected("tasks/get", &e, &format!("tasks/get {id}"));
            Problem::unexpected(&format!("tasks/get {id}"), &e)
        })
    }

    /// `tasks/steer`.
    pub async fn steer(&self, id: TaskId, message: &str) -> Result<(), ClientError> {
        self.stats.request("tasks/steer");
        self.client.steer(id, message).await
    }

    /// `tasks/pause`.
    pub async fn pause(&self, id: TaskId) -> Result<DetailedTask, ClientError> {
        self.stats.request("tasks/pause");
        let floor = self.seen.floor(id);
        let t = self.client.pause(id).await?;
        self.observe(&t, floor, "tasks/pause");
        Ok(t)
    }

    /// `tasks/resume`.
    pub async fn resume(&self, id: TaskId) -> Result<DetailedTask, ClientError> {
        self.stats.request("tasks/resume");
        let floor = self.seen.floor(id);
        let t = self.client.resume(id).await?;
        self.observe(&t, floor, "tasks/resume");
        Ok(t)
    }

    /// `tasks/cancel`.
    pub async fn cancel(&self, id: TaskId) -> Result<(), ClientError> {
        self.stats.request("tasks/cancel");
        self.client.cancel(id).await
    }

    /// `tasks/update` answering `key` with `response`.
    pub async fn update(&self, id: TaskId, key: &str, response: &Value) -> Result<(), ClientError> {
        self.stats.request("tasks/update");
        let mut responses = InputResponses::new();
        responses.insert(
            key.to_owned(),
            JsonObject::from_value(response.clone()).expect("responses are objects"),
        );
        self.client.update(id, responses).await
    }

    /// Retrieves the tree below `root` task by task.
    pub async fn walk(&self, root: TaskId) -> Result<Snapshot, WalkError> {
        let mut snap = Snapshot {
            root,
            tasks: HashMap::new(),
            order: Vec::new(),
            paths: HashMap::new(),
        };
        let mut level = vec![(root, "0".to_owned())];
        while !level.is_empty() {
            let sent_ms = now_ms();
            let answers = futures::future::join_all(level.iter().map(|(id, _)| self.get(*id))).await;
            let mut next = Vec::new();
            for ((id, path), answer) in level.into_iter().zip(answers) {
                let t = answer.map_err(|error| WalkError { id, sent_ms, error })?;
                for (i, c) in t.task().child_task_ids.iter().enumerate() {
                    next.push((*c, format!("{path}.{i}")));
                }
                snap.order.push(id);
                snap.paths.insert(id, path);
                snap.tasks.insert(id, t);
            }
            if snap.order.len() + next.len() > MAX_WALK {
                self.stats.problem(&Problem::wrong(format!(
                    "tree {root} has more than {MAX_WALK} tasks"
                )));
                break;
            }
            level = next;
        }
        Ok(snap)
    }

    /// [`Api::walk`] where every error is unexpected.
    pub async fn walk_ok(&self, root: TaskId) -> Result<Snapshot, Problem> {
        self.walk(root).await.map_err(|w| {
            let what = format!("tasks/get {} (walking tree {root})", w.id);
            self.stats.unexpected("tasks/get", &w.error, &what);
            Problem::unexpected(&what, &w.error)
        })
    }

    /// Polls `id` until `done` holds for it, for at most `limit`.
    pub async fn wait_for(
        &self,
        id: TaskId,
        limit: Duration,
        what: &str,
        done: impl Fn(&DetailedTask) -> bool,
    ) -> Result<DetailedTask, Problem> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            let t = self.get_ok(id).await?;
            if done(&t) {
                return Ok(t);
            }
            if start.elapsed() > limit {
                return Err(Problem::stuck(format!(
                    "task {id}: {what} did not happen within {:.0} s; it is {} ({:?})",
                    limit.as_secs_f64(),
                    t.status(),
                    t.task().status_message
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 3 / 2).min(Duration::from_millis(400));
        }
    }
}

/// An elicitation answer `{"action": "accept", "content": {"confirm": b}}`.
pub fn accept(confirm: bool) -> Value {
    json!({"action": "accept", "content": {"confirm": confirm}})
}
