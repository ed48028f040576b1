"""The SDK against a real `subtask serve`, its worker on a thread of the
test process, driven as an MCP client over HTTP."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from support import TOKEN, Server, WorkerThread, text_of, until

from subtask_worker import Context, ReplyError, TaskFailed, ToolError, Worker, WorkerRefused

Start = Callable[[Worker], WorkerThread]
WORD = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"],
        "additionalProperties": False}


def make_worker(server: Server, name: str = "py-test", capacity: int = 8) -> Worker:
    return Worker(server.ws_url, token=TOKEN, name=name, capacity=capacity)


def test_a_tree_of_worker_subtasks_completes_with_children_in_spawn_order(server: Server, start: Start) -> None:
    w = make_worker(server)
    spawned: dict[str, list[str]] = {}
    patched: list[bool] = []

    @w.tool("leaf", input_schema=WORD)
    async def leaf(ctx: Context, args: dict[str, Any]) -> str:
        await asyncio.sleep(0.05 if args["word"] == "alpha" else 0)  # finishes out of order
        return args["word"].upper()

    @w.tool("tree", input_schema={"type": "object", "properties": {
        "words": {"type": "array", "items": {"type": "string"}}, "depth": {"type": "integer"}}})
    async def tree(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
        patched.append(await ctx.patched("v2"))
        kids = [await ctx.spawn("leaf", {"word": word}) for word in args["words"]]
        if args["depth"] > 0:
            kids.append(await ctx.spawn("tree", {"words": ["x", "y"], "depth": args["depth"] - 1}))
        # A subtask of the server's own tool, in the same tree.
        kids.append(await ctx.spawn("fanout", {"depth": 0}))
        spawned[ctx.task_id] = [k.id for k in kids]
        outcomes = [await k.outcome() for k in kids]
        assert all(o.ok for o in outcomes), outcomes
        return {"content": [{"type": "text", "text": " ".join(o.text for o in outcomes[:-1])}],
                "structuredContent": {"fanout": outcomes[-1].status}}

    start(w)
    mcp = server.mcp
    root = mcp.start_task("tree", {"words": ["alpha", "beta", "gamma"], "depth": 1})
    done = mcp.until_status(root, "completed")
    assert done["childTaskIds"] == spawned[root], "childTaskIds in spawn order"
    assert len(spawned[root]) == 5
    leaves, inner, fanout = spawned[root][:3], spawned[root][3], spawned[root][4]
    assert [text_of(mcp.get(k)["result"]) for k in leaves] == ["ALPHA", "BETA", "GAMMA"]
    inner_task = mcp.get(inner)
    assert inner_task["parentTaskId"] == root
    assert inner_task["childTaskIds"] == spawned[inner]
    assert text_of(inner_task["result"]) == "X Y"
    assert mcp.get(fanout)["status"] == "completed"
    assert text_of(done["result"]) == "ALPHA BETA GAMMA X Y"
    assert done["result"]["structuredContent"] == {"fanout": "completed"}
    assert patched == [True, True], "patched() is true in a first run"


def test_steer_reaches_the_handlers_checkpoint_and_status_shows_progress(server: Server, start: Start) -> None:
    w = make_worker(server)

    @w.tool("steered")
    async def steered(ctx: Context, args: dict[str, Any]) -> str:
        await ctx.status("waiting for a steer", progress=1, total=3)
        for _ in range(1000):
            steers = await ctx.checkpoint()
            if steers:
                return "got: " + " | ".join(steers)
            await asyncio.sleep(0.02)
        raise ToolError("no steer arrived")

    start(w)
    mcp = server.mcp
    task = mcp.start_task("steered", {})
    t = mcp.until(task, "the progress message", lambda t: t.get("statusMessage") is not None)
    assert t["statusMessage"] == "waiting for a steer (1/3)"
    mcp.call("tasks/steer", {"taskId": task, "message": "focus on batteries"})
    done = mcp.until_status(task, "completed")
    assert text_of(done["result"]) == "got: focus on batteries"


def test_pause_parks_the_handler_at_its_checkpoint_until_resume(server: Server, start: Start) -> None:
    w = make_worker(server)
    passes = [0]

    @w.tool("pausable")
    async def pausable(ctx: Context, args: dict[str, Any]) -> str:
        for _ in range(2000):
            steers = await ctx.checkpoint()
            passes[0] += 1
            if "stop" in steers:
                return f"stopped at pass {passes[0]}"
            await asyncio.sleep(0.01)
        raise ToolError("never stopped")

    start(w)
    mcp = server.mcp
    task = mcp.start_task("pausable", {})
    until("the handler to pass checkpoints", lambda: passes[0] > 3)
    mcp.call("tasks/pause", {"taskId": task})
    mcp.until_status(task, "paused")
    time.sleep(0.2)  # a checkpoint answered just before the pause lands
    parked = passes[0]
    time.sleep(0.6)
    assert passes[0] == parked, "the handler is parked while paused"
    mcp.call("tasks/steer", {"taskId": task, "message": "stop"})
    time.sleep(0.2)
    assert passes[0] == parked and mcp.get(task)["status"] == "paused"
    resumed = mcp.call("tasks/resume", {"taskId": task})
    assert resumed["status"] in ("working", "completed"), resumed
    done = mcp.until_status(task, "completed")
    assert text_of(done["result"]) == f"stopped at pass {parked + 1}"


def test_a_handler_pauses_itself_and_goes_on_at_the_resume(server: Server, start: Start) -> None:
    w = make_worker(server)

    @w.tool("self_pause")
    async def self_pause(ctx: Context, args: dict[str, Any]) -> str:
        steers = await ctx.pause("need a human look")
        return f"resumed with {steers}"

    start(w)
    mcp = server.mcp
    task = mcp.start_task("self_pause", {})
    paused = mcp.until_status(task, "paused")
    assert "need a human look" in (paused.get("statusMessage") or ""), paused
    mcp.call("tasks/steer", {"taskId": task, "message": "looks fine"})
    mcp.call("tasks/resume", {"taskId": task})
    done = mcp.until_status(task, "completed")
    assert text_of(done["result"]) == "resumed with ['looks fine']"


def test_input_puts_the_task_in_input_required_until_answered(server: Server, start: Start) -> None:
    w = make_worker(server)
    ask = {"method": "elicitation/create", "params": {
        "mode": "form", "message": "Go on?",
        "requestedSchema": {"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]}}}

    @w.tool("asks")
    async def asks(ctx: Context, args: dict[str, Any]) -> str:
        answer = await ctx.input("confirm", ask)
        return f"{answer['action']}: go={answer['content']['go']}"

    start(w)
    mcp = server.mcp
    task = mcp.start_task("asks", {})
    t = mcp.until_status(task, "input_required")
    assert t["inputRequests"]["confirm"]["params"]["message"] == "Go on?", t
    mcp.call("tasks/update", {"taskId": task,
                              "inputResponses": {"confirm": {"action": "accept", "content": {"go": True}}}})
    done = mcp.until_status(task, "completed")
    assert text_of(done["result"]) == "accept: go=True"


def test_cancel_cancels_the_handlers_asyncio_task_and_nothing_more_is_sent(server: Server, start: Start) -> None:
    w = make_worker(server)
    seen: dict[str, Any] = {}
    cancelled = threading.Event()

    @w.tool("long")
    async def long(ctx: Context, args: dict[str, Any]) -> str:
        await ctx.status("running")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen["reason"], seen["flag"] = ctx.cancel_reason, ctx.cancelled
            try:
                await ctx.status("still here")  # refused locally: nothing is sent
            except asyncio.CancelledError:
                seen["status after cancel"] = "refused"
            cancelled.set()
            raise
        return "not cancelled"

    start(w)
    mcp = server.mcp
    task = mcp.start_task("long", {})
    mcp.until(task, "the running message", lambda t: t.get("statusMessage") == "running")
    mcp.call("tasks/cancel", {"taskId": task})
    assert cancelled.wait(10), "the handler's asyncio task was cancelled"
    assert seen == {"reason": "cancel", "flag": True, "status after cancel": "refused"}
    done = mcp.until_status(task, "cancelled")
    assert done.get("statusMessage") != "still here"


def test_a_failed_subtask_is_seen_by_its_parent_and_fail_fast_fails_through(server: Server, start: Start) -> None:
    w = make_worker(server)
    kids: dict[str, list[str]] = {}

    @w.tool("boom")
    async def boom(ctx: Context, args: dict[str, Any]) -> str:
        if args.get("custom"):
            raise TaskFailed(-32001, "custom failure", {"why": "asked"})
        raise RuntimeError("kaboom")

    @w.tool("sleeper")
    async def sleeper(ctx: Context, args: dict[str, Any]) -> str:
        await asyncio.sleep(60)
        return "slept"

    @w.tool("supervisor")
    async def supervisor(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
        a = await ctx.spawn("boom", {})
        b = await ctx.spawn("boom", {"custom": True})
        kids[ctx.task_id] = [a.id, b.id]
        oa, ob = await a.outcome(), await b.outcome()
        return {"statuses": [oa.status, ob.status], "errors": [oa.error, ob.error], "ok": oa.ok}

    @w.tool("fail_fast_parent")
    async def fail_fast_parent(ctx: Context, args: dict[str, Any]) -> str:
        s = await ctx.spawn("sleeper", {})
        b = await ctx.spawn("boom", {}, fail_fast=True)
        kids[ctx.task_id] = [s.id, b.id]
        await s.outcome()
        return "not reached"

    start(w)
    mcp = server.mcp
    # Supervised: the parent sees both failures and completes.
    root = mcp.start_task("supervisor", {})
    done = mcp.until_status(root, "completed")
    s = done["result"]["structuredContent"]
    assert s["statuses"] == ["failed", "failed"] and s["ok"] is False
    assert s["errors"][0]["code"] == -32603 and "kaboom" in s["errors"][0]["message"]
    assert s["errors"][1] == {"code": -32001, "message": "custom failure", "data": {"why": "asked"}}
    a = mcp.get(kids[root][0])
    assert a["status"] == "failed" and "RuntimeError: kaboom" in a["error"]["message"], a
    assert mcp.get(kids[root][1])["error"]["code"] == -32001
    # Fail-fast: the child's failure fails the parent and cancels its sibling.
    root = mcp.start_task("fail_fast_parent", {})
    failed = mcp.until_status(root, "failed")
    sleeping, boomed = kids[root]
    assert failed["error"]["message"].startswith(f"subtask {boomed} failed"), failed
    assert failed["error"]["data"]["failedTaskId"] == boomed, failed
    assert mcp.get(sleeping)["status"] == "cancelled"
    assert mcp.get(boomed)["status"] == "failed"


def test_bad_arguments_are_an_error_result_and_never_reach_the_handler(server: Server, start: Start) -> None:
    w = make_worker(server)
    runs: list[dict[str, Any]] = []

    @w.tool("typed", input_schema={"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}},
                                   "required": ["n"]})
    async def typed(ctx: Context, args: dict[str, Any]) -> str:
        runs.append(args)
        return str(args["n"])

    @w.tool("spawns_badly")
    async def spawns_badly(ctx: Context, args: dict[str, Any]) -> str:
        codes = []
        for tool, arguments in (("typed", {"n": "x"}), ("no_such_tool", {})):
            try:
                await ctx.spawn(tool, arguments)
            except ReplyError as e:
                codes.append(e.code)
        return " ".join(codes)

    start(w)
    mcp = server.mcp
    for bad in ({"n": "seven"}, {"n": 99}, {}):
        r = mcp.call("tools/call", {"name": "typed", "arguments": bad})
        assert r["resultType"] == "complete" and r["isError"] is True, r
    task = mcp.start_task("spawns_badly", {})
    done = mcp.until_status(task, "completed")
    assert text_of(done["result"]) == "bad_arguments unknown_tool"
    assert done.get("childTaskIds", []) == []
    assert runs == [], "the handler never ran"
    ok = mcp.start_task("typed", {"n": 7})
    assert text_of(mcp.until_status(ok, "completed")["result"]) == "7"
    assert runs == [{"n": 7}]


def test_tool_error_is_an_is_error_result(server: Server, start: Start) -> None:
    w = make_worker(server)

    @w.tool("picky")
    async def picky(ctx: Context, args: dict[str, Any]) -> str:
        raise ToolError("the page could not be read: 404")

    start(w)
    task = server.mcp.start_task("picky", {})
    done = server.mcp.until_status(task, "completed")
    assert done["result"]["isError"] is True
    assert text_of(done["result"]) == "the page could not be read: 404"


def test_a_call_waits_working_until_a_worker_connects(server: Server, start: Start) -> None:
    def later_worker(name: str) -> Worker:
        w = make_worker(server, name)

        @w.tool("later", description="comes and goes")
        async def later(ctx: Context, args: dict[str, Any]) -> str:
            return f"finally, on {name}"

        return w

    mcp = server.mcp
    # A worker registers the tool and leaves.
    start(later_worker("first")).stop()
    until("the first worker to leave", lambda: server.metric("subtask_workers_connected") == 0)
    task = mcp.start_task("later", {})
    t = mcp.until(task, "the waiting message", lambda t: "none connected" in (t.get("statusMessage") or ""))
    assert t["status"] == "working"
    assert t["statusMessage"] == 'waiting for a worker serving "later" (none connected)'
    time.sleep(0.3)
    assert mcp.get(task)["status"] == "working"
    start(later_worker("second"))
    done = mcp.until_status(task, "completed")
    assert text_of(done["result"]) == "finally, on second"


def test_a_refused_hello_raises_worker_refused(server: Server) -> None:
    w = Worker(server.ws_url, token="not-the-token", name="intruder")

    @w.tool("anything")
    async def anything(ctx: Context, args: dict[str, Any]) -> str:
        return ""

    with pytest.raises(WorkerRefused) as e:
        asyncio.run(asyncio.wait_for(w.run(), 10))
    assert e.value.code == "unauthorized"


@pytest.fixture
def start(start_worker: Start) -> Start:
    return start_worker


def test_the_worker_reconnects_when_the_server_comes_back(server: Server, start: Start, tmp_path: Path) -> None:
    w = make_worker(server)

    @w.tool("echo")
    async def echo(ctx: Context, args: dict[str, Any]) -> str:
        return f"echo {args['say']}"

    start(w)
    first = server.mcp.start_task("echo", {"say": "one"})
    assert text_of(server.mcp.until_status(first, "completed")["result"]) == "echo one"
    server.proc.kill()
    server.proc.wait(10)
    until("the worker to see the connection drop", lambda: not w.connected)
    again = Server(tmp_path, port=server.port, name="server-again")
    try:
        until("the worker to reconnect", lambda: w.connected, timeout=15)
        task = again.mcp.start_task("echo", {"say": "two"})
        assert text_of(again.mcp.until_status(task, "completed")["result"]) == "echo two"
    finally:
        again.stop()


def test_a_worker_of_capacity_one_runs_a_whole_tree(server: Server, start: Start) -> None:
    # A parent awaiting its subtask's outcome is waiting on the server: it
    # does not hold the only slot, so the subtask runs on the same worker.
    w = make_worker(server, name="py-cap1", capacity=1)

    @w.tool("chain", input_schema={"type": "object", "properties": {"depth": {"type": "integer"}}})
    async def chain(ctx: Context, args: dict[str, Any]) -> str:
        if args["depth"] == 0:
            return "leaf"
        kid = await ctx.spawn("chain", {"depth": args["depth"] - 1})
        return f"{args['depth']}>" + (await kid.outcome()).text

    start(w)
    root = server.mcp.start_task("chain", {"depth": 3})
    done = server.mcp.until_status(root, "completed")
    assert text_of(done["result"]) == "3>2>1>leaf"


def test_a_handler_cancels_a_subtask_and_a_dependent_gets_its_dependencies(server: Server, start: Start) -> None:
    w = make_worker(server, name="py-deps")
    cancelled = threading.Event()

    @w.tool("word", input_schema=WORD)
    async def word(ctx: Context, args: dict[str, Any]) -> str:
        return args["word"]

    @w.tool("after_word")
    async def after_word(ctx: Context, args: dict[str, Any]) -> str:
        return ",".join(f"{d.status}:{d.text}" for d in ctx.dependencies)

    @w.tool("forever")
    async def forever(ctx: Context, args: dict[str, Any]) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    @w.tool("parent_of_three")
    async def parent(ctx: Context, args: dict[str, Any]) -> str:
        first = await ctx.spawn("word", {"word": "one"})
        second = await ctx.spawn("after_word", {}, after=[first])
        doomed = await ctx.spawn("forever", {})
        got = (await second.outcome()).text
        await doomed.cancel()
        return f"{got}|{(await doomed.outcome()).status}"

    start(w)
    root = server.mcp.start_task("parent_of_three", {})
    done = server.mcp.until_status(root, "completed")
    assert text_of(done["result"]) == "completed:one|cancelled", done
    assert cancelled.wait(5), "the cancelled subtask's handler was cancelled"
    assert server.mcp.get(done["childTaskIds"][2])["status"] == "cancelled"
