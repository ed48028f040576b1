"""Shared by the cross-language worker tests: the Python SDK suite's
helpers (sdk/python/tests/support.py: a real `subtask serve`, workers on
threads, an MCP client over HTTP). SUBTASK_BIN and NODE22 are required."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python" / "tests"))

from support import pytest_runtest_makereport  # noqa: E402, F401 (the hook that keeps call reports)


def pytest_configure(config: pytest.Config) -> None:
    for var in ("SUBTASK_BIN", "NODE22"):
        if not os.environ.get(var):
            raise pytest.UsageError(f"{var} is not set (scripts/workers.sh sets it)")




@pytest.fixture
def start_process(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """Runs a Python script (a worker) as a subprocess until the test ends."""
    from support import WorkerProcesses

    procs = WorkerProcesses(tmp_path)
    yield procs.start
    rep = getattr(request.node, "rep_call", None)
    procs.stop(rep is not None and rep.failed)
