"""Fixtures: a real `subtask serve` per test, workers in threads or
subprocesses, all stopped at the end of the test. SUBTASK_BIN is required."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable, Iterator

import pytest
from support import Server, WorkerThread
from support import pytest_runtest_makereport, start_process  # noqa: F401 (the hook and the fixture, shared)

from subtask_worker import Worker


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("SUBTASK_BIN")
    if not path:
        raise pytest.UsageError(
            "SUBTASK_BIN is not set: the suite runs against a real `subtask serve`; "
            "build it (cargo build) and run SUBTASK_BIN=target/debug/subtask sdk/python/test.sh"
        )
    if not os.access(path, os.X_OK):
        raise pytest.UsageError(f"SUBTASK_BIN={path} is not an executable file")
    logging.getLogger("subtask_worker").setLevel(logging.INFO)


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"--- server log ({s.log_path}) ---\n{s.log()}")




@pytest.fixture
def start_worker(server: Server) -> Iterator[Callable[[Worker], WorkerThread]]:
    """Runs a Worker on a thread of this process until the test ends."""
    threads: list[WorkerThread] = []

    def start(worker: Worker) -> WorkerThread:
        t = WorkerThread(worker)
        threads.append(t)
        t.wait_ready()
        return t

    yield start
    for t in threads:
        t.stop()
