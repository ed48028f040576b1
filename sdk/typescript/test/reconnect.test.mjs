// The worker connects once the server is there, and again after the server
// went away and came back, with backoff.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Worker } from "@subtask/worker";
import { Server, TOKEN, freePort, textOf, until } from "./support.mjs";

test("the worker retries until the server listens, and reconnects after a server restart", async (t) => {
  const port = await freePort();
  const worker = new Worker({ url: `ws://127.0.0.1:${port}/workers`, token: TOKEN, name: "retrying",
    minBackoffMs: 50, maxBackoffMs: 400, log: () => {} });
  let calls = 0;
  worker.tool({ name: "echo", inputSchema: { type: "object", properties: { say: { type: "string" } } } },
    (ctx, { say }) => `echo ${say} (call ${++calls}, attempt ${ctx.attempt})`);
  const running = worker.run();
  let server;
  t.after(async () => {
    worker.close();
    await running;
    await server?.stop();
  });
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(worker.connected, false);

  server = await Server.start({ port });
  await worker.ready();
  let task = await server.mcp.startTask("echo", { say: "one" });
  let done = await server.mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), "echo one (call 1, attempt 1)");

  await server.stop();
  await until("the worker to see the server gone", () => !worker.connected);
  server = await Server.start({ port });
  await worker.ready();
  await until("the worker to be connected", async () => (await server.metric("subtask_workers_connected")) === 1);
  assert.match(worker.workerId, /^w-/, "welcomed again");
  task = await server.mcp.startTask("echo", { say: "two" });
  done = await server.mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), "echo two (call 2, attempt 1)");
  worker.close();
  await running;
  assert.equal(worker.connected, false);
});
