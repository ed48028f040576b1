//! The real `subtask serve` binary as a child process of a benchmark, and
//! requests to it over the tests' HTTP client (`tests/support/http.rs`).
//! Used by `takeover_ms` and by the finished-tree figures of
//! `benches/store.rs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{http, request_body};

/// A `subtask serve` child process, SIGKILLed and reaped when dropped
/// (also when the bench panics).
pub(crate) struct Serve {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    pub(crate) log: PathBuf,
    rt: tokio::runtime::Runtime,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    /// Starts `subtask serve --listen 127.0.0.1:0 <args>` with its log in
    /// `log`, and waits until it listens (30 s at most).
    pub(crate) fn start(args: &[&str], log: &Path) -> Serve {
        Serve::spawn(args, log).listening(Duration::from_secs(30))
    }

    /// Spawns `subtask serve --listen 127.0.0.1:0 <args>`, without waiting.
    pub(crate) fn spawn(args: &[&str], log: &Path) -> Serve {
        let out = std::fs::File::create(log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let err = out.try_clone().expect("clone the log file");
        let child = Command::new(env!("CARGO_BIN_EXE_subtask"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start the subtask binary");
        Serve {
            child,
            addr: "127.0.0.1:0".parse().expect("an address"),
            log: log.to_owned(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the HTTP client"),
        }
    }

    /// Waits until the server logs its address (`within` at most), polling
    /// its log every millisecond.
    pub(crate) fn listening(mut self, within: Duration) -> Serve {
        let deadline = Instant::now() + within;
        loop {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(addr) = text
                .split_once("listening on http://")
                .and_then(|(_, rest)| rest.split_once("/mcp"))
                .and_then(|(addr, _)| addr.parse().ok())
            {
                self.addr = addr;
                return self;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("subtask serve exited ({status}) before listening:\n{text}");
            }
            assert!(
                Instant::now() < deadline,
                "subtask serve did not listen within {within:?}:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The server's resident set size, in bytes (`VmRSS`).
    pub(crate) fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    }

    /// One request over a fresh connection (on a runtime of this
    /// instance's); the `result`, or why not.
    pub(crate) fn call(&self, method: &str, name: &str, params: Value) -> Result<Value, String> {
        let body = request_body(1, method, params);
        let answer = self.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(15),
                http::fetch(self.addr, "POST", "/mcp", &headers(method, name), &body),
            )
            .await
        });
        let r = answer.map_err(|_| "no answer within 15 s".to_owned())??;
        result_of(&r.body, &r.headers)
    }

    /// `subtask_tasks_retained` summed over tools (`/metrics`): finished
    /// tasks the server holds in memory.
    pub(crate) fn retained(&self) -> Result<i64, String> {
        let r = self.rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(15),
                http::fetch(self.addr, "GET", "/metrics", &[], b""),
            )
            .await
        });
        let r = r.map_err(|_| "no answer within 15 s".to_owned())??;
        Ok(r.body
            .lines()
            .filter(|l| l.starts_with("subtask_tasks_retained{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as i64)
            .sum())
    }

    /// Polls `tasks/get` of `task` until `pred` holds (`within` at most).
    pub(crate) fn until_within(
        &self,
        task: &str,
        what: &str,
        within: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let got = self.call("tasks/get", task, json!({"taskId": task}));
            if let Ok(t) = &got
                && pred(t)
            {
                return t.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{what}: task {task} is {got:?} after {within:?} (log {})",
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// [`Serve::until_within`] 20 s.
    pub(crate) fn until(&self, task: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.until_within(task, what, Duration::from_secs(20), pred)
    }
}

/// The headers of a request of the 2026-07-28 wire.
pub(crate) fn headers(method: &str, name: &str) -> [(&'static str, String); 5] {
    [
        ("Content-Type", "application/json".to_owned()),
        ("Accept", "application/json, text/event-stream".to_owned()),
        ("MCP-Protocol-Version", "2026-07-28".to_owned()),
        ("Mcp-Method", method.to_owned()),
        ("Mcp-Name", name.to_owned()),
    ]
}

/// An answer's `result`, or the whole answer as the error.
pub(crate) fn result_of(body: &str, head: &impl std::fmt::Debug) -> Result<Value, String> {
    let mut v: Value = serde_json::from_str(body).map_err(|e| format!("{e}: {head:?}\r\n\r\n{body}"))?;
    match v.get_mut("result") {
        Some(r) => Ok(r.take()),
        None => Err(body.to_owned()),
    }
}
