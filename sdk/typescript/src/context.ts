// What a handler sees: its Context, Subtask handles and Outcome values, and
// the errors that end a task. Every method of Context that talks to the
// server is one request frame of the worker protocol (docs/workers.md,
// "Requests"), answered by a `reply`.

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
/** A JSON object. */
export type JsonObject = { [key: string]: Json };

/** An MCP `CallToolResult`. */
export interface CallToolResult {
  content: Array<{ type: string; [key: string]: unknown }>;
  structuredContent?: { [key: string]: unknown };
  isError?: boolean;
  [key: string]: unknown;
}

/** A JSON-RPC error object. */
export interface ErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

/** How a subtask ended. */
export type Outcome =
  | { status: "completed"; result: CallToolResult }
  | { status: "failed"; error: ErrorObject }
  | { status: "cancelled" };

/** The server refused a request (a `reply` with `error`). `code` is one of
 * the protocol's codes: `bad_arguments`, `unknown_tool`, `unknown_child`,
 * `interrupted`, `divergence`, `stale_attempt`, `rejected`, ... */
export class ReplyError extends Error {
  override name = "ReplyError";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

/** The server refused the worker's `hello` (`unauthorized`, `bad_hello`):
 * `Worker.run()` rejects with it instead of reconnecting. */
export class WorkerRefused extends Error {
  override name = "WorkerRefused";
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

/** Throw to end the task with a tool error: a `CallToolResult` with
 * `isError: true` and this message as its text (an error the model can act
 * on). The task itself completes. */
export class ToolError extends Error {
  override name = "ToolError";
}

/** Throw to fail the task with this JSON-RPC error (a `fail` frame). Any
 * other error a handler throws fails the task with code -32603. */
export class TaskFailed extends Error {
  override name = "TaskFailed";
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }
}

/** The first text content of a result (or of a completed outcome), the
 * message of a failed outcome, else "". */
export function textOf(r: CallToolResult | Outcome | null | undefined): string {
  const o = r as Partial<{ status: string; result: CallToolResult; error: ErrorObject }> | null | undefined;
  if (o?.status === "failed") return String(o.error?.message ?? "");
  const result = (o?.status === undefined ? r : o.result) as CallToolResult | undefined;
  const c = result?.content?.find((c) => c.type === "text");
  return typeof c?.text === "string" ? c.text : "";
}

/** A `CallToolResult` with one text content. */
export function toolResult(text: string, structured?: JsonObject, isError = false): CallToolResult {
  const r: CallToolResult = { content: [{ type: "text", text }], isError };
  if (structured !== undefined) r.structuredContent = structured;
  return r;
}

/** What a handler's return value becomes: a string is the text content; an
 * object with a `content` array is taken as a `CallToolResult`;
 * `undefined`/`null` is an empty result; anything else is its JSON text
 * (and its `structuredContent` when it is an object). */
export function toCallToolResult(value: unknown): CallToolResult {
  if (typeof value === "string") return toolResult(value);
  if (value === undefined || value === null) return { content: [], isError: false };
  if (typeof value === "object" && Array.isArray((value as CallToolResult).content)) {
    return value as CallToolResult;
  }
  const structured = typeof value === "object" && !Array.isArray(value) ? (value as JsonObject) : undefined;
  return toolResult(JSON.stringify(value), structured);
}

/** A request frame's fields, less `task`, `attempt` and `ref`. */
export type Act = { type: string; [field: string]: unknown };

/** @internal How a Context sends its requests (the worker's connection). */
export interface Link {
  request(ctx: Context, act: Act): Promise<any>;
}

/** @internal The `assign` frame. */
export interface Assignment {
  task: string;
  attempt: number;
  tool: string;
  arguments?: JsonObject | null;
  root?: string | null;
  parent?: string | null;
  replay?: boolean;
  dependencies?: Array<Outcome & { taskId: string }>;
}

/** Options of `ctx.spawn`. */
export interface SpawnOptions {
  /** Earlier subtasks of this task (handles or ids) it starts after. */
  after?: Array<Subtask | string>;
  /** Its failure fails this task and cancels its siblings. */
  failFast?: boolean;
  /** Its TTL in milliseconds. */
  ttlMs?: number;
}

/** A subtask this task spawned. */
export class Subtask {
  #outcome?: Promise<Outcome>;
  constructor(
    private readonly ctx: Context,
    readonly id: string,
    readonly tool: string,
  ) {}

  /** Waits until the subtask is terminal (one `outcome` request, shared by
   * every caller). */
  outcome(): Promise<Outcome> {
    this.#outcome ??= this.ctx._request({ type: "outcome", child: this.id });
    return this.#outcome;
  }

  /** Cancels the subtask and its subtree; its outcome becomes `cancelled`
   * once they have ended. */
  async cancel(): Promise<void> {
    await this.ctx._request({ type: "cancel", child: this.id });
  }
}

/** One attempt of one task: what its handler uses to act on the task.
 *
 * Every act (`spawn`, `checkpoint`, `pause`, `input`, `step`, `patched`) is
 * recorded by the server in order; a replay (`ctx.replay`) must make the
 * same acts in the same order (docs/workers.md, "Replay"). */
export class Context {
  /** The task this handler runs. */
  readonly taskId: string;
  /** Which assignment of the task this is (1, 2, ...). */
  readonly attempt: number;
  /** The tool called. */
  readonly tool: string;
  /** The call's arguments (checked against the tool's schema already). */
  readonly arguments: JsonObject;
  /** The root task of the tree. */
  readonly rootId: string;
  /** The parent task, `null` for a root. */
  readonly parentId: string | null;
  /** Whether an earlier attempt got somewhere: the handler must make the
   * same acts in the same order, and gets their recorded answers. */
  readonly replay: boolean;
  /** The outcomes of the subtasks this one was spawned `after`, in that
   * order, each with its `taskId`. */
  readonly dependencies: Array<Outcome & { taskId: string }>;
  /** Aborted when the attempt ends without the handler: `cancel` (the task
   * is cancelled), `revoke` (it runs elsewhere), or the connection closed.
   * From then on nothing more is sent for this attempt, and every context
   * call rejects with the signal's reason. */
  readonly signal: AbortSignal;

  constructor(
    private readonly link: Link,
    frame: Assignment,
    signal: AbortSignal,
  ) {
    this.taskId = frame.task;
    this.attempt = frame.attempt;
    this.tool = frame.tool;
    this.arguments = frame.arguments ?? {};
    this.rootId = frame.root ?? frame.task;
    this.parentId = frame.parent ?? null;
    this.replay = frame.replay === true;
    this.dependencies = frame.dependencies ?? [];
    this.signal = signal;
  }

  /** @internal */
  async _request(act: Act): Promise<any> {
    this.signal.throwIfAborted();
    return this.link.request(this, act);
  }

  /** Creates a subtask calling `tool` (a worker tool or a tool of the
   * server), next in this task's `childTaskIds`. Rejects with a
   * `ReplyError` (`bad_arguments`, `unknown_tool`, `rejected`). An act. */
  async spawn(tool: string, args: JsonObject = {}, options: SpawnOptions = {}): Promise<Subtask> {
    const act: Act = { type: "spawn", tool, arguments: args };
    if (options.after?.length) act.after = options.after.map((a) => (typeof a === "string" ? a : a.id));
    if (options.failFast) act.failFast = true;
    if (options.ttlMs !== undefined) act.ttlMs = options.ttlMs;
    const ok = await this._request(act);
    return new Subtask(this, ok.taskId, tool);
  }

  /** A safe point: returns the steer messages sent since the last one;
   * parks while the task is paused and returns at the resume. An act. */
  async checkpoint(): Promise<string[]> {
    const ok = await this._request({ type: "checkpoint" });
    return ok?.steers ?? [];
  }

  /** Pauses this task (a client's `tasks/resume` continues it), then as
   * `checkpoint`. An act. */
  async pause(reason?: string): Promise<string[]> {
    const ok = await this._request(reason === undefined ? { type: "pause" } : { type: "pause", reason });
    return ok?.steers ?? [];
  }

  /** Asks the client: the task is `input_required` with `request` (an
   * elicitation, a sampling request...) under `key` until a client answers
   * with `tasks/update`; returns the answer. A key answered before a replay
   * is answered again at once. An act. */
  async input(key: string, request: JsonObject): Promise<JsonObject> {
    const ok = await this._request({ type: "input", key, request });
    return ok?.response ?? {};
  }

  /** A journaled step: runs `work` once as the tree sees it and returns its
   * output, JSON round-tripped; in a replay of a step that had finished,
   * returns the recorded output without running `work`. An act. */
  async step<T = Json>(name: string, work: (signal: AbortSignal) => T | Promise<T>): Promise<T> {
    const ok = await this._request({ type: "step", name });
    if (ok.done) return ok.output as T;
    const value = await work(this.signal);
    this.signal.throwIfAborted();
    const text = JSON.stringify(value);
    const output = text === undefined ? null : JSON.parse(text);
    await this._request({ type: "stepped", act: ok.act, output });
    return output as T;
  }

  /** `true` in a first run (recording a marker) and in a replay that
   * recorded it here; `false` in a replay of code from before the patch
   * (docs/durability.md, "Changing a tool's code"). An act. */
  async patched(id: string): Promise<boolean> {
    const ok = await this._request({ type: "patched", id });
    return ok?.patched === true;
  }

  /** Sets the task's status message (`null` clears it); with `progress` it
   * reads `message (progress/total)`. */
  async status(message: string | null, options: { progress?: number; total?: number } = {}): Promise<void> {
    await this._request({ type: "status", message, ...options });
  }
}
