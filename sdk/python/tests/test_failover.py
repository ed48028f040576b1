"""Workers as subprocesses that die or stall: a task goes on on another
worker, replaying what was done (docs/workers.md, "Replay")."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Callable

from support import Server, WorkerProcess, connected, lines, start_failover_worker, text_of, until

Start = Callable[..., WorkerProcess]


def test_after_a_worker_is_killed_its_task_replays_on_another_and_redoes_nothing(
    server: Server, start_process: Start, tmp_path: Path
) -> None:
    mcp = server.mcp
    a = start_failover_worker(start_process, server, "A", tmp_path)
    until("worker A to connect", connected(server, 1))
    root = mcp.start_task("replay_parent", {})
    until("A's handler to spawn its child", lambda: lines(tmp_path / "parent.log"))
    child = mcp.get(root)["childTaskIds"]
    assert len(child) == 1
    mcp.until_status(child[0], "completed")
    start_failover_worker(start_process, server, "B", tmp_path)
    until("worker B to connect", connected(server, 2))

    a.signal(signal.SIGKILL)
    a.proc.wait(10)
    (tmp_path / "release").touch()
    done = mcp.until_status(root, "completed")

    assert text_of(done["result"]) == "parent done on B after the child said 'child ok'"
    assert lines(tmp_path / "attempts.log") == ["A attempt=1 replay=False", "B attempt=2 replay=True"]
    assert lines(tmp_path / "steps.log") == ["a"], "step a ran once"
    assert lines(tmp_path / "child.log") == ["child ran on A"], "the child's handler ran once"
    assert lines(tmp_path / "parent.log") == [f"A spawned {child[0]}", f"B spawned {child[0]}"], \
        "the replay's spawn gave the same subtask back"
    assert done["childTaskIds"] == child, "nothing appended twice"


def test_a_stalled_worker_loses_its_task_and_its_late_reports_are_refused(
    server: Server, start_process: Start, tmp_path: Path
) -> None:
    mcp = server.mcp
    a = start_failover_worker(start_process, server, "A", tmp_path)
    until("worker A to connect", connected(server, 1))
    task = mcp.start_task("stall", {})
    until("A's handler to block", lambda: (tmp_path / "stalling.A").exists())
    a.signal(signal.SIGSTOP)
    try:
        start_failover_worker(start_process, server, "B", tmp_path)
        until("B to get the task once A's lease ended",
              lambda: "B attempt=2 replay=True" in lines(tmp_path / "stall.log"), timeout=15)
        assert server.metric("subtask_worker_lease_losses_total") == 1
    finally:
        a.signal(signal.SIGCONT)
    until("A's late report to be refused", lambda: "refused: stale_attempt" in a.log(), timeout=10)
    assert "revoke of task " + task in a.log()
    assert server.metric("subtask_worker_refused_reports_total") >= 1
    (tmp_path / "release").touch()
    done = mcp.until_status(task, "completed")
    assert text_of(done["result"]) == "completed on B attempt 2"
    assert lines(tmp_path / "stall.log") == ["A attempt=1 replay=False", "B attempt=2 replay=True"]
