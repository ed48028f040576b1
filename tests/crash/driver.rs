//! One lifetime of the real `subtask serve` binary in the crash test: start
//! it (and check the restart rules on everything it answers), let the
//! clients drive it, kill it with SIGKILL at the planned moment, reap it and
//! read its log. Requests go through [`Round::call`], which tells a server
//! that was killed from one that failed.
//!
//! The clients (`clients.rs`) drive whatever implements [`Calls`]: the one
//! server of a crash-test round here, or the several instances of the
//! scale-out test (`tests/scale_out/round.rs`).

use std::collections::{HashMap, VecDeque};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::checks::check_restart;
use crate::model::{Before, Model, Source, ids, is_terminal, status_of};
use crate::support::http::{Client, full_caps};
use crate::support::process::{Rpc, ServerProcess, listen, rpc};

/// Hang guard for one request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Hang guard for a server to start (recovery included) and answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

// ----- one server lifetime -------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
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
    pub fn parse(name: &str) -> Trigger {
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
pub struct Round {
    pub server: Arc<ServerProcess>,
    pub client: Client,
    pub model: Arc<Mutex<Model>>,
    /// Kill right after the first acknowledged `Trigger` from this instant on.
    pub plan: Mutex<Option<(Trigger, Instant)>>,
    pub fired: Mutex<Option<Trigger>>,
    pub kill_sent: tokio::sync::Notify,
    pub jobs: Mutex<Vec<JoinHandle<()>>>,
}

/// The server is gone (killed): stop driving.
pub struct Stop;

/// What the clients need from the server (or servers) they drive: send a
/// request, record what they were shown, count acknowledgements, run jobs.
pub trait Calls: Send + Sync + 'static {
    fn model(&self) -> std::sync::MutexGuard<'_, Model>;

    fn violate(&self, v: String) {
        self.model().violate(v);
    }

    /// Counts an acknowledgement (and may act on it: the crash test's kill plan).
    fn acked(&self, trigger: Trigger, what: &'static str);

    /// Whether the clients should stop driving (the server was killed, or
    /// the round is over).
    fn stopped(&self) -> bool;

    /// Sends a request. `Err(Stop)` when the clients must stop.
    fn call(&self, method: &str, params: Value) -> impl Future<Output = Result<Rpc, Stop>> + Send;

    /// Runs a job of this round.
    fn spawn(&self, f: impl Future<Output = ()> + Send + 'static);

    /// Follows `notifications/tasks` of `roots` (and their subtasks).
    fn spawn_listener(self: &Arc<Self>, roots: Vec<String>);

    /// `tasks/get` of a known task, checked and recorded.
    fn get(&self, id: &str) -> impl Future<Output = Result<Option<Value>, Stop>> + Send {
        async move {
            let sent = self.model().next_seq();
            match self.call("tasks/get", json!({"taskId": id})).await? {
                Rpc::Ok(snap) => {
                    self.model().observe(&snap, Source::Ordered { sent });
                    Ok(Some(snap))
                }
                Rpc::Err(..) => Ok(None),
            }
        }
    }

    /// Reads a tree top-down (a parent before its children). With
    /// `skip_terminal`, tasks known terminal are not read again (their
    /// subtrees are terminal too).
    fn walk(&self, root: &str, skip_terminal: bool) -> impl Future<Output = Result<Vec<Value>, Stop>> + Send {
        async move {
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
    }
}

impl Calls for Round {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        Round::model(self)
    }

    fn acked(&self, trigger: Trigger, what: &'static str) {
        Round::acked(self, trigger, what);
    }

    fn stopped(&self) -> bool {
        self.server.is_killed()
    }

    fn call(&self, method: &str, params: Value) -> impl Future<Output = Result<Rpc, Stop>> + Send {
        Round::call(self, method, params)
    }

    fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        Round::spawn(self, f);
    }

    fn spawn_listener(self: &Arc<Self>, roots: Vec<String>) {
        Round::spawn_listener(self, roots);
    }
}

impl Round {
    pub fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }

    pub fn violate(&self, v: String) {
        self.model().violate(v);
    }

    /// Counts an acknowledgement, and kills the server right away when it
    /// is the one this round waits for.
    pub fn acked(&self, trigger: Trigger, what: &'static str) {
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
    pub async fn call(&self, method: &str, params: Value) -> Result<Rpc, Stop> {
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

    pub fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        let h = tokio::spawn(f);
        self.jobs.lock().unwrap().push(h);
    }

    /// Follows `notifications/tasks` of `roots` (and their subtasks).
    pub fn spawn_listener(self: &Arc<Self>, roots: Vec<String>) {
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

/// Reads every known tree whole (not skipping terminal tasks): every task
/// ever shown must still be answered. Returns the first snapshot of each task.
pub async fn read_everything<R: Calls>(round: &Arc<R>) -> HashMap<String, Value> {
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

/// Panics panics and error lines the server wrote count as failures.
pub fn check_log(model: &Mutex<Model>, log: &Path) {
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

/// Starts the server, reads everything, checks the restart rules.
pub async fn restart(
    bin: &Path,
    model: &Arc<Mutex<Model>>,
    args: &[String],
    log: &Path,
    before: &HashMap<String, Before>,
) -> Arc<Round> {
    let env = [("RUST_LOG", crate::support::redone::RUST_LOG)];
    let server = ServerProcess::start_env(bin, args, log, READY_TIMEOUT, &env)
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
pub async fn end_round(round: &Arc<Round>, model: &Mutex<Model>) {
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
