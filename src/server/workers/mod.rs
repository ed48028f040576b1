//! Workers: tool handlers run by other processes, in any language, over
//! the worker protocol (`docs/workers.md`).
//!
//! A worker tool is a tool of the server like any other: its calls are
//! checked against its schema and become tasks under every rule of the
//! runtime. Its handler is a *proxy* ([`proxy`]) that waits for an
//! assignment to a worker and performs, on the task's [`TaskContext`],
//! each act the worker reports (spawn, step, checkpoint, input, ...). The
//! [`Hub`] keeps the registered tools, the connected workers with their
//! leases and free slots, and the tasks waiting for a worker, taken
//! round-robin across trees.
//!
//! The hub's state sits behind one mutex, held only for map lookups and
//! updates, never across an `.await`.
//!
//! [`TaskContext`]: crate::runtime::TaskContext

mod proxy;
mod socket;
mod wire;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::extract::ws::{Message, Utf8Bytes};
use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::mpsc;

pub(crate) use socket::route;

use super::tool::{RegisteredTool, Tool, ToolCall, ToolOutcome};
use super::{ServerInner, TaskSupport, TokenTable, ToolSpec};
use crate::model::{JsonObject, TaskId};
use wire::{FromWorker, ToolDecl, WireError};

/// What `subtask serve` needs to accept workers: their credentials (a set
/// of their own, separate from client principals) and their lease.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Worker tokens (`TOKEN NAME` lines, as [`TokenTable::parse`] reads them).
    pub tokens: TokenTable,
    /// How long a worker may stay silent before its tasks are assigned
    /// again; it is asked to send a frame every fifth of it.
    pub lease: Duration,
}

impl WorkerConfig {
    /// Workers authenticated by `tokens`, with the default lease (10 s).
    pub fn new(tokens: TokenTable) -> Self {
        WorkerConfig {
            tokens,
            lease: Duration::from_secs(10),
        }
    }
}

/// What the hub counts (`/metrics`).
#[derive(Debug, Default)]
pub(crate) struct WorkerStats {
    pub(crate) assignments: AtomicU64,
    pub(crate) lease_losses: AtomicU64,
    pub(crate) refused_reports: AtomicU64,
}

/// The connected workers, the tools they registered and the tasks waiting
/// for them.
pub(crate) struct Hub {
    pub(crate) config: WorkerConfig,
    state: Mutex<HubState>,
    next_worker: AtomicU64,
    /// Numbers the proxies' slots ([`Slot::owner`]).
    next_owner: AtomicU64,
    pub(crate) stats: WorkerStats,
    /// The server (weak: the server's runtime holds the proxies that hold
    /// the hub); a cluster instance's next incarnation attaches itself.
    server: parking_lot::RwLock<Weak<ServerInner>>,
}

#[derive(Default)]
struct HubState {
    /// Every tool a worker registered in this process, in order.
    tools: Vec<RegisteredTool>,
    workers: HashMap<u64, WorkerEntry>,
    /// Tasks whose proxy runs: waiting for a worker or assigned to one.
    tasks: HashMap<TaskId, Slot>,
    /// Per tool, the tasks waiting for a worker.
    queues: HashMap<Arc<str>, FairQueue>,
}

struct WorkerEntry {
    name: Arc<str>,
    tools: Vec<Arc<str>>,
    capacity: usize,
    running: HashSet<TaskId>,
    /// Of `running`, the tasks whose handler waits (see [`Slot::parked`]).
    parked: usize,
    /// Past its lease: gets nothing until it sends a frame again.
    expired: bool,
    out: mpsc::UnboundedSender<Message>,
}

impl WorkerEntry {
    fn free(&self) -> usize {
        if self.expired {
            0
        } else {
            self.capacity.saturating_sub(self.running.len() - self.parked)
        }
    }
}

/// A task whose proxy runs.
struct Slot {
    tool: Arc<str>,
    root: TaskId,
    parent: Option<TaskId>,
    arguments: JsonObject,
    /// The current attempt (0 before the first assignment).
    attempt: u32,
    /// Whether the handler ran before (an earlier attempt, or a run before
    /// a restart): the assignment says `replay`.
    replay: bool,
    /// The worker running it; `None` while it waits in its tool's queue.
    worker: Option<u64>,
    /// Its handler waits (a subtask's outcome, input, a pause): it does not
    /// count against its worker's capacity.
    parked: bool,
    /// The outcomes of its `after` dependencies, for the assignment.
    dependencies: serde_json::Value,
    /// Which proxy holds the slot: a proxy of an earlier incarnation of a
    /// cluster instance that ends later leaves a new one's slot alone.
    owner: u64,
    to_proxy: mpsc::UnboundedSender<ToProxy>,
}

/// What the hub tells a proxy.
pub(crate) enum ToProxy {
    /// Assigned to a worker as `attempt`; replies go to `out`.
    Assigned {
        attempt: u32,
        worker: Arc<str>,
        out: mpsc::UnboundedSender<Message>,
    },
    /// The attempt ended without a result (the worker left or lost its
    /// lease); the task waits for another worker.
    Lost { why: String },
    /// A frame of the current attempt.
    Frame(FromWorker),
}

/// Waiting tasks of one tool, round-robin across trees.
#[derive(Default)]
struct FairQueue {
    trees: VecDeque<TaskId>,
    by_tree: HashMap<TaskId, VecDeque<TaskId>>,
}

impl FairQueue {
    fn push(&mut self, root: TaskId, task: TaskId) {
        let q = self.by_tree.entry(root).or_default();
        if q.is_empty() {
            self.trees.push_back(root);
        }
        q.push_back(task);
    }

    fn pop(&mut self) -> Option<TaskId> {
        let root = self.trees.pop_front()?;
        let q = self.by_tree.get_mut(&root)?;
        let task = q.pop_front();
        if q.is_empty() {
            self.by_tree.remove(&root);
        } else {
            self.trees.push_back(root);
        }
        task
    }

    fn is_empty(&self) -> bool {
        self.trees.is_empty()
    }
}

/// The handler of a stored worker-tool task brought back after a restart:
/// a proxy that waits for a worker serving its tool.
pub(crate) fn resumed(hub: Arc<Hub>, call: ToolCall) -> crate::runtime::HandlerBody {
    proxy::body(hub, call.name, call.arguments)
}

/// The tool a worker registered, as the server calls it: a task whose
/// handler is a proxy.
struct WorkerTool {
    hub: Weak<Hub>,
}

impl Tool for WorkerTool {
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        let hub = self.hub.clone();
        Box::pin(async move {
            match hub.upgrade() {
                Some(hub) => ToolOutcome::Task {
                    body: proxy::body(hub, call.name, call.arguments),
                    ttl_ms: None,
                },
                None => ToolOutcome::Error(crate::model::ErrorObject::new(
                    crate::model::ErrorCode::INTERNAL_ERROR,
                    "the server is shutting down",
                )),
            }
        })
    }
}

impl Hub {
    pub(crate) fn new(config: WorkerConfig) -> Arc<Hub> {
        Arc::new(Hub {
            config,
            state: Mutex::default(),
            next_worker: AtomicU64::new(1),
            next_owner: AtomicU64::new(1),
            stats: WorkerStats::default(),
            server: parking_lot::RwLock::new(Weak::new()),
        })
    }

    /// Called once the server exists, and by each of a cluster instance's
    /// next incarnations (which share this hub).
    pub(crate) fn attach(&self, server: &Arc<ServerInner>) {
        *self.server.write() = Arc::downgrade(server);
    }

    /// The server as it answers now.
    pub(crate) fn server(&self) -> Option<super::Server> {
        self.server.read().upgrade().map(|inner| super::Server { inner })
    }

    /// A worker tool by name.
    pub(crate) fn tool(&self, name: &str) -> Option<RegisteredTool> {
        self.state
            .lock()
            .tools
            .iter()
            .find(|t| t.spec.name == name)
            .cloned()
    }

    /// Every tool workers registered, in order.
    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        self.state.lock().tools.iter().map(|t| t.spec.clone()).collect()
    }

    /// Workers connected now, the tasks they run and the tasks waiting for
    /// one (walks the workers, never the tasks).
    #[cfg(feature = "metrics")]
    pub(crate) fn load(&self) -> (usize, usize, usize) {
        let st = self.state.lock();
        let running: usize = st.workers.values().map(|w| w.running.len()).sum();
        (st.workers.len(), running, st.tasks.len().saturating_sub(running))
    }

    /// Registers a worker after its `hello`: its tools are checked and
    /// added; returns its id.
    fn connect(
        self: &Arc<Self>,
        name: Arc<str>,
        capacity: usize,
        decls: Vec<ToolDecl>,
        out: mpsc::UnboundedSender<Message>,
    ) -> Result<u64, WireError> {
        let server = self
            .server()
            .ok_or_else(|| WireError::new("bad_hello", "the server is shutting down"))?;
        let mut specs = Vec::with_capacity(decls.len());
        for d in decls {
            specs.push(spec_of(&server, d)?);
        }
        let mut st = self.state.lock();
        for spec in &specs {
            if let Some(known) = st.tools.iter().find(|t| t.spec.name == spec.name) {
                let same = known.spec.input_schema == spec.input_schema
                    && known.spec.description == spec.description
                    && known.spec.task_support == spec.task_support
                    && known.spec.resumable == spec.resumable;
                let served = st
                    .workers
                    .values()
                    .any(|w| w.tools.iter().any(|t| **t == *spec.name));
                if !same && served {
                    return Err(WireError::new(
                        "bad_hello",
                        format!(
                            "tool {:?} is served by a connected worker with another description, schema, task support or resumability",
                            spec.name
                        ),
                    ));
                }
            }
        }
        let mut tools = Vec::with_capacity(specs.len());
        for spec in specs {
            let label: Arc<str> = Arc::from(spec.name.as_str());
            tools.push(label.clone());
            let registered = RegisteredTool {
                label,
                spec,
                tool: Arc::new(WorkerTool {
                    hub: Arc::downgrade(self),
                }),
            };
            match st.tools.iter_mut().find(|t| t.spec.name == registered.spec.name) {
                Some(known) => *known = registered,
                None => {
                    let _ = server.runtime().stats().tool(Some(&registered.label));
                    st.tools.push(registered);
                }
            }
        }
        let id = self.next_worker.fetch_add(1, Ordering::Relaxed);
        let lease = u64::try_from(self.config.lease.as_millis()).unwrap_or(u64::MAX);
        let welcome = serde_json::json!({
            "type": "welcome",
            "protocol": wire::PROTOCOL,
            "worker": format!("w-{id}"),
            "leaseMs": lease,
            "heartbeatMs": (lease / 5).max(1),
        });
        out.send(text(welcome.to_string()))
            .map_err(|_| WireError::new("bad_hello", "the connection closed"))?;
        tracing::info!(worker = id, name = %name, tools = ?tools, capacity, "worker connected");
        st.workers.insert(
            id,
            WorkerEntry {
                name,
                tools,
                capacity,
                running: HashSet::new(),
                parked: 0,
                expired: false,
                out,
            },
        );
        self.dispatch_worker(&mut st, id);
        Ok(id)
    }

    /// A proxy starts: the task waits for a worker serving its tool.
    /// Returns the status message to show while it waits (`None` when a
    /// worker took it at once).
    fn enqueue(&self, task: TaskId, mut slot: Slot) -> (u64, Option<String>) {
        slot.owner = self.next_owner.fetch_add(1, Ordering::Relaxed);
        let owner = slot.owner;
        let mut st = self.state.lock();
        let (tool, root) = (slot.tool.clone(), slot.root);
        // A slot of the same task from a proxy that no longer runs (an
        // earlier incarnation of a cluster instance): its worker's count
        // lets go of it.
        if let Some(old) = st.tasks.insert(task, slot)
            && let Some(w) = old.worker.and_then(|w| st.workers.get_mut(&w))
        {
            w.running.remove(&task);
            if old.parked {
                w.parked -= 1;
            }
        }
        st.queues.entry(tool.clone()).or_default().push(root, task);
        self.dispatch_tool(&mut st, &tool);
        (owner, waiting_message(&st, &tool, task))
    }

    /// The proxy of `task` ended (a result, a failure, a cancel, or its
    /// future dropped): its worker's slot is free; a cancel is sent on.
    fn finish(&self, task: TaskId, owner: u64, cancel: bool) {
        let mut st = self.state.lock();
        if st.tasks.get(&task).is_none_or(|s| s.owner != owner) {
            return;
        }
        let Some(slot) = st.tasks.remove(&task) else {
            return;
        };
        if let Some(w) = slot.worker
            && let Some(worker) = st.workers.get_mut(&w)
        {
            worker.running.remove(&task);
            if slot.parked {
                worker.parked -= 1;
            }
            if cancel {
                let frame = serde_json::json!({"type": "cancel", "task": task, "attempt": slot.attempt});
                let _ = worker.out.send(text(frame.to_string()));
            }
            self.dispatch_worker(&mut st, w);
        }
    }

    /// The handler of `task` waits (`parked`) or runs on: a waiting
    /// handler does not count against its worker's capacity, so a parent
    /// awaiting its subtasks leaves room for them on the same worker. A
    /// handler that runs on is counted again at once, over the capacity
    /// for a moment if its worker filled the room meanwhile (as a Rust
    /// handler back from a parked wait takes a scheduler slot at once).
    fn park(&self, task: TaskId, attempt: u32, parked: bool) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let Some(slot) = st.tasks.get_mut(&task) else {
            return;
        };
        let Some(w) = slot.worker else {
            return;
        };
        if slot.attempt != attempt || slot.parked == parked {
            return;
        }
        slot.parked = parked;
        let Some(worker) = st.workers.get_mut(&w) else {
            return;
        };
        if parked {
            worker.parked += 1;
            self.dispatch_worker(st, w);
        } else {
            worker.parked -= 1;
        }
    }

    /// A frame from worker `worker`: routed to the proxy of its task if it
    /// is the task's current attempt on this worker, else refused.
    fn route(&self, worker: u64, frame: FromWorker) -> Result<(), WireError> {
        let Some((task, attempt)) = frame.task() else {
            return Ok(());
        };
        let st = self.state.lock();
        let slot = st.tasks.get(&task).ok_or_else(|| {
            self.stats.refused_reports.fetch_add(1, Ordering::Relaxed);
            WireError::new(
                "stale_attempt",
                format!("task {task} is not running here any more (it ended or was never assigned)"),
            )
        })?;
        if slot.worker != Some(worker) || slot.attempt != attempt {
            self.stats.refused_reports.fetch_add(1, Ordering::Relaxed);
            return Err(WireError::new(
                "stale_attempt",
                format!(
                    "attempt {attempt} of task {task} is not current (attempt {} is{})",
                    slot.attempt,
                    if slot.worker.is_some() {
                        ""
                    } else {
                        " waiting for a worker"
                    }
                ),
            ));
        }
        let _ = slot.to_proxy.send(ToProxy::Frame(frame));
        Ok(())
    }

    /// Worker `worker`, past its lease, sent a frame: it is live again
    /// (its connection's loop calls this only then, so a frame of a live
    /// worker takes no lock for it).
    fn revive(&self, worker: u64) {
        let mut st = self.state.lock();
        if let Some(w) = st.workers.get_mut(&worker)
            && w.expired
        {
            w.expired = false;
            tracing::info!(
                worker,
                "worker back after its lease ended: it gets new tasks again"
            );
            self.dispatch_worker(&mut st, worker);
        }
    }

    /// Worker `worker` went silent past its lease (`gone` false) or left:
    /// its tasks wait for another attempt.
    fn lose(&self, worker: u64, gone: bool) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let Some(w) = st.workers.get_mut(&worker) else {
            return;
        };
        let tasks: Vec<TaskId> = w.running.drain().collect();
        w.parked = 0;
        let name = w.name.clone();
        if gone {
            st.workers.remove(&worker);
            tracing::info!(worker, name = %name, tasks = tasks.len(), "worker disconnected");
        } else {
            w.expired = true;
            self.stats.lease_losses.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(worker, name = %name, tasks = tasks.len(), "worker lost its lease: its tasks are assigned again");
        }
        let why = if gone {
            format!("worker {name:?} disconnected")
        } else {
            format!("worker {name:?} lost its lease")
        };
        let mut tools = Vec::new();
        for task in tasks {
            let Some(slot) = st.tasks.get_mut(&task) else {
                continue;
            };
            if !gone && let Some(w) = st.workers.get(&worker) {
                let frame = serde_json::json!({"type": "revoke", "task": task, "attempt": slot.attempt});
                let _ = w.out.send(text(frame.to_string()));
            }
            slot.worker = None;
            slot.replay = true;
            slot.parked = false;
            let _ = slot.to_proxy.send(ToProxy::Lost { why: why.clone() });
            let (tool, root) = (slot.tool.clone(), slot.root);
            st.queues.entry(tool.clone()).or_default().push(root, task);
            if !tools.contains(&tool) {
                tools.push(tool);
            }
        }
        for tool in tools {
            self.dispatch_tool(st, &tool);
        }
    }

    /// Assigns waiting tasks of `tool` to workers with free slots.
    fn dispatch_tool(&self, st: &mut HubState, tool: &Arc<str>) {
        loop {
            let Some(worker) = st
                .workers
                .iter()
                .filter(|(_, w)| w.free() > 0 && w.tools.iter().any(|t| t == tool))
                .max_by_key(|(_, w)| w.free())
                .map(|(id, _)| *id)
            else {
                return;
            };
            if !self.assign_next(st, tool, worker) {
                return;
            }
        }
    }

    /// Fills worker `worker`'s free slots, its tools taken in turn.
    fn dispatch_worker(&self, st: &mut HubState, worker: u64) {
        let Some(tools) = st.workers.get(&worker).map(|w| w.tools.clone()) else {
            return;
        };
        let mut active: Vec<Arc<str>> = tools;
        while !active.is_empty() {
            if st.workers.get(&worker).is_none_or(|w| w.free() == 0) {
                return;
            }
            active.retain(|tool| self.assign_next(st, tool, worker));
        }
    }

    /// Assigns the next waiting task of `tool` to `worker` (which has a
    /// free slot); `false` when none waits.
    fn assign_next(&self, st: &mut HubState, tool: &Arc<str>, worker: u64) -> bool {
        loop {
            let Some(task) = st.queues.get_mut(tool).and_then(FairQueue::pop) else {
                if st.queues.get(tool).is_some_and(FairQueue::is_empty) {
                    st.queues.remove(tool);
                }
                return false;
            };
            let Some(slot) = st.tasks.get_mut(&task) else {
                continue;
            };
            // Assigned already (a stale entry): nothing to do.
            if slot.worker.is_some() {
                continue;
            }
            let Some(w) = st.workers.get_mut(&worker) else {
                return false;
            };
            slot.attempt += 1;
            slot.worker = Some(worker);
            w.running.insert(task);
            self.stats.assignments.fetch_add(1, Ordering::Relaxed);
            let frame = serde_json::json!({
                "type": "assign",
                "task": task,
                "attempt": slot.attempt,
                "tool": &*slot.tool,
                "arguments": slot.arguments,
                "root": slot.root,
                "parent": slot.parent,
                "replay": slot.replay,
                "dependencies": slot.dependencies,
            });
            // The proxy hears of the attempt before any of its frames.
            let _ = slot.to_proxy.send(ToProxy::Assigned {
                attempt: slot.attempt,
                worker: w.name.clone(),
                out: w.out.clone(),
            });
            slot.replay = true;
            let _ = w.out.send(text(frame.to_string()));
            return true;
        }
    }
}

/// The status message of a task that waits for a worker (`None` when it
/// was assigned at once).
fn waiting_message(st: &HubState, tool: &str, task: TaskId) -> Option<String> {
    let slot = st.tasks.get(&task)?;
    if slot.worker.is_some() {
        return None;
    }
    let serving: Vec<&WorkerEntry> = st
        .workers
        .values()
        .filter(|w| w.tools.iter().any(|t| **t == *tool))
        .collect();
    Some(if serving.is_empty() {
        format!("waiting for a worker serving {tool:?} (none connected)")
    } else {
        let slots: usize = serving.iter().map(|w| w.capacity).sum();
        format!("waiting for a worker serving {tool:?} (all {slots} slots busy)")
    })
}

/// The spec of a tool a worker registers, checked.
fn spec_of(server: &super::Server, d: ToolDecl) -> Result<ToolSpec, WireError> {
    let bad = |m: String| WireError::new("bad_hello", m);
    let name_ok = !d.name.is_empty()
        && d.name.len() <= 128
        && d.name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
    if !name_ok {
        return Err(bad(format!(
            "tool name {:?} does not match ^[A-Za-z0-9_.-]{{1,128}}$",
            d.name
        )));
    }
    if server.inner.tools.iter().any(|t| t.spec.name == d.name) || server.is_agent_tool(&d.name) {
        return Err(bad(format!("tool {:?} is a tool of the server itself", d.name)));
    }
    let support = match d.task_support.as_deref() {
        None | Some("optional") => TaskSupport::Optional,
        Some("required") => TaskSupport::Required,
        Some(other) => {
            return Err(bad(format!(
                "tool {:?}: taskSupport {other:?}: a worker tool runs as a task (\"optional\" or \"required\")",
                d.name
            )));
        }
    };
    let description = d.description.unwrap_or_else(|| d.name.clone());
    let mut spec = ToolSpec::try_new(&d.name, &description, d.input_schema, support)
        .map_err(|e| bad(format!("tool {:?}: inputSchema: {e}", d.name)))?;
    if d.resumable.unwrap_or(true) {
        spec = spec.resumable();
    }
    Ok(spec)
}

fn text(s: String) -> Message {
    Message::Text(Utf8Bytes::from(s))
}
