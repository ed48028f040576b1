// Interop: a model's view of background tasks (issue 28, docs/agents.md)
// through @modelcontextprotocol/client 2.4.0's plain `client.callTool`, the
// way a host calls any tool: no tasks extension, no task parameter, no
// ext-tasks session. The client runs with its default version negotiation
// (`legacy`: `initialize`, 2025-11-25, what a host gets without opting in), so
// the server's "a client that asked for no task" is the initialize path here
// (agents_py.py covers the 2026-07-28 path without the extension).
//
// Against `subtask serve --memory --background --tokens FILE` over Streamable
// HTTP at env SUBTASK_URL; two principals' bearer tokens come from env
// SUBTASK_TOKEN and SUBTASK_OTHER_TOKEN and reach the server through the
// transport's public `authProvider: {token}` option (the SDK's documented
// shape for API keys). Output: one `ok <check>` / `FAIL <check>: <reason>`
// line per check (lib.mjs).
//
// Public API used: new Client(info, {capabilities: {}}), client.connect(new
// StreamableHTTPClientTransport(url, {fetch, authProvider})),
// client.getNegotiatedProtocolVersion(), client.listTools(),
// client.callTool({name, arguments}, {timeout}), client.close().

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { SERVER_URL, TRANSPORT, assert, check, describe, failAll, finish, observingFetch, sleep } from "./lib.mjs";

const CONTROL_TOOLS = ["task_status", "task_wait", "task_steer", "task_pause", "task_resume", "task_cancel"];
const TERMINAL = new Set(["completed", "failed", "cancelled"]);
const UNKNOWN = "that you can see";
const POLL_MS = 100;

const CHECKS = [
  "tools-listed",
  "background-answer",
  "partial-results",
  "steer-replans",
  "pause-all-paused",
  "resume",
  "other-principal-unknown",
  "wait-answer",
  "cancel-another",
];

const textOf = (r) =>
  (r?.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("\n");

function sc(r) {
  const s = r?.structuredContent;
  assert(s && typeof s === "object", `structuredContent is ${describe(s)}; text: ${textOf(r).slice(0, 300)}`);
  return s;
}

const live = (counts) => Object.entries(counts).reduce((n, [s, k]) => (TERMINAL.has(s) ? n : n + k), 0);

async function connect(who, token) {
  const client = new Client({ name: `subtask-interop-agents-${who}`, version: "2.4.0" }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(SERVER_URL), {
    fetch: observingFetch(`agents/${who}`),
    authProvider: { token: async () => token },
  });
  await client.connect(transport);
  return client;
}

/** A model's tool call: the result, never thrown for an isError answer. */
const call = (client, name, args, timeoutMs = 10000) =>
  client.callTool({ name, arguments: args }, { timeout: timeoutMs });

async function status(client, taskId) {
  const r = await call(client, "task_status", { taskId });
  assert(!r.isError, `task_status is an isError result: ${textOf(r)}`);
  return r;
}

/** task_status with every page (following nextCursor): [first answer, every task listed]. */
async function statusPages(client, taskId) {
  const first = await status(client, taskId);
  const tasks = [...(sc(first).tasks ?? [])];
  let page = first;
  for (let i = 0; i < 100; i++) {
    const cursor = sc(page).nextCursor;
    if (!cursor) return [first, tasks];
    assert(textOf(page).includes(cursor), "the text does not tell the model the nextCursor");
    page = await call(client, "task_status", { taskId, cursor });
    assert(!page.isError, `task_status with a cursor: ${textOf(page)}`);
    tasks.push(...(sc(page).tasks ?? []));
  }
  throw new Error("task_status did not reach its last page in 100 pages");
}

async function pollStatus(client, taskId, until, what, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await status(client, taskId);
    if (until(sc(r))) return r;
    assert(Date.now() < deadline, `${what}: not seen within ${timeoutMs} ms; last: ${textOf(r).slice(0, 400)}`);
    await sleep(POLL_MS);
  }
}

/** SEP-2268 result order: each task's subtree is the block right before it; the root last. */
function checkResultOrder(tasks, root) {
  assert(tasks.at(-1)?.taskId === root, "the root is not listed last");
  const index = new Map(tasks.map((t, i) => [t.taskId, i]));
  assert(index.size === tasks.length, "a task is listed twice");
  const parent = new Map(tasks.map((t) => [t.taskId, t.parentTaskId ?? null]));
  const under = (id, top) => {
    for (let p = parent.get(id); p; p = parent.get(p)) if (p === top) return true;
    return false;
  };
  tasks.forEach((t, i) => {
    if (t.taskId === root) return assert(t.depth === 0, `root depth ${t.depth}`);
    const p = index.get(t.parentTaskId);
    assert(p !== undefined && p > i, `task ${t.taskId} is not listed before its parent ${t.parentTaskId}`);
    assert(t.depth === tasks[p].depth + 1, `task ${t.taskId} has depth ${t.depth}`);
    const n = tasks.filter((x) => under(x.taskId, t.taskId)).length;
    assert(
      tasks.slice(i - n, i).every((x) => under(x.taskId, t.taskId)),
      `the subtree of ${t.taskId} is not the block right before it`,
    );
    if (t.status === "completed") assert(typeof t.result === "string" && t.result, `completed ${t.taskId}: no result`);
    else if (t.status !== "failed")
      assert(t.result == null && t.error == null, `a ${t.status} task lists an outcome (status and outcome read at different times?): ${describe(t)}`);
  });
}

async function main() {
  if (TRANSPORT !== "http") {
    failAll(CHECKS, "this client runs over HTTP only");
    return;
  }
  const token = process.env.SUBTASK_TOKEN;
  const otherToken = process.env.SUBTASK_OTHER_TOKEN;
  if (!token || !otherToken) {
    failAll(CHECKS, "SUBTASK_TOKEN and SUBTASK_OTHER_TOKEN must be set (run through scripts/interop.sh)");
    return;
  }
  let alice;
  let bob;
  try {
    alice = await connect("alice", token);
    bob = await connect("bob", otherToken);
  } catch (e) {
    failAll(CHECKS, `connect failed: ${e?.message ?? e}`);
    return;
  }

  let taskId;
  let cancelledAfterSteer = 0;
  const need = () => assert(taskId, "no deep_research task (background-answer failed)");

  await check("tools-listed", async () => {
    const v = alice.getNegotiatedProtocolVersion();
    assert(v === "2025-11-25", `negotiated ${v}, expected 2025-11-25 (the client's default, initialize)`);
    const names = (await alice.listTools()).tools.map((t) => t.name);
    const missing = [...CONTROL_TOOLS, "deep_research", "fanout"].filter((n) => !names.includes(n));
    assert(missing.length === 0, `tools/list lacks ${missing}: ${names}`);
  });

  await check("background-answer", async () => {
    const started = Date.now();
    const r = await call(alice, "deep_research", { question: "How do MCP tasks handle failures?", pace: 10 });
    const took = Date.now() - started;
    assert(!r.isError, `isError result: ${textOf(r)}`);
    const id = sc(r).taskId;
    assert(typeof id === "string" && id, `no taskId in ${describe(sc(r))}`);
    assert(textOf(r).includes(id), "the text does not name the task id");
    assert(took < 3000, `the background answer took ${took} ms`);
    taskId = id;
    const s = sc(await status(alice, id));
    assert(s.status === "working", `right after the answer the task is ${s.status}`);
  });

  await check("partial-results", async () => {
    need();
    const seen = new Map();
    const deadline = Date.now() + 15000;
    for (;;) {
      const [first, tasks] = await statusPages(alice, taskId);
      const s = sc(first);
      assert(!TERMINAL.has(s.status), `the task ended (${s.status}) before partial results were read`);
      assert(s.total === tasks.length, `total ${s.total} but ${tasks.length} tasks listed`);
      checkResultOrder(tasks, taskId);
      const now = new Map(tasks.filter((t) => t.result).map((t) => [t.taskId, t.result]));
      for (const [id, res] of seen) assert(now.get(id) === res, `task ${id}'s result is no longer shown`);
      for (const [id, res] of now) seen.set(id, res);
      if (now.size >= 2) return;
      assert(Date.now() < deadline, "fewer than 2 subtask results within 15 s");
      await sleep(POLL_MS);
    }
  });

  await check("steer-replans", async () => {
    need();
    const r = await call(alice, "task_steer", { taskId, message: "focus on cancellation" });
    assert(!r.isError, `isError result: ${textOf(r)}`);
    const s = sc(
      await pollStatus(
        alice,
        taskId,
        (x) => (x.counts.cancelled ?? 0) > 0 && (x.statusMessage ?? "").includes("re-planned"),
        "the re-plan",
        8000,
      ),
    );
    assert(s.statusMessage.includes("cancellation"), `message ${s.statusMessage}`);
    assert(s.tasks.some((t) => t.status === "cancelled"), "no cancelled task listed");
    cancelledAfterSteer = s.counts.cancelled;
  });

  await check("pause-all-paused", async () => {
    need();
    const r = await call(alice, "task_pause", { taskId });
    assert(!r.isError && textOf(r).includes("pause"), `answer ${describe(r)}`);
    const s = await pollStatus(
      alice,
      taskId,
      (x) => x.status === "paused" && live(x.counts) > 0 && x.counts.paused === live(x.counts),
      "every live task paused",
      10000,
    );
    assert(textOf(s).includes("task_resume"), "a paused task's status does not mention task_resume");
    const w = await call(alice, "task_wait", { taskId, seconds: 1 });
    assert(!w.isError && sc(w).status === "paused", `task_wait: ${textOf(w)}`);
    const after = sc(await status(alice, taskId)).counts;
    const before = describe(sc(s).counts);
    assert(describe(after) === before, `while paused the counts moved: ${before} -> ${describe(after)}`);
  });

  await check("resume", async () => {
    need();
    const r = await call(alice, "task_resume", { taskId });
    assert(!r.isError && textOf(r).includes("resumed"), `answer ${describe(r)}`);
    const s = sc(await status(alice, taskId));
    assert(s.status === "working" && !s.counts.paused, `after task_resume: ${s.status} ${describe(s.counts)}`);
  });

  await check("other-principal-unknown", async () => {
    need();
    const nowhere = crypto.randomUUID();
    const base = await call(bob, "task_status", { taskId: nowhere });
    assert(base.isError === true && textOf(base).includes(UNKNOWN), `unknown id: ${describe(base)}`);
    const problems = [];
    for (const [name, args] of [
      ["task_status", { taskId }],
      ["task_steer", { taskId, message: "focus on history" }],
      ["task_cancel", { taskId }],
      ["task_pause", { taskId }],
      ["task_resume", { taskId }],
      ["task_wait", { taskId, seconds: 1 }],
    ]) {
      const r = await call(bob, name, args);
      if (r.isError !== true) problems.push(`${name}: not isError: ${textOf(r).slice(0, 200)}`);
      else if (textOf(r).replaceAll(taskId, "ID") !== textOf(base).replaceAll(nowhere, "ID"))
        problems.push(`${name}: ${textOf(r)} differs from the unknown-id answer`);
    }
    assert(problems.length === 0, problems.join("; "));
    const s = sc(await status(alice, taskId));
    assert(s.status === "working", `after the other principal's calls the task is ${s.status}`);
    assert((s.counts.cancelled ?? 0) === cancelledAfterSteer, `cancelled count moved: ${describe(s.counts)}`);
  });

  await check(
    "wait-answer",
    async () => {
      need();
      for (let i = 0; i < 4; i++) {
        const r = await call(alice, "task_wait", { taskId, seconds: 20 }, 35000);
        assert(!r.isError, `isError result: ${textOf(r)}`);
        const s = sc(r);
        if (s.status === "completed") {
          const t = textOf(r);
          assert(t.includes("Focus: cancellation"), `no "Focus: cancellation" in ${t.slice(0, 400)}`);
          assert(t.includes("Plan changes"), `no "Plan changes" in ${t.slice(-400)}`);
          assert(s.result?.content?.length, `structuredContent.result is ${describe(s.result)}`);
          return;
        }
        assert(s.status === "working" && textOf(r).includes("task_wait again"), `task_wait: ${textOf(r)}`);
      }
      throw new Error("not completed after 4 task_wait calls of 20 s");
    },
    { timeoutMs: 45000 },
  );

  await check("cancel-another", async () => {
    const r = await call(alice, "fanout", { width: 3, depth: 1, steps: 400, stepMs: 50 });
    assert(!r.isError, `isError result: ${textOf(r)}`);
    const other = sc(r).taskId;
    assert(typeof other === "string", `no taskId: ${describe(sc(r))}`);
    await pollStatus(alice, other, (x) => x.total === 4, "the fanout's tree", 5000);
    const c = await call(alice, "task_cancel", { taskId: other });
    assert(!c.isError && sc(c).status === "cancelled", `task_cancel: ${textOf(c)}`);
    const counts = sc(await status(alice, other)).counts;
    assert(describe(counts) === describe({ cancelled: 4 }), `after task_cancel: ${describe(counts)}`);
    const again = await call(alice, "task_cancel", { taskId: other });
    assert(textOf(again).includes("already ended"), `a second task_cancel: ${textOf(again)}`);
  });

  await alice.close().catch(() => {});
  await bob.close().catch(() => {});
}

await main();
finish();
