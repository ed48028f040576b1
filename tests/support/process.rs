//! The real `subtask serve` binary as a child process on a database file,
//! and a client for the 2026-07-28 wire that survives the server dying in
//! the middle of a request (for the crash test).
//!
//! A response counts only when it arrived whole: the status line, the
//! headers and every byte of the body its `Content-Length` (or chunked
//! framing) announced (hyper reads it: `super::http`). Anything less is an
//! error, never a guess.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::{Client, Connection, build_request, fetch};

/// A port that was free a moment ago on 127.0.0.1 (bind to port 0, read
/// the port, close the listener). Another process may take it before the
/// server binds it: [`ServerProcess::start`] retries on another port then.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local address").port()
}

/// A private copy of the `subtask` binary in `dir`, so that a concurrent
/// `cargo build` replacing `target/debug/subtask` cannot change the server
/// between two restarts of one test.
///
/// # Panics
///
/// If the copy fails.
pub fn private_binary(dir: &Path) -> PathBuf {
    let to = dir.join("subtask");
    std::fs::copy(env!("CARGO_BIN_EXE_subtask"), &to)
        .unwrap_or_else(|e| panic!("copy the subtask binary to {}: {e}", to.display()));
    to
}

/// A running `subtask serve` process.
pub struct ServerProcess {
    child: Mutex<Child>,
    addr: SocketAddr,
    killed: AtomicBool,
    log: PathBuf,
}

impl ServerProcess {
    /// Spawns `<bin> serve --listen 127.0.0.1:<free port> <args>` with
    /// stdout and stderr appended to `log`. Does not wait for it to listen.
    ///
    /// # Panics
    ///
    /// If the binary cannot be started or the log cannot be opened.
    pub fn spawn(bin: &Path, args: &[String], log: &Path) -> ServerProcess {
        ServerProcess::spawn_env(bin, args, log, &[])
    }

    /// [`ServerProcess::spawn`] with more environment variables (`RUST_LOG`
    /// among them overrides the default `info`).
    ///
    /// # Panics
    ///
    /// If the binary cannot be started or the log cannot be opened.
    pub fn spawn_env(bin: &Path, args: &[String], log: &Path, env: &[(&str, &str)]) -> ServerProcess {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
        // A private binary just copied by this test can be "busy": a
        // process forked by a concurrent test may still hold the copy's
        // write descriptor until it execs (close-on-exec). Linux then
        // refuses to exec the copy (ETXTBSY) for that moment; try again.
        let mut tries = 0;
        let child = loop {
            let spawned = Command::new(bin)
                .arg("serve")
                .arg("--listen")
                .arg(addr.to_string())
                .args(args)
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1")
                .envs(env.iter().copied())
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("clone the log file handle"))
                .stderr(out.try_clone().expect("clone the log file handle"))
                .spawn();
            match spawned {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                r => break r.expect("start the subtask binary"),
            }
        };
        ServerProcess {
            child: Mutex::new(child),
            addr,
            killed: AtomicBool::new(false),
            log: log.to_owned(),
        }
    }

    /// Spawns the server and waits until it answers `server/discover`
    /// (`timeout` is a hang guard). When the process exits before that
    /// because its port was taken meanwhile, tries another port (5 times).
    ///
    /// # Errors
    ///
    /// The server exited for another reason, or did not answer in time.
    pub async fn start(
        bin: &Path,
        args: &[String],
        log: &Path,
        timeout: Duration,
    ) -> Result<ServerProcess, String> {
        ServerProcess::start_env(bin, args, log, timeout, &[]).await
    }

    /// [`ServerProcess::start`] with more environment variables.
    ///
    /// # Errors
    ///
    /// The server exited for another reason, or did not answer in time.
    pub async fn start_env(
        bin: &Path,
        args: &[String],
        log: &Path,
        timeout: Duration,
        env: &[(&str, &str)],
    ) -> Result<ServerProcess, String> {
        let mut last = String::new();
        for _ in 0..5 {
            let server = ServerProcess::spawn_env(bin, args, log, env);
            match server.wait_ready(timeout).await {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let log_text = std::fs::read_to_string(log).unwrap_or_default();
                    let port_taken = log_text.contains(&format!("cannot listen on {}", server.addr));
                    if !port_taken {
                        return Err(e);
                    }
                    last = e;
                }
            }
        }
        Err(format!("no free port after 5 attempts: {last}"))
    }

    /// Waits until the server answers `server/discover` with a result.
    ///
    /// # Errors
    ///
    /// The process exited, or `timeout` passed.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let client = Client::new(self.addr, json!({}));
        loop {
            if let Some(status) = self.exited() {
                return Err(format!("the server exited before it was ready: {status}"));
            }
            // With --tokens an anonymous request is refused: that too is an answer.
            if let Ok(Rpc::Ok(_) | Rpc::Err(401, _)) =
                rpc(&client, "server/discover", json!({}), Duration::from_secs(5)).await
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the server did not answer within {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The process id (for signals other than SIGKILL).
    pub fn pid(&self) -> u32 {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .id()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The log file (stdout and stderr).
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Sends SIGKILL (`Child::kill` on Unix), once. Returns whether this
    /// call sent it. [`ServerProcess::is_killed`] turns true before the
    /// signal is sent, so whoever sees a connection fail afterwards can
    /// tell a kill from a server that went away on its own.
    pub fn kill(&self) -> bool {
        if self.killed.swap(true, Ordering::SeqCst) {
            return false;
        }
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = child.kill();
        true
    }

    /// Whether [`ServerProcess::kill`] was called.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// Reaps the process (blocking until it is gone).
    pub fn wait(&self) -> Option<ExitStatus> {
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        child.wait().ok()
    }

    /// `Some` once the process has exited.
    pub fn exited(&self) -> Option<ExitStatus> {
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        child.try_wait().ok().flatten()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
        self.wait();
    }
}

/// A JSON-RPC answer that arrived whole.
#[derive(Debug, Clone)]
pub enum Rpc {
    /// `result`.
    Ok(Value),
    /// HTTP status and `error`.
    Err(u16, Value),
}

/// Sends one request built by `client` (headers and `_meta` of the
/// 2026-07-28 wire) on a fresh connection and reads one whole response.
///
/// # Errors
///
/// No whole response (connection refused, reset or closed early), or
/// `timeout` (a hang guard) passed.
pub async fn rpc(client: &Client, method: &str, params: Value, timeout: Duration) -> Result<Rpc, String> {
    let (headers, body) = client.envelope(method, params);
    let resp = tokio::time::timeout(timeout, fetch(client.addr, "POST", "/mcp", &headers, &body))
        .await
        .map_err(|_| format!("{method}: no response within {timeout:?}"))?
        .map_err(|e| format!("{method}: {e}"))?;
    // hyper reads a framed body whole or fails; an answer framed by the
    // connection's end only could have been cut short unseen.
    if resp.header("content-length").is_none() && resp.header("transfer-encoding").is_none() {
        return Err(format!(
            "{method}: a response without Content-Length or chunked framing cannot be checked for \
             completeness: {:?}",
            resp.headers
        ));
    }
    let (status, body) = (resp.status, resp.body);
    let v: Value =
        serde_json::from_str(&body).map_err(|e| format!("{method}: response is not JSON ({e}): {body}"))?;
    if let Some(e) = v.get("error") {
        return Ok(Rpc::Err(status, e.clone()));
    }
    match v.get("result") {
        Some(r) => Ok(Rpc::Ok(r.clone())),
        None => Err(format!("{method}: neither result nor error: {body}")),
    }
}

/// Opens `subscriptions/listen` for `task_ids` and calls `on_message` with
/// every SSE `data:` message as it arrives, until the stream ends or the
/// connection fails. A message cut short by a dying server is dropped.
///
/// # Errors
///
/// The connection could not be opened.
pub async fn listen(
    client: &Client,
    task_ids: &[String],
    mut on_message: impl FnMut(Value),
) -> Result<(), String> {
    let (headers, body) = client.envelope(
        "subscriptions/listen",
        json!({"notifications": {"taskIds": task_ids}}),
    );
    let request = build_request(client.addr, "POST", "/mcp", &headers, body)?;
    let connection = Connection::open(client.addr).await?;
    // Once connected, a server that dies before or during its answer
    // just ends the stream.
    let Ok(mut events) = connection.stream(request).await else {
        return Ok(());
    };
    while let Some(v) = events.next_json().await {
        on_message(v);
    }
    Ok(())
}
