"""Workers in a cluster (docs/workers.md, "Workers in a cluster"): two
`subtask serve` instances on one PostgreSQL database, every worker
connected to the instance that does NOT hold the tree. The tree is created
on instance `a` (which holds it and runs its proxies); its worker tasks run
on workers connected to instance `b`, the news between the two passing
through the database.

- A worker SIGKILLed mid-tree, with a second worker connected: the tree
  completes on the second, and no subtask or step that had finished ran
  again.
- A worker stopped (SIGSTOP) past its lease, then continued (SIGCONT):
  its task goes on on another worker, and its late report is refused.

Needs SUBTASK_TEST_PG (a PostgreSQL server's maintenance URL, which
scripts/pg.sh exports and scripts/test.sh starts) and the server binaries'
psql (SUBTASK_TEST_PG_BIN) to make a fresh database; fails without them."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest
from support import Server, WorkerProcess, connected, lines, start_failover_worker, text_of, until

Start = Callable[..., WorkerProcess]


@pytest.fixture
def db_url() -> Iterator[str]:
    base = os.environ.get("SUBTASK_TEST_PG")
    bindir = os.environ.get("SUBTASK_TEST_PG_BIN")
    if not base or not bindir:
        pytest.fail("SUBTASK_TEST_PG and SUBTASK_TEST_PG_BIN are not set: run under scripts/pg.sh "
                    "(scripts/test.sh starts a PostgreSQL server)")
    name = "workers_" + uuid.uuid4().hex[:12]
    psql = [str(Path(bindir) / "psql"), base, "-v", "ON_ERROR_STOP=1", "-q", "-c"]
    subprocess.run([*psql, f"CREATE DATABASE {name}"], check=True)
    yield base.rsplit("/", 1)[0] + "/" + name
    subprocess.run([*psql, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False)


@pytest.fixture
def cluster(db_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Server, Server]]:
    store = ["--db", db_url, "--lease", "2"]
    a = Server(tmp_path, name="instance-a", store=store)
    b = Server(tmp_path, name="instance-b", store=store)
    yield a, b
    for s in (a, b):
        s.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for s in (a, b):
            print(f"--- {s.log_path.name} ---\n{s.log()}")


def listed(server: Server, tool: str) -> Callable[[], bool]:
    return lambda: tool in [t["name"] for t in server.mcp.call("tools/list", {})["tools"]]


def worker_on_b(a: Server, b: Server, start_process: Start, d: Path, tool: str) -> WorkerProcess:
    """Worker A connected to instance b, once instance a lists `tool`; no
    worker is connected to a."""
    worker = start_failover_worker(start_process, b, "A", d)
    until("worker A to connect to instance b", connected(b, 1))
    until("instance a to list the tool b's worker serves", listed(a, tool))
    assert a.metric("subtask_workers_connected") == 0, "no worker is connected to the tree's holder"
    return worker


def parent_with_child_done(a: Server, d: Path) -> tuple[str, list[str]]:
    """A `replay_parent` tree started on a, once its child completed: the
    root and the children."""
    root = a.mcp.start_task("replay_parent", {})
    until("A's handler to spawn its child", lambda: lines(d / "parent.log"), timeout=30)
    child = a.mcp.get(root)["childTaskIds"]
    assert len(child) == 1
    a.mcp.until_status(child[0], "completed")
    return root, child


def check_replayed_by_worker_b(d: Path, child: list[str], done: dict) -> None:
    """The tree ended on B, replaying A's attempt: nothing finished ran again."""
    assert text_of(done["result"]) == "parent done on B after the child said 'child ok'"
    assert lines(d / "attempts.log") == ["A attempt=1 replay=False", "B attempt=2 replay=True"]
    assert lines(d / "steps.log") == ["a"], "step a ran once"
    assert lines(d / "child.log") == ["child ran on A"], "the child's handler ran once"
    assert lines(d / "parent.log") == [f"A spawned {child[0]}", f"B spawned {child[0]}"], \
        "the replay's spawn gave the same subtask back"
    assert done["childTaskIds"] == child, "nothing appended twice"


def test_a_worker_killed_on_the_other_instance_its_tree_completes_on_another_and_redoes_nothing(
    cluster: tuple[Server, Server], start_process: Start, tmp_path: Path
) -> None:
    a, b = cluster
    worker_a = worker_on_b(a, b, start_process, tmp_path, "replay_parent")
    root, child = parent_with_child_done(a, tmp_path)
    start_failover_worker(start_process, b, "B", tmp_path)
    until("worker B to connect to instance b", connected(b, 2))

    worker_a.signal(signal.SIGKILL)
    worker_a.proc.wait(10)
    (tmp_path / "release").touch()
    done = a.mcp.until_status(root, "completed", timeout=30)

    check_replayed_by_worker_b(tmp_path, child, done)
    # The other instance reads the same tree from the database.
    assert b.mcp.get(root)["status"] == "completed"


def test_a_stalled_worker_on_the_other_instance_loses_its_task_and_its_late_report_is_refused(
    cluster: tuple[Server, Server], start_process: Start, tmp_path: Path
) -> None:
    a, b = cluster
    worker_a = worker_on_b(a, b, start_process, tmp_path, "stall")
    task = a.mcp.start_task("stall", {})
    until("A's handler to block", lambda: (tmp_path / "stalling.A").exists(), timeout=30)
    worker_a.signal(signal.SIGSTOP)
    try:
        start_failover_worker(start_process, b, "B", tmp_path)
        until("B to get the task once A's lease ended",
              lambda: "B attempt=2 replay=True" in lines(tmp_path / "stall.log"), timeout=15)
        assert b.metric("subtask_worker_lease_losses_total") == 1
    finally:
        worker_a.signal(signal.SIGCONT)
    until("A's late report to be refused", lambda: "refused: stale_attempt" in worker_a.log(), timeout=10)
    assert "revoke of task " + task in worker_a.log()
    (tmp_path / "release").touch()
    done = a.mcp.until_status(task, "completed", timeout=30)
    assert text_of(done["result"]) == "completed on B attempt 2"
    assert lines(tmp_path / "stall.log") == ["A attempt=1 replay=False", "B attempt=2 replay=True"]


def test_a_task_whose_last_worker_elsewhere_left_comes_back_and_runs_on_a_worker_of_its_holder(
    cluster: tuple[Server, Server], start_process: Start, tmp_path: Path
) -> None:
    a, b = cluster
    worker_a = worker_on_b(a, b, start_process, tmp_path, "replay_parent")
    root, child = parent_with_child_done(a, tmp_path)

    worker_a.signal(signal.SIGKILL)
    worker_a.proc.wait(10)
    # No worker of b serves the tool any more: the task comes back to its
    # holder and waits there, saying so (b's word that the worker left, or
    # a's look at what b serves, whichever comes first); a worker of the
    # holder then runs it.
    a.mcp.until(root, "waiting for another attempt",
                lambda t: "waiting for a worker to run it again (attempt 2)" in (t.get("statusMessage") or ""),
                timeout=15)
    start_failover_worker(start_process, a, "B", tmp_path)
    (tmp_path / "release").touch()
    done = a.mcp.until_status(root, "completed", timeout=30)

    check_replayed_by_worker_b(tmp_path, child, done)
