// A worker process SIGKILLed in the middle of a tree: its tasks are
// assigned again to a second worker, which replays them (docs/workers.md,
// "Replay"): finished steps and subtasks are not run again.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, openSync, closeSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";
import { Server, TOKEN, killOnExit, tempDir, textOf, until } from "./support.mjs";

const SCRIPT = fileURLToPath(new URL("./worker_proc.mjs", import.meta.url));
const lines = (dir, file) => (existsSync(join(dir, file)) ? readFileSync(join(dir, file), "utf8").split("\n").filter(Boolean) : []);
const cleanup = [];
after(async () => {
  for (const f of cleanup.reverse()) await f();
});

function startProcess(server, name, dir) {
  const log = openSync(join(dir, `worker-${name}.log`), "w");
  const proc = spawn(process.execPath, [SCRIPT, server.wsUrl, TOKEN, name, dir], { stdio: ["ignore", log, log] });
  closeSync(log);
  killOnExit(proc);
  const exited = new Promise((resolve) => proc.once("exit", (code, signal) => resolve({ code, signal })));
  cleanup.push(async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await exited;
  });
  return { proc, exited, log: () => readFileSync(join(dir, `worker-${name}.log`), "utf8") };
}

test("a worker SIGKILLed mid-tree: the tree completes on another worker, nothing finished runs again", async () => {
  const server = await Server.start();
  cleanup.push(() => server.stop());
  const mcp = server.mcp;
  const dir = tempDir("subtask-ts-failover-");
  const connected = (n) => async () => (await server.metric("subtask_workers_connected")) === n;

  const a = startProcess(server, "A", dir);
  await until("worker A to connect", connected(1));
  const root = await mcp.startTask("durable_root", {});
  await until("A's branch to wait for the release", () => lines(dir, "waiting.log").length === 1);
  const before = await mcp.get(root);
  assert.equal(before.childTaskIds.length, 2);
  const [leaf1, branch] = before.childTaskIds;
  const leaf3 = (await mcp.get(branch)).childTaskIds[0];
  await mcp.untilStatus(leaf1, "completed");
  await mcp.untilStatus(leaf3, "completed");

  const b = startProcess(server, "B", dir);
  await until("worker B to connect", connected(2));
  a.proc.kill("SIGKILL");
  assert.deepEqual(await a.exited, { code: null, signal: "SIGKILL" });
  await until("A to be gone", connected(1));
  writeFileSync(join(dir, "release"), "");
  const done = await mcp.untilStatus(root, "completed", 30_000);

  assert.equal(textOf(done.result),
    "root on B after step a: leaf 1 from A; branch on B after step b: leaf 3 from A");
  assert.deepEqual(done.childTaskIds, before.childTaskIds, "the replay's spawns gave the same subtasks back");
  assert.deepEqual((await mcp.get(branch)).childTaskIds, [leaf3]);
  assert.deepEqual(lines(dir, "steps.log"), ["a", "b"], "each finished step ran once");
  assert.deepEqual(lines(dir, "leaves.log"), ["leaf 1 ran on A", "leaf 3 ran on A"], "each finished leaf ran once");
  const attempts = lines(dir, "attempts.log");
  assert.deepEqual(attempts.slice(0, 2), ["root A attempt=1 replay=false", "branch A attempt=1 replay=false"]);
  assert.deepEqual(attempts.slice(2).sort(), ["branch B attempt=2 replay=true", "root B attempt=2 replay=true"]);
  const spawns = lines(dir, "spawns.log");
  assert.deepEqual(spawns.slice(0, 3),
    [`root A spawned ${leaf1}`, `root A spawned ${branch}`, `branch A spawned ${leaf3}`], spawns.join("\n"));
  assert.deepEqual(spawns.slice(3).sort(),
    [`branch B spawned ${leaf3}`, `root B spawned ${branch}`, `root B spawned ${leaf1}`].sort(), spawns.join("\n"));
  assert.ok(b.log().includes("connected"), b.log());
});

test("a stalled worker loses its lease: revoke aborts its handler, which sends nothing more", async () => {
  const server = await Server.start();
  cleanup.push(() => server.stop());
  const mcp = server.mcp;
  const dir = tempDir("subtask-ts-stall-");
  const a = startProcess(server, "A", dir);
  await until("worker A to connect", async () => (await server.metric("subtask_workers_connected")) === 1);
  const task = await mcp.startTask("stall", {});
  await until("A's handler to wait", () => existsSync(join(dir, "stalling.A")));
  a.proc.kill("SIGSTOP");
  try {
    startProcess(server, "B", dir);
    await until("B to get the task once A's lease ended",
      () => lines(dir, "stall.log").includes("B attempt=2 replay=true"), 15_000);
    assert.equal(await server.metric("subtask_worker_lease_losses_total"), 1);
  } finally {
    a.proc.kill("SIGCONT");
  }
  await until("A to read the revoke", () => a.log().includes(`revoke of task ${task} attempt 1`), 10_000);
  writeFileSync(join(dir, "release"), "");
  const done = await mcp.untilStatus(task, "completed");
  assert.equal(textOf(done.result), "completed on B attempt 2");
  await until("A's handler to end", () => lines(dir, "stall.log").some((l) => l.startsWith("A status")));
  await new Promise((r) => setTimeout(r, 300));
  assert.deepEqual(lines(dir, "stall.log").sort(), [
    "A attempt=1 replay=false",
    "A status refused: AbortError",
    "B attempt=2 replay=true",
    "B status sent",
  ]);
  assert.equal(await server.metric("subtask_worker_refused_reports_total"), 0, "A reported nothing stale");
  assert.doesNotMatch(a.log(), /refused|error frame/, a.log());
});
