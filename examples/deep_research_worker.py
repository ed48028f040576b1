"""`py_deep_research`: the deep-research demo of `subtask serve`
(src/demo/deep_research.rs) as a Python worker (docs/workers.md).

    subtask serve --worker-token secret
    pip install ./sdk/python
    python examples/deep_research_worker.py --url ws://127.0.0.1:8750/workers --token secret

then call the tool `py_deep_research` from any MCP client, e.g.
{"question": "How do MCP tasks handle long-running work?", "breadth": 3, "depth": 2, "pace": 20}.

A simulated research agent over a small built-in corpus (offline: three of
the Rust demo's topics, MCP tasks, grid batteries and sleep), run as a tree
of subtasks, all served by this worker:

* The root plans up to `breadth` sub-questions by keyword scoring (a step,
  so a replay plans the same) and researches them in two lanes: at most two
  top-level sub-questions run at once, the others wait in the plan.
* Each sub-question (`py_deep_research.sub_question`) runs `search`,
  `read` and `summarize` subtasks in turn (each gets the previous one's
  output as arguments), then, while `depth` allows, follow-up
  sub-questions one level down, chained one after the other.
* A steer "focus on X" re-plans: waiting sub-questions that do not match X
  are dropped and matching ones added (marked [focus]); follow-ups chosen
  later must match X. Every change shows in a status message and in the
  answer's "Plan changes".
* A `synthesize` subtask writes the answer from the sub-questions' findings
  in plan order (focused ones first, follow-ups under their parent), citing
  sub-question tasks by id and sources as [Sn].

Every model or search call is a journaled step (`ctx.step`) that sleeps
100-300 ms times `pace`, with checkpoints between them: a run can be
watched, paused (the tree parks at its next checkpoints) and steered; and
after this worker dies, another replays the tree without redoing finished
steps or subtasks. Differences from the Rust demo, from the worker
protocol: a handler can spawn subtasks but not cancel them, so waiting
sub-questions stay in the root's plan until a lane frees (a dropped one was
never a task); a sub-question's follow-ups are chosen when the root starts
it (with the focus known then), not when it finishes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from subtask_worker import Context, Outcome, Subtask, TaskFailed, ToolError, Worker, tool_result

NAME = "py_deep_research"
LANES = 2

# ----- the corpus (from src/demo/corpus.rs) -----------------------------------------

TOPICS = {
    "mcp-tasks": "MCP tasks and long-running tool calls",
    "batteries": "grid-scale battery storage",
    "sleep": "sleep and circadian rhythms",
}

# id | topic | title | source, then the body.
DOCUMENT_TABLE = """
tasks-01 | mcp-tasks | Tasks in a nutshell | MCP Tasks Guide (draft), section 1
    A request that may take long can be augmented with a task. The server answers at once with a taskId
    and does the work in the background. A task moves through working, input_required, completed, failed
    and cancelled; the last three statuses are terminal.
tasks-02 | mcp-tasks | Polling with tasks/get | MCP Tasks Guide (draft), section 3
    Clients track a task by polling tasks/get no faster than its suggested pollInterval. Servers may
    also push status notifications, but polling stays the reliable fallback. The statusMessage tells the
    user what a long task is doing right now.
tasks-03 | mcp-tasks | Getting results with tasks/result | MCP Tasks Guide (draft), section 4
    tasks/result waits until the task is terminal and returns exactly what the original request would
    have returned, such as a CallToolResult. A tool error is a completed task whose result has isError
    set. A failed task carries a JSON-RPC error instead.
tasks-04 | mcp-tasks | Time to live and deletion | MCP Tasks Guide (draft), section 5
    Every task has a ttl in milliseconds counted from its creation. When the ttl elapses the server may
    fail unfinished work as expired and later delete the task. Clients should fetch results before the
    retention window closes.
tasks-05 | mcp-tasks | Cancelling a task | MCP Tasks Guide (draft), section 6
    tasks/cancel asks the server to stop the work. The task turns cancelled only after its handler has
    unwound and every subtask has ended. A handler that ignores the cancel is aborted after a grace
    period.
tasks-06 | mcp-tasks | When the server needs input | MCP Tasks Guide (draft), section 7
    When the server needs the user, the task moves to input_required and lists its inputRequests. The
    client answers with tasks/update and the task returns to working. Input keys are never reused within
    a task.
tasks-07 | mcp-tasks | SEP-2268: subtasks | SEP-2268 (proposal text)
    A task may spawn subtasks linked by parentTaskId and childTaskIds, forming a task tree. A parent
    completes only after all of its children are terminal. Results of a task tree stream children first,
    in childTaskIds order.
tasks-08 | mcp-tasks | SEP-2669: pause, resume and steer | SEP-2669 (proposal text)
    tasks/pause halts a task and its live descendants at their next safe point, and tasks/resume
    continues them. tasks/steer queues a message that the handler receives at its next checkpoint, once
    and in order. Clients without pause support see a paused task as working.
tasks-09 | mcp-tasks | Failure handling in task trees | ops.example.org/mcp/failure-handling
    By default a parent supervises its subtasks: a failed child is reported to the parent, which decides
    what to do. A fail-fast subtask instead cancels its siblings and fails the parent. When a deep call
    times out, return partial results with isError rather than failing outright, and retry idempotent
    steps as a new task.
batt-01 | batteries | Why grids store energy | energy-notes.example.org/grid-storage
    Grid batteries absorb surplus solar and wind power and release it during evening peaks. Most
    installed battery systems deliver their rated power for two to four hours. Storage also provides
    fast frequency response, reacting within milliseconds.
batt-02 | batteries | LFP versus NMC chemistry | energy-notes.example.org/chemistry
    Lithium iron phosphate (LFP) cells store less energy per kilogram than nickel manganese cobalt (NMC)
    cells but last more cycles. LFP has become the dominant battery chemistry for stationary storage
    because weight matters little there. LFP is also more tolerant of heat and overcharge.
batt-03 | batteries | Degradation and cycle life | battery-lab.example.edu/degradation
    Battery capacity fades with every charge cycle and with calendar time. Deep discharges, high
    temperatures and long periods at a high state of charge accelerate degradation. Operators keep cells
    between roughly 10 and 90 percent charge to extend their life.
batt-04 | batteries | Thermal runaway and fire safety | battery-lab.example.edu/safety
    A damaged or overheated lithium-ion cell can enter thermal runaway, releasing heat and flammable
    gas. Modern installations separate modules, monitor cell temperatures and vent gas so a failure
    cannot spread. Fire codes require spacing and suppression systems at large battery sites.
batt-05 | batteries | The cost of storage | energy-notes.example.org/costs
    Battery pack prices fell by about 90 percent over the last decade. The levelised cost of storage
    depends on cycles per year, round-trip efficiency and financing. Revenue stacking combines
    arbitrage, capacity payments and grid services.
batt-06 | batteries | Recycling and second life | circular.example.org/batteries
    Retired electric-vehicle packs with 70 to 80 percent of their capacity can serve a second life in
    stationary storage. Hydrometallurgical recycling recovers lithium, nickel and cobalt for new cells.
    Recycling LFP pays less because its materials are cheaper.
batt-07 | batteries | Long-duration alternatives | energy-notes.example.org/long-duration
    Pumped hydro still provides most of the world's storage capacity. Flow batteries, compressed air and
    iron-air cells target durations of ten hours or more. Seasonal storage may instead rely on hydrogen.
sleep-01 | sleep | The circadian clock | sleep-handbook.example.org/circadian
    A master clock in the brain runs a roughly 24-hour circadian rhythm that morning light resets every
    day. It times hormone release such as melatonin, body temperature and alertness. Evening light from
    screens delays the clock and makes falling asleep harder.
sleep-02 | sleep | Sleep stages | sleep-handbook.example.org/stages
    A night of sleep cycles through light sleep, deep slow-wave sleep and REM sleep about every 90
    minutes. Deep sleep dominates the first half of the night and REM sleep the second. Memory
    consolidation depends on both stages.
sleep-03 | sleep | Caffeine and adenosine | sleep-handbook.example.org/caffeine
    Adenosine builds up while we are awake and creates sleep pressure. Caffeine blocks adenosine
    receptors, masking tiredness without removing it. Its half-life of five to six hours means an
    afternoon coffee still affects sleep at night.
sleep-04 | sleep | Sleep debt | health-review.example.com/sleep-debt
    Adults need about seven to nine hours of sleep. Chronic short sleep impairs attention, mood and
    glucose regulation, and people underestimate their own impairment. Recovery sleep at weekends repays
    only part of the debt.
sleep-05 | sleep | Naps | health-review.example.com/naps
    A nap of 10 to 20 minutes improves alertness without grogginess. Longer naps reach deep sleep and
    can cause sleep inertia on waking. Late-afternoon naps reduce sleep pressure at bedtime.
sleep-06 | sleep | Shift work and jet lag | health-review.example.com/shift-work
    Night shift work and jet lag put the internal clock out of step with the day. Timed bright light and
    melatonin can shift the clock by an hour or two per day. Long-term shift work is linked to metabolic
    and cardiovascular risk.
"""

# id | topic | question, then `keywords | follow-up facets`.
FACET_TABLE = """
tasks-lifecycle | mcp-tasks | How does a long-running call become a task, and how is it tracked?
    task, background, working, poll, status, long | tasks-results, tasks-subtasks
tasks-interaction | mcp-tasks | How can a client interact with a running task (input, steering, pause)?
    input, steer, pause, resume, update | tasks-subtasks
tasks-failures | mcp-tasks | How are failures, cancellation and timeouts handled?
    fail, error, cancel, timeout, abort, retry | tasks-ttl
tasks-results | mcp-tasks | How does a client get the result of a task?
    result, terminal, iserror, calltoolresult | tasks-ttl
tasks-subtasks | mcp-tasks | How do subtasks form a task tree?
    subtask, parent, child, tree | tasks-failures
tasks-ttl | mcp-tasks | How long is task state kept, and when is it deleted?
    ttl, delete, retention, expire |
batt-role | batteries | What role does battery storage play on the grid?
    grid, peak, solar, wind, frequency, hours | batt-alternatives, batt-cost
batt-chemistry | batteries | Which battery chemistries are used for stationary storage?
    lfp, nmc, chemistry, phosphate, cobalt, lithium | batt-degradation
batt-degradation | batteries | How and why do batteries degrade?
    degrad, capacity, fade, cycle, temperature, charge | batt-safety
batt-safety | batteries | What are the fire risks, and how are they managed?
    fire, thermal, runaway, safety, gas, suppression |
batt-cost | batteries | What does storage cost, and how does it earn money?
    cost, price, revenue, arbitrage, levelised, financ |
batt-lifecycle | batteries | What happens to batteries at the end of their life?
    recycl, second life, retired, recover |
batt-alternatives | batteries | What are the alternatives for long-duration storage?
    pumped, hydro, flow, long-duration, hydrogen, seasonal |
sleep-clock | sleep | How does the circadian clock regulate sleep?
    circadian, clock, light, melatonin, rhythm | sleep-shift
sleep-stages | sleep | What happens during the stages of sleep?
    stage, rem, slow-wave, memory, cycle |
sleep-caffeine | sleep | How does caffeine affect sleep?
    caffeine, adenosine, coffee, half-life, pressure | sleep-naps
sleep-debt | sleep | What does too little sleep do?
    debt, short sleep, impair, recovery, hours | sleep-naps
sleep-naps | sleep | Do naps help?
    nap, inertia, alert |
sleep-shift | sleep | How do shift work and jet lag disrupt sleep?
    shift, jet lag, night, melatonin |
"""


def _records(table: str) -> list[tuple[list[str], list[str]]]:
    out: list[tuple[list[str], list[str]]] = []
    for line in table.splitlines():
        if line.strip():
            if line.startswith(" "):
                out[-1][1].append(line.strip())
            else:
                out.append(([f.strip() for f in line.split(" | ")], []))
    return out


def _list(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


@dataclass(frozen=True)
class Document:
    id: str
    topic: str
    title: str
    source: str
    body: str


@dataclass(frozen=True)
class Facet:
    id: str
    topic: str
    question: str
    keywords: list[str]
    follow_ups: list[str]


DOCUMENTS = [Document(h[0], h[1], h[2], h[3], " ".join(body)) for h, body in _records(DOCUMENT_TABLE)]
FACETS = [Facet(h[0], h[1], h[2], _list(line.split("|")[0]), _list((line + "|").split("|")[1]))
          for h, (line,) in _records(FACET_TABLE)]
DOCUMENT = {d.id: d for d in DOCUMENTS}
FACET = {f.id: f for f in FACETS}

STOP_WORDS = set("""a about after all also an and any are as at be been best between but by can could did
do does doing done each for from get give good has have how i if in into is it its just know me more most
much my need not of on one or other our out over should so some than that the their them then there these
they this those to up us use used very was way we were work works what when where which while who why
will with would you your""".split())


def stem(word: str) -> str:
    """A crude stemmer: plurals and -ing/-ed endings ("running" -> "run")."""
    n = len(word)
    if n > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if n > 5 and word.endswith("ing"):
        s = word[:-3]
    elif n > 4 and word.endswith("ed") and not word.endswith("eed"):
        s = word[:-2]
    elif n > 3 and word.endswith("s") and not word.endswith(("ss", "us")):
        return word[:-1]
    else:
        return word
    if len(s) > 3 and s[-1] == s[-2] and s[-1] not in "aeiousz":
        s = s[:-1]
    return s


def terms(text: str) -> list[str]:
    """Lower-case search terms of `text`, stop words dropped, stemmed, deduplicated."""
    out: list[str] = []
    for raw in re.split(r"[^\w\-/']", text.lower()):
        word = raw.strip("-/_'")
        word = word[:-2] if word.endswith("'s") else word
        if len(word) < 2 or word in STOP_WORDS:
            continue
        s = stem(word)
        if s not in out:
            out.append(s)
    return out


def term_matches(a: str, b: str) -> bool:
    """Equal, or the shorter (4+ characters) less its last one starts the longer."""
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    return short == long or (len(short) >= 4 and long.startswith(short[:-1]))


def score_document(d: Document, keywords: list[str]) -> int:
    title, body = d.title.lower(), d.body.lower()
    return sum(2 * title.count(k) + body.count(k) for k in keywords if k)


def score_facet(f: Facet, ts: list[str]) -> int:
    q = terms(f.question)
    return sum(3 * any(term_matches(t, w) for w in q) + 2 * any(term_matches(t, k) for k in f.keywords)
               for t in ts)


def score_topic(topic: str, ts: list[str]) -> int:
    total = 0
    for d in DOCUMENTS:
        if d.topic == topic:
            words = terms(f"{d.title} {d.body}")
            total += sum(1 for t in ts if any(term_matches(t, w) for w in words))
    return total


def search(keywords: list[str], topic: str | None, limit: int) -> list[tuple[Document, int]]:
    """The best documents: scoring above 0 and at least a third of the best."""
    hits = [(i, d, score_document(d, keywords)) for i, d in enumerate(DOCUMENTS)
            if topic is None or d.topic == topic]
    hits = sorted((h for h in hits if h[2] > 0), key=lambda h: (-h[2], h[0]))
    best = hits[0][2] if hits else 0
    return [(d, s) for _, d, s in hits if 3 * s >= best][:limit]


def excerpt(body: str, keywords: list[str], n: int) -> str:
    """Up to `n` sentences mentioning the keywords, in text order."""
    sentences = [s.strip() for s in re.split(r"(?<=\. )", body) if s.strip()]

    def hits(s: str) -> int:
        return sum(1 for k in keywords if k in s.lower())

    ranked = sorted((i for i in range(len(sentences)) if hits(sentences[i]) > 0),
                    key=lambda i: (-hits(sentences[i]), i))[:max(n, 1)]
    return " ".join(sentences[i] for i in (sorted(ranked) or [0]))


def sub_question_of(f: Facet) -> dict[str, Any]:
    return {"question": f.question, "keywords": list(f.keywords), "facet": f.id, "topic": f.topic}


def free_form(subject: str) -> dict[str, Any]:
    return {"question": f"What do the sources say about {subject.rstrip('?.!')}?",
            "keywords": terms(subject), "facet": None, "topic": None}


def matches(sq: dict[str, Any], focus: list[str]) -> bool:
    if sq.get("facet"):
        return score_facet(FACET[sq["facet"]], focus) > 0
    return any(term_matches(t, k) for k in sq["keywords"] for t in focus)


def rank_facets(ts: list[str]) -> list[Facet]:
    scores = {t: score_topic(t, ts) for t in TOPICS}
    best = max(scores.values())
    if best == 0:
        return []
    ranked = [(i, f, 4 * score_facet(f, ts) + scores[f.topic]) for i, f in enumerate(FACETS)
              if 2 * scores[f.topic] >= best]
    return [f for _, f, _ in sorted(ranked, key=lambda r: (-r[2], r[0]))]


def plan(question: str, breadth: int) -> list[dict[str, Any]]:
    ranked = rank_facets(terms(question))
    return [sub_question_of(f) for f in ranked[:breadth]] if ranked else [free_form(question)]


def plan_focus(focus: str, exclude: set[str], n: int) -> list[dict[str, Any]]:
    t = terms(focus)
    matching = [f for f in rank_facets(t) if score_facet(f, t) > 0]
    if not matching:
        return [free_form(focus)]
    return [sub_question_of(f) for f in matching if f.id not in exclude][:n]


def focus_of(steer: str) -> str | None:
    """The subject of "focus on X", "focus: X", "concentrate on X" or "only X"."""
    lower = steer.strip().lower()
    for p in ("focus on ", "focus:", "concentrate on ", "only "):
        if lower.startswith(p):
            focus = lower[len(p):].strip().rstrip(".!").strip()
            return focus or None
    return None


def q(s: str) -> str:
    """A string quoted as Rust's `{:?}` quotes it."""
    return json.dumps(s)


async def simulate(pace: int, ms: int) -> None:
    """The stand-in for a search or model call."""
    await asyncio.sleep(ms * pace / 1000)


# ----- the worker's tools -------------------------------------------------------------

worker_tools: list[tuple[str, dict[str, Any], Any, str]] = []


def tool(name: str, description: str, schema: dict[str, Any]) -> Any:
    def register(fn: Any) -> Any:
        worker_tools.append((name, schema, fn, description))
        return fn
    return register


SQ_SCHEMA = {"type": "object", "required": ["label", "question", "keywords", "level", "pace"]}
ROOT_SCHEMA = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "The question to research."},
        "breadth": {"type": "integer", "minimum": 1, "maximum": 6, "default": 3,
                    "description": "Top-level sub-questions to plan; each follows up on at most max(1, breadth / 2) more."},
        "depth": {"type": "integer", "minimum": 1, "maximum": 3, "default": 2,
                  "description": "Levels of sub-questions: 1 plans only top-level ones."},
        "pace": {"type": "integer", "minimum": 1, "maximum": 100, "default": 1,
                 "description": "Slow-down factor of every step (20: about 40 seconds, slow enough to steer by hand)."},
    },
    "required": ["question"],
    "additionalProperties": False,
}


@dataclass
class Entry:
    """A top-level sub-question of the plan."""

    label: str
    sq: dict[str, Any]
    focused: bool
    state: str = "queued"  # queued, running, done, dropped
    handle: Subtask | None = None
    outcome: Outcome | None = None


@dataclass
class Plan:
    breadth: int
    depth: int
    pace: int
    entries: list[Entry] = field(default_factory=list)
    claimed: set[str] = field(default_factory=set)
    focus: str | None = None
    focus_terms: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    def add(self, sq: dict[str, Any], focused: bool) -> Entry:
        e = Entry(f"q{len(self.entries) + 1}", sq, focused)
        self.entries.append(e)
        if sq.get("facet"):
            self.claimed.add(sq["facet"])
        return e

    def reserve(self, sq: dict[str, Any], level: int) -> list[dict[str, Any]]:
        """Claims the follow-ups of `sq` (and theirs, down to `depth`), matching the focus."""
        if level >= self.depth or not sq.get("facet"):
            return []
        picks = [g for g in FACET[sq["facet"]].follow_ups if g not in self.claimed
                 and (not self.focus_terms or score_facet(FACET[g], self.focus_terms) > 0)]
        picks = picks[:max(1, self.breadth // 2)]
        self.claimed.update(picks)
        out = []
        for g in picks:
            f = sub_question_of(FACET[g])
            out.append({**f, "followUps": self.reserve(f, level + 1)})
        return out


async def start_entry(ctx: Context, p: Plan, e: Entry) -> None:
    args = {**e.sq, "label": e.label, "level": 1, "pace": p.pace, "followUps": p.reserve(e.sq, 1)}
    e.handle = await ctx.spawn("py_deep_research.sub_question", args)
    e.state = "running"


async def replan(ctx: Context, p: Plan, steer: str) -> None:
    focus = focus_of(steer)
    if focus is None:
        change = f"steer {q(steer)} noted; it names no focus (\"focus on ...\"), plan unchanged"
        await ctx.status(change)
        p.changes.append(change)
        return
    focus_terms = terms(focus)

    def decide() -> dict[str, Any]:
        live = [e for e in p.entries if e.state != "dropped"]
        covered = any(matches(e.sq, focus_terms) for e in live)
        victims = [e.label for e in live if e.state == "queued" and not matches(e.sq, focus_terms)]
        additions = plan_focus(focus, p.claimed, max(1, len(victims)))
        if covered and all(a["facet"] is None for a in additions):
            additions = []
        return {"victims": victims, "additions": additions}

    decision = await ctx.step(f"replan for {q(focus)}", decide)
    p.focus, p.focus_terms = focus, focus_terms
    changes = []
    for e in p.entries:
        if e.label in decision["victims"] and e.state == "queued":
            e.state = "dropped"
            changes.append(f"dropped {e.label} (not started): {e.sq['question']}")
    for sq in decision["additions"]:
        e = p.add(sq, True)
        changes.append(f"added {e.label}: {sq['question']}")
    if not changes:
        changes.append("nothing queued to change; follow-ups will keep to the focus")
    await ctx.status(f"re-planned for focus {q(focus)}: {'; '.join(changes)}")
    p.changes.extend(f"focus {q(focus)}: {c}" for c in changes)


async def wait_any(running: list[Entry]) -> list[str]:
    """Waits up to 250 ms for a running sub-question to end; the labels of those that did."""
    waits = {asyncio.ensure_future(e.handle.outcome()): e.label for e in running if e.handle}
    done, pending = await asyncio.wait(waits, timeout=0.25)
    for w in pending:
        w.cancel()
    return [waits[w] for w in waits if w in done]


def missing(label: str, task_id: str | None, question: str, level: int, reason: str) -> dict[str, Any]:
    return {"label": label, "taskId": task_id, "question": question, "level": level, "reason": reason,
            "summary": "", "notes": [], "followUps": [], "steers": []}


def finding_of(label: str, task_id: str | None, question: str, level: int, o: Outcome | None) -> dict[str, Any]:
    if o is not None and o.ok and isinstance(o.structured, dict):
        return o.structured
    reason = "not started" if o is None else o.status if o.status == "cancelled" else \
        f"failed: {o.text}" if o.status == "failed" else o.text
    return missing(label, task_id, question, level, reason)


@tool(NAME, "Researches a question in a small built-in corpus (offline; topics: " + ", ".join(TOPICS.values())
      + ") as a tree of subtasks, served by a Python worker: plans up to `breadth` sub-questions, runs "
      "search -> read -> summarize subtasks for each, follows up one level deeper while `depth` allows, and "
      "writes an answer citing its subtasks (task ids) and sources. Steer the root with \"focus on <subject>\" "
      "to re-plan. Pause and resume take effect between steps. Resumable.", ROOT_SCHEMA)
async def root(ctx: Context, args: dict[str, Any]) -> dict[str, Any]:
    question = args["question"].strip()
    if not question:
        raise ToolError(f"{NAME}: question is required (a non-empty string)")
    p = Plan(args.get("breadth", 3), args.get("depth", 2), args.get("pace", 1))

    async def plan_step() -> list[dict[str, Any]]:
        await simulate(p.pace, 200)
        return plan(question, p.breadth)

    await ctx.status(f"planning: scoring {len(DOCUMENTS)} documents against the question")
    planned = await ctx.step("plan", plan_step)
    pending = await ctx.checkpoint()
    await ctx.status(f"planned {len(planned)} sub-questions: " + " | ".join(s["question"] for s in planned))
    for sq in planned:
        p.add(sq, False)

    # Research until every sub-question of the plan is done, re-planning on
    # steers. Which sub-questions ended at each turn is a step: a replay
    # takes the same turns, and the same steers at the same checkpoints.
    steers: list[str] = []

    async def fill_lanes() -> None:
        for e in p.entries:
            if e.state == "queued" and sum(x.state == "running" for x in p.entries) < LANES:
                await start_entry(ctx, p, e)

    while True:
        await fill_lanes()
        pending += await ctx.checkpoint()
        for steer in pending:
            await replan(ctx, p, steer)
            steers.append(steer)
        pending = []
        await fill_lanes()
        running = [e for e in p.entries if e.state == "running"]
        if not running:
            break
        waiting = [e.label for e in p.entries if e.state == "queued"]
        await ctx.status("researching: " + ", ".join(f"{e.label} running" for e in running)
                         + "".join(f", {label} waiting" for label in waiting))
        for label in await ctx.step("wait for a sub-question", wait_any, running):
            e = next(x for x in p.entries if x.label == label)
            e.outcome, e.state = await e.handle.outcome(), "done"  # type: ignore[union-attr]

    # Focused sub-questions first, then plan order.
    tops = sorted((e for e in p.entries if e.state == "done"), key=lambda e: not e.focused)
    findings = [{**finding_of(e.label, e.handle.id if e.handle else None, e.sq["question"], 1, e.outcome),
                 "focused": e.focused} for e in tops]
    dropped = [missing(e.label, None, e.sq["question"], 1, "dropped when the plan changed (never started)")
               for e in p.entries if e.state == "dropped"]
    synth = await ctx.spawn("py_deep_research.synthesize", {
        "question": question, "focus": p.focus, "findings": findings, "dropped": dropped,
        "changes": p.changes, "pace": p.pace})
    await ctx.status(f"synthesizing the answer (task {synth.id})")
    o = await synth.outcome()
    late = await ctx.checkpoint()
    if o.status == "failed":
        raise TaskFailed(-32603, f"synthesis failed: {o.text}")
    if not o.ok:
        return o.result or tool_result("the synthesis subtask was cancelled", is_error=True)
    text = o.text + "".join(f"\nNote: steer {q(s)} arrived after the research finished; not applied.\n"
                            for s in late)
    structured = {**o.structured, "synthesisTaskId": synth.id, "steers": steers + late,
                  "breadth": p.breadth, "depth": p.depth}
    await ctx.status("answer ready")
    return tool_result(text, structured)


@tool("py_deep_research.sub_question", "One sub-question of py_deep_research: search, read, summarize, "
      "then follow-ups.", SQ_SCHEMA)
async def sub_question(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    label, level, pace = a["label"], a["level"], a["pace"]
    scope = TOPICS.get(a.get("topic") or "", "the whole corpus")
    steers: list[str] = []
    await ctx.status(f"{label}: searching {scope}: {a['question']}")
    search_task = await ctx.spawn("py_deep_research.search",
                                  {"keywords": a["keywords"], "topic": a.get("topic"), "pace": pace})
    found = await search_task.outcome()
    steers += await ctx.checkpoint()
    await ctx.status(f"{label}: reading the sources found")
    upstream = {"docIds": [h["docId"] for h in found.structured["hits"]]} if found.ok else \
        {"skip": f"search: {found.text or found.status}"}
    read_task = await ctx.spawn("py_deep_research.read", {**upstream, "keywords": a["keywords"], "pace": pace})
    read = await read_task.outcome()
    steers += await ctx.checkpoint()
    await ctx.status(f"{label}: summarizing")
    upstream = {"notes": read.structured["notes"]} if read.ok else {"skip": f"read: {read.text or read.status}"}
    summarize_task = await ctx.spawn("py_deep_research.summarize", {**upstream, "pace": pace})
    summary = await summarize_task.outcome()
    steers += await ctx.checkpoint()
    finding = missing(label, ctx.task_id, a["question"], level, "")
    finding["steps"] = {"search": search_task.id, "read": read_task.id, "summarize": summarize_task.id}
    if summary.ok:
        finding.update(reason=None, summary=summary.structured["summary"], notes=summary.structured["notes"])
    else:
        finding["reason"] = f"summarize: {summary.text or summary.status}"

    follow_ups = a.get("followUps") or []
    if finding["reason"] is None and finding["notes"] and follow_ups:
        handles: list[tuple[str, str, Subtask]] = []
        for i, f in enumerate(follow_ups):
            fl = f"{label}.{i + 1}"
            after = [handles[-1][2]] if handles else []
            h = await ctx.spawn("py_deep_research.sub_question",
                                {**f, "label": fl, "level": level + 1, "pace": pace}, after=after)
            handles.append((fl, f["question"], h))
        await ctx.status(f"{label}: following up: " + " | ".join(f"{fl} {fq}" for fl, fq, _ in handles))
        for fl, fq, h in handles:
            o = await h.outcome()
            steers += await ctx.checkpoint()
            finding["followUps"].append(finding_of(fl, h.id, fq, level + 1, o))
    finding["steers"] = steers
    text = f"{label}: {a['question']}\n{finding['summary']}" if finding["reason"] is None \
        else f"{label}: {finding['reason']}"
    await ctx.status(f"{label}: done")
    return tool_result(text, finding)


@tool("py_deep_research.search", "Ranks the corpus's documents for keywords.", {"type": "object"})
async def search_tool(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    topic, keywords, pace = a.get("topic"), a["keywords"], a["pace"]
    pool = sum(1 for d in DOCUMENTS if topic is None or d.topic == topic)
    await ctx.status(f"searching: {', '.join(keywords)}")
    for first in range(1, pool + 1, 4):
        await ctx.checkpoint()
        last = min(first + 3, pool)
        await ctx.status(f"searching: scanning documents {first}-{last} of {pool}")
        await ctx.step(f"scan {first}-{last}", simulate, pace, 100)
    hits = search(keywords, topic, 3)
    await ctx.status(f"found {len(hits)} sources")
    return tool_result(f"{len(hits)} hits: " + "; ".join(d.title for d, _ in hits),
                       {"keywords": keywords, "hits": [{"docId": d.id, "title": d.title, "score": s}
                                                       for d, s in hits]})


@tool("py_deep_research.read", "Reads the sources a search found and takes notes.", {"type": "object"})
async def read_tool(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    if "skip" in a:
        return tool_result(f"skipped: {a['skip']}", is_error=True)
    docs = [DOCUMENT[i] for i in a["docIds"] if i in DOCUMENT]
    await ctx.status(f"reading {len(docs)} sources")
    await simulate(a["pace"], 150)
    notes = []
    for i, d in enumerate(docs):
        await ctx.checkpoint()
        await ctx.status(f"reading {i + 1}/{len(docs)}: {d.title}")

        async def take_note(d: Document = d) -> dict[str, Any]:  # the (simulated) model call
            await simulate(a["pace"], 200)
            return {"docId": d.id, "title": d.title, "source": d.source,
                    "excerpt": excerpt(d.body, a["keywords"], 2)}

        notes.append(await ctx.step(f"read {d.id}", take_note))
    return tool_result(f"took notes on {len(notes)} sources", {"notes": notes})


@tool("py_deep_research.summarize", "Condenses notes, citing them.", {"type": "object"})
async def summarize_tool(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    if "skip" in a:
        return tool_result(f"skipped: {a['skip']}", is_error=True)
    notes = a["notes"]
    await ctx.checkpoint()
    await ctx.status(f"condensing {len(notes)} notes")
    await ctx.step("condense", simulate, a["pace"], 200)
    await ctx.checkpoint()
    await ctx.status("checking citations")
    await ctx.step("check citations", simulate, a["pace"], 100)
    summary = " ".join(f"{n['excerpt']} [{i + 1}]" for i, n in enumerate(notes)) \
        or "No document in the corpus addresses this."
    return tool_result(summary, {"summary": summary, "notes": notes})


@tool("py_deep_research.synthesize", "Writes the answer from the sub-questions' findings.", {"type": "object"})
async def synthesize(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    await ctx.status(f"collecting {len(a['findings'])} sub-question findings")
    await simulate(a["pace"], 150)
    await ctx.checkpoint()
    stack = [(f, None, f.get("focused", False)) for f in reversed(a["findings"])]
    sub_questions: list[dict[str, Any]] = []
    not_covered = [{k: m[k] for k in ("label", "taskId", "question", "reason")} for m in a["dropped"]]
    citations: list[dict[str, Any]] = []
    findings = ""
    gist: list[str] = []
    while stack:
        f, parent, focused = stack.pop()
        for fu in reversed(f.get("followUps") or []):
            stack.append((fu, f["taskId"], focused))
        reason = f.get("reason") or (None if f["notes"] else "no document in the corpus addresses it")
        if reason:
            not_covered.append({"label": f["label"], "taskId": f["taskId"], "question": f["question"],
                                "reason": reason})
            continue
        sources, cited = [], []
        for n in f["notes"]:
            c = next((c for c in citations if c["docId"] == n["docId"]), None)
            if c is None:
                c = {"ref": f"S{len(citations) + 1}", "docId": n["docId"], "title": n["title"],
                     "source": n["source"], "citedBy": []}
                citations.append(c)
            c["citedBy"].append(f["taskId"])
            sources.append({k: c[k] for k in ("ref", "docId", "title", "source")})
            cited.append(f"{n['excerpt']} [{c['ref']}]")
        if f["level"] == 1 and len(gist) < 3:
            first = re.split(r"(?<=\. )", f["notes"][0]["excerpt"])[0].strip()
            gist.append(f"{first} [{sources[0]['ref']}]")
        summary = " ".join(cited)
        indent = "   " * (f["level"] - 1)
        steps = f"; summarized by task {f['steps']['summarize']}" if f.get("steps") else ""
        findings += (f"{indent}{f['label']}. {f['question']}{' [focus]' if focused else ''}\n"
                     f"{indent}   {summary}\n{indent}   (task {f['taskId']}{steps})\n")
        sub_questions.append({"taskId": f["taskId"], "label": f["label"], "question": f["question"],
                              "level": f["level"], "parentTaskId": parent, "focused": focused,
                              "summary": summary, "sources": sources, "steps": f.get("steps")})
    await ctx.status(f"writing the answer from {len(sub_questions)} sub-questions")
    await ctx.step("write the answer", simulate, a["pace"], 200)  # the (simulated) model call
    await ctx.checkpoint()

    t = f"Question: {a['question']}\n"
    if a.get("focus"):
        t += f"Focus: {a['focus']} (steered mid-run)\n"
    if sub_questions:
        t += f"\nIn short: {' '.join(gist)}\n\nFindings\n{findings}"
    else:
        t += f"\nThe built-in corpus has nothing on this. It covers {', '.join(TOPICS.values())}.\n"
    if a["changes"]:
        t += "\nPlan changes\n" + "".join(f"  - {c}\n" for c in a["changes"])
    if not_covered:
        t += "\nNot covered\n" + "".join(
            f"  - {m['label']} {m['question']} (task {m['taskId'] or 'none'}): {m['reason']}\n"
            for m in not_covered)
    if citations:
        t += "\nSources\n" + "".join(
            f"  [{c['ref']}] \"{c['title']}\", {c['source']} (cited by task {', task '.join(c['citedBy'])})\n"
            for c in citations)
    return tool_result(t, {"question": a["question"], "focus": a.get("focus"), "subQuestions": sub_questions,
                           "citations": citations, "notCovered": not_covered, "planChanges": a["changes"]})


def make_worker(url: str, token: str, name: str = "py-deep-research", capacity: int = 32) -> Worker:
    """A worker serving the demo's tools (`capacity` handlers running at
    once; those waiting for their subtasks do not count)."""
    w = Worker(url, token=token, name=name, capacity=capacity)
    for tool_name, schema, fn, description in worker_tools:
        w.tool(tool_name, description=description, input_schema=schema)(fn)
    return w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="ws://127.0.0.1:8750/workers")
    ap.add_argument("--token", required=True)
    ap.add_argument("--name", default="py-deep-research")
    ap.add_argument("--capacity", type=int, default=32)
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(make_worker(a.url, a.token, a.name, a.capacity).run())


if __name__ == "__main__":
    main()
