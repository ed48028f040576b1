#!/usr/bin/env python3
"""Interop client: `subtask serve` through the last 1.x Python MCP SDK (mcp 1.30.0).

Runs in its own venv (requirements-mcp1.txt), on the 2025-11-25 wire
(`initialize`), over the transport of env `SUBTASK_TRANSPORT` (pycheck.py):
Streamable HTTP (`streamable_http_client`) or stdio (`stdio_client` spawning
`$SUBTASK_BIN serve --stdio --memory` itself, as a desktop host does). One
`ClientSession` serves every check (over stdio: one server process, whose
in-memory tasks live as long as the connection). Prints one line per check,
`ok <check>` or `FAIL <check>: <reason>`; exits non-zero if any failed.

Public API used: `ClientSession(read, write, elicitation_callback=...)`,
`initialize()`, `list_tools()`, `call_tool()`, and the SDK's 2025-11-25 tasks
client API `session.experimental` (deprecated in 1.x: "will be removed in mcp
2.0"): `call_tool_as_task(name, args, ttl=)`, `poll_task()` (honours
`pollInterval`), `get_task()`, `get_task_result(id, CallToolResult)`,
`list_tasks(cursor)`, `cancel_task()`. The 1.x types keep unknown fields
(`model_config = ConfigDict(extra="allow")`), so SEP-2268's `parentTaskId` /
`childTaskIds` are read from `GetTaskResult.model_extra` as the SDK parsed them.
"""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from importlib.metadata import version
from typing import Any, TextIO

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError

from pycheck import STDIO_ARGS, CheckFailed, SetupError, Target, expect, reason, run_checks, say, target_from_env

WIRE_VERSION = "2025-11-25"
TOOL = "fanout"
RELATED_TASK = "io.modelcontextprotocol/related-task"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
REQUEST_TIMEOUT_S = 10.0
TOTAL_BUDGET_S = 57.0


@dataclass
class Env:
    target: Target
    session: ClientSession | None = None
    init: types.InitializeResult | None = None
    root_id: str | None = None
    child_ids: list[str] = field(default_factory=list)
    elicitations: list[types.ElicitRequestParams] = field(default_factory=list)

    @property
    def s(self) -> ClientSession:
        if self.session is None:
            raise CheckFailed("no session (initialize failed, see setup)")
        return self.session


def structured(result: types.CallToolResult) -> dict[str, Any]:
    sc = result.structuredContent
    expect(isinstance(sc, dict), f"structuredContent is {sc!r}, expected an object")
    assert isinstance(sc, dict)
    return sc


def extra(model: Any, key: str) -> Any:
    return (model.model_extra or {}).get(key)


async def run_task(env: Env, arguments: dict[str, Any]) -> tuple[str, list[types.GetTaskResult]]:
    """A task-augmented tools/call polled to its end; returns its id and every status seen."""
    created = await env.s.experimental.call_tool_as_task(TOOL, arguments, ttl=60000)
    expect(isinstance(created, types.CreateTaskResult), f"tools/call answered {created!r}, expected a CreateTaskResult")
    seen = [status async for status in env.s.experimental.poll_task(created.task.taskId)]
    return created.task.taskId, seen


async def list_all(env: Env) -> list[types.Task]:
    tasks: list[types.Task] = []
    cursor: str | None = None
    for _ in range(100):
        page = await env.s.experimental.list_tasks(cursor)
        tasks.extend(page.tasks)
        cursor = page.nextCursor
        if not cursor:
            return tasks
    raise CheckFailed("tasks/list did not end within 100 pages")


async def check_negotiated_version(env: Env) -> None:
    init = env.init
    expect(init is not None, "no initialize result")
    assert init is not None
    expect(init.protocolVersion == WIRE_VERSION, f"initialize answered {init.protocolVersion!r}, expected {WIRE_VERSION!r}")
    expect(init.serverInfo.name == "subtask", f"serverInfo {init.serverInfo!r}")
    tasks = init.capabilities.tasks
    expect(
        tasks is not None and tasks.requests is not None and tasks.requests.tools is not None,
        f"capabilities.tasks {tasks!r}, expected requests.tools.call (task-augmented tools/call)",
    )
    tools = await env.s.list_tools()
    names = sorted(t.name for t in tools.tools)
    expect(TOOL in names, f"tools/list has {names}, expected {TOOL}")


async def check_sync_call(env: Env) -> None:
    result = await env.s.call_tool(TOOL, {"width": 0, "depth": 0, "steps": 1, "stepMs": 1})
    expect(not result.isError, f"isError result: {result.content}")
    sc = structured(result)
    expect(sc.get("path") == "0" and sc.get("nodes") == 1, f"structuredContent {sc}")


async def check_bad_arguments(env: Env) -> None:
    try:
        result = await env.s.call_tool(TOOL, {"width": 999})
    except McpError as e:
        raise CheckFailed(f"JSON-RPC error {e.error.code} ({e.error.message}) instead of a tool result with isError") from e
    expect(result.isError is True, f"isError is {result.isError}, content {result.content}")


async def check_task_completes(env: Env) -> None:
    tools = await env.s.list_tools()
    fanout = next((t for t in tools.tools if t.name == TOOL), None)
    support = fanout.execution.taskSupport if fanout is not None and fanout.execution is not None else None
    expect(support in ("optional", "required"), f"fanout execution.taskSupport {support!r}, expected optional or required")
    task_id, seen = await run_task(env, {"width": 2, "depth": 1, "steps": 2, "stepMs": 20})
    env.root_id = task_id
    expect(seen and seen[-1].status == "completed", f"statuses seen {[t.status for t in seen]}, expected to end completed")
    result = await env.s.experimental.get_task_result(task_id, types.CallToolResult)
    expect(not result.isError, f"isError result: {result.content}")
    nodes = structured(result).get("nodes")
    expect(nodes == 3, f"structuredContent.nodes == {nodes!r}, expected 3")


async def check_subtasks_visible(env: Env) -> None:
    expect(env.root_id is not None, "no root task (task-completes failed)")
    assert env.root_id is not None
    root = await env.s.experimental.get_task(env.root_id)
    kids = extra(root, "childTaskIds")
    expect(isinstance(kids, list) and len(kids) == 2, f"root childTaskIds {kids!r}, expected 2 ids")
    expect(extra(root, "parentTaskId") is None, f"the root has parentTaskId {extra(root, 'parentTaskId')!r}")
    for kid in kids:
        child = await env.s.experimental.get_task(kid)
        expect(child.taskId == kid, f"tasks/get {kid} answered {child.taskId}")
        expect(extra(child, "parentTaskId") == env.root_id, f"child {kid} parentTaskId {extra(child, 'parentTaskId')!r}")
        expect(child.status == "completed", f"child {kid} status {child.status}")
    env.child_ids = kids


async def check_list(env: Env) -> None:
    expect(env.root_id is not None, "no root task (task-completes failed)")
    ids = [t.taskId for t in await list_all(env)]
    expect(len(set(ids)) == len(ids), f"tasks/list repeated ids: {ids}")
    for task_id in [env.root_id, *env.child_ids]:
        expect(task_id in ids, f"task {task_id} not in tasks/list {ids}")


async def check_cancel(env: Env) -> None:
    created = await env.s.experimental.call_tool_as_task(TOOL, {"width": 0, "depth": 0, "steps": 200, "stepMs": 50})
    task_id = created.task.taskId
    expect(created.task.status not in TERMINAL, f"task already {created.task.status}")
    await env.s.experimental.cancel_task(task_id)
    seen = [status async for status in env.s.experimental.poll_task(task_id)]
    expect(seen[-1].status == "cancelled", f"task ended {seen[-1].status}, expected cancelled")


async def check_failed_task(env: Env) -> None:
    task_id, seen = await run_task(env, {"width": 0, "depth": 0, "steps": 1, "stepMs": 10, "failAt": "0"})
    expect(seen[-1].status == "failed", f"task ended {seen[-1].status}, expected failed")
    try:
        result = await env.s.experimental.get_task_result(task_id, types.CallToolResult)
    except McpError as e:
        expect(e.error.code == -32603, f"tasks/result error {e.error.code} ({e.error.message}), expected -32603")
        return
    raise CheckFailed(f"tasks/result of the failed task returned {result!r}, expected JSON-RPC error -32603")


async def check_input_round(env: Env) -> None:
    # 2025-11-25: the task goes input_required; the requestor calls tasks/result, on which
    # the server sends elicitation/create (related-task _meta) and then the result.
    env.elicitations.clear()
    created = await env.s.experimental.call_tool_as_task(
        TOOL, {"width": 0, "depth": 0, "steps": 2, "stepMs": 20, "inputAt": "0"}
    )
    task_id = created.task.taskId
    statuses: list[str] = []
    async for status in env.s.experimental.poll_task(task_id):
        statuses.append(status.status)
        if status.status == "input_required":
            break
    expect(statuses[-1] == "input_required", f"statuses {statuses}, expected input_required")
    result = await env.s.experimental.get_task_result(task_id, types.CallToolResult)
    expect(len(env.elicitations) == 1, f"elicitation callback ran {len(env.elicitations)} times, expected 1")
    params = env.elicitations[0]
    meta = params.meta.model_dump(by_alias=True) if params.meta is not None else {}
    related = (meta.get(RELATED_TASK) or {}).get("taskId")
    expect(related == task_id, f"elicitation/create _meta {meta}, expected {RELATED_TASK}.taskId = {task_id}")
    schema = getattr(params, "requestedSchema", None) or {}
    confirm = (schema.get("properties") or {}).get("confirm")
    expect(isinstance(confirm, dict) and confirm.get("type") == "boolean", f"requestedSchema {schema}")
    expect(not result.isError, f"isError result: {result.content}")
    expect(structured(result).get("nodes") == 1, f"structuredContent {result.structuredContent}")
    final = await env.s.experimental.get_task(task_id)
    expect(final.status == "completed", f"tasks/get after the answer: {final.status}, expected completed")


CHECKS = [
    ("negotiated-version", check_negotiated_version, 7),
    ("sync-call", check_sync_call, 7),
    ("bad-arguments", check_bad_arguments, 7),
    ("task-completes", check_task_completes, 10),
    ("subtasks-visible", check_subtasks_visible, 7),
    ("list", check_list, 7),
    ("cancel", check_cancel, 10),
    ("failed-task", check_failed_task, 10),
    ("input-round", check_input_round, 15),
]


def connection(target: Target, errlog: TextIO) -> Any:
    if target.transport == "stdio":
        assert target.server_bin is not None
        return stdio_client(StdioServerParameters(command=target.server_bin, args=STDIO_ARGS), errlog=errlog)
    assert target.url is not None
    return streamable_http_client(target.url)


async def run(target: Target) -> bool:
    env = Env(target=target)

    async def confirm(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        env.elicitations.append(params)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with AsyncExitStack() as stack:
        errlog = stack.enter_context(
            open(target.server_log, "a", encoding="utf-8") if target.server_log else open(os.devnull, "w")
        )
        setup_ok = True
        try:
            streams = await stack.enter_async_context(connection(target, errlog))
            read, write = streams[0], streams[1]
            session = await stack.enter_async_context(
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=timedelta(seconds=REQUEST_TIMEOUT_S),
                    elicitation_callback=confirm,
                    client_info=types.Implementation(name="subtask-interop-python", version=f"mcp-{version('mcp')}"),
                )
            )
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                env.init = await session.initialize()
            env.session = session
        except Exception as e:  # noqa: BLE001 - every check then reports the missing session
            say(f"FAIL setup: connect and initialize failed: {reason(e)}")
            setup_ok = False
        return await run_checks(CHECKS, env, TOTAL_BUDGET_S) and setup_ok


def main() -> int:
    try:
        target = target_from_env()
    except SetupError as e:
        say(f"FAIL setup: {e}")
        return 2
    # The experimental tasks API warns that it is deprecated (mcp 2.0 removed it); that is known.
    warnings.simplefilter("ignore", DeprecationWarning)
    return 0 if anyio.run(run, target) else 1


if __name__ == "__main__":
    sys.exit(main())
