#!/usr/bin/env python3
"""Interop client: drives `subtask serve` through the released Python MCP SDK.

    py_mcp.py [--mode auto|legacy]

With `mcp==2.3.0` (see requirements.txt), in the SDK's `Client(mode=...)`:
`auto` (the SDK's default) probes `server/discover` and speaks protocol
2026-07-28; `legacy` forces the `initialize` handshake (2025-11-25). The
transport is env `SUBTASK_TRANSPORT`: `http` (default) talks to the server at
env `SUBTASK_URL` (e.g. http://127.0.0.1:PORT/mcp) over Streamable HTTP;
`stdio` makes the SDK spawn `$SUBTASK_BIN serve --stdio --memory` itself
(`StdioServerParameters` + `stdio_client`, the server's stderr appended to env
`SUBTASK_SERVER_LOG`), the way a desktop host does. Prints one line per check,
`ok <check>` or `FAIL <check>: <reason>`, and exits non-zero if any check
failed. With `INTEROP_TRACE=1` over HTTP every JSON message sent and received
is printed as well (`trace -> ...` / `trace <- ...`), taken from httpx event
hooks on the HTTP client handed to the SDK's transport: they only observe.

The task checks share one client (one server process over stdio, where a
server's in-memory tasks live as long as its connection); the plain checks
each open their own.

`legacy` mode runs the checks this SDK can do on the 2025-11-25 wire
(negotiated version, sync call, bad arguments, a plain call's task in
`tasks/list`): mcp 2.3.0 cannot start a task there. Its method tables leave
`tasks/*` out of 2025-11-25 on purpose ("tasks/* deliberately absent",
mcp_types/methods.py), `ClientSession.call_tool` takes no `task` parameter,
and `send_request` validates a 2025-11-25 `tools/call` result as a
`CallToolResult`, so a task-augmented call's `CreateTaskResult` fails with
"content: Field required" (the server did create the task). It keeps the
2025-11-25 request and result models (`ListTasksRequest`, ...), which
`ClientSession.send_request` sends.

The SDK has no tasks API. The tasks extension (`io.modelcontextprotocol/tasks`)
is taught to it the way the SDK intends users to do it, through its public
extension point only:

* `TasksExtension(ClientExtension)` advertises `io.modelcontextprotocol/tasks:
  {}` in the per-request client capabilities and claims `resultType: "task"`
  results of `tools/call` with a `ResultClaim`, whose resolver polls the task
  to its end (so `Client.call_tool` stays transparent);
* `tasks/get`, `tasks/update` and `tasks/cancel` are user-defined `Request` /
  `Result` models sent with `ClientSession.send_request` (`name_param =
  "taskId"` makes the SDK set the `Mcp-Name` header, as the extension asks).

No SDK internals are patched, no capability is rewritten, no HTTP is built by
hand. Assertions expect the specified behaviour of the server, never a known
bug of it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

import anyio
import httpx2
from mcp.client import ClaimContext, Client, ClientExtension, ClientRequestContext, ClientSession, ResultClaim
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    Implementation,
    InputRequest,
    InputRequests,
    InputResponses,
    ListTasksRequest,
    ListTasksResult,
    PaginatedRequestParams,
    Request,
    RequestParams,
    Result,
)
from mcp_types import methods as mcp_methods
from pydantic import ValidationError, model_validator

from pycheck import (
    STDIO_ARGS,
    TRACE,
    CheckFailed,
    brief,
    SetupError,
    Target,
    expect,
    reason,
    run_checks,
    say,
    target_from_env,
)

WIRE_VERSION = "2026-07-28"
LEGACY_VERSION = "2025-11-25"  # what mode="legacy" negotiates with a 2025-11-25 server
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TOOL = "fanout"

POLL_CAP_MS = 200  # honour pollIntervalMs, but never wait longer than this between polls
POLL_FLOOR_MS = 10  # and never spin
REQUEST_TIMEOUT_S = 5.0  # per JSON-RPC request
TOTAL_BUDGET_S = 57.0  # the whole script

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


# ----- the tasks extension, written against the SDK's public API -----------------------


class _TaskFields(Result):
    """The `Task` shape of the tasks extension (with SEP-2268 subtask links)."""

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None  # required key, may be null
    poll_interval_ms: int | None = None
    parent_task_id: str | None = None
    child_task_ids: list[str] | None = None


class CreateTaskResult(_TaskFields):
    """`tools/call` answered with a task handle (`resultType: "task"`)."""

    result_type: Literal["task"]


class GetTaskResult(_TaskFields):
    """`tasks/get`: a `DetailedTask`; `resultType` MUST be "complete"."""

    result_type: Literal["complete"]
    result: dict[str, Any] | None = None
    error: ErrorData | None = None
    input_requests: InputRequests | None = None

    @model_validator(mode="after")
    def _payload_matches_status(self) -> GetTaskResult:
        if self.status == "completed" and self.result is None:
            raise ValueError("a completed task must inline `result`")
        if self.status == "failed" and self.error is None:
            raise ValueError("a failed task must inline `error`")
        if self.status == "input_required" and not self.input_requests:
            raise ValueError("an input_required task must carry `inputRequests`")
        return self


class TaskAckResult(Result):
    """`tasks/update` / `tasks/cancel`: an empty acknowledgement with `resultType: "complete"`."""

    result_type: Literal["complete"]


class TaskIdParams(RequestParams):
    task_id: str


class UpdateTaskParams(TaskIdParams):
    input_responses: InputResponses


class GetTaskRequest(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class UpdateTaskRequest(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class CancelTaskRequest(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class TaskFailedError(MCPError):
    """A task ended `failed`; carries the final task and its JSON-RPC error."""

    def __init__(self, task: GetTaskResult) -> None:
        assert task.error is not None
        super().__init__(task.error.code, task.error.message, task.error.data)
        self.task = task


class TaskCancelledError(RuntimeError):
    """A task ended `cancelled`."""

    def __init__(self, task: GetTaskResult) -> None:
        super().__init__(f"task {task.task_id} was cancelled")
        self.task = task


async def tasks_get(session: ClientSession, task_id: str, timeout: float | None = None) -> GetTaskResult:
    return await session.send_request(
        GetTaskRequest(params=TaskIdParams(task_id=task_id)), GetTaskResult, request_read_timeout_seconds=timeout
    )


async def tasks_update(
    session: ClientSession, task_id: str, responses: InputResponses, timeout: float | None = None
) -> TaskAckResult:
    return await session.send_request(
        UpdateTaskRequest(params=UpdateTaskParams(task_id=task_id, input_responses=responses)),
        TaskAckResult,
        request_read_timeout_seconds=timeout,
    )


async def tasks_cancel(session: ClientSession, task_id: str, timeout: float | None = None) -> TaskAckResult:
    return await session.send_request(
        CancelTaskRequest(params=TaskIdParams(task_id=task_id)), TaskAckResult, request_read_timeout_seconds=timeout
    )


def poll_delay(task: _TaskFields) -> float:
    ms = task.poll_interval_ms if task.poll_interval_ms is not None else POLL_CAP_MS
    return max(POLL_FLOOR_MS, min(ms, POLL_CAP_MS)) / 1000


async def wait_for(session: ClientSession, task_id: str, statuses: Iterable[str]) -> GetTaskResult:
    """Poll `tasks/get` until the task reaches one of `statuses`."""
    wanted = frozenset(statuses)
    while True:
        task = await tasks_get(session, task_id)
        if task.status in wanted:
            return task
        await anyio.sleep(poll_delay(task))


def completed_result(task: GetTaskResult) -> CallToolResult:
    """The inlined result of a completed tools/call task, as the SDK's `CallToolResult`.

    Parsed the way the SDK parses a `tools/call` result on a 2026-07-28
    session: the wire surface first (where `resultType` is required), then the
    version-free model.
    """
    assert task.result is not None
    parsed = mcp_methods.parse_server_result("tools/call", WIRE_VERSION, task.result)
    if not isinstance(parsed, CallToolResult):
        raise ValueError(f"the inlined result is a {type(parsed).__name__}, not a CallToolResult")
    return parsed


async def answer_input_requests(session: ClientSession, requests: dict[str, InputRequest]) -> InputResponses:
    """Answer embedded input requests through the client's own callbacks (elicitation, ...)."""
    responses: InputResponses = {}
    for key, request in requests.items():
        ctx = ClientRequestContext(
            session=session, request_id=key, meta=request.params.meta if request.params else None
        )
        answer = await session.dispatch_input_request(ctx, request)
        if isinstance(answer, ErrorData):
            raise MCPError.from_error_data(answer)
        responses[key] = answer
    return responses


class TasksExtension(ClientExtension):
    """`io.modelcontextprotocol/tasks` for the SDK's `Client`.

    Advertises `{}` (no settings: no steer, no pause) and claims
    `resultType: "task"`; the resolver polls the task, answers its input
    requests through the client's callbacks with `tasks/update`, and returns
    the inlined `CallToolResult`, or raises `TaskFailedError` /
    `TaskCancelledError`.
    """

    identifier = TASKS_EXTENSION

    def claims(self) -> tuple[ResultClaim[CreateTaskResult], ...]:
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve),)

    @staticmethod
    async def _resolve(handle: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        answered: set[str] = set()
        while True:
            task = await tasks_get(ctx.session, handle.task_id, ctx.read_timeout_seconds)
            if task.status == "completed":
                return completed_result(task)
            if task.status == "failed":
                raise TaskFailedError(task)
            if task.status == "cancelled":
                raise TaskCancelledError(task)
            if task.status == "input_required" and task.input_requests:
                pending = {k: r for k, r in task.input_requests.items() if k not in answered}
                if pending:
                    responses = await answer_input_requests(ctx.session, pending)
                    await tasks_update(ctx.session, handle.task_id, responses, ctx.read_timeout_seconds)
                    answered.update(pending)
            await anyio.sleep(poll_delay(task))


# ----- tracing (observe only) ----------------------------------------------------------


def _trace_hooks() -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    async def on_request(request: httpx2.Request) -> None:
        body = (await request.aread()).decode("utf-8", "replace")
        heads = " ".join(
            f"{h}={request.headers[h]}"
            for h in ("mcp-protocol-version", "mcp-method", "mcp-name")
            if h in request.headers
        )
        say(f"trace -> {request.method} {heads} {body}".rstrip())

    async def on_response(response: httpx2.Response) -> None:
        ctype = response.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            # Reading caches the body on the response; the SDK's own read gets the same bytes.
            body = (await response.aread()).decode("utf-8", "replace")
            say(f"trace <- HTTP {response.status_code} {body}")
        elif ctype.startswith("text/event-stream"):
            say(f"trace <- HTTP {response.status_code} (SSE stream; events not shown)")
        else:
            say(f"trace <- HTTP {response.status_code} content-type={ctype!r} (no JSON body)")

    return {"request": [on_request], "response": [on_response]}


# ----- checks ---------------------------------------------------------------------------


@dataclass
class Env:
    mode: Literal["auto", "legacy"]
    target: Target
    http: httpx2.AsyncClient | None = None
    server_log: TextIO | None = None
    root_task: GetTaskResult | None = None
    elicitations: list[ElicitRequestParams] = field(default_factory=list)
    shared_tasks_client: Client | None = None

    def connection(self) -> Any:
        """The SDK transport for one connection (over stdio: one server process)."""
        if self.target.transport == "stdio":
            assert self.target.server_bin is not None
            server = StdioServerParameters(command=self.target.server_bin, args=STDIO_ARGS)
            return stdio_client(server, errlog=self.server_log or sys.stderr)
        assert self.target.url is not None and self.http is not None
        return streamable_http_client(self.target.url, http_client=self.http)

    def new_client(self, *, tasks: bool) -> Client:
        async def confirm(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
            self.elicitations.append(params)
            return ElicitResult(action="accept", content={"confirm": True})

        return Client(
            self.connection(),
            mode=self.mode,
            read_timeout_seconds=REQUEST_TIMEOUT_S,
            client_info=Implementation(name="subtask-interop-python", version=f"mcp-{_sdk_version()}"),
            extensions=[TasksExtension()] if tasks else None,
            elicitation_callback=confirm if tasks else None,
        )

    @asynccontextmanager
    async def client(self, *, tasks: bool) -> AsyncIterator[Client]:
        """A plain client of its own, or the task checks' shared client (opened by `run`)."""
        if tasks:
            if self.shared_tasks_client is None:
                raise CheckFailed("the shared client of the task checks could not connect (see setup)")
            yield self.shared_tasks_client
            return
        async with self.new_client(tasks=False) as client:
            yield client

    def expect_era(self, client: Client) -> None:
        if self.mode == "legacy":
            expect(
                client.protocol_version == LEGACY_VERSION,
                f"negotiated protocol version {client.protocol_version!r}, expected {LEGACY_VERSION!r} via initialize",
            )
        else:
            expect_modern(client)


def _sdk_version() -> str:
    from importlib.metadata import version

    return version("mcp")


def expect_modern(client: Client) -> None:
    expect(
        client.protocol_version == WIRE_VERSION,
        f"negotiated protocol version {client.protocol_version!r}, expected {WIRE_VERSION!r} via server/discover",
    )


def structured(result: CallToolResult) -> dict[str, Any]:
    sc = result.structured_content
    expect(isinstance(sc, dict), f"structuredContent is {sc!r}, expected an object")
    return sc


async def start_task(client: Client, arguments: dict[str, Any]) -> CreateTaskResult:
    handle = await client.session.call_tool(TOOL, arguments, allow_claimed=True)
    expect(
        isinstance(handle, CreateTaskResult),
        f"tools/call {json.dumps(arguments)} answered a {type(handle).__name__}, expected a task handle "
        '(resultType "task")',
    )
    assert isinstance(handle, CreateTaskResult)
    return handle


async def check_sync_call(env: Env) -> None:
    async with env.client(tasks=False) as client:
        env.expect_era(client)
        result = await client.call_tool(TOOL, {"width": 0, "depth": 0, "steps": 1, "stepMs": 1})
        expect(isinstance(result, CallToolResult), f"got {type(result).__name__}")
        expect(not result.is_error, f"isError result: {result.content}")
        sc = structured(result)
        expect(sc.get("path") == "0" and sc.get("nodes") == 1, f"structuredContent {sc}")


async def check_task_completes(env: Env) -> None:
    problems: list[str] = []  # every problem found is reported, not just the first
    async with env.client(tasks=True) as client:
        try:
            expect_modern(client)
            settings = (client.server_capabilities.extensions or {}).get(TASKS_EXTENSION)
            if settings != {}:
                problems.append(
                    f"server/discover advertised {TASKS_EXTENSION} as {json.dumps(settings)}; "
                    "expected exactly {} for a client that declared {} (no steer, no pause)"
                )
            handle = await start_task(client, {"width": 2, "depth": 1, "steps": 2, "stepMs": 20})
            task = await wait_for(client.session, handle.task_id, TERMINAL)
            env.root_task = task
            expect(task.status == "completed", f"task ended {task.status}: {task.error or task.status_message}")
            try:
                result = completed_result(task)
            except ValidationError as e:
                problems.append(f"inlined result is not a 2026-07-28 CallToolResult: {brief(e)}")
            else:
                expect(not result.is_error, f"isError result: {result.content}")
                nodes = structured(result).get("nodes")
                expect(nodes == 3, f"structuredContent.nodes == {nodes!r}, expected 3")
        except CheckFailed as e:
            problems.append(str(e))
        expect(not problems, "; ".join(problems))


async def check_subtasks_followed(env: Env) -> None:
    root = env.root_task
    expect(root is not None, "no root task (task-completes did not get one)")
    assert root is not None
    kids = root.child_task_ids or []
    expect(len(kids) == 2, f"root childTaskIds {kids!r}, expected 2 ids")
    ordered: list[GetTaskResult] = []
    async with env.client(tasks=True) as client:

        async def follow(task: GetTaskResult) -> None:
            for child_id in task.child_task_ids or []:
                child = await wait_for(client.session, child_id, TERMINAL)
                expect(
                    child.parent_task_id == task.task_id,
                    f"child {child_id} has parentTaskId {child.parent_task_id!r}, expected {task.task_id}",
                )
                expect(child.status == "completed", f"child {child_id} ended {child.status}")
                await follow(child)
            ordered.append(task)  # SEP-2268: children in childTaskIds order, then the parent

        await follow(root)
    try:
        paths = [structured(completed_result(t)).get("path") for t in ordered]
    except ValidationError as e:
        raise CheckFailed(f"a subtask's inlined result is not a 2026-07-28 CallToolResult: {brief(e)}") from e
    if TRACE:
        say(f"trace subtasks in SEP-2268 order: {[(t.task_id, p) for t, p in zip(ordered, paths)]}")
    expect(paths == ["0.0", "0.1", "0"], f"results in SEP-2268 order have paths {paths}, expected ['0.0', '0.1', '0']")


async def check_cancel(env: Env) -> None:
    async with env.client(tasks=True) as client:
        expect_modern(client)
        handle = await start_task(client, {"steps": 200, "stepMs": 50})
        expect(handle.status not in TERMINAL, f"task handle already {handle.status}")
        await tasks_cancel(client.session, handle.task_id)
        task = await wait_for(client.session, handle.task_id, TERMINAL)
        expect(task.status == "cancelled", f"task ended {task.status}, expected cancelled")


async def check_failed_task(env: Env) -> None:
    # Through the transparent path: Client.call_tool -> the extension's claim resolver.
    async with env.client(tasks=True) as client:
        expect_modern(client)
        try:
            result = await client.call_tool(TOOL, {"width": 0, "depth": 0, "steps": 1, "stepMs": 1, "failAt": "0"})
        except TaskFailedError as e:
            expect(e.task.status == "failed", f"task status {e.task.status}")
            expect(e.code == -32603, f"error.code {e.code} ({e.message}), expected -32603")
            return
        except MCPError as e:
            raise CheckFailed(f"JSON-RPC error {e.code} ({e.message}) instead of a task that ends failed") from e
        raise CheckFailed(f"call_tool returned {result!r} instead of a failed task")


async def check_input_round(env: Env) -> None:
    async with env.client(tasks=True) as client:
        expect_modern(client)
        handle = await start_task(client, {"width": 0, "depth": 0, "steps": 1, "stepMs": 1, "inputAt": "0"})
        task = await wait_for(client.session, handle.task_id, TERMINAL | {"input_required"})
        expect(task.status == "input_required", f"task reached {task.status} before input_required")
        requests = task.input_requests or {}
        expect("confirm-0" in requests, f"inputRequests keys {sorted(requests)}, expected confirm-0")
        request = requests["confirm-0"]
        expect(isinstance(request, ElicitRequest), f"confirm-0 is {type(request).__name__}, expected elicitation/create")
        assert isinstance(request, ElicitRequest)
        expect(isinstance(request.params, ElicitRequestFormParams), "confirm-0 is not a form elicitation")
        assert isinstance(request.params, ElicitRequestFormParams)
        confirm = (request.params.requested_schema.get("properties") or {}).get("confirm")
        expect(
            isinstance(confirm, dict) and confirm.get("type") == "boolean",
            f"requestedSchema.properties.confirm is {confirm!r}, expected a boolean",
        )
        before = len(env.elicitations)
        responses = await answer_input_requests(client.session, {"confirm-0": request})
        expect(len(env.elicitations) == before + 1, "the elicitation callback did not run")
        await tasks_update(client.session, handle.task_id, responses)
        final = await wait_for(client.session, handle.task_id, TERMINAL)
        expect(final.status == "completed", f"after tasks/update the task ended {final.status}: {final.error}")
        try:
            result = completed_result(final)
        except ValidationError as e:
            raise CheckFailed(f"inlined result is not a 2026-07-28 CallToolResult: {brief(e)}") from e
        expect(not result.is_error, f"isError result: {result.content}")


async def check_bad_arguments(env: Env) -> None:
    async with env.client(tasks=False) as client:
        env.expect_era(client)
        try:
            result = await client.call_tool(TOOL, {"width": 999})
        except MCPError as e:
            raise CheckFailed(
                f"JSON-RPC error {e.code} ({e.message}) instead of a tool result with isError: true"
            ) from e
        expect(result.is_error is True, f"isError is {result.is_error}, content {result.content}")


async def check_negotiated_version(env: Env) -> None:
    async with env.client(tasks=False) as client:
        env.expect_era(client)
        info = client.server_info
        expect(info is not None and info.name == "subtask", f"serverInfo {info!r}, expected name 'subtask'")
        tools = await client.list_tools()
        names = sorted(t.name for t in tools.tools)
        expect(TOOL in names, f"tools/list has {names}, expected {TOOL}")


CHECKS: list[tuple[str, Callable[[Env], Awaitable[None]], float]] = [
    ("sync-call", check_sync_call, 7),
    ("task-completes", check_task_completes, 7),
    ("subtasks-followed", check_subtasks_followed, 7),
    ("cancel", check_cancel, 10),
    ("failed-task", check_failed_task, 7),
    ("input-round", check_input_round, 7),
    ("bad-arguments", check_bad_arguments, 7),
]


async def check_plain_call_listed(env: Env) -> None:
    """2025-11-25: a plain tools/call of a task tool runs as a task the caller can list.

    The SDK cannot start a task (see the top) but has the request and result
    types of `tasks/list` (mcp_types `ListTasksRequest` / `ListTasksResult`),
    sent with the public `ClientSession.send_request`.
    """
    async with env.client(tasks=False) as client:
        env.expect_era(client)

        async def listed() -> list[Any]:
            tasks: list[Any] = []
            cursor: str | None = None
            for _ in range(100):
                params = PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await client.session.send_request(ListTasksRequest(params=params), ListTasksResult)
                tasks.extend(page.tasks)
                cursor = page.next_cursor
                if not cursor:
                    return tasks
            raise CheckFailed("tasks/list did not end within 100 pages")

        before = {t.task_id for t in await listed()}
        result = await client.call_tool(TOOL, {"width": 0, "depth": 0, "steps": 1, "stepMs": 1})
        expect(not result.is_error, f"isError result: {result.content}")
        new = [t for t in await listed() if t.task_id not in before]
        expect(len(new) == 1, f"tasks/list shows {len(new)} new tasks after one plain call, expected 1: {new}")
        expect(new[0].status == "completed", f"the plain call's task is {new[0].status}, expected completed")


# mode="legacy": the SDK cannot start a task on the 2025-11-25 wire (see the top).
LEGACY_CHECKS: list[tuple[str, Callable[[Env], Awaitable[None]], float]] = [
    ("negotiated-version", check_negotiated_version, 7),
    ("sync-call", check_sync_call, 7),
    ("bad-arguments", check_bad_arguments, 7),
    ("plain-call-listed", check_plain_call_listed, 7),
]


# ----- runner ---------------------------------------------------------------------------


async def run(env: Env) -> bool:
    all_ok = True
    async with AsyncExitStack() as stack:
        if env.target.transport == "http":
            env.http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    timeout=httpx2.Timeout(REQUEST_TIMEOUT_S), event_hooks=_trace_hooks() if TRACE else None
                )
            )
        else:
            env.server_log = stack.enter_context(
                open(env.target.server_log, "a", encoding="utf-8") if env.target.server_log else open(os.devnull, "w")
            )
        if env.mode == "auto":
            # Entered here, outside the per-check time limits (a cancel scope must not end
            # inside the client's task group); its requests have their own timeouts.
            try:
                env.shared_tasks_client = await stack.enter_async_context(env.new_client(tasks=True))
            except Exception as e:  # noqa: BLE001 - reported by every task check too
                say(f"FAIL setup: the task checks' client did not connect: {reason(e)}")
                all_ok = False
        checks = LEGACY_CHECKS if env.mode == "legacy" else CHECKS
        return await run_checks(checks, env, TOTAL_BUDGET_S) and all_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto", help="Client(mode=...)")
    args = parser.parse_args()
    try:
        target = target_from_env()
    except SetupError as e:
        say(f"FAIL setup: {e}")
        return 2
    return 0 if anyio.run(run, Env(mode=args.mode, target=target)) else 1


if __name__ == "__main__":
    sys.exit(main())
