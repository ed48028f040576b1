// Interop: @modelcontextprotocol/sdk 1.32.2 against `subtask serve`, on the
// 2025-11-25 wire (legacy `initialize`, tasks utility of 2025-11-25), over the
// transport SUBTASK_TRANSPORT names (lib.mjs): Streamable HTTP, or stdio with
// the SDK's StdioClientTransport spawning `subtask serve --stdio --memory` the
// way a desktop host does. The checks are the same on both.
//
// Public API used:
//   new Client(info, {capabilities}), client.setRequestHandler(ElicitRequestSchema, h),
//   client.connect(new StreamableHTTPClientTransport(url, {fetch})) or
//   client.connect(new StdioClientTransport({command, args, stderr})) (its
//   send/onmessage observed through the Transport interface, lib.mjs observeTransport),
//   client.getServerCapabilities(), client.listTools(), client.callTool(),
//   client.experimental.tasks.callToolStream(params, CallToolResultSchema, {task: {ttl}}),
//   client.experimental.tasks.getTask(), .getTaskResult(), .listTasks(), .cancelTask(),
//   client.request({method: "tasks/get"}, GetTaskResultSchema.extend(SEP-2268 links)),
//   client.close(); McpError.
//
// SEP-2268 fields: the SDK decodes tasks/get with GetTaskResultSchema =
// ResultSchema.merge(TaskSchema) (dist/esm/types.js:678; TaskSchema is a plain
// z.object at types.js:627), which strips keys it does not know, so
// `experimental.tasks.getTask()` never shows `parentTaskId`/`childTaskIds`.
// A client that supports subtasks declares them: `subtasks-visible` sends
// tasks/get through the SDK's public `client.request(request, resultSchema)`
// with the SDK's own GetTaskResultSchema extended by exactly SEP-2268's two
// typed fields (not a lenient decoder: everything else is the SDK's schema,
// and wrongly typed links fail the parse). `subtasks-visible` also checks
// that getTask() drops them, so this note is re-examined when the SDK changes.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema, ElicitRequestSchema, GetTaskResultSchema, McpError } from "@modelcontextprotocol/sdk/types.js";
import * as z from "zod/v4";
import {
  CheckFailure,
  assert,
  check,
  describe,
  errorText,
  failAll,
  finish,
  sdkTransport,
  trace,
  waitFor,
  wireResponses,
} from "./lib.mjs";

const CLIENT_INFO = { name: "subtask-interop-sdk1", version: "1.32.2" };
// What a host that answers form elicitations declares. No client-side `tasks`
// capability: this client is a task requestor only and runs no task store for
// server-to-client task-augmented requests.
const CLIENT_CAPABILITIES = { elicitation: { form: {} } };
const RELATED_TASK = "io.modelcontextprotocol/related-task";
const TERMINAL = new Set(["completed", "failed", "cancelled"]);

const CHECKS = [
  "sync-call",
  "task-stream-completes",
  "subtasks-visible",
  "list",
  "cancel",
  "failed-task",
  "input-round-legacy",
];

const elicitations = [];

function fanoutNodes(result) {
  return result?.structuredContent?.nodes;
}

function wireTask(method, taskId) {
  return wireResponses(method, "sdk1")
    .map((r) => r.result)
    .filter((r) => r?.taskId === taskId)
    .at(-1);
}

function strippedDiagnosis(key, taskId, got) {
  const onWire = wireTask("tasks/get", taskId);
  const wireValue = onWire?.[key];
  return (
    `getTask(${taskId}) returned no ${key} (keys: ${Object.keys(got ?? {}).join(",")}). ` +
    (wireValue !== undefined
      ? `CLIENT LIMITATION: the server's tasks/get response did carry ${key}=${describe(wireValue)}, but SDK 1.32.2 ` +
        `decodes it with GetTaskResultSchema = ResultSchema.merge(TaskSchema) (dist/esm/types.js:678; TaskSchema is a ` +
        `plain z.object at types.js:627) which strips unknown keys`
      : `SERVER: its tasks/get response did not carry ${key} either: ${describe(onWire)}`)
  );
}

/** All tasks of tasks/list, following nextCursor. */
async function listAll(client) {
  const listed = [];
  let cursor;
  for (let page = 0; ; page++) {
    assert(page < 100, "tasks/list did not end within 100 pages");
    const res = await client.experimental.tasks.listTasks(cursor);
    listed.push(...res.tasks);
    cursor = res.nextCursor;
    if (!cursor) return listed;
  }
}

/** Runs callToolStream to its end; returns the messages. `onMessage` may act (e.g. cancel). */
async function stream(client, args, onMessage) {
  const messages = [];
  const it = client.experimental.tasks.callToolStream({ name: "fanout", arguments: args }, CallToolResultSchema, {
    task: { ttl: 60000 },
    timeout: 60000,
  });
  for await (const m of it) {
    messages.push(m);
    trace(`stream message ${m.type} ${describe(m.type === "error" ? errorText(m.error) : (m.task ?? m.result))}`);
    if (onMessage) await onMessage(m);
  }
  return messages;
}

function taskIdOf(messages) {
  return messages.find((m) => m.type === "taskCreated")?.task?.taskId;
}

function summary(messages) {
  return messages
    .map((m) => (m.type === "error" ? `error(${errorText(m.error)})` : m.type === "taskStatus" ? `taskStatus(${m.task.status})` : m.type))
    .join(", ");
}

async function main() {
  let client;
  try {
    client = new Client(CLIENT_INFO, { capabilities: CLIENT_CAPABILITIES });
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      elicitations.push(request);
      trace(`elicitation/create handler got ${describe(request)}`);
      return { action: "accept", content: { confirm: true } };
    });
    await client.connect(sdkTransport({ StdioClientTransport, StreamableHTTPClientTransport }, "sdk1"));
    trace(`server capabilities ${describe(client.getServerCapabilities())}`);
    // A real app lists tools first (the SDK caches taskSupport and output schemas from it).
    const tools = await client.listTools();
    trace(`fanout execution ${describe(tools.tools.find((t) => t.name === "fanout")?.execution)}`);
  } catch (e) {
    failAll(CHECKS, `setup (initialize, tools/list) failed: ${errorText(e)}`);
    return;
  }
  const serverTasks = () => `server capabilities.tasks = ${describe(client.getServerCapabilities()?.tasks)}`;

  // ---------------------------------------------------------------- sync-call
  await check("sync-call", async () => {
    const result = await client.callTool({ name: "fanout", arguments: { width: 0, depth: 0, steps: 1, stepMs: 1 } });
    assert(!result.isError, `tool result isError: ${describe(result)}`);
    assert(fanoutNodes(result) === 1, `structuredContent.nodes = ${fanoutNodes(result)}, expected 1: ${describe(result)}`);
  });

  // The tasks listed before the task-augmented call below, so `list` can tell which
  // tasks that call created (the server may also keep tasks for plain calls).
  let listedBefore;
  let listedBeforeError;
  try {
    listedBefore = await listAll(client);
  } catch (e) {
    listedBeforeError = e;
  }

  // ---------------------------------------------------------------- task-stream-completes
  let rootId;
  await check("task-stream-completes", async () => {
    const messages = await stream(client, { width: 2, depth: 1, steps: 2, stepMs: 20 });
    rootId = taskIdOf(messages);
    assert(messages[0]?.type === "taskCreated", `first message ${summary(messages.slice(0, 1))}, expected taskCreated (${serverTasks()})`);
    assert(messages.some((m) => m.type === "taskStatus"), `no taskStatus message: ${summary(messages)}`);
    const last = messages.at(-1);
    assert(last?.type === "result", `stream ended with ${summary(messages.slice(-1))}, expected result (all: ${summary(messages)})`);
    assert(fanoutNodes(last.result) === 3, `structuredContent.nodes = ${fanoutNodes(last.result)}, expected 3: ${describe(last.result)}`);
    assert(!last.result.isError, `result isError: ${describe(last.result)}`);
  });

  // ---------------------------------------------------------------- subtasks-visible
  let childIds;
  await check("subtasks-visible", async () => {
    assert(rootId, "no root task (task-stream-completes failed)");
    // The SDK's own schema plus SEP-2268's links, through its public request API.
    const SubtaskGetTaskResultSchema = GetTaskResultSchema.extend({
      parentTaskId: z.string().optional(),
      childTaskIds: z.array(z.string()).optional(),
    });
    const getTask = (taskId) => client.request({ method: "tasks/get", params: { taskId } }, SubtaskGetTaskResultSchema);
    const root = await getTask(rootId);
    if (!Array.isArray(root.childTaskIds)) throw new CheckFailure(strippedDiagnosis("childTaskIds", rootId, root));
    assert(root.childTaskIds.length === 2, `root childTaskIds ${describe(root.childTaskIds)}, expected 2 ids`);
    assert(root.parentTaskId === undefined, `the root has a parentTaskId ${describe(root.parentTaskId)}`);
    childIds = root.childTaskIds;
    for (const id of childIds) {
      const child = await getTask(id);
      assert(child.taskId === id, `tasks/get(${id}) answered task ${child.taskId}`);
      if (child.parentTaskId === undefined) throw new CheckFailure(strippedDiagnosis("parentTaskId", id, child));
      assert(child.parentTaskId === rootId, `child ${id} parentTaskId ${describe(child.parentTaskId)}, expected ${rootId}`);
      assert(child.status === "completed", `child ${id} status ${child.status}, expected completed`);
    }
    // The SDK's own getTask() strips the links (the reason for the schema above).
    const plain = await client.experimental.tasks.getTask(rootId);
    assert(
      plain.childTaskIds === undefined,
      "experimental.tasks.getTask() now keeps childTaskIds: drop the extended schema and use getTask() here",
    );
  });

  // ---------------------------------------------------------------- list
  await check("list", async () => {
    assert(rootId, "no root task (task-stream-completes failed)");
    if (listedBeforeError) throw new CheckFailure(`tasks/list before the task call failed: ${errorText(listedBeforeError)}`);
    const listed = await listAll(client);
    const ids = listed.map((t) => t.taskId);
    assert(new Set(ids).size === ids.length, `tasks/list repeated ids: ${describe(ids)}`);
    assert(ids.includes(rootId), `root ${rootId} not listed: ${describe(ids)}`);
    const before = new Set(listedBefore.map((t) => t.taskId));
    const created = ids.filter((id) => !before.has(id));
    // Only the task-augmented fanout (width 2, depth 1) ran since the first listing:
    // what it created is its root and the root's 2 subtasks, and nothing else.
    if (childIds) {
      for (const id of childIds) assert(created.includes(id), `child ${id} not listed as new: ${describe(created)}`);
    }
    assert(
      created.length === 3,
      `tasks/list shows ${created.length} new tasks ${describe(created)} since the root was created, expected the root and its 2 subtasks`,
    );
  });

  // ---------------------------------------------------------------- cancel
  await check("cancel", async () => {
    let cancelled;
    const messages = await stream(client, { width: 0, depth: 0, steps: 200, stepMs: 50 }, async (m) => {
      if (m.type === "taskCreated") cancelled = await client.experimental.tasks.cancelTask(m.task.taskId);
    });
    const taskId = taskIdOf(messages);
    assert(taskId, `no taskCreated: ${summary(messages)} (${serverTasks()})`);
    trace(`tasks/cancel answered ${describe(cancelled)}`);
    assert(messages.at(-1)?.type === "error", `stream ended with ${summary(messages.slice(-1))}, expected an error for the cancelled task`);
    const task = await waitFor(
      `task ${taskId} terminal after tasks/cancel`,
      async () => {
        const t = await client.experimental.tasks.getTask(taskId);
        return TERMINAL.has(t.status) ? t : undefined;
      },
      { timeoutMs: 15000, intervalMs: 100 },
    );
    assert(task.status === "cancelled", `getTask after cancel: status ${task.status}, expected cancelled`);
  });

  // ---------------------------------------------------------------- failed-task
  await check("failed-task", async () => {
    const messages = await stream(client, { width: 0, depth: 0, steps: 1, stepMs: 10, failAt: "0" });
    const taskId = taskIdOf(messages);
    assert(taskId, `no taskCreated: ${summary(messages)} (${serverTasks()})`);
    assert(messages.at(-1)?.type === "error", `stream ended with ${summary(messages.slice(-1))}, expected an error`);
    const task = await client.experimental.tasks.getTask(taskId);
    assert(task.status === "failed", `getTask: status ${task.status}, expected failed`);
    // tasks/result of a failed task returns what tools/call would have: the JSON-RPC error.
    let result;
    let thrown;
    try {
      result = await client.experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
    } catch (e) {
      thrown = e;
    }
    assert(thrown, `tasks/result of the failed task returned a result ${describe(result)}, expected JSON-RPC error -32603`);
    assert(thrown instanceof McpError && thrown.code === -32603, `tasks/result of the failed task: ${errorText(thrown)}, expected McpError -32603`);
  });

  // ---------------------------------------------------------------- input-round-legacy
  // 2025-11-25: the task goes input_required; the requestor calls tasks/result and the
  // server sends elicitation/create (with related-task _meta) on that request's SSE stream.
  await check(
    "input-round-legacy",
    async () => {
      elicitations.length = 0;
      const messages = await stream(client, { width: 0, depth: 0, steps: 2, stepMs: 20, inputAt: "0" });
      const taskId = taskIdOf(messages);
      assert(taskId, `no taskCreated: ${summary(messages)} (${serverTasks()})`);
      assert(
        messages.some((m) => m.type === "taskStatus" && m.task.status === "input_required"),
        `no taskStatus input_required: ${summary(messages)}`,
      );
      assert(elicitations.length === 1, `elicitation/create handler called ${elicitations.length} times, expected 1 (stream: ${summary(messages)})`);
      const params = elicitations[0].params;
      assert(
        params?._meta?.[RELATED_TASK]?.taskId === taskId,
        `elicitation/create _meta ${describe(params?._meta)}, expected ${RELATED_TASK}.taskId = ${taskId}`,
      );
      assert(params?.requestedSchema?.properties?.confirm?.type === "boolean", `requestedSchema ${describe(params?.requestedSchema)}`);
      const last = messages.at(-1);
      assert(last?.type === "result", `stream ended with ${summary(messages.slice(-1))}, expected result`);
      assert(fanoutNodes(last.result) === 1, `structuredContent.nodes = ${fanoutNodes(last.result)}: ${describe(last.result)}`);
      const task = await client.experimental.tasks.getTask(taskId);
      assert(task.status === "completed", `getTask: status ${task.status}, expected completed`);
    },
    { timeoutMs: 45000 },
  );

  await client.close().catch(() => {});
}

main()
  .catch((e) => failAll(["client-crashed"], errorText(e)))
  .finally(finish);
