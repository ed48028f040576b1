"""examples/deep_research_worker.py as a subprocess against the real server."""

from __future__ import annotations

import time
from typing import Any, Callable

from support import REPO, TOKEN, Mcp, Server, WorkerProcess, text_of, until

Start = Callable[..., WorkerProcess]
EXAMPLE = REPO / "examples" / "deep_research_worker.py"
QUESTION = "How do MCP tasks handle long-running work?"


def start_example(start_process: Start, server: Server) -> WorkerProcess:
    assert EXAMPLE.exists(), EXAMPLE
    p = start_process(EXAMPLE, "--url", server.ws_url, "--token", TOKEN, name="deep-research")
    until("the example worker to connect", lambda: server.metric("subtask_workers_connected") == 1)
    return p


def sub_questions(mcp: Mcp, task_id: str) -> list[tuple[str, str, str]]:
    """(label, question, task id) of a sub-question task and its follow-ups, in
    pre-order: its children after search, read and summarize are follow-ups."""
    t = mcp.get(task_id)
    assert t["status"] == "completed", t
    s = t["result"]["structuredContent"]
    out = [(s["label"], s["question"], task_id)]
    for child in t["childTaskIds"][3:]:
        out += sub_questions(mcp, child)
    return out


def test_the_deep_research_worker_answers_citing_every_sub_question_in_order(
    server: Server, start_process: Start
) -> None:
    start_example(start_process, server)
    mcp = server.mcp
    root = mcp.start_task("py_deep_research", {"question": QUESTION, "breadth": 3, "depth": 2})
    done = mcp.until_status(root, "completed", timeout=90)
    answer = text_of(done["result"])
    assert answer.startswith(f"Question: {QUESTION}\n"), answer
    children = done["childTaskIds"]
    assert mcp.get(children[-1])["result"]["structuredContent"]["question"] == QUESTION, "synthesis last"
    found: list[tuple[str, str, str]] = []
    for child in children[:-1]:
        found += sub_questions(mcp, child)
    tops = [label for label, _, _ in found if "." not in label]
    assert tops == ["q1", "q2", "q3"], found
    assert any("." in label for label, _, _ in found), f"depth 2 has follow-ups: {found}"
    # Every sub-question, in order (follow-ups under their parent), with its task.
    pos = 0
    for label, question, task in found:
        at = answer.find(f"{label}. {question}", pos)
        assert at >= 0, f"{label} {question!r} missing or out of order in:\n{answer}"
        assert task in answer[at:], f"{label}'s task id"
        pos = at
    s = done["result"]["structuredContent"]
    assert [sq["label"] for sq in s["subQuestions"]] == [label for label, _, _ in found]
    assert s["notCovered"] == [] and s["planChanges"] == []
    assert "\nSources\n  [S1] " in answer


def test_the_deep_research_worker_replans_on_a_steer_and_parks_when_paused(
    server: Server, start_process: Start
) -> None:
    start_example(start_process, server)
    mcp = server.mcp
    root = mcp.start_task("py_deep_research", {"question": QUESTION, "breadth": 3, "depth": 1, "pace": 3})
    mcp.call("tasks/steer", {"taskId": root, "message": "focus on failure handling"})
    mcp.until(root, "the re-plan", lambda t: len(t.get("childTaskIds") or []) == 2
              and (t.get("statusMessage") or "").startswith("researching"))
    mcp.call("tasks/pause", {"taskId": root})

    def live(task: str) -> list[dict[str, Any]]:
        t = mcp.get(task)
        out = [] if t["status"] in ("completed", "failed", "cancelled") else [t]
        for c in t.get("childTaskIds") or []:
            out += live(c)
        return out

    parked = until("the tree to park", lambda: (lambda ts: ts if all(t["status"] == "paused" for t in ts)
                                                else None)(live(root)))
    time.sleep(1.5)
    assert [t["taskId"] for t in live(root)] == [t["taskId"] for t in parked], "nothing moves while paused"
    mcp.call("tasks/resume", {"taskId": root})
    done = mcp.until_status(root, "completed", timeout=90)
    answer = text_of(done["result"])
    s = done["result"]["structuredContent"]
    assert s["focus"] == "failure handling"
    assert s["steers"] == ["focus on failure handling"]
    assert [sq["label"] for sq in s["subQuestions"]] == ["q4", "q1", "q2"], "the focus first"
    assert s["subQuestions"][0]["question"] == "How are failures, cancellation and timeouts handled?"
    assert s["subQuestions"][0]["focused"] is True
    assert s["planChanges"] == [
        'focus "failure handling": dropped q3 (not started): '
        "How can a client interact with a running task (input, steering, pause)?",
        'focus "failure handling": added q4: How are failures, cancellation and timeouts handled?',
    ]
    assert "Focus: failure handling (steered mid-run)" in answer
    assert "q4. How are failures, cancellation and timeouts handled? [focus]" in answer
    assert len(done["childTaskIds"]) == 4, "q1, q2, q4 and the synthesis: q3 never started"
