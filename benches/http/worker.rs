//! `worker_call_complete` and `worker_overhead_ratio`: a worker tool whose
//! handler returns at once, served by one worker written here in Rust that
//! speaks the worker protocol (`docs/workers.md`) over a WebSocket to
//! subtask's server, against the same call-complete loop on the in-process
//! tool `quick`, alternating on one server. The worker runs on a tokio
//! runtime of its own (1 thread, `benchworker`), whose CPU is not counted
//! as the server's.

#[allow(unused_imports)]
use super::*;

use futures::{FutureExt, SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// Starts the worker: registers `quick_w` with `capacity` slots and
/// answers every assignment with a result at once, replies written in
/// groups. Returns its runtime (dropping it stops the worker).
pub(crate) fn start_worker(addr: SocketAddr, capacity: usize) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(WORKER_THREADS)
        .enable_all()
        .build()
        .expect("the worker's runtime");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/workers"))
            .await
            .expect("the worker connects");
        let (mut tx, mut rx) = ws.split();
        let hello = serde_json::json!({"type": "hello", "protocol": 1, "token": WORKER_TOKEN, "name": "bench",
            "capacity": capacity, "tools": [{"name": "quick_w", "description": "A worker task that completes at once.",
            "inputSchema": {"type": "object"}, "taskSupport": "required", "resumable": false}]});
        tx.send(Message::text(hello.to_string())).await.expect("hello");
        let welcome = rx.next().await.expect("welcome").expect("welcome");
        assert!(welcome.to_text().unwrap_or("").contains("welcome"), "{welcome:?}");
        ready_tx.send(()).expect("ready");
        #[derive(Deserialize)]
        struct Frame<'a> {
            #[serde(rename = "type")]
            kind: &'a str,
            #[serde(default)]
            task: Option<&'a str>,
            #[serde(default)]
            attempt: u64,
        }
        while let Some(Ok(msg)) = rx.next().await {
            let mut answered = false;
            let mut msg = Some(msg);
            while let Some(m) = msg.take() {
                if let Message::Text(t) = &m {
                    let f: Frame = serde_json::from_str(t.as_str()).expect("a frame");
                    if f.kind == "assign" {
                        let reply = format!(
                            r#"{{"type":"result","task":"{}","attempt":{},"result":{{"content":[{{"type":"text","text":"ok"}}]}}}}"#,
                            f.task.unwrap_or_default(),
                            f.attempt
                        );
                        tx.feed(Message::text(reply)).await.expect("a result sent");
                        answered = true;
                    }
                }
                // More frames already read: answer them in the same group.
                if let Some(Some(Ok(next))) = rx.next().now_or_never() {
                    msg = Some(next);
                }
            }
            if answered {
                tx.flush().await.expect("flushed");
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the worker is ready");
    rt
}

/// Alternating rounds of call-complete on `quick` (in process) and on
/// `quick_w` (the worker), one server.
pub(crate) fn workers_overhead(lg: &tokio::runtime::Runtime) {
    println!(
        "# workers: one subtask server; `quick` (handler in process) and `quick_w` (the same, returned by \
         one Rust worker over the worker protocol, capacity 256, threads `{WORKER_THREADS}`), {LOOPS} \
         connections calling and polling, alternating rounds"
    );
    let host = start_subtask(&Store::Memory);
    let worker = start_worker(host.addr, 256);
    let mut pool = Pool::open(lg, host.addr, LOOPS);
    let mut inproc = Tally::default();
    let mut remote = Tally::default();
    // Warm-up of both.
    call_complete(lg, &host, &mut pool, "quick", warm_up());
    call_complete(lg, &host, &mut pool, "quick_w", warm_up());
    for _ in 0..ROUNDS {
        inproc.add(call_complete(lg, &host, &mut pool, "quick", window()));
        remote.add(call_complete(lg, &host, &mut pool, "quick_w", window()));
    }
    let worker_cpu = threads_cpu(&[WORKER_THREADS]);
    let per_task = |t: &Tally| t.cpu.as_secs_f64() * 1e6 / t.ops as f64;
    println!(
        "# in process: rounds {} tasks/s, server CPU {:.1} us per task; worker: rounds {} tasks/s, server CPU \
         {:.1} us per task, p50_us={} p99_us={}; the worker's own CPU over the whole run {:.2} s",
        inproc.rounds(),
        per_task(&inproc),
        remote.rounds(),
        per_task(&remote),
        remote.p(0.50),
        remote.p(0.99),
        worker_cpu.as_secs_f64()
    );
    println!(
        "worker_call_complete: subtask={:.0} in_process={:.0}",
        remote.rate(),
        inproc.rate()
    );
    println!(
        "worker_overhead_ratio: {:.2}",
        per_task(&remote) / per_task(&inproc)
    );
    drop(pool);
    drop(host);
    worker.shutdown_timeout(Duration::from_secs(2));
}

/// `python_worker_call_complete`: the same loop through one Python worker
/// process (`benches/workers/python_worker.py`, the SDK in `sdk/python`),
/// run with the venv `sdk/python/test.sh` makes (or
/// `SUBTASK_WORKERS_PYTHON`). Skipped, saying why, when that interpreter
/// is missing.
pub(crate) fn python_workers(lg: &tokio::runtime::Runtime) {
    let python = std::env::var("SUBTASK_WORKERS_PYTHON").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/.cache/workers/venv/bin/python").to_owned()
    });
    if !std::path::Path::new(&python).exists() {
        println!(
            "# python_worker_call_complete: skipped: no Python with the SDK at {python} (run sdk/python/test.sh \
             once, or set SUBTASK_WORKERS_PYTHON)"
        );
        return;
    }
    let host = start_subtask(&Store::Memory);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/workers/python_worker.py");
    let mut child = std::process::Command::new(&python)
        .args([
            script,
            "--url",
            &format!("ws://{}/workers", host.addr),
            "--token",
            WORKER_TOKEN,
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the Python worker");
    // It prints `ready` once welcomed (its tool registered).
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("its stdout")),
        &mut line,
    )
    .expect("the Python worker's first line");
    assert_eq!(line.trim(), "ready", "the Python worker did not start");
    let mut pool = Pool::open(lg, host.addr, LOOPS);
    let mut tally = Tally::default();
    call_complete(lg, &host, &mut pool, "quick_py", warm_up());
    for _ in 0..ROUNDS {
        tally.add(call_complete(lg, &host, &mut pool, "quick_py", window()));
    }
    println!(
        "# python worker (one process, capacity 256): rounds {} tasks/s, server CPU {:.1} us per task, p50_us={} p99_us={}",
        tally.rounds(),
        tally.cpu.as_secs_f64() * 1e6 / tally.ops as f64,
        tally.p(0.50),
        tally.p(0.99)
    );
    println!("python_worker_call_complete: subtask={:.0}", tally.rate());
    let _ = child.kill();
    let _ = child.wait();
    drop(pool);
    drop(host);
}

/// One call-complete window of `tool` on `host` (every connection of `pool`).
fn call_complete(
    lg: &tokio::runtime::Runtime,
    host: &Host,
    pool: &mut Pool,
    tool: &'static str,
    length: Duration,
) -> Window {
    let gets = Arc::new(AtomicUsize::new(0));
    measure(lg, host, pool, LOOPS, length, call_complete_loop_of(tool, gets))
}
