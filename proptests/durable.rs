//! Property test of durable execution: random handler scripts (spawns,
//! steps, checkpoints, input requests) driven by a client that answers
//! input, steers and pauses at random, with a stop injected at a random
//! step: the runtime and every handler are dropped, and writes submitted
//! after the stop are lost (never durable). A new runtime recovers the
//! same store and runs the tree to its end.
//!
//! Checked:
//! * the final results equal those of the same script run without a stop
//!   (steers aside, which depend on timing), every task at the same place;
//! * no step that had returned before the stop ran again, and no handler of
//!   a task that had completed (durably) before the stop ran again;
//! * every task reports the steers it was sent (acknowledged durably) as a
//!   prefix, in order, each once: those taken before the stop are handed
//!   back to the re-run at the same points;
//! * the tree holds each task once: no subtask appended by the re-run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use proptest::prelude::*;
use serde_json::{Value, json};
use subtask::core::{ClientView, RootOptions};
use subtask::model::{InputResponses, JsonObject, TaskId, TaskOutcome, TaskStatus};
use subtask::runtime::{
    HandlerBody, HandlerResult, Owner, Runtime, RuntimeConfig, SubtaskOptions, TaskContext,
};
use subtask::store::{MemoryStore, StoreError, StoredTask, StoredTree, TaskStore, Ticket, WriteBatch};

#[path = "support/cases.rs"]
mod cases;

const V: ClientView = ClientView::PAUSE_AWARE;

/// Default cases of the property, for `cargo test` in debug.
const DEFAULT_CASES: u32 = 256;

#[derive(Debug, Clone)]
enum Op {
    Step,
    Spawn(Node),
    Checkpoint,
    Input,
}

#[derive(Debug, Clone)]
struct Node {
    ops: Vec<Op>,
}

fn node_strategy() -> impl Strategy<Value = Node> {
    let leaf = prop::collection::vec(
        prop_oneof![4 => Just(Op::Step), 2 => Just(Op::Checkpoint), 1 => Just(Op::Input)],
        0..5,
    )
    .prop_map(|ops| Node { ops });
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop::collection::vec(
            prop_oneof![
                4 => Just(Op::Step),
                2 => Just(Op::Checkpoint),
                1 => Just(Op::Input),
                3 => inner.prop_map(Op::Spawn),
            ],
            0..6,
        )
        .prop_map(|ops| Node { ops })
    })
}

fn count_steps(n: &Node) -> u64 {
    n.ops
        .iter()
        .map(|op| match op {
            Op::Step => 1,
            Op::Spawn(c) => count_steps(c),
            _ => 0,
        })
        .sum()
}

/// A store over a [`MemoryStore`] that stops at once when told: a batch
/// submitted after the stop is dropped and never durable.
struct Stoppable {
    mem: Arc<MemoryStore>,
    stopped: AtomicBool,
    lost: AtomicU64,
}

const LOST: Ticket = Ticket(u64::MAX);

impl TaskStore for Stoppable {
    fn submit(&self, batch: WriteBatch) -> Ticket {
        if self.stopped.load(Ordering::SeqCst) {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return LOST;
        }
        self.mem.submit(batch)
    }
    fn is_durable(&self, ticket: Ticket) -> Result<bool, StoreError> {
        if ticket == LOST {
            return Ok(false);
        }
        self.mem.is_durable(ticket)
    }
    fn wait_durable(&self, ticket: Ticket) -> BoxFuture<'static, Result<(), StoreError>> {
        if ticket == LOST || self.stopped.load(Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        self.mem.wait_durable(ticket)
    }
    fn last_ticket(&self) -> Ticket {
        self.mem.last_ticket()
    }
    fn load(&self) -> Result<Vec<StoredTree>, StoreError> {
        self.mem.load()
    }
    fn get(&self, id: TaskId) -> Result<Option<StoredTask>, StoreError> {
        self.mem.get(id)
    }
    fn describe(&self) -> String {
        "a memory store that can stop".into()
    }
}

/// What the handlers of one case saw, across both runtimes.
#[derive(Default)]
struct Shared {
    /// Step runs (live) by key, and the keys whose step returned.
    step_runs: Mutex<HashMap<String, u32>>,
    step_returned: Mutex<HashSet<String>>,
    /// Handler runs by path, and path -> task.
    body_runs: Mutex<HashMap<String, u32>>,
    ids: Mutex<HashMap<String, TaskId>>,
    /// Stop after this many step runs (`u64::MAX`: never).
    stop_after: AtomicU64,
    runs_so_far: AtomicU64,
    stopped: AtomicBool,
    stop: tokio::sync::Notify,
    /// Set in the second runtime: what must not run again.
    forbidden_steps: Mutex<HashSet<String>>,
    forbidden_bodies: Mutex<HashSet<String>>,
    /// Steers each task's handler took before the stop, by path.
    taken: Mutex<HashMap<String, Vec<String>>>,
    violations: Mutex<Vec<String>>,
}

impl Shared {
    fn step_ran(&self, key: &str) {
        *self.step_runs.lock().entry(key.to_owned()).or_default() += 1;
        if self.forbidden_steps.lock().contains(key) {
            self.violations
                .lock()
                .push(format!("step {key} had returned before the stop and ran again"));
        }
        let n = self.runs_so_far.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.stop_after.load(Ordering::SeqCst) {
            self.stopped.store(true, Ordering::SeqCst);
            self.stop.notify_waiters();
            self.stop.notify_one();
        }
    }

    fn body_ran(&self, path: &str) {
        *self.body_runs.lock().entry(path.to_owned()).or_default() += 1;
        if self.forbidden_bodies.lock().contains(path) {
            self.violations.lock().push(format!(
                "task {path} had completed before the stop and its handler ran again"
            ));
        }
    }
}

fn obj(v: Value) -> JsonObject {
    JsonObject::from_value(v).unwrap()
}

/// A checkpoint, noting the steers it took before the stop.
async fn checkpoint(
    ctx: &TaskContext,
    sh: &Shared,
    path: &str,
) -> Result<Vec<String>, subtask::runtime::TaskError> {
    let got = ctx.checkpoint().await?;
    if !sh.stopped.load(Ordering::SeqCst) {
        sh.taken
            .lock()
            .entry(path.to_owned())
            .or_default()
            .extend(got.iter().cloned());
    }
    Ok(got)
}

fn node(ctx: TaskContext, script: Node, path: String, sh: Arc<Shared>) -> BoxFuture<'static, HandlerResult> {
    Box::pin(async move {
        sh.body_ran(&path);
        let (mut steps, mut kids, mut steers, mut inputs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, op) in script.ops.iter().enumerate() {
            match op {
                Op::Step => {
                    let key = format!("{path}/{i}");
                    let s = sh.clone();
                    let out: String = ctx
                        .step(&format!("s{i}"), || {
                            let key = key.clone();
                            async move {
                                s.step_ran(&key);
                                tokio::task::yield_now().await;
                                format!("out {key}")
                            }
                        })
                        .await?;
                    if !sh.stopped.load(Ordering::SeqCst) {
                        sh.step_returned.lock().insert(key);
                    }
                    steps.push(out);
                }
                Op::Spawn(child) => {
                    let cpath = format!("{path}.{i}");
                    let (c, p, s) = (child.clone(), cpath.clone(), sh.clone());
                    let opts = SubtaskOptions::default().named(cpath.clone());
                    let h = ctx.spawn_subtask(opts, move |ctx| node(ctx, c, p, s))?;
                    sh.ids.lock().insert(cpath.clone(), h.id());
                    kids.push(h);
                }
                Op::Checkpoint => {
                    steers.extend(checkpoint(&ctx, &sh, &path).await?);
                }
                Op::Input => {
                    let a = ctx.request_input(format!("k{i}"), obj(json!({"ask": i}))).await?;
                    inputs.push(a["v"].clone());
                }
            }
        }
        let mut children = Vec::new();
        for h in kids {
            children.push(match h.await {
                TaskOutcome::Completed(r) => r.to_value(),
                other => json!(format!("{other:?}")),
            });
        }
        steers.extend(checkpoint(&ctx, &sh, &path).await?);
        Ok(obj(json!({
            "path": path, "steps": steps, "children": children, "inputs": inputs, "steers": steers,
        })))
    })
}

fn root_body(script: Node, sh: Arc<Shared>) -> HandlerBody {
    Box::new(move |ctx| node(ctx, script, "r".into(), sh))
}

/// Every task of the tree, root first (pre-order by `childTaskIds`).
fn tasks_of(rt: &Runtime, root: TaskId) -> Vec<TaskId> {
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        out.push(id);
        if let Some(t) = rt.get(id, V) {
            stack.extend(t.task().child_task_ids.iter().rev());
        }
    }
    out
}

/// The client: answers every input request, steers and pauses at random,
/// resumes what it paused; until the root ends or the run is stopped.
async fn drive(rt: Runtime, root: TaskId, seed: u64, acked: Arc<Mutex<HashMap<TaskId, Vec<String>>>>) {
    let mut rng = seed;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut sent = 0u32;
    let mut ticks = 0u64;
    loop {
        ticks += 1;
        if ticks.is_multiple_of(2000) && std::env::var_os("DURABLE_DEBUG").is_some() {
            for id in tasks_of(&rt, root) {
                eprintln!("  {id}: {:?}", rt.get(id, V));
            }
        }
        if rt.get(root, V).is_none_or(|t| t.status().is_terminal()) {
            return;
        }
        let all = tasks_of(&rt, root);
        for &id in &all {
            let Some(t) = rt.get(id, V) else { continue };
            if let subtask::model::TaskPayload::InputRequired { input_requests } = t.payload() {
                let mut answers = InputResponses::new();
                for key in input_requests.keys() {
                    answers.insert(key.clone(), obj(json!({"v": format!("answer {key}")})));
                }
                let _ = rt.update(id, answers);
            }
        }
        // Resumes whatever is paused (a pause that was pending when it was
        // made takes effect later).
        for &id in &all {
            if rt.get(id, V).is_some_and(|t| t.status() == TaskStatus::Paused) {
                let _ = rt.resume(id, V);
            }
        }
        let pick = all[(next() % all.len() as u64) as usize];
        match next() % 8 {
            0 | 1 => {
                sent += 1;
                let message = format!("steer {sent}");
                // Recorded as sent before it is: the stop may come before
                // the acknowledgement, and the steer still arrive.
                acked.lock().entry(pick).or_default().push(message.clone());
                let _ = rt.steer(pick, message);
            }
            2 => {
                let _ = rt.pause(pick, V);
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
}

fn strip_steers(v: &mut Value) {
    if let Some(o) = v.as_object_mut() {
        o.remove("steers");
        for c in o
            .get_mut("children")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            strip_steers(c);
        }
    }
}

fn owner_of(name: &str) -> Arc<Owner> {
    Owner::new(name, usize::MAX)
}

/// Runs `script` to its end; with `stop_after`, stops after that many step
/// runs and finishes on a second runtime. Returns the root's result, the
/// tasks by path, and the runtime that finished (for the checks).
fn run(script: &Node, stop_after: Option<u64>, seed: u64) -> Result<(Value, Vec<String>), TestCaseError> {
    let mem = Arc::new(MemoryStore::new());
    let sh = Arc::new(Shared::default());
    sh.stop_after
        .store(stop_after.unwrap_or(u64::MAX), Ordering::SeqCst);
    let acked: Arc<Mutex<HashMap<TaskId, Vec<String>>>> = Arc::default();
    let config = RuntimeConfig::default();

    let debug = std::env::var_os("DURABLE_DEBUG").is_some();
    if debug {
        eprintln!(
            "case: stop after {stop_after:?} of {} steps: {script:?}",
            count_steps(script)
        );
    }
    // The first runtime, until the root ends or the stop.
    let first = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(Stoppable {
        mem: mem.clone(),
        stopped: AtomicBool::new(false),
        lost: AtomicU64::new(0),
    });
    let (root, finished) = first.block_on(async {
        let rt = Runtime::with_store(config, store.clone());
        let root = rt.spawn_resumable(
            RootOptions::default(),
            json!({}),
            root_body(script.clone(), sh.clone()),
        );
        let stopped = sh.stop.notified();
        tokio::pin!(stopped);
        stopped.as_mut().enable();
        let finished = if sh.stopped.load(Ordering::SeqCst) {
            false
        } else {
            tokio::select! {
                () = drive(rt.clone(), root, seed, acked.clone()) => true,
                () = &mut stopped => false,
            }
        };
        store.stopped.store(true, Ordering::SeqCst);
        (root, finished)
    });
    if debug {
        eprintln!("first runtime done: finished {finished}");
    }
    first.shutdown_timeout(Duration::from_secs(10));
    if debug {
        eprintln!("first runtime shut down");
    }

    let second = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = second.block_on(async {
        let rt = Runtime::with_store(config, mem.clone());
        // What must not run again: returned steps, completed tasks (as stored).
        *sh.forbidden_steps.lock() = sh.step_returned.lock().clone();
        let s = sh.clone();
        let report = rt
            .recover(owner_of, move |_| {
                let body = root_body(script.clone(), s.clone());
                async move { Some(body) }
            })
            .await
            .map_err(|e| TestCaseError::fail(format!("recover: {e}")))?;
        let ids = sh.ids.lock().clone();
        let mut forbidden = HashSet::new();
        for (path, id) in ids.iter().chain(std::iter::once((&"r".to_owned(), &root))) {
            if rt.get(*id, V).is_some_and(|t| t.status() == TaskStatus::Completed) {
                forbidden.insert(path.clone());
            }
        }
        *sh.forbidden_bodies.lock() = forbidden;
        if debug {
            eprintln!("recovered: {report}");
        }
        if !finished {
            drive(rt.clone(), root, seed ^ 0x9e37_79b9, acked.clone()).await;
        }
        if debug {
            eprintln!("second drive done");
        }
        let done = tokio::time::timeout(Duration::from_secs(20), rt.wait(root, V))
            .await
            .map_err(|_| TestCaseError::fail("the tree did not end after the restart"))?
            .ok_or_else(|| TestCaseError::fail("the root is gone"))?;
        let subtask::model::TaskPayload::Completed { result } = done.payload() else {
            return Err(TestCaseError::fail(format!("the root did not complete: {done:?}")));
        };
        // Each task once; each task's steers a prefix of those acked.
        let all = tasks_of(&rt, root);
        let unique: HashSet<TaskId> = all.iter().copied().collect();
        prop_assert_eq!(unique.len(), all.len(), "a task listed twice");
        let acked = acked.lock().clone();
        let ids = sh.ids.lock().clone();
        let mut stack = vec![result.to_value()];
        let mut paths = Vec::new();
        while let Some(r) = stack.pop() {
            let path = r["path"].as_str().unwrap_or_default().to_owned();
            let id = if path == "r" { Some(root) } else { ids.get(&path).copied() };
            let got: Vec<String> = r["steers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect();
            let sent = id.and_then(|i| acked.get(&i).cloned()).unwrap_or_default();
            let mut rest = sent.iter();
            prop_assert!(
                got.iter().all(|g| rest.any(|s| s == g)),
                "I10: task {} reports steers {:?}, not an in-order, at-most-once subsequence of those sent {:?}",
                path,
                got,
                sent
            );
            let before = sh.taken.lock().get(&path).cloned().unwrap_or_default();
            prop_assert!(
                got.starts_with(&before),
                "task {} took steers {:?} before the stop, but its re-run reports {:?}: not handed back at the \
                 same points",
                path,
                before,
                got
            );
            paths.push(path);
            stack.extend(r["children"].as_array().into_iter().flatten().cloned());
        }
        prop_assert_eq!(paths.len(), all.len(), "every task reports once");
        Ok((result.to_value(), paths))
    })?;
    second.shutdown_timeout(Duration::from_secs(10));
    let violations = sh.violations.lock().clone();
    prop_assert!(violations.is_empty(), "{}", violations.join("\n"));
    Ok(result)
}

proptest! {
    // `PROPTEST_CASES` sets the depth, as in every property target (a
    // literal `cases` here ignored it: a deep pass ran 256).
    #![proptest_config(ProptestConfig { cases: cases::cases(DEFAULT_CASES), ..ProptestConfig::default() })]

    #[test]
    fn a_stopped_tree_finishes_as_if_never_stopped_and_redoes_nothing_finished(
        script in node_strategy(),
        stop in 0u64..1000,
        seed in 1u64..u64::MAX,
    ) {
        let steps = count_steps(&script);
        let stop_after = (steps > 0).then(|| 1 + stop % steps);
        let (mut whole, _) = run(&script, None, seed)?;
        let (mut stopped, _) = run(&script, stop_after, seed)?;
        strip_steers(&mut whole);
        strip_steers(&mut stopped);
        prop_assert_eq!(whole, stopped, "the results differ from those of the run without a stop");
    }
}
