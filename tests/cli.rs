//! The `subtask` command line as real processes against a real `subtask
//! serve`: `call --stream --json`, `get` (with `--tree`), `steer`, `pause`,
//! `resume`, `cancel`, `watch` and the exit codes; `watch` also under a
//! pseudo-terminal, with its screen read back through a VT100 parser.
//!
//! Nothing waits on wall-clock speed: tasks that must stay live are held on
//! an input request (fanout's `inputAt`) until the test answers it, and
//! every wait is a bounded poll (a hang guard).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subtask::client::Client;
use subtask::model::{InputResponses, JsonObject, TaskId};

const BIN: &str = env!("CARGO_BIN_EXE_subtask");
/// Hang guard for every wait.
const GUARD: Duration = Duration::from_secs(60);

/// `subtask serve` on a free port, killed on drop.
struct ServeProcess {
    child: Child,
    url: String,
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> ServeProcess {
    serve_with(&[])
}

/// `subtask serve` with `extra` flags.
fn serve_with(extra: &[&str]) -> ServeProcess {
    // Each test's server keeps its tasks to itself: in memory when this build
    // of `serve` has a durable store (`--memory`), otherwise by default.
    let help = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("subtask serve --help");
    let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
    if String::from_utf8_lossy(&help.stdout).contains("--memory") {
        args.push("--memory");
    }
    args.extend_from_slice(extra);
    let mut child = Command::new(BIN)
        .args(&args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start subtask serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("subtask serve printed its address").unwrap();
        if let Some(i) = line.find("http://") {
            let rest = &line[i..];
            let end = rest.find("/mcp").expect("the endpoint path") + 4;
            break rest[..end].to_owned();
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    ServeProcess { child, url }
}

fn cli(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .args(["--url", url])
        .stdin(Stdio::null())
        .output()
        .expect("run subtask")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// A `subtask call` running in the background: its task id (read from the
/// first stderr line) and its stdout lines as they come.
struct Background {
    child: Child,
    id: TaskId,
    out: mpsc::Receiver<String>,
}

fn call_in_background(url: &str, args: &[&str]) -> Background {
    let mut child = Command::new(BIN)
        .arg("call")
        .args(args)
        .args(["--url", url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run subtask call");
    let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = err.next().expect("a first stderr line").unwrap();
    let id: TaskId = first
        .strip_prefix("task ")
        .unwrap_or_else(|| panic!("first stderr line names the task: {first}"))
        .trim()
        .parse()
        .unwrap();
    std::thread::spawn(move || for _ in err {});
    let (tx, out) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    Background { child, id, out }
}

impl Background {
    /// Waits for the process; returns its exit code and every stdout line.
    fn finish(mut self) -> (i32, Vec<String>) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(start.elapsed() < GUARD, "subtask call did not finish");
            std::thread::sleep(Duration::from_millis(20));
        };
        let lines: Vec<String> = self.out.iter().collect();
        (status.code().expect("exited"), lines)
    }
}

/// Polls `get ID --tree --json` until `pred` holds.
fn until_tree(url: &str, id: TaskId, pred: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let o = cli(url, &["get", &id.to_string(), "--tree", "--json"]);
        if code(&o) == 0 {
            let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
            if pred(&v) {
                return v;
            }
        }
        assert!(
            start.elapsed() < GUARD,
            "tree never reached the state: {}",
            stdout(&o)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Answers input `key` of `task` through the library (the test plays the
/// human the `call` process could not ask).
fn answer(url: &str, task: TaskId, key: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::http(url).unwrap();
        let responses: InputResponses = [(
            key.to_owned(),
            JsonObject::from_value(json!({"action": "accept", "content": {"confirm": true}})).unwrap(),
        )]
        .into();
        client.update(task, responses).await.unwrap();
    });
}

fn path_of(partial: &Value) -> &str {
    partial["result"]["structuredContent"]["path"]
        .as_str()
        .unwrap_or("?")
}

#[test]
fn call_stream_json_prints_each_partial_result_in_tree_order() {
    let s = serve();
    let o = cli(
        &s.url,
        &[
            "call",
            "fanout",
            r#"{"width":2,"depth":2,"steps":1,"stepMs":5}"#,
            "--stream",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let lines = json_lines(&stdout(&o));
    let paths: Vec<&str> = lines.iter().map(path_of).collect();
    assert_eq!(paths, ["0.0.0", "0.0.1", "0.0", "0.1.0", "0.1.1", "0.1", "0"]);
    for l in &lines {
        let keys: Vec<&String> = l.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["parentTaskId", "result", "status", "taskId"], "{l}");
        assert_eq!(l["status"], "completed");
    }
    let root = lines.last().unwrap();
    assert!(root["parentTaskId"].is_null());
    assert!(stderr(&o).starts_with(&format!("task {}", root["taskId"].as_str().unwrap())));
    // Every child names a parent that appears later in the stream.
    for (i, l) in lines.iter().enumerate().take(lines.len() - 1) {
        assert!(
            lines[i + 1..].iter().any(|p| p["taskId"] == l["parentTaskId"]),
            "{l}"
        );
    }

    // The same tree, afterwards, from other processes.
    let id = root["taskId"].as_str().unwrap();
    let o = cli(&s.url, &["get", id, "--tree", "--json"]);
    assert_eq!(code(&o), 0);
    let tree: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(tree["status"], "completed");
    assert_eq!(tree["subtasks"].as_array().unwrap().len(), 2);
    assert_eq!(
        tree["subtasks"][1]["subtasks"][0]["result"]["structuredContent"]["path"],
        "0.1.0"
    );
    let o = cli(&s.url, &["get", id, "--tree"]);
    assert_eq!(code(&o), 0);
    let text = stdout(&o);
    assert!(text.starts_with("7 tasks: 7 completed"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains("completed")).count(),
        8,
        "{text}"
    );
    assert!(
        text.lines().nth(2).unwrap().starts_with("  ✓ completed"),
        "{text}"
    );
    assert!(
        text.lines().nth(3).unwrap().starts_with("    ✓ completed"),
        "{text}"
    );
    let o = cli(&s.url, &["get", id, "--json"]);
    assert_eq!(code(&o), 0);
    let t: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(
        (t["taskId"].as_str(), t["status"].as_str()),
        (Some(id), Some("completed"))
    );
    let o = cli(&s.url, &["get", id]);
    assert!(stdout(&o).contains("status    completed"), "{}", stdout(&o));
}

#[test]
fn steer_pause_and_resume_from_other_processes_reach_the_tree() {
    let s = serve();
    // Node 0.0 waits for input, so the tree stays live until the test answers.
    let call = call_in_background(
        &s.url,
        &[
            "fanout",
            r#"{"width":2,"depth":1,"steps":1,"stepMs":5,"inputAt":"0.0"}"#,
            "--stream",
            "--json",
        ],
    );
    let root = call.id.to_string();
    let tree = until_tree(&s.url, call.id, |t| {
        t["subtasks"][0]["status"] == "input_required"
    });
    let child: TaskId = tree["subtasks"][0]["taskId"].as_str().unwrap().parse().unwrap();
    let mut watch = Command::new(BIN)
        .args(["watch", &root, "--url", &s.url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The watcher's lines as it prints them: it shows the latest state of
    // each task, so a pause it is not yet following (a process still
    // starting) or one resumed before it reads it may never be shown. The
    // test waits for it to follow the tree, and to show the pause before
    // resuming.
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let watch_out = watch.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(watch_out).lines() {
            let line = line.unwrap();
            all.push_str(&line);
            all.push('\n');
            let _ = lines_tx.send(line);
        }
        all
    });
    let wait_line = |what: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match lines_rx.recv_timeout(left) {
                Ok(line) if line.contains(what) => return,
                Ok(_) => {}
                Err(e) => panic!("the watcher printed no line with {what:?}: {e}"),
            }
        }
    };
    wait_line(&format!("  {child} input_required"));

    let o = cli(&s.url, &["steer", &child.to_string(), "focus on failures"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("steer queued"), "{}", stdout(&o));

    let o = cli(&s.url, &["pause", &root, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let paused: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(
        ["paused", "working"].contains(&paused["status"].as_str().unwrap()),
        "{paused}"
    );
    until_tree(&s.url, call.id, |t| {
        t["status"] == "paused" && t["subtasks"][0]["status"] == "paused"
    });
    // Pausing a paused task is refused: exit 1, with the server's reason.
    let o = cli(&s.url, &["pause", &root]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stderr(&o).contains("-32602"), "{}", stderr(&o));
    wait_line(&format!("{root} paused"));

    let o = cli(&s.url, &["resume", &root]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("resumed"), "{}", stdout(&o));
    let o = cli(&s.url, &["resume", &root]);
    assert_eq!(code(&o), 1, "resuming a running task is refused");

    // The input request survived pause and resume; answer it.
    until_tree(&s.url, call.id, |t| {
        t["subtasks"][0]["status"] == "input_required"
    });
    answer(&s.url, child, "confirm-0.0");
    let (exit, lines) = call.finish();
    assert_eq!(exit, 0);
    let lines: Vec<Value> = lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    let paths: Vec<&str> = lines.iter().map(path_of).collect();
    assert_eq!(paths, ["0.0", "0.1", "0"]);
    assert_eq!(
        lines[0]["result"]["structuredContent"]["steers"],
        json!(["focus on failures"])
    );
    // The watcher (a pipe, not a terminal) printed one line per change and
    // exited with the root's status.
    let w = watch.wait_with_output().unwrap();
    assert_eq!(code(&w), 0, "{}", stderr(&w));
    let text = reader.join().unwrap();
    assert!(text.contains(&format!("{root} paused")), "{text}");
    assert!(text.contains(&format!("  {child} input_required")), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with(&format!("{root} completed")),
        "{text}"
    );

    // Steering a finished task: refused, exit 1.
    let o = cli(&s.url, &["steer", &root, "too late"]);
    assert_eq!(code(&o), 1);
}

#[test]
fn a_killed_call_is_picked_up_by_another_process() {
    let s = serve();
    let mut call = call_in_background(
        &s.url,
        &[
            "fanout",
            r#"{"width":2,"depth":1,"steps":1,"stepMs":5,"inputAt":"0.1"}"#,
            "--stream",
            "--json",
        ],
    );
    // The first partial result arrives; then the process dies (SIGKILL).
    let first: Value = serde_json::from_str(&call.out.recv_timeout(GUARD).unwrap()).unwrap();
    assert_eq!(path_of(&first), "0.0");
    call.child.kill().unwrap();
    call.child.wait().unwrap();
    // The task lives on; a new process follows it to its end.
    let tree = until_tree(&s.url, call.id, |t| {
        t["subtasks"][1]["status"] == "input_required"
    });
    let watch = Command::new(BIN)
        .args(["watch", &call.id.to_string(), "--json", "--url", &s.url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let child: TaskId = tree["subtasks"][1]["taskId"].as_str().unwrap().parse().unwrap();
    answer(&s.url, child, "confirm-0.1");
    let w = watch.wait_with_output().unwrap();
    assert_eq!(code(&w), 0, "{}", stderr(&w));
    let changes = json_lines(&stdout(&w));
    let last = changes.last().unwrap();
    assert_eq!(
        (last["taskId"].as_str(), last["status"].as_str()),
        (Some(call.id.to_string().as_str()), Some("completed"))
    );
    assert!(
        changes
            .iter()
            .any(|c| c["taskId"] == json!(child) && c["depth"] == 1)
    );
}

#[test]
fn exit_codes_say_how_the_task_ended_or_why_nothing_ran() {
    let s = serve();
    // Cancelled: the root waits for input until it is cancelled.
    let call = call_in_background(
        &s.url,
        &[
            "fanout",
            r#"{"width":1,"depth":1,"steps":1,"stepMs":5,"inputAt":"0"}"#,
            "--stream",
            "--json",
        ],
    );
    let id = call.id.to_string();
    until_tree(&s.url, call.id, |t| t["status"] == "input_required");
    let o = cli(&s.url, &["cancel", &id, "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (exit, lines) = call.finish();
    assert_eq!(exit, 2);
    let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(
        (last["status"].as_str(), last["taskId"].as_str()),
        (Some("cancelled"), Some(id.as_str()))
    );
    assert!(last.get("result").is_none() && last.get("error").is_none());
    assert_eq!(code(&cli(&s.url, &["get", &id])), 2);
    assert_eq!(code(&cli(&s.url, &["watch", &id])), 2);

    // Failed.
    let o = cli(
        &s.url,
        &[
            "call",
            "fanout",
            r#"{"width":0,"steps":0,"failAt":"0"}"#,
            "--json",
        ],
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let line: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(line["status"], "failed");
    assert_eq!(line["error"]["code"], -32603);
    // Completed, without --stream: only the root's result.
    let o = cli(&s.url, &["call", "fanout", r#"{"width":2,"steps":0}"#]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("fanout: 3 of 3 nodes completed"),
        "{}",
        stdout(&o)
    );
    assert_eq!(stdout(&o).lines().filter(|l| l.contains("✓")).count(), 1);

    // A tool error (bad arguments are an isError result the model can act
    // on): the result is printed, and the exit code says it is an error.
    let o = cli(&s.url, &["call", "fanout", r#"{"width":"two"}"#]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("invalid argument `width`: expected integer"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("isError"), "{}", stderr(&o));
    // Refused by the server: an unknown task.
    let unknown = TaskId::random().to_string();
    let o = cli(&s.url, &["get", &unknown]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("Task not found"), "{}", stderr(&o));

    // Usage and connection errors: 3.
    for args in [
        &["call", "fanout", "not json"][..],
        &["call", "fanout", "[1, 2]"],
        &["get", "not-a-task-id"],
        &["frobnicate"],
        &["steer", &unknown],
    ] {
        let o = cli(&s.url, args);
        assert_eq!(code(&o), 3, "{args:?}: {}", stderr(&o));
    }
    let o = cli("http://127.0.0.1:1/mcp", &["get", &unknown]);
    assert_eq!(code(&o), 3);
    assert!(
        stderr(&o).contains("is `subtask serve` running"),
        "{}",
        stderr(&o)
    );
    let o = cli("https://127.0.0.1:1/mcp", &["get", &unknown]);
    assert_eq!(code(&o), 3);
    assert!(stderr(&o).contains("https is not supported"), "{}", stderr(&o));
    let o = Command::new(BIN).args(["call", "--help"]).output().unwrap();
    assert_eq!(code(&o), 0);
}

/// A pseudo-terminal running `subtask watch`, its output parsed as a VT100 screen.
struct Pty {
    parser: vt100::Parser,
    writer: Box<dyn std::io::Write + Send>,
    chunks: mpsc::Receiver<Vec<u8>>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    eof: bool,
}

impl Pty {
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Pty {
        use portable_pty::{CommandBuilder, PtySize, native_pty_system};
        let (rows, cols) = (30, 120);
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut cmd = CommandBuilder::new(BIN);
        cmd.args(args);
        cmd.env("TERM", "xterm-256color");
        cmd.env_remove("NO_COLOR");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let (tx, chunks) = mpsc::channel();
        std::thread::spawn(move || {
            let _master = pair.master; // keep the pty open while reading
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        });
        Pty {
            parser: vt100::Parser::new(
                std::num::NonZeroU16::new(rows).unwrap(),
                std::num::NonZeroU16::new(cols).unwrap(),
                0,
            ),
            writer,
            chunks,
            child,
            eof: false,
        }
    }

    /// Types `text` into the terminal.
    fn type_in(&mut self, text: &str) {
        self.writer.write_all(text.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Feeds output until `pred(screen text)` holds (or the output ends).
    fn until(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.parser.screen().contents();
            if pred(&screen) {
                return screen;
            }
            assert!(
                !self.eof && start.elapsed() < GUARD,
                "the screen never showed {what}:\n{screen}"
            );
            match self.chunks.recv_timeout(Duration::from_millis(100)) {
                Ok(bytes) => self.parser.process(&bytes),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => self.eof = true,
            }
        }
    }

    fn exit_code(mut self) -> (u32, vt100::Parser) {
        while !self.eof {
            match self.chunks.recv_timeout(GUARD) {
                Ok(bytes) => self.parser.process(&bytes),
                Err(_) => self.eof = true,
            }
        }
        (self.child.wait().unwrap().exit_code(), self.parser)
    }

    /// The row of the screen containing `needle`.
    fn row_of(screen: &vt100::Screen, needle: &str) -> Option<u16> {
        let (rows, cols) = screen.size();
        (0..rows.get()).find(|&r| screen.contents_between(r, 0, r, cols.get()).contains(needle))
    }
}

#[test]
fn watch_draws_the_live_tree_in_place_on_a_terminal() {
    let s = serve();
    let call = call_in_background(
        &s.url,
        &[
            "fanout",
            r#"{"width":2,"depth":1,"steps":1,"stepMs":5,"inputAt":"0.1"}"#,
            "--json",
        ],
    );
    let root = call.id;
    let tree = until_tree(&s.url, root, |t| t["subtasks"][1]["status"] == "input_required");
    let c0 = &tree["subtasks"][0]["taskId"].as_str().unwrap()[..8];
    let c1 = &tree["subtasks"][1]["taskId"].as_str().unwrap()[..8];
    let r8 = &root.to_string()[..8];

    let mut pty = Pty::spawn(&["watch", &root.to_string(), "--url", &s.url], &[]);
    // The live state: one line per task, children indented, statuses shown.
    // (Waited for as a whole: a frame may be read half drawn.)
    let live = |screen: &str| {
        let lines: Vec<&str> = screen.lines().collect();
        lines.len() >= 4
            && lines[0].starts_with(&format!("subtask watch {root}  3 tasks:"))
            // The root first, a spinner frame before its status.
            && lines[1].chars().skip(1).collect::<String>().starts_with(&format!(" working        {r8} [#####-----] 1/2"))
            && lines.iter().any(|l| {
                l.starts_with(&format!("  ? input_required {c1}")) && l.contains("needs input: confirm-0.1")
            })
            && lines.iter().any(|l| l.starts_with(&format!("  ✓ completed      {c0}")))
    };
    let screen = pty.until("the live tree", live);
    assert!(screen.lines().count() <= 5, "{screen}");
    // Colours: the status word of a completed task is green.
    let s0 = pty.parser.screen().clone();
    let row = Pty::row_of(&s0, c0).unwrap();
    assert_eq!(
        s0.cell(row, 4).unwrap().fgcolor(),
        vt100::Color::Idx(2),
        "{screen}"
    );
    let row = Pty::row_of(&s0, c1).unwrap();
    assert_eq!(
        s0.cell(row, 4).unwrap().fgcolor(),
        vt100::Color::Idx(3),
        "{screen}"
    );

    // Unblock the tree; the view updates in place until the root ends.
    let child: TaskId = tree["subtasks"][1]["taskId"].as_str().unwrap().parse().unwrap();
    answer(&s.url, child, "confirm-0.1");
    pty.until("the finished tree", |screen| {
        screen.contains(&format!("task {root} completed after"))
    });
    let (exit, parser) = pty.exit_code();
    assert_eq!(exit, 0);
    let screen = parser.screen().contents();
    for id in [r8, c0, c1] {
        assert_eq!(
            screen
                .lines()
                .filter(|l| l.contains(id) && !l.starts_with("task ") && !l.starts_with("subtask watch"))
                .count(),
            1,
            "each task drawn once, in place:\n{screen}"
        );
    }
    assert_eq!(screen.matches("✓ completed").count(), 3, "{screen}");
    assert!(screen.contains("3 tasks: 3 completed"), "{screen}");
    let (exit, _) = call.finish();
    assert_eq!(exit, 0);

    // NO_COLOR: the same view without colours.
    let pty = Pty::spawn(
        &["watch", &root.to_string(), "--url", &s.url],
        &[("NO_COLOR", "1")],
    );
    let (exit, parser) = pty.exit_code();
    assert_eq!(exit, 0);
    let screen = parser.screen();
    let row = Pty::row_of(screen, c0).unwrap();
    assert_eq!(screen.cell(row, 4).unwrap().fgcolor(), vt100::Color::Default);
    assert!(screen.contents().contains("✓ completed"));
}

#[test]
fn call_on_a_terminal_asks_for_input_and_sends_the_answer() {
    let s = serve();
    let mut pty = Pty::spawn(
        &[
            "call",
            "fanout",
            r#"{"width":1,"depth":1,"steps":0,"inputAt":"0.0"}"#,
            "--stream",
            "--url",
            &s.url,
        ],
        &[],
    );
    let screen = pty.until("the question", |screen| {
        screen.contains("answer with a JSON object")
    });
    assert!(
        screen.contains("asks (\"confirm-0.0\"): elicitation/create"),
        "{screen}"
    );
    let root: TaskId = screen
        .lines()
        .find_map(|l| l.strip_prefix("task "))
        .expect("the task id comes first")
        .trim()
        .parse()
        .unwrap();
    pty.type_in("{\"confirm\": true}\n");
    pty.until("the result", |screen| {
        screen.contains("fanout: 2 of 2 nodes completed")
    });
    let (exit, _) = pty.exit_code();
    assert_eq!(exit, 0);
    // The answer reached the task that asked, as typed.
    let o = cli(&s.url, &["get", &root.to_string(), "--tree", "--json"]);
    let tree: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(
        tree["subtasks"][0]["result"]["structuredContent"]["input"],
        json!({"action": "accept", "content": {"confirm": true}})
    );
}

/// `serve`'s limits are flags. With two handler slots, 33 fanout nodes
/// whose minute-long steps wait outside the runtime
/// (`TaskContext::external`) hold none of them, so a quick task created
/// after them completes at once; the live-task limit refuses the task over
/// it; a limit of 0 is a usage error.
#[test]
fn serve_limits_are_flags_and_waiting_handlers_hold_no_slot() {
    let s = serve_with(&[
        "--max-running",
        "2",
        "--max-running-per-tree",
        "2",
        "--max-live-per-principal",
        "34",
    ]);
    let long = r#"{"width":10,"depth":1,"steps":1,"stepMs":60000}"#;
    let trees: Vec<Background> = (0..3)
        .map(|_| call_in_background(&s.url, &["fanout", long]))
        .collect();
    for t in &trees {
        // Every node of the tree is in its step: it ran (took a slot) and
        // now waits with the slot given back.
        until_tree(&s.url, t.id, |v| {
            let kids = v["subtasks"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            kids.len() == 10
                && std::iter::once(v).chain(kids).all(|n| {
                    n["status"] == "working"
                        && n["statusMessage"]
                            .as_str()
                            .is_some_and(|m| m.ends_with("step 1/1"))
                })
        });
    }
    let quick = call_in_background(&s.url, &["fanout", r#"{"width":0,"steps":0}"#]);
    let (exit, _) = quick.finish();
    assert_eq!(exit, 0, "the quick task completes while 33 handlers wait");

    // 33 live; one more long task makes 34, the limit.
    let last = call_in_background(&s.url, &["fanout", r#"{"width":0,"steps":1,"stepMs":60000}"#]);
    until_tree(&s.url, last.id, |v| v["status"] == "working");
    let o = cli(&s.url, &["call", "fanout", r#"{"width":0,"steps":0}"#]);
    assert_ne!(code(&o), 0, "over the live-task limit: {}", stdout(&o));
    assert!(
        stderr(&o).contains("limit of 34 live tasks"),
        "the refusal names the limit: {}",
        stderr(&o)
    );
    for t in trees.iter().map(|t| t.id).chain([last.id]) {
        assert_eq!(code(&cli(&s.url, &["cancel", &t.to_string()])), 0);
    }

    let o = Command::new(BIN)
        .args(["serve", "--memory", "--max-running", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("must be at least 1"));
}

/// `serve --task-ttl` is the TTL of tasks whose tool sets none (the soak,
/// `scripts/soak.sh`, keeps its retained set bounded with it); a tool's own
/// TTL still wins; 0 is a usage error.
#[test]
fn serve_task_ttl_is_a_flag() {
    let s = serve_with(&["--task-ttl", "120"]);
    let ttl_of = |args: &str| -> Value {
        let o = cli(&s.url, &["call", "fanout", args, "--json"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let line: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        let id = line["taskId"].as_str().expect("a task").to_owned();
        let o = cli(&s.url, &["get", &id, "--json"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let task: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        task["ttlMs"].clone()
    };
    assert_eq!(ttl_of(r#"{"width":0,"steps":0}"#), json!(120_000));
    assert_eq!(ttl_of(r#"{"width":0,"steps":0,"ttlMs":5000}"#), json!(5000));

    let o = Command::new(BIN)
        .args(["serve", "--memory", "--task-ttl", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stderr).contains("must be at least 1"));
}
