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
//! In a cluster, a task whose tool no worker of its holder serves goes to
//! an instance whose workers do ([`Hub::deliver`], [`Hub::set_remote`];
//! the news between the two passes through PostgreSQL,
//! `crate::server::cluster`'s `workers.rs`).
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
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

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
    /// Woken when the tools this instance's workers serve change (the
    /// cluster relay publishes them).
    pub(crate) changed: Notify,
    /// The cluster relay: news for other instances (`None` outside a
    /// cluster).
    relay: parking_lot::RwLock<Option<Relay>>,
}

/// Where news for other instances goes (`crate::server::cluster`).
struct Relay {
    /// This instance.
    me: uuid::Uuid,
    /// (receiving instance, body) pairs, sent in order.
    tx: mpsc::UnboundedSender<(uuid::Uuid, String)>,
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
    /// Per tool, the other live instances whose workers serve it.
    remote: HashMap<Arc<str>, Vec<uuid::Uuid>>,
    /// The live instances at the last look.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    live: HashSet<uuid::Uuid>,
    /// Tasks held here, sent to another instance's workers, by instance.
    exports: HashMap<uuid::Uuid, HashSet<TaskId>>,
    /// Tasks another instance holds, run by workers here, by holder.
    imports: HashMap<uuid::Uuid, HashSet<TaskId>>,
    /// Turns among the instances serving a tool.
    turn: usize,
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
    /// Where its proxy is.
    to_proxy: Link,
    /// The instance whose workers run it, when it was sent to another one.
    remote: Option<uuid::Uuid>,
}

/// Where a slot's proxy is.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
enum Link {
    /// In this process.
    Local(mpsc::UnboundedSender<ToProxy>),
    /// On the instance that holds the task (it was sent here to run).
    Remote(uuid::Uuid),
}

/// Where a proxy's replies to its worker go.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
#[derive(Clone)]
pub(crate) enum Outbox {
    /// The worker's connection to this instance.
    Local(mpsc::UnboundedSender<Message>),
    /// The instance whose worker runs attempt `attempt` of `task`.
    Remote {
        hub: Weak<Hub>,
        to: uuid::Uuid,
        task: TaskId,
        attempt: u32,
    },
}

impl Outbox {
    /// Sends `frame` (JSON) to the worker.
    pub(crate) fn send(&self, frame: String) {
        match self {
            Outbox::Local(out) => {
                let _ = out.send(text(frame));
            }
            Outbox::Remote {
                hub,
                to,
                task,
                attempt,
            } => {
                if let Some(hub) = hub.upgrade() {
                    hub.post(
                        *to,
                        json!({"k": "send", "task": task, "attempt": attempt, "text": frame}),
                    );
                }
            }
        }
    }
}

/// News between instances about a task (`docs/workers.md`, "Workers in a
/// cluster"): to the instance whose workers run it (`export`, `send`,
/// `park`, `finish`), or to the one that holds it (`assigned`, `lost`,
/// `frame`, `returned`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
#[derive(Deserialize)]
#[serde(tag = "k", rename_all = "lowercase")]
enum Mail {
    Export {
        task: TaskId,
        tool: String,
        root: TaskId,
        parent: Option<TaskId>,
        arguments: JsonObject,
        attempt: u32,
        replay: bool,
        dependencies: Value,
    },
    Send {
        task: TaskId,
        attempt: u32,
        text: String,
    },
    Park {
        task: TaskId,
        attempt: u32,
        parked: bool,
    },
    Finish {
        task: TaskId,
        cancel: bool,
    },
    Assigned {
        task: TaskId,
        attempt: u32,
        worker: String,
    },
    Lost {
        task: TaskId,
        why: String,
    },
    Frame {
        task: TaskId,
        text: String,
    },
    Returned {
        task: TaskId,
        why: String,
    },
}

#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
#[derive(Deserialize)]
struct Envelope {
    from: String,
    #[serde(flatten)]
    mail: Mail,
}

/// What the hub tells a proxy.
pub(crate) enum ToProxy {
    /// Assigned to a worker as `attempt`; replies go to `out`.
    Assigned {
        attempt: u32,
        worker: Arc<str>,
        out: Outbox,
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

    /// Every waiting task, in the order they would be taken.
    fn drain(mut self) -> Vec<TaskId> {
        std::iter::from_fn(|| self.pop()).collect()
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
            changed: Notify::new(),
            relay: parking_lot::RwLock::new(None),
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
            tools.push(self.register(&mut st, &server, spec));
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
        self.changed.notify_one();
        Ok(id)
    }

    /// Registers (or replaces) worker tool `spec` as a tool of the server:
    /// from a worker's `hello`, or another instance's workers. Returns its
    /// label.
    fn register(self: &Arc<Self>, st: &mut HubState, server: &super::Server, spec: ToolSpec) -> Arc<str> {
        let label: Arc<str> = Arc::from(spec.name.as_str());
        let registered = RegisteredTool {
            label: label.clone(),
            spec,
            tool: Arc::new(WorkerTool {
                hub: Arc::downgrade(self),
            }),
        };
        match st.tools.iter_mut().find(|t| t.spec.name == registered.spec.name) {
            Some(known) => *known = registered,
            None => {
                let _ = server.runtime().stats().tool(Some(&label));
                st.tools.push(registered);
            }
        }
        label
    }

    /// A proxy starts: the task waits for a worker serving its tool.
    /// Returns the status message to show while it waits (`None` when a
    /// worker took it at once).
    fn enqueue(&self, task: TaskId, mut slot: Slot) -> (u64, Option<String>) {
        slot.owner = self.next_owner.fetch_add(1, Ordering::Relaxed);
        let owner = slot.owner;
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let tool = slot.tool.clone();
        // A slot of the same task from a proxy that no longer runs (an
        // earlier incarnation of a cluster instance) is let go of.
        self.insert(st, task, slot);
        self.place(st, task);
        (owner, waiting_message(st, &tool, task))
    }

    /// Puts `slot` in place of `task`'s slot, if any: the old one's worker
    /// lets go of it (told so by a `revoke`), and the attempts go on from
    /// the old one's, so that its worker's late reports are refused.
    fn insert(&self, st: &mut HubState, task: TaskId, mut slot: Slot) {
        let Some(old) = st.tasks.remove(&task) else {
            st.tasks.insert(task, slot);
            return;
        };
        slot.attempt = slot.attempt.max(old.attempt);
        if let Some(w) = old.worker.and_then(|w| st.workers.get_mut(&w)) {
            w.running.remove(&task);
            if old.parked {
                w.parked -= 1;
            }
            let frame = json!({"type": "revoke", "task": task, "attempt": old.attempt});
            let _ = w.out.send(text(frame.to_string()));
        }
        if let Some(to) = old.remote {
            forget(&mut st.exports, to, task);
        }
        if let Link::Remote(holder) = old.to_proxy {
            forget(&mut st.imports, holder, task);
        }
        st.tasks.insert(task, slot);
    }

    /// Puts waiting task `task` where a worker will take it: its tool's
    /// queue here when a worker here serves the tool (or when no instance's
    /// worker does: it waits here), else another instance whose workers
    /// serve it (a task held here only; one sent here stays).
    fn place(&self, st: &mut HubState, task: TaskId) {
        let Some(slot) = st.tasks.get(&task) else {
            return;
        };
        let (tool, root) = (slot.tool.clone(), slot.root);
        if matches!(slot.to_proxy, Link::Local(_))
            && !serves(st, &tool)
            && let Some(to) = self.pick(st, &tool)
        {
            let slot = st.tasks.get_mut(&task).expect("looked up above");
            slot.remote = Some(to);
            let mail = json!({
                "k": "export",
                "task": task,
                "tool": &*tool,
                "root": root,
                "parent": slot.parent,
                "arguments": slot.arguments,
                "attempt": slot.attempt,
                "replay": slot.replay,
                "dependencies": slot.dependencies,
            });
            st.exports.entry(to).or_default().insert(task);
            self.post(to, mail);
            return;
        }
        st.queues.entry(tool.clone()).or_default().push(root, task);
        self.dispatch_tool(st, &tool);
    }

    /// Another instance whose workers serve `tool`, in turn (`None` outside
    /// a cluster, or when none does).
    fn pick(&self, st: &mut HubState, tool: &str) -> Option<uuid::Uuid> {
        self.relay.read().as_ref()?;
        let n = st.remote.get(tool).map_or(0, Vec::len);
        if n == 0 {
            return None;
        }
        st.turn = st.turn.wrapping_add(1);
        st.remote.get(tool).map(|l| l[st.turn % n])
    }

    /// Sends `mail` to instance `to` through the cluster relay (dropped
    /// outside a cluster).
    fn post(&self, to: uuid::Uuid, mut mail: Value) {
        if let Some(relay) = self.relay.read().as_ref() {
            mail["from"] = json!(relay.me.to_string());
            let _ = relay.tx.send((to, mail.to_string()));
        }
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
        if let Some(to) = slot.remote {
            forget(&mut st.exports, to, task);
            self.post(to, json!({"k": "finish", "task": task, "cancel": cancel}));
            return;
        }
        self.release(&mut st, task, slot, cancel);
    }

    /// `task`'s slot, taken out, lets go of its worker (told of a cancel
    /// when `cancel`), whose free slot goes to the next waiting task.
    fn release(&self, st: &mut HubState, task: TaskId, slot: Slot, cancel: bool) {
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
            self.dispatch_worker(st, w);
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
        if let Some(to) = slot.remote {
            if slot.attempt == attempt {
                self.post(
                    to,
                    json!({"k": "park", "task": task, "attempt": attempt, "parked": parked}),
                );
            }
            return;
        }
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
    fn route(&self, worker: u64, frame: FromWorker, raw: &str) -> Result<(), WireError> {
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
        match &slot.to_proxy {
            Link::Local(tx) => {
                let _ = tx.send(ToProxy::Frame(frame));
            }
            Link::Remote(holder) => self.post(*holder, json!({"k": "frame", "task": task, "text": raw})),
        }
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
            self.changed.notify_one();
        }
    }

    /// Worker `worker` went silent past its lease (`gone` false) or left:
    /// its tasks wait for another attempt. A task another instance sent
    /// here goes back to it when no worker here serves its tool any more.
    fn lose(&self, worker: u64, gone: bool) {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let Some(w) = st.workers.get_mut(&worker) else {
            return;
        };
        let tasks: Vec<TaskId> = w.running.drain().collect();
        w.parked = 0;
        let name = w.name.clone();
        let its_tools = w.tools.clone();
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
        let unserved: Vec<Arc<str>> = its_tools.into_iter().filter(|t| !serves(st, t)).collect();
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
            let (tool, root) = (slot.tool.clone(), slot.root);
            match &slot.to_proxy {
                Link::Local(tx) => {
                    let _ = tx.send(ToProxy::Lost { why: why.clone() });
                }
                Link::Remote(holder) => {
                    let holder = *holder;
                    if unserved.contains(&tool) {
                        self.give_back(st, task, &why);
                        continue;
                    }
                    self.post(holder, json!({"k": "lost", "task": task, "why": &why}));
                }
            }
            st.queues.entry(tool.clone()).or_default().push(root, task);
            if !tools.contains(&tool) {
                tools.push(tool);
            }
        }
        for tool in &unserved {
            self.give_back_queued(st, tool, &why);
        }
        for tool in tools {
            self.dispatch_tool(st, &tool);
        }
        self.changed.notify_one();
    }

    /// Task `task`, sent here by the instance that holds it, goes back to
    /// it (`why`): no worker here serves its tool any more.
    fn give_back(&self, st: &mut HubState, task: TaskId, why: &str) {
        let Some(Link::Remote(holder)) = st.tasks.get(&task).map(|s| &s.to_proxy) else {
            return;
        };
        let holder = *holder;
        if let Some(slot) = st.tasks.remove(&task) {
            self.release(st, task, slot, false);
        }
        forget(&mut st.imports, holder, task);
        self.post(holder, json!({"k": "returned", "task": task, "why": why}));
    }

    /// [`Hub::give_back`] for every task of `tool` waiting here that
    /// another instance sent.
    fn give_back_queued(&self, st: &mut HubState, tool: &Arc<str>, why: &str) {
        let Some(queue) = st.queues.remove(tool) else {
            return;
        };
        for task in queue.drain() {
            match st.tasks.get(&task) {
                Some(slot) if matches!(slot.to_proxy, Link::Remote(_)) => self.give_back(st, task, why),
                Some(slot) => {
                    let root = slot.root;
                    st.queues.entry(tool.clone()).or_default().push(root, task);
                }
                None => {}
            }
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
            match &slot.to_proxy {
                Link::Local(tx) => {
                    let _ = tx.send(ToProxy::Assigned {
                        attempt: slot.attempt,
                        worker: w.name.clone(),
                        out: Outbox::Local(w.out.clone()),
                    });
                }
                Link::Remote(holder) => self.post(
                    *holder,
                    json!({"k": "assigned", "task": task, "attempt": slot.attempt, "worker": &*w.name}),
                ),
            }
            slot.replay = true;
            let _ = w.out.send(text(frame.to_string()));
            return true;
        }
    }
}

/// Workers in a cluster (`docs/workers.md`, "Workers in a cluster").
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl Hub {
    /// Makes `tx` the way to the other instances of the cluster this
    /// instance (`me`) joined (each incarnation sets its own; the previous
    /// relay's loop ends).
    pub(crate) fn set_relay(&self, me: uuid::Uuid, tx: mpsc::UnboundedSender<(uuid::Uuid, String)>) {
        *self.relay.write() = Some(Relay { me, tx });
        self.changed.notify_one();
    }

    /// The tools this instance's live workers serve now: names and
    /// declarations (JSON, as a worker's `hello` declares a tool).
    pub(crate) fn served(&self) -> (Vec<String>, Vec<String>) {
        let st = self.state.lock();
        st.tools
            .iter()
            .filter(|t| serves(&st, &t.label))
            .map(|t| (t.spec.name.clone(), decl_of(&t.spec).to_string()))
            .unzip()
    }

    /// What the other live instances' workers serve (instance, tool,
    /// declaration), and which instances live: tools unknown here are
    /// registered; tasks sent to an instance that serves their tool no
    /// more come back and are placed again; tasks sent here by an instance
    /// that is gone are dropped (its trees' next holder sends them again);
    /// tasks waiting here for a tool only other instances serve are sent
    /// to them.
    pub(crate) fn set_remote(
        self: &Arc<Self>,
        rows: Vec<(uuid::Uuid, String, String)>,
        live: &HashSet<uuid::Uuid>,
    ) {
        let server = self.server();
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mut remote: HashMap<Arc<str>, Vec<uuid::Uuid>> = HashMap::new();
        for (instance, name, decl) in rows {
            let label = match st.tools.iter().find(|t| t.spec.name == name) {
                Some(t) => t.label.clone(),
                None => {
                    let Some(server) = &server else { continue };
                    let spec = serde_json::from_str::<ToolDecl>(&decl)
                        .map_err(|e| WireError::new("bad_hello", e.to_string()))
                        .and_then(|d| spec_of(server, d));
                    let spec = match spec {
                        Ok(spec) => spec,
                        Err(e) => {
                            tracing::warn!(tool = %name, %instance, error = %e.message, "another instance's worker tool is not valid here");
                            continue;
                        }
                    };
                    self.register(st, server, spec)
                }
            };
            remote.entry(label).or_default().push(instance);
        }
        if remote == st.remote && *live == st.live {
            return;
        }
        st.remote = remote;
        st.live = live.clone();
        let mut back = Vec::new();
        for (to, tasks) in &st.exports {
            for task in tasks {
                let still = st
                    .tasks
                    .get(task)
                    .is_some_and(|s| st.remote.get(&s.tool).is_some_and(|l| l.contains(to)));
                if !still {
                    back.push((*to, *task));
                }
            }
        }
        for (to, task) in back {
            self.came_back(
                st,
                to,
                task,
                &format!("cluster instance {to} has no worker serving its tool any more"),
            );
        }
        let gone: Vec<uuid::Uuid> = st.imports.keys().filter(|h| !live.contains(h)).copied().collect();
        for holder in gone {
            for task in st.imports.remove(&holder).unwrap_or_default() {
                if let Some(slot) = st.tasks.remove(&task) {
                    self.release(st, task, slot, true);
                }
            }
        }
        let elsewhere: Vec<Arc<str>> = st
            .queues
            .keys()
            .filter(|t| st.remote.contains_key(*t) && !serves(st, t))
            .cloned()
            .collect();
        for tool in elsewhere {
            for task in st.queues.remove(&tool).map(FairQueue::drain).unwrap_or_default() {
                self.place(st, task);
            }
        }
    }

    /// Task `task`, sent to instance `to`, comes back (`why`): its proxy
    /// hears that an attempt running there ended, and it is placed again
    /// (`to` counts as not serving its tool until the next look).
    fn came_back(&self, st: &mut HubState, to: uuid::Uuid, task: TaskId, why: &str) {
        forget(&mut st.exports, to, task);
        let Some(slot) = st.tasks.get_mut(&task) else {
            return;
        };
        if slot.remote != Some(to) {
            return;
        }
        slot.remote = None;
        slot.replay |= slot.attempt > 0;
        if slot.attempt > 0
            && let Link::Local(tx) = &slot.to_proxy
        {
            let _ = tx.send(ToProxy::Lost { why: why.to_owned() });
        }
        let tool = slot.tool.clone();
        if let Some(l) = st.remote.get_mut(&tool) {
            l.retain(|i| *i != to);
        }
        self.place(st, task);
    }

    /// News from another instance (`body`, JSON), in the order it was sent.
    pub(crate) fn deliver(self: &Arc<Self>, body: &str) {
        let Envelope { from, mail } = match serde_json::from_str::<Envelope>(body) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "unreadable worker news from another instance");
                return;
            }
        };
        let Ok(from) = from.parse::<uuid::Uuid>() else {
            return;
        };
        let mut guard = self.state.lock();
        let st = &mut *guard;
        match mail {
            Mail::Export {
                task,
                tool,
                root,
                parent,
                arguments,
                attempt,
                replay,
                dependencies,
            } => {
                let label = st
                    .tools
                    .iter()
                    .find(|t| t.spec.name == tool)
                    .map(|t| t.label.clone());
                let Some(label) = label.filter(|l| serves(st, l)) else {
                    let why =
                        format!("no worker serving {tool:?} is connected to the instance it was sent to");
                    self.post(from, json!({"k": "returned", "task": task, "why": why}));
                    return;
                };
                let slot = Slot {
                    tool: label,
                    root,
                    parent,
                    arguments,
                    attempt,
                    replay: replay || attempt > 0,
                    worker: None,
                    parked: false,
                    dependencies,
                    owner: self.next_owner.fetch_add(1, Ordering::Relaxed),
                    to_proxy: Link::Remote(from),
                    remote: None,
                };
                self.insert(st, task, slot);
                st.imports.entry(from).or_default().insert(task);
                self.place(st, task);
            }
            Mail::Send {
                task,
                attempt,
                text: frame,
            } => {
                if let Some(slot) = st.tasks.get(&task)
                    && matches!(slot.to_proxy, Link::Remote(h) if h == from)
                    && slot.attempt == attempt
                    && let Some(w) = slot.worker.and_then(|w| st.workers.get(&w))
                {
                    let _ = w.out.send(text(frame));
                }
            }
            Mail::Park {
                task,
                attempt,
                parked,
            } => {
                if st
                    .tasks
                    .get(&task)
                    .is_some_and(|s| matches!(s.to_proxy, Link::Remote(h) if h == from))
                {
                    drop(guard);
                    self.park(task, attempt, parked);
                }
            }
            Mail::Finish { task, cancel } => {
                if st
                    .tasks
                    .get(&task)
                    .is_some_and(|s| matches!(s.to_proxy, Link::Remote(h) if h == from))
                    && let Some(slot) = st.tasks.remove(&task)
                {
                    forget(&mut st.imports, from, task);
                    self.release(st, task, slot, cancel);
                }
            }
            Mail::Assigned {
                task,
                attempt,
                worker,
            } => {
                if let Some(slot) = st.tasks.get_mut(&task)
                    && slot.remote == Some(from)
                    && let Link::Local(tx) = &slot.to_proxy
                {
                    slot.attempt = attempt;
                    let _ = tx.send(ToProxy::Assigned {
                        attempt,
                        worker: Arc::from(format!("{worker} (on instance {from})")),
                        out: Outbox::Remote {
                            hub: Arc::downgrade(self),
                            to: from,
                            task,
                            attempt,
                        },
                    });
                }
            }
            Mail::Lost { task, why } => {
                if let Some(slot) = st.tasks.get(&task)
                    && slot.remote == Some(from)
                    && let Link::Local(tx) = &slot.to_proxy
                {
                    let _ = tx.send(ToProxy::Lost { why });
                }
            }
            Mail::Frame { task, text: frame } => {
                let Some(slot) = st.tasks.get(&task) else { return };
                let Link::Local(tx) = &slot.to_proxy else { return };
                if slot.remote != Some(from) {
                    return;
                }
                match serde_json::from_str::<FromWorker>(&frame) {
                    Ok(f) if f.task() == Some((task, slot.attempt)) => {
                        let _ = tx.send(ToProxy::Frame(f));
                    }
                    Ok(_) => {
                        self.stats.refused_reports.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => tracing::warn!(error = %e, "an unreadable frame passed on by another instance"),
                }
            }
            Mail::Returned { task, why } => self.came_back(st, from, task, &why),
        }
    }
}

/// Whether a live worker here serves `tool`.
fn serves(st: &HubState, tool: &str) -> bool {
    st.workers
        .values()
        .any(|w| !w.expired && w.tools.iter().any(|t| **t == *tool))
}

/// Takes `task` out of `by`'s set for `instance`.
fn forget(by: &mut HashMap<uuid::Uuid, HashSet<TaskId>>, instance: uuid::Uuid, task: TaskId) {
    if let Some(set) = by.get_mut(&instance) {
        set.remove(&task);
        if set.is_empty() {
            by.remove(&instance);
        }
    }
}

/// A tool as a worker's `hello` declares it (another instance registers it
/// from this).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn decl_of(spec: &ToolSpec) -> Value {
    json!({
        "name": spec.name,
        "description": spec.description,
        "inputSchema": spec.input_schema,
        "taskSupport": match spec.task_support {
            TaskSupport::Required => "required",
            _ => "optional",
        },
        "resumable": spec.resumable,
    })
}

/// The status message of a task that waits for a worker (`None` when it
/// was assigned at once).
fn waiting_message(st: &HubState, tool: &str, task: TaskId) -> Option<String> {
    let slot = st.tasks.get(&task)?;
    if slot.worker.is_some() {
        return None;
    }
    if let Some(to) = slot.remote {
        return Some(format!(
            "waiting for a worker serving {tool:?} (sent to cluster instance {to}, whose workers serve it)"
        ));
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
