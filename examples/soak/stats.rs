//! What the soak counts: requests by kind, expected errors by kind,
//! unexpected errors and wrong answers (each one fails the soak), trees by
//! scenario and outcome, tasks checked.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use subtask::client::ClientError;

/// Problems printed as they happen (all are counted).
const PRINTED_PROBLEMS: usize = 40;

/// Why a step of the soak failed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProblemKind {
    /// The server answered with an error that is not on the expected list,
    /// or a request failed (connection, timeout, HTTP status).
    UnexpectedError,
    /// An answer disagrees with the model.
    WrongAnswer,
    /// Something did not happen in time (a tree that does not end, a pause
    /// that does not take effect, a subscription that does not end).
    Stuck,
}

impl ProblemKind {
    fn as_str(self) -> &'static str {
        match self {
            ProblemKind::UnexpectedError => "unexpected error",
            ProblemKind::WrongAnswer => "wrong answer",
            ProblemKind::Stuck => "stuck",
        }
    }
}

/// One thing that fails the soak.
#[derive(Debug, Clone)]
pub struct Problem {
    /// What kind.
    pub kind: ProblemKind,
    /// What happened, with the task ids involved.
    pub msg: String,
}

impl Problem {
    /// A wrong answer.
    pub fn wrong(msg: impl Into<String>) -> Self {
        Problem {
            kind: ProblemKind::WrongAnswer,
            msg: msg.into(),
        }
    }

    /// Something that did not happen in time.
    pub fn stuck(msg: impl Into<String>) -> Self {
        Problem {
            kind: ProblemKind::Stuck,
            msg: msg.into(),
        }
    }

    /// An error that is not on the expected list.
    pub fn unexpected(what: &str, e: &ClientError) -> Self {
        Problem {
            kind: ProblemKind::UnexpectedError,
            msg: format!("{what}: {e}"),
        }
    }
}

/// The class of a client error, for counting: `-32602`, `connection`, ...
pub fn error_class(e: &ClientError) -> String {
    match e {
        ClientError::Rpc(o) => format!("rpc {}", o.code.0),
        ClientError::Connection(_) => "connection".to_owned(),
        ClientError::Timeout(_) => "timeout".to_owned(),
        ClientError::Http { status, .. } => format!("http {status}"),
        ClientError::Protocol(_) => "protocol".to_owned(),
        ClientError::Untrusted(_) => "untrusted".to_owned(),
        ClientError::TaskFailed { .. } => "task failed".to_owned(),
        ClientError::TaskCancelled { .. } => "task cancelled".to_owned(),
        ClientError::InputRequired(_) => "input required".to_owned(),
        ClientError::Config(_) => "config".to_owned(),
        _ => "other".to_owned(),
    }
}

/// The soak's counters; shared by every loop.
pub struct Stats {
    started: Instant,
    requests: Mutex<BTreeMap<&'static str, u64>>,
    expected: Mutex<BTreeMap<&'static str, u64>>,
    unexpected: Mutex<BTreeMap<String, u64>>,
    problems: Mutex<BTreeMap<ProblemKind, u64>>,
    printed: Mutex<Vec<String>>,
    log: Mutex<Option<std::fs::File>>,
    trees: Mutex<BTreeMap<String, u64>>,
    /// Tasks compared with the model when their tree ended.
    pub tasks_checked_live: AtomicU64,
    /// Trees compared with the model when they ended.
    pub trees_checked_live: AtomicU64,
    /// Tasks compared again at the end of the run.
    pub tasks_checked_final: AtomicU64,
    /// Trees compared again at the end of the run.
    pub trees_checked_final: AtomicU64,
    /// Trees past their deletion time found gone (at the end, or by a poller).
    pub trees_verified_deleted: AtomicU64,
    /// `subscriptions/listen` streams opened by the soak itself.
    pub listens_opened: AtomicU64,
    /// ... that ended with their response, as they must.
    pub listens_ended: AtomicU64,
    /// `notifications/tasks` received on them.
    pub notifications: AtomicU64,
    /// Trees followed with the client library (`task_results`, which polls
    /// and subscribes on its own; its requests are not counted above).
    pub library_follows: AtomicU64,
}

impl Stats {
    /// Empty counters.
    pub fn new() -> Self {
        Stats {
            started: Instant::now(),
            requests: Mutex::default(),
            expected: Mutex::default(),
            unexpected: Mutex::default(),
            problems: Mutex::default(),
            printed: Mutex::default(),
            log: Mutex::default(),
            trees: Mutex::default(),
            tasks_checked_live: AtomicU64::new(0),
            trees_checked_live: AtomicU64::new(0),
            tasks_checked_final: AtomicU64::new(0),
            trees_checked_final: AtomicU64::new(0),
            trees_verified_deleted: AtomicU64::new(0),
            listens_opened: AtomicU64::new(0),
            listens_ended: AtomicU64::new(0),
            notifications: AtomicU64::new(0),
            library_follows: AtomicU64::new(0),
        }
    }

    /// Writes every problem to `file` too (`problems.log`).
    pub fn log_to(&self, file: std::fs::File) {
        *self.log.lock() = Some(file);
    }

    /// One request of `kind` (a method name) was sent.
    pub fn request(&self, kind: &'static str) {
        *self.requests.lock().entry(kind).or_default() += 1;
    }

    /// An error on the expected list happened.
    pub fn expected(&self, kind: &'static str) {
        *self.expected.lock().entry(kind).or_default() += 1;
    }

    /// A tree of `scenario` ended with `status`.
    pub fn tree(&self, scenario: &str, status: &str) {
        *self
            .trees
            .lock()
            .entry(format!("{scenario} {status}"))
            .or_default() += 1;
    }

    /// Counts an unexpected client error of `method` by class, and records it.
    pub fn unexpected(&self, method: &str, e: &ClientError, what: &str) {
        *self
            .unexpected
            .lock()
            .entry(format!("{method}: {}", error_class(e)))
            .or_default() += 1;
        self.problem(&Problem::unexpected(what, e));
    }

    /// Records a problem (it fails the soak) and prints the first ones.
    pub fn problem(&self, p: &Problem) {
        *self.problems.lock().entry(p.kind).or_default() += 1;
        let line = format!(
            "[{:>7.1}s] {}: {}",
            self.started.elapsed().as_secs_f64(),
            p.kind.as_str(),
            p.msg
        );
        if let Some(f) = self.log.lock().as_mut() {
            let _ = writeln!(f, "{line}");
        }
        let mut printed = self.printed.lock();
        if printed.len() < PRINTED_PROBLEMS {
            eprintln!("soak: {line}");
            printed.push(line);
        }
    }

    /// Problems so far.
    pub fn problem_count(&self) -> u64 {
        self.problems.lock().values().sum()
    }

    /// Requests sent so far.
    pub fn request_count(&self) -> u64 {
        self.requests.lock().values().sum()
    }

    /// Expected errors so far.
    pub fn expected_count(&self) -> u64 {
        self.expected.lock().values().sum()
    }

    /// The summary's lines about requests, errors and trees.
    pub fn report(&self, load_secs: f64) -> Vec<String> {
        let fmt = |m: &BTreeMap<String, u64>| -> String {
            if m.is_empty() {
                return "none".to_owned();
            }
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let owned = |m: &BTreeMap<&'static str, u64>| -> BTreeMap<String, u64> {
            m.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        let requests = self.requests.lock().clone();
        let total: u64 = requests.values().sum();
        let problems = self.problems.lock().clone();
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let mut out = vec![
            format!(
                "requests: {} (total {total}, {:.0}/s over the load)",
                fmt(&owned(&requests)),
                total as f64 / load_secs.max(1.0)
            ),
            format!(
                "library follows: {} trees followed with Client::task_results (its own tasks/get, \
                 tasks/update and subscriptions are not in the counts above)",
                load(&self.library_follows)
            ),
            format!(
                "subscriptions (raw subscriptions/listen): opened={}, ended with their response={}, \
                 notifications={}",
                load(&self.listens_opened),
                load(&self.listens_ended),
                load(&self.notifications)
            ),
            format!("expected errors: {}", fmt(&owned(&self.expected.lock()))),
            format!("unexpected errors: {}", fmt(&self.unexpected.lock())),
            format!(
                "problems: {}",
                if problems.is_empty() {
                    "none".to_owned()
                } else {
                    problems
                        .iter()
                        .map(|(k, v)| format!("{}={v}", k.as_str()))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            format!("trees: {}", fmt(&self.trees.lock())),
            format!(
                "tasks checked: {} tasks in {} trees when each tree ended; {} tasks in {} trees again \
                 at the end (byte-identical and the model); {} trees verified deleted after their TTL",
                load(&self.tasks_checked_live),
                load(&self.trees_checked_live),
                load(&self.tasks_checked_final),
                load(&self.trees_checked_final),
                load(&self.trees_verified_deleted)
            ),
        ];
        let printed = self.printed.lock();
        if !printed.is_empty() {
            out.push(format!("first problems ({} shown):", printed.len()));
            out.extend(printed.iter().map(|l| format!("  {l}")));
        }
        out
    }
}
