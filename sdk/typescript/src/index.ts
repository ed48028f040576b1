// @subtask/worker: serve MCP tools from a Node process to `subtask serve`
// over the worker protocol (docs/workers.md).

export { Worker, PROTOCOL } from "./worker.js";
export type { Handler, LogLevel, ToolSpec, WorkerOptions } from "./worker.js";
export {
  Context,
  ReplyError,
  Subtask,
  TaskFailed,
  ToolError,
  WorkerRefused,
  textOf,
  toCallToolResult,
  toolResult,
} from "./context.js";
export type { CallToolResult, ErrorObject, Json, JsonObject, Outcome, SpawnOptions } from "./context.js";
