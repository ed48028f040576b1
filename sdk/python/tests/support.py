"""Test support: a real `subtask serve` process, an MCP client over plain
HTTP JSON-RPC (the 2026-07-28 wire, stdlib only), workers run in a thread
of the test process or as subprocesses."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from subtask_worker import Worker

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
TOKEN = "py-worker-secret"
LEASE_MS = 2000
PROTOCOL_VERSION = "2026-07-28"
TERMINAL = ("completed", "failed", "cancelled")
CAPS = {"extensions": {"io.modelcontextprotocol/tasks": {"pause": True}}}


def subtask_bin() -> str:
    path = os.environ.get("SUBTASK_BIN")
    if not path:
        raise RuntimeError("SUBTASK_BIN is not set: point it at a built subtask binary")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"SUBTASK_BIN={path} is not an executable file")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(what: str, pred: Callable[[], Any], timeout: float = 20.0, every: float = 0.02) -> Any:
    """Polls `pred` until it returns something truthy; fails naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def terminate(proc: "subprocess.Popen[Any]") -> None:
    """SIGTERM, then SIGKILL after 10 s; waits for the exit."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Server:
    """`subtask serve` on a free loopback port, taking workers: in memory,
    or on the store `store` names (e.g. `["--db", url]`, a cluster instance
    when the URL is PostgreSQL's)."""

    def __init__(self, log_dir: Path, port: int | None = None, name: str = "server",
                 store: list[str] | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        args = [subtask_bin(), "serve", *(store or ["--memory"]), "--listen", f"127.0.0.1:{self.port}",
                "--worker-token", TOKEN, "--worker-lease-ms", str(LEASE_MS)]
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        self.ws_url = f"ws://127.0.0.1:{self.port}/workers"
        self.mcp = Mcp(self.port)
        until("the server to listen", self._listening, timeout=30)

    def _listening(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"subtask serve exited with {self.proc.returncode}: {self.log()}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def metric(self, name: str) -> float:
        """A counter or gauge of `/metrics` (summed over its labels)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        terminate(self.proc)
        self._log.close()


class McpError(AssertionError):
    def __init__(self, method: str, error: dict[str, Any]) -> None:
        super().__init__(f"{method} failed: {error}")
        self.error = error


class Mcp:
    """An MCP client of the 2026-07-28 wire: stateless JSON-RPC POSTs to /mcp."""

    def __init__(self, port: int, caps: dict[str, Any] = CAPS) -> None:
        self.port = port
        self.caps = caps
        self.next_id = 1

    def send(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The JSON-RPC response to one request (JSON or an SSE stream)."""
        rid = self.next_id
        self.next_id += 1
        params = {**params, "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientCapabilities": self.caps,
        }}
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
            "Mcp-Method": method,
        }
        if method in ("tools/call", "prompts/get"):
            headers["Mcp-Name"] = params["name"]
        elif method.startswith("tasks/"):
            headers["Mcp-Name"] = params["taskId"]
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", "/mcp", body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read().decode()
            kind = resp.getheader("Content-Type") or ""
        finally:
            conn.close()
        if kind.startswith("text/event-stream"):
            for line in raw.splitlines():
                if line.startswith("data:"):
                    msg = json.loads(line[5:])
                    if msg.get("id") == rid:
                        return msg
            raise AssertionError(f"{method}: no response in the SSE stream: {raw[:2000]}")
        try:
            return json.loads(raw)
        except ValueError:
            raise AssertionError(f"{method}: HTTP {resp.status}, not JSON: {raw[:2000]}") from None

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        msg = self.send(method, params)
        if "error" in msg:
            raise McpError(method, msg["error"])
        return msg["result"]

    def error(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        msg = self.send(method, params)
        assert "error" in msg, f"{method} unexpectedly succeeded: {msg}"
        return msg["error"]

    def start_task(self, tool: str, arguments: dict[str, Any]) -> str:
        r = self.call("tools/call", {"name": tool, "arguments": arguments})
        assert r.get("resultType") == "task", f"tools/call {tool} did not make a task: {r}"
        return str(r["taskId"])

    def get(self, task: str) -> dict[str, Any]:
        return self.call("tasks/get", {"taskId": task})

    def until(self, task: str, what: str, pred: Callable[[dict[str, Any]], bool],
              timeout: float = 20.0) -> dict[str, Any]:
        last: dict[str, Any] = {}

        def check() -> dict[str, Any] | None:
            nonlocal last
            last = self.get(task)
            return last if pred(last) else None

        try:
            return until(f"task {task}: {what}", check, timeout, every=0.05)
        except AssertionError as e:
            raise AssertionError(f"{e}; last state: {json.dumps(last)[:3000]}") from None

    def until_status(self, task: str, status: str, timeout: float = 20.0) -> dict[str, Any]:
        def reached(t: dict[str, Any]) -> bool:
            if t["status"] != status and t["status"] in TERMINAL:
                raise AssertionError(f"task {task} ended {t['status']}, not {status}: {json.dumps(t)[:3000]}")
            return bool(t["status"] == status)

        return self.until(task, f"status {status}", reached, timeout)


def text_of(result: dict[str, Any] | None) -> str:
    for c in (result or {}).get("content") or []:
        if c.get("type") == "text":
            return str(c["text"])
    return ""


class WorkerThread:
    """Runs a Worker in its own event loop on a thread of the test process,
    so that the tests stay plain synchronous functions."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.loop = asyncio.new_event_loop()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"worker {worker.name}", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.worker.run())
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.error = e
        finally:
            self.loop.close()

    def wait_ready(self, timeout: float = 10.0) -> None:
        until(f"worker {self.worker.name} to be welcomed",
              lambda: self.worker.connected or self.error, timeout)
        if self.error:
            raise AssertionError(f"worker {self.worker.name} stopped: {self.error!r}")

    def stop(self) -> None:
        if self.thread.is_alive():
            try:
                self.loop.call_soon_threadsafe(self.worker.stop)
            except RuntimeError:  # the loop already closed
                pass
            self.thread.join(15)
        assert not self.thread.is_alive(), f"worker {self.worker.name} did not stop"


class WorkerProcess:
    """tests/worker_proc.py (or another script) as a subprocess."""

    def __init__(self, script: Path, args: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, str(script), *args], stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process cannot exit
        terminate(self.proc)
        self._log.close()


class WorkerProcesses:
    """The worker subprocesses a test started: all stopped at its end, their
    logs printed when it failed (the `start_process` fixtures)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[WorkerProcess] = []

    def start(self, script: Path, *args: str, name: str = "worker") -> WorkerProcess:
        p = WorkerProcess(script, list(args), self.log_dir / f"{name}.log")
        self.procs.append(p)
        return p

    def stop(self, failed: bool) -> None:
        for p in self.procs:
            p.stop()
        if failed:
            for p in self.procs:
                print(f"--- {p.log_path.name} ---\n{p.log()[-4000:]}")


# The failover workers (worker_proc.py) and what their handlers leave in
# their --dir: shared by test_failover.py and tests/workers/test_cluster.py.
FAILOVER_WORKER = HERE / "worker_proc.py"


def lines(path: Path) -> list[str]:
    """The lines of a trace file a handler appends to (none yet: [])."""
    return path.read_text().splitlines() if path.exists() else []


def start_failover_worker(start_process: Callable[..., WorkerProcess], server: Server, name: str,
                          d: Path) -> WorkerProcess:
    """worker_proc.py named `name` as a subprocess, connected to `server`, tracing into `d`."""
    return start_process(FAILOVER_WORKER, "--url", server.ws_url, "--token", TOKEN, "--name", name,
                         "--dir", str(d), name=f"worker-{name}")


def connected(server: Server, n: int) -> Callable[[], bool]:
    """Whether `n` workers are connected to `server` (for `until`)."""
    return lambda: server.metric("subtask_workers_connected") == n


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Keeps each test's call report on its item (`item.rep_call`), so the
    fixtures print the logs of a test that failed. A conftest imports it."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]


@pytest.fixture
def start_process(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., WorkerProcess]]:
    """Runs a Python script (a worker) as a subprocess until the test ends,
    printing its log when the test failed. A conftest imports it."""
    procs = WorkerProcesses(tmp_path)
    yield procs.start
    rep = getattr(request.node, "rep_call", None)
    procs.stop(rep is not None and rep.failed)
