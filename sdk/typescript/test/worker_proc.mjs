// A worker process for failover.test.mjs: its handlers leave traces in
// DIR so that the test can tell what ran where, and how often.
//
//   node worker_proc.mjs URL TOKEN NAME DIR

import { appendFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Worker } from "@subtask/worker";

const [url, token, name, dir] = process.argv.slice(2);
const append = (file, line) => (appendFileSync(join(dir, file), `${line}\n`), line);
const released = async () => {
  while (!existsSync(join(dir, "release"))) await sleep(20);
};

const worker = new Worker({ url, token, name, capacity: 4, log: (level, m) => console.log(`${name} ${level} ${m}`) });

// root: a step, a leaf (awaited), then a branch (awaited).
worker.tool({ name: "durable_root" }, async (ctx) => {
  append("attempts.log", `root ${name} attempt=${ctx.attempt} replay=${ctx.replay}`);
  const a = await ctx.step("a", () => append("steps.log", "a"));
  const leaf = await ctx.spawn("durable_leaf", { n: 1 });
  append("spawns.log", `root ${name} spawned ${leaf.id}`);
  const first = await leaf.outcome();
  const branch = await ctx.spawn("durable_branch", { n: 2 });
  append("spawns.log", `root ${name} spawned ${branch.id}`);
  const second = await branch.outcome();
  return `root on ${name} after step ${a}: ${first.result.content[0].text}; ${second.result.content[0].text}`;
});

// branch: a step, a leaf (finished before the kill), then waits for DIR/release.
worker.tool({ name: "durable_branch" }, async (ctx) => {
  append("attempts.log", `branch ${name} attempt=${ctx.attempt} replay=${ctx.replay}`);
  const b = await ctx.step("b", () => append("steps.log", "b"));
  const leaf = await ctx.spawn("durable_leaf", { n: 3 });
  append("spawns.log", `branch ${name} spawned ${leaf.id}`);
  const o = await leaf.outcome();
  append("waiting.log", `${name} waits`);
  await released();
  return `branch on ${name} after step ${b}: ${o.result.content[0].text}`;
});

worker.tool({ name: "durable_leaf" }, async (_ctx, { n }) => {
  append("leaves.log", `leaf ${n} ran on ${name}`);
  return `leaf ${n} from ${name}`;
});

// stall: the first attempt waits for DIR/release while the test stops the
// process past its lease (SIGSTOP), then tries to report.
worker.tool({ name: "stall" }, async (ctx) => {
  append("stall.log", `${name} attempt=${ctx.attempt} replay=${ctx.replay}`);
  if (!ctx.replay) append(`stalling.${name}`, "");
  await released();
  try {
    await ctx.status(`${name} woke up`);
    append("stall.log", `${name} status sent`);
  } catch (e) {
    append("stall.log", `${name} status refused: ${e.name}`);
  }
  return `completed on ${name} attempt ${ctx.attempt}`;
});

await worker.run();
