// Test support: a real `subtask serve` process, an MCP client of the
// 2026-07-28 wire over `fetch`, workers run in the test process or as
// child processes.

import { spawn } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, existsSync, closeSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Worker } from "@subtask/worker";

export { sleep };
export const TOKEN = "ts-worker-secret";
export const LEASE_MS = 2000;
const VERSION = "2026-07-28";
const CAPS = { extensions: { "io.modelcontextprotocol/tasks": { pause: true } } };

/** The `subtask` binary under test: $SUBTASK_BIN, required. */
export function subtaskBin() {
  const bin = process.env.SUBTASK_BIN;
  if (!bin) throw new Error("SUBTASK_BIN is not set: point it at a built subtask binary (e.g. target/debug/subtask)");
  if (!existsSync(bin)) throw new Error(`SUBTASK_BIN=${bin} does not exist`);
  return bin;
}

export function tempDir(prefix = "subtask-ts-") {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function canConnect(port) {
  return new Promise((resolve) => {
    const c = connect(port, "127.0.0.1");
    c.on("connect", () => (c.destroy(), resolve(true)));
    c.on("error", () => resolve(false));
  });
}

/** Kills `proc` if this test process exits first (a crash, a timeout). */
export function killOnExit(proc) {
  const kill = () => proc.kill("SIGKILL");
  process.once("exit", kill);
  proc.once("exit", () => process.removeListener("exit", kill));
}

/** Polls `pred` (sync or async) until it returns something truthy; fails
 * naming `what`. */
export async function until(what, pred, timeoutMs = 20_000, everyMs = 25) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** `subtask serve --memory` on a free loopback port, taking workers. */
export class Server {
  static async start({ port } = {}) {
    const s = new Server();
    s.port = port ?? (await freePort());
    s.dir = tempDir();
    s.logPath = join(s.dir, "server.log");
    const log = openSync(s.logPath, "w");
    const args = ["serve", "--memory", "--listen", `127.0.0.1:${s.port}`, "--worker-token", TOKEN,
      "--worker-lease-ms", String(LEASE_MS)];
    s.proc = spawn(subtaskBin(), args, { stdio: ["ignore", log, log] });
    closeSync(log);
    killOnExit(s.proc);
    s.exited = null;
    s.proc.on("exit", (code, signal) => (s.exited = { code, signal }));
    s.wsUrl = `ws://127.0.0.1:${s.port}/workers`;
    s.mcp = new Mcp(`http://127.0.0.1:${s.port}/mcp`, s);
    await until("the server to listen", async () => {
      if (s.exited) throw new Error(`subtask serve exited (${JSON.stringify(s.exited)}): ${s.log()}`);
      return canConnect(s.port);
    }, 30_000);
    return s;
  }

  log() {
    return readFileSync(this.logPath, "utf8").slice(-4000);
  }

  /** A gauge or counter of /metrics, summed over its labels. */
  async metric(name) {
    const text = await (await fetch(`http://127.0.0.1:${this.port}/metrics`)).text();
    let total = 0;
    for (const line of text.split("\n")) {
      if (line.startsWith(name) && [" ", "{"].includes(line[name.length])) total += Number(line.split(" ").pop());
    }
    return total;
  }

  async stop() {
    if (this.exited) return;
    const gone = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGTERM");
    const t = setTimeout(() => this.proc.kill("SIGKILL"), 10_000);
    await gone;
    clearTimeout(t);
  }
}

/** An MCP client of the 2026-07-28 wire: stateless JSON-RPC POSTs. */
export class Mcp {
  constructor(url, server, caps = CAPS) {
    this.url = url;
    this.server = server;
    this.caps = caps;
    this.nextId = 1;
  }

  /** The JSON-RPC response to one request (a JSON body or an SSE stream). */
  async send(method, params) {
    const id = this.nextId++;
    const body = {
      jsonrpc: "2.0", id, method,
      params: {
        ...params,
        _meta: {
          "io.modelcontextprotocol/protocolVersion": VERSION,
          "io.modelcontextprotocol/clientCapabilities": this.caps,
        },
      },
    };
    const headers = {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": VERSION,
      "Mcp-Method": method,
    };
    if (method === "tools/call") headers["Mcp-Name"] = params.name;
    else if (method.startsWith("tasks/")) headers["Mcp-Name"] = params.taskId;
    const res = await fetch(this.url, { method: "POST", headers, body: JSON.stringify(body) });
    const raw = await res.text();
    if ((res.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      for (const line of raw.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const msg = JSON.parse(line.slice(5));
        if (msg.id === id) return msg;
      }
      throw new Error(`${method}: no response in the SSE stream: ${raw.slice(0, 2000)}`);
    }
    try {
      return JSON.parse(raw);
    } catch {
      throw new Error(`${method}: HTTP ${res.status}, not JSON: ${raw.slice(0, 2000)}`);
    }
  }

  async call(method, params) {
    const msg = await this.send(method, params);
    if (msg.error) throw new Error(`${method} failed: ${JSON.stringify(msg.error)}`);
    return msg.result;
  }

  async startTask(tool, args) {
    const r = await this.call("tools/call", { name: tool, arguments: args });
    if (r.resultType !== "task") throw new Error(`tools/call ${tool} did not make a task: ${JSON.stringify(r)}`);
    return r.taskId;
  }

  get(task) {
    return this.call("tasks/get", { taskId: task });
  }

  async until(task, what, pred, timeoutMs = 20_000) {
    let last;
    try {
      return await until(`task ${task}: ${what}`, async () => {
        last = await this.get(task);
        return pred(last) ? last : null;
      }, timeoutMs, 50);
    } catch (e) {
      throw new Error(`${e.message}; last state: ${JSON.stringify(last).slice(0, 3000)}; server log: ${this.server?.logPath}`);
    }
  }

  untilStatus(task, status, timeoutMs = 20_000) {
    return this.until(task, `status ${status}`, (t) => t.status === status, timeoutMs);
  }
}

/** A Worker of this process, connected: `register(worker)` adds its tools. */
export async function startWorker(server, name, register, options = {}) {
  const worker = new Worker({ url: server.wsUrl, token: TOKEN, name, capacity: 8, log: () => {}, ...options });
  register(worker);
  const running = worker.run();
  running.catch(() => {}); // a refusal is reported by ready(), a later failure by stop()
  await worker.ready();
  return { worker, stop: async () => (worker.close(), await running) };
}

/** Named points a handler reaches and gates it waits at, for tests that
 * drive a handler of their own process step by step. */
export class Points {
  #points = new Map();
  #get(name) {
    if (!this.#points.has(name)) {
      let resolve;
      const promise = new Promise((r) => (resolve = r));
      this.#points.set(name, { promise, resolve, done: false });
    }
    return this.#points.get(name);
  }
  /** Marks `name` reached (or a gate open), with an optional value. */
  hit(name, value = true) {
    const p = this.#get(name);
    p.done = true;
    p.resolve(value);
  }
  /** Resolves once `name` is hit. */
  wait(name, timeoutMs = 20_000) {
    return Promise.race([
      this.#get(name).promise,
      sleep(timeoutMs, undefined, { ref: false }).then(() => Promise.reject(new Error(`timed out waiting for ${name}`))),
    ]);
  }
  reached(name) {
    return this.#points.get(name)?.done === true;
  }
}

export function textOf(result) {
  return (result?.content ?? []).find((c) => c.type === "text")?.text ?? "";
}
