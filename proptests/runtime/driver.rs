//! Runs one case: builds the runtime from the case's limits, spawns the
//! roots with their scripts, lets virtual time pass in small steps while it
//! observes, performs the client's actions at their times, then stops
//! perturbing and settles (resumes what is paused, answers what is asked)
//! until every tree has ended, within a bound computed from the scripts.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use subtask::core::{ForestConfig, RootOptions};
use subtask::model::{DetailedTask, JsonObject, TaskId, TaskStatus};
use subtask::runtime::{Runtime, RuntimeConfig};

use crate::V;
use crate::checks::{R, ResLog, Snap, Stats, SubLog, describe, ready_prefix, terminal, winding};
use crate::interpreter::{Shared, body, quiet_script_panics};
use crate::script::{Act, AnswerMode, COOPERATIVE_GRACE_MS, Case, Cfg, Pick, Script};

// ----- the driver ----------------------------------------------------------------

pub struct Driver {
    pub rt: Runtime,
    pub sh: Arc<Shared>,
    pub cfg: Cfg,
    pub t0: tokio::time::Instant,
    pub roots: Vec<TaskId>,
    /// Every task seen, parents before children.
    pub known: Vec<TaskId>,
    pub known_set: HashSet<TaskId>,
    /// The previous atomic snapshot.
    pub last: Snap,
    /// Children count of tasks observed winding down or terminal (I5).
    pub frozen: HashMap<TaskId, usize>,
    /// Outstanding keys at the last observation that was not `paused`.
    pub last_keys: HashMap<TaskId, BTreeSet<String>>,
    /// Whether a `paused` observation came after `last_keys` was taken.
    pub paused_since: HashSet<TaskId>,
    /// Keys once outstanding and then not (I9).
    pub gone_keys: HashMap<TaskId, BTreeSet<String>>,
    /// Answers accepted by `tasks/update`.
    pub sent_answers: HashMap<(TaskId, String), JsonObject>,
    /// Tasks on which a cancel was accepted.
    pub cancelled_by_client: HashSet<TaskId>,
    /// The end an accepted cancel decided.
    pub must_end: HashMap<TaskId, TaskStatus>,
    pub subs: HashMap<TaskId, Arc<Mutex<SubLog>>>,
    pub results: HashMap<TaskId, Arc<Mutex<ResLog>>>,
    pub seq: u64,
    pub trace: Vec<String>,
    pub stats: Stats,
}

impl Driver {
    pub fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    pub fn name(&self, id: TaskId) -> String {
        self.sh.name(id)
    }

    pub fn note(&mut self, s: String) {
        let line = format!("{:>6} ms  {s}", self.now_ms());
        self.trace.push(line);
    }

    pub fn count(&mut self, k: &'static str) {
        *self.stats.entry(k).or_default() += 1;
    }

    pub fn spawn_root(&mut self, i: usize, script: Script) {
        let label = format!("r{i}");
        let id = self.rt.spawn(
            RootOptions::default(),
            body(self.sh.clone(), label.clone(), 0, script),
        );
        self.sh.names.lock().insert(id, label);
        self.roots.push(id);
        let log = Arc::new(Mutex::new(ResLog::default()));
        let l = log.clone();
        let mut stream = Box::pin(self.rt.results(id, V));
        tokio::spawn(async move {
            while let Some(t) = stream.next().await {
                l.lock().items.push(t);
            }
            l.lock().done = true;
        });
        self.results.insert(id, log);
    }

    pub fn subscribe(&mut self, id: TaskId) {
        let log = Arc::new(Mutex::new(SubLog::default()));
        let l = log.clone();
        let mut stream = Box::pin(self.rt.subscribe(&[id], V));
        tokio::spawn(async move {
            while let Some(t) = stream.next().await {
                l.lock().snaps.push(t);
            }
            l.lock().done = true;
        });
        self.subs.insert(id, log);
    }

    /// Lets `ms` virtual milliseconds pass (0: only yield), observing at each
    /// millisecond (`fine`) or once. After each sleep the runtime has been
    /// idle, so every stream must have caught up with the state before it.
    pub async fn tick(&mut self, ms: u64, fine: bool) -> R {
        if ms == 0 {
            tokio::task::yield_now().await;
            self.observe()?;
            return Ok(());
        }
        let (steps, step_ms) = if fine { (ms, 1) } else { (1, ms) };
        for _ in 0..steps {
            let before = self.observe()?;
            let ready: Vec<(TaskId, usize)> = self
                .roots
                .iter()
                .map(|&r| (r, ready_prefix(r, &before).len()))
                .collect();
            tokio::time::sleep(Duration::from_millis(step_ms)).await;
            for (root, n) in ready {
                let got = self.results[&root].lock().items.len();
                ensure!(
                    got >= n,
                    "I12: results of {} emitted {got} tasks although {n} were ready before the runtime went idle",
                    self.name(root)
                );
            }
            for (id, s) in &before {
                if self.rt.get(*id, V).as_ref() == Some(s) {
                    let sub = self.subs[id].lock().snaps.last().cloned();
                    ensure!(
                        sub.as_ref() == Some(s),
                        "subscribe: the last snapshot of {} is {sub:?} although the task has been {s:?} since \
                         before the runtime went idle",
                        self.name(*id)
                    );
                }
            }
            self.observe()?;
            if fine {
                tokio::task::yield_now().await;
                self.observe()?;
            }
        }
        Ok(())
    }

    pub fn pick(&self, snap: &Snap, p: Pick, relevant: impl Fn(TaskId, &DetailedTask) -> bool) -> TaskId {
        match p {
            Pick::Any(i) => self.known[i % self.known.len()],
            Pick::Relevant(i) => {
                let c: Vec<TaskId> = self
                    .known
                    .iter()
                    .copied()
                    .filter(|id| relevant(*id, &snap[id]))
                    .collect();
                if c.is_empty() {
                    self.known[i % self.known.len()]
                } else {
                    c[i % c.len()]
                }
            }
        }
    }

    pub fn act(&mut self, a: Act) -> R {
        let pre = self.observe()?;
        match a {
            Act::Steer(p) => {
                let id = self.pick(&pre, p, |_, t| !terminal(t) && !winding(t));
                self.steer(&pre, id)?;
            }
            Act::Pause(p) => {
                let id = self.pick(&pre, p, |_, t| !terminal(t) && t.status() != TaskStatus::Paused);
                self.pause(&pre, id)?;
            }
            Act::Resume(p) => {
                let id = self.pick(&pre, p, |_, t| t.status() == TaskStatus::Paused);
                self.resume(&pre, id)?;
            }
            Act::Answer(p, mode) => {
                let id = match mode {
                    AnswerMode::All | AnswerMode::First => {
                        self.pick(&pre, p, |_, t| t.status() == TaskStatus::InputRequired)
                    }
                    AnswerMode::Stale => self.pick(&pre, p, |id, _| {
                        self.gone_keys.get(&id).is_some_and(|g| !g.is_empty())
                    }),
                    AnswerMode::Unknown => self.pick(&pre, p, |_, t| !terminal(t)),
                };
                self.answer(&pre, id, mode)?;
            }
            Act::Cancel(p) => {
                let id = self.pick(&pre, p, |_, t| !terminal(t));
                self.cancel(&pre, id)?;
            }
            Act::Nothing => {}
        }
        Ok(())
    }

    pub fn exited(&self, id: TaskId) -> bool {
        self.sh.logs.lock().get(&id).is_some_and(|l| l.exited)
    }

    pub async fn run(&mut self, case: &Case) -> R {
        for (i, s) in case.roots.iter().enumerate() {
            self.spawn_root(i, s.clone());
        }
        self.observe()?;
        for &(delay, a) in &case.actions {
            self.tick(delay, true).await?;
            if self.roots.iter().all(|r| terminal(&self.last[r])) {
                self.count("runs whose trees ended before the last client action");
                break;
            }
            self.act(a)?;
        }
        // Every tree finishes: the remaining work is at most every sleep of
        // every script, a cancel grace, and a few milliseconds per step for
        // the client to resume and answer.
        let steps: u64 = case.roots.iter().map(Script::step_count).sum();
        let grace = if self.cfg.cancel_grace_ms == COOPERATIVE_GRACE_MS {
            0
        } else {
            self.cfg.cancel_grace_ms
        };
        let bound = case.roots.iter().map(Script::sleep_ms).sum::<u64>() + grace + 20 * steps + 1000;
        self.note(format!(
            "stop perturbing; every tree must finish within {bound} ms"
        ));
        self.settle(bound).await?;
        self.finish().await
    }

    pub async fn settle(&mut self, bound: u64) -> R {
        let start = self.now_ms();
        let mut idle_ms = 1;
        loop {
            let mut cur = self.observe()?;
            if self.roots.iter().all(|r| terminal(&cur[r])) {
                self.note("every root is terminal".to_owned());
                return Ok(());
            }
            if self.now_ms() - start > bound {
                return Err(self.stuck(&cur, bound).await);
            }
            let mut acted = false;
            for id in self.known.clone() {
                match cur[&id].status() {
                    TaskStatus::Paused => {
                        cur = self.resume(&cur, id)?;
                        acted = true;
                    }
                    TaskStatus::InputRequired => {
                        cur = self.answer(&cur, id, AnswerMode::All)?;
                        acted = true;
                    }
                    _ => {}
                }
            }
            idle_ms = if acted { 1 } else { (idle_ms * 2).min(16) };
            self.tick(idle_ms, false).await?;
        }
    }

    /// The trees did not finish: describe what is stuck, then see whether
    /// cancelling every root (with the cancel grace) ends them.
    pub async fn stuck(&mut self, snap: &Snap, bound: u64) -> String {
        let mut s = format!(
            "every tree finishes: not every root is terminal {bound} ms (virtual) after the client stopped \
             perturbing. Live tasks:\n"
        );
        let live = |d: &Driver, snap: &Snap| -> String {
            let logs = d.sh.logs.lock();
            let mut out = String::new();
            for id in &d.known {
                let t = &snap[id];
                if terminal(t) {
                    continue;
                }
                let h = logs.get(id).map_or("not started".to_owned(), |l| {
                    format!("started, exited {}, delivered {:?}", l.exited, l.delivered)
                });
                out += &format!(
                    "  {} {} children {} handler {h}\n",
                    d.name(*id),
                    describe(t),
                    t.task().child_task_ids.len()
                );
            }
            out
        };
        s += &live(self, snap);
        s += &format!("running handlers (slots held): {}\n", self.rt.running_handlers());
        for &r in &self.roots.clone() {
            let _ = self.rt.cancel(r);
        }
        tokio::time::sleep(Duration::from_millis(self.cfg.cancel_grace_ms + 100)).await;
        match self.observe() {
            Ok(after) => {
                let rest = live(self, &after);
                if rest.is_empty() {
                    s += "after cancelling every root, every task ended within the cancel grace\n";
                } else {
                    s += &format!(
                        "after cancelling every root and waiting the cancel grace, still live:\n{rest}"
                    );
                }
            }
            Err(e) => s += &format!("after cancelling every root: {e}\n"),
        }
        s
    }
}

#[allow(unexpected_cfgs)]
pub fn run_case(case: &Case) -> Result<Stats, String> {
    quiet_script_panics();
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().start_paused(true);
    // `select!` picks its first branch at random; with `--cfg tokio_unstable`
    // the seed is fixed, so a run is deterministic and failures shrink well.
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(b"prop_runtime"));
    let tokio_rt = builder.build().map_err(|e| e.to_string())?;
    tokio_rt.block_on(drive(case))
}

pub async fn drive(case: &Case) -> Result<Stats, String> {
    let cfg = case.cfg;
    let config = RuntimeConfig {
        forest: ForestConfig {
            limits: cfg.limits,
            ..ForestConfig::default()
        },
        max_running: cfg.max_running,
        max_running_per_tree: cfg.per_tree,
        cancel_grace: Duration::from_millis(cfg.cancel_grace_ms),
        default_poll_interval_ms: None,
        release_finished_after: None,
    };
    let rt = Runtime::new(config);
    let sh = Arc::new(Shared {
        limits: cfg.limits,
        rt: Mutex::new(Some(rt.clone())),
        logs: Mutex::default(),
        names: Mutex::default(),
        accepted: Mutex::default(),
        violations: Mutex::default(),
        max_running: cfg.max_running,
        per_tree: cfg.per_tree,
        busy: Mutex::default(),
    });
    let mut d = Driver {
        rt,
        sh: sh.clone(),
        cfg,
        t0: tokio::time::Instant::now(),
        roots: Vec::new(),
        known: Vec::new(),
        known_set: HashSet::new(),
        last: Snap::new(),
        frozen: HashMap::new(),
        last_keys: HashMap::new(),
        paused_since: HashSet::new(),
        gone_keys: HashMap::new(),
        sent_answers: HashMap::new(),
        cancelled_by_client: HashSet::new(),
        must_end: HashMap::new(),
        subs: HashMap::new(),
        results: HashMap::new(),
        seq: 0,
        trace: Vec::new(),
        stats: Stats::new(),
    };
    let r = d.run(case).await;
    *sh.rt.lock() = None;
    match r {
        Ok(()) => Ok(d.stats),
        Err(e) => {
            let from = d.trace.len().saturating_sub(40);
            Err(format!(
                "{e}\n-- client actions (last {}) --\n{}",
                d.trace.len() - from,
                d.trace[from..].join("\n")
            ))
        }
    }
}
