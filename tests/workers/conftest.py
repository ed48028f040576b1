"""Shared by the cross-language worker tests: the Python SDK suite's
helpers (sdk/python/tests/support.py: a real `subtask serve`, workers on
threads, an MCP client over HTTP). SUBTASK_BIN and NODE22 are required."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "sdk" / "python" / "tests"))

from support import pytest_runtest_makereport, start_process  # noqa: E402, F401 (the hook and the fixture, shared)


def pytest_configure(config: pytest.Config) -> None:
    for var in ("SUBTASK_BIN", "NODE22"):
        if not os.environ.get(var):
            raise pytest.UsageError(f"{var} is not set (scripts/workers.sh sets it)")
