// The worker: one WebSocket to `subtask serve`'s /workers, the
// hello/welcome handshake, heartbeats, assignments run as promises, and
// reconnection with backoff (docs/workers.md).

import {
  type Act,
  type Assignment,
  Context,
  type JsonObject,
  type Link,
  ReplyError,
  TaskFailed,
  ToolError,
  WorkerRefused,
  toCallToolResult,
  toolResult,
} from "./context.js";

/** The worker protocol version this SDK speaks. */
export const PROTOCOL = 1;

/** A tool handler: its return value becomes the task's `CallToolResult`
 * (see `toCallToolResult`); a thrown `ToolError` is an `isError` result, a
 * `TaskFailed` fails the task with its code, any other error with -32603. */
export type Handler<A = Record<string, any>> = (ctx: Context, args: A) => unknown | Promise<unknown>;

/** A tool as the worker registers it in `hello`. */
export interface ToolSpec {
  /** `^[A-Za-z0-9_.-]{1,128}$` */
  name: string;
  /** Default: the name. */
  description?: string;
  /** A JSON Schema object; the server checks calls against it before a task
   * exists. Default: any object. */
  inputSchema?: JsonObject;
  /** Default `true`: after a worker's death or a server restart the handler
   * runs again with its finished subtasks and steps replayed. */
  resumable?: boolean;
  /** Default `"optional"`; `"required"`: always runs as a task. */
  taskSupport?: "optional" | "required";
}

export type LogLevel = "debug" | "info" | "warn";

export interface WorkerOptions {
  /** `ws://HOST:PORT/workers` */
  url: string;
  /** A worker token of the server (`--worker-token`, `--worker-tokens`). */
  token: string;
  /** Shown by the server next to the token's name. */
  name?: string;
  /** How many tasks it runs at once (default 8). */
  capacity?: number;
  /** Reconnection backoff, doubled after each failed attempt (default 100
   * to 5000 ms). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Where the worker logs (default: warnings to `console.warn`). */
  log?: (level: LogLevel, message: string) => void;
}

const NAME = /^[A-Za-z0-9_.-]{1,128}$/;
// Reply codes after which the task is no longer this attempt's to end.
const NOT_OURS = new Set(["stale_attempt", "divergence", "interrupted", "unknown_task"]);

type Frame = { type?: string; [key: string]: any };

/** Serves tools to a `subtask serve`. Register tools with `tool()`, then
 * `await worker.run()`. */
export class Worker {
  readonly url: string;
  readonly token: string;
  readonly name?: string;
  readonly capacity: number;
  /** The server's id of the current connection (`welcome.worker`). */
  workerId: string | null = null;
  /** From `welcome`. */
  leaseMs = 10_000;
  heartbeatMs = 2_000;

  private readonly tools = new Map<string, { spec: ToolSpec; handler: Handler<any> }>();
  private readonly options: WorkerOptions;
  private readonly log: (level: LogLevel, message: string) => void;
  private conn: Connection | null = null;
  private closing = false;
  private wake: (() => void) | null = null;
  private readyWaiters: Array<{ resolve: () => void; reject: (e: unknown) => void }> = [];

  constructor(options: WorkerOptions) {
    const capacity = options.capacity ?? 8;
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError("capacity must be an integer >= 1");
    this.options = options;
    this.url = options.url;
    this.token = options.token;
    this.name = options.name;
    this.capacity = capacity;
    this.log = options.log ?? ((level, m) => level === "warn" && console.warn(`subtask worker: ${m}`));
  }

  /** Registers `handler` as tool `spec.name`. Returns the worker. */
  tool<A = Record<string, any>>(spec: ToolSpec, handler: Handler<A>): this {
    if (!NAME.test(spec.name)) throw new RangeError(`tool name ${JSON.stringify(spec.name)} does not match ${NAME}`);
    if (spec.taskSupport && !["optional", "required"].includes(spec.taskSupport)) {
      throw new RangeError('taskSupport is "optional" or "required"');
    }
    if (this.tools.has(spec.name)) throw new Error(`tool ${spec.name} is registered already`);
    this.tools.set(spec.name, { spec, handler: handler as Handler<any> });
    return this;
  }

  /** Whether the worker holds a welcomed connection now. */
  get connected(): boolean {
    return this.conn?.welcomed === true;
  }

  /** Resolves once the server has said `welcome` (at once if it has);
   * rejects with `WorkerRefused` if the server refuses the hello. */
  ready(): Promise<void> {
    if (this.connected) return Promise.resolve();
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  /** Serves until `close()`, reconnecting with backoff when the connection
   * drops. Rejects with `WorkerRefused` when the server refuses the hello
   * (bad token, a tool name taken). */
  async run(): Promise<void> {
    if (this.tools.size === 0) throw new Error("no tools registered: use worker.tool(...) first");
    const min = this.options.minBackoffMs ?? 100;
    const max = this.options.maxBackoffMs ?? 5_000;
    let backoff = min;
    this.closing = false;
    while (!this.closing) {
      const conn = new Connection(this, this.log);
      this.conn = conn;
      try {
        await conn.serve();
      } catch (e) {
        if (e instanceof WorkerRefused) {
          for (const w of this.readyWaiters.splice(0)) w.reject(e);
          throw e;
        }
        this.log("warn", `connection to ${this.url} failed: ${(e as Error).message ?? e}`);
      } finally {
        this.conn = null;
      }
      if (conn.welcomed) backoff = min;
      if (this.closing) break;
      const delay = backoff * (1 + Math.random() / 4);
      backoff = Math.min(backoff * 2, max);
      this.log("info", `reconnecting in ${Math.round(delay)} ms`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, delay);
        this.wake = () => (clearTimeout(t), resolve());
      });
      this.wake = null;
    }
  }

  /** Makes `run()` return: running handlers are aborted (the server assigns
   * their tasks again) and the connection is closed. */
  close(): void {
    this.closing = true;
    this.conn?.close("the worker closed");
    this.wake?.();
  }

  /** @internal */
  _hello(): Frame {
    const tools = [...this.tools.values()].map(({ spec }) => ({
      name: spec.name,
      description: spec.description ?? spec.name,
      inputSchema: spec.inputSchema ?? { type: "object" },
      taskSupport: spec.taskSupport ?? "optional",
      resumable: spec.resumable ?? true,
    }));
    const hello: Frame = { type: "hello", protocol: PROTOCOL, token: this.token, capacity: this.capacity, tools };
    if (this.name) hello.name = this.name;
    return hello;
  }

  /** @internal */
  _welcomed(frame: Frame): void {
    this.workerId = frame.worker ?? null;
    this.leaseMs = frame.leaseMs ?? 10_000;
    this.heartbeatMs = Math.max(1, frame.heartbeatMs ?? Math.floor(this.leaseMs / 5));
    this.log("info", `connected to ${this.url} as ${this.workerId} (lease ${this.leaseMs} ms)`);
    for (const w of this.readyWaiters.splice(0)) w.resolve();
  }

  /** @internal */
  _handler(tool: string): Handler<any> | undefined {
    return this.tools.get(tool)?.handler;
  }
}

/** An attempt this connection runs. */
interface Running {
  ctx: Context;
  abort: AbortController;
}

/** One connection, from `hello` to its close. */
class Connection implements Link {
  welcomed = false;
  private ws: WebSocket | null = null;
  private readonly running = new Map<string, Running>();
  private readonly pending = new Map<number, { ctx: Context; resolve: (ok: any) => void; reject: (e: unknown) => void }>();
  // Requests of attempts that ended, kept to log the server's refusals.
  private readonly orphans = new Map<number, Context>();
  private nextRef = 1;
  private lastSent = 0;
  private heartbeat: ReturnType<typeof setInterval> | null = null;
  private end: ((e?: unknown) => void) | null = null;

  constructor(
    private readonly worker: Worker,
    private readonly log: (level: LogLevel, message: string) => void,
  ) {}

  /** Resolves when the connection closes; rejects with `WorkerRefused` when
   * the hello is refused. */
  serve(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let hello: ReturnType<typeof setTimeout> | undefined;
      this.end = (e) => {
        this.end = null;
        clearTimeout(hello);
        this.shutdown();
        e === undefined ? resolve() : reject(e);
      };
      hello = setTimeout(() => this.fail(new Error("no welcome within 15 s")), 15_000);
      const ws = new WebSocket(this.worker.url);
      this.ws = ws;
      ws.onopen = () => this.write(this.worker._hello());
      ws.onerror = (ev) => this.fail(new Error((ev as ErrorEvent).message || `cannot connect to ${this.worker.url}`));
      ws.onclose = (ev) => this.fail(this.welcomed ? undefined : new Error(`closed before welcome (${ev.code})`));
      ws.onmessage = (ev) => {
        if (!this.end) return; // closed already
        let frame: Frame;
        try {
          frame = JSON.parse(String(ev.data));
        } catch {
          return this.log("warn", `not a JSON frame: ${String(ev.data).slice(0, 200)}`);
        }
        if (!this.welcomed) {
          clearTimeout(hello);
          if (frame.type === "welcome") return this.welcome(frame);
          if (frame.type === "error" && (frame.code === "unauthorized" || frame.code === "bad_hello")) {
            return this.fail(new WorkerRefused(frame.code, String(frame.message)));
          }
          return this.fail(new Error(`expected welcome, got ${JSON.stringify(frame).slice(0, 200)}`));
        }
        this.receive(frame);
      };
    });
  }

  /** Ends the connection (its attempts are aborted; the server assigns them
   * again). */
  close(why: string): void {
    this.log("info", `closing: ${why}`);
    this.fail(undefined);
  }

  private fail(e: unknown): void {
    this.end?.(e);
  }

  private welcome(frame: Frame): void {
    this.welcomed = true;
    this.worker._welcomed(frame);
    const period = this.worker.heartbeatMs;
    // Something is sent at least every `heartbeatMs`.
    this.heartbeat = setInterval(() => {
      if (Date.now() - this.lastSent >= period / 2) this.write({ type: "heartbeat" });
    }, Math.max(1, Math.floor(period / 2)));
  }

  private shutdown(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    for (const task of [...this.running.keys()]) this.stop(task, undefined, "disconnected");
    for (const [ref, p] of this.pending) {
      this.pending.delete(ref);
      p.reject(p.ctx.signal.reason ?? new Error("the connection closed"));
    }
    const ws = this.ws;
    this.ws = null;
    ws?.close();
  }

  private write(frame: Frame): void {
    if (this.ws?.readyState !== WebSocket.OPEN) return;
    this.ws.send(JSON.stringify(frame));
    this.lastSent = Date.now();
  }

  /** Sends a frame of `ctx`'s attempt, unless the attempt has ended. */
  private send(ctx: Context, frame: Frame): boolean {
    if (ctx.signal.aborted) return false;
    this.write({ ...frame, task: ctx.taskId, attempt: ctx.attempt });
    return true;
  }

  request(ctx: Context, act: Act): Promise<any> {
    ctx.signal.throwIfAborted();
    if (!this.ws) throw new Error("the connection closed");
    const ref = this.nextRef++;
    return new Promise((resolve, reject) => {
      this.pending.set(ref, { ctx, resolve, reject });
      this.send(ctx, { ...act, ref });
    });
  }

  private receive(frame: Frame): void {
    switch (frame.type) {
      case "reply":
        return this.reply(frame);
      case "assign":
        return this.assign(frame as unknown as Assignment);
      case "cancel":
      case "revoke":
        return this.stop(frame.task, frame.attempt, frame.type);
      case "error":
        return this.log("warn", `server error frame: ${frame.code}: ${frame.message}`);
      default:
        this.log("debug", `ignored frame ${frame.type}`);
    }
  }

  private reply(frame: Frame): void {
    const p = this.pending.get(frame.ref);
    if (!p) {
      const orphan = this.orphans.get(frame.ref);
      this.orphans.delete(frame.ref);
      if (orphan && frame.error) {
        this.log("warn", `report of task ${orphan.taskId} attempt ${orphan.attempt} refused: ${frame.error.code}: ${frame.error.message}`);
      }
      return;
    }
    this.pending.delete(frame.ref);
    if (frame.error) p.reject(new ReplyError(String(frame.error.code), String(frame.error.message)));
    else p.resolve(frame.ok ?? {});
  }

  private assign(frame: Assignment): void {
    this.stop(frame.task, undefined, "reassigned");
    const abort = new AbortController();
    const ctx = new Context(this, frame, abort.signal);
    const handler = this.worker._handler(frame.tool);
    if (!handler) {
      this.send(ctx, { type: "fail", error: { code: -32601, message: `tool ${frame.tool} is not served by this worker` } });
      return;
    }
    this.running.set(frame.task, { ctx, abort });
    this.log("debug", `assign ${frame.tool} task ${frame.task} attempt ${frame.attempt} replay=${ctx.replay}`);
    void this.runHandler(handler, ctx);
  }

  /** Aborts the attempt of `task` (any attempt when `attempt` is undefined). */
  private stop(task: string, attempt: number | undefined, why: string): void {
    const r = this.running.get(task);
    if (!r || (attempt !== undefined && r.ctx.attempt !== attempt)) return;
    this.running.delete(task);
    this.log("info", `${why} of task ${task} attempt ${r.ctx.attempt}`);
    const reason = new DOMException(`task ${task} attempt ${r.ctx.attempt}: ${why}`, "AbortError");
    r.abort.abort(reason);
    for (const [ref, p] of this.pending) {
      if (p.ctx !== r.ctx) continue;
      this.pending.delete(ref);
      this.orphans.set(ref, p.ctx);
      p.reject(reason);
    }
    while (this.orphans.size > 1024) this.orphans.delete(this.orphans.keys().next().value!);
  }

  private async runHandler(handler: Handler<any>, ctx: Context): Promise<void> {
    let end: Frame | null;
    try {
      const value = await handler(ctx, ctx.arguments);
      end = { type: "result", result: toCallToolResult(value) };
      JSON.stringify(end);
    } catch (e) {
      end = ctx.signal.aborted ? null : ending(e, ctx, this.log);
    } finally {
      if (this.running.get(ctx.taskId)?.ctx === ctx) this.running.delete(ctx.taskId);
    }
    if (end) this.send(ctx, end);
  }
}

/** The frame a handler's error ends its attempt with (`null`: nothing). */
function ending(e: unknown, ctx: Context, log: (level: LogLevel, message: string) => void): Frame | null {
  if (e instanceof ToolError) return { type: "result", result: toolResult(e.message, undefined, true) };
  if (e instanceof TaskFailed) {
    const error: Frame = { code: e.code, message: e.message };
    if (e.data !== undefined) error.data = e.data;
    return { type: "fail", error };
  }
  if (e instanceof ReplyError && NOT_OURS.has(e.code)) {
    log("info", `task ${ctx.taskId} attempt ${ctx.attempt} ends: ${e.message}`);
    return null;
  }
  const name = e instanceof Error ? e.name : typeof e;
  const message = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  log("warn", `handler of ${ctx.tool} (task ${ctx.taskId}) threw ${message}`);
  return { type: "fail", error: { code: -32603, message, data: { exception: name } } };
}
