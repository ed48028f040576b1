"""What a handler sees: its :class:`Context`, :class:`Subtask` handles and
:class:`Outcome` values, and the exceptions that end a task.

Every method of :class:`Context` that talks to the server is one request
frame of the worker protocol (``docs/workers.md``, "Requests"), answered by
a ``reply``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Literal, Mapping, Union

if TYPE_CHECKING:  # pragma: no cover
    from .worker import _Connection

JSON = Any
"""Any value :func:`json.dumps` accepts."""


class WorkerError(Exception):
    """Base class of the errors the SDK raises."""


class ReplyError(WorkerError):
    """The server refused a request (``reply`` with ``error``).

    ``code`` is one of the protocol's codes: ``bad_arguments``,
    ``unknown_tool``, ``unknown_child``, ``interrupted``, ``divergence``,
    ``stale_attempt``, ``rejected``, ...
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class WorkerRefused(WorkerError):
    """The server refused the ``hello`` (``unauthorized`` or ``bad_hello``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ToolError(Exception):
    """Raise to end the task with a tool error: a ``CallToolResult`` with
    ``isError: true`` and this message as its text (an error the model can
    act on)."""


class TaskFailed(Exception):
    """Raise to fail the task with a JSON-RPC error (a ``fail`` frame)."""

    def __init__(self, code: int, message: str, data: JSON = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def error(self) -> dict[str, JSON]:
        e: dict[str, JSON] = {"code": self.code, "message": self.message}
        if self.data is not None:
            e["data"] = self.data
        return e


def tool_result(text: str, structured: JSON = None, *, is_error: bool = False) -> dict[str, JSON]:
    """A ``CallToolResult`` with one text content (and ``structuredContent``)."""
    r: dict[str, JSON] = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if structured is not None:
        r["structuredContent"] = structured
    return r


def to_call_tool_result(value: JSON) -> dict[str, JSON]:
    """What a handler's return value becomes: a ``str`` is the text content;
    a ``dict`` with ``content`` is taken as a ``CallToolResult``; ``None`` is
    an empty result; anything else is its JSON text and its
    ``structuredContent``."""
    if isinstance(value, str):
        return tool_result(value)
    if value is None:
        return {"content": [], "isError": False}
    if isinstance(value, dict) and "content" in value:
        return dict(value)
    return tool_result(json.dumps(value), value)


@dataclass(frozen=True)
class Outcome:
    """How a subtask ended: ``completed`` (with ``result``, a
    ``CallToolResult``), ``failed`` (with ``error``, a JSON-RPC error
    object) or ``cancelled``."""

    status: Literal["completed", "failed", "cancelled"]
    result: dict[str, JSON] | None = None
    error: dict[str, JSON] | None = None

    @property
    def ok(self) -> bool:
        """Completed, and not a tool error."""
        return self.status == "completed" and not (self.result or {}).get("isError", False)

    @property
    def text(self) -> str:
        """The result's first text content, the error's message, or ``""``."""
        if self.result is not None:
            for c in self.result.get("content") or []:
                if isinstance(c, dict) and c.get("type") == "text":
                    return str(c.get("text", ""))
        if self.error is not None:
            return str(self.error.get("message", ""))
        return ""

    @property
    def structured(self) -> JSON:
        """The result's ``structuredContent`` (``None`` without one)."""
        return (self.result or {}).get("structuredContent")


class Subtask:
    """A subtask this task spawned (:meth:`Context.spawn`)."""

    def __init__(self, ctx: Context, task_id: str, tool: str) -> None:
        self._ctx = ctx
        self.id = task_id
        self.tool = tool
        self._outcome: asyncio.Future[Any] | None = None

    async def outcome(self) -> Outcome:
        """Waits until the subtask is terminal (one ``outcome`` request,
        shared by every caller)."""
        if self._outcome is None:
            self._outcome = self._ctx._start("outcome", child=self.id)
        ok = await asyncio.shield(self._outcome)
        return Outcome(ok["status"], ok.get("result"), ok.get("error"))

    async def cancel(self) -> None:
        """Cancels the subtask and its subtree; its outcome becomes
        ``cancelled`` once they have ended."""
        await self._ctx._request("cancel", child=self.id)

    def __repr__(self) -> str:
        return f"Subtask({self.tool!r}, {self.id!r})"


StepWork = Callable[..., Union[JSON, Awaitable[JSON]]]


class Context:
    """One attempt of one task: what its handler uses to act on the task.

    Every act (:meth:`spawn`, :meth:`checkpoint`, :meth:`pause`,
    :meth:`input`, :meth:`step`, :meth:`patched`) is recorded by the server
    in order; a replay (``ctx.replay``) must make the same acts in the same
    order (``docs/workers.md``, "Replay").
    """

    def __init__(self, conn: _Connection, frame: Mapping[str, JSON]) -> None:
        self._conn = conn
        self.task_id: str = frame["task"]
        self.attempt: int = frame["attempt"]
        self.tool: str = frame["tool"]
        self.arguments: dict[str, JSON] = dict(frame.get("arguments") or {})
        self.root: str = frame.get("root") or self.task_id
        self.parent: str | None = frame.get("parent")
        self.replay: bool = bool(frame.get("replay"))
        self.dependencies: list[Outcome] = [
            Outcome(d["status"], d.get("result"), d.get("error")) for d in frame.get("dependencies") or []
        ]
        """The outcomes of the subtasks this one was spawned ``after``, in that order."""
        self.cancel_reason: str | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def cancelled(self) -> bool:
        """Whether the attempt was cancelled (``cancel``), revoked
        (``revoke``) or lost with the connection: nothing more is sent."""
        return self.cancel_reason is not None

    def __repr__(self) -> str:
        return f"Context({self.tool!r}, task={self.task_id!r}, attempt={self.attempt})"

    # ----- requests ---------------------------------------------------------------

    def _start(self, kind: str, **fields: JSON) -> asyncio.Future[Any]:
        """Sends request ``kind``; the future resolves to the reply's ``ok``."""
        if self.cancelled:
            raise asyncio.CancelledError(f"task {self.task_id} attempt {self.attempt}: {self.cancel_reason}")
        frame = {"type": kind, "task": self.task_id, "attempt": self.attempt, **fields}
        return self._conn.request(self, frame)

    async def _request(self, kind: str, **fields: JSON) -> Any:
        return await self._start(kind, **fields)

    async def spawn(
        self,
        tool: str,
        arguments: Mapping[str, JSON] | None = None,
        *,
        after: Iterable[Subtask | str] = (),
        fail_fast: bool = False,
        ttl_ms: int | None = None,
    ) -> Subtask:
        """Creates a subtask calling ``tool`` (a worker tool or a tool of
        the server), next in ``childTaskIds``. ``after``: earlier subtasks
        of this task it waits for; ``fail_fast``: its failure fails this
        task and cancels the others. Raises :class:`ReplyError`
        (``bad_arguments``, ``unknown_tool``, ``rejected``). An act."""
        fields: dict[str, JSON] = {"tool": tool, "arguments": dict(arguments or {})}
        ids = [a.id if isinstance(a, Subtask) else a for a in after]
        if ids:
            fields["after"] = ids
        if fail_fast:
            fields["failFast"] = True
        if ttl_ms is not None:
            fields["ttlMs"] = ttl_ms
        ok = await self._request("spawn", **fields)
        return Subtask(self, ok["taskId"], tool)

    async def checkpoint(self) -> list[str]:
        """A safe point: returns the steer messages sent since the last one;
        parks while the task is paused and returns at the resume. An act."""
        ok = await self._request("checkpoint")
        return list(ok.get("steers") or [])

    async def pause(self, reason: str | None = None) -> list[str]:
        """Pauses this task (a client's ``tasks/resume`` continues it), then
        as :meth:`checkpoint`. An act."""
        ok = await self._request("pause", **({"reason": reason} if reason is not None else {}))
        return list(ok.get("steers") or [])

    async def input(self, key: str, request: Mapping[str, JSON]) -> dict[str, JSON]:
        """Asks the client (the task is ``input_required`` with this request
        under ``key``) and returns its response. A key answered before a
        replay is answered again at once. An act."""
        ok = await self._request("input", key=key, request=dict(request))
        return dict(ok.get("response") or {})

    async def step(self, name: str, work: StepWork, *args: Any) -> JSON:
        """A journaled step: runs ``work(*args)`` once as the tree sees it
        and returns its output, JSON round-tripped; in a replay of a step
        that finished, returns the recorded output without running it.

        An ``async def`` is awaited on the event loop; a plain function runs
        in a thread (``asyncio.to_thread``) so that blocking work cannot stop
        the heartbeats (an awaitable it returns is then awaited). An act."""
        ok = await self._request("step", name=name)
        if ok.get("done"):
            return ok.get("output")
        if inspect.iscoroutinefunction(work):
            out = await work(*args)
        else:
            out = await asyncio.to_thread(work, *args)
            if inspect.isawaitable(out):
                out = await out
        output = json.loads(json.dumps(out))
        await self._request("stepped", act=ok["act"], output=output)
        return output

    async def patched(self, patch_id: str) -> bool:
        """``True`` in a first run (recording a marker) and in a replay that
        recorded it here; ``False`` in a replay of code from before the
        patch (``docs/durability.md``, "Changing a tool's code"). An act."""
        ok = await self._request("patched", id=patch_id)
        return bool(ok.get("patched"))

    async def status(
        self, message: str | None, *, progress: float | None = None, total: float | None = None
    ) -> None:
        """Sets the task's status message (``None`` clears it); with
        ``progress`` it reads ``message (progress/total)``."""
        fields: dict[str, JSON] = {"message": message}
        if progress is not None:
            fields["progress"] = progress
        if total is not None:
            fields["total"] = total
        await self._request("status", **fields)

    # ----- the worker's side ------------------------------------------------------

    def _cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self._task is not None and not self._task.done():
            self._task.cancel()
