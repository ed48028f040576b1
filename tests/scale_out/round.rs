//! The clients' side of the scale-out test: [`MultiRound`] is what the crash
//! test's clients (`crash/clients.rs`) drive here instead of one server.
//! Every request goes to a randomly chosen usable instance; when the
//! connection fails because the test killed or stopped that instance, a
//! read is sent again to another one, and any other request counts as sent
//! and not acknowledged (its answer was lost with the instance), as in the
//! crash test. Trees are created on one instance and followed with
//! `subscriptions/listen` on another.
//!
//! Also here: the faults' bookkeeping ([`Shared::begin_fault`]: the model's
//! state at the fault, the trees the faulted instance owned, and the
//! "ownership window" of those trees until the takeover has settled), and
//! the record of every steer sent, for the steer check at the end.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::clients::{drive, random_call};
use crate::cluster::{Cluster, Proc};
use crate::driver::{Calls, REQUEST_TIMEOUT, Stop, Trigger};
use crate::logs::{SteerRecord, now_us};
use crate::model::{Before, Model, Source, Tool, is_terminal, status_of};
use crate::support::process::{Rpc, listen, rpc};
use crate::support::seed::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL of an instance (restarted later, same or new id).
    Kill,
    /// SIGSTOP past the lease, then SIGCONT: the zombie must fence itself
    /// and rejoin the cluster, without exiting.
    Stop,
    /// `pg_ctl stop -m immediate` and start again at once (PostgreSQL's
    /// crash recovery may outlast the lease: the instances that lose it
    /// fence themselves and rejoin).
    Postgres,
    /// PostgreSQL stopped (`-m immediate`) for twice the lease under load,
    /// then started: every instance fences itself and rejoins, none exits.
    Outage,
}

impl FaultKind {
    /// A fault of the database, not of one instance.
    pub fn of_database(self) -> bool {
        matches!(self, FaultKind::Postgres | FaultKind::Outage)
    }
}

/// One fault, as it was when it happened.
pub struct Fault {
    pub kind: FaultKind,
    pub proc: Option<Arc<Proc>>,
    pub at: i64,
    pub instant: Instant,
    /// The model's state right before the fault.
    pub before: HashMap<String, Before>,
    /// `touched` of every task right before the fault.
    pub touched: HashMap<String, u64>,
    /// The roots of the trees the faulted instance owned (for a database
    /// fault: those of the instances that fenced themselves in it, known
    /// once it is over).
    pub owned: Vec<String>,
    /// The trees whose ownership window the fault opened: those it owned,
    /// or for a database fault every running tree (any instance may fence
    /// itself in it).
    pub windowed: Vec<String>,
    pub how: String,
}

#[derive(Debug, Default)]
pub struct ScaleStats {
    pub kills: usize,
    pub zombies: usize,
    pub pg_restarts: usize,
    pub pg_outage_ms: Vec<u64>,
    pub restarts_same_id: usize,
    pub restarts_new_id: usize,
    pub quick_restarts: usize,
    /// Milliseconds from each kill or stop to the last of its trees taken over.
    pub takeover_ms: Vec<u64>,
    pub trees_taken_over: usize,
    pub lost_answers: usize,
    pub retried_reads: usize,
    /// Acknowledged updates and cancels of trees whose owner was being
    /// replaced, not counted as acknowledged (see `Shared::window_state`).
    pub discounted_acks: usize,
    /// "The task database is unavailable" answers during a PostgreSQL
    /// restart (reads sent again; anything else not acknowledged).
    pub db_unavailable: usize,
    /// Instances that fenced themselves in a PostgreSQL restart or outage
    /// longer than two thirds of the lease, and rejoined.
    pub outage_fences: usize,
    /// Zombies that fenced themselves and rejoined after SIGCONT.
    pub zombies_rejoined: usize,
    /// Milliseconds from SIGCONT (or PostgreSQL back) to "rejoined the cluster".
    pub rejoin_ms: Vec<u64>,
    /// The outages of twice the lease, and their length.
    pub outages: usize,
    pub outage_ms: Vec<u64>,
    /// Listen streams a fenced instance ended (and that were opened again).
    pub listens_fenced: usize,
    pub listens: usize,
    pub listens_reopened: usize,
    pub sse_messages: usize,
}

#[derive(Default)]
struct Windows {
    generation: HashMap<String, u64>,
    open: HashSet<String>,
}

/// What lives across rounds.
pub struct Shared {
    pub cluster: Arc<Cluster>,
    pub model: Arc<Mutex<Model>>,
    /// Root -> the process whose `tools/call` created it.
    pub created_by: Mutex<HashMap<String, String>>,
    pub steers: Mutex<Vec<SteerRecord>>,
    windows: Mutex<Windows>,
    pub rng: Mutex<Rng>,
    pub stats: Mutex<ScaleStats>,
    /// The PostgreSQL restarts: from the stop to a little after the start.
    outages: Mutex<Vec<(Instant, Instant)>>,
    /// Instances that fenced themselves in a PostgreSQL restart or outage
    /// (their lease loss was no fault of theirs).
    pub fenced_in_outage: Mutex<HashSet<String>>,
}

/// How long after PostgreSQL is back an instance may still find its
/// connections broken (the store reconnects with a backoff of up to 1 s).
pub const RECONNECT_GRACE: Duration = Duration::from_secs(2);

impl Shared {
    pub fn new(cluster: Arc<Cluster>, model: Arc<Mutex<Model>>, rng: Rng) -> Shared {
        Shared {
            cluster,
            model,
            created_by: Mutex::new(HashMap::new()),
            steers: Mutex::new(Vec::new()),
            windows: Mutex::new(Windows::default()),
            rng: Mutex::new(rng),
            stats: Mutex::new(ScaleStats::default()),
            outages: Mutex::new(Vec::new()),
            fenced_in_outage: Mutex::new(HashSet::new()),
        }
    }

    pub fn model(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }

    pub fn stats(&self) -> MutexGuard<'_, ScaleStats> {
        self.stats.lock().unwrap()
    }

    pub fn violate(&self, v: String) {
        self.model().violate(v);
    }

    /// PostgreSQL goes down now; returns the outage's index.
    pub fn outage_begins(&self) -> usize {
        let far = Instant::now() + Duration::from_secs(3600);
        let mut o = self.outages.lock().unwrap();
        o.push((Instant::now(), far));
        o.len() - 1
    }

    /// PostgreSQL is back.
    pub fn outage_ends(&self, i: usize) {
        self.outages.lock().unwrap()[i].1 = Instant::now() + RECONNECT_GRACE;
    }

    /// Whether a request sent at `sent` and answered now overlapped a
    /// PostgreSQL restart (or the reconnection after it).
    fn overlaps_outage(&self, sent: Instant) -> bool {
        let now = Instant::now();
        self.outages
            .lock()
            .unwrap()
            .iter()
            .any(|(from, to)| sent <= *to && now >= *from)
    }

    /// A random usable instance.
    pub fn pick(&self) -> Option<Arc<Proc>> {
        let usable = self.cluster.usable();
        let i = {
            let mut rng = self.rng.lock().unwrap();
            if usable.is_empty() {
                return None;
            }
            rng.below(usable.len())
        };
        Some(usable[i].clone())
    }

    pub fn chance(&self, p: f64) -> bool {
        self.rng.lock().unwrap().chance(p)
    }

    /// A usable instance that runs the root handler of a tree the clients
    /// know and have not seen end (by its log), if there is one.
    pub fn busy_instance(&self) -> Option<Arc<Proc>> {
        let now = now_us();
        let mut busy = Vec::new();
        for p in self.cluster.usable() {
            p.refresh_log();
            let open = p.log.lock().unwrap().open_at(now);
            let m = self.model();
            if open.iter().any(|r| m.trees.contains_key(r) && !m.is_terminal(r)) {
                busy.push(p.clone());
            }
        }
        let mut rng = self.rng.lock().unwrap();
        rng.pick(&busy).cloned()
    }

    /// The roots of the trees `proc` owned at `at`: those whose root handler
    /// was open in its log, and those it created whose root handler it had
    /// not logged yet.
    pub fn owned_roots(&self, proc: &Proc, at: i64) -> Vec<String> {
        proc.refresh_log();
        let log = proc.log.lock().unwrap();
        let open: HashSet<String> = log.open_at(at).into_iter().collect();
        let created: Vec<String> = self
            .created_by
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, by)| **by == proc.name)
            .map(|(root, _)| root.clone())
            .collect();
        let m = self.model();
        // The trees the clients know, and those whose create was just
        // acknowledged (a fault right after it comes before the creator
        // records the tree).
        let known: HashSet<String> = m
            .trees
            .keys()
            .cloned()
            .chain(self.created_by.lock().unwrap().keys().cloned())
            .collect();
        let mut owned: Vec<String> = known
            .into_iter()
            .filter(|root| {
                open.contains(root) || (created.contains(root) && !log.mentions(root) && !m.is_terminal(root))
            })
            .collect();
        owned.sort();
        owned
    }

    /// Records the model's state, sends the fault (SIGKILL, SIGSTOP; the
    /// PostgreSQL restart is the caller's) and opens the ownership window of
    /// the trees the instance owned.
    pub fn begin_fault(&self, kind: FaultKind, proc: Option<Arc<Proc>>, how: String) -> Fault {
        let (before, touched) = {
            let m = self.model();
            let touched = m.tasks.iter().map(|(k, t)| (k.clone(), t.touched)).collect();
            (m.before(), touched)
        };
        let at = now_us();
        let instant = Instant::now();
        match (kind, &proc) {
            (FaultKind::Kill, Some(p)) => {
                p.kill();
            }
            (FaultKind::Stop, Some(p)) => p.stop(),
            _ => {}
        }
        let owned = match (kind, &proc) {
            (FaultKind::Kill | FaultKind::Stop, Some(p)) => self.owned_roots(p, at),
            _ => Vec::new(),
        };
        // Any instance may fence itself in a database fault and have its
        // trees brought back (by itself or another).
        let windowed = if kind.of_database() {
            self.model().running_trees()
        } else {
            owned.clone()
        };
        let mut w = self.windows.lock().unwrap();
        for r in &windowed {
            *w.generation.entry(r.clone()).or_default() += 1;
            w.open.insert(r.clone());
        }
        drop(w);
        // What was read before the fault no longer shows a task parked
        // on input for sure (`Model::parked_on_input`).
        self.model().epoch += 1;
        Fault {
            kind,
            proc,
            at,
            instant,
            before,
            touched,
            owned,
            windowed,
            how,
        }
    }

    /// The new owners hold the fault's trees.
    pub fn close_window(&self, fault: &Fault) {
        let mut w = self.windows.lock().unwrap();
        for r in &fault.windowed {
            *w.generation.entry(r.clone()).or_default() += 1;
            w.open.remove(r);
        }
        drop(w);
        self.model().epoch += 1;
    }

    /// The window generation of `task`'s tree and whether its window is open.
    ///
    /// An update or cancel of a tree whose owner is being replaced may be
    /// applied after the takeover's recovery (which fails a task parked on
    /// input, or runs a `fanout` root again, so the answered key may not be
    /// outstanding any more) although the read that showed the task parked
    /// was made before: the model's "parked, so the ack means it was taken"
    /// rules do not hold across that, and such acks are not counted.
    fn window_state(&self, task: &str) -> (u64, bool) {
        let root = self
            .model()
            .tasks
            .get(task)
            .map(|t| t.root.clone())
            .unwrap_or_default();
        let w = self.windows.lock().unwrap();
        (
            w.generation.get(&root).copied().unwrap_or(0),
            w.open.contains(&root),
        )
    }

    fn record_steer(&self, params: &Value, sent_at: i64, acked: bool) {
        self.steers.lock().unwrap().push(SteerRecord {
            task: params["taskId"].as_str().unwrap_or_default().to_owned(),
            message: params["message"].as_str().unwrap_or_default().to_owned(),
            sent_at,
            acked_at: acked.then(now_us),
        });
    }
}

/// The crash test's `creator` for several instances: creates `count` trees
/// at random moments (half of them run three times as long, so that more
/// of them are running when an instance fails), each driven by its own
/// client and followed on another instance. A create whose answer was lost
/// with its instance (status 0, see [`MultiRound`]'s `call`) is not
/// acknowledged: its tree, if any, is nobody's.
pub async fn creator(round: Arc<MultiRound>, mut rng: Rng, count: u64) {
    for _ in 0..count {
        tokio::time::sleep(Duration::from_millis(rng.range(0, 700))).await;
        if round.stopped() {
            return;
        }
        let (tool, mut args) = random_call(&mut rng);
        if rng.chance(0.5) {
            match tool {
                Tool::Fanout => args["steps"] = json!(args["steps"].as_u64().unwrap_or(1) * 3),
                Tool::Research => args["pace"] = json!(rng.range(2, 4)),
            }
        }
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
            Rpc::Err(0, _) => {}
            other => round.violate(format!(
                "tools/call {} {args} did not create a task: {other:?}",
                tool.name()
            )),
        }
    }
}

/// Fault right after the first acknowledged `trigger` from `from` on.
pub struct Plan {
    pub trigger: Trigger,
    pub from: Instant,
    pub kind: FaultKind,
    /// Fallback target when neither the answering instance nor the tree's
    /// creator is usable.
    pub slot: usize,
}

/// One round of clients on the instances.
pub struct MultiRound {
    pub shared: Arc<Shared>,
    pub over: AtomicBool,
    pub jobs: Mutex<Vec<JoinHandle<()>>>,
    /// The `subscriptions/listen` followers (they end with their streams).
    pub listeners: Mutex<Vec<JoinHandle<()>>>,
    pub plan: Mutex<Option<Plan>>,
    pub fired: Mutex<Option<Fault>>,
    pub fired_notify: tokio::sync::Notify,
}

fn trigger_of(method: &str) -> Option<Trigger> {
    Some(match method {
        "tools/call" => Trigger::Create,
        "tasks/steer" => Trigger::Steer,
        "tasks/update" => Trigger::Update,
        "tasks/pause" => Trigger::Pause,
        "tasks/resume" => Trigger::Resume,
        "tasks/cancel" => Trigger::Cancel,
        _ => return None,
    })
}

impl MultiRound {
    pub fn new(shared: Arc<Shared>) -> Arc<MultiRound> {
        Arc::new(MultiRound {
            shared,
            over: AtomicBool::new(false),
            jobs: Mutex::new(Vec::new()),
            listeners: Mutex::new(Vec::new()),
            plan: Mutex::new(None),
            fired: Mutex::new(None),
            fired_notify: tokio::sync::Notify::new(),
        })
    }

    /// Sends the planned fault when `trigger` is the one it waits for.
    pub fn maybe_fire(&self, trigger: Trigger, answering: Option<&Arc<Proc>>, task: Option<&str>) {
        let plan = {
            let mut p = self.plan.lock().unwrap();
            match &*p {
                Some(pl) if pl.trigger == trigger && Instant::now() >= pl.from => p.take(),
                _ => None,
            }
        };
        let Some(plan) = plan else { return };
        let proc = if plan.kind.of_database() {
            None
        } else {
            let root = task.and_then(|t| self.shared.model().tasks.get(t).map(|t| t.root.clone()));
            let creator = root
                .and_then(|r| self.shared.created_by.lock().unwrap().get(&r).cloned())
                .and_then(|name| self.shared.cluster.by_name(&name))
                .filter(|p| p.usable());
            let answering = answering.filter(|p| p.usable()).cloned();
            let fallback = self.shared.cluster.current(plan.slot).filter(|p| p.usable());
            let pick = if self.shared.chance(0.5) {
                creator.or(answering)
            } else {
                answering.or(creator)
            };
            match pick.or(fallback) {
                Some(p) => Some(p),
                None => {
                    *self.plan.lock().unwrap() = Some(plan);
                    return;
                }
            }
        };
        let fault = self.shared.begin_fault(
            plan.kind,
            proc,
            format!("right after an acknowledged {trigger:?}"),
        );
        *self.fired.lock().unwrap() = Some(fault);
        self.fired_notify.notify_one();
    }

    async fn call_inner(&self, method: &str, params: Value) -> Result<Rpc, Stop> {
        let idempotent = method == "tasks/get";
        let guarded = matches!(method, "tasks/update" | "tasks/cancel");
        let task = params["taskId"].as_str().map(str::to_owned);
        let window = match (&task, guarded) {
            (Some(t), true) => Some(self.shared.window_state(t)),
            _ => None,
        };
        let waiting = Instant::now();
        loop {
            let Some(proc) = self.shared.pick() else {
                if waiting.elapsed() > crate::cluster::READY_TIMEOUT {
                    self.shared.violate(format!(
                        "{method}: no usable instance for {:?}",
                        waiting.elapsed()
                    ));
                    return Err(Stop);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let sent_at = now_us();
            let sent = Instant::now();
            let answer = rpc(&proc.client, method, params.clone(), REQUEST_TIMEOUT).await;
            match answer {
                Ok(Rpc::Err(status, e))
                    if proc.faulted()
                        || e["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("lost its cluster lease")) =>
                {
                    // A killed or stopped instance's last words, or one that
                    // lost its lease and is fenced until it rejoins (whether
                    // it should have is the fence checks' business).
                    if idempotent {
                        self.shared.stats().retried_reads += 1;
                        // Every instance may be fenced (a database outage).
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    if method == "tasks/steer" {
                        self.shared.record_steer(&params, sent_at, false);
                    }
                    return Ok(Rpc::Err(
                        0,
                        json!({"message": format!("{} went away", proc.name), "answer": e, "status": status}),
                    ));
                }
                Ok(Rpc::Err(status, e))
                    if e["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("the task database is unavailable"))
                        && self.shared.overlaps_outage(sent) =>
                {
                    // The shared design's "fail the requests in flight with
                    // a clear error" while PostgreSQL restarts.
                    self.shared.stats().db_unavailable += 1;
                    if idempotent {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    if method == "tasks/steer" {
                        self.shared.record_steer(&params, sent_at, false);
                    }
                    return Ok(Rpc::Err(
                        0,
                        json!({"message": "PostgreSQL restarting", "answer": e, "status": status}),
                    ));
                }
                Ok(mut r) => {
                    if let Rpc::Err(status, e) = &r {
                        let not_found = e["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("Task not found"));
                        if *status >= 500 || e["code"] == -32603 || not_found {
                            self.shared.violate(format!(
                                "{method} {params} answered HTTP {status} by {}: {e}",
                                proc.name
                            ));
                        }
                    }
                    if let (Some((generation, open)), Some(t), Rpc::Ok(_)) = (window, &task, &r) {
                        let (now_generation, _) = self.shared.window_state(t);
                        if open || now_generation != generation {
                            self.shared.stats().discounted_acks += 1;
                            r = Rpc::Err(
                                0,
                                json!({"message": "acknowledged while the tree's owner was being replaced"}),
                            );
                        }
                    }
                    if method == "tasks/steer" {
                        self.shared
                            .record_steer(&params, sent_at, matches!(r, Rpc::Ok(_)));
                    }
                    if let Rpc::Ok(res) = &r {
                        let mut subject = task.clone();
                        if method == "tools/call"
                            && let Some(id) = res["taskId"].as_str()
                        {
                            self.shared
                                .created_by
                                .lock()
                                .unwrap()
                                .insert(id.to_owned(), proc.name.clone());
                            subject = Some(id.to_owned());
                        }
                        if let Some(t) = trigger_of(method) {
                            self.maybe_fire(t, Some(&proc), subject.as_deref());
                        }
                    }
                    return Ok(r);
                }
                Err(e) => {
                    if !proc.faulted() {
                        self.shared.violate(format!(
                            "{method} {params} to {}: {e}, while the instance was neither killed nor stopped \
                             (exit: {:?})",
                            proc.name,
                            proc.server.exited()
                        ));
                    }
                    if idempotent {
                        self.shared.stats().retried_reads += 1;
                        continue;
                    }
                    self.shared.stats().lost_answers += 1;
                    if method == "tasks/steer" {
                        self.shared.record_steer(&params, sent_at, false);
                    }
                    return Ok(Rpc::Err(
                        0,
                        json!({"message": format!("no answer from {}: {e}", proc.name)}),
                    ));
                }
            }
        }
    }

    /// Stops the clients (they finish the request under way) and waits for
    /// them (`guard`), aborting whatever is left; the listeners at once.
    pub async fn end(&self, guard: Duration) {
        self.over.store(true, Ordering::SeqCst);
        let listeners: Vec<JoinHandle<()>> = std::mem::take(&mut *self.listeners.lock().unwrap());
        for l in &listeners {
            l.abort();
        }
        for l in listeners {
            if let Err(e) = l.await
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        let jobs: Vec<JoinHandle<()>> = std::mem::take(&mut *self.jobs.lock().unwrap());
        let deadline = tokio::time::Instant::now() + guard;
        for mut j in jobs {
            match tokio::time::timeout_at(deadline, &mut j).await {
                Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Ok(_) => {}
                Err(_) => {
                    j.abort();
                    if let Err(e) = j.await
                        && e.is_panic()
                    {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
        }
    }
}

impl Calls for MultiRound {
    fn model(&self) -> MutexGuard<'_, Model> {
        self.shared.model()
    }

    fn acked(&self, _trigger: Trigger, what: &'static str) {
        self.shared.model().ack(what);
    }

    fn stopped(&self) -> bool {
        self.over.load(Ordering::SeqCst)
    }

    fn call(&self, method: &str, params: Value) -> impl Future<Output = Result<Rpc, Stop>> + Send {
        self.call_inner(method, params)
    }

    fn spawn(&self, f: impl Future<Output = ()> + Send + 'static) {
        let h = tokio::spawn(f);
        self.jobs.lock().unwrap().push(h);
    }

    /// Follows `notifications/tasks` of `roots` on an instance other than
    /// the one that created the first of them; when that instance is killed
    /// or stopped, opens the stream again on another.
    fn spawn_listener(self: &Arc<Self>, roots: Vec<String>) {
        if roots.is_empty() {
            return;
        }
        let me = self.clone();
        let job = tokio::spawn(async move {
            let creator = me.shared.created_by.lock().unwrap().get(&roots[0]).cloned();
            let mut first = true;
            loop {
                if me.stopped() {
                    return;
                }
                let open: Vec<String> = {
                    let m = me.model();
                    roots.iter().filter(|r| !m.is_terminal(r)).cloned().collect()
                };
                if open.is_empty() {
                    return;
                }
                let usable = me.shared.cluster.usable();
                let others: Vec<Arc<Proc>> = usable
                    .iter()
                    .filter(|p| Some(&p.name) != creator.as_ref())
                    .cloned()
                    .collect();
                let pool = if others.is_empty() { usable } else { others };
                let proc = {
                    let mut rng = me.shared.rng.lock().unwrap();
                    rng.pick(&pool).cloned()
                };
                let Some(proc) = proc else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                {
                    let mut st = me.shared.stats();
                    st.listens += 1;
                    if !first {
                        st.listens_reopened += 1;
                    }
                }
                first = false;
                let (m2, p2) = (me.clone(), proc.clone());
                // Whether the stream said anything (a refusal is a plain
                // error answer, no stream), and whether it ended because its
                // instance fenced itself.
                let heard = Arc::new(AtomicBool::new(false));
                let fenced = Arc::new(AtomicBool::new(false));
                let (h2, f2) = (heard.clone(), fenced.clone());
                let r = listen(&proc.client, &open, move |msg| {
                    h2.store(true, Ordering::SeqCst);
                    if msg["error"]["data"]["reason"] == "fenced" {
                        f2.store(true, Ordering::SeqCst);
                    }
                    if msg["method"] != "notifications/tasks" {
                        return;
                    }
                    let terminal = is_terminal(status_of(&msg["params"]));
                    {
                        let mut m = m2.model();
                        m.observe(&msg["params"], Source::Sse);
                        if terminal {
                            m.stats.sse_terminal += 1;
                        }
                    }
                    m2.shared.stats().sse_messages += 1;
                    if terminal {
                        m2.acked(Trigger::SseTerminal, "notification (terminal)");
                        m2.maybe_fire(Trigger::SseTerminal, Some(&p2), msg["params"]["taskId"].as_str());
                    }
                })
                .await;
                if let Err(e) = r
                    && !proc.faulted()
                {
                    me.violate(format!("subscriptions/listen on {}: {e}", proc.name));
                }
                let refused = !heard.load(Ordering::SeqCst);
                let fenced = fenced.load(Ordering::SeqCst);
                if fenced {
                    me.shared.stats().listens_fenced += 1;
                }
                if !proc.faulted() && !refused && !fenced {
                    // The stream ended on an instance the test left alone.
                    return;
                }
                // Refused: every instance may be fenced (a database outage).
                let pause = if refused { 200 } else { 50 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        });
        self.listeners.lock().unwrap().push(job);
    }
}
