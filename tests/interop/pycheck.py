"""Shared by the Python interop clients (py_mcp.py on mcp 2.x, py_mcp1.py on mcp 1.x).

Imports nothing from an MCP SDK (each client runs in its own venv with its own
SDK version). Output contract (read by scripts/interop.sh): one line per
check on stdout, `ok <check>` or `FAIL <check>: <reason>`; `trace ...` lines
(INTEROP_TRACE=1) are not counted.

The transport comes from the environment that scripts/interop.sh sets:
`SUBTASK_TRANSPORT=http` (default) with the server at `SUBTASK_URL`, or
`SUBTASK_TRANSPORT=stdio` with the client spawning `$SUBTASK_BIN serve --stdio
--memory` itself (the server's stderr appended to `SUBTASK_SERVER_LOG`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from pydantic import ValidationError

TRACE = os.environ.get("INTEROP_TRACE") == "1"

# The command a host's configuration names for this server over stdio.
STDIO_ARGS = ["serve", "--stdio", "--memory"]


def say(line: str) -> None:
    print(line, flush=True)


class CheckFailed(Exception):
    pass


class SetupError(Exception):
    pass


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise CheckFailed(reason)


@dataclass(frozen=True)
class Target:
    """Where the server is: a URL (http) or a binary the client spawns (stdio)."""

    transport: Literal["http", "stdio"]
    url: str | None = None
    server_bin: str | None = None
    server_log: str | None = None


def target_from_env() -> Target:
    transport = os.environ.get("SUBTASK_TRANSPORT", "http")
    if transport == "http":
        url = os.environ.get("SUBTASK_URL")
        if not url:
            raise SetupError("SUBTASK_URL is not set (e.g. http://127.0.0.1:PORT/mcp)")
        return Target("http", url=url)
    if transport == "stdio":
        server_bin = os.environ.get("SUBTASK_BIN")
        if not server_bin:
            raise SetupError("SUBTASK_BIN is not set (the subtask binary the client spawns)")
        return Target("stdio", server_bin=server_bin, server_log=os.environ.get("SUBTASK_SERVER_LOG") or None)
    raise SetupError(f"SUBTASK_TRANSPORT is {transport!r}, expected http or stdio")


def brief(e: BaseException) -> str:
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(map(str, err['loc'])) or '<root>'}: {err['msg']}" for err in e.errors())
    text = str(e).strip().replace("\n", " ")
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


def jsonrpc_error(e: BaseException) -> tuple[int, str] | None:
    """(code, message) of an SDK's JSON-RPC error exception (mcp 2.x MCPError, mcp 1.x McpError)."""
    code, message = getattr(e, "code", None), getattr(e, "message", None)
    if isinstance(code, int) and isinstance(message, str):
        return code, message
    error = getattr(e, "error", None)  # mcp 1.x: McpError.error is the ErrorData
    code, message = getattr(error, "code", None), getattr(error, "message", None)
    if isinstance(code, int) and isinstance(message, str):
        return code, message
    return None


def reason(e: BaseException) -> str:
    leaves = _leaves(e)
    for leaf in leaves:
        if isinstance(leaf, CheckFailed):
            return str(leaf)
    parts = []
    for leaf in leaves:
        rpc = jsonrpc_error(leaf)
        parts.append(f"JSON-RPC error {rpc[0]}: {rpc[1]}" if rpc else brief(leaf))
    return " | ".join(parts)


Check = tuple[str, Callable[[Any], Awaitable[None]], float]


async def run_checks(checks: Sequence[Check], env: Any, total_budget_s: float) -> bool:
    """Runs each check under its time limit (and the script's budget); prints its line."""
    all_ok = True
    deadline = time.monotonic() + total_budget_s
    for name, check, limit in checks:
        budget = min(limit, deadline - time.monotonic())
        if budget <= 0:
            say(f"FAIL {name}: not run (script time budget of {total_budget_s:.0f} s used up)")
            all_ok = False
            continue
        if TRACE:
            say(f"trace === {name}")
        try:
            with anyio.fail_after(budget):
                await check(env)
        except TimeoutError:
            say(f"FAIL {name}: timed out after {budget:.1f} s")
            all_ok = False
        except BaseException as e:  # noqa: BLE001 - every failure becomes a FAIL line
            if isinstance(e, KeyboardInterrupt | SystemExit):
                raise
            say(f"FAIL {name}: {reason(e)}")
            all_ok = False
        else:
            say(f"ok {name}")
    return all_ok
