//! `subtask serve --stdio` as a host launches it: the real binary as a
//! child process, one JSON-RPC message per line. Every protocol era a
//! client may open with (`initialize` of 2024-11-05 to 2025-11-25, or
//! 2026-07-28 requests), the 2025-11-25 tasks wire on stdio (status
//! notifications, input requests on stdout, answers on stdin), a
//! connection that mixes eras, 2025-03-26 batches (and 2025-03-26 over
//! Streamable HTTP, whose clients send no version header), the database's
//! home when no `--db` is given (from a read-only working directory, in a
//! temporary home) and a restart that brings finished tasks back; rmcp's
//! stdio client (`TokioChildProcess`) in both its lifecycles.

mod support;

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::tempdir::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// A hang guard, never a timing assertion.
const GUARD: Duration = Duration::from_secs(30);

const MODERN_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}"#;

/// `subtask serve --stdio ARGS` with its stdin and stdout as the client's
/// channel; stderr goes to a file.
struct Stdio_ {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Messages read while waiting for another one.
    pending: VecDeque<Value>,
    next_id: i64,
}

/// How to launch the server.
struct Launch<'a> {
    args: &'a [&'a str],
    cwd: Option<&'a Path>,
    env: &'a [(&'a str, &'a str)],
    stderr: &'a Path,
}

impl Stdio_ {
    fn spawn(l: Launch<'_>) -> Stdio_ {
        let log = std::fs::File::create(l.stderr).expect("create the stderr log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_subtask"));
        cmd.arg("serve")
            .arg("--stdio")
            .args(l.args)
            .env("RUST_LOG", "info")
            .env_remove("XDG_DATA_HOME")
            .envs(l.env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        if let Some(dir) = l.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().expect("start subtask serve --stdio");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Stdio_ {
            child,
            stdin,
            stdout,
            pending: VecDeque::new(),
            next_id: 1,
        }
    }

    fn memory() -> (Stdio_, TempDir) {
        let dir = TempDir::new("stdio");
        let s = Stdio_::spawn(Launch {
            args: &["--memory"],
            cwd: None,
            env: &[],
            stderr: &dir.0.join("stderr.log"),
        });
        (s, dir)
    }

    async fn write(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).await.expect("write to stdin");
        stdin.write_all(b"\n").await.expect("write to stdin");
        stdin.flush().await.expect("flush stdin");
    }

    /// The next message on stdout; every line must be one JSON value.
    async fn read(&mut self) -> Value {
        if let Some(m) = self.pending.pop_front() {
            return m;
        }
        self.read_wire().await
    }

    async fn read_wire(&mut self) -> Value {
        let line = tokio::time::timeout(GUARD, self.stdout.next_line())
            .await
            .expect("a message within the guard")
            .expect("read stdout")
            .expect("stdout is still open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"))
    }

    /// The first message `pred` accepts; the others stay pending, in order.
    async fn read_until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.pending.iter().position(&pred) {
            return self.pending.remove(i).expect("found");
        }
        loop {
            let m = self.read_wire().await;
            if pred(&m) {
                return m;
            }
            self.pending.push_back(m);
        }
    }

    /// Sends a request and returns its response (result or error).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let m = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write(&m.to_string()).await;
        self.read_until(|r| r["id"] == id && r.get("method").is_none())
            .await
    }

    async fn result(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params).await;
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    async fn notify(&mut self, method: &str) {
        self.write(&json!({"jsonrpc": "2.0", "method": method}).to_string())
            .await;
    }

    /// `initialize` with `version`, then `notifications/initialized`.
    async fn initialize(&mut self, version: &str) -> Value {
        let r = self
            .result(
                "initialize",
                json!({"protocolVersion": version, "capabilities": {"elicitation": {}},
                       "clientInfo": {"name": "stdio-test", "version": "1"}}),
            )
            .await;
        self.notify("notifications/initialized").await;
        r
    }

    /// Closes stdin and waits for the exit: the server must exit on EOF.
    async fn close(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        tokio::time::timeout(GUARD, self.child.wait())
            .await
            .expect("the server exits when its stdin closes")
            .expect("wait")
    }
}

fn modern(params: Value) -> Value {
    let mut p = params;
    p["_meta"] = serde_json::from_str(MODERN_META).unwrap();
    p
}

fn fanout(arguments: Value) -> Value {
    json!({"name": "fanout", "arguments": arguments})
}

#[tokio::test]
async fn every_legacy_version_is_a_session_with_that_versions_features() {
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let (mut s, _dir) = Stdio_::memory();
        let init = s.initialize(version).await;
        assert_eq!(init["protocolVersion"], version);
        let tasks = version == "2025-11-25";
        assert_eq!(
            init["capabilities"].get("tasks").is_some(),
            tasks,
            "{version}: {init}"
        );
        let tools = s.result("tools/list", json!({})).await;
        let fanout_tool = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "fanout")
            .cloned()
            .unwrap();
        assert_eq!(
            fanout_tool.get("execution").is_some(),
            tasks,
            "{version}: taskSupport only where tasks exist: {fanout_tool}"
        );
        assert!(tools.get("resultType").is_none(), "{version}: {tools}");
        // A plain call: the tool's result when it ends.
        let r = s
            .result(
                "tools/call",
                fanout(json!({"width": 2, "depth": 1, "steps": 1, "stepMs": 1})),
            )
            .await;
        assert_eq!(r["isError"], false, "{version}: {r}");
        assert!(
            r["content"][0]["text"].as_str().unwrap().contains("3 of 3 nodes"),
            "{r}"
        );
        let structured = version >= "2025-06-18";
        assert_eq!(
            r.get("structuredContent").is_some(),
            structured,
            "{version}: structuredContent exists from 2025-06-18 on: {r}"
        );
        // Bad arguments: an isError result the model can read.
        let r = s.result("tools/call", fanout(json!({"width": 999}))).await;
        assert_eq!(r["isError"], true, "{version}: {r}");
        // Before 2025-11-25, `params.task` means nothing and tasks/* do not exist.
        let mut call = fanout(json!({"width": 0, "steps": 1, "stepMs": 1}));
        call["task"] = json!({"ttl": 60000});
        let r = s.result("tools/call", call).await;
        if tasks {
            assert_eq!(r["task"]["status"], "working", "{r}");
        } else {
            assert!(r.get("task").is_none() && r["isError"] == false, "{version}: {r}");
            let e = s.request("tasks/list", json!({})).await;
            assert_eq!(e["error"]["code"], -32601, "{version}: {e}");
            assert!(e["error"]["message"].as_str().unwrap().contains(version), "{e}");
        }
        assert_eq!(s.result("ping", json!({})).await, json!({}));
        assert!(s.close().await.success());
    }
}

#[tokio::test]
async fn the_2025_11_25_tasks_wire_runs_on_stdio() {
    let (mut s, _dir) = Stdio_::memory();
    s.initialize("2025-11-25").await;
    // A tree whose child 0.1 asks for input.
    let mut call = fanout(json!({"width": 2, "depth": 1, "steps": 2, "stepMs": 5, "inputAt": "0.1"}));
    call["task"] = json!({"ttl": 60000});
    let created = s.result("tools/call", call).await;
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(created["task"]["status"], "working");
    // Status notifications of the new task arrive unasked, as they happen.
    let note = s
        .read_until(|m| m["method"] == "notifications/tasks/status" && m["params"]["taskId"] == id.as_str())
        .await;
    assert!(note.get("id").is_none(), "{note}");
    // Subtasks: childTaskIds in order, each child naming its parent.
    let children = loop {
        let t = s.result("tasks/get", json!({"taskId": id})).await;
        let c: Vec<String> = t["childTaskIds"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default();
        if c.len() == 2 {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let child = s.result("tasks/get", json!({"taskId": children[1]})).await;
    assert_eq!(child["parentTaskId"], id.as_str(), "{child}");
    // The child that asks: its tasks/result carries the elicitation.
    loop {
        let t = s.result("tasks/get", json!({"taskId": children[1]})).await;
        if t["status"] == "input_required" {
            break;
        }
        assert!(
            !["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap()),
            "{t}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let result_id = s.next_id;
    s.next_id += 1;
    s.write(&json!({"jsonrpc": "2.0", "id": result_id, "method": "tasks/result", "params": {"taskId": children[1]}}).to_string())
        .await;
    let ask = s.read_until(|m| m["method"] == "elicitation/create").await;
    assert_eq!(
        ask["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        children[1].as_str(),
        "{ask}"
    );
    // The answer goes back on stdin as a JSON-RPC response.
    s.write(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"confirm": true}}}).to_string())
        .await;
    let answered = s.read_until(|m| m["id"] == result_id).await;
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    // The root's result, through tasks/result.
    let done = s.result("tasks/result", json!({"taskId": id})).await;
    assert!(
        done["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("3 of 3 nodes"),
        "{done}"
    );
    assert_eq!(
        done["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    // The last status notification of the root says completed.
    let last = s
        .read_until(|m| {
            m["method"] == "notifications/tasks/status"
                && m["params"]["taskId"] == id.as_str()
                && m["params"]["status"] == "completed"
        })
        .await;
    assert_eq!(last["params"]["childTaskIds"], json!(children));
    // tasks/list has the tree; cancel ends a running task `cancelled`.
    let listed = s.result("tasks/list", json!({})).await;
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&id.as_str()) && ids.contains(&children[0].as_str()),
        "{listed}"
    );
    let mut call = fanout(json!({"width": 1, "depth": 1, "steps": 500, "stepMs": 20}));
    call["task"] = json!({});
    let long = s.result("tools/call", call).await["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let cancelled = s.result("tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let e = s.request("tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(
        e["error"]["code"], -32602,
        "a terminal task cannot be cancelled: {e}"
    );
    assert!(s.close().await.success());
}

#[tokio::test]
async fn a_connection_speaks_one_era() {
    // Legacy first: a 2026 request is refused with a clear error.
    let (mut s, _dir) = Stdio_::memory();
    s.initialize("2025-11-25").await;
    let e = s.request("server/discover", modern(json!({}))).await;
    assert_eq!(e["error"]["code"], -32600, "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("2025-11-25") && message.contains("one era"),
        "{message}"
    );
    let e = s.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}})).await;
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already initialized"),
        "{e}"
    );
    // The session goes on unharmed.
    assert!(s.result("tools/list", json!({})).await["tools"].is_array());
    assert!(s.close().await.success());

    // Modern first: initialize is refused, 2026 requests go on.
    let (mut s, _dir) = Stdio_::memory();
    let d = s.result("server/discover", modern(json!({}))).await;
    assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
    let e = s.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}})).await;
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("2026-07-28"),
        "{e}"
    );
    let e = s.request("tools/list", json!({})).await;
    assert_eq!(
        e["error"]["code"], -32602,
        "a request without `_meta` on a modern connection: {e}"
    );
    let r = s
        .result(
            "tools/call",
            modern(fanout(json!({"width": 0, "steps": 1, "stepMs": 1}))),
        )
        .await;
    assert_eq!(r["resultType"], "task", "{r}");
    assert!(s.close().await.success());

    // Neither yet: the refusal names both ways in.
    let (mut s, _dir) = Stdio_::memory();
    let e = s.request("tools/list", json!({})).await;
    assert!(
        e["error"]["message"].as_str().unwrap().contains("initialize"),
        "{e}"
    );
    // A refused request chooses no era: the client may still fall back.
    assert_eq!(s.initialize("2025-06-18").await["protocolVersion"], "2025-06-18");
    assert!(s.close().await.success());
}

#[tokio::test]
async fn batches_are_taken_in_2025_03_26_sessions_only() {
    let (mut s, _dir) = Stdio_::memory();
    s.initialize("2025-03-26").await;
    s.write(
        r#"[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}},{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"fanout","arguments":{"width":0,"steps":1,"stepMs":1}}},{"jsonrpc":"2.0","id":"c","method":"initialize","params":{}}]"#,
    )
    .await;
    let answers = s.read().await;
    let answers = answers
        .as_array()
        .unwrap_or_else(|| panic!("an array of answers: {answers}"));
    assert_eq!(answers.len(), 3, "a notification gets no answer: {answers:?}");
    assert_eq!(answers[0], json!({"jsonrpc": "2.0", "id": "a", "result": {}}));
    assert_eq!(answers[1]["id"], "b");
    assert_eq!(answers[1]["result"]["isError"], false);
    assert_eq!(
        (answers[2]["id"].as_str(), answers[2]["error"]["code"].as_i64()),
        (Some("c"), Some(-32600))
    );
    // Only notifications: nothing comes back; the next answer is the ping's.
    s.write(r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#)
        .await;
    assert_eq!(s.result("ping", json!({})).await, json!({}));
    s.write("[]").await;
    assert_eq!(s.read().await["error"]["code"], -32600);
    assert!(s.close().await.success());

    for version in ["2025-11-25", "2024-11-05"] {
        let (mut s, _dir) = Stdio_::memory();
        s.initialize(version).await;
        s.write(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).await;
        let e = s.read().await;
        assert_eq!(e["error"]["code"], -32600, "{version}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(version), "{e}");
        assert!(s.close().await.success());
    }
}

#[tokio::test]
async fn streamable_http_serves_2025_03_26_clients_which_send_no_version_header() {
    use support::http::raw;
    let runtime = subtask::runtime::Runtime::new(subtask::runtime::RuntimeConfig::default());
    let server = subtask::demo::register(subtask::server::Server::builder(
        runtime,
        subtask::server::ServerConfig::default(),
    ))
    .build();
    let addr = support::http::serve(server).await;
    let hs = vec![("Content-Type", "application/json".to_owned())];
    let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}"#;
    let r = raw(addr, "POST", &hs, init).await;
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-03-26");
    assert!(r.json()["result"]["capabilities"].get("tasks").is_none());
    let call = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fanout","arguments":{"width":1,"depth":1,"steps":1,"stepMs":1}}}"#;
    let r = raw(addr, "POST", &hs, call).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["isError"], false, "{:?}", r.json());
    assert!(r.json()["result"].get("structuredContent").is_none());
    // A batch: one array of answers.
    let batch =
        br#"[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"tools/list"}]"#;
    let r = raw(addr, "POST", &hs, batch).await;
    let answers = r.json();
    assert_eq!(
        (r.status, answers[0]["id"].as_i64(), answers[1]["id"].as_i64()),
        (200, Some(3), Some(4))
    );
    assert!(answers[1]["result"]["tools"].is_array());
    let notes = br#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#;
    assert_eq!(raw(addr, "POST", &hs, notes).await.status, 202);
    // Tasks do not exist in 2025-03-26.
    let list = br#"{"jsonrpc":"2.0","id":5,"method":"tasks/list"}"#;
    assert_eq!(raw(addr, "POST", &hs, list).await.json()["error"]["code"], -32601);
    // With a version header of a later protocol, batches are refused.
    for v in ["2025-06-18", "2026-07-28"] {
        let hs = vec![
            ("Content-Type", "application/json".to_owned()),
            ("MCP-Protocol-Version", v.to_owned()),
        ];
        let r = raw(addr, "POST", &hs, batch).await;
        assert_eq!(
            (r.status, r.json()["error"]["code"].as_i64()),
            (400, Some(-32600)),
            "{v}"
        );
    }
}

/// Runs `serve --stdio` (no `--db`) in `cwd` with `home` as HOME, finishes
/// one task, and returns its id and result.
async fn one_finished_task(cwd: &Path, home: &Path, log: &Path) -> (String, Value) {
    let home_s = home.to_str().unwrap();
    let mut s = Stdio_::spawn(Launch {
        args: &[],
        cwd: Some(cwd),
        env: &[("HOME", home_s)],
        stderr: log,
    });
    s.initialize("2025-11-25").await;
    let mut call = fanout(json!({"width": 2, "depth": 1, "steps": 1, "stepMs": 1}));
    call["task"] = json!({"ttl": 3_600_000});
    let id = s.result("tools/call", call).await["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let result = s.result("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["isError"], false, "{result}");
    assert!(s.close().await.success());
    (id, result)
}

#[tokio::test]
async fn without_db_stdio_keeps_tasks_in_the_users_data_directory() {
    let home = TempDir::new("stdio-home");
    let log = home.0.join("stderr.log");
    // `/proc` is a working directory nobody can create a file in, root included.
    let cwd = Path::new("/proc");
    assert!(
        std::fs::File::create(cwd.join("subtask.db")).is_err(),
        "the working directory is read-only"
    );
    let (id, result) = one_finished_task(cwd, &home.0, &log).await;
    let db = home.0.join(".local/share/subtask/subtask.db");
    assert!(
        db.is_file(),
        "the database is in the data directory: {}",
        db.display()
    );
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains(db.to_str().unwrap()),
        "the log names the database: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "no terminal colours in a log file: {stderr}"
    );

    // From `/`, after a restart: the finished task comes back byte for byte.
    let log2 = home.0.join("stderr2.log");
    let mut s = Stdio_::spawn(Launch {
        args: &[],
        cwd: Some(Path::new("/")),
        env: &[("HOME", home.0.to_str().unwrap())],
        stderr: &log2,
    });
    s.initialize("2025-11-25").await;
    let again = s.result("tasks/result", json!({"taskId": id})).await;
    assert_eq!(again, result);
    let t = s.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(t["status"], "completed");
    assert_eq!(t["childTaskIds"].as_array().map(Vec::len), Some(2));
    assert!(s.close().await.success());
    assert!(
        !Path::new("/subtask.db").exists(),
        "nothing was written to the working directory"
    );

    // XDG_DATA_HOME, when set, is the data directory.
    let xdg = TempDir::new("stdio-xdg");
    let log3 = xdg.0.join("stderr.log");
    let mut s = Stdio_::spawn(Launch {
        args: &[],
        cwd: Some(cwd),
        env: &[
            ("HOME", home.0.to_str().unwrap()),
            ("XDG_DATA_HOME", xdg.0.to_str().unwrap()),
        ],
        stderr: &log3,
    });
    s.initialize("2025-11-25").await;
    let e = s.request("tasks/get", json!({"taskId": id})).await;
    assert!(e.get("error").is_some(), "another database: {e}");
    assert!(s.close().await.success());
    assert!(xdg.0.join("subtask/subtask.db").is_file());
}

mod rmcp_stdio {
    use super::*;
    use rmcp::ServiceExt;
    use rmcp::model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
    };
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    use rmcp::transport::TokioChildProcess;

    fn command() -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_subtask"));
        cmd.args(["serve", "--stdio", "--memory"])
            .env("RUST_LOG", "error");
        cmd
    }

    fn args(v: Value) -> rmcp::model::JsonObject {
        v.as_object().cloned().expect("an object")
    }

    #[tokio::test]
    async fn rmcps_stdio_client_in_its_default_initialize_lifecycle() {
        let transport = TokioChildProcess::new(command()).expect("spawn the server");
        let client = tokio::time::timeout(GUARD, ().serve(transport))
            .await
            .unwrap()
            .expect("initialize over stdio");
        let tools = client.list_all_tools().await.expect("tools/list");
        assert!(tools.iter().any(|t| t.name == "deep_research"), "{tools:?}");
        let result = tokio::time::timeout(
            GUARD,
            client.call_tool(
                CallToolRequestParams::new("fanout")
                    .with_arguments(args(json!({"width": 2, "depth": 1, "steps": 1, "stepMs": 5}))),
            ),
        )
        .await
        .unwrap()
        .expect("the final result of a fanout");
        assert_eq!(
            result.structured_content.as_ref().unwrap()["nodes"],
            3,
            "{result:?}"
        );
        client.cancel().await.expect("closes cleanly");
    }

    #[tokio::test]
    async fn rmcps_stdio_client_in_the_2026_lifecycle() {
        let transport = TokioChildProcess::new(command()).expect("spawn the server");
        let capabilities = ClientCapabilities::builder().enable_tasks().build();
        let info = ClientConfig::new(capabilities, Implementation::new("rmcp-stdio-test", "0"));
        let client = tokio::time::timeout(
            GUARD,
            info.serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            ),
        )
        .await
        .unwrap()
        .expect("server/discover over stdio");
        assert_eq!(
            client.peer_info().expect("discovered").protocol_version,
            ProtocolVersion::V_2026_07_28
        );
        let call = CallToolRequestParams::new("fanout")
            .with_arguments(args(json!({"width": 1, "depth": 1, "steps": 1, "stepMs": 5})));
        let response = tokio::time::timeout(GUARD, client.call_tool_once(call))
            .await
            .unwrap()
            .expect("tools/call");
        assert!(
            matches!(response, rmcp::model::CallToolResponse::Task(_)),
            "a task for a client with the tasks extension: {response:?}"
        );
        client.cancel().await.expect("closes cleanly");
    }
}

#[tokio::test]
async fn background_answers_and_control_tools_over_stdio() {
    for version in ["2025-03-26", "2025-11-25"] {
        let dir = TempDir::new("stdio-agents");
        let mut s = Stdio_::spawn(Launch {
            args: &["--memory", "--background"],
            cwd: None,
            env: &[],
            stderr: &dir.0.join("stderr.log"),
        });
        s.initialize(version).await;
        let tools = s.result("tools/list", json!({})).await;
        assert!(
            tools["tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == "task_status"),
            "{tools}"
        );
        // A long tree: the answer comes at once, with the task's id in its text.
        let r = s
            .result(
                "tools/call",
                fanout(json!({"width": 2, "depth": 1, "steps": 500, "stepMs": 20})),
            )
            .await;
        let said = r["content"][0]["text"].as_str().unwrap().to_owned();
        let id = said
            .split_whitespace()
            .find_map(|w| w.trim_end_matches(';').parse::<uuid::Uuid>().ok())
            .unwrap_or_else(|| panic!("{version}: the answer names the task: {said}"))
            .to_string();
        assert_eq!(
            r.get("structuredContent").is_some(),
            version >= "2025-06-18",
            "{r}"
        );
        // The root spawns its children one after another as it runs: the
        // status names the whole tree once both are spawned.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let st = s
                .result(
                    "tools/call",
                    json!({"name": "task_status", "arguments": {"taskId": id}}),
                )
                .await;
            let st_text = st["content"][0]["text"].as_str().unwrap().to_owned();
            assert!(st_text.contains(&id), "{version}: {st_text}");
            if st_text.contains("3 tasks") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{version}: the tree never showed 3 tasks: {st_text}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let c = s
            .result(
                "tools/call",
                json!({"name": "task_cancel", "arguments": {"taskId": id}}),
            )
            .await;
        assert!(
            c["content"][0]["text"].as_str().unwrap().contains("cancelled"),
            "{c}"
        );
        let w = s
            .result(
                "tools/call",
                json!({"name": "task_wait", "arguments": {"taskId": id, "seconds": 5}}),
            )
            .await;
        assert!(
            w["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("was cancelled"),
            "{w}"
        );
        assert!(s.close().await.success());
    }
}
