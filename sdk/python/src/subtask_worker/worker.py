"""The worker: one WebSocket to ``subtask serve``'s ``/workers``, the
``hello``/``welcome`` handshake, heartbeats, assignments run as asyncio
tasks, and reconnection with backoff (``docs/workers.md``)."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, Mapping, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from .context import (
    JSON,
    Context,
    ReplyError,
    TaskFailed,
    ToolError,
    WorkerError,
    WorkerRefused,
    to_call_tool_result,
    tool_result,
)

PROTOCOL = 1
"""The worker protocol version this SDK speaks."""

log = logging.getLogger("subtask_worker")

Handler = Callable[[Context, dict[str, JSON]], Awaitable[JSON]]
H = TypeVar("H", bound=Handler)

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# Reply codes after which the task is no longer this attempt's to end.
_NOT_OURS = {"stale_attempt", "divergence", "interrupted", "unknown_task"}


@dataclass
class _Tool:
    name: str
    handler: Handler
    description: str
    input_schema: dict[str, JSON]
    resumable: bool
    task_support: str

    def declaration(self) -> dict[str, JSON]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "taskSupport": self.task_support,
            "resumable": self.resumable,
        }


class Worker:
    """Serves tools to a ``subtask serve`` at ``url`` (``ws://HOST:PORT/workers``).

    Register tools with :meth:`tool`, then ``await worker.run()``: it
    connects, runs every assignment's handler as an asyncio task (at most
    ``capacity`` at once, as the server assigns), and reconnects with
    exponential backoff (``min_backoff`` to ``max_backoff`` seconds) when the
    connection drops. A refused ``hello`` (bad token, taken tool name) raises
    :class:`WorkerRefused` instead.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str,
        name: str | None = None,
        capacity: int = 8,
        min_backoff: float = 0.1,
        max_backoff: float = 5.0,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.url = url
        self.token = token
        self.name = name
        self.capacity = capacity
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.worker_id: str | None = None
        """The server's id of the current connection (``welcome.worker``)."""
        self.lease_ms: int | None = None
        self.heartbeat_ms: int | None = None
        self._tools: dict[str, _Tool] = {}
        self._running: dict[str, Context] = {}
        self._ready = asyncio.Event()
        self._stopping = asyncio.Event()
        self._welcomed = False

    def tool(
        self,
        name: str,
        *,
        description: str | None = None,
        input_schema: Mapping[str, JSON] | None = None,
        resumable: bool = True,
        task_support: Literal["optional", "required"] = "optional",
    ) -> Callable[[H], H]:
        """Registers ``async def handler(ctx, args)`` as tool ``name``.

        The server checks calls against ``input_schema`` (default: any
        object) before a task exists. ``resumable``: after a worker's death
        or a server restart, the handler runs again with its finished
        subtasks and steps replayed."""
        if not _NAME.match(name):
            raise ValueError(f"tool name {name!r} does not match {_NAME.pattern}")
        if task_support not in ("optional", "required"):
            raise ValueError('task_support is "optional" or "required"')

        def register(handler: H) -> H:
            self._tools[name] = _Tool(
                name,
                handler,
                description if description is not None else inspect.getdoc(handler) or name,
                dict(input_schema) if input_schema is not None else {"type": "object"},
                resumable,
                task_support,
            )
            return handler

        return register

    @property
    def connected(self) -> bool:
        """Whether the worker holds a welcomed connection now."""
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        """Returns once the server has said ``welcome``."""
        await self._ready.wait()

    def stop(self) -> None:
        """Makes :meth:`run` return: running handlers are cancelled (the
        server assigns their tasks again) and the connection is closed."""
        self._stopping.set()

    async def run(self) -> None:
        """Serves until :meth:`stop`, reconnecting with backoff."""
        if not self._tools:
            raise ValueError("no tools registered: use @worker.tool(...) first")
        backoff = self.min_backoff
        while not self._stopping.is_set():
            self._welcomed = False
            try:
                await self._session()
            except WorkerRefused:
                raise
            except (OSError, ConnectionClosed, InvalidHandshake, asyncio.TimeoutError, ValueError, WorkerError) as e:
                log.warning("worker connection to %s failed: %s", self.url, e or type(e).__name__)
            if self._welcomed:
                backoff = self.min_backoff
            if self._stopping.is_set():
                break
            delay = backoff * (1 + random.random() / 4)
            backoff = min(backoff * 2, self.max_backoff)
            log.info("reconnecting in %.2f s", delay)
            try:
                await asyncio.wait_for(self._stopping.wait(), delay)
            except asyncio.TimeoutError:
                pass

    # ----- one connection ---------------------------------------------------------

    async def _session(self) -> None:
        """One connection, from ``hello`` to its close."""
        async with connect(self.url, max_size=None, open_timeout=10) as ws:
            hello = {
                "type": "hello",
                "protocol": PROTOCOL,
                "token": self.token,
                "capacity": self.capacity,
                "tools": [t.declaration() for t in self._tools.values()],
            }
            if self.name:
                hello["name"] = self.name
            await ws.send(json.dumps(hello))
            first = json.loads(await asyncio.wait_for(ws.recv(), 15))
            if first.get("type") == "error":
                code, message = str(first.get("code")), str(first.get("message"))
                if code in ("unauthorized", "bad_hello"):
                    raise WorkerRefused(code, message)
                raise WorkerError(f"hello answered with {code}: {message}")
            if first.get("type") != "welcome":
                raise WorkerError(f"expected welcome, got {first!r}")
            self.worker_id = first.get("worker")
            self.lease_ms = int(first.get("leaseMs", 10_000))
            self.heartbeat_ms = max(1, int(first.get("heartbeatMs", self.lease_ms // 5)))
            log.info("connected to %s as %s (lease %d ms)", self.url, self.worker_id, self.lease_ms)
            conn = _Connection(self, ws)
            self._welcomed = True
            self._ready.set()
            try:
                await conn.serve(self._stopping)
            finally:
                self._ready.clear()
                await conn.close()

    # ----- frames from the server -------------------------------------------------

    def _assign(self, conn: _Connection, frame: Mapping[str, Any]) -> None:
        ctx = Context(conn, frame)
        old = self._running.pop(ctx.task_id, None)
        if old is not None:
            old._cancel("reassigned")
        tool = self._tools.get(ctx.tool)
        if tool is None:
            error = {"code": -32601, "message": f"tool {ctx.tool!r} is not served by this worker"}
            conn.send(ctx, {"type": "fail", "task": ctx.task_id, "attempt": ctx.attempt, "error": error})
            return
        # More than `capacity` may be assigned: handlers waiting on the server
        # (a subtask's outcome, input, a pause) do not count (docs/workers.md).
        self._running[ctx.task_id] = ctx
        log.debug("assign %s task %s attempt %d replay=%s", ctx.tool, ctx.task_id, ctx.attempt, ctx.replay)
        ctx._task = asyncio.create_task(self._run_handler(tool, ctx), name=f"{ctx.tool} {ctx.task_id}")

    def _stop_attempt(self, frame: Mapping[str, Any]) -> None:
        ctx = self._running.get(frame.get("task", ""))
        if ctx is not None and ctx.attempt == frame.get("attempt"):
            del self._running[ctx.task_id]
            log.info("%s of task %s attempt %d", frame["type"], ctx.task_id, ctx.attempt)
            ctx._cancel(frame["type"])

    async def _run_handler(self, tool: _Tool, ctx: Context) -> None:
        end: dict[str, JSON] | None = None
        try:
            value = await tool.handler(ctx, ctx.arguments)
            end = {"type": "result", "result": to_call_tool_result(value)}
        except ToolError as e:
            end = {"type": "result", "result": tool_result(str(e), is_error=True)}
        except TaskFailed as e:
            end = {"type": "fail", "error": e.error()}
        except asyncio.CancelledError:
            if not ctx.cancelled:  # not ours: a cancel that leaked out of the handler
                end = _failure("the handler was cancelled", "CancelledError")
        except ReplyError as e:
            if e.code not in _NOT_OURS:
                end = _failure(str(e), "ReplyError")
        except Exception as e:  # noqa: BLE001 - every other exception fails the task
            log.exception("handler of %s (task %s) raised", ctx.tool, ctx.task_id)
            end = _failure(f"{type(e).__name__}: {e}", type(e).__name__)
        finally:
            if self._running.get(ctx.task_id) is ctx:
                del self._running[ctx.task_id]
        if end is not None and not ctx.cancelled:
            end.update(task=ctx.task_id, attempt=ctx.attempt)
            try:
                ctx._conn.send(ctx, end)
            except (TypeError, ValueError) as e:  # a result that is not JSON
                ctx._conn.send(ctx, {**_failure(f"the result is not JSON: {e}", "TypeError"),
                                     "task": ctx.task_id, "attempt": ctx.attempt})


def _failure(message: str, exception: str) -> dict[str, JSON]:
    return {"type": "fail", "error": {"code": -32603, "message": message, "data": {"exception": exception}}}


class _Connection:
    """A welcomed connection: its writer queue, its open requests and the
    heartbeat."""

    def __init__(self, worker: Worker, ws: ClientConnection) -> None:
        self.worker = worker
        self.ws = ws
        self.queue: asyncio.Queue[tuple[Context | None, str]] = asyncio.Queue()
        self.pending: dict[int, tuple[asyncio.Future[Any], Context]] = {}
        # Requests of attempts that ended, kept to log the server's refusals.
        self.orphans: OrderedDict[int, Context] = OrderedDict()
        self.next_ref = 1
        self.last_sent = time.monotonic()
        self.open = True

    def send(self, ctx: Context | None, frame: Mapping[str, JSON]) -> None:
        """Queues a frame; frames of an attempt that ends before they are
        written are dropped."""
        if not self.open:
            raise asyncio.CancelledError("the connection closed")
        self.queue.put_nowait((ctx, json.dumps(frame)))

    def request(self, ctx: Context, frame: dict[str, JSON]) -> asyncio.Future[Any]:
        ref = self.next_ref
        self.next_ref += 1
        frame["ref"] = ref
        self.send(ctx, frame)  # raises before anything is registered
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[ref] = (fut, ctx)
        return fut

    async def serve(self, stopping: asyncio.Event) -> None:
        tasks = [
            asyncio.create_task(self._read()),
            asyncio.create_task(self._write()),
            asyncio.create_task(self._heartbeat()),
            asyncio.create_task(stopping.wait()),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Ends every attempt of this connection (the server assigns them
        again) and the open requests."""
        self.open = False
        running = list(self.worker._running.values())
        self.worker._running.clear()
        for ctx in running:
            ctx._cancel("disconnected")
        for fut, _ in self.pending.values():
            fut.cancel()
        self.pending.clear()
        handlers = [c._task for c in running if c._task is not None]
        if handlers:
            await asyncio.wait(handlers, timeout=5)
        await self.ws.close()

    async def _write(self) -> None:
        while True:
            ctx, text = await self.queue.get()
            if ctx is not None and ctx.cancelled:
                continue
            await self.ws.send(text)
            self.last_sent = time.monotonic()

    async def _heartbeat(self) -> None:
        period = (self.worker.heartbeat_ms or 2000) / 1000
        while True:
            idle = time.monotonic() - self.last_sent
            if idle >= period * 0.9:
                self.send(None, {"type": "heartbeat"})
                idle = 0.0
            await asyncio.sleep(max(0.01, period * 0.9 - idle))

    async def _read(self) -> None:
        async for text in self.ws:
            try:
                frame = json.loads(text)
                kind = frame.get("type")
            except (ValueError, AttributeError):
                log.warning("not a JSON object frame: %.200r", text)
                continue
            if kind == "reply":
                self._reply(frame)
            elif kind == "assign":
                self.worker._assign(self, frame)
            elif kind in ("cancel", "revoke"):
                self._end_attempt(frame)
            elif kind == "error":
                log.warning("server error frame: %s: %s", frame.get("code"), frame.get("message"))
            else:
                log.debug("ignored frame %s", kind)

    def _end_attempt(self, frame: Mapping[str, Any]) -> None:
        self.worker._stop_attempt(frame)
        task, attempt = frame.get("task"), frame.get("attempt")
        for ref in [r for r, (_, c) in self.pending.items() if c.task_id == task and c.attempt == attempt]:
            fut, ctx = self.pending.pop(ref)
            fut.cancel()
            self.orphans[ref] = ctx
            while len(self.orphans) > 1024:
                self.orphans.popitem(last=False)

    def _reply(self, frame: Mapping[str, Any]) -> None:
        ref = frame.get("ref")
        entry = self.pending.pop(ref, None) if isinstance(ref, int) else None
        if entry is None:
            orphan = self.orphans.pop(ref, None) if isinstance(ref, int) else None
            if orphan is not None and "error" in frame:
                err, ctx = frame["error"], orphan
                log.warning("report of task %s attempt %d refused: %s: %s",
                            ctx.task_id, ctx.attempt, err.get("code"), err.get("message"))
            elif orphan is None:
                log.debug("reply to unknown ref %r", ref)
            return
        fut, _ = entry
        if fut.done():
            return
        if "error" in frame:
            err = frame["error"] or {}
            fut.set_exception(ReplyError(str(err.get("code")), str(err.get("message"))))
        else:
            fut.set_result(frame.get("ok"))
