// The SDK against a real `subtask serve`: a worker of this process serves
// the tools, the tests drive the server as an MCP client.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Worker, ToolError, TaskFailed, ReplyError, WorkerRefused, textOf as sdkTextOf } from "@subtask/worker";
import { Mcp, Points, Server, TOKEN, sleep, startWorker, textOf, until } from "./support.mjs";

let server;
let mcp;
let main;
const points = new Points();
const runs = new Map(); // tool -> how many times its handler started
const count = (tool) => runs.set(tool, (runs.get(tool) ?? 0) + 1);

function tools(w) {
  w.tool({
    name: "tree_root",
    description: "spawns `width` branches, then a server tool",
    inputSchema: { type: "object", properties: { width: { type: "integer", minimum: 1, maximum: 5 } }, required: ["width"] },
  }, async (ctx, { width }) => {
    count("tree_root");
    await ctx.status("spawning", { progress: 0, total: width });
    const kids = [];
    for (let i = 0; i < width; i++) kids.push(await ctx.spawn("tree_branch", { i, leaves: 2 }));
    const server = await ctx.spawn("fanout", { width: 0, steps: 0 });
    assert.equal(await ctx.patched("v2"), true);
    await ctx.checkpoint();
    const outcomes = await Promise.all(kids.map((k) => k.outcome()));
    const fanout = await server.outcome();
    return {
      content: [{ type: "text", text: outcomes.map(sdkTextOf).join(" | ") }],
      structuredContent: { ids: kids.map((k) => k.id), server: server.id, fanout: fanout.status },
    };
  });
  w.tool({ name: "tree_branch" }, async (ctx, { i, leaves }) => {
    count("tree_branch");
    // Spawned at once: the order of the requests is the order of the children.
    const kids = await Promise.all([...Array(leaves).keys()].map((j) => ctx.spawn("tree_leaf", { i, j })));
    await ctx.checkpoint();
    const outs = await Promise.all(kids.map((k) => k.outcome()));
    return `branch ${i}: ${outs.map((o) => o.result.structuredContent.leaf).join(", ")}`;
  });
  w.tool({ name: "tree_leaf" }, async (ctx, { i, j }) => {
    count("tree_leaf");
    const n = await ctx.step("compute", () => i * 10 + j);
    return { leaf: `leaf ${i}.${j}`, n };
  });

  w.tool({ name: "steered" }, async (ctx) => {
    await ctx.status("ready");
    points.hit("steered:ready");
    for (let k = 0; k < 500; k++) {
      const steers = await ctx.checkpoint();
      if (steers.length) return `steered: ${steers.join("; ")}`;
      await sleep(20);
    }
    return "no steer came";
  });

  w.tool({ name: "pausable" }, async (ctx) => {
    points.hit("pausable:running");
    await points.wait("pausable:go");
    await ctx.checkpoint();
    points.hit("pausable:past");
    return "resumed";
  });
  w.tool({ name: "self_pause" }, async (ctx) => {
    const steers = await ctx.pause("have a look");
    points.hit("self_pause:past");
    return `continued with ${JSON.stringify(steers)}`;
  });

  w.tool({ name: "confirm" }, async (ctx) => {
    const answer = await ctx.input("go", {
      method: "elicitation/create",
      params: { message: "go on?", requestedSchema: { type: "object", properties: { go: { type: "boolean" } } } },
    });
    return `answer: ${answer.action} ${JSON.stringify(answer.content)}`;
  });

  w.tool({ name: "cancellable" }, async (ctx) => {
    const child = await ctx.spawn("sleeper", {});
    points.hit("cancellable:ctx", ctx);
    try {
      await child.outcome();
      points.hit("cancellable:outcome", "returned");
    } catch (e) {
      points.hit("cancellable:outcome", e);
    }
    try {
      await ctx.status("after the cancel");
      points.hit("cancellable:status", "sent");
    } catch (e) {
      points.hit("cancellable:status", e);
    }
    return "a result nobody may see";
  });
  w.tool({ name: "sleeper" }, async (ctx) => {
    points.hit("sleeper:ctx", ctx);
    await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
    return "woke";
  });

  w.tool({ name: "failing_parent" }, async (ctx) => {
    const a = await ctx.spawn("boom", {});
    const b = await ctx.spawn("boom_coded", {});
    const [oa, ob] = [await a.outcome(), await b.outcome()];
    return `a ${oa.status}: ${oa.error?.message}; b ${ob.status}: ${ob.error?.code} ${JSON.stringify(ob.error?.data)}`;
  });
  w.tool({ name: "boom" }, async () => {
    throw new Error("kaput");
  });
  w.tool({ name: "boom_coded" }, async () => {
    throw new TaskFailed(-32001, "custom failure", { why: "test" });
  });

  w.tool({
    name: "strict",
    inputSchema: { type: "object", properties: { n: { type: "integer", maximum: 10 } }, required: ["n"], additionalProperties: false },
  }, async (_ctx, { n }) => {
    count("strict");
    return `n=${n}`;
  });
  w.tool({ name: "spawn_bad" }, async (ctx) => {
    const codes = [];
    for (const [tool, args] of [["strict", { n: "x" }], ["strict", { n: 99 }], ["no_such_tool", {}]]) {
      try {
        await ctx.spawn(tool, args);
        codes.push("spawned");
      } catch (e) {
        codes.push(e instanceof ReplyError ? e.code : String(e));
      }
    }
    const ok = await ctx.spawn("strict", { n: 3 });
    return `${codes.join(",")}; then ${sdkTextOf(await ok.outcome())}`;
  });

  w.tool({ name: "ordered" }, async (ctx) => {
    const a = await ctx.spawn("gated", { name: "a" });
    const b = await ctx.spawn("gated", { name: "b" }, { after: [a] });
    const c = await ctx.spawn("gated", { name: "c" }, { after: [a.id, b] });
    const outs = await Promise.all([a, b, c].map((k) => k.outcome()));
    return outs.map(sdkTextOf).join(",");
  });
  w.tool({ name: "gated" }, async (_ctx, { name }) => {
    points.hit(`gated:${name}`);
    await points.wait(`gated:${name}:go`);
    return name;
  });

  w.tool({ name: "tool_error" }, async () => {
    count("tool_error");
    throw new ToolError("bad input: try again");
  });
}

// Registered by the main worker and by a second one of a test: the
// second replays what the first did.
function replayTools(w) {
  w.tool({ name: "replayed" }, async (ctx) => {
    if (!ctx.replay) await points.wait("replayed:steer-sent");
    const steers = await ctx.checkpoint();
    const answer = await ctx.input("k", { method: "elicitation/create", params: { message: "which?", requestedSchema: { type: "object" } } });
    const step = await ctx.step("x", () => (count("replayed:step"), { attempt: ctx.attempt }));
    const patched = await ctx.patched("p1");
    if (!ctx.replay) {
      points.hit("replayed:first-done", ctx);
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
      throw new Error("aborted");
    }
    return `attempt ${ctx.attempt}: steers ${JSON.stringify(steers)}, answer ${JSON.stringify(answer.content)}, step ${JSON.stringify(step)}, patched ${patched}`;
  });
}

before(async () => {
  server = await Server.start();
  mcp = server.mcp;
  main = await startWorker(server, "main", (w) => (tools(w), replayTools(w)));
});

after(async () => {
  await main?.stop();
  await server?.stop();
});

test("a tree of worker subtasks completes, childTaskIds in spawn order, results right", async () => {
  const root = await mcp.startTask("tree_root", { width: 3 });
  const done = await mcp.untilStatus(root, "completed");
  assert.equal(textOf(done.result),
    "branch 0: leaf 0.0, leaf 0.1 | branch 1: leaf 1.0, leaf 1.1 | branch 2: leaf 2.0, leaf 2.1");
  const { ids, server: fanout } = done.result.structuredContent;
  assert.deepEqual(done.childTaskIds, [...ids, fanout], "the children in the order they were spawned");
  assert.equal(done.result.structuredContent.fanout, "completed", "a server tool spawned by a worker");
  for (const [i, id] of ids.entries()) {
    const branch = await mcp.get(id);
    assert.equal(branch.status, "completed");
    assert.equal(branch.parentTaskId, root);
    assert.equal(textOf(branch.result), `branch ${i}: leaf ${i}.0, leaf ${i}.1`);
    assert.equal(branch.childTaskIds.length, 2);
    for (const [j, leafId] of branch.childTaskIds.entries()) {
      const leaf = await mcp.get(leafId);
      assert.equal(leaf.status, "completed");
      assert.equal(leaf.parentTaskId, id);
      assert.deepEqual(leaf.result.structuredContent, { leaf: `leaf ${i}.${j}`, n: i * 10 + j });
      assert.equal(textOf(leaf.result), JSON.stringify({ leaf: `leaf ${i}.${j}`, n: i * 10 + j }));
    }
  }
  assert.equal(done.statusMessage, "spawning (0/3)", "ctx.status with progress");
  assert.deepEqual([runs.get("tree_root"), runs.get("tree_branch"), runs.get("tree_leaf")], [1, 3, 6]);
});

test("a steer reaches the handler's checkpoint", async () => {
  const task = await mcp.startTask("steered", {});
  await points.wait("steered:ready");
  await mcp.call("tasks/steer", { taskId: task, message: "focus on X" });
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), "steered: focus on X");
});

test("pause parks the handler at its checkpoint until resume", async () => {
  const task = await mcp.startTask("pausable", {});
  await points.wait("pausable:running");
  const paused = await mcp.call("tasks/pause", { taskId: task });
  assert.ok(["working", "paused"].includes(paused.status), JSON.stringify(paused));
  points.hit("pausable:go");
  await mcp.untilStatus(task, "paused");
  await sleep(300);
  assert.equal(points.reached("pausable:past"), false, "the checkpoint returned while paused");
  assert.equal((await mcp.get(task)).status, "paused");
  const resumed = await mcp.call("tasks/resume", { taskId: task });
  assert.notEqual(resumed.status, "paused");
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), "resumed");
  assert.equal(points.reached("pausable:past"), true);
});

test("ctx.pause pauses the task itself until resume", async () => {
  const task = await mcp.startTask("self_pause", {});
  await mcp.untilStatus(task, "paused");
  await sleep(200);
  assert.equal(points.reached("self_pause:past"), false);
  await mcp.call("tasks/steer", { taskId: task, message: "carry on" });
  await mcp.call("tasks/resume", { taskId: task });
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), 'continued with ["carry on"]');
});

test("input: input_required, tasks/update, the handler gets the answer", async () => {
  const task = await mcp.startTask("confirm", {});
  const t = await mcp.untilStatus(task, "input_required");
  assert.equal(t.inputRequests.go.method, "elicitation/create", JSON.stringify(t));
  assert.equal(t.inputRequests.go.params.message, "go on?");
  await mcp.call("tasks/update", { taskId: task, inputResponses: { go: { action: "accept", content: { go: true } } } });
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), 'answer: accept {"go":true}');
});

test("cancel aborts ctx.signal down the tree, the tasks end cancelled, nothing more is sent", async () => {
  const task = await mcp.startTask("cancellable", {});
  const ctx = await points.wait("cancellable:ctx");
  const sleeper = await points.wait("sleeper:ctx");
  await mcp.untilStatus(task, "working");
  await mcp.call("tasks/cancel", { taskId: task });
  const done = await mcp.untilStatus(task, "cancelled");
  // The `cancel` frame reaches the worker on its own time.
  await until("the handler's ctx.signal to abort", () => ctx.signal.aborted);
  assert.match(String(ctx.signal.reason), /cancel/);
  await until("the subtask's handler's ctx.signal to abort", () => sleeper.signal.aborted);
  assert.equal((await mcp.get(done.childTaskIds[0])).status, "cancelled");
  const outcome = await points.wait("cancellable:outcome");
  assert.equal(outcome.name, "AbortError", `the pending outcome() rejected: ${outcome}`);
  const status = await points.wait("cancellable:status");
  assert.equal(status.name, "AbortError", `ctx.status after the cancel was refused locally: ${status}`);
  await sleep(200);
  const after = await mcp.get(task);
  assert.equal(after.status, "cancelled");
  assert.notEqual(after.statusMessage, "after the cancel");
  assert.equal(after.result, undefined);
});

test("a failed subtask is seen by its parent as failed", async () => {
  const task = await mcp.startTask("failing_parent", {});
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), 'a failed: Error: kaput; b failed: -32001 {"why":"test"}');
  const [a, b] = await Promise.all(done.childTaskIds.map((id) => mcp.get(id)));
  assert.equal(a.status, "failed");
  assert.equal(a.error.code, -32603);
  assert.match(a.error.message, /kaput/);
  assert.equal(b.status, "failed");
  assert.deepEqual(b.error, { code: -32001, message: "custom failure", data: { why: "test" } });
});

test("bad arguments: an isError result, the handler never runs", async () => {
  for (const args of [{ n: "x" }, { n: 99 }, {}, { n: 1, extra: true }]) {
    const r = await mcp.call("tools/call", { name: "strict", arguments: args });
    assert.equal(r.resultType, "complete", JSON.stringify(r));
    assert.equal(r.isError, true, JSON.stringify(r));
    assert.match(textOf(r), /argument|n|extra/, JSON.stringify(r));
  }
  const task = await mcp.startTask("spawn_bad", {});
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), "bad_arguments,bad_arguments,unknown_tool; then n=3");
  assert.equal(done.childTaskIds.length, 1, "refused spawns made no subtask");
  assert.equal(runs.get("strict"), 1, "only the good call ran the handler");
});

test("spawn after: a subtask starts once the ones it names are terminal", async () => {
  const task = await mcp.startTask("ordered", {});
  await points.wait("gated:a");
  await mcp.until(task, "three children", (t) => t.childTaskIds?.length === 3);
  await sleep(300);
  assert.equal(points.reached("gated:b"), false, "b waits for a");
  points.hit("gated:a:go");
  await points.wait("gated:b");
  await sleep(300);
  assert.equal(points.reached("gated:c"), false, "c waits for b");
  points.hit("gated:b:go");
  points.hit("gated:c:go");
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), "a,b,c");
});

test("ToolError ends the task with an isError result", async () => {
  const task = await mcp.startTask("tool_error", {});
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(done.result.isError, true);
  assert.equal(textOf(done.result), "bad input: try again");
  // A client without the tasks extension gets the result itself.
  const sync = new Mcp(mcp.url, server, {});
  const r = await sync.call("tools/call", { name: "tool_error", arguments: {} });
  assert.equal(r.isError, true, JSON.stringify(r));
  assert.equal(textOf(r), "bad input: try again");
  assert.equal(runs.get("tool_error"), 2);
});

test("a refused hello rejects run() with WorkerRefused", async () => {
  const bad = new Worker({ url: server.wsUrl, token: "not-the-token", log: () => {} });
  bad.tool({ name: "other" }, () => "x");
  const ready = bad.ready();
  await assert.rejects(bad.run(), (e) => e instanceof WorkerRefused && e.code === "unauthorized");
  await assert.rejects(ready, WorkerRefused, "ready() rejects too");
  const clash = new Worker({ url: server.wsUrl, token: TOKEN, log: () => {} });
  clash.tool({ name: "strict", inputSchema: { type: "object" } }, () => "x");
  await assert.rejects(clash.run(), (e) => e instanceof WorkerRefused && e.code === "bad_hello" && /strict/.test(e.message));
  await until("the refused workers to be gone", async () => (await server.metric("subtask_workers_connected")) === 1);
});

test("replay on another worker: checkpoint steers, input answers, steps and patch markers come from the record", async () => {
  const task = await mcp.startTask("replayed", {});
  await mcp.call("tasks/steer", { taskId: task, message: "s1" });
  points.hit("replayed:steer-sent");
  await mcp.untilStatus(task, "input_required");
  await mcp.call("tasks/update", { taskId: task, inputResponses: { k: { action: "accept", content: { pick: 2 } } } });
  const first = await points.wait("replayed:first-done");
  assert.equal(first.attempt, 1);
  const second = await startWorker(server, "second", replayTools);
  try {
    await main.stop(); // its attempt ends without a result: the task goes to "second"
    const done = await mcp.untilStatus(task, "completed");
    assert.equal(first.signal.aborted, true);
    assert.equal(textOf(done.result),
      'attempt 2: steers ["s1"], answer {"pick":2}, step {"attempt":1}, patched true');
    assert.equal(runs.get("replayed:step"), 1, "the finished step did not run again");
  } finally {
    await second.stop();
    main = null;
  }
});

test("a worker of capacity 1 runs a whole tree: a parent awaiting its subtask leaves room for it", async () => {
  const w = await startWorker(server, "cap1", (w) => {
    w.tool({ name: "ts_chain" }, async (ctx, args) => {
      if (args.depth === 0) return "leaf";
      const kid = await ctx.spawn("ts_chain", { depth: args.depth - 1 });
      return `${args.depth}>${sdkTextOf(await kid.outcome())}`;
    });
  }, { capacity: 1 });
  try {
    const root = await mcp.startTask("ts_chain", { depth: 3 });
    const done = await mcp.untilStatus(root, "completed");
    assert.equal(textOf(done.result), "3>2>1>leaf");
  } finally {
    await w.stop();
  }
});

test("a handler cancels a subtask, and a dependent gets its dependencies' outcomes", async () => {
  let aborted = false;
  const w = await startWorker(server, "deps", (w) => {
    w.tool({ name: "ts_word" }, async (_ctx, args) => args.word);
    w.tool({ name: "ts_after_word" }, async (ctx) => ctx.dependencies.map((d) => `${d.status}:${sdkTextOf(d)}`).join(","));
    w.tool({ name: "ts_forever" }, async (ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve));
      aborted = true;
      throw new Error("aborted");
    });
    w.tool({ name: "ts_parent_of_three" }, async (ctx) => {
      const first = await ctx.spawn("ts_word", { word: "one" });
      const second = await ctx.spawn("ts_after_word", {}, { after: [first] });
      const doomed = await ctx.spawn("ts_forever", {});
      const got = sdkTextOf(await second.outcome());
      await doomed.cancel();
      return `${got}|${(await doomed.outcome()).status}`;
    });
  });
  try {
    const root = await mcp.startTask("ts_parent_of_three", {});
    const done = await mcp.untilStatus(root, "completed");
    assert.equal(textOf(done.result), "completed:one|cancelled");
    assert.equal((await mcp.get(done.childTaskIds[2])).status, "cancelled");
    for (let i = 0; i < 100 && !aborted; i++) await sleep(50);
    assert.equal(aborted, true, "the cancelled subtask's signal was aborted");
  } finally {
    await w.stop();
  }
});
