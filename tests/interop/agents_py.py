#!/usr/bin/env python3
"""Interop client: a model's view of background tasks, through the Python SDK's plain tool API.

    agents_py.py [--mode auto|legacy]

Issue 28 ("Agents in the loop from any host"), driven by the released Python
`mcp` 2.3.0 the way a host drives any tool: `Client.call_tool` (which sends
`ClientSession.call_tool`), with no client extension at all, so the client
declares no tasks extension and the server answers a task tool in the
background. Mode: the SDK's default, `Client(mode="auto")`, which probes
`server/discover` and speaks 2026-07-28 (what a host built on this SDK gets
without choosing); `--mode legacy` runs the same checks over `initialize`
(2025-11-25), by hand.

Against `subtask serve --memory --background --tokens FILE` over Streamable
HTTP at env `SUBTASK_URL`; the bearer tokens of two principals come from env
`SUBTASK_TOKEN` (the model's user) and `SUBTASK_OTHER_TOKEN` (someone else),
sent as `Authorization: Bearer ...` by the `httpx2.AsyncClient` handed to the
SDK's `streamable_http_client(url, http_client=...)` (its documented way to
set headers). Prints one line per check, `ok <check>` or `FAIL <check>:
<reason>`, and exits non-zero if any failed.

With env `INTEROP_TRANSCRIPT=PATH` it writes the session as the client saw it
(each tool call and the answer's text, ids shortened, long answers trimmed,
polling loops folded) to PATH; `INTEROP_TRACE=1` prints every HTTP body.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Implementation

from pycheck import TRACE, CheckFailed, SetupError, expect, reason, run_checks, say

CONTROL_TOOLS = ["task_status", "task_wait", "task_steer", "task_pause", "task_resume", "task_cancel"]
TERMINAL = frozenset({"completed", "failed", "cancelled"})
QUESTION = "How do MCP tasks handle failures?"
PACE = 10  # deep_research at pace 10: about 20 s when steered as below
FOCUS = "focus on cancellation"
UNKNOWN = "that you can see"
POLL_S = 0.1  # between task_status calls while waiting for something
REQUEST_TIMEOUT_S = 10.0  # per request; task_wait gets its seconds on top
TOTAL_BUDGET_S = 75.0


# ----- the model's side of a session: calls, answers and the transcript ---------------------

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


def structured(result: CallToolResult) -> dict[str, Any]:
    sc = result.structured_content
    expect(isinstance(sc, dict), f"structuredContent is {sc!r}, expected an object; text: {text_of(result)[:300]}")
    return sc


class Transcript:
    """What the client sent and saw, for a reader: ids shortened, long answers trimmed."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.cursors: set[str] = set()
        self.started = time.monotonic()

    def short(self, text: str) -> str:
        text = UUID_RE.sub(lambda m: m.group(0)[:4] + "…", text)
        for c in self.cursors:
            text = text.replace(c, c[:6] + "…")
        return text

    def call(
        self,
        who: str,
        name: str,
        args: dict[str, Any],
        result: CallToolResult,
        keep: int,
        *,
        tail: int = 0,
        match: str | None = None,
        width: int = 190,
        at: float | None = None,
    ) -> None:
        """Records a call: the answer's first `keep` lines, its last `tail`, and lines matching `match`
        (with the line after each), `[…]` where lines were left out, each line cut to `width`; `at`: when
        the call was sent (time.monotonic())."""
        shown = self.short(json.dumps(args, ensure_ascii=False))
        clock = (at if at is not None else time.monotonic()) - self.started
        self.out.append(f"[{clock:4.1f} s] {who} → {name} {shown}")
        lines = self.short(text_of(result)).splitlines() or [""]
        wanted = set(range(min(keep, len(lines)))) | set(range(max(0, len(lines) - tail), len(lines)))
        if match:
            for i, line in enumerate(lines):
                if re.search(match, line):
                    wanted |= {i, i + 1} & set(range(len(lines)))
        cut: list[str] = []
        for i in sorted(wanted):
            if cut and i - 1 not in wanted or not cut and i > 0:
                cut.append("[…]")
            cut.append(lines[i] if len(lines[i]) <= width else lines[i][:width] + " […]")
        if max(wanted) < len(lines) - 1:
            cut.append("[…]")
        flag = " (isError)" if result.is_error else ""
        self.out.append(f"← {cut[0]}{flag}")
        self.out.extend(f"  {line}" for line in cut[1:])
        self.out.append("")

    def note(self, text: str) -> None:
        self.out.append(f"({self.short(text)})")
        self.out.append("")

    def write(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(self.out).rstrip() + "\n")


@dataclass
class Model:
    """One principal's client, calling tools as a host's model does."""

    who: str
    client: Client
    transcript: Transcript

    async def call(
        self,
        name: str,
        args: dict[str, Any],
        *,
        keep: int = 12,
        record: bool = True,
        timeout: float | None = None,
        **shown: Any,
    ) -> CallToolResult:
        """A plain tool call; recorded in the transcript (`keep` and `shown`: see `Transcript.call`)."""
        sent = time.monotonic()
        result = await self.client.call_tool(name, args, read_timeout_seconds=timeout)
        if isinstance(result.structured_content, dict) and isinstance(result.structured_content.get("nextCursor"), str):
            self.transcript.cursors.add(result.structured_content["nextCursor"])
        if record:
            self.transcript.call(self.who, name, args, result, keep, at=sent, **shown)
        return result

    async def status_pages(
        self, task_id: str, *, record: bool = False, keep: int = 12
    ) -> tuple[CallToolResult, list[dict[str, Any]]]:
        """task_status of `task_id`, following nextCursor to the last page: the first answer and every task listed."""
        first = await self.call("task_status", {"taskId": task_id}, record=record, keep=keep)
        expect(not first.is_error, f"task_status is an isError result: {text_of(first)}")
        tasks = list(structured(first).get("tasks") or [])
        page = first
        for _ in range(100):
            cursor = structured(page).get("nextCursor")
            if not cursor:
                return first, tasks
            expect(cursor in text_of(page), "the text does not tell the model the nextCursor")
            page = await self.call("task_status", {"taskId": task_id, "cursor": cursor}, record=record, keep=keep)
            expect(not page.is_error, f"task_status with a cursor is an isError result: {text_of(page)}")
            tasks.extend(structured(page).get("tasks") or [])
        raise CheckFailed("task_status did not reach its last page in 100 pages")

    async def poll_status(
        self, task_id: str, until: Callable[[dict[str, Any]], bool], what: str, timeout: float
    ) -> CallToolResult:
        """task_status until `until(structuredContent)`; records the number of calls and the last answer."""
        started = time.monotonic()
        n = 0
        while True:
            r = await self.call("task_status", {"taskId": task_id}, record=False)
            n += 1
            expect(not r.is_error, f"task_status is an isError result: {text_of(r)}")
            if until(structured(r)):
                break
            if time.monotonic() - started > timeout:
                raise CheckFailed(f"{what}: not seen within {timeout:.0f} s; last task_status: {text_of(r)[:400]}")
            await anyio.sleep(POLL_S)
        if n > 1:
            self.transcript.note(
                f"task_status called {n} times over {time.monotonic() - started:.1f} s until {what}; the last answer:"
            )
        return r


def counts_of(sc: dict[str, Any]) -> dict[str, int]:
    counts = sc.get("counts")
    expect(isinstance(counts, dict), f"counts is {counts!r}")
    return counts


def live(counts: dict[str, int]) -> int:
    return sum(n for s, n in counts.items() if s not in TERMINAL)


def check_result_order(tasks: list[dict[str, Any]], root: str) -> None:
    """SEP-2268 result order: each task's subtree is the block right before it; the root last."""
    expect(
        bool(tasks) and tasks[-1].get("taskId") == root,
        f"the root is not listed last: {[t.get('taskId') for t in tasks][-3:]}",
    )
    index = {t["taskId"]: i for i, t in enumerate(tasks)}
    expect(len(index) == len(tasks), "a task is listed twice")
    parent = {t["taskId"]: t.get("parentTaskId") for t in tasks}
    for t in tasks:
        p = t.get("parentTaskId")
        if t["taskId"] == root:
            expect(t.get("depth") == 0, f"the root has depth {t.get('depth')}")
            continue
        expect(p in index, f"task {t['taskId']}'s parent {p} is not listed")
        expect(index[p] > index[t["taskId"]], f"task {t['taskId']} is listed after its parent {p}")
        expect(t.get("depth") == tasks[index[p]].get("depth", -9) + 1, f"task {t['taskId']} depth {t.get('depth')}")

    def under(tid: str, top: str) -> bool:
        while tid is not None:
            tid = parent.get(tid)
            if tid == top:
                return True
        return False

    for i, t in enumerate(tasks):
        below = [x for x in tasks if under(x["taskId"], t["taskId"])]
        block = tasks[i - len(below) : i]
        expect(
            all(under(x["taskId"], t["taskId"]) for x in block),
            f"the subtree of {t['taskId']} is not the block right before it",
        )


def check_entries(tasks: list[dict[str, Any]], counts: dict[str, int]) -> None:
    """Each entry's status and outcome agree: a result for a completed task only, an error for a failed one only."""
    for t in tasks:
        if t.get("status") == "completed":
            expect(isinstance(t.get("result"), str) and t["result"], f"completed task {t['taskId']} lists no result")
        elif t.get("status") != "failed":
            expect(
                t.get("result") is None and t.get("error") is None,
                f"a {t.get('status')} task lists an outcome (status and outcome read at different times?): "
                f"{json.dumps(t)}; counts {json.dumps(counts)}",
            )


# ----- checks ----------------------------------------------------------------------------------


@dataclass
class Env:
    url: str
    mode: Literal["auto", "legacy"]
    token: str
    other_token: str
    alice: Model | None = None
    bob: Model | None = None
    transcript: Transcript = field(default_factory=Transcript)
    research: str | None = None  # the deep_research task
    results_seen: dict[str, str] = field(default_factory=dict)
    cancelled_after_steer: int = 0

    def need(self) -> tuple[Model, str]:
        expect(self.alice is not None, "the client did not connect (see setup)")
        expect(self.research is not None, "no deep_research task (background-answer failed)")
        assert self.alice is not None and self.research is not None
        return self.alice, self.research


async def check_tools_listed(env: Env) -> None:
    expect(env.alice is not None, "the client did not connect (see setup)")
    assert env.alice is not None
    client = env.alice.client
    wanted = "2026-07-28" if env.mode == "auto" else "2025-11-25"
    expect(client.protocol_version == wanted, f"negotiated {client.protocol_version!r}, expected {wanted}")
    names = [t.name for t in (await client.list_tools()).tools]
    missing = [n for n in CONTROL_TOOLS + ["deep_research", "fanout"] if n not in names]
    expect(not missing, f"tools/list lacks {missing}: {names}")
    env.transcript.note(f"tools/list ({client.protocol_version}, no tasks extension declared): {', '.join(names)}")


async def check_background_answer(env: Env) -> None:
    expect(env.alice is not None, "the client did not connect (see setup)")
    assert env.alice is not None
    args = {"question": QUESTION, "pace": PACE}
    env.transcript.started = started = time.monotonic()  # the transcript's clock: 0 when the model starts the task
    r = await env.alice.call("deep_research", args, width=1000)
    took = time.monotonic() - started
    expect(not r.is_error, f"isError result: {text_of(r)}")
    sc = structured(r)
    task_id = sc.get("taskId")
    expect(isinstance(task_id, str) and task_id, f"structuredContent has no taskId: {sc}")
    assert isinstance(task_id, str)
    expect(task_id in text_of(r), "the answer's text does not name the task id")
    expect(took < 3.0, f"the background answer took {took:.1f} s")
    env.research = task_id
    status = await env.alice.call("task_status", {"taskId": task_id}, record=False)
    now = structured(status).get("status")
    expect(now == "working", f"right after the answer the task is {now}")


async def check_partial_results(env: Env) -> None:
    alice, task_id = env.need()
    started = time.monotonic()
    polls = 0
    while True:
        first, tasks = await alice.status_pages(task_id)
        polls += 1
        sc = structured(first)
        expect(sc.get("status") not in TERMINAL, f"the task ended ({sc.get('status')}) before partial results")
        expect(sc.get("total") == len(tasks), f"total {sc.get('total')} but {len(tasks)} tasks listed over the pages")
        check_result_order(tasks, task_id)
        check_entries(tasks, counts_of(sc))
        # A result once shown stays shown, unchanged.
        now = {t["taskId"]: t["result"] for t in tasks if t.get("result")}
        for tid, res in env.results_seen.items():
            expect(now.get(tid) == res, f"task {tid}'s result {res!r} is no longer shown (now {now.get(tid)!r})")
        env.results_seen.update(now)
        if len(now) >= 2:
            break
        expect(time.monotonic() - started < 15, f"fewer than 2 subtask results within 15 s ({polls} polls)")
        await anyio.sleep(POLL_S)
    if polls > 1:
        env.transcript.note(
            f"task_status called {polls} times over {time.monotonic() - started:.1f} s until two subtasks had results; "
            "the next answer:"
        )
    await alice.status_pages(task_id, record=True, keep=40)


async def check_steer(env: Env) -> None:
    alice, task_id = env.need()
    r = await alice.call("task_steer", {"taskId": task_id, "message": FOCUS})
    expect(not r.is_error, f"isError result: {text_of(r)}")
    s = await alice.poll_status(
        task_id,
        lambda sc: counts_of(sc).get("cancelled", 0) > 0 and "re-planned" in (sc.get("statusMessage") or ""),
        "the re-plan showed (a sub-question cancelled, the root's message says re-planned)",
        8,
    )
    alice.transcript.call(alice.who, "task_status", {"taskId": task_id}, s, 2, match=r"\[cancelled\]", tail=1)
    sc = structured(s)
    expect("focus" in sc["statusMessage"] and "cancellation" in sc["statusMessage"], f"message {sc['statusMessage']!r}")
    cancelled = [t for t in sc.get("tasks") or [] if t.get("status") == "cancelled"]
    expect(cancelled, "counts say cancelled but no cancelled task is listed")
    env.cancelled_after_steer = counts_of(sc)["cancelled"]


async def check_pause(env: Env) -> None:
    alice, task_id = env.need()
    r = await alice.call("task_pause", {"taskId": task_id})
    expect(not r.is_error, f"isError result: {text_of(r)}")
    expect("pause" in text_of(r), f"answer {text_of(r)!r}")

    def all_paused(sc: dict[str, Any]) -> bool:
        c = counts_of(sc)
        return sc.get("status") == "paused" and live(c) > 0 and c.get("paused", 0) == live(c)

    s = await alice.poll_status(task_id, all_paused, "every live task was paused", 10)
    alice.transcript.call(alice.who, "task_status", {"taskId": task_id}, s, 2, tail=1)
    expect("task_resume" in text_of(s), f"a paused task's status does not mention task_resume: {text_of(s)[-300:]}")
    before = counts_of(structured(s))
    w = await alice.call("task_wait", {"taskId": task_id, "seconds": 1}, timeout=REQUEST_TIMEOUT_S + 1)
    expect(not w.is_error, f"task_wait: isError result: {text_of(w)}")
    expect(structured(w).get("status") == "paused", f"task_wait says {structured(w).get('status')}, expected paused")
    expect("task_resume" in text_of(w), f"task_wait's text does not say task_resume: {text_of(w)}")
    after = counts_of(structured(await alice.call("task_status", {"taskId": task_id}, record=False)))
    expect(after == before, f"while paused the counts moved from {before} to {after}")


async def check_resume(env: Env) -> None:
    alice, task_id = env.need()
    r = await alice.call("task_resume", {"taskId": task_id})
    expect(not r.is_error, f"isError result: {text_of(r)}")
    expect("resumed" in text_of(r), f"answer {text_of(r)!r}")
    s = await alice.call("task_status", {"taskId": task_id}, keep=2)
    sc = structured(s)
    expect(sc.get("status") == "working", f"after task_resume the task is {sc.get('status')}")
    expect(counts_of(sc).get("paused", 0) == 0, f"after task_resume tasks are still paused: {counts_of(sc)}")


async def check_other_principal(env: Env) -> None:
    alice, task_id = env.need()
    expect(env.bob is not None, "the second principal's client did not connect (see setup)")
    assert env.bob is not None
    bob = env.bob
    nowhere = str(uuid.uuid4())
    baseline = await bob.call("task_status", {"taskId": nowhere}, record=False)
    expect(baseline.is_error is True, f"an id that exists nowhere is not an isError answer: {text_of(baseline)}")
    expect(UNKNOWN in text_of(baseline), f"unknown-id answer {text_of(baseline)!r}")
    calls = [
        ("task_status", {"taskId": task_id}),
        ("task_steer", {"taskId": task_id, "message": "focus on history"}),
        ("task_cancel", {"taskId": task_id}),
        ("task_pause", {"taskId": task_id}),
        ("task_resume", {"taskId": task_id}),
        ("task_wait", {"taskId": task_id, "seconds": 1}),
    ]
    problems = []
    for name, args in calls:
        r = await bob.call(name, args, keep=1, width=1000, timeout=REQUEST_TIMEOUT_S + 1)
        if r.is_error is not True:
            problems.append(f"{name}: not an isError answer: {text_of(r)[:200]!r}")
        elif text_of(r).replace(task_id, "ID") != text_of(baseline).replace(nowhere, "ID"):
            problems.append(f"{name}: {text_of(r)!r} differs from the unknown-id answer {text_of(baseline)!r}")
    expect(not problems, "; ".join(problems))
    # The first principal's task went on untouched.
    s = await alice.call("task_status", {"taskId": task_id}, keep=2)
    sc = structured(s)
    expect(sc.get("status") == "working", f"after the other principal's calls the task is {sc.get('status')}")
    expect(
        counts_of(sc).get("cancelled", 0) == env.cancelled_after_steer,
        f"cancelled count {counts_of(sc).get('cancelled', 0)}, was {env.cancelled_after_steer} before bob's calls",
    )


async def check_wait(env: Env) -> None:
    alice, task_id = env.need()
    done = None
    for _ in range(4):
        r = await alice.call(
            "task_wait", {"taskId": task_id, "seconds": 20}, keep=7, match="^Plan changes", timeout=REQUEST_TIMEOUT_S + 20
        )
        expect(not r.is_error, f"isError result: {text_of(r)}")
        status = structured(r).get("status")
        if status == "completed":
            done = r
            break
        expect(status == "working", f"task_wait says {status}")
        expect("task_wait again" in text_of(r), f"a running task's wait does not say task_wait again: {text_of(r)}")
    expect(done is not None, "not completed after 4 task_wait calls of 20 s")
    assert done is not None
    text = text_of(done)
    expect("Focus: cancellation" in text, f"the answer has no 'Focus: cancellation': {text[:400]}")
    expect("Plan changes" in text, f"the answer has no 'Plan changes': {text[-400:]}")
    result = structured(done).get("result")
    expect(isinstance(result, dict) and result.get("content"), f"structuredContent.result is {result!r}")


async def check_cancel_another(env: Env) -> None:
    expect(env.alice is not None, "the client did not connect (see setup)")
    assert env.alice is not None
    alice = env.alice
    r = await alice.call("fanout", {"width": 3, "depth": 1, "steps": 400, "stepMs": 50}, keep=1)
    expect(not r.is_error, f"isError result: {text_of(r)}")
    other = structured(r).get("taskId")
    expect(isinstance(other, str), f"no taskId: {structured(r)}")
    assert isinstance(other, str)
    await alice.poll_status(other, lambda sc: sc.get("total") == 4, "the fanout's tree was built", 5)
    c = await alice.call("task_cancel", {"taskId": other})
    expect(not c.is_error, f"isError result: {text_of(c)}")
    expect(structured(c).get("status") == "cancelled", f"task_cancel says {structured(c).get('status')}: {text_of(c)}")
    s = await alice.call("task_status", {"taskId": other}, keep=2)
    counts = counts_of(structured(s))
    expect(counts == {"cancelled": 4}, f"after task_cancel the counts are {counts}, expected 4 cancelled")
    again = await alice.call("task_cancel", {"taskId": other}, keep=1)
    expect("already ended" in text_of(again), f"a second task_cancel says {text_of(again)!r}")


CHECKS: list[tuple[str, Callable[[Env], Awaitable[None]], float]] = [
    ("tools-listed", check_tools_listed, 5),
    ("background-answer", check_background_answer, 5),
    ("partial-results", check_partial_results, 17),
    ("steer-replans", check_steer, 10),
    ("pause-all-paused", check_pause, 14),
    ("resume", check_resume, 5),
    ("other-principal-unknown", check_other_principal, 10),
    ("wait-answer", check_wait, 45),
    ("cancel-another", check_cancel_another, 12),
]


# ----- runner ------------------------------------------------------------------------------------


def trace_hooks(who: str) -> dict[str, list[Callable[[Any], Awaitable[None]]]]:
    async def on_request(request: httpx2.Request) -> None:
        body = (await request.aread()).decode("utf-8", "replace")
        say(f"trace [{who}] -> {request.method} {body}".rstrip())

    async def on_response(response: httpx2.Response) -> None:
        if response.headers.get("content-type", "").startswith("application/json"):
            body = (await response.aread()).decode("utf-8", "replace")
            say(f"trace [{who}] <- HTTP {response.status_code} {body}")
        else:
            say(f"trace [{who}] <- HTTP {response.status_code} {response.headers.get('content-type', '')}")

    return {"request": [on_request], "response": [on_response]}


async def connect(stack: AsyncExitStack, env: Env, who: str, token: str) -> Model:
    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, read=70.0),
            event_hooks=trace_hooks(who) if TRACE else None,
        )
    )
    client = Client(
        streamable_http_client(env.url, http_client=http),
        mode=env.mode,
        read_timeout_seconds=REQUEST_TIMEOUT_S,
        client_info=Implementation(name=f"subtask-interop-agents-{who}", version="mcp-2.3.0"),
    )
    return Model(who, await stack.enter_async_context(client), env.transcript)


async def run(env: Env) -> bool:
    ok = True
    async with AsyncExitStack() as stack:
        # Entered here, outside the per-check time limits (see py_mcp.py).
        for who, token in (("alice", env.token), ("bob", env.other_token)):
            try:
                model = await connect(stack, env, who, token)
            except Exception as e:  # noqa: BLE001 - the checks report it too
                say(f"FAIL setup: {who}'s client did not connect: {reason(e)}")
                ok = False
                continue
            setattr(env, who, model)
        ok = await run_checks(CHECKS, env, TOTAL_BUDGET_S) and ok
    path = os.environ.get("INTEROP_TRANSCRIPT")
    if path:
        env.transcript.write(path)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["auto", "legacy"], default="auto", help="Client(mode=...), the SDK's default")
    args = parser.parse_args()
    try:
        if os.environ.get("SUBTASK_TRANSPORT", "http") != "http":
            raise SetupError("this client runs over HTTP only (SUBTASK_TRANSPORT=http)")
        url = os.environ.get("SUBTASK_URL")
        token = os.environ.get("SUBTASK_TOKEN")
        other = os.environ.get("SUBTASK_OTHER_TOKEN")
        if not (url and token and other):
            raise SetupError("SUBTASK_URL, SUBTASK_TOKEN and SUBTASK_OTHER_TOKEN must be set (scripts/interop.sh sets them)")
    except SetupError as e:
        say(f"FAIL setup: {e}")
        return 2
    return 0 if anyio.run(run, Env(url=url, mode=args.mode, token=token, other_token=other)) else 1


if __name__ == "__main__":
    sys.exit(main())
