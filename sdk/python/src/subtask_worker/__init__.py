"""subtask_worker: serve MCP tools from a Python process to ``subtask serve``
over the worker protocol (``docs/workers.md``).

    worker = Worker("ws://127.0.0.1:8750/workers", token="secret")

    @worker.tool("greet", input_schema={"type": "object"})
    async def greet(ctx: Context, args: dict) -> str:
        return "hello"

    asyncio.run(worker.run())
"""

from .context import (
    JSON,
    Context,
    Outcome,
    ReplyError,
    Subtask,
    TaskFailed,
    ToolError,
    WorkerError,
    WorkerRefused,
    to_call_tool_result,
    tool_result,
)
from .worker import PROTOCOL, Worker

__all__ = [
    "JSON",
    "PROTOCOL",
    "Context",
    "Outcome",
    "ReplyError",
    "Subtask",
    "TaskFailed",
    "ToolError",
    "Worker",
    "WorkerError",
    "WorkerRefused",
    "to_call_tool_result",
    "tool_result",
]
__version__ = "0.1.0"
