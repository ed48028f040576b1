//! The three `subtask serve` instances of the scale-out test on one
//! PostgreSQL database: each slot holds one process at a time (a killed or
//! zombie process is replaced by a new one, with the same `--instance-id`
//! or a fresh one), and every process there ever was is kept for the log
//! checks at the end. A process records when the test sent it SIGKILL,
//! SIGSTOP and SIGCONT, before sending them, so that whoever sees a
//! connection fail afterwards can tell a fault of the test's from a
//! process that went away on its own.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::logs::{LogTail, now_us};
use crate::support::http::{Client, full_caps};
use crate::support::process::ServerProcess;
use crate::support::seed::Rng;

/// Hang guard for an instance to start (recovery and takeover included).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What every instance logs: the handler events at debug, the rest at info.
pub const RUST_LOG: &str = "info,subtask::handler=debug,subtask::journal=debug";

/// One process of one slot.
pub struct Proc {
    /// `i<slot>.<n>`: the slot and the how-many-th process in it.
    pub name: String,
    pub slot: usize,
    pub instance_id: String,
    pub server: ServerProcess,
    pub client: Client,
    pub log: Mutex<LogTail>,
    pub killed_at: Mutex<Option<i64>>,
    /// The last SIGSTOP and its SIGCONT.
    pub stopped_at: Mutex<Option<i64>>,
    pub continued_at: Mutex<Option<i64>>,
    /// Every SIGSTOP and its SIGCONT (a zombie that rejoined may be
    /// stopped again).
    pub stops: Mutex<Vec<(i64, Option<i64>)>>,
    stopped: AtomicBool,
    /// Stopped past its lease, it fenced itself and rejoined the cluster
    /// after SIGCONT: it serves again.
    rejoined: AtomicBool,
    /// Its exit was reported (or handled) already.
    pub exit_seen: AtomicBool,
}

fn signal(pid: u32, sig: &str) -> Result<(), String> {
    let out = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .output()
        .map_err(|e| format!("kill -{sig} {pid}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "kill -{sig} {pid}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Proc {
    /// Not killed, not stopped (unless it rejoined the cluster after the
    /// SIGCONT), not exited: requests go to it.
    pub fn usable(&self) -> bool {
        !self.server.is_killed() && !self.stopped_now() && self.server.exited().is_none()
    }

    /// The test killed or stopped it (and it has not rejoined since): a
    /// failed connection to it is expected.
    pub fn faulted(&self) -> bool {
        self.server.is_killed() || self.stopped_now()
    }

    fn stopped_now(&self) -> bool {
        self.stopped.load(Ordering::SeqCst) && !self.rejoined.load(Ordering::SeqCst)
    }

    /// It was stopped past its lease (and continued) at some point.
    pub fn was_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// After its stop, it fenced itself and rejoined: it serves again.
    pub fn set_rejoined(&self) {
        self.rejoined.store(true, Ordering::SeqCst);
    }

    /// SIGKILL, once (the time is recorded first). Returns whether this call sent it.
    pub fn kill(&self) -> bool {
        if self.server.is_killed() {
            return false;
        }
        let mut k = self.killed_at.lock().unwrap();
        if k.is_none() {
            *k = Some(now_us());
        }
        drop(k);
        self.server.kill()
    }

    /// SIGSTOP (the time is recorded first).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.rejoined.store(false, Ordering::SeqCst);
        let at = now_us();
        *self.stopped_at.lock().unwrap() = Some(at);
        *self.continued_at.lock().unwrap() = None;
        self.stops.lock().unwrap().push((at, None));
        if let Err(e) = signal(self.server.pid(), "STOP") {
            panic!("{}: {e}", self.name);
        }
    }

    /// SIGCONT (the time is recorded first).
    pub fn cont(&self) {
        let at = now_us();
        *self.continued_at.lock().unwrap() = Some(at);
        if let Some(last) = self.stops.lock().unwrap().last_mut() {
            last.1 = Some(at);
        }
        if let Err(e) = signal(self.server.pid(), "CONT") {
            panic!("{}: {e}", self.name);
        }
    }

    pub fn refresh_log(&self) {
        self.log.lock().unwrap().refresh();
    }
}

/// The instances.
pub struct Cluster {
    pub bin: PathBuf,
    pub dir: PathBuf,
    pub db: String,
    /// `--lease`, in seconds.
    pub lease: f64,
    pub slots: Mutex<Vec<Option<Arc<Proc>>>>,
    /// Every process there was, in start order.
    pub all: Mutex<Vec<Arc<Proc>>>,
    generations: Mutex<Vec<u32>>,
}

/// A random version-4 UUID from the test's generator (so a seed replays the ids).
pub fn instance_id(rng: &mut Rng) -> String {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    bytes[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
}

impl Cluster {
    pub fn new(bin: PathBuf, dir: PathBuf, db: String, lease: f64, slots: usize) -> Cluster {
        Cluster {
            bin,
            dir,
            db,
            lease,
            slots: Mutex::new(vec![None; slots]),
            all: Mutex::new(Vec::new()),
            generations: Mutex::new(vec![0; slots]),
        }
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs_f64(self.lease)
    }

    /// Starts a process in `slot` with `instance_id` and waits until it
    /// answers; it replaces the slot's process.
    ///
    /// # Panics
    ///
    /// When it does not come up (with its log).
    pub async fn start(&self, slot: usize, instance_id: &str) -> Arc<Proc> {
        self.try_start(slot, instance_id)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Cluster::start`], or why the process did not come up (with its log).
    pub async fn try_start(&self, slot: usize, instance_id: &str) -> Result<Arc<Proc>, String> {
        let n = {
            let mut g = self.generations.lock().unwrap();
            g[slot] += 1;
            g[slot]
        };
        let name = format!("i{slot}.{n}");
        let log = self.dir.join(format!("{name}.log"));
        let args: Vec<String> = vec![
            "--db".into(),
            self.db.clone(),
            "--instance-id".into(),
            instance_id.into(),
            "--lease".into(),
            format!("{}", self.lease),
        ];
        let server =
            ServerProcess::start_env(&self.bin, &args, &log, READY_TIMEOUT, &[("RUST_LOG", RUST_LOG)])
                .await
                .map_err(|e| {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    format!("instance {name} ({instance_id}) did not come up: {e}\n{text}")
                })?;
        let proc = Arc::new(Proc {
            client: Client::new(server.addr(), full_caps()),
            server,
            log: Mutex::new(LogTail::new(&log)),
            name,
            slot,
            instance_id: instance_id.to_owned(),
            killed_at: Mutex::new(None),
            stopped_at: Mutex::new(None),
            continued_at: Mutex::new(None),
            stops: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            rejoined: AtomicBool::new(false),
            exit_seen: AtomicBool::new(false),
        });
        self.slots.lock().unwrap()[slot] = Some(proc.clone());
        self.all.lock().unwrap().push(proc.clone());
        Ok(proc)
    }

    /// The slot's current process.
    pub fn current(&self, slot: usize) -> Option<Arc<Proc>> {
        self.slots.lock().unwrap()[slot].clone()
    }

    /// The processes requests may go to.
    pub fn usable(&self) -> Vec<Arc<Proc>> {
        self.slots
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .filter(|p| p.usable())
            .cloned()
            .collect()
    }

    pub fn all(&self) -> Vec<Arc<Proc>> {
        self.all.lock().unwrap().clone()
    }

    /// The process named `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<Proc>> {
        self.all.lock().unwrap().iter().find(|p| p.name == name).cloned()
    }
}
