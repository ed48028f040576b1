#!/usr/bin/env python3
"""Interop client: drives `subtask serve` through the released Python MCP SDK.

Runs against the server at env `SUBTASK_URL` (e.g. http://127.0.0.1:PORT/mcp)
with `mcp==2.3.0` (see requirements.txt), speaking protocol 2026-07-28 over
Streamable HTTP. Prints one line per check, `ok <check>` or
`FAIL <check>: <reason>`, and exits non-zero if any check failed. With
`INTEROP_TRACE=1` every JSON message sent and received is printed as well
(`trace -> ...` / `trace <- ...`), taken from httpx event hooks on the HTTP
client handed to the SDK's transport: they only observe.

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

import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx2
from mcp.client import ClaimContext, Client, ClientExtension, ClientRequestContext, ClientSession, ResultClaim
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
    Request,
    RequestParams,
    Result,
)
from mcp_types import methods as mcp_methods
from pydantic import ValidationError, model_validator

WIRE_VERSION = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TOOL = "fanout"

POLL_CAP_MS = 200  # honour pollIntervalMs, but never wait longer than this between polls
POLL_FLOOR_MS = 10  # and never spin
REQUEST_TIMEOUT_S = 5.0  # per JSON-RPC request
TOTAL_BUDGET_S = 57.0  # the whole script

TRACE = os.environ.get("INTEROP_TRACE") == "1"

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


def _say(line: str) -> None:
    print(line, flush=True)


def _trace_hooks() -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    async def on_request(request: httpx2.Request) -> None:
        body = (await request.aread()).decode("utf-8", "replace")
        heads = " ".join(
            f"{h}={request.headers[h]}"
            for h in ("mcp-protocol-version", "mcp-method", "mcp-name")
            if h in request.headers
        )
        _say(f"trace -> {request.method} {heads} {body}".rstrip())

    async def on_response(response: httpx2.Response) -> None:
        ctype = response.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            # Reading caches the body on the response; the SDK's own read gets the same bytes.
            body = (await response.aread()).decode("utf-8", "replace")
            _say(f"trace <- HTTP {response.status_code} {body}")
        elif ctype.startswith("text/event-stream"):
            _say(f"trace <- HTTP {response.status_code} (SSE stream; events not shown)")
        else:
            _say(f"trace <- HTTP {response.status_code} content-type={ctype!r} (no JSON body)")

    return {"request": [on_request], "response": [on_response]}


# ----- checks ---------------------------------------------------------------------------


class CheckFailed(Exception):
    pass


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise CheckFailed(reason)


@dataclass
class Env:
    url: str
    http: httpx2.AsyncClient
    root_task: GetTaskResult | None = None
    elicitations: list[ElicitRequestParams] = field(default_factory=list)

    def client(self, *, tasks: bool) -> Client:
        async def confirm(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
            self.elicitations.append(params)
            return ElicitResult(action="accept", content={"confirm": True})

        return Client(
            streamable_http_client(self.url, http_client=self.http),
            mode="auto",
            read_timeout_seconds=REQUEST_TIMEOUT_S,
            client_info=Implementation(name="subtask-interop-python", version=f"mcp-{_sdk_version()}"),
            extensions=[TasksExtension()] if tasks else None,
            elicitation_callback=confirm if tasks else None,
        )


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
        expect_modern(client)
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
                problems.append(f"inlined result is not a 2026-07-28 CallToolResult: {_brief(e)}")
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
        raise CheckFailed(f"a subtask's inlined result is not a 2026-07-28 CallToolResult: {_brief(e)}") from e
    if TRACE:
        _say(f"trace subtasks in SEP-2268 order: {[(t.task_id, p) for t, p in zip(ordered, paths)]}")
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
            raise CheckFailed(f"inlined result is not a 2026-07-28 CallToolResult: {_brief(e)}") from e
        expect(not result.is_error, f"isError result: {result.content}")


async def check_bad_arguments(env: Env) -> None:
    async with env.client(tasks=False) as client:
        expect_modern(client)
        try:
            result = await client.call_tool(TOOL, {"width": 999})
        except MCPError as e:
            raise CheckFailed(
                f"JSON-RPC error {e.code} ({e.message}) instead of a tool result with isError: true"
            ) from e
        expect(result.is_error is True, f"isError is {result.is_error}, content {result.content}")


CHECKS: list[tuple[str, Callable[[Env], Awaitable[None]], float]] = [
    ("sync-call", check_sync_call, 7),
    ("task-completes", check_task_completes, 7),
    ("subtasks-followed", check_subtasks_followed, 7),
    ("cancel", check_cancel, 10),
    ("failed-task", check_failed_task, 7),
    ("input-round", check_input_round, 7),
    ("bad-arguments", check_bad_arguments, 7),
]


# ----- runner ---------------------------------------------------------------------------


def _brief(e: BaseException) -> str:
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(map(str, err['loc'])) or '<root>'}: {err['msg']}" for err in e.errors())
    text = str(e).strip().replace("\n", " ")
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


def _reason(e: BaseException) -> str:
    leaves = _leaves(e)
    for leaf in leaves:
        if isinstance(leaf, CheckFailed):
            return str(leaf)
    parts = []
    for leaf in leaves:
        if isinstance(leaf, MCPError):
            parts.append(f"JSON-RPC error {leaf.code}: {leaf.message}")
        else:
            parts.append(_brief(leaf))
    return " | ".join(parts)


async def run(url: str) -> bool:
    all_ok = True
    deadline = time.monotonic() + TOTAL_BUDGET_S
    async with httpx2.AsyncClient(
        timeout=httpx2.Timeout(REQUEST_TIMEOUT_S), event_hooks=_trace_hooks() if TRACE else None
    ) as http:
        env = Env(url=url, http=http)
        for name, check, limit in CHECKS:
            budget = min(limit, deadline - time.monotonic())
            if budget <= 0:
                _say(f"FAIL {name}: not run (script time budget of {TOTAL_BUDGET_S:.0f} s used up)")
                all_ok = False
                continue
            if TRACE:
                _say(f"trace === {name}")
            try:
                with anyio.fail_after(budget):
                    await check(env)
            except TimeoutError:
                _say(f"FAIL {name}: timed out after {budget:.1f} s")
                all_ok = False
            except BaseException as e:  # noqa: BLE001 - every failure becomes a FAIL line
                if isinstance(e, KeyboardInterrupt | SystemExit):
                    raise
                _say(f"FAIL {name}: {_reason(e)}")
                all_ok = False
            else:
                _say(f"ok {name}")
    return all_ok


def main() -> int:
    url = os.environ.get("SUBTASK_URL")
    if not url:
        _say("FAIL setup: SUBTASK_URL is not set (e.g. http://127.0.0.1:PORT/mcp)")
        return 2
    return 0 if anyio.run(run, url) else 1


if __name__ == "__main__":
    sys.exit(main())
