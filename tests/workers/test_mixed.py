"""Workers in three languages in one tree, and a released MCP client
driving a worker tool: a Python parent (the SDK, on a thread here) spawns a
TypeScript subtask (the SDK, in a Node 22 process), a Python one and a Rust
tool of the server (`fanout`); the tree completes in SEP-2268 order. Then
@modelcontextprotocol/sdk 1.32.2 (the interop suite's pinned client, on
the 2025-11-25 wire) calls the Python tool, synchronously and as a task
with callToolStream, to completion."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from support import TOKEN, Server, WorkerThread, text_of

from subtask_worker import Context, Worker

REPO = Path(__file__).resolve().parents[2]



@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def ts_worker(server: Server, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    log = open(tmp_path / "ts_worker.log", "w")
    p = subprocess.Popen([os.environ["NODE22"], str(REPO / "tests/workers/ts_worker.mjs"), server.ws_url, TOKEN],
                         stdout=subprocess.PIPE, stderr=log, text=True)
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    assert line == "ready", f"the TypeScript worker did not start: {line!r} {(tmp_path / 'ts_worker.log').read_text()}"
    yield p
    p.kill()
    p.wait()
    log.close()


def python_worker(url: str) -> Worker:
    w = Worker(url, token=TOKEN, name="py-mixed", capacity=8)

    @w.tool("py_leaf", input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                                     "required": ["text"]})
    async def leaf(ctx: Context, args: dict) -> str:
        await ctx.checkpoint()
        return args["text"] + "!"

    @w.tool("py_parent", description="A Python parent with TypeScript, Python and Rust subtasks.")
    async def parent(ctx: Context, args: dict) -> dict:
        kids = [
            await ctx.spawn("ts_shout", {"text": "typescript"}),
            await ctx.spawn("py_leaf", {"text": "python"}),
            await ctx.spawn("fanout", {"width": 0, "depth": 0, "steps": 1, "stepMs": 1}),
        ]
        await ctx.checkpoint()
        outcomes = await asyncio.gather(*(k.outcome() for k in kids))
        assert all(o.ok for o in outcomes), outcomes
        rust = outcomes[2].structured
        return {"content": [{"type": "text", "text": f"{outcomes[0].text}|{outcomes[1].text}|rust:{rust['path']}"}],
                "structuredContent": {"children": [k.id for k in kids]}}

    return w


def test_a_python_parent_with_typescript_python_and_rust_subtasks(server: Server, ts_worker: subprocess.Popen[str]) -> None:
    t = WorkerThread(python_worker(server.ws_url))
    try:
        t.wait_ready()
        root = server.mcp.start_task("py_parent", {})
        done = server.mcp.until_status(root, "completed")
        assert text_of(done["result"]) == "TYPESCRIPT|python!|rust:0", done
        kids = done["childTaskIds"]
        assert kids == done["result"]["structuredContent"]["children"], "childTaskIds in spawn order"
        tools = []
        for k in kids:
            child = server.mcp.get(k)
            assert child["status"] == "completed" and child["parentTaskId"] == root, child
            tools.append(text_of(child["result"]))
        assert tools[:2] == ["TYPESCRIPT", "python!"]
    finally:
        t.stop()


def test_a_released_mcp_client_drives_a_worker_tool_to_completion(server: Server, ts_worker: subprocess.Popen[str]) -> None:
    t = WorkerThread(python_worker(server.ws_url))
    try:
        t.wait_ready()
        r = subprocess.run([os.environ["NODE22"], str(REPO / "tests/interop/worker_tool.mjs"),
                            f"http://127.0.0.1:{server.port}/mcp"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
        assert "ok sync-call" in r.stdout and "ok task-stream" in r.stdout, r.stdout
    finally:
        t.stop()
